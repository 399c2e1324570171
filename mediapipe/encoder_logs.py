"""SVT-AV1 kept quiet while the library encodes, without changing the user's environment for good.

libsvtav1 prints its whole configuration to stderr for every encoder unless ``SVT_LOG`` says
otherwise, and reads the variable when an encoder opens. `quiet_svt` sets it (unless the user
set it) only while some encoder of ours is open, and restores the environment when the last one
closes; a lock and a count make it safe from several threads at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

SVT_LOG_LEVEL = "1"  # errors only
_lock = threading.Lock()
_depth = 0
_set_by_us = False


@contextlib.contextmanager
def quiet_svt() -> Iterator[None]:
    """Within this block SVT-AV1 encoders print errors only (``SVT_LOG=1``), unless the user set SVT_LOG."""
    global _depth, _set_by_us
    with _lock:
        if _depth == 0 and "SVT_LOG" not in os.environ:
            os.environ["SVT_LOG"] = SVT_LOG_LEVEL
            _set_by_us = True
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _set_by_us:
                if os.environ.get("SVT_LOG") == SVT_LOG_LEVEL:  # (a value the user set meanwhile is theirs)
                    os.environ.pop("SVT_LOG", None)
                _set_by_us = False
