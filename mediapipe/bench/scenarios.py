"""The scenarios, which backends apply to each, and why a backend cannot run where it cannot.

Image backends live in `mediapipe.bench.images`, the detection ones in `mediapipe.bench.detection`. The video and audio scenarios call the
runners of ``mediapipe.bench.video`` and ``mediapipe.bench.audio``, imported only when such
a scenario runs; a missing module or runner is reported as the backend's reason, not hidden.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe.bench.ffcv_peer import FFCV_HINT
from mediapipe.bench.image_data import TRAIN_SIDES
from mediapipe.bench.streams import RunnerStream, Stream


@dataclass(frozen=True)
class Scenario:
    """A training-input workload: what is decoded, what is done to it, and its unit."""

    name: str
    kind: str  # "image", "detection", "video" or "audio": which dataset and backends apply
    dataset: str  # the built-in dataset it runs on without --data
    unit: str  # what samples_per_s counts
    description: str
    backends: tuple[str, ...]
    batch_size: int | None  # default; None where the runner chooses
    frames_per_sample: int | None = None  # video: useful frames per sample (clips_per_video clips of equal length)
    whole_files: bool = True  # a sample reads its whole file, so file sizes give an honest MB/s
    fixed_batches: bool = False  # a pass over the dataset is samples // batch_size batches: epochs count
    clips_per_video: int = 1  # video: clips per sample
    sampling: str = "random"  # video: how the clips' starts are chosen (`mediapipe.decoders.video`)

    def clip_options(self) -> dict[str, Any]:
        """A video scenario's clips, as its runners and ``--suggest`` take them: clip length
        (frames per sample over clips per video), stride, output size, clips and sampling."""
        return {"clip_len": (self.frames_per_sample or 16) // self.clips_per_video, "stride": 2, "size": 112,
                "clips_per_video": self.clips_per_video, "sampling": self.sampling}


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("image-train", "image", "sample-images", "images",
                 "RandomResizedCrop 224, horizontal flip, normalise",
                 ("mediapipe", "mediapipe-cached", "mediapipe-cache-fill", "mediapipe-dali", "torchvision", "torchvision-gpu", "dali", "mediapipe-hf", "hf-datasets",
                  "ffcv"), 64, fixed_batches=True),
        *(Scenario(f"image-train-{side}", "image", "sample-images", "images",
                   f"image-train at {side}x{side}: progressive resizing's smaller sizes (what each pipeline "
                   "gains as its output shrinks)",
                   ("mediapipe", "torchvision", "dali", "ffcv"), 64, fixed_batches=True) for side in TRAIN_SIDES),
        Scenario("image-eval", "image", "sample-images", "images", "resize 256, centre crop 224, normalise",
                 ("mediapipe", "mediapipe-dali", "torchvision", "torchvision-gpu", "dali", "ffcv"), 64, fixed_batches=True),
        Scenario("image-train-recipe", "image", "sample-images", "images",
                 "torchvision's recipe: RandomResizedCrop 224, flip, TrivialAugmentWide, normalise, RandomErasing 0.1 "
                 "(DALI: its trivial_augment_wide on the CPU, its own draws and op definitions)",
                 ("mediapipe", "torchvision", "dali"), 64, fixed_batches=True),
        Scenario("detection-train", "detection", "sample-detection", "images",
                 "COCO boxes: IoU crop, flip, resize 320x320, sanitize, normalise",
                 ("mediapipe", "torchvision", "dali"), 32, fixed_batches=True),
        Scenario("video-clips", "video", "sample-video", "clips", "AV1 clips of 16 frames, stride 2, 112x112",
                 ("mediapipe", "pyav", "torchcodec", "dali", "dav1d", "ceiling", "closure"), 8, frames_per_sample=16,
                 whole_files=False),  # a clip reads part of its file
        Scenario("video-multiclip", "video", "sample-video-varied", "videos",
                 "4 uniform AV1 clips of 8 frames per video, stride 2, 112x112 (how video models are evaluated; "
                 "torchcodec: clips_at_regular_indices)",
                 ("mediapipe", "mediapipe-clipwise", "torchcodec", "closure"), 8, frames_per_sample=32,
                 whole_files=False, clips_per_video=4, sampling="uniform"),
        Scenario("audio-asr", "audio", "sample-audio", "utterances",
                 "16 kHz, 80-bin log-mel, SpecAugment, duration buckets", ("mediapipe", "pyav", "dali"), None),
    )
}
DEFAULT_SCENARIOS = ("image-train", "image-eval")
BACKENDS = ("mediapipe", "mediapipe-cached", "mediapipe-cache-fill", "mediapipe-dali", "torchvision", "torchvision-gpu", "dali", "mediapipe-hf", "hf-datasets",
            "pyav", "torchcodec", "dav1d", "ceiling", "closure", "mediapipe-clipwise", "mediapipe-ray", "mediapipe-http",
            "ffcv")
ON_REQUEST = {"image": ("mediapipe-ray", "mediapipe-http")}  # run only when asked for (mediapipe.bench.remote_backends)
DEVICES = ("cpu", "cuda")

# backend -> runner function of mediapipe.bench.<kind> (a dict when it differs by device)
RUNNERS: dict[str, dict[str, Any]] = {
    "video": {"mediapipe": "run_mediapipe", "pyav": "run_naive_pyav", "torchcodec": "run_torchcodec",
              "dav1d": "run_dav1d_cli", "closure": "run_closure_ceiling", "mediapipe-clipwise": "run_mediapipe_clipwise",
              "ceiling": "run_sequential_ceiling", "dali": {"cpu": "run_dali_cpu", "cuda": "run_dali_gpu"}},
    "audio": {"mediapipe": "run_mediapipe", "pyav": "run_naive",
              "dali": {"cpu": "run_dali_cpu", "cuda": "run_dali_gpu"}},
}
UNITS = {("video", "ceiling"): "frames", ("video", "dav1d"): "frames"}  # decode ceilings count frames
CPU_ONLY = {("video", "dav1d"), ("video", "ceiling"), ("video", "closure"), ("video", "mediapipe-clipwise"),
            ("video", "torchcodec"), ("image", "ffcv")}
GPU_ONLY = {("image", "torchvision-gpu")}  # nvJPEG through torchvision.io.decode_jpeg(device="cuda")
NOT_APPLICABLE = {
    "torchvision": "the torchvision baseline is for images; the PyAV DataLoader is the baseline here",
    "torchvision-gpu": "torchvision's GPU pipeline is an image peer",
    **{cached: "the epoch cache rows run on image-train (what a cache keeps before the random ops)"
       for cached in ("mediapipe-cached", "mediapipe-cache-fill")},
    "mediapipe-dali": "pipe.loader(backend='dali') is benchmarked on the image scenarios (boxes have no DALI lowering)",
    "pyav": "the PyAV baseline is for video and audio; torchvision is the image baseline",
    "torchcodec": "torchcodec is a video peer",
    "dav1d": "the dav1d command line is the AV1 video decode ceiling",
    "ceiling": "the sequential decode ceiling is for video",
    "closure": "the closure ceiling (exactly the packets the clips need) is for video",
    "mediapipe-clipwise": "each clip decoded on its own is a video comparison",
    "mediapipe-hf": "the Hugging Face (Parquet) rows are benchmarked on image-train",
    "hf-datasets": "the Hugging Face (Parquet) rows are benchmarked on image-train",
    "ffcv": "FFCV's peer runs image-train and image-eval (mediapipe.bench.ffcv_peer)",
}
# (scenario, backend) -> why a backend of the scenario's kind is not one of its rows
NOT_IN_SCENARIO = {
    ("video-multiclip", "pyav"): "the PyAV baseline draws one random clip per video; here mediapipe-clipwise "
                                 "decodes each of a video's clips on its own",
    **{("video-multiclip", ceiling): "the sequential ceilings decode every frame of every file; a video's clips "
                                     "are held against the closure ceiling (closure)" for ceiling in ("dav1d", "ceiling")},
    ("video-clips", "mediapipe-clipwise"): "a video-clips sample is one clip, so clip by clip is the mediapipe row "
                                           "itself; it runs on video-multiclip",
}
DALI_HINT = "pip install nvidia-dali-cuda130"


def unit_of(scenario: Scenario, backend: str) -> str:
    return UNITS.get((scenario.kind, backend), scenario.unit)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def runner_name(scenario: Scenario, backend: str, device: str) -> str | None:
    name = RUNNERS.get(scenario.kind, {}).get(backend)
    return name.get(device) if isinstance(name, dict) else name


def why_not(scenario: Scenario, backend: str, device: str) -> str | None:
    """Why ``backend`` cannot run ``scenario`` on ``device`` on this machine, or None.

    Cheap: checks what is installed without importing heavy modules (the video and audio
    modules of this package are imported, to see that their runner exists)."""
    if backend in ON_REQUEST.get(scenario.kind, ()):
        from mediapipe.bench.remote_backends import why_not as remote_why_not

        return remote_why_not(backend)
    if backend not in scenario.backends:
        if backend not in BACKENDS:
            return f"unknown backend; known: {', '.join(BACKENDS)}"
        reason = NOT_IN_SCENARIO.get((scenario.name, backend))
        if reason is None and backend in RUNNERS.get(scenario.kind, {}):  # the kind's backend, not this scenario's
            reason = f"{scenario.name} runs {', '.join(scenario.backends)}"
        return f"not applicable: {reason or NOT_APPLICABLE.get(backend, 'does not apply to ' + scenario.name)}"
    if device not in DEVICES:
        return f"unknown device {device!r}; expected one of {DEVICES}"
    if (scenario.kind, backend) in CPU_ONLY and device != "cpu":
        return "not applicable: runs on the CPU only (see its cpu row)"
    if (scenario.kind, backend) in GPU_ONLY and device != "cuda":
        return "not applicable: decodes on a CUDA GPU only (the torchvision row is its CPU pipeline)"
    if device == "cuda" and not cuda_available():
        return "not available: no CUDA device on this machine (torch.cuda.is_available() is False)"
    if scenario.kind == "detection":
        if backend == "dali" and not _installed("nvidia.dali"):
            return f"not installed: NVIDIA DALI ({DALI_HINT})"
        if backend == "torchvision" and not (_installed("torchvision") and _installed("pycocotools")):
            return "not installed: torchvision's CocoDetection needs torchvision and pycocotools (pip install pycocotools)"
        return None
    if scenario.kind == "image":
        if backend in ("dali", "mediapipe-dali") and not _installed("nvidia.dali"):
            return f"not installed: NVIDIA DALI ({DALI_HINT})"
        if backend == "ffcv" and not _installed("ffcv"):
            return f"not installed: ffcv ({FFCV_HINT})"
        if backend in ("torchvision", "torchvision-gpu", "hf-datasets") and not _installed("torchvision"):
            return "not installed: torchvision (pip install torchvision)"
        if backend in ("mediapipe-hf", "hf-datasets") and not (_installed("datasets") and _installed("pyarrow")):
            return "not installed: datasets and pyarrow write and read the Parquet copy (pip install datasets)"
        if backend == "mediapipe-dali" and not _installed("mediapipe.loaders.dali.loader"):
            return "not available: mediapipe.loaders.dali.loader (pipe.loader(backend='dali')) does not exist yet"
        return None
    if backend == "dav1d" and shutil.which("dav1d") is None:
        return "not installed: the dav1d command line is not on PATH (apt-get install dav1d)"
    if backend == "torchcodec":
        from mediapipe.bench.video import torchcodec_problem

        problem = torchcodec_problem()
        if problem is not None:
            return problem
    module_name = f"mediapipe.bench.{scenario.kind}"
    function = runner_name(scenario, backend, device)
    if function is None:
        return f"not available: no {backend} runner for {scenario.kind} on {device}"
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the reason to report
        return f"not available: {module_name} cannot be imported ({type(err).__name__}: {err})"
    if not callable(getattr(module, function, None)):
        return f"not available: {module_name} has no {function}()"
    return None


def open_stream(scenario_name: str, backend: str, data: Path, *, device: str, workers: int,
                batch_size: int | None, options: dict[str, Any]) -> Stream:
    """Open ``backend``'s stream of batches for a scenario (in the bench worker process)."""
    scenario = SCENARIOS[scenario_name]
    if backend in ON_REQUEST.get(scenario.kind, ()):
        from mediapipe.bench.remote_backends import OPENERS

        return OPENERS[backend](scenario.name, data, device=device, workers=workers, batch_size=batch_size or 64,
                                options=options)
    if scenario.kind == "image":
        from mediapipe.bench import images

        return images.open_stream(scenario.name, backend, data, device=device, workers=workers,
                                  batch_size=batch_size or 64, options=options)
    if scenario.kind == "detection":
        from mediapipe.bench import detection

        return detection.open_stream(backend, data, device=device, workers=workers,
                                     batch_size=batch_size or scenario.batch_size or 32, options=options)
    function = runner_name(scenario, backend, device)
    module_name = f"mediapipe.bench.{scenario.kind}"
    try:
        runner = getattr(importlib.import_module(module_name), function or "")
    except (ImportError, AttributeError) as err:
        raise NotImplementedError(f"not available: {module_name}.{function}: {err}") from err
    kwargs: dict[str, Any] = {"data": data, "workers": workers, "device": device, "batches": options["max_batches"]}
    if scenario.kind == "video":
        kwargs.update(batch_size=batch_size or 8, **scenario.clip_options())
    buffered = getattr(runner, "buffered", None)  # what the runner's loader holds after an idle spell
    return RunnerStream(runner, buffered=buffered(workers) if buffered else 2 * max(1, workers), **kwargs)
