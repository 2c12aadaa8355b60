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
# # Module 01 — Tensor
#
# Every deep-learning framework is built on one data structure: an
# n-dimensional array that lives on a device (the CPU or a GPU), knows its
# element type, and can do arithmetic with other arrays. In this module you
# build tinyflo's `Tensor` on top of NumPy (and, when there is a GPU, CuPy,
# which speaks the same language on the GPU).
#
# A tinyflo tensor does one more thing than a NumPy array: it **remembers how
# it was computed**. Each operation is a small class, a `Function`, with two
# methods side by side — `forward` computes the value, `backward` says how a
# change in the output changes each input (the op's *local derivative*, its
# two lines of the chain rule). That is the idea of micrograd (Andrej
# Karpathy's autograd engine for single numbers, in about a hundred lines),
# tensor-sized.
#
# How the work is shared between this module and the next:
#
# * **Module 01 (here)** — the tensor, its devices and dtypes, and every op as
#   a `Function` whose `forward` *and* `backward` you write together, so an op
#   and its derivative are never apart. When the inputs need gradients, each
#   op records its `Function` node in the output (`out._ctx`).
# * **Module 02 (autograd)** — the engine that walks those recorded nodes from
#   the loss back to the parameters, reduces broadcast gradients, accumulates
#   `.grad`, frees the graph, and checks every `backward` you write here
#   against finite differences.
#
# Nothing is bolted onto `Tensor` later: module 02 adds no methods to this
# class, it only runs the graph this module records.
#
# You will build, task by task, each graded right after its code:
#
# | task | points | what |
# |---|---|---|
# | `tensor_dtypes` | 1 | the type-promotion rule that keeps float32 float32 |
# | `tensor_python_data` | 1 | Python numbers and lists to arrays, never float64 by accident |
# | `tensor_creation` | 1 | arrays and tensors to a tensor's array: copied, cast, moved |
# | `tensor_function` | 3 | `Function.apply`: run `forward`, record the node |
# | `tensor_arithmetic` | 1 | `+`, `-` and negation, with broadcasting |
# | `tensor_mul_div` | 1 | `*` and `/` |
# | `tensor_pow` | 1 | `**` |
# | `tensor_exp_log` | 1 | `exp log sqrt` |
# | `tensor_tanh_sigmoid` | 1 | `tanh` and a stable `sigmoid` |
# | `tensor_relu_abs` | 1 | `relu abs` |
# | `tensor_matmul` | 2 | (batched) matrix multiplication |
# | `tensor_sum` | 1 | `sum` with `axis` / `keepdims` |
# | `tensor_mean_var` | 1 | `mean` and `var`, built from `sum` |
# | `tensor_max` | 1 | `max` (and `min`), ties sharing the gradient |
# | `tensor_views` | 1 | `reshape permute expand` |
# | `tensor_indexing` | 1 | `x[index]`, repeated picks included |
# | `tensor_cat_stack` | 1 | `cat` and `stack` |
# | `tensor_where` | 1 | `where` |
# | `tensor_clip` | 1 | `clip` |
#
# Code cells that begin with `#| export` are the module's code: once every
# task passes, `tinyflo module complete 01` copies them into your own tinyflo
# package, into the file the `#| default_exp core.tensor` line names
# (`tinyflo/core/tensor.py`); later modules and the milestones then run on it.

# %%
#| default_exp core.tensor

# %%
#| export
from __future__ import annotations

import functools
import itertools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tinyflo import environment

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.tensor: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.tensor"] = None


def _close(x, y, tol=1e-6):
    """Whether two arrays agree to within ``tol``: how the grade cells compare numbers."""
    return np.allclose(np.asarray(x), np.asarray(y), atol=tol)


def _close_text(message, words):
    """Whether an error's message names each of ``words``: how the grade cells read an error's text."""
    return all(str(word) in message for word in words)


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %% [markdown]
# ## Dtypes, and the float64 trap
#
# tinyflo's dtypes are NumPy's dtype objects. float32 is the default for
# everything a network computes: it is what GPUs are fast at, and it halves
# memory next to float64.
#
# NumPy has a habit that silently turns float32 work into float64 work:
# integer true division (`np.arange(3) / 2` is float64) and mixing an integer
# array with a float (`int64 + float32` is float64). A framework must not
# drift: **float32 in gives float32 out**, Python scalars included. The rule:
#
# * floating ⊕ floating → the wider of the two (float16 ⊕ float32 → float32);
# * floating ⊕ integer or bool → the floating one (int64 ⊕ float32 → float32);
# * integer ⊕ integer → the wider integer (uint8 ⊕ int32 → int32);
# * bool ⊕ integer → the integer; bool ⊕ bool → bool;
# * a Python scalar takes the tensor's dtype, except that a Python float meets
#   an integer tensor as float32 (`arange(3) * 0.5` is float32).

# %%
#| export
float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
bool_ = np.dtype("bool")

default_float = float32

try:  # bfloat16 on NumPy comes from ml_dtypes (module 11 uses it), when installed
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    bfloat16 = None

_DTYPE_NAMES = {
    "float16": float16, "half": float16,
    "float32": float32, "float": float32,
    "float64": float64, "double": float64,
    "int32": int32, "int": int32,
    "int64": int64, "long": int64,
    "uint8": uint8,
    "bool": bool_,
}
if bfloat16 is not None:
    _DTYPE_NAMES["bfloat16"] = bfloat16
SUPPORTED_DTYPES = frozenset(_DTYPE_NAMES.values())


def as_dtype(dtype: Any, argument: str = "dtype") -> np.dtype:
    """Turn a dtype name, NumPy dtype or scalar type into one of tinyflo's dtypes."""
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    if dtype is float or dtype is int or dtype is bool:  # Python's types mean tinyflo's defaults
        return {float: default_float, int: int64, bool: bool_}[dtype]
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved in SUPPORTED_DTYPES and dtype is not None:
        return resolved
    names = ", ".join(sorted({d.name for d in SUPPORTED_DTYPES}))
    raise TypeError(f"{argument}: expected one of {names}; got {brief(dtype)}")


def is_floating(dtype: np.dtype) -> bool:
    """True for float16/32/64 (and other floating dtypes later modules add)."""
    return dtype.kind == "f" or dtype == bfloat16


# %% [markdown]
# ### Task `tensor_dtypes` (1 point): `promote_types(a, b)`
#
# `promote_types(a, b)` gives the dtype of `a ⊕ b` for two tensors of
# dtypes `a` and `b`, by the rule above (the Python scalar case is handled
# elsewhere). NumPy's `np.promote_types` is right for two floats or two
# integers, but not when a float meets an integer.
#
# **Checked when graded** (besides the tests below), on every pair of
# float16, float32, float64, uint8, int32, int64 and bool, both ways round,
# in an order drawn for you:
#
# * a dtype with itself gives that dtype
# * floating ⊕ floating gives the wider of the two, in either order
# * floating ⊕ integer or bool gives the floating one, in either order
# * integer ⊕ integer gives the wider integer, in either order
# * bool ⊕ integer gives the integer, in either order

# %% nbgrader={"grade": false, "grade_id": "tensor_dtypes_code", "locked": false, "schema_version": 3, "solution": true}
#| export
@functools.cache
def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """The dtype of ``a ⊕ b`` for tensors: never drifts to float64 on its own."""
    ### BEGIN SOLUTION
    if a == b:
        return a
    if is_floating(a) and is_floating(b):
        return np.promote_types(a, b)
    if is_floating(a):
        return a
    if is_floating(b):
        return b
    return np.promote_types(a, b)
    ### END SOLUTION


# %%
print(promote_types(float32, int64), promote_types(float16, float32), promote_types(int32, int64))

# %% nbgrader={"grade": true, "grade_id": "tensor_dtypes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert promote_types(float32, float32) == float32, "float32 with float32 must stay float32"
assert promote_types(float32, int64) == float32, "an integer must not widen a float32 to float64"
assert promote_types(int64, float16) == float16, "an integer with float16 must give float16"
assert promote_types(float16, float32) == float32, "float16 with float32 must give the wider float32"
### BEGIN HIDDEN TESTS
# This student's own order: every pair of dtypes, both ways round, in an order drawn per student,
# each compared with a replay of the rule.
def _promoted(a, b):
    """The rule, replayed: the dtype of a ⊕ b."""
    if a == b:
        return a
    if a.kind == "f" and b.kind == "f":
        return a if a.itemsize > b.itemsize else b
    if a.kind == "f" or b.kind == "f":
        return a if a.kind == "f" else b
    if a.kind == "b" or b.kind == "b":
        return b if a.kind == "b" else a
    return a if a.itemsize > b.itemsize else b


_floats, _ints = [float16, float32, float64], [uint8, int32, int64]
_kinds = {
    "same": [(d, d) for d in _floats + _ints + [bool_]],
    "floats": [(a, b) for a in _floats for b in _floats if a != b],
    "mixed": [p for a in _floats for b in _ints + [bool_] for p in ((a, b), (b, a))],
    "ints": [(a, b) for a in _ints for b in _ints if a != b],
    "bools": [p for b in _ints for p in ((bool_, b), (b, bool_))],
}
_drawn = {kind: [pairs[i] for i in check_rng.permutation(len(pairs))] for kind, pairs in _kinds.items()}
# Each check shows the pair it tried with the dtype given: {"int32 ⊕ int64": dtype('int64')}.
for _a, _b in _drawn["same"]:
    _case = f"{_a} ⊕ {_b}"
    assert {_case: promote_types(_a, _b)} == {_case: _promoted(_a, _b)}, "a dtype with itself gives that dtype"
for _a, _b in _drawn["floats"]:
    _case = f"{_a} ⊕ {_b}"
    assert {_case: promote_types(_a, _b)} == {_case: _promoted(_a, _b)}, "floating ⊕ floating gives the wider of the two, in either order"
for _a, _b in _drawn["mixed"]:
    _case = f"{_a} ⊕ {_b}"
    assert {_case: promote_types(_a, _b)} == {_case: _promoted(_a, _b)}, "floating ⊕ integer or bool gives the floating one, in either order"
for _a, _b in _drawn["ints"]:
    _case = f"{_a} ⊕ {_b}"
    assert {_case: promote_types(_a, _b)} == {_case: _promoted(_a, _b)}, "integer ⊕ integer gives the wider integer, in either order"
for _a, _b in _drawn["bools"]:
    _case = f"{_a} ⊕ {_b}"
    assert {_case: promote_types(_a, _b)} == {_case: _promoted(_a, _b)}, "bool ⊕ integer gives the integer, in either order"
### END HIDDEN TESTS

# %% [markdown]
# ## Devices: one array namespace per place
#
# A `Device` names where an array lives and which library computes on it:
# `cpu` uses NumPy, `cuda:N` uses CuPy on GPU number N. Kernels below are
# written once against `xp` — whichever of the two the device hands out —
# so the same line of code runs on both.
#
# `cpu:1`, `cpu:2`, ... are *virtual* CPU devices: NumPy arrays like `cpu`,
# but a different device as far as tinyflo is concerned. Module 12 uses them
# to simulate several workers on one machine, and the tests use them to check
# that mixing devices is an error even where there is no GPU.
#
# CuPy is optional. `import cupy` succeeding does not mean there is a GPU, so
# we ask `cupy.cuda.is_available()`. With `TINYFLO_FAKE_GPU=strict` in the
# environment, `_cupy()` returns a strict stand-in instead (`tinyflo.strict_gpu`):
# CuPy's API on NumPy arrays that refuse to mix with host arrays and count
# every read back to the host, so the GPU code paths are tested where there
# is no GPU.
#
# `Device` is the one route to NumPy or CuPy. Three small helpers serve every
# module that holds raw arrays, so none of them looks at an array's type on
# its own: `is_array(x)` (a NumPy or CuPy array?), `device_of(array)` (where
# it lives; `device_of(array).xp` is its library) and `to_host(array)` (a
# NumPy array, copied from the GPU if need be).

# %%
#| export
@functools.cache
def _cupy():
    """The cupy module when CuPy imports and sees a GPU, else None (the test stand-in when asked for)."""
    import tinyflo.strict_gpu as strict_gpu

    if strict_gpu.active():  # TINYFLO_FAKE_GPU=strict: GPU code paths tested without a GPU
        return strict_gpu.install()
    try:
        import cupy
    except Exception:  # not installed, or its CUDA libraries are missing
        return None
    try:
        return cupy if cupy.cuda.is_available() else None
    except Exception:
        return None


def cuda_is_available() -> bool:
    """True when CuPy is installed and can see at least one GPU."""
    return _cupy() is not None


def cuda_device_count() -> int:
    """How many GPUs CuPy can see (0 without CuPy or without a GPU)."""
    cupy = _cupy()
    return 0 if cupy is None else cupy.cuda.runtime.getDeviceCount()


def _why_no_cuda() -> str:
    """Why a ``cuda:N`` device cannot be made: CuPy missing or broken, no GPU, or fewer GPUs than N + 1."""
    count = cuda_device_count()
    if count:
        return f"CuPy sees {count} GPU{'s' * (count > 1)}: " + ", ".join(f"cuda:{i}" for i in range(count))
    try:
        import cupy
    except ModuleNotFoundError as error:
        if error.name == "cupy":
            return ('CuPy is not installed; install it with pip install "tinyflo[gpu-cuda12]" (CUDA 12) '
                    'or "tinyflo[gpu-cuda13]" (CUDA 13)')
        return f"CuPy fails to import ({type(error).__name__}: {error})"
    except Exception as error:  # installed, but its CUDA libraries are missing or broken
        return f"CuPy fails to import ({type(error).__name__}: {error})"
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, or one too old for this CuPy: CUDA says which
        return f"CuPy {cupy.__version__} is installed but CUDA fails: {error}"
    return f"CuPy {cupy.__version__} is installed but sees no GPU"


class DeviceError(ValueError):
    """A device that does not exist, or operands on different devices."""


class ShapeError(ValueError):
    """Operands whose shapes do not fit the operation."""


class Device:
    """Where a tensor's array lives: ``cpu`` (NumPy) or ``cuda:N`` (CuPy).

    Devices are interned, so ``a.device is b.device`` is a cheap equality test.
    Used as a context manager, a CUDA device makes itself the current GPU.
    """

    _known: dict[tuple[str, int], Device] = {}

    def __new__(cls, type: str, index: int = 0) -> Device:
        if not isinstance(type, str) or isinstance(index, bool) or not isinstance(index, int | np.integer) \
                or index < 0:
            raise DeviceError(f"Device: expected a type 'cpu' or 'cuda' and an index >= 0; got {brief(type)}, "
                              f"{brief(index)}")
        key = (type, index)
        if key not in cls._known:
            if type == "cuda":
                if index >= cuda_device_count():
                    raise DeviceError(f"device: cuda:{index}: {_why_no_cuda()}")
                xp = _cupy()
            elif type == "cpu":
                xp = np
            else:
                raise DeviceError(f"device: expected type 'cpu' or 'cuda'; got {brief(type)}")
            self = super().__new__(cls)
            self.type, self.index, self.xp = type, index, xp
            self._contexts = []
            cls._known[key] = self
        return cls._known[key]

    def __repr__(self) -> str:
        return "cpu" if (self.type, self.index) == ("cpu", 0) else f"{self.type}:{self.index}"

    @property
    def reads_wait(self) -> bool:
        """Whether reading a value back to Python (``bool(x)``, ``.item()``) waits for queued work.

        Not on the CPU, where NumPy has finished every operation before it returns. On a GPU the read
        waits for every kernel queued so far, so a check read once per batch stalls the pipeline.
        """
        return self.type != "cpu"

    def __reduce__(self):
        return (Device, (self.type, self.index))

    def __enter__(self) -> Device:
        if self.type == "cuda":
            context = self.xp.cuda.Device(self.index)
            context.__enter__()
            self._contexts.append(context)
        return self

    def __exit__(self, *exc) -> None:
        if self.type == "cuda":
            self._contexts.pop().__exit__(*exc)


def as_device(spec: str | Device | None = None) -> Device:
    """Parse ``'cpu'``, ``'cpu:1'``, ``'cuda'`` or ``'cuda:1'`` into a Device (None means cpu)."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        return Device("cpu", 0)
    if isinstance(spec, str):
        name, _, index = spec.partition(":")
        if name in ("cpu", "cuda") and (index == "" or index.isdigit()):
            return Device(name, int(index or 0))
    raise DeviceError(f"device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got {brief(spec)}")


_CPU = Device("cpu", 0)


def is_array(x: Any) -> bool:
    """True for a NumPy or a CuPy ndarray (not a NumPy scalar, not a Tensor)."""
    if isinstance(x, np.ndarray):
        return True
    cupy = _cupy()
    return cupy is not None and isinstance(x, cupy.ndarray)


def brief(value: Any) -> str:
    """``value`` as an error message shows it: its repr on one short line; an array by its shape and dtype."""
    if is_array(value) or isinstance(value, Tensor):
        kind = "Tensor" if isinstance(value, Tensor) else f"{type(value).__module__.split('.')[0]}.ndarray"
        return f"{kind} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    if "\n" in text:
        text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def described(value: Any) -> str:
    """What came, for a message that says what was expected: ``str 'a'``, ``a numpy.ndarray of shape (2, 3) and ...``."""
    if is_array(value) or isinstance(value, Tensor):
        return "a " + brief(value)
    if value is None:
        return "None"
    if isinstance(value, str | bytes | int | float | complex | list | tuple | dict | set | np.generic):
        return f"{type(value).__name__} {brief(value)}"
    return f"a {type(value).__name__}"  # an object: its kind says more than a repr that may run for lines


def device_of(array: Any) -> Device:
    """The device a NumPy array (or NumPy scalar) or a CuPy array lives on: ``cpu`` or ``cuda:N``."""
    if isinstance(array, np.ndarray | np.generic):
        return _CPU
    if not is_array(array):
        raise TypeError(f"device_of: expected a NumPy or CuPy array; got {type(array).__name__}")
    return Device("cuda", array.device.id)


def to_host(array: Any, copy: bool = False) -> np.ndarray:
    """A NumPy array with ``array``'s values: copied from a GPU; on the CPU the array itself unless ``copy``."""
    if isinstance(array, np.ndarray | np.generic):
        return np.array(array) if copy else np.asarray(array)
    if not is_array(array):
        raise TypeError(f"to_host: expected a NumPy or CuPy array; got {type(array).__name__}")
    return array.get()




def _move(array: Any, src: Device, dst: Device) -> Any:
    """Copy an array from one device to another (virtual CPU devices copy too)."""
    if src is dst:
        return array
    if dst.type == "cpu":
        return to_host(array, copy=True)
    with dst:
        return dst.xp.asarray(array)


# %% [markdown]
# ## The Tensor
#
# A `Tensor` holds `data` (the array), its `device`, `requires_grad`, `grad`
# (filled by module 02's engine) and `_ctx` (the node that made it, or None
# for a leaf). `__slots__` keeps each tensor small and attribute access fast:
# a training step creates thousands of them.
#
# The class is given. Its arithmetic operators are one line each: they bring
# both operands to a common dtype and device (`_operands`) and call the op's
# `Function`. You write those `Function`s below, one task at a time; Python
# looks the names up when an operator runs, so the order in the file does not
# matter. Its constructor hands `data` to `_to_array`, which the next two
# tasks write.

# %%
#| export
class Tensor:
    """An n-dimensional array on a device that remembers how it was computed."""

    __slots__ = ("data", "requires_grad", "grad", "_ctx", "_device", "__weakref__")
    __array_priority__ = 1000  # `ndarray + Tensor` defers to Tensor.__radd__

    def __init__(
        self,
        data: Any,
        dtype: Any = None,
        device: str | Device | None = None,
        requires_grad: bool = False,
    ) -> None:
        if device is None:
            dev = data._device if isinstance(data, Tensor) else device_of(data) if is_array(data) else _CPU
        else:
            dev = as_device(device)
        self.data = _to_array(data, None if dtype is None else as_dtype(dtype), dev)
        self._device = dev
        self.grad: Tensor | None = None
        self._ctx: Function | None = None
        self.requires_grad = False
        if requires_grad is not False:
            self.requires_grad_(requires_grad)

    @staticmethod
    def _wrap(data: Any, device: Device, requires_grad: bool = False) -> Tensor:
        """A tensor around an existing array, without checks (the fast path for ops)."""
        t = object.__new__(Tensor)
        t.data, t._device, t.requires_grad, t.grad, t._ctx = data, device, requires_grad, None, None
        return t

    # ----- what a tensor is -------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def is_leaf(self) -> bool:
        """True for tensors made by the user rather than by an op."""
        return self._ctx is None

    @property
    def grad_fn(self) -> Function | None:
        return self._ctx

    def numel(self) -> int:
        """Number of elements."""
        return int(self.data.size)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        """Rows along the first axis (``for row in x``, ``a, b = x``)."""
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(t)``: the data on the host."""
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extras = [f"dtype={self.dtype}"]
        if self._device is not Device("cpu", 0):
            extras.append(f"device={self._device}")
        if self._ctx is not None:
            extras.append(f"grad_fn={self._ctx!r}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}, {', '.join(extras)})"

    # ----- moving between devices, dtypes and Python -------------------------
    def to(self, device: str | Device | None = None, dtype: Any = None) -> Tensor:
        """This tensor on another device and/or in another dtype (differentiable)."""
        if device is None and dtype is self.data.dtype:  # nothing to do (mean() asks this every call)
            return self
        dev = self._device if device is None else as_device(device)
        dt = self.dtype if dtype is None else as_dtype(dtype)
        if dev is self._device and dt == self.dtype:
            return self
        source = self if is_floating(dt) else self.detach()  # an integer copy has no gradient
        return To.apply(source, source=self._device, device=dev, dtype=dt)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Tensor:
        return self.to(Device("cuda", index))

    def float(self) -> Tensor:
        return self.to(dtype=float32)

    def half(self) -> Tensor:
        return self.to(dtype=float16)

    def double(self) -> Tensor:
        return self.to(dtype=float64)

    def long(self) -> Tensor:
        return self.to(dtype=int64)

    def numpy(self) -> np.ndarray:
        """The data as a NumPy array (copied to the host from a GPU; shared on the CPU)."""
        return to_host(self.data)

    def item(self) -> Any:
        """The single value of a one-element tensor, as a Python number (a device sync)."""
        if self.data.size != 1:
            raise ShapeError(f"item: only a one-element tensor converts to a number; got shape {self.shape}")
        return self.data.item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    # ----- autograd hooks (the engine is module 02) --------------------------
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark this leaf as needing a gradient (only floating tensors can)."""
        if not isinstance(requires_grad, bool | np.bool_):
            raise TypeError(f"requires_grad: expected True or False; got {described(requires_grad)}")
        if requires_grad and not is_floating(self.dtype):
            raise TypeError(f"requires_grad: only floating tensors can require a gradient; got {self.dtype}")
        self.requires_grad = bool(requires_grad)
        return self

    def detach(self) -> Tensor:
        """The same data, cut from the graph: no history, no gradient."""
        return Tensor._wrap(self.data, self._device)

    def set_(self, source: Tensor) -> Tensor:
        """Hold ``source``'s array, on ``source``'s device, in place: this object stays the same object.

        How a model moves its parameters: an optimizer built before the move holds the objects.
        """
        if not isinstance(source, Tensor):
            raise TypeError(f"set_: expected a Tensor; got {type(source).__name__}")
        if self.requires_grad and GradMode.enabled:
            raise RuntimeError("set_: replacing the data of a tensor that requires grad would corrupt its "
                               "gradient; do it inside no_grad()")
        if self.requires_grad and not is_floating(source.dtype):
            raise TypeError(f"set_: a tensor that requires grad needs floating data; got {source.dtype}")
        self.data, self._device = source.data, source._device
        return self

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Fill ``.grad`` of every leaf this tensor depends on (runs module 02's engine: `run_backward`)."""
        # the backward ops allocate on the current GPU: make it this tensor's (a graph that spans GPUs,
        # through .to(), runs its whole backward with the root's GPU current)
        with self._device:
            run_backward(self, grad, retain_graph)

    # ----- arithmetic ---------------------------------------------------------
    def __add__(self, other): return Add.apply(*_operands(self, other))
    def __radd__(self, other): return Add.apply(*_operands(other, self))
    def __sub__(self, other): return Sub.apply(*_operands(self, other))
    def __rsub__(self, other): return Sub.apply(*_operands(other, self))
    def __mul__(self, other): return Mul.apply(*_operands(self, other))
    def __rmul__(self, other): return Mul.apply(*_operands(other, self))
    def __truediv__(self, other): return Div.apply(*_operands(self, other, floating=True))
    def __rtruediv__(self, other): return Div.apply(*_operands(other, self, floating=True))
    def __pow__(self, other): return Pow.apply(*_operands(self, other))
    def __rpow__(self, other): return Pow.apply(*_operands(other, self))
    def __matmul__(self, other): return MatMul.apply(*_operands(self, other))
    def __rmatmul__(self, other): return MatMul.apply(*_operands(other, self))
    def __neg__(self): return Neg.apply(self)
    def __abs__(self): return self.abs()

    # ----- comparisons: no gradient, a bool tensor ----------------------------
    def __eq__(self, other): return _compare(self, other, "equal")
    def __ne__(self, other): return _compare(self, other, "not_equal")
    def __lt__(self, other): return _compare(self, other, "less")
    def __le__(self, other): return _compare(self, other, "less_equal")
    def __gt__(self, other): return _compare(self, other, "greater")
    def __ge__(self, other): return _compare(self, other, "greater_equal")
    __hash__ = object.__hash__

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.data)

    # ----- elementwise ----------------------------------------------------------
    def exp(self): return Exp.apply(self._floating())
    def log(self): return Log.apply(self._floating())
    def sqrt(self): return Sqrt.apply(self._floating())
    def tanh(self): return Tanh.apply(self._floating())
    def sigmoid(self): return Sigmoid.apply(self._floating())
    def relu(self): return ReLU.apply(self)
    def abs(self): return Abs.apply(self)
    def pow(self, exponent): return self ** exponent
    def matmul(self, other): return self @ other

    def clip(self, min: float | None = None, max: float | None = None) -> Tensor:
        """Limit values to [min, max]; the gradient flows only where no limit was hit."""
        if min is None and max is None:
            raise ValueError("clip: give at least one of min and max")
        for name, limit in (("min", min), ("max", max)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float | np.number)):
                raise TypeError(f"clip: {name} must be a number or None; got {described(limit)}")
        return Clip.apply(self, low=min, high=max)

    # ----- reductions -----------------------------------------------------------
    def sum(self, axis=None, keepdims: bool = False) -> Tensor:
        return Sum.apply(self, axis=_axes(axis, self.ndim, "sum"), keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> Tensor:
        x = self._floating()
        return _mean(x._accurate(), axis, keepdims).to(dtype=x.dtype)

    def var(self, axis=None, keepdims: bool = False, correction: int = 1) -> Tensor:
        x = self._floating()
        return _var(x._accurate(), axis, keepdims, correction).to(dtype=x.dtype)

    def max(self, axis=None, keepdims: bool = False) -> Tensor:
        return Max.apply(self, axis=_axes(axis, self.ndim, "max"), keepdims=keepdims)

    def min(self, axis=None, keepdims: bool = False) -> Tensor:
        return -Max.apply(-self, axis=_axes(axis, self.ndim, "min"), keepdims=keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _argext(self, axis, keepdims, "argmax")

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _argext(self, axis, keepdims, "argmin")

    # ----- shapes -------------------------------------------------------------
    def reshape(self, *shape) -> Tensor:
        return Reshape.apply(self, shape=_shape_arg(shape, "reshape", allow_minus_one=True))

    view = reshape

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (normalize_axis(a, self.ndim, "flatten") for a in (start_axis, end_axis))
        if start > end:
            raise ShapeError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis}")
        merged = int(np.prod(self.shape[start:end + 1]))
        return self.reshape(self.shape[:start] + (merged,) + self.shape[end + 1:])

    def permute(self, *axes) -> Tensor:
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], Sequence) else axes
        normalised = tuple(normalize_axis(a, self.ndim, "permute") for a in axes) if self.ndim else axes
        if sorted(normalised) != list(range(self.ndim)):
            raise ShapeError(f"permute: axes {axes} are not a permutation of the {self.ndim} axes of shape {self.shape}")
        return Permute.apply(self, axes=normalised)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        axes = list(range(self.ndim))
        i, j = normalize_axis(axis0, self.ndim, "transpose"), normalize_axis(axis1, self.ndim, "transpose")
        axes[i], axes[j] = axes[j], axes[i]
        return self.permute(axes)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> Tensor:
        shape = _shape_arg(shape, "expand", allow_minus_one=True)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: cannot expand shape {self.shape} to fewer axes {shape}")
        if -1 in shape[:lead]:
            raise ShapeError(f"expand: -1 (keep the size) is not allowed for a new leading axis; got {shape}")
        full = tuple(self.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
        return Expand.apply(self, shape=full)

    def squeeze(self, axis: int | None = None) -> Tensor:
        if axis is None:
            return self.reshape(tuple(n for n in self.shape if n != 1))
        axis = normalize_axis(axis, self.ndim, "squeeze")
        if self.shape[axis] != 1:
            return self
        return self.reshape(self.shape[:axis] + self.shape[axis + 1:])

    def unsqueeze(self, axis: int) -> Tensor:
        axis = normalize_axis(axis, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def unbind(self, axis: int = 0) -> tuple[Tensor, ...]:
        """The slices along ``axis``, that axis removed: ``q, k, v = qkv.unbind(0)``."""
        return unbind(self, axis)

    def __getitem__(self, index) -> Tensor:
        return GetItem.apply(self, index=_index_arg(index, self._device))

    def __setitem__(self, index, value) -> None:
        if self.requires_grad and GradMode.enabled:
            raise RuntimeError(
                "setitem: in-place assignment into a tensor that requires grad would corrupt "
                "its gradient; do it inside no_grad()"
            )
        if isinstance(value, Tensor):
            _same_device(self, value, "setitem")
            value = value.data
        elif not isinstance(value, int | float | np.generic | list | tuple) and not is_array(value):
            raise TypeError(f"setitem: value must be a Tensor, a number, a list of numbers or an array; "
                            f"got {described(value)}")
        elif isinstance(value, (np.ndarray, list, tuple)) and np.ndim(value) and self._device.type != "cpu":
            with self._device:  # host values are copied over (CuPy takes only scalars from the host here)
                value = self._device.xp.asarray(value)
        try:
            self.data[_index_arg(index, self._device)] = value
        except (IndexError, ValueError) as err:  # NumPy's own words, after ours: which index, which shape
            raise ShapeError(f"setitem: cannot put {brief(value)} at index {brief(index)} of a tensor of shape "
                             f"{self.shape}: {err}") from None

    # ----- helpers ----------------------------------------------------------------
    def _floating(self) -> Tensor:
        """Integer and bool tensors become float32 before a floating-point op."""
        return self if is_floating(self.dtype) else self.to(dtype=default_float)

    def _accurate(self) -> Tensor:
        """float16/bfloat16 become float32 for a reduction: 2049 is not a float16 number."""
        return self.to(dtype=float32) if self.dtype.itemsize < 4 else self


# %% [markdown]
# `Tensor.backward()` runs the engine that walks the recorded graph, and that
# engine is module 02. Module 01 cannot import it: course order is import
# order, so a module imports only the modules before it. Instead module 01
# keeps one slot for the engine, and module 02 puts its `backward` there when
# it is imported (`import tinyflo` does that). Until then, `backward()` says
# what is missing.

# %%
#| export
_backward_engine: Callable[..., None] | None = None


_passes = threading.local()  # .current: the run of the engine in progress on this thread


def set_backward_engine(engine: Callable[..., None]) -> None:
    """Install what ``Tensor.backward()`` runs: ``engine(root, grad, retain_graph=...)`` (module 02's ``backward``)."""
    global _backward_engine
    if not callable(engine):
        raise TypeError(f"set_backward_engine: expected a function engine(root, grad, retain_graph); got {engine!r:.60}")
    _backward_engine = engine


def backward_pass() -> object | None:
    """The run of the engine in progress on this thread (None outside one): each run is an object of its
    own, so `unbind`'s parts tell the run they are in from any other, even a run started inside it (a custom
    function's backward that calls ``backward()``) or on another thread."""
    return getattr(_passes, "current", None)


def run_backward(root: Tensor, grad: Any = None, retain_graph: bool = False) -> None:
    """Run the installed engine from ``root`` as one run of its own (``tinyflo.backward``; ``Tensor.backward()``)."""
    engine = _backward_engine
    if engine is None:
        raise RuntimeError(
            "backward: no autograd engine is installed; import tinyflo.core.autograd (module 02), which "
            "installs its engine (any name taken from tinyflo, such as tinyflo.tensor, imports it first)"
        )
    outer = backward_pass()
    _passes.current = object()
    try:
        engine(root, grad, retain_graph=retain_graph)
    finally:
        _passes.current = outer  # a run inside another gives the outer one back


# %% [markdown]
# ### Task `tensor_python_data` (1 point): Python numbers and lists
#
# `_from_python(data, dtype)` turns Python numbers and (nested) lists of
# numbers into a NumPy array. NumPy's own choice is the float64 trap again
# (`np.asarray([0.5])` is float64), so:
#
# * with `dtype=None`: floats become float32, integers int64, bools stay
#   bool — never float64 by accident;
# * with a `dtype`: the array in that dtype, converted from NumPy's own array
#   (going through float32 first would lose digits of a float64 the user
#   asked for);
# * a ragged list (`[[1, 2], [3]]`, which NumPy refuses with a `ValueError`)
#   is a `TypeError` that says the data must be rectangular; anything that is
#   not numbers (a string, None, a complex number) is a `TypeError` that names
#   what came: `tensor: expected numbers, (nested lists of) numbers or an
#   array; got str 'abc'`.
#
# **Checked when graded** (besides the tests below), on nested lists of a
# shape, and floats, ints, bools and a dtype, drawn for you:
#
# * the result must be a NumPy array
# * Python floats become float32, at any depth of nesting
# * nested lists keep their shape and values
# * a Python float becomes a 0-d float32 array
# * Python ints become int64, their values kept
# * Python bools stay bool
# * ints mixed with floats give float32
# * a dtype that is given wins, whatever the data
# * with dtype float64, floats keep all their digits: convert NumPy's array, not the float32 default
# * bools converted to int64 on request become 1 and 0
# * a ragged list must raise a TypeError
# * the error for a ragged list must say the data must be rectangular
# * data that is not numbers (None, a complex number, strings) must raise a TypeError
# * the error names the type of what came

# %% nbgrader={"grade": false, "grade_id": "tensor_python_data_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _from_python(data: Any, dtype: np.dtype | None) -> np.ndarray:
    """Python numbers or (nested) lists of them as a NumPy array: ``dtype``, else float32, int64 or bool."""
    ### BEGIN SOLUTION
    try:
        array = np.asarray(data)
    except ValueError as err:  # NumPy refuses ragged lists
        raise TypeError(f"tensor: data must be a rectangular nested list of numbers; {err}") from None
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"tensor: expected numbers, (nested lists of) numbers or an array; "
            f"got {type(data).__name__} {data!r:.60}"
        )
    if dtype is not None:
        return array.astype(dtype)
    if array.dtype.kind == "f":
        return array.astype(default_float)
    if array.dtype.kind in "iu":
        return array.astype(int64)
    return array
    ### END SOLUTION


# %%
print(_from_python([[1, 2], [3, 4]], None).dtype, _from_python(0.5, None).dtype, _from_python([True], None).dtype)

# %% nbgrader={"grade": true, "grade_id": "tensor_python_data", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert _from_python([1.0, 2.0], None).dtype == float32, "Python floats must become float32"
assert _from_python([1, 2], None).dtype == int64, "Python ints must become int64"
assert _from_python([True, False], None).dtype == bool_, "Python bools must stay bool"
assert _from_python([[1, 2], [3, 4]], None).shape == (2, 2), "nested lists keep their shape"
assert _from_python([1, 2], float16).dtype == float16, "a dtype that is given wins"
try:
    _from_python("abc", None)
    raise AssertionError("a string is not numbers: _from_python must raise a TypeError")
except TypeError as err:
    assert "str" in str(err), f"the error must name the type that came (str); got: {err}"
### BEGIN HIDDEN TESTS
# This student's own data: nested lists of a drawn shape holding drawn floats, ints and bools.
_shape = tuple(int(n) for n in check_rng.integers(1, 4, int(check_rng.integers(1, 4))))
_floats = np.round(check_rng.uniform(-100, 100, _shape), 3)
_ints = check_rng.integers(-10**12, 10**12, _shape)
_bools = check_rng.integers(0, 2, _shape).astype(bool)
_got = _from_python(_floats.tolist(), None)
assert isinstance(_got, np.ndarray), "the result must be a NumPy array"
assert _got.dtype == float32, "Python floats become float32, at any depth of nesting"
assert np.array_equal(_got, _floats.astype(np.float32)), "nested lists keep their shape and values"
_x = float(np.round(check_rng.uniform(-10, 10), 3))
_got = _from_python(_x, None)
assert (_got.shape, _got.dtype) == ((), float32), "a Python float becomes a 0-d float32 array"
_got = _from_python(_ints.tolist(), None)
assert _got.dtype == int64 and np.array_equal(_got, _ints), "Python ints become int64, their values kept"
assert _from_python(_bools.tolist(), None).dtype == bool_, "Python bools stay bool"
_mixed = [int(v) if k else float(v) for v, k in zip(check_rng.integers(-50, 50, 6), check_rng.permutation([0, 1] * 3))]
_got = _from_python(_mixed, None)
assert _got.dtype == float32 and np.array_equal(_got, np.array(_mixed, np.float32)), "ints mixed with floats give float32"
_dtypes = [float16, float32, float64, uint8, int32, int64, bool_]
_dt = _dtypes[int(check_rng.integers(len(_dtypes)))]
_data = [np.round(check_rng.uniform(0, 100, _shape), 1), check_rng.integers(0, 100, _shape), _bools][int(check_rng.integers(3))]
_got = _from_python(_data.tolist(), _dt)
assert _got.dtype == _dt and np.array_equal(_got, _data.astype(_dt)), "a dtype that is given wins, whatever the data"
# Floats of one to two with a last bit that float32 has no room for: float32 would round it away.
_digits = [float(np.float32(v)) + 2.0 ** -30 for v in check_rng.uniform(1, 2, int(check_rng.integers(2, 5)))]
assert _from_python(_digits, float64).tolist() == _digits, (
    "with dtype float64, floats keep all their digits: convert NumPy's array, not the float32 default")
assert np.array_equal(_from_python(_bools.tolist(), int64), _bools.astype(np.int64)), "bools converted to int64 on request become 1 and 0"
_long, _short = (int(n) for n in check_rng.permutation([1, 2, 3, 4])[:2])
_ragged = [check_rng.integers(0, 9, _long).tolist(), check_rng.integers(0, 9, _short).tolist()][::int(check_rng.choice([1, -1]))]
try:
    _from_python(_ragged, None)
    raise AssertionError("a ragged list must raise a TypeError")
except TypeError as err:
    assert "rectangular" in str(err), f"the error for a ragged list must say the data must be rectangular; got: {err}"
_word = str(check_rng.choice(["abc", "seven", "x", "1.5e"]))
_bad_data = [None, complex(*check_rng.integers(1, 9, 2)), [_word, _word], _word]
for _i in check_rng.permutation(len(_bad_data)):
    try:
        _from_python(_bad_data[_i], None)
        raise AssertionError("data that is not numbers (None, a complex number, strings) must raise a TypeError")
    except TypeError as err:
        assert type(_bad_data[_i]).__name__ in str(err), f"the error names the type of what came; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_creation` (1 point): arrays and tensors to a tensor's array
#
# `_to_array(data, dtype, device)` is what `Tensor(data, dtype, device)` calls
# to get its array. It returns an array of a supported dtype on the right
# device:
#
# * a Tensor → a copy of its array;
# * a NumPy array or scalar, or a CuPy array (`is_array(data)`, given with
#   the devices; `device_of(data)` says where it lives) → a copy of it (its
#   dtype kept unless `dtype` says otherwise; float64 data stays float64
#   because the user chose it — `from_numpy` is the way to share memory
#   instead);
# * anything else → `_from_python(data, dtype)`, the task above;
# * with `dtype=None`, an array of a dtype tinyflo does not support
#   (`complex64`, `int8`, ...) is a `TypeError` that names that dtype and the
#   supported ones; with a `dtype`, the array is converted to it;
# * last, the array goes from the device it is on to `device`:
#   `_move(array, source, device)` (given, with the devices) does that.
#
# **Checked when graded** (besides the tests below), on a shape, values and
# dtypes drawn for you:
#
# * Tensor(array) keeps the array's values, shape and dtype
# * Tensor(array) must copy the array, not share it
# * Tensor(tensor) must copy the tensor's array
# * Tensor(tensor, dtype) converts the copy, not the original
# * a NumPy scalar is an array too: its dtype is kept
# * a given dtype converts the array to it, even one of the same kind (float64 to float32)
# * a Python float becomes a 0-d float32 tensor (through _from_python)
# * an array of a dtype tinyflo does not support (int16, uint32, ...) must raise a TypeError
# * the error names the unsupported dtype
# * a ragged list must raise a TypeError
# * Python data goes through _from_python, whose error says rectangular

# %% nbgrader={"grade": false, "grade_id": "tensor_creation_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _to_array(data: Any, dtype: np.dtype | None, dev: Device) -> Any:
    """An array of a supported dtype on ``dev`` holding ``data``."""
    ### BEGIN SOLUTION
    if isinstance(data, Tensor):
        array, src = data.data.copy(), data._device
    elif isinstance(data, np.ndarray | np.generic):
        array, src = np.array(data, order="K"), _CPU  # a copy that keeps the layout
    elif is_array(data):  # a CuPy array
        array, src = data.copy(), device_of(data)
    else:
        array, src = _from_python(data, dtype), _CPU
    if dtype is None and array.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(sorted({d.name for d in SUPPORTED_DTYPES}))
        raise TypeError(f"tensor: data has dtype {array.dtype}, which tinyflo does not support ({names})")
    if dtype is not None and array.dtype != dtype:
        array = array.astype(dtype)
    return _move(array, src, dev)
    ### END SOLUTION


# %%
print(Tensor([[1, 2], [3, 4]]), Tensor(np.zeros(2)).dtype, Tensor([1, 2], dtype="float16").dtype)

# %% nbgrader={"grade": true, "grade_id": "tensor_creation", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert Tensor([1.0, 2.0]).dtype == float32, "Python floats become float32 (through _from_python)"
assert Tensor(np.zeros(3, np.float64)).dtype == float64, "NumPy arrays keep their dtype"
shared = np.zeros(2, np.float32)
Tensor(shared).data[0] = 1
assert shared[0] == 0, "Tensor(array) must copy the array, not share it"
assert Tensor(np.zeros(2, np.float64), dtype="float32").dtype == float32, "a given dtype converts an array"
try:
    Tensor(np.zeros(2, np.complex64))
    raise AssertionError("complex64 is not a tinyflo dtype: Tensor must raise a TypeError")
except TypeError as err:
    assert "complex64" in str(err), f"the error must name the dtype that came; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own arrays: a shape, values, dtypes and unsupported dtypes drawn per student.
_shape = tuple(int(n) for n in check_rng.integers(1, 4, int(check_rng.integers(1, 4))))
_kept = [float16, float64, uint8, int32, bool_][int(check_rng.integers(5))]
_src = (check_rng.uniform(1, 100, _shape)).astype(_kept)
_before = _src.copy()
_t = Tensor(_src)
assert _t.dtype == _kept and np.array_equal(_t.data, _before), "Tensor(array) keeps the array's values, shape and dtype"
_t.data[...] = 0
assert np.array_equal(_src, _before), "Tensor(array) must copy the array, not share it"
_orig = Tensor(check_rng.standard_normal(_shape).astype(np.float32))
_before = _orig.data.copy()
Tensor(_orig).data[...] = 0
assert np.array_equal(_orig.data, _before), "Tensor(tensor) must copy the tensor's array"
_to = [float16, float64, int64][int(check_rng.integers(3))]
_copy = Tensor(_orig, dtype=_to)
assert (_copy.dtype, _orig.dtype) == (_to, float32), "Tensor(tensor, dtype) converts the copy, not the original"
_scalar_type = [np.float64, np.float16, np.int32][int(check_rng.integers(3))]
_scalar = _scalar_type(check_rng.integers(1, 100))
_t = Tensor(_scalar)
assert (_t.shape, _t.dtype) == ((), np.dtype(_scalar_type)), "a NumPy scalar is an array too: its dtype is kept"
# Each pair keeps the kind (float to float, integer to integer): converting only across kinds is not enough.
_pairs = [(np.float64, float32), (np.float32, float16), (np.float16, float64), (np.int32, int64), (np.int64, int32), (np.int16, int64), (np.int8, int32)]
_from, _into = _pairs[int(check_rng.integers(len(_pairs)))]
_src = check_rng.integers(0, 100, _shape).astype(_from)
assert np.array_equal(Tensor(_src, dtype=_into).data, _src.astype(_into)) and Tensor(_src, dtype=_into).dtype == _into, (
    "a given dtype converts the array to it, even one of the same kind (float64 to float32)")
_x = float(np.round(check_rng.uniform(-10, 10), 2))
_t = Tensor(_x)
assert (_t.shape, _t.dtype) == ((), float32), "a Python float becomes a 0-d float32 tensor (through _from_python)"
_unsupported = [np.int16, np.uint16, np.uint32, np.uint64][int(check_rng.integers(4))]
_name = np.dtype(_unsupported).name
try:
    Tensor(np.zeros(_shape, _unsupported))
    raise AssertionError("an array of a dtype tinyflo does not support (int16, uint32, ...) must raise a TypeError")
except TypeError as err:
    assert _name in str(err), f"the error names the unsupported dtype; got: {err}"
_long, _short = (int(n) for n in check_rng.permutation([1, 2, 3, 4])[:2])
try:
    Tensor([list(range(_long)), list(range(_short))])
    raise AssertionError("a ragged list must raise a TypeError")
except TypeError as err:
    assert "rectangular" in str(err), f"Python data goes through _from_python, whose error says rectangular; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ## Bringing two operands together
#
# `_operands(a, b)` is where the dtype rule and the device rule are enforced,
# once, for every binary op. A Python scalar, list or NumPy array operand
# becomes a constant tensor in the other operand's dtype family (so
# `x * 2.5` and `x * np.ones(3)` stay float32: 2.5 and the float64 array
# *become* float32);
# two tensors on different devices are an error that names both devices.
# With `floating=True` (true division) integer operands are brought to float32
# first — NumPy would have given float64.
#
# The same cell holds the checks that every op taking a shape, an axis or an
# index shares: `_shape_arg`, `normalize_axis`, `_axes` and `_index_arg`.

# %%
#| export
def _constant(value: Any, like: Tensor) -> Tensor:
    """A Python scalar, list or NumPy array as a constant tensor in ``like``'s dtype family."""
    if (type(value) is float or type(value) is int) and like.data.dtype.kind == "f":
        # The common case (`x * 0.5`, `x / 2` on a float tensor), answered before the rules below:
        # this runs for every scalar in every step, so a few microseconds here add up.
        return Tensor._wrap(like.data.dtype.type(value), like._device)
    given = value
    if isinstance(value, bool | int | float):
        kind = "b" if isinstance(value, bool) else "i" if isinstance(value, int) else "f"
    else:
        try:
            value = np.asarray(value)
        except ValueError:  # a ragged list
            value = np.empty(0, object)
        kind = value.dtype.kind
    if kind == "f" and not is_floating(like.dtype):
        dtype = default_float
    elif kind in "iu" and like.dtype == bool_:
        dtype = int64
    elif kind in "biuf":
        dtype = like.dtype
    else:
        raise TypeError(f"operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; "
                        f"got {described(given)}")
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return Tensor(value, dtype=dtype, device=like._device)
    return Tensor._wrap(dtype.type(value), like._device)


_WRAP = "wrap it with tinyflo.tensor(x) (and .to(device) for a GPU)"


def check_tensor(owner: str, name: str, value: Any) -> Tensor:
    """``value`` if it is a Tensor, else a one-line TypeError: who, which argument, what came and, for data
    (an array, a number, a list), how to make a tensor of it."""
    if isinstance(value, Tensor):
        return value
    hint = f": {_WRAP}" if is_array(value) or isinstance(value, int | float | np.generic | list | tuple) else ""
    raise TypeError(f"{owner}: {name} must be a tinyflo Tensor; got {described(value)}{hint}")


def _operands(a: Any, b: Any, floating: bool = False) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device with one dtype."""
    if not isinstance(a, Tensor):
        a = _constant(a, b)
    if not isinstance(b, Tensor):
        b = _constant(b, a)
    _same_device(a, b, "operands")
    if a.data.dtype is b.data.dtype and (not floating or a.data.dtype.kind == "f"):  # nothing to cast
        return a, b
    dtype = promote_types(a.data.dtype, b.data.dtype)
    if floating and not is_floating(dtype):
        dtype = default_float
    if a.data.dtype != dtype:
        a = a.to(dtype=dtype)
    if b.data.dtype != dtype:
        b = b.to(dtype=dtype)
    return a, b


def _compare(a: Tensor, b: Any, ufunc: str) -> Tensor:
    """Elementwise comparison: a bool tensor, outside the graph."""
    a, b = _operands(a, b)
    with a._device:
        return Tensor._wrap(getattr(a._device.xp, ufunc)(a.data, b.data), a._device)


def _shape_arg(shape: tuple, op: str, allow_minus_one: bool = False) -> tuple[int, ...]:
    """Accept ``f(2, 3)`` and ``f((2, 3))``; check every entry is a valid size."""
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = tuple(shape[0])
    low = -1 if allow_minus_one else 0
    if not all(isinstance(n, int | np.integer) and n >= low for n in shape):
        raise ShapeError(f"{op}: shape must be a sequence of integers >= {low}; got {brief(shape)}")
    return tuple(int(n) for n in shape)


def normalize_axis(axis: Any, ndim: int, op: str) -> int:
    """Check one axis of an ``ndim``-axis tensor (negatives count from the end); return it >= 0."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise ShapeError(f"{op}: axis must be an integer; got {brief(axis)}")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for a tensor with {ndim} axes")
    return int(axis) % ndim




def _axes(axis: Any, ndim: int, op: str) -> tuple[int, ...] | None:
    """Normalise ``axis`` (None, an int or a tuple of ints) to a sorted tuple; a 0-d tensor takes 0 or -1."""
    if axis is None:
        return None
    if type(axis) is int and -max(ndim, 1) <= axis < max(ndim, 1):  # the common case, checked at once
        return (axis % max(ndim, 1),)
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    return tuple(sorted({normalize_axis(a, max(ndim, 1), op) for a in axes}))


def _same_device(a: Tensor, b: Tensor, op: str) -> None:
    """Raise a DeviceError naming both devices when ``a`` and ``b`` live apart."""
    if a._device is not b._device:
        raise DeviceError(
            f"{op}: operands are on different devices: {a._device} (shape {a.shape}) and "
            f"{b._device} (shape {b.shape}); move one with .to()"
        )


def _index_arg(index: Any, dev: Device) -> Any:
    """An index with tensors and lists replaced by arrays on ``dev``."""
    if isinstance(index, tuple):
        return tuple(_index_arg(i, dev) for i in index)
    if isinstance(index, Tensor):
        if index._device is not dev:
            raise DeviceError(f"getitem: the index tensor is on {index._device}, the tensor on {dev}")
        return index.data
    if isinstance(index, list | np.ndarray) and dev.type == "cuda":
        with dev:
            return dev.xp.asarray(index)
    if isinstance(index, list):
        return np.asarray(index)
    return index


# %% [markdown]
# ## Creating tensors
#
# The familiar constructors. A shape can be given as `zeros(2, 3)` or
# `zeros((2, 3))`. Random tensors come from tinyflo's own generator, which
# `manual_seed` resets — on the CPU and, when there is one, on the GPU — so
# runs are reproducible.

# %%
#| export
class _Generators:
    """Where tinyflo's NumPy generator is kept (CuPy keeps its own); read it through default_generator()."""

    numpy = np.random.default_rng(0)


def default_generator() -> np.random.Generator:
    """The NumPy generator tinyflo draws from on the CPU (``manual_seed`` and ``set_rng_state`` replace it)."""
    return _Generators.numpy


def manual_seed(seed: int) -> None:
    """Seed every generator tinyflo draws from (NumPy and, if present, CuPy)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative integer; got {seed!r}")
    _Generators.numpy = np.random.default_rng(int(seed))
    if cuda_is_available():
        _cupy().random.seed(int(seed))


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def get_rng_state() -> dict[str, Any]:
    """The state of every generator training draws from (``set_rng_state`` puts it back): dicts, numbers, one array.

    ``tinyflo``: tinyflo's generator; ``numpy``: NumPy's global one (``np.random.*``); ``cupy``, with a
    GPU: a seed. CuPy cannot hand out its generator's state, so it is reseeded with a seed drawn from it,
    and that seed is the state.
    """
    state: dict[str, Any] = {"tinyflo": _Generators.numpy.bit_generator.state,
                             "numpy": np.random.get_state(legacy=False)}
    if cuda_is_available():
        cupy = _cupy()
        seed = int(cupy.random.randint(0, 2**31 - 1))
        cupy.random.seed(seed)
        state["cupy"] = seed
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what ``get_rng_state()`` returned (read back from JSON too: lists where it held arrays)."""
    if not isinstance(state, dict) or not isinstance(state.get("tinyflo"), dict) \
            or not isinstance(state.get("numpy"), dict):
        raise ValueError(f"set_rng_state: expected get_rng_state()'s dict with 'tinyflo' and 'numpy'; "
                         f"got {state!r:.80}")
    name = state["tinyflo"].get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"set_rng_state: the 'tinyflo' state names bit generator {name!r:.60}; "
                         f"expected one of {', '.join(_BIT_GENERATORS)}")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state["tinyflo"]
    legacy = dict(state["numpy"])
    legacy["state"] = {**legacy["state"], "key": np.asarray(legacy["state"]["key"], dtype=np.uint32)}
    np.random.set_state(legacy)  # checked before tinyflo's generator changes: a bad state changes nothing
    _Generators.numpy = np.random.Generator(bit_generator)
    if cuda_is_available() and state.get("cupy") is not None:
        _cupy().random.seed(int(state["cupy"]))


def _check_number(op: str, name: str, value: Any, allow_bool: bool = False) -> None:
    """A TypeError naming ``op``'s argument ``name`` unless ``value`` is a real number."""
    if not isinstance(value, int | float | np.integer | np.floating | np.bool_) or (
            isinstance(value, bool | np.bool_) and not allow_bool):
        raise TypeError(f"{op}: {name} must be a number; got {described(value)}")


def _creation_dtype(dtype: Any, default: np.dtype = default_float) -> np.dtype:
    return default if dtype is None else as_dtype(dtype)


def _filled(op: str, shape: tuple, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = as_device(device)
    shape = _shape_arg(shape, op)
    with dev:
        data = dev.xp.full(shape, fill, dtype=_creation_dtype(dtype))
    return Tensor._wrap(data, dev).requires_grad_(requires_grad)


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor holding ``data`` (numbers, nested lists, a NumPy/CuPy array or a Tensor)."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with a NumPy array (its dtype kept)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray; got {type(array).__name__}")
    as_dtype(array.dtype, "from_numpy: array dtype")
    return Tensor._wrap(array, Device("cpu", 0))


def zeros(*shape, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of zeros."""
    return _filled("zeros", shape, 0, dtype, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of ones."""
    return _filled("ones", shape, 1, dtype, device, requires_grad)


def full(shape, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor filled with one value (bool → bool, int → int64, float → float32)."""
    _check_number("full", "fill_value", fill_value, allow_bool=True)
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else int64 if isinstance(fill_value, int) else default_float
    shape = tuple(shape) if isinstance(shape, Sequence | np.ndarray) and not isinstance(shape, str) else (shape,)
    return _filled("full", shape, fill_value, dtype, device, requires_grad)


def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Evenly spaced values in [start, stop) (int64 for integer arguments, else float32)."""
    if stop is None:
        start, stop = 0, start
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        _check_number("arange", name, value)
    if step == 0:
        raise ValueError("arange: step must not be 0")
    if dtype is None:
        integral = all(isinstance(v, int | np.integer) for v in (start, stop, step))
        dtype = int64 if integral else default_float
    dev = as_device(device)
    with dev:
        data = dev.xp.arange(start, stop, step, dtype=as_dtype(dtype))
    return Tensor._wrap(data, dev).requires_grad_(requires_grad)


def _random(op: str, shape: tuple, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dev = as_device(device)
    shape, dtype = _shape_arg(shape, op), _creation_dtype(dtype)
    if not is_floating(dtype):
        raise TypeError(f"{op}: dtype must be floating; got {dtype}")
    draw_dtype = dtype if dtype in (float32, float64) else float32
    if dev.type == "cuda":
        with dev:
            if dev.xp.cuda.get_current_stream().is_capturing():  # a CUDA graph would replay these very numbers
                raise RuntimeError(f"{op}: no random draw inside a captured CUDA graph: every launch would draw the "
                                   "same numbers (dropout's mask, say); draw outside the captured step")
            random = dev.xp.random
            data = random.random_sample(shape, draw_dtype) if op == "rand" else random.standard_normal(shape, draw_dtype)
    else:
        gen = default_generator()
        data = gen.random(shape, draw_dtype) if op == "rand" else gen.standard_normal(shape, draw_dtype)
    return Tensor._wrap(data.astype(dtype, copy=False), dev).requires_grad_(requires_grad)


def rand(*shape, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform samples in [0, 1)."""
    return _random("rand", shape, dtype, device, requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal samples."""
    return _random("randn", shape, dtype, device, requires_grad)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    check_tensor("zeros_like", "t", t)
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    check_tensor("ones_like", "t", t)
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    check_tensor("full_like", "t", t)
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def rand_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    check_tensor("rand_like", "t", t)
    return rand(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def randn_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    check_tensor("randn_like", "t", t)
    return randn(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


# %%
print(tensor([[1.0, 2.0]]), zeros(2, 3).shape, ones((4,)).dtype, full((2,), 7).dtype, arange(0, 1, 0.25))
manual_seed(0)
first = randn(3)
manual_seed(0)
assert randn(3).tolist() == first.tolist(), "manual_seed makes draws reproducible"
assert 0 <= rand(1000).numpy().min() and rand(1000).numpy().max() < 1 and rand(2, dtype="float16").dtype == float16
assert zeros_like(first).tolist() == [0, 0, 0] and ones_like(first).dtype == float32

# %% [markdown]
# ## Function: an op's forward and backward, side by side
#
# Every op is a subclass of `Function`. `forward` receives raw arrays (NumPy
# or CuPy) and returns the output array; it saves what `backward` will need.
# `backward` receives the gradient of the final result with respect to this
# op's output and returns one gradient per input (in the input's order).
#
# Two things `backward` does **not** need to worry about — the engine of
# module 02 does them once for every op:
#
# * when an input was broadcast, its gradient has the output's shape; the
#   engine sums it back down to the input's shape;
# * gradients for inputs that do not require one are dropped.
#
# `Function.apply` is the one door every op goes through. It unwraps the
# input tensors, runs `forward` (with any keyword parameters) on the inputs'
# device, wraps the result in a `Tensor` on that device — or on the device
# the op declares for its output, `fn.out_device`, when it sets one: the one
# op that moves data, `To`, does — and — only when
# gradients are wanted — records the node: the `Function` instance keeps its
# inputs (`fn.inputs`, a tuple of the tensors), which inputs need a gradient
# (`fn.needs_input_grad`, a tuple of bools), and the output points back to it
# (`out._ctx`, with `out.requires_grad` set). When nothing requires a
# gradient, or while `GradMode.enabled` is False (module 02's `no_grad()`),
# nothing is recorded and the `Function` is garbage right away (`GradMode`
# is per thread, as PyTorch's: `no_grad()` in one thread leaves the others
# recording). Set `fn.xp`
# to the device's array module, so that `forward` and `backward` can write
# `self.xp.exp(a)` for NumPy and CuPy alike.
#
# `apply` is also the one place that guarantees an op never mixes devices:
# every input must be on the first input's device, or it raises a
# `DeviceError` that names the op and lists each input's device and shape —
# `mul: inputs are on different devices: cpu (2,), cpu:1 (2,)`. The op's
# name is its class name in lower case (`mul` for `Mul`).
#
# And it is where shape errors become readable. NumPy says
# `operands could not be broadcast together with shapes (2,3) (4,)`, without
# naming the op. When `forward` raises a `ValueError` about shapes, re-raise
# it as a `ShapeError` whose message starts with the op's name and lists the
# input shapes — `add: inputs of shapes (2, 3), (4,) do not fit: ...`; keep a
# `ShapeError` an op raised itself, and any other error, as it is.
#
# One NumPy quirk to absorb: an op on 0-d arrays returns a NumPy *scalar*
# (`np.float32`), which cannot be written into in place. Turn it back into a
# 0-d array so every tensor's `data` is an array.
#
# The first three lines of `apply` are given: they hand the op to the
# mixed-precision policy of module 11 when one is in force (inside
# `autocast()`), which casts the inputs and then calls `apply` again with the
# policy switched off. Outside `autocast()` they cost one attribute read. The
# policy is per thread (`AutocastMode` is a `threading.local`), as in PyTorch.
#
# The two switches `apply` reads come first; they are given.

# %%
#| export
class _GradState(threading.local):
    """Whether ops record the graph in this thread; module 02's no_grad() and enable_grad() switch it."""

    enabled = True  # per thread, as torch.no_grad: another thread's no_grad() never reaches this one


GradMode = _GradState()


class _AutocastState(threading.local):
    """The mixed-precision policy in force in this thread; module 11's autocast() sets it (None: off)."""

    policy = None  # per thread, as torch.autocast: another thread's autocast() never reaches this one


AutocastMode = _AutocastState()


# %% [markdown]
# ### Task `tensor_function` (3 points): `Function.apply`
#
# Write `apply` as the section above describes. Grading drives it with small
# test ops of its own, such as `Mix`, whose forward adds its inputs and
# multiplies the sum by a keyword parameter `factor`.
#
# **Checked when graded** (besides the tests below), on inputs, shapes,
# flags, devices and error texts drawn for you:
#
# * apply returns a Tensor
# * apply returns forward's array, keyword parameters passed on
# * the output records its node (out._ctx, an instance of the op) and requires a gradient
# * fn.inputs is a tuple of the input tensors, in order
# * fn.needs_input_grad is a tuple of bools, one per input
# * forward receives the inputs' arrays, not the tensors
# * no node when no input needs a gradient
# * nothing is recorded while GradMode.enabled is False
# * a 0-d result is a 0-d array, not a NumPy scalar
# * the output lives on the inputs' device
# * an op that sets fn.out_device gets its output there
# * an op that declares no out_device gets its output on the inputs' device
# * apply must refuse inputs on different devices with a DeviceError
# * the device error starts with the op's name (mix for Mix)
# * the device error lists each input's device and shape
# * shapes that do not broadcast must raise a ShapeError
# * the shape error starts with the op's name
# * the shape error lists the input shapes
# * a ShapeError raised by an op must come out of apply
# * a ShapeError an op raised itself comes out of apply as it is
# * a ValueError raised by an op must come out of apply
# * a ValueError that is not about shapes comes out of apply unchanged
# * an error other than a ValueError must come out of apply
# * an error other than a ValueError comes out of apply unchanged, even when it mentions shapes

# %% nbgrader={"grade": false, "grade_id": "tensor_function_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Function:
    """One node of the graph: an op's forward and its backward, side by side."""

    inputs: tuple = ()
    needs_input_grad: tuple = ()
    saved: tuple | None = ()
    xp: Any = np
    out_device: Device | None = None  # where the output lives when not on the inputs' device (To sets it)

    def save_for_backward(self, *arrays: Any) -> None:
        """Keep the arrays backward() will need (the engine frees them after use)."""
        self.saved = arrays

    def forward(self, *arrays: Any, **params: Any) -> Any:
        """Compute the output array from the input arrays."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, grad: Any) -> Any:
        """Gradients with respect to each input, given the gradient of the output."""
        raise NotImplementedError(f"{type(self).__name__}.backward")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    @classmethod
    def apply(cls, *inputs: Tensor, **params: Any) -> Tensor:
        """Run ``forward`` on the inputs' arrays; record the node when a gradient is wanted."""
        policy = AutocastMode.policy  # module 11's mixed precision: None unless inside autocast()
        if policy is not None:
            return policy.apply(cls, inputs, params)
        ### BEGIN SOLUTION
        fn = cls()
        device = inputs[0]._device
        arrays, needs = [], []
        for t in inputs:  # one pass: check the device, collect the arrays and who wants a gradient
            if t._device is not device:
                devices = ", ".join(f"{x._device} {x.shape}" for x in inputs)
                raise DeviceError(f"{cls.__name__.lower()}: inputs are on different devices: {devices}")
            arrays.append(t.data)
            needs.append(t.requires_grad)
        fn.xp = device.xp
        try:
            with device:
                data = fn.forward(*arrays, **params)
        except ShapeError:
            raise
        except ValueError as err:
            if "shape" not in str(err):  # not a shape problem: let it through unchanged
                raise
            shapes = ", ".join(str(t.shape) for t in inputs)
            raise ShapeError(f"{cls.__name__.lower()}: inputs of shapes {shapes} do not fit: {err}") from None
        if isinstance(data, np.generic):  # NumPy hands back scalars for 0-d results
            data = np.asarray(data)
        out = Tensor._wrap(data, fn.out_device or device)
        needs = tuple(needs) if GradMode.enabled else ()
        if True in needs:
            fn.inputs, fn.needs_input_grad = inputs, needs
            out.requires_grad, out._ctx = True, fn
        return out
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_function", "locked": true, "points": 3, "schema_version": 3, "solution": false}
class Scale(Function):
    """A test op, out = a * b * factor: enough to drive apply (no backward needed)."""

    def forward(self, a, b, factor=1.0):
        self.seen = (a, b)
        return a * b * factor


a = Tensor([1.0, 2.0], requires_grad=True)
b = Tensor([3.0, 4.0])
c = Scale.apply(a, b)
assert isinstance(c, Tensor) and _close(c.data, [3, 8]), "apply must return forward's array wrapped in a Tensor"
assert isinstance(c._ctx, Scale) and c._ctx.inputs[0] is a and c._ctx.inputs[1] is b, "the output must record its node, which keeps the input tensors"
assert c._ctx.needs_input_grad == (True, False) and c.requires_grad, "the node says which inputs need a gradient, and the output requires one"
d = Scale.apply(b, b)
assert d.requires_grad is False and d._ctx is None, "no node when no input needs a gradient"
assert _close(Scale.apply(a, b, factor=2.0).data, [6, 16]), "keyword parameters must reach forward"
try:
    Scale.apply(Tensor([1.0]), Tensor([1.0], device="cpu:1"))
    raise AssertionError("inputs on different devices must raise a DeviceError")
except DeviceError as err:
    assert "cpu:1" in str(err), f"the error must list the inputs' devices; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: how many, their shapes and values, which need a gradient, the keyword
# parameter, the virtual devices and the errors' texts, all drawn per student.
class Mix(Function):
    """A test op, out = (x₁ + x₂ + ...) · factor: enough to drive apply (no backward needed)."""

    def forward(self, *arrays, factor=1.0):
        self.seen = arrays
        out = arrays[0]
        for x in arrays[1:]:
            out = out + x
        return out * factor


class Declares(Function):
    """A test op that declares its output's device, as To does."""

    def forward(self, a, device=None):
        self.out_device = device
        return a.copy()


class Raises(Function):
    """A test op that raises the error it is given."""

    def forward(self, a, error=None):
        raise error


_k = int(check_rng.integers(2, 5))
_shape = tuple(int(n) for n in check_rng.integers(1, 4, int(check_rng.integers(1, 3))))
_vals = [check_rng.standard_normal(_shape).astype(np.float32) for _ in range(_k)]
_flags = [bool(f) for f in check_rng.integers(0, 2, _k)]
_flags[int(check_rng.integers(_k))] = True  # at least one input needs a gradient
_factor = float(check_rng.choice([-1, 1]) * check_rng.uniform(1.5, 3.0))
_ts = [Tensor(v, requires_grad=f) for v, f in zip(_vals, _flags)]
_out = Mix.apply(*_ts, factor=_factor)
assert isinstance(_out, Tensor), "apply returns a Tensor"
assert _close(_out.data, sum(_vals) * _factor, 1e-5), "apply returns forward's array, keyword parameters passed on"
assert (type(_out._ctx).__name__, _out.requires_grad) == ("Mix", True), (
    "the output records its node (out._ctx, an instance of the op) and requires a gradient")
assert (type(_out._ctx.inputs).__name__, [x is t for x, t in zip(_out._ctx.inputs, _ts)]) == ("tuple", [True] * _k), (
    "fn.inputs is a tuple of the input tensors, in order")
assert _out._ctx.needs_input_grad == tuple(_flags), "fn.needs_input_grad is a tuple of bools, one per input"
assert [type(x).__name__ for x in _out._ctx.seen] == ["ndarray"] * _k, "forward receives the inputs' arrays, not the tensors"
_plain = Mix.apply(*[Tensor(v) for v in _vals], factor=_factor)
assert _plain.requires_grad is False and _plain._ctx is None, "no node when no input needs a gradient"
GradMode.enabled = False
try:
    _off = Mix.apply(*_ts, factor=_factor)
finally:
    GradMode.enabled = True
assert _off.requires_grad is False and _off._ctx is None, "nothing is recorded while GradMode.enabled is False"
_zero_d = Mix.apply(Tensor(float(_vals[0].flat[0])), Tensor(float(_vals[1].flat[0]), requires_grad=True), factor=_factor)
assert isinstance(_zero_d.data, np.ndarray) and _zero_d.shape == (), "a 0-d result is a 0-d array, not a NumPy scalar"
_here, _there = (f"cpu:{int(i)}" for i in check_rng.permutation([1, 2, 3])[:2])
_on = [Tensor(v, device=_here) for v in _vals]
assert str(Mix.apply(*_on).device) == _here, "the output lives on the inputs' device"
assert str(Declares.apply(_ts[0], device=as_device(_there)).device) == _there, "an op that sets fn.out_device gets its output there"
assert str(Declares.apply(_on[0]).device) == _here, "an op that declares no out_device gets its output on the inputs' device"
_shapes = [tuple(int(n) for n in check_rng.integers(1, 5, i + 1)) for i in range(_k)]
_apart = [Tensor(np.zeros(s, np.float32), device=_here) for s in _shapes]
_moved = int(check_rng.integers(_k))
_apart[_moved] = Tensor(np.zeros(_shapes[_moved], np.float32), device=_there)
try:
    Mix.apply(*_apart)
    raise AssertionError("apply must refuse inputs on different devices with a DeviceError")
except DeviceError as err:
    _said = str(err)
assert _said.startswith("mix"), "the device error starts with the op's name (mix for Mix)"
assert _close_text(_said, [_here, _there] + [str(s) for s in _shapes]), (
    f"the device error lists each input's device and shape; got: {_said}")
_n = int(check_rng.integers(2, 5))
_p = int(check_rng.choice([p for p in range(2, 6) if p != _n]))
_m = int(check_rng.integers(1, 4))
try:
    Mix.apply(Tensor(np.ones((_m, _n), np.float32)), Tensor(np.ones((_p,), np.float32)))
    raise AssertionError("shapes that do not broadcast must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _said.startswith("mix"), "the shape error starts with the op's name"
assert _close_text(_said, [str((_m, _n)), str((_p,))]), f"the shape error lists the input shapes; got: {_said}"
_text = f"raises: shapes ({_n},) and ({_p},) differ"
try:
    Raises.apply(_ts[0], error=ShapeError(_text))
    raise AssertionError("a ShapeError raised by an op must come out of apply")
except ShapeError as err:
    assert str(err) == _text, "a ShapeError an op raised itself comes out of apply as it is"
_text = str(check_rng.choice(["negative values are not allowed", "the factor must be finite", "empty input"]))
try:
    Raises.apply(_ts[0], error=ValueError(_text))
    raise AssertionError("a ValueError raised by an op must come out of apply")
except ValueError as err:
    assert (type(err).__name__, str(err)) == ("ValueError", _text), "a ValueError that is not about shapes comes out of apply unchanged"
_kind = [TypeError, RuntimeError, ZeroDivisionError][int(check_rng.integers(3))]
_text = f"raises: cannot read the shape {_shape}"
try:
    Raises.apply(_ts[0], error=_kind(_text))
    raise AssertionError("an error other than a ValueError must come out of apply")
except _kind as err:
    assert (type(err).__name__, str(err)) == (_kind.__name__, _text), (
        "an error other than a ValueError comes out of apply unchanged, even when it mentions shapes")
### END HIDDEN TESTS

# %% [markdown]
# The first op, which needs no task: `To` moves a tensor to another device and/or
# dtype, and its backward moves the gradient back. It declares where its
# output lives (`out_device`), so `apply` wraps the moved array there.
# `_operands` uses it to cast, and mixed precision (module 11) leans on it.

# %%
#| export
class To(Function):
    def forward(self, a, source, device, dtype):
        self.source, self.source_dtype, self.out_device = source, a.dtype, device
        return _move(a, source, device).astype(dtype, copy=False)

    def backward(self, grad):
        return _move(grad, self.out_device, self.source).astype(self.source_dtype, copy=False)


# %% [markdown]
# ## Ops
#
# Now the ops. Each is a `Function` whose `forward` computes the value and
# whose `backward` gives the local derivative — the chain rule's factor that
# belongs to this op — multiplied by the incoming `grad`.
#
# A note on dtypes in `backward`: multiplying by a bool mask keeps float32
# (`grad * (a > 0)`), whereas dividing by an integer count would not
# (float32 / int64 is float64 in NumPy). Keep counts in the array's dtype.
#
# | op | forward | backward (∂out/∂a · grad, ∂out/∂b · grad) |
# |---|---|---|
# | Add | a + b | grad, grad |
# | Sub | a − b | grad, −grad |
# | Mul | a · b | grad · b, grad · a |
# | Div | a / b | grad / b, −grad · a / b² |
# | Pow | aᵇ | grad · b · aᵇ⁻¹, grad · aᵇ · ln a |
# | Neg | −a | −grad |
#
# ### Task `tensor_arithmetic` (1 point): `+`, `-` and negation
#
# `Add`, `Sub` and `Neg`: the table's first, second and last rows.
# `backward` returns each gradient in the output's shape, even for an input
# that was broadcast: module 02's engine sums it down.
#
# **Checked when graded** (besides the tests below), on shapes, values and
# an upstream gradient drawn for you, one operand broadcast over the other:
#
# * a + b adds, broadcasting the smaller operand
# * a - b subtracts b from a
# * -a negates every element
# * the gradients of a + b are grad for both inputs, in the output's shape
# * the gradients of a - b are grad for a and -grad for b, in the output's shape
# * the gradient of -a is -grad
# * s - a for a Python number s subtracts a from s and keeps float32
# * float16 + float32 gives float32, in either order
# * int64 arithmetic with a Python int stays int64
# * adding tensors on different devices must raise a DeviceError
# * the error must name both devices

# %% nbgrader={"grade": false, "grade_id": "tensor_arithmetic_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Add(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        return a + b
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad, grad
        ### END SOLUTION


class Sub(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        return a - b
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad, -grad
        ### END SOLUTION


class Neg(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        return -a
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return -grad
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_arithmetic", "locked": true, "points": 1, "schema_version": 3, "solution": false}
a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
b = Tensor([2.0, 5.0], requires_grad=True)
g = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
assert _close((a + b).data, [[3, 7], [5, 9]]), "a + b must add, broadcasting b over the rows"
assert _close((a - b).data, [[-1, -3], [1, -1]]), "a - b must subtract b from a"
assert _close((-a).data, [[-1, -2], [-3, -4]]), "-a must negate every element"
ga, gb = (a - b)._ctx.backward(g)
assert _close(ga, g) and _close(gb, -g), "the gradients of a - b are grad for a and -grad for b"
### BEGIN HIDDEN TESTS
# This student's own inputs: shapes, values and the upstream gradient drawn per student. One operand
# is broadcast over the other (a missing leading axis or an axis of size 1), and which one is drawn.
_m, _n = (int(v) for v in check_rng.integers(2, 5, 2))
_small_shape = [(_n,), (1, _n), (_m, 1)][int(check_rng.integers(3))]
_big = check_rng.standard_normal((_m, _n)).astype(np.float32)
_small = check_rng.standard_normal(_small_shape).astype(np.float32)
_A, _B = (_big, _small) if check_rng.integers(2) else (_small, _big)
_G = check_rng.standard_normal((_m, _n)).astype(np.float32)
_a, _b = Tensor(_A, requires_grad=True), Tensor(_B, requires_grad=True)
assert _close((_a + _b).data, _A + _B), "a + b adds, broadcasting the smaller operand"
assert _close((_a - _b).data, _A - _B), "a - b subtracts b from a"
assert _close((-_a).data, -_A), "-a negates every element"
_ga, _gb = (_a + _b)._ctx.backward(_G)
assert _close(_ga, _G) and _close(_gb, _G), "the gradients of a + b are grad for both inputs, in the output's shape"
_ga, _gb = (_a - _b)._ctx.backward(_G)
assert _close(_ga, _G) and _close(_gb, -_G), "the gradients of a - b are grad for a and -grad for b, in the output's shape"
_Ga = check_rng.standard_normal(_A.shape).astype(np.float32)
assert _close((-_a)._ctx.backward(_Ga), -_Ga), "the gradient of -a is -grad"
_s = float(np.round(check_rng.uniform(-5, 5), 2))
assert (_s - _a).dtype == float32 and _close((_s - _a).data, np.float32(_s) - _A), (
    "s - a for a Python number s subtracts a from s and keeps float32")
_h, _f = Tensor(_A.astype(np.float16)), Tensor(_B)
assert ((_h + _f).dtype, (_f + _h).dtype) == (float32, float32), "float16 + float32 gives float32, in either order"
_I = check_rng.integers(-100, 100, _big.shape)
_k = int(check_rng.integers(1, 50))
assert (Tensor(_I) + _k).dtype == int64 and np.array_equal((Tensor(_I) - _k).data, _I - _k), (
    "int64 arithmetic with a Python int stays int64")
_here, _there = (f"cpu:{int(i)}" for i in check_rng.permutation([1, 2, 3])[:2])
try:
    Tensor(_A, device=_here) + Tensor(_B, device=_there)
    raise AssertionError("adding tensors on different devices must raise a DeviceError")
except DeviceError as err:
    assert _close_text(str(err), (_here, _there)), f"the error must name both devices; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_mul_div` (1 point): `*` and `/`
#
# `Mul` and `Div`, the table's third and fourth rows. Each saves what its
# backward needs with `save_for_backward`; `Div` can save its output and
# write −grad · a / b² as −(grad / b) · out. As for `+`, each gradient comes
# back in the output's shape.
#
# **Checked when graded** (besides the tests below), on shapes, values and
# an upstream gradient drawn for you, one operand broadcast over the other:
#
# * a * b multiplies, broadcasting the smaller operand
# * a / b divides a by b
# * the gradients of a * b are grad * b for a and grad * a for b
# * the gradient of a / b for a is grad / b
# * the gradient of a / b for b is -grad * a / b**2
# * the gradients of a / b must stay float32
# * Python numbers keep float32, on either side of * and /
# * s / b for a Python number s divides s by b
# * true division of integers gives float32, not float64
# * int64 times a Python int stays int64; int64 times a Python float gives float32
# * for 0-d inputs too, the gradients of a * b are grad * b and grad * a

# %% nbgrader={"grade": false, "grade_id": "tensor_mul_div_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Mul(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        self.save_for_backward(a, b)
        return a * b
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        a, b = self.saved
        return grad * b, grad * a
        ### END SOLUTION


class Div(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        out = a / b
        self.save_for_backward(b, out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        b, out = self.saved
        grad_a = grad / b
        return grad_a, -grad_a * out
        ### END SOLUTION


# %% [markdown]
# Try it. With `requires_grad=True` the output records its node, and we can
# call that node's `backward` by hand — exactly what module 02's engine will
# do for every node of a graph.

# %%
a = Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
b = Tensor([[10.0], [20.0]], requires_grad=True)
c = a * b + 1          # broadcasting: (1, 3) * (2, 1) -> (2, 3)
print(c, c.dtype)
print("recorded:", c._ctx, "made from", c._ctx.inputs[0]._ctx)
print("local derivatives of the Mul:", c._ctx.inputs[0]._ctx.backward(np.ones((2, 3), np.float32)))

# %% nbgrader={"grade": true, "grade_id": "tensor_mul_div", "locked": true, "points": 1, "schema_version": 3, "solution": false}
a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
b = Tensor([2.0, 5.0], requires_grad=True)
g = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
assert _close((a * b).data, [[2, 10], [6, 20]]), "a * b must multiply, broadcasting b over the rows"
assert _close((a / b).data, [[0.5, 0.4], [1.5, 0.8]]), "a / b must divide a by b"
ga, gb = (a * b)._ctx.backward(g)
assert _close(ga, g * b.data) and _close(gb, g * a.data), "the gradients of a * b are grad * b for a and grad * a for b"
ga, gb = (a / b)._ctx.backward(g)
assert _close(ga, g / b.data), "the gradient of a / b for a is grad / b"
assert _close(gb, -g * a.data / b.data ** 2), "the gradient of a / b for b is -grad * a / b**2"
### BEGIN HIDDEN TESTS
# This student's own inputs: shapes, values and the upstream gradient drawn per student. One operand
# is broadcast over the other, and which one is drawn; every divisor b has 1.25 ≤ |b| ≤ 3 (far from
# 0, and from ±1, where b and 1/b would agree).
_m, _n = (int(v) for v in check_rng.integers(2, 5, 2))
_small_shape = [(_n,), (1, _n), (_m, 1)][int(check_rng.integers(3))]
_shapes = [(_m, _n), _small_shape][::int(check_rng.choice([1, -1]))]
_A = check_rng.standard_normal(_shapes[0]).astype(np.float32)
_B = (check_rng.choice([-1, 1], _shapes[1]) * check_rng.uniform(1.25, 3, _shapes[1])).astype(np.float32)
_G = check_rng.standard_normal((_m, _n)).astype(np.float32)
_a, _b = Tensor(_A, requires_grad=True), Tensor(_B, requires_grad=True)
assert _close((_a * _b).data, _A * _B), "a * b multiplies, broadcasting the smaller operand"
assert _close((_a / _b).data, _A / _B), "a / b divides a by b"
_ga, _gb = (_a * _b)._ctx.backward(_G)
assert _close(_ga, _G * _B) and _close(_gb, _G * _A), "the gradients of a * b are grad * b for a and grad * a for b"
_ga, _gb = (_a / _b)._ctx.backward(_G)
assert _close(_ga, _G / _B, 1e-5), "the gradient of a / b for a is grad / b"
assert _close(_gb, -_G * _A / _B ** 2, 1e-5), "the gradient of a / b for b is -grad * a / b**2"
assert (_ga.dtype, _gb.dtype) == (float32, float32), "the gradients of a / b must stay float32"
_s = float(np.round(check_rng.choice([-1, 1]) * check_rng.uniform(0.5, 5), 2))
assert ((_a * _s).dtype, (_s * _a).dtype, (_a / _s).dtype, (_s / _b).dtype) == (float32,) * 4, (
    "Python numbers keep float32, on either side of * and /")
assert _close((_s / _b).data, np.float32(_s) / _B, 1e-5), "s / b for a Python number s divides s by b"
_I = check_rng.integers(-100, 100, (_m, _n))
_k = int(check_rng.choice([-1, 1]) * check_rng.integers(2, 9))
assert (Tensor(_I) / _k).dtype == float32 and _close((Tensor(_I) / _k).data, _I / _k, 1e-5), (
    "true division of integers gives float32, not float64")
_x = float(np.round(check_rng.uniform(0.1, 0.9), 2))
assert ((Tensor(_I) * _k).dtype, (Tensor(_I) * _x).dtype) == (int64, float32), (
    "int64 times a Python int stays int64; int64 times a Python float gives float32")
_p, _q, _g0 = (float(np.round(v, 2)) for v in check_rng.choice([-1, 1], 3) * check_rng.uniform(1.25, 3, 3))
_g0d = (Tensor(_p, requires_grad=True) * Tensor(_q, requires_grad=True))._ctx.backward(np.float32(_g0))
assert _close(_g0d[0], _g0 * _q, 1e-5) and _close(_g0d[1], _g0 * _p, 1e-5), (
    "for 0-d inputs too, the gradients of a * b are grad * b and grad * a")
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_pow` (1 point): `**`
#
# `Pow`, the table's fifth row. Compute each gradient only when its input
# needs one (`self.needs_input_grad`), and return None for the other: for
# `x ** 2` the exponent needs none, and `ln x` would be wasted work (and NaN
# for negative x). A Python number on either side of `**` becomes a constant
# tensor that needs no gradient.
#
# **Checked when graded** (besides the tests below), on shapes, bases of
# both signs, exponents and an upstream gradient drawn for you:
#
# * a ** p for a Python number p raises every element to the power p
# * the gradient of a ** p for a is grad * p * a ** (p - 1)
# * the exponent p needs no gradient: return None for it
# * a ** b for tensors raises each a to its b, broadcasting
# * a ** b: the gradient for a is grad * b * a ** (b - 1)
# * a ** b: the gradient for b is grad * a ** b * ln a
# * the gradients of a ** b must stay float32
# * s ** a for a Python number s raises s to the power a, in float32
# * the base s needs no gradient: return None for it
# * the gradient of s ** a for a is grad * s ** a * ln s
# * an int64 tensor to a Python int power stays int64

# %% nbgrader={"grade": false, "grade_id": "tensor_pow_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Pow(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        out = a ** b
        self.save_for_backward(a, b, out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        a, b, out = self.saved
        grad_a = grad * b * a ** (b - 1) if self.needs_input_grad[0] else None
        grad_b = grad * out * self.xp.log(a) if self.needs_input_grad[1] else None
        return grad_a, grad_b
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_pow", "locked": true, "points": 1, "schema_version": 3, "solution": false}
a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
g = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
assert _close((a ** 2).data, [[1, 4], [9, 16]]), "a ** 2 must square every element"
ga, ge = (a ** 3)._ctx.backward(g)
assert _close(ga, g * 3 * a.data ** 2), "the gradient of a ** 3 for a is grad * 3 * a ** 2"
assert ge is None, "the exponent 3 needs no gradient: return None for it"
### BEGIN HIDDEN TESTS
# This student's own inputs: shapes, bases, exponents and upstream gradients drawn per student. Every
# base a has 0.3 ≤ |a| ≤ 0.8 or 1.25 ≤ |a| ≤ 2.2 (far from 0 and 1, below e, so ln a is far from
# 0 and 1), every upstream gradient 1.5 ≤ |grad| ≤ 3 (far from 1).
_m, _n = (int(v) for v in check_rng.integers(2, 5, 2))
_sizes = np.where(check_rng.integers(0, 2, (_m, _n)) == 1, check_rng.uniform(0.3, 0.8, (_m, _n)), check_rng.uniform(1.25, 2.2, (_m, _n)))
_signs = check_rng.choice([-1, 1], (_m, _n))
_G = (check_rng.choice([-1, 1], (_m, _n)) * check_rng.uniform(1.5, 3, (_m, _n))).astype(np.float32)
_A = (_signs * _sizes).astype(np.float32)  # both signs: a whole exponent needs no ln a
_p = int(check_rng.integers(2, 5))
_a = Tensor(_A, requires_grad=True)
assert _close((_a ** _p).data, _A.astype(np.float64) ** _p, 1e-5), "a ** p for a Python number p raises every element to the power p"
_ga, _ge = (_a ** _p)._ctx.backward(_G)
assert _close(_ga, _G * _p * _A.astype(np.float64) ** (_p - 1), 1e-5), "the gradient of a ** p for a is grad * p * a ** (p - 1)"
assert _ge is None, "the exponent p needs no gradient: return None for it"
_P = _sizes.astype(np.float32)  # positive bases, for a tensor exponent
_E = check_rng.uniform(0.5, 2.5, [(_n,), (_m, _n)][int(check_rng.integers(2))]).astype(np.float32)
_pa, _e = Tensor(_P, requires_grad=True), Tensor(_E, requires_grad=True)
assert _close((_pa ** _e).data, _P.astype(np.float64) ** _E, 1e-5), "a ** b for tensors raises each a to its b, broadcasting"
_ga, _gb = (_pa ** _e)._ctx.backward(_G)
assert _close(_ga, _G * _E * _P.astype(np.float64) ** (_E - 1), 1e-5), "a ** b: the gradient for a is grad * b * a ** (b - 1)"
assert _close(_gb, _G * _P.astype(np.float64) ** _E * np.log(_P), 1e-5), "a ** b: the gradient for b is grad * a ** b * ln a"
assert (_ga.dtype, _gb.dtype) == (float32, float32), "the gradients of a ** b must stay float32"
_s = float(np.round(check_rng.uniform(1.25, 2.2), 2))
assert (_s ** _pa).dtype == float32 and _close((_s ** _pa).data, _s ** _P.astype(np.float64), 1e-5), (
    "s ** a for a Python number s raises s to the power a, in float32")
_gs, _gb = (_s ** _pa)._ctx.backward(_G)
assert _gs is None, "the base s needs no gradient: return None for it"
assert _close(_gb, _G * _s ** _P.astype(np.float64) * np.log(_s), 1e-5), "the gradient of s ** a for a is grad * s ** a * ln s"
_I = check_rng.integers(-9, 10, (_m, _n))
_k = int(check_rng.integers(2, 4))
assert (Tensor(_I) ** _k).dtype == int64 and np.array_equal((Tensor(_I) ** _k).data, _I ** _k), (
    "an int64 tensor to a Python int power stays int64")
### END HIDDEN TESTS

# %% [markdown]
# ## Elementwise functions
#
# One input, one output of the same shape. Where the derivative is written in
# terms of the output, save the output and reuse it.
#
# ### Task `tensor_exp_log` (1 point): `exp`, `log`, `sqrt`
#
# d exp(a) = exp(a) and d √a = 1 / (2√a), both in terms of the output;
# d log(a) = 1 / a needs the input. `Tensor.exp`, `log` and `sqrt` (given)
# turn an integer tensor into float32 before your op sees it; a float16
# tensor stays float16.
#
# **Checked when graded** (besides the tests below), on a shape, values and
# an upstream gradient drawn for you:
#
# * exp matches np.exp
# * the gradient of exp(a) is grad * exp(a)
# * log matches np.log
# * the gradient of log(a) is grad / a
# * sqrt matches np.sqrt
# * the gradient of sqrt(a) is grad / (2 sqrt(a))
# * exp, log and sqrt: float32 in, float32 out, gradient included
# * exp, log and sqrt of an int64 tensor give float32
# * float16 in, float16 out, gradients included

# %% nbgrader={"grade": false, "grade_id": "tensor_exp_log_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Exp(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        out = self.xp.exp(a)
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return grad * out
        ### END SOLUTION


class Log(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        self.save_for_backward(a)
        return self.xp.log(a)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (a,) = self.saved
        return grad / a
        ### END SOLUTION


class Sqrt(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        out = self.xp.sqrt(a)
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return grad / (out + out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_exp_log", "locked": true, "points": 1, "schema_version": 3, "solution": false}
x = Tensor([0.25, 1.0, 4.0], requires_grad=True)
g = np.array([1.0, 2.0, 3.0], np.float32)
assert _close(x.exp().data, np.exp(x.data)), "exp must match np.exp"
assert _close(x.exp()._ctx.backward(g), g * np.exp(x.data), 1e-5), "the gradient of exp(a) is grad * exp(a)"
assert _close(x.log().data, np.log(x.data)), "log must match np.log"
assert _close(x.log()._ctx.backward(g), g / x.data), "the gradient of log(a) is grad / a"
### BEGIN HIDDEN TESTS
# This student's own inputs: a shape, values and an upstream gradient drawn per student. exp takes
# any value in [-3, 3]; log and sqrt positive ones, with 0.2 ≤ a ≤ 0.8 or 1.25 ≤ a ≤ 5 (far from 0,
# and from 1, where a and 1/a would agree).
_shape = tuple(int(n) for n in check_rng.integers(1, 5, int(check_rng.integers(1, 4))))
_X = check_rng.uniform(-3, 3, _shape).astype(np.float32)
_P = np.where(check_rng.integers(0, 2, _shape) == 1, check_rng.uniform(0.2, 0.8, _shape), check_rng.uniform(1.25, 5, _shape)).astype(np.float32)
_G = check_rng.standard_normal(_shape).astype(np.float32)
_x, _p = Tensor(_X, requires_grad=True), Tensor(_P, requires_grad=True)
assert _close(_x.exp().data, np.exp(_X.astype(np.float64)), 1e-5), "exp matches np.exp"
assert _close(_x.exp()._ctx.backward(_G), _G * np.exp(_X.astype(np.float64)), 1e-5), "the gradient of exp(a) is grad * exp(a)"
assert _close(_p.log().data, np.log(_P.astype(np.float64)), 1e-5), "log matches np.log"
assert _close(_p.log()._ctx.backward(_G), _G / _P.astype(np.float64), 1e-5), "the gradient of log(a) is grad / a"
assert _close(_p.sqrt().data, np.sqrt(_P.astype(np.float64)), 1e-5), "sqrt matches np.sqrt"
assert _close(_p.sqrt()._ctx.backward(_G), _G / (2 * np.sqrt(_P.astype(np.float64))), 1e-5), (
    "the gradient of sqrt(a) is grad / (2 sqrt(a))")
_ops = [("exp", "log", "sqrt")[int(i)] for i in check_rng.permutation(3)]
for _op in _ops:
    _out = getattr(_p, _op)()
    assert {_op: (_out.dtype, _out._ctx.backward(_G).dtype)} == {_op: (float32, float32)}, (
        "exp, log and sqrt: float32 in, float32 out, gradient included")
_I = check_rng.integers(1, 9, _shape)
for _op in _ops:
    _out = getattr(Tensor(_I), _op)()
    assert {_op: _out.dtype} == {_op: float32} and _close(_out.data, getattr(np, _op)(_I.astype(np.float64)), 1e-5), (
        "exp, log and sqrt of an int64 tensor give float32")
_h = Tensor(_P.astype(np.float16), requires_grad=True)
for _op in _ops:
    _out = getattr(_h, _op)()
    assert {_op: (_out.dtype, _out._ctx.backward(_G.astype(np.float16)).dtype)} == {_op: (float16, float16)}, (
        "float16 in, float16 out, gradients included")
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_tanh_sigmoid` (1 point): `tanh` and a stable `sigmoid`
#
# d tanh(a) = 1 − tanh²(a) and d σ(a) = σ(a)(1 − σ(a)): both in terms of the
# output.
#
# `sigmoid` must be *stable*: `1 / (1 + exp(-a))` overflows for a = −1000.
# Compute `e = exp(-|a|)`, which never overflows, and use `1 / (1 + e)` where
# a ≥ 0 and `e / (1 + e)` where a < 0.
#
# **Checked when graded** (besides the tests below), on a shape, values,
# large values of both signs and an upstream gradient drawn for you:
#
# * tanh matches np.tanh
# * the gradient of tanh(a) is grad * (1 - tanh(a)**2)
# * sigmoid(a) is 1 / (1 + exp(-a))
# * the gradient of sigmoid(a) is grad * sigmoid(a) * (1 - sigmoid(a))
# * tanh and sigmoid keep float32, gradients included
# * sigmoid must not overflow for large |a|, and must give 0 and 1 there

# %% nbgrader={"grade": false, "grade_id": "tensor_tanh_sigmoid_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Tanh(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        out = self.xp.tanh(a)
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return grad * (1 - out * out)
        ### END SOLUTION


class Sigmoid(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        e = self.xp.exp(-self.xp.abs(a))
        out = self.xp.where(a >= 0, 1 / (1 + e), e / (1 + e))
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return grad * out * (1 - out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_tanh_sigmoid", "locked": true, "points": 1, "schema_version": 3, "solution": false}
x = Tensor([-2.0, -0.5, 0.5, 2.0], requires_grad=True)
g = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
s = 1 / (1 + np.exp(-x.data))
assert _close(x.tanh().data, np.tanh(x.data)), "tanh must match np.tanh"
assert _close(x.tanh()._ctx.backward(g), g * (1 - np.tanh(x.data) ** 2)), "the gradient of tanh(a) is grad * (1 - tanh(a)**2)"
assert _close(x.sigmoid().data, s), "sigmoid(a) is 1 / (1 + exp(-a))"
with np.errstate(over="raise"):  # here an overflow is an error, not a warning
    big = Tensor([-1000.0, 1000.0]).sigmoid()
assert _close(big.data, [0, 1]), "sigmoid(-1000) is 0 and sigmoid(1000) is 1"
### BEGIN HIDDEN TESTS
# This student's own inputs: a shape, values and an upstream gradient drawn per student. Every a has
# 0.3 ≤ |a| ≤ 3 (both signs, away from 0 where tanh and sigmoid look symmetric), every upstream
# gradient 1.5 ≤ |grad| ≤ 3 (far from 1); the large values have 100 ≤ |a| ≤ 1000, both signs.
_shape = tuple(int(n) for n in check_rng.integers(1, 5, int(check_rng.integers(1, 4))))
_X = (check_rng.choice([-1, 1], _shape) * check_rng.uniform(0.3, 3, _shape)).astype(np.float32)
_G = (check_rng.choice([-1, 1], _shape) * check_rng.uniform(1.5, 3, _shape)).astype(np.float32)
_T, _S = np.tanh(_X.astype(np.float64)), 1 / (1 + np.exp(-_X.astype(np.float64)))
_x = Tensor(_X, requires_grad=True)
assert _close(_x.tanh().data, _T, 1e-5), "tanh matches np.tanh"
assert _close(_x.tanh()._ctx.backward(_G), _G * (1 - _T ** 2), 1e-5), "the gradient of tanh(a) is grad * (1 - tanh(a)**2)"
assert _close(_x.sigmoid().data, _S, 1e-5), "sigmoid(a) is 1 / (1 + exp(-a))"
assert _close(_x.sigmoid()._ctx.backward(_G), _G * _S * (1 - _S), 1e-5), (
    "the gradient of sigmoid(a) is grad * sigmoid(a) * (1 - sigmoid(a))")
_outs = {"tanh": _x.tanh(), "sigmoid": _x.sigmoid()}
assert {k: (o.dtype, o._ctx.backward(_G).dtype) for k, o in _outs.items()} == {"tanh": (float32, float32), "sigmoid": (float32, float32)}, (
    "tanh and sigmoid keep float32, gradients included")
_k = int(check_rng.integers(2, 7))
_far = (check_rng.permutation(np.resize([-1.0, 1.0], _k)) * check_rng.uniform(100, 1000, _k)).astype(np.float32)
with np.errstate(over="raise"):  # an overflow is an error here, not a warning
    _big = Tensor(_far).sigmoid().data
assert _close(_big, (_far > 0).astype(np.float32)), "sigmoid must not overflow for large |a|, and must give 0 and 1 there"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_relu_abs` (1 point): `relu` and `abs`
#
# Both are piecewise linear, so their derivatives are masks: relu passes the
# gradient where a > 0, abs multiplies it by the sign of a. At a = 0 both
# give 0, as in PyTorch.
#
# **Checked when graded** (besides the tests below), on a shape, values
# (exact zeros among them) and an upstream gradient drawn for you:
#
# * relu(a) is max(a, 0)
# * relu passes the gradient only where a > 0: 0 at a = 0
# * abs(a) is |a|
# * the gradient of |a| is grad * sign(a), and 0 at a = 0
# * relu keeps float32, gradient included
# * the gradient of abs stays float32
# * relu of an int64 tensor stays int64

# %% nbgrader={"grade": false, "grade_id": "tensor_relu_abs_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class ReLU(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        self.save_for_backward(a)
        return self.xp.maximum(a, a.dtype.type(0))
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (a,) = self.saved
        return grad * (a > 0)
        ### END SOLUTION


class Abs(Function):
    def forward(self, a):
        ### BEGIN SOLUTION
        self.save_for_backward(a)
        return self.xp.abs(a)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (a,) = self.saved
        return grad * self.xp.sign(a)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_relu_abs", "locked": true, "points": 1, "schema_version": 3, "solution": false}
x = Tensor([-2.0, -0.5, 0.0, 0.5, 2.0], requires_grad=True)
g = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
assert _close(x.relu().data, [0, 0, 0, 0.5, 2]), "relu(a) is max(a, 0)"
assert _close(x.relu()._ctx.backward(g), [0, 0, 0, 4, 5]), "relu passes the gradient only where a > 0"
assert _close(abs(x).data, [2, 0.5, 0, 0.5, 2]), "abs(a) is |a|"
### BEGIN HIDDEN TESTS
# This student's own inputs: a shape, values and an upstream gradient drawn per student. Every a has
# 0.2 ≤ |a| ≤ 3, except one or two exact 0s (the kink, where both gradients are 0); at least one a
# of each sign, all at drawn places; every upstream gradient 1.5 ≤ |grad| ≤ 3 (far from ±1).
_shape = tuple(int(n) for n in check_rng.integers(2, 5, int(check_rng.integers(0, 3)))) + (int(check_rng.integers(3, 6)),)
_size = int(np.prod(_shape))
_zeros = min(int(check_rng.integers(1, 3)), _size - 2)
_signs = np.concatenate([np.zeros(_zeros), [1.0, -1.0], check_rng.choice([-1.0, 1.0], _size - _zeros - 2)])
_X = (check_rng.permutation(_signs) * check_rng.uniform(0.2, 3, _size)).reshape(_shape).astype(np.float32)
_G = (check_rng.choice([-1, 1], _shape) * check_rng.uniform(1.5, 3, _shape)).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
assert _close(_x.relu().data, np.maximum(_X, 0)), "relu(a) is max(a, 0)"
assert _close(_x.relu()._ctx.backward(_G), _G * (_X > 0)), "relu passes the gradient only where a > 0: 0 at a = 0"
assert _close(_x.abs().data, np.abs(_X)), "abs(a) is |a|"
assert _close(_x.abs()._ctx.backward(_G), _G * np.sign(_X)), "the gradient of |a| is grad * sign(a), and 0 at a = 0"
assert (_x.relu().dtype, _x.relu()._ctx.backward(_G).dtype) == (float32, float32), "relu keeps float32, gradient included"
assert _x.abs()._ctx.backward(_G).dtype == float32, "the gradient of abs stays float32"
_I = check_rng.integers(-9, 10, _shape)
assert Tensor(_I).relu().dtype == int64 and np.array_equal(Tensor(_I).relu().data, np.maximum(_I, 0)), (
    "relu of an int64 tensor stays int64")
### END HIDDEN TESTS

# %% [markdown]
# ## Matrix multiplication
#
# ### Task `tensor_matmul` (2 points): `a @ b`
#
# `a @ b` multiplies the last two axes and broadcasts the ones in front
# (a batch of matrices times one matrix, say). A 1-D operand is a vector:
# `a` of shape (n,) acts as (1, n) and `b` of shape (n,) as (n, 1), and that
# axis is dropped from the result.
#
# For C = A B: ∂L/∂A = ∂L/∂C · Bᵀ and ∂L/∂B = Aᵀ · ∂L/∂C, with the transposes
# over the last two axes. Each is a full matmul, so compute only the ones
# `self.needs_input_grad` asks for (None for the other): the gradient with
# respect to a batch of input data is a fifth of an MLP's training FLOPs, and
# nobody needs it. Handle the vector cases by giving them their matrix shape
# in backward, then dropping it again. Batch axes that were broadcast are
# summed back by the engine: return each gradient as the product gives it,
# batch axes included.
#
# Shapes that do not fit must give an error a person can act on:
# `matmul: shapes (32, 785) and (784, 10) do not fit: the last axis of the
# first (785) must equal the first of the last two of the second (784)`.
# A 0-d operand is a `ShapeError` too:
# `matmul: both operands need at least one axis; got shapes () and (2,)`.
#
# **Checked when graded** (besides the tests below), on sizes (all different,
# so that a missing transpose shows), matrices, vectors and output gradients
# drawn for you:
#
# * a @ b of an (m, k) and a (k, n) matrix is their matrix product
# * the gradient of a @ b with respect to a is grad @ bᵀ
# * the gradient of a @ b with respect to b is aᵀ @ grad
# * a batch of matrices times one matrix multiplies each matrix of the batch
# * a batch times one matrix: the batch's gradient is grad @ bᵀ for each matrix
# * a batch times one matrix: the matrix's gradient keeps the batch axis, aᵀ @ grad for each matrix (the engine sums it back)
# * one matrix times a batch of matrices: the inner size is the second-last axis of the second
# * one matrix times a batch: the matrix's gradient keeps the batch axis, grad @ bᵀ for each matrix
# * one matrix times a batch: the batch's gradient is aᵀ @ grad for each matrix
# * matrix @ vector gives a vector
# * matrix @ vector: the matrix's gradient is the outer product of grad and the vector
# * matrix @ vector: the vector's gradient is a vector, the matrix transposed @ grad
# * vector @ matrix gives a vector
# * vector @ matrix: the vector's gradient is a vector, the matrix @ grad
# * vector @ matrix: the matrix's gradient is the outer product of the vector and grad
# * an input that needs no gradient gets None: compute only the gradients needs_input_grad asks for
# * shapes that do not fit must raise a `ShapeError`
# * the error names both shapes
# * a 0-d operand must raise a `ShapeError`
# * the error says that matmul needs at least one axis

# %% nbgrader={"grade": false, "grade_id": "tensor_matmul_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class MatMul(Function):
    def forward(self, a, b):
        ### BEGIN SOLUTION
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(f"matmul: both operands need at least one axis; got shapes {a.shape} and {b.shape}")
        k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
        if a.shape[-1] != k_b:
            raise ShapeError(
                f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit: the last axis of "
                f"the first ({a.shape[-1]}) must equal the first of the last two of the second ({k_b})"
            )
        self.save_for_backward(a, b)
        return a @ b
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        a, b = self.saved
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if a.ndim == 1:
            grad = grad[..., None, :]
        if b.ndim == 1:
            grad = grad[..., None]
        grad_a = grad_b = None
        if self.needs_input_grad[0]:  # skip a whole matmul for inputs like a data batch
            grad_a = grad @ b2.swapaxes(-1, -2)
            grad_a = grad_a[..., 0, :] if a.ndim == 1 else grad_a
        if self.needs_input_grad[1]:
            grad_b = a2.swapaxes(-1, -2) @ grad
            grad_b = grad_b[..., 0] if b.ndim == 1 else grad_b
        return grad_a, grad_b
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_matmul", "locked": true, "points": 2, "schema_version": 3, "solution": false}
A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(12, dtype=np.float32).reshape(3, 4)
a, b = Tensor(A, requires_grad=True), Tensor(B, requires_grad=True)
c = a @ b
assert c.shape == (2, 4) and c.dtype == float32 and _close(c.data, A @ B), "a @ b must be the matrix product, in float32"
G = np.arange(8, dtype=np.float32).reshape(2, 4)
ga, gb = c._ctx.backward(G)
assert _close(ga, G @ B.T) and _close(gb, A.T @ G), "the gradients of A @ B are grad @ B.T for A and A.T @ grad for B"
try:
    Tensor(np.ones((32, 785), np.float32)) @ Tensor(np.ones((784, 10), np.float32))
    raise AssertionError("mismatched shapes must raise a ShapeError")
except ShapeError as err:
    assert "785" in str(err) and "784" in str(err), f"the error must name both sizes that differ; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: four different sizes from 2 to 6 (a missing transpose, or an axis taken
# for another, shows as a wrong shape or a shape error), float32 matrices, vectors and gradients.
_B, _m, _k, _n = (int(v) for v in check_rng.permutation([2, 3, 4, 5, 6])[:4])
_A = check_rng.standard_normal((_m, _k)).astype(np.float32)
_W = check_rng.standard_normal((_k, _n)).astype(np.float32)
_G = check_rng.standard_normal((_m, _n)).astype(np.float32)
_out = Tensor(_A, requires_grad=True) @ Tensor(_W, requires_grad=True)
assert _out.shape == (_m, _n) and _close(_out.numpy(), _A @ _W, 1e-5), "a @ b of an (m, k) and a (k, n) matrix is their matrix product"
_ga, _gw = _out._ctx.backward(_G)
assert _ga.shape == (_m, _k) and _close(_ga, _G @ _W.T, 1e-5), "the gradient of a @ b with respect to a is grad @ bᵀ"
assert _gw.shape == (_k, _n) and _close(_gw, _A.T @ _G, 1e-5), "the gradient of a @ b with respect to b is aᵀ @ grad"
_X = check_rng.standard_normal((_B, _m, _k)).astype(np.float32)
_GB = check_rng.standard_normal((_B, _m, _n)).astype(np.float32)
_out = Tensor(_X, requires_grad=True) @ Tensor(_W, requires_grad=True)
assert _out.shape == (_B, _m, _n) and _close(_out.numpy(), _X @ _W, 1e-5), "a batch of matrices times one matrix multiplies each matrix of the batch"
_gx, _gw = _out._ctx.backward(_GB)
assert _gx.shape == (_B, _m, _k) and _close(_gx, _GB @ _W.T, 1e-5), "a batch times one matrix: the batch's gradient is grad @ bᵀ for each matrix"
assert _gw.shape == (_B, _k, _n) and _close(_gw, _X.transpose(0, 2, 1) @ _GB, 1e-5), (
    "a batch times one matrix: the matrix's gradient keeps the batch axis, aᵀ @ grad for each matrix (the engine sums it back)")
_Y = check_rng.standard_normal((_B, _k, _n)).astype(np.float32)
_out = Tensor(_A, requires_grad=True) @ Tensor(_Y, requires_grad=True)
assert _out.shape == (_B, _m, _n) and _close(_out.numpy(), _A @ _Y, 1e-5), (
    "one matrix times a batch of matrices: the inner size is the second-last axis of the second")
_ga, _gy = _out._ctx.backward(_GB)
assert _ga.shape == (_B, _m, _k) and _close(_ga, _GB @ _Y.transpose(0, 2, 1), 1e-5), (
    "one matrix times a batch: the matrix's gradient keeps the batch axis, grad @ bᵀ for each matrix")
assert _gy.shape == (_B, _k, _n) and _close(_gy, _A.T @ _GB, 1e-5), "one matrix times a batch: the batch's gradient is aᵀ @ grad for each matrix"
_M = check_rng.standard_normal((_n, _k)).astype(np.float32)
_v = check_rng.standard_normal(_k).astype(np.float32)
_g = check_rng.standard_normal(_n).astype(np.float32)
_out = Tensor(_M, requires_grad=True) @ Tensor(_v, requires_grad=True)
assert _out.shape == (_n,) and _close(_out.numpy(), _M @ _v, 1e-5), "matrix @ vector gives a vector"
_gm, _gv = _out._ctx.backward(_g)
assert _gm.shape == (_n, _k) and _close(_gm, np.outer(_g, _v), 1e-5), "matrix @ vector: the matrix's gradient is the outer product of grad and the vector"
assert _gv.shape == (_k,) and _close(_gv, _M.T @ _g, 1e-5), "matrix @ vector: the vector's gradient is a vector, the matrix transposed @ grad"
_out = Tensor(_v, requires_grad=True) @ Tensor(_W, requires_grad=True)
assert _out.shape == (_n,) and _close(_out.numpy(), _v @ _W, 1e-5), "vector @ matrix gives a vector"
_gv, _gw = _out._ctx.backward(_g)
assert _gv.shape == (_k,) and _close(_gv, _W @ _g, 1e-5), "vector @ matrix: the vector's gradient is a vector, the matrix @ grad"
assert _gw.shape == (_k, _n) and _close(_gw, np.outer(_v, _g), 1e-5), "vector @ matrix: the matrix's gradient is the outer product of the vector and grad"
# Each input in turn needs no gradient: its gradient is None, the other one's is still right.
_none, _gw = (Tensor(_A) @ Tensor(_W, requires_grad=True))._ctx.backward(_G)
assert [_none] == [None] and _close(_gw, _A.T @ _G, 1e-5), (
    "an input that needs no gradient gets None: compute only the gradients needs_input_grad asks for")
_ga, _none = (Tensor(_A, requires_grad=True) @ Tensor(_W))._ctx.backward(_G)
assert [_none] == [None] and _close(_ga, _G @ _W.T, 1e-5), (
    "an input that needs no gradient gets None: compute only the gradients needs_input_grad asks for")
_extra = int(check_rng.integers(1, 3))
try:
    Tensor(_A) @ Tensor(np.ones((_k + _extra, _n), np.float32))
    raise AssertionError("shapes that do not fit must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _close_text(_said, (str((_m, _k)), str((_k + _extra, _n)))), "the error names both shapes"
_scalar, _vector = Tensor(np.array(_g[0])), Tensor(_v)
_pair = (_scalar, _vector) if check_rng.integers(2) else (_vector, _scalar)
try:
    _pair[0] @ _pair[1]
    raise AssertionError("a 0-d operand must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert "axis" in _said, "the error says that matmul needs at least one axis"
### END HIDDEN TESTS

# %% [markdown]
# ## Reductions
#
# `Sum` and `Max` are the primitives; `mean`, `var` and `min` are built from
# them and the arithmetic ops, so they get their gradients for free.
#
# `axis` arrives normalised: None (all axes) or a sorted tuple of
# non-negative axes. `_keepdims_shape(shape, axis)` (given) is the shape the
# result has with `keepdims=True`: backward uses it to give `grad` its reduced
# axes back.

# %%
#| export
def _keepdims_shape(shape: tuple[int, ...], axis: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape a reduction over ``axis`` has with ``keepdims=True``."""
    return tuple(1 if axis is None or i in axis else n for i, n in enumerate(shape))


# %% [markdown]
# ### Task `tensor_sum` (1 point): `Sum`
#
# * forward: add float16 numbers up in float32 (`dtype=np.float32`) and cast
#   the total back: float16 counts exactly only to 2048, so a float16 running
#   sum of 3000 ones stalls at 2048.
# * backward: every input element contributed once, so each gets the
#   output's gradient. Give `grad` back its reduced axes (size 1) and
#   broadcast it to the input's shape.
#
# Integer and bool tensors sum to int64, as NumPy counts them.
#
# **Checked when graded** (besides the tests below), on a 3-d tensor whose
# sizes (all different), whole-number values, axes and output gradients are
# drawn for you:
#
# * sum() adds every element into a 0-d tensor
# * sum over any one axis, negative or not, adds along it
# * sum over a tuple of axes adds along each of them
# * keepdims=True keeps each reduced axis with size 1
# * the gradient of a sum over one axis gives each element the gradient of the sum it went into
# * the gradient of a sum over a tuple of axes gives each element the gradient of the sum it went into
# * the gradient of a keepdims sum gives each element the gradient of the sum it went into
# * the gradient of sum() goes to every element
# * a float16 sum of n ones (n from 2,100 to 4,000) must add up in float32 and give n, rounded to float16
# * integer and bool sums count in int64

# %% nbgrader={"grade": false, "grade_id": "tensor_sum_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Sum(Function):
    def forward(self, a, axis=None, keepdims=False):
        ### BEGIN SOLUTION
        self.shape, self.axis = a.shape, axis
        if is_floating(a.dtype) and a.dtype.itemsize < 4:
            return a.sum(axis=axis, keepdims=keepdims, dtype=np.float32).astype(a.dtype)
        return a.sum(axis=axis, keepdims=keepdims)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        grad = grad.reshape(_keepdims_shape(self.shape, self.axis))
        return self.xp.broadcast_to(grad, self.shape)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_sum", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32)
x = Tensor(X, requires_grad=True)
assert _close(x.sum().data, 21) and x.sum().shape == (), "sum() adds every element into a 0-d tensor"
assert _close(x.sum(axis=0).data, [5, 7, 9]), "sum(axis=0) adds the rows"
assert x.sum(axis=1, keepdims=True).shape == (2, 1), "keepdims=True keeps the reduced axis with size 1"
assert _close(x.sum(axis=1)._ctx.backward(np.array([1.0, 2.0], np.float32)), [[1, 1, 1], [2, 2, 2]]), "each element gets the gradient of the sum it went into"
### BEGIN HIDDEN TESTS
# This student's own tensor: three different sizes from 2 to 5 (a gradient given back along the wrong
# axis shows as a wrong shape) and whole numbers from -9 to 9, so that every sum is exact.
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:3])
_X = check_rng.integers(-9, 10, _shape).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
assert _x.sum().shape == () and np.array_equal(_x.sum().numpy(), _X.sum()), "sum() adds every element into a 0-d tensor"
for _axis in check_rng.permutation(6) - 3:
    assert np.array_equal(_x.sum(axis=int(_axis)).numpy(), _X.sum(axis=int(_axis))), "sum over any one axis, negative or not, adds along it"
_pair = tuple(sorted(int(a) for a in check_rng.choice(3, 2, replace=False)))
assert np.array_equal(_x.sum(axis=_pair).numpy(), _X.sum(axis=_pair)), "sum over a tuple of axes adds along each of them"
_axis = int(check_rng.integers(3))
assert np.array_equal(_x.sum(axis=_axis, keepdims=True).numpy(), _X.sum(axis=_axis, keepdims=True)), (
    "keepdims=True keeps each reduced axis with size 1")
# An axis that is not the first: a gradient broadcast back without its reduced axis does not line up.
_axis = int(check_rng.choice([1, 2, -1, -2]))
_G = check_rng.integers(-9, 10, _X.sum(axis=_axis).shape).astype(np.float32)
assert np.array_equal(_x.sum(axis=_axis)._ctx.backward(_G), np.broadcast_to(np.expand_dims(_G, _axis), _shape)), (
    "the gradient of a sum over one axis gives each element the gradient of the sum it went into")
_G = check_rng.integers(-9, 10, _X.sum(axis=_pair).shape).astype(np.float32)
assert np.array_equal(_x.sum(axis=_pair)._ctx.backward(_G), np.broadcast_to(np.expand_dims(_G, _pair), _shape)), (
    "the gradient of a sum over a tuple of axes gives each element the gradient of the sum it went into")
_G = check_rng.integers(-9, 10, _X.sum(axis=_pair, keepdims=True).shape).astype(np.float32)
assert np.array_equal(_x.sum(axis=_pair, keepdims=True)._ctx.backward(_G), np.broadcast_to(_G, _shape)), (
    "the gradient of a keepdims sum gives each element the gradient of the sum it went into")
_g = np.float32(check_rng.integers(1, 10))
assert np.array_equal(_x.sum()._ctx.backward(_g), np.full(_shape, _g)), "the gradient of sum() goes to every element"
_count, _cols = int(check_rng.integers(2100, 4001)), int(check_rng.integers(2, 5))
_h = Tensor(np.ones((_count, _cols), np.float16)).sum(axis=0)
assert _h.dtype == float16 and np.array_equal(_h.numpy(), np.full(_cols, _count, np.float32).astype(np.float16)), (
    "a float16 sum of n ones (n from 2,100 to 4,000) must add up in float32 and give n, rounded to float16")
_I = check_rng.integers(-50, 50, _shape)
_flags = check_rng.integers(0, 2, _shape).astype(bool)
assert (Tensor(_I).sum(axis=_axis).dtype, Tensor(_flags).sum().dtype) == (int64, int64) and (
    np.array_equal(Tensor(_I).sum(axis=_axis).numpy(), _I.sum(axis=_axis))) and Tensor(_flags).sum().item() == int(_flags.sum()), (
    "integer and bool sums count in int64")
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_mean_var` (1 point): `mean` and `var`
#
# Built from ops that already have gradients, so there is no backward to
# write: mean = sum / count and var = Σ (x − mean)² / (count − correction),
# where count is the number of elements reduced over (all of them for
# `axis=None`). `correction=1` (the unbiased estimate, PyTorch's default)
# divides by n − 1, `correction=0` by n. `Tensor.mean` and `Tensor.var`
# (given) call these, in float32 for float16 input.
#
# In `var`, take the mean with `keepdims=True`: then x − mean broadcasts
# whichever axes were reduced (without it, only a reduction over the first
# axes lines up).
#
# **Checked when graded** (besides the tests below), on a 3-d float32 tensor
# whose sizes (all different), values and axes are drawn for you:
#
# * mean() averages every element
# * mean over any one axis, negative or not, averages along it
# * mean over a tuple of axes divides by the number of elements reduced
# * var over any one axis divides by n - 1 by default (correction=1)
# * var(correction=0) divides by n
# * var over a tuple of axes: n is the number of elements reduced
# * var() over every element
# * keepdims=True keeps the reduced axes with size 1, for mean and var
# * the mean of an integer tensor is float32
# * mean and var are built from ops, so their result records the graph (requires_grad)

# %% nbgrader={"grade": false, "grade_id": "tensor_mean_var_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _mean(x: Tensor, axis, keepdims: bool) -> Tensor:
    """Mean = sum / count, built from ops that already have gradients."""
    ### BEGIN SOLUTION
    axes = _axes(axis, x.ndim, "mean")
    count = x.numel() if axes is None else int(np.prod([x.shape[a] for a in axes]))
    return x.sum(axes, keepdims) / count
    ### END SOLUTION


def _var(x: Tensor, axis, keepdims: bool, correction: int) -> Tensor:
    """Variance with ``correction`` (1: unbiased, PyTorch's default; 0: biased)."""
    ### BEGIN SOLUTION
    axes = _axes(axis, x.ndim, "var")
    count = x.numel() if axes is None else int(np.prod([x.shape[a] for a in axes]))
    centered = x - x.mean(axes, keepdims=True)
    return (centered * centered).sum(axes, keepdims) / (count - correction)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_mean_var", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32)
x = Tensor(X, requires_grad=True)
assert _close(x.mean().data, 3.5) and x.mean().dtype == float32, "mean() averages every element, in float32"
assert _close(x.mean(axis=1).data, [3, 4]), "mean(axis=1) averages each row"
assert _close(x.var(axis=1).data, X.var(axis=1, ddof=1)), "var divides by n - 1 by default (correction=1)"
### BEGIN HIDDEN TESTS
# This student's own tensor: three different sizes from 2 to 5 (a count taken from the wrong axis, or
# a mean that does not broadcast back, shows) and float32 values, compared with NumPy's in float64.
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:3])
_X = check_rng.standard_normal(_shape).astype(np.float32)
_X64 = _X.astype(np.float64)
_x = Tensor(_X, requires_grad=True)
assert _x.mean().shape == () and _close(_x.mean().numpy(), _X64.mean(), 1e-5), "mean() averages every element"
for _axis in check_rng.permutation(6) - 3:
    assert _close(_x.mean(axis=int(_axis)).numpy(), _X64.mean(axis=int(_axis)), 1e-5), "mean over any one axis, negative or not, averages along it"
_pair = tuple(sorted(int(a) for a in check_rng.choice(3, 2, replace=False)))
assert _close(_x.mean(axis=_pair).numpy(), _X64.mean(axis=_pair), 1e-5), "mean over a tuple of axes divides by the number of elements reduced"
for _axis in check_rng.permutation(6) - 3:
    assert _close(_x.var(axis=int(_axis)).numpy(), _X64.var(axis=int(_axis), ddof=1), 1e-5), (
        "var over any one axis divides by n - 1 by default (correction=1)")
_axis = int(check_rng.integers(3))
assert _close(_x.var(axis=_axis, correction=0).numpy(), _X64.var(axis=_axis), 1e-5), "var(correction=0) divides by n"
_correction = int(check_rng.integers(2))
assert _close(_x.var(axis=_pair, correction=_correction).numpy(), _X64.var(axis=_pair, ddof=_correction), 1e-5), (
    "var over a tuple of axes: n is the number of elements reduced")
assert _x.var().shape == () and _close(_x.var().numpy(), _X64.var(ddof=1), 1e-5), "var() over every element"
assert (_x.mean(axis=_pair, keepdims=True).shape, _x.var(axis=_axis, keepdims=True).shape) == (
    _X.mean(axis=_pair, keepdims=True).shape, _X.var(axis=_axis, keepdims=True).shape), (
    "keepdims=True keeps the reduced axes with size 1, for mean and var")
_I = check_rng.integers(-50, 50, _shape)
assert Tensor(_I).mean(axis=_axis).dtype == float32 and _close(Tensor(_I).mean(axis=_axis).numpy(), _I.mean(axis=_axis), 1e-5), (
    "the mean of an integer tensor is float32")
assert [_x.mean(axis=_axis).requires_grad, _x.var(axis=_pair).requires_grad] == [True, True], (
    "mean and var are built from ops, so their result records the graph (requires_grad)")
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_max` (1 point): `Max`
#
# * forward: an empty tensor has no maximum; say so with a `ShapeError`:
#   `max: cannot reduce an empty tensor of shape (0,)`.
# * backward: only the elements that *were* the maximum get gradient; when
#   several tie, they share it equally (so the total stays right). Count the
#   ties in the array's dtype (see the note on dtypes above).
#
# `min` is given: min(x) = −max(−x).
#
# **Checked when graded** (besides the tests below), on a 3-d float32 tensor
# whose sizes (all different), values (no two equal), axes and output
# gradients are drawn for you, and on tensors with ties built in:
#
# * max over any one axis, negative or not, takes the largest along it
# * max over a tuple of axes takes the largest of each slice
# * max() over every element is 0-d
# * keepdims=True keeps the reduced axes with size 1
# * only the maximum of each slice gets the gradient
# * the gradient of a keepdims max goes to each slice's maximum
# * ties share the gradient equally within each slice, not over the whole tensor
# * ties of max() share the gradient equally
# * the gradient of max must stay float32: count the ties in the array's dtype
# * min, built on max, takes the smallest along the axis
# * the max of an empty tensor must raise a ShapeError
# * the error says the tensor is empty and names its shape

# %% nbgrader={"grade": false, "grade_id": "tensor_max_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Max(Function):
    def forward(self, a, axis=None, keepdims=False):
        ### BEGIN SOLUTION
        if a.size == 0:
            raise ShapeError(f"max: cannot reduce an empty tensor of shape {a.shape}")
        out = a.max(axis=axis, keepdims=True)
        self.axis = axis
        self.save_for_backward(a, out)
        return out if keepdims else out.squeeze(axis)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        a, out = self.saved
        winners = a == out
        share = winners.sum(axis=self.axis, keepdims=True, dtype=a.dtype)
        return grad.reshape(out.shape) * winners / share
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_max", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32)
x = Tensor(X, requires_grad=True)
assert _close(x.max(axis=1).data, [5, 6]) and _close(x.max().data, 6), "max over an axis, and over everything"
assert _close(x.max(axis=1)._ctx.backward(np.array([1.0, 2.0], np.float32)), [[0, 1, 0], [0, 0, 2]]), "only the maximum of each row gets the gradient"
tie = Tensor([2.0, 7.0, 7.0], requires_grad=True)
assert _close(tie.max()._ctx.backward(np.float32(1.0)), [0, 0.5, 0.5]), "ties share the gradient equally"
### BEGIN HIDDEN TESTS
# This student's own tensor: three different sizes from 2 to 5 and whole numbers, no two equal (so
# each slice has one maximum), with gradients from 1 to 9 (none 0, so a misplaced one shows).
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:3])
_size = int(np.prod(_shape))
_X = (check_rng.permutation(_size) - _size // 2).reshape(_shape).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
for _axis in check_rng.permutation(6) - 3:
    assert np.array_equal(_x.max(axis=int(_axis)).numpy(), _X.max(axis=int(_axis))), "max over any one axis, negative or not, takes the largest along it"
_pair = tuple(sorted(int(a) for a in check_rng.choice(3, 2, replace=False)))
assert np.array_equal(_x.max(axis=_pair).numpy(), _X.max(axis=_pair)), "max over a tuple of axes takes the largest of each slice"
assert _x.max().shape == () and np.array_equal(_x.max().numpy(), _X.max()), "max() over every element is 0-d"
_axis = int(check_rng.integers(3))
assert np.array_equal(_x.max(axis=_pair, keepdims=True).numpy(), _X.max(axis=_pair, keepdims=True)), (
    "keepdims=True keeps the reduced axes with size 1")
_G = check_rng.integers(1, 10, _X.max(axis=_axis).shape).astype(np.float32)
_wins = _X == _X.max(axis=_axis, keepdims=True)
assert np.array_equal(_x.max(axis=_axis)._ctx.backward(_G), np.expand_dims(_G, _axis) * _wins), (
    "only the maximum of each slice gets the gradient")
_G = check_rng.integers(1, 10, _X.max(axis=_pair, keepdims=True).shape).astype(np.float32)
_wins = _X == _X.max(axis=_pair, keepdims=True)
assert np.array_equal(_x.max(axis=_pair, keepdims=True)._ctx.backward(_G), _G * _wins), (
    "the gradient of a keepdims max goes to each slice's maximum")
# Ties built in: an (r, c) matrix of different whole numbers, each row's maximum then copied to a drawn
# number of places (one row at least two), reduced along its rows or, transposed, along its columns.
_r, _c = (int(v) for v in check_rng.permutation([3, 4, 5])[:2])
_T = (check_rng.permutation(_r * _c) - _r * _c // 2).reshape(_r, _c).astype(np.float32)
_ties = check_rng.integers(1, _c + 1, _r)
_ties[int(check_rng.integers(_r))] = int(check_rng.integers(2, _c + 1))
for _row, _t in zip(_T, _ties):
    _row[check_rng.permutation(_c)[:_t]] = _row.max()
_axis = int(check_rng.integers(2))
_T = _T if _axis == 1 else _T.T.copy()
_G = check_rng.integers(1, 10, _T.max(axis=_axis).shape).astype(np.float32)
_wins = _T == _T.max(axis=_axis, keepdims=True)
_gt = Tensor(_T, requires_grad=True).max(axis=_axis)._ctx.backward(_G)
assert _gt.shape == _T.shape and _close(_gt, np.expand_dims(_G, _axis) * _wins / _wins.sum(axis=_axis, keepdims=True)), (
    "ties share the gradient equally within each slice, not over the whole tensor")
_V = (check_rng.permutation(_c + 2) - 2).astype(np.float32)
_V[check_rng.permutation(_c + 2)[:int(check_rng.integers(2, _c + 1))]] = _V.max()
_g = np.float32(check_rng.integers(1, 10))
assert _close(Tensor(_V, requires_grad=True).max()._ctx.backward(_g), _g * (_V == _V.max()) / np.sum(_V == _V.max())), (
    "ties of max() share the gradient equally")
assert _gt.dtype == float32, "the gradient of max must stay float32: count the ties in the array's dtype"
_axis = int(check_rng.integers(-3, 3))
assert np.array_equal(_x.min(axis=_axis).numpy(), _X.min(axis=_axis)), "min, built on max, takes the smallest along the axis"
_empty = [(0, _c), (_c, 0), (0,)][int(check_rng.integers(3))]
try:
    Tensor(np.zeros(_empty, np.float32)).max()
    raise AssertionError("the max of an empty tensor must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _close_text(_said, ("empty", str(_empty))), "the error says the tensor is empty and names its shape"
### END HIDDEN TESTS

# %% [markdown]
# `argmax` and `argmin` are given: indices have no gradient, so they are read
# straight off the array, as int64.

# %%
#| export
def _argext(x: Tensor, axis: int | None, keepdims: bool, which: str) -> Tensor:
    """argmax / argmin: int64 indices, outside the graph."""
    axis = None if axis is None else normalize_axis(axis, max(x.ndim, 1), which)
    if x.numel() == 0:
        raise ShapeError(f"{which}: cannot reduce an empty tensor of shape {x.shape}")
    data = x.device.xp.asarray(getattr(x.data, which)(axis=axis, keepdims=keepdims))
    return Tensor._wrap(data.astype(int64, copy=False), x._device)


# %%
x = Tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
print(x.argmax(axis=1), x.argmin())
assert x.argmax(axis=1).tolist() == [1, 2] and x.argmax(axis=1).dtype == int64 and x.argmin().item() == 0

# %% [markdown]
# ## Shapes
#
# Shape ops move numbers around without changing them, so their backward
# moves the gradient back.
#
# ### Task `tensor_views` (1 point): `Reshape`, `Permute`, `Expand`
#
# * `Reshape` remembers the input's shape, and its backward reshapes the
#   gradient to it. A shape that does not fit is a `ShapeError` that names the
#   input's shape and size: `reshape: cannot reshape shape (2, 3)
#   (6 elements) into (4, 2)`.
# * `Permute` backward applies the inverse permutation.
# * `Expand` broadcasts (`xp.broadcast_to`) and its backward returns the
#   gradient unchanged: the engine sums the broadcast axes back. A shape it
#   cannot reach is a `ShapeError` like `expand: cannot expand shape (2, 3) to
#   (4, 3)`.
#
# `flatten`, `squeeze`, `unsqueeze`, `transpose` and `.T` (given, in the
# class) are built on these.
#
# **Checked when graded** (besides the tests below), on a 3-d tensor whose
# sizes (all different), values, target shapes, permutations and output
# gradients are drawn for you:
#
# * reshape keeps the order of the elements
# * the gradient of a reshape is reshaped back to the input's shape
# * reshape(-1) and flatten give every element in order
# * permute moves the axes as asked
# * the gradient of a permute goes back through the inverse permutation
# * the gradient of x.T is transposed back
# * unsqueeze and squeeze add and remove an axis of size 1
# * expand repeats along the axes of size 1 and adds leading axes
# * the backward of Expand returns the gradient unchanged (the engine sums it back)
# * a shape with another number of elements must raise a ShapeError
# * the reshape error names the input's shape and its number of elements
# * a shape that expand cannot reach must raise a ShapeError
# * the expand error names the input's shape

# %% nbgrader={"grade": false, "grade_id": "tensor_views_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Reshape(Function):
    def forward(self, a, shape):
        ### BEGIN SOLUTION
        self.shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ShapeError(f"reshape: cannot reshape shape {tuple(a.shape)} ({a.size} elements) into {shape}") from None
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad.reshape(self.shape)
        ### END SOLUTION


class Permute(Function):
    def forward(self, a, axes):
        ### BEGIN SOLUTION
        self.axes = axes
        return a.transpose(axes)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad.transpose(np.argsort(self.axes))
        ### END SOLUTION


class Expand(Function):
    def forward(self, a, shape):
        ### BEGIN SOLUTION
        try:
            return self.xp.broadcast_to(a, shape)
        except ValueError:
            raise ShapeError(f"expand: cannot expand shape {tuple(a.shape)} to {shape}") from None
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_views", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.arange(6, dtype=np.float32).reshape(2, 3)
x = Tensor(X, requires_grad=True)
r = x.reshape(3, 2)
assert r.shape == (3, 2) and _close(r.data, X.reshape(3, 2)), "reshape(3, 2) keeps the order of the elements"
assert r._ctx.backward(np.ones((3, 2), np.float32)).shape == (2, 3), "the gradient of a reshape has the input's shape"
p = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), requires_grad=True).permute(2, 0, 1)
assert p.shape == (4, 2, 3), "permute(2, 0, 1) puts axis 2 first"
G = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
assert _close(p._ctx.backward(G), G.transpose(1, 2, 0)), "the gradient of a permute goes back through the inverse permutation"
assert x.expand(4, 2, 3).shape == (4, 2, 3), "expand(4, 2, 3) adds a leading axis of 4"
### BEGIN HIDDEN TESTS
# This student's own tensor: three different sizes from 2 to 5 (an axis put in the wrong place shows
# as a wrong shape), whole numbers, a target shape, a permutation (a 3-cycle, which is not its own
# inverse) and gradients, all drawn.
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:3])
_s0, _s1, _s2 = _shape
_size = _s0 * _s1 * _s2
_X = check_rng.integers(-9, 10, _shape).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
_target = [(_s0 * _s1, _s2), (_s0, _s1 * _s2), (_s2, _s0 * _s1), (_s1, -1), (_size,)][int(check_rng.integers(5))]
_r = _x.reshape(*_target)
assert np.array_equal(_r.numpy(), _X.reshape(_target)), "reshape keeps the order of the elements"
_G = check_rng.integers(-9, 10, _X.reshape(_target).shape).astype(np.float32)
assert np.array_equal(_r._ctx.backward(_G), _G.reshape(_shape)), "the gradient of a reshape is reshaped back to the input's shape"
assert np.array_equal(_x.reshape(-1).numpy(), _X.ravel()) and np.array_equal(_x.flatten().numpy(), _X.ravel()), (
    "reshape(-1) and flatten give every element in order")
_perm = [(1, 2, 0), (2, 0, 1)][int(check_rng.integers(2))]
_p = _x.permute(*_perm)
assert np.array_equal(_p.numpy(), _X.transpose(_perm)), "permute moves the axes as asked"
_G = check_rng.integers(-9, 10, _X.transpose(_perm).shape).astype(np.float32)
assert np.array_equal(_p._ctx.backward(_G), _G.transpose(np.argsort(_perm))), "the gradient of a permute goes back through the inverse permutation"
_G = check_rng.integers(-9, 10, _X.T.shape).astype(np.float32)
assert np.array_equal(_x.T.numpy(), _X.T) and np.array_equal(_x.T._ctx.backward(_G), _G.T), "the gradient of x.T is transposed back"
_at = int(check_rng.integers(4))
assert (_x.unsqueeze(_at).shape, _x.unsqueeze(_at).squeeze(_at).shape) == (np.expand_dims(_X, _at).shape, _shape), (
    "unsqueeze and squeeze add and remove an axis of size 1")
_one = int(check_rng.integers(3))
_small = tuple(1 if i == _one else n for i, n in enumerate(_shape))
_E = check_rng.integers(-9, 10, _small).astype(np.float32)
_to = (int(check_rng.integers(2, 4)),) + _shape
_e = Tensor(_E, requires_grad=True).expand(*_to)
assert np.array_equal(_e.numpy(), np.broadcast_to(_E, _to)), "expand repeats along the axes of size 1 and adds leading axes"
_G = check_rng.integers(-9, 10, _to).astype(np.float32)
assert np.array_equal(_e._ctx.backward(_G), _G), "the backward of Expand returns the gradient unchanged (the engine sums it back)"
try:
    _x.reshape(_s2 + 1, _s0 * _s1)
    raise AssertionError("a shape with another number of elements must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _close_text(_said, (str(_shape), f"{_size} elements")), (
    "the reshape error names the input's shape and its number of elements")
_bump = int(check_rng.integers(3))
try:
    _x.expand(*(n + 1 if i == _bump else n for i, n in enumerate(_shape)))
    raise AssertionError("a shape that expand cannot reach must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _close_text(_said, (str(_shape),)), "the expand error names the input's shape"
### END HIDDEN TESTS

# %% [markdown]
# `GetItem` picks with NumPy's indexing (`index` arrives with tensors and
# lists already turned into arrays). Its backward puts the gradient into a
# zero array of the input's shape and dtype, at the places that were picked.
#
# Indexing with an integer array may pick the same element twice
# (`x[[0, 0]]`); its gradient must then be the *sum* of both picks. Plain
# assignment `g[index] = grad` keeps only the last one: where
# `_has_integer_array(index)` says an index can repeat, use
# `_scatter_add(target, index, values)`, which adds repeats up (on the CPU
# and on the GPU). Both are given.
#
# An index that does not fit is a `ShapeError` (NumPy raises an
# `IndexError`): `getitem: index 5 does not fit shape (2, 3): ...`.

# %%
#| export
def _has_integer_array(index: Any) -> bool:
    """True when an index can select the same element more than once."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(hasattr(p, "dtype") and p.dtype.kind in "iu" and p.ndim > 0 for p in parts)


def _scatter_add(target: Any, index: Any, values: Any) -> None:
    """``target[index] += values``, adding up repeated indices (NumPy or CuPy)."""
    if isinstance(target, np.ndarray) and _indexes_rows(target, index):
        # rows picked by one integer array (an embedding's lookup): one index per number, in the same
        # order, so the same additions in the same order, through NumPy's 1-D add.at, ~3x faster
        rows = index.reshape(-1).astype(np.intp)
        rows[rows < 0] += target.shape[0]
        width = target[0].size
        numbers = (rows[:, None] * width + np.arange(width)).reshape(-1)
        np.add.at(target.reshape(-1), numbers, np.broadcast_to(values, index.shape + target.shape[1:]).reshape(-1))
    elif isinstance(target, np.ndarray):
        np.add.at(target, index, values)
    else:
        import cupyx

        cupyx.scatter_add(target, index, values)


def _indexes_rows(target: Any, index: Any) -> bool:
    """True when ``index`` is one integer array picking rows of a contiguous ``target``."""
    return (isinstance(index, np.ndarray) and index.dtype.kind in "iu" and index.size > 0
            and target.ndim > 0 and target.flags.c_contiguous)


# %% [markdown]
# ### Task `tensor_indexing` (1 point): `x[index]`
#
# Write `GetItem` as described above: forward picks, backward puts the
# gradient back where the picks came from.
#
# **Checked when graded** (besides the tests below), on a 3-d float32 tensor
# whose sizes (all different), values, indices (repeats built in) and output
# gradients are drawn for you:
#
# * integers (negative ones too) and slices pick like NumPy
# * the gradient goes back to the picked places, zeros elsewhere
# * x[i, j, k] is a 0-d tensor
# * a bool mask picks the elements where it is true
# * the gradient of a bool mask goes back to the places where it is true
# * repeated picks add up
# * repeated picks along the last axis add up too
# * the gradient of an index must keep the input's dtype
# * an index past the end must raise a ShapeError
# * the error names getitem and the shape

# %% nbgrader={"grade": false, "grade_id": "tensor_indexing_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class GetItem(Function):
    def forward(self, a, index):
        ### BEGIN SOLUTION
        self.shape, self.dtype, self.index = a.shape, a.dtype, index
        try:
            return a[index]
        except IndexError as err:
            raise ShapeError(f"getitem: index {index!r} does not fit shape {tuple(a.shape)}: {err}") from None
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        full = self.xp.zeros(self.shape, self.dtype)
        if _has_integer_array(self.index):
            _scatter_add(full, self.index, grad)
        else:
            full[self.index] = grad
        return full
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_indexing", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.arange(6, dtype=np.float32).reshape(2, 3)
x = Tensor(X, requires_grad=True)
assert _close(x[1].data, [3, 4, 5]) and _close(x[:, 1:].data, X[:, 1:]), "x[1] and x[:, 1:] pick like NumPy"
assert _close(x[1]._ctx.backward(np.array([1.0, 2.0, 3.0], np.float32)), [[0, 0, 0], [1, 2, 3]]), "the gradient goes back to the picked row, zeros elsewhere"
picked = x[np.array([0, 0, 1])]
assert _close(picked._ctx.backward(np.ones((3, 3), np.float32)), [[2, 2, 2], [1, 1, 1]]), "repeated picks add up"
### BEGIN HIDDEN TESTS
# This student's own tensor: three different sizes from 2 to 5, whole numbers, indices and gradients
# drawn; the integer-array indices hold more picks than the axis has places, so some place repeats.
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:3])
_s0, _s1, _s2 = _shape
_X = check_rng.integers(-9, 10, _shape).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
_lo = int(check_rng.integers(0, _s1 - 1))
_index = (int(check_rng.integers(_s0)), slice(_lo, int(check_rng.integers(_lo + 1, _s1 + 1))), int(check_rng.integers(-_s2, 0)))
_picked = _x[_index]
assert np.array_equal(_picked.numpy(), _X[_index]), "integers (negative ones too) and slices pick like NumPy"
_G = check_rng.integers(1, 10, _X[_index].shape).astype(np.float32)
_full = np.zeros_like(_X)
_full[_index] = _G
assert np.array_equal(_picked._ctx.backward(_G), _full), "the gradient goes back to the picked places, zeros elsewhere"
_at = tuple(int(v) for v in check_rng.integers(0, _shape))
assert _x[_at].shape == () and np.array_equal(_x[_at].numpy(), _X[_at]), "x[i, j, k] is a 0-d tensor"
_mask = check_rng.permutation(np.resize([True, False], _X.size)).reshape(_shape)
_masked = _x[Tensor(_mask)]
assert np.array_equal(_masked.numpy(), _X[_mask]), "a bool mask picks the elements where it is true"
_G = check_rng.integers(1, 10, int(_mask.sum())).astype(np.float32)
_full = np.zeros_like(_X)
_full[_mask] = _G
assert np.array_equal(_masked._ctx.backward(_G), _full), "the gradient of a bool mask goes back to the places where it is true"
_rows = check_rng.integers(0, _s0, _s0 + 2)
_G = check_rng.integers(1, 10, (_s0 + 2, _s1, _s2)).astype(np.float32)
_full = np.zeros_like(_X)
np.add.at(_full, _rows, _G)
assert np.array_equal(_x[_rows]._ctx.backward(_G), _full), "repeated picks add up"
_cols = check_rng.integers(0, _s2, _s2 + 2)
_G = check_rng.integers(1, 10, (_s0, _s1, _s2 + 2)).astype(np.float32)
_full = np.zeros_like(_X)
np.add.at(_full, (slice(None), slice(None), _cols), _G)
assert np.array_equal(_x[:, :, _cols]._ctx.backward(_G), _full), "repeated picks along the last axis add up too"
_G = check_rng.integers(1, 10, _X[_index].shape).astype(np.float32)
assert _x[_index]._ctx.backward(_G).dtype == float32, "the gradient of an index must keep the input's dtype"
_past = _s0 + int(check_rng.integers(0, 3))
try:
    _x[_past]
    raise AssertionError("an index past the end must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert _close_text(_said, ("getitem", str(_shape))), "the error names getitem and the shape"
### END HIDDEN TESTS

# %% [markdown]
# `cat(tensors, axis)` joins tensors along an existing axis, `stack(tensors,
# axis)` along a new one. Both are given: they check the list (one device,
# fitting shapes, one dtype) and call `Cat.apply(*tensors, axis=axis)` or
# `Stack.apply(...)` with a non-negative `axis`. `Cat`'s backward cuts the
# gradient back into pieces the sizes of the inputs (remember where each one
# ended along `axis`); `Stack`'s gives each input its slice along the new
# axis.

# %%
#| export
def _same_device_and_dtype(tensors: Sequence[Tensor], op: str, axis: Any) -> list[Tensor]:
    """The tensors of a list-taking op, brought to one dtype; one device required; ``axis`` an integer."""
    if not isinstance(tensors, Sequence) or isinstance(tensors, str):
        raise TypeError(f"{op}: tensors must be a list or tuple of tensors; got {described(tensors)}")
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list or tuple of tensors; got {described(tensors)}")
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise ShapeError(f"{op}: axis must be an integer; got {brief(axis)}")
    tensors = [t if isinstance(t, Tensor) else _item_tensor(t, op, i) for i, t in enumerate(tensors)]
    devices = {t._device for t in tensors}
    if len(devices) > 1:
        raise DeviceError(f"{op}: tensors are on different devices: {sorted(map(str, devices))}")
    dtype = functools.reduce(promote_types, (t.dtype for t in tensors))
    return [t.to(dtype=dtype) for t in tensors]


def _item_tensor(data: Any, op: str, i: int) -> Tensor:
    """Item ``i`` of a list-taking op that is not a Tensor yet: an array or a list of numbers becomes one."""
    try:
        return Tensor(data)
    except TypeError:
        raise TypeError(f"{op}: tensors[{i}] must be a Tensor; got {described(data)}") from None


def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    tensors = _same_device_and_dtype(tensors, "cat", axis)
    ndim = tensors[0].ndim
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ShapeError(f"cat: axis {axis} is out of range for tensors with {ndim} axes")
    axis %= ndim
    shapes = [t.shape[:axis] + t.shape[axis + 1:] for t in tensors]
    if any(len(t.shape) != ndim for t in tensors) or len(set(shapes)) > 1:
        raise ShapeError(f"cat: shapes {[t.shape for t in tensors]} differ outside axis {axis}")
    return Cat.apply(*tensors, axis=axis)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join same-shaped tensors along a new axis."""
    tensors = _same_device_and_dtype(tensors, "stack", axis)
    if len({t.shape for t in tensors}) > 1:
        raise ShapeError(f"stack: all tensors need one shape; got {[t.shape for t in tensors]}")
    ndim = tensors[0].ndim + 1
    if not -ndim <= axis < ndim:
        raise ShapeError(f"stack: axis {axis} is out of range for the {ndim} axes of the result")
    return Stack.apply(*tensors, axis=axis % ndim)


# %% [markdown]
# ### Task `tensor_cat_stack` (1 point): `Cat` and `Stack`
#
# Write `Cat` and `Stack` as described above. Both get `axis` already
# non-negative.
#
# **Checked when graded** (besides the tests below), on three or four pieces
# whose sizes along the joined axis (all different), values, axes and output
# gradients are drawn for you:
#
# * cat joins along any axis, negative or not
# * the gradient of cat is cut back into pieces the sizes of the inputs, in order, along the joined axis
# * stack joins along a new axis at any position, negative or not
# * stack gives each input its slice of the gradient along the new axis

# %% nbgrader={"grade": false, "grade_id": "tensor_cat_stack_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Cat(Function):
    def forward(self, *arrays, axis=0):
        ### BEGIN SOLUTION
        self.axis = axis
        self.ends = np.cumsum([a.shape[axis] for a in arrays])[:-1]
        return self.xp.concatenate(arrays, axis=axis)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return tuple(self.xp.split(grad, self.ends, axis=self.axis))
        ### END SOLUTION


class Stack(Function):
    def forward(self, *arrays, axis=0):
        ### BEGIN SOLUTION
        self.axis = axis
        return self.xp.stack(arrays, axis=axis)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return tuple(self.xp.moveaxis(grad, self.axis, 0))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_cat_stack", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.arange(6, dtype=np.float32).reshape(2, 3)
x = Tensor(X, requires_grad=True)
c = cat([x, Tensor(2 * X, requires_grad=True)], axis=0)
assert c.shape == (4, 3) and _close(c.data, np.concatenate([X, 2 * X])), "cat joins along an existing axis"
g1, g2 = c._ctx.backward(np.arange(12, dtype=np.float32).reshape(4, 3))
assert _close(g1, np.arange(6).reshape(2, 3)) and _close(g2, np.arange(6, 12).reshape(2, 3)), "the gradient of cat is cut back into the pieces"
zero = Tensor(np.zeros((2, 3), np.float32), requires_grad=True)
s = stack([x, zero], axis=0)
assert s.shape == (2, 2, 3) and _close(s.data[0], X), "stack joins along a new axis"
### BEGIN HIDDEN TESTS
# This student's own pieces: three or four of them, of different sizes from 1 to 5 along the joined
# axis (a cut at the wrong place shows), the other sizes drawn, whole numbers; every axis is tried,
# in a drawn order, each written negative or not.
_rest = [int(v) for v in check_rng.permutation([2, 3, 4])[:2]]
_count = int(check_rng.integers(3, 5))
for _axis in (int(a) for a in check_rng.permutation(6) - 3):
    _widths = [int(w) for w in check_rng.permutation([1, 2, 3, 4, 5])[:_count]]
    _pieces = [check_rng.integers(-9, 10, _rest[:_axis % 3] + [_w] + _rest[_axis % 3:]).astype(np.float32) for _w in _widths]
    _out = cat([Tensor(p, requires_grad=True) for p in _pieces], axis=_axis)
    assert np.array_equal(_out.numpy(), np.concatenate(_pieces, axis=_axis)), "cat joins along any axis, negative or not"
    _G = check_rng.integers(-9, 10, np.concatenate(_pieces, axis=_axis).shape).astype(np.float32)
    _grads = _out._ctx.backward(_G)
    assert [g.shape for g in _grads] == [p.shape for p in _pieces], (
        "the gradient of cat is cut back into pieces the sizes of the inputs, in order, along the joined axis")
    assert [g.tolist() for g in _grads] == [p.tolist() for p in np.split(_G, np.cumsum(_widths)[:-1], axis=_axis)], (
        "the gradient of cat is cut back into pieces the sizes of the inputs, in order, along the joined axis")
for _axis in (int(a) for a in check_rng.permutation(6) - 3):
    _pieces = [check_rng.integers(-9, 10, _rest).astype(np.float32) for _ in range(_count)]
    _out = stack([Tensor(p, requires_grad=True) for p in _pieces], axis=_axis)
    assert np.array_equal(_out.numpy(), np.stack(_pieces, axis=_axis)), "stack joins along a new axis at any position, negative or not"
    _G = check_rng.integers(-9, 10, np.stack(_pieces, axis=_axis).shape).astype(np.float32)
    _grads = _out._ctx.backward(_G)
    assert [g.shape for g in _grads] == [p.shape for p in _pieces], "stack gives each input its slice of the gradient along the new axis"
    assert [g.tolist() for g in _grads] == [np.take(_G, i, axis=_axis).tolist() for i in range(_count)], (
        "stack gives each input its slice of the gradient along the new axis")
### END HIDDEN TESTS

# %% [markdown]
# ## Splitting: `unbind` (given; no task uses it)
#
# `t.unbind(axis)` returns the slices of `t` along `axis`, that axis removed,
# as PyTorch's: `q, k, v = qkv.unbind(0)`. `(t[0], t[1], t[2])` gives the same
# views, but each `GetItem`'s backward makes a zero array the size of `t` for
# its one slice, and the engine adds the three up: three full arrays and two
# full sums per step, for gradients that never overlap. `unbind`'s backward
# makes one array.
#
# Each part is a node, `UnbindPart`, that slices a private tensor which
# `Unbind`, an identity node, passes on from `t`; the parts share one `_Parts`
# record. The engine reaches every part before `Unbind` (a tensor waits for
# all its consumers). The first part allocates the array, writes its slice and
# hands the array to the engine as the private tensor's gradient; each later
# part writes its slice into that same array and returns None. `Unbind` sets
# the slices no gradient reached to 0, passes the filled array on to `t` and
# clears the record, so the next backward starts a fresh array. The array is
# laid out in memory as `t` is: when `t` is a permuted view (a model's
# `qkv.reshape(...).permute(...)`), its gradient permuted back is contiguous
# again, and the reshape's backward after it stays a view.

# %%
#| export
class _Parts:
    """What the parts of one unbind share: where each one sits, and the gradient array they fill."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, axis: int, strides: tuple[int, ...]) -> None:
        self.shape, self.dtype, self.axis = shape, dtype, axis
        self.order = sorted(range(len(shape)), key=lambda d: -abs(strides[d]))  # t's axes, outermost in memory first
        self.grad = None  # the array the current backward pass fills; None between passes
        self.filled: set[int] = set()  # the parts that wrote into it
        self.made_in = None  # the run of the engine that made it (`backward_pass`)

    def index(self, i: int) -> tuple:
        """Where part ``i`` sits: ``[:, ..., :, i]`` with ``i`` at ``axis``."""
        return (slice(None),) * self.axis + (i,)

    def empty(self, xp: Any) -> Any:
        """A gradient array, not yet written, its axes laid out in memory in the order of t's."""
        stored = xp.empty(tuple(self.shape[d] for d in self.order), self.dtype)
        if self.order == sorted(self.order):
            return stored  # t is laid out in order: the array itself, not a view of it
        return stored.transpose(tuple(int(d) for d in np.argsort(self.order)))


class Unbind(Function):
    """The identity from ``t`` to the tensor its parts slice; backward hands ``t`` the parts' one array."""

    def forward(self, a, parts):
        self.parts = parts
        return a  # the same array: no copy

    def backward(self, grad):
        parts = self.parts
        for i in set(range(parts.shape[parts.axis])) - parts.filled:
            grad[parts.index(i)] = 0  # a part no gradient reached
        parts.grad = None  # this pass is done: the next one starts a fresh array
        return grad  # the array the parts filled, as it is


class UnbindPart(Function):
    """Part ``i`` of an unbind: a view; backward writes its slice of the parts' one gradient array."""

    def forward(self, packed, parts, i):
        self.parts, self.i = parts, i
        return packed[parts.index(i)]

    def backward(self, grad):
        parts = self.parts
        # made in another run of the engine, or filled already by this part: an earlier pass broke off
        run = backward_pass()
        first = parts.grad is None or parts.made_in is not run or self.i in parts.filled
        if first:
            parts.grad, parts.filled = parts.empty(self.xp), set()
            parts.made_in = run
        parts.filled.add(self.i)
        parts.grad[parts.index(self.i)] = grad
        return parts.grad if first else None  # after the first part, the engine already holds the array


def unbind(t: Tensor, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``t`` along ``axis``, that axis removed; their backward fills one gradient array."""
    if check_tensor("unbind", "t", t).ndim == 0:
        raise ShapeError("unbind: expected a tensor with at least one axis to split along; got a 0-d tensor")
    if isinstance(axis, int | np.integer) and not -t.ndim <= axis < t.ndim:
        raise ShapeError(f"unbind: axis {axis} is out of range for shape {t.shape}; "
                         f"expected {-t.ndim} <= axis < {t.ndim}")
    axis = normalize_axis(axis, t.ndim, "unbind")  # refuses an axis that is not an integer
    parts = _Parts(t.shape, t.dtype, axis, t.data.strides)
    if not (t.requires_grad and GradMode.enabled):  # nothing to record: the views themselves
        return tuple(Tensor._wrap(t.data[parts.index(i)], t._device) for i in range(t.shape[axis]))
    packed = Unbind.apply(t, parts=parts)
    return tuple(UnbindPart.apply(packed, parts=parts, i=i) for i in range(t.shape[axis]))


# %% [markdown]
# ## Selecting
#
# Comparisons (`a < b`, `a == b`, ...) give bool tensors and no gradient —
# they are already written above with `_compare`.
#
# `where(cond, a, b)` (given) brings `a` and `b` to one dtype and device and
# calls `Where.apply(a, b, cond=mask)` with a bool mask array. `Where` picks
# from `a` where the mask is true and from `b` elsewhere, so the gradient goes
# to `a` through the mask and to `b` through its complement.

# %%
#| export
def where(cond: Any, a: Any, b: Any) -> Tensor:
    """Elementwise ``a if cond else b``, broadcasting all three."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = Tensor(a)
    a, b = _operands(a, b)
    if isinstance(cond, Tensor):
        _same_device(cond, a, "where")
        cond = cond.data
    else:
        cond = _to_array(cond, bool_, a._device)
    return Where.apply(a, b, cond=cond.astype(bool, copy=False))


# %% [markdown]
# ### Task `tensor_where` (1 point): `where`
#
# Write `Where` as described above. Multiply by the bool mask and by its
# complement (`~mask`), so that the gradients stay float32.
#
# **Checked when graded** (besides the tests below), on a condition (true
# and false both in it), values and output gradients drawn for you:
#
# * where picks from a where the condition holds, from b elsewhere
# * the gradient goes to a where the condition holds, to b elsewhere
# * the gradients of where must stay float32
# * where with a Python number for a keeps float32
# * where broadcasts the condition with a and b
# * comparisons give bool tensors, elementwise

# %% nbgrader={"grade": false, "grade_id": "tensor_where_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Where(Function):
    def forward(self, a, b, cond):
        ### BEGIN SOLUTION
        self.cond = cond
        return self.xp.where(cond, a, b)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return grad * self.cond, grad * ~self.cond
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_where", "locked": true, "points": 1, "schema_version": 3, "solution": false}
a = Tensor([1.0, -2.0, 3.0], requires_grad=True)
b = Tensor([0.0, 0.0, 0.0], requires_grad=True)
w = where(a > 0, a, b)
assert _close(w.data, [1, 0, 3]), "where picks from a where the condition holds, from b elsewhere"
ga, gb = w._ctx.backward(np.array([1.0, 2.0, 3.0], np.float32))
assert _close(ga, [1, 0, 3]) and _close(gb, [0, 2, 0]), "the gradient goes to a where the condition holds, to b elsewhere"
### BEGIN HIDDEN TESTS
# This student's own inputs: a shape of two different sizes, a condition with as many true places as
# false ones (give or take one) in a drawn order, float32 values and whole-number gradients.
_shape = tuple(int(v) for v in check_rng.permutation([2, 3, 4, 5])[:2])
_cond = check_rng.permutation(np.resize([True, False], _shape[0] * _shape[1])).reshape(_shape)
_A = check_rng.standard_normal(_shape).astype(np.float32)
_Bv = check_rng.standard_normal(_shape).astype(np.float32)
_a, _b = Tensor(_A, requires_grad=True), Tensor(_Bv, requires_grad=True)
_w = where(Tensor(_cond), _a, _b)
assert np.array_equal(_w.numpy(), np.where(_cond, _A, _Bv)), "where picks from a where the condition holds, from b elsewhere"
_G = check_rng.integers(1, 10, _shape).astype(np.float32)
_ga, _gb = _w._ctx.backward(_G)
assert np.array_equal(_ga, _G * _cond) and np.array_equal(_gb, _G * ~_cond), "the gradient goes to a where the condition holds, to b elsewhere"
assert (_ga.dtype, _gb.dtype) == (float32, float32), "the gradients of where must stay float32"
_c = float(np.round(check_rng.uniform(-5, 5), 2))
_w = where(Tensor(_cond), _c, _b)
assert _w.dtype == float32 and np.array_equal(_w.numpy(), np.where(_cond, np.float32(_c), _Bv)), "where with a Python number for a keeps float32"
_column = _cond[:, :1]
_w = where(Tensor(_column), Tensor(_A[0]), _c)
assert _w.shape == _shape and np.array_equal(_w.numpy(), np.where(_column, _A[0], np.float32(_c))), "where broadcasts the condition with a and b"
assert [(_a > _b).dtype, (_a <= _b).dtype] == [bool_, bool_] and [(_a > _b).tolist(), (_a <= _b).tolist()] == [
    (_A > _Bv).tolist(), (_A <= _Bv).tolist()], "comparisons give bool tensors, elementwise"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `tensor_clip` (1 point): `clip`
#
# `Clip` limits values to [low, high]; either may be None, for no limit on
# that side (`Tensor.clip` is given). Convert the limits to the array's dtype
# first, so that float32 stays float32 (a NumPy float64 limit would otherwise
# turn the result into float64). The gradient flows only where the value was
# within the limits — a value exactly at a limit counts as within, as in
# PyTorch.
#
# **Checked when graded** (besides the tests below), on limits, values (some
# exactly at each limit) and output gradients drawn for you:
#
# * clip(min, max) limits the values to [min, max]
# * the gradient flows where the value was within the limits, a limit itself included
# * with only a lower limit, clip raises the values below it to it
# * with only a lower limit, the gradient stops only below it
# * with only an upper limit, clip lowers the values above it to it
# * with only an upper limit, the gradient stops only above it
# * clip must keep float32, gradient included, even for NumPy float64 limits
# * clip works on integer tensors, which stay integer

# %% nbgrader={"grade": false, "grade_id": "tensor_clip_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Clip(Function):
    def forward(self, a, low=None, high=None):
        ### BEGIN SOLUTION
        low = None if low is None else a.dtype.type(low)
        high = None if high is None else a.dtype.type(high)
        self.save_for_backward(a)
        self.low, self.high = low, high
        return a.clip(low, high)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (a,) = self.saved
        inside = self.xp.ones(a.shape, dtype=bool)
        if self.low is not None:
            inside &= a >= self.low
        if self.high is not None:
            inside &= a <= self.high
        return grad * inside
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tensor_clip", "locked": true, "points": 1, "schema_version": 3, "solution": false}
a = Tensor([1.0, -2.0, 3.0, 2.0, -1.0], requires_grad=True)
g = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
c = a.clip(-1.0, 2.0)
assert _close(c.data, [1, -1, 2, 2, -1]), "clip(-1, 2) limits the values to [-1, 2]"
assert _close(c._ctx.backward(g), [1, 0, 0, 4, 5]), "the gradient flows where the value was within the limits (a limit itself counts as within)"
### BEGIN HIDDEN TESTS
# This student's own limits and values: halves, each limit itself among the values, values below,
# between and above the limits, in a drawn order, and whole-number gradients (none 0).
_low, _high = -float(check_rng.integers(1, 5)) / 2, float(check_rng.integers(1, 5)) / 2
_n = int(check_rng.integers(8, 13))
_drawn = check_rng.integers(int(2 * _low) - 4, int(2 * _high) + 5, _n - 4) / 2
_X = check_rng.permutation(np.concatenate([[_low, _high, _low - 1, _high + 1], _drawn])).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
_G = check_rng.integers(1, 10, _n).astype(np.float32)
_c = _x.clip(_low, _high)
assert np.array_equal(_c.numpy(), np.clip(_X, np.float32(_low), np.float32(_high))), "clip(min, max) limits the values to [min, max]"
assert np.array_equal(_c._ctx.backward(_G), _G * ((_X >= _low) & (_X <= _high))), (
    "the gradient flows where the value was within the limits, a limit itself included")
_c = _x.clip(min=_low)
assert np.array_equal(_c.numpy(), np.maximum(_X, np.float32(_low))), "with only a lower limit, clip raises the values below it to it"
assert np.array_equal(_c._ctx.backward(_G), _G * (_X >= _low)), "with only a lower limit, the gradient stops only below it"
_c = _x.clip(max=_high)
assert np.array_equal(_c.numpy(), np.minimum(_X, np.float32(_high))), "with only an upper limit, clip lowers the values above it to it"
assert np.array_equal(_c._ctx.backward(_G), _G * (_X <= _high)), "with only an upper limit, the gradient stops only above it"
_c = _x.clip(np.float64(_low), np.float64(_high))
assert (_c.dtype, _c._ctx.backward(_G).dtype) == (float32, float32), "clip must keep float32, gradient included, even for NumPy float64 limits"
_I = check_rng.integers(-10, 11, _n)
_lo, _hi = int(check_rng.integers(-6, -1)), int(check_rng.integers(1, 6))
assert Tensor(_I).clip(_lo, _hi).dtype == int64 and Tensor(_I).clip(_lo, _hi).tolist() == np.clip(_I, _lo, _hi).tolist(), (
    "clip works on integer tensors, which stay integer")
### END HIDDEN TESTS

# %% [markdown]
# ## Threads for the long passes (given; no task uses it: later modules' fast forms do)
#
# BLAS computes matrix products on every core. The rest of a training step —
# GELU, layer norm, attention's softmax and its many small products, the
# convolution's window copies and folds, pooling — is NumPy passes over
# memory, and NumPy runs each one on one core. It lets go of Python's lock
# inside every pass, though, so plain threads can share the work.
# `parallel(fn, size, block)` cuts `range(size)` into blocks of `block`
# items (`per_block` says how many items make about `PASS_BLOCK` numbers)
# and calls `fn(start, stop)` once per block; each thread, the
# caller's included, takes the next block nobody has taken yet, so a thread
# that is slow to wake finds the work done rather than holding it up. The
# cut never depends on how many threads there are: a block is computed the
# same way whichever thread runs it, so a result has the same bits for any
# thread count, and a sum over blocks adds one share per block, in block
# order.
#
# `tinyflo.set_num_threads(n)` sets the count (`TINYFLO_NUM_THREADS` before
# the first pass; the default is the cores this process may use). BLAS keeps
# its own threads (`OMP_NUM_THREADS`), and a BLAS call inside a block may
# start them too. A job of one block, a call made while another job runs
# (from a second thread, or from inside a block), and any GPU work all run
# in the calling thread. Waking a waiting thread takes tens of
# microseconds (hundreds, on a virtual machine whose other core was idle),
# so the fast forms cut blocks of about a hundred thousand numbers.

# %%
#| export
PASS_BLOCK = 1 << 17  # numbers per block of a threaded pass: a block's arrays stay in a core's cache


def per_block(numbers_per_item: int) -> int:
    """How many items of ``numbers_per_item`` numbers make a block of about PASS_BLOCK numbers (at least one)."""
    return max(1, PASS_BLOCK // max(numbers_per_item, 1))


def block_count(size: int, block: int) -> int:
    """How many blocks ``parallel`` cuts ``range(size)`` into: the number of shares a sum over blocks has."""
    return -(-size // block)


def _usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _thread_count(value: Any, argument: str) -> int:
    """A positive whole number of threads, or a ValueError naming ``argument``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{argument} must be a positive whole number of threads; got {value!r}")
    return int(value)


def _threads_from_environment() -> int:
    """TINYFLO_NUM_THREADS when it is set, else the cores this process may use (tinyflo.environment
    reads and checks every variable tinyflo takes)."""
    return environment.read("TINYFLO_NUM_THREADS") or _usable_cores()


class _Job:
    """One call of `parallel`: its blocks, each taken by whichever thread is free first."""

    def __init__(self, fn: Callable[[int, int], Any], size: int, block: int) -> None:
        self.fn, self.size, self.block = fn, size, block
        self.count = block_count(size, block)
        self.taken, self.finished = itertools.count(), itertools.count(1)  # next() on them is atomic
        self.all_done = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        """Take blocks and run them until none is left; after an error, the rest are only counted."""
        while (i := next(self.taken)) < self.count:
            if self.error is None:
                start = i * self.block
                try:
                    self.fn(start, min(start + self.block, self.size))
                except BaseException as err:  # the caller raises it
                    self.error = self.error or err
            if next(self.finished) == self.count:
                self.all_done.set()


class _Threads:
    """The threads that share tinyflo's CPU passes, each waiting on its own queue for jobs."""

    def __init__(self) -> None:
        self.count: int | None = None  # decided at the first pass, unless set before
        self.inboxes: list[queue.SimpleQueue] = []
        self.busy = threading.Lock()  # one job at a time; another caller meanwhile works alone

    def wanted(self) -> int:
        if self.count is None:
            self.count = _threads_from_environment()
        return self.count

    def inboxes_for(self, extra: int) -> list[queue.SimpleQueue]:
        """The queues of ``extra`` waiting threads besides the caller's, started if need be (as many as the
        system allows: the caller does the rest)."""
        while len(self.inboxes) < extra:
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            try:
                threading.Thread(target=_serve, args=(inbox,), name=f"tinyflo-pass-{len(self.inboxes) + 1}",
                                 daemon=True).start()
            except RuntimeError:  # no more threads (a process limit, or the interpreter shutting down)
                break
            self.inboxes.append(inbox)
        return self.inboxes[:extra]

    def after_fork(self) -> None:
        """A forked child has none of the parent's threads: it starts its own when it needs them."""
        self.inboxes, self.busy = [], threading.Lock()


def _serve(inbox: queue.SimpleQueue) -> None:
    """A pool thread: work on each job it is handed, for as long as the process runs."""
    while True:
        inbox.get().work()  # a job whose blocks are all taken already costs one look


_THREADS = _Threads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_THREADS.after_fork)


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for tinyflo's own passes on the CPU (results do not depend on it)."""
    _THREADS.count = _thread_count(n, "set_num_threads: n")


def get_num_threads() -> int:
    """How many threads tinyflo's CPU passes use: set_num_threads, else TINYFLO_NUM_THREADS, else the usable cores."""
    return _THREADS.wanted()


def parallel(fn: Callable[[int, int], Any], size: int, block: int, xp: Any = np) -> None:
    """``fn(start, stop)`` for each block of ``block`` items of ``range(size)``, the blocks shared among the threads.

    On a GPU (``xp`` is not NumPy) ``fn(0, size)`` runs once: each pass is then one kernel over everything.
    """
    if xp is not np:
        fn(0, size)
        return
    block = max(int(block), 1)
    threads = min(_THREADS.wanted(), block_count(size, block))
    if threads < 2 or not _THREADS.busy.acquire(blocking=False):
        for start in range(0, size, block):
            fn(start, min(start + block, size))
        return
    job = _Job(fn, size, block)
    try:
        for inbox in _THREADS.inboxes_for(threads - 1):  # fewer, or none, where threads cannot be started
            inbox.put(job)
        try:
            job.work()  # the caller works too, and takes the blocks of a thread that is slow to wake
            job.all_done.wait()  # for the blocks other threads are still running
        except BaseException as err:  # Ctrl-C while waiting: the blocks nobody has started are skipped
            job.error = job.error or err
            raise
    finally:
        _THREADS.busy.release()
    if job.error is not None:
        raise job.error


# %% [markdown]
# ## Systems corner
#
# * **Memory.** Every recorded node keeps its saved arrays alive until
#   backward has used them. For an MLP that is one activation per layer —
#   usually more memory than the weights. That is why module 02 frees the
#   graph after backward, and why `no_grad()` matters at evaluation time.
# * **Views.** `reshape`, `permute`, `expand` and basic slicing return views
#   (no copy) in NumPy and CuPy; `expand` even has stride 0. Nothing in
#   tinyflo writes into an op's output in place, which is what makes sharing
#   safe.
# * **Sync points.** On a GPU, `item()`, `numpy()` and `tolist()` wait for
#   the device to finish and copy to the host. Calling them once per batch
#   stalls the pipeline; module 08's Trainer reads the loss once per log
#   interval instead.
# * **Dtype drift.** A single float64 operand turns every later op into
#   float64 work at half the speed and twice the memory. `promote_types`
#   and `_constant` are the two places that stop it.
