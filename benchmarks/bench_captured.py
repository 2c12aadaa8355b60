"""The training step replayed as a CUDA graph: tinyflo eager and captured against PyTorch CUDA.

Run: ``python -m benchmarks.bench_captured --device cuda:0 [--rounds N] [--smoke]`` (a GPU; ``--smoke``
also runs on the strict stand-in, TINYFLO_FAKE_GPU=strict, where its numbers mean nothing).

Three workloads, each a whole training step (zero_grad, forward, loss, backward, optimizer step): the MLP
784-512-512-10 at batch 4096 with SGD, LeNet-5 at batch 128 with SGD and momentum, and milestone 6's GPT
with AdamW and gradient clipping (the warm-up + cosine schedule set on the host before each step, the
batch gathered from the text outside the step). Variants, timed in interleaved rounds with the device
synchronised around each sample: tinyflo's eager step; the same step captured once by
``tinyflo.capture_step`` and replayed (the batch copied into the captured inputs first); torch CUDA eager;
and ``torch.compile`` of the model where it runs. A replay costs the device's time and one launch, so the
captured step's time over the eager one is the share of the eager step the device is busy: the rest is the
host's (Python, launches, allocations). Kernel counts per eager step come from the strict stand-in's
recording (benchmarks/results/device_ops.json); a captured step is one graph launch and the batch's copies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import tinyflo
from benchmarks import bench_conv, bench_mlp_step, bench_transformer, common

TARGETS = {"mlp": (1.1, 1.1), "lenet": (1.3, 1.0), "gpt": (1.3, 1.0)}  # (eager, captured) × torch CUDA eager
TITLES = {"mlp": "MLP 784-512-512-10, batch 4096, SGD", "lenet": "LeNet-5, batch 128, SGD with momentum",
          "gpt": "milestone 6's GPT, AdamW, clipping, schedule"}
EAGER, CAPTURED, TORCH, COMPILED = "tinyflo", "tinyflo captured", "torch", "torch.compile"


def _captured(step: Any, optimizer: Any, inputs: tuple) -> Any:
    """``step(*inputs)`` captured; each call copies ``inputs`` in, as a loop feeding a new batch would."""
    run = tinyflo.capture_step(step, optimizer=optimizer)
    return lambda: run(*inputs)


def _compiled(torch: Any, make: Any) -> tuple[Any, str]:
    """``make(compile)`` with torch.compile, or (None, why not)."""
    try:
        step = make(torch.compile)
        step()
        return step, ""
    except Exception as err:  # no compiler on the machine (triton, a C compiler): say so, time the rest
        return None, f"torch.compile did not run: {type(err).__name__}: {str(err).splitlines()[0][:160]}"


def _loop_variants(torch: Any, device: str, torch_on: str | None, x: np.ndarray, y: np.ndarray,
                   tinyflo_twin: Callable[[], tuple], torch_twin: Callable[[], tuple]) -> tuple[dict[str, Any], list[str]]:
    """The loop a user writes (bench_mlp_step's), on one batch: tinyflo eager and captured, torch eager and compiled.
    ``tinyflo_twin()`` and ``torch_twin()`` give a fresh (model, optimizer) each."""
    loop = bench_mlp_step
    tx, ty = tinyflo.tensor(x, device=device), tinyflo.tensor(y, device=device)
    variants, notes = {}, []
    for name in (EAGER, CAPTURED):
        model, opt = tinyflo_twin()
        step = functools.partial(loop.tinyflo_loop_step, model, opt)
        variants[name] = _captured(step, opt, (tx, ty)) if name == CAPTURED else functools.partial(step, tx, ty)
    if torch_on is not None:
        px, py = torch.from_numpy(x).to(torch_on), torch.from_numpy(y).to(torch_on)

        def torch_step(compile: Any = None) -> Any:
            net, opt = torch_twin()
            return functools.partial(loop.torch_loop_step, torch, compile(net) if compile else net, opt, px, py)

        variants[TORCH] = torch_step()
        compiled, why = _compiled(torch, torch_step)
        variants |= {COMPILED: compiled} if compiled else {}
        notes += [why] if why else []
    return variants, notes


def mlp(torch: Any, device: str, torch_on: str | None, smoke: bool) -> tuple[dict[str, Any], list[str]]:
    m = bench_mlp_step
    shape = m.SMOKE_SHAPES[0] if smoke else m.GPU_SHAPES[0]
    weights, (x, y) = m.initial_weights(shape), m.batch_of(shape)

    def tinyflo_twin() -> tuple:
        model = m.tinyflo_model(weights).to(device)
        return model, tinyflo.optim.SGD(model.parameters(), lr=m.LR)

    def torch_twin() -> tuple:
        net = m.torch_model(torch, weights).to(torch_on)
        return net, torch.optim.SGD(net.parameters(), lr=m.LR)

    return _loop_variants(torch, device, torch_on, x, y, tinyflo_twin, torch_twin)


def lenet(torch: Any, device: str, torch_on: str | None, smoke: bool) -> tuple[dict[str, Any], list[str]]:
    c = bench_conv
    x, y = c.batch(size=c.SMOKE_BATCH if smoke else c.BATCH)
    tinyflo.manual_seed(0)
    reference = c.LeNet5()

    def tinyflo_twin() -> tuple:
        model = c.LeNet5()
        model.load_state_dict(reference.state_dict())
        return model.to(device), tinyflo.optim.SGD(model.parameters(), lr=c.LR, momentum=c.MOMENTUM)

    def torch_twin() -> tuple:
        net = c.torch_lenet(torch, reference).to(torch_on)
        return net, torch.optim.SGD(net.parameters(), lr=c.LR, momentum=c.MOMENTUM)

    return _loop_variants(torch, device, torch_on, x, y, tinyflo_twin, torch_twin)


def gpt(torch: Any, device: str, torch_on: str | None, smoke: bool) -> tuple[dict[str, Any], list[str]]:
    from dataclasses import replace

    t = bench_transformer
    config = t.milestone_model()["GPTConfig"]()
    if smoke:
        config = replace(config, block_size=8, batch_size=2, n_layer=1, n_head=2, n_embd=16)
    ids = np.random.default_rng(0).integers(0, t.VOCAB, 10_000)
    eager = t.Trainers(torch, config, ids, 64, device, torch_on)
    twin = t.Trainers(None, config, ids, 64, device, None)
    run = tinyflo.capture_step(twin.train_on, twin.optimizer)

    def captured() -> Any:  # tinyflo_step's loop body, the step itself captured
        it = twin.step_of["tinyflo"]
        index = twin.batches[it % len(twin.batches)]
        twin.schedule.apply(twin.optimizer, it)  # on the host: a launch reads lr from the device
        twin.step_of["tinyflo"] = it + 1
        return run(twin.data[index], twin.data[index + 1])

    steps = eager.steps()
    variants = {EAGER: eager.tinyflo_step, CAPTURED: captured} | ({TORCH: steps[t.SDPA]} if t.SDPA in steps else {})
    return variants, ["torch: nanoGPT's step with F.scaled_dot_product_attention; torch.compile is not timed "
                      "for the GPT (its compile time exceeds the proof's budget)"]


WORKLOADS = {"mlp": mlp, "lenet": lenet, "gpt": gpt}


def _recorded_kernels() -> dict[str, Any]:
    """Kernels per eager step, by workload, as benchmarks/bench_device_ops.py recorded them on the stand-in."""
    from benchmarks import bench_device_ops

    try:
        table = json.loads((common.RESULTS_DIR / "device_ops.json").read_text())["tables"][0]
        rows = {row[0]: row[table["columns"].index("kernels")] for row in table["rows"]}
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}
    return {name: rows.get(title) for name, title in bench_device_ops.TITLES.items()}


def main(rounds: int = 11, device: str = "cuda:0", smoke: bool = False, out: str | None = None) -> Any:
    """Measure, print and save ``results/captured_cuda.{json,md}``."""
    if not common.is_gpu(device):
        raise SystemExit("bench_captured: --device must be a CUDA device (cuda:N): a CUDA graph replays GPU work")
    torch = common.optional_torch()
    torch_on, torch_missing = common.torch_device(torch, device)
    sync = common.device_sync(device, torch_on)
    kernels = _recorded_kernels()
    tables, all_timings, targets, notes = [], {}, [], []
    for name, build in WORKLOADS.items():
        variants, extra = build(torch, device, torch_on, smoke)
        notes += [f"{name}: {n}" for n in extra]
        baseline = TORCH if TORCH in variants else EAGER
        timings = common.compare(variants, baseline=baseline, rounds=rounds, sync=sync)
        share = timings[CAPTURED].median_s / timings[EAGER].median_s
        rows = [[v, t.median_s * 1e3, t.ratio, f"{t.spread:.0%}"] for v, t in timings.items()]
        tables.append(common.Table(
            f"{TITLES[name]}{' (smoke sizes)' if smoke else ''}: one training step; the device is busy for about "
            f"{share:.0%} of the eager step; kernels per eager step {kernels.get(name, '—')}, per captured step 1 "
            "graph launch + the batch's copies", ["variant", "ms", f"× {baseline}", "IQR"], rows))
        all_timings |= {f"{name}: {v}": t for v, t in timings.items()}
        for variant, limit in zip((EAGER, CAPTURED), TARGETS[name]):
            targets.append(common.Target(
                f"{TITLES[name]}: {variant} vs torch CUDA eager (× torch)",
                timings[variant].ratio if TORCH in timings else None, limit,
                note=torch_missing or (common.SMOKE_NOTE if smoke else ""), judged=not smoke))
    notes = common.run_notes(notes + [
        "A sample synchronises the device before and after: each step's time is the device's and the host's, "
        "whichever is longer, as in a training loop that reads nothing back.",
        "The captured step's result is bit-identical to the eager step's (tests/test_graphs.py, on the stand-in in "
        "CI and on the GPU in the proof's gpu tests).",
    ], device, smoke, torch_missing)
    return common.save_result(
        common.result_name("captured", device), f"Captured training steps on {device}",
        "Milliseconds per training step: tinyflo eager and captured as a CUDA graph, against PyTorch CUDA eager "
        "and torch.compile.", tables, all_timings,
        {"rounds": rounds, "device": device, "smoke": smoke}, notes, targets=targets, device=device, out=out)


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True, default_device="cuda:0")))
