"""The video scenarios' runners: AV1 clips (one random 16-frame clip, or 4 uniform 8-frame
clips per video; stride 2, 112 px, batch 8) through this library, against PyAV naive decoding
(the baseline), torchcodec's clip samplers (when it and FFmpeg's shared libraries are
installed), our decoder clip by clip, the closure ceiling (exactly the packets the clips need)
and a full sequential decode of the same files to YUV frames (PyAV/libdav1d, or the dav1d
command line). The sample sets are made in `mediapipe.bench.video_sets` and `video_encoders`.

Each runner yields, per batch, the samples it fully decoded and the frames its decoder
produced for them (lead-in from the key frame included); the sequential ceilings yield frames.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".ivf")


def video_files(data: Path) -> list[Path]:
    files = sorted(p.resolve() for p in Path(data).rglob("*") if p.suffix in VIDEO_SUFFIXES and ".tmp" not in p.name)
    if not files:
        raise RuntimeError(f"no video files in {data}; make them with make_sample_videos")
    return files


# -- runners ------------------------------------------------------------------------------------
def video_pipeline(data: Path, folder: Path, *, device: str, batches: int, clip_len: int = 16, stride: int = 2,
                   size: int = 112, batch_size: int = 8, clips_per_video: int = 1, sampling: str = "random") -> Any:
    """This library's pipeline of the video scenarios: ``clips_per_video`` clips per video (random
    or uniform starts), RandomResizedCrop fused into the decoder (YUV planes cropped and resized,
    then RGB), flip and normalise; its manifest (the files cycled so that ``batches`` batches
    exist in an epoch) is written into ``folder``."""
    import json

    import mediapipe as mp
    from mediapipe import augment as A

    if batches < 1 or batch_size < 1:
        raise ValueError(f"run_mediapipe: batches={batches} and batch_size={batch_size} must be >= 1")
    files = video_files(data)
    rows = [{"path": str(files[i % len(files)]), "label": i % 2} for i in range(max(len(files), batches * batch_size))]
    if len(rows) < batch_size:  # drop_last would give no batch at all, and an epoch loop would spin
        raise ValueError(f"run_mediapipe: {len(rows)} clips in {data}, fewer than one batch of {batch_size}")
    manifest = Path(folder) / "videos.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return mp.Pipeline(
        source=mp.loaders.manifest(manifest),
        decode={"video": mp.decoders.video(clip_len=clip_len, stride=stride, clips_per_video=clips_per_video,
                                           sampling=sampling, output="rgb")},
        augment=[A.RandomResizedCrop(size, scale=(0.25, 1.0), key="video"), A.HorizontalFlip(key="video"),
                 A.Normalize(key="video")],
        batch_size=batch_size, seed=0, device=device,
    )


def run_mediapipe(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16, stride: int = 2,
                  size: int = 112, batch_size: int = 8, clips_per_video: int = 1, sampling: str = "random",
                  stages: Callable[[Callable[[], dict[str, float]]], Any] | None = None) -> Iterator[tuple[int, int]]:
    """This library's loader of `video_pipeline`, workers processes. Yields (samples: clips, or
    videos of ``clips_per_video`` clips; frames decoded for them) per batch, the frames from
    ``loader.stats.frames``; ``stages`` gets a function returning the loader's stage seconds
    (decode and its parts...)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        pipe = video_pipeline(data, Path(tmp), device=device, batches=batches, clip_len=clip_len, stride=stride,
                              size=size, batch_size=batch_size, clips_per_video=clips_per_video, sampling=sampling)
        rows = len(pipe.source)
        produced = 0
        loader = pipe.loader(num_workers=workers, shuffle=True, drop_last=True)
        if stages is not None:
            stages(lambda: loader.stats.seconds)
        frames = loader.stats.frames
        for epoch in range(batches):  # a later epoch only if a sharded epoch held fewer batches
            loader.set_epoch(epoch)
            before = produced
            for batch in loader:
                batch["video"].sum().item()  # materialised on the device
                produced += 1
                decoded, frames = loader.stats.frames - frames, loader.stats.frames
                yield int(batch["video"].shape[0]), decoded
                if produced >= batches:
                    return
            if produced == before:
                raise RuntimeError(f"run_mediapipe: an epoch of {rows} clips gave no batch of {batch_size}")


run_mediapipe.reports_stages = True  # the bench's RunnerStream passes stages=


class _ClipDataset:
    """A peer's map-style dataset of clips: item i is the clips (``clips_per_video``, drawn as
    ``sampling`` says) of file i mod the file count."""

    def __init__(self, files: list[Path], clip_len: int, stride: int, size: int, clips_per_video: int = 1,
                 sampling: str = "random") -> None:
        self.files, self.clip_len, self.stride, self.size = files, clip_len, stride, size
        self.clips_per_video, self.sampling = clips_per_video, sampling

    @property
    def options(self) -> dict[str, Any]:
        """The video decoder's clip options of this dataset (`mediapipe.decoders.video`)."""
        return {"clip_len": self.clip_len, "stride": self.stride, "clips_per_video": self.clips_per_video,
                "sampling": self.sampling}

    def __len__(self) -> int:
        return 1 << 30


class _NaiveClips(_ClipDataset):
    """The baseline dataset: open the file, decode from the start to the clip's last frame,
    convert every decoded frame to RGB (``to_ndarray("rgb24")``), keep the clip's frames, resize
    and centre-crop with torchvision. One thread per file, as in a typical training script.
    An item is (clip, frames decoded for it)."""

    def __getitem__(self, i: int) -> Any:
        import av
        import torch
        from torchvision.transforms.v2 import functional as TF

        path = self.files[i % len(self.files)]
        rng = np.random.default_rng(i)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            total = stream.frames or _estimated_frames(container, stream)
            span = (self.clip_len - 1) * self.stride + 1
            start = int(rng.integers(0, max(1, total - span + 1)))
            wanted = set(range(start, start + span, self.stride))
            frames = []
            n = -1
            for n, frame in enumerate(container.decode(stream)):
                rgb = frame.to_ndarray(format="rgb24")
                if n in wanted:
                    frames.append(rgb)
                if n >= start + span - 1:
                    break
        while len(frames) < self.clip_len:
            frames.append(frames[-1])
        clip = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)
        clip = TF.resize(clip, [self.size], antialias=True)
        return TF.center_crop(clip, [self.size, self.size]), n + 1


def _estimated_frames(container: Any, stream: Any) -> int:
    """Frames from the header's duration and rate, where the container has no frame count
    (Matroska, WebM, IVF), as a training script would: clips then start anywhere, as ours do."""
    rate = stream.average_rate or stream.guessed_rate
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    else:
        seconds = (container.duration or 0) / 1_000_000
    return max(1, int(seconds * float(rate or 0)))


def run_naive_pyav(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16, stride: int = 2,
                   size: int = 112, batch_size: int = 8, clips_per_video: int = 1,
                   sampling: str = "random") -> Iterator[tuple[int, int]]:
    """The baseline: a torch DataLoader over `_NaiveClips` (open, decode from the start, pick).
    Yields (clips, frames decoded for them) per batch."""
    single_clip_only("pyav", clips_per_video, sampling)
    from torch.utils.data import DataLoader

    loader = DataLoader(_NaiveClips(video_files(data), clip_len, stride, size), batch_size=batch_size,
                        num_workers=workers, shuffle=False)
    yield from _counted_batches(loader, device, batches)


def _counted_batches(loader: Any, device: str, batches: int) -> Iterator[tuple[int, int]]:
    """(samples, frames decoded) per batch of a DataLoader of (uint8 clips, frames decoded) items,
    each batch materialised on ``device`` as float; ``batches`` of them."""
    for n, (batch, decoded) in enumerate(loader):
        batch = batch.to(device).float().div_(255)
        batch.sum().item()
        yield int(batch.shape[0]), int(decoded.sum())
        if n + 1 >= batches:
            return


def torchcodec_problem() -> str | None:
    """Why torchcodec cannot run here (not installed, or FFmpeg's shared libraries missing), or None."""
    import ctypes.util
    import importlib.util

    if importlib.util.find_spec("torchcodec") is None:
        return "not installed: torchcodec (pip install torchcodec)"
    if ctypes.util.find_library("avcodec") is None or ctypes.util.find_library("avformat") is None:
        return ("not available: torchcodec needs FFmpeg's shared libraries, and libavcodec/libavformat are "
                "not on this system (apt-get install libavcodec59 libavformat59 libavutil57 libswscale6 "
                "libswresample4 libavfilter8 libavdevice59, or ffmpeg)")
    try:  # FFmpeg present, but perhaps not every library torchcodec links against, or another version
        from torchcodec._internally_replaced_utils import load_core_libraries

        load_core_libraries()  # torchcodec loads them lazily, on the first decoder
    except (ImportError, OSError, RuntimeError) as err:
        missing = sorted(set(re.findall(r"(lib\w+\.so\.\d+): cannot open", str(err))))
        return ("not available: torchcodec could not load the FFmpeg libraries it links against (one complete "
                "FFmpeg 4 to 8" + (f"; missing here: {', '.join(missing)}" if missing else f": {type(err).__name__}")
                + "); apt-get install ffmpeg")
    return None


class _TorchcodecClips(_ClipDataset):
    """The torchcodec peer's dataset: one `VideoDecoder` per item (exact seeking, one FFmpeg
    thread, the resize done by FFmpeg during the conversion to RGB), ``clips`` clips drawn by
    `clips_at_random_indices` (or, for uniform sampling, `clips_at_regular_indices`, how video
    models are evaluated) with the same length and stride, then a centre crop."""

    def __getitem__(self, i: int) -> Any:
        import torch
        from torchcodec.decoders import VideoDecoder
        from torchcodec.samplers import clips_at_random_indices, clips_at_regular_indices
        from torchvision.transforms import v2
        from torchvision.transforms.v2 import functional as TF

        path = self.files[i % len(self.files)]
        probe = VideoDecoder(str(path), seek_mode="approximate")
        height, width = probe.metadata.height, probe.metadata.width
        short = min(height, width)
        size = [max(self.size, round(height * self.size / short)), max(self.size, round(width * self.size / short))]
        decoder = VideoDecoder(str(path), seek_mode="exact", num_ffmpeg_threads=1, transforms=[v2.Resize(size)])
        torch.manual_seed(i)  # the sampler draws from torch's generator
        sampler = clips_at_regular_indices if self.sampling == "uniform" else clips_at_random_indices
        clips = sampler(decoder, num_clips=self.clips_per_video, num_frames_per_clip=self.clip_len,
                        num_indices_between_frames=self.stride)
        out = TF.center_crop(clips.data, [self.size, self.size])  # (clips, T, C, H, W)
        return out if self.clips_per_video > 1 else out[0]


def run_torchcodec(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16, stride: int = 2,
                   size: int = 112, batch_size: int = 8, clips_per_video: int = 1,
                   sampling: str = "random") -> Iterator[int]:
    """torchcodec, the PyTorch ecosystem's decoder: its clip samplers in a torch DataLoader, same
    clips per video, clip length, stride and output size. Yields samples (clips, or videos) per
    batch (torchcodec does not say how many frames it decoded for them)."""
    problem = torchcodec_problem()
    if problem is not None:
        raise NotImplementedError(problem)
    try:
        import torchcodec.decoders  # noqa: F401  (loads FFmpeg's libraries: fails here when they do not fit)
    except Exception as err:  # noqa: BLE001 - the reason is what the report shows
        raise NotImplementedError(f"not available: torchcodec cannot load FFmpeg ({type(err).__name__}: "
                                  f"{str(err).splitlines()[0][:200]})") from err
    from torch.utils.data import DataLoader

    dataset = _TorchcodecClips(video_files(data), clip_len, stride, size, clips_per_video, sampling)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=False)
    for n, batch in enumerate(loader):
        batch = batch.to(device).float().div_(255)
        batch.sum().item()
        yield int(batch.shape[0])
        if n + 1 >= batches:
            return


def single_clip_only(backend: str, clips_per_video: int, sampling: str) -> None:
    """Refuse a multi-clip scenario for a runner that draws one random clip per sample."""
    if clips_per_video != 1 or sampling != "random":
        raise NotImplementedError(f"not available: the {backend} runner draws one random clip per video")


class _ClipwiseClips(_ClipDataset):
    """Our own decoder (PyAV), each clip of a sample decoded on its own: the clips planned as the
    loader plans them (``clips_per_video``, ``sampling``), then per clip its own
    `PyAVVideoDecoder.decode_frames` (its seek from the key frame, its lead-in) and `finish` (its
    resize and conversion), the file's index and packets kept between calls as in the loader. A
    centre box of a fixed share of the frame is cropped and resized to ``size`` in the decoder.
    An item is (clips, frames decoded for them)."""

    AREA = 0.625  # of the frame: the mean area RandomResizedCrop(scale=(0.25, 1)) draws

    def __getitem__(self, i: int) -> Any:
        import torch

        from mediapipe.decoders.base import DecodeHint
        from mediapipe.decoders.video import ClipPlan
        from mediapipe.rng import decoder_rng
        from mediapipe.sample import Blob

        decoder = self._decoder()
        path = self.files[i % len(self.files)]
        blob = Blob(str(path), path=str(path))
        index = decoder.index(blob)
        plan = decoder.plan(index, decoder_rng(0, 0, i, 0), blob.name)  # the loader's draws for row i
        turns = decoder.turns(index)
        height, width = (index.width, index.height) if turns % 2 else (index.height, index.width)
        side = max(1, int(min(height, width) * self.AREA ** 0.5))
        hint = DecodeHint(roi=((height - side) // 2, (width - side) // 2, side, side), size=(self.size, self.size))
        roi = decoder.region(hint, index, blob.name, turns)
        clips, frames = [], 0
        for clip in plan.clips:
            alone = ClipPlan((clip,), stacked=False)
            planes, colour, decoded = decoder.decode_frames(blob, index, alone.wanted, roi)
            clips.append(decoder.finish(planes, alone.wanted, alone, hint, colour, turns))
            frames += decoded
        return torch.stack(clips), frames

    def _decoder(self) -> Any:
        decoder = self.__dict__.get("_made")
        if decoder is None:
            from mediapipe.decoders.video_pyav import PyAVVideoDecoder

            decoder = self.__dict__["_made"] = PyAVVideoDecoder(threads=1, output="rgb", **self.options)
        return decoder


def run_mediapipe_clipwise(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16,
                           stride: int = 2, size: int = 112, batch_size: int = 8, clips_per_video: int = 1,
                           sampling: str = "random") -> Iterator[tuple[int, int]]:
    """Our decoder decoding each clip of a sample on its own (`_ClipwiseClips`) in a torch
    DataLoader: what the one pass per video saves. Yields (samples, frames decoded) per batch."""
    from torch.utils.data import DataLoader

    dataset = _ClipwiseClips(video_files(data), clip_len, stride, size, clips_per_video, sampling)
    yield from _counted_batches(DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=False),
                                device, batches)


class _ClosurePackets(_ClipDataset):
    """The closure ceiling's dataset: per file (read once per worker, before the first item),
    its index and its packets in memory and one open libdav1d decoder (one thread). An item
    plans the sample's clips as the loader does and sends the decoder exactly the packets of the
    frames they need (`VideoIndex.needed`: the wanted frames and what they reference; for a
    stream without a known graph, every packet from the key frame before each wanted frame up
    to its own, in decode order: `_decode_order_closure`), then
    drains it; nothing is converted, cropped or resized. An item is the frames decoded."""

    def prepare(self) -> None:
        import av

        from mediapipe.decoders.video_pyav import PyAVVideoDecoder
        from mediapipe.sample import Blob

        planner = PyAVVideoDecoder(threads=1, **self.options)
        self.kept = []
        for path in self.files:
            blob = Blob(str(path), path=str(path))
            index = planner.index(blob)
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                packets = [(bytes(p), p.pts, p.dts) for p in container.demux(stream) if p.size]
                ctx = av.CodecContext.create(stream.codec_context.codec.name, "r")
                if stream.codec_context.extradata:
                    ctx.extradata = stream.codec_context.extradata
            ctx.thread_type, ctx.thread_count = "AUTO", 1
            self.kept.append((blob, index, packets, ctx))
        self.planner = planner

    def __getitem__(self, i: int) -> int:
        import av

        from mediapipe.rng import decoder_rng

        if "kept" not in self.__dict__:
            self.prepare()
        blob, index, packets, ctx = self.kept[i % len(self.kept)]
        # the draws the loader's decoder makes for row i (seed 0, epoch 0, the pipeline's one field)
        wanted = self.planner.plan(index, decoder_rng(0, 0, i, 0), blob.name).wanted
        needed = index.needed(wanted)
        needed = set(needed) if needed is not None else _decode_order_closure(index, packets, wanted)
        frames = 0
        for data, pts, dts in packets:
            stamp = pts if pts is not None else dts
            if stamp is None or index.frame_at(stamp) not in needed:
                continue
            packet = av.Packet(data)
            packet.pts, packet.dts = pts, dts
            frames += len(ctx.decode(packet))
        frames += len(ctx.decode(None))
        ctx.flush_buffers()
        return frames


def _decode_order_closure(index: Any, packets: list[tuple[bytes, Any, Any]], wanted: list[int]) -> set[int]:
    """For a stream without a known reference graph: every frame whose packet lies, in decode
    order, from the key frame before each wanted frame to the wanted frame's own packet (a B-frame's
    forward reference is decoded before it, so a display-order range from the key frame misses it)."""
    order = [index.frame_at(pts if pts is not None else dts) for _, pts, dts in packets
             if pts is not None or dts is not None]
    at = {f: n for n, f in enumerate(order)}
    needed: set[int] = set()
    for w in wanted:
        key = index.keyframe_before(w)
        if w in at and key in at:
            needed.update(order[at[key] : at[w] + 1])
        needed.update(range(key, w + 1))
    return needed


def run_closure_ceiling(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16,
                        stride: int = 2, size: int = 112, batch_size: int = 8, clips_per_video: int = 1,
                        sampling: str = "random") -> Iterator[tuple[int, int]]:
    """The closure ceiling: decode exactly the packets each sample's clips need, with an open
    decoder per file and no other work (`_ClosurePackets`), ``workers`` processes of one thread.
    Yields (samples, frames decoded) per batch: our samples/s over its is how close the loader
    comes to the decode it cannot avoid."""
    from torch.utils.data import DataLoader

    dataset = _ClosurePackets(video_files(data), clip_len, stride, size, clips_per_video, sampling)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=False,
                        worker_init_fn=_prepare_worker)
    for n, decoded in enumerate(loader):
        yield int(decoded.shape[0]), int(decoded.sum())
        if n + 1 >= batches:
            return


def _prepare_worker(_: int) -> None:
    from torch.utils.data import get_worker_info

    get_worker_info().dataset.prepare()


def _decode_all_yuv(path: Path, threads: int) -> int:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        count = 0
        for frame in container.decode(stream):
            frame.planes[0]  # the YUV frame exists in memory; no conversion
            count += 1
    return count


def run_sequential_ceiling(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16,
                           stride: int = 2, size: int = 112, batch_size: int = 8, **_: Any) -> Iterator[int]:
    """The ceiling: every frame of each file, in order, to YUV, PyAV/libdav1d with ``workers``
    threads (at least one). Yields the frames decoded per file."""
    files = video_files(data)
    for n in range(batches):
        yield _decode_all_yuv(files[n % len(files)], max(1, workers))


def dav1d_binary() -> str | None:
    return shutil.which("dav1d")


def run_dav1d_cli(data: Path, *, workers: int, device: str, batches: int, clip_len: int = 16, stride: int = 2,
                  size: int = 112, batch_size: int = 8, **_: Any) -> Iterator[int]:
    """The ceiling through the dav1d command line (its own demuxer: IVF, Annex B, section 5;
    MP4/MKV files are remuxed to IVF first, untimed). Yields the frames decoded per file."""
    binary = dav1d_binary()
    if binary is None:
        raise RuntimeError("no dav1d binary on PATH (apt-get install dav1d)")
    files = [_as_ivf(p) for p in video_files(data)]
    for n in range(batches):
        path = files[n % len(files)]
        result = subprocess.run([binary, "-q", "-i", str(path), "-o", "/dev/null", "--muxer", "null",
                                 "--threads", str(max(1, workers))], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"dav1d failed on {path}: {result.stderr.strip()[-300:]}")
        yield _ivf_frames(path)


def _as_ivf(path: Path) -> Path:
    """An IVF copy of an AV1 file (stream copy, no re-encode), cached beside it as .ivf.cache."""
    if path.suffix == ".ivf":
        return path
    import av

    target = path.with_name(path.name + ".ivf.cache")
    if target.exists():
        return target
    with av.open(str(path)) as src, av.open(str(target), "w", format="ivf") as dst:
        stream = src.streams.video[0]
        out = dst.add_stream_from_template(stream, opaque=True)  # copy, no codec lookup
        for packet in src.demux(stream):
            if packet.dts is None:
                continue
            packet.stream = out
            dst.mux(packet)
    return target


def _ivf_frames(path: Path) -> int:
    with open(path, "rb") as f:
        header = f.read(32)
    return int.from_bytes(header[24:28], "little")


def run_dali_cpu(data: Path, **kwargs: Any) -> Iterator[int]:
    raise NotImplementedError("not available: DALI has no AV1 decoder on the CPU (its video readers need an NVIDIA GPU)")
    yield 0  # pragma: no cover


def run_dali_gpu(data: Path, **kwargs: Any) -> Iterator[int]:
    raise NotImplementedError("not available: DALI's GPU video reader (fn.readers.video) is not wired up as a peer yet")
    yield 0  # pragma: no cover


def timed(run: Callable[..., Iterator[int]], **kwargs: Any) -> tuple[int, float]:
    """(units produced, seconds) for one runner: a quick measurement outside the bench CLI."""
    t0 = time.perf_counter()
    total = sum(run(**kwargs))
    return total, time.perf_counter() - t0
