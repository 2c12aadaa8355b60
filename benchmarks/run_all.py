"""Run every benchmark and write its results: ``python -m benchmarks [--rounds N] [--device cuda:0] [--record]``.

Results go to ./tinyflo-bench (or ``--out DIR``); ``--record`` writes the recorded ones, benchmarks/results/.
"""

from __future__ import annotations

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
    bench_trainer,
    bench_transformer,
    common,
)

BENCHMARKS = [bench_autograd_overhead, bench_mlp_step, bench_optim_step, bench_memory, bench_trainer, bench_conv,
              bench_checkpoint, bench_allreduce, bench_amp, bench_transformer, bench_dispatch_instructions]
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
    for bench in DEVICE_BENCHMARKS if on_device else BENCHMARKS:
        name = bench.__name__.rsplit(".", 1)[-1]
        load = "" if smoke else f" (other processes: {common.wait_for_quiet():.0%} of the CPU)"
        print(f"\n=== {name}{load}")
        began = time.perf_counter()
        paths = (bench.main(rounds, device=device, smoke=smoke, out=out) if bench in DEVICE_BENCHMARKS
                 else bench.main(rounds, out=out))
        print(f"--- {name}: {time.perf_counter() - began:.0f} s, wrote {', '.join(str(p) for p in paths)}")
    print(f"\nall benchmarks: {time.perf_counter() - start:.0f} s; results in {out}")


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True)))
