"""String options are typed: each signature names its option's ``Literal`` type, and the values
checked at run time are that type's (`mediapipe.options`)."""

from __future__ import annotations

import inspect
from typing import get_args

import pytest

import mediapipe as mp
from mediapipe import options
from mediapipe.loaders.loader import Loader
from mediapipe.loaders.loader_base import LoaderBase
from mediapipe.loaders.samplers import EpochBatchSampler
from mediapipe.plan import Plan

TYPED = [
    (mp.Pipeline.__init__, "on_error", "OnError"), (Plan.__init__, "on_error", "OnError"),
    (mp.Pipeline.loader, "last_batch", "LastBatch"), (mp.Pipeline.loader, "backend", "LoaderBackend"),
    (LoaderBase.__init__, "last_batch", "LastBatch"), (Loader.__init__, "worker_type", "WorkerType"),
    (EpochBatchSampler.__init__, "last_batch", "LastBatch"),
]


@pytest.mark.parametrize(("function", "argument", "annotation"), TYPED)
def test_each_string_option_is_annotated_with_its_literal_type(function, argument, annotation):
    assert inspect.signature(function).parameters[argument].annotation == annotation
    assert getattr(options, annotation) is not None


def test_the_values_checked_at_run_time_are_the_literal_types_values():
    assert options.ON_ERROR == get_args(options.OnError) == ("raise", "skip", "replace")
    assert options.LAST_BATCH == get_args(options.LastBatch) == ("drop", "partial", "pad")
    assert options.WORKER_TYPES == get_args(options.WorkerType) == ("process", "thread")
    assert options.LOADER_BACKENDS == get_args(options.LoaderBackend) == ("torch", "dali", "ray")


def test_a_value_outside_its_type_is_refused_by_name(image_folder):
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, batch_size=2)
    with pytest.raises(ValueError, match=r"backend='jax': expected one of \('torch', 'dali', 'ray'\)"):
        pipe.loader(backend="jax")
    with pytest.raises(ValueError, match=r"worker_type='fiber'"):
        pipe.loader(worker_type="fiber")
    with pytest.raises(ValueError, match=r"last_batch='keep'"):
        pipe.loader(last_batch="keep")
    with pytest.raises(mp.PipelineError, match=r"on_error='ignore'"):
        mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, on_error="ignore")
