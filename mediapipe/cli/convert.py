"""`mediapipe convert SRC OUT`: a folder or manifest of media to sharded, indexed datasets."""

from __future__ import annotations

import argparse
import errno
import json
import sys

from mediapipe.dataset.transcode import AUDIO_CODECS, TranscodeOptions
from mediapipe.reasons import reason


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help="what to convert, recognised by its layout, suffix or first line: a folder of media "
                               "(class sub-folders become labels); a JSON-lines manifest (path, label, more fields); "
                               "a Hugging Face save_to_disk folder or Hub snapshot of Parquet files (--split), or a "
                               ".parquet file; TFRecord files of tf.train.Example (.tfrecord, .tfrecords, .record, or a "
                               "folder of them); MXNet RecordIO (.rec with its .idx, or a folder of them); a NeMo "
                               "manifest (audio_filepath, duration, offset, text); Lhotse cuts (.jsonl or .jsonl.gz); "
                               "a COCO annotation file (.json; --images-dir, --masks); or, with --labels-dir, a folder "
                               "of images with YOLO labels")
    p.add_argument("out", help="the output folder (new, or the one to --resume), or a URL (s3://bucket/out, gs://...; "
                               "credentials and endpoint from the environment, as the store's own tools read them)")
    p.add_argument("--split", default=None,
                   help="Hugging Face: the split to convert, of a save_to_disk DatasetDict folder or of a Parquet "
                        "snapshot whose files name several (data/<split>-*.parquet, <config>/<split>/0000.parquet)")
    g = p.add_argument_group("shards")
    g.add_argument("--shard-size", default="256MB",
                   help="per shard: a size of input bytes (256MB, 1GB) or a sample count (1000); default 256MB")
    g.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                   help="shuffle inputs across shards (default: on)")
    g.add_argument("--seed", type=int, default=0, help="seed of the shuffle (default 0)")
    g.add_argument("--workers", type=int, default=1, help="processes (local) or CPUs of a local Ray (default 1)")
    g.add_argument("--resume", action="store_true", help="continue a killed conversion into OUT")
    g.add_argument("--engine", choices=("local", "ray"), default="local", help="where shards are converted")
    g.add_argument("--ray-address", default=None, help="an existing Ray cluster; a local one when absent")
    g.add_argument("--allow-failures", action="store_true", help="exit 0 even when some inputs failed")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="a progress bar on a terminal, log lines otherwise (default: on)")
    i = p.add_argument_group("images")
    i.add_argument("--image-max-side", type=int, default=None, help="longest side in pixels (never upscaled)")
    i.add_argument("--jpeg-quality", type=int, default=90, help="quality of re-encoded JPEGs (default 90)")
    i.add_argument("--reencode", action="store_true", help="re-encode JPEGs that could be copied as they are")
    v = p.add_argument_group("video")
    v.add_argument("--video-codec", choices=("av1", "copy"), default="av1",
                   help="av1 (SVT-AV1 in Matroska) or copy (keep the stream); default av1")
    v.add_argument("--video-max-height", type=int, default=None, help="rows (never upscaled)")
    v.add_argument("--fps", type=float, default=None, help="output frame rate (default: the input's)")
    v.add_argument("--keyframe-interval", type=int, default=16, help="frames between key frames (default 16)")
    v.add_argument("--crf", type=int, default=35, help="SVT-AV1 quality, 0-63, lower is better (default 35)")
    v.add_argument("--preset", type=int, default=10, help="SVT-AV1 speed, 0-13, higher is faster (default 10)")
    v.add_argument("--audio", dest="keep_audio", action=argparse.BooleanOptionalAction, default=True,
                   help="keep video files' audio tracks (default: keep)")
    d = p.add_argument_group("detection (boxes, labels and masks go into each sample's .json member)")
    d.add_argument("--images-dir", default=None, help="COCO: the folder the file names are relative to "
                                                      "(default: the annotation file's folder)")
    d.add_argument("--masks", action="store_true", help="COCO: also store each object's mask (needs pycocotools)")
    d.add_argument("--labels-dir", default=None, help="YOLO: SRC is the images folder, this one holds the labels")
    d.add_argument("--classes", default=None, help="YOLO: class names (a text file, one per line, or a data.yaml)")
    a = p.add_argument_group("audio")
    a.add_argument("--audio-rate", type=int, default=None, help="sample rate in Hz (default: the input's)")
    a.add_argument("--audio-channels", type=int, choices=(1, 2), default=None, help="1 (mono) or 2 (stereo)")
    a.add_argument("--audio-codec", choices=AUDIO_CODECS, default="flac", help="default flac")


def detection_source(args: argparse.Namespace) -> object:
    """The Hugging Face split (--split), or the COCO or YOLO source the detection options ask
    for, or SRC itself."""
    from mediapipe import loaders

    if getattr(args, "split", None) is not None:
        if args.labels_dir is not None or args.images_dir is not None or args.masks:
            raise ValueError("--split picks a split of a Hugging Face dataset; it does not go with the COCO or "
                             "YOLO options")
        return loaders.huggingface(args.src, split=args.split)
    if args.labels_dir is not None:
        return loaders.yolo(args.src, labels_dir=args.labels_dir, classes=args.classes)
    if args.images_dir is not None or args.masks:
        return loaders.coco(args.src, args.images_dir, masks=args.masks)
    return args.src


def run(args: argparse.Namespace) -> int:
    from mediapipe.dataset.convert import convert

    try:
        src = detection_source(args)
        options = TranscodeOptions(
            image_max_side=args.image_max_side, jpeg_quality=args.jpeg_quality, reencode=args.reencode,
            video_codec=args.video_codec, video_max_height=args.video_max_height, fps=args.fps,
            keyframe_interval=args.keyframe_interval, crf=args.crf, preset=args.preset, keep_audio=args.keep_audio,
            audio_rate=args.audio_rate, audio_channels=args.audio_channels, audio_codec=args.audio_codec)
        result = convert(src, args.out, shard_size=args.shard_size, shuffle=args.shuffle, seed=args.seed,
                         workers=args.workers, resume=args.resume, engine=args.engine, options=options,
                         ray_address=args.ray_address, progress=args.progress)
    except OSError as err:  # a full disk, a folder that cannot be written: the file and the reason
        print(f"mediapipe convert: error: {reason(err)}", file=sys.stderr)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"mediapipe convert: the shards finished so far are kept: free some space, then run the same "
                  f"command with --resume to finish {args.out}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as err:
        print(f"mediapipe convert: error: {err}", file=sys.stderr)
        return 2
    print(result.summary())
    for failure in result.new_failures:  # each once: the conversion itself only logs them at debug level
        print(f"FAILED {failure['input']}: {failure['reason']}", file=sys.stderr)
    earlier = len(result.failures) - len(result.new_failures)
    if result.failures:
        n = len(result.failures)
        print(f"{n} input{'s' if n != 1 else ''} could not be converted"
              + (f" ({earlier} of them by an earlier run)" if earlier else "")
              + f"; the list is in {json.dumps(str(args.out))}/report.json", file=sys.stderr)
        return 0 if args.allow_failures else 1
    return 0
