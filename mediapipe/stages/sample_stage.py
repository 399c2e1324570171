"""The sample stage: one sample read, decoded field by field, and through the sample-stage ops.

Runs in a worker (or inline). Every random draw is keyed by (seed, epoch, sample index,
op index), so a sample gets the same values in any process. A field whose decoder runs on
the device is left as a `PendingDecode` (bytes, checked header, and the sample's `SampleProgress`:
what the device's half needs, such as the fused op's drawn parameters).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch

from mediapipe.decoders.base import NO_HINT, Decoded, Decoder
from mediapipe.decoders.exif import file_orientation, oriented_size
from mediapipe.errors import DecodeError
from mediapipe.fields import BOXES, KEYPOINTS, LABEL, MASK
from mediapipe.loaders.sources.targets import BAD_ANNOTATION, frame_problem, orient_targets
from mediapipe.plan import PlacedOp, Plan
from mediapipe.rng import decoder_rng
from mediapipe.sample import SampleRef
from mediapipe.stages.cache_plan import entry_index
from mediapipe.stages.draws import draw_within_limits
from mediapipe.stages.progress import PendingDecode, SampleProgress
from mediapipe.stages.sample_ops import run_sample_ops
from mediapipe.stages.stats import StageStats


class SampleStage:
    """Read, decode and run the sample-stage ops of ``plan`` on one sample at a time."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        # the source's fields in pixels (boxes, keypoints, masks per object) and the decoded image
        # they are pixels of: the first raster field, as the ops on boxes take their canvas
        types = plan.base_types
        self.targets = {n: t for n, t in types.items() if n not in plan.decode and t.rows_are_objects
                        and t.kind in (BOXES, KEYPOINTS, MASK)}
        self.targets_canvas = next((n for n in plan.decode if types[n].spec.has_canvas), None)
        # with an epoch cache: its fields decoded whole (no fusion into them), the ops stored with them
        # run before storing, the others after reading
        self.cache = plan.cache
        self.fused = plan.fused if self.cache is None else self.cache.fused(plan)
        stored = set(self.cache.prefix) if self.cache is not None else set()
        self.stored_ops = [p for p in plan.worker_sample_ops if p.index in stored]
        self.later_ops = [p for p in plan.worker_sample_ops if p.index not in stored]
        self._last: SampleStage | None = None  # the stage of the last epoch's plan asked for (`at_epoch`)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_last": None}  # each process resolves its epochs itself

    def at_epoch(self, epoch: int) -> SampleStage:
        """This stage running ``epoch``'s plan (`Plan.at_epoch`, which keeps the plans): itself,
        unless an op's argument follows the epoch (a `Schedule`)."""
        plan = self.plan.at_epoch(epoch)
        if plan is self.plan:
            return self
        last = self._last
        if last is None or last.plan is not plan:
            last = self._last = SampleStage(plan)
        return last

    def load(self, index: int, epoch: int, stats: StageStats) -> dict[str, Any]:
        """Sample ``index`` of ``epoch``: its decoded fields after the sample-stage ops, its
        label, index and the source's extra fields. Raises on a bad sample."""
        stage = self.at_epoch(epoch)
        if stage is not self:
            return stage.load(index, epoch, stats)
        ref = self.plan.source.ref(index)
        data = self.source_fields(ref)
        progress = SampleProgress(meta=ref.meta)
        cached, stamp = self.cached(ref, index, stats)
        decoders, spans = self.plan.decoders(), {}
        for field_index, name in self.plan.decode_order:
            if cached is None or name not in self.cache.fields:
                self.decode_field(ref, name, field_index, decoders[name], epoch, data, progress, stats, spans)
        t0, writing = time.perf_counter(), 0.0
        if cached is not None:
            data.update(cached)
        else:
            run_sample_ops(self.plan, self.stored_ops, data, progress, epoch, index, ref.key)
            if self.cache is not None:
                writing = self.store(index, stamp, data, stats)
        run_sample_ops(self.plan, self.later_ops, data, progress, epoch, index, ref.key)
        stats.seconds["sample_ops"] += time.perf_counter() - t0 - writing
        return data

    def cached(self, ref: SampleRef, index: int, stats: StageStats) -> tuple[dict[str, Any] | None, Any]:
        """Sample ``index``'s fields from the epoch cache (None: not there, or no cache) and the
        stamp of its media that an entry stored now records."""
        if self.cache is None:
            return None, None
        t0 = time.perf_counter()
        stamp = self.cache.stamp(self.plan, ref)
        values = self.cache.read(entry_index(self.plan, index), stamp, stats)
        stats.seconds["cache_read"] += time.perf_counter() - t0
        return values, stamp

    def store(self, index: int, stamp: Any, data: dict[str, Any], stats: StageStats) -> float:
        """The cached fields of a decoded sample, shrunk to ``max_side`` first where the cache asks
        (in ``data`` too, so this epoch sees what the next ones read), into the epoch cache; its seconds."""
        t0 = time.perf_counter()
        self.cache.shrink(data, self.plan)
        self.cache.write(entry_index(self.plan, index), stamp, data, stats)
        seconds = time.perf_counter() - t0
        stats.seconds["cache_write"] += seconds
        return seconds

    def source_fields(self, ref: SampleRef) -> dict[str, Any]:
        """What a sample takes from its source rather than its decoders: ``index``, ``label``
        (when the source labels it) and the source's own fields (a manifest's columns, boxes
        as tensors). Both backends start a sample here."""
        data: dict[str, Any] = {"index": ref.index}
        if ref.label is not None:
            data["label"] = ref.label
        data.update(ref.fields)
        self.check_objects(data, ref.key)
        return data

    def check_objects(self, data: dict[str, Any], key: str) -> None:
        """A source's boxes and keypoints as float32 (N, 4) and (N, ..., 2) tensors (a JSON list of
        lists too; a sample without the field, or with an empty list, has none: (0, 4) or (0, 2)),
        its per-object class ids as int64 (N,) and other per-object values as tensors (N, ...);
        another shape is a bad annotation of this sample."""
        for name in self.plan.object_fields:
            kind, spec = self.plan.base_types[name].kind, self.plan.base_types[name].spec
            try:
                value = torch.as_tensor(data.get(name, ()), dtype=torch.float32 if spec.is_objects else None)
            except (TypeError, ValueError, RuntimeError) as err:
                raise DecodeError(key, "source", f"field {name!r}: not numbers ({err})", category="bad annotation") from None
            if not spec.is_objects:
                data[name] = self._per_object_values(name, kind, value, key)
                continue
            if value.numel() == 0:
                value = value.reshape(0, 4) if kind == BOXES else value.reshape(0, *value.shape[1:] or (2,))
            if (kind == BOXES and (value.ndim != 2 or value.shape[1] != 4)) or (kind != BOXES and value.shape[-1:] != (2,)):
                expected = "(N, 4)" if kind == BOXES else "(N, ..., 2)"
                raise DecodeError(key, "source", f"field {name!r} ({kind}) has shape {tuple(value.shape)}, expected "
                                  f"{expected}", category="bad annotation")
            if not bool(torch.isfinite(value).all()):
                raise DecodeError(key, "source", f"field {name!r} ({kind}) holds NaN or infinite coordinates",
                                  category="bad annotation")
            data[name] = value

    @staticmethod
    def _per_object_values(name: str, kind: str, value: torch.Tensor, key: str) -> torch.Tensor:
        """One value (or row) per object: class ids int64 (N,), other values as they are; none: (0,)."""
        if value.numel() == 0 and value.ndim <= 1:
            return torch.zeros(0, dtype=torch.int64 if kind == LABEL else torch.float32)
        if value.ndim == 0:
            raise DecodeError(key, "source", f"field {name!r} (per object) is one number, expected one per object",
                              category="bad annotation")
        if kind == LABEL:
            if value.is_floating_point() and not bool((value == value.round()).all()):
                raise DecodeError(key, "source", f"field {name!r} (class ids per object) holds fractions",
                                  category="bad annotation")
            value = value.to(torch.int64)
        return value

    def decode_field(self, ref: SampleRef, name: str, field_index: int, decoder: Decoder, epoch: int,
                     data: dict[str, Any], progress: SampleProgress, stats: StageStats,
                     spans: dict[str, Any]) -> None:
        """Field ``name`` of one sample into ``data``: read its blob, probe the header when an op
        is fused into the decoder (drawing that op's parameters for the hint), decode, and
        finish the fused op. A device-decoded field becomes a `PendingDecode` instead. A field read
        ``from_field`` another (a video's audio track) reads that field's blob and decodes the
        time spans the other's decoder recorded in ``spans``."""
        plan = self.plan
        t0 = time.perf_counter()
        source = plan.decode[name].from_field
        blob = plan.blob(ref, name)
        if decoder.reads_whole and blob.data is None:
            blob = replace(blob, data=blob.read())
        else:
            blob.check()  # the decoder opens the file itself: never a FIFO or a device
        stats.bytes += blob.nbytes()
        t1 = time.perf_counter()
        stats.seconds["read"] += t1 - t0
        hint, fused = NO_HINT, self.fused.get(name)
        meta = dict(ref.meta)
        frame = self.targets_frame(ref, name, decoder, blob, data)
        if fused is None and name in plan.device_fields:
            meta.update(decoder.probe(blob))  # reject a bad header in the worker, where on_error applies
        if fused is not None:
            probe = decoder.probe(blob)
            meta.update(probe)
            if "height" in meta and "width" in meta:
                meta["size"] = (meta["height"], meta["width"])
            params = progress.drawn.get(fused.index)  # drawn already when fused into an earlier field too
            if params is None:  # a draw on a source's boxes (RandomIoUCrop) has them before decoding
                draw_meta = {**meta, "fields": {f: data[f] for f in fused.op.draws_on()}}
                params = draw_within_limits(plan, fused, epoch, ref.index, draw_meta, ref.key)
                progress.drew(fused.index, params, meta.get("size"))
            else:
                self.check_same_canvas(fused, name, progress.canvas.get(fused.index), meta.get("size"), blob.name)
            hint = fused.op.decode_hint(params, meta) or NO_HINT
        if source is not None:
            hint = replace(hint, span=spans.get(source))
        elif hint.window is None and decoder.kind == "audio" and "segment" in ref.meta:
            hint = replace(hint, window=tuple(ref.meta["segment"]))  # a manifest's utterance within its file
        if frame is not None and (fused is not None or name in plan.device_fields) and "height" in meta and "width" in meta:
            self.check_frame(blob, decoder, frame, (meta["height"], meta["width"]))  # the probed header
        if name in plan.device_fields:  # the device decodes it, batched; the worker checked the header
            data[name] = PendingDecode(blob, hint, meta, progress)
            return
        x = decoder.decode(blob, hint, decoder_rng(plan.seed, epoch, ref.index, field_index), meta)
        if isinstance(x, Decoded):
            data.update({f"{name}_{side}": value for side, value in x.fields.items()})
            if x.span is not None:
                spans[name] = x.span
            stats.frames += x.frames
            if x.stages:
                stats.seconds.update({f"decode_{part}": value for part, value in x.stages.items()})
            if x.fallback is not None:
                stats.count_fallback(decoder.name, x.fallback)
            x = x.value
        if decoder.auto_fallback is not None:
            stats.count_fallback(decoder.name, decoder.auto_fallback)
        if frame is not None and fused is None:
            self.check_frame(blob, decoder, frame, tuple(x.shape[-2:]))
        t2 = time.perf_counter()
        stats.seconds["decode"] += t2 - t1
        if fused is not None and hint is not NO_HINT:
            x = fused.op.apply_decoded(x, progress.drawn[fused.index])
            progress.done.add((fused.index, name))
            dst = fused.op.outputs[fused.op.inputs.index(name)]
            data[dst] = x
            if dst != name:
                data[name] = x  # the op wrote a new field; the decoded field is what the decoder gave
            stats.seconds["sample_ops"] += time.perf_counter() - t2
        else:
            data[name] = x

    def targets_frame(self, ref: SampleRef, name: str, decoder: Decoder, blob: Any,
                      data: dict[str, Any]) -> tuple[tuple[int, int], int] | None:
        """For the image the source's targets are in pixels of (`targets_canvas`), decoded by an image
        decoder: its declared (H, W) and the EXIF orientation its decoder turns it by, with the
        targets in ``data`` turned the same way (before any op draws on them: RandomIoUCrop's crop
        is drawn from the boxes). None for another field, or a sample without targets or size."""
        if name != self.targets_canvas or decoder.kind != "image" or not any(f in data for f in self.targets):
            return None
        height, width = ref.meta.get("height"), ref.meta.get("width")
        orientation = decoder.orientation(blob.read())
        if orientation != 1:
            stored = (height, width) if type(height) is int and type(width) is int else None
            if stored is None:  # no declared size: the header's, turned back to the stored frame
                probe = decoder.probe(blob)
                stored = oriented_size(orientation, probe["height"], probe["width"])
            data.update(orient_targets(data, self.targets, orientation, stored))
        if type(height) is not int or type(width) is not int:
            return None
        return (height, width), orientation

    @staticmethod
    def check_same_canvas(fused: PlacedOp, name: str, canvas: tuple[int, int] | None, size: tuple[int, int] | None,
                          path: str) -> None:
        """A `DecodeError` naming the file where field ``name``, fused into the op that an earlier field
        drew for, is not the size that draw was made on (the crop would land elsewhere on it)."""
        if canvas is None or size is None or tuple(canvas) == tuple(size):
            return
        op = type(fused.op).__name__
        raise DecodeError(path, op, f"{op} draws once for {list(fused.op.inputs)} on the decoded {tuple(canvas)}, but "
                          f"{name} is {tuple(size)}", category="fields of one draw differ in size")

    @staticmethod
    def check_frame(blob: Any, decoder: Decoder, frame: tuple[tuple[int, int], int], decoded: tuple[int, int]) -> None:
        """A `DecodeError` naming the file where the decoded image is not the size the source declares
        for its targets (turned by its EXIF orientation where the decoder turns it)."""
        declared, orientation = frame
        if oriented_size(orientation, *declared) == tuple(decoded):
            return
        problem = frame_problem(declared, decoded, orientation, file_orientation(blob.read()))
        raise DecodeError(blob.name, decoder.name, problem, category=BAD_ANNOTATION)
