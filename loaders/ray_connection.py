"""The Ray this library connected (a local Ray it started, or a cluster at an address): shared by
its users (Ray loaders, a convert run) and shut down or let go of with the last of them."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from mediapipe.errors import WorkerError
from mediapipe.loaders.ray_actors import stop_actors
from mediapipe.loaders.ray_base import import_ray, session_key
from mediapipe.loaders.ray_watchdog import _children, _start_watchdog, _stop_watchdog

CONNECT_SECONDS = 10.0  # how long an address may take to accept a connection before it is refused


# -- the Ray this library connected: shared by its users, let go of with the last -----------
@dataclass
class _OwnRay:
    """A Ray this library connected (a local Ray it started, or the cluster at a ``ray_address``):
    the users (loaders, a convert run) holding it, and the watchdog of a local one's processes."""

    session: tuple[str, str]
    users: set[int] = field(default_factory=set)
    watchdog: subprocess.Popen | None = None
    pid: int = field(default_factory=os.getpid)  # the process that connected it


def check_not_forked() -> None:
    """Refuse Ray in a process forked from the one that connected it: the copy of the connection
    a forked process has hangs on its first call (Ray is not fork-safe)."""
    if _OWN_RAY is not None and _OWN_RAY.pid != os.getpid():
        raise WorkerError(f"a Ray loader used in process {os.getpid()}, forked from the process that connected "
                          f"Ray ({_OWN_RAY.pid}): Ray cannot be used from a forked copy of its driver (its calls "
                          "hang); make the loader in this process before Ray starts, or use it in the driver")


_OWN_RAY: _OwnRay | None = None
_OWN_RAY_LOCK = threading.RLock()  # (reentrant: a loader dropped by the collector may let go inside use_ray)


def use_ray(user: object, *, address: str | None = None, num_cpus: int | None = None) -> Any:
    """Ray, connected, for ``user`` until `release_ray`: the Ray this process already uses (its
    own, never ours to stop; or one this library connected, shared), else a local Ray of
    ``num_cpus`` CPUs (``address`` None; never the cluster ``RAY_ADDRESS`` names) or the
    cluster at ``address``."""
    global _OWN_RAY
    ray = import_ray()
    with _OWN_RAY_LOCK:
        check_not_forked()
        if ray.is_initialized():
            if _OWN_RAY is not None and _OWN_RAY.session == session_key(ray):
                _OWN_RAY.users.add(id(user))
            return ray
        if _OWN_RAY is not None:  # a Ray of ours that someone else shut down: its watchdog has no work left
            _stop_watchdog(_OWN_RAY.watchdog)
            _OWN_RAY = None
        if address is None:
            own = _start_local_ray(ray, num_cpus)
        else:
            check_reachable(address)
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            own = _OwnRay(session_key(ray))
        own.users.add(id(user))
        _OWN_RAY = own
        return ray


def release_ray(user: object) -> None:
    """``user`` no longer uses Ray: the last user of a Ray this library connected shuts it down
    (a local one) or disconnects from it (a cluster, which keeps running); a Ray this process
    connected itself is left as it is."""
    global _OWN_RAY
    with _OWN_RAY_LOCK:
        own = _OWN_RAY
        if own is None or id(user) not in own.users or own.pid != os.getpid():
            return  # (a forked copy of the driver: its Ray is the driver's to let go of)
        own.users.discard(id(user))
        if own.users:
            return
        _OWN_RAY = None
        ray = import_ray()
        if ray.is_initialized() and session_key(ray) == own.session:
            stop_actors()
            with contextlib.suppress(Exception):
                ray.shutdown()
        _stop_watchdog(own.watchdog)


def _start_local_ray(ray: Any, num_cpus: int | None) -> _OwnRay:
    """A local Ray of this process, without the dashboard, and a watchdog that stops its
    processes if this process dies without shutting it down (Ray's agents outlive it otherwise)."""
    before = _children(os.getpid())
    # Ray starts its workers at niceness 15; here they are this training's input pipeline, which would
    # then starve behind any busy process of normal priority (the training's own threads included)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _system_config={"worker_niceness": 0})
    # Ray's daemons: the children started meanwhile that run Ray's programs (another thread's
    # subprocess or worker started during ray.init is not Ray's, and outlives it)
    ray_dir = os.path.dirname(os.path.abspath(ray.__file__))
    daemons = [pid for pid, args in _children(os.getpid()).items() if pid not in before and ray_dir in args]
    try:
        watchdog = _start_watchdog(sorted(daemons))
    except OSError:  # (no interpreter to run it with: Ray still shuts down with its last user)
        watchdog = None
    return _OwnRay(session_key(ray), watchdog=watchdog)


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    """Refuse within ``seconds`` an address where nothing accepts a connection (``ray.init``
    retries such an address for minutes); "auto" is resolved as Ray resolves it."""
    target: str | None = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or None
        if target is None or target == "auto":
            try:
                from ray._private.services import canonicalize_bootstrap_address_or_die
            except ImportError:  # Ray's internals moved: ray.init resolves it
                return
            try:
                target = canonicalize_bootstrap_address_or_die("auto")
            except ConnectionError as err:
                raise ConnectionError(f"ray_address='auto': {err}") from None
    if target is None:
        return
    host, _, port = target.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return  # ray.init names what is wrong with it
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        raise ConnectionError(f"ray_address={address!r}: no Ray cluster answers at {host}:{port} ({err}); start "
                              "one (`ray start --head`) or pass ray_address=None for a local Ray") from None
