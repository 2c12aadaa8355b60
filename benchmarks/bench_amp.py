"""Mixed precision on the GPU: float16 autocast + GradScaler vs float32, step time and peak memory.

Run: ``python -m benchmarks.bench_amp [--rounds N]`` on a machine with a CUDA GPU and CuPy.

One training step (forward, cross-entropy, backward, SGD with momentum) of a matmul-heavy MLP
(1024-4096-4096-4096-10) at batch 8192 on ``cuda:0``: tinyflo in float32, and tinyflo under
``autocast("float16")`` with a ``GradScaler`` (module 11); PyTorch's CUDA autocast + GradScaler and
its float32 step alongside when torch sees the GPU. Peak memory is CuPy's memory pool after a step
from an empty pool (the pool keeps every block it ever needed, so that is the step's high-water
mark), and ``torch.cuda.max_memory_allocated`` for PyTorch.

Without a GPU this benchmark says so, runs the CPU correctness path (one float16 step agrees
with float32) and exits 0: NumPy's float16 matmul has no BLAS, so a CPU speed figure would
measure nothing about mixed precision. It writes no result file then.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo.core.amp import GradScaler, autocast
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD

SIZES = (1024, 4096, 4096, 4096, 10)
BATCH = 8192


def mlp(sizes: tuple[int, ...], device: str) -> Sequential:
    layers: list[Any] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [Linear(n_in, n_out)] + ([ReLU()] if i < len(sizes) - 2 else [])
    return Sequential(*layers).to(device)


def step_flops(sizes: tuple[int, ...], batch: int) -> float:
    """Nominal FLOPs of forward + backward: three GEMMs of 2·batch·in·out per layer."""
    return sum(3 * 2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:]))


def tinyflo_step(sizes: tuple[int, ...], batch: int, device: str, amp: bool, sync: Callable[[], None]):
    """A training step closure, float32 or float16 autocast + GradScaler."""
    tinyflo.manual_seed(0)
    model = mlp(sizes, device)
    opt = SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scaler = GradScaler(enabled=amp)
    rng = np.random.default_rng(0)
    x = tinyflo.tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32), device=device)
    y = tinyflo.tensor(rng.integers(0, sizes[-1], batch), device=device)

    def step():
        opt.zero_grad()
        with autocast("float16", enabled=amp):
            loss = cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sync()
        return loss

    return step


def torch_step(torch, sizes: tuple[int, ...], batch: int, amp: bool):
    nn = torch.nn
    torch.manual_seed(0)
    layers: list[Any] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(n_in, n_out)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    x = torch.randn(batch, sizes[0], device="cuda")
    y = torch.randint(0, sizes[-1], (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        return loss

    return step


def cupy_peak_bytes(make_step: Callable[[], Callable[[], object]]) -> int:
    """Bytes CuPy's pool holds after building the model and running two steps from an empty pool."""
    import cupy

    pool = cupy.get_default_memory_pool()
    gc.collect()  # graphs of earlier steps are reference cycles: free their arrays before measuring
    pool.free_all_blocks()
    step = make_step()
    step()
    step()
    peak = pool.total_bytes()
    del step
    gc.collect()
    pool.free_all_blocks()
    return peak


def torch_peak_bytes(torch, make_step: Callable[[], Callable[[], object]]) -> int:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = make_step()
    step()
    step()
    peak = torch.cuda.max_memory_allocated()
    del step
    torch.cuda.empty_cache()
    return peak


def cpu_correctness() -> str:
    """One small float16 step on the CPU agrees with float32: the path the tests check, not a speed figure."""
    losses = {amp: float(tinyflo_step((64, 128, 10), 32, "cpu", amp, lambda: None)().item()) for amp in (False, True)}
    assert abs(losses[True] - losses[False]) < 1e-2 * max(1.0, abs(losses[False])), losses
    return f"CPU correctness: first-step loss float32 {losses[False]:.5f}, float16 autocast {losses[True]:.5f}"


def main(rounds: int = 11) -> tuple[Path, ...]:
    """Measure on the GPU and save ``results/amp.{json,md}``; without a GPU, say so and write nothing."""
    if not tinyflo.cuda_is_available():
        print("bench_amp: no CUDA GPU (CuPy with cupy.cuda.is_available()): mixed-precision speed and memory "
              "are GPU figures, so nothing is timed here.")
        print(cpu_correctness())
        return ()
    import cupy

    device = "cuda:0"

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    torch = common.optional_torch()
    if torch is not None and not torch.cuda.is_available():
        torch = None
    makers: dict[str, Callable[[], Callable[[], object]]] = {
        "tinyflo float32": lambda: tinyflo_step(SIZES, BATCH, device, False, sync),
        "tinyflo float16 autocast": lambda: tinyflo_step(SIZES, BATCH, device, True, sync),
    }
    if torch is not None:
        makers["torch float32"] = lambda: torch_step(torch, SIZES, BATCH, False)
        makers["torch float16 autocast"] = lambda: torch_step(torch, SIZES, BATCH, True)
    peaks = {name: (torch_peak_bytes(torch, make) if name.startswith("torch") else cupy_peak_bytes(make))
             for name, make in makers.items()}
    steps = {name: make() for name, make in makers.items()}
    first = {name: float(step().item()) for name, step in steps.items()}
    timings = common.compare(steps, baseline="tinyflo float32", rounds=rounds)
    flops = step_flops(SIZES, BATCH)
    rows = [[name, t.median_s * 1e3, 1 / t.ratio, flops / t.median_s / 1e12, peaks[name] / 2**20,
             f"{t.spread:.0%}"] for name, t in timings.items()]
    table = common.Table(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, one training step on {device} "
                         f"({flops / 1e12:.3g} TFLOP)",
                         ["variant", "ms", "speed-up vs tinyflo float32", "TFLOP/s", "peak MiB", "IQR"], rows)
    notes = [
        f"First-step losses: {', '.join(f'{k} {v:.5f}' for k, v in first.items())}.",
        "A step is zero_grad, forward (under autocast for the float16 rows), cross-entropy, backward of the "
        "scaled loss, GradScaler.step (one device-to-host read of the found-inf flag) and update, then a "
        "device synchronize so that the time is the GPU's.",
        "Parameters and SGD's momentum stay float32 in every variant (master weights); float16 halves the "
        "activations kept for backward and runs the GEMMs on tensor cores.",
        "Peak memory: tinyflo rows are CuPy's default memory pool total_bytes() after building the model and "
        "two steps from an empty pool; torch rows are torch.cuda.max_memory_allocated() over the same.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if torch is None:
        notes.append("PyTorch with CUDA is not available: its rows are left out.")
    return common.save_result(
        "amp",
        "Mixed precision: float16 autocast vs float32 on the GPU",
        "Milliseconds per training step and peak GPU memory of a matmul-heavy MLP at a large batch, float32 "
        "against float16 autocast with dynamic loss scaling (tinyflo module 11; PyTorch as a reference).",
        [table],
        timings,
        {"rounds": rounds, "batch": BATCH, "sizes": list(SIZES), "device": device,
         "cupy": cupy.__version__},
        notes,
    )


if __name__ == "__main__":
    main(common.parse_args(__doc__.splitlines()[0]).rounds)
