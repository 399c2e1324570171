"""Detection ops: the crops, zoom-outs and resizes detectors train with; the ops that keep their
boxes usable (clamped to the image; degenerate ones dropped with their objects' rows) are in
`mediapipe.augment.boxes`.

Each geometric op here moves every spatial field of the sample with one draw, as the ops of
`mediapipe.augment.geometry` do: images and videos (a clip as a whole), masks (nearest, new
pixels 0; one mask per object too), boxes and keypoints. torchvision v2's ``RandomIoUCrop``,
``RandomZoomOut``, ``ScaleJitter`` and ``RandomShortestSize`` are the references, and YOLO's
letterbox for `Letterbox`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from mediapipe.augment.base import Canvas, Op, Params, check_positive, check_probability, check_range
from mediapipe.augment.functional import objects as O
from mediapipe.augment.functional import spatial as S
from mediapipe.augment.geometry import Fill, Size, _check_fill, _check_interpolation, _meta, _pair, _Resizing
from mediapipe.decoders.base import DecodeHint
from mediapipe.errors import PipelineError
from mediapipe.fields import BOXES, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

MAX_OPTION_DRAWS = 50  # RandomIoUCrop: IoU options drawn before a sample is kept whole
MAX_IOU_PAIRS = 1 << 18  # RandomIoUCrop: (crop, box) pairs tested at once


@dataclass(frozen=True)
class RandomIoUCrop(Op):
    """SSD's random crop (Liu et al. 2016), as torchvision's ``RandomIoUCrop`` and DALI's
    ``random_bbox_crop``: a crop that overlaps at least one object by a drawn minimum IoU.

    Per sample: draw a minimum IoU from ``sampler_options`` (1.0 or more: keep the sample whole);
    then up to ``trials`` crops, each of width and height ``uniform(min_scale, max_scale)`` times
    the image's, its aspect ratio (w / h) within [min_aspect_ratio, max_aspect_ratio], placed
    uniformly; the first crop that holds the centre of at least one box, one of which overlaps
    it by IoU >= the option, is taken. When none is, another option is drawn (torchvision draws
    forever; here at most 50, then the sample is kept whole, as it is without boxes). The crop
    is exact (no resampling): images, clips, masks and keypoints are cut; boxes are moved and
    clamped, and a box whose centre falls outside the crop becomes all zeros, for a later
    `SanitizeBoundingBoxes` to drop with its labels (as torchvision).
    Input: images (C, H, W), clips (T, C, H, W) (one crop for all frames), masks, boxes (needs a
    boxes field: the crop is drawn from them; the first one when there are several) and
    keypoints. Output: (..., C, h, w), same dtype. Stage: sample, fused into the image decoder
    (region-of-interest decoding).
    Args:
        min_scale, max_scale: range of the crop's width and height as fractions of the image's,
            0 < min_scale <= max_scale <= 1.
        min_aspect_ratio, max_aspect_ratio: range of the crop's width / height, > 0.
        sampler_options: minimum IoUs to draw from; a value >= 1 leaves the sample as it is.
        trials: crops tried per drawn option, >= 1.
    """

    min_scale: float = 0.3
    max_scale: float = 1.0
    min_aspect_ratio: float = 0.5
    max_aspect_ratio: float = 2.0
    sampler_options: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    trials: int = 40
    functional = S.iou_crop
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.min_scale <= self.max_scale <= 1:
            raise ValueError(f"RandomIoUCrop(min_scale={self.min_scale}, max_scale={self.max_scale}): expected "
                             "0 < min_scale <= max_scale <= 1 (fractions of the image's sides)")
        if not 0 < self.min_aspect_ratio <= self.max_aspect_ratio:
            raise ValueError(f"RandomIoUCrop(min_aspect_ratio={self.min_aspect_ratio}, max_aspect_ratio="
                             f"{self.max_aspect_ratio}): expected 0 < min_aspect_ratio <= max_aspect_ratio")
        if not self.sampler_options or any(not o >= 0 for o in self.sampler_options):
            raise ValueError(f"RandomIoUCrop(sampler_options={self.sampler_options!r}): expected minimum IoUs >= 0")
        check_positive(self, trials=self.trials)

    def bind(self, types: Mapping[str, FieldType], where: str = "") -> Op:
        bound = super().bind(types, where)
        if not any(t.kind == BOXES for t in bound.binding.types):
            raise PipelineError(f"{where}{type(self).__name__} draws its crop from the boxes, and it moves none: "
                                f"fields it moves {list(bound.inputs)} (boxes come from the source's field_types())")
        return bound

    def draws_on(self) -> tuple[str, ...]:
        b = self.binding
        return next(((f,) for f, t in zip(b.inputs, b.types) if t.kind == BOXES), ())

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        whole = {"crop": False, "top": 0, "left": 0, "height": height, "width": width}
        drawn_on = self.draws_on()
        boxes = meta.get("fields", {}).get(drawn_on[0]) if drawn_on else None
        if boxes is None or boxes.shape[0] == 0:
            return whole  # no crop can hold an object
        xyxy = O.convert_boxes(boxes, self.binding.type_of(drawn_on[0]).format, "xyxy").double().numpy()
        for _ in range(MAX_OPTION_DRAWS):
            min_iou = rng.choice(self.sampler_options)
            if min_iou >= 1.0:
                return whole
            crop = self._first_crop(rng, height, width, xyxy, min_iou)
            if crop is not None:
                return {"crop": True, **crop}
        return whole

    def _first_crop(self, rng: SampleRNG, height: int, width: int, xyxy: np.ndarray,
                    min_iou: float) -> dict[str, int] | None:
        """The first of ``trials`` drawn crops (all drawn at once) that holds a box's centre and
        overlaps such a box by ``min_iou``; None when none does. A box smaller than ``min_iou``
        times every crop can overlap none by that much (IoU <= its area / the crop's), so it is
        left out first, and the test runs on blocks of trials: memory and time stay bounded with
        thousands of objects, and the crop taken is the one testing every trial at once takes."""
        u = rng.numpy().random((self.trials, 4))  # per trial: width, height, left, top fractions
        size = np.floor(np.array([width, height]) * (self.min_scale + (self.max_scale - self.min_scale) * u[:, :2]))
        corner = np.floor((np.array([width, height]) - size) * u[:, 2:])  # (left, top), as torchvision's int()
        crops = np.concatenate((corner, corner + size), axis=1)  # (trials, 4) xyxy
        aspect = size[:, 0] / np.maximum(size[:, 1], 1.0)
        ok = (size.min(axis=1) > 0) & (self.min_aspect_ratio <= aspect) & (aspect <= self.max_aspect_ratio)
        if not ok.any():
            return None
        area = (xyxy[:, 2:] - xyxy[:, :2]).prod(axis=1)
        if min_iou > 0:  # (with a margin for rounding: a box kept needlessly changes nothing)
            xyxy, area = (v[area >= min_iou * size[ok].prod(axis=1).min() * (1 - 1e-9)] for v in (xyxy, area))
        if not len(xyxy):
            return None
        centres = (xyxy[:, :2] + xyxy[:, 2:]) * 0.5  # (boxes, 2)
        block = max(1, MAX_IOU_PAIRS // len(xyxy))
        for first in range(0, self.trials, block):
            c = crops[first : first + block]
            inside = ((c[:, None, :2] < centres) & (centres < c[:, None, 2:])).all(axis=2)  # (trials, boxes)
            inter = (np.minimum(xyxy[None, :, 2:], c[:, None, 2:]) - np.maximum(xyxy[None, :, :2], c[:, None, :2]))
            inter = inter.clip(min=0).prod(axis=2)
            union = area + size[first : first + block].prod(axis=1)[:, None] - inter
            iou = np.where(inside, inter / np.maximum(union, 1e-12), -1.0)
            passed = ok[first : first + block] & (iou.max(axis=1) >= min_iou)  # (an IoU of -1 never passes)
            if passed.any():
                t = first + int(np.argmax(passed))
                return {"top": int(corner[t, 1]), "left": int(corner[t, 0]), "height": int(size[t, 1]),
                        "width": int(size[t, 0])}
        return None

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        if not params["crop"]:
            return x
        return S.iou_crop(x, params["top"], params["left"], params["height"], params["width"],
                          **_meta(field, canvas_size))

    def fusable(self, field_type: FieldType) -> bool:
        return field_type.spec.decoder_fuses

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        if not params["crop"]:
            return None
        return DecodeHint(roi=(params["top"], params["left"], params["height"], params["width"]))

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return x


@dataclass(frozen=True)
class RandomZoomOut(Op):
    """SSD's zoom out (torchvision's ``RandomZoomOut``): with probability ``p``, the image is placed
    at a random position on a canvas ``r`` times its width and height, r ~ uniform(side_range),
    the rest filled with ``fill``; masks get 0 there, boxes and keypoints move with the image.

    Input: images (C, H, W), clips (T, C, H, W) (one canvas for all frames), masks, boxes and
    keypoints; any dtype. Output: (..., C, int(H r), int(W r)). Stage: sample.
    Args:
        fill: the new pixels' value, a number or one per channel, in the image's units (SSD uses
            the dataset mean); masks are filled with 0.
        side_range: (low, high) range of r, 1 <= low <= high.
        p: probability of zooming out a sample; otherwise it is left as it is.
    """

    fill: Fill = 0
    side_range: tuple[float, float] = (1.0, 4.0)
    p: float = 0.5
    functional = S.pad
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_fill(self, self.fill)
        check_range(self, "side_range", self.side_range, 1.0)
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        if not rng.bernoulli(self.p):
            return {"padding": (0, 0, 0, 0)}
        r = rng.uniform(*self.side_range)
        canvas_w, canvas_h = int(width * r), int(height * r)
        left, top = int((canvas_w - width) * rng.random()), int((canvas_h - height) * rng.random())
        return {"padding": (left, top, canvas_w - left - width, canvas_h - top - height)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        padding = tuple(int(v) for v in params["padding"])
        if not any(padding):
            return x
        return S.pad(x, *padding, fill=self.fill, padding_mode="constant", **_meta(field, canvas_size))


def _scaled(height: int, width: int, r: float) -> tuple[int, int]:
    """(int(H r), int(W r)) as torchvision's detection resizes round, at least one pixel."""
    return max(1, int(height * r)), max(1, int(width * r))


@dataclass(frozen=True)
class ScaleJitter(_Resizing):
    """Large-scale jitter (Ghiasi et al. 2021, torchvision's ``ScaleJitter``): resize so the image
    fits ``target_size`` times a random scale, keeping its aspect ratio.

    Per sample: s ~ uniform(scale_range), r = min(target_h / H, target_w / W) * s, output
    (int(H r), int(W r)). Follow it with a crop or `Letterbox` to batch equal sizes.
    Input/Output: images, clips, masks (nearest), boxes and keypoints (scaled). Stage: sample,
    fused into the image decoder (DCT-scaled decoding).
    Args:
        target_size: (height, width) the scale 1 fits the image in, or an int for a square.
        scale_range: (low, high) range of s, 0 < low <= high.
        interpolation: for images, as `Resize`; antialias: when downscaling images.
    """

    target_size: Size = (1024, 1024)
    scale_range: tuple[float, float] = (0.1, 2.0)
    interpolation: str = "bilinear"
    antialias: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "target_size", _pair(self.target_size, "ScaleJitter(target_size)"))
        check_range(self, "scale_range", self.scale_range, 0.0, strict_low=True)
        _check_interpolation(self, self.interpolation)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        scale = rng.uniform(*self.scale_range)
        r = min(self.target_size[1] / width, self.target_size[0] / height) * scale
        return {"size": _scaled(height, width, r)}


@dataclass(frozen=True)
class RandomShortestSize(_Resizing):
    """Resize the shorter side to a size drawn from ``min_size``, the longer side capped at
    ``max_size`` (torchvision's ``RandomShortestSize``, the detection references' multi-scale
    training). Output (int(H r), int(W r)), r = min(s / min(H, W), max_size / max(H, W)).

    Input/Output: images, clips, masks (nearest), boxes and keypoints (scaled). Stage: sample,
    fused into the image decoder (DCT-scaled decoding).
    Args:
        min_size: the shorter side's sizes to draw from (uniformly), an int or a tuple of them.
        max_size: cap on the longer side, in pixels; None for none.
        interpolation: for images, as `Resize`; antialias: when downscaling images.
    """

    min_size: int | tuple[int, ...] = 800
    max_size: int | None = None
    interpolation: str = "bilinear"
    antialias: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.min_size, int):
            object.__setattr__(self, "min_size", (self.min_size,))
        if not self.min_size or any(s <= 0 for s in self.min_size):
            raise ValueError(f"RandomShortestSize(min_size={self.min_size!r}): expected sizes > 0")
        check_positive(self, max_size=self.max_size)
        _check_interpolation(self, self.interpolation)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        r = rng.choice(self.min_size) / min(height, width)
        if self.max_size is not None:
            r = min(r, self.max_size / max(height, width))
        return {"size": _scaled(height, width, r)}


@dataclass(frozen=True)
class Letterbox(_Resizing):
    """YOLO's letterbox: resize keeping the aspect ratio so the image fits ``size``, then pad to
    exactly ``size`` with ``fill``.

    The resized image is (round(H r), round(W r)), r = min(size_h / H, size_w / W) (upscaling
    too). With ``center`` (the default) it sits in the middle, the odd pixel of padding on the
    right and bottom: left = (size_w - w) // 2, top = (size_h - h) // 2; otherwise at the
    top-left corner, all padding right and bottom (as DETR-style batching pads). Masks are
    resized with nearest and padded with 0; boxes and keypoints are scaled, then shifted by
    (left, top). Input: images, clips, masks, boxes, keypoints. Output: (..., C, *size), so
    images of every size batch. Stage: sample, the resize fused into the image decoder.
    Args:
        size: (height, width) of the output, or an int for a square.
        fill: the padding's value, a number or one per channel, in the image's units (114:
            YOLO's grey for uint8 images).
        center: centre the image (True) or put it at the top-left corner (False).
        interpolation: for images, as `Resize`; antialias: when downscaling images.
    """

    size: Size = 640
    fill: Fill = 114
    center: bool = True
    interpolation: str = "bilinear"
    antialias: bool = True  # (resized as the other resizes, fused into the decoder; S.pad moves the same kinds)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "Letterbox(size)"))
        _check_fill(self, self.fill)
        _check_interpolation(self, self.interpolation)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        out_h, out_w = self.size
        r = min(out_h / height, out_w / width)
        h, w = min(out_h, max(1, round(height * r))), min(out_w, max(1, round(width * r)))
        left, top = ((out_w - w) // 2, (out_h - h) // 2) if self.center else (0, 0)
        return {"size": (h, w), "padding": (left, top, out_w - w - left, out_h - h - top)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        x = super().transform(x, params, field, canvas_size)  # the resize; then the pad around it
        return S.pad(x, *(int(v) for v in params["padding"]), fill=self.fill, padding_mode="constant",
                     **_meta(field, tuple(int(v) for v in params["size"])))
