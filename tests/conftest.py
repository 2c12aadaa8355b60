"""Shared fixtures: the devices every tensor test runs on, and a CPU that behaves like a GPU for reads."""

import pytest

import tinyflo
import tinyflo.core.tensor

GPU_AVAILABLE = tinyflo.cuda_is_available()


def device_params() -> list:
    """``cpu`` always; ``cuda:0`` with the ``gpu`` marker (skipped without a GPU)."""
    return ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)]


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Each available device in turn."""
    return request.param


@pytest.fixture
def reads_wait(monkeypatch):
    """Within the test, every device says reading a value back waits (``Device.reads_wait``), as a GPU does.

    The checks that a GPU keeps on the device instead of reading (class targets, Embedding indices)
    then run on the CPU, where a test can see them.
    """
    monkeypatch.setattr(tinyflo.core.tensor.Device, "reads_wait", property(lambda self: True))


def pytest_collection_modifyitems(config, items):
    if GPU_AVAILABLE:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (CuPy with cupy.cuda.is_available())")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
