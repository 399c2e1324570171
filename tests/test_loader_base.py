"""The torch, DALI and Ray loaders share one base (`LoaderBase`): the same checks give the same error
for the same bad argument on every backend, a state_dict() taken after k batches resumes the same
batches on each, the newest pass is the current one everywhere, torch and Ray place the batch
stage by one rule, and ``Pipeline.loader`` picks the backend from one registry."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import get_type_hints

import pytest

from mediapipe.loaders.dali.loader import DaliLoader
from mediapipe.loaders.loader import Loader
from mediapipe.loaders.loader_base import BACKENDS, LoaderBase, SamplingOptions, loader_class
from mediapipe.loaders.ray_loader import RayLoader
from mediapipe.loaders.samplers import EpochBatchSampler
from mediapipe.options import LOADER_BACKENDS, LastBatch
from tests.helpers import assert_same, collect, make_pipeline

ALL = ["torch", "dali", "ray"]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module's Ray loaders (each joins it; none shuts it down)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()


def runnable(backend: str, request: pytest.FixtureRequest) -> None:
    """Skip unless ``backend`` can run batches here (DALI installed; Ray started)."""
    if backend == "dali":
        pytest.importorskip("nvidia.dali")
    if backend == "ray":
        request.getfixturevalue("local_ray")


def backend_loader(pipe, backend: str, **kwargs):
    if backend == "ray":
        kwargs.setdefault("num_workers", 1)
        kwargs.setdefault("timeout", 60)
    return pipe.loader(backend=backend, **kwargs)


def indices(batches: list[dict]) -> list[list[int]]:
    return [b["index"].tolist() for b in batches]


# -- one set of checks --------------------------------------------------------------------
BAD = [
    ({"prefetch": 0}, r"^prefetch=0: expected an int >= 1$"),
    ({"prefetch": 1.5}, r"^prefetch=1\.5: expected an int >= 1$"),
    ({"last_batch": "keep"}, r"^last_batch='keep': expected one of \('drop', 'partial', 'pad'\)$"),
    ({"rank": 2, "world_size": 2}, r"^rank=2 is outside \[0, world_size=2\)$"),
    ({"num_workers": "2"}, r"^num_workers='2': expected an int >= [01]$"),
]


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_a_bad_argument_gets_the_same_error_on_every_backend(image_folder, backend, kwargs, message):
    """Refused before the backend is needed: DALI need not be installed, Ray is not started."""
    with pytest.raises(ValueError, match=message):
        make_pipeline(image_folder).loader(backend=backend, **kwargs)


@pytest.mark.parametrize("backend", ALL)
def test_last_batch_is_checked_with_a_sampler_of_ones_own_too(image_folder, backend):
    """It used to be read only to build the default sampler: with ``sampler=`` a typo passed silently."""
    pipe = make_pipeline(image_folder)
    sampler = EpochBatchSampler(len(pipe.source), pipe.batch_size, rank=0, world_size=1)
    with pytest.raises(ValueError, match=r"^last_batch='keep': expected one of"):
        pipe.loader(backend=backend, sampler=sampler, last_batch="keep")


@pytest.mark.parametrize("backend", ["torch", "ray"])
@pytest.mark.parametrize("timeout", [-1, "60"])
def test_a_timeout_is_seconds_at_least_zero(image_folder, backend, timeout):
    with pytest.raises(ValueError, match=rf"^timeout={timeout!r}: expected seconds >= 0 \(0: no limit\)$"):
        make_pipeline(image_folder).loader(backend=backend, timeout=timeout)


def test_the_ray_backend_needs_an_actor_and_counts_its_own_limits(image_folder):
    pipe = make_pipeline(image_folder)
    with pytest.raises(ValueError, match=r"^num_workers=0: expected an int >= 1$"):
        RayLoader(pipe, num_workers=0)
    with pytest.raises(ValueError, match=r"^max_retries=-1: expected an int >= 0$"):
        RayLoader(pipe, max_retries=-1)
    with pytest.raises(ValueError, match=r"^max_in_flight=-2: expected an int >= 1$"):
        RayLoader(pipe, max_in_flight=-2)
    assert pipe.loader(backend="ray").num_workers == RayLoader.default_workers == 2  # num_workers=0: its default


def test_every_loader_takes_the_sampling_options_of_the_base():
    assert get_type_hints(SamplingOptions)["last_batch"] is LastBatch
    base = inspect.signature(LoaderBase.__init__).parameters
    assert set(SamplingOptions.__annotations__) <= set(base)
    for cls in (Loader, DaliLoader, RayLoader):
        assert issubclass(cls, LoaderBase)
        assert inspect.signature(cls.__init__).parameters["sampling"].annotation == "Unpack[SamplingOptions]"


def test_the_ray_loader_is_no_torch_loader():
    """It shares the consumer (`HostBatchLoader`), not the worker pools: it used to initialise a torch
    `Loader` with num_workers=0 and overwrite its settings."""
    assert not issubclass(RayLoader, Loader)
    assert not {"persistent_workers", "multiprocessing_context", "_give_back"} & set(vars(RayLoader))


# -- one pass tracking --------------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL)
def test_a_state_after_k_batches_resumes_the_same_batches(image_folder, backend, request):
    runnable(backend, request)
    pipe = make_pipeline(image_folder)
    full = collect(backend_loader(pipe, backend))
    loader = backend_loader(pipe, backend)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert (state["sampler"]["epoch"], state["sampler"]["position"]) == (0, 2)
    resumed = backend_loader(pipe, backend)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert_same(rest, full[2:])  # DALI: its generators come back from the checkpoint in the state
    assert resumed.epoch == 1 and loader.epoch == 0  # only a pass delivered to its end advances the epoch
    assert indices(full) == indices(collect(backend_loader(pipe, "torch")))  # every backend's sample order
    for other in (loader, resumed):
        other.close()


@pytest.mark.parametrize("backend", ALL)
def test_the_newest_pass_moves_the_position_and_a_peek_costs_nothing(image_folder, backend, request):
    runnable(backend, request)
    pipe = make_pipeline(image_folder)
    loader = backend_loader(pipe, backend)
    reference = indices(collect(backend_loader(pipe, backend)))
    a = iter(loader)
    first = [next(a)["index"].tolist() for _ in range(2)]
    b = iter(loader)  # a fresh pass from the epoch's first batch: the current one now
    assert loader.state_dict()["sampler"]["position"] == 0
    from_b = [next(b)["index"].tolist()]
    rest_a = [x["index"].tolist() for x in a]  # a goes on, no longer moving the loader
    assert loader.state_dict()["sampler"]["position"] == 1
    from_b += [x["index"].tolist() for x in b]
    assert first + rest_a == reference and from_b == reference
    assert (loader.epoch, loader.sampler.position) == (1, 0)  # b ended the epoch
    loader.close()


def test_a_refused_state_leaves_the_running_pass_current(image_folder):
    """A state of another run is refused before anything changes: the torch loader used to let
    go of its current pass first, so the pass went on without moving the position."""
    loader = make_pipeline(image_folder, seed=0).loader()
    foreign = make_pipeline(image_folder, seed=1).loader().state_dict()
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match="seed"):
        loader.load_state_dict(foreign)
    next(it)
    assert loader.state_dict()["sampler"]["position"] == 2


# -- one placement rule, one registry -------------------------------------------------------
@pytest.mark.parametrize(("backend", "workers", "requested", "in_workers"), [
    ("torch", 0, None, False), ("torch", 2, None, True), ("torch", 2, False, False),
    ("ray", 1, None, True), ("ray", 1, False, False),
])
def test_torch_and_ray_place_the_batch_stage_by_one_rule(image_folder, backend, workers, requested, in_workers):
    """On a CPU device the batch stage runs where the batches are built, when there are workers."""
    loader = make_pipeline(image_folder).loader(backend=backend, num_workers=workers,
                                                batch_ops_in_workers=requested)
    assert loader.batch_ops == loader.builder.batch_ops == ("worker" if in_workers else "device")


def test_the_backends_are_registered_in_one_place(image_folder):
    assert tuple(BACKENDS) == LOADER_BACKENDS
    assert [loader_class(name) for name in ALL] == [Loader, DaliLoader, RayLoader]
    with pytest.raises(ValueError, match=r"^backend='jax': expected one of \('torch', 'dali', 'ray'\)$"):
        loader_class("jax")
    assert type(make_pipeline(image_folder).loader(backend="ray")) is RayLoader


class CountingLoader(Loader):
    """A backend registered for one test: the torch loader under another name."""

    default_workers = 1


def test_pipeline_loader_picks_its_backend_from_the_registry(image_folder, monkeypatch):
    monkeypatch.setitem(BACKENDS, "counting", f"{__name__}:CountingLoader")
    loader = make_pipeline(image_folder).loader(backend="counting", worker_type="thread")
    assert type(loader) is CountingLoader and loader.num_workers == 1  # num_workers=0: the backend's default
    assert len(collect(loader)) == len(loader)


def test_the_torch_backend_imports_neither_dali_nor_ray(image_folder):
    code = ("import sys, mediapipe as mp\n"
            "pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {'image': mp.decoders.image()}, device='cpu')\n"
            "pipe.loader()\n"
            "print(sorted(m for m in ('ray', 'nvidia.dali', 'mediapipe.loaders.ray_loader',\n"
            "                         'mediapipe.loaders.dali.loader') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, str(image_folder)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
