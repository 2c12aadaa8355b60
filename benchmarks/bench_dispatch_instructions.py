"""Instructions per step of the dispatch-bound MLP, counted by callgrind: tinyflo vs hand-written NumPy.

Run: ``python -m benchmarks.bench_dispatch_instructions [--rounds N]`` (needs ``valgrind``).

Wall-clock ratios of a 100 µs step move by ±30% on a shared machine. The number of
instructions a step executes does not: it depends on the code, not on neighbours. Each
variant of ``bench_mlp_step``'s small MLP (64-64-64-10, batch 32) runs in its own process
under ``valgrind --tool=callgrind``, once with ``--rounds`` steps and once with none; the
difference divided by the steps is the count per step, with start-up and warm-up removed.
Instructions are not time (a BLAS kernel retires more per cycle than the interpreter), so
this is the companion of the timed benchmark, not a replacement.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import bench_mlp_step, common

VARIANTS = {
    "numpy": bench_mlp_step.NUMPY,
    "ops": bench_mlp_step.OPS,
    "modules": bench_mlp_step.MODULES,
    "loop": bench_mlp_step.LOOP,
}
WARMUP_STEPS = 20


def run_steps(variant: str, steps: int) -> None:
    """The child: build the variant, warm it up, then run ``steps`` steps (what callgrind counts)."""
    step = bench_mlp_step.step_variants(bench_mlp_step.SHAPES[1], None)[VARIANTS[variant]]
    for _ in range(WARMUP_STEPS + steps):
        step()


def count(variant: str, steps: int) -> int:
    """Instructions callgrind counts for a child process running ``steps`` steps of ``variant``."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
         "benchmarks.bench_dispatch_instructions", "--child", variant, str(steps)],
        cwd=common.REPO_ROOT, env=env, capture_output=True, text=True, check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path] | tuple[()]:
    """Count, print and save ``results/dispatch_instructions.{json,md}``; nothing without valgrind."""
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: no instruction counts (apt-get install valgrind)")
        return ()
    steps = max(rounds, 1) * 10
    per_step = {name: (count(name, steps) - count(name, 0)) / steps for name in VARIANTS}
    rows = [[VARIANTS[name], n / 1e6, n / per_step["numpy"]] for name, n in per_step.items()]
    shape = bench_mlp_step.SHAPES[1]
    table = common.Table(
        f"{'-'.join(map(str, shape.sizes))} MLP, batch {shape.batch}: instructions per training step",
        ["variant", "M instructions/step", "× numpy"], rows)
    notes = [
        f"Each count is (a run of {steps} steps − a run of none) / {steps}, after {WARMUP_STEPS} "
        "untimed warm-up steps in both runs, one thread for BLAS.",
        "The variants are bench_mlp_step's: the same weights, batch, loss and SGD update.",
    ]
    return common.save_result(
        "dispatch_instructions", "Dispatch-bound MLP step: instructions",
        "Instructions executed per training step of the 64-64-64-10 MLP at batch 32, counted by "
        "callgrind: a measure of framework overhead that does not move with the machine's load.",
        [table], {}, {"steps": steps, "counter": "valgrind --tool=callgrind (Ir)"}, notes, out=out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        run_steps(sys.argv[2], int(sys.argv[3]))
    else:
        main(**vars(common.parse_args(__doc__.splitlines()[0], torch_rows=False)))
