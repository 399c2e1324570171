"""How close the fused decode (the scenario's first op done by the decoder) comes to the unfused
path, once per dataset, for the report's PSNR column."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from mediapipe.bench.image_data import (
    IMAGE_EXTENSIONS,
    converted_images,
    dataset_layout,
    manifest_rows,
    scenario_ops,
)
from mediapipe.decoders import create
from mediapipe.decoders.image import plan_decode
from mediapipe.rng import op_rng
from mediapipe.sample import Blob

PSNR_SAMPLES = 48  # images per dataset, spread over it
PSNR_CAP = 100.0  # dB given to a bit-exact output


def _spread(items: list[Any], count: int) -> list[Any]:
    step = max(1, len(items) // count)
    return items[::step][:count]


def sample_image_bytes(data: Path, count: int) -> list[tuple[str, bytes]]:
    """(name, bytes) of up to ``count`` images spread over a folder, manifest or converted dataset."""
    layout = dataset_layout(data)
    if layout == "converted":
        out = []
        for item in _spread(converted_images(data), count):
            with open(item.tar, "rb") as f:
                f.seek(item.offset)
                out.append((f"{item.tar}@{item.offset}", f.read(item.size)))
        return out
    if layout == "manifest":
        paths = [p for p, _ in manifest_rows(data)]
    else:
        paths = sorted(str(p) for p in data.rglob("*") if p.is_file() and not p.name.startswith(".")
                       and p.suffix.lower().lstrip(".") in IMAGE_EXTENSIONS)
    return [(p, Path(p).read_bytes()) for p in _spread(paths, count)]


def fused_psnr(scenario: str, data: Path, samples: int = PSNR_SAMPLES, seed: int = 0) -> dict[str, Any]:
    """How close this library's fused decode (the scenario's first op done by the decoder, on
    the CPU) comes to the unfused path: a full Pillow decode, then the same op at full
    resolution. PSNR in dB over ``samples`` images (median, 10th percentile, min; 100 where
    bit-exact), the largest absolute error, and the share decoded at a reduced DCT scale."""
    op = scenario_ops(scenario)[0]
    decoder = create("image", "auto")  # as the loader workers make it
    scores, worst, reduced = [], 0, 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one image at a time: more threads only contend, as in the workers
    try:
        for index, (name, payload) in enumerate(sample_image_bytes(data, samples)):
            blob = Blob(name, data=payload)
            meta = decoder.probe(blob)
            meta["size"] = (meta["height"], meta["width"])
            params = op.sample_params(op_rng(seed, 0, index, 0), meta)
            hint = op.decode_hint(params, meta)
            got = op.apply_decoded(decoder.decode(blob, hint, op_rng(seed, 0, index, 1), meta), params)
            full = torch.from_numpy(np.array(Image.open(io.BytesIO(payload)).convert("RGB"))).permute(2, 0, 1)
            expected = op.apply(full, params)
            mse = (got.double() - expected.double()).pow(2).mean().item()
            scores.append(PSNR_CAP if mse == 0 else min(PSNR_CAP, 10 * float(np.log10(255**2 / mse))))
            worst = max(worst, int((got.int() - expected.int()).abs().max()))
            reduced += plan_decode(hint, meta["size"]).denominator > 1
    finally:
        torch.set_num_threads(threads)
    if not scores:
        return {"samples": 0}
    return {"samples": len(scores), "backend": decoder.name, "op": type(op).__name__,
            "median_db": float(np.median(scores)), "p10_db": float(np.percentile(scores, 10)),
            "min_db": float(min(scores)), "max_abs_error": worst, "reduced": reduced / len(scores)}
