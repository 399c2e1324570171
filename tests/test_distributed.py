"""Two ranks under a gloo process group read disjoint samples that together cover the data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

RANK_SCRIPT = r"""
import json, os, sys
import torch.distributed as dist
import mediapipe as mp
from mediapipe import augment as A

dist.init_process_group("gloo")
pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {"image": mp.decoders.image()},
                   [A.RandomResizedCrop(16), A.HorizontalFlip()], batch_size=4, seed=3, device="cpu")
loader = pipe.loader(num_workers=1, last_batch="pad")
epochs = []
for epoch in range(2):
    loader.set_epoch(epoch)
    seen = []
    for batch in loader:
        seen += batch["index"][batch["valid"]].tolist()
    epochs.append(seen)
out = {"rank": dist.get_rank(), "len": len(loader), "epochs": epochs}
dist.barrier()
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_read_disjoint_covering_samples(image_folder: Path, tmp_path: Path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": "2"}
        procs.append(subprocess.Popen([sys.executable, str(script), str(image_folder)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT "):]))
    results.sort(key=lambda r: r["rank"])
    assert results[0]["len"] == results[1]["len"]  # equal batch counts: no rank waits on another
    for epoch in range(2):
        a, b = results[0]["epochs"][epoch], results[1]["epochs"][epoch]
        assert not set(a) & set(b)
        assert sorted(a + b) == list(range(24))
    assert results[0]["epochs"][0] != results[0]["epochs"][1]  # a new permutation each epoch
