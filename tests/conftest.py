"""Shared fixtures: the devices every tensor test runs on."""

import pytest

import tinyflo

GPU_AVAILABLE = tinyflo.cuda_is_available()


def device_params() -> list:
    """``cpu`` always; ``cuda:0`` with the ``gpu`` marker (skipped without a GPU)."""
    return ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)]


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Each available device in turn."""
    return request.param


def pytest_collection_modifyitems(config, items):
    if GPU_AVAILABLE:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (CuPy with cupy.cuda.is_available())")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
