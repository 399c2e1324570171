"""The DALI backend: ``pipe.loader(backend="dali")`` runs the same pipeline spec on NVIDIA DALI.

The sample order is ours: the torch loader's sampler (`build_sampler`: shuffle, ranks, a
source already split by rank, last-batch policy) plans each epoch's batches, and the bytes
each decoded field reads (`Plan.blob`: files, a manifest's named columns, byte ranges of
converted shards) are fed to DALI in that order through ``fn.external_source``; DALI decodes
(``mixed`` = nvJPEG on a GPU, ``cpu`` with ``device_id=None``) and runs the lowered ops (see
`dali_lowering`). A batch holds the fields the plan lists (`Plan.batch_fields`), as the torch
backend's do; index, label and manifest fields (`SampleStage.source_fields`) never enter DALI: they are
attached on the host from the planned batch, so they cannot drift from the images.

Random parameters: ops whose draws DALI has no operator for (ColorJitter, GaussianBlur,
RandomErasing, RandomCrop...) take the torch backend's keyed draws, computed on the host and
fed as per-sample arguments, so they equal the torch backend's. RandomResizedCrop's windows
and the flips are drawn by DALI (``image_random_crop``, ``coin_flip``: the graph a
hand-written DALI pipeline uses; same distributions, other numbers) unless ``rng="keyed"``.

One DALI pipeline serves every epoch: the feed runs on into the next epoch's plan, so DALI
prefetches across the epoch's end. A pipeline started fresh (first use, ``set_epoch`` to
another epoch) is seeded by ``(seed, rank, epoch)``. ``state_dict()`` carries DALI's
checkpoint (``enable_checkpointing``) of its generators at the delivered position, so a
resumed run equals an uninterrupted one, mid-epoch or at an epoch's end.

Importing this module does not import DALI; building a `DaliLoader` does.
"""

from __future__ import annotations

import collections
import copy
import importlib.util
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mediapipe.errors import PipelineError
from mediapipe.fields import MASK, OBJECTS
from mediapipe.loaders.dali.buffers import RecycledBuffers
from mediapipe.loaders.dali.context import FieldNode, LoweringContext, decode_problem
from mediapipe.loaders.dali.lowering import LOWERINGS, lowering_table, unsupported
from mediapipe.loaders.loader import SamplerDriven
from mediapipe.loaders.samplers import BatchSampler, PlannedBatch
from mediapipe.loaders.sampling import build_sampler, check_process_group, may_pad, resolve_ranks
from mediapipe.options import LastBatch
from mediapipe.plan import BatchField
from mediapipe.rng import op_rng
from mediapipe.sample import Blob, SampleRef
from mediapipe.stages.collate import collate
from mediapipe.stages.sample_stage import SampleStage
from mediapipe.stages.stats import StageStats

if TYPE_CHECKING:
    from mediapipe.pipeline import Pipeline
    from mediapipe.plan import Plan

INSTALL_HINT = "pip install mediapipe-loader[dali]"
WHOLE = 2**31 - 1  # an audio window's count to the file's end (DALI's slice trims it)
RNG_MODES = ("dali", "keyed")


def dali_available() -> bool:
    """Whether NVIDIA DALI is installed (without importing it)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False


def import_dali() -> tuple[Any, Any, Any]:
    """(nvidia.dali.pipeline.Pipeline, nvidia.dali.fn, nvidia.dali.types), or an ImportError
    that says how to install DALI."""
    try:
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline as DaliPipeline
    except ImportError as err:
        raise ImportError(f"backend='dali' needs NVIDIA DALI, which is not installed: {INSTALL_HINT} "
                          f"(or use backend='torch'); {err}") from err
    return DaliPipeline, fn, types


def check_lowerable(pipeline: Pipeline) -> None:
    """Raise `PipelineError` listing everything in the spec that DALI cannot run as specified."""
    problems = unsupported(pipeline.augment)
    targets = [n for n, t in pipeline.plan.base_types.items()
               if t.rows_are_objects and t.kind in (*OBJECTS, MASK) and n not in pipeline.decode]
    for name, spec in pipeline.decode.items():
        if (why := decode_problem(spec.kind, spec.options)) is not None:
            problems.append(f"decode[{name!r}] {spec.kind}({why})")
        if targets and spec.options.get("exif_transpose"):  # DALI turns the image, not the source's targets
            problems.append(f"decode[{name!r}] {spec.kind}(exif_transpose=True with the source's {targets})")
    if getattr(pipeline.source, "picks_channels", False):  # DALI's audio decoder mixes every channel
        problems.append("a source whose samples take some channels of their files (Lhotse cuts' channels)")
    if getattr(pipeline.source, "declares_rates", False):  # DALI decodes at the file's rate, not the recording's
        problems += [f"decode[{name!r}] audio(sample_rate=None) with recordings that declare their rate (pass "
                     "sample_rate=)" for name, spec in pipeline.decode.items()
                     if spec.kind == "audio" and spec.options.get("sample_rate") is None]
    sides = [f.name for f in pipeline.plan.batch_fields() if f.origin == "side"]
    if sides:
        problems.append(f"the decoders' side fields {sides} (DALI's decoders give none)")
    if pipeline.on_error != "raise":
        problems.append(f"on_error={pipeline.on_error!r} (DALI stops on a bad sample)")
    if problems:
        raise PipelineError(
            f"backend='dali' has no DALI counterpart for: {', '.join(problems)}. "
            f"Use backend='torch' for this pipeline, or drop these ops. Lowered ops: {sorted(LOWERINGS)}"
        )


def dali_seed(seed: int, rank: int, epoch: int) -> int:
    """DALI's pipeline seed for one (seed, rank, epoch): a 31-bit int DALI accepts."""
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0] & 0x7FFFFFFF)


class HostSample:
    """One sample as the feed sees it: its ref, the blob of each decoded field with its bytes
    read (``data``: the same bytes as arrays), header sizes, and the keyed draws of ops whose
    parameters are drawn on the host."""

    def __init__(self, ref: SampleRef, blobs: dict[str, Blob], probe: dict[str, Any], seed: int,
                 epoch: int) -> None:
        self.ref, self.blobs, self._probe, self._sizes = ref, blobs, probe, {}
        self.data = {name: np.frombuffer(blob.read(), dtype=np.uint8) for name, blob in blobs.items()}
        self.seed, self.epoch = seed, epoch
        self._params: dict[int, dict[str, Any]] = {}

    def params(self, op_index: int, op: Any, size: tuple[int, int]) -> dict[str, Any]:
        """``op.sample_params`` with the torch backend's key (seed, epoch, index, op index): the same draws."""
        if op_index not in self._params:
            rng = op_rng(self.seed, self.epoch, self.ref.index, op_index)
            self._params[op_index] = op.sample_params(rng, {**self.ref.meta, "size": size})
        return self._params[op_index]

    def window(self, name: str, sample_rate: int | None) -> tuple[int, int]:
        """(first, count) of the audio samples of field ``name`` the torch backend's decoder
        gives: the source's segment (an ASR manifest's utterance) on the output rate's grid, as
        `AudioDecoder.grid_windows` rounds it; the whole file without one."""
        segment = self.ref.meta.get("segment")
        if segment is None:
            return 0, WHOLE
        start, length = segment
        rate = sample_rate or int(self._probe[name](self)["sample_rate"])
        return round(max(0.0, float(start)) * rate), WHOLE if length is None else round(float(length) * rate)

    def size(self, name: str) -> tuple[int, int]:
        """(height, width) of field ``name`` as decoded, from its header (no decoding)."""
        if name not in self._sizes:
            meta = self._probe[name](self)
            self._sizes[name] = (int(meta["height"]), int(meta["width"]))
        return self._sizes[name]


class _Feed:
    """External-source callbacks, one per DALI input, fed in lockstep from planned batches.

    Each input pulls its own queue; when a queue is empty the next planned batch is read
    (bytes, header checks, keyed draws) and every queue gets its part, so the order in which
    DALI calls them does not matter. The feed runs on into the next epochs' plans, so DALI
    prefetches across an epoch's end as its own readers do (no bubble, no reset).
    """

    def __init__(self, plan: Plan) -> None:
        # the plan, never the loader: DALI holds these callbacks, so a feed that held the loader
        # would close a cycle (loader -> pipeline -> callbacks -> loader) that only the cyclic
        # GC frees, maybe in a forked child, where DALI's teardown waits on the parent's threads
        self.plan = plan
        decoders = plan.decoders()
        self.probes = {name: (lambda s, d=decoders[name], n=name: d.probe(s.blobs[n])) for name in plan.decode}
        # image fields whose header is probed (raising LimitError) before DALI decodes them
        self.checked = [name for name, spec in plan.decode.items()
                        if spec.kind == "image" and plan.limits.max_pixels is not None]
        self.inputs: dict[str, Any] = {}  # name -> compute(sample) -> np.ndarray
        self.queues: dict[str, collections.deque] = {}
        self.fields: dict[str, FieldNode] = {}  # the pipeline's outputs, in order
        self.planned: Iterator[tuple[int, PlannedBatch]] = iter(())
        self.host: collections.deque = collections.deque()  # (PlannedBatch, refs) per batch fed

    def add(self, name: str, compute: Any) -> Any:
        self.inputs[name] = compute
        self.queues[name] = collections.deque()

        feed = weakref.ref(self)  # DALI holds this callback, and the feed holds DALI's graph nodes

        def source() -> list[np.ndarray]:
            return _pull(feed, name)

        return source

    def start(self, sampler: BatchSampler, epoch: int, position: int) -> None:
        self.planned = _plans(sampler, epoch, position)

    def _next_batch(self) -> None:
        epoch, batch = next(self.planned)
        plan = self.plan
        refs = [plan.source.ref(int(i)) for i in batch.indices]
        samples = []
        for ref in refs:
            blobs = {name: plan.blob(ref, name) for name in plan.decode}
            blobs = {name: replace(blob, data=blob.read()) for name, blob in blobs.items()}
            sample = HostSample(ref, blobs, self.probes, plan.seed, epoch)
            for name in self.checked:  # max_pixels on the header, before DALI spends memory
                sample.size(name)
            samples.append(sample)
        for name, compute in self.inputs.items():
            self.queues[name].append([compute(s) for s in samples])
        self.host.append((batch, refs))


def _pull(feed_ref: weakref.ref, name: str) -> list[np.ndarray]:
    """The next batch of input ``name`` from the feed DALI's callback holds weakly (the loader's
    live pipeline keeps the feed, and the feed goes with it)."""
    feed = feed_ref()
    if feed is None:
        raise RuntimeError("the DALI loader this pipeline fed was dropped")
    if not feed.queues[name]:
        feed._next_batch()
    return feed.queues[name].popleft()


def _plans(sampler: BatchSampler, epoch: int, position: int) -> Iterator[tuple[int, PlannedBatch]]:
    """(epoch, batch) from ``position`` of ``epoch`` on, then every later epoch's, endlessly."""
    planner = copy.copy(sampler)  # plans other epochs without moving the loader's sampler
    while True:
        planner.set_epoch(epoch)
        planned = planner.batches()
        for batch in planned[position:]:
            yield epoch, batch
        if not planned:
            raise PipelineError(f"epoch {epoch} has no batches (fewer samples than one batch with drop_last?)")
        epoch, position = epoch + 1, 0


@dataclass
class _Live:
    """The DALI pipeline in use and the (epoch, position) of the next batch it will give."""

    pipe: Any
    feed: _Feed
    epoch: int
    position: int
    busy: bool = False  # a pass is running on it


class DaliLoader(SamplerDriven):
    """`Loader`'s contract on DALI: the same batches (dict of tensors on the pipeline's device),
    ``len()``, ``set_epoch()``, ``last_batch``, rank sharding, ``state_dict()``.

    Args beyond `Loader`'s: ``num_workers`` sets DALI's ``num_threads``; ``prefetch`` its
    ``prefetch_queue_depth``; ``device_id`` the GPU (default: the pipeline's CUDA device, or
    None, CPU only, when the pipeline's device is the CPU). ``rng``: "dali" (default) lets DALI
    draw RandomResizedCrop's windows and the flips (``image_random_crop``, ``coin_flip``: the
    graph a hand-written DALI pipeline uses); "keyed" feeds the torch backend's keyed draws for
    those too, so every op gets exactly the torch backend's parameters (a header parse and a
    few microseconds of Python per sample on the host). Other random ops always take the keyed draws.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        num_workers: int = 0,
        shuffle: bool = True,
        drop_last: bool | None = None,
        last_batch: LastBatch = "partial",
        prefetch: int = 2,
        sampler: BatchSampler | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        device_id: int | None = None,
        rng: str = "dali",
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers}: expected >= 0")
        if prefetch < 1:
            raise ValueError(f"prefetch={prefetch}: expected >= 1")
        if rng not in RNG_MODES:
            raise ValueError(f"rng={rng!r}: expected one of {RNG_MODES}")
        check_lowerable(pipeline)
        self.rng = rng
        self._dali = import_dali()
        self.pipeline, self.plan, self.device = pipeline, pipeline.plan, pipeline.device
        self.num_threads, self.prefetch = max(1, num_workers), prefetch
        if self.device.type == "cuda":
            self.device_id = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device_id = self.device_id if device_id is None else device_id
        else:
            self.device_id = None
        # the torch loader's sampler: a source already split by rank is not split again, and the
        # true rank keys DALI's seed
        self.ranks = resolve_ranks(pipeline.source, rank, world_size)
        self.sampler: BatchSampler = build_sampler(
            pipeline, shuffle=shuffle, last_batch=last_batch, drop_last=drop_last,
            rank=self.ranks.rank, world_size=self.ranks.world_size, sampler=sampler)
        self.fields: list[BatchField] = self.plan.batch_fields()
        self._policies = self.plan.collate_policies()  # the source's fields' (boxes: lists, token ids: padded)
        self._source_fields = SampleStage(self.plan).source_fields
        self.stats = StageStats()
        self._buffers = RecycledBuffers()  # CPU outputs' memory, reused once the training loop drops a batch
        self._live: _Live | None = self._start(self.sampler.epoch, self.sampler.position, None)  # lowering errors surface here
        self._checkpoint: tuple[str, int, int] | None = None  # (DALI checkpoint, epoch, position) loaded
        self._current: object | None = None  # the token of the pass that moves the sampler's position

    # -- the contract (len, epoch, set_epoch: SamplerDriven) ----------------------------
    def state_dict(self) -> dict[str, Any]:
        """The sampler's position and DALI's checkpoint (its generators' state) at that position;
        where a new pass starts (the epoch's first batch unless loaded) is `Loader.state_dict`'s rule."""
        state: dict[str, Any] = {"sampler": self.sampler.state_dict()}
        checkpoint = self._current_checkpoint()
        if checkpoint is not None:
            state["dali"] = {"checkpoint": checkpoint, "epoch": self.sampler.epoch,
                             "position": self.sampler.position}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.sampler.load_state_dict(state.pop("sampler"))
        self._live, self._checkpoint, self._current = None, None, None  # a running pass no longer moves it
        self._loaded, self._resumed = True, False  # the next pass starts at the loaded position
        dali = state.pop("dali", None)
        if dali is not None:
            self._checkpoint = (dali["checkpoint"], dali["epoch"], dali["position"])
        if state:
            raise ValueError(f"unexpected keys in DALI loader state: {sorted(state)}")

    def set_epoch(self, epoch: int) -> None:
        self._current = None  # a running pass goes on with its own epoch, no longer moving the loader's
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass, as `Loader`'s: it starts where `begin_pass` says (its epoch's first batch unless
        ``load_state_dict`` ran since the last pass began, the next epoch after one delivered to its
        end); the newest pass is the loader's current one (only it moves the position that
        `state_dict` describes), and a pass begun while an older one still runs gets a DALI
        pipeline of its own (a pipeline is one stream: two passes never share one)."""
        check_process_group(self.ranks)
        sampler = self.sampler
        planned = self.begin_pass()
        epoch, start = sampler.epoch, sampler.position
        live = self._live
        if live is None or live.busy or (live.epoch, live.position) != (epoch, start):
            # a fresh pipeline: at a checkpoint's position, or seeded by (seed, rank, epoch)
            checkpoint = self._current_checkpoint()
            if start > 0 and checkpoint is None:
                warnings.warn(f"DaliLoader resumes at batch {start} without a DALI checkpoint: the samples are the "
                              "same, DALI's random draws are not those of an uninterrupted run", stacklevel=2)
            if live is not None and not live.busy:
                self._live = None  # the old pipeline goes before the new one allocates
            live = self._start(epoch, start, checkpoint)
        self._live, self._checkpoint = live, None
        live.busy = True
        self._current = current = object()
        run = self._pass(live, current, epoch, start, len(planned))
        next(run)  # started: dropping or closing the pass now runs its `finally`, which frees the pipeline
        return run

    def _pass(self, live: _Live, current: object, epoch: int, start: int, length: int) -> Iterator[dict[str, Any]]:
        sampler = self.sampler
        try:
            yield {}  # (taken by __iter__)
            for _ in range(length - start):
                t0 = time.perf_counter()
                try:
                    outputs = live.pipe.run()
                except BaseException:  # a bad sample (raised by the feed or DALI): this pipeline's state is lost
                    if self._live is live:
                        self._live = None
                    raise
                t1 = time.perf_counter()
                batch, refs = live.feed.host.popleft()
                out = self._to_torch(outputs, live.feed.fields, batch, refs)
                self.stats.seconds["wait"] += t1 - t0  # DALI's decode and ops, as far as they were not ahead
                self.stats.seconds["transfer"] += time.perf_counter() - t1
                self.stats.samples += batch.valid
                self.stats.batches += 1
                live.position += 1
                if self._current is current:
                    sampler.position += 1  # delivered: a state_dict() taken now resumes after this batch
                yield out
            live.epoch, live.position = epoch + 1, 0  # the feed runs on into the next epoch
            if self._current is current and sampler.epoch == epoch and sampler.position >= length:
                sampler.set_epoch(epoch + 1)
        finally:
            live.busy = False

    def _roll_over(self, epoch: int, length: int) -> None:
        """A pipeline or checkpoint at the end of ``epoch`` is at the start of the next one (the feed
        runs on), so a pass begun there goes on as an uninterrupted run would."""
        live = self._live
        if live is not None and (live.epoch, live.position) == (epoch, length):
            if live.busy:  # its pass delivered the last batch and has not ended: go on from its state
                self._checkpoint = (live.pipe.checkpoint(), epoch + 1, 0)
            else:
                live.epoch, live.position = epoch + 1, 0
        elif self._checkpoint is not None and self._checkpoint[1:] == (epoch, length):
            self._checkpoint = (self._checkpoint[0], epoch + 1, 0)

    def close(self) -> None:
        """Let the DALI pipeline (its threads and memory) go now; `state_dict` still carries its
        checkpoint, and a later pass starts a fresh one (from that checkpoint when it starts where
        this one stopped: after ``load_state_dict``, or at the next epoch). Closing twice does nothing more.
        Dropping the loader does the same: nothing but the loader holds its pipeline."""
        here = (self.sampler.epoch, self.sampler.position)
        if (checkpoint := self._current_checkpoint()) is not None:
            self._checkpoint = (checkpoint, *here)
        self._live = None

    def __enter__(self) -> DaliLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- DALI graph -------------------------------------------------------------------
    def _current_checkpoint(self) -> str | None:
        here = (self.sampler.epoch, self.sampler.position)
        live = self._live
        if live is not None and (live.epoch, live.position) == here:
            return live.pipe.checkpoint()
        if self._checkpoint is not None and self._checkpoint[1:] == here:
            return self._checkpoint[0]
        return None

    def _start(self, epoch: int, position: int, checkpoint: str | None) -> _Live:
        pipe, feed = self._build(epoch, checkpoint)
        feed.start(self.sampler, epoch, position)
        return _Live(pipe, feed, epoch, position)

    def _build(self, epoch: int, checkpoint: str | None) -> tuple[Any, _Feed]:
        DaliPipeline, fn, types = self._dali
        feed = _Feed(self.plan)
        seed = dali_seed(self.pipeline.seed, self.ranks.rank, epoch)
        pipe = DaliPipeline(batch_size=self.pipeline.batch_size, num_threads=self.num_threads,
                            device_id=self.device_id, seed=seed, prefetch_queue_depth=self.prefetch,
                            enable_checkpointing=True, checkpoint=checkpoint)
        counter = iter(range(1 << 30))

        def host_input(name: str, compute: Any) -> Any:
            unique = f"{next(counter)}:{name}"
            return fn.external_source(source=feed.add(unique, compute), batch=True, name=unique)

        ctx = LoweringContext(fn, types, "gpu" if self.device_id is not None else "cpu", host_input)
        ctx.keyed = self.rng == "keyed"
        with warnings.catch_warnings():
            # DALI warns that it cannot checkpoint a callable source: our feed restarts
            # at the sampler's position itself.
            warnings.filterwarnings("ignore", message="Checkpointing enabled in a pipeline with external source")
            self._define(pipe, ctx, feed)
            pipe.build()
        return pipe, feed

    def _define(self, pipe: Any, ctx: LoweringContext, feed: _Feed) -> None:
        fn = ctx.fn
        with pipe:
            for name, spec in self.plan.decode.items():
                encoded = ctx.host_input(f"{name}.bytes", lambda s, n=name: s.data[n])
                rate = spec.options.get("sample_rate")
                ctx.fields[name] = FieldNode(encoded, spec.kind, decoded=False, options=dict(spec.options),
                                             size_of=(lambda s, n=name: s.size(n)) if spec.kind == "image" else None,
                                             channels=1 if spec.options.get("mode") == "L" else 3,
                                             window_of=(lambda s, n=name, r=rate: s.window(n, r))
                                             if spec.kind == "audio" else None)
            for ctx.op_index, op in enumerate(self.plan.ops):
                try:
                    LOWERINGS[type(op).__name__].lower(op, ctx)
                except NotImplementedError as err:
                    raise PipelineError(f"backend='dali': {err}; use backend='torch' for this pipeline") from err
            tensors = [f.name for f in self.fields if f.origin in ("decoder", "op")]
            if sorted(tensors) != sorted(ctx.fields):  # the lowering and the plan disagree: a bug, said plainly
                raise PipelineError(f"backend='dali': the lowered graph gives fields {sorted(ctx.fields)}, "
                                    f"the plan {sorted(tensors)}")
            outputs = []
            for name in tensors:
                f = ctx.decoded(name)
                ctx.flush_mirror(f)
                if f.layout == "HWC":  # this library's layout: (C, H, W)
                    f.node = fn.transpose(f.node, perm=[2, 0, 1])
                feed.fields[name] = f
                outputs.append(f.node)
            pipe.set_outputs(*outputs)

    # -- to torch ---------------------------------------------------------------------
    def _to_torch(self, outputs: tuple, fields: dict[str, FieldNode], batch: PlannedBatch,
                  refs: list[SampleRef]) -> dict[str, Any]:
        from nvidia.dali.plugin.pytorch import feed_ndarray, to_torch_type

        # the plan's fields: the samples' own (collated as the torch backend collates them), the
        # DALI outputs (a pad-collated field with its lengths), valid
        out: dict[str, Any] = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v
                               for k, v in collate([self._source_fields(r) for r in refs], self._policies).items()}
        padded = {f.field for f in self.fields if f.origin == "lengths"}
        for (name, f), tl in zip(fields.items(), outputs):
            if name in padded:
                out.update(padded_audio(name, f, tl, self.device))
                continue
            shapes = {tuple(s) for s in tl.shape()}
            if len(shapes) > 1:
                raise PipelineError(
                    f"field {name!r} has shapes {sorted(shapes)[:4]} in one batch: add a sample-stage op that gives "
                    "every sample one size (RandomResizedCrop, Resize with an exact size, CenterCrop)")
            shape = (len(tl), *next(iter(shapes)))
            is_gpu = type(tl).__name__.endswith("GPU")
            if is_gpu:
                tensor = torch.empty(shape, dtype=to_torch_type[tl.dtype], device=torch.device("cuda", self.device_id))
            else:
                tensor = self._buffers.empty(shape, to_torch_type[tl.dtype])
            stream = torch.cuda.current_stream(tensor.device) if is_gpu else None
            feed_ndarray(tl.as_tensor(), tensor, cuda_stream=stream)
            out[name] = tensor.to(self.device, non_blocking=True)
        if batch.valid < len(batch.indices) or may_pad(self.sampler):
            valid = torch.zeros(len(batch.indices), dtype=torch.bool)
            valid[: batch.valid] = True
            out["valid"] = valid.to(self.device)
        return out


def padded_audio(name: str, f: FieldNode, tl: Any, device: torch.device) -> dict[str, torch.Tensor]:
    """One channel per sample, (B, 1, ..., T_max) padded with ``f.pad_value`` and ``<name>_lengths``,
    as the torch backend's pad-collate and its audio ops give."""
    if type(tl).__name__.endswith("GPU"):
        tl = tl.as_cpu()
    arrays = [np.asarray(tl.at(i)) for i in range(len(tl))]
    lengths = torch.tensor([a.shape[-1] for a in arrays], dtype=torch.int64)
    longest = max([int(lengths.max()) if len(arrays) else 0, f.pad_to or 0])
    out = torch.full((len(arrays), 1, *arrays[0].shape[:-1], longest), f.pad_value, dtype=torch.float32)
    for i, a in enumerate(arrays):
        out[i, 0, ..., : a.shape[-1]] = torch.from_numpy(a)
    return {name: out.to(device), f"{name}_lengths": lengths.to(device)}


__all__ = ["DaliLoader", "check_lowerable", "dali_available", "import_dali", "lowering_table"]
