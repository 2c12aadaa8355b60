"""All-reduce of a flat float32 gradient buffer: the local ring vs a naive sum at rank 0, and MPI.

Run: ``python -m benchmarks.bench_allreduce [--rounds N]``.

Two buffers: the 784-512-512-10 MLP's gradient (669,706 numbers, 2.7 MB) and a 25 M-parameter
model's (100 MB), over 2 and 4 ranks:

* local ring: ``init_process_group("local", world_size=N).all_reduce(buffers, op="avg")`` — the
  ring all-reduce of module 12 between virtual devices in one process (every "send" is a copy);
* naive (baseline): every rank's buffer copied to rank 0, summed there, the result copied back;
* mpi: ``mpiexec -n N`` processes calling ``group.all_reduce(buffer, op="avg")`` (Open MPI's own
  algorithm over shared memory), when mpi4py and mpiexec are installed. The script starts itself
  under mpiexec for that part.

``op="avg"`` keeps repeated in-place all-reduces from growing the numbers. Bytes per rank are what
the busiest rank sends; bus bandwidth is NCCL-tests' figure, buffer bytes × 2(N−1)/N / time, which
is the same for every N on a perfect ring.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from tinyflo.core.distributed import init_process_group, transfer

SIZES = {"MLP 784-512-512-10 (0.67 M)": 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10,
         "25 M parameters": 25_000_000}
WORLDS = (2, 4)
NAIVE = "naive (sum at rank 0)"


def buffers(n: int, size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    first = rng.standard_normal(size, dtype=np.float32)
    return [first.copy() for _ in range(n)]


def naive_all_reduce(arrays: list[np.ndarray], devices: list) -> None:
    """Everyone sends to rank 0, rank 0 sums and sends the average back."""
    total = arrays[0]
    for a in arrays[1:]:
        total += transfer(a, devices[0])
    total /= np.float32(len(arrays))
    for r, a in enumerate(arrays[1:], start=1):
        a[...] = transfer(total, devices[r])


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


def mpi_worker(rounds: int) -> None:
    """Runs in each mpiexec rank: medians of all_reduce per size; rank 0 prints them as JSON."""
    group = init_process_group("mpi")
    out = {}
    for label, size in SIZES.items():
        buf = np.random.default_rng(group.rank).standard_normal(size, dtype=np.float32)
        samples = []
        for i in range(common.WARMUP + rounds):
            group.barrier()
            start = time.perf_counter()
            group.all_reduce(buf, op="avg")
            elapsed = time.perf_counter() - start
            if i >= common.WARMUP:
                samples.append(elapsed)
        out[label] = statistics.median(samples)
    if group.rank == 0:
        print("RESULT " + json.dumps(out))


def run_mpi(n: int, rounds: int) -> dict[str, float] | None:
    """Medians from ``mpiexec -n n`` copies of this script, or None without mpi4py/mpiexec."""
    mpiexec = _mpiexec()
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    if mpiexec is None:
        return None
    env = {**os.environ, "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [mpiexec, "-n", str(n), "--oversubscribe", sys.executable, "-m", "benchmarks.bench_allreduce",
               "--mpi-worker", "--rounds", str(rounds)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=common.REPO_ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"mpiexec -n {n} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[0][len("RESULT "):])


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/allreduce.{json,md}``."""
    tables, all_timings = [], {}
    mpi = {n: run_mpi(n, rounds) for n in WORLDS}
    for label, size in SIZES.items():
        nbytes = size * 4
        rows = []
        for n in WORLDS:
            group = init_process_group("local", world_size=n)
            ring_bufs, naive_bufs = buffers(n, size), buffers(n, size)
            group.all_reduce(ring_bufs, op="avg")
            naive_all_reduce(naive_bufs, group.devices)
            assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(ring_bufs, naive_bufs))
            group.bytes_sent = [0] * n
            group.all_reduce(ring_bufs, op="avg")
            ring_bytes = max(group.bytes_sent)
            variants = {
                "local ring": lambda g=group, b=ring_bufs: g.all_reduce(b, op="avg"),
                NAIVE: lambda g=group, b=naive_bufs: naive_all_reduce(b, g.devices),
            }
            timings = common.compare(variants, baseline=NAIVE, rounds=rounds)
            sent = {"local ring": ring_bytes, NAIVE: 2 * (n - 1) * nbytes}
            for name, t in timings.items():
                rows.append([n, name, t.median_s * 1e3, sent[name] / 1e6, nbytes / t.median_s / 1e9,
                             nbytes * 2 * (n - 1) / n / t.median_s / 1e9, f"{t.spread:.0%}"])
                all_timings[f"{label}, N={n}: {name}"] = t
            if mpi[n] is not None:
                seconds = mpi[n][label]
                rows.append([n, "mpi (Open MPI, shared memory)", seconds * 1e3, 2 * (n - 1) * nbytes / n / 1e6,
                             nbytes / seconds / 1e9, nbytes * 2 * (n - 1) / n / seconds / 1e9, "—"])
        tables.append(common.Table(
            f"{label}: {size:,} float32 numbers, {nbytes / 1e6:.1f} MB",
            ["ranks", "variant", "ms", "MB sent by the busiest rank", "algorithm GB/s", "bus GB/s", "IQR"], rows))
    notes = [
        "local ring and naive run in one process: a 'send' is a memory copy between virtual devices, so "
        "these numbers measure memory bandwidth, not a network. They show the ring's volume and its cost "
        "in copies, not what a cluster would do.",
        "In one process the ring is not faster than the naive sum: the ranks take turns on the same cores, "
        "so what the ring saves — the busiest rank's bytes (see that column), spread over N links at once — "
        "does not show as time here. On N machines or GPUs each link moves only its own share in parallel.",
        "MB sent for mpi is the ring's figure 2(N-1)/N × buffer; Open MPI picks its own algorithm.",
        "algorithm GB/s = buffer bytes / time; bus GB/s = buffer bytes × 2(N-1)/N / time (NCCL-tests' busbw).",
        "mpi timings: median over rounds of one all_reduce between barriers, rank 0's clock; the ranks "
        "share this machine's cores (oversubscribed at 4 ranks on 2 cores).",
    ]
    if mpi[WORLDS[0]] is None:
        notes.append("mpi4py or mpiexec is not installed: the mpi rows are left out.")
    return common.save_result(
        "allreduce",
        "All-reduce",
        "Milliseconds per all-reduce (average) of a flat float32 gradient buffer: module 12's ring "
        "between virtual devices vs a naive sum at rank 0, and MPI between processes.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "op": "avg", "world sizes": list(WORLDS)},
        notes,
        out=out,
    )


if __name__ == "__main__":
    if "--mpi-worker" in sys.argv:
        sys.argv.remove("--mpi-worker")
        mpi_worker(common.parse_args(__doc__.splitlines()[0]).rounds)
    else:
        main(**vars(common.parse_args(__doc__.splitlines()[0], torch_rows=False)))
