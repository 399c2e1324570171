"""What the bench tables' columns and backend names mean, printed under the tables so a
reader needs neither the source nor the JSON notes to read them."""

from __future__ import annotations

from mediapipe.bench.core import INPUT_BOUND_FRACTION

# column header -> meaning (only the columns a report shows are listed under it)
COLUMNS: dict[str, str] = {
    "samples/s (min-max)": "median over the timed repetitions (min-max across them); the unit is the scenario's",
    "MB/s": "encoded input read per second (samples/s x the dataset's mean file size)",
    "decoded": "decoded megapixels, frames or seconds of audio per second",
    "useful frames/s": "frames delivered in clips (clips/s x frames per clip)",
    "decoded frames/s": "every frame the decoder produced, lead-in from the key frame included; a ceiling row "
                        "decodes every frame of every file in order, so for it decoded = useful",
    "decoded/useful": "frames the decoder produced per frame delivered in a clip (lead-in and frames between "
                      "strided picks above 1; clips that share frames below 1)",
    "decoded/ceiling": "decoded frames/s over the faster sequential ceiling row (pyav `ceiling` or `dav1d`) of the "
                       "same run and threads: how close the clip loader comes to decoding at full speed",
    "1st batch": "building the pipeline, starting workers and delivering the first batch",
    "CPU": "CPU seconds of the backend's process and its workers over the timed windows / wall seconds / cores",
    "peak RSS": "largest resident memory of the backend's process plus its workers, sampled every 0.1 s "
                "(pages a worker shares with its parent count once per process)",
    "RSS growth": "resident memory after the last timed repetition against after the first; the stream runs on "
                  "across repetitions, so growth is memory kept per batch",
    "private": "memory no other process maps (Private_Clean + Private_Dirty) after the last repetition: "
               "what the loader really costs",
    "PSS": "proportional set size of the backend's process and its workers after the last repetition: each "
           "shared page divided among the processes that map it (an epoch cache, read not mapped, is not in it)",
    "input-bound": f"with --step-ms: 'yes' when the training step waited for input more than "
                   f"{INPUT_BOUND_FRACTION:.0%} of the simulated step time; (N% wait) is that wait as a share of "
                   "the step time",
    "PSNR med/min": "the fused decode (crop chosen before decoding, reduced DCT scale, a progressive JPEG's final "
                    "refinement scans skipped) against a full decode then "
                    "the same crop: median/minimum dB over the dataset; 'exact' when bit-identical. ffcv: its "
                    "centre-crop decoder's output (its decode of the .beton's re-encoded JPEG, crop and resize, "
                    "as its random-crop decoder runs them) against a full decode of the source image, the "
                    "same box, antialiased bilinear resize",
    "mediapipe/peer": "this library's samples/s over the row's, same scenario, device, workers and data",
}

# backend name -> what it runs
BACKENDS: dict[str, str] = {
    "mediapipe": "this library's loader (torch backend, worker processes)",
    "mediapipe-cached": "this library's loader with an epoch cache (mp.EpochCache) in RAM, images decoded in the "
                        "workers, filled by one untimed epoch first: the second epoch on (decoded images read, the random ops run)",
    "mediapipe-cache-fill": "this library's loader with an epoch cache that every sample is new to (decoded whole, "
                            "then stored): the first epoch's cost",
    "mediapipe-dali": "this library's pipeline lowered onto DALI: pipe.loader(backend='dali')",
    "mediapipe-hf": "this library reading a Parquet copy of the images through mp.loaders.huggingface()",
    "mediapipe-ray": "this library with its sample stage on Ray actors: pipe.loader(backend='ray')",
    "mediapipe-http": "this library reading the converted shards over HTTP range requests (local server)",
    "torchvision": "torch DataLoader + ImageFolder (Pillow) + torchvision transforms v2: the image baseline "
                   "(detection: CocoDetection wrapped for tv_tensors)",
    "torchvision-gpu": "torchvision's GPU pipeline: DataLoader workers read bytes, decode_jpeg(device='cuda') per "
                       "batch (nvJPEG), transforms v2 on the GPU",
    "hf-datasets": "datasets' Dataset.from_parquet + with_transform (transforms v2) in a DataLoader",
    "ffcv": "FFCV 1.0.2's Loader (os_cache, its threads; --workers 0 runs 1 thread, it has no in-process mode) on "
            "a .beton written once from the row's data at --as-shards' max side and JPEG quality (FFCV re-encodes "
            "every image; --as-shards copies the JPEGs); CPU only",
    "dali": "NVIDIA DALI's own pipeline for the scenario (CPU operators with device_id=None, or the GPU ones)",
    "pyav": "torch DataLoader decoding each sample with PyAV (torchaudio features for audio): the naive "
            "video and audio baseline",
    "torchcodec": "torchcodec's VideoDecoder and clip samplers in a DataLoader (clips_at_random_indices; "
                  "clips_at_regular_indices for uniform clips)",
    "mediapipe-clipwise": "this library's PyAV decoder decoding each clip of a video on its own (index and "
                          "packets kept, as in the loader) in a DataLoader: what one pass per video saves",
    "closure": "the closure ceiling: exactly the packets the clips need (the wanted frames and what they "
               "reference), sent to one open libdav1d decoder per file, nothing converted or resized; each "
               "worker holds every file's packets and decoder, so its memory is not a loader's",
    "dav1d": "the dav1d command line decoding every frame of every file: an AV1 decode ceiling",
    "ceiling": "PyAV (libdav1d) decoding every frame of every file in order: the sequential decode ceiling",
}


def legend_lines(headers: list[str], backends: list[str]) -> list[str]:
    """``column: meaning`` then ``backend: what it runs`` lines for what a report shows."""
    lines = [f"{h}: {COLUMNS[h]}" for h in headers if h in COLUMNS]
    lines += [f"{b}: {BACKENDS[b]}" for b in backends if b in BACKENDS]
    return lines
