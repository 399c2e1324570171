"""`BatchBuilder`: a worker's job, a `BatchTask` in and a `HostBatch` out.

Each sample goes through the sample stage under the ``on_error`` policy, the samples are
collated (into shared memory in a worker process), the batch ops' parameters are drawn, and,
for a CPU device, the batch ops run here too. The builder pickles (it is what a worker
process receives) and is the same function inline, in threads and in processes.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from mediapipe.options import Where
from mediapipe.plan import Plan
from mediapipe.stages.batch_stage import batch_params, run_batch_ops
from mediapipe.stages.collate import collate
from mediapipe.stages.host_batch import BatchTask, HostBatch, lend
from mediapipe.stages.sample_stage import SampleStage
from mediapipe.stages.stats import StageStats


class BatchBuilder:
    """Builds the host batches of ``plan``; with ``batch_ops="worker"`` the batch-stage ops run here as well.

    ``batch["valid"]`` (bool (B,)) marks real samples; it is present when the task asks for it
    (the sampler may pad), when padding happened, or under ``on_error="replace"``."""

    def __init__(self, plan: Plan, *, batch_ops: Where = "device") -> None:
        self.plan, self.batch_ops = plan, batch_ops
        self.samples = SampleStage(plan)
        self.policy = plan.error_policy
        # fields a batch op replaces: when it runs here, the collated input never leaves the worker
        self.private = frozenset(f for p in plan.batch_ops for f in p.op.outputs if f in p.op.inputs) \
            if batch_ops == "worker" else frozenset()

    def modules(self) -> list[str]:
        """The modules a worker imports to run this builder: its ops', source's and decoders'
        (a forkserver imports them once, before it forks any worker)."""
        from mediapipe.decoders.registry import decoder_class

        found = {type(op).__module__ for op in self.plan.ops} | {type(self.plan.source).__module__}
        found |= {decoder_class(spec.kind, spec.backend).__module__ for spec in self.plan.decode.values()}
        return sorted(m for m in found if m != "__main__")

    def __call__(self, task: BatchTask) -> HostBatch:
        host = self.collated(task)
        if self.batch_ops == "worker":
            t0 = time.perf_counter()
            host.data = run_batch_ops(self.plan.at_epoch(host.epoch), host.data, host.params, host.stats.seconds)
            host.stats.seconds["batch_ops"] += time.perf_counter() - t0
            host.params, host.batch_ops_where = {}, "worker"
        return lend(host)

    def collated(self, task: BatchTask) -> HostBatch:
        """The sample stage for each sample of the task, under ``on_error``, then collate and
        the batch ops' parameters, with the ops' arguments at the task's epoch (`Plan.at_epoch`)."""
        plan, stats = self.plan.at_epoch(task.epoch), StageStats()
        order = task.indices.tolist()
        plan.source.prefetch(order)
        samples: list[dict[str, Any] | None] = []
        failures: list[tuple[int, BaseException]] = []
        first_at: dict[int, int] = {}
        stand_ins: dict[int, tuple[int, BaseException]] = {}  # `HostBatch.stand_ins`
        for position, index in enumerate(order):
            real = position < task.valid
            if not real and index in first_at:  # padding repeats a sample of this batch: the same values
                samples.append(samples[first_at[index]])
                if first_at[index] in stand_ins:
                    stand_ins[position] = stand_ins[first_at[index]]
                continue
            first_at.setdefault(index, position)
            samples.append(self.policy.load(lambda i: self.samples.load(i, task.epoch, stats), index, task.epoch,
                                            stats, counted=real, failures=failures))
            if samples[-1] is not None and samples[-1]["index"] != index:
                stand_ins[position] = (index, failures[-1][1])
            stats.samples += real
        t0 = time.perf_counter()
        template = None
        if all(s is None for s in samples):  # "replace": every sample failed; zeros of a good one's shapes
            template = self.policy.template(lambda i: self.samples.load(i, task.epoch, StageStats()), task.epoch,
                                            failures)
        policies = plan.collate_policies()
        replace = plan.on_error == "replace"
        data = collate(samples, policies, order if replace else None, self.private, template=template)
        if task.with_valid or task.valid < len(order) or replace:
            mask = torch.tensor([s is not None for s in samples], dtype=torch.bool)
            mask[task.valid:] = False
            data["valid"] = mask
        params = batch_params(plan, task.draw_number, task.epoch, task.indices, samples, data)
        stats.seconds["collate"] += time.perf_counter() - t0
        stats.batches += 1
        return HostBatch(task.number, task.epoch, data, params, stats, draw_number=task.draw_number, stand_ins=stand_ins)
