"""Shared by every benchmark: interleaved timing, machine facts, result files."""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from benchmarks import CORES, MALLOC, THREAD_VARIABLES, THREADS, THREADS_SET_BEFORE_NUMPY
from tinyflo.milestones import write_atomically

WARMUP = 3  # untimed rounds before the timed ones
TIMING = (
    "median over interleaved rounds (each round times every variant once, in rotating order) "
    f"after {WARMUP} warm-up rounds; see benchmarks/README.md"
)
BUSY = 0.05  # above this share of CPU taken by other processes, a result is flagged
RESULTS_DIR = Path(__file__).resolve().parent / "results"  # the recorded results: written only with --record
SCRATCH_DIR = "tinyflo-bench"  # where a run writes otherwise, in the current folder
REPO_ROOT = Path(__file__).resolve().parent.parent


def optional_torch() -> Any:
    """The torch module with its thread count fixed like NumPy's, or None when not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    return torch


# ----- devices -------------------------------------------------------------------


def is_gpu(device: str) -> bool:
    """True for ``cuda`` and ``cuda:N``."""
    return str(device).startswith("cuda")


def torch_device(torch: Any, device: str) -> tuple[str | None, str]:
    """The torch device matching tinyflo's ``device``, or None and the reason torch cannot run there."""
    if torch is None:
        return None, "torch CUDA unavailable: torch is not installed" if is_gpu(device) else "torch is not installed"
    if not is_gpu(device):
        return "cpu", ""
    if not torch.cuda.is_available():
        return None, f"torch CUDA unavailable: torch {torch.__version__} (built for CUDA {torch.version.cuda}) sees no GPU"
    # float32 means float32 on both sides: TF32 would give torch's matmuls and convolutions 10-bit mantissas
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return str(tinyflo.device(device)), ""


def device_sync(device: str, torch_on: str | None = None) -> Callable[[], None]:
    """A function that waits until the GPU has finished what tinyflo (and torch, when on a GPU) queued.

    A GPU runs kernels asynchronously: without this, a timer measures how fast Python queues work.
    On the CPU it does nothing.
    """
    if not is_gpu(device):
        return lambda: None
    cupy_device = tinyflo.device(device).xp.cuda.Device(tinyflo.device(device).index)
    if torch_on is None or not is_gpu(torch_on):
        return cupy_device.synchronize
    import torch

    def sync() -> None:
        cupy_device.synchronize()
        torch.cuda.synchronize()

    return sync


def result_name(name: str, device: str) -> str:
    """The result file's name: ``name`` on the CPU, ``name_cuda`` on a GPU, so neither overwrites the other."""
    return f"{name}_cuda" if is_gpu(device) else name


def _on_fewer_threads(name: str) -> str:
    """A CPU result measured on fewer threads than cores (TINYFLO_NUM_THREADS) is ``name_1thread``, ``name_2threads``,
    beside the one on every core."""
    return name if THREADS >= CORES else f"{name}_{THREADS}thread{'s' if THREADS > 1 else ''}"


@dataclass
class Target:
    """A goal for one measured figure: met when ``value`` is at most ``limit`` (at least, if ``at_least``).

    ``judged`` is False for a smoke run: its value is kept, but toy sizes say nothing about the goal.
    """

    name: str
    value: float | None
    limit: float
    at_least: bool = False
    note: str = ""
    judged: bool = True

    @property
    def met(self) -> bool | None:
        """Whether the goal holds; None when nothing was measured, or nothing worth judging (``note`` says why)."""
        if self.value is None or self.value != self.value or not self.judged:
            return None
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    def row(self) -> list[Any]:
        """The target as a table row: name, measured, limit, met."""
        verdict = {True: "met", False: "MISSED", None: "not judged" if self.value is not None else "not measured"}[self.met]
        measured = "—" if self.value is None else f"{self.value:.3g}"
        limit = f"{'≥' if self.at_least else '≤'} {self.limit:g}"
        return [self.name, measured, limit, verdict + (f" ({self.note})" if self.note else "")]

    def record(self) -> dict[str, Any]:
        """The target as plain data, its verdict included."""
        return asdict(self) | {"met": self.met}


SMOKE_NOTE = "smoke run: toy sizes say nothing about the goal"
SMOKE_RUN = "SMOKE RUN: tiny sizes and few rounds, to check that the benchmark runs; the numbers mean nothing."


def where(device: str) -> str:
    """Where a benchmark ran, for its titles: ``on cuda:0`` or ``on the CPU``."""
    return f"on {device}" if is_gpu(device) else "on the CPU"


def run_notes(notes: list[str], device: str, smoke: bool, torch_missing: str | None, gpu_detail: str = "") -> list[str]:
    """``notes`` framed by what every benchmark says of its run: a smoke run's warning and how a GPU is timed
    (``gpu_detail`` added) first, the rows left out when torch cannot run last."""
    head = [SMOKE_RUN] if smoke else []
    if is_gpu(device):
        head.append(f"On {device}: every sample waits for the GPU (cupy Device.synchronize, torch.cuda.synchronize) "
                    f"before the clock starts and before it stops, so the time is the GPU's{gpu_detail}.")
    return head + notes + ([f"{torch_missing}: its rows are left out."] if torch_missing else [])


# ----- timing --------------------------------------------------------------------


@dataclass
class Timing:
    """Seconds per call of one variant: median over rounds, quartiles, and ratio to the baseline."""

    name: str
    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    calls_per_sample: int
    ratio: float = float("nan")
    background_cpu: float = 0.0
    samples_s: list[float] = field(default_factory=list)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 means the middle half lies within 5%)."""
        return (self.q3_s - self.q1_s) / self.median_s


class BackgroundLoad:
    """Measures the share of the machine's CPU time that other processes take from now on."""

    def __init__(self) -> None:
        self.start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float]:
        """(wall seconds, CPU seconds all processes spent busy since boot, CPU seconds of this process)."""
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        except OSError:  # not Linux: report no load rather than fail
            fields = ["0"] * 8
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
        own = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), busy, own.ru_utime + own.ru_stime

    def share(self) -> float:
        """Other processes' CPU time since creation, as a share of all cores (0.5: one of two cores)."""
        (wall0, busy0, own0), (wall1, busy1, own1) = self.start, self._now()
        others = (busy1 - busy0) - (own1 - own0)
        return max(0.0, others / ((wall1 - wall0) * (os.cpu_count() or 1)))


def wait_for_quiet(max_wait_s: float = 60.0, threshold: float = BUSY) -> float:
    """Wait until other processes use less than ``threshold`` of the CPU over 2 s; return the share seen last."""
    deadline = time.monotonic() + max_wait_s
    while True:
        load = BackgroundLoad()
        time.sleep(2.0)
        share = load.share()
        if share < threshold or time.monotonic() > deadline:
            return share


def _time_calls(fn: Callable[[], object], number: int, sync: Callable[[], None] = lambda: None) -> float:
    """Seconds per call of ``fn``, averaged over ``number`` back-to-back calls.

    ``sync`` waits for the device (a GPU runs asynchronously): once before the clock starts,
    so that earlier work is not counted, and once before it stops, so that this work is.
    """
    gc.collect()  # start every sample from the same garbage state; gc stays on, as in real use
    # One untimed call: the variant's thread pool, caches and the cores' clocks are back in the state
    # a training loop keeps them in, after the collection and the variant before it left them idle.
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - start) / number


GEMMS = "its matrix products alone (BLAS, no framework)"


def gemms_only(shapes: list[tuple[tuple[int, ...], tuple[int, ...]]], xp: Any = np) -> Callable[[], None]:
    """The given matrix products (``a @ b`` for each pair of shapes, stacked ones included) on contiguous
    float32 operands, and nothing else.

    Its time is what this machine's BLAS needs for a step's GEMM work, so a variant's "GEMM share"
    (this time / the variant's) is the fraction of the measured GEMM throughput it reaches.
    """
    rng = np.random.default_rng(3)
    pairs = [tuple(xp.asarray(rng.standard_normal(s).astype(np.float32)) for s in pair) for pair in shapes]

    def step() -> None:
        for a, b in pairs:
            a @ b

    return step


def compare(
    variants: dict[str, Callable[[], object]],
    baseline: str,
    rounds: int = 11,
    warmup: int = WARMUP,
    min_sample_s: float = 0.02,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, Timing]:
    """Time every variant once per round, interleaved in rotating order; medians and ratios to ``baseline``.

    Interleaving puts every variant under the same machine state (allocator,
    caches, clock, neighbours), which on a small machine matters more than the
    differences being measured. A sample repeats a fast variant until it lasts
    ``min_sample_s``, so timer resolution does not count. On a GPU, ``sync``
    waits for the device before and after each sample (see :func:`device_sync`).
    """
    if baseline not in variants:
        raise ValueError(f"compare: baseline {baseline!r} is not one of the variants {list(variants)}")
    names = list(variants)
    load = BackgroundLoad()
    number = dict.fromkeys(names, 1)
    for _ in range(warmup):
        for name in names:
            once = _time_calls(variants[name], 1, sync)
            number[name] = max(1, round(min_sample_s / once))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_time_calls(variants[name], number[name], sync))

    background = load.share()
    timings = {}
    for name in names:
        q1, median, q3 = statistics.quantiles(samples[name], n=4, method="inclusive")
        timings[name] = Timing(
            name, median, q1, q3, min(samples[name]), number[name],
            background_cpu=background, samples_s=samples[name],
        )
    for t in timings.values():
        t.ratio = t.median_s / timings[baseline].median_s
    return timings


# ----- where the numbers come from ------------------------------------------------


def _cpu_model() -> str:
    """The CPU's model name and its widest vector instructions (they set NumPy's and BLAS's speed)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    vector = [f for f in ("avx2", "fma", "avx512f") if flags and f in flags.group(1).split()]
    return f"{model.group(1) if model else 'unknown'} ({' '.join(vector) or 'no AVX2'})"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _numpy_blas() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # older NumPy has no mode="dicts"; the BLAS line is a nicety
        return "unknown"
    return f"{blas.get('name', '?')} {blas.get('version', '')} ({blas.get('openblas configuration', '')})".strip()


def _torch_blas(torch: Any) -> str:
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", config)
    return (blas.group(1) if blas else "unknown") + (f" {mkl.group(1)}" if mkl else "")


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """The machine, the versions and the thread settings a result was measured with (and the GPU's, on one)."""
    torch = optional_torch()
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")  # results being written are not a code change
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": CORES,
        "threads": {v: os.environ.get(v) for v in THREAD_VARIABLES} | {"tinyflo": tinyflo.get_num_threads()}
        | {"set_before_numpy_import": THREADS_SET_BEFORE_NUMPY},
        "malloc": MALLOC,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_blas": _numpy_blas(),
        "torch": torch.__version__ if torch else "not installed",
        "tinyflo": tinyflo.__version__,
        "git_commit": commit + (" (with uncommitted changes)" if dirty not in ("", "unknown") else ""),
    }
    if torch:
        info["torch_threads"] = torch.get_num_threads()
        info["torch_blas"] = _torch_blas(torch)
    if is_gpu(device):
        from tinyflo import gpu_proof

        info |= {"device": str(device)} | gpu_proof.gpu_facts(tinyflo.device(device).index)
    return info


# ----- result files ------------------------------------------------------------------


@dataclass
class Table:
    """One table of a result: a title, column headers, and rows of numbers or text."""

    title: str
    columns: list[str]
    rows: list[list[Any]]


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float):
        if value != value:
            return "—"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown_table(table: Table) -> str:
    """A table as GitHub Markdown, numbers to three significant digits."""
    lines = [
        "| " + " | ".join(table.columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(table.columns))) + "|",
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)


def save_result(
    name: str,
    title: str,
    description: str,
    tables: list[Table],
    timings: dict[str, Timing],
    settings: dict[str, Any],
    notes: Sequence[str] = (),
    targets: Sequence[Target] = (),
    device: str = "cpu",
    out: str | os.PathLike | None = None,
) -> tuple[Path, Path]:
    """Print the tables; write ``<out>/<name>.json`` (every sample) and ``<out>/<name>.md`` (out: ./tinyflo-bench);
    on the CPU with fewer threads than cores, ``<name>_1thread.*`` and the like."""
    machine = machine_info(device)
    if not is_gpu(device):
        name = _on_fewer_threads(name)
    notes = list(notes)
    background = max((t.background_cpu for t in timings.values()), default=0.0)
    if timings:  # counts and memory are not timed: no timing method, no background load to report
        settings = {"timing": TIMING} | settings
        machine["background_cpu"] = f"{background:.1%} of the machine used by other processes (worst comparison)"
    if background > BUSY:
        notes.insert(0, f"WARNING: other processes used {background:.0%} of the CPU during the measurement; "
                        "the numbers are not comparable with a quiet run.")
        print(f"warning: other processes used {background:.0%} of the CPU while measuring", file=sys.stderr)
    folder = Path(out) if out is not None else Path(SCRATCH_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "title": title,
        "description": description,
        "machine": machine,
        "settings": settings,
        "tables": [asdict(t) for t in tables],
        "timings": {k: asdict(t) | {"spread": t.spread} for k, t in timings.items()},
        "targets": [t.record() for t in targets],
        "notes": notes,
    }
    json_path, md_path = folder / f"{name}.json", folder / f"{name}.md"
    write_atomically(json_path, json.dumps(record, indent=2) + "\n")

    parts = [f"# {title}", "", description, ""]
    for table in tables:
        parts += [f"## {table.title}", "", markdown_table(table), ""]
        print(f"\n{table.title}\n{markdown_table(table)}")
    if targets:
        table = Table("Targets", ["target", "measured", "limit", "verdict"], [t.row() for t in targets])
        parts += ["## Targets", "", markdown_table(table), ""]
        print(f"\nTargets\n{markdown_table(table)}")
    if notes:
        parts += ["## Notes", ""] + [f"* {n}" for n in notes] + [""]
    parts += ["## Settings", ""] + [f"* {k}: {v}" for k, v in settings.items()] + [""]
    parts += ["## Machine", "", "| | |", "|---|---|"]
    parts += [f"| {k} | {_cell(v)} |" for k, v in machine.items()] + [""]
    write_atomically(md_path, "\n".join(parts))
    return json_path, md_path


def rounds_count(text: str) -> int:
    """--rounds for argparse: a whole number >= 2 (a median and its quartiles need two rounds)."""
    value = int(text) if text.strip().isdigit() else 0
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 2 (quartiles need two rounds); got {text!r}")
    return value


def parse_args(description: str, devices: bool = False, default_device: str = "cpu",
               options: Callable[[argparse.ArgumentParser], None] | None = None,
               rounds: int = 11, torch_rows: bool = True) -> argparse.Namespace:
    """The command line every benchmark shares: ``--rounds N``, ``--out DIR`` or ``--record``; with ``devices``,
    also ``--device`` and ``--smoke``; ``options`` adds a benchmark's own.

    ``out`` comes back as the folder to write: ``--out DIR``; with ``--record``, ``benchmarks/results/``;
    else ``./tinyflo-bench``, so a run never rewrites the recorded results unasked. ``--record`` is refused
    when torch cannot run where the benchmark does and the benchmark has PyTorch rows (``torch_rows``):
    a recorded result without them would drop its reference silently.
    """
    parser = argparse.ArgumentParser(description=description)
    if options is not None:
        options(parser)
    parser.add_argument("--rounds", type=rounds_count, default=rounds,
                        help=f"timed rounds per variant, at least 2 (default {rounds})")
    if devices:
        parser.add_argument("--device", default=default_device, help=f"cpu or cuda:N (default {default_device})")
        parser.add_argument("--smoke", action="store_true",
                            help="tiny sizes and few steps: checks that the benchmark runs end to end; "
                            "its numbers mean nothing")
    places = parser.add_mutually_exclusive_group()
    places.add_argument("--out", metavar="DIR", help=f"folder for the result files (default ./{SCRATCH_DIR})")
    places.add_argument("--record", action="store_true",
                        help="write the recorded results, benchmarks/results/ (needs torch for the PyTorch rows)")
    args = parser.parse_args()
    device = getattr(args, "device", "cpu")
    try:
        tinyflo.device(device)
    except tinyflo.DeviceError as error:
        parser.exit(2, f"benchmarks: --{error}\n")
    if args.record:
        if getattr(args, "smoke", False):
            parser.exit(2, "benchmarks: --smoke measures nothing worth keeping: it cannot go with --record\n")
        _, torch_missing = torch_device(optional_torch(), device) if torch_rows else ("", "")
        if torch_missing:
            parser.exit(2, f"benchmarks: --record needs torch for the PyTorch rows, and here {torch_missing}: "
                        f"pip install torch, or run without --record (results then go to ./{SCRATCH_DIR})\n")
    args.out = str(RESULTS_DIR if args.record else Path(args.out or SCRATCH_DIR).expanduser().resolve())
    del args.record
    return args
