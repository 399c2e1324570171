"""Where CUDA may be used, which GPU a loader worker's hardware decoder takes, and whether a
device is an NVIDIA GPU (the only kind nvJPEG and NVDEC run on).

CUDA does not survive ``fork``: a child forked from a process that had initialised it cannot
use it, and one that initialises it itself leaves a driver state that later forks inherit. So
the hardware decoders (NVDEC) use CUDA only in the training process and in loader workers
started by spawn or forkserver (fresh interpreters, each owning its rank's GPU, ``LOCAL_RANK``),
never in a forked worker, where they decode on the CPU instead and say so in ``loader.stats``.

AMD GPUs run torch's ``cuda`` device through HIP (ROCm): the batch stage runs there, but
NVIDIA's decoders do not, so decoding stays in the CPU workers.
"""

from __future__ import annotations

import os

import torch

FRESH_START_METHODS = ("spawn", "forkserver")  # worker start methods that give a process CUDA can start in
_worker_start_method: str | None = None  # set in a loader worker; None in the training process


def enter_worker(start_method: str) -> None:
    """Called once in each loader worker process with the method that started it."""
    global _worker_start_method
    _worker_start_method = start_method


def is_rocm() -> bool:
    """Whether torch's ``cuda`` device is an AMD GPU (a ROCm build of torch)."""
    return getattr(torch.version, "hip", None) is not None


def nvidia_gpu(device: torch.device | None) -> bool:
    """Whether ``device`` is an NVIDIA GPU: a ``cuda`` device on a CUDA (not ROCm) build of torch."""
    return device is not None and device.type == "cuda" and not is_rocm()


def refusal() -> str | None:
    """Why this process must not use CUDA, or None where it may: a reason counted per sample in
    ``loader.stats.fallbacks`` and named in the log, so it reads as a short, stable phrase."""
    if _worker_start_method is not None and _worker_start_method not in FRESH_START_METHODS:
        return (f"no CUDA in a loader worker started by {_worker_start_method} (use "
                "multiprocessing_context='forkserver' or 'spawn')")
    if torch.cuda._is_in_bad_fork():
        return "no CUDA in a process forked after CUDA was initialised"
    if is_rocm():
        return "an AMD GPU (ROCm) has no NVIDIA decoder"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def worker_gpu(device: torch.device | None) -> int | None:
    """The GPU index a hardware decoder uses: ``device``'s (the training process's device stage),
    else this rank's from ``LOCAL_RANK`` (torchrun sets it; workers inherit it), else None (the
    current device)."""
    if device is not None and device.type == "cuda" and device.index is not None:
        return device.index
    local_rank = os.environ.get("LOCAL_RANK", "")
    return int(local_rank) if local_rank.isdigit() else None


def worker_start_method() -> str:
    """The start method for loader workers that use CUDA (hardware video decoding)."""
    import multiprocessing

    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
