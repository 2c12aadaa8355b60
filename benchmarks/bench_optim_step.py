"""One Adam step over ~100 parameter tensors: tinyflo's flat buffer vs its per-parameter loop vs PyTorch.

Run: ``python -m benchmarks.bench_optim_step [--rounds N]``.

The parameters are those of a stack of 25 blocks (weight, bias, norm weight, norm bias), so 100
tensors of mixed sizes, at three widths: 16 (about 7 thousand numbers) and 64 (107 thousand), where
per-call overhead decides, and 256 (1.7 million), where memory traffic does. Every variant updates its own
copy of the same float32 parameters from the same fixed gradients:

* tinyflo flat: ``Adam(..., flat=True)`` — one gradient copy, then the student's ``_update`` (which
  writes every intermediate into arrays it keeps from step to step) on equal cache-sized blocks of
  the flat buffer (at most 131072 numbers each);
* tinyflo loop: ``Adam(...)`` — the same ``_update`` once per tensor (the baseline);
* torch foreach / for-loop: ``torch.optim.Adam(foreach=True)`` and ``foreach=False``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import common
from tinyflo import Tensor
from tinyflo.core.layers import Parameter
from tinyflo.core.optim import Adam

LR = 1e-3
LOOP = "tinyflo loop (per parameter)"  # the baseline variant
WIDTHS = {"tiny (width 16)": 16, "narrow (width 64)": 64, "wide (width 256)": 256}


def shapes(width: int, blocks: int = 25) -> list[tuple[int, ...]]:
    return [s for _ in range(blocks) for s in ((width, width), (width,), (width,), (width,))]


def arrays(width: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes(width)]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes(width)]
    return params, grads


def tinyflo_step(width: int, flat: bool) -> tuple[Callable[[], None], list[Parameter]]:
    values, grads = arrays(width)
    params = [Parameter(v) for v in values]
    for p, g in zip(params, grads):
        p.grad = Tensor(g)
    return Adam(params, lr=LR, flat=flat).step, params


def torch_step(width: int, torch, foreach: bool) -> tuple[Callable[[], None], list]:
    values, grads = arrays(width)
    params = [torch.nn.Parameter(torch.from_numpy(v)) for v in values]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g)
    return torch.optim.Adam(params, lr=LR, foreach=foreach).step, params


def variants(width: int, torch) -> dict[str, tuple[Callable[[], None], list[np.ndarray]]]:
    """name -> (step function, a function giving the parameters as NumPy arrays)."""
    out = {}
    for name, flat in (("tinyflo flat buffer", True), (LOOP, False)):
        step, params = tinyflo_step(width, flat)
        out[name] = (step, lambda params=params: [p.data for p in params])
    if torch is not None:
        for name, foreach in (("torch foreach=True", True), ("torch foreach=False", False)):
            step, params = torch_step(width, torch, foreach)
            out[name] = (step, lambda params=params: [p.detach().numpy() for p in params])
    return out


def check_same_math(width: int, torch) -> None:
    """Five steps of every variant give the same parameters (rtol 1e-5 in float32)."""
    runs = variants(width, torch)
    for step, _ in runs.values():
        for _ in range(5):
            step()
    reference = runs[LOOP][1]()
    for name, (_, get) in runs.items():
        for a, b in zip(get(), reference):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/optim_step.{json,md}``."""
    torch = common.optional_torch()
    tables, all_timings = [], {}
    for label, width in WIDTHS.items():
        check_same_math(width, torch)
        steps = {name: step for name, (step, _) in variants(width, torch).items()}
        timings = common.compare(steps, baseline=LOOP, rounds=rounds)
        numbers = sum(int(np.prod(s)) for s in shapes(width))
        rows = [[name, t.median_s * 1e6, 1 / t.ratio, numbers / t.median_s / 1e9, f"{t.spread:.0%}"]
                for name, t in timings.items()]
        tables.append(common.Table(
            f"{label}: {len(shapes(width))} tensors, {numbers:,} float32 numbers",
            ["variant", "µs/step", "speed-up vs loop", "G numbers/s", "IQR"], rows))
        all_timings |= {f"{label}: {name}": t for name, t in timings.items()}
    notes = [
        "speed-up vs loop = median time of the tinyflo per-parameter loop / median time of the variant.",
        "Before timing, five steps of every variant are checked to give the same parameters (rtol 1e-5).",
        "Gradients are fixed arrays set once; the flat variant copies them into its flat gradient "
        "buffer on every step (np.concatenate(..., out=)), and that copy is timed.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if torch is None:
        notes.append("PyTorch is not installed: its variants are left out.")
    paths = common.save_result(
        "optim_step",
        "Optimizer step",
        "Microseconds per Adam step over 100 float32 parameter tensors on the CPU: tinyflo's flat "
        "buffer against its per-parameter loop and torch.optim.Adam (foreach and for-loop).",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "lr": LR, "optimizer": "Adam, default betas/eps"},
        notes,
        out=out,
    )
    return paths


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0])))
