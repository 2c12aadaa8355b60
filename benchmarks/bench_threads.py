"""tinyflo's passes over memory on one thread and on every core, and numexpr's where it applies.

Run: ``python -m benchmarks.bench_threads [--rounds N]``.

Each pass is the forward and backward of one graph node at the size a workload of the benchmarks runs it:
GELU (tanh form) and layer norm at milestone 6's GPT sizes, LeNet-5's two convolutions and its first
max pooling at batch 128. Every variant runs in this process, interleaved; tinyflo's thread count is set
before each call (``tinyflo.set_num_threads``), and BLAS keeps the process's own count for the matrix
products inside a pass. Before timing, each pass's output and gradients on every thread count are checked
to be the same bits.

numexpr, a multi-threaded evaluator of NumPy expressions, was the other way the course considered for
these passes; it computes GELU's two formulas in one pass each, on its own threads. It is measured here
when it is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import THREADS, common
from tinyflo import Tensor
from tinyflo.core import conv
from tinyflo.nn import functional as F

ONE = "tinyflo, 1 thread"  # the baseline variant
ALL = f"tinyflo, {THREADS} threads"
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _node(fn: Callable[..., Tensor], *arrays: np.ndarray) -> Callable[[], list[np.ndarray]]:
    """A step: fn's forward on fresh leaf tensors and its backward from a fixed gradient; returns the arrays."""
    leaves = [Tensor(a, requires_grad=True) for a in arrays]
    grad = Tensor(np.random.default_rng(1).standard_normal(fn(*leaves).shape).astype(np.float32))

    def step() -> list[np.ndarray]:
        for leaf in leaves:
            leaf.grad = None
        out = fn(*leaves)
        out.backward(grad)
        return [out.data, *(leaf.grad.data for leaf in leaves)]

    return step


def passes() -> dict[str, tuple[str, Callable[[], list[np.ndarray]]]]:
    """name -> (what it is, its step)."""
    rng = np.random.default_rng(0)
    batch, tokens = 128, 12 * 64

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    w1, w2 = normal(6, 1, 5, 5), normal(16, 6, 5, 5)
    images = Tensor(normal(batch, 1, 28, 28))
    return {
        "gelu": (f"GELU, tanh form, ({tokens}, 512)",
                 _node(lambda x: F.gelu(x, approximate="tanh"), normal(tokens, 512))),
        "layer norm": (f"layer norm with weight and bias, ({tokens}, 128)",
                       _node(lambda x, w, b: F.layer_norm(x, 128, w, b), normal(tokens, 128), normal(128), normal(128))),
        "conv1": (f"LeNet-5's conv1, 1→6 5×5 pad 2 on 28×28, batch {batch}, the images needing no gradient "
                  "(per image: copy and GEMMs per block of images)",
                  _node(lambda w: conv.conv2d(images, w, padding=2), w1)),
        "conv2": (f"LeNet-5's conv2, 6→16 5×5 on 14×14, batch {batch} (batch last: copy and fold per block of channels)",
                  _node(lambda x, w: conv.conv2d(x, w), normal(batch, 6, 14, 14), w2)),
        "max pool": (f"2×2 max pooling of ({batch}, 6, 28, 28)",
                     _node(lambda x: conv.max_pool2d(x, 2), normal(batch, 6, 28, 28))),
    }


def numexpr_gelu(ne, x: np.ndarray, grad: np.ndarray) -> Callable[[], list[np.ndarray]]:
    """GELU's forward and backward formulas as two numexpr expressions, float32 throughout."""
    names = {"x": x, "g": grad, "c": np.float32(SQRT_2_OVER_PI), "a": np.float32(0.044715),
             "a3": np.float32(3 * 0.044715), "h": np.float32(0.5), "one": np.float32(1)}
    out, t, dx = (np.empty_like(x) for _ in range(3))

    def step() -> list[np.ndarray]:
        ne.evaluate("tanh(c * (x + a * x * x * x))", local_dict=names, out=t)
        ne.evaluate("h * x * (one + t)", local_dict=names | {"t": t}, out=out)
        ne.evaluate("g * h * (one + t + x * (one - t * t) * c * (one + a3 * x * x))", local_dict=names | {"t": t},
                    out=dx)
        return [out, dx]

    return step


def check_same_bits(step: Callable[[], list[np.ndarray]], name: str) -> None:
    """The pass gives the same bits on 1 thread and on all of them."""
    results = []
    for n in (1, THREADS):
        tinyflo.set_num_threads(n)
        results.append([np.array(a) for a in step()])
    for a, b in zip(*results, strict=True):
        if a.tobytes() != b.tobytes():
            raise AssertionError(f"{name}: 1 thread and {THREADS} threads disagree")


def on_threads(n: int, step: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        tinyflo.set_num_threads(n)
        return step()

    return run


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/threads.{json,md}``."""
    ne = _numexpr()
    tables, all_timings = [], {}
    for name, (title, step) in passes().items():
        check_same_bits(step, name)
        variants = {ONE: on_threads(1, step)}
        if THREADS > 1:
            variants[ALL] = on_threads(THREADS, step)
        if name == "gelu" and ne is not None:
            shape = step()[0].shape
            x, grad = (np.random.default_rng(seed).standard_normal(shape).astype(np.float32) for seed in (0, 1))
            variants[f"numexpr {ne.__version__}, {THREADS} threads"] = numexpr_gelu(ne, x, grad)
        timings = common.compare(variants, baseline=ONE, rounds=rounds)
        rows = [[variant, t.median_s * 1e6, 1 / t.ratio, f"{t.spread:.0%}"] for variant, t in timings.items()]
        tables.append(common.Table(title, ["variant", "µs", "speed-up vs 1 thread", "IQR"], rows))
        all_timings |= {f"{name}: {variant}": t for variant, t in timings.items()}
    tinyflo.set_num_threads(THREADS)
    notes = [
        "A pass: the node's forward, then its backward from a fixed gradient (tinyflo's graph, as in training).",
        "speed-up vs 1 thread = median time on 1 thread / median time of the variant.",
        "Before timing, each pass's output and input gradients are checked to be the same bits on 1 thread and "
        f"on {THREADS}: blocks are cut the same way for any count, and sums over blocks add in block order.",
        "numexpr (where installed) evaluates GELU's forward as two expressions and its backward as one, in "
        "float32, with as many threads as tinyflo; it needs no graph, so it does a little less work.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if ne is None:
        notes.append("numexpr is not installed: its variant is left out (pip install numexpr).")
    return common.save_result(
        "threads",
        "Passes over memory on 1 thread and on every core",
        "Microseconds per forward + backward of the graph nodes tinyflo runs in blocks on its threads, on one "
        "thread and on all the process may use, on the CPU.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "threads": THREADS},
        notes,
        out=out,
    )


def _numexpr():
    try:
        import numexpr
    except ImportError:
        return None
    numexpr.set_num_threads(THREADS)
    return numexpr


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], torch_rows=False)))
