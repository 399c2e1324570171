"""Every op checks its arguments when it is made (types, ranges, units), naming itself and the
argument: a mistake surfaces where it was written, not later inside a worker."""

from __future__ import annotations

import subprocess
import sys
import typing
from dataclasses import fields

import pytest

from mediapipe import augment as A
from mediapipe.augment.base import registered_ops

REQUIRED = {"MixUp": {"num_classes": 3}, "CutMix": {"num_classes": 3}}


def builtin_ops() -> dict[str, type]:
    return {name: cls for name, cls in registered_ops().items() if cls.__module__.startswith("mediapipe.augment")}


def wrong_value(annotation) -> object:
    """A value of the wrong type for ``annotation``: a float for an int, a string for a number..."""
    text = str(annotation)
    if "tuple" in text and "str" not in text:
        return "ab"  # a string is not a sequence of numbers
    if "float" in text:
        return "0.5"
    if "int" in text:
        return 3.5  # lengths in samples are ints: RandomTimeCrop(3.0) meant seconds
    if "bool" in text:
        return "yes"
    return 12345  # a number where a name is expected


def type_cases():
    for name, cls in sorted(builtin_ops().items()):
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            yield pytest.param(name, f.name, wrong_value(hints[f.name]), id=f"{name}.{f.name}")


@pytest.mark.parametrize(("name", "arg", "value"), list(type_cases()))
def test_every_argument_of_every_op_rejects_the_wrong_type(name, arg, value):
    cls = builtin_ops()[name]
    with pytest.raises((TypeError, ValueError)) as info:
        cls(**{**REQUIRED.get(name, {}), arg: value})
    assert name in str(info.value) and arg in str(info.value)


RANGES = {
    "RandomResizedCrop": [{"size": 0}, {"scale": (0.5, 0.1)}, {"ratio": (0.0, 1.0)}, {"interpolation": "area"}],
    "Resize": [{"size": 0}, {"size": 32, "max_size": -1}, {"size": None}, {"interpolation": "area"}],
    "CenterCrop": [{"size": (0, 3)}],
    "RandomCrop": [{"size": -1}, {"padding": -1}, {"padding_mode": "wrap"}, {"fill": (1.0, 2.0)}],
    "Pad": [{"padding": (1, 2, 3)}, {"padding_mode": "wrap"}],
    "HorizontalFlip": [{"p": 1.5}],
    "VerticalFlip": [{"p": -0.1}],
    "RandomRotation": [{"degrees": -5}, {"degrees": (10.0, -10.0)}, {"interpolation": "bicubic"}, {"center": (1.0,)}],
    "RandomAffine": [{"translate": (0.5, 1.5)}, {"scale": (0.0, 1.0)}, {"shear": (1.0, 2.0, 3.0)}],
    "ColorJitter": [{"brightness": -0.1}, {"contrast": (1.5, 0.5)}, {"hue": 0.6}],
    "RandomGrayscale": [{"p": 2.0}],
    "GaussianBlur": [{"kernel_size": 4}, {"sigma": 0.0}, {"sigma": (2.0, 1.0)}],
    "RandomErasing": [{"p": -1.0}, {"scale": (0.5, 0.1)}, {"ratio": (0.0, 1.0)}],
    "Normalize": [{"std": (0.0, 1.0, 1.0)}, {"mean": (0.5,), "std": (0.2, 0.3)}, {"dtype": "int3"}],
    "ToDtype": [{"dtype": "int3"}],
    "MixUp": [{"num_classes": 0}, {"num_classes": 3, "alpha": 0.0}],
    "CutMix": [{"num_classes": -1}, {"num_classes": 3, "alpha": -1.0}],
    "YUVToRGB": [{"matrix": "bt999"}, {"range": "narrow"}, {"dtype": "int3"}],
    "ClipLayout": [{"layout": "XYZ"}],
    "TemporalJitter": [{"num_frames": 0}, {"strides": (0,)}],
    "FrameDrop": [{"p": 1.0}],
    "TemporalReverse": [{"p": 2.0}],
    "UniformTemporalSubsample": [{"num_frames": 0}],
    "Gain": [{"db": (6.0, -6.0)}],
    "PreEmphasis": [{"coef": 1.5}],
    "AudioNormalize": [{"eps": 0.0}],
    "PadTrim": [{"length": 0}],
    "Resample": [{"orig_freq": 0}, {"new_freq": -16000}],
    "AddNoise": [{"snr_db": (30.0, 5.0)}, {"p": 2.0}, {"sample_rate": 0}],
    "RandomTimeCrop": [{"length": 0}],
    "SpeedPerturb": [{"factors": (0.0,)}, {"factors": ()}],
    "NonSilentRegion": [{"cutoff_db": 10.0}, {"window": 0}],
    "Spectrogram": [{"n_fft": 0}, {"hop_length": 0}, {"win_length": 800}, {"window": "kaiser"}, {"power": 0.0}],
    "MelSpectrogram": [{"n_mels": 0}, {"f_min": -1.0}, {"f_min": 9000.0}, {"norm": "htk"}, {"mel_scale": "bark"},
                       {"sample_rate": 0}],
    "LogMelSpectrogram": [{"amin": 0.0}, {"top_db": -1.0}],
    "AmplitudeToDB": [{"stype": "decibel"}, {"amin": 0.0}, {"top_db": 0.0}],
    "MFCC": [{"n_mfcc": 0}, {"n_mfcc": 200}, {"dct_norm": "none"}],
    "SpecAugment": [{"freq_masks": (3, 1)}, {"freq_width": -1}, {"max_time_ratio": 1.5}],
    "ClampBoundingBoxes": [{"canvas_key": ""}],
    "SanitizeBoundingBoxes": [{"min_size": 0.5}, {"min_area": 0.0}, {"out": "kept"}, {"canvas_key": ""}],
    "RandomIoUCrop": [{"min_scale": 0.0}, {"max_scale": 1.5}, {"min_scale": 0.8, "max_scale": 0.5},
                      {"min_aspect_ratio": 2.0, "max_aspect_ratio": 1.0}, {"sampler_options": ()},
                      {"sampler_options": (-0.1, 0.5)}, {"trials": 0}],
    "RandomZoomOut": [{"side_range": (0.5, 2.0)}, {"side_range": (3.0, 2.0)}, {"p": 1.5}, {"fill": ()}],
    "ScaleJitter": [{"target_size": 0}, {"scale_range": (0.0, 1.0)}, {"scale_range": (2.0, 1.0)},
                    {"interpolation": "area"}],
    "RandomShortestSize": [{"min_size": 0}, {"min_size": ()}, {"max_size": 0}, {"interpolation": "area"}],
    "Letterbox": [{"size": 0}, {"fill": ()}, {"interpolation": "area"}],
    "RandomChoice": [{"ops": ()}, {"ops": (A.HorizontalFlip(),), "p": (1.0, 2.0)},
                     {"ops": (A.HorizontalFlip(), A.VerticalFlip()), "p": (-1.0, 1.0)}, {"ops": (A.HorizontalFlip(), 3)}],
    "RandomApply": [{"ops": ()}, {"ops": (A.HorizontalFlip(),), "p": 1.5}, {"ops": (A.Normalize(out="n"),)}],
    "RandomOrder": [{"ops": ()}, {"ops": (A.MixUp(num_classes=3), A.HorizontalFlip())}],
    "RandomPosterize": [{"bits": 9}, {"bits": -1}, {"p": 1.5}],
    "RandomSolarize": [{"threshold": -1.0}, {"p": -0.5}],
    "RandomEqualize": [{"p": 2.0}],
    "RandomAutocontrast": [{"p": -1.0}],
    "RandomAdjustSharpness": [{"sharpness_factor": -0.1}, {"p": 1.1}],
    "RandomInvert": [{"p": 3.0}],
    "AutoAugment": [{"policy": "mnist"}, {"interpolation": "bicubic"}, {"fill": ()}],
    "RandAugment": [{"num_ops": -1}, {"magnitude": 31}, {"num_magnitude_bins": 1, "magnitude": 0},
                    {"interpolation": "area"}],
    "TrivialAugmentWide": [{"num_magnitude_bins": 0}, {"fill": (float("inf"),)}],
    "AugMix": [{"severity": 0}, {"mixture_width": 0}, {"alpha": 0.0}, {"interpolation": "bicubic"}],
    "RandomPerspective": [{"distortion_scale": 1.5}, {"p": -0.1}, {"interpolation": "bicubic"}, {"fill": ()}],
    "ElasticTransform": [{"alpha": -1.0}, {"sigma": (0.0, 2.0)}, {"sigma": (1.0, 2.0, 3.0)},
                         {"interpolation": "area"}, {"fill": ()}],
    "RandomPhotometricDistort": [{"brightness": (-0.1, 1.0)}, {"contrast": (1.5, 0.5)}, {"hue": (-0.6, 0.0)},
                                 {"p": 1.5}],
    "RandomChannelPermutation": [],  # no arguments
    "GaussianNoise": [{"sigma": -0.1}],
    "JPEG": [{"quality": 0}, {"quality": (90, 80)}, {"quality": (1, 101)}],
    "Gamma": [{"gamma": 0.0}, {"gamma": (2.0, 1.0)}, {"p": 1.5}],
    "ColorTemperature": [{"adjustment": (-300, 0)}, {"adjustment": (5, 1)}],
    "Vignette": [{"intensity": -1.0}],
    "FishEye": [{"p": -0.5}],
    "LensCorrection": [{"k1": (0.3, -0.3)}, {"focal": 0.0}],
    "Fog": [{"intensity": 1.5}, {"gray": (0.5, 0.2)}],
    "Rain": [{"percentage": -1.0}, {"drop_width": 0}, {"drop_length": 0}, {"transparency": 1.5}],
    "Snow": [{"snow": -0.1}],
    "Pixelate": [{"percent": 100.0}, {"percent": (-1.0, 50.0)}],
    "SaltAndPepperNoise": [{"prob": 1.5}, {"salt_vs_pepper": -0.1}, {"salt": 2.0}, {"pepper": -1.0}],
    "ShotNoise": [{"factor": -1.0}],
    "GridMask": [{"tile": 0}, {"ratio": (0.2, 1.1)}, {"angle": (1.0, 0.0)}],
}


def test_every_op_has_range_cases():
    assert sorted(RANGES) == sorted(builtin_ops())  # a new op adds its own here


@pytest.mark.parametrize(("name", "kwargs"), [pytest.param(n, kw, id=f"{n}-{i}") for n, cases in RANGES.items()
                                              for i, kw in enumerate(cases)])
def test_out_of_range_arguments_name_the_op_and_the_argument(name, kwargs):
    cls = builtin_ops()[name]
    with pytest.raises((TypeError, ValueError)) as info:
        cls(**{**REQUIRED.get(name, {}), **kwargs})
    message = str(info.value)
    assert name in message and any(arg in message for arg in kwargs), message


def test_keys_is_a_field_name_or_several():
    assert A.HorizontalFlip(keys="video").inputs == ("video",)  # a name, not its letters
    assert A.HorizontalFlip(keys=["image", "mask"]).inputs == ("image", "mask")
    assert A.HorizontalFlip(key="video").inputs == ("video",)
    for bad, match in [({"keys": ()}, "keys"), ({"keys": ("a", "a")}, "distinct"), ({"key": "a", "keys": "b"},
                       "not both"), ({"keys": ("a", "b"), "out": "c"}, "one field per input"), ({"keys": 3}, "keys")]:
        with pytest.raises((TypeError, ValueError), match=match):
            A.HorizontalFlip(**bad)
    with pytest.raises(ValueError, match="one field per op"):
        A.Gain(keys=("a", "b"))


def test_lists_become_tuples_so_ops_compare_and_hash():
    op = A.RandomResizedCrop(24, scale=[0.5, 1.0], keys=["image"])
    assert op == A.RandomResizedCrop(24, scale=(0.5, 1.0), keys=("image",)) and hash(op)


def test_a_failed_constructor_prints_nothing_on_the_way_out(tmp_path):
    """No 'Exception ignored in __del__' (or anything else) from an op, a Pipeline or a Loader
    whose constructor raised, in a fresh interpreter."""
    script = f"""
import mediapipe as mp
from mediapipe import augment as A
from mediapipe.synthetic import jpeg_bytes, photo_like
import os
os.makedirs({str(tmp_path)!r} + "/a", exist_ok=True)
open({str(tmp_path)!r} + "/a/x.jpg", "wb").write(jpeg_bytes(photo_like(40, 40, 0)))
source = mp.loaders.folder({str(tmp_path)!r})
attempts = [
    lambda: A.RandomTimeCrop(3.0),
    lambda: A.HorizontalFlip(p=2),
    lambda: mp.Pipeline(source, {{"image": mp.decoders.image()}}, [A.Gain()]),
    lambda: mp.Pipeline(source, {{"image": mp.decoders.image()}}, batch_size=0),
    lambda: mp.Pipeline(source, {{"image": mp.decoders.image()}}, device="cpu").loader(num_workers=-1),
    lambda: mp.Pipeline(source, {{"image": mp.decoders.image()}}, device="cpu").loader(prefetch=0),
    lambda: mp.Pipeline(source, {{"image": mp.decoders.image()}}, device="cpu").loader(backend="dali", rank=5,
                                                                                     world_size=2),
]
for attempt in attempts:
    try:
        attempt()
    except Exception:
        pass
    else:
        raise SystemExit("no error")
import gc
gc.collect()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""
