"""The strict CuPy stand-in (tinyflo.strict_gpu): what it refuses and counts, and the GPU tests run on it.

The unit tests use a namespace built for the test (nothing is installed in this process); the last test
runs every `gpu`-marked test in a child pytest with TINYFLO_FAKE_GPU=strict, as CI does.
"""

from __future__ import annotations

import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyflo import strict_gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cp():
    return strict_gpu._build()["cupy"]


@pytest.fixture(autouse=True)
def _fresh_counter():
    strict_gpu.reset_reads()


def test_implicit_conversion_to_numpy_is_refused(cp):
    a = cp.arange(3, dtype=cp.float32)
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array([a, a])
    assert strict_gpu.reads() == 0


def test_host_operands_are_refused_but_host_parameters_pass(cp):
    a = cp.ones((2, 3), dtype=cp.float32)
    for mix in (lambda: a + np.ones(3, np.float32), lambda: cp.maximum(a, np.zeros(3)),
                lambda: cp.concatenate([a, np.ones((1, 3))]), lambda: a.dot(np.ones(3))):
        with pytest.raises(TypeError, match="Unsupported type"):
            mix()
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for fill"):
        a[0] = np.arange(3.0)
    a[0] = np.float32(2.0)  # a NumPy scalar is a value, as in CuPy
    assert a.transpose(np.array([1, 0])).shape == (3, 2)  # axes given as a host array are parameters
    assert [p.shape for p in cp.split(cp.arange(6), np.array([2, 4]))] == [(2,), (2,), (2,)]
    assert (a * 2.0).dtype == np.float32 and (a * np.float32(2)).dtype == np.float32


def test_arrays_of_another_device_are_refused(cp):
    a = cp.ones(3)
    with cp.cuda.Device(1):
        b = cp.ones(3)
        assert b.device.id == 1
        with pytest.raises(ValueError, match="different from the current device"):
            a + b
    with pytest.raises(ValueError, match="different from the current device"):
        a + b
    with cp.cuda.Device(1):
        moved = cp.asarray(a)  # cupy.asarray copies to the current device
        assert moved.device.id == 1 and (moved + b).device.id == 1
    with pytest.raises(ValueError, match="different from the current device"):
        moved + b  # both on device 1, but device 0 is current: CuPy runs kernels on the current device
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        cp.cuda.Device(strict_gpu.DEVICE_COUNT)


@pytest.mark.parametrize("read", [
    lambda a: a.get(), lambda a: float(a.sum()), lambda a: int(a[0]), lambda a: bool(a.any()),
    lambda a: a.sum().item(), lambda a: a.tolist(), lambda a: repr(a), lambda a: str(a),
    lambda a: f"{a.sum():.2f}", lambda a: pickle.dumps(a), lambda a: strict_gpu.asnumpy(a),
], ids=["get", "float", "int", "bool", "item", "tolist", "repr", "str", "format", "pickle", "asnumpy"])
def test_every_read_back_to_the_host_is_counted(cp, read):
    a = cp.arange(4, dtype=cp.float32)
    with pytest.raises(AssertionError, match="device-to-host reads inside a no-read block"):
        with strict_gpu.no_reads():
            read(a)
    assert strict_gpu.reads() == 1


def test_host_to_device_copies_are_counted_apart(cp):
    a = cp.asarray(np.arange(6.0))
    a[np.array([0, 2])] = 1.0  # a host index array goes over first, as in CuPy
    a.set(np.zeros(6))
    assert dict(strict_gpu.UPLOADS) == {"asarray": 1, "index": 1, "set": 1} and strict_gpu.reads() == 0


def test_device_work_reads_nothing(cp):
    with strict_gpu.no_reads():
        a = cp.asarray(np.arange(6.0)).reshape(2, 3)  # host to device is a copy, not a read
        b = cp.where(cp.isfinite(a), a * 2, 0.0).sum(axis=0)
        a[...] = cp.log(a)  # log(0) = -inf: no warning, as on a GPU
        cp.cuda.Device().synchronize()
    assert strict_gpu.reads() == 0 and b.shape == (3,)


def test_results_are_device_arrays_like_cupys(cp):
    a = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    total = a.sum()
    assert isinstance(total, cp.ndarray) and total.shape == () and total.dtype == np.float32
    assert isinstance(a[0, 1], cp.ndarray), "scalar indexing gives a 0-d array"
    out = cp.zeros(3, dtype=cp.float32)
    assert cp.multiply(a[0], 2, out=out) is out, "out= returns the caller's array"
    owner = cp.zeros((2, 3))
    assert owner.reshape(-1)[1:].base is owner and owner.T.base is owner, "a view's base owns the memory"
    assert isinstance(np.sum(a, axis=1), cp.ndarray), "NumPy functions dispatch to the device (NEP 18)"
    assert isinstance(np.add(a, a), cp.ndarray) and np.add(a, a).dtype == np.float32


def test_only_cupys_routines_exist(cp):
    assert cp.logaddexp is not None and cp.float32 is np.float32 and cp.inf == math.inf
    with pytest.raises(AttributeError, match="has no attribute 'piecewise'"):
        getattr(cp, "piecewise")  # noqa: B009
    assert "piecewise" not in strict_gpu.ROUTINES and hasattr(np, "piecewise")
    missing = sorted(name for name in strict_gpu.ROUTINES if not hasattr(np, name))
    assert missing == [], f"names NumPy cannot serve: {missing}"


def test_cupyx_erf_and_scatter_add(cp):
    modules = strict_gpu._build()
    erf, scatter_add = modules["cupyx.scipy.special"].erf, modules["cupyx"].scatter_add
    x = cp.asarray(np.linspace(-3, 3, 7, dtype=np.float32))
    got = erf(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.get(), [math.erf(v) for v in np.linspace(-3, 3, 7)], rtol=1e-6)
    acc = cp.zeros(3)
    scatter_add(acc, cp.asarray(np.array([0, 2, 0, 0])), cp.ones(4))
    np.testing.assert_array_equal(acc.get(), [3.0, 0.0, 1.0])


def test_a_kernel_without_a_reference_is_refused(cp):
    kernel = cp.ElementwiseKernel("T x", "T y", "y = x", "not_registered")
    with pytest.raises(NotImplementedError, match="no NumPy reference registered for kernel 'not_registered'"):
        kernel(cp.ones(2), cp.ones(2))


def test_events_time_the_host(cp):
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    assert cp.cuda.get_elapsed_time(start, end) >= 0


@pytest.mark.parametrize("work, kernels, allocations", [
    (lambda cp, a, b: a + b, 1, 1),  # an elementwise kernel, its result
    (lambda cp, a, b: cp.add(a, b, out=a), 1, 0),  # into the caller's array
    (lambda cp, a, b: a.__iadd__(b), 1, 0),
    (lambda cp, a, b: a.reshape(3, 2), 0, 0),  # views compute nothing
    (lambda cp, a, b: a.T, 0, 0),
    (lambda cp, a, b: a[1:], 0, 0),
    (lambda cp, a, b: a[cp.asarray([0, 2])], 1, 2),  # the index array sent over, then a gather
    (lambda cp, a, b: a.sum(axis=0), 1, 1),  # a reduction
    (lambda cp, a, b: a.astype(cp.float32, copy=False), 0, 0),  # already float32
    (lambda cp, a, b: a.astype(cp.float64), 1, 1),
    (lambda cp, a, b: a @ b.T, 1, 1),
    (lambda cp, a, b: cp.zeros((4, 4), cp.float32), 1, 1),  # allocated and filled
    (lambda cp, a, b: cp.empty((4, 4), cp.float32), 0, 1),  # allocated only
    (lambda cp, a, b: a.__setitem__(slice(None), 0.0), 1, 0),
    (lambda cp, a, b: cp.copyto(a, b), 1, 0),  # in place
    (lambda cp, a, b: a.copy(), 1, 1),
    (lambda cp, a, b: cp.split(a, 3), 0, 0),
])
def test_device_work_is_counted_as_a_gpu_would_do_it(cp, work, kernels, allocations):
    """Kernels launched and arrays allocated: what a GPU step costs besides its arithmetic."""
    a, b = cp.ones((3, 2), cp.float32), cp.ones((3, 2), cp.float32)
    with strict_gpu.counting():
        work(cp, a, b)
    assert strict_gpu.counts() | {"uploads": 0} == {"kernels": kernels, "allocations": allocations, "uploads": 0,
                                                    "reads": 0, "syncs": 0}


def test_reads_and_synchronisations_are_counted_as_waits(cp):
    a = cp.ones(3, cp.float32)
    with strict_gpu.counting():
        float(a.sum())
        cp.cuda.Device(0).synchronize()
    a.sum()  # outside a counting block: kernels and allocations are not counted
    assert strict_gpu.counts() == {"kernels": 1, "allocations": 1, "uploads": 0, "reads": 1, "syncs": 2}
    strict_gpu.reset_counts()
    assert strict_gpu.counts() == dict.fromkeys(("kernels", "allocations", "uploads", "reads", "syncs"), 0)


def test_the_variable_takes_strict_or_nothing(monkeypatch):
    monkeypatch.setenv("TINYFLO_FAKE_GPU", "yes")
    with pytest.raises(ValueError, match="TINYFLO_FAKE_GPU must be 'strict' \\(or unset\\); got 'yes'"):
        strict_gpu.active()
    monkeypatch.setenv("TINYFLO_FAKE_GPU", "strict")
    assert strict_gpu.active()
    monkeypatch.delenv("TINYFLO_FAKE_GPU")
    assert not strict_gpu.active()


@pytest.mark.skipif(strict_gpu.active(), reason="this run is already on the stand-in")
def test_every_gpu_test_runs_on_the_strict_stand_in():
    """CI has no GPU: every `gpu` test runs again on the stand-in; only `gpu_hardware` ones are left out."""
    env = {**os.environ, "TINYFLO_FAKE_GPU": "strict"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=-rfEs --strict-markers"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    assert counts.get("passed", 0) >= 590, summary
    skipped = re.findall(r"SKIPPED \[\d+\] (\S+): (.*)", done.stdout)
    reasons = {reason for _, reason in skipped}
    assert reasons <= {"needs a real CUDA GPU: the strict stand-in cannot run it", "CuPy has no bfloat16"}, reasons
