"""An image and its segmentation mask, two files of one manifest row, share every random draw."""

from __future__ import annotations

import json

import numpy as np
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.synthetic import jpeg_bytes, photo_like


def test_image_and_mask_stay_aligned(tmp_path):
    rows = []
    for i in range(6):
        # an object (a disc) lit brightly on a dimmed photo; the mask labels the object
        yy, xx = np.mgrid[0:90, 0:120]
        cy, cx, r = 30 + 5 * i, 40 + 8 * i, 22
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        photo = photo_like(90, 120, seed=i) // 2
        photo[inside] += 120
        Image.fromarray((inside * 255).astype(np.uint8)).save(tmp_path / f"{i}_mask.png")
        (tmp_path / f"{i}.jpg").write_bytes(jpeg_bytes(photo, quality=95))
        rows.append({"path": f"{i}.jpg", "mask": f"{i}_mask.png", "label": i % 2})
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    pipe = mp.Pipeline(  # no keys: every op moves every spatial field, the mask with nearest
        mp.loaders.manifest(tmp_path / "rows.jsonl"),
        {"image": mp.decoders.image(), "mask": mp.decoders.mask()},
        [A.RandomResizedCrop(48, scale=(0.3, 1.0)), A.HorizontalFlip(), A.RandomRotation(20, interpolation="bilinear"),
         A.ColorJitter(0.3, 0.3)],
        batch_size=3, seed=5, device="cpu",
    )
    assert "RandomResizedCrop: sample (fused into decode)" in repr(pipe)  # fused for the image only
    for batch in pipe.loader(num_workers=0):
        image, mask = batch["image"], batch["mask"]
        assert image.shape == (3, 3, 48, 48) and mask.shape == (3, 1, 48, 48)
        assert set(torch.unique(mask).tolist()) <= {0, 255}  # nearest: no blended mask values
        luma = image.float().mean(dim=1, keepdim=True)
        for i in range(3):
            on, off = mask[i] == 255, (mask[i] == 0) & (luma[i] > 0)  # rotation fills 0 in both
            if on.sum() > 20 and off.sum() > 20:
                assert luma[i][on].mean() > luma[i][off].mean() + 60
