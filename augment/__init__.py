"""Augmentation ops: parameters drawn per sample from a keyed RNG, applied by batched kernels."""

from mediapipe.augment.base import Op, Stage, op_from_config, registered_ops
from mediapipe.augment.color import IMAGENET_MEAN, IMAGENET_STD, Normalize, ToDtype
from mediapipe.augment.geometry import CenterCrop, HorizontalFlip, RandomResizedCrop, Resize, VerticalFlip
from mediapipe.augment.video import *  # noqa: F403  (video ops: YUVToRGB, ClipLayout, temporal ops)

__all__ = [
    "IMAGENET_MEAN", "IMAGENET_STD", "CenterCrop", "HorizontalFlip", "Normalize", "Op", "RandomResizedCrop",
    "Resize", "Stage", "ToDtype", "VerticalFlip", "op_from_config", "registered_ops",
]
