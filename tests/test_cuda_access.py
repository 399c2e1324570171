"""Where CUDA may be used, decided without a GPU: NVDEC only in the training process and in
workers started fresh (forkserver, spawn), each on its rank's GPU; never in a forked worker,
which decodes on the CPU instead, counted in ``loader.stats`` and named in the log once. On an
AMD GPU (ROCm) nothing NVIDIA-only is chosen, and no module outside the NVIDIA decoders calls
an NVIDIA-only API."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe import cuda_access
from mediapipe.decoders.registry import decoder_class
from mediapipe.loaders.workers import ProcessPool
from mediapipe.synthetic.video import render_frames, write_video

pytest.importorskip("av")
ROOT = Path(__file__).parents[1]


@pytest.fixture
def cuda_machine(monkeypatch):
    """This process as on an NVIDIA machine: torch sees a GPU, CUDA not initialised, no fork."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(cuda_access, "_worker_start_method", None)


@pytest.mark.parametrize(("worker", "allowed"), [(None, True), ("spawn", True), ("forkserver", True), ("fork", False)])
def test_cuda_is_refused_only_in_a_forked_worker(cuda_machine, monkeypatch, worker, allowed):
    monkeypatch.setattr(cuda_access, "_worker_start_method", worker)
    reason = cuda_access.refusal()
    assert (reason is None) == allowed
    if not allowed:
        assert "started by fork" in reason and "forkserver" in reason


def test_cuda_is_refused_after_a_fork_torch_knows_of_on_rocm_and_without_a_gpu(cuda_machine, monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    assert "forked after CUDA was initialised" in cuda_access.refusal()
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert "ROCm" in cuda_access.refusal()
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_access.refusal() == "no CUDA device"


def test_a_worker_takes_its_ranks_gpu(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert cuda_access.worker_gpu(None) is None
    assert cuda_access.worker_gpu(torch.device("cuda", 2)) == 2
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert cuda_access.worker_gpu(None) == cuda_access.worker_gpu(torch.device("cuda")) == 3
    assert cuda_access.worker_gpu(torch.device("cuda", 1)) == 1  # the device stage's own device wins
    from mediapipe.decoders.video_nvdec import NvdecVideoDecoder

    assert NvdecVideoDecoder(clip_len=2).cuda_device == "3"


def _refusal(_task: object) -> str | None:
    return cuda_access.refusal()


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_know_how_they_were_started(method):
    pool = ProcessPool(_refusal, 1, context=method)
    try:
        pool.submit(None)
        reason = pool.next_result()
    finally:
        pool.close()
    if method == "fork":
        assert "started by fork" in reason
    else:  # a fresh process: CUDA allowed wherever there is a GPU
        assert reason == (None if torch.cuda.is_available() else "no CUDA device")


# -- NVDEC's decision in the loader ---------------------------------------------------------------
@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clips")
    for i in range(4):
        (root / "a").mkdir(exist_ok=True)
        write_video(root / "a" / f"v{i}.ivf", render_frames(32, 48, 12, seed=i), gop=6)
    return root


def video_pipeline(root: Path, backend: str) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"video": mp.decoders.video(clip_len=4, output="yuv", backend=backend)},
                       batch_size=2, seed=1, device="cpu")


@pytest.fixture
def nvdec_listed(monkeypatch):
    """NVDEC passes its cheap checks here; its probe must not run (it would touch CUDA)."""
    from mediapipe.decoders import video_nvdec

    monkeypatch.setattr(video_nvdec.NvdecVideoDecoder, "available", classmethod(lambda cls, device: True))
    monkeypatch.setattr(video_nvdec.NvdecVideoDecoder, "fallbacks", video_nvdec.Counter())

    def no_probe(device=None):
        raise AssertionError("the NVDEC probe ran where CUDA may not be used")

    monkeypatch.setattr(video_nvdec, "probe_av1", no_probe)
    return video_nvdec


def test_a_forked_worker_decodes_on_the_cpu_counted_and_logged_once(clips, nvdec_listed, caplog):
    expected = [b["video"] for b in video_pipeline(clips, "pyav").loader(shuffle=False)]
    loader = video_pipeline(clips, "nvdec").loader(num_workers=1, shuffle=False, multiprocessing_context="fork")
    with caplog.at_level(logging.WARNING, logger="mediapipe.loaders.loader"):
        got = [b["video"] for b in loader]
    assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, expected))
    reason = ("nvdec: no CUDA in a loader worker started by fork (use multiprocessing_context='forkserver' "
              "or 'spawn')")
    assert dict(loader.stats.fallbacks) == {reason: 4}
    assert [r.getMessage() for r in caplog.records] == [f"{reason}: decoding on the CPU instead (counted in "
                                                        "loader.stats.fallbacks)"]


def test_the_training_process_may_use_nvdec_and_counts_a_failed_probe(clips, nvdec_listed, cuda_machine,
                                                                        monkeypatch, caplog):
    probes = []
    monkeypatch.setattr(nvdec_listed, "probe_av1", lambda device=None: probes.append(device) or False)
    loader = video_pipeline(clips, "nvdec").loader(num_workers=0, shuffle=False)
    with caplog.at_level(logging.WARNING, logger="mediapipe.loaders.loader"):
        assert sum(b["video"].shape[0] for b in loader) == 4
    assert probes == [None]  # once per process, on the current GPU
    assert dict(loader.stats.fallbacks) == {"nvdec: NVDEC cannot decode AV1 here (the probe failed)": 4}
    assert len(caplog.records) == 1


def test_workers_that_decode_with_cuda_start_fresh(clips, nvdec_listed):
    assert video_pipeline(clips, "nvdec").plan.workers_use_cuda
    assert not video_pipeline(clips, "pyav").plan.workers_use_cuda
    assert video_pipeline(clips, "nvdec").loader(num_workers=2).multiprocessing_context == "forkserver"
    assert video_pipeline(clips, "pyav").loader(num_workers=2).multiprocessing_context is None
    assert video_pipeline(clips, "nvdec").loader(num_workers=2, multiprocessing_context="spawn") \
        .multiprocessing_context == "spawn"


# -- AMD GPUs ---------------------------------------------------------------------------------------
def test_on_rocm_decoding_stays_in_the_cpu_workers(cuda_machine, monkeypatch, image_folder):
    """torch's cuda device on a ROCm build: the batch stage runs there, nvImageCodec and NVDEC are
    neither chosen nor placed on it."""
    monkeypatch.setattr(torch.version, "hip", "6.2")
    cuda = torch.device("cuda")
    assert mp.decoders.image().placement(cuda) == "worker"  # whichever backend "auto" picks: in CPU workers
    assert decoder_class("video", "auto", None).name == "pyav"
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [mp.augment.RandomResizedCrop(32), mp.augment.Normalize()], device="cuda")
    assert pipe.device == cuda and pipe.plan.device_fields == set()
    assert [p.stage.value for p in pipe.plan.placed] == ["sample", "batch"]
    from mediapipe.decoders.image import ImageOptions
    from mediapipe.decoders.image_nvimgcodec import NvImageCodecImageDecoder

    defaults = ImageOptions()
    assert NvImageCodecImageDecoder.placement(cuda, defaults) == "worker" and not NvImageCodecImageDecoder(device=cuda).on_gpu
    monkeypatch.setattr(torch.version, "hip", None)  # the same build on an NVIDIA GPU
    assert NvImageCodecImageDecoder.placement(cuda, defaults) == "device" and NvImageCodecImageDecoder(device=cuda).on_gpu


NVIDIA_ONLY = re.compile(r"\bnvidia\.|\bnvimgcodec\b|\bhwaccel\b|\bpynvml\b|\bcupy\b|torch\.cuda\.(?:nvtx|jiterator)")
NVIDIA_MODULES = {"decoders/image_nvimgcodec.py", "decoders/video_nvdec.py"}  # the NVIDIA decoders
NVIDIA_ROOMS = ("loaders/dali/",)  # the DALI backend: NVIDIA's library, chosen by name


def test_only_the_nvidia_decoders_call_nvidia_only_apis():
    """AMD GPUs run everything else: no module outside the NVIDIA decoders (and the DALI backend,
    chosen by name) reaches an NVIDIA-only library. The benchmark's peers, the GPU checks and
    the self-check are measurements, not the library."""
    offenders = []
    for folder in ("mediapipe", "decoders", "loaders", "augment"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in NVIDIA_MODULES or rel.startswith(("mediapipe/bench/", "mediapipe/checks/", *NVIDIA_ROOMS)):
                continue
            code = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
            code = re.sub(r'"""(?:.|\n)*?"""', "", code)  # docstrings may name them
            offenders += [f"{rel}: {m.group(0)}" for m in NVIDIA_ONLY.finditer(code)]
    assert offenders == []


# -- GPUs whose NVDEC has no AV1 (A100, H100, H200) -------------------------------------------------
@pytest.fixture
def gpu(monkeypatch, nvdec_listed, cuda_machine):
    """Sets the GPU the capability query reports: ``gpu("NVIDIA H200", (9, 0))``."""
    monkeypatch.setattr(nvdec_listed, "_AV1_REFUSALS", {})

    def set_gpu(name: str, capability: tuple[int, int], cuda_started: bool = True) -> None:
        monkeypatch.setattr(nvdec_listed, "gpu_identity", lambda index: (name, capability))
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda_started)
        nvdec_listed._AV1_REFUSALS.clear()

    return set_gpu


H200_REASON = "the GPU (NVIDIA H200, compute capability 9.0) has no AV1 NVDEC"


@pytest.mark.parametrize(("name", "capability", "decodes"), [
    ("NVIDIA A100-SXM4-80GB", (8, 0), False), ("NVIDIA H100 80GB HBM3", (9, 0), False),
    ("NVIDIA H200", (9, 0), False), ("Tesla T4", (7, 5), False), ("NVIDIA A10", (8, 6), True),
    ("NVIDIA L4", (8, 9), True), ("NVIDIA B200", (10, 0), True)])
def test_auto_picks_nvdec_only_where_the_gpu_decodes_av1(gpu, name, capability, decodes):
    gpu(name, capability)
    cuda = torch.device("cuda")
    assert decoder_class("video", "auto", cuda).name == ("nvdec" if decodes else "pyav")
    if decodes:
        assert decoder_class("video", "nvdec", cuda).name == "nvdec"
    else:
        with pytest.raises(RuntimeError, match=r"video decoder 'nvdec' cannot decode here: the GPU .* has no AV1 NVDEC"):
            decoder_class("video", "nvdec", cuda)


def test_auto_on_a_gpu_without_av1_nvdec_decodes_with_dav1d_counted_and_logged_once(clips, gpu, caplog):
    gpu("NVIDIA H200", (9, 0))
    expected = [b["video"] for b in video_pipeline(clips, "pyav").loader(shuffle=False)]
    loader = video_pipeline(clips, "auto").loader(num_workers=0, shuffle=False)
    assert not loader.pipeline.plan.workers_use_cuda  # plain CPU workers: nothing to start fresh
    with caplog.at_level(logging.WARNING, logger="mediapipe.loaders.loader"):
        got = [b["video"] for b in loader]
    assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, expected))
    reason = f"pyav: auto passed over nvdec: {H200_REASON}"
    assert dict(loader.stats.fallbacks) == {reason: 4}
    assert [r.getMessage() for r in caplog.records] == [f"{reason}: decoding on the CPU instead (counted in "
                                                        "loader.stats.fallbacks)"]


def test_nvdec_named_on_a_gpu_without_av1_is_refused_when_the_pipeline_is_built(clips, gpu):
    gpu("NVIDIA H200", (9, 0))
    with pytest.raises(RuntimeError, match="nvdec.*has no AV1 NVDEC.*backend='auto'"):
        mp.Pipeline(mp.loaders.folder(clips), {"video": mp.decoders.video(clip_len=4, backend="nvdec")},
                    batch_size=2, device="cuda").loader()


def test_a_process_that_chose_nvdec_before_cuda_started_asks_the_gpu_before_probing(clips, gpu):
    """A fresh worker picks nvdec without starting CUDA; at its first decode it asks the GPU, and an
    H200 decodes on the CPU without running the probe (the fixture's probe fails the test if run)."""
    gpu("NVIDIA H200", (9, 0), cuda_started=False)
    assert decoder_class("video", "auto", None).name == "nvdec"
    loader = video_pipeline(clips, "auto").loader(num_workers=0, shuffle=False)
    assert sum(b["video"].shape[0] for b in loader) == 4
    assert dict(loader.stats.fallbacks) == {f"nvdec: {H200_REASON}": 4}


def test_a_worker_forked_after_the_choice_makes_the_same_one(gpu, monkeypatch):
    """The training process asked the GPU when it built the pipeline; a worker forked from it has
    CUDA uninitialised (torch resets it in the child) and must not pick nvdec on its own."""
    gpu("NVIDIA H200", (9, 0))
    assert decoder_class("video", "auto", torch.device("cuda")).name == "pyav"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # as in the forked child
    assert decoder_class("video", "auto", None).name == "pyav"
