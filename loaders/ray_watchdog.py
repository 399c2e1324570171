"""The watchdog of a local Ray's processes: SIGKILLs what is left of Ray's daemons when the driver
dies without shutting Ray down (they outlive it otherwise), or a grace after ray.shutdown()."""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys

WATCHDOG_GRACE = 5.0  # seconds Ray's processes get to exit by themselves after ray.shutdown()


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``, with their command lines (from /proc, else ps)."""
    if os.path.isdir("/proc/self"):
        found = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{name}/stat", "rb") as f:
                        if int(f.read().rpartition(b")")[2].split()[1]) == pid:
                            with open(f"/proc/{name}/cmdline", "rb") as f:
                                found[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        return found
    try:
        out = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,ppid=,args="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    return {int(r[0]): r[2] if len(r) > 2 else "" for r in rows if len(r) > 1 and int(r[1]) == pid}


def _start_watchdog(daemons: list[int]) -> subprocess.Popen | None:
    """`_watchdog` in a process of its own session (a signal to this process's group does not stop it)."""
    if not daemons:
        return None
    code = f"{inspect.getsource(_watchdog)}\n_watchdog({os.getpid()}, {daemons!r}, {WATCHDOG_GRACE!r})\n"
    return subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Ray was shut down: the watchdog stops what is left of its processes after the grace, and exits."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        watchdog.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=WATCHDOG_GRACE + 5)


def _watchdog(driver: int, roots: list[int], grace: float) -> None:
    """Run alone in a process (standard library only): track Ray's daemons ``roots`` and their
    descendants; SIGKILL those still running as soon as ``driver`` dies, or ``grace`` seconds
    after a SIGTERM (Ray was shut down: they exit by themselves)."""
    import os
    import signal
    import subprocess
    import time

    def processes() -> dict[int, tuple[int, bytes]]:
        """pid -> (parent pid, start time) of every running process (a zombie has exited)."""
        if os.path.isdir("/proc/self"):
            table = {}
            for name in os.listdir("/proc"):
                if name.isdigit():
                    try:
                        with open(f"/proc/{name}/stat", "rb") as f:
                            fields = f.read().rpartition(b")")[2].split()
                        if fields[0] != b"Z":
                            table[int(name)] = (int(fields[1]), fields[19])
                    except (OSError, IndexError, ValueError):
                        continue
            return table
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat=,lstart="], capture_output=True, timeout=10).stdout
        rows = [line.split() for line in out.splitlines()]
        return {int(f[0]): (int(f[1]), b" ".join(f[3:])) for f in rows if len(f) > 3 and not f[2].startswith(b"Z")}

    table = processes()
    tracked = {pid: table[pid][1] for pid in roots if pid in table}  # pid -> start time (a pid reused is another)

    def refresh() -> None:
        """Forget the tracked processes that exited; add every descendant of those still running."""
        table = processes()
        for pid in [pid for pid, start in tracked.items() if table.get(pid, (0, None))[1] != start]:
            del tracked[pid]
        found = True
        while found:
            found = {pid: start for pid, (ppid, start) in table.items() if ppid in tracked and pid not in tracked}
            tracked.update(found)

    def kill_tracked() -> None:
        for _ in range(3):  # a daemon may start a process while the others are killed
            refresh()
            if not tracked:
                return
            for pid in tracked:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)

    class Stop(BaseException):
        """SIGTERM: Ray was shut down (raised to end the sleep at once)."""

    def on_term(*_: object) -> None:
        raise Stop

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    try:
        while tracked:
            time.sleep(0.5)
            refresh()
            if os.getppid() != driver:  # the driver died without shutting Ray down
                kill_tracked()
                return
    except Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        deadline = time.monotonic() + grace
        while tracked and time.monotonic() < deadline:
            time.sleep(0.1)
            refresh()
        kill_tracked()
