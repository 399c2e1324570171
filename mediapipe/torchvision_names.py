"""What a torchvision (or torchaudio) transform is called here, for the errors that meet them.

People coming from torchvision pass ``T.Compose([...])`` as ``augment`` or put its transforms
in the list. Neither runs here, and neither is converted silently: the pipeline refuses them
naming the library they come from and the op of `mediapipe.augment` that replaces each one
(`docs/coming_from.md` maps the habits, `docs/api.md` has every op's arguments).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from mediapipe import augment
from mediapipe.augment.base import Op
from mediapipe.errors import PipelineError

FOREIGN = ("torchvision", "torchaudio")  # libraries whose transforms people pass by habit
# torchvision name -> this library's, where the name differs (same names are looked up in mediapipe.augment)
RENAMED = {
    "RandomHorizontalFlip": "HorizontalFlip",
    "RandomVerticalFlip": "VerticalFlip",
    "ConvertImageDtype": "ToDtype",
    "Grayscale": "RandomGrayscale(p=1.0)",
    "FrequencyMasking": "SpecAugment",
    "TimeMasking": "SpecAugment",
}
# transforms whose work is done before the ops run here: nothing replaces them
NOT_NEEDED = {
    "ToImage": "the decoder gives a uint8 tensor (C, H, W)",
    "PILToTensor": "the decoder gives a uint8 tensor (C, H, W)",
    "ToPureTensor": "the decoder gives a plain uint8 tensor (C, H, W)",
    "ToTensor": "the decoder gives a uint8 tensor (C, H, W); mediapipe.augment.ToDtype('float32', scale=True) "
                "where a float in [0, 1] is wanted",
    "Identity": "leave it out",
}
COMPOSITIONS = ("Compose", "Sequential")
DOCS = "docs/coming_from.md maps torchvision's names, docs/api.md has every op's arguments"


def foreign_library(obj: Any) -> str | None:
    """"torchvision" or "torchaudio" where ``obj`` (a transform, its class or a function) is theirs."""
    where = obj if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")) else type(obj)
    root = (getattr(where, "__module__", None) or "").split(".", 1)[0]
    return root if root in FOREIGN else None


def _name(obj: Any) -> str:
    return obj.__name__ if isinstance(obj, type) or hasattr(obj, "__qualname__") else type(obj).__name__


def replacement(name: str) -> str | None:
    """The op of `mediapipe.augment` that replaces the transform called ``name``, or None."""
    if name[:1].isupper() and isinstance(getattr(augment, name, None), type):
        return f"mediapipe.augment.{name}"
    renamed = RENAMED.get(name)
    if renamed and hasattr(augment, renamed.split("(", 1)[0]):
        return f"mediapipe.augment.{renamed}"
    return None


def counterpart(name: str) -> str:
    """What replaces the transform called ``name`` here, in a few words: an op of
    `mediapipe.augment`, nothing (and why), a plain list, or no counterpart."""
    if name in NOT_NEEDED:
        return f"nothing ({NOT_NEEDED[name]})"
    if name in COMPOSITIONS:
        return "a plain list: augment=[...]"
    return replacement(name) or "no counterpart (see docs/api.md)"


def not_an_op_hint(obj: Any) -> str:
    """The end of the 'not an op' error: for a torchvision or torchaudio transform whose it is and
    what to do instead; for an op class, a function or a torch module what an op is here."""
    library = foreign_library(obj)
    if library is None:
        return _plain_hint(obj)
    name = _name(obj)
    if name in NOT_NEEDED:
        todo = f"leave it out: {NOT_NEEDED[name]}"
    elif name in COMPOSITIONS:
        todo = "list its ops in augment=[...] instead (there is no Compose here)"
    elif replacement(name):
        todo = f"use {replacement(name)} instead"
    else:
        return f": it is {library}'s {name}, which has no counterpart here: see docs/api.md for the ops there are"
    return f": it is {library}'s {name}; {todo} ({DOCS})"


def _plain_hint(obj: Any) -> str:
    """The hint for something that is not another library's transform ('' when none fits)."""
    if isinstance(obj, type) and issubclass(obj, Op):
        return f": it is the class {obj.__name__}, not an op: call it, {obj.__name__}()"
    if isinstance(obj, torch.nn.Module):
        return (f": it is a torch.nn.Module ({type(obj).__name__}); ops here are mediapipe.augment's, which run "
                f"on whole batches ({DOCS})")
    if callable(obj):
        return (f": it is a function ({_name(obj)}); ops here are mediapipe.augment's, which run on whole "
                f"batches ({DOCS})")
    return ""


def _members(augment: Any) -> list[Any]:
    """The transforms inside a Compose (``.transforms``) or an nn.Sequential."""
    members = getattr(augment, "transforms", None)
    if members is None and hasattr(augment, "children"):
        members = list(augment.children())
    return list(members or [])


def refuse_foreign_augment(augment: Any) -> None:
    """Refuse a torchvision or torchaudio object given as the whole ``augment`` (a Compose, or
    one transform), naming each of its transforms' counterparts here."""
    library = foreign_library(augment)
    if library is None:
        refuse_not_a_list(augment)
        return
    name = _name(augment)
    members = _members(augment) if name in COMPOSITIONS else [augment]
    replacements = "; ".join(f"{_name(m)} -> {counterpart(_name(m))}" for m in members)
    raise PipelineError(
        f"augment is {library}'s {name}, not a list of ops: augment takes a plain list of "
        f"mediapipe.augment ops (there is no Compose), e.g. augment=[mediapipe.augment.HorizontalFlip()]. "
        f"Its transforms here: {replacements or 'no transforms'} ({DOCS})"
    )


def refuse_not_a_list(augment: Any) -> None:
    """Refuse an ``augment`` that is not a sequence of ops: a function, a torch module that is not a
    container, an op's class, a string or a mapping (each would fail as 'not iterable' or be taken apart)."""
    if not (isinstance(augment, (str, bytes, Mapping, type)) or not isinstance(augment, Iterable)):
        return
    what = (f"the class {augment.__name__}" if isinstance(augment, type)
            else f"a {type(augment).__name__}" + (f" ({augment.__qualname__})" if hasattr(augment, "__qualname__") else ""))
    raise PipelineError(f"augment is {what}, not a list of ops: augment takes a plain list of mediapipe.augment "
                        f"ops, e.g. augment=[mediapipe.augment.HorizontalFlip()] ({DOCS})")
