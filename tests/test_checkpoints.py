"""Module 09's checkpoints: the safetensors format, atomic writes, loading, full training state, retention."""

from __future__ import annotations

import inspect
import io
import json
import math
import os
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyflo
from tinyflo.core import checkpoints
from tinyflo.core.checkpoints import (
    CHECKSUM_KEY,
    BackgroundSaver,
    CheckpointError,
    CheckpointManager,
    CheckpointState,
    LoadReport,
    ModelCheckpoint,
    atomic_write,
    capture_state,
    load_checkpoint,
    load_file,
    read_checkpoint,
    retained,
    save_checkpoint,
    save_file,
    structural_hash,
    write_safetensors,
)
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.core.layers import Dropout, Linear, Module, Parameter, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD, Adam, AdamW
from tinyflo.core.schedulers import CosineAnnealing, StepLR, Warmup
from tinyflo.core.tensor import Function, ShapeError, Tensor
from tinyflo.core.training import Trainer

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "uint16", "uint32", "uint64"]


def _array(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


def net(seed: int = 0, head: int = 3, device: str = "cpu") -> Sequential:
    tinyflo.manual_seed(seed)
    return Sequential(Linear(4, 8), ReLU(), Linear(8, head)).to(device)


# ----- checkpoints_write, checkpoints_header, checkpoints_read: the file format ------------

@pytest.mark.task("checkpoints_write")
@SETTINGS
@given(dtypes=st.lists(st.sampled_from(DTYPES), min_size=1, max_size=5), data=st.data())
def test_checkpoints_write_round_trip_every_dtype_and_shape(tmp_path, dtypes, data):
    tensors = {f"t{i}.{d}": _array(d, data.draw(shapes), i) for i, d in enumerate(dtypes)}
    path = save_file(tmp_path / "x.safetensors", tensors, {"note": "é ✓"})
    back, meta = load_file(path)
    assert meta["note"] == "é ✓" and CHECKSUM_KEY in meta
    assert set(back) == set(tensors)
    for name, a in tensors.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape
        assert np.array_equal(back[name], a)
        assert back[name].ctypes.data % a.dtype.itemsize == 0 or a.size == 0, "aligned"


@pytest.mark.task("checkpoints_write")
def test_checkpoints_write_zero_d_empty_and_non_contiguous(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    tensors = {"scalar": np.float64(3.5), "zero_d": np.array(7, np.int32), "empty": np.zeros((0, 5), np.int16),
               "transposed": base.T, "strided": base[:, ::2], "big_endian": np.arange(3, dtype=">f8")}
    back, _ = load_file(save_file(tmp_path / "x.safetensors", tensors))
    assert back["scalar"].shape == () and back["scalar"] == 3.5
    assert back["zero_d"].shape == () and back["zero_d"].dtype == np.int32
    assert back["empty"].shape == (0, 5)
    assert np.array_equal(back["transposed"], base.T) and np.array_equal(back["strided"], base[:, ::2])
    assert back["big_endian"].dtype == np.dtype("<f8") and back["big_endian"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.task("checkpoints_write")
def test_checkpoints_write_bfloat16(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -2.0, 3.0], dtype=ml_dtypes.bfloat16)
    back, _ = load_file(save_file(tmp_path / "b.safetensors", {"b": a}))
    assert back["b"].dtype == a.dtype and np.array_equal(back["b"].astype(np.float32), a.astype(np.float32))


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_bfloat16_without_ml_dtypes_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "_bfloat16", lambda: None)
    text = json.dumps({"b": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    (tmp_path / "b.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + b"\0\0")
    with pytest.raises(CheckpointError, match="ml_dtypes"):
        load_file(tmp_path / "b.safetensors")


@pytest.mark.task("checkpoints_write")
def test_checkpoints_write_reference_reads_ours(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    safe_open = pytest.importorskip("safetensors").safe_open
    tensors = {d: _array(d, (2, 3), i) for i, d in enumerate(DTYPES)} | {"s": np.array(1.5, np.float32)}
    path = save_file(tmp_path / "ours.safetensors", tensors, {"epoch": "4"})
    theirs = st_numpy.load_file(str(path))
    assert set(theirs) == set(tensors)
    for name, a in tensors.items():
        assert theirs[name].dtype == a.dtype and np.array_equal(theirs[name], a)
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata()["epoch"] == "4" and CHECKSUM_KEY in f.metadata()


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_we_read_the_reference(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    tensors = {d: _array(d, (3, 2), i) for i, d in enumerate(DTYPES)} | {"empty": np.zeros((0,), np.float32)}
    st_numpy.save_file(tensors, str(tmp_path / "theirs.safetensors"), metadata={"format": "np"})
    back, meta = load_file(tmp_path / "theirs.safetensors")
    assert meta == {"format": "np"}, "no checksum in another writer's file: loaded unchecked"
    for name, a in tensors.items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a)


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_another_frameworks_model_file_loads_by_name(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    source = net(0)
    plain = {k: v.numpy() for k, v in reversed(list(source.state_dict().items()))}
    st_numpy.save_file(plain, str(tmp_path / "plain.safetensors"))
    target = net(1)
    report = load_checkpoint(tmp_path / "plain.safetensors", target)
    assert report.loaded == ("0.weight", "0.bias", "2.weight", "2.bias") and not report.verified
    assert "integrity not checked" in repr(report)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(source.parameters(), target.parameters()))


def _header_file(tmp_path, header, payload=b"", raw_prefix=None):
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    prefix = len(text).to_bytes(8, "little") if raw_prefix is None else raw_prefix
    path = tmp_path / "bad.safetensors"
    path.write_bytes(prefix + text + payload)
    return path


ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD_HEADERS = [
    ({"x": {**ENTRY, "shape": [3]}}, b"\0" * 8, "'x'.*12 bytes"),
    ({"x": {**ENTRY, "data_offsets": [8, 0]}}, b"\0" * 8, "'x'.*data_offsets"),
    ({"x": {**ENTRY, "dtype": "F8"}}, b"\0" * 8, "'x'.*unknown dtype 'F8'"),
    ({"x": {**ENTRY, "shape": [-2]}}, b"\0" * 8, "'x'.*shape"),
    ({"x": {**ENTRY, "shape": [True, 2]}}, b"\0" * 8, "'x'.*shape"),
    ({"x": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "'x'.*expected"),
    ({"x": ENTRY, "y": {**ENTRY, "data_offsets": [4, 12]}}, b"\0" * 12, "'y'.*begins at byte 4"),
    ({"x": ENTRY, "y": {**ENTRY, "data_offsets": [12, 20]}}, b"\0" * 20, "'y'.*begins at byte 12"),
    ({"x": ENTRY}, b"\0" * 5, "truncated"),
    ({"x": ENTRY}, b"\0" * 9, "1 bytes follow"),
    ({"__metadata__": {"a": 1}}, b"", "__metadata__"),
    (b"[1, 2]", b"", "JSON object"),
    (b"{not json", b"", "not valid JSON"),
]


@pytest.mark.task("checkpoints_header")
@pytest.mark.parametrize("header, payload, message", BAD_HEADERS)
def test_checkpoints_header_validation_names_file_and_key(tmp_path, header, payload, message):
    path = _header_file(tmp_path, header, payload)
    with pytest.raises(CheckpointError, match=message) as info:
        load_file(path)
    assert str(path) in str(info.value)


@pytest.mark.task("checkpoints_header")
@pytest.mark.parametrize("data", [b"", b"\1\0\0", (2**62).to_bytes(8, "little") + b"{}", (200).to_bytes(8, "little") + b"{}"])
def test_checkpoints_header_bad_length_prefix(tmp_path, data):
    (tmp_path / "p.safetensors").write_bytes(data)
    with pytest.raises(CheckpointError, match="truncated, or not safetensors"):
        load_file(tmp_path / "p.safetensors")


@pytest.mark.task("checkpoints_read")
@SETTINGS
@given(position=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_checkpoints_read_any_flipped_bit_is_refused(tmp_path, position, bit):
    path = save_file(tmp_path / "f.safetensors", {"w": np.arange(40, dtype=np.float32), "b": np.ones(3, np.int8)},
                     {"epoch": "12"})
    data = bytearray(path.read_bytes())
    data[int(position * len(data))] ^= 1 << bit
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(bytes(data))
    try:
        back, meta = load_file(damaged)
    except CheckpointError:
        return
    # a flip inside the header's padding spaces changes no content; anything else must have been refused
    assert meta == load_file(path)[1] and all(np.array_equal(back[k], v) for k, v in load_file(path)[0].items())


@pytest.mark.task("checkpoints_header")
@pytest.mark.parametrize("cut", [1, 7, 100])
def test_checkpoints_header_truncation_is_refused(tmp_path, cut):
    path = save_file(tmp_path / "t.safetensors", {"w": np.arange(64, dtype=np.float64)})
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    with pytest.raises(CheckpointError, match="truncated") as info:
        load_file(path)
    assert str(path) in str(info.value)


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_verify_false_skips_the_checksum(tmp_path):
    path = save_file(tmp_path / "v.safetensors", {"w": np.zeros(4, np.float32)})
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        load_file(path)
    assert load_file(path, verify=False)[0]["w"][-1] != 0


@pytest.mark.task("checkpoints_write")
def test_checkpoints_write_writer_errors_name_the_argument():
    with pytest.raises(TypeError, match="metadata.*'a'"):
        write_safetensors(io.BytesIO(), {}, {"a": 1})
    with pytest.raises(ValueError, match="__metadata__"):
        write_safetensors(io.BytesIO(), {"__metadata__": np.zeros(1)})
    with pytest.raises(CheckpointError, match="'c'.*complex"):
        write_safetensors(io.BytesIO(), {"c": np.zeros(2, np.complex64)})


@pytest.mark.task("checkpoints_read")
def test_checkpoints_read_no_pickle_on_the_load_path():
    source = inspect.getsource(checkpoints)
    for word in ("pickle", "allow_pickle", "np.load(", "eval(", "exec("):
        assert word not in source.replace("# Why not pickle", ""), word


def test_checkpoints_has_no_differentiable_ops():
    """The gradcheck table rule: module 09 defines no Function, so it needs no row."""
    assert not [v for v in vars(checkpoints).values()
                if inspect.isclass(v) and issubclass(v, Function) and v.__module__ == checkpoints.__name__]


# ----- checkpoints_atomic -----------------------------------------------------------------

@pytest.mark.task("checkpoints_atomic")
def test_checkpoints_atomic_failure_keeps_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write(path, lambda f: f.write(b"old"))

    def boom(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, boom)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]


@pytest.mark.task("checkpoints_atomic")
def test_checkpoints_atomic_order_of_fsync_and_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", os.path.dirname(a) == os.path.dirname(b))),
                                                     real_replace(a, b))[1])
    atomic_write(tmp_path / "g.bin", lambda f: f.write(b"x"))
    assert events == ["fsync", ("replace", True), "fsync"], "data, rename in the same folder, then the folder"


@pytest.mark.task("checkpoints_atomic")
def test_checkpoints_atomic_missing_folder_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no/such"):
        atomic_write(tmp_path / "no" / "such" / "file", lambda f: None)


# The kill test (SIGKILL at random moments of a save) lives in tests/test_checkpoints_processes.py.


# ----- checkpoints_load ---------------------------------------------------------------------

@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_round_trip_on_device(tmp_path, device):
    source = net(0, device=device)
    path = save_checkpoint(tmp_path / "m.safetensors", source)
    target = net(1, device=device)
    arrays = [p.data for p in target.parameters()]
    report = load_checkpoint(path, target)
    assert report == LoadReport(("0.weight", "0.bias", "2.weight", "2.bias"), (), (), True)
    for a, b, array in zip(source.parameters(), target.parameters(), arrays):
        assert b.data is array and b.device == a.device and np.array_equal(a.numpy(), b.numpy())


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_keeps_buffers_and_dtypes(tmp_path):
    from tinyflo.core.layers import BatchNorm1d

    tinyflo.manual_seed(0)
    model = Sequential(Linear(3, 4), BatchNorm1d(4))
    model(tinyflo.randn(8, 3))
    half = Sequential(Linear(3, 4), BatchNorm1d(4)).to(dtype="float16")
    path = save_checkpoint(tmp_path / "bn.safetensors", model)
    tensors, state, _ = read_checkpoint(path)
    assert tensors["1.running_mean"].dtype == np.float32 and tensors["1.num_batches_tracked"].dtype.kind == "i"
    load_checkpoint(path, half)
    assert half[1].running_mean.dtype == np.float16
    assert np.allclose(half[1].running_mean.numpy(), model[1].running_mean.numpy(), atol=1e-3)
    assert structural_hash(half) == structural_hash(model) == state["model"]["hash"]


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_structural_hash_ignores_values_not_structure():
    assert structural_hash(net(0)) == structural_hash(net(1))
    assert structural_hash(net(0)) != structural_hash(net(0, head=4))
    assert structural_hash(Sequential(Linear(4, 8), ReLU())) != structural_hash(Sequential(Linear(4, 8), Dropout()))


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_strict_mismatch_names_the_differences(tmp_path):
    path = save_checkpoint(tmp_path / "m.safetensors", net(0))
    bigger = Sequential(Linear(4, 8), ReLU(), Linear(8, 3), ReLU(), Linear(3, 2))
    before = [p.numpy().copy() for p in bigger.parameters()]
    with pytest.raises(CheckpointError, match=r"only in the model: 4.weight, 4.bias\).*strict=False"):
        load_checkpoint(path, bigger)
    assert all(np.array_equal(a, p.numpy()) for a, p in zip(before, bigger.parameters())), "nothing copied"


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_strict_mismatch_message_is_short_and_right(tmp_path):
    path = save_checkpoint(tmp_path / "m.safetensors", net(0))
    huge = Sequential(Linear(4, 8), ReLU(), Linear(8, 3), *[Linear(3, 3) for _ in range(40)])
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path, huge)
    message = str(caught.value)
    assert "42.weight" not in message and "(80 in all)" in message, "only the first few names"
    # the same names and classes, registered in another order: not "the module classes differ"
    first, second = Module(), Module()
    first.a, first.b = Linear(2, 2), Linear(2, 2)
    second.b, second.a = Linear(2, 2), Linear(2, 2)
    saved = save_checkpoint(tmp_path / "order.safetensors", first)
    with pytest.raises(CheckpointError, match="another order") as caught:
        load_checkpoint(saved, second)
    assert "classes differ" not in str(caught.value)
    swapped = Sequential(Linear(4, 8), Dropout(0.1), Linear(8, 3))
    with pytest.raises(CheckpointError, match="classes differ at 1: ReLU in the file, Dropout in the model"):
        load_checkpoint(path, swapped)


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_partial_then_freeze(tmp_path):
    """Transfer learning: a pretrained body, a new head; load the body, freeze it, train the head."""
    body = net(0)
    path = save_checkpoint(tmp_path / "body.safetensors", body)
    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 5))
    with pytest.raises(ShapeError, match=r"'2.weight' has shape \(3, 8\) in the file .* and \(5, 8\) in the model"):
        load_checkpoint(path, model, strict=False)
    model = Sequential(Linear(4, 8), ReLU(), Sequential(Linear(8, 5)))
    report = load_checkpoint(path, model, strict=False)
    assert report.loaded == ("0.weight", "0.bias")
    assert report.skipped == ("2.weight", "2.bias") and report.missing == ("2.0.weight", "2.0.bias")
    assert "skipped=2 [2.weight, 2.bias]" in repr(report)
    report.freeze_loaded(model)
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    frozen = model[0].weight.numpy().copy()
    opt = SGD(model.parameters(), lr=0.5)
    x, y = tinyflo.randn(6, 4), Tensor(np.arange(6) % 5)
    for _ in range(3):
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        opt.step()
    assert np.array_equal(model[0].weight.numpy(), frozen) and np.array_equal(frozen, body[0].weight.numpy())


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_flat_optimizer_stays_flat(tmp_path):
    model = net(0)
    opt = Adam(model.parameters(), lr=1e-2, flat=True)
    x, y = tinyflo.randn(6, 4), Tensor(np.arange(6) % 3)
    for _ in range(2):
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        opt.step()
    path = save_checkpoint(tmp_path / "flat.safetensors", model, opt)
    fresh = net(5)
    fresh_opt = Adam(fresh.parameters(), lr=1e-2, flat=True)
    buffer = fresh_opt._flat[0].params
    load_checkpoint(path, fresh, fresh_opt)
    assert all(p.data.base is buffer for p in fresh.parameters()), "the parameters are still views of the buffer"
    for model_, opt_ in ((model, opt), (fresh, fresh_opt)):
        opt_.zero_grad()
        cross_entropy(model_(x), y).backward()
        opt_.step()
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.parameters(), fresh.parameters()))


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_optimizer_and_scheduler_checks_come_first(tmp_path):
    model = net(0)
    path = save_checkpoint(tmp_path / "o.safetensors", model, Adam(model.parameters()), StepLR(3))
    other = net(1)
    before = other[0].weight.numpy().copy()
    with pytest.raises(CheckpointError, match="StepLR.*scheduler= is a CosineAnnealing"):
        load_checkpoint(path, other, Adam(other.parameters()), CosineAnnealing(10))
    with pytest.raises(CheckpointError, match=r"the state has 1 parameter groups; this optimizer has 2"):
        params = list(other.parameters())
        load_checkpoint(path, other, Adam([{"params": params[:2]}, {"params": params[2:]}]))
    assert np.array_equal(other[0].weight.numpy(), before), "nothing copied when anything is wrong"
    alone = save_checkpoint(tmp_path / "alone.safetensors", model)
    with pytest.raises(CheckpointError, match="optimizer= was given.*no optimizer state"):
        load_checkpoint(alone, other, SGD(other.parameters(), lr=0.1))
    with pytest.raises(CheckpointError, match="trainer= was given"):
        load_checkpoint(alone, trainer=Trainer(other, SGD(other.parameters(), lr=0.1), cross_entropy, verbosity="quiet"))


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_errors_name_the_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="path 'nowhere.safetensors'"):
        load_checkpoint("nowhere.safetensors", net(0))
    with pytest.raises(ValueError, match="pass a model"):
        load_checkpoint(tmp_path / "x", None)
    with pytest.raises(ValueError, match="pass a model"):
        save_checkpoint(tmp_path / "x")
    with pytest.raises(TypeError, match="extra.x has type object"):
        save_checkpoint(tmp_path / "x", net(0), extra={"x": object()})
    holder = Module()
    holder.register_parameter("x", Parameter(np.zeros(2, np.float32)))
    clash = Sequential(Linear(2, 2))
    clash.add_module("extra", holder)
    with pytest.raises(ValueError, match="two tensors would be named 'extra.x'"):
        save_checkpoint(tmp_path / "x", clash, extra={"x": np.ones(2, np.float32)})
    path = save_file(tmp_path / "v2.safetensors", {}, {checkpoints.FORMAT_KEY: "2"})
    with pytest.raises(CheckpointError, match="format version '2'"):
        load_checkpoint(path, net(0))


@pytest.mark.task("checkpoints_load")
def test_checkpoints_load_extra_state_round_trips(tmp_path):
    path = save_checkpoint(tmp_path / "e.safetensors", net(0), extra={"note": "best", "ema": np.ones(3, np.float32),
                                                                       "nested": {"k": [1, 2.5, None]}})
    tensors, state, verified = read_checkpoint(path)
    assert verified and state["extra"]["note"] == "best" and state["extra"]["nested"] == {"k": [1, 2.5, None]}
    assert np.array_equal(tensors[state["extra"]["ema"]["__tensor__"]], np.ones(3, np.float32))


# ----- checkpoints_resume --------------------------------------------------------------------

X = np.random.default_rng(0).standard_normal((50, 6)).astype(np.float32)
Y = np.random.default_rng(1).integers(0, 3, 50)


def run(seed: int = 0, flat: bool = False):
    tinyflo.manual_seed(seed)
    model = Sequential(Linear(6, 16), ReLU(), Dropout(0.25), Linear(16, 3))
    opt = AdamW(model.parameters(), lr=1e-2, flat=flat)
    loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, seed=seed + 1)
    sched = Warmup(CosineAnnealing(30), warmup_steps=4)
    return Trainer(model, opt, cross_entropy, scheduler=sched, scheduler_interval="step", verbosity="quiet"), loader


def same_training(a: Trainer, b: Trainer) -> bool:
    params = all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(a.model.parameters(), b.model.parameters()))
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    state = all(np.array_equal(sa["state"][i][k], sb["state"][i][k]) for i in sa["state"] for k in sa["state"][i])
    return params and state and sa["param_groups"] == sb["param_groups"] and a.step == b.step


@pytest.mark.task("checkpoints_resume")
@pytest.mark.parametrize("flat", [False, True])
def test_checkpoints_resume_in_process_through_the_trainer_methods(tmp_path, flat):
    straight, loader = run(flat=flat)
    straight.fit(loader, epochs=4)
    first, first_loader = run(flat=flat)
    first.fit(first_loader, epochs=2)
    first.save_checkpoint(tmp_path / "r.safetensors")
    tinyflo.manual_seed(99)
    np.random.seed(3)
    second, second_loader = run(seed=5, flat=flat)
    report = second.load_checkpoint(tmp_path / "r.safetensors")
    assert report.verified and second.pending_loader_state is not None
    second.fit(second_loader, epochs=2)
    assert second.pending_loader_state is None
    assert same_training(straight, second)
    assert straight.history["train_loss"] == second.history["train_loss"] and second.epoch == 4


@pytest.mark.task("checkpoints_resume")
def test_checkpoints_rng_restores_every_generator(tmp_path):
    trainer, loader = run()
    trainer.fit(loader, epochs=1)
    tinyflo.manual_seed(11)
    np.random.seed(12)
    path = trainer.save_checkpoint(tmp_path / "g.safetensors")
    expected = (tinyflo.rand(4).numpy(), np.random.rand(3), loader.rng.permutation(10))
    tinyflo.manual_seed(0)
    np.random.seed(0)
    other, other_loader = run(seed=3)
    other.load_checkpoint(path, train_loader=other_loader)
    assert np.array_equal(tinyflo.rand(4).numpy(), expected[0]) and np.array_equal(np.random.rand(3), expected[1])
    assert np.array_equal(other_loader.rng.permutation(10), expected[2])


@pytest.mark.task("checkpoints_resume")
def test_checkpoints_resume_grad_scaler_state(tmp_path):
    class Scaler:
        def __init__(self, scale=2.0**16):
            self.scale, self.tracker = scale, 0

        def state_dict(self):
            return {"scale": self.scale, "growth_tracker": self.tracker, "found_inf": np.array(0.0, np.float32)}

        def load_state_dict(self, state):
            self.scale, self.tracker = state["scale"], state["growth_tracker"]
            assert state["found_inf"].dtype == np.float32

    trainer, loader = run()
    trainer.precision.scaler = Scaler(512.0)  # a plug-in's scaler: only its state is saved here
    trainer.scaler.tracker = 17
    path = trainer.save_checkpoint(tmp_path / "s.safetensors")
    other, _ = run()
    other.precision.scaler = Scaler()
    other.load_checkpoint(path)
    assert (other.scaler.scale, other.scaler.tracker) == (512.0, 17)
    bare, _ = run()
    with pytest.raises(CheckpointError, match="GradScaler"):
        bare.load_checkpoint(path)


@pytest.mark.task("checkpoints_resume")
def test_checkpoints_resume_history_with_nan_survives_json(tmp_path):
    trainer, loader = run()
    trainer.fit(loader, loader, epochs=1)
    trainer.fit(loader, epochs=1)  # no validation in epoch 2: its val_loss is nan
    path = trainer.save_checkpoint(tmp_path / "h.safetensors")
    other, _ = run()
    other.load_checkpoint(path)
    val = other.history["val_loss"]
    assert val[0] == trainer.history["val_loss"][0] and math.isnan(val[1]) and other.history["lr"] == trainer.history["lr"]


# ----- checkpoints_retention ---------------------------------------------------------------

def entries(metrics):
    return [{"step": i + 1, "metric": m, "file": f"c{i + 1}"} for i, m in enumerate(metrics)]


@pytest.mark.task("checkpoints_retention")
@SETTINGS
@given(metrics=st.lists(st.one_of(st.none(), st.floats(-5, 5)), max_size=12),
       keep_last=st.one_of(st.none(), st.integers(1, 4)), keep_best=st.one_of(st.none(), st.integers(1, 3)),
       keep_every=st.one_of(st.none(), st.integers(1, 4)), mode=st.sampled_from(["min", "max"]))
def test_checkpoints_retention_rules(metrics, keep_last, keep_best, keep_every, mode):
    all_entries = entries(metrics)
    kept = retained(all_entries, keep_last, keep_best, mode, keep_every)
    steps = [e["step"] for e in kept]
    assert steps == sorted(steps), "in their order"
    expected = set()
    if keep_last:
        expected |= {e["step"] for e in all_entries[-keep_last:]}
    if keep_every:
        expected |= {e["step"] for e in all_entries if e["step"] % keep_every == 0}
    if keep_best:
        scored = [e for e in all_entries if e["metric"] is not None]
        scored.sort(key=lambda e: e["metric"] if mode == "min" else -e["metric"])
        best_values = {e["metric"] for e in scored[:keep_best]}
        assert len([e for e in kept if e["metric"] in best_values]) >= min(keep_best, len(scored))
        expected |= {e["step"] for e in scored[:keep_best]}
    assert set(steps) == expected


@pytest.mark.task("checkpoints_retention")
@pytest.mark.parametrize("background", [False, True])
def test_checkpoints_retention_manager_through_fit(tmp_path, background):
    trainer, loader = run()
    manager = CheckpointManager(tmp_path / "ck", keep_last=2, keep_best=1, monitor="train_loss", keep_every=21,
                                background=background)
    with manager:
        trainer.fit(loader, epochs=5, callbacks=[ModelCheckpoint(manager)])
    steps = [7 * e for e in range(1, 6)]
    best = steps[int(np.argmin(trainer.history["train_loss"]))]
    expected = {28, 35, 21, best}
    files = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert files == sorted([f"ckpt-{s:08d}.safetensors" for s in expected] + ["ckpt-manifest.json"])
    assert manager.latest().name == "ckpt-00000035.safetensors" and manager.best().name == f"ckpt-{best:08d}.safetensors"
    manifest = json.loads((tmp_path / "ck" / "ckpt-manifest.json").read_text())
    assert [e["step"] for e in manifest["checkpoints"]] == sorted(expected)
    resumed, resumed_loader = run(seed=4)
    resumed.load_checkpoint(manager.latest(), train_loader=resumed_loader)
    assert same_training(trainer, resumed)


@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_manager_reopens_and_leaves_other_files_alone(tmp_path):
    trainer, loader = run()
    manager = CheckpointManager(tmp_path, keep_last=1)
    trainer.fit(loader, epochs=1)
    manager.save(trainer)
    (tmp_path / f".ckpt-00000099.safetensors{checkpoints.TEMP_MARK}abc").write_bytes(b"half")
    again = CheckpointManager(tmp_path, keep_last=1)
    assert again.latest() == manager.latest() and again.best() is None
    assert list(tmp_path.glob(".*")), "another process may be writing a temporary file: a manager leaves it alone"
    snapshot = capture_state(trainer=trainer)
    with pytest.raises(ValueError, match="step="):
        again.save(snapshot)
    again.save(snapshot, step=100, metric=0.5)
    assert again.latest().name == "ckpt-00000100.safetensors" and again.best() == again.latest()
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["ckpt-00000100.safetensors"]


@pytest.mark.task("checkpoints_background")
def test_checkpoints_background_copy_is_taken_before_training_goes_on(tmp_path, monkeypatch):
    trainer, loader = run()
    trainer.fit(loader, epochs=1)
    expected = [p.numpy().copy() for p in trainer.model.parameters()]
    gate = threading.Event()
    real_write = checkpoints.write_state

    def slow_write(path, snapshot):
        gate.wait(5)
        return real_write(path, snapshot)

    monkeypatch.setattr(checkpoints, "write_state", slow_write)
    manager = CheckpointManager(tmp_path, background=True)
    start = time.perf_counter()
    path = manager.save(trainer)
    assert time.perf_counter() - start < 2, "save() returns before the write"
    trainer.fit(loader, epochs=1)  # the weights change while the file is being written
    gate.set()
    manager.close()
    tensors, _ = load_file(path)
    assert all(np.array_equal(tensors[k], e) for k, e in zip(trainer.model.state_dict(), expected))


@pytest.mark.task("checkpoints_background")
def test_checkpoints_background_worker_errors_surface(tmp_path, monkeypatch):
    def broken(path, snapshot):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoints, "write_state", broken)
    trainer, _ = run()
    manager = CheckpointManager(tmp_path, background=True)
    manager.save(trainer, step=1)
    with pytest.raises(OSError, match="No space left"):
        manager.save(trainer, step=2)
    manager.wait()  # raised once, then forgotten; the second save never started
    manager.save(trainer, step=3)
    with pytest.raises(OSError, match="No space left"):
        manager.wait()
    with pytest.raises(OSError):
        with CheckpointManager(tmp_path, background=True) as m:
            m.save(trainer, step=4)
    saver = BackgroundSaver()
    with pytest.raises(ZeroDivisionError):
        with saver:
            saver.submit(lambda: 1 / 0)


@pytest.mark.task("checkpoints_retention")
def test_checkpoints_retention_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="keep_last must be a positive integer"):
        CheckpointManager(tmp_path, keep_last=0)
    with pytest.raises(ValueError, match="nothing would be kept"):
        CheckpointManager(tmp_path, keep_last=None)
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        CheckpointManager(tmp_path, mode="best")
    with pytest.raises(TypeError, match="manager must be a CheckpointManager"):
        ModelCheckpoint(str(tmp_path))
    with pytest.raises(ValueError, match="every must be a positive integer"):
        ModelCheckpoint(CheckpointManager(tmp_path), every=0)


def test_checkpoints_state_nbytes():
    state = CheckpointState({"a": np.zeros(10, np.float32), "b": np.zeros(3, np.int64)}, {})
    assert state.nbytes == 64


@pytest.mark.task("checkpoints_resume")
def test_checkpoints_store_each_learning_rate_once(tmp_path):
    """The rates live in the optimizer's groups only: the scheduler and the trainer's state hold none."""
    model = Sequential(Linear(4, 3))
    opt = SGD([{"params": [model[0].weight], "lr": 0.1}, {"params": [model[0].bias], "lr": 0.001}], lr=0.1)
    trainer = tinyflo.Trainer(model, opt, cross_entropy, scheduler=StepLR(1, 0.5), verbosity="quiet")
    x, y = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), np.arange(8) % 3
    trainer.train_epoch([(x, y)])
    trainer.train_epoch([(x, y)])
    _, raw, _ = read_checkpoint(trainer.save_checkpoint(tmp_path / "c.safetensors"))
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if "lr" in str(key):
                    found.append(path + "/" + str(key))
                walk(value, path + "/" + str(key))
        elif isinstance(node, list):
            for value in node:
                walk(value, path)

    walk({k: v for k, v in raw.items() if k != "trainer"}, "")
    walk({k: v for k, v in raw["trainer"].items() if k != "history"}, "/trainer")
    assert sorted(found) == [f"/optimizer/param_groups/{key}" for key in ("initial_lr", "initial_lr", "lr", "lr")]
    assert [g["lr"] for g in raw["optimizer"]["param_groups"]] == [0.05, 0.0005]
    assert raw["trainer"]["history"]["lr"] == [0.1, 0.05] and raw["trainer"]["history"]["lr_1"] == [0.001, 0.0005]
