"""Declared protocols: a source's optional hooks and a decoder's capabilities live on the base
classes with their defaults, and a kind's decoder options are one frozen dataclass that the
factory, the config and the live decoder share."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.dataset.convert_plan import plan_conversion
from mediapipe.decoders.audio import AudioOptions
from mediapipe.decoders.base import Decoder
from mediapipe.decoders.image import ImageOptions
from mediapipe.decoders.options import DecoderOptions
from mediapipe.decoders.registry import register
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.decoders.video import VideoOptions
from mediapipe.errors import PipelineError
from mediapipe.fields import BOXES, boxes
from mediapipe.loaders.dali.loader import check_lowerable
from mediapipe.loaders.sampling import build_sampler, resolve_ranks
from mediapipe.loaders.sources.folder import Source
from mediapipe.sample import Blob, SampleRef
from mediapipe.synthetic import jpeg_bytes, photo_like

PHOTOS = [jpeg_bytes(photo_like(40 + 4 * i, 48, i), quality=90) for i in range(5)]


class MinimalSource(Source):
    """Five in-memory JPEGs with labels: a source that overrides none of the optional hooks."""

    kind = "test-minimal"

    def __len__(self) -> int:
        return len(PHOTOS)

    def ref(self, index: int) -> SampleRef:
        return SampleRef(index, f"photo{index}", {"jpg": Blob(f"photo{index}.jpg", data=PHOTOS[index])},
                         label=index % 2)

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind}


class HookedSource(MinimalSource):
    """The same photos with every optional hook overridden: declared boxes, token ids padded,
    this rank's part of a split dataset, an annotation fingerprint, picked channels, declared rates."""

    kind = "test-hooked"
    collate = {"ids": "pad"}
    split_by_rank = True
    rank_samples = (7, 5)
    fingerprint = "annotations-v3"
    picks_channels = True
    declares_rates = True

    def field_types(self) -> dict[str, Any]:
        return {"boxes": boxes("xyxy")}

    def ref(self, index: int) -> SampleRef:
        ref = super().ref(index)
        ref.fields.update({"boxes": torch.tensor([[1.0, 2.0, 10.0, 12.0]] * (index + 1)),
                           "ids": torch.arange(index + 2), "text": f"photo {index}"})
        return ref


def image_pipeline(source: Source, **kwargs: Any) -> mp.Pipeline:
    return mp.Pipeline(source, {"image": mp.decoders.image(backend="pillow")}, [mp.augment.Resize((16, 16))],
                       batch_size=2, seed=0, device="cpu", **kwargs)


# -- sources ------------------------------------------------------------------------------------
def test_the_base_source_declares_every_optional_hook_with_its_default():
    source = MinimalSource()
    assert source.field_types() == {}
    assert dict(source.collate) == {}
    assert source.split_by_rank is False and source.rank_samples is None
    assert source.fingerprint is None
    assert source.picks_channels is False and source.declares_rates is False


def test_a_source_with_no_hooks_runs_end_to_end():
    source = MinimalSource()
    batches = list(image_pipeline(source).loader(shuffle=False))
    assert [b["image"].shape for b in batches] == [(2, 3, 16, 16), (2, 3, 16, 16), (1, 3, 16, 16)]
    assert torch.cat([b["label"] for b in batches]).tolist() == [0, 1, 0, 1, 0]
    assert resolve_ranks(source, 1, 2).split_by_source is False
    sampler = build_sampler(image_pipeline(source), shuffle=False, rank=1, world_size=2)
    assert sampler.rank_indices().tolist() == [1, 3] and len(sampler) == 2  # split here: rank 1 of 2
    plan = plan_conversion(source, shard_size=2, shuffle=False)
    assert "targets" not in plan.settings and plan.field_types is None


def test_each_hook_a_source_overrides_is_honoured():
    source = HookedSource()
    pipe = image_pipeline(source)
    assert pipe.plan.base_types["boxes"].kind == BOXES  # field_types
    batch = next(iter(pipe.loader(shuffle=False)))
    assert isinstance(batch["boxes"], list) and [len(b) for b in batch["boxes"]] == [1, 2]
    assert batch["ids"].tolist() == [[0, 1, 0], [0, 1, 2]] and batch["ids_lengths"].tolist() == [2, 3]  # collate
    ranks = resolve_ranks(source, 1, 2)
    assert ranks.split_by_source and (ranks.sampler_rank, ranks.sampler_world_size) == (0, 1)  # split_by_rank
    sampler = build_sampler(pipe, shuffle=False, rank=1, world_size=2)
    assert len(sampler) == 4  # rank_samples: the largest part's 7 slots, in batches of 2, from this part's 5
    plan = plan_conversion(source, shard_size=2, shuffle=False)
    assert plan.settings["targets"]["annotations"] == "annotations-v3"  # fingerprint
    assert plan.field_types == {"boxes": boxes("xyxy").to_config()}
    audio = mp.Pipeline(source, {"audio": mp.decoders.audio()}, batch_size=2, device="cpu")
    with pytest.raises(PipelineError) as refused:
        check_lowerable(audio)
    assert "take some channels of their files" in str(refused.value)  # picks_channels
    assert "recordings that declare their rate" in str(refused.value)  # declares_rates


def test_a_tokenized_source_forwards_every_declared_hook():
    inner = HookedSource()
    tokenized = mp.loaders.tokenize(inner, lambda text: [ord(c) for c in text])
    assert tokenized.field_types() == inner.field_types()
    assert dict(tokenized.collate) == {"ids": "pad", "text_ids": "pad"}  # the inner source's and its own
    assert (tokenized.split_by_rank, tokenized.rank_samples) == (True, (7, 5))
    assert tokenized.fingerprint == "annotations-v3"
    assert tokenized.picks_channels and tokenized.declares_rates
    plain = mp.loaders.tokenize(_TextSource(), lambda text: [len(text)])
    assert plain.field_types() == {} and plain.fingerprint is None and not plain.split_by_rank
    assert dict(plain.collate) == {"text_ids": "pad"}


class _TextSource(MinimalSource):
    def ref(self, index: int) -> SampleRef:
        ref = super().ref(index)
        ref.fields["text"] = "x" * index
        return ref


# -- decoders -----------------------------------------------------------------------------------
@register("test-bytes", "count")
class ByteCountDecoder(Decoder):
    """A decoder that overrides no capability: the number of bytes it was handed."""

    def decode(self, blob, hint, rng, meta):
        return torch.tensor([len(blob.read()), blob.data is None])


@register("test-bytes", "opener")
class OpeningDecoder(ByteCountDecoder):
    """One that opens the file itself (``reads_whole=False``): the worker hands it the path only."""

    reads_whole = False


def test_the_base_decoder_declares_every_capability_with_its_default():
    decoder = ByteCountDecoder()
    assert decoder.reads_whole is True
    assert decoder.orientation(PHOTOS[0]) == 1
    assert decoder.options == DecoderOptions() and dict(decoder.options) == {}
    assert mp.decoders.image(backend="pillow").create().orientation(PHOTOS[0]) == 1


@pytest.mark.parametrize("backend, handed_bytes", [("count", True), ("opener", False)])
def test_a_decoder_with_no_overrides_runs_end_to_end_and_reads_whole_is_honoured(tmp_path, backend, handed_bytes):
    root = tmp_path / "files"
    (root / "a").mkdir(parents=True)
    for i, photo in enumerate(PHOTOS[:3]):
        (root / "a" / f"{i}.jpg").write_bytes(photo)
    pipe = mp.Pipeline(mp.loaders.folder(root), {"jpg": DecoderSpec("test-bytes", backend)}, batch_size=3,
                       device="cpu")
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["jpg"][:, 0].tolist() == [len(p) for p in PHOTOS[:3]]
    assert batch["jpg"][:, 1].tolist() == [int(not handed_bytes)] * 3


# -- decoder options ----------------------------------------------------------------------------
SPECS = {
    "image": (mp.decoders.image(mode="L", exact=True, device_decode=False), ImageOptions,
              {"kind": "image", "backend": "auto", "mode": "L", "exif_transpose": False, "exact": True,
               "device_decode": False}),
    "image-default": (mp.decoders.image(), ImageOptions,
                      {"kind": "image", "backend": "auto", "mode": "RGB", "exif_transpose": False}),
    "mask": (mp.decoders.mask(exif_transpose=True), ImageOptions,
             {"kind": "image", "backend": "auto", "mode": "L", "exif_transpose": True, "field_kind": "mask"}),
    "video": (mp.decoders.video(clip_len=4, stride=2, fps=12.5, output="yuv", threads=1, apply_rotation=False,
                                backend="pyav"), VideoOptions,
              {"kind": "video", "backend": "pyav", "clip_len": 4, "stride": 2, "fps": 12.5, "clips_per_video": 1,
               "sampling": "random", "pad": "repeat_last", "output": "yuv", "threads": 1, "apply_rotation": False}),
    "video-default": (mp.decoders.video(), VideoOptions,
                      {"kind": "video", "backend": "auto", "clip_len": 16, "stride": 1, "fps": None,
                       "clips_per_video": 1, "sampling": "random", "pad": "repeat_last", "output": "rgb",
                       "threads": None}),
    "audio": (mp.decoders.audio(sample_rate=8000, mono=True, random_crop=0.5, backend="pyav"), AudioOptions,
              {"kind": "audio", "backend": "pyav", "sample_rate": 8000, "mono": True, "offset": 0.0, "duration": None,
               "random_crop": 0.5, "max_duration": None}),
    "audio-from-field": (mp.decoders.audio(from_field="video"), AudioOptions,
                         {"kind": "audio", "backend": "auto", "sample_rate": None, "mono": False, "offset": 0.0,
                          "duration": None, "random_crop": None, "max_duration": None, "from_field": "video"}),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_factory_the_config_and_the_live_decoder_share_one_frozen_options_value(name):
    spec, options_type, on_disk = SPECS[name]
    assert type(spec.options) is options_type and dataclasses.is_dataclass(spec.options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.options.__setattr__(dataclasses.fields(options_type)[0].name, None)
    assert spec.to_config() == on_disk and list(spec.to_config()) == list(on_disk)  # the same on disk, in order
    again = DecoderSpec.from_config(spec.to_config())
    assert again == spec and again.to_config() == on_disk
    if spec.backend != "auto" or spec.kind == "image":
        assert spec.create().options == spec.options  # the live decoder reads the same values


def test_the_options_dataclass_holds_each_default_the_factory_takes():
    assert ImageOptions() == mp.decoders.image().options
    assert VideoOptions() == mp.decoders.video().options
    assert AudioOptions() == mp.decoders.audio().options
    assert DecoderSpec.from_config({"kind": "video"}).options == VideoOptions()


@pytest.mark.parametrize("make, named", [
    (lambda: DecoderSpec.from_config({"kind": "image", "mode": "RGB", "bogus": 1}), "image(bogus=1): no such option"),
    (lambda: DecoderSpec("video", options={"clip_length": 8}), "video(clip_length=8): no such option"),
    (lambda: mp.decoders.create("image", "pillow", exif=True), "image(exif=True): no such option"),
    (lambda: mp.decoders.create("audio", "pyav", rate=16000), "audio(rate=16000): no such option"),
    (lambda: DecoderSpec("test-bytes", "count", {"level": 2}), "(level=2): no such option"),
    (lambda: mp.decoders.video(clip_len="8"), "video(clip_len='8'): expected an int"),
    (lambda: mp.decoders.video(clip_len=True), "video(clip_len=True): expected an int"),
    (lambda: DecoderSpec.from_config({"kind": "video", "fps": "30"}), "video(fps='30'): expected a number or None"),
    (lambda: mp.decoders.audio(mono="yes"), "audio(mono='yes'): expected a bool"),
    (lambda: DecoderSpec.from_config({"kind": "image", "exact": 1}), "image(exact=1): expected a bool"),
    (lambda: mp.decoders.image(mode="RGBA"), "image(mode='RGBA'): expected one of ('RGB', 'L')"),
    (lambda: mp.decoders.video(bit_depth=10), "video(bit_depth=10): expected one of (8, 16)"),
    (lambda: mp.decoders.video(clip_len=0), "video(clip_len=0): expected >= 1"),
    (lambda: mp.decoders.audio(sample_rate=-1), "audio(sample_rate=-1): expected a positive rate in Hz or None"),
    (lambda: DecoderSpec.from_config({"kind": "audio", "from_field": "video", "duration": 1.0}),
     "audio(from_field='video'): expected a field name, and no offset, duration or random_crop"),
])
def test_a_bad_option_is_refused_naming_the_option(make, named):
    with pytest.raises(PipelineError) as refused:
        make()
    assert named in str(refused.value)


def test_numpy_values_are_taken_as_python_ones():
    spec = mp.decoders.video(clip_len=np.int64(4), fps=np.float32(10.0))
    assert type(spec.options.clip_len) is int and type(spec.options.fps) is float
    assert spec.to_config()["clip_len"] == 4


def test_a_live_decoder_checks_its_options_so_an_empty_manifest_segment_is_refused_by_name(tmp_path):
    """The live decoder checks what the factory checks: the converter cutting a manifest's segment of
    no duration says which file and segment, rather than passing audio(duration=0) on."""
    from mediapipe.errors import SourceError
    from mediapipe.loaders.sources.asr import segment_flac
    from mediapipe.synthetic.audio import encode_audio, speech_like

    data = encode_audio(tmp_path / "talk.wav", speech_like(1.0, seed=0), 16000).read_bytes()
    assert len(segment_flac(data, "talk.wav", 0.1, 0.5)) > 0
    with pytest.raises(SourceError, match=r"'talk.wav'.*segment \[0.100, 0.100\) s is empty"):
        segment_flac(data, "talk.wav", 0.1, 0.0)
    with pytest.raises(PipelineError, match=r"audio\(duration=0.0\): expected positive seconds"):
        mp.decoders.create("audio", "pyav", duration=0.0)


def test_a_source_that_is_not_a_source_is_refused_by_name():
    """The hooks live on `Source`: an object that only looks like one is refused when the
    pipeline is made, naming its class and what to subclass, not an AttributeError later."""
    import mediapipe as mp
    from mediapipe.errors import PipelineError

    class LooksLikeOne:
        def __len__(self) -> int:
            return 1

        def ref(self, index: int):
            raise AssertionError("never read")

    with pytest.raises(PipelineError, match="LooksLikeOne: expected a mediapipe.loaders.Source"):
        mp.Pipeline(LooksLikeOne(), {"image": mp.decoders.image()}, [], batch_size=1)
