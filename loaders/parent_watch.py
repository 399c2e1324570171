"""How a worker process notices that the training process is gone (a pidfd, a poll, the kernel's
parent-death signal), and how a process ended, for a message."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Any

WATCHDOG_SECONDS = 1.0  # a worker waiting for a task checks its parent this often
PR_SET_PDEATHSIG = 1


def _find_prctl() -> Any:
    """glibc's ``prctl``, looked up in the training process (a forked child never dlopens)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _find_prctl()


def set_parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when the thread that forked it exits."""
    return _prctl is not None and _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, ValueError):  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _orphaned(owner: int, parent: int) -> bool:
    return os.getppid() != parent or not process_alive(owner)


def watch_owner(owner: int, parent: int) -> None:
    """Exit this worker as soon as the training process ``owner`` is gone, in the middle of a
    task too: a thread that waits on a pidfd of the owner (readable once it exits), or checks
    every `WATCHDOG_SECONDS` where there is none. The parent-death signal alone does not do:
    a forkserver's worker gets it from the forkserver, which lives on until its last worker
    exits, and a worker forked by a thread other than the main one gets none."""
    try:
        pidfd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the owner is gone already
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while not poller.poll():
                pass
        else:
            while not _orphaned(owner, parent):
                time.sleep(WATCHDOG_SECONDS)
        os._exit(0)  # not a normal exit: it would wait to flush results nobody reads

    threading.Thread(target=watch, name="mediapipe-owner-watch", daemon=True).start()


def exit_reason(code: int | None) -> str:
    """How a process ended, for a message: " killed by SIGSEGV (...)", " with code 1", or ""."""
    if code is None:
        return ""
    if code >= 0:
        return f" with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f" killed by {name}{_SIGNAL_CAUSES.get(-code, '')}"


_SIGNAL_CAUSES = {
    int(signal.SIGKILL): " (by someone, or by the kernel's out-of-memory killer)",
    int(signal.SIGSEGV): " (a crash in native code: a decoder's or an op's library)",
    int(signal.SIGBUS): " (a crash in native code, or a file mapped in memory that shrank)",
    int(signal.SIGABRT): " (native code aborted: a failed assertion in a library)",
}
