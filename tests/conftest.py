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


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (CuPy with cupy.cuda.is_available())")
    no_hardware = pytest.mark.skip(reason="needs a real CUDA GPU: the strict stand-in cannot run it")
    for item in items:
        if "gpu_hardware" in item.keywords and STAND_IN:
            item.add_marker(no_hardware)
        elif "gpu" in item.keywords and not GPU_AVAILABLE:
            item.add_marker(no_gpu)
    items[:] = _dealt(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


# Seconds a test takes on a 2-core machine, for the ones that take long (measured with --durations);
# any other slow-marked test counts as SLOW_SECONDS, the rest as nothing.
LONG_TESTS = {"test_a_module_goes_out_comes_back_graded": 70, "test_grading_proofs.py::": 40, "test_a_class_with_attackers": 40,
              "test_every_gpu_test_runs_on_the_strict_stand_in": 38, "test_gpu_proof_smoke_run": 29,
              "test_lenet_reaches_97_percent": 28, "test_a_hostile_notebook_is_inert_in_chromium": 22,
              "test_book_build_writes_every_page": 30, "test_no_attack_earns_a_point_or_leaks": 12}
SLOW_SECONDS = 5


def _seconds(item) -> float:
    return next((s for name, s in LONG_TESTS.items() if name in item.nodeid), SLOW_SECONDS if "slow" in item.keywords else 0)


def _dealt(items: list, workers: int) -> list:
    """The tests in the order that ends soonest on `workers` pytest-xdist workers: the long ones dealt,
    longest first, each to the worker with the least so far, and each worker's share starts with its
    long ones; the quick ones (in their order) fill the shares after them. pytest-xdist's worksteal
    gives each worker a contiguous share of the list (the first n // workers, and so on) and lets an
    idle one take the end of another's queue: the quick tests at the end are what moves."""
    long = sorted((item for item in items if _seconds(item)), key=_seconds, reverse=True)
    quick = [item for item in items if not _seconds(item)]
    sizes, left = [], len(items)
    for k in range(workers):  # as worksteal splits its pending list among idle workers
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    shares, load = [[] for _ in range(workers)], [0.0] * workers
    for item in long:
        k = min((k for k in range(workers) if len(shares[k]) < sizes[k]), key=lambda k: load[k])
        shares[k].append(item)
        load[k] += _seconds(item)
    for k in range(workers):
        taken, quick = quick[: sizes[k] - len(shares[k])], quick[sizes[k] - len(shares[k]):]
        shares[k] += taken
    return [item for share in shares for item in share]


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
