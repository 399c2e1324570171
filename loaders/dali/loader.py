"""The DALI backend: ``pipe.loader(backend="dali")`` runs the same pipeline spec on NVIDIA DALI.

The sample order is ours: the torch loader's sampler (`LoaderBase`: shuffle, ranks, a
source already split by rank, last-batch policy) plans each epoch's batches, and the bytes
each decoded field reads (`Plan.blob`: files, a manifest's named columns, byte ranges of
converted shards) are fed to DALI in that order through ``fn.external_source`` (`feed`); DALI decodes
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

import importlib.util
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mediapipe.errors import PipelineError
from mediapipe.fields import MASK, OBJECTS
from mediapipe.loaders.dali.buffers import RecycledBuffers
from mediapipe.loaders.dali.context import FieldNode, LoweringContext, decode_problem
from mediapipe.loaders.dali.feed import Feed
from mediapipe.loaders.dali.lowering import LOWERINGS, lowering_table, unsupported
from mediapipe.loaders.loader_base import LoaderBase, PassCursor, SamplingOptions
from mediapipe.loaders.samplers import PlannedBatch
from mediapipe.loaders.sampling import may_pad
from mediapipe.plan import BatchField
from mediapipe.sample import SampleRef
from mediapipe.stages.collate import collate
from mediapipe.stages.sample_stage import SampleStage

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from mediapipe.pipeline import Pipeline

INSTALL_HINT = "pip install mediapipe-loader[dali]"
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
    if pipeline.source.picks_channels:  # DALI's audio decoder mixes every channel
        problems.append("a source whose samples take some channels of their files (Lhotse cuts' channels)")
    if pipeline.source.declares_rates:  # DALI decodes at the file's rate, not the recording's
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


@dataclass
class _Live:
    """The DALI pipeline in use and the (epoch, position) of the next batch it will give."""

    pipe: Any
    feed: Feed
    epoch: int
    position: int
    busy: bool = False  # a pass is running on it


class DaliLoader(LoaderBase):
    """The DALI backend: `LoaderBase`'s contract on DALI, the same batches (dict of tensors on the
    pipeline's device) as the torch `Loader`'s, with its ``len()``, epochs, ranks and ``state_dict()``.

    Args beyond the sampling ones (`SamplingOptions`): ``num_workers`` sets DALI's ``num_threads``;
    ``prefetch`` its ``prefetch_queue_depth``; ``device_id`` the GPU (default: the pipeline's CUDA
    device, or None, CPU only, when the pipeline's device is the CPU). ``rng``: "dali" (default) lets
    DALI draw RandomResizedCrop's windows and the flips (``image_random_crop``, ``coin_flip``: the
    graph a hand-written DALI pipeline uses); "keyed" feeds the torch backend's keyed draws for
    those too, so every op gets exactly the torch backend's parameters (a header parse and a
    few microseconds of Python per sample on the host). Other random ops always take the keyed draws.

    Passes: a pass begun while an older one still runs gets a DALI pipeline of its own (a
    pipeline is one stream: two passes never share one).
    """

    def __init__(self, pipeline: Pipeline, *, num_workers: int = 0, prefetch: int = 2, device_id: int | None = None,
                 rng: str = "dali", **sampling: Unpack[SamplingOptions]) -> None:
        # the torch loader's sampler: a source already split by rank is not split again, and the
        # true rank keys DALI's seed
        super().__init__(pipeline, num_workers=num_workers, prefetch=prefetch, **sampling)
        if rng not in RNG_MODES:
            raise ValueError(f"rng={rng!r}: expected one of {RNG_MODES}")
        check_lowerable(pipeline)
        self.rng = rng
        self._dali = import_dali()
        self.num_threads = max(1, num_workers)
        if self.device.type == "cuda":
            self.device_id = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device_id = self.device_id if device_id is None else device_id
        else:
            self.device_id = None
        self.fields: list[BatchField] = self.plan.batch_fields()
        self._policies = self.plan.collate_policies()  # the source's fields' (boxes: lists, token ids: padded)
        self._source_fields = SampleStage(self.plan).source_fields
        self._buffers = RecycledBuffers()  # CPU outputs' memory, reused once the training loop drops a batch
        self._checkpoint: tuple[str, int, int] | None = None  # (DALI checkpoint, epoch, position) loaded
        self._live: _Live | None = self._start(self.sampler.epoch, self.sampler.position, None)  # lowering errors surface here

    # -- state: the sampler's (LoaderBase) and DALI's checkpoint ---------------------------
    def _backend_state(self) -> dict[str, Any]:
        """DALI's checkpoint (its generators' state) at the sampler's position, so a resumed run
        equals an uninterrupted one."""
        checkpoint = self._current_checkpoint()
        if checkpoint is None:
            return {}
        return {"dali": {"checkpoint": checkpoint, "epoch": self.sampler.epoch, "position": self.sampler.position}}

    def _check_backend_state(self, state: dict[str, Any]) -> None:
        dali = state.get("dali")
        if dali is None:
            return
        if not isinstance(dali, dict) or sorted(dali) != ["checkpoint", "epoch", "position"]:
            raise ValueError(f"the DALI part of a loader state holds checkpoint, epoch and position; got {dali!r:.200}")

    def _load_backend_state(self, state: dict[str, Any]) -> None:
        self._live, self._checkpoint = None, None  # the next pass starts a pipeline at the loaded position
        dali = state.get("dali")
        if dali is not None:
            self._checkpoint = (dali["checkpoint"], dali["epoch"], dali["position"])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass (see `LoaderBase`), on the loader's DALI pipeline when it stands where the pass
        starts and no other pass runs on it, else on a fresh one."""
        cursor, _ = self.begin_pass()
        epoch, start = cursor.epoch, cursor.start
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
        run = self._pass(live, cursor)
        next(run)  # started: dropping or closing the pass now runs its `finally`, which frees the pipeline
        return run

    def _pass(self, live: _Live, cursor: PassCursor) -> Iterator[dict[str, Any]]:
        try:
            yield {}  # (taken by __iter__)
            for _ in range(cursor.length - cursor.start):
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
                self.batch_delivered(cursor)
                yield out
            live.epoch, live.position = cursor.epoch + 1, 0  # the feed runs on into the next epoch
            self.pass_ended(cursor)
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

    def _build(self, epoch: int, checkpoint: str | None) -> tuple[Any, Feed]:
        DaliPipeline, fn, types = self._dali
        feed = Feed(self.plan)
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

    def _define(self, pipe: Any, ctx: LoweringContext, feed: Feed) -> None:
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
