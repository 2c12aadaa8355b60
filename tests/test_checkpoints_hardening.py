"""Module 09 against hostile files, shared folders and half-done loads (the review's findings)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from training_support import SavesAt

import tinyflo
from tinyflo.core import checkpoints
from tinyflo.core.checkpoints import (
    CheckpointError,
    CheckpointManager,
    atomic_write,
    capture_state,
    load_checkpoint,
    load_file,
    read_checkpoint,
    save_checkpoint,
    save_file,
)
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.core.layers import Linear, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD, Adam
from tinyflo.core.tensor import _Generators, set_rng_state
from tinyflo.core.training import Trainer

X = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
Y = np.arange(40) % 3


def build(seed: int = 0, optimizer: str = "adam", batch_size: int = 8):
    tinyflo.manual_seed(seed)
    model = Sequential(Linear(4, 3))
    opt = Adam(model.parameters(), lr=1e-2) if optimizer == "adam" else SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(X, Y), batch_size=batch_size, shuffle=True, seed=1)
    return Trainer(model, opt, cross_entropy, verbosity="quiet"), loader


def header_file(path: Path, header, payload: bytes = b"") -> Path:
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(len(text).to_bytes(8, "little") + text + payload)
    return path


# ----- checkpoints_header, checkpoints_read: the header trusts nothing ------------------------

@pytest.mark.task("checkpoints_header")
@pytest.mark.parametrize("header, payload, message", [
    ({"x": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, b"\0" * 4, "at most 64"),
    ({"x": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "dtype must be a string"),
    ({"x": {"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}}, b"", "too large"),
    ({"x": {"dtype": "F32", "shape": [2**62] * 60 + [0], "data_offsets": [0, 0]}}, b"", "too large"),
    ({"__metadata__": 0, "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "__metadata__"),
    ({"__metadata__": [], "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "__metadata__"),
    (b'{"x":{"dtype":"F32","shape":[1' + b"0" * 5000 + b'],"data_offsets":[0,4]}}', b"\0" * 4, "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, b"", "not valid JSON"),
    (b"\xff\xfe{}", b"", "not valid JSON"),
], ids=["65 dims", "dtype list", "zero size huge dims", "long zero-size shape", "metadata 0", "metadata list",
        "huge integer", "deep nesting", "bad utf-8"])
def test_checkpoints_header_hostile_headers_are_checkpoint_errors(tmp_path, header, payload, message):
    path = header_file(tmp_path / "bad.safetensors", header, payload)
    with pytest.raises(CheckpointError, match=message) as caught:
        load_file(path)
    assert str(path) in str(caught.value)


@pytest.mark.task("checkpoints_header")
def test_checkpoints_header_long_shapes_are_refused_fast(tmp_path):
    path = header_file(tmp_path / "dos.safetensors", {"x": {"dtype": "F32", "shape": [2**62] * 64,
                                                            "data_offsets": [0, 4]}}, b"\0" * 4)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="'x'"):
        load_file(path)
    assert time.perf_counter() - start < 0.5


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_short_read_is_an_error(tmp_path, monkeypatch):
    path = save_file(tmp_path / "s.safetensors", {"w": np.ones(4, np.float32)})
    real_open = open

    class Short:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def readinto(self, buffer):
            return self.f.readinto(memoryview(buffer)[:10])

    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Short(real_open(p, mode, *a, **k))
                        if Path(p) == path else real_open(p, mode, *a, **k))
    with pytest.raises(CheckpointError, match="changed size"):
        load_file(path)


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_checksum_false_with_our_format_key_is_refused(tmp_path):
    with pytest.raises(ValueError, match="checksum=False"):
        save_file(tmp_path / "nc.safetensors", {"w": np.zeros(2, np.float32)}, {checkpoints.FORMAT_KEY: "1"},
                  checksum=False)
    assert not (tmp_path / "nc.safetensors").exists()


@pytest.mark.task("checkpoints_read")
@pytest.mark.parametrize("state, message", [
    ('{"model": 5}', "'model'"),
    ('{"model": {"keys": ["w"], "hash": "x"}}', "model.keys"),
    ("[1]", "JSON object"),
    ('{"model": {"keys": ["0.weight"], "hash": "x", "modules": 3}}', "model.modules"),
    ('{"trainer": {"step": "1"}}', "'trainer'"),
    ('{"extra": {"a": {"__tensor__": "nowhere"}}}', "nowhere"),
    ("[" * 50_000 + "]" * 50_000, "not valid JSON"),
])
def test_checkpoints_read_damaged_state_is_a_checkpoint_error(tmp_path, state, message):
    path = header_file(tmp_path / "st.safetensors", {"0.weight": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]},
                                                     "__metadata__": {checkpoints.STATE_KEY: state}}, b"\0" * 4)
    with pytest.raises(CheckpointError, match=message) as caught:
        load_checkpoint(path, Sequential(Linear(1, 1)), strict=False)
    assert str(path) in str(caught.value)


# ----- checkpoints_atomic -----------------------------------------------------------------------

@pytest.mark.task("checkpoints_atomic")
@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_checkpoints_atomic_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = atomic_write(tmp_path / "m.bin", lambda f: f.write(b"x"))
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640, "the OS applies the umask, as open() would"


# ----- checkpoints_load: every check before the first byte is copied ---------------------------

class Scaler:
    def state_dict(self):
        return {"scale": 2.0}

    def load_state_dict(self, state):
        pass


def untouched(trainer, attempt):
    weight, step, opt_state = trainer.model[0].weight.numpy().copy(), trainer.step, trainer.optimizer.state_dict()
    with pytest.raises(CheckpointError) as caught:
        attempt()
    assert np.array_equal(weight, trainer.model[0].weight.numpy()), "the model was changed before the error"
    assert trainer.step == step, "trainer.step changed before the error"
    assert json.dumps(trainer.optimizer.state_dict(), default=str) == json.dumps(opt_state, default=str)
    return str(caught.value)


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_every_check_comes_before_the_first_copy(tmp_path):
    trainer, loader = build(0)
    trainer.fit(loader, epochs=2)
    trainer.precision.scaler = Scaler()  # a plug-in's scaler: only its state is saved here
    scaled = save_checkpoint(tmp_path / "scaled.safetensors", trainer=trainer)
    trainer.precision.scaler = None
    plain = save_checkpoint(tmp_path / "plain.safetensors", trainer=trainer)
    fresh, _ = build(5)
    assert "scaler" in untouched(fresh, lambda: load_checkpoint(scaled, trainer=fresh))
    fresh, small_batches = build(5, batch_size=4)
    assert "batch_size=8" in untouched(fresh, lambda: load_checkpoint(plain, trainer=fresh, train_loader=small_batches))
    fresh, _ = build(5)
    fewer = DataLoader(TensorDataset(X[:20], Y[:20]), batch_size=8)
    assert "samples=40" in untouched(fresh, lambda: load_checkpoint(plain, trainer=fresh, train_loader=fewer))
    sgd, sgd_loader = build(0, "sgd")
    sgd.fit(sgd_loader, epochs=1)
    from_sgd = save_checkpoint(tmp_path / "sgd.safetensors", trainer=sgd)
    fresh, _ = build(5)
    message = untouched(fresh, lambda: load_checkpoint(from_sgd, trainer=fresh))
    assert "momentum" in message and "optimizer" in message
    # the generator names are checked up front too
    tensors, metadata = load_file(plain)
    state = json.loads(metadata[checkpoints.STATE_KEY])
    state["rng"]["tinyflo"]["bit_generator"] = "os.system"
    metadata[checkpoints.STATE_KEY] = json.dumps(state)
    del metadata[checkpoints.CHECKSUM_KEY]
    odd = save_file(tmp_path / "odd.safetensors", tensors, metadata)
    fresh, _ = build(5)
    assert "os.system" in untouched(fresh, lambda: load_checkpoint(odd, trainer=fresh))


@pytest.mark.task("optim_load_state_dict")
def test_optim_load_state_dict_failed_load_changes_nothing():
    trainer, loader = build(0, "sgd")
    trainer.fit(loader, epochs=1)
    saved = trainer.optimizer.state_dict()
    adam = Adam(Sequential(Linear(4, 3)).parameters(), lr=0.5)
    with pytest.raises(ValueError, match="momentum"):
        adam.load_state_dict(saved)
    assert adam.param_groups[0]["lr"] == 0.5
    # hyper-parameters that fit, a state that does not: the hyper-parameters must stay too
    other = SGD(Sequential(Linear(4, 3)).parameters(), lr=0.5, momentum=0.9)
    broken = {"param_groups": saved["param_groups"], "state": {0: {"step": 1}}}
    with pytest.raises(ValueError, match="momentum_buffer"):
        other.load_state_dict(broken)
    assert other.param_groups[0]["lr"] == 0.5 and not other.state


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_extra_that_looks_like_a_tensor_reference_is_data(tmp_path):
    extra = {"a": {"__tensor__": "0.weight"}, "b": {"__data__": 1}, "c": np.ones(2, np.float32)}
    path = save_checkpoint(tmp_path / "e.safetensors", Sequential(Linear(4, 3)), extra=extra)
    tensors, state, _ = read_checkpoint(path)
    state = checkpoints._decode(state, tensors, str(path))
    assert state["extra"]["a"] == {"__tensor__": "0.weight"} and state["extra"]["b"] == {"__data__": 1}
    assert np.array_equal(state["extra"]["c"], np.ones(2, np.float32))


# ----- checkpoints_resume -----------------------------------------------------------------------

@pytest.mark.task("checkpoints_resume")
def test_checkpoints_rng_restores_a_generator_that_is_not_pcg64(tmp_path):
    model = Sequential(Linear(4, 3))
    saved_generator = _Generators.numpy
    try:
        _Generators.numpy = np.random.Generator(np.random.MT19937(3))
        snapshot = capture_state(model, rng=True)
        expected = _Generators.numpy.random(3)
        _Generators.numpy = np.random.default_rng(9)
        path = checkpoints.write_state(tmp_path / "mt.safetensors", snapshot)
        tensors, state, _ = read_checkpoint(path)
        set_rng_state(checkpoints._decode(state["rng"], tensors, str(path)))
        assert type(_Generators.numpy.bit_generator).__name__ == "MT19937"
        assert np.array_equal(_Generators.numpy.random(3), expected)
    finally:
        _Generators.numpy = saved_generator


# ----- checkpoints_retention --------------------------------------------------------------------

@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_two_prefixes_share_a_folder(tmp_path):
    snapshot = capture_state(Sequential(Linear(4, 3)))
    best = CheckpointManager(tmp_path, keep_last=1, prefix="best")
    last = CheckpointManager(tmp_path, keep_last=1, prefix="last")
    best.save(snapshot, step=1)
    last.save(snapshot, step=2)
    last.save(snapshot, step=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best-00000001.safetensors", "best-manifest.json", "last-00000003.safetensors", "last-manifest.json"]
    assert best.latest().name == "best-00000001.safetensors" and last.latest().name == "last-00000003.safetensors"
    assert CheckpointManager(tmp_path, keep_last=1, prefix="best").latest() == best.latest()
    best.save(snapshot, step=4, metric=1.0)
    (tmp_path / "best-00000004.safetensors").unlink()
    assert best.latest() is None and best.best() is None, "an entry whose file is gone is skipped"
    with pytest.raises(ValueError, match="prefix"):
        CheckpointManager(tmp_path, prefix="../x")


@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_manifest_never_deletes_outside_its_files(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    manifest = folder / "ckpt-manifest.json"
    manifest.write_text(json.dumps({"checkpoints": [{"file": "../victim.txt", "step": 1, "metric": None}]}))
    with pytest.raises(CheckpointError, match="ckpt-manifest.json"):
        CheckpointManager(folder, keep_last=1)
    assert victim.exists()
    for damaged in ("{not json", "[1, 2]", '{"checkpoints": [{"file": "ckpt-00000001.safetensors"}]}'):
        manifest.write_text(damaged)
        with pytest.raises(CheckpointError, match=str(manifest)):
            CheckpointManager(folder, keep_last=1)


@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_monitor_missing_from_history_is_an_error(tmp_path):
    trainer, loader = build(0)
    trainer.fit(loader, epochs=1)
    manager = CheckpointManager(tmp_path, keep_last=1, keep_best=1, monitor="val_los")
    with pytest.raises(ValueError, match=r"monitor='val_los'.*train_loss"):
        manager.save(trainer)
    CheckpointManager(tmp_path, keep_last=1, monitor="val_los").save(trainer)  # keep_best off: the monitor is unused


@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_leaves_other_processes_temp_files_alone(tmp_path):
    in_flight = tmp_path / f".ckpt-00000005.safetensors{checkpoints.TEMP_MARK}0123abcd"
    in_flight.write_bytes(b"being written by another process")
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(capture_state(Sequential(Linear(4, 3))), step=1)
    assert in_flight.exists()


@pytest.mark.task("checkpoints_background")
def test_checkpoints_background_job_runs_on_another_thread():
    seen = []
    saver = checkpoints.BackgroundSaver()
    saver.submit(lambda: seen.append(threading.current_thread()))
    saver.wait()
    assert seen and seen[0] is not threading.current_thread()



class _Interrupt(Exception):
    pass


@pytest.mark.task("checkpoints_resume")
def test_checkpoints_resume_mid_epoch_keeps_the_epoch_loss_sums(tmp_path):
    straight, loader = build(0)
    straight.fit(loader, epochs=3, accumulation_steps=2)
    assert straight.running is None and "epoch_totals" not in straight.state_dict(), "between epochs: no sums"
    first, first_loader = build(0)
    path = tmp_path / "mid.safetensors"
    with pytest.raises(_Interrupt):
        first.fit(SavesAt(first_loader, first, 7, path, then=_Interrupt), epochs=3, accumulation_steps=2)
    _, state, _ = read_checkpoint(path)
    totals = state["trainer"]["epoch_totals"]
    assert totals["samples"] == 16 and totals["batches"] == 2 and totals["dtype"] == "float32"
    resumed, resumed_loader = build(5)
    resumed.load_checkpoint(path, train_loader=resumed_loader)
    assert resumed.pending_epoch_totals is not None
    resumed.fit(resumed_loader, epochs=3 - resumed.epoch, accumulation_steps=2)
    assert resumed.history["train_loss"] == straight.history["train_loss"], "the interrupted epoch's mean is exact"
    assert resumed.pending_epoch_totals is None and resumed.running is None
