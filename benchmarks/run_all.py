"""Run every benchmark and write its results: ``python -m benchmarks [--rounds N]``."""

from __future__ import annotations

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
    common,
)

BENCHMARKS = [bench_autograd_overhead, bench_mlp_step, bench_optim_step, bench_memory, bench_trainer, bench_conv,
              bench_checkpoint, bench_allreduce, bench_amp, bench_dispatch_instructions]


def main(rounds: int = 11) -> None:
    """Run each benchmark after waiting (up to a minute) for the machine to be quiet."""
    start = time.perf_counter()
    for bench in BENCHMARKS:
        name = bench.__name__.rsplit(".", 1)[-1]
        others = common.wait_for_quiet()
        print(f"\n=== {name} (other processes: {others:.0%} of the CPU)")
        began = time.perf_counter()
        paths = bench.main(rounds)
        print(f"--- {name}: {time.perf_counter() - began:.0f} s, wrote {', '.join(str(p) for p in paths)}")
    print(f"\nall benchmarks: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(common.parse_args(__doc__.splitlines()[0]).rounds)
