"""Op lowering for the DALI backend: each op of a pipeline spec to the DALI operators that
mean the same, found through a table (`LOWERINGS`) keyed by op class name. The lowerings live in
`geometry`, `colour` and `audio`; the fields and context they work on in `context`.

A lowering ``lower(op, ctx)`` reads the op's dataclass fields (the arguments its table
entry declares it consumes: any other argument set away from its default is refused, see
`unsupported`) and rewrites ``ctx.fields`` with DALI data nodes (images stay HWC uint8 in
DALI until ``crop_mirror_normalize`` or the final transpose to this library's (C, H, W)). Parameters that depend on a sample's
size are computed on the host by the op's own code from the JPEG header and fed as
per-sample argument inputs: Resize's output size (torchvision's rounding), CenterCrop's
offset, and the keyed draws of random ops (`LoweringContext.drawn`), so the geometry and
the draws are exactly this library's.

Resampling: DALI's nearest samples pixel centres, which is torch's "nearest-exact";
torch's "nearest" (source pixel floor(dst * in / out)) is DALI's nearest over a region
shifted by half an output pixel (`nearest_roi`). A field resampled with either nearest (a
mask always is) takes the keyed crop window, whatever ``rng`` says.

Approximations, stated where they apply: ColorJitter follows each sample's drawn order of
brightness, contrast and saturation (``hue`` is refused: DALI turns hue in YIQ, not HSV);
RandomRotation and RandomAffine take the keyed inverse matrices (nearest differs at rounding
ties; bilinear also at the borders, where torchvision blends the fill by the interpolated
mask); nearest resizes differ where torch's float32 index rounds down at an exact pixel
edge; Resample uses DALI's windowed sinc, not torchaudio's; decoding is DALI's libjpeg-turbo /
nvJPEG (our decoder's reduced-size DCT decode is not used, so resized pixels differ by rounding).

The ops come bound to their fields (`Op.bind`), with each field's kind: the lowering applies
what the op does to each kind as the torch kernels do, asking the same place
(`mediapipe.augment.functional.spatial.sampling`: a mask is resampled with nearest, never
antialiased, and filled with 0). The lowerings handle images, masks, audio and features
(`LOWERED_KINDS`); an op given a field of another kind (boxes, keypoints, video) is refused
at build time, naming the op, the field and its kind.

An op whose class is not in the table, whose fields no longer match what its lowering
consumes, with an argument changed from its default that the lowering does not consume, or
whose settings have no counterpart (``Lowering.check``) is reported by `unsupported` before
anything is built. Nothing here imports DALI at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any

from mediapipe.augment.base import Op
from mediapipe.augment.schedule import Schedule
from mediapipe.fields import AUDIO, FEATURES, IMAGE, MASK
from mediapipe.loaders.dali.audio import (
    _mel_check,
    _no_top_db,
    _stft_check,
    lower_amplitude_to_db,
    lower_audio_normalize,
    lower_gain,
    lower_log_mel_spectrogram,
    lower_mel_spectrogram,
    lower_mfcc,
    lower_nonsilent_region,
    lower_pad_trim,
    lower_preemphasis,
    lower_resample,
    lower_spectrogram,
)
from mediapipe.loaders.dali.colour import (
    lower_color_jitter,
    lower_gaussian_blur,
    lower_normalize,
    lower_random_erasing,
    lower_random_grayscale,
    lower_to_dtype,
)
from mediapipe.loaders.dali.context import LoweringContext
from mediapipe.loaders.dali.geometry import (
    _constant_padding,
    _cubic_check,
    _scalar_fill,
    lower_center_crop,
    lower_horizontal_flip,
    lower_pad,
    lower_random_affine,
    lower_random_crop,
    lower_random_resized_crop,
    lower_random_rotation,
    lower_resize,
    lower_vertical_flip,
)
from mediapipe.loaders.dali.lowering_auto import (
    POLICY_ARGS,
    lower_random_autocontrast,
    lower_random_equalize,
    lower_random_invert,
    lower_random_posterize,
    lower_random_solarize,
    policy_refusal,
    refuse,
    sharpness_refusal,
)
from mediapipe.loaders.dali.lowering_effects import draws_its_own, lower_grid_mask, refuse_noise
from mediapipe.loaders.dali.lowering_recipe import (
    gaussian_noise_refusal,
    lower_jpeg,
    lower_random_perspective,
    refuse_gaussian_noise,
)


@dataclass(frozen=True)
class Lowering:
    """How one op class lowers: the function, and the op's arguments (dataclass fields) it
    consumes: reads, or honours through the op's own draws. Each must exist on the op (a
    changed op is reported as unsupported instead of misread), and an argument set away from
    its default that is not consumed is refused (`unconsumed`)."""

    lower: Callable[[Any, LoweringContext], None]
    consumes: frozenset[str]
    dali_ops: str  # for the docs and the error message
    check: Callable[[Any], str | None] = lambda op: None  # why this op's settings cannot lower, or None


FIELD_ARGS = "key keys out"  # every lowering reads ``op.inputs`` and writes ``op.outputs``


def _entry(lower: Callable, consumes: str, dali_ops: str, check: Callable[[Any], str | None] | None = None
           ) -> Lowering:
    return Lowering(lower, frozenset(f"{FIELD_ARGS} {consumes}".split()), dali_ops, check or (lambda op: None))


# The field kinds the lowerings handle: an op on boxes, keypoints or a video is refused.
LOWERED_KINDS = frozenset({IMAGE, MASK, AUDIO, FEATURES})


def _float_dtype(op: Any) -> str | None:
    return None if op.dtype in ("float32", "float16") else f"dtype={op.dtype!r} (DALI writes float32 or float16)"


STFT_ARGS = "n_fft hop_length win_length window power center"
MEL_ARGS = f"{STFT_ARGS} sample_rate n_mels f_min f_max norm mel_scale"

# op class name -> lowering. Ops added to the library later get an entry here once their
# DALI counterpart is written; until then they are reported by `unsupported`.
LOWERINGS: dict[str, Lowering] = {
    "RandomResizedCrop": _entry(lower_random_resized_crop, "size scale ratio interpolation antialias",
                                "decoders.image_random_crop + resize (fused), else random_resized_crop",
                                _cubic_check),
    "Resize": _entry(lower_resize, "size max_size interpolation antialias", "resize (per-sample size)",
                     _cubic_check),
    "CenterCrop": _entry(lower_center_crop, "size", "slice (per-sample start, pad out of bounds)"),
    "HorizontalFlip": _entry(lower_horizontal_flip, "p", "random.coin_flip -> crop_mirror_normalize(mirror) or flip"),
    "VerticalFlip": _entry(lower_vertical_flip, "p", "random.coin_flip -> flip(vertical)"),
    "Normalize": _entry(lower_normalize, "mean std dtype", "crop_mirror_normalize (HWC uint8 -> CHW float)",
                        _float_dtype),
    "ToDtype": _entry(lower_to_dtype, "dtype scale", "cast (+ multiply by 1/255)", _float_dtype),
    "RandomCrop": _entry(lower_random_crop, "size padding pad_if_needed fill padding_mode",
                         "slice (keyed start drawn on the host, pad out of bounds)", _constant_padding),
    "Pad": _entry(lower_pad, "padding fill padding_mode", "slice (negative start, pad out of bounds)",
                  _constant_padding),
    "ColorJitter": _entry(lower_color_jitter, "brightness contrast saturation hue",
                          "arithmetic blends, keyed factors and order (brightness, contrast, saturation)",
                          lambda op: "hue (DALI's hsv turns the hue in YIQ, torchvision in HSV: 11 to 139 grey "
                          "levels off, PSNR 17 to 41 dB)" if "hue" in op.ranges() else None),
    "RandomGrayscale": _entry(lower_random_grayscale, "p", "arithmetic blend with the luma"),
    "GaussianBlur": _entry(lower_gaussian_blur, "kernel_size sigma", "gaussian_blur (keyed sigma)"),
    "RandomErasing": _entry(lower_random_erasing, "p scale ratio value", "erase (keyed boxes)"),
    "RandomAffine": _entry(lower_random_affine, "degrees translate scale shear interpolation fill center",
                           "warp_affine (keyed matrices)",
                           lambda op: (f"center={op.center}" if op.center is not None else None) or _scalar_fill(op)),
    "RandomRotation": _entry(lower_random_rotation, "degrees interpolation expand center fill",
                             "warp_affine (keyed matrices)",
                             lambda op: ("expand=True" if op.expand else None) or
                             (f"center={op.center}" if op.center is not None else None) or _scalar_fill(op)),
    "PreEmphasis": _entry(lower_preemphasis, "coef", "preemphasis_filter(border='zero')"),
    "Resample": _entry(lower_resample, "orig_freq new_freq", "audio_resample"),
    "NonSilentRegion": _entry(lower_nonsilent_region, "cutoff_db window", "nonsilent_region + slice"),
    "PadTrim": _entry(lower_pad_trim, "length", "slice(trim_to_shape) + host padding to length"),
    "Spectrogram": _entry(lower_spectrogram, STFT_ARGS,
                          "spectrogram(layout='ft')", _stft_check),
    "MelSpectrogram": _entry(lower_mel_spectrogram, MEL_ARGS, "spectrogram + mel_filter_bank", _mel_check),
    "LogMelSpectrogram": _entry(lower_log_mel_spectrogram, f"{MEL_ARGS} amin top_db pad_value",
                                "spectrogram + mel_filter_bank + to_decibels(reference=1)",
                                lambda op: _no_top_db(op) or _mel_check(op)),
    "Gain": _entry(lower_gain, "db", "multiply (keyed gain)"),
    "AudioNormalize": _entry(lower_audio_normalize, "eps", "normalize(axes=[0], epsilon)"),
    "MFCC": _entry(lower_mfcc, f"{MEL_ARGS} n_mfcc top_db dct_norm amin",
                   "spectrogram + mel_filter_bank + to_decibels(reference=1) + mfcc",
                   lambda op: _no_top_db(op) or _mel_check(op) or
                   (f"dct_norm={op.dct_norm!r}" if op.dct_norm not in (None, "ortho") else None)),
    "AmplitudeToDB": _entry(lower_amplitude_to_db, "stype amin top_db pad_value", "to_decibels(reference=1)",
                            _no_top_db),
    "RandomPerspective": _entry(lower_random_perspective, "distortion_scale p interpolation fill",
                                "experimental.warp_perspective (keyed homographies)", _scalar_fill),
    "JPEG": _entry(lower_jpeg, "quality", "jpeg_compression_distortion (keyed quality)"),
    "GaussianNoise": _entry(refuse_gaussian_noise, "mean sigma clip", "refused: noise.gaussian draws its own noise",
                            gaussian_noise_refusal),
    "GridMask": _entry(lower_grid_mask, "p tile ratio angle shift_x shift_y",
                       "grid_mask (keyed tile, ratio, angle and shifts)"),
    "SaltAndPepperNoise": _entry(refuse_noise, "p prob salt_vs_pepper salt pepper per_channel",
                                 "refused: noise.salt_and_pepper draws its own noise", draws_its_own),
    "ShotNoise": _entry(refuse_noise, "p factor", "refused: noise.shot draws its own noise", draws_its_own),
    "RandomPosterize": _entry(lower_random_posterize, "bits p", "bitwise and (keyed coin)"),
    "RandomSolarize": _entry(lower_random_solarize, "threshold p", "arithmetic compare and invert (keyed coin)"),
    "RandomInvert": _entry(lower_random_invert, "p", "arithmetic invert (keyed coin)"),
    "RandomAutocontrast": _entry(lower_random_autocontrast, "p", "reductions.min/max + arithmetic (keyed coin)"),
    "RandomEqualize": _entry(lower_random_equalize, "p", "equalize (OpenCV's table; keyed coin)"),
    "RandomAdjustSharpness": _entry(refuse, "sharpness_factor p", "refused: no matching filter", sharpness_refusal),
    **{name: _entry(refuse, args, "refused: nvidia.dali.auto_aug draws its own", policy_refusal)
       for name, args in POLICY_ARGS.items()},
}


def changed_args(op: Op) -> list[str]:
    """The op's arguments (dataclass fields) whose value differs from its default: from the
    field's default, and from the op built without arguments where it can be (so a default
    the op normalises, 224 to (224, 224), is no change)."""
    try:
        reference: Op | None = type(op)()
    except Exception:  # an op with a required argument: compare with the declared defaults only
        reference = None
    changed = []
    for f in fields(op):
        value = getattr(op, f.name)
        defaults = [f.default] if f.default is not MISSING else []
        if f.default_factory is not MISSING:
            defaults.append(f.default_factory())
        if reference is not None:
            defaults.append(getattr(reference, f.name))
        if not any(_same(value, d) for d in defaults):
            changed.append(f.name)
    return changed


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an array or tensor argument: compared element-wise, not as one truth
        return a is b


def unconsumed(op: Op) -> list[str]:
    """The op's arguments changed from their defaults that its lowering does not consume
    (every changed argument when the op has no lowering)."""
    entry = LOWERINGS.get(type(op).__name__)
    consumes = entry.consumes if entry is not None else frozenset()
    return [name for name in changed_args(op) if name not in consumes]


def unsupported(ops: list[Op]) -> list[str]:
    """``"augment[i] Name(why)"`` for each op that has no DALI lowering (or one that no longer
    fits), has arguments the lowering does not consume, or has settings without a counterpart;
    and ``"augment[i] Name(field 'boxes' of kind boxes ...)"`` for each field of a kind no
    lowering handles (the ops come bound to their fields, as the pipeline's plan holds them)."""
    out = []
    for i, op in enumerate(ops):
        name = type(op).__name__
        entry = LOWERINGS.get(name)
        if op.scheduled:  # DALI's graph is built once, for every epoch
            args = ", ".join(f"{f.name}={getattr(op, f.name)!r}" for f in fields(op) if _follows_epoch(getattr(op, f.name)))
            out.append(f"augment[{i}] {name}({args}: an argument that follows the epoch, which a DALI graph, "
                       "built once, cannot change)")
            continue
        if entry is None or not entry.consumes <= {f.name for f in fields(op)}:
            out.append(f"augment[{i}] {name}")
        elif left := unconsumed(op):
            args = ", ".join(f"{a}={getattr(op, a)!r}" for a in left)
            out.append(f"augment[{i}] {name}({args}: arguments the DALI lowering does not read)")
        elif (why := entry.check(op)) is not None:
            out.append(f"augment[{i}] {name}({why})")
        b = op.binding
        for field_name, t in zip(b.inputs, b.types):
            if t.kind not in LOWERED_KINDS:
                out.append(f"augment[{i}] {name}(field {field_name!r} of kind {t}: DALI lowers "
                           f"{sorted(LOWERED_KINDS)} fields)")
    return out


def _follows_epoch(value: Any) -> bool:
    """A `Schedule`, or an op (a composite's) holding one."""
    return isinstance(value, Schedule) or (isinstance(value, Op) and value.scheduled) or (
        isinstance(value, (tuple, list)) and any(_follows_epoch(v) for v in value))


def lowering_table() -> dict[str, str]:
    """Op class name -> the DALI operators it lowers to (what ``mediapipe bench`` and docs print)."""
    return {name: entry.dali_ops for name, entry in LOWERINGS.items()}
