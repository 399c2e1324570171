"""Decoders: bytes to tensors, one interface, many backends, chosen per device.

``mp.decoders.image()``, ``mp.decoders.video()``, ``mp.decoders.audio()`` return
specs; the registry turns a spec into a live backend in each worker.
"""

from mediapipe.decoders import image_pillow, image_turbo  # noqa: F401  (register the backends)
from mediapipe.decoders.audio_pyav import AudioDecoder, PyAVAudioDecoder, audio  # noqa: F401  (registers pyav)
from mediapipe.decoders.base import Decoder, DecodeHint, DecoderSpec, Limits
from mediapipe.decoders.image import ImageDecoder, image
from mediapipe.decoders.registry import backends, create, register
from mediapipe.decoders.video import VideoDecoder, video  # noqa: F401  (registers pyav, nvdec)

__all__ = [
    "Decoder", "DecodeHint", "DecoderSpec", "ImageDecoder", "Limits",
    "backends", "create", "image", "register",
]
