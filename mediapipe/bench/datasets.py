"""Built-in sample datasets, generated once into the user cache directory, deterministically.

``sample-images``: photographic-looking JPEGs (`mediapipe.synthetic.photo_like`) in ten class
folders, with ImageNet-like sizes (shorter side 300-500, common aspect ratios), 4:2:0 chroma
and ImageNet-like qualities. To keep the first run short, each of a few dozen large base
pictures yields many images by cropping, scaling and mirroring, so files differ in content,
size and quality as a real dataset's do. ``sample-photos``: the same kind of pictures, more
varied, as real photo collections are: sizes from 300 to 1200 px, smooth to busy content,
4:2:0, 4:2:2 and 4:4:4 chroma and grey, baseline and progressive, some with restart markers
or camera EXIF. ``sample-detection``: a COCO-format detection set (``annotations.json`` and
``images/``), COCO-sized photos (480-640 x 360-480) with 1-8 objects pasted at known boxes
(`mediapipe.synthetic.detection`). ``sample-video`` (a key frame every 60 frames),
``sample-video-gop16`` (the same clips, a key frame every 16), ``sample-video-varied`` (short
clips of 48-120 frames, 240p-720p, four containers, a key frame every 48-60 frames, as real video
datasets have), ``sample-video-encoders`` (short clips from libaom, rav1e and FFmpeg's libsvtav1
defaults, key frames every 24 to 250 frames; needs imageio-ffmpeg) and ``sample-audio`` are made by
``mediapipe.bench.video_sets``, ``video_encoders`` and ``audio``. A dataset is written to a temporary folder and renamed
when complete, so an interrupted generation never leaves a half dataset behind.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_IMAGES_VERSION = 3
IMAGE_COUNT = 1000
IMAGE_CLASSES = 10
BASE_SIZE = 900  # base pictures are BASE_SIZE x BASE_SIZE; the longest ImageNet-like side is 888
IMAGES_PER_BASE = 40  # images cut from each drawn base picture (drawing a base is the slow part)
QUALITIES = (75, 85, 90, 92, 95)  # JPEG quality and how often it occurs, roughly as in ImageNet
QUALITY_WEIGHTS = (0.15, 0.2, 0.3, 0.2, 0.15)
VIDEO_COUNT, VIDEO_HEIGHT, VIDEO_SECONDS = 12, 360, 4.0
AUDIO_COUNT = 200
VARIED_VIDEO_COUNT = 64
ENCODER_VIDEO_COUNT = 24
DETECTION_COUNT = 500
BUILTIN = {"sample-images": "image", "sample-photos": "image", "sample-video": "video",
           "sample-video-gop16": "video", "sample-video-varied": "video", "sample-video-encoders": "video",
           "sample-audio": "audio",
           "sample-detection": "detection"}
# frames between key frames: 2 s at 30 fps, as camera and web video; 16, as `mediapipe convert
# --keyframe-interval 16` writes, so a random clip decodes a short lead-in
VIDEO_GOPS = {"sample-video": 60, "sample-video-gop16": 16}
MARKER = ".complete"
SHARDS_SUFFIX = "-shards"  # sample-images-...-shards: the converted copy, beside the folder
SHARD_SIZE = "32MB"  # a few shards for the 1000 sample images (about 100 MB), as a real dataset has many
SHARD_TRANSCODE = {"video_codec": "copy", "audio_codec": "copy"}  # --as-shards: TranscodeOptions(**this), JPEGs copied


def cache_dir() -> Path:
    """``$MEDIAPIPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/mediapipe``, else ``~/.cache/mediapipe``."""
    if os.environ.get("MEDIAPIPE_CACHE_DIR"):
        return Path(os.environ["MEDIAPIPE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mediapipe"


def _progress(total: int, unit: str, desc: str, enabled: bool) -> Any:
    from mediapipe.bench.progress import make_progress

    return make_progress(total, unit, desc, enabled)


def prepare(name: str, *, root: Path | None = None, count: int | None = None, seed: int = 0,
            progress: bool = True) -> Path:
    """The path of built-in dataset ``name``, generated first if the cache lacks it."""
    if name not in BUILTIN:
        raise ValueError(f"unknown dataset {name!r}; built in: {', '.join(BUILTIN)}")
    root = Path(root) if root is not None else cache_dir() / "bench"
    if name == "sample-images":
        return sample_images(root, count or IMAGE_COUNT, seed, progress)
    if name == "sample-photos":
        return sample_photos(root, count or IMAGE_COUNT, seed, progress)
    if name == "sample-detection":
        return sample_detection(root, count or DETECTION_COUNT, seed, progress)
    return _sample_media(name, root, count, seed, progress)


# -- images --------------------------------------------------------------------------------
def _image_plan(count: int, seed: int) -> list[list[tuple[int, int, int, int]]]:
    """Per base picture: (index, height, width, quality) of the images cut from it."""
    from mediapipe.synthetic import imagenet_like_sizes

    rng = np.random.default_rng([seed, SAMPLE_IMAGES_VERSION])
    sizes = imagenet_like_sizes(rng, count)
    qualities = rng.choice(QUALITIES, size=count, p=QUALITY_WEIGHTS)
    bases = max(1, -(-count // IMAGES_PER_BASE))
    plan: list[list[tuple[int, int, int, int]]] = [[] for _ in range(bases)]
    for i, ((h, w), q) in enumerate(zip(sizes, qualities)):
        plan[i % bases].append((i, h, w, int(q)))
    return plan


def _make_base(args: tuple[Path, int, int, list[tuple[int, int, int, int]]]) -> tuple[int, int]:
    """Draw one base picture and write the images cut from it; returns (images, bytes)."""
    from PIL import Image

    from mediapipe.synthetic import jpeg_bytes, photo_like

    dest, seed, base, items = args
    picture = Image.fromarray(photo_like(BASE_SIZE, BASE_SIZE, seed * 1_000_003 + base))
    total = 0
    for index, height, width, quality in items:
        rng = np.random.default_rng([seed, SAMPLE_IMAGES_VERSION, index])
        # cut at native resolution: a downscale would smooth away the fine texture that makes
        # the JPEG sizes (and decode costs) photographic
        ch, cw = height, width
        top, left = int(rng.integers(0, BASE_SIZE - ch + 1)), int(rng.integers(0, BASE_SIZE - cw + 1))
        image = picture.crop((left, top, left + cw, top + ch))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        data = jpeg_bytes(np.asarray(image), quality=quality)
        folder = dest / f"class{index % IMAGE_CLASSES:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"img{index:06d}.jpg").write_bytes(data)
        total += len(data)
    return len(items), total


def sample_images(root: Path, count: int = IMAGE_COUNT, seed: int = 0, progress: bool = True,
                  processes: int | None = None) -> Path:
    """``count`` JPEGs under ``root/sample-images-v<version>-n<count>-s<seed>``, made once."""
    dest = Path(root) / f"sample-images-v{SAMPLE_IMAGES_VERSION}-n{count}-s{seed}"
    tasks = [(seed, b, items) for b, items in enumerate(_image_plan(count, seed))]
    info = {"name": "sample-images", "version": SAMPLE_IMAGES_VERSION, "count": count, "seed": seed,
            "classes": IMAGE_CLASSES}
    return _generate(dest, _make_base, tasks, count, info, progress, processes)


def _generate(dest: Path, make: Any, tasks: list[tuple], count: int, info: dict[str, Any], progress: bool,
              processes: int | None) -> Path:
    """Run ``make((folder, *task))`` for every task into a temporary folder, then rename it to
    ``dest`` with its completion marker; an existing complete ``dest`` is returned as it is."""
    if (dest / MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    bar = _progress(count, "images", f"generating {dest.name}", progress)
    try:
        for done, nbytes in _map(make, [(tmp, *task) for task in tasks], processes):
            bar.update(done, bytes=nbytes)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
    (tmp / MARKER).write_text(json.dumps(info))
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# -- varied photos --------------------------------------------------------------------------------
SAMPLE_PHOTOS_VERSION = 1
PHOTO_BASE_SIZE = 1200  # base pictures are 1200 x 1200: images are cut at native resolution
PHOTO_SIDES = (300, 1200)  # both sides of every image within this range, in pixels
PHOTO_ASPECTS = (1.0, 4 / 3, 3 / 2, 16 / 9)
PHOTO_DETAIL = (0.4, 1.5)  # photo_like's detail, drawn per base picture: smooth to busy
PHOTO_SUBSAMPLING = ((2, 0.6), (1, 0.2), (0, 0.2))  # Pillow's 4:2:0, 4:2:2, 4:4:4 and their shares
PHOTO_SHARES = {"progressive": 0.3, "restart": 0.2, "exif": 0.3, "grey": 0.08}  # independent draws


def _photo_plan(count: int, seed: int) -> list[list[dict[str, Any]]]:
    """Per base picture: the images cut from it, each with its size and encoding."""
    rng = np.random.default_rng([seed, SAMPLE_PHOTOS_VERSION])
    bases = max(1, -(-count // IMAGES_PER_BASE))
    plan: list[list[dict[str, Any]]] = [[] for _ in range(bases)]
    sampling, weights = zip(*PHOTO_SUBSAMPLING)
    for i in range(count):
        long = int(rng.integers(PHOTO_SIDES[0], PHOTO_SIDES[1] + 1))
        short = max(PHOTO_SIDES[0], round(long / float(rng.choice(PHOTO_ASPECTS))))
        height, width = (short, long) if rng.random() < 0.6 else (long, short)
        item = {"index": i, "height": height, "width": width,
                "quality": int(rng.choice(QUALITIES, p=QUALITY_WEIGHTS)),
                "subsampling": int(rng.choice(sampling, p=weights)),
                **{trait: bool(rng.random() < share) for trait, share in PHOTO_SHARES.items()}}
        plan[i % bases].append(item)
    return plan


def _photo_exif(rng: np.random.Generator) -> bytes:
    """A camera-like EXIF block (make, model, date, orientation 1 and a few KB of notes)."""
    from PIL import Image

    exif = Image.Exif()
    exif[0x010F] = str(rng.choice(["Canon", "NIKON CORPORATION", "SONY", "Apple", "FUJIFILM"]))
    exif[0x0110] = f"Model {int(rng.integers(1, 99))}"
    exif[0x0131] = "mediapipe sample-photos"
    exif[0x0132] = f"20{int(rng.integers(10, 25))}:0{int(rng.integers(1, 9))}:1{int(rng.integers(0, 9))} 12:00:00"
    exif[0x0112] = 1
    exif[0x010E] = "notes " * int(rng.integers(100, 2000))  # camera blocks carry kilobytes of maker data
    return exif.tobytes()


def _make_photo_base(args: tuple[Path, int, int, list[dict[str, Any]]]) -> tuple[int, int]:
    """Draw one base picture and write the varied JPEGs cut from it; returns (images, bytes)."""
    from PIL import Image

    from mediapipe.synthetic import photo_like

    dest, seed, base, items = args
    detail = float(np.random.default_rng([seed, SAMPLE_PHOTOS_VERSION, 1_000_000 + base]).uniform(*PHOTO_DETAIL))
    picture = Image.fromarray(photo_like(PHOTO_BASE_SIZE, PHOTO_BASE_SIZE, seed * 1_000_033 + base, detail))
    total = 0
    for item in items:
        rng = np.random.default_rng([seed, SAMPLE_PHOTOS_VERSION, item["index"]])
        height, width = item["height"], item["width"]
        top = int(rng.integers(0, PHOTO_BASE_SIZE - height + 1))
        left = int(rng.integers(0, PHOTO_BASE_SIZE - width + 1))
        image = picture.crop((left, top, left + width, top + height))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if item["grey"]:
            image = image.convert("L")
        options: dict[str, Any] = {"quality": item["quality"], "progressive": item["progressive"]}
        if not item["grey"]:
            options["subsampling"] = item["subsampling"]
        if item["restart"]:
            options["restart_marker_rows" if rng.random() < 0.5 else "restart_marker_blocks"] = int(rng.integers(1, 8))
        if item["exif"]:
            options["exif"] = _photo_exif(rng)
        buf = io.BytesIO()
        image.save(buf, format="JPEG", **options)
        folder = dest / f"class{item['index'] % IMAGE_CLASSES:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"img{item['index']:06d}.jpg").write_bytes(buf.getvalue())
        total += buf.tell()
    return len(items), total


def sample_photos(root: Path, count: int = IMAGE_COUNT, seed: int = 0, progress: bool = True,
                  processes: int | None = None) -> Path:
    """``count`` varied JPEGs under ``root/sample-photos-v<version>-n<count>-s<seed>``, made once:
    sizes from 300 to 1200 px, 4:2:0, 4:2:2 and 4:4:4 chroma and grey, baseline and
    progressive, some with restart markers or camera EXIF, smooth to busy content."""
    dest = Path(root) / f"sample-photos-v{SAMPLE_PHOTOS_VERSION}-n{count}-s{seed}"
    tasks = [(seed, b, items) for b, items in enumerate(_photo_plan(count, seed))]
    info = {"name": "sample-photos", "version": SAMPLE_PHOTOS_VERSION, "count": count, "seed": seed,
            "classes": IMAGE_CLASSES}
    return _generate(dest, _make_photo_base, tasks, count, info, progress, processes)


def _map(fn: Any, tasks: list[Any], processes: int | None) -> Iterator[Any]:
    """``fn`` over ``tasks`` on every core (a process pool), results as they finish."""
    processes = processes or min(len(tasks), os.cpu_count() or 1)
    if processes <= 1:
        yield from map(fn, tasks)
        return
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with ctx.Pool(processes) as pool:
        yield from pool.imap_unordered(fn, tasks)


def sample_image_shards(folder: Path, progress: bool = True) -> Path:
    """The converted copy of a sample-images folder (``<folder>-shards``), made once with
    `mediapipe.dataset.convert.convert`: JPEGs are copied byte for byte, so reading from it differs
    from reading the folder only in the layout (a few tar shards against one file per image)."""
    from mediapipe.dataset.convert import convert
    from mediapipe.dataset.transcode import TranscodeOptions

    folder = Path(folder)
    dest = folder.with_name(folder.name + SHARDS_SUFFIX)
    if (dest / MARKER).is_file():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        result = convert(folder, tmp, shard_size=SHARD_SIZE, options=TranscodeOptions(**SHARD_TRANSCODE),
                         workers=max(1, min(4, os.cpu_count() or 1)), progress=progress)
        if result.failures:
            raise RuntimeError(f"converting {folder} to shards: {len(result.failures)} images failed, first "
                               f"{result.failures[0]}")
        (tmp / MARKER).write_text(json.dumps({"name": "sample-images", "from": folder.name,
                                              "shard_size": SHARD_SIZE}))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# -- detection ------------------------------------------------------------------------------------
SAMPLE_DETECTION_VERSION = 1


def sample_detection(root: Path, count: int = DETECTION_COUNT, seed: int = 0, progress: bool = True) -> Path:
    """``count`` COCO-sized photos with objects at known boxes, polygons and RLE, and their
    ``annotations.json``, under ``root/sample-detection-v<version>-n<count>-s<seed>``, made once."""
    from mediapipe.synthetic.detection import write_detection_dataset

    dest = Path(root) / f"sample-detection-v{SAMPLE_DETECTION_VERSION}-n{count}-s{seed}"
    if (dest / MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    bar = _progress(count, "images", f"generating {dest.name}", progress)
    try:
        write_detection_dataset(tmp, count, seed, heights=(360, 480), widths=(480, 640), objects=(1, 8), empty=0.05,
                                crowd=0.05, quality=90, images_per_background=20,
                                on_image=lambda nbytes: bar.update(1, bytes=nbytes))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
    (tmp / MARKER).write_text(json.dumps({"name": "sample-detection", "version": SAMPLE_DETECTION_VERSION,
                                          "count": count, "seed": seed}))
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# -- video and audio: made by their benchmark modules -------------------------------------------
@dataclass(frozen=True)
class _MediaSet:
    """How a built-in video or audio dataset is made (its maker, ``module.function`` in
    ``mediapipe.bench``; files, unit, options)."""

    maker: str
    count: int
    unit: str
    options: Mapping[str, Any] = field(default_factory=dict)
    suffix: str = ""


def _fixed_videos(gop: int) -> _MediaSet:
    """Videos of VIDEO_HEIGHT and VIDEO_SECONDS (read when they are made), a key frame every ``gop``."""
    options = {"height": VIDEO_HEIGHT, "seconds": VIDEO_SECONDS, "gop": gop}
    return _MediaSet("video_sets.make_sample_videos", VIDEO_COUNT, "videos", options,
                     f"-h{VIDEO_HEIGHT}-t{VIDEO_SECONDS:g}")


# built-in video or audio dataset -> how it is made, asked when it is made
MEDIA_SETS: dict[str, Callable[[], _MediaSet]] = {
    **{name: functools.partial(_fixed_videos, gop) for name, gop in VIDEO_GOPS.items()},
    "sample-video-varied": lambda: _MediaSet("video_sets.make_varied_videos", VARIED_VIDEO_COUNT, "videos",
                                             suffix="-v2"),
    "sample-video-encoders": lambda: _MediaSet("video_encoders.make_encoder_videos", ENCODER_VIDEO_COUNT, "videos"),
    "sample-audio": lambda: _MediaSet("audio.make_sample_audio", AUDIO_COUNT, "files"),
}


def _sample_media(name: str, root: Path, count: int | None, seed: int, progress: bool) -> Path:
    media = MEDIA_SETS[name]()
    module, _, function = media.maker.rpartition(".")
    module_name = f"mediapipe.bench.{module}"
    try:
        make = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as err:
        raise RuntimeError(f"dataset {name!r} is not available: {module_name}.{function} ({err})") from err
    count = count or media.count
    dest = Path(root) / f"{name}-n{count}-s{seed}{media.suffix}"
    if (dest / MARKER).is_file():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    bar = _progress(count, media.unit, f"generating {dest.name}", progress)
    try:
        make(tmp, count, seed, progress=_Reporter(bar), **media.options)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
    (tmp / MARKER).write_text(json.dumps({"name": name, "count": count, "seed": seed}))
    try:
        tmp.rename(dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


class _Reporter:
    """Progress for a maker that calls ``progress(done, total)`` or ``progress.update(n)``."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.done = bar, 0

    def __call__(self, done: int, total: int | None = None) -> None:
        self.update(done - self.done)

    def update(self, n: int = 1, bytes: int = 0) -> None:  # noqa: A002  (the Progress signature)
        self.done += n
        self.bar.update(n, bytes=bytes)


# -- what a dataset holds ------------------------------------------------------------------------
def _describe_converted(path: Path, kind: str, info: dict[str, Any]) -> dict[str, Any]:
    """From the manifest and the per-sample records: no tar is read."""
    from mediapipe.dataset.sample_records import read_samples

    records = [r for r in read_samples(path) if r.get("kind", kind) == kind]
    info.update(layout="converted", samples=len(records))
    sizes = [r["bytes"] for r in records if r.get("bytes")]
    if sizes:
        info["mean_bytes"] = float(np.mean(sizes))
    pixels = [r["width"] * r["height"] for r in records if r.get("width") and r.get("height")]
    if kind == "image" and pixels:
        info["mean_megapixels"] = float(np.mean(pixels)) / 1e6
    return info


def data_files(path: Path) -> list[Path]:
    """Every file a benchmark reads from dataset ``path``, for ``--cold-cache``: the images of
    a folder or manifest (and the manifest), or a converted dataset's shards and indexes."""
    path = Path(path)
    if path.is_file():
        files = [path]
        if path.suffix == ".jsonl":
            from mediapipe.bench.image_data import manifest_rows

            files += [Path(p) for p, _ in manifest_rows(path)]
        return files
    return sorted(p for p in path.rglob("*") if p.is_file())


def describe(path: Path, kind: str, sample_limit: int = 256) -> dict[str, Any]:
    """Samples, mean file size and, for images, mean decoded megapixels (headers of up to
    ``sample_limit`` files spread over the dataset), for the MB/s and megapixels/s columns."""
    from mediapipe.sample import kind_of_extension

    path = Path(path)
    info: dict[str, Any] = {"path": str(path), "kind": kind}
    if kind == "detection":  # a COCO file and its images: sizes and object counts from the file
        return describe_detection(path, info)
    if path.is_file() and path.suffix == ".jsonl":
        from mediapipe.bench.image_data import manifest_rows

        files = [Path(p) for p, _ in manifest_rows(path)]
    elif (path / "manifest.json").is_file():
        info = _describe_converted(path, kind, info)
        return {**info, **fused_quality(path)} if kind == "image" else info
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")
                       and kind_of_extension(p.suffix) == kind)
    info["layout"] = "manifest" if path.is_file() else "folder"
    info["samples"] = len(files)
    if not files:
        return info
    step = max(1, len(files) // sample_limit)
    chosen = files[::step][:sample_limit]
    sizes = [p.stat().st_size for p in chosen if p.exists()]
    info["mean_bytes"] = float(np.mean(sizes)) if sizes else None
    if kind == "image":
        from PIL import Image

        pixels = []
        for p in chosen:
            try:
                with Image.open(p) as im:
                    pixels.append(im.size[0] * im.size[1])
            except OSError:
                continue
        info["mean_megapixels"] = float(np.mean(pixels)) / 1e6 if pixels else None
        info.update(fused_quality(path))
    return info


def describe_detection(path: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Samples (the images with objects, which the detection scenario reads), objects per such
    image, mean file size and megapixels of a detection dataset."""
    from mediapipe.bench.image_data import coco_paths

    annotations, images = coco_paths(path)
    document = json.loads(annotations.read_text())
    owners = {a["image_id"] for a in document["annotations"]}
    used = [image for image in document["images"] if image["id"] in owners]
    sizes = [(images / image["file_name"]).stat().st_size for image in used]
    info.update(layout="coco", samples=len(used), images=len(document["images"]),
                objects_per_image=len(document["annotations"]) / max(1, len(used)),
                mean_bytes=float(np.mean(sizes)) if sizes else None,
                mean_megapixels=float(np.mean([i["width"] * i["height"] for i in used] or [0])) / 1e6)
    return info


@functools.lru_cache(maxsize=16)
def fused_quality(path: Path) -> dict[str, Any]:
    """``fused_psnr``: per image scenario, the fused decode's PSNR against the unfused path
    (`mediapipe.bench.fused_quality.fused_psnr`), for the report's PSNR column; made once per dataset."""
    from mediapipe.bench.fused_quality import fused_psnr
    from mediapipe.bench.image_data import EVAL, TRAIN

    try:
        return {"fused_psnr": {scenario: fused_psnr(scenario, Path(path)) for scenario in (TRAIN, EVAL)}}
    except Exception as err:  # noqa: BLE001 - the speed rows do not depend on it
        return {"fused_psnr_error": f"{type(err).__name__}: {err}"}
