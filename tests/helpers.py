"""What several test modules share, so that no test module imports another: media writers,
loader helpers, box oracles and the converter's kill hook (fixtures stay in conftest.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.functional.objects import convert_boxes
from mediapipe.fields import FieldType, boxes, keypoints
from mediapipe.loaders.sources.folder import ManifestSource
from mediapipe.loaders.sources.recordio import IR_HEADER, MAGIC
from mediapipe.loaders.sources.tfrecord import BOXES as TFRECORD_BOXES
from mediapipe.rng import op_rng
from mediapipe.synthetic import imagenet_like_sizes, jpeg_bytes, photo_like
from mediapipe.synthetic.detection import find_flat_objects

try:  # the torchvision oracles of the geometric ops; the modules that use them import torchvision
    import torchvision.transforms.v2.functional as TF
    from torchvision import tv_tensors
    from torchvision.transforms import InterpolationMode
except ImportError:  # torchvision is optional: the other helpers work without it
    TF = tv_tensors = InterpolationMode = None


# -- image folders and loaders ---------------------------------------------------------------
def write_image_folder(root: Path, count: int, classes: int = 3, seed: int = 0, scale: float = 0.5) -> Path:
    """``count`` JPEGs in ``classes`` class folders, ImageNet-like sizes times ``scale``."""
    rng = np.random.default_rng(seed)
    for i, (h, w) in enumerate(imagenet_like_sizes(rng, count)):
        folder = root / f"class{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        h, w = max(32, int(h * scale)), max(32, int(w * scale))
        (folder / f"img{i:04d}.jpg").write_bytes(jpeg_bytes(photo_like(h, w, seed * 100_000 + i), quality=90))
    return root


def state_after(loader, batches: int) -> dict:
    """The loader's state_dict() after ``batches`` delivered batches of an interrupted epoch."""
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    it.close()
    return state


def make_pipeline(root, seed: int = 0, batch_size: int = 5, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.folder(root),
        decode={"image": mp.decoders.image()},
        augment=[A.RandomResizedCrop(32, scale=(0.2, 1.0)), A.HorizontalFlip(), A.Normalize()],
        batch_size=batch_size, seed=seed, device="cpu", **kwargs,
    )


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited child not yet reaped, a zombie, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def collect(loader) -> list[dict]:
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert torch.equal(x[k], y[k]), k
            else:
                assert x[k] == y[k], k


# -- objects at known pixels: the box oracles ------------------------------------------------
def miss(box: list[float], seen: list[float], height: int, width: int) -> float:
    """How far the pixel extent ``seen`` of an object is from its delivered box; for a box on the
    image's edge (a cut object: an ellipse's visible part is smaller than its clamped box), how
    far ``seen`` leaves the box."""
    if box[0] < 0.5 or box[1] < 0.5 or box[2] > width - 0.5 or box[3] > height - 0.5:
        return max(box[0] - seen[0], box[1] - seen[1], seen[2] - box[2], seen[3] - box[3], 0.0)
    return float(np.abs(np.subtract(box, seen)).max())


def assert_boxes_are_where_the_pixels_are(batch: dict, tolerance: float = 2.5, dropped_at_edges: bool = False) -> int:
    """Every flat-coloured object found in each delivered image must have a delivered box of its
    class at its pixels (an object cut by the image's edge: its pixels inside its box, an
    ellipse's visible part being smaller than its clamped box), and every box of a visible object
    a found object. With ``dropped_at_edges``, an object cut by the edge may have no box (an IoU
    crop drops the objects whose centre it leaves out, as torchvision's). Returns the matches."""
    matched = 0
    for i in range(batch["image"].shape[0]):
        if "boxes_lengths" in batch:
            n = int(batch["boxes_lengths"][i])
            boxes, labels = batch["boxes"][i, :n], batch["labels"][i, :n]
        else:
            boxes, labels = batch["boxes"][i], batch["labels"][i]
        image = batch["image"][i].permute(1, 2, 0).numpy()
        height, width = image.shape[:2]
        used = set()
        for category, seen in find_flat_objects(image, tolerance=100):
            misses = [miss(box.tolist(), seen, height, width) if int(label) == category else np.inf
                      for box, label in zip(boxes, labels)]
            k = int(np.argmin(misses)) if misses else -1
            cut = seen[0] <= 0 or seen[1] <= 0 or seen[2] >= width or seen[3] >= height
            if dropped_at_edges and cut and (k < 0 or misses[k] > tolerance):
                continue
            assert k >= 0 and misses[k] <= tolerance, (i, category, seen, boxes.tolist(), labels.tolist())
            used.add(k)
            matched += 1
        for k, box in enumerate(boxes.tolist()):  # a box nobody found: cropped to a sliver
            if k not in used:
                assert (box[2] - box[0]) * (box[3] - box[1]) < 20 or min(box[2] - box[0], box[3] - box[1]) < 3, box
    return matched


class BoxManifest(ManifestSource):
    """A manifest whose rows carry ``boxes`` (xyxy pixels) and ``points``: a stand-in for the
    detection sources, declaring its fields' kinds as they will."""

    kind = "test-box-manifest"

    def field_types(self) -> dict[str, Any]:
        return {"boxes": boxes("xyxy"), "points": keypoints()}

    def ref(self, index: int):
        ref = super().ref(index)
        row = self._rows[index]
        ref.fields["boxes"] = torch.tensor(row["boxes"], dtype=torch.float32).reshape(-1, 4)
        ref.fields["points"] = torch.tensor(row["points"], dtype=torch.float32).reshape(-1, 2)
        return ref


def write_objects(root: Path, count: int = 8, mask_size: dict[int, tuple[int, int]] | None = None,
                  outside: bool = False) -> Path:
    """Photos with 1-3 flat rectangles each (class ids 1, 2, 3 in the mask), their boxes and centres."""
    rows = []
    rng = np.random.default_rng(0)
    for i in range(count):
        h, w = int(rng.integers(90, 140)), int(rng.integers(100, 160))
        photo = photo_like(h, w, 70 + i) // 3
        mask = np.zeros((h, w), np.uint8)
        bxs, pts = [], []
        for k in range(i % 4):  # sample 0, 4: no objects
            bw, bh = int(rng.integers(14, w // 3)), int(rng.integers(14, h // 3))
            x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            if (mask[y0 : y0 + bh, x0 : x0 + bw] != 0).any():
                continue
            mask[y0 : y0 + bh, x0 : x0 + bw] = len(bxs) + 1  # class id = the box's position + 1
            photo[y0 : y0 + bh, x0 : x0 + bw] = (200, 60 + 60 * k, 40)
            bxs.append([x0, y0, x0 + bw, y0 + bh])
            pts.append([x0 + bw / 2, y0 + bh / 2])
        if outside:
            bxs.append([w + 5.0, h + 3.0, w + 20.0, h + 9.0])  # wholly outside: a bad annotation
            pts.append([-4.0, h + 2.0])
        (root / f"{i}.jpg").write_bytes(jpeg_bytes(photo, quality=95))
        mh, mw = (mask_size or {}).get(i, (h, w))
        Image.fromarray(mask).resize((mw, mh), Image.NEAREST).save(root / f"{i}_mask.png")
        rows.append({"path": f"{i}.jpg", "mask": f"{i}_mask.png", "label": i % 3, "boxes": bxs, "points": pts})
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root / "rows.jsonl"


# -- one scene per EXIF orientation ----------------------------------------------------------
RED = (225, 35, 35)


def jpeg(photo: np.ndarray, orientation: int = 1) -> bytes:
    image = Image.fromarray(photo)
    exif = image.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=95, exif=exif.tobytes())
    return buf.getvalue()


SIZES = {1: (61, 83), 2: (47, 71), 3: (65, 59), 4: (53, 77), 5: (61, 83), 6: (57, 91), 7: (69, 55), 8: (49, 75)}


def scene(orientation: int) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    """A dark photo (stored frame) with three red rectangles: on the left edge, in the
    bottom-right corner, inside; their xyxy boxes on pixel edges."""
    h, w = SIZES[orientation]
    photo = photo_like(h, w, seed=orientation) // 3
    rects = [(0, h // 5, w // 4, h // 2), (w - w // 3, h - h // 3, w, h), (w // 3, 4, w // 2 + 3, h // 3)]
    for x0, y0, x1, y1 in rects:
        photo[y0:y1, x0:x1] = RED
    return photo, rects


def red(image: torch.Tensor) -> torch.Tensor:
    return (image[0] > 150) & (image[1] < 110) & (image[2] < 110)


def check_targets_on_their_pixels(sample: dict, complete: bool = True) -> int:
    """Each box (and mask, keypoint) lies on red pixels, and with ``complete`` (no object dropped)
    red pixels lie in the boxes; returns the objects."""
    image, bxs = sample["image"], sample["boxes"]
    height, width = image.shape[-2:]
    is_red = red(image)
    covered = torch.zeros_like(is_red)
    for k, (x0, y0, x1, y1) in enumerate(bxs.tolist()):
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        inner = is_red[int(round(y0)) + 1 : int(round(y1)) - 1, int(round(x0)) + 1 : int(round(x1)) - 1]
        if inner.numel():
            assert inner.float().mean() > 0.9, (k, (x0, y0, x1, y1))
        covered[max(0, int(y0) - 1) : int(y1) + 2, max(0, int(x0) - 1) : int(x1) + 2] = True
        if "masks" in sample:
            ys, xs = torch.nonzero(sample["masks"][k], as_tuple=True)
            extent = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
            assert extent == [round(v) for v in (x0, y0, x1, y1)], (k, extent, (x0, y0, x1, y1))
            assert is_red[sample["masks"][k].bool()].float().mean() > 0.9
        if "points" in sample:
            px, py = sample["points"][k].tolist()
            assert abs(px - (x0 + x1 - 1) / 2) < 1e-4 and abs(py - (y0 + y1 - 1) / 2) < 1e-4
    assert not complete or (is_red & ~covered).sum() <= 3  # no red object left without its box
    return len(bxs)


# -- the converter, SIGKILLed at a step ------------------------------------------------------
def kill_at(spec: str) -> Callable[[str], None]:
    """A `mediapipe.dataset.convert_write.step_hook` that SIGKILLs this process at the N-th step of a
    kind: ``spec`` is "sample:N", "shard:N" or "commit:N"."""
    event, count = spec.split(":")
    seen = [0]

    def hook(step: str) -> None:
        if step == event:
            seen[0] += 1
            if seen[0] >= int(count):
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


_KILLED_CLI = """
import sys
sys.path.insert(0, sys.argv[1])
import mediapipe.dataset.convert_write as convert_write
from mediapipe.cli import main
from tests.helpers import kill_at
convert_write.step_hook = kill_at(sys.argv[2])
sys.exit(main(sys.argv[3:]))
"""


def cli_argv(*args: str, kill_at: str | None = None) -> list[str]:
    """The command line running ``mediapipe ARGS`` in a fresh interpreter; with ``kill_at``
    (see `kill_at`) a wrapper sets the converter's step hook first."""
    if kill_at is None:
        return [sys.executable, "-m", "mediapipe.cli", *args]
    return [sys.executable, "-c", _KILLED_CLI, str(Path(__file__).resolve().parents[1]), kill_at, *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_gloo_ranks(script: Path, *args: str) -> list[dict]:
    """Run ``script`` as ranks 0 and 1 of a gloo process group on 127.0.0.1; their RESULT lines."""
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": "2"}
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-4000:]
            line = next(x for x in out.splitlines() if x.startswith("RESULT "))
            results.append(json.loads(line[len("RESULT "):]))
    finally:  # a rank that failed leaves the other waiting for it: stop it too
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return sorted(results, key=lambda r: r["rank"])


# -- geometric ops on every kind of field, against torchvision v2 (test_ops_targets, test_ops_detection) --
H, W = 48, 64


def image(seed: int = 0, h: int = H, w: int = W) -> torch.Tensor:
    return torch.from_numpy(photo_like(h, w, seed)).permute(2, 0, 1).contiguous()


def mask_of(img: torch.Tensor) -> torch.Tensor:
    """Class ids 0, 3 and 5 in blobs that follow the image's content."""
    luma = img.float().mean(0, keepdim=True)
    return (luma > 110).to(torch.uint8) * 3 + (luma > 150).to(torch.uint8) * 2


def some_boxes(seed: int, n: int = 5, h: int = H, w: int = W) -> torch.Tensor:
    """xyxy boxes inside the canvas, one crossing its right edge and one wholly outside it."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
    wh = 2 + torch.rand(n, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
    out = torch.cat((xy, xy + wh), 1)
    out[0] = torch.tensor([w - 6.5, 4.25, w + 9.0, 20.0])  # crosses the right edge
    out[1] = torch.tensor([w + 3.0, h + 2.0, w + 8.0, h + 9.5])  # outside the canvas
    return out


def some_points(seed: int, n: int = 4, k: int = 3, h: int = H, w: int = W) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, k, 2, generator=g) * torch.tensor([w, h]) - 2.0


def sample_types(fmt: str) -> dict[str, FieldType]:
    """An image, its class-id mask, boxes in ``fmt`` and keypoints: what `sample` holds."""
    return {"image": FieldType("image"), "mask": FieldType("mask"), "boxes": boxes(fmt), "points": keypoints()}


def sample(seed: int, fmt: str, h: int = H, w: int = W) -> dict[str, torch.Tensor]:
    """A photo-like image, its mask, boxes (one crossing an edge, one outside) and keypoints."""
    img = image(seed, h, w)
    return {"image": img, "mask": mask_of(img), "boxes": convert_boxes(some_boxes(seed, h=h, w=w), "xyxy", fmt),
            "points": some_points(seed, h=h, w=w)}


def tv(data: dict[str, torch.Tensor], fmt: str) -> dict:
    """The same fields as torchvision's ``tv_tensors``."""
    canvas = tuple(data["image"].shape[-2:])
    return {"image": tv_tensors.Image(data["image"]), "mask": tv_tensors.Mask(data["mask"]),
            "boxes": tv_tensors.BoundingBoxes(data["boxes"], format=fmt.upper(), canvas_size=canvas),
            "points": tv_tensors.KeyPoints(data["points"], canvas_size=canvas)}


def check(ours: dict, ref: dict, image_levels: int = 0) -> None:
    """Masks exact, boxes and keypoints within 1e-4 px, images within ``image_levels`` grey levels."""
    assert ours["mask"].shape == ref["mask"].shape and torch.equal(ours["mask"], ref["mask"].as_subclass(torch.Tensor))
    torch.testing.assert_close(ours["boxes"], ref["boxes"].as_subclass(torch.Tensor), atol=1e-4, rtol=0)
    torch.testing.assert_close(ours["points"], ref["points"].as_subclass(torch.Tensor), atol=1e-4, rtol=0)
    diff = (ours["image"].int() - ref["image"].as_subclass(torch.Tensor).int()).abs().max().item()
    assert ours["image"].shape == ref["image"].shape and diff <= image_levels
    assert ours["boxes"].dtype == torch.float32 and ours["points"].dtype == torch.float32


def draw(op, seed: int, size=(H, W), index: int = 0) -> dict:
    """The op's draw for sample ``index`` of a ``size`` image (as op 1 of a pipeline)."""
    return op.sample_params(op_rng(seed, 0, index, 1), {"size": size, "shape": (3, *size)})


# -- sample-stage ops: one sample, plain parameters -------------------------------------------------------
def tv_resized_crop(op, p):
    mode = InterpolationMode(op.interpolation)
    return lambda t: TF.resized_crop(t, p["top"], p["left"], p["height"], p["width"], list(op.size), mode,
                                     antialias=op.antialias)


def tv_resize(op, p):
    return lambda t: TF.resize(t, list(p["size"]), InterpolationMode(op.interpolation), antialias=op.antialias)


def tv_center_crop(op, p):
    return lambda t: TF.center_crop(t, list(op.size))


def tv_random_crop(op, p):
    left, top, right, bottom = p["padding"]

    def fn(t):
        if any(p["padding"]):
            fill = 0 if isinstance(t, tv_tensors.Mask) else op.fill
            t = TF.pad(t, [left, top, right, bottom], fill=fill, padding_mode=op.padding_mode)
        return TF.crop(t, p["top"], p["left"], *op.size)

    return fn


def tv_pad(op, p):
    def fn(t):
        fill = 0 if isinstance(t, tv_tensors.Mask) else op.fill
        return TF.pad(t, list(op.padding), fill=fill, padding_mode=op.padding_mode)

    return fn


SAMPLE_CASES = [  # (op, its torchvision oracle, the grey levels a resampled image may differ by)
    (A.RandomResizedCrop((24, 32), scale=(0.2, 1.0)), tv_resized_crop, 1),
    (A.RandomResizedCrop(20, scale=(0.9, 1.0), interpolation="nearest"), tv_resized_crop, 0),
    (A.Resize(30), tv_resize, 1),
    (A.Resize((40, 20)), tv_resize, 1),
    (A.Resize(None, max_size=50, interpolation="nearest-exact"), tv_resize, 0),
    (A.CenterCrop((40, 50)), tv_center_crop, 0),
    (A.CenterCrop((60, 80)), tv_center_crop, 0),  # larger than the image: padded
    (A.RandomCrop(40, padding=(3, 5), fill=7), tv_random_crop, 0),
    (A.RandomCrop((56, 70), pad_if_needed=True), tv_random_crop, 0),
    (A.Pad((1, 2, 3, 4), fill=9), tv_pad, 0),
]


def tv_flip(op, p):
    fn = TF.horizontal_flip if type(op) is A.HorizontalFlip else TF.vertical_flip
    return lambda t: fn(t) if bool(p["flip"]) else t


def tv_rotate(op, p):
    def fn(t):
        fill = 0 if isinstance(t, tv_tensors.Mask) else (list(op.fill) if isinstance(op.fill, tuple) else op.fill)
        interpolation = InterpolationMode.NEAREST if isinstance(t, tv_tensors.Mask) else InterpolationMode(op.interpolation)
        return TF.rotate(t, float(p["angle"]), interpolation=interpolation, expand=op.expand,
                         center=list(op.center) if op.center else None, fill=fill)

    return fn


def tv_affine(op, p):
    def fn(t):
        fill = 0 if isinstance(t, tv_tensors.Mask) else op.fill
        interpolation = InterpolationMode.NEAREST if isinstance(t, tv_tensors.Mask) else InterpolationMode(op.interpolation)
        return TF.affine(t, float(p["angle"]), [int(p["translate_x"]), int(p["translate_y"])], float(p["scale"]),
                         [float(p["shear_x"]), float(p["shear_y"])], interpolation=interpolation, fill=fill,
                         center=list(op.center) if op.center else None)

    return fn


BATCH_CASES = [  # (op, its torchvision oracle)
    (A.HorizontalFlip(), tv_flip),
    (A.VerticalFlip(), tv_flip),
    (A.RandomRotation(40), tv_rotate),
    (A.RandomRotation(30, interpolation="bilinear", center=(10.0, 30.0), fill=20), tv_rotate),
    (A.RandomAffine(25, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(-8, 8, -4, 4)), tv_affine),
    (A.RandomAffine(10, scale=(0.8, 1.2), interpolation="bilinear", center=(40.0, 5.0)), tv_affine),
]


# detection ops: their oracles also take the sample's fields before the op (the IoU crop's boxes)
def _tv_fill(op, t):
    if isinstance(t, tv_tensors.Mask):
        return 0
    return list(op.fill) if isinstance(op.fill, tuple) else op.fill


def tv_iou_crop(op, p, before):
    xyxy = convert_boxes(before["boxes"], op.binding.type_of("boxes").format, "xyxy")
    cx, cy = (xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2
    top, left, height, width = p["top"], p["left"], p["height"], p["width"]
    within = (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)  # torchvision's test

    def fn(t):
        if not p["crop"]:
            return t
        out = TF.crop(t, top, left, height, width)
        if isinstance(out, tv_tensors.BoundingBoxes):
            out[~within] = 0  # torchvision marks them degenerate
        return out

    return fn


def tv_zoom_out(op, p, before):  # not drawn (1 - p): torchvision's transform is not called
    return lambda t: TF.pad(t, list(p["padding"]), fill=_tv_fill(op, t)) if any(p["padding"]) else t


def tv_detection_resize(op, p, before):
    return tv_resize(op, p)


def tv_letterbox(op, p, before):
    return lambda t: TF.pad(tv_detection_resize(op, p, before)(t), list(p["padding"]), fill=_tv_fill(op, t))


# -- record files written by their own formats' rules (test_source_recordio, test_source_tfrecord...) --
def dmlc_write_record(f, payload: bytes) -> None:
    """dmlc::RecordIOWriter::WriteRecord: split where the magic sits at a 4-byte aligned position."""
    magic = struct.pack("<I", MAGIC)
    start = 0
    for i in range(0, len(payload) // 4 * 4, 4):
        if payload[i:i + 4] == magic:
            f.write(magic + struct.pack("<I", ((1 if start == 0 else 2) << 29) | (i - start)) + payload[start:i])
            start = i + 4
    rest = payload[start:]
    f.write(magic + struct.pack("<I", ((3 if start else 0) << 29) | len(rest)) + rest)
    f.write(b"\0" * (-len(rest) % 4))


def im2rec_pack(label: float | list[float], ident: int, image: bytes) -> bytes:
    """mxnet.recordio.pack: IRHeader(flag, label, id, id2), the label array when flag > 0, the image."""
    if isinstance(label, list):
        return IR_HEADER.pack(len(label), 0.0, ident, 0) + np.asarray(label, "<f4").tobytes() + image
    return IR_HEADER.pack(0, float(label), ident, 0) + image


def write_rec(path: Path, items: list[tuple[float | list[float], int, bytes]]) -> Path:
    """A .rec and its .idx ("key<TAB>offset", as MXIndexedRecordIO writes it)."""
    idx = path.with_suffix(".idx")
    with open(path, "wb") as f, open(idx, "w") as fi:
        for key, (label, ident, image) in enumerate(items):
            fi.write(f"{key}\t{f.tell()}\n")
            dmlc_write_record(f, im2rec_pack(label, ident, image))
    return idx


def make_rec(folder: Path, split: bool = True) -> tuple[Path, list]:
    items = [(float(i % 3), i, jpeg_bytes(photo_like(36, 44 + 2 * i, seed=10 + i), quality=90)) for i in range(5)]
    if split:  # the id holds the magic: the writer splits the record in parts
        items[2] = (2.0, MAGIC | (MAGIC << 32), items[2][2])
    path = folder / "train.rec"
    write_rec(path, items)
    return path, items


TFRECORD_TEXTS = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead", "électrique"]


def write_imagenet_tfrecord(path: Path, count: int = 6) -> list[dict]:
    """ImageNet-convention records (image/encoded, image/class/label, text, boxes) by the real writer
    (the `tfrecord` package: its tests importorskip it)."""
    import tfrecord

    writer = tfrecord.TFRecordWriter(str(path))
    rows = []
    for i in range(count):
        image = jpeg_bytes(photo_like(40 + 4 * i, 56, seed=i), quality=90)
        boxes = [[0.1 * j, 0.2, 0.5 + 0.1 * j, 0.9] for j in range(i % 3)]
        datum = {"image/encoded": (image, "byte"), "image/class/label": (i % 4, "int"),
                 "image/class/text": (TFRECORD_TEXTS[i].encode(), "byte")}
        for k, name in enumerate(TFRECORD_BOXES):
            datum[name] = ([b[k] for b in boxes], "float")
        writer.write(datum)
        rows.append({"image": image, "label": i % 4, "text": TFRECORD_TEXTS[i], "boxes": boxes})
    writer.close()
    return rows


def small_image_pipeline(image_folder: Path, batch_size: int = 2) -> mp.Pipeline:
    """A small image pipeline (crop, flip, normalise; seed 3) for loader-level tests."""
    return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image("pillow")},
                       [A.RandomResizedCrop(24), A.HorizontalFlip(), A.Normalize()], batch_size=batch_size, seed=3,
                       device="cpu")


def batch_images(batches) -> list[torch.Tensor]:
    """The image tensor of every batch, copied (the loader may reuse its buffers)."""
    return [b["image"].clone() for b in batches]
