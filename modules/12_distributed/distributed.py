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
# # Module 12 — Distributed
#
# One GPU trains one batch at a time. N of them can train N times as many
# samples per step — if they agree, after every step, on what the model is.
# *Data parallelism* keeps one full copy of the model per worker (a *rank*),
# gives each rank a different slice of the batch, and averages the gradients
# before every optimizer step, so that every copy takes the same step.
#
# The only new primitive is a **collective**: an operation every rank calls
# together. Three are enough for this module:
#
# | collective | what every rank has afterwards |
# |---|---|
# | `all_reduce(arrays, op="sum")` | the element-wise sum (or average) of everyone's array |
# | `broadcast(arrays, root=0)` | rank `root`'s array |
# | `barrier()` | nothing — but nobody leaves before everyone arrived |
#
# A `ProcessGroup` offers them over three engines: `local` (N ranks inside
# this one process, on N virtual devices — what this notebook uses), `mpi`
# (one process per rank, talking through MPI) and `nccl` (one process per
# GPU, talking through NVIDIA's NCCL). The training code above them is the
# same for all three.
#
# | task | points | what |
# |---|---|---|
# | `distributed_reduce_scatter` | 2 | the ring's first phase: one chunk per step between neighbours, added up |
# | `distributed_ring_all_reduce` | 1 | the ring's second phase, the all-gather, and the whole all-reduce |
# | `distributed_shard_bounds` | 1 | a contiguous shard of the batch per rank |
# | `distributed_data_parallel` | 2 | all-reduce every gradient, weighted by shard size, as one flat buffer |
# | `distributed_local_sgd` | 2 | average the replicas' parameters, weighted by the samples each has seen |
# | `distributed_el_che` | 2 | ranks of unequal speed: how many local steps each takes between averages |

# %%
#| default_exp core.distributed

# %%
#| export
from __future__ import annotations

import atexit
import contextlib
import copy
import math
import numbers
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from tinyflo.core.autograd import no_grad
from tinyflo.core.layers import check_arg
from tinyflo.core.tensor import (
    Device,
    DeviceError,
    ShapeError,
    Tensor,
    as_device,
    brief,
    cuda_is_available,
    device_of,
    is_array,
    is_floating,
    to_host,
)
from tinyflo.core.training import Strategy, register_plugin

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.distributed: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.distributed"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %% [markdown]
# ## One interface for every engine
#
# A process drives either **one** rank (`mpi`, `nccl`: as many processes as
# ranks, each on its own device) or **all** of them (`local`: one process
# holds every rank's copy). A group says which with `local_ranks`, the ranks
# this process drives, and `devices`, one per local rank. Every collective
# takes one array per local rank, in that order, and works **in place** — the
# way MPI and NCCL do, so no buffer is allocated per step.
#
# The checks below run before any engine sees the arrays: a wrong op, the
# wrong number of arrays, arrays whose shapes or dtypes differ, or an array
# on another rank's device is an error that says which — a collective that
# silently reduced the wrong buffer would be found only as a model that does
# not learn.

# %%
#| export
class ProcessGroup:
    """Ranks that call collectives together: ``all_reduce``, ``broadcast``, ``barrier`` (in place)."""

    backend = "none"

    def __init__(self, rank: int, world_size: int, local_ranks: Sequence[int], devices: Sequence[Device]) -> None:
        self.rank, self.world_size = rank, world_size
        self.local_ranks = list(local_ranks)
        self.devices = list(devices)
        # bytes each local rank has sent in collectives: measured by `local`, the ring's figure for the others
        self.bytes_sent = [0] * len(self.local_ranks)

    def __repr__(self) -> str:
        return (f"ProcessGroup(backend={self.backend!r}, rank={self.rank}, world_size={self.world_size}, "
                f"devices={self.devices})")

    @property
    def is_main(self) -> bool:
        """True in the process that drives rank 0 (the one that prints and saves)."""
        return 0 in self.local_ranks

    def all_reduce(self, arrays: Any, op: str = "sum") -> None:
        """Replace every rank's array by the element-wise sum (``op='avg'``: mean) over all ranks."""
        if op not in ("sum", "avg"):
            raise ValueError(f"all_reduce: op must be 'sum' or 'avg'; got {brief(op)}")
        arrays = self._arrays(arrays, "all_reduce")
        if op == "avg" and not is_floating(arrays[0].dtype):
            raise TypeError(f"all_reduce: op='avg' needs floating arrays; got {arrays[0].dtype} (use op='sum')")
        self._all_reduce_sum(arrays)
        if op == "avg":
            for a in arrays:
                a /= a.dtype.type(self.world_size)

    def broadcast(self, arrays: Any, root: int = 0) -> None:
        """Overwrite every rank's array with rank ``root``'s."""
        if not isinstance(root, int | np.integer) or not 0 <= root < self.world_size:
            raise ValueError(f"broadcast: root must be a rank in 0..{self.world_size - 1}; got {brief(root)}")
        self._broadcast(self._arrays(arrays, "broadcast"), int(root))

    def barrier(self) -> None:
        """Wait until every rank has called ``barrier``."""

    def data_parallel(self, model: Any, optimizer: Any = None, local_sgd: Any = None) -> Any:
        """``DataParallel(model, self, optimizer, local_sgd)``: what ``Trainer(group=...)`` builds."""
        return DataParallel(model, self, optimizer, local_sgd=local_sgd)

    def _arrays(self, arrays: Any, op: str) -> list[Any]:
        """The raw arrays of ``arrays`` (one per local rank), checked."""
        n = len(self.local_ranks)
        if isinstance(arrays, Tensor) or hasattr(arrays, "__array_interface__") or hasattr(arrays, "__cuda_array_interface__"):
            if n != 1:
                raise ValueError(f"{op}: this process drives {n} ranks ({self.local_ranks}); pass a list of "
                                 f"{n} arrays, one per rank; got a single array")
            arrays = [arrays]
        if not isinstance(arrays, list | tuple) or len(arrays) != n:
            got = f"{len(arrays)} arrays" if isinstance(arrays, list | tuple) else type(arrays).__name__
            raise ValueError(f"{op}: expected one array per local rank ({n}: ranks {self.local_ranks}); got {got}")
        raw = []
        for i, (a, dev) in enumerate(zip(arrays, self.devices)):
            if isinstance(a, Tensor):
                if a.device is not dev:
                    raise DeviceError(f"{op}: the tensor for rank {self.local_ranks[i]} is on {a.device}; "
                                      f"that rank's device is {dev}")
                a = a.data
            if not is_array(a):
                raise TypeError(f"{op}: rank {self.local_ranks[i]}'s array must be a NumPy/CuPy array or a Tensor; "
                                f"got {type(a).__name__}")
            held = device_of(a)
            if held.type != dev.type or (dev.type == "cuda" and held.index != dev.index):
                raise DeviceError(f"{op}: the array for rank {self.local_ranks[i]} lives on {held}; "
                                  f"that rank's device is {dev}")
            if raw and a.shape != raw[0].shape:
                raise ShapeError(f"{op}: rank {self.local_ranks[i]}'s array has shape {a.shape}, "
                                 f"rank {self.local_ranks[0]}'s {raw[0].shape}; every rank needs the same shape")
            if raw and a.dtype != raw[0].dtype:
                raise TypeError(f"{op}: rank {self.local_ranks[i]}'s array is {a.dtype}, "
                                f"rank {self.local_ranks[0]}'s {raw[0].dtype}; every rank needs the same dtype")
            raw.append(a)
        return raw

    def _all_reduce_sum(self, arrays: list[Any]) -> None:
        raise NotImplementedError

    def _broadcast(self, arrays: list[Any], root: int) -> None:
        raise NotImplementedError

    def _count_ring(self, nbytes: int) -> None:
        """Add what a ring all-reduce sends per rank, 2(N-1)/N of the buffer, to ``bytes_sent``."""
        n = self.world_size
        self.bytes_sent[0] += 2 * (n - 1) * nbytes // n


def transfer(array: Any, device: Device) -> Any:
    """A copy of ``array`` on ``device``: what one rank receives when a neighbour sends it."""
    if device.type == "cpu":
        return to_host(array, copy=True)
    with device:  # CuPy copies to the current device, across GPUs too
        return device.xp.asarray(array) if isinstance(array, np.ndarray) else array.copy()


# %% [markdown]
# ## The ring all-reduce
#
# The obvious all-reduce sends every rank's buffer to rank 0, which adds them
# up and sends the sum back: rank 0 receives (N−1)·S bytes and sends
# (N−1)·S, so its link carries 2(N−1)·S bytes while every other link idles.
# Its time grows with N.
#
# The **ring** puts the ranks in a circle, rank r sending only to rank r+1,
# and cuts every buffer into N chunks (chunk c is `buf[c·S/N : (c+1)·S/N]`,
# with integer division, so sizes that do not divide by N — or are smaller than
# N — work too):
#
# 1. **reduce-scatter**, N−1 steps: in step s, every rank r sends its chunk
#    `(r − s) mod N` to rank r+1, which **adds** it to its own copy of that
#    chunk. Each chunk travels once around the ring picking up every rank's
#    contribution; afterwards rank r holds the complete sum of chunk `(r + 1) mod N`.
# 2. **all-gather**, N−1 steps: in step s, every rank r sends chunk
#    `(r + 1 − s) mod N` to rank r+1, which **overwrites** its copy with it. The
#    finished chunks travel around the ring once more; afterwards every rank
#    holds every finished chunk — the same bytes everywhere.
#
# In every step all N ranks send one chunk at once, each over its own link.
# Each rank sends 2(N−1) chunks of S/N: **2(N−1)/N · S bytes**, less than
# 2·S however many ranks there are. That is why NCCL and MPI use it (or a
# tree with the same volume) for large buffers.
#
# The edges of the chunks are given: chunk c of a buffer of S elements is
# `buf[bounds[c]:bounds[c + 1]]` with `bounds = _chunk_bounds(S, N)`.

# %%
#| export
def _chunk_bounds(size: int, n: int) -> list[int]:
    """The n + 1 edges of a ring's chunks: chunk c of ``size`` elements is ``[bounds[c], bounds[c + 1])``."""
    return [size * c // n for c in range(n + 1)]


# %% [markdown]
# ### Task `distributed_reduce_scatter` (2 points): phase 1, the sums
#
# Write `ring_reduce_scatter(buffers, devices)`: `buffers` is one flat (1-D)
# array per rank, all the same size and dtype, rank r's on `devices[r]`. Do
# the N−1 steps of the reduce-scatter in place, moving chunks with
# `transfer(chunk, device)` (the receiving rank's device), and return how
# many bytes each rank sent (a list of ints: the `nbytes` of the chunks it
# sent). Within a step, take every rank's outgoing chunk **before** any rank
# adds what it received, as if all sends happened at once. Afterwards rank r
# holds the complete sum of chunk (r + 1) mod N; its other chunks hold
# partial sums, which the all-gather will overwrite. One rank has nothing to
# send.
#
# **Checked when graded** (besides the tests below), on float32 buffers of
# your own drawn values and on rings of any size: 3 to 6 ranks with chunks of
# unequal sizes, 3 to 6 ranks with a buffer smaller than the ring, and 2 ranks
# with an odd size (sums compared to within 1e-5):
#
# * the buffers keep their dtype (float32)
# * rank r must hold the full sum of chunk (r + 1) mod N
# * each rank sends every chunk but the one it finishes: the buffer's bytes less that chunk's
# * one rank: nothing to send
# * one rank: nothing changes

# %% nbgrader={"grade": false, "grade_id": "distributed_reduce_scatter_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def ring_reduce_scatter(buffers: list[Any], devices: list[Device]) -> list[int]:
    """Phase 1 of the ring, in place: rank r ends with the full sum of chunk (r + 1) mod N; the bytes each rank sent."""
    ### BEGIN SOLUTION
    n = len(buffers)
    bounds = _chunk_bounds(buffers[0].size, n)
    sent = [0] * n
    for s in range(n - 1):
        chunks = [(r - s) % n for r in range(n)]  # the chunk rank r sends in step s
        messages = [transfer(buffers[r][bounds[c]:bounds[c + 1]], devices[(r + 1) % n]) for r, c in enumerate(chunks)]
        for r, (c, message) in enumerate(zip(chunks, messages)):
            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] += message
            sent[r] += message.nbytes
    return sent
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_reduce_scatter", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_devs = [as_device(f"cpu:{r}") for r in range(4)]
_bufs = [np.arange(8, dtype=np.float64) * (r + 1) for r in range(4)]
_sent = ring_reduce_scatter(_bufs, _devs)
for _r in range(4):
    _c = (_r + 1) % 4
    assert np.array_equal(_bufs[_r][2 * _c:2 * _c + 2], np.arange(8)[2 * _c:2 * _c + 2] * 10.0), (
        f"after the reduce-scatter, rank {_r} must hold the full sum of chunk {_c}")
assert _sent == [3 * 16] * 4, f"each rank sends 3 chunks of 2 float64 numbers (48 bytes); got {_sent}"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: three rings (uneven chunks; a buffer smaller than
# the ring; two ranks and an odd size), their float32 buffers, and one rank's buffer.
_uneven, _small = int(check_rng.integers(3, 7)), int(check_rng.integers(3, 7))
_cases = [(_uneven, _uneven * int(check_rng.integers(1, 4)) + int(check_rng.integers(1, _uneven))),
          (_small, int(check_rng.integers(1, _small))), (2, 2 * int(check_rng.integers(1, 6)) + 1)]
for _n, _size in _cases:
    _bufs = [check_rng.standard_normal(_size).astype(np.float32) for _ in range(_n)]
    _want = np.sum([b.astype(np.float64) for b in _bufs], axis=0)
    _bounds = [_size * c // _n for c in range(_n + 1)]
    _finished = [slice(_bounds[(r + 1) % _n], _bounds[(r + 1) % _n + 1]) for r in range(_n)]  # rank r's chunk (r + 1) mod N
    _sent = ring_reduce_scatter(_bufs, [as_device(f"cpu:{r}") for r in range(_n)])
    assert [str(b.dtype) for b in _bufs] == ["float32"] * _n, "the buffers keep their dtype (float32)"
    assert np.allclose(np.concatenate([_bufs[r][_finished[r]] for r in range(_n)]),
                       np.concatenate([_want[_finished[r]] for r in range(_n)]), rtol=1e-5, atol=1e-5), (
        "rank r must hold the full sum of chunk (r + 1) mod N")
    assert _sent == [4 * (_size - (_finished[r].stop - _finished[r].start)) for r in range(_n)], (
        "each rank sends every chunk but the one it finishes: the buffer's bytes less that chunk's")
_one = check_rng.standard_normal(int(check_rng.integers(1, 9)))
_kept = _one.copy()
assert ring_reduce_scatter([_one], [as_device("cpu")]) == [0], "one rank: nothing to send"
assert np.array_equal(_one, _kept), "one rank: nothing changes"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `distributed_ring_all_reduce` (1 point): phase 2, and the whole ring
#
# Write `ring_all_gather(buffers, devices)`: the all-gather, in place, on
# buffers where rank r holds the finished chunk (r + 1) mod N — what
# `ring_reduce_scatter` leaves. The same rules: chunks move with `transfer`,
# every outgoing chunk is taken before any rank overwrites its copy, and it
# returns the bytes each rank sent. Then `ring_all_reduce(buffers, devices)`:
# the two phases one after the other, returning the bytes each rank sent in
# both.
#
# **Checked when graded** (besides the tests below), on float32 buffers of
# your own drawn values and on rings of any size: 3 to 6 ranks with chunks of
# unequal sizes, 3 to 6 ranks with a buffer smaller than the ring, 2 ranks
# with an odd size, and one rank (sums compared to within 1e-5):
#
# * the buffers stay float32
# * every rank must end with the sum
# * every rank must end with the same bytes: the largest difference between two ranks is 0
# * each rank sends every chunk but one in each phase: twice the buffer's bytes less chunks (r + 1) mod N and (r + 2) mod N

# %% nbgrader={"grade": false, "grade_id": "distributed_ring_all_reduce_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def ring_all_gather(buffers: list[Any], devices: list[Device]) -> list[int]:
    """Phase 2 of the ring, in place: every rank's finished chunk reaches every rank; the bytes each rank sent."""
    ### BEGIN SOLUTION
    n = len(buffers)
    bounds = _chunk_bounds(buffers[0].size, n)
    sent = [0] * n
    for s in range(n - 1):
        chunks = [(r + 1 - s) % n for r in range(n)]  # the chunk rank r sends in step s
        messages = [transfer(buffers[r][bounds[c]:bounds[c + 1]], devices[(r + 1) % n]) for r, c in enumerate(chunks)]
        for r, (c, message) in enumerate(zip(chunks, messages)):
            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] = message
            sent[r] += message.nbytes
    return sent
    ### END SOLUTION


def ring_all_reduce(buffers: list[Any], devices: list[Device]) -> list[int]:
    """Sum 1-D ``buffers`` (one per rank) in place with a ring all-reduce; the bytes each rank sent."""
    ### BEGIN SOLUTION
    scattered = ring_reduce_scatter(buffers, devices)
    gathered = ring_all_gather(buffers, devices)
    return [a + b for a, b in zip(scattered, gathered)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_ring_all_reduce", "locked": true, "points": 1, "schema_version": 3, "solution": false}
_devs = [as_device(f"cpu:{r}") for r in range(4)]
_finished = [np.full(8, -1.0) for _ in range(4)]  # -1: a partial sum, to be overwritten
for _r in range(4):
    _c = (_r + 1) % 4
    _finished[_r][2 * _c:2 * _c + 2] = np.arange(8)[2 * _c:2 * _c + 2] * 10.0
_sent = ring_all_gather(_finished, _devs)
assert all(np.array_equal(b, np.arange(8) * 10.0) for b in _finished), (
    "after the all-gather every rank holds every finished chunk")
assert _sent == [3 * 16] * 4, f"each rank sends 3 chunks of 2 float64 numbers (48 bytes); got {_sent}"
_bufs = [np.arange(8, dtype=np.float64) * (r + 1) for r in range(4)]
_sent = ring_all_reduce(_bufs, _devs)
assert all(np.array_equal(b, np.arange(8) * 10.0) for b in _bufs), "every rank ends with the sum 0, 10, 20, ..., 70"
assert _sent == [2 * 3 * 16] * 4, f"2(N-1) chunks of 2 float64 each: 96 bytes per rank; got {_sent}"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: four rings (uneven chunks; a buffer smaller than
# the ring; two ranks and an odd size; one rank) and their float32 buffers.
_uneven, _small = int(check_rng.integers(3, 7)), int(check_rng.integers(3, 7))
_cases = [(_uneven, _uneven * int(check_rng.integers(1, 4)) + int(check_rng.integers(1, _uneven))),
          (_small, int(check_rng.integers(1, _small))), (2, 2 * int(check_rng.integers(1, 6)) + 1),
          (1, int(check_rng.integers(1, 9)))]
for _n, _size in _cases:
    _bufs = [check_rng.standard_normal(_size).astype(np.float32) for _ in range(_n)]
    _want = np.sum([b.astype(np.float64) for b in _bufs], axis=0)
    _width = [_size * (c + 1) // _n - _size * c // _n for c in range(_n)]  # each chunk's size
    _sent = ring_all_reduce(_bufs, [as_device(f"cpu:{r}") for r in range(_n)])
    assert [str(b.dtype) for b in _bufs] == ["float32"] * _n, "the buffers stay float32"
    assert np.allclose(np.stack(_bufs), np.stack([_want] * _n), rtol=1e-5, atol=1e-5), "every rank must end with the sum"
    assert float(np.ptp(np.stack(_bufs), axis=0).max()) == 0.0, (
        "every rank must end with the same bytes: the largest difference between two ranks is 0")
    assert _sent == [4 * (2 * _size - _width[(r + 1) % _n] - _width[(r + 2) % _n]) for r in range(_n)], (
        "each rank sends every chunk but one in each phase: twice the buffer's bytes less chunks (r + 1) mod N and (r + 2) mod N")
### END HIDDEN TESTS

# %% [markdown]
# ## Three engines
#
# With the ring in hand, the `local` engine is a few lines: it drives every
# rank, so its all-reduce *is* `ring_all_reduce` over its ranks' arrays, and
# it counts the bytes. `mpi` and `nccl` hand the same calls to libraries that
# run one process per rank, across machines if need be:
#
# * **mpi** — mpi4py's `COMM_WORLD`, with the upper-case buffer calls
#   (`Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)`, `Bcast`, `Barrier`) that
#   send the NumPy buffer itself, no pickling. Averages are sums divided by
#   N. MPI has no 16-bit float, so float16 goes through float32; a GPU array
#   goes through host memory (simple and correct; a CUDA-aware MPI could skip
#   that copy).
# * **nccl** — `cupyx.distributed.init_process_group(world_size, rank,
#   host=MASTER_ADDR, port=MASTER_PORT)`: rank 0 opens a small TCP store at
#   that address through which the ranks find each other; after that, NCCL
#   moves GPU memory directly (NVLink, PCIe, or InfiniBand between machines).
#
# `init_process_group()` picks the engine: `backend=` when given, else
# `TINYFLO_BACKEND` (what `tinyflo launch` sets), else `mpi` when the
# process was started by `mpiexec`.

# %%
#| export
class LocalGroup(ProcessGroup):
    """Every rank in this one process, each on its own (virtual) device: for notebooks and tests."""

    backend = "local"

    def __init__(self, world_size: int, devices: Sequence[Any] | None = None) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int | np.integer) or world_size < 1:
            raise ValueError(f"init_process_group('local'): world_size must be a positive int; got {brief(world_size)}")
        if devices is None:
            devices = [f"cpu:{r}" for r in range(world_size)]
        devices = [as_device(d) for d in devices]
        if len(devices) != world_size:
            raise ValueError(f"init_process_group('local'): devices has {len(devices)} entries for "
                             f"world_size={world_size}; give one device per rank")
        super().__init__(0, int(world_size), range(world_size), devices)

    def _all_reduce_sum(self, arrays: list[Any]) -> None:
        flats = [a.reshape(-1) if a.flags.c_contiguous else a.flatten() for a in arrays]
        sent = ring_all_reduce(flats, self.devices)
        for i, (a, flat) in enumerate(zip(arrays, flats)):
            if not a.flags.c_contiguous:  # worked on a copy: write the result back
                a[...] = flat.reshape(a.shape)
            self.bytes_sent[i] += sent[i]

    def _broadcast(self, arrays: list[Any], root: int) -> None:
        for r, a in enumerate(arrays):
            if r != root:
                a[...] = transfer(arrays[root], self.devices[r])
                self.bytes_sent[root] += a.nbytes


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError("the 'mpi' backend needs mpi4py and an MPI (pip install 'tinyflo[dist]')") from err
    return MPI


def _host_buffer(a: Any) -> tuple[Any, bool]:
    """A contiguous NumPy buffer MPI can reduce (16-bit floats widened), and whether it is a copy."""
    if isinstance(a, np.ndarray) and a.flags.c_contiguous and not (is_floating(a.dtype) and a.itemsize < 4):
        return a, False
    host = to_host(a)
    if is_floating(host.dtype) and host.dtype.itemsize < 4:
        host = host.astype(np.float32)
    return np.ascontiguousarray(host), True


def _write_back(a: Any, host: np.ndarray) -> None:
    if isinstance(a, np.ndarray):
        a[...] = host.astype(a.dtype, copy=False)
    else:
        a[...] = device_of(a).xp.asarray(host).astype(a.dtype, copy=False)


class MPIGroup(ProcessGroup):
    """One rank per process, over MPI (start with ``mpiexec -n N`` or ``tinyflo launch --backend mpi``)."""

    backend = "mpi"

    def __init__(self, device: Any = None) -> None:
        MPI = _mpi()
        self.comm = MPI.COMM_WORLD
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        super().__init__(rank, size, [rank], [as_device(device)])

    def _all_reduce_sum(self, arrays: list[Any]) -> None:
        (a,) = arrays
        buf, copied = _host_buffer(a)
        self.comm.Allreduce(_mpi().IN_PLACE, buf, op=_mpi().SUM)
        if copied:
            _write_back(a, buf)
        self._count_ring(a.nbytes)

    def _broadcast(self, arrays: list[Any], root: int) -> None:
        (a,) = arrays
        buf, copied = _host_buffer(a)
        self.comm.Bcast(buf, root=root)
        if copied and self.rank != root:
            _write_back(a, buf)
        if self.rank == root:
            self.bytes_sent[0] += a.nbytes * (self.world_size - 1)

    def barrier(self) -> None:
        self.comm.Barrier()


def _env_int(name: str, value: int | None, backend: str) -> int:
    if value is not None:
        return int(value)
    if name not in os.environ:
        raise RuntimeError(f"init_process_group('{backend}'): {name} is not set; start the ranks with "
                           f"`tinyflo launch -n N --backend {backend} script.py`, or pass {name.lower()}=")
    try:
        return int(os.environ[name])
    except ValueError:
        raise ValueError(f"init_process_group('{backend}'): the environment variable {name} must be an "
                         f"integer; got {os.environ[name]!r}") from None


class NCCLGroup(ProcessGroup):
    """One rank per process and GPU, over NCCL through ``cupyx.distributed``."""

    backend = "nccl"

    def __init__(self, world_size: int | None = None, rank: int | None = None, device: Any = None) -> None:
        if not cuda_is_available():
            raise RuntimeError("init_process_group('nccl'): needs CuPy and a GPU (pip install 'tinyflo[gpu]')")
        world_size = _env_int("WORLD_SIZE", world_size, "nccl")
        rank = _env_int("RANK", rank, "nccl")
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        dev = as_device(device if device is not None else f"cuda:{local_rank}")
        if dev.type != "cuda":
            raise DeviceError(f"init_process_group('nccl'): NCCL moves GPU memory; device must be cuda:N, got {dev}")
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "13333"))
        from cupyx import distributed as cupy_distributed

        dev.xp.cuda.Device(dev.index).use()  # NCCL binds the communicator to the current GPU
        self.comm = cupy_distributed.init_process_group(world_size, rank, host=host, port=port)
        store = getattr(self.comm, "_store", None)  # rank 0 serves the rendezvous from a child process
        if store is not None:
            # ... that runs until stopped: stop it as Python exits, before multiprocessing waits for its
            # children (atexit calls the last registered first), or the script never ends
            atexit.register(store.stop)
        super().__init__(rank, world_size, [rank], [dev])

    def _all_reduce_sum(self, arrays: list[Any]) -> None:
        (a,) = arrays
        buf = a if a.flags.c_contiguous else self.devices[0].xp.ascontiguousarray(a)
        with self.devices[0]:
            self.comm.all_reduce(buf, buf, op="sum")
        if buf is not a:
            a[...] = buf
        self._count_ring(a.nbytes)

    def _broadcast(self, arrays: list[Any], root: int) -> None:
        (a,) = arrays
        buf = a if a.flags.c_contiguous else self.devices[0].xp.ascontiguousarray(a)
        with self.devices[0]:
            self.comm.broadcast(buf, root)
        if buf is not a:
            a[...] = buf
        if self.rank == root:
            self.bytes_sent[0] += a.nbytes * (self.world_size - 1)

    def barrier(self) -> None:
        self.comm.barrier()


def _under_mpiexec() -> bool:
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def init_process_group(backend: str | None = None, world_size: int | None = None, rank: int | None = None,
                       devices: Sequence[Any] | None = None, device: Any = None) -> ProcessGroup:
    """A process group on ``backend`` ('local', 'mpi' or 'nccl'; None: from the environment)."""
    source = ""
    if backend is None:
        backend = os.environ.get("TINYFLO_BACKEND") or ("mpi" if _under_mpiexec() else None)
        source = " (from the environment variable TINYFLO_BACKEND)" if os.environ.get("TINYFLO_BACKEND") else ""
        if backend is None:
            raise ValueError(
                "init_process_group: no backend given and none in the environment; pass backend='local' with "
                "world_size=N (all ranks in this process), or start the script with "
                "`tinyflo launch -n N --backend mpi|nccl script.py` (which sets TINYFLO_BACKEND)"
            )
    if not isinstance(backend, str):
        raise ValueError(f"init_process_group: backend must be 'local', 'mpi' or 'nccl'; got {brief(backend)}")
    if backend == "local":
        if world_size is None:
            raise ValueError("init_process_group('local'): needs world_size=N (how many ranks this process drives)")
        if device is not None:
            raise ValueError("init_process_group('local'): give devices=[...] (one per rank), not device=")
        if rank is not None:
            raise ValueError(f"init_process_group('local'): this process drives every rank; leave out rank={rank!r}")
        return LocalGroup(world_size, devices)
    if backend not in ("mpi", "nccl"):
        raise ValueError(f"init_process_group: backend must be 'local', 'mpi' or 'nccl'; got {backend!r}{source}")
    if devices is not None:
        raise ValueError(f"init_process_group('{backend}'): one rank per process; give device=, not devices=")
    if backend == "mpi":
        group = MPIGroup(device)
        if world_size is not None and world_size != group.world_size:
            raise ValueError(f"init_process_group('mpi'): world_size={world_size}, but mpiexec started "
                             f"{group.world_size} ranks")
        if rank is not None and rank != group.rank:
            raise ValueError(f"init_process_group('mpi'): rank={rank}, but MPI made this process rank "
                             f"{group.rank} (leave rank= out: MPI numbers the processes)")
        return group
    return NCCLGroup(world_size, rank, device)


# %% [markdown]
# ### Bytes moved per step, measured
#
# The local engine counts what every rank sends. All-reduce a gradient the size
# of the 784-512-512-10 MLP's (669 706 float32 numbers, 2.7 MB) over 2, 4 and 8
# ranks, and compare the ring with sending everything to rank 0 and back:

# %%
_params = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
for _n in (2, 4, 8):
    _group = init_process_group("local", world_size=_n)
    _grads = [np.ones(_params, np.float32) for _ in range(_n)]
    _group.all_reduce(_grads)
    _ring = max(_group.bytes_sent)
    _naive = 2 * (_n - 1) * _params * 4  # rank 0 receives N-1 buffers, then sends N-1 sums
    print(f"N={_n}: ring {_ring / 1e6:5.2f} MB per rank (2(N-1)/N = {2 * (_n - 1) / _n:.2f} × 2.68 MB); "
          f"naive: rank 0 moves {_naive / 1e6:5.2f} MB")

# %% [markdown]
# The ring's bytes per rank approach 2·S and stop there; the naive scheme's
# bottleneck grows with N. At 100 Gbit/s (12.5 GB/s) a 2.7 MB gradient takes
# about 0.4 ms over the ring — while a step of this MLP takes milliseconds, so
# here communication is cheap. A 1-billion-parameter model's float32
# gradient is 4 GB: about 0.6 s per step over the same ring, which is why
# large models overlap the all-reduce with the backward pass, and why
# gradients are sent in float16/bfloat16 (half the bytes).

# %% [markdown]
# ## Averaging gradients *is* a larger batch
#
# A loss that is a mean over the batch has a gradient that is a mean over the
# batch. Split the B samples into shards of n_r samples: the full batch's
# gradient is
#
# $$\nabla \frac1B\sum_{i=1}^{B}\ell_i = \sum_r \frac{n_r}{B}\,\underbrace{\nabla\frac1{n_r}\sum_{i\in r}\ell_i}_{\text{rank } r\text{'s gradient}}$$
#
# so if every rank weights its gradient by n_r / B and the ranks **sum**,
# every rank gets exactly the full batch's gradient — even when the shards
# differ in size (the last batch of an epoch rarely divides by N). A plain
# average of the ranks' gradients would be right only for equal shards.
# Numerically, on a least-squares problem:

# %%
_rng = np.random.default_rng(1)
_X, _y, _w = _rng.standard_normal((10, 3)), _rng.standard_normal(10), _rng.standard_normal(3)


def _grad(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 2 * X.T @ (X @ _w - y) / len(y)  # gradient of mean((Xw - y)^2)


_full = _grad(_X, _y)
_cuts = [0, 3, 6, 8, 10]  # shards of 3, 3, 2, 2 samples
_parts = [(_grad(_X[a:b], _y[a:b]), b - a) for a, b in zip(_cuts, _cuts[1:])]
print("full batch:        ", _full)
print("weighted by n_r/B: ", sum(g * n / 10 for g, n in _parts))
print("plain average:     ", sum(g for g, _ in _parts) / 4)

# %% [markdown]
# ## Data parallel
#
# `DataParallel(model, group, optimizer)` keeps one replica per local rank
# (the `local` engine deep-copies the model onto each device; `mpi`/`nccl`
# keep the one model of this process) and makes every replica start from
# rank 0's parameters and buffers (a broadcast). Every rank reads the **same
# global batch** and keeps its own contiguous shard of it; a training step
# is then
#
# 1. each replica: forward and backward on its shard, its loss weighted by
#    n_r / B;
# 2. **one** all-reduce (sum) of all gradients, packed into **one flat
#    buffer** per replica — one large message instead of one per parameter,
#    which would pay the network's latency once per tensor;
# 3. each replica: the same optimizer step on the same gradient — so the
#    replicas stay identical without ever sending parameters.
#
# ### Task `distributed_shard_bounds` (1 point): a shard per rank
#
# Write `shard_bounds(n, world_size)`: the `(start, stop)` of every rank's
# contiguous shard of n samples, in rank order, covering 0..n, sizes
# differing by at most one (the first `n % world_size` ranks take one more).
# A batch smaller than the world leaves some shards empty.
#
# **Checked when graded** (besides the tests below), for your own drawn
# batch sizes and world sizes:
#
# * the first n % world_size ranks take one more sample: (start, stop) in rank order, covering 0..n
# * a batch smaller than the world: one sample each for the first n ranks, empty shards (n, n) after them
# * one rank takes the whole batch
# * for any n (0 included) and world_size: the same shards, exactly

# %% nbgrader={"grade": false, "grade_id": "distributed_shard_bounds_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def shard_bounds(n: int, world_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each rank's contiguous shard of ``n`` samples; sizes differ by at most one."""
    ### BEGIN SOLUTION
    base, extra = divmod(n, world_size)
    bounds, start = [], 0
    for r in range(world_size):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_shard_bounds", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)], "10 samples on 4 ranks: shards of 3, 3, 2, 2"
assert shard_bounds(8, 2) == [(0, 4), (4, 8)], "8 samples on 2 ranks: shards of 4 and 4"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: a batch that leaves a remainder, a batch smaller
# than the world, one rank's batch, and a dozen more batch and world sizes.
def _shards(n, world_size):
    """The shards the task asks for, from the sizes: n // world_size, one more for the first n % world_size."""
    sizes = n // world_size + (np.arange(world_size) < n % world_size)
    stops = np.cumsum(sizes)
    return [(int(a), int(b)) for a, b in zip(stops - sizes, stops)]


_w = int(check_rng.integers(3, 9))
_n = _w * int(check_rng.integers(1, 6)) + int(check_rng.integers(1, _w - 1))
assert shard_bounds(_n, _w) == _shards(_n, _w), (
    "the first n % world_size ranks take one more sample: (start, stop) in rank order, covering 0..n")
_w = int(check_rng.integers(3, 9))
_n = int(check_rng.integers(1, _w))
assert shard_bounds(_n, _w) == _shards(_n, _w), (
    "a batch smaller than the world: one sample each for the first n ranks, empty shards (n, n) after them")
_n = int(check_rng.integers(1, 50))
assert shard_bounds(_n, 1) == [(0, _n)], "one rank takes the whole batch"
_pairs = [(0, int(check_rng.integers(1, 9)))] + [
    (int(check_rng.integers(0, 40)), int(check_rng.integers(1, 9))) for _ in range(12)]
assert [shard_bounds(n, w) for n, w in _pairs] == [_shards(n, w) for n, w in _pairs], (
    "for any n (0 included) and world_size: the same shards, exactly")
### END HIDDEN TESTS

# %% [markdown]
# ### Task `distributed_data_parallel` (2 points): one flat all-reduce of the gradients
#
# Write `all_reduce_gradients(group, param_lists)`: `param_lists[i]` is the
# list of parameters of local rank i's replica (the same order on every
# rank). Pack the gradients of the parameters that require one into one
# flat buffer per local rank, on that rank's device, in the parameters'
# dtype (a parameter without a `.grad` — a replica that saw no samples —
# contributes zeros), call `group.all_reduce(buffers, op="sum")` once, and
# unpack: every such parameter's `.grad` becomes a tensor on its device
# holding its slice of the sum (a view of the buffer is fine). The weights
# n_r / B are already in the gradients (step 1 above).
#
# **Checked when graded** (besides the test below), on 2 to 4 local ranks
# with your own drawn parameter shapes and gradients:
#
# * every replica's gradients become the sum over the replicas
# * one all_reduce call, op='sum', of one flat buffer per rank holding every gradient
# * every gradient lives on its replica's device
# * a parameter without a gradient contributes zeros, and gets the sum too
# * float32 parameters: a float32 buffer, float32 gradients
# * a parameter that requires no gradient is left out: it gets no .grad

# %% nbgrader={"grade": false, "grade_id": "distributed_data_parallel_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _trainable(params: Iterable[Tensor]) -> list[Tensor]:
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.dtype != params[0].dtype:
            raise TypeError(f"data parallel: one flat buffer needs one dtype; parameters are {params[0].dtype} "
                            f"and {p.dtype} (cast the model with model.to(dtype) first)")
    return params


def all_reduce_gradients(group: ProcessGroup, param_lists: list[list[Tensor]]) -> None:
    """Sum every rank's gradients with one all-reduce of one flat buffer per local rank."""
    ### BEGIN SOLUTION
    buffers, lists = [], []
    for params, dev in zip(param_lists, group.devices):
        params = _trainable(params)
        with dev:
            flat = dev.xp.zeros(sum(p.data.size for p in params), params[0].dtype if params else np.float32)
        offset = 0
        for p in params:
            if p.grad is not None:
                flat[offset:offset + p.data.size] = p.grad.data.reshape(-1)
            offset += p.data.size
        buffers.append(flat)
        lists.append(params)
    group.all_reduce(buffers, op="sum")
    for params, flat, dev in zip(lists, buffers, group.devices):
        offset = 0
        for p in params:
            p.grad = Tensor._wrap(flat[offset:offset + p.data.size].reshape(p.shape), dev)
            offset += p.data.size
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_data_parallel", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_g2 = init_process_group("local", world_size=2)
_ps = [[Tensor(np.zeros((2, 2)), device=d, requires_grad=True), Tensor(np.zeros(3), device=d, requires_grad=True)]
       for d in _g2.devices]
for _r, (_a, _b) in enumerate(_ps):
    _a.grad = Tensor(np.full((2, 2), _r + 1.0), device=_a.device)
    _b.grad = Tensor(np.full(3, 10.0 * (_r + 1)), device=_b.device)
all_reduce_gradients(_g2, _ps)
assert all(np.array_equal(a.grad.numpy(), np.full((2, 2), 3.0)) and np.array_equal(b.grad.numpy(), np.full(3, 30.0))
           for a, b in _ps), "every replica's gradients become the sum over the replicas: 1 + 2 and 10 + 20"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the world size, three parameter shapes, every
# rank's gradients, and which rank lacks which gradient (never the last parameter).
class _Recorded(LocalGroup):
    """For these checks: a local group that records the op and the buffer shapes of each all_reduce."""

    def __init__(self, world_size):
        super().__init__(world_size)
        self.calls = []

    def all_reduce(self, arrays, op="sum"):
        self.calls.append((op, [tuple(a.shape) for a in arrays]))
        super().all_reduce(arrays, op)


_n = int(check_rng.integers(2, 5))
_shapes = [tuple(int(d) for d in check_rng.integers(1, 4, int(check_rng.integers(1, 3)))) for _ in range(3)]
_size = sum(int(np.prod(s)) for s in _shapes)
_group = _Recorded(_n)
_ps = [[Tensor(np.zeros(s), device=d, requires_grad=True) for s in _shapes] for d in _group.devices]
_grads = [[check_rng.standard_normal(s) for s in _shapes] for _ in range(_n)]
for _params, _given in zip(_ps, _grads):
    for _p, _g in zip(_params, _given):
        _p.grad = Tensor(_g, device=_p.device)
all_reduce_gradients(_group, _ps)
_sum = np.concatenate([np.sum([g[k] for g in _grads], axis=0).ravel() for k in range(3)])
assert np.allclose(np.concatenate([p.grad.numpy().ravel() for ps in _ps for p in ps]), np.tile(_sum, _n)), (
    "every replica's gradients become the sum over the replicas")
assert _group.calls == [("sum", [(_size,)] * _n)], (
    "one all_reduce call, op='sum', of one flat buffer per rank holding every gradient")
assert [str(p.grad.device) for ps in _ps for p in ps] == [str(p.device) for ps in _ps for p in ps], (
    "every gradient lives on its replica's device")
_empty_rank, _empty = int(check_rng.integers(0, _n)), int(check_rng.integers(0, 2))
for _params, _given in zip(_ps, _grads):
    for _p, _g in zip(_params, _given):
        _p.grad = Tensor(_g, device=_p.device)
_ps[_empty_rank][_empty].grad = None  # a replica that saw no samples
all_reduce_gradients(_group, _ps)
_sum = np.concatenate([np.sum([g[k] for r, g in enumerate(_grads) if (r, k) != (_empty_rank, _empty)], axis=0).ravel()
                       for k in range(3)])
assert np.allclose(np.concatenate([p.grad.numpy().ravel() for ps in _ps for p in ps]), np.tile(_sum, _n)), (
    "a parameter without a gradient contributes zeros, and gets the sum too")
_p32 = [[Tensor(np.zeros(s, np.float32), device=d, requires_grad=True) for s in _shapes] for d in _group.devices]
for _params, _given in zip(_p32, _grads):
    for _p, _g in zip(_params, _given):
        _p.grad = Tensor(_g.astype(np.float32), device=_p.device)
all_reduce_gradients(_group, _p32)
_sum = np.concatenate([np.sum([g[k] for g in _grads], axis=0).ravel() for k in range(3)])
assert [str(p.grad.dtype) for ps in _p32 for p in ps] == ["float32"] * (3 * _n) and np.allclose(
    np.concatenate([p.grad.numpy().ravel() for ps in _p32 for p in ps]), np.tile(_sum, _n), rtol=1e-5, atol=1e-5), (
    "float32 parameters: a float32 buffer, float32 gradients")
_frozen = int(check_rng.integers(0, 3))
_mixed = [[Tensor(np.zeros(s), device=d, requires_grad=k != _frozen) for k, s in enumerate(_shapes)]
          for d in _group.devices]
for _params, _given in zip(_mixed, _grads):
    for _k, (_p, _g) in enumerate(zip(_params, _given)):
        if _k != _frozen:
            _p.grad = Tensor(_g, device=_p.device)
all_reduce_gradients(_group, _mixed)
assert [ps[_frozen].grad is None for ps in _mixed] == [True] * _n, (
    "a parameter that requires no gradient is left out: it gets no .grad")
### END HIDDEN TESTS

# %% [markdown]
# With those two pieces, `DataParallel` is bookkeeping. `step_loss(x, y,
# loss_fn)` runs step 1 and returns the batch's loss (for `local`: the
# weighted sum of the shards' losses, on rank 0's device — the full batch's
# mean loss; for `mpi`/`nccl`: this rank's weighted share; all-reduce it when
# you want the total, or `total_loss(share)`). `reduce_gradients()` is step 2
# and `step()` step 3; `train_step` does all three after zeroing the
# gradients. `sync()` makes every replica rank 0's again (after loading a
# checkpoint into replica 0, say).

# %%
#| export
def _floating_state(module: Any) -> list[Tensor]:
    """The module's trainable parameters and floating buffers: what local SGD averages."""
    return [*_trainable(module.parameters()), *(b for b in module.buffers() if is_floating(b.dtype))]


def _clone_optimizer(optimizer: Any, source: list[Tensor], params: list[Tensor]) -> Any:
    """An optimizer of ``optimizer``'s type and settings over ``params`` (matched by position to ``source``)."""
    index = {id(p): i for i, p in enumerate(source)}
    groups = []
    for group in optimizer.param_groups:
        missing = [p.shape for p in group["params"] if id(p) not in index]
        if missing:
            raise ValueError(f"DataParallel: the optimizer holds parameters of shapes {missing} that are not the "
                             "model's; build the optimizer over model.parameters()")
        settings = {k: v for k, v in group.items() if k != "params"}
        groups.append({"params": [params[index[id(p)]] for p in group["params"]], **settings})
    clone = type(optimizer)(groups)
    clone.load_state_dict(optimizer.state_dict())
    return clone


class LocalSGD:
    """Average the replicas' parameters every ``period`` steps instead of their gradients every step.

    ``DataParallel`` asks it two things: which ranks take the coming step (``pick_ranks``: all of them)
    and, once they took it, whether to average now (``step_taken``: every ``period`` steps).
    """

    def __init__(self, period: int = 4) -> None:
        if not isinstance(period, int | np.integer) or period < 1:
            raise ValueError(f"LocalSGD: period must be a positive int (steps between averages); got {brief(period)}")
        self.period = int(period)

    def __repr__(self) -> str:
        return f"LocalSGD(period={self.period})"

    def start(self, parallel: DataParallel) -> None:
        """Called once by the ``DataParallel`` that follows this schedule (a fixed period needs nothing)."""

    def pick_ranks(self, parallel: DataParallel) -> list[int]:
        """The ranks that take the coming step: every one, each on its shard of the batch."""
        return list(range(parallel.group.world_size))

    def step_taken(self, parallel: DataParallel) -> bool:
        """After a step: whether to average the replicas now."""
        return parallel.steps % self.period == 0


class DataParallel:
    """One model replica per rank; each trains on its shard of the batch, all take the same steps."""

    def __init__(self, model: Any, group: ProcessGroup, optimizer: Any = None,
                 local_sgd: LocalSGD | None = None, broadcast_buffers: bool = True) -> None:
        if not isinstance(group, ProcessGroup):
            raise TypeError(f"DataParallel: group must be a ProcessGroup (init_process_group(...)); "
                            f"got {type(group).__name__}")
        if local_sgd is not None and not isinstance(local_sgd, LocalSGD):
            raise TypeError(f"DataParallel: local_sgd must be LocalSGD(period=k), ElChe() or None; got {brief(local_sgd)}")
        self.group, self.local_sgd, self.broadcast_buffers = group, local_sgd, broadcast_buffers
        model.to(group.devices[0])
        self.replicas = [model] + [copy.deepcopy(model).to(dev) for dev in group.devices[1:]]
        source = list(model.parameters())
        self.optimizers = [] if optimizer is None else [optimizer] + [
            _clone_optimizer(optimizer, source, list(replica.parameters())) for replica in self.replicas[1:]]
        self.steps = 0
        self.stepping = list(range(group.world_size))  # the ranks that take the coming step
        self._sizes: list[int] = []  # shard sizes of every rank in the last batch
        self._seen = np.zeros(group.world_size)  # samples per rank since the last average (local SGD)
        if local_sgd is not None:
            local_sgd.start(self)
        self.sync()

    def sync(self) -> None:
        """Make every replica rank 0's: parameters and buffers broadcast, local optimizers' state copied."""
        with no_grad():
            for tensors in zip(*(list(r.parameters()) + list(r.buffers()) for r in self.replicas)):
                self.group.broadcast(list(tensors), root=0)
        for opt in self.optimizers[1:]:  # mpi/nccl: each process loads or builds its own optimizer
            opt.load_state_dict(self.optimizers[0].state_dict())
        self._seen[:] = 0  # every replica is rank 0's now: none has seen anything since

    def __repr__(self) -> str:
        sync = f", {self.local_sgd}" if self.local_sgd else ""
        return f"DataParallel({type(self.module).__name__}, {self.group!r}{sync})"

    @property
    def module(self) -> Any:
        """Replica 0: the model this process was given (what rank 0 saves)."""
        return self.replicas[0]

    def __call__(self, x: Tensor) -> Tensor:
        """Replica 0's output (inference; training goes through ``step_loss``)."""
        return self.module(x)

    def train(self, mode: bool = True) -> DataParallel:
        """Put every replica in training (or eval) mode."""
        for replica in self.replicas:
            replica.train(mode)
        return self

    def eval(self) -> DataParallel:
        """Put every replica in eval mode."""
        return self.train(False)

    def shard(self, x: Tensor, y: Tensor) -> list[tuple[Tensor, Tensor]]:
        """This process's ranks' shards of the global batch ``(x, y)``, each on its rank's device.

        The ranks that take this step (``stepping``: all of them, but one under El Che) share the batch.
        """
        n = x.shape[0]
        if n == 0 or y.shape[0] != n:
            raise ShapeError(f"DataParallel.shard: inputs {x.shape} and targets {y.shape} need the same, "
                             "non-zero number of samples along the first axis")
        cuts = iter(shard_bounds(n, len(self.stepping)))
        bounds = [next(cuts) if r in self.stepping else (0, 0) for r in range(self.group.world_size)]
        self._sizes = [b - a for a, b in bounds]
        return [(x[bounds[r][0]:bounds[r][1]].to(dev), y[bounds[r][0]:bounds[r][1]].to(dev))
                for r, dev in zip(self.group.local_ranks, self.group.devices)]

    def step_loss(self, x: Tensor, y: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """Each replica's loss on its shard weighted by n_r/B, summed on rank 0's device (a graph).

        Under local SGD the value is the same, but each replica's gradient is its own shard's mean.
        """
        shards = self.shard(x, y)
        total = None
        for replica, r, (xs, ys) in zip(self.replicas, self.group.local_ranks, shards):
            if self._sizes[r] == 0:
                continue  # an empty shard: no loss, its gradient is zero
            loss = loss_fn(replica(xs), ys)
            weighted = loss * (self._sizes[r] / x.shape[0])
            if self.local_sgd is not None:  # same value, but each replica steps on its own shard's mean gradient
                weighted = loss + (weighted - loss).detach()
            weighted = weighted.to(self.group.devices[0])
            total = weighted if total is None else total + weighted
        if total is None:  # this process's shard is empty (mpi/nccl, batch smaller than the world)
            dtype = next(iter(self.module.parameters())).dtype
            total = Tensor(np.zeros((), dtype), device=self.group.devices[0])
        self._seen += self._sizes
        return total

    def total_loss(self, share: float) -> float:
        """The batch's loss from this process's share of it (one all-reduce; ``local`` already has it all)."""
        if self.group.backend == "local":
            return share
        dev = self.group.devices[0]
        with dev:
            value = dev.xp.asarray([share], dtype=np.float64)
        self.group.all_reduce(value)
        return float(value[0])

    def zero_grad(self) -> None:
        """Forget every replica's gradients; under local SGD, ask which ranks take the coming step."""
        for replica in self.replicas:
            replica.zero_grad()
        if self.local_sgd is not None:
            self.stepping = self.local_sgd.pick_ranks(self)

    def stepping_optimizers(self) -> list[Any]:
        """The optimizers of this process's ranks that take the coming step."""
        return [opt for r, opt in zip(self.group.local_ranks, self.optimizers) if r in self.stepping]

    def backward(self, loss: Tensor) -> None:
        """Backpropagate a loss from ``step_loss`` (nothing to do for an empty shard)."""
        if loss.requires_grad:
            loss.backward()

    def reduce_gradients(self) -> None:
        """One flat all-reduce of the weighted gradients (skipped under local SGD)."""
        if self.local_sgd is None:
            all_reduce_gradients(self.group, [list(r.parameters()) for r in self.replicas])

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every replica's optimizer."""
        for opt in self.optimizers:
            opt.set_lr(lr)

    def step(self) -> None:
        """The stepping replicas' optimizer steps; then sync buffers, or average parameters when local SGD is due."""
        for opt in self.stepping_optimizers():
            opt.step()
        self.after_step()

    def after_step(self) -> None:
        """Count a step taken by the stepping optimizers; then sync buffers, or average when local SGD is due."""
        self.steps += 1
        if self.local_sgd is not None:
            if self.local_sgd.step_taken(self):
                self.average()
        elif self.broadcast_buffers:
            self._broadcast_buffers()

    def average(self) -> None:
        """Average parameters and floating buffers, each replica weighted by the samples it saw."""
        seen = self._seen if self._seen.sum() > 0 else np.ones(self.group.world_size)
        weights = [float(seen[r] / seen.sum()) for r in self.group.local_ranks]
        average_parameters(self.group, [_floating_state(r) for r in self.replicas], weights)
        self._seen[:] = 0

    def _broadcast_buffers(self) -> None:
        buffers = [list(r.buffers()) for r in self.replicas]
        with no_grad():
            for tensors in zip(*buffers):
                self.group.broadcast(list(tensors), root=0)

    def train_step(self, x: Tensor, y: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """zero_grad, weighted shard losses, backward, all-reduce, step; the loss (see ``step_loss``)."""
        if not self.optimizers:
            raise ValueError("DataParallel.train_step: needs an optimizer (DataParallel(model, group, optimizer))")
        self.zero_grad()
        loss = self.step_loss(x, y, loss_fn)
        self.backward(loss)
        self.reduce_gradients()
        self.step()
        return loss


# %% [markdown]
# ### Data parallel on 4 virtual devices equals one process
#
# Four replicas on `cpu:0..3`, a batch of 10 (shards of 3, 3, 2, 2), five
# steps of SGD — against the same model trained in one process on the full
# batch, in float64:

# %%
from tinyflo.core.layers import Linear, Module, ReLU, Sequential  # noqa: E402
from tinyflo.core.losses import mse_loss  # noqa: E402
from tinyflo.core.optim import SGD  # noqa: E402
from tinyflo.core.tensor import manual_seed  # noqa: E402


def _mlp() -> Any:
    manual_seed(0)
    return Sequential(Linear(3, 8), ReLU(), Linear(8, 1)).double()


_X = Tensor(_rng.standard_normal((10, 3)))
_Y = Tensor(_rng.standard_normal((10, 1)))
_single = _mlp()
_opt = SGD(_single.parameters(), lr=0.1, momentum=0.9)
for _ in range(5):
    _opt.zero_grad()
    mse_loss(_single(_X), _Y).backward()
    _opt.step()
_dp_model = _mlp()
_dp = DataParallel(_dp_model, init_process_group("local", world_size=4), SGD(_dp_model.parameters(), lr=0.1, momentum=0.9))
for _ in range(5):
    _dp.train_step(_X, _Y, mse_loss)
_gap = max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(_single.parameters(), _dp.module.parameters()))
print(f"largest difference from single-process training: {_gap:.1e}")
print("replicas bit-identical:", all(np.array_equal(a.numpy(), b.numpy())
                                     for r in _dp.replicas[1:] for a, b in zip(_dp.module.parameters(), r.parameters())))

# %% [markdown]
# ### The Trainer's data-parallel plug-in
#
# Module 08's Trainer calls a strategy plug-in at fixed points of its loop.
# `DataParallelStrategy` fills them with a `DataParallel`: the forward shards
# every batch over the replicas (`step_loss`), the gradients are
# all-reduced before the precision plug-in unscales them and before the
# guard and clipping (so every rank skips the same overflowing steps and
# sees the same non-finite ones), every replica's optimizer is scheduled
# and stepped, and the epoch loss is summed over the ranks' shares.
# `trainer.model` is replica 0, which checkpoints save; under `mpi`/`nccl`
# only rank 0 writes the file while the others wait, and all of them raise
# if the write fails, so none waits forever. It registers itself as the
# Trainer's `"group"` plug-in: `Trainer(..., group=group)` means
# `plugins=[DataParallelStrategy(group)]`, and
# `plugins=[DataParallelStrategy(group, local_sgd=LocalSGD(period=k))]`
# selects local SGD (below). Your `train_epoch` loop is unchanged.

# %%
#| export
@contextlib.contextmanager
def _fails_on_every_rank(group: ProcessGroup, message: str) -> Iterator[None]:
    """Run the block; then the processes agree (one all-reduce of a flag, also a barrier) whether all got
    through it: one whose block raised re-raises its error, the others raise RuntimeError(message) —
    rather than waiting forever for a process that left. ``local``: one process, nothing to agree on."""
    if len(group.local_ranks) == group.world_size:
        yield
        return

    def anyone_failed(failed: int) -> bool:
        dev = group.devices[0]
        with dev:
            flag = dev.xp.asarray([failed], dtype=np.int32)
        group.all_reduce(flag)
        return bool(int(flag[0]))

    try:
        yield
    except BaseException:
        anyone_failed(1)
        raise
    if anyone_failed(0):
        raise RuntimeError(f"{message} (the error is in that rank's output)")


class DataParallelStrategy(Strategy):
    """The Trainer's data-parallel plug-in: one replica per rank of ``group``, the gradients all-reduced."""

    def __init__(self, group: ProcessGroup, local_sgd: LocalSGD | None = None) -> None:
        if not isinstance(group, ProcessGroup):
            raise TypeError(f"DataParallelStrategy got group={type(group).__name__}; expected a process group "
                            "from init_process_group(...)")
        if local_sgd is not None and not isinstance(local_sgd, LocalSGD):
            raise TypeError(f"DataParallelStrategy got local_sgd={local_sgd!r}; expected LocalSGD(period=k), ElChe() "
                            "or None")
        self.group, self.local_sgd = group, local_sgd
        self.parallel: DataParallel | None = None

    def __repr__(self) -> str:
        return f"DataParallelStrategy({self.group!r}, local_sgd={self.local_sgd!r})"

    def setup(self, trainer: Any) -> None:
        if self.parallel is not None:
            raise ValueError("DataParallelStrategy: this plug-in already trains another model; give each Trainer "
                             "its own DataParallelStrategy(group)")
        self.parallel = DataParallel(trainer.model, self.group, trainer.optimizer, local_sgd=self.local_sgd)
        self.model, self.optimizers, self.models = trainer.model, self.parallel.optimizers, self.parallel.replicas
        self.param_lists = self.all_params = [list(replica.parameters()) for replica in self.parallel.replicas]

    def train(self, mode: bool = True) -> None:
        self.parallel.train(mode)

    def forward(self, trainer: Any, x: Tensor, y: Tensor, training: bool) -> tuple[Tensor | None, Tensor]:
        if not training:  # evaluation: replica 0 on the whole batch
            return super().forward(trainer, x, y, training)
        return None, self.parallel.step_loss(x, y, trainer.loss_fn)  # the outputs stay on their replicas

    def backward(self, loss: Tensor) -> None:
        self.parallel.backward(loss)

    def zero_grad(self) -> None:
        self.parallel.zero_grad()
        if self.local_sgd is not None:  # the Trainer schedules, clips and steps the ranks that take this step
            self.optimizers = self.parallel.stepping_optimizers()
            self.param_lists = [params for r, params in zip(self.group.local_ranks, self.all_params)
                                if r in self.parallel.stepping]

    def reduce_gradients(self) -> None:
        self.parallel.reduce_gradients()

    def after_step(self) -> None:
        self.parallel.after_step()  # local SGD's average when due, or rank 0's buffers

    def total(self, value: float) -> float:
        return self.parallel.total_loss(value)

    def on_main(self, fn: Callable[[], Any], what: str) -> Any:
        result = None
        with _fails_on_every_rank(self.group, what):
            if self.group.is_main:
                result = fn()
        return result

    def everywhere(self, fn: Callable[[], Any], what: str) -> Any:
        with _fails_on_every_rank(self.group, what):  # mpi/nccl: every process reads the file; if one cannot, all stop
            result = fn()
        self.parallel.sync()  # the other replicas become what replica 0 loaded
        return result


register_plugin("group", DataParallelStrategy)

# %%
from tinyflo.core.training import Trainer  # noqa: E402

_batches = [(Tensor(_rng.standard_normal((n, 3))), Tensor(_rng.standard_normal((n, 1)))) for n in (16, 16, 9)]
_runs = {}
for _name, _group in (("one process", None), ("4 local ranks", init_process_group("local", world_size=4))):
    _model = _mlp()
    _trainer = Trainer(_model, SGD(_model.parameters(), lr=0.1, momentum=0.9), mse_loss, grad_clip_norm=1.0,
                       verbosity="quiet", group=_group)
    _runs[_name] = ([_trainer.train_epoch(_batches) for _ in range(3)], _trainer.model)
    print(f"{_name:>13}: epoch losses", " ".join(f"{v:.6f}" for v in _runs[_name][0]))
print("same parameters:", all(np.allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12) for a, b in
                              zip(_runs["one process"][1].parameters(), _runs["4 local ranks"][1].parameters())))

# %% [markdown]
# ## Local SGD: talk less, drift a little
#
# Data parallel all-reduces every step. When the network is slow next to the
# compute (machines over Ethernet, not GPUs over NVLink), that all-reduce
# dominates. **Local SGD** lets every replica take k steps on its own shards'
# gradients — no communication — and then averages the **parameters** (one
# all-reduce of the same size as a gradient's). Communication drops by k.
#
# The price is *drift*: between averages, the replicas follow different
# gradients and move apart; their average is not the model one large-batch
# SGD would have reached. With k = 1 and plain SGD it is exactly data
# parallel: `mean(p − lr·g_r) = p − lr·mean(g_r)`. With momentum or Adam each
# replica's optimizer state also drifts (we keep it local, as most
# implementations do). Local SGD helps when communication is the bottleneck
# and the learning rate is small enough that k local steps stay close
# together; it hurts early in training, when gradients are large and
# replicas diverge fastest — a common recipe starts with k = 1 and grows it.
#
# ### Task `distributed_local_sgd` (2 points): averaging the replicas
#
# Write `average_parameters(group, tensor_lists, weights)`: `tensor_lists[i]`
# holds local rank i's tensors to average (parameters and floating buffers,
# the same order on every rank), `weights[i]` that rank's weight (over all
# ranks the weights sum to 1: a rank's share of the samples seen since the
# last average). Pack each rank's tensors times its weight into one flat
# buffer on its device, all-reduce it once (sum), and write the result back
# into every tensor **in place** (`t.data[...] = ...`: optimizers and
# replicas hold these very arrays).
#
# **Checked when graded** (besides the tests below), on 2 to 4 local ranks
# with your own drawn tensor shapes, values and weights (unequal, summing
# to 1):
#
# * every rank ends with the weighted sum of every tensor: Σ_r w_r · t_r
# * in place: the array every tensor held before holds the result (t.data[...] = ...)
# * in place: every tensor keeps its array, not only the first
# * one all_reduce call, op='sum', of one flat buffer per rank holding every tensor
# * float32 tensors of different sizes stay float32, each written back from its own slice

# %% nbgrader={"grade": false, "grade_id": "distributed_local_sgd_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def average_parameters(group: ProcessGroup, tensor_lists: list[list[Tensor]], weights: Sequence[float]) -> None:
    """Replace every rank's tensors, in place, by their weighted sum over ranks (one flat all-reduce)."""
    ### BEGIN SOLUTION
    buffers = []
    for tensors, weight, dev in zip(tensor_lists, weights, group.devices):
        with dev:
            flat = dev.xp.concatenate([t.data.reshape(-1) for t in tensors]) if tensors else dev.xp.zeros(0)
        flat *= flat.dtype.type(weight)
        buffers.append(flat)
    group.all_reduce(buffers, op="sum")
    for tensors, flat in zip(tensor_lists, buffers):
        offset = 0
        for t in tensors:
            t.data[...] = flat[offset:offset + t.data.size].reshape(t.shape)
            offset += t.data.size
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_local_sgd", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_g2 = init_process_group("local", world_size=2)
_ts = [[Tensor(np.full(3, 1.0 + 3 * r), device=d), Tensor(np.full((2, 2), 10.0 * r), device=d)]
       for r, d in enumerate(_g2.devices)]
_held = [t.data for t in _ts[0]]
average_parameters(_g2, _ts, [0.5, 0.5])
assert all(np.array_equal(a.numpy(), [2.5, 2.5, 2.5]) and np.array_equal(b.numpy(), np.full((2, 2), 5.0)) for a, b in _ts), (
    "weights 0.5 and 0.5: every rank ends with the mean, (1 + 4) / 2 and (0 + 10) / 2")
assert np.array_equal(_held[0], [2.5, 2.5, 2.5]) and _ts[0][0].data is _held[0], "in place: the optimizer holds these arrays"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the world size, three tensor shapes, every rank's
# values and the ranks' weights.
class _Recorded(LocalGroup):
    """For these checks: a local group that records the op and the buffer shapes of each all_reduce."""

    def __init__(self, world_size):
        super().__init__(world_size)
        self.calls = []

    def all_reduce(self, arrays, op="sum"):
        self.calls.append((op, [tuple(a.shape) for a in arrays]))
        super().all_reduce(arrays, op)


_n = int(check_rng.integers(2, 5))
_shapes = [tuple(int(d) for d in check_rng.integers(1, 4, int(check_rng.integers(1, 3)))) for _ in range(3)]
_size = sum(int(np.prod(s)) for s in _shapes)
_group = _Recorded(_n)
_values = [[check_rng.standard_normal(s) for s in _shapes] for _ in range(_n)]
_weights = [float(w) for w in check_rng.dirichlet(np.ones(_n))]
_ts = [[Tensor(v.copy(), device=d) for v in values] for values, d in zip(_values, _group.devices)]
_held = [t.data for ts in _ts for t in ts]
average_parameters(_group, _ts, _weights)
_mean = np.concatenate([np.sum([w * v[k] for w, v in zip(_weights, _values)], axis=0).ravel() for k in range(3)])
assert np.allclose(np.concatenate([t.numpy().ravel() for ts in _ts for t in ts]), np.tile(_mean, _n)), (
    "every rank ends with the weighted sum of every tensor: Σ_r w_r · t_r")
assert np.allclose(np.concatenate([h.ravel() for h in _held]), np.tile(_mean, _n)), (
    "in place: the array every tensor held before holds the result (t.data[...] = ...)")
assert [t.data is h for t, h in zip([t for ts in _ts for t in ts], _held)] == [True] * (3 * _n), (
    "in place: every tensor keeps its array, not only the first")
assert _group.calls == [("sum", [(_size,)] * _n)], (
    "one all_reduce call, op='sum', of one flat buffer per rank holding every tensor")
_t32 = [[Tensor(v.astype(np.float32), device=d) for v in values] for values, d in zip(_values, _group.devices)]
average_parameters(_group, _t32, _weights)
assert [str(t.dtype) for ts in _t32 for t in ts] == ["float32"] * (3 * _n) and np.allclose(
    np.concatenate([t.numpy().ravel() for ts in _t32 for t in ts]), np.tile(_mean, _n), rtol=1e-5, atol=1e-5), (
    "float32 tensors of different sizes stay float32, each written back from its own slice")
### END HIDDEN TESTS

# %% [markdown]
# `DataParallel(model, group, optimizer, local_sgd=LocalSGD(period=k))`
# skips the gradient all-reduce and averages every k steps. On a small
# regression problem, 4 replicas, the same mini-batches of 64 for every k,
# the loss on all the data after every 32 steps, and how far apart the
# replicas got between averages:

# %%
def _wide_mlp() -> Any:
    manual_seed(0)
    return Sequential(Linear(3, 16), ReLU(), Linear(16, 1)).double()


_rng2 = np.random.default_rng(3)
_Xall = _rng2.standard_normal((512, 3))
_Yall = np.sin(_Xall @ np.array([[1.0], [-2.0], [0.5]]))
for _k in (1, 4, 16):
    _model = _wide_mlp()
    _lsgd = DataParallel(_model, init_process_group("local", world_size=4), SGD(_model.parameters(), lr=0.2),
                         local_sgd=LocalSGD(period=_k))
    _order, _curve, _drift = np.random.default_rng(4), [], 0.0
    for _step in range(1, 129):
        _idx = _order.choice(512, 64, replace=False)
        _lsgd.train_step(Tensor(_Xall[_idx]), Tensor(_Yall[_idx]), mse_loss)
        _drift = max(_drift, max(float(np.abs(a.numpy() - b.numpy()).max())
                                 for r in _lsgd.replicas[1:] for a, b in zip(_lsgd.module.parameters(), r.parameters())))
        if _step % 32 == 0:
            _curve.append(float(mse_loss(_lsgd.module(Tensor(_Xall)), Tensor(_Yall)).item()))
    print(f"k={_k:2d}: {128 // _k:3d} all-reduces; full-data loss after 32/64/96/128 steps:",
          " ".join(f"{v:.4f}" for v in _curve), f"; largest gap between replicas: {_drift:.3f}")

# %% [markdown]
# k = 4 sends a quarter of the bytes, k = 16 a sixteenth, for nearly the same
# curve — the replicas drift apart between averages (k = 1 never lets them),
# and the average lands near, not on, where data parallel goes. Where
# the line falls depends on the problem, the learning rate and the network —
# measure it (tinyflo's all-reduce benchmark, `tinyflo bench` in the
# course's repository, gives the all-reduce side).

# %% [markdown]
# ## Heterogeneous ranks: El Che
#
# Everything so far assumes equally fast ranks. Put a new GPU next to an old
# one, or next to one that another job shares, and every collective waits
# for the slowest: data parallel waits for the slow rank's backward pass at
# every all-reduce, local SGD for its k steps at every average. A GPU three
# times faster than its partner idles two thirds of the time.
#
# The cure is to stop asking every rank for the same number of steps.
# Between two averages — a **round** — the slowest rank takes `anchor`
# steps, and every other rank as many as it finishes in the same time: a
# rank three times faster takes 3 × `anchor`. The batches come from one
# stream and go to whichever rank's turn it is, so a fast rank simply trains
# on more of them. (The floDl framework calls this scheme *El Che*; the name
# stuck here.)
#
# * **The weights are the samples seen.** At the end of a round the replicas
#   are averaged as in local SGD, each weighted by its share of the samples
#   it trained on during the round. A rank that took 12 steps of 32 samples
#   counts three times as much as one that took 4: the average is a mean
#   over samples, not over ranks, so the slow rank's few steps do not pull
#   as hard as the fast rank's many.
# * **The cadence adapts.** Nobody tells El Che how fast the ranks are. It
#   times every rank's steps during a round and plans the next round from
#   those times, smoothed over rounds (an exponential moving average, so one
#   hiccup does not swing the plan). The first round, with nothing measured
#   yet, gives every rank `anchor` steps.
# * **The clock does not stall the GPU.** Reading a clock after every step
#   would cost a device-to-host sync per batch, which module 08 avoids. On a
#   GPU the steps are timed with CUDA events, which the device stamps itself
#   as its queue reaches them, and which are read once per round; on the CPU
#   `time.perf_counter` is enough.
#
# The price is drift. Between averages the fast rank walks further from the
# others than local SGD's k steps would take it, so `max_steps` caps its
# steps per round; and its optimizer state (momentum, Adam's averages)
# follows its own steps. The communication is set by the slowest rank: one
# average per `anchor` of its steps.
#
# Write `el_che_plan(step_seconds, anchor, max_steps)`: `step_seconds[r]` is
# rank r's time per step. The slowest rank takes `anchor` steps; every rank r
# takes `round(anchor * slowest / step_seconds[r])` steps (no rank is slower
# than the slowest, so that is never less than `anchor`), but never more than
# `max_steps`. Return a list with one int per rank. The first line checks the
# arguments for you. Times of 0.01 s and 0.03 s per step with `anchor=4` give
# `[12, 4]`.

# %%
#| export
def _check_el_che(owner: str, anchor: Any, max_steps: Any, step_seconds: Any = None) -> None:
    """A one-line ValueError naming the argument when El Che's settings (or step times) are not what they must be."""
    check_arg(owner, "anchor", anchor, "a positive integer")
    check_arg(owner, "max_steps", max_steps, "a positive integer")
    if max_steps < anchor:
        raise ValueError(f"{owner} got max_steps={max_steps!r}; expected an integer >= anchor ({anchor})")
    if step_seconds is None:
        return
    if not isinstance(step_seconds, Sequence | np.ndarray) or np.ndim(step_seconds) != 1 or len(step_seconds) == 0:
        got = f" of shape {step_seconds.shape}" if isinstance(step_seconds, np.ndarray) else f"={step_seconds!r}"
        raise ValueError(f"{owner} got step_seconds{got}; expected a list of seconds per step, one per rank")
    for r, t in enumerate(step_seconds):
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 < t < math.inf:
            raise ValueError(f"{owner} got step_seconds[{r}]={t!r}; expected a positive, finite number of seconds")


# %% [markdown]
# ### Task `distributed_el_che` (2 points): the plan of a round
#
# **Checked when graded** (besides the tests below), for your own drawn
# anchor, max_steps and step times (no rank's exact share of steps within
# 0.1 of a half, so rounding has one answer), the ranks in any order:
#
# * the slowest rank takes anchor steps, every other rank round(anchor · slowest / its seconds per step): to the nearest integer, not down or up
# * a rank fast enough for more than max_steps takes max_steps
# * one rank: the slowest and the fastest, it takes the anchor
# * a NumPy array of times works too
# * the plan holds Python ints

# %% nbgrader={"grade": false, "grade_id": "distributed_el_che_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def el_che_plan(step_seconds: Sequence[float], anchor: int = 4, max_steps: int = 64) -> list[int]:
    """Steps per rank in one round: ``anchor`` for the slowest rank, more for faster ones in proportion, at most ``max_steps``."""
    _check_el_che("el_che_plan", anchor, max_steps, step_seconds)
    ### BEGIN SOLUTION
    slowest = max(step_seconds)
    return [min(max_steps, round(anchor * slowest / t)) for t in step_seconds]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "distributed_el_che", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert el_che_plan([0.01, 0.03], anchor=4, max_steps=64) == [12, 4], (
    "0.01 s and 0.03 s per step: the slow rank takes the anchor's 4 steps, the three times faster one 12")
assert el_che_plan([0.02, 0.02, 0.02], anchor=3, max_steps=10) == [3, 3, 3], "equally fast ranks all take the anchor"
assert el_che_plan([0.001, 0.1], anchor=4, max_steps=64) == [64, 4], "a rank 100 times faster is capped at max_steps"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the anchor, max_steps, the slowest time, and each
# other rank's exact share of steps: one that rounds up, one that rounds down, one past max_steps.
_anchor = int(check_rng.integers(2, 7))
_max = 5 * _anchor + int(check_rng.integers(0, 4))
_slowest = float(check_rng.uniform(0.01, 0.1))
_shares = [_anchor + int(check_rng.integers(1, 3 * _anchor)) + float(check_rng.uniform(0.6, 0.9)),  # rounds up
           _anchor + int(check_rng.integers(1, 3 * _anchor)) + float(check_rng.uniform(0.1, 0.4)),  # rounds down
           _max + float(check_rng.uniform(1.6, 20.0))]  # past max_steps
_order = [int(i) for i in check_rng.permutation(3)]
_times = [_slowest if i == 2 else _anchor * _slowest / _shares[i] for i in _order]  # the slowest and two faster ranks
_plan = el_che_plan(_times, anchor=_anchor, max_steps=_max)
assert _plan == [_anchor if i == 2 else round(_shares[i]) for i in _order], (
    "the slowest rank takes anchor steps, every other rank round(anchor · slowest / its seconds per step): "
    "to the nearest integer, not down or up")
_order = [int(i) for i in check_rng.permutation(4)]
_times = [_slowest if i == 3 else _anchor * _slowest / _shares[i] for i in _order]
_expected = [_anchor if i == 3 else min(_max, round(_shares[i])) for i in _order]
assert el_che_plan(_times, anchor=_anchor, max_steps=_max) == _expected, (
    "a rank fast enough for more than max_steps takes max_steps")
_one = int(check_rng.integers(1, 9))
assert el_che_plan([float(check_rng.uniform(0.001, 1.0))], anchor=_one, max_steps=_one + int(check_rng.integers(0, 5))) == [
    _one], "one rank: the slowest and the fastest, it takes the anchor"
_plan = el_che_plan(np.array(_times), anchor=_anchor, max_steps=_max)
assert _plan == _expected, "a NumPy array of times works too"
assert [type(k).__name__ for k in _plan] == ["int"] * 4, "the plan holds Python ints"
### END HIDDEN TESTS

# %% [markdown]
# ### A round, in code
#
# `DataParallel` asks its `LocalSGD` two questions: before a step, which
# ranks take it (`pick_ranks`: all of them, each on its shard), and after
# it, whether to average now (`step_taken`: every k steps).
# `ElChe(anchor, max_steps, smoothing)` is a `LocalSGD` that answers them
# differently. `pick_ranks` names **one** rank, the next in the round's
# order, which takes the whole batch; and `step_taken` says to average once
# every rank has done its share of the round, after planning the next round
# from the measured times. The order
# spreads each rank's steps evenly over the round (`el_che_order`): rank r's
# j-th step falls at the fraction (j + 1) / k_r of the round, so the plan
# [6, 2] deals the batches to ranks 0 0 0 1 0 0 0 1 — on GPUs, both queues
# stay fed. `StepClock` times one rank's steps.
#
# With that, `DataParallel(model, group, optimizer, local_sgd=ElChe())`
# trains with El Che — its `train_step` gives each batch to the rank whose
# turn it is — and so does the Trainer with
# `plugins=[DataParallelStrategy(group, local_sgd=ElChe())]`: the plug-in
# hands the Trainer the stepping rank's optimizer and parameters, so the
# learning-rate schedule, the clipping, the guard and a loss scaler act on
# that rank's step. Evaluation and checkpoints use replica 0, as with local
# SGD; `average()` (of the `DataParallel`, or of the plug-in's `parallel`)
# makes every replica the mean of them first.
#
# El Che needs the `local` engine, where one process deals every batch.
# Under `mpi` or `nccl` each process reads its own batches, and the
# processes would first have to agree on how many rounds an epoch holds;
# there it raises an error that says so.

# %%
#| export
def el_che_order(plan: Sequence[int]) -> list[int]:
    """The ranks of a round's steps, in order: rank r comes ``plan[r]`` times, spread evenly over the round."""
    due = sorted(((j + 1) / k, r) for r, k in enumerate(plan) for j in range(k))
    return [r for _, r in due]


class StepClock:
    """How long one rank's steps take, with no device read per step: perf_counter on a CPU, CUDA events on a GPU."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.spans: list[tuple[Any, Any]] = []  # (start, end) of every step since the last seconds()
        self.started: Any = None

    def _now(self) -> Any:
        if self.device.type == "cpu":
            return time.perf_counter()
        with self.device:
            event = self.device.xp.cuda.Event()
            event.record()  # the GPU stamps it when its queue gets there: no wait here
        return event

    def start(self) -> None:
        """A step begins (a step begun again replaces the unfinished one)."""
        self.started = self._now()

    def stop(self) -> None:
        """The step begun last is done (on a GPU: queued)."""
        self.spans.append((self.started, self._now()))

    def seconds(self) -> float:
        """The seconds the steps since the last call took; on a GPU, one wait for the last of them."""
        spans, self.spans = self.spans, []
        if self.device.type == "cpu" or not spans:
            return float(sum(end - start for start, end in spans))
        spans[-1][1].synchronize()
        return sum(self.device.xp.cuda.get_elapsed_time(start, end) for start, end in spans) / 1000


class ElChe(LocalSGD):
    """Local SGD for ranks of unequal speed: between averages each rank takes as many steps as its speed allows.

    The slowest rank takes ``anchor`` steps per round, the others more in proportion to their measured
    speed (at most ``max_steps``); ``smoothing`` is the weight the old times keep when a round's are added.
    """

    def __init__(self, anchor: int = 4, max_steps: int = 64, smoothing: float = 0.5) -> None:
        _check_el_che("ElChe", anchor, max_steps)
        check_arg("ElChe", "smoothing", smoothing, "a number in [0, 1]")
        super().__init__(period=anchor)
        self.anchor, self.max_steps, self.smoothing = int(anchor), int(max_steps), float(smoothing)
        self.step_seconds: list[float] | None = None  # each rank's smoothed seconds per step; None until measured
        self.rounds = 0  # rounds finished
        self.plan: list[int] = []  # each rank's steps in the round under way
        self.order: list[int] = []  # who takes each step of the round
        self.position = 0  # the step of the round under way
        self.clocks: list[StepClock] = []

    def __repr__(self) -> str:
        return f"ElChe(anchor={self.anchor}, max_steps={self.max_steps}, smoothing={self.smoothing})"

    def start(self, parallel: DataParallel) -> None:
        group = parallel.group
        if len(group.local_ranks) != group.world_size:
            raise ValueError(
                f"ElChe: El Che needs the local backend (init_process_group('local', ...)), where one process deals "
                f"every rank its batches; under {group.backend!r} each process reads its own, and the processes "
                "would have to agree on how many rounds an epoch holds. Use LocalSGD(period=k) there"
            )
        if self.clocks:
            raise ValueError("ElChe: these rounds already drive another DataParallel; give each its own ElChe(...)")
        self.clocks = [StepClock(dev) for dev in group.devices]
        self._begin_round([self.anchor] * group.world_size)  # nothing measured yet: the same for every rank

    def _begin_round(self, plan: list[int]) -> None:
        self.plan, self.order, self.position = plan, el_che_order(plan), 0

    def pick_ranks(self, parallel: DataParallel) -> list[int]:
        """The one rank whose turn it is; its clock starts."""
        rank = self.order[self.position]
        self.clocks[rank].start()
        return [rank]

    def step_taken(self, parallel: DataParallel) -> bool:
        """Stop the rank's clock; at the end of the round, plan the next one from the times and average."""
        self.clocks[self.order[self.position]].stop()
        self.position += 1
        if self.position < len(self.order):
            return False
        measured = [max(clock.seconds() / k, 1e-9) for clock, k in zip(self.clocks, self.plan)]
        s = self.smoothing
        self.step_seconds = measured if self.step_seconds is None else [
            s * old + (1 - s) * new for old, new in zip(self.step_seconds, measured)]
        self.rounds += 1
        self._begin_round(el_che_plan(self.step_seconds, self.anchor, self.max_steps))
        return True


# %% [markdown]
# Two virtual ranks on the regression problem above, rank 1 made about ten
# times slower on purpose: a layer that sleeps 1 ms when it runs on `cpu:1`.
# El Che trains on 96 batches of 32 and then to the end of its round; data
# parallel, for comparison, on the same batches, each split between the
# ranks:

# %%
class _SlowOnRank1(Module):
    """Passes its input on; on cpu:1 it first sleeps 1 ms, which makes that rank the slow one."""

    def forward(self, x: Tensor) -> Tensor:
        if x.device is as_device("cpu:1"):
            time.sleep(0.001)
        return x


def _heterogeneous_run(local_sgd: Any, batches: int) -> tuple[Any, list[list[int]], int]:
    """Train on ``batches`` batches of 32 (El Che: then to the end of the round); the model, the plans, the batches."""
    manual_seed(0)
    model = Sequential(_SlowOnRank1(), Linear(3, 16), ReLU(), Linear(16, 1)).double()
    dp = DataParallel(model, init_process_group("local", world_size=2), SGD(model.parameters(), lr=0.2),
                      local_sgd=local_sgd)
    order, plans, step = np.random.default_rng(4), [list(getattr(local_sgd, "plan", []))], 0
    while step < batches or (local_sgd is not None and local_sgd.position > 0):
        idx = order.choice(512, 32, replace=False)
        dp.train_step(Tensor(_Xall[idx]), Tensor(_Yall[idx]), mse_loss)
        step += 1
        if local_sgd is not None and local_sgd.rounds == len(plans):  # a round ended: the next one's plan
            plans.append(list(local_sgd.plan))
    return dp, plans[:-1], step


_el_che = ElChe(anchor=2, max_steps=32)
_dp_el_che, _plans, _batches = _heterogeneous_run(_el_che, 96)
_dp_sync, _, _ = _heterogeneous_run(None, _batches)
for _i, _plan in enumerate(_plans):
    print(f"round {_i + 1}: rank 0 took {_plan[0]:2d} steps, rank 1 {_plan[1]}")
print("measured ms per step:", [round(1000 * t, 2) for t in _el_che.step_seconds],
      f"; batches per rank: {np.sum(_plans, axis=0).tolist()} of {_batches}")
for _name, _dp in (("El Che", _dp_el_che), ("data parallel", _dp_sync)):
    _loss = float(mse_loss(_dp.module(Tensor(_Xall)), Tensor(_Yall)).item())
    print(f"{_name:>13}: full-data loss after {_batches} batches {_loss:.4f}")

# %% [markdown]
# The plan follows the clocks: the first round gives both ranks the anchor,
# the next ones give rank 0 more steps as its measured time settles. The
# losses land near each other — above or below, depending on where the
# rounds end; tinyflo's own tests check that on a classification problem
# El Che's accuracy stays within 5 points of data parallel's. What one CPU
# cannot show is the time, since here the two virtual ranks take turns on
# the same processor. On two devices working side by side, every one of
# data parallel's steps waits for the slow rank; a round of El Che lasts
# about `anchor` of the slow rank's steps, and the fast rank works through
# its share of the batches meanwhile instead of waiting.
#
# ## Running on several processes and machines
#
# Nothing above depends on the engine. The same script, written against
# `init_process_group()` and `DataParallel`, runs on two processes with MPI:
#
# ```bash
# tinyflo launch -n 2 --backend mpi train.py     # = mpiexec -n 2 python -m mpi4py train.py, TINYFLO_BACKEND=mpi
# tinyflo launch -n 4 --backend nccl train.py    # one process per GPU: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT
# ```
#
# ```python
# group = init_process_group()                    # the backend from the launcher's environment
# dp = DataParallel(model, group, optimizer)      # rank 0's weights everywhere
# for x, y in loader:                             # every rank reads the same batches (same seed) ...
#     loss = dp.train_step(x, y, cross_entropy)   # ... and trains on its shard
# if group.rank == 0:
#     save_checkpoint(...)                        # one rank writes; the others wait
# group.barrier()
# ```
#
# **Several machines.** MPI already knows how: list the machines and how many
# ranks each takes in a host file and start from one of them,
#
# ```bash
# # hosts:   node1 slots=4
# #          node2 slots=4
# mpiexec -hostfile hosts -n 8 python -m mpi4py train.py
# ```
#
# What has to be true: the same Python environment and script at the same
# path on every machine (a shared file system or a container image),
# password-less ssh from the first machine to the others, and open ports
# between them. Each machine reads the same data (or its own copy). For
# GPUs, `nccl` does the same with one process per GPU: run the launcher on
# every machine with `MASTER_ADDR` set to machine 0's address and `RANK` =
# machine index × GPUs per machine + local GPU; NCCL finds InfiniBand or
# falls back to TCP sockets by itself (`NCCL_SOCKET_IFNAME` picks the
# network card). What does not change: the model code, `DataParallel`, the
# optimizer, the results — which are the same as one process's up to the
# order of floating-point additions. What changes: the all-reduce is now
# bounded by the slowest link (tens of Gbit/s between machines against
# hundreds of GB/s of NVLink inside one), which is where larger batches,
# gradients in 16 bits, overlapping communication with the backward pass,
# and local SGD earn their keep.
#
# ## Questions
#
# 1. A 25 M-parameter float32 model trains with data parallel on 8 GPUs
#    linked at 25 GB/s. How many bytes does each GPU send per step, and how
#    long does the all-reduce take at best? And with the naive scheme?
# 2. Rank 3 of 4 gets an empty shard (a batch of 3 samples). Why is its
#    all-reduce still needed, and what does it contribute?
# 3. Why does `DataParallel` broadcast the initial parameters, if every rank
#    builds the model from the same seed anyway?
# 4. With Adam instead of SGD, is local SGD with k = 1 still equal to data
#    parallel? Why (not)?
# 5. Under El Che, rank 0 steps in 10 ms and rank 1 in 25 ms, with
#    `anchor=4`. How many steps does each take per round, what weight does
#    each get in the average with batches of 32, and about how long does a
#    round last on two devices side by side?
