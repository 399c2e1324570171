"""The core redesign (issue 24) attacked as a hostile user would: the device-decode path under
every ``on_error`` (one, several, all samples of a batch failing there; stand-ins that fail
there too; padding slots), fields the workers made beside a device-decoded one, the loaders
on their shared base, the typed decoder options and the declared source hooks."""

from __future__ import annotations

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from tests.helpers import state_after, write_image_folder

SEED, SIZE = 11, 32


def undefined_tables(data: bytes) -> bytes:
    """A JPEG whose scan names Huffman tables it never defines: its header probes fine in the
    worker, and only the device's decode fails."""
    data = bytearray(data)
    sos = data.index(b"\xff\xda")
    for c in range(data[sos + 4]):
        data[sos + 6 + 2 * c] = 0x33
    return bytes(data)


def damage(root, positions) -> list:
    """Damage the files at ``positions`` of the folder source's order (sorted paths)."""
    files = sorted(root.rglob("*.jpg"))
    for i in positions:
        files[i].write_bytes(undefined_tables(files[i].read_bytes()))
    return [files[i] for i in positions]


def image_pipeline(root, device_decode: bool, batch_size: int = 4, **kwargs) -> mp.Pipeline:
    pytest.importorskip("nvidia.nvimgcodec")
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                       [A.RandomResizedCrop(SIZE, scale=(0.3, 1.0)), A.HorizontalFlip()], batch_size=batch_size,
                       seed=SEED, device="cpu", **kwargs)


def batches(pipe, **kwargs) -> list[dict]:
    loader = pipe.loader(shuffle=False, **kwargs)
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in loader], loader


def assert_like(a: list[dict], b: list[dict], levels: float = 4.0) -> None:
    """Same samples in the same slots, their pixels within the fused path's rounding."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        assert torch.equal(x["index"], y["index"]) and torch.equal(x["label"], y["label"])
        if "valid" in x:
            assert torch.equal(x["valid"], y["valid"])
        diff = (x["image"].int() - y["image"].int()).abs().float().mean(dim=(1, 2, 3))
        assert (diff <= levels).all(), diff


# -- the device-decode path ------------------------------------------------------------------------
@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_several_device_failures_and_a_stand_in_that_fails_there_too(tmp_path, on_error):
    """Five of twelve files fail only on the device, some of them picked as stand-ins: the same
    batches as the worker path gives, each failure counted once."""
    write_image_folder(tmp_path, 12, classes=2, seed=4)
    bad = damage(tmp_path, [0, 2, 3, 7, 9])
    device, d_loader = batches(image_pipeline(tmp_path, True, on_error=on_error))
    worker, w_loader = batches(image_pipeline(tmp_path, False, on_error=on_error))
    assert_like(device, worker)
    assert sum(d_loader.stats.errors.values()) == sum(w_loader.stats.errors.values()) == len(bad)
    paths = sorted(str(p) for p in bad)
    assert sorted(f.split(": ")[0] for f in d_loader.stats.failed) == paths  # the wording is the decoder's
    assert sorted(f.split(": ")[0] for f in w_loader.stats.failed) == paths


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_padding_slots_that_fail_on_the_device(tmp_path, on_error):
    """last_batch="pad": the short last batch repeats its last sample, which fails on the device;
    the padding is what the worker path gives, and the failure is counted once."""
    write_image_folder(tmp_path, 10, classes=1, seed=6)
    damage(tmp_path, [9])
    device, d_loader = batches(image_pipeline(tmp_path, True, on_error=on_error), last_batch="pad")
    worker, w_loader = batches(image_pipeline(tmp_path, False, on_error=on_error), last_batch="pad")
    assert [len(b["index"]) for b in device] == [4, 4, 4]
    assert device[-1]["valid"].tolist() == worker[-1]["valid"].tolist()
    assert_like(device, worker)
    assert sum(d_loader.stats.errors.values()) == sum(w_loader.stats.errors.values()) == 1


def test_device_failures_give_the_same_batches_with_0_and_2_workers_and_from_a_resume(tmp_path):
    write_image_folder(tmp_path, 12, classes=2, seed=8)
    damage(tmp_path, [1, 5, 6])
    pipe = image_pipeline(tmp_path, True, on_error="skip")
    zero, _ = batches(pipe, num_workers=0)
    two, loader = batches(pipe, num_workers=2)
    assert_like(zero, two, levels=0)
    assert sum(loader.stats.errors.values()) == 3
    state = state_after(pipe.loader(shuffle=False, num_workers=2), 1)
    resumed = pipe.loader(shuffle=False, num_workers=2)
    resumed.load_state_dict(state)
    assert_like([dict(b) for b in resumed], zero[1:], levels=0)


@pytest.mark.parametrize("on_error", ["skip", "replace"])
@pytest.mark.parametrize("collate", ["list", "pad"])
def test_a_device_failure_in_a_detection_batch(detection_dataset, tmp_path, collate, on_error):
    """The slot of a sample that failed on the device holds a stand-in's boxes and per-object labels
    (another number of them; "skip") or none of them and label -1 ("replace"), in a batch that pads
    or lists them: exactly as the worker path gives. (They were the failed sample's, or a crash
    writing a stand-in's labels into the padded column.)"""
    import shutil

    pytest.importorskip("nvidia.nvimgcodec")
    root = tmp_path / "det"
    shutil.copytree(detection_dataset.annotations.parent, root)
    images = sorted((root / "images").glob("*.jpg"))
    for i in (1, 6):  # the most objects of their batches
        images[i].write_bytes(undefined_tables(images[i].read_bytes()))

    def pipe(device_decode):
        source = mp.loaders.coco(root / detection_dataset.annotations.name, root / "images", collate=collate)
        return mp.Pipeline(source, {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                           [A.RandomResizedCrop(48, scale=(0.4, 1.0)), A.HorizontalFlip()], batch_size=4, seed=5,
                           device="cpu", on_error=on_error)

    device, d_loader = batches(pipe(True))
    worker, _ = batches(pipe(False))
    assert sum(d_loader.stats.errors.values()) == 2
    for a, b in zip(device, worker):
        assert a.keys() == b.keys()
        for name in a:
            x, y = a[name], b[name]
            if name == "image":
                assert x.shape == y.shape
            elif isinstance(x, torch.Tensor):
                assert x.shape == y.shape and x.dtype == y.dtype, name
                assert torch.allclose(x.float(), y.float(), atol=1e-4), name
            elif isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
                assert [v.shape for v in x] == [v.shape for v in y], name
                assert all(torch.allclose(v.float(), w.float(), atol=1e-4) for v, w in zip(x, y)), name
            else:
                assert x == y, name


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_a_device_failure_in_a_padded_detection_batch_on_the_meta_device(detection_dataset, tmp_path, on_error):
    """The meta device standing in for a GPU: the failed slot's rows are rewritten there, its lengths
    read on the host (a device tensor read back would fail here)."""
    import shutil

    pytest.importorskip("nvidia.nvimgcodec")
    root = tmp_path / "det"
    shutil.copytree(detection_dataset.annotations.parent, root)
    images = sorted((root / "images").glob("*.jpg"))
    images[1].write_bytes(undefined_tables(images[1].read_bytes()))
    source = mp.loaders.coco(root / detection_dataset.annotations.name, root / "images", collate="pad")
    pipe = mp.Pipeline(source, {"image": mp.decoders.image("nvimgcodec", device_decode=True)},
                       [A.RandomResizedCrop(48, scale=(0.4, 1.0))], batch_size=4, seed=5, device="meta",
                       on_error=on_error)  # (a batch op on padded boxes needs their lengths' values: not on meta)
    loader = pipe.loader(shuffle=False)
    first = next(iter(loader))
    assert first["image"].device.type == first["boxes"].device.type == first["labels"].device.type == "meta"
    assert first["boxes_lengths"].device.type == "meta" and first["boxes"].shape[:1] == (4,)
    assert sum(loader.stats.errors.values()) == 1


def two_image_rows(root, taller: int = 0, bad: tuple[int, ...] = ()) -> mp.Pipeline:
    """Six rows of two JPEGs each (``image`` and ``other``); row 0's ``other`` ``taller`` pixels
    taller, and ``other`` damaged (on the device only) in the rows ``bad``."""
    import json

    from mediapipe.synthetic import jpeg_bytes, photo_like

    rows = []
    for i in range(6):
        h, w = 80 + 6 * i, 100 - 3 * i
        (root / f"{i}a.jpg").write_bytes(jpeg_bytes(photo_like(h, w, i), quality=92))
        other = jpeg_bytes(photo_like(h + (taller if i == 0 else 0), w, 100 + i), quality=92)
        (root / f"{i}b.jpg").write_bytes(undefined_tables(other) if i in bad else other)
        rows.append({"path": f"{i}a.jpg", "other": f"{i}b.jpg", "label": i % 2})
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root / "rows.jsonl"


def two_image_pipeline(manifest, device_decode: bool, backend: str = "nvimgcodec", **kwargs) -> mp.Pipeline:
    pytest.importorskip("nvidia.nvimgcodec")
    decode = {name: mp.decoders.image(backend, device_decode=device_decode) for name in ("image", "other")}
    return mp.Pipeline(mp.loaders.manifest(manifest), decode, [A.RandomResizedCrop(SIZE, scale=(0.3, 1.0)),
                       A.HorizontalFlip()], batch_size=3, seed=SEED, device="cpu", **kwargs)


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_two_device_decoded_fields_with_the_second_failing_on_the_device(tmp_path, on_error):
    manifest = two_image_rows(tmp_path, bad=(1, 4))
    device, d_loader = batches(two_image_pipeline(manifest, True, on_error=on_error))
    worker, w_loader = batches(two_image_pipeline(manifest, False, on_error=on_error))
    assert two_image_pipeline(manifest, True).plan.device_fields == {"image", "other"}
    assert_like(device, worker)
    for a, b in zip(device, worker):
        assert ((a["other"].int() - b["other"].int()).abs().float().mean(dim=(1, 2, 3)) <= 4.0).all()
    assert d_loader.stats.failed == w_loader.stats.failed and len(d_loader.stats.failed) == 2


@pytest.mark.parametrize(("backend", "device_decode"), [("nvimgcodec", True), ("nvimgcodec", False), ("turbo", False)])
def test_two_fused_fields_of_different_sizes_are_one_draw_on_two_canvases(tmp_path, device_decode, backend):
    """One crop drawn on ``image`` and fused into ``other``'s decoder too, but one ``other`` is taller:
    a DecodeError naming its file and both sizes (the crop landed elsewhere on it, silently), and
    under "replace" that slot is emptied and counted."""
    manifest = two_image_rows(tmp_path, taller=20)
    with pytest.raises(mp.DecodeError, match=r"0b\.jpg.*RandomResizedCrop draws once for \['image', 'other'\] on the "
                                             r"decoded \(80, 100\), but other is \(100, 100\)"):
        list(two_image_pipeline(manifest, device_decode, backend).loader(shuffle=False))
    loader = two_image_pipeline(manifest, device_decode, backend, on_error="replace").loader(shuffle=False)
    assert [b["valid"].tolist() for b in loader] == [[False, True, True], [True, True, True]]
    assert loader.stats.errors == {"RandomResizedCrop: fields of one draw differ in size": 1}


# -- loaders on the shared base --------------------------------------------------------------------
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


def backend_loader(pipe, backend: str, request, **kwargs):
    """``pipe``'s loader on ``backend`` (DALI on the CPU, device_id=None; Ray local, one actor)."""
    if backend == "dali":
        pytest.importorskip("nvidia.dali")
    if backend == "ray":
        request.getfixturevalue("local_ray")
        kwargs.update(num_workers=1, timeout=60)
    return pipe.loader(backend=backend, **kwargs)


def refused_states(good: dict, backend: str) -> dict[str, dict]:
    """States a ``backend`` loader cannot resume from, each wrong in one way."""
    sampler = good["sampler"]
    states = {
        "an unknown part": {**good, "bogus": 1},
        "an unknown key in the sampler's part": {**good, "sampler": {**sampler, "bogus": 1}},
        "an epoch that is not a number": {**good, "sampler": {**sampler, "epoch": "1"}},
        "a negative position": {**good, "sampler": {**sampler, "position": -2}},
        "no sampler part": {k: v for k, v in good.items() if k != "sampler"},
        "not a mapping": [("sampler", sampler)],
    }
    if backend == "dali":  # (another backend leaves DALI's part aside)
        states["a DALI part without its checkpoint"] = {**good, "dali": {"epoch": 0}}
    return states


@pytest.mark.parametrize("backend", ["torch", "dali", "ray"])
def test_a_refused_state_mid_pass_changes_nothing_on_any_backend(image_folder, backend, request):
    """Each bad state is a ValueError on every backend, and the running pass stays current: the next
    batch moves the position as if nothing was asked. (DALI refused an unknown part after loading
    the sampler's; torch and Ray took it; every backend took an epoch of "1" and failed later.)"""
    from tests.helpers import make_pipeline

    pipe = make_pipeline(image_folder)
    good = state_after(backend_loader(pipe, backend, request), 3)
    loader = backend_loader(pipe, backend, request)
    it = iter(loader)
    next(it)
    for what, state in refused_states(good, backend).items():
        before = loader.state_dict()
        with pytest.raises(ValueError):
            loader.load_state_dict(state)
        assert loader.state_dict() == before, what
    next(it)
    assert loader.state_dict()["sampler"]["position"] == 2
    loader.load_state_dict(good)  # a good one still loads, and the next pass starts there
    assert [b["index"].tolist() for b in loader] == [b["index"].tolist() for b in
                                                    list(backend_loader(pipe, backend, request))[3:]]
    loader.close()


# -- sources --------------------------------------------------------------------------------------
def test_a_conversion_from_shards_resumes_only_over_the_same_targets(detection_dataset, tmp_path, monkeypatch):
    """Shards with boxes converted again, stopped after one shard, then the input dataset re-made
    with other boxes (same images): the resume is refused, as for a COCO file whose annotations
    changed (the shards source had no fingerprint: the resume mixed old and new boxes). The same
    input resumes."""
    import json
    import shutil

    import mediapipe.dataset.convert_write as convert_write
    from mediapipe.dataset.convert import convert

    def shards_from(annotations, out):
        if out.exists():
            shutil.rmtree(out)
        convert(mp.loaders.coco(annotations, detection_dataset.images), out, shard_size=4, shuffle=False)

    class Stop(Exception):
        pass

    def stop_after_one_shard(step: str) -> None:
        if step == "commit":
            raise Stop

    source_dir, out = tmp_path / "in", tmp_path / "out"
    shards_from(detection_dataset.annotations, source_dir)
    assert mp.loaders.shards(source_dir).fingerprint == mp.loaders.shards(source_dir).fingerprint is not None
    monkeypatch.setattr(convert_write, "step_hook", stop_after_one_shard)
    with pytest.raises(Stop):
        convert(mp.loaders.shards(source_dir), out, shard_size=4, shuffle=False)
    monkeypatch.setattr(convert_write, "step_hook", None)
    kept = tmp_path / "kept"
    shutil.copytree(out, kept)
    annotations = json.loads(detection_dataset.annotations.read_text())
    for a in annotations["annotations"]:
        a["bbox"] = [v * 0.5 for v in a["bbox"]]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(annotations))
    shards_from(moved, source_dir)  # the same place, other boxes
    with pytest.raises(ValueError, match="cannot resume"):
        convert(mp.loaders.shards(source_dir), out, shard_size=4, shuffle=False, resume=True)
    shards_from(detection_dataset.annotations, source_dir)  # made again as it was: the same shards
    done = convert(mp.loaders.shards(source_dir), kept, shard_size=4, shuffle=False, resume=True)
    assert done.resumed_shards == 1 and mp.loaders.shards(kept).manifest["complete"]


class _Photos(mp.loaders.Source):
    """Four in-memory JPEGs with labels; subclasses override one declared hook each."""

    kind = ""

    def __len__(self) -> int:
        return 4

    def ref(self, index: int):
        from mediapipe.sample import Blob, SampleRef
        from mediapipe.synthetic import jpeg_bytes, photo_like

        data = jpeg_bytes(photo_like(40, 48, index), quality=90)
        return SampleRef(index, f"photo{index}", {"jpg": Blob(f"photo{index}.jpg", data=data)}, label=index % 2,
                         fields={"ids": torch.arange(index + 1)})


def _photo_pipeline(source) -> mp.Pipeline:
    return mp.Pipeline(source, {"image": mp.decoders.image("pillow")}, [A.Resize((16, 16))], batch_size=2,
                       seed=0, device="cpu")


def test_a_hook_is_honoured_as_a_class_attribute_an_instance_attribute_or_a_property():
    class AsAttribute(_Photos):
        collate = {"ids": "pad"}

    class AsInstanceAttribute(_Photos):
        def __init__(self) -> None:
            self.collate = {"ids": "pad"}

    class AsProperty(_Photos):
        @property
        def collate(self):
            return {"ids": "pad"}

    for source in (AsAttribute(), AsInstanceAttribute(), AsProperty()):
        batch = next(iter(_photo_pipeline(source).loader(shuffle=False)))
        assert batch["ids"].tolist() == [[0, 0], [0, 1]] and batch["ids_lengths"].tolist() == [1, 2]


@pytest.mark.parametrize("hook", ["split_by_rank", "picks_channels", "declares_rates", "fingerprint", "collate",
                                  "rank_samples"])
def test_a_value_hook_written_as_a_method_is_refused_naming_it(hook):
    """``def split_by_rank(self): return True`` was read as the bound method, always true: a loader
    read the whole dataset as this rank's part, silently. A value hook is a value or a property."""
    with pytest.raises(TypeError, match=rf"{hook} is a value .*not a method.*@property"):
        type("MethodHook", (_Photos,), {hook: lambda self: True})


@pytest.mark.parametrize("value", [{"boxes": "boxes"}, property(lambda self: {"boxes": "boxes"})])
def test_field_types_written_as_a_value_is_refused_naming_it(value):
    """``field_types = {...}`` failed when the pipeline was made, with "'dict' object is not callable"."""
    with pytest.raises(TypeError, match=r"field_types is a method.*def field_types\(self\)"):
        type("ValueHook", (_Photos,), {"field_types": value})


@pytest.mark.parametrize(("hook", "value", "expected"), [
    ("split_by_rank", "yes", "a bool"), ("collate", ["ids"], "a mapping"), ("fingerprint", 3, "a string or None"),
    ("rank_samples", 5, "a tuple of ints or None"), ("field_types", {"boxes": "boxes"}, "a method"),
])
def test_a_hook_set_on_the_instance_with_the_wrong_type_is_refused_when_the_pipeline_is_made(hook, value, expected):
    source = _Photos()
    setattr(source, hook, value)
    with pytest.raises(mp.PipelineError, match=rf"_Photos\.{hook}.*{expected}"):
        _photo_pipeline(source)


def test_a_stand_in_the_workers_chose_that_fails_on_the_device(tmp_path):
    """Sample A fails in the worker ("skip"); the stand-in the worker chose for it, B, loads there but
    fails on the device. The search for A goes on from B, as the worker path's does, and only A is
    counted (a replacement that fails during the search is not). It used to start a search of
    B's own, another stand-in than the worker path's, and count B."""
    from mediapipe.rng import replacement_rng

    write_image_folder(tmp_path, 12, classes=1, seed=9)
    files = sorted(tmp_path.rglob("*.jpg"))
    failed = 3
    stand_in = int(replacement_rng(SEED, 0, failed).integers(0, len(files)))
    assert stand_in != failed
    files[failed].write_bytes(b"not an image at all" * 20)  # refused by the worker's probe
    damage(tmp_path, [stand_in])  # fails on the device only
    device, d_loader = batches(image_pipeline(tmp_path, True, on_error="skip"))
    worker, w_loader = batches(image_pipeline(tmp_path, False, on_error="skip"))
    assert_like(device, worker)
    slot = device[failed // 4]["index"].tolist()[failed % 4]
    assert slot not in (failed, stand_in)
    assert [f.split(": ")[0] for f in d_loader.stats.failed] == [f.split(": ")[0] for f in w_loader.stats.failed]
    assert sum(d_loader.stats.errors.values()) == sum(w_loader.stats.errors.values())


@pytest.mark.parametrize("backend", ["nope", ["torch"], None, "TORCH"])
def test_an_unknown_backend_is_refused_naming_the_registered_ones(image_folder, backend, monkeypatch):
    """backend=["torch"] was a bare "unhashable type: 'list'"; a backend registered under a new
    name is among those the refusal names."""
    from mediapipe.loaders.loader_base import BACKENDS
    from tests.helpers import make_pipeline

    monkeypatch.setitem(BACKENDS, "mine", "mediapipe.loaders.loader:Loader")
    with pytest.raises(ValueError, match=r"^backend=.*: expected one of \('torch', 'dali', 'ray', 'mine'\)$"):
        make_pipeline(image_folder).loader(backend=backend)


@pytest.mark.parametrize("op", [A.MixUp(alpha=0.4, num_classes=2), A.CutMix(alpha=1.0, num_classes=2)])
def test_a_per_batch_op_on_a_device_decoded_field(tmp_path, op):
    """MixUp's and CutMix's per-batch draws (a float lambda) on a device-decoded image: the draw the
    worker path makes (the device stage moved every parameter with .to(): an AttributeError on the
    float)."""
    write_image_folder(tmp_path, 8, classes=2, seed=2)

    def pipe(device_decode: bool) -> mp.Pipeline:
        pytest.importorskip("nvidia.nvimgcodec")
        return mp.Pipeline(mp.loaders.folder(tmp_path),
                           {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                           [A.RandomResizedCrop(SIZE), A.HorizontalFlip(), op], batch_size=4, seed=SEED, device="cpu")

    device, _ = batches(pipe(True))
    worker, _ = batches(pipe(False))
    assert len(device) == len(worker) == 2
    for a, b in zip(device, worker):
        assert torch.equal(a["index"], b["index"])
        assert torch.allclose(a["label"].float(), b["label"].float())  # the same mixing of the labels
        assert (a["image"].float() - b["image"].float()).abs().mean() <= 4.0


# -- decoder options ------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [
    {"kind": "audio", "offset": float("nan")}, {"kind": "audio", "duration": float("nan")},
    {"kind": "audio", "random_crop": float("nan")}, {"kind": "audio", "max_duration": float("nan")},
    {"kind": "audio", "offset": float("inf")}, {"kind": "audio", "duration": float("inf")},
])
def test_a_decoder_option_that_is_not_a_finite_number_is_refused_naming_it(config, tmp_path):
    """A NaN (JSON's NaN, a computed value) passed every range check (``nan <= 0`` is false), so the
    pipeline was built and then every sample failed to decode ("cannot convert float NaN to
    integer"; max_duration=nan refused every file); now the config is refused when it is read."""
    import json

    from mediapipe.decoders.spec import DecoderSpec
    from mediapipe.synthetic.audio import encode_audio, speech_like

    name, value = next((k, v) for k, v in config.items() if k != "kind")
    encode_audio(tmp_path / "talk.wav", speech_like(0.5, seed=0), 16000)
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({"source": {"kind": "folder", "root": str(tmp_path)}, "decode": {"audio": config},
                                "batch_size": 2}))
    with pytest.raises(mp.PipelineError, match=rf"audio\({name}={value}\): expected a finite number"):
        mp.Pipeline.from_config(path)
    with pytest.raises(mp.PipelineError, match=rf"audio\({name}={value}\): expected a finite number"):
        DecoderSpec.from_config(config)


@pytest.mark.parametrize(("setting", "value", "expected"), [
    ("seed", 1.5, "an int"), ("seed", "7", "an int"), ("max_pixels", 1.5, "an int >= 1 or None"),
    ("max_pixels", 0, "an int >= 1 or None"), ("max_frames", -1, "an int >= 1 or None"),
    ("max_duration", float("nan"), "positive seconds or None"), ("max_duration", -1.0, "positive seconds or None"),
])
def test_a_pipeline_setting_of_the_wrong_type_is_refused_naming_it(image_folder, setting, value, expected):
    """seed=1.5 drew as seed 1 (and wrote 1.5 into the config); max_pixels=0, max_frames=-1 or a NaN
    max_duration refused, or let through, every file at decode time, sample by sample."""
    with pytest.raises(mp.PipelineError, match=rf"^{setting}={value!r}: expected {expected}"):
        mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, [], batch_size=2,
                    **{setting: value})
