"""Which stream of a file with several a decoder reads: the one FFmpeg's command line picks."""

from __future__ import annotations

from typing import Any

_DEFAULT, _ATTACHED_PIC = 0x1, 0x400  # AV_DISPOSITION_DEFAULT, AV_DISPOSITION_ATTACHED_PIC


def main_stream(streams: Any) -> Any:
    """The stream FFmpeg's command line picks among PyAV ``streams`` (all video or all audio):
    never a cover picture (``attached_pic``) while another is there, the default-flagged one
    before the rest, then the most pixels (video) or channels (audio), the first of equals.
    A file's first stream may be its cover art, a thumbnail track or a commentary."""

    def score(stream: Any) -> tuple[bool, bool, int]:
        disposition = int(stream.disposition or 0)
        ctx = stream.codec_context  # None for a codec FFmpeg cannot decode: ranked last by size
        if ctx is None:
            size = 0
        else:
            size = (ctx.width or 0) * (ctx.height or 0) if stream.type == "video" else (ctx.channels or 0)
        return (not disposition & _ATTACHED_PIC, bool(disposition & _DEFAULT), size)

    if not streams:
        raise IndexError("no stream of that kind")  # as ``streams[0]`` would
    return max(streams, key=score)  # max keeps the first of equal scores
