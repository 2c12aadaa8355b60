"""Mixed precision on the GPU: float16 autocast + GradScaler vs float32, step time and peak memory.

Run: ``python -m benchmarks.bench_amp [--rounds N] [--device cuda:N]`` on a machine with a CUDA GPU and CuPy.

One training step (forward, cross-entropy, backward, SGD with momentum) of a matmul-heavy MLP
(1024-4096-4096-4096-10) at batch 8192 on ``cuda:0``: tinyflo in float32, and tinyflo under
``autocast("float16")`` with a ``GradScaler`` (module 11); PyTorch's CUDA autocast + GradScaler and
its float32 step alongside when torch sees the GPU. The target: float16 at least 2× as fast as
float32. Peak memory, from an empty memory pool over building the model and two steps: the most
bytes in use at once (CuPy's pool ``used_bytes``, watched at every allocation by a memory hook;
``torch.cuda.max_memory_allocated``) and what the pool holds (``total_bytes``;
``torch.cuda.max_memory_reserved``).

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
SMOKE_SIZES, SMOKE_BATCH = (16, 32, 32, 4), 8
TARGET = 2.0  # float16 autocast at least this many times as fast as float32 (tinyflo, same MLP)


def mlp(sizes: tuple[int, ...], device: str) -> Sequential:
    layers: list[Any] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [Linear(n_in, n_out)] + ([ReLU()] if i < len(sizes) - 2 else [])
    return Sequential(*layers).to(device)


def step_flops(sizes: tuple[int, ...], batch: int) -> float:
    """Nominal FLOPs of forward + backward: three GEMMs of 2·batch·in·out per layer."""
    return sum(3 * 2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:]))


def tinyflo_step(sizes: tuple[int, ...], batch: int, device: str, amp: bool):
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
        return loss

    return step


def torch_step(torch, sizes: tuple[int, ...], batch: int, amp: bool, device: str = "cuda"):
    nn = torch.nn
    torch.manual_seed(0)
    layers: list[Any] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(n_in, n_out)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    x = torch.randn(batch, sizes[0], device=device)
    y = torch.randint(0, sizes[-1], (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return step


def _peak_watcher(cupy, pool):
    """A CuPy memory hook that remembers the most bytes in use after any allocation; None without hooks."""
    hook = getattr(cupy.cuda, "MemoryHook", None)
    if hook is None:
        return None

    class PeakInUse(hook):
        name = "tinyflo_bench_amp_peak"

        def __init__(self) -> None:
            self.peak = pool.used_bytes()

        def malloc_postprocess(self, **kwargs) -> None:
            self.peak = max(self.peak, pool.used_bytes())

    return PeakInUse()


def cupy_peak_bytes(cupy, make_step: Callable[[], Callable[[], object]]) -> tuple[int | None, int]:
    """(most bytes in use at once, bytes the pool holds) over building the model and two steps from an empty pool.

    The pool keeps every block it ever needed, so what it holds is the step's high-water mark of GPU
    memory taken; what is in use at once is less (a freed block waits in the pool for reuse).
    """
    pool = cupy.get_default_memory_pool()
    gc.collect()  # graphs of earlier steps are reference cycles: free their arrays before measuring
    pool.free_all_blocks()
    watcher = _peak_watcher(cupy, pool)
    if watcher is not None:
        watcher.__enter__()
    try:
        step = make_step()
        step()
        step()
        cupy.cuda.Device().synchronize()
    finally:
        if watcher is not None:
            watcher.__exit__(None, None, None)
    held = pool.total_bytes()
    del step
    gc.collect()
    pool.free_all_blocks()
    return (watcher.peak if watcher is not None else None), held


def torch_peak_bytes(torch, make_step: Callable[[], Callable[[], object]]) -> tuple[int, int]:
    """(torch.cuda.max_memory_allocated, max_memory_reserved) over building the model and two steps."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = make_step()
    step()
    step()
    torch.cuda.synchronize()
    peaks = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return peaks


def cpu_correctness() -> str:
    """One small float16 step on the CPU agrees with float32: the path the tests check, not a speed figure."""
    losses = {amp: float(tinyflo_step((64, 128, 10), 32, "cpu", amp)().item()) for amp in (False, True)}
    assert abs(losses[True] - losses[False]) < 1e-2 * max(1.0, abs(losses[False])), losses
    return f"CPU correctness: first-step loss float32 {losses[False]:.5f}, float16 autocast {losses[True]:.5f}"


def default_device() -> str:
    """cuda:0 when tinyflo sees a GPU, else cpu (where this benchmark only checks correctness)."""
    return "cuda:0" if tinyflo.cuda_is_available() else "cpu"


def main(rounds: int = 11, device: str | None = None, smoke: bool = False, out: str | None = None) -> tuple[Path, ...]:
    """Measure on the GPU and save ``results/amp.{json,md}``; without a GPU, say so and write nothing."""
    device = device or default_device()
    if not common.is_gpu(device):
        print("bench_amp: no CUDA GPU (CuPy with cupy.cuda.is_available()): mixed-precision speed and memory "
              "are GPU figures, so nothing is timed here.")
        print(cpu_correctness())
        return ()
    cupy = tinyflo.device(device).xp
    torch = common.optional_torch()
    torch_on, torch_missing = common.torch_device(torch, device)
    sync = common.device_sync(device, torch_on)
    sizes, batch = (SMOKE_SIZES, SMOKE_BATCH) if smoke else (SIZES, BATCH)
    makers: dict[str, Callable[[], Callable[[], object]]] = {
        "tinyflo float32": lambda: tinyflo_step(sizes, batch, device, False),
        "tinyflo float16 autocast": lambda: tinyflo_step(sizes, batch, device, True),
    }
    if torch_on is not None:
        makers["torch float32"] = lambda: torch_step(torch, sizes, batch, False, torch_on)
        makers["torch float16 autocast"] = lambda: torch_step(torch, sizes, batch, True, torch_on)
    with tinyflo.device(device):
        peaks = {name: (torch_peak_bytes(torch, make) if name.startswith("torch") else cupy_peak_bytes(cupy, make))
                 for name, make in makers.items()}
        steps = {name: make() for name, make in makers.items()}
        first = {name: float(step().item()) for name, step in steps.items()}
        timings = common.compare(steps, baseline="tinyflo float32", rounds=rounds, sync=sync)
    flops = step_flops(sizes, batch)

    def mib(n: int | None) -> float:
        return float("nan") if n is None else n / 2**20

    rows = [[name, t.median_s * 1e3, 1 / t.ratio, flops / t.median_s / 1e12, mib(peaks[name][0]), mib(peaks[name][1]),
             f"{t.spread:.0%}"] for name, t in timings.items()]
    table = common.Table(f"MLP {'-'.join(map(str, sizes))}, batch {batch}, one training step on {device} "
                         f"({flops / 1e12:.3g} TFLOP)",
                         ["variant", "ms", "speed-up vs tinyflo float32", "TFLOP/s", "peak MiB in use",
                          "MiB held by the pool", "IQR"], rows)
    target = common.Target("tinyflo float16 autocast + GradScaler vs float32 (speed-up)",
                           1 / timings["tinyflo float16 autocast"].ratio, TARGET, at_least=True,
                           note=common.SMOKE_NOTE if smoke else "", judged=not smoke)
    notes = [
        f"First-step losses: {', '.join(f'{k} {v:.5f}' for k, v in first.items())}.",
        "A step is zero_grad, forward (under autocast for the float16 rows), cross-entropy, backward of the "
        "scaled loss, GradScaler.step (one device-to-host read of the found-inf flag) and update.",
        "Parameters and SGD's momentum stay float32 in every variant (master weights); float16 halves the "
        "activations kept for backward and runs the GEMMs on tensor cores.",
        "Peak memory, from an empty pool over building the model and two steps. In use: for tinyflo, the largest "
        "CuPy memory pool used_bytes() seen after any allocation (a cupy.cuda.MemoryHook); for torch, "
        "torch.cuda.max_memory_allocated(). Held: the pool's total_bytes() after the two steps (the pool keeps "
        "freed blocks for reuse); torch.cuda.max_memory_reserved().",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if _peak_watcher(cupy, cupy.get_default_memory_pool()) is None:
        notes.append("This CuPy has no cupy.cuda.MemoryHook: the tinyflo rows' bytes in use are not measured.")
    notes = common.run_notes(notes, device, smoke, torch_missing)
    return common.save_result(
        "amp",
        f"Mixed precision: float16 autocast vs float32 on {device}",
        "Milliseconds per training step and peak GPU memory of a matmul-heavy MLP at a large batch, float32 "
        "against float16 autocast with dynamic loss scaling (tinyflo module 11; PyTorch as a reference).",
        [table],
        timings,
        {"rounds": rounds, "batch": batch, "sizes": list(sizes), "device": device, "cupy": cupy.__version__,
         "smoke": smoke},
        notes,
        targets=[target],
        device=device,
        out=out,
    )


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True, default_device=default_device())))
