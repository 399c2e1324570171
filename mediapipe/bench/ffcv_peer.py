"""FFCV (1.0.2) as a peer of image-train and image-eval, on the CPU, when it is installed.

FFCV reads only its own format: each dataset a row runs on is written once into a ``.beton``
(beside a built-in dataset, else under the bench cache), at the max side and JPEG quality the
``--as-shards`` copy is converted with, and named by the data's identity (files, sizes, mtimes,
labels, settings), so a changed folder is written again. `bench_conversions` times FFCV's
DatasetWriter against `mediapipe convert` on the same folder and workers, in the run;
`ffcv_quality` scores FFCV's own output against the full-decode reference (the PSNR column).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.bench import datasets
from mediapipe.bench.fused_quality import PSNR_CAP
from mediapipe.bench.image_data import (
    EVAL,
    IMAGE_EXTENSIONS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ShardImage,
    converted_images,
    dataset_layout,
    flat_rows,
    has_class_folders,
    manifest_rows,
    sized,
)
from mediapipe.bench.long_epoch import passes
from mediapipe.bench.streams import EpochStream, Stream, touch_image
from mediapipe.errors import SourceError

BACKEND = "ffcv"
MIN_PAGE_BYTES = 8 << 20  # FFCV's default page (4 x 2 MiB); a sample must fit in one page
PAGE_MARGIN_BYTES = 1 << 20
PLACEHOLDER = np.zeros((8, 8, 3), np.uint8)  # written for an image that failed; the .beton is then discarded
Row = tuple[str | ShardImage, int]  # (a file's path or an image in a shard, its class label)

FFCV_HINT = ("apt-get install -y --no-install-recommends pkg-config libopencv-dev libturbojpeg0-dev g++; "
             "pip install ffcv==1.0.2")  # how to make FFCV importable here


@dataclass(frozen=True)
class BetonSettings:
    """How images go into the .beton: `RGBImageField`'s arguments."""

    max_resolution: int | None
    jpeg_quality: int
    write_mode: str = "jpg"


def as_shards_settings() -> BetonSettings:
    """The max side and JPEG quality of the ``--as-shards`` conversion (`datasets.SHARD_TRANSCODE`)."""
    from mediapipe.dataset.transcode import TranscodeOptions

    options = TranscodeOptions(**datasets.SHARD_TRANSCODE)
    return BetonSettings(options.image_max_side, options.jpeg_quality)


def ffcv_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ffcv")
    except PackageNotFoundError:
        return "?"


def import_ffcv() -> None:
    """Import FFCV, or say why it cannot be (a row's reason, not a crash)."""
    try:
        import ffcv  # noqa: F401
        import ffcv.loader  # noqa: F401  (numba, OpenCV and libturbojpeg load here)
    except Exception as err:  # noqa: BLE001 - any failure to import is the reason to report
        raise NotImplementedError(f"not available: ffcv cannot be imported ({type(err).__name__}: {err}; "
                                  f"{FFCV_HINT})") from err


# -- what goes into the .beton ---------------------------------------------------------------------
def class_folder_rows(data: Path) -> list[Row]:
    """(path, class index) as torchvision's ImageFolder lists them: sorted class folders, their images."""
    classes = sorted(p.name for p in data.iterdir() if p.is_dir() and not p.name.startswith("."))
    rows: list[Row] = []
    for label, name in enumerate(classes):
        rows += [(str(p), label) for p in sorted((data / name).rglob("*"))
                 if p.is_file() and not p.name.startswith(".") and p.suffix.lower().lstrip(".") in IMAGE_EXTENSIONS]
    return rows


def image_rows(data: Path) -> list[Row]:
    """Every image of a folder, manifest or converted dataset, with its label."""
    layout = dataset_layout(data)
    if layout == "converted":
        return [(item, item.label) for item in converted_images(data)]
    if layout == "manifest":
        return list(manifest_rows(data))
    return class_folder_rows(data) if has_class_folders(data) else list(flat_rows(data))


def _where(location: str | ShardImage) -> str:
    return f"{location.tar}@{location.offset}" if isinstance(location, ShardImage) else location


def read_row(location: str | ShardImage) -> bytes:
    if isinstance(location, ShardImage):
        with open(location.tar, "rb") as f:
            f.seek(location.offset)
            return f.read(location.size)
    return Path(location).read_bytes()


def data_identity(data: Path, rows: list[Row], settings: BetonSettings) -> str:
    """A digest of what the .beton holds: the data's path, each image's place, size, mtime and
    label, the writer's settings and FFCV's version. Any change names another .beton."""
    digest = hashlib.sha256(json.dumps({"data": str(data.resolve()), "settings": asdict(settings),
                                        "ffcv": ffcv_version()}, sort_keys=True).encode())
    stats: dict[str, os.stat_result] = {}
    for location, label in rows:
        path = location.tar if isinstance(location, ShardImage) else location
        if path not in stats:
            try:
                stats[path] = os.stat(path)
            except OSError as err:
                raise SourceError(path, f"listed in {data} but cannot be read ({err.strerror})") from err
        st = stats[path]
        digest.update(f"{_where(location)}\0{st.st_size}\0{st.st_mtime_ns}\0{label}\n".encode())
    return digest.hexdigest()[:16]


def beton_dir(data: Path) -> Path:
    """Beside a built-in dataset (made by `mediapipe.bench.datasets`); else the bench cache, so
    that the bench never writes into a user's folder."""
    if data.is_dir() and (data / datasets.MARKER).is_file():
        return data.parent
    return datasets.cache_dir() / "bench" / "ffcv"


def beton_path(data: Path, key: str) -> Path:
    return beton_dir(data) / f"{data.name}-ffcv-{key}.beton"


def _remove_stale(dest: Path, data: Path) -> None:
    """Earlier .beton files of the same data (another identity): never read again."""
    pattern = re.compile(rf"{re.escape(data.name)}-ffcv-[0-9a-f]{{16}}\.beton")
    for other in dest.parent.iterdir():
        if other != dest and pattern.fullmatch(other.name):
            other.unlink(missing_ok=True)


def ensure_beton(data: Path, workers: int) -> Path:
    """The .beton of ``data``: reused while its identity holds, else written (atomically) with
    ``workers`` writer processes and the earlier ones of the same data removed."""
    data = Path(data)
    rows = image_rows(data)
    if not rows:
        raise SourceError(str(data), "no images to write into FFCV's .beton")
    settings = as_shards_settings()
    dest = beton_path(data, data_identity(data, rows, settings))
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    try:
        write_beton(rows, tmp, settings, workers)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _remove_stale(dest, data)
    return dest


class _BetonImages:
    """The rows as FFCV's writer reads them, (RGB uint8 HxWx3, label). An image that fails is
    noted in ``failures`` (a folder: the writer's worker processes share nothing else) and
    written as a placeholder, since an exception in a writer process hangs FFCV's writer."""

    def __init__(self, rows: list[Row], failures: Path) -> None:
        self.rows, self.failures = rows, failures

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        from PIL import Image

        location, label = self.rows[index]
        try:
            with Image.open(io.BytesIO(read_row(location))) as im:
                return np.asarray(im.convert("RGB")), int(label)
        except Exception as err:  # noqa: BLE001 - reported after the writer finishes
            (self.failures / f"{index}.txt").write_text(f"{_where(location)}\n{type(err).__name__}: {err}")
            return PLACEHOLDER, int(label)


def page_bytes(rows: list[Row], settings: BetonSettings) -> int:
    """A page size (a power of two) that holds the largest image even stored uncompressed: FFCV
    cannot split a sample over pages, and its writer hangs when one does not fit."""
    from PIL import Image

    largest = 0
    for location, _ in rows:
        try:
            if isinstance(location, ShardImage):
                im = Image.open(io.BytesIO(read_row(location)))
            else:
                im = Image.open(location)
            with im:
                width, height = im.size
        except Exception:  # noqa: BLE001 - the write reports it, with the reason
            continue
        if settings.max_resolution is not None and max(width, height) > settings.max_resolution:
            scale = settings.max_resolution / max(width, height)
            width, height = int(width * scale), int(height * scale)
        largest = max(largest, width * height * 3)
    need = max(MIN_PAGE_BYTES, largest + PAGE_MARGIN_BYTES)
    return 1 << (need - 1).bit_length()


def write_beton(rows: list[Row], dest: Path, settings: BetonSettings, workers: int) -> None:
    """FFCV's DatasetWriter with ``workers`` processes (at least one): RGBImageField with the
    settings, IntField labels. A failed image fails the write, naming it and why."""
    import_ffcv()
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    fields = {"image": RGBImageField(write_mode=settings.write_mode, max_resolution=settings.max_resolution,
                                     jpeg_quality=settings.jpeg_quality), "label": IntField()}
    with tempfile.TemporaryDirectory(prefix="mediapipe-ffcv-failures-") as failures:
        writer = DatasetWriter(str(dest), fields, page_size=page_bytes(rows, settings), num_workers=max(1, workers))
        with contextlib.redirect_stderr(io.StringIO()):  # its tqdm bar would cut through the bench's own
            writer.from_indexed_dataset(_BetonImages(rows, Path(failures)))
        failed = sorted(Path(failures).iterdir(), key=lambda p: int(p.stem))
        if failed:
            where, reason = failed[0].read_text().split("\n", 1)
            raise SourceError(where, f"cannot be written into FFCV's .beton: {reason} ({len(failed)} of {len(rows)} "
                                     "images failed; fix or remove them)")


# -- the loader ------------------------------------------------------------------------------------
def ffcv_pipelines(scenario: str) -> dict[str, list[Any]]:
    """The scenario in FFCV's operations, in its own test's order (ToTensor before the image
    transforms hangs FFCV's loader: a bug in its graph grouping)."""
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor, ToTorchImage

    mean = np.array(IMAGENET_MEAN) * 255
    std = np.array(IMAGENET_STD) * 255
    scenario, side = sized(scenario)
    if scenario == EVAL:  # the centre 224/256 of the shorter side, resized to 224: resize 256 + centre crop 224
        image = [CenterCropRGBImageDecoder((224, 224), ratio=224 / 256)]
    else:
        image = [RandomResizedCropRGBImageDecoder((side, side)), RandomHorizontalFlip()]
    image += [NormalizeImage(mean, std, np.float32), ToTensor(), ToTorchImage()]
    return {"image": image, "label": [IntDecoder(), ToTensor()]}


def ffcv_threads(workers: int) -> int:
    """FFCV has no in-process mode (0 means every core to it): ``--workers 0`` runs 1 thread."""
    return max(1, workers)


def open_ffcv(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
              options: dict[str, Any]) -> Stream:
    """FFCV's Loader on the data's .beton (written first if missing): ``workers`` threads,
    os_cache, shuffled (in order for image-eval), drop_last, the small dataset repeated as one
    long epoch as for the other rows (``indices``)."""
    import_ffcv()
    if device != "cpu":
        raise NotImplementedError("not applicable: the FFCV peer runs on the CPU (see its cpu row)")
    from ffcv.loader import Loader, OrderOption

    beton = ensure_beton(Path(data), workers=ffcv_threads(workers))
    samples = len(image_rows(Path(data)))
    indices = np.tile(np.arange(samples), passes(options, batch_size, samples))
    loader = Loader(str(beton), batch_size=batch_size, num_workers=ffcv_threads(workers),
                    order=OrderOption.SEQUENTIAL if scenario == EVAL else OrderOption.RANDOM, os_cache=True,
                    drop_last=True, indices=indices, seed=0, pipelines=ffcv_pipelines(scenario))
    return EpochStream(lambda: loader, buffered=loader.batches_ahead + 1,
                       samples=lambda batch: touch_image({"image": batch[0]}))


# -- what FFCV's output costs in quality ------------------------------------------------------------
QUALITY_SAMPLES = 48  # images per dataset, spread over it (as the fused decode's PSNR)
QUALITY_SIDE = 224
QUALITY_RATIO = 224 / 256


def center_box(height: int, width: int, ratio: float) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the centre crop FFCV's `CenterCropRGBImageDecoder` takes: a
    square of ``int(ratio * shorter side)``, its corner at half the margins (floored)."""
    side = int(ratio * min(height, width))
    return (height - side) // 2, (width - side) // 2, side, side


def reference_crop(image: np.ndarray, box: tuple[int, int, int, int], stored: tuple[int, int], side: int) -> np.ndarray:
    """The box (in the ``stored`` (height, width) of the .beton) of the source ``image`` (HxWx3
    uint8, fully decoded), mapped onto the source's own size, resized to ``side`` with the
    antialiased bilinear resize this library's ops use: the reference FFCV's output is scored against."""
    import torch

    from mediapipe.augment.functional.geometry import resize_image

    sy, sx = image.shape[0] / stored[0], image.shape[1] / stored[1]
    top, left, h, w = box
    y0, x0 = round(top * sy), round(left * sx)
    y1, x1 = max(y0 + 1, round((top + h) * sy)), max(x0 + 1, round((left + w) * sx))
    region = torch.from_numpy(np.ascontiguousarray(image[y0:y1, x0:x1])).permute(2, 0, 1)
    return resize_image(region, (side, side), "bilinear", antialias=True).permute(1, 2, 0).numpy()


def ffcv_quality(data: Path, beton: Path, samples: int = QUALITY_SAMPLES) -> dict[str, Any]:
    """FFCV's own output against the full-decode reference the fused decode's PSNR uses: its
    `CenterCropRGBImageDecoder` (its JPEG decode of the .beton's re-encoded image, crop and
    resize, the path its RandomResizedCrop decoder runs on a random box, which its loader does
    not expose) against a Pillow decode of the source image, the same box, `reference_crop`.
    PSNR in dB (median, 10th percentile, min) and the largest absolute error."""
    import_ffcv()
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.reader import Reader
    from ffcv.transforms import ToTensor
    from PIL import Image

    rows = image_rows(Path(data))
    picks = np.arange(0, len(rows), max(1, len(rows) // samples))[:samples]
    meta = Reader(str(beton)).metadata["f0"]  # the fields in `write_beton`'s order: image, label
    loader = Loader(str(beton), batch_size=len(picks), num_workers=1, order=OrderOption.SEQUENTIAL,
                    indices=picks, drop_last=False, pipelines={
                        "image": [CenterCropRGBImageDecoder((QUALITY_SIDE, QUALITY_SIDE), ratio=QUALITY_RATIO),
                                  ToTensor()], "label": [IntDecoder(), ToTensor()]})
    got = np.concatenate([batch[0].numpy() for batch in loader])
    scores, worst = [], 0
    for out, index in zip(got, picks):
        stored = (int(meta[index]["height"]), int(meta[index]["width"]))
        with Image.open(io.BytesIO(read_row(rows[index][0]))) as im:
            source = np.asarray(im.convert("RGB"))
        want = reference_crop(source, center_box(*stored, QUALITY_RATIO), stored, QUALITY_SIDE)
        error = out.astype(np.int32) - want.astype(np.int32)
        mse = float(np.mean(error.astype(np.float64) ** 2))
        scores.append(PSNR_CAP if mse == 0 else min(PSNR_CAP, 10 * float(np.log10(255**2 / mse))))
        worst = max(worst, int(np.abs(error).max()))
    return {"samples": len(scores), "op": "CenterCropRGBImageDecoder", "median_db": float(np.median(scores)),
            "p10_db": float(np.percentile(scores, 10)), "min_db": float(min(scores)), "max_abs_error": worst}


# -- conversion time, in the bench run ---------------------------------------------------------------
def _read_all(rows: list[Row]) -> None:
    """Every image read once, so each timed conversion starts from the same (warm) page cache."""
    for location, _ in rows:
        read_row(location)


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _timed(tool: str, does: str, settings: BetonSettings, workers: int, images: int, out: Path,
           run: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    return {"tool": tool, "does": does, "max_side": settings.max_resolution, "jpeg_quality": settings.jpeg_quality,
            "workers": workers, "images": images, "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None, "mb_written": _tree_bytes(out) / 1e6}


def measure_conversions(folder: Path, workers: int) -> list[dict[str, Any]]:
    """images/s of `mediapipe convert` as ``--as-shards`` runs it (JPEGs copied), of the same with
    ``reencode`` (decode and JPEG encode at the same quality: the work FFCV's writer does) and of
    FFCV's DatasetWriter at the same max side and quality, ``workers`` processes each, warm cache."""
    from mediapipe.dataset.convert import convert
    from mediapipe.dataset.transcode import TranscodeOptions

    import_ffcv()
    rows = image_rows(folder)
    settings = as_shards_settings()
    options = TranscodeOptions(**datasets.SHARD_TRANSCODE)
    procs = max(1, workers)
    _read_all(rows)
    results = []
    with tempfile.TemporaryDirectory(prefix="mediapipe-bench-convert-") as tmp:
        for tool, does, opts in (("mediapipe convert", "copy (as --as-shards)", options),
                                 ("mediapipe convert --reencode", "decode + encode", replace(options, reencode=True))):
            out = Path(tmp) / f"shards-{len(results)}"
            results.append(_timed(tool, does, settings, procs, len(rows), out, lambda o=out, t=opts: _convert_or_fail(
                convert(folder, o, shard_size=datasets.SHARD_SIZE, options=t, workers=procs), folder)))
            shutil.rmtree(out, ignore_errors=True)
        out = Path(tmp) / "data.beton"
        results.append(_timed("ffcv DatasetWriter", "decode + encode", settings, procs, len(rows), out,
                              lambda: write_beton(rows, out, settings, procs)))
    return results


def _quality_or_error(data: Path, beton: Path) -> dict[str, Any]:
    """`ffcv_quality`, or why it failed (the speed rows do not depend on it)."""
    try:
        return ffcv_quality(data, beton)
    except Exception as err:  # noqa: BLE001 - FFCV's loader raises whatever its pipeline does
        return {"samples": 0, "error": f"{type(err).__name__}: {err}"}


def _convert_or_fail(result: Any, folder: Path) -> None:
    if result.failures:
        raise SourceError(str(folder), f"mediapipe convert: {len(result.failures)} images failed, first "
                                       f"{result.failures[0]}")


def bench_conversions(live: list[tuple[Any, Any]], data: dict[str, dict[str, Any]],
                      progress: bool = False) -> list[dict[str, Any]]:
    """Before the timed rows: each live ffcv row's .beton (a failure becomes the row's error, so the
    first batch never includes the write), then the conversion times per (folder, workers), for
    the report's "conversion" table. ``live``: (scenario, Result) pairs; ``data``: scenario ->
    data label -> DataSet."""
    from mediapipe.bench.progress import make_progress

    rows = [(s, r) for s, r in live if r.backend == BACKEND and r.error is None]
    if not rows:
        return []
    folders: dict[tuple[str, int], tuple[str, Path]] = {}
    qualities: dict[Path, dict[str, Any]] = {}
    bar = make_progress(len(rows), "datasets", "bench: FFCV .beton files", progress)
    try:
        for scenario, row in rows:
            path = Path(data[scenario.name][row.data].path)
            try:
                beton = ensure_beton(path, workers=ffcv_threads(row.workers))
            except (NotImplementedError, OSError, ValueError) as err:
                row.error = str(err) if str(err).startswith("not ") else f"writing FFCV's .beton: {err}"
            else:
                if beton not in qualities:
                    qualities[beton] = _quality_or_error(path, beton)
                row.quality = qualities[beton]
                if dataset_layout(path) == "folder":
                    folders.setdefault((str(path.resolve()), row.workers), (row.data, path))
            bar.update(1)
    finally:
        bar.close()
    conversions = []
    for (_, workers), (label, path) in folders.items():
        try:
            for entry in measure_conversions(path, workers):
                conversions.append({"data": label, **entry})
        except (NotImplementedError, OSError, ValueError) as err:
            conversions.append({"data": label, "workers": max(1, workers), "error": f"{type(err).__name__}: {err}"})
    return conversions
