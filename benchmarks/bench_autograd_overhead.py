"""Autograd overhead per op: a chain of tiny elementwise ops, tinyflo vs raw NumPy vs PyTorch.

Run: ``python -m benchmarks.bench_autograd_overhead [--rounds N]``.

The tensor has 16 float32 elements, so the arithmetic is nearly free and the
time per op is what a framework adds around it: building the output tensor,
recording the graph node, and walking it backwards.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import common

SIZE = 16
OPS = 1000  # elementwise ops per chain: OPS // 2 repetitions of ``x * 1.0001 + 0.0``


def chain(x):
    """The chain of ops, on a NumPy array, a tinyflo tensor or a torch tensor alike."""
    for _ in range(OPS // 2):
        x = x * 1.0001 + 0.0
    return x


def numpy_forward_backward(x: np.ndarray) -> np.ndarray:
    """The chain on raw arrays, then its gradient derived by hand: d/dx (x * c + 0) = c, OPS // 2 times."""
    chain(x)
    grad = np.ones_like(x)
    for _ in range(OPS // 2):
        grad = grad * 1.0001
    return grad


def tinyflo_variants() -> dict[str, Callable[[], object]]:
    """tinyflo's chain without a graph, recording one, and recording plus backward."""
    x = tinyflo.randn(SIZE, requires_grad=True)
    seed = tinyflo.ones(SIZE)

    def no_graph():
        with tinyflo.no_grad():
            return chain(x)

    def forward_backward():
        x.grad = None
        chain(x).backward(seed)

    return {
        "tinyflo forward, no_grad": no_graph,
        "tinyflo forward (records graph)": lambda: chain(x),
        "tinyflo forward + backward": forward_backward,
    }


def torch_variants(torch) -> dict[str, Callable[[], object]]:
    """The same three variants in PyTorch (CPU, eager)."""
    x = torch.randn(SIZE, requires_grad=True)
    seed = torch.ones(SIZE)

    def no_graph():
        with torch.no_grad():
            return chain(x)

    def forward_backward():
        x.grad = None
        chain(x).backward(seed)

    return {
        "torch forward, no_grad": no_graph,
        "torch forward (records graph)": lambda: chain(x),
        "torch forward + backward": forward_backward,
    }


def check_same_result(torch) -> None:
    """All variants compute the same chain and the same gradient before any of them is timed."""
    start = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    expected = chain(start)
    expected_grad = numpy_forward_backward(start)
    x = tinyflo.tensor(start, requires_grad=True)
    out = chain(x)
    out.backward(tinyflo.ones(SIZE))
    assert out.dtype == tinyflo.float32, f"the chain drifted to {out.dtype}"
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), expected_grad, rtol=1e-5)
    if torch is not None:
        xt = torch.tensor(start, requires_grad=True)
        chain(xt).backward(torch.ones(SIZE))
        np.testing.assert_allclose(chain(xt).detach().numpy(), expected, rtol=1e-5)
        np.testing.assert_allclose(xt.grad.numpy(), expected_grad, rtol=1e-5)


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/autograd_overhead.{json,md}``."""
    torch = common.optional_torch()
    check_same_result(torch)
    x = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    variants = {
        "numpy forward (no graph)": lambda: chain(x),
        "numpy forward + hand-derived backward": lambda: numpy_forward_backward(x),
    }
    variants |= tinyflo_variants()
    if torch is not None:
        variants |= torch_variants(torch)
    baseline = "numpy forward (no graph)"
    timings = common.compare(variants, baseline=baseline, rounds=rounds)

    def per_op_us(name: str) -> float:
        return timings[name].median_s / OPS * 1e6 if name in timings else float("nan")

    def vs_torch(name: str) -> float:
        twin = name.replace("tinyflo", "torch")
        return per_op_us(name) / per_op_us(twin) if name.startswith("tinyflo") else float("nan")

    rows = [
        [name, per_op_us(name), t.ratio, vs_torch(name), f"{t.spread:.0%}"]
        for name, t in timings.items()
    ]
    table = common.Table(
        f"Chain of {OPS} ops on a ({SIZE},) float32 tensor",
        ["variant", "µs/op", "× numpy forward", "× torch (same variant)", "IQR"],
        rows,
    )
    backward_rows = [
        [lib, per_op_us(f"{lib} forward + backward") - per_op_us(f"{lib} forward (records graph)")]
        for lib in ("tinyflo", "torch")
        if f"{lib} forward + backward" in timings
    ]
    backward_rows.append(
        ["numpy (by hand)", per_op_us("numpy forward + hand-derived backward") - per_op_us(baseline)]
    )
    backward_table = common.Table(
        "Backward alone (forward + backward minus recorded forward)", ["library", "µs/op"], backward_rows
    )
    notes = [
        f"One op is one elementwise `*` or `+` with a Python float; the chain is {OPS // 2} × `x * 1.0001 + 0.0`.",
        "µs/op = median time of the whole chain / number of ops; backward is seeded with ones.",
        "'× torch' compares each tinyflo variant with the same variant in PyTorch.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if torch is None:
        notes.append("PyTorch is not installed: its variants are left out.")
    paths = common.save_result(
        "autograd_overhead",
        "Autograd overhead per op",
        "Framework cost of one tiny elementwise op: forward without a graph, forward recording one, "
        "and forward plus backward, against the same chain on raw NumPy arrays and in PyTorch.",
        [table, backward_table],
        timings,
        {"ops_per_chain": OPS, "tensor": f"({SIZE},) float32", "rounds": rounds},
        notes,
        out=out,
    )
    return paths


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0])))
