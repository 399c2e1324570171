"""The GPU path's checks: ``mediapipe selfcheck --device cuda`` runs them on a CUDA device
(without pytest, on the device it is given), and the test suite runs the self-check on
the CPU, so every line here runs in CI (on the CPU, nvImageCodec's CPU-only backend stands in
for nvJPEG).

Each check takes a working folder (sample media are generated there once) and a device,
asserts what must hold, and returns the figures it found (for the self-check's JSON). They need only torch, PyAV, nvImageCodec,
simplejpeg and this library: no pytest, no torchvision.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

BATCH_STAGE_TARGET = 20_000  # images/s of the batch-stage ops alone at 224x224 on a GPU (issue 13)
MEDIAN_DB, MIN_DB = 38.0, 28.0  # the fused decode's quality bound (tests/test_fused_quality.py)
CROP = 224


def sample_folder(work: Path, quick: bool = False) -> Path:
    """Photographic JPEGs of ImageNet-like sizes in class folders (the bench's sample images)."""
    from mediapipe.bench.datasets import sample_images

    return sample_images(work, 16 if quick else 64, seed=13, progress=False, processes=1)


def nvimgcodec_installed() -> bool:
    from mediapipe.decoders.image_nvimgcodec import _nvimgcodec

    return _nvimgcodec() is not None


def _psnr(got: torch.Tensor, expected: torch.Tensor) -> float:
    mse = float((got.double() - expected.double()).pow(2).mean())
    return 100.0 if mse == 0 else min(100.0, 10 * math.log10(255**2 / mse))


def _image_pipeline(root: Path, device: torch.device, ops: list, batch_size: int) -> Any:
    """The image pipeline as a user writes it for ``device``: "auto" decodes on an NVIDIA GPU;
    on the CPU the nvImageCodec CPU backend takes the same device path."""
    import mediapipe as mp

    decoder = mp.decoders.image() if device.type == "cuda" else mp.decoders.image("nvimgcodec", device_decode=True)
    return mp.Pipeline(mp.loaders.folder(root), {"image": decoder}, ops, batch_size=batch_size, seed=5, device=device)


def check_device_decode(work: Path, device: torch.device, quick: bool = False) -> dict[str, Any]:
    """A batch decoded on the device lands there whole (image, label, index on one device), and
    its pixels are within the fused decode's quality bound of the turbo backend's full decode
    + the reference resized crop at the same box, with the same flips."""
    from mediapipe import augment as A
    from mediapipe.augment.functional.geometry import resized_crop_image
    from mediapipe.decoders import create
    from mediapipe.decoders.base import NO_HINT
    from mediapipe.rng import SampleRNG, op_rng

    if not nvimgcodec_installed():
        raise AssertionError("nvImageCodec is not installed (pip install nvidia-nvimgcodec-cu13)")
    pipe = _image_pipeline(sample_folder(work, quick), device, [A.RandomResizedCrop(CROP), A.HorizontalFlip()], 8)
    crop, flip = pipe.augment
    turbo = create("image", "turbo")
    loader = pipe.loader(num_workers=1 if quick else 2, shuffle=False)
    scores, worst, seen = [], 0, 0
    for batch in loader:
        devices = {name: value.device for name, value in batch.items() if isinstance(value, torch.Tensor)}
        assert set(devices.values()) == {device} or all(d.type == device.type for d in devices.values()), devices
        for got, index in zip(batch["image"].cpu(), batch["index"].tolist()):
            full = turbo.decode(next(iter(pipe.source.ref(index).blobs.values())), NO_HINT, SampleRNG(0, 0, 0, 0), {})
            box = crop.sample_params(op_rng(pipe.seed, 0, index, 0), {"size": tuple(full.shape[-2:])})
            expected = resized_crop_image(full, box["top"], box["left"], box["height"], box["width"], (CROP, CROP))
            if flip.sample_params(op_rng(pipe.seed, 0, index, 1), {})["flip"]:
                expected = expected.flip(-1)
            scores.append(_psnr(got, expected))
            worst = max(worst, int((got.int() - expected.int()).abs().max()))
            seen += 1
        if quick:
            break
    scores.sort()
    median = scores[len(scores) // 2]
    assert median >= MEDIAN_DB and scores[0] >= MIN_DB, f"PSNR median {median:.1f} dB, min {scores[0]:.1f} dB"
    return {"decoded_on": "device" if pipe.plan.device_fields else "workers", "images": seen,
            "psnr_median_db": round(median, 2), "psnr_min_db": round(scores[0], 2), "max_abs_error": worst,
            "fallbacks": dict(loader.stats.fallbacks)}


def check_batched_resize(work: Path, device: torch.device, quick: bool = False) -> dict[str, Any]:
    """The batched resize of regions of many sizes equals torch's own antialiased resize of each."""
    from mediapipe.augment.functional.geometry import resize_image
    from mediapipe.augment.functional.resample import resize_regions
    from mediapipe.synthetic import photo_like

    sizes = [(300, 200), (120, 90), (40, 50), (224, 224), (500, 260), (96, 400)]
    images = [torch.from_numpy(photo_like(h, w, seed=i)).permute(2, 0, 1).to(device) for i, (h, w) in enumerate(sizes)]
    worst = 0.0
    for interpolation in ("bilinear", "bicubic"):
        batch = resize_regions([x.float() for x in images], (64, 80), interpolation)
        for x, y in zip(images, batch):
            expected = resize_image(x.float(), (64, 80), interpolation, True)
            worst = max(worst, float((y - expected).abs().max()))
    assert worst < 0.05, f"largest difference from torch's resize: {worst}"
    return {"max_abs_difference": worst}


def _device_memory(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def check_memory_across_epochs(work: Path, device: torch.device, quick: bool = False) -> dict[str, Any]:
    """The memory torch holds on the device after each epoch stops growing: after the first,
    whose batches warm the allocator, at most one batch more (none kept by the loader)."""
    from mediapipe import augment as A

    pipe = _image_pipeline(sample_folder(work, quick), device,
                           [A.RandomResizedCrop(CROP), A.HorizontalFlip(), A.Normalize()], 8)
    loader = pipe.loader(num_workers=1 if quick else 2, shuffle=True, drop_last=True, persistent_workers=True)
    after = []
    try:
        for _ in range(2 if quick else 4):
            for batch in loader:
                batch["image"].sum()
            del batch
            gc.collect()
            after.append(_device_memory(device))
    finally:
        loader.close()
    one_batch = 8 * 3 * CROP * CROP * 4
    if after[0] is not None:
        growth = max(after[1:]) - after[1]
        assert growth <= one_batch, f"device memory after each epoch (bytes): {after}"
    return {"allocated_mb_by_epoch": None if after[0] is None else [round(a / 2**20, 1) for a in after],
            "epochs": len(after)}


def check_batch_stage_speed(work: Path, device: torch.device, quick: bool = False) -> dict[str, Any]:
    """The batch-stage ops alone (flip, normalise) on uint8 224x224 batches already on the device:
    images per second, against the target on a GPU. Reported, not asserted (a shared GPU is noisy)."""
    import numpy as np

    from mediapipe import augment as A
    from mediapipe.stages.batch_stage import batch_params, run_batch_ops

    batch_size, rounds = (16, 2) if quick or device.type != "cuda" else (256, 20)
    pipe = _image_pipeline(sample_folder(work, quick), device,
                           [A.RandomResizedCrop(CROP), A.HorizontalFlip(), A.Normalize()], batch_size)
    images = torch.randint(0, 256, (batch_size, 3, CROP, CROP), dtype=torch.uint8, device=device)
    samples = [{"image": images[i], "index": i} for i in range(batch_size)]
    params = batch_params(pipe.plan, 0, 0, np.arange(batch_size), samples, {}, on_device=True)
    params = {k: {n: v.to(device) for n, v in p.items()} for k, p in params.items()}  # drawn by the workers

    def once() -> torch.Tensor:
        return run_batch_ops(pipe.plan, {"image": images}, params)["image"]

    out = once()
    assert out.device == images.device and out.dtype == torch.float32 and out.shape == images.shape
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(rounds):
        out = once()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    rate = rounds * batch_size / (time.perf_counter() - t0)
    return {"images_per_s": round(rate), "batch_size": batch_size,
            "target_images_per_s": BATCH_STAGE_TARGET if device.type == "cuda" else None,
            "meets_target": rate >= BATCH_STAGE_TARGET if device.type == "cuda" else None}


def sample_clips(work: Path, count: int = 4) -> Path:
    """``count`` small AV1 clips (Matroska) in two class folders."""
    from mediapipe.synthetic.video import render_frames, write_video

    folder = work / f"clips-n{count}"
    if not (folder / "done").exists():
        for i in range(count):
            (folder / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
            write_video(folder / f"c{i % 2}" / f"v{i}.mkv", render_frames(96, 128, 24, seed=i), gop=8)
        (folder / "done").write_text("")
    return folder


def check_video_on_device(work: Path, device: torch.device, quick: bool = False) -> dict[str, Any]:
    """Clips decoded in the workers ("auto": NVDEC where it may run) reach the device with their
    labels; a worker that decodes with CUDA was started fresh, never forked, and any sample
    decoded on the CPU instead is counted with its reason."""
    import mediapipe as mp
    from mediapipe import augment as A

    pipe = mp.Pipeline(mp.loaders.folder(sample_clips(work)), {"video": mp.decoders.video(clip_len=8, stride=2)},
                       [A.RandomResizedCrop(64, key="video"), A.HorizontalFlip(key="video"), A.Normalize(key="video")],
                       batch_size=2, seed=3, device=device)
    loader = pipe.loader(num_workers=2, shuffle=False)
    clips = 0
    for batch in loader:
        assert batch["video"].device.type == batch["label"].device.type == device.type
        assert batch["video"].shape[1:] == (8, 3, 64, 64)
        clips += batch["video"].shape[0]
    assert clips == 4
    forked = [reason for reason in loader.stats.fallbacks if "started by fork" in reason]
    assert not forked, forked
    decoder = pipe.plan.decoders()["video"].name
    return {"decoder": decoder, "start_method": loader.multiprocessing_context or "default",
            "fallbacks": dict(loader.stats.fallbacks)}


Check = Callable[..., dict[str, Any]]
CHECKS: dict[str, Check] = {
    "device_decode": check_device_decode,
    "batched_resize": check_batched_resize,
    "memory_across_epochs": check_memory_across_epochs,
    "batch_stage_speed": check_batch_stage_speed,
    "video_on_device": check_video_on_device,
}


@dataclass
class CheckResult:
    name: str
    ok: bool
    seconds: float
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def run_check(name: str, work: Path, device: torch.device, quick: bool = False) -> CheckResult:
    """One check, timed; a failure is its result (with the reason), not an exception."""
    t0 = time.perf_counter()
    try:
        facts = CHECKS[name](work, device, quick=quick)
    except Exception as err:  # noqa: BLE001 - every failure is reported with its check
        return CheckResult(name, False, time.perf_counter() - t0, error=f"{type(err).__name__}: {err}")
    return CheckResult(name, True, time.perf_counter() - t0, facts)
