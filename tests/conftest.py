"""Shared fixtures: the devices every tensor test runs on, and a CPU that behaves like a GPU for reads."""

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

import tinyflo
import tinyflo.core.tensor
from tinyflo import strict_gpu
from tinyflo.course.notebooks import without_iri_grammars

without_iri_grammars()  # before any test imports nbformat: a second off each worker's start

# A suite started in the background of a non-interactive shell (`./.ci/run &`) inherits SIGINT
# ignored, and so would every command a test starts: the tests that press Ctrl-C need it as a
# terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

GPU_AVAILABLE = tinyflo.cuda_is_available()
STAND_IN = strict_gpu.active()  # TINYFLO_FAKE_GPU=strict: cuda:0 is the strict stand-in, not a GPU


def device_params() -> list:
    """``cpu`` always; ``cuda:0`` with the ``gpu`` marker (skipped without a GPU)."""
    return ["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)]


@pytest.fixture(params=device_params())
def device(request) -> str:
    """Each available device in turn."""
    return request.param


@pytest.fixture(autouse=True)
def first_gpu_current_again():
    """A test that made another GPU current (a Trainer on cuda:1 does, as torch.cuda.set_device) leaves
    cuda:0 current for the next one: the device is a per-thread setting every later test would inherit."""
    yield
    if GPU_AVAILABLE:
        tinyflo.device("cuda:0").xp.cuda.Device(0).use()


@pytest.fixture
def reads_wait(monkeypatch):
    """Within the test, every device says reading a value back waits (``Device.reads_wait``), as a GPU does.

    The checks that a GPU keeps on the device instead of reading (class targets, Embedding indices)
    then run on the CPU, where a test can see them.
    """
    monkeypatch.setattr(tinyflo.core.tensor.Device, "reads_wait", property(lambda self: True))


@pytest.fixture
def strict_reads():
    """The stand-in's read counter, reset: what a test counts device-to-host reads with (skipped on a real GPU)."""
    if not STAND_IN:
        pytest.skip("counting reads needs the strict stand-in (TINYFLO_FAKE_GPU=strict)")
    strict_gpu.reset_reads()
    return strict_gpu


LONGEST = ("tests/course/test_hub.py", "tests/course/test_gradescope.py")  # a real hub; Gradescope's runs


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (CuPy with cupy.cuda.is_available())")
    no_hardware = pytest.mark.skip(reason="needs a real CUDA GPU: the strict stand-in cannot run it")
    for item in items:
        if "gpu_hardware" in item.keywords and STAND_IN:
            item.add_marker(no_hardware)
        elif "gpu" in item.keywords and not GPU_AVAILABLE:
            item.add_marker(no_gpu)
    # The slow tests first, the longest of them (a minute or more each, one test that cannot be
    # shared) at the very start; the order is otherwise kept: the quick ones then fill the workers'
    # gaps, instead of one worker running the last long test alone while the other waits.
    items.sort(key=lambda item: ("slow" not in item.keywords, not item.nodeid.startswith(LONGEST)))


BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000")


@pytest.fixture(scope="module")
def browser():
    """A Selenium session in the system's headless Chromium, or a skip (a failure in CI)."""
    chromium, driver = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
    reason = None
    if not Path(chromium).is_file():
        reason = "no Chromium at /usr/bin/chromium (Debian: apt-get install chromium chromium-driver)"
    elif driver is None:
        reason = "no chromedriver on PATH (Debian: apt-get install chromium-driver)"
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        reason = reason or "selenium is not installed (it comes with the 'book' extra)"
    if reason:
        if os.environ.get("TINYFLO_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TINYFLO_REQUIRE_BROWSER=1, but {reason}")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*BROWSER_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='tinyflo-chromium-')}"):
        options.add_argument(flag)
    # an explicit driver path: Selenium Manager never tries to download one
    session = webdriver.Chrome(service=Service(driver), options=options)
    session.set_page_load_timeout(30)
    # the flag's size is not honoured by every headless Chromium; a narrow window turns JupyterLab
    # into its one-document mode, with another menu and status bar
    session.set_window_size(1400, 1000)
    yield session
    session.quit()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core this process may use. The heavy tests run several processes
    each (a grading proof grades with nbgrader, the engine and the student loop at once), so the
    cores stay busy; a worker more only made them share: the suite took 980-990 s on 2 cores with
    3 workers, 888 s with 2."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
