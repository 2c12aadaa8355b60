"""Where tinyflo's time goes in a benchmark's variant: ``python -m benchmarks.profile_tinyflo chain``.

cProfile roughly doubles the cost of every Python call, so read the table for
proportions and call counts; the benchmarks give the real times.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Callable

from benchmarks import bench_autograd_overhead, bench_conv, bench_mlp_step, bench_transformer


def _mlp(shape: int, variant: str) -> Callable[[], object]:
    return bench_mlp_step.step_variants(bench_mlp_step.SHAPES[shape], None)[variant]


def _gpt() -> Callable[[], object]:
    config = bench_transformer.milestone_model()["GPTConfig"]()
    ids, _ = bench_transformer.token_ids()
    return bench_transformer.Trainers(None, config, ids, 100, "cpu", None).tinyflo_step


def _targets() -> dict[str, tuple[Callable[[], Callable[[], object]], int]]:
    """Each profilable workload: what makes its step, and how many steps to profile."""
    ops, nn, loop = bench_mlp_step.OPS, bench_mlp_step.MODULES, bench_mlp_step.LOOP
    return {
        "chain": (lambda: bench_autograd_overhead.tinyflo_variants()["tinyflo forward + backward"], 30),
        "mlp-large": (lambda: _mlp(0, ops), 30),
        "mlp-small": (lambda: _mlp(1, ops), 2000),
        "mlp-small-nn": (lambda: _mlp(1, nn), 2000),
        "mlp-small-loop": (lambda: _mlp(1, loop), 2000),
        "lenet": (lambda: bench_conv.lenet_variants(None)[1]["tinyflo"], 50),
        "gpt": (_gpt, 20),
    }


def main() -> None:
    """Profile one workload after a warm-up and print the functions that take the most time."""
    targets = _targets()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(targets))
    parser.add_argument("--top", type=int, default=20, help="how many functions to show (default 20)")
    args = parser.parse_args()
    make, calls = targets[args.workload]
    fn = make()
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
