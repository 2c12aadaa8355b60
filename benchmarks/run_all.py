"""Run every benchmark and write its results: ``python -m benchmarks [--rounds N] [--device cuda:0]``."""

from __future__ import annotations

import sys
import time

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
# Those that take --device, --smoke and --out: the GPU's benchmarks, each against PyTorch CUDA in the same process.
DEVICE_BENCHMARKS = [bench_mlp_step, bench_amp, bench_conv, bench_transformer]


def main(rounds: int = 11, device: str = "cpu", smoke: bool = False, out: str | None = None) -> None:
    """Run each benchmark after waiting (up to a minute) for the machine to be quiet.

    On a GPU (``device`` cuda:N), or for a smoke run, only the benchmarks that take a device run.
    """
    on_device = common.is_gpu(device) or smoke
    if out and not on_device:
        sys.exit("benchmarks: --out is for the device benchmarks (give --device cuda:N or --smoke)")
    start = time.perf_counter()
    for bench in DEVICE_BENCHMARKS if on_device else BENCHMARKS:
        name = bench.__name__.rsplit(".", 1)[-1]
        others = common.wait_for_quiet()
        print(f"\n=== {name} (other processes: {others:.0%} of the CPU)")
        began = time.perf_counter()
        paths = (bench.main(rounds, device=device, smoke=smoke, out=out) if bench in DEVICE_BENCHMARKS
                 else bench.main(rounds))
        print(f"--- {name}: {time.perf_counter() - began:.0f} s, wrote {', '.join(str(p) for p in paths)}")
    print(f"\nall benchmarks: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True)))
