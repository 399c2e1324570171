"""Boxes and keypoints kernels: the geometry of the pixels, applied to coordinates.

Boxes are (M, 4) float rows in ``format`` ("xyxy", "xywh", "cxcywh"), keypoints (M, ..., 2) as
(x, y), both in pixels of a canvas of ``canvas_size`` = (height, width). Parameters are plain
numbers, or one value per row (a tensor of M) when the rows belong to several samples of a
batch. Each kernel follows torchvision v2's for the same parameters: boxes are clamped to the
new canvas after a crop, a pad or a warp; keypoints are never clamped, and a keypoint flips
about the last pixel (x -> W - 1 - x) where a box edge flips about the canvas (x -> W - x), as
torchvision does. A resize scales by a rounded ratio, so a coordinate on the far edge can land a
float step past the new one (x2 = 224.00002 on a 224 px image): what lay inside the canvas is
clamped to the new one (what lay outside stays, as torchvision leaves it), so no coordinate
crosses an edge by float drift. `orient_boxes` and `orient_keypoints` turn them as an EXIF
orientation turns the image.
"""

from __future__ import annotations

import torch

Number = float | int | torch.Tensor


def convert_boxes(boxes: torch.Tensor, old: str, new: str) -> torch.Tensor:
    """Boxes from format ``old`` to ``new`` (a new tensor; float arithmetic)."""
    if old == new:
        return boxes.clone()
    out = boxes.clone() if boxes.is_floating_point() else boxes.float()
    if old == "xywh":
        out[..., 2:] += out[..., :2]
    elif old == "cxcywh":
        half = out[..., 2:] / 2
        out[..., :2] -= half
        out[..., 2:] += out[..., :2]
    if new == "xywh":
        out[..., 2:] -= out[..., :2]
    elif new == "cxcywh":
        out[..., 2:] -= out[..., :2]
        out[..., :2] += out[..., 2:] / 2
    return out


def clamp_boxes(boxes: torch.Tensor, canvas_size: tuple[int, int], format: str = "xyxy") -> torch.Tensor:
    """Boxes clipped to the canvas [0, W] x [0, H] (torchvision's ``clamp_bounding_boxes``)."""
    xyxy = convert_boxes(boxes, format, "xyxy")
    xyxy[..., 0::2].clamp_(min=0, max=canvas_size[1])
    xyxy[..., 1::2].clamp_(min=0, max=canvas_size[0])
    return convert_boxes(xyxy, "xyxy", format).to(boxes.dtype)


def _column(value: Number, like: torch.Tensor) -> torch.Tensor | float:
    """A per-row parameter as a column broadcastable over a row's coordinates."""
    if isinstance(value, torch.Tensor):
        return value.to(like.device).reshape(-1, *(1,) * (like.ndim - 1))
    return value


def _in_xyxy(boxes: torch.Tensor, format: str, fn, canvas_size: tuple[int, int] | None = None) -> torch.Tensor:
    """Apply ``fn`` to the boxes as float xyxy, clamp to ``canvas_size`` when given, back to ``format``."""
    out = fn(convert_boxes(boxes, format, "xyxy"))
    if canvas_size is not None:
        out[..., 0::2].clamp_(min=0, max=canvas_size[1])
        out[..., 1::2].clamp_(min=0, max=canvas_size[0])
    return convert_boxes(out, "xyxy", format).to(boxes.dtype)


# -- flips ---------------------------------------------------------------------------------------------
def _flip_boxes(boxes: torch.Tensor, flip: Number | bool, extent: int, low: int, high: int,
                format: str) -> torch.Tensor:
    """Mirror the rows whose ``flip`` is true along one axis of ``extent`` pixels, whose xyxy
    columns are ``low`` and ``high``: low, high -> extent - high, extent - low."""
    def mirror(xyxy: torch.Tensor) -> torch.Tensor:
        flipped = xyxy.clone()
        flipped[..., low], flipped[..., high] = extent - xyxy[..., high], extent - xyxy[..., low]
        return torch.where(_as_mask(flip, xyxy), flipped, xyxy)

    return _in_xyxy(boxes, format, mirror)


def hflip_boxes(boxes: torch.Tensor, flip: Number | bool, *, canvas_size: tuple[int, int], format: str,
                **_: object) -> torch.Tensor:
    """Mirror left-right the rows whose ``flip`` is true: x1, x2 -> W - x2, W - x1."""
    return _flip_boxes(boxes, flip, canvas_size[1], 0, 2, format)


def vflip_boxes(boxes: torch.Tensor, flip: Number | bool, *, canvas_size: tuple[int, int], format: str,
                **_: object) -> torch.Tensor:
    """Mirror top-bottom the rows whose ``flip`` is true: y1, y2 -> H - y2, H - y1."""
    return _flip_boxes(boxes, flip, canvas_size[0], 1, 3, format)


def hflip_keypoints(points: torch.Tensor, flip: Number | bool, *, canvas_size: tuple[int, int],
                    **_: object) -> torch.Tensor:
    """Mirror left-right the rows whose ``flip`` is true: x -> W - 1 - x (torchvision's)."""
    flipped = points.clone()
    flipped[..., 0] = canvas_size[1] - 1 - points[..., 0]
    return torch.where(_as_mask(flip, points), flipped, points)


def vflip_keypoints(points: torch.Tensor, flip: Number | bool, *, canvas_size: tuple[int, int],
                    **_: object) -> torch.Tensor:
    """Mirror top-bottom the rows whose ``flip`` is true: y -> H - 1 - y (torchvision's)."""
    flipped = points.clone()
    flipped[..., 1] = canvas_size[0] - 1 - points[..., 1]
    return torch.where(_as_mask(flip, points), flipped, points)


def _as_mask(flip: Number | bool, like: torch.Tensor) -> torch.Tensor:
    if isinstance(flip, torch.Tensor):
        return flip.to(like.device, torch.bool).reshape(-1, *(1,) * (like.ndim - 1))
    return torch.tensor(bool(flip), device=like.device)


# -- EXIF orientation (one sample): the turn `ImageOps.exif_transpose` gives the pixels ------------------
# where orientation k takes a point (x, y) of a W x H stored frame: for box edges W and H, for
# keypoints (pixel positions, as the flips take them) W - 1 and H - 1
ORIENTED_XY = {
    1: lambda x, y, w, h: (x, y),
    2: lambda x, y, w, h: (w - x, y),  # mirrored left-right
    3: lambda x, y, w, h: (w - x, h - y),  # turned 180 degrees
    4: lambda x, y, w, h: (x, h - y),  # mirrored top-bottom
    5: lambda x, y, w, h: (y, x),  # transposed
    6: lambda x, y, w, h: (h - y, x),  # turned 90 degrees clockwise
    7: lambda x, y, w, h: (h - y, w - x),  # transversed
    8: lambda x, y, w, h: (y, w - x),  # turned 90 degrees counter-clockwise
}


def _oriented(xy: torch.Tensor, orientation: int, width: float, height: float) -> torch.Tensor:
    """(..., 2) points of a ``width`` x ``height`` frame where ``orientation`` takes them."""
    if orientation not in ORIENTED_XY:
        raise ValueError(f"EXIF orientation {orientation!r}: expected 1 to 8")
    x, y = ORIENTED_XY[orientation](xy[..., 0], xy[..., 1], width, height)
    return torch.stack((x, y), dim=-1)


def orient_boxes(boxes: torch.Tensor, orientation: int, *, canvas_size: tuple[int, int], format: str,
                 **_: object) -> torch.Tensor:
    """The boxes of a ``canvas_size`` (H, W) stored frame in the frame ``orientation`` turns it to
    (W x H for 5 to 8): the box holding both turned corners."""
    if orientation == 1 or boxes.numel() == 0:
        return boxes

    def turn(xyxy: torch.Tensor) -> torch.Tensor:
        corners = _oriented(xyxy.reshape(-1, 2, 2), orientation, canvas_size[1], canvas_size[0])
        lo, hi = corners.aminmax(dim=1)
        return torch.cat((lo, hi), dim=1)

    return _in_xyxy(boxes, format, turn)


def orient_keypoints(points: torch.Tensor, orientation: int, *, canvas_size: tuple[int, int],
                     **_: object) -> torch.Tensor:
    """The keypoints of a ``canvas_size`` (H, W) stored frame in the frame ``orientation`` turns it
    to; a point's mirror is taken about the last pixel (x -> W - 1 - x), as `hflip_keypoints`."""
    if orientation == 1 or points.numel() == 0:
        return points
    return _oriented(points, orientation, canvas_size[1] - 1, canvas_size[0] - 1).to(points.dtype)


# -- crops, pads, resizes (one sample: plain numbers) -----------------------------------------------------
def crop_boxes(boxes: torch.Tensor, top: Number, left: Number, height: int, width: int, *, format: str,
               **_: object) -> torch.Tensor:
    """The boxes in the crop's pixels, clamped to it (a negative offset pads)."""
    def shift(xyxy: torch.Tensor) -> torch.Tensor:
        xyxy[..., 0::2] -= _column(left, xyxy)
        xyxy[..., 1::2] -= _column(top, xyxy)
        return xyxy

    return _in_xyxy(boxes, format, shift, (height, width))


def crop_keypoints(points: torch.Tensor, top: Number, left: Number, height: int, width: int,
                   **_: object) -> torch.Tensor:
    out = points.clone()
    out[..., 0] -= _column(left, out[..., 0])
    out[..., 1] -= _column(top, out[..., 1])
    return out


def pad_boxes(boxes: torch.Tensor, left: int, top: int, right: int, bottom: int, *,
              canvas_size: tuple[int, int], format: str, **_: object) -> torch.Tensor:
    """The boxes shifted by the padding, clamped to the padded canvas."""
    return crop_boxes(boxes, -top, -left, canvas_size[0] + top + bottom, canvas_size[1] + left + right,
                      format=format)


def pad_keypoints(points: torch.Tensor, left: int, top: int, right: int, bottom: int, **_: object) -> torch.Tensor:
    return crop_keypoints(points, -top, -left, 0, 0)


def _scaled_within(xy: torch.Tensor, size: tuple[int, int], canvas_size: tuple[int, int]) -> torch.Tensor:
    """(..., 2k) x, y columns scaled from ``canvas_size`` to ``size`` (both (H, W)); a coordinate
    on the old canvas's far edge lands on the new one's, one inside stays inside (the rounded ratio
    may carry it a float step past the edge), one outside is scaled as it is."""
    ratios = torch.tensor([size[1] / canvas_size[1], size[0] / canvas_size[0]], device=xy.device)
    columns = xy.shape[-1]
    out = xy.mul(ratios.repeat(columns // 2))
    old = torch.tensor(canvas_size[::-1], device=xy.device, dtype=xy.dtype).repeat(columns // 2)
    new = torch.tensor(tuple(size)[::-1], device=xy.device, dtype=out.dtype).repeat(columns // 2)
    inside = (xy >= 0) & (xy <= old)
    return torch.where(xy == old, new, torch.where(inside, torch.minimum(out, new), out))


def resize_boxes(boxes: torch.Tensor, size: tuple[int, int], *, canvas_size: tuple[int, int], format: str,
                 **_: object) -> torch.Tensor:
    """The boxes scaled from ``canvas_size`` to ``size`` (both (H, W)); edges inside the old canvas
    stay inside the new one (`_scaled_within`), others are not clamped (torchvision's)."""
    if tuple(size) == tuple(canvas_size):
        return boxes
    return _in_xyxy(boxes, format, lambda xyxy: _scaled_within(xyxy, size, canvas_size))


def resize_keypoints(points: torch.Tensor, size: tuple[int, int], *, canvas_size: tuple[int, int],
                     **_: object) -> torch.Tensor:
    """The keypoints scaled; one inside the old canvas stays inside the new one (`_scaled_within`)."""
    if tuple(size) == tuple(canvas_size):
        return points
    return _scaled_within(points, size, canvas_size).to(points.dtype)


def resized_crop_boxes(boxes: torch.Tensor, top: int, left: int, height: int, width: int, size: tuple[int, int],
                       *, format: str, **_: object) -> torch.Tensor:
    """Crop (clamped), then scale the crop to ``size``: torchvision's ``resized_crop``."""
    cropped = crop_boxes(boxes, top, left, height, width, format=format)
    return resize_boxes(cropped, size, canvas_size=(height, width), format=format)


def resized_crop_keypoints(points: torch.Tensor, top: int, left: int, height: int, width: int,
                           size: tuple[int, int], **_: object) -> torch.Tensor:
    return resize_keypoints(crop_keypoints(points, top, left, height, width), size, canvas_size=(height, width))


# -- affine warps (per-row forward matrices) ----------------------------------------------------------------
def forward_matrices(inverse: torch.Tensor) -> torch.Tensor:
    """(M, 2, 3) forward matrices from the image warp's inverse ones (float64): output point from
    input point, both in pixels from the image centre."""
    inverse = inverse.to(torch.float64).reshape(-1, 2, 3)
    full = torch.cat((inverse, inverse.new_tensor([0.0, 0.0, 1.0]).expand(inverse.shape[0], 1, 3)), dim=1)
    return torch.linalg.inv(full)[:, :2]


def _warp_points(points: torch.Tensor, forward: torch.Tensor, canvas_size: tuple[int, int],
                 output_size: tuple[int, int] | None) -> torch.Tensor:
    """(M, P, 2) points in canvas pixels through per-row ``forward`` (M, 2, 3), into the pixels of
    the output (``output_size`` with ``expand``, else the canvas). The image warp centres the
    turned canvas in the output, so points are taken from the canvas's centre to the output's:
    where the pixels land. (torchvision's boxes and keypoints under ``expand`` shift to the turned
    canvas's corner instead, up to a pixel away from its own image, and may size their canvas
    one pixel off it.)"""
    h, w = canvas_size
    oh, ow = output_size or canvas_size
    rel = points.to(torch.float64) - points.new_tensor([w * 0.5, h * 0.5], dtype=torch.float64)
    out = rel @ forward[:, :, :2].transpose(1, 2) + forward[:, None, :, 2]
    return out + out.new_tensor([ow * 0.5, oh * 0.5])


def affine_boxes(boxes: torch.Tensor, inverse: torch.Tensor, *, canvas_size: tuple[int, int], format: str,
                 output_size: tuple[int, int] | None = None, **_: object) -> torch.Tensor:
    """The boxes holding each warped box's four corners, clamped to the output canvas
    (``output_size``, or the canvas itself). ``inverse``: the image warp's (1 or M, 2, 3)."""
    if boxes.numel() == 0:
        return boxes
    forward = forward_matrices(inverse.to(boxes.device)).expand(boxes.shape[0], 2, 3)

    def warp(xyxy: torch.Tensor) -> torch.Tensor:
        corners = xyxy[:, [[0, 1], [2, 1], [2, 3], [0, 3]]]  # (M, 4, 2)
        lo, hi = _warp_points(corners, forward, canvas_size, output_size).aminmax(dim=1)
        return torch.cat((lo, hi), dim=1)

    return _in_xyxy(boxes, format, warp, output_size or canvas_size)


def affine_keypoints(points: torch.Tensor, inverse: torch.Tensor, *, canvas_size: tuple[int, int],
                     output_size: tuple[int, int] | None = None, **_: object) -> torch.Tensor:
    if points.numel() == 0:
        return points
    forward = forward_matrices(inverse.to(points.device)).expand(points.shape[0], 2, 3)
    flat = points.reshape(points.shape[0], -1, 2)
    return _warp_points(flat, forward, canvas_size, output_size).reshape(points.shape).to(points.dtype)


# -- detection: which boxes are objects, which crops hold them --------------------------------------------
# how far past an edge a coordinate may read, as a fraction of the canvas's side: what float32
# rounding of a box stored as xywh or cxcywh adds when its corners are computed (a few float
# steps of the side), never a real part of a pixel
EDGE_SLACK = 2.0**-20


def valid_boxes(boxes: torch.Tensor, *, canvas_size: tuple[int, int] | torch.Tensor, format: str,
                min_size: float = 1.0, min_area: float = 1.0) -> torch.Tensor:
    """bool (M,): the boxes torchvision's ``sanitize_bounding_boxes`` keeps: width and height at least
    ``min_size``, area at least ``min_area``, no coordinate below 0 and none past the canvas, where
    a box on an edge passes it by no more than `EDGE_SLACK` of the side (its corners computed in
    float64 from the stored format).
    ``canvas_size``: one (H, W), or one per row ((M, 2) tensor) for the rows of several samples."""
    xyxy = convert_boxes(boxes.double(), format, "xyxy")
    ws, hs = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    valid = (ws >= min_size) & (hs >= min_size) & (ws * hs >= min_area)
    if isinstance(canvas_size, torch.Tensor):
        height, width = canvas_size[:, 0].to(xyxy), canvas_size[:, 1].to(xyxy)
    else:
        height, width = (torch.tensor(float(v), dtype=xyxy.dtype, device=xyxy.device) for v in canvas_size)
    for column, extent in ((0, width), (1, height), (2, width), (3, height)):
        slack = extent * EDGE_SLACK
        valid &= (xyxy[:, column] >= -slack) & (xyxy[:, column] <= extent + slack)
    return valid


def centres_within(boxes: torch.Tensor, format: str, top: Number, left: Number, height: Number,
                   width: Number) -> torch.Tensor:
    """bool (M,): whether each box's centre lies strictly inside the crop (torchvision's RandomIoUCrop test)."""
    xyxy = convert_boxes(boxes.float(), format, "xyxy")
    cx, cy = (xyxy[:, 0] + xyxy[:, 2]) * 0.5, (xyxy[:, 1] + xyxy[:, 3]) * 0.5
    return (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)


def iou_crop_boxes(boxes: torch.Tensor, top: Number, left: Number, height: int, width: int, *, format: str,
                   **_: object) -> torch.Tensor:
    """The boxes in the crop's pixels, clamped to it; a box whose centre was outside the crop becomes
    all zeros (degenerate), for `SanitizeBoundingBoxes` to drop with its labels (torchvision's)."""
    inside = centres_within(boxes, format, top, left, height, width)
    cropped = crop_boxes(boxes, top, left, height, width, format=format)
    return torch.where(inside[:, None], cropped, torch.zeros_like(cropped))
