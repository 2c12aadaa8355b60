"""A strict stand-in for CuPy: tinyflo's GPU code paths tested on a machine without a GPU.

With ``TINYFLO_FAKE_GPU=strict`` in the environment, ``tinyflo.core.tensor._cupy()`` returns this module's
``cupy`` namespace instead of importing CuPy, so ``cuda:0`` exists and every ``gpu``-marked test runs
(CI runs them a second time this way: tests/test_strict_gpu.py). Device arrays wrap NumPy arrays and behave
like CuPy's wherever the difference can hide a bug:

* ``np.asarray(x)`` raises CuPy's ``TypeError`` ("Implicit conversion to a NumPy array is not allowed").
* A NumPy array as an operand raises ``TypeError``, as CuPy's does; host values CuPy takes as *parameters*
  (shapes, axes, split points) pass. Operands on another device than the current one raise ``ValueError``
  (no peer access: stricter than a machine with NVLink). ``a[...] = host_array`` raises CuPy's ``ValueError``.
* Every device-to-host read (``.get()``, ``asnumpy``, ``float()``, ``int()``, ``bool()``, ``.item()``,
  ``.tolist()``, ``repr``/``str``/``format``, pickling) is counted in ``READS``; ``no_reads()`` fails a
  block that reads. Host-to-device copies (``asarray`` of host data, host index arrays, ``.set()``) are
  allowed and counted apart, in ``UPLOADS``.
* Reductions and scalar indexing give 0-d device arrays, as CuPy's do, not NumPy scalars.
* Floating-point warnings never appear (a GPU has none), so ``np.errstate`` cannot hide a missing guard.
* Only CuPy's routines exist (``ROUTINES``): a NumPy function CuPy lacks is an ``AttributeError`` here too.
* Stream capture (``Stream.begin_capture``/``end_capture``, ``Graph.launch``) behaves as CUDA's: the captured
  work does not happen (every array written during the capture is put back at its end); a launch replays each
  recorded kernel on the very arrays it was recorded with, with the host values it was given then (a random
  draw, the same numbers); a read, an upload or a synchronisation inside a capture fails it; work on another
  stream than the capturing one runs, and is not recorded.

What it cannot cover, and real-GPU tests (marker ``gpu_hardware``) do: CUDA C kernel bodies
(``ElementwiseKernel`` runs a NumPy reference registered under the kernel's name), NCCL
(``cupyx.distributed``), the memory pool (it reports 0 bytes), CuPy's random streams (other values),
cuBLAS/cuDNN numerics, asynchrony and its timing, peer access between GPUs.
"""

from __future__ import annotations

import collections
import contextlib
import math
import sys
import threading
import time
import types
from typing import Any

import numpy as np

from tinyflo import environment

READS: collections.Counter = collections.Counter()
UPLOADS: collections.Counter = collections.Counter()  # host-to-device copies, by kind (allowed, but not free)
# The device work a GPU would do, by routine: a kernel launched per call that computes (a view computes
# nothing), each array it makes (a view, or the caller's `out`, is none), and each wait for the device
# that reads no value (`synchronize()`; a read waits too). Step counts: benchmarks/bench_device_ops.py.
LAUNCHES: collections.Counter = collections.Counter()
ALLOCATIONS: collections.Counter = collections.Counter()
SYNCS: collections.Counter = collections.Counter()
_STATE = threading.local()
DEVICE_COUNT = 2  # cuda:0 and cuda:1, so the mixing checks have another device to refuse


def reads() -> int:
    """How many device-to-host reads happened since the last ``reset_reads()``."""
    return sum(READS.values())


def reset_reads() -> None:
    """Start counting reads (and uploads) from zero."""
    READS.clear()
    UPLOADS.clear()


def uploads() -> int:
    """How many host-to-device copies happened since the last ``reset_reads()``."""
    return sum(UPLOADS.values())


_counting = 0  # how many `counting()` blocks are open: the stand-in counts device work only inside one
_capture: _Capture | None = None  # the stream capture under way, if any


def _count(counter: collections.Counter, name: str) -> None:
    if _counting:
        counter[name] += 1


@contextlib.contextmanager
def counting():
    """Count device work (``counts()``) inside the block, from zero: kernels, allocations and syncs are
    counted only in such a block (every array operation would pay for it otherwise); reads and uploads always."""
    global _counting
    reset_counts()
    _counting += 1
    try:
        yield
    finally:
        _counting -= 1


def counts() -> dict[str, int]:
    """The device work since the last ``reset_counts()``: kernels launched, arrays allocated, host-to-device
    copies, device-to-host reads, and synchronisations (explicit ones and the reads, which wait too)."""
    return {"kernels": sum(LAUNCHES.values()), "allocations": sum(ALLOCATIONS.values()), "uploads": uploads(),
            "reads": reads(), "syncs": sum(SYNCS.values()) + reads()}


def reset_counts() -> None:
    """Start counting all device work (``counts()``) from zero: reads and uploads too."""
    reset_reads()
    LAUNCHES.clear()
    ALLOCATIONS.clear()
    SYNCS.clear()


def _arrays(result: Any) -> list:
    if isinstance(result, np.ndarray | np.generic):
        return [result]
    if isinstance(result, tuple | list):
        return [r for item in result for r in _arrays(item)]
    return []


def _made(name: str, result: Any, inputs: tuple = (), out: np.ndarray | None = None,
          kernel: bool | None = None, redo: Any = None) -> None:
    """Count what routine `name` did: its new arrays (not views of `inputs`, groups of its operands, nor
    `out`), and a kernel when `kernel` is True, or when it is None and the routine computed anything (a new
    array or into `out`). Inside a stream capture, record the kernel: `redo()` computes its result again
    from the same arrays. Outside a `counting()` block and a capture, nothing: the operands are not looked at."""
    if not _counting and _capture is None:
        return
    sources = [a for group in inputs for a in _arrays(list(group)) if isinstance(a, np.ndarray)]
    made = _arrays(result)
    new = [r for r in made if r is not out and not (
        isinstance(r, np.ndarray) and any(np.may_share_memory(r, a) for a in sources))]
    launched = kernel or (kernel is None and (new or any(r is out for r in made)))
    if _counting:
        if launched:
            LAUNCHES[name] += 1
        if new:
            ALLOCATIONS[name] += len(new)
    capture = _capturing()
    if launched and capture is not None:
        capture.record(name, redo, [i for i, r in enumerate(made) if any(r is n for n in new)], made)


def _zero_d(result: Any) -> Any:
    """A NumPy scalar as the 0-d array a CuPy routine gives (a buffer a replay can write into)."""
    return np.asarray(result) if isinstance(result, np.generic) else result


def _in_place(name: str, redo: Any) -> None:
    """A kernel that wrote into arrays it was given (``redo()`` writes them again)."""
    _count(LAUNCHES, name)
    capture = _capturing()
    if capture is not None:
        capture.record(name, redo, [], [])


def _journal(*operands: Any) -> None:
    """Inside a capture, keep what the arrays among ``operands`` hold before a routine may write them."""
    capture = _capturing()
    if capture is not None:
        for group in operands:
            values = group.values() if isinstance(group, dict) else group if isinstance(group, tuple | list) \
                else (group,)
            for a in _arrays(list(values)):
                if isinstance(a, np.ndarray) and a.flags.writeable:
                    capture.saved.append((a, a.copy()))


def _capturing() -> _Capture | None:
    """The capture under way when the current stream is the capturing one (work on another stream runs)."""
    if _capture is None or get_current_stream() is not _capture.stream:
        return None
    return _capture


def _refuse_in_capture(what: str) -> None:
    capture = _capturing()
    if capture is not None:
        capture.invalid = capture.invalid or what
        raise RuntimeError(f"cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing "
                           f"({what})")


class _Capture:
    """A stream capture under way: the kernels to replay, and the arrays' contents to put back at its end."""

    def __init__(self, stream: Stream) -> None:
        self.stream, self.steps, self.saved = stream, [], []
        self.invalid: str | None = None

    def record(self, name: str, redo: Any, new: list[int], made: list) -> None:
        """Kernel `name`: ``redo()`` computes its result again; the arrays at positions `new` of its result
        (`made`) are the ones it allocated, and a replay writes its new result into those very arrays."""
        if redo is None:
            raise NotImplementedError(f"strict stand-in: routine {name!r} cannot be replayed from a CUDA graph")
        targets = [(i, made[i]) for i in new]

        def replay() -> None:
            with _quiet():
                again = _arrays(_zero_d(redo()))
            for i, target in targets:
                np.copyto(target, again[i], casting="unsafe")

        self.steps.append((name, replay))


class Graph:
    """``cupy.cuda.Graph``: the kernels a stream capture recorded; ``launch`` runs them all, in order, on the
    arrays they were recorded with (one launch, as a GPU counts it)."""

    def __init__(self, steps: list) -> None:
        self._steps = steps

    def launch(self, stream: Stream | None = None) -> None:
        _count(LAUNCHES, "graph")
        for _, replay in self._steps:
            replay()

    def kernels(self) -> list[str]:
        """The recorded kernels' names, in order (the stand-in's own: CuPy's Graph has no such method)."""
        return [name for name, _ in self._steps]


class Stream:
    """``cupy.cuda.Stream``: the current stream inside its ``with`` block; it can capture a CUDA graph."""

    null: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False) -> None:
        self._legacy = null

    def __enter__(self) -> Stream:
        _STATE.__dict__.setdefault("streams", []).append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _STATE.streams.pop()

    def synchronize(self) -> None:
        _sync("stream")

    def begin_capture(self, mode: Any = None) -> None:
        global _capture
        if self._legacy:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if _capture is not None:
            raise RuntimeError("cudaErrorIllegalState: a stream is capturing already")
        _capture = _Capture(self)

    def end_capture(self) -> Graph:
        """End the capture: put back every array it wrote (its work did not happen) and give its graph."""
        global _capture
        capture = _capture
        if capture is None or capture.stream is not self:
            raise RuntimeError("cudaErrorIllegalState: this stream is not capturing")
        _capture = None
        for a, before in reversed(capture.saved):
            np.copyto(a, before)
        if capture.invalid:
            raise RuntimeError(f"cudaErrorStreamCaptureInvalidated: the capture was invalidated by {capture.invalid}")
        return Graph(capture.steps)

    def is_capturing(self) -> bool:
        return _capture is not None and _capture.stream is self

    def wait_event(self, event: Event) -> None:
        pass

    def record(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event


Stream.null = Stream(null=True)


def get_current_stream() -> Stream:
    streams = getattr(_STATE, "streams", None)
    return streams[-1] if streams else Stream.null


@contextlib.contextmanager
def no_reads():
    """Fail if the block reads anything back from a device."""
    before = READS.copy()
    yield
    extra = READS - before
    if extra:
        raise AssertionError(f"device-to-host reads inside a no-read block: {dict(extra)}")


def _read(kind: str) -> None:
    _refuse_in_capture(f"a device-to-host read ({kind})")
    READS[kind] += 1


def _upload(kind: str) -> None:
    _refuse_in_capture(f"a host-to-device copy ({kind})")
    UPLOADS[kind] += 1


def _sync(kind: str) -> None:
    _refuse_in_capture(f"a synchronisation ({kind})")
    _count(SYNCS, kind)


def _current() -> int:
    stack = getattr(_STATE, "stack", None)
    return stack[-1] if stack else 0


# --------------------------------------------------------------------------- cuda


class Device:
    def __init__(self, device: int | None = None) -> None:
        self.id = _current() if device is None else int(device)
        if not 0 <= self.id < DEVICE_COUNT:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id}")

    def __enter__(self) -> Device:
        _STATE.__dict__.setdefault("stack", []).append(self.id)
        return self

    def __exit__(self, *exc) -> None:
        _STATE.stack.pop()

    def use(self) -> None:
        stack = _STATE.__dict__.setdefault("stack", [])
        if stack:
            stack[-1] = self.id
        else:
            stack.append(self.id)

    def synchronize(self) -> None:
        """Wait for the device's work: nothing to wait for here (and not a read: no value comes back)."""
        _sync("device")

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


class Event:
    """A CUDA event: here the host clock when it is recorded (a GPU's work is not timed)."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self._at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def synchronize(self) -> None:
        _sync("event")


def get_elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds between two recorded events, as ``cupy.cuda.get_elapsed_time`` gives them."""
    if start._at is None or end._at is None:
        raise RuntimeError("cudaErrorInvalidResourceHandle: an event was not recorded")
    return (end._at - start._at) * 1000.0


class MemoryHook:
    """``cupy.cuda.MemoryHook``: registered while its ``with`` block runs; the stand-in allocates through no pool,
    so its alloc/malloc/free callbacks are never called."""

    name = "MemoryHook"

    def __enter__(self) -> MemoryHook:
        hooks = _STATE.__dict__.setdefault("memory_hooks", {})
        if self.name in hooks:
            raise RuntimeError(f"memory hook {self.name!r} already exists")
        hooks[self.name] = self
        return self

    def __exit__(self, *exc: Any) -> None:
        del _STATE.memory_hooks[self.name]

    def alloc_preprocess(self, **kwargs: Any) -> None: ...
    def alloc_postprocess(self, **kwargs: Any) -> None: ...
    def malloc_preprocess(self, **kwargs: Any) -> None: ...
    def malloc_postprocess(self, **kwargs: Any) -> None: ...
    def free_preprocess(self, **kwargs: Any) -> None: ...
    def free_postprocess(self, **kwargs: Any) -> None: ...


_PROPERTIES = {"name": b"tinyflo strict stand-in", "totalGlobalMem": 16 << 30, "major": 9, "minor": 0,
               "multiProcessorCount": 1}
cuda = types.ModuleType("cupy.cuda")
cuda.Device, cuda.Event, cuda.get_elapsed_time, cuda.MemoryHook = Device, Event, get_elapsed_time, MemoryHook
cuda.Stream, cuda.Graph, cuda.get_current_stream = Stream, Graph, get_current_stream
cuda.is_available = lambda: DEVICE_COUNT > 0
cuda.MemoryPool = lambda *args, **kwargs: _Pool()
cuda.using_allocator = lambda allocator=None: using_allocator(allocator)
cuda.runtime = types.SimpleNamespace(
    getDeviceCount=lambda: DEVICE_COUNT,
    getDeviceProperties=lambda i: dict(_PROPERTIES),
    runtimeGetVersion=lambda: 0,  # 0: no CUDA runtime (a real one reports e.g. 13000 for 13.0)
    driverGetVersion=lambda: 0,
)


# --------------------------------------------------------------------------- arrays

_METHODS = frozenset(
    "all any argmax argmin argsort astype choose clip compress conj copy cumprod cumsum diagonal dot fill "
    "flatten max mean min nonzero prod ravel repeat reshape round sort squeeze std sum swapaxes take trace "
    "transpose var view".split()
)


class ndarray:  # noqa: N801  (CuPy's name)
    """A device array: a NumPy array plus the id of the GPU it lives on."""

    __slots__ = ("_a", "_dev", "_base")
    __hash__ = None

    def __init__(self, shape=(), dtype=float, *, _a: np.ndarray | None = None, _dev: int | None = None) -> None:
        if _a is None:
            _count(ALLOCATIONS, "ndarray")
        self._a = np.empty(shape, dtype) if _a is None else _a
        self._dev = _current() if _dev is None else _dev
        self._base = None  # the array this one is a view of (CuPy's .base is that very object)

    # --- what CuPy refuses or counts
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def get(self, stream=None, order="C", out=None) -> np.ndarray:
        _read("get")
        return np.array(self._a, order=order)

    def set(self, arr: np.ndarray, stream=None) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray; got {type(arr).__name__}")
        _upload("set")
        self._a[...] = arr

    def item(self):
        _read("item")
        return self._a.item()

    def tolist(self):
        _read("tolist")
        return self._a.tolist()

    def __float__(self) -> float:
        _read("float")
        return float(self._a)

    def __int__(self) -> int:
        _read("int")
        return int(self._a)

    def __complex__(self) -> complex:
        _read("complex")
        return complex(self._a)

    def __bool__(self) -> bool:
        _read("bool")
        return bool(self._a)

    def __repr__(self) -> str:
        _read("repr")
        return repr(self._a).replace("array(", "array(", 1)

    def __str__(self) -> str:
        _read("str")
        return str(self._a)

    def __format__(self, spec: str) -> str:
        _read("format")
        return format(self._a if self._a.ndim else self._a.item(), spec)

    def __reduce__(self):
        _read("pickle")
        return (_rebuild, (np.array(self._a), self._dev))

    def __copy__(self) -> ndarray:
        a = self._a
        _made("copy", copy := a.copy(), ((a,),), redo=a.copy)
        return _wrap(copy, self._dev)

    def __deepcopy__(self, memo) -> ndarray:
        return self.__copy__()

    # --- metadata (no read)
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: _wrap_result(self._a.T, self._dev, parent=self))
    device = property(lambda self: Device(self._dev))
    base = property(lambda self: self._base)

    @shape.setter
    def shape(self, value) -> None:
        self._a.shape = value

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self):
        return (_wrap(row, self._dev) for row in self._a)

    def __getattr__(self, name: str):
        if name in _METHODS:
            method = getattr(self._a, name)

            def call(*args, **kwargs):
                params = frozenset() if name in _OPERAND_METHODS else frozenset(range(len(args)))
                args, kwargs, dev = _unwrap_all(args, kwargs, self._dev, params, check_current=False)
                _journal(self._a, args, kwargs)
                with _quiet():
                    result = _zero_d(method(*args, **kwargs))
                _made(name, result, ((self._a,), args, kwargs.values()), kwargs.get("out"),
                      kernel=True if name == "fill" or result is None else None, redo=lambda: method(*args, **kwargs))
                return _wrap_result(result, dev, parent=self)

            return call
        raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")

    def __getitem__(self, index):
        index = _unwrap_index(index, self._dev)
        a = self._a
        result = a[index]
        if isinstance(result, np.generic):  # one element: a 0-d view on a GPU, as here
            result = a[(index if isinstance(index, tuple) else (index,)) + (Ellipsis,)]
        else:  # a slice is a view; an index array gathers
            _made("getitem", result, ((a,),), redo=lambda: a[index])
        return _wrap_result(result, self._dev, parent=self)

    def __setitem__(self, index, value) -> None:
        index = _unwrap_index(index, self._dev)
        if isinstance(value, (list, tuple)):  # CuPy makes a host array of a list, then goes on as below
            value = np.asarray(value)
        if isinstance(value, np.ndarray):  # CuPy sends host values through fill(), which takes scalars only
            if value.shape != ():
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            value = value.item()
        (value,), _, _ = _unwrap_all((value,), {}, self._dev)
        a = self._a
        # CuPy copies nothing when the value is the very slice it would write: `a[i] += b` adds in place, then sets
        # a[i] to itself (only a count or a capture needs to know)
        if (_counting or _capture is not None) and _same_view(value, a[index]):
            return
        _journal(a)
        with _quiet():
            a[index] = value
        _in_place("setitem", lambda: a.__setitem__(index, value))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _Ufunc(ufunc)._apply(method, inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        return _function(func.__name__, func)(*args, **kwargs)

    # cupy.asarray / DLPack-style interchange: not provided (no host buffer is exposed)


_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "matmul": "matmul",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift",
           "rshift": "right_shift"}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
            "ge": "greater_equal"}


def _binary(ufunc_name: str, reflected: bool = False, inplace: bool = False):
    def op(self, other):
        u = _Ufunc(getattr(np, ufunc_name))
        if inplace:
            return u(self, other, out=self)
        return u(other, self) if reflected else u(self, other)

    return op


for _name, _u in _BINARY.items():
    setattr(ndarray, f"__{_name}__", _binary(_u))
    setattr(ndarray, f"__r{_name}__", _binary(_u, reflected=True))
    setattr(ndarray, f"__i{_name}__", _binary(_u, inplace=True))
for _name, _u in _COMPARE.items():
    setattr(ndarray, f"__{_name}__", _binary(_u))
for _name, _u in {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}.items():
    setattr(ndarray, f"__{_name}__", (lambda u: lambda self: _Ufunc(getattr(np, u))(self))(_u))


def _same_view(value: Any, target: Any) -> bool:
    """Whether ``value`` is an array of the same elements, in the same layout, as ``target``."""
    return (isinstance(value, np.ndarray) and isinstance(target, np.ndarray) and value.shape == target.shape
            and value.strides == target.strides
            and value.__array_interface__["data"][0] == target.__array_interface__["data"][0])


def _rebuild(host: np.ndarray, dev: int) -> ndarray:
    return _wrap(host, dev)


def _wrap(a: np.ndarray, dev: int) -> ndarray:
    return ndarray(_a=a, _dev=dev)


def _wrap_result(r: Any, dev: int, parent: ndarray | None = None) -> Any:
    if isinstance(r, np.ndarray):
        out = _wrap(r, dev)
        if parent is not None and r.base is not None and np.shares_memory(r, parent._a):
            out._base = parent._base if parent._base is not None else parent
        return out
    if isinstance(r, np.generic):  # CuPy reductions and indexing give 0-d arrays
        return _wrap(np.asarray(r), dev)
    if isinstance(r, tuple):
        return tuple(_wrap_result(x, dev, parent) for x in r)
    if isinstance(r, list):
        return [_wrap_result(x, dev, parent) for x in r]
    return r


def _quiet():
    return np.errstate(all="ignore")  # a GPU raises no floating-point warnings


def _mixing_error(a: int, b: int) -> ValueError:
    return ValueError(f"The device where the array resides ({a}) is different from the current device ({b}). "
                      "Peer access is unavailable between these devices (strict stand-in).")


def _unwrap(x: Any, devs: set[int]) -> Any:
    if isinstance(x, ndarray):
        devs.add(x._dev)
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, list | tuple):
        items = [_unwrap(i, devs) for i in x]
        return type(x)(items) if isinstance(x, tuple) else items
    return x


# Host values CuPy takes as parameters (shapes, axes, split points), not as operands: these may be NumPy arrays.
_PARAM_KWARGS = frozenset({"axis", "axes", "shape", "newshape", "indices_or_sections", "pad_width", "reps",
                           "source", "destination", "dtype", "order"})
_PARAM_ARGS = {"split": {1}, "array_split": {1}, "moveaxis": {1, 2}, "transpose": {1}, "reshape": {1},
               "broadcast_to": {1}, "pad": {1}, "tile": {1}, "expand_dims": {1}, "squeeze": {1}, "roll": {1, 2},
               "zeros": {0}, "ones": {0}, "empty": {0}, "full": {0}, "sum": {1}, "mean": {1}, "max": {1},
               "min": {1}, "as_strided": {1, 2}}
_OPERAND_METHODS = frozenset({"dot", "clip", "choose", "compress", "take"})


def _unwrap_all(args, kwargs, dev: int | None = None, params: set[int] | frozenset = frozenset(),
                check_current: bool = True):
    devs: set[int] = set() if dev is None else {dev}
    args = tuple(a if i in params and not isinstance(a, ndarray) else _unwrap(a, devs) for i, a in enumerate(args))
    kwargs = {k: v if k in _PARAM_KWARGS and not isinstance(v, ndarray) else _unwrap(v, devs)
              for k, v in kwargs.items()}
    cur = _current() if check_current else (dev if dev is not None else _current())
    for d in devs:  # every operand on the current device (methods: on self's device)
        if d != cur:
            raise _mixing_error(d, cur)
    return args, kwargs, (devs.pop() if devs else cur)


def _unwrap_index(index: Any, dev: int) -> Any:
    """Device arrays in an index must be on the array's device; host integer arrays and lists are sent over."""
    parts = index if isinstance(index, tuple) else (index,)
    out = []
    for p in parts:
        if isinstance(p, ndarray):
            if p._dev != dev:
                raise _mixing_error(p._dev, dev)
            p = p._a
        elif isinstance(p, np.ndarray | list):
            _upload("index")  # CuPy sends a host index array over before indexing
        out.append(p)
    return tuple(out) if isinstance(index, tuple) else out[0]


# --------------------------------------------------------------------------- module functions

_HOST_INPUT = frozenset({"asarray", "array", "ascontiguousarray", "asanyarray", "asfortranarray"})


class _Ufunc:
    def __init__(self, ufunc: np.ufunc) -> None:
        self._u = ufunc
        self.__name__ = ufunc.__name__
        self.nin, self.nout = ufunc.nin, ufunc.nout

    def __call__(self, *args, **kwargs):
        return self._apply("__call__", args, kwargs)

    def _apply(self, method: str, args, kwargs):
        outer = kwargs.get("out")
        if isinstance(outer, tuple) and len(outer) == 1:
            outer = kwargs["out"] = outer[0]
        args, kwargs, dev = _unwrap_all(args, kwargs)
        _journal(kwargs.get("out"), args[:1] if method == "at" else args[self.nin:])  # out, or at's operand
        routine = getattr(self._u, method)
        with _quiet():
            r = _zero_d(routine(*args, **kwargs))
        name = self.__name__ if method == "__call__" else f"{self.__name__}.{method}"
        _made(name, r, (args, kwargs.values()), outer._a if isinstance(outer, ndarray) else None, kernel=True,
              redo=lambda: routine(*args, **kwargs))
        if isinstance(outer, ndarray) and r is outer._a:  # the caller's out array, as CuPy returns it
            return outer
        return _wrap_result(r, dev)

    def __getattr__(self, name: str):
        if name in ("reduce", "accumulate", "outer", "at"):
            return lambda *a, **k: self._apply(name, a, k)
        raise AttributeError(name)


def _function(name: str, fn: Any):
    def call(*args, **kwargs):
        if name in _HOST_INPUT:
            return _asarray(fn, *args, **kwargs)
        outer, orig = kwargs.get("out"), args
        args, kwargs, dev = _unwrap_all(args, kwargs, params=_PARAM_ARGS.get(name, frozenset()))
        _journal(args, kwargs)
        with _quiet():
            r = _zero_d(fn(*args, **kwargs))
        _made(name, r, (args, kwargs.values()), outer._a if isinstance(outer, ndarray) else None,
              kernel=False if name in ("empty", "empty_like") else True if r is None else None,  # None: in place
              redo=lambda: fn(*args, **kwargs))
        if isinstance(outer, ndarray) and r is outer._a:
            return outer
        first = args and next((a for a in orig if isinstance(a, ndarray)), None)
        return _wrap_result(r, dev, parent=first)

    call.__name__ = name
    return call


def _asarray(fn, a, dtype=None, *args, **kwargs):
    if isinstance(a, ndarray):  # a copy to the current device when it lives elsewhere, as cupy.asarray does
        data = a._a if a._dev == _current() else a._a.copy()
        result = fn(data, dtype, *args, **kwargs)
        _made(fn.__name__, result, ((a._a,),) if a._dev == _current() else (),  # from another device: new
              redo=lambda: fn(a._a, dtype, *args, **kwargs))
        return _wrap(result, _current())
    _upload("asarray")  # host to device: allowed, not a read
    _count(ALLOCATIONS, "asarray")
    return _wrap(np.array(fn(a, dtype, *args, **kwargs)), _current())


def asnumpy(a: Any, stream=None, order="C", out=None) -> np.ndarray:
    if isinstance(a, ndarray):
        return a.get(order=order)
    return np.asarray(a, order=order)


class _Pool:
    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        pass


    def malloc(self, size: int) -> None:
        raise NotImplementedError("strict stand-in: arrays are NumPy's; a pool allocates nothing here")


_POOL = _Pool()


@contextlib.contextmanager
def using_allocator(allocator: Any = None):
    """``cupy.cuda.using_allocator``: here arrays are NumPy's, so the block changes nothing."""
    yield


def get_default_memory_pool() -> _Pool:
    return _POOL


# ElementwiseKernel: the CUDA C body cannot run here; a NumPy reference registered under the kernel's name runs.
KERNELS: dict[str, Any] = {}


class ElementwiseKernel:
    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel", **kwargs) -> None:
        self.in_params, self.out_params, self.operation, self.name = in_params, out_params, operation, name

    def __call__(self, *args, **kwargs):
        if self.name not in KERNELS:
            raise NotImplementedError(f"strict stand-in: no NumPy reference registered for kernel {self.name!r}")
        args, kwargs, _ = _unwrap_all(args, kwargs)
        _journal(args, kwargs)
        reference = KERNELS[self.name]
        with _quiet():
            result = reference(*args, **kwargs)
        _made(self.name, result, (args, kwargs.values()), kernel=True, redo=lambda: reference(*args, **kwargs))
        return result


def _adam_reference(amsgrad: bool):
    def step(g, lr, b1, b2, eps, wd, bc1, bc2_sqrt, decoupled, p, m, v, *vmax):
        gd, pd = g.astype(np.float64), p.astype(np.float64)
        if wd != 0:
            if decoupled:
                pd = pd * (1 - lr * wd)
            else:
                gd = gd + wd * pd
        md = b1 * m + (1 - b1) * gd
        vd = b2 * v + (1 - b2) * gd * gd
        vh = vd
        if amsgrad:
            vh = np.maximum(vmax[0], vd)
            vmax[0][...] = vh
        m[...], v[...] = md, vd
        p[...] = pd - (lr / bc1) * md / (np.sqrt(vh) / bc2_sqrt + eps)

    return step


KERNELS["tinyflo_adam"] = _adam_reference(False)
KERNELS["tinyflo_adam_amsgrad"] = _adam_reference(True)


class _RandomState:
    def __init__(self) -> None:
        self._rng = np.random.RandomState(0)

    def seed(self, seed=None) -> None:
        self._rng.seed(seed)

    def __getattr__(self, name: str):
        fn = getattr(self._rng, name)
        floating = name in ("random_sample", "random", "rand", "standard_normal", "randn", "uniform", "normal")

        def call(*args, **kwargs):
            dtype = kwargs.pop("dtype", None)
            if floating and name in ("random_sample", "random", "standard_normal") and len(args) > 1:
                args, dtype = args[:1], args[1]  # cupy.random.standard_normal(size, dtype)
            out = np.asarray(fn(*args, **kwargs))
            out = out.astype(dtype, copy=False) if dtype is not None else out
            drawn = out.copy() if _capture is not None else None  # a launch draws the same numbers again, as
            _made(f"random.{name}", out, redo=lambda: drawn)  # cuRAND's captured kernel does
            return _wrap(out, _current())

        return call


random = _RandomState()


# CuPy's routines and constants (its API reference, CuPy 13 and 14): the names the stand-in serves. A NumPy
# function outside this list is an AttributeError, as `cupy.<name>` is on a real GPU.
ROUTINES = frozenset("""
    empty empty_like eye full full_like identity ones ones_like zeros zeros_like array asarray asanyarray
    ascontiguousarray asfortranarray copy frombuffer fromfile arange linspace logspace meshgrid mgrid ogrid diag
    diagflat tri tril triu vander
    copyto shape ravel reshape moveaxis rollaxis swapaxes transpose atleast_1d atleast_2d atleast_3d broadcast
    broadcast_arrays broadcast_to expand_dims squeeze column_stack concatenate dstack hstack stack vstack
    require array_split dsplit hsplit split vsplit repeat tile append resize unique trim_zeros flip fliplr flipud
    roll rot90 pad
    bitwise_and bitwise_or bitwise_xor bitwise_not invert left_shift right_shift packbits unpackbits
    can_cast common_type result_type min_scalar_type promote_types dtype finfo iinfo issubdtype
    indices ix_ ravel_multi_index unravel_index choose compress diagonal extract select take take_along_axis
    place put putmask fill_diagonal nonzero flatnonzero where argwhere tril_indices triu_indices diag_indices
    save savez load array_repr array_str
    dot vdot inner outer matmul tensordot einsum kron trace
    all any isfinite isinf isnan isclose allclose array_equal array_equiv logical_and logical_or logical_not
    logical_xor greater greater_equal less less_equal equal not_equal isscalar iscomplex isreal signbit
    sin cos tan arcsin arccos arctan hypot arctan2 degrees radians deg2rad rad2deg unwrap sinh cosh tanh
    arcsinh arccosh arctanh around round rint fix floor ceil trunc prod sum cumprod cumsum nansum nanprod
    nancumsum nancumprod diff gradient cross exp expm1 exp2 log log10 log2 log1p logaddexp logaddexp2 i0 sinc
    copysign frexp ldexp nextafter add reciprocal positive negative multiply divide power subtract true_divide
    floor_divide fmod mod modf remainder divmod convolve clip sqrt cbrt square absolute abs fabs sign maximum
    minimum fmax fmin nan_to_num interp heaviside float_power
    sort argsort lexsort partition argpartition argmax nanargmax argmin nanargmin count_nonzero searchsorted
    amin amax max min nanmin nanmax ptp percentile quantile median average mean std var nanmean nanstd nanvar
    nanmedian corrcoef cov histogram bincount digitize
    shares_memory may_share_memory
    e pi inf nan newaxis euler_gamma
    bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128 intp
    uintp byte short intc int_ longlong ubyte ushort uintc uint ulonglong half single double csingle cdouble
    generic number integer signedinteger unsignedinteger inexact floating complexfloating
""".split())


def _module_getattr(name: str):
    if name not in ROUTINES:
        raise AttributeError(f"module 'cupy' has no attribute {name!r} (the strict stand-in serves CuPy's "
                             "routines only: see tinyflo.strict_gpu.ROUTINES)")
    value = getattr(np, name)
    if isinstance(value, type) or not callable(value):  # dtypes, scalar types, finfo/iinfo, inf, newaxis
        return value
    if isinstance(value, np.ufunc):
        return _Ufunc(value)
    return _function(name, value)


class _Namespace(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _module_getattr(name)
        setattr(self, name, value)
        return value


def _linalg() -> types.ModuleType:
    mod = types.ModuleType("cupy.linalg")
    for name in ("norm", "qr", "svd", "inv", "pinv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh",
                 "matrix_power", "matrix_rank", "lstsq", "tensorinv", "tensorsolve"):
        setattr(mod, name, _function(name, getattr(np.linalg, name)))
    return mod


def _erf(x: ndarray) -> ndarray:
    """``cupyx.scipy.special.erf``: the error function, elementwise, in the input's floating dtype."""
    (a,), _, dev = _unwrap_all((x,), {})
    dtype = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)

    def erf() -> np.ndarray:
        return np.vectorize(math.erf, otypes=[np.float64])(a).astype(dtype, copy=False)

    result = erf()
    _made("erf", result, kernel=True, redo=erf)
    return _wrap(result, dev)


def _scatter_add(a: ndarray, slices: Any, value: Any) -> None:
    """``cupyx.scatter_add``: ``a[slices] += value`` with repeated indices adding up (``np.add.at``)."""
    (value,), _, _ = _unwrap_all((value,), {}, a._dev)
    target, index = a._a, _unwrap_index(slices, a._dev)
    _journal(target)
    with _quiet():
        np.add.at(target, index, value)
    _in_place("scatter_add", lambda: np.add.at(target, index, value))


def _build() -> dict[str, types.ModuleType]:
    cupy = _Namespace("cupy")
    cupy.__version__ = "0.0+strict"
    cupy.ndarray, cupy.cuda, cupy.random, cupy.asnumpy = ndarray, cuda, random, asnumpy
    cupy.get_default_memory_pool, cupy.ElementwiseKernel = get_default_memory_pool, ElementwiseKernel
    cupy.linalg = _linalg()
    cupy.lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(
        as_strided=_function("as_strided", np.lib.stride_tricks.as_strided)))
    ndarray.__module__ = "cupy"
    special = types.ModuleType("cupyx.scipy.special")
    special.erf = _erf
    scipy = types.ModuleType("cupyx.scipy")
    scipy.special = special
    cupyx = types.ModuleType("cupyx")
    cupyx.scatter_add, cupyx.scipy = _scatter_add, scipy
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.linalg": cupy.linalg, "cupyx": cupyx, "cupyx.scipy": scipy,
            "cupyx.scipy.special": special}


def install() -> types.ModuleType:
    """Make ``import cupy`` (and ``cupyx``) give the stand-in from now on in this process; return it."""
    if isinstance(sys.modules.get("cupy"), _Namespace):
        return sys.modules["cupy"]
    modules = _build()
    sys.modules.update(modules)
    return modules["cupy"]


def active() -> bool:
    """Whether ``TINYFLO_FAKE_GPU=strict`` asks for the stand-in (tinyflo's ``_cupy()`` then installs it)."""
    return environment.read("TINYFLO_FAKE_GPU") == "strict"
