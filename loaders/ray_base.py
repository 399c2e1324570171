"""Ray itself, imported only when a Ray backend is used (an optional extra): the import, what tells
one Ray session of this process from another, and which of Ray's errors mean a process or node lost."""

from __future__ import annotations

from typing import Any

RAY_HINT = 'backend="ray" needs Ray: pip install "mediapipe-loader[ray]"'


def import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(RAY_HINT) from err
    return ray


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors that mean "the process or node that held this batch is gone": build it again."""
    ex = ray.exceptions
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "ObjectLostError", "OwnerDiedError",
             "ObjectReconstructionFailedError", "WorkerCrashedError", "NodeDiedError", "ObjectFetchTimedOutError",
             "LocalRayletDiedError", "TaskCancelledError")
    return tuple(getattr(ex, n) for n in names if isinstance(getattr(ex, n, None), type))


def session_key(ray: Any) -> tuple[str, str]:
    """Tells one Ray session of this process from another (a local Ray started again reuses job ids)."""
    context = ray.get_runtime_context()
    try:
        node = context.get_node_id()
    except Exception:  # noqa: BLE001 (a client connection may not say)
        node = ""
    return context.get_job_id(), node
