"""Augmentation ops: parameters drawn per sample from a keyed RNG, applied by batched kernels."""

from mediapipe.augment import audio as _audio
from mediapipe.augment import features as _features
from mediapipe.augment import video as _video
from mediapipe.augment.audio import *  # noqa: F403  (waveform ops: Gain, AddNoise, RandomTimeCrop...)
from mediapipe.augment.auto_augment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from mediapipe.augment.auto_color import (
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomEqualize,
    RandomInvert,
    RandomPosterize,
    RandomSolarize,
)
from mediapipe.augment.base import Op, Stage, op_from_config, registered_ops
from mediapipe.augment.boxes import ClampBoundingBoxes, SanitizeBoundingBoxes
from mediapipe.augment.color import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    GaussianBlur,
    Normalize,
    RandomGrayscale,
    ToDtype,
)
from mediapipe.augment.compose import RandomApply, RandomChoice, RandomOrder
from mediapipe.augment.detection import (
    Letterbox,
    RandomIoUCrop,
    RandomShortestSize,
    RandomZoomOut,
    ScaleJitter,
)
from mediapipe.augment.effects import (
    ColorTemperature,
    FishEye,
    Fog,
    Gamma,
    GridMask,
    LensCorrection,
    Pixelate,
    Rain,
    SaltAndPepperNoise,
    ShotNoise,
    Snow,
    Vignette,
)
from mediapipe.augment.erase import RandomErasing
from mediapipe.augment.features import *  # noqa: F403  (features ops: MelSpectrogram, MFCC, SpecAugment...)
from mediapipe.augment.geometry import (
    CenterCrop,
    HorizontalFlip,
    Pad,
    RandomCrop,
    RandomResizedCrop,
    Resize,
    VerticalFlip,
)
from mediapipe.augment.mix import CutMix, MixUp
from mediapipe.augment.recipe_color import (
    JPEG,
    GaussianNoise,
    RandomChannelPermutation,
    RandomPhotometricDistort,
)
from mediapipe.augment.recipe_geometry import ElasticTransform, RandomPerspective
from mediapipe.augment.schedule import Schedule
from mediapipe.augment.video import *  # noqa: F403  (video ops: YUVToRGB, ClipLayout, temporal ops)
from mediapipe.augment.warp import RandomAffine, RandomRotation

__all__ = [
    "IMAGENET_MEAN", "IMAGENET_STD", "CenterCrop", "ClampBoundingBoxes", "ColorJitter", "CutMix", "GaussianBlur",
    "HorizontalFlip", "Letterbox", "MixUp", "Normalize", "Op", "Pad", "RandomAffine", "RandomCrop", "RandomErasing",
    "RandomGrayscale", "RandomIoUCrop", "RandomResizedCrop", "RandomRotation", "RandomShortestSize", "RandomZoomOut",
    "Resize", "SanitizeBoundingBoxes", "ScaleJitter", "Schedule", "Stage", "ToDtype", "VerticalFlip", "op_from_config",
    "registered_ops",
    "AugMix", "AutoAugment", "RandAugment", "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
    "RandomInvert", "RandomPosterize", "RandomSolarize", "TrivialAugmentWide",
    "RandomApply", "RandomChoice", "RandomOrder",
    "ColorTemperature", "FishEye", "Fog", "Gamma", "GridMask", "LensCorrection", "Pixelate", "Rain",
    "SaltAndPepperNoise", "ShotNoise", "Snow", "Vignette",
    "ElasticTransform", "GaussianNoise", "JPEG", "RandomChannelPermutation", "RandomPerspective",
    "RandomPhotometricDistort",
    *_audio.__all__, *_features.__all__, *_video.__all__,
]
