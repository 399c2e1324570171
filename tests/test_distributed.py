"""Two ranks under a gloo process group: the same number of steps on every rank (a DDP
all-reduce per step never waits on a rank that ran out), and disjoint samples that together
cover the data, under the default last_batch and "pad"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_two_gloo_ranks

RANK_SCRIPT = r"""
import json, sys
from datetime import timedelta
import torch
import torch.distributed as dist
import mediapipe as mp
from mediapipe import augment as A

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
runs = {}
for name, source, kwargs in (("pad", mp.loaders.folder(sys.argv[1]), {"last_batch": "pad"}),
                             ("default", mp.loaders.manifest(sys.argv[2]), {})):
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.RandomResizedCrop(16), A.HorizontalFlip()],
                       batch_size=5 if name == "default" else 4, seed=3, device="cpu")
    loader = pipe.loader(num_workers=1, **kwargs)
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen, steps, total = [], 0, 0
        for batch in loader:
            valid = batch["valid"]
            seen += batch["index"][valid].tolist()
            n = valid.sum().reshape(1)
            dist.all_reduce(n)  # as DDP does every step
            total += int(n)
            steps += 1
        epochs.append({"seen": seen, "steps": steps, "total": total})
    runs[name] = {"len": len(loader), "epochs": epochs}
out = {"rank": dist.get_rank(), "runs": runs}
dist.barrier()
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


def test_two_gloo_ranks_step_together_and_read_disjoint_covering_samples(image_folder: Path, tmp_path: Path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    manifest = tmp_path / "21.jsonl"  # 21 samples, 2 ranks, batch 5: 11 and 10 samples, 3 batches each
    files = sorted(image_folder.rglob("*.jpg"))[:21]
    manifest.write_text("".join(json.dumps({"path": str(p)}) + "\n" for p in files))
    results = run_two_gloo_ranks(script, str(image_folder), str(manifest))
    for name, count in (("pad", 24), ("default", 21)):
        a, b = results[0]["runs"][name], results[1]["runs"][name]
        assert a["len"] == b["len"]  # equal batch counts: no rank waits on another
        for epoch in range(2):
            ea, eb = a["epochs"][epoch], b["epochs"][epoch]
            assert ea["steps"] == eb["steps"] == a["len"]  # len() is what each rank gets
            assert not set(ea["seen"]) & set(eb["seen"])
            assert sorted(ea["seen"] + eb["seen"]) == list(range(count))
            assert ea["total"] == eb["total"] == count  # padding never counted as a sample
        assert a["epochs"][0]["seen"] != a["epochs"][1]["seen"]  # a new permutation each epoch
