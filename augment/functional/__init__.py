"""Pure kernels: tensors and parameters in, tensors out; no randomness, no config.

Image kernels take ``[..., C, H, W]`` (an image, a batch, a clip or a batch of
clips). Batch kernels take per-sample parameters as tensors of shape (B,).
"""
