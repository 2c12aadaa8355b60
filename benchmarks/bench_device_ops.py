"""Device work per training step of the milestone models, counted on the strict stand-in, beside PyTorch's.

Run: ``python -m benchmarks.bench_device_ops [--rounds N] [--smoke]`` (no GPU needed).

A GPU step that costs as much at batch 1024 as at 128 is paid on the host: one kernel launch per
NumPy-style operation, the allocations, the synchronisations. Time on a shared CPU cannot show that work;
counting it can, on any machine. Each workload runs in a child process with ``TINYFLO_FAKE_GPU=strict``:
its training step on ``cuda:0`` (the strict CuPy stand-in, ``tinyflo.strict_gpu``), which counts every
kernel a GPU would launch, every array it would allocate (a view is none), every host-to-device copy,
every device-to-host read and every synchronisation. PyTorch's step is the same model, loss and
optimizer, counted by its profiler on the CPU: the ``aten::`` operators it dispatches (the top-level ones,
and all of them with those each one calls). A GPU runs about one kernel per top-level operator, so the
two counts are the ones to compare. The counts are the same in every step (the run checks it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

WORKLOADS = ("mlp", "lenet", "gpt")
TITLES = {
    "mlp": "MLP 784-512-512-10, batch 4096: cross-entropy, SGD",
    "lenet": "LeNet-5, batch 128: cross-entropy, SGD with momentum",
    "gpt": "milestone 6's GPT (its config): AdamW, warm-up and cosine schedule, gradient clipping",
}
KINDS = ("kernels", "allocations", "uploads", "reads", "syncs")


def _steps(name: str, torch: Any, smoke: bool) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """The tinyflo step on cuda:0 and its torch twin on the CPU (None without torch)."""
    torch_on = "cpu" if torch is not None else None
    if name == "mlp":
        from benchmarks import bench_mlp_step

        shape = bench_mlp_step.SMOKE_SHAPES[0] if smoke else bench_mlp_step.GPU_SHAPES[0]
        variants = bench_mlp_step.step_variants(shape, torch, "cuda:0", torch_on)
        return variants[bench_mlp_step.LOOP], variants.get(bench_mlp_step.TORCH_LOOP)
    if name == "lenet":
        from benchmarks import bench_conv

        _, training, _, _ = bench_conv.lenet_variants(torch, "cuda:0", torch_on, batch_size=8 if smoke else 128)
        return training["tinyflo"], training.get("torch")
    from benchmarks import bench_transformer

    config = bench_transformer.milestone_model()["GPTConfig"]()
    if smoke:
        config = replace(config, block_size=8, batch_size=2, n_layer=1, n_head=2, n_embd=16)
    ids = np.random.default_rng(0).integers(0, bench_transformer.VOCAB, 10_000)
    trainers = bench_transformer.Trainers(torch, config, ids, 64, "cuda:0", torch_on)
    steps = trainers.steps()
    return steps["tinyflo"], steps.get(bench_transformer.SDPA)


def _torch_ops(torch: Any, step: Callable[[], Any]) -> dict[str, int]:
    """The aten operators one step dispatches: top-level ones, and all of them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
    aten = [e for e in profile.events() if e.name.startswith("aten::")]

    def top(event: Any) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    return {"top": sum(1 for e in aten if top(e)), "all": len(aten)}


def count(name: str, rounds: int, smoke: bool, with_torch: bool = True) -> dict[str, Any]:
    """In a process with the stand-in: one workload's counts per step (every step the same), and torch's."""
    from tinyflo import strict_gpu

    if not strict_gpu.active():
        raise SystemExit("bench_device_ops: counting needs TINYFLO_FAKE_GPU=strict (main() sets it for its children)")
    torch = common.optional_torch() if with_torch else None
    step, torch_step = _steps(name, torch, smoke)
    for _ in range(common.WARMUP):
        step()
    per_step = []
    for _ in range(rounds):
        with strict_gpu.counting():
            step()
        per_step.append(strict_gpu.counts())
    routines = dict(strict_gpu.LAUNCHES.most_common(8))  # the last step's
    torch_ops = None
    if torch_step is not None:
        for _ in range(common.WARMUP):
            torch_step()
        torch_ops = _torch_ops(torch, torch_step)
    return {"per_step": per_step[-1], "same_every_step": all(c == per_step[0] for c in per_step),
            "routines": routines, "torch": torch_ops}


def main(rounds: int = 3, smoke: bool = False, out: str | None = None, workloads: tuple[str, ...] = WORKLOADS,
         torch: bool = True) -> tuple[Path, Path]:
    """Count, print and save ``results/device_ops.{json,md}`` (``torch``: False leaves PyTorch's counts out)."""
    env = dict(os.environ, TINYFLO_FAKE_GPU="strict")
    found = {}
    for name in workloads:
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_device_ops", "--child", name, str(rounds),
                               "smoke" if smoke else "full", "torch" if torch else "none"], capture_output=True, text=True, env=env,
                              cwd=Path(__file__).resolve().parents[1])
        if done.returncode != 0:
            raise RuntimeError(f"bench_device_ops: {name} failed:\n{done.stderr[-3000:]}")
        found[name] = json.loads(done.stdout.splitlines()[-1])
    rows = []
    for name, result in found.items():
        ours, theirs = result["per_step"], result["torch"]
        rows.append([TITLES[name], *(ours[k] for k in KINDS),
                     "—" if theirs is None else theirs["top"], "—" if theirs is None else theirs["all"],
                     "—" if theirs is None else ours["kernels"] / theirs["top"]])
    table = common.Table("Device work per training step (tinyflo on the strict stand-in; torch on the CPU)",
                         ["workload", *KINDS, "torch aten ops (top-level)", "torch aten ops (all)",
                          "kernels × torch top-level"], rows)
    routines = common.Table("tinyflo's most launched routines per step",
                            ["workload", "routine: kernels"],
                            [[TITLES[n], ", ".join(f"{k}: {v}" for k, v in r["routines"].items())]
                             for n, r in found.items()])
    uneven = [n for n, r in found.items() if not r["same_every_step"]]
    notes = [
        "kernels: routine calls that compute (elementwise, reductions, matrix products, gathers, fills, copies, "
        "in-place writes); views (reshape, transpose, slices) compute nothing. allocations: new device arrays "
        "(a view, or an `out=` array, is none). uploads: host-to-device copies. reads: device-to-host reads, "
        "each a wait for the device. syncs: explicit synchronize() calls plus the reads.",
        "torch aten ops: the operators its profiler records for one step on the CPU, after warm-up; top-level: "
        "those no other aten operator called (about one GPU kernel each); all: with the ones they call.",
        f"tinyflo's counts are the last of {rounds} steps after {common.WARMUP} warm-up steps"
        + ("; every step counted the same." if not uneven else f"; the counts varied between steps in {uneven}."),
    ]
    if smoke:
        notes.append(common.SMOKE_NOTE)
    return common.save_result("device_ops", "Device work per training step",
                              "Kernels launched, arrays allocated, copies, reads and synchronisations per "
                              "training step of the milestone models, counted on the strict CuPy stand-in, "
                              "beside the operators PyTorch dispatches for the same step.",
                              [table, routines], {}, {"rounds": rounds, "smoke": smoke, "device": "cuda:0 (strict stand-in)"},
                              notes, out=out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(count(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "smoke", sys.argv[5] == "torch")))
    else:
        def smoke_option(parser: Any) -> None:
            parser.add_argument("--smoke", action="store_true", help="toy sizes: checks the benchmark runs end to end")

        main(**vars(common.parse_args(__doc__.splitlines()[0], options=smoke_option, rounds=3)))
