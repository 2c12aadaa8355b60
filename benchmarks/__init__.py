"""tinyflo's benchmarks: recorded measurements, run with ``python -m benchmarks``.

Importing this package fixes the process settings every measurement shares.
It must happen before NumPy or PyTorch is imported, which is why the
benchmarks run as modules of this package (``python -m benchmarks.X``).
"""

import ctypes
import faulthandler
import os
import platform
import signal
import sys

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
# One count for every library's threads: TINYFLO_NUM_THREADS=1 measures the whole run on one core.
_asked = os.environ.get("TINYFLO_NUM_THREADS", "").strip()
if _asked and (not _asked.isdecimal() or int(_asked) < 1):  # as tinyflo reads it
    sys.exit(f"benchmarks: TINYFLO_NUM_THREADS must be a positive whole number of threads; got {_asked!r}")
THREADS = int(_asked) if _asked else CORES
THREAD_VARIABLES = ("TINYFLO_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_THREAD_TIMEOUT")
for _variable in THREAD_VARIABLES[:4]:
    os.environ.setdefault(_variable, str(THREADS))
# OpenBLAS's idle threads otherwise spin for about 0.1 s after every call, taking
# the cores from whatever variant runs next (PyTorch's threads, on a small machine).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

# float32 means float32 on a GPU too: CuPy's products take TF32's 10-bit mantissas when CUPY_TF32 is set,
# and cuBLAS's and cuDNN's when NVIDIA_TF32_OVERRIDE is; both are read before CuPy's first product.
os.environ["CUPY_TF32"] = "0"
os.environ["NVIDIA_TF32_OVERRIDE"] = "0"

# NumPy reads these variables once, when it is first imported.
THREADS_SET_BEFORE_NUMPY = "numpy" not in sys.modules


def _steady_malloc(threshold: int = 1 << 30) -> str:
    """Make glibc keep freed memory for reuse instead of returning it to the OS after every step.

    By default glibc trims the heap and unmaps large blocks as soon as they are
    free, so a training step that allocates a few MB of temporaries pays
    thousands of page faults every time (about 4 ms per step of the large MLP
    here); how many depends on what else the process allocated, which makes
    NumPy timings jump between runs. PyTorch's own allocator avoids this.
    BENCH_MALLOC=system keeps glibc's defaults.
    """
    if os.environ.get("BENCH_MALLOC") == "system":
        return "system default (BENCH_MALLOC=system)"
    if platform.libc_ver()[0] != "glibc":
        return f"system default ({platform.libc_ver()[0] or 'not glibc'})"
    mallopt = ctypes.CDLL(None).mallopt
    m_trim_threshold, m_mmap_threshold = -1, -3
    if mallopt(m_trim_threshold, threshold) != 1 or mallopt(m_mmap_threshold, threshold) != 1:
        return "system default (mallopt refused)"
    return f"glibc, M_TRIM_THRESHOLD and M_MMAP_THRESHOLD set to {threshold >> 20} MiB"


MALLOC = _steady_malloc()

# Stopped from outside (the GPU proof stops a stage over its budget with SIGTERM), a benchmark
# first writes where each thread was to stderr, so its log says what took the time.
if hasattr(signal, "SIGTERM"):
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
