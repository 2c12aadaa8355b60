"""Where tinyflo's time goes in a benchmark's variant: ``python -m benchmarks.profile_tinyflo chain``.

cProfile roughly doubles the cost of every Python call, so read the table for
proportions and call counts; the benchmarks give the real times.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Callable

from benchmarks import bench_autograd_overhead, bench_mlp_step


def _targets() -> dict[str, tuple[Callable[[], object], int]]:
    """Each profilable workload and how many times to run it."""
    large, small = (bench_mlp_step.step_variants(shape, None) for shape in bench_mlp_step.SHAPES)
    ops, nn, loop = bench_mlp_step.OPS, bench_mlp_step.MODULES, bench_mlp_step.LOOP
    return {
        "chain": (bench_autograd_overhead.tinyflo_variants()["tinyflo forward + backward"], 30),
        "mlp-large": (large[ops], 30),
        "mlp-small": (small[ops], 2000),
        "mlp-small-nn": (small[nn], 2000),
        "mlp-small-loop": (small[loop], 2000),
    }


def main() -> None:
    """Profile one workload after a warm-up and print the functions that take the most time."""
    targets = _targets()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(targets))
    parser.add_argument("--top", type=int, default=20, help="how many functions to show (default 20)")
    args = parser.parse_args()
    fn, calls = targets[args.workload]
    for _ in range(5):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    print(f"{args.workload}: {calls} calls")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
