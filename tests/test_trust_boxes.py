"""Detection targets that agree with their image (issue 23, items 9-11).

* EXIF orientation: ``image(exif_transpose=True)`` turns the image, and the source's boxes, masks
  and keypoints are turned with it (before any op draws on them: RandomIoUCrop's crop is drawn from
  the boxes), for COCO, YOLO and any source with targets. The eight orientations against
  Pillow's ``exif_transpose`` of the pixels and against the formula below.
* Edges: a box or keypoint on an edge goes through every geometric op, on canvases of odd sizes,
  and stays within the new canvas exactly, and SanitizeBoundingBoxes keeps every box that
  torchvision v2's float64 result (clamped) keeps, with a margin.
* Declared sizes: an image that does not decode to the size its source declares for its targets
  (COCO's width/height, a converted dataset's record) is a DecodeError naming the file and both
  sizes, which ``on_error="skip"`` skips.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image, ImageOps
from torchvision import tv_tensors

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.functional.geometry import orient_image
from mediapipe.augment.functional.objects import EDGE_SLACK, convert_boxes, orient_boxes, orient_keypoints
from mediapipe.dataset.convert import convert
from mediapipe.errors import DecodeError, PipelineError
from mediapipe.fields import FieldType, boxes, keypoints
from mediapipe.loaders.sources.folder import ManifestSource
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import TensorList, stack_params
from tests.helpers import (
    SIZES,
    check_targets_on_their_pixels,
    jpeg,
    scene,
    tv_affine,
    tv_center_crop,
    tv_detection_resize,
    tv_flip,
    tv_iou_crop,
    tv_letterbox,
    tv_pad,
    tv_random_crop,
    tv_resize,
    tv_resized_crop,
    tv_rotate,
    tv_zoom_out,
)

FORMATS = ["xyxy", "xywh", "cxcywh"]
# where EXIF orientation k takes a point (x, y) of a W x H stored frame (TIFF 6.0's Orientation
# tag: the row and column the stored 0th row and column are shown as)
FORMULA = {
    1: lambda x, y, W, H: (x, y),
    2: lambda x, y, W, H: (W - x, y),
    3: lambda x, y, W, H: (W - x, H - y),
    4: lambda x, y, W, H: (x, H - y),
    5: lambda x, y, W, H: (y, x),
    6: lambda x, y, W, H: (H - y, x),
    7: lambda x, y, W, H: (H - y, W - x),
    8: lambda x, y, W, H: (y, W - x),
}


def with_orientation(image: Image.Image, orientation: int) -> Image.Image:
    exif = image.getexif()
    exif[0x0112] = orientation
    image.info["exif"] = exif.tobytes()
    return image


def turned_by_pillow(data: bytes) -> torch.Tensor:
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


# -- item 9: the eight orientations, kernel by kernel ------------------------------------------------
@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_orientation_turns_pixels_boxes_and_keypoints_as_pillow_turns_the_pixels(orientation):
    height, width = 23, 37
    rects = [(0, 3, 9, 11), (30, 15, 37, 23), (12, 0, 20, 6), (5, 17, 8, 23)]  # x0, y0, x1, y1 on pixel edges
    stored = np.zeros((height, width), np.uint8)
    for k, (x0, y0, x1, y1) in enumerate(rects):
        stored[y0:y1, x0:x1] = 40 * (k + 1)
    turned = np.asarray(ImageOps.exif_transpose(with_orientation(Image.fromarray(stored), orientation)))
    got = orient_image(torch.from_numpy(stored)[None], orientation)[0]
    assert torch.equal(got, torch.from_numpy(turned.copy()))
    out_h, out_w = turned.shape
    xyxy = torch.tensor(rects, dtype=torch.float32)
    for fmt in FORMATS:
        moved = convert_boxes(orient_boxes(convert_boxes(xyxy, "xyxy", fmt), orientation,
                                           canvas_size=(height, width), format=fmt), fmt, "xyxy")
        for k, box in enumerate(moved.tolist()):
            ys, xs = np.nonzero(turned == 40 * (k + 1))
            assert box == pytest.approx([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], abs=1e-4), (fmt, k)
            corners = [FORMULA[orientation](x, y, width, height) for x, y in ((rects[k][0], rects[k][1]),
                                                                               (rects[k][2], rects[k][3]))]
            (ax, ay), (bx, by) = corners
            assert box == pytest.approx([min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)], abs=1e-4)
            assert 0 <= box[0] <= box[2] <= out_w and 0 <= box[1] <= box[3] <= out_h
    # a keypoint is a pixel's position: it lands on the pixel its pixel is turned to
    marks = [(0, 0), (36, 0), (0, 22), (36, 22), (17, 9), (3, 20)]
    for x, y in marks:
        one = np.zeros((height, width), np.uint8)
        one[y, x] = 255
        ys, xs = np.nonzero(np.asarray(ImageOps.exif_transpose(with_orientation(Image.fromarray(one), orientation))))
        point = orient_keypoints(torch.tensor([[[float(x), float(y)]]]), orientation, canvas_size=(height, width))
        assert point.reshape(2).tolist() == [float(xs[0]), float(ys[0])]


# -- item 9: sources with targets, through a pipeline --------------------------------------------------
@pytest.fixture(scope="module")
def turned_files(tmp_path_factory) -> Path:
    """The same scene in one JPEG per EXIF orientation, with a COCO file (stored sizes, boxes and
    rectangle polygons in the stored frame), YOLO labels and a manifest with keypoints."""
    root = tmp_path_factory.mktemp("turned")
    (root / "images").mkdir()
    (root / "labels").mkdir()
    images, annotations, rows = [], [], []
    for o in range(1, 9):
        photo, rects = scene(o)
        h, w = photo.shape[:2]
        name = f"o{o}.jpg"
        (root / "images" / name).write_bytes(jpeg(photo, o))
        images.append({"id": o, "file_name": name, "width": w, "height": h})
        lines = []
        for k, (x0, y0, x1, y1) in enumerate(rects):
            annotations.append({"id": 10 * o + k, "image_id": o, "category_id": 1, "iscrowd": 0,
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]})
            lines.append(f"0 {(x0 + x1) / 2 / w} {(y0 + y1) / 2 / h} {(x1 - x0) / w} {(y1 - y0) / h}")
        (root / "labels" / f"o{o}.txt").write_text("\n".join(lines))
        rows.append({"path": f"images/{name}", "width": w, "height": h, "boxes": [list(r) for r in rects],
                     "points": [[(x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2] for x0, y0, x1, y1 in rects]})
    document = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "box"}]}
    (root / "instances.json").write_text(json.dumps(document))
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root


class PointManifest(ManifestSource):
    """A manifest whose rows carry boxes and keypoints (the objects' centre pixels) and their size."""

    kind = "test-point-manifest"

    def field_types(self) -> dict:
        return {"boxes": boxes("xyxy"), "points": keypoints()}

    def ref(self, index: int):
        ref = super().ref(index)
        row = self._rows[index]
        ref.fields["boxes"] = torch.tensor(row["boxes"], dtype=torch.float32)
        ref.fields["points"] = torch.tensor(row["points"], dtype=torch.float32)
        return ref


def samples(source, ops: list, exif_transpose: bool = True, seed: int = 0, backend: str = "auto",
            **options) -> list[dict]:
    decode = {"image": mp.decoders.image(backend, exif_transpose=exif_transpose, **options)}
    pipe = mp.Pipeline(source, decode, ops, batch_size=1, seed=seed, device="cpu")
    out = []
    for batch in pipe.loader(num_workers=0, shuffle=False):
        out.append({k: (v[0] if isinstance(v, (list, torch.Tensor)) and len(v) else v) for k, v in batch.items()})
    return out


# the workers' decode, and the batched one in the training process (the workers probe the
# header and turn the targets; the device stage decodes): on the CPU where nvImageCodec is there
DECODERS = [{}] + ([{"backend": "nvimgcodec", "device_decode": True}]
                   if "nvimgcodec" in mp.decoders.backends("image") and
                   mp.decoders.backends("image")["nvimgcodec"].available(None) else [])


def test_coco_boxes_and_masks_turn_with_the_image(turned_files):
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(turned_files / "instances.json", turned_files / "images", masks=True)
    for options in DECODERS:
        got = samples(source, [], **options)
        assert len(got) == 8
        for o, sample in zip(range(1, 9), got):
            data = (turned_files / "images" / f"o{o}.jpg").read_bytes()
            assert torch.equal(sample["image"], turned_by_pillow(data))
            h, w = SIZES[o]
            assert tuple(sample["image"].shape[-2:]) == ((w, h) if o >= 5 else (h, w))
            assert check_targets_on_their_pixels(sample) == 3
    upright = samples(source, [], exif_transpose=False)  # the stored frame: boxes as the file has them
    for o, sample in zip(range(1, 9), upright):
        assert torch.equal(sample["boxes"], torch.tensor(scene(o)[1], dtype=torch.float32))
        assert check_targets_on_their_pixels(sample) == 3


def test_a_crop_drawn_from_the_boxes_is_drawn_on_the_turned_ones(turned_files):
    """RandomIoUCrop (fused into the decoder) draws its crop from the boxes before the image is
    decoded: on boxes in the turned frame, so the objects it keeps are the ones in its crop."""
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(turned_files / "instances.json", turned_files / "images", masks=True)
    ops = [A.RandomIoUCrop(min_scale=0.5, sampler_options=(0.1, 0.3, 0.5)), A.SanitizeBoundingBoxes()]
    kept = cropped = 0
    for seed in range(4):
        for sample in samples(source, ops, seed=seed, **DECODERS[seed % len(DECODERS)]):
            kept += check_targets_on_their_pixels(sample, complete=False)
            cropped += tuple(sample["image"].shape[-2:]) not in (SIZES[1], SIZES[1][::-1])
    assert kept > 20 and cropped > 10


def test_yolo_boxes_turn_with_the_image(turned_files):
    source = mp.loaders.yolo(turned_files / "images", classes=["box"])
    for seed, ops in enumerate([[], [A.RandomIoUCrop(min_scale=0.5), A.SanitizeBoundingBoxes()]]):
        got = samples(source, ops, seed=seed)
        assert len(got) == 8
        for sample in got:
            check_targets_on_their_pixels(sample, complete=not ops)


def test_keypoints_of_any_source_turn_with_the_image(turned_files):
    source = PointManifest(turned_files / "rows.jsonl")
    for sample in samples(source, [A.HorizontalFlip(p=1.0)]):
        assert check_targets_on_their_pixels(sample) == 3


def test_dali_refuses_targets_it_would_not_turn(turned_files):
    pytest.importorskip("nvidia.dali")
    source = mp.loaders.yolo(turned_files / "images", classes=["box"])
    pipe = mp.Pipeline(source, {"image": mp.decoders.image(exif_transpose=True)}, [], batch_size=2, seed=0,
                       device="cpu")
    with pytest.raises(PipelineError, match="exif_transpose"):
        pipe.loader(backend="dali")


# -- item 10: edges through every geometric op ---------------------------------------------------------
CANVASES = [(223, 317), (97, 131), (301, 199)]


def edge_boxes(h: int, w: int) -> torch.Tensor:
    """xyxy boxes on each edge, in each corner, and the whole canvas; fractional elsewhere."""
    return torch.tensor([
        [0.0, 0.31 * h, 0.43 * w, 0.72 * h],  # left
        [0.21 * w, 0.0, 0.63 * w, 0.52 * h],  # top
        [0.55 * w, 0.27 * h, w, 0.81 * h],  # right
        [0.13 * w, 0.61 * h, 0.47 * w, h],  # bottom
        [0.0, 0.0, 0.33 * w, 0.29 * h],
        [0.71 * w, 0.0, w, 0.26 * h],
        [0.0, 0.69 * h, 0.37 * w, h],
        [0.61 * w, 0.67 * h, w, h],
        [0.0, 0.0, w, h],
    ], dtype=torch.float32)


def edge_points(h: int, w: int) -> torch.Tensor:
    return torch.tensor([[[0.0, 0.0], [w, 0.5 * h], [0.5 * w, h], [w, h], [w - 1.0, h - 1.0], [0.0, h - 1.0]]])


EDGE_CASES = [
    (A.Resize(224), tv_resize), (A.Resize((224, 225)), tv_resize), (A.Resize(None, max_size=97), tv_resize),
    (A.RandomResizedCrop(224), tv_resized_crop), (A.RandomResizedCrop((97, 131), scale=(0.5, 1.0)), tv_resized_crop),
    (A.CenterCrop((91, 127)), tv_center_crop), (A.CenterCrop((331, 333)), tv_center_crop),
    (A.RandomCrop((95, 129)), tv_random_crop), (A.RandomCrop((231, 321), pad_if_needed=True), tv_random_crop),
    (A.Pad((3, 1, 2, 5)), tv_pad),
    (A.HorizontalFlip(p=1.0), tv_flip), (A.VerticalFlip(p=1.0), tv_flip),
    (A.RandomRotation(30), tv_rotate), (A.RandomRotation((90.0, 90.0)), tv_rotate),
    (A.RandomRotation((-90.0, -90.0), expand=True), tv_rotate),
    (A.RandomAffine(20, translate=(0.1, 0.1), scale=(0.7, 1.3), shear=5), tv_affine),
    (A.RandomZoomOut(p=1.0, side_range=(1.0, 2.0)), tv_zoom_out), (A.RandomIoUCrop(), tv_iou_crop),
    (A.ScaleJitter((224, 224), scale_range=(0.5, 1.5)), tv_detection_resize),
    (A.RandomShortestSize((97, 224), max_size=333), tv_detection_resize), (A.Letterbox((224, 224)), tv_letterbox),
    (A.Letterbox((97, 131), center=False), tv_letterbox),
]


def reference(op, oracle, p, data: dict, fmt: str, canvas: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision v2 on float64 boxes and keypoints with the drawn parameters, boxes clamped: (xyxy, points)."""
    before = {"boxes": data["boxes"]}
    fn = oracle(op, p, before) if oracle in (tv_zoom_out, tv_iou_crop, tv_detection_resize, tv_letterbox) else oracle(op, p)
    bxs = fn(tv_tensors.BoundingBoxes(data["boxes"].double(), format=fmt.upper(), canvas_size=canvas))
    bxs = TF.clamp_bounding_boxes(bxs)
    points = fn(tv_tensors.KeyPoints(data["points"].double(), canvas_size=canvas))
    xyxy = TF.convert_bounding_box_format(bxs, new_format="XYXY").as_subclass(torch.Tensor)
    return xyxy, points.as_subclass(torch.Tensor)


def run_op(op, p, data: dict, canvas: tuple[int, int]) -> dict:
    """The op on one sample's boxes and keypoints (a batch of one for a batch-stage op)."""
    if op.placement() is A.Stage.SAMPLE:
        out = {"boxes": data["boxes"].clone(), "points": data["points"].clone()}
        op.apply_fields(out, p, only=["boxes", "points"], canvas_size=canvas)
        return out
    batch = {"boxes": TensorList([data["boxes"].clone()]), "points": data["points"][None].clone()}
    op.apply_fields(batch, stack_params([p]), only=["boxes", "points"], canvas_size=canvas)
    return {"boxes": batch["boxes"][0], "points": batch["points"][0]}


def output_canvas(op, p, canvas: tuple[int, int]) -> tuple[int, int]:
    """The (H, W) the op gives a ``canvas`` image (its image through the op)."""
    if op.placement() is not A.Stage.SAMPLE:
        return canvas  # flips and warps in the batch stage keep the canvas
    if isinstance(op, A.RandomRotation):  # expand: the image's size, without warping it
        return op.output_size(op.inverse_matrices(stack_params([p]), canvas), canvas)
    data = {"image": torch.zeros(1, *canvas, dtype=torch.uint8)}
    op.apply_fields(data, p, only=["image"])
    return tuple(data["image"].shape[-2:])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", range(len(EDGE_CASES)), ids=[type(c[0]).__name__ for c in EDGE_CASES])
def test_objects_on_an_edge_stay_inside_and_are_kept(case, fmt):
    op, oracle = EDGE_CASES[case]
    types = {"image": FieldType("image"), "boxes": boxes(fmt), "points": keypoints()}
    op = op.bind(types)
    sanitize = A.SanitizeBoundingBoxes().bind({"image": FieldType("image"), "boxes": boxes(fmt)})
    checked = 0
    for canvas in CANVASES:
        data = {"boxes": convert_boxes(edge_boxes(*canvas), "xyxy", fmt), "points": edge_points(*canvas)}
        for seed in range(6):
            size = canvas
            p = op.sample_params(SampleRNG(seed, 0, 0, 1), {"size": size, "shape": (3, *size),
                                                           "fields": {f: data[f] for f in op.draws_on()}})
            out_h, out_w = output_canvas(op, p, canvas)
            out = run_op(op, p, data, canvas)
            xyxy = convert_boxes(out["boxes"].double(), fmt, "xyxy")
            if fmt == "xyxy":  # exactly inside: nothing past an edge by a float step
                assert (out["boxes"] >= 0).all() and (out["boxes"][:, 0::2] <= out_w).all()
                assert (out["boxes"][:, 1::2] <= out_h).all(), (canvas, seed, out["boxes"])
            else:  # corners computed from (x, y, w, h): within float rounding of the side
                assert (xyxy[:, 0::2] >= -out_w * EDGE_SLACK).all() and (xyxy[:, 0::2] <= out_w * (1 + EDGE_SLACK)).all()
                assert (xyxy[:, 1::2] >= -out_h * EDGE_SLACK).all() and (xyxy[:, 1::2] <= out_h * (1 + EDGE_SLACK)).all()
            ref_boxes, ref_points = reference(op, oracle, p, data, fmt, canvas)
            tolerance = 1.01 if getattr(op, "expand", False) else 2e-3  # (torchvision's expand: a pixel off)
            torch.testing.assert_close(xyxy, ref_boxes, atol=tolerance, rtol=0)
            kept = {"boxes": out["boxes"]}
            sanitize.apply_fields(kept, {}, canvas_size=(out_h, out_w))
            sides = ref_boxes[:, 2:] - ref_boxes[:, :2]
            robust = (sides >= 1 + tolerance).all(dim=1) & (sides.prod(dim=1) >= 1 + 2 * tolerance)
            keep = torch.tensor([any(torch.equal(b, k) for k in kept["boxes"]) for b in out["boxes"]])
            assert keep[robust].all(), (canvas, seed, out["boxes"][robust & ~keep], (out_h, out_w))
            assert not keep[(sides < 1 - tolerance).any(dim=1)].any()
            # a keypoint the exact result puts on or inside the canvas is inside it
            inside = ((ref_points >= -1e-6) & (ref_points <= torch.tensor([out_w, out_h]) + 1e-6)).all(dim=-1)
            mine = out["points"]
            torch.testing.assert_close(mine.double(), ref_points, atol=tolerance, rtol=0)
            if not getattr(op, "degrees", None) or op.degrees == (0.0, 0.0):  # (a warp moves points anywhere)
                ok = (mine >= 0).all(dim=-1) & (mine[..., 0] <= out_w) & (mine[..., 1] <= out_h)
                assert ok[inside].all(), (canvas, seed, mine[inside & ~ok])
            checked += int(robust.sum())
    assert checked > 50


def test_the_reported_case_a_right_edge_box_after_random_resized_crop():
    """A box reaching the right edge of a 317 px image, cropped with the edge in and resized to
    224: x2 was 224.00001525 and SanitizeBoundingBoxes dropped it."""
    types = {"image": FieldType("image"), "boxes": boxes("xyxy")}
    op = A.RandomResizedCrop(224).bind(types)
    sanitize = A.SanitizeBoundingBoxes().bind(types)
    box = torch.tensor([[100.3, 10.0, 317.0, 50.0]])
    for left in range(0, 100):
        p = {"top": 0, "left": left, "height": 223, "width": 317 - left}
        out = {"boxes": box.clone()}
        op.apply_fields(out, p, only=["boxes"], canvas_size=(223, 317))
        assert out["boxes"][0, 2].item() == 224.0
        sanitize.apply_fields(out, {}, canvas_size=(224, 224))
        assert len(out["boxes"]) == 1, left


def test_converted_targets_scaled_with_the_image_stay_on_its_edges():
    from mediapipe.loaders.sources.targets import scale_targets

    types = {"boxes": boxes("xyxy"), "points": keypoints()}
    for before in CANVASES:
        for after in [(224, 224), (97, 131), (150, 211), (96, 96), (225, 225), (103, 103)]:  # (some drift)
            fields = {"boxes": edge_boxes(*before), "points": edge_points(*before)}
            out = scale_targets(fields, types, before, after)
            assert (out["boxes"] >= 0).all() and (out["boxes"][:, 0::2] <= after[1]).all()
            assert (out["boxes"][:, 1::2] <= after[0]).all()
            assert (out["boxes"][:, 2:] == torch.tensor(after[::-1], dtype=torch.float32)).any()
            assert (out["points"][..., 0] <= after[1]).all() and (out["points"][..., 1] <= after[0]).all()


# -- item 11: the declared size against the decoded image ----------------------------------------------
@pytest.fixture()
def misdeclared(tmp_path: Path) -> Path:
    """Three images: the second declared larger than it is, with a box wholly outside the real
    frame; the third an orientation-6 file declared at its turned size."""
    (tmp_path / "images").mkdir()
    photo, _ = scene(1)
    h, w = photo.shape[:2]
    (tmp_path / "images" / "good.jpg").write_bytes(jpeg(photo))
    (tmp_path / "images" / "small.jpg").write_bytes(jpeg(photo[:40, :50]))
    (tmp_path / "images" / "turned.jpg").write_bytes(jpeg(photo, 6))
    images = [{"id": 1, "file_name": "good.jpg", "width": w, "height": h},
              {"id": 2, "file_name": "small.jpg", "width": w, "height": h},
              {"id": 3, "file_name": "turned.jpg", "width": h, "height": w}]
    annotations = [{"id": i, "image_id": i, "category_id": 1, "iscrowd": 0, "bbox": bbox}
                   for i, bbox in ((1, [5, 5, 20, 10]), (2, [55, 45, 20, 10]), (3, [5, 5, 20, 10]))]
    for name, ids in (("instances.json", (1, 2)), ("turned.json", (1, 3)), ("one.json", (1,))):
        document = {"images": [images[i - 1] for i in ids], "annotations": [annotations[i - 1] for i in ids],
                    "categories": [{"id": 1, "name": "box"}]}
        (tmp_path / name).write_text(json.dumps(document))
    return tmp_path


@pytest.mark.parametrize("ops", [[], [A.RandomResizedCrop(32)]], ids=["decoded", "probed"])
def test_an_image_not_of_its_declared_size_is_a_named_error(misdeclared, ops):
    source = mp.loaders.coco(misdeclared / "instances.json", misdeclared / "images")
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, ops, batch_size=1, seed=0, device="cpu")
    with pytest.raises(DecodeError) as err:
        list(pipe.loader(num_workers=0, shuffle=False))
    assert "small.jpg" in str(err.value) and "83x61" in str(err.value) and "50x40" in str(err.value)
    assert err.value.category == "bad annotation"
    assert_skipped(source, {"image": mp.decoders.image()}, ops, "small.jpg")


def assert_skipped(source, decode: dict, ops: list, name: str) -> None:
    """Under on_error="skip" the sample is counted as failed, named, and replaced by the good one."""
    pipe = mp.Pipeline(source, decode, ops, batch_size=1, seed=0, device="cpu", on_error="skip")
    loader = pipe.loader(num_workers=0, shuffle=False)
    assert [int(b["image_id"][0]) for b in loader] == [1, 1]
    assert sum(loader.stats.errors.values()) == 1 and next(iter(loader.stats.errors)).endswith("bad annotation")
    assert any(name in failed for failed in loader.stats.failed)


@pytest.mark.parametrize("exif_transpose", [False, True])
def test_a_size_declared_for_the_turned_image_says_so(misdeclared, exif_transpose):
    source = mp.loaders.coco(misdeclared / "turned.json", misdeclared / "images")
    decode = {"image": mp.decoders.image(exif_transpose=exif_transpose)}
    pipe = mp.Pipeline(source, decode, [], batch_size=1, seed=0, device="cpu")
    with pytest.raises(DecodeError, match=r"turned\.jpg.*61x83.*EXIF orientation 6.*drawn on the turned image"):
        list(pipe.loader(num_workers=0, shuffle=False))
    assert_skipped(source, decode, [], "turned.jpg")


def test_a_converted_record_whose_size_is_not_its_image_is_a_named_error(misdeclared, tmp_path):
    out = tmp_path / "shards"
    assert convert(mp.loaders.coco(misdeclared / "one.json", misdeclared / "images"), out).num_samples == 1
    records = [json.loads(line) for line in gzip.decompress((out / "samples.jsonl.gz").read_bytes()).splitlines()]
    good = mp.Pipeline(mp.loaders.shards(out), {"image": mp.decoders.image()}, [], batch_size=1, seed=0, device="cpu")
    assert len(list(good.loader(num_workers=0))) == 1
    records[0]["height"] += 7  # a record that lies about its image
    (out / "samples.jsonl.gz").write_bytes(gzip.compress("\n".join(json.dumps(r) for r in records).encode()))
    pipe = mp.Pipeline(mp.loaders.shards(out), {"image": mp.decoders.image()}, [], batch_size=1, seed=0, device="cpu")
    with pytest.raises(DecodeError, match=r"good\.jpg.*83x68.*83x61"):
        list(pipe.loader(num_workers=0))
