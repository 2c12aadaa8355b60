"""Peak memory of one CPU training step of the 784-512-512-10 MLP: tinyflo vs hand-written NumPy.

Run: ``python -m benchmarks.bench_memory``.

Each variant runs in a fresh Python process, twice:

* **NumPy allocations** (``tracemalloc``): NumPy reports every array it allocates to
  ``tracemalloc``, so its peak, from before the model is built to the end of three timed steps,
  is the largest amount of array (and Python object) memory alive at once — parameters,
  gradients, optimizer state, activations and every temporary. It leaves out what NumPy does not
  allocate: the interpreter, the libraries, and OpenBLAS's own work buffers.
* **Resident memory** (``ru_maxrss``, without tracemalloc): the process's high-water mark minus
  its resident size after the imports. This is what the operating system sees, so it also holds
  OpenBLAS's buffers and what the allocator keeps (the benchmarks keep glibc from returning freed
  memory; see README), which is why the NumPy baseline is measured beside it.

Both are compared with the **computed sum**: parameters + gradients + optimizer state (Adam: two
moments; the flat Adam also its gradient buffer and one scratch block) + activations, where the
activations are what a backward needs and the hand-written step keeps: the input batch, each hidden
layer's pre-activation and ReLU output, the logits and the softmax. tinyflo's own graph is also
walked after the forward, counting every distinct array it holds (node outputs and saved arrays),
to state what the framework keeps.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from benchmarks import common
from benchmarks.bench_mlp_step import (
    SHAPES,
    batch_of,
    initial_weights,
    numpy_loss_and_grads,
    tinyflo_model,
)
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD, Adam, flat_block_size

SHAPE = SHAPES[0]  # 784-512-512-10, batch 256
LR = 1e-3
WARMUP_STEPS, MEASURED_STEPS = 2, 3
VARIANTS = {  # name -> (library, optimizer)
    "numpy SGD (hand-written)": ("numpy", "sgd"),
    "tinyflo SGD": ("tinyflo", "sgd"),
    "numpy Adam (hand-written)": ("numpy", "adam"),
    "tinyflo Adam": ("tinyflo", "adam"),
    "tinyflo Adam (flat=True)": ("tinyflo", "adam-flat"),
}
MB = 1e6


# ----- the training steps ---------------------------------------------------------------


def numpy_adam(params: list[np.ndarray]):
    """Adam by hand, PyTorch's rule, in place with NumPy's usual temporaries."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = 0

    def step(grads: list[np.ndarray]) -> None:
        nonlocal t
        t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        for p, g, mi, vi in zip(params, grads, m, v):
            mi *= b1
            mi += (1 - b1) * g
            vi *= b2
            vi += (1 - b2) * (g * g)
            p -= (LR / (1 - b1**t)) * (mi / (np.sqrt(vi) / math.sqrt(1 - b2**t) + eps))

    return step


def make_step(library: str, optimizer: str) -> tuple[Any, Any]:
    """(a step function returning the loss, a function counting tinyflo's graph after one forward)."""
    weights, (x, y) = initial_weights(SHAPE), batch_of(SHAPE)
    if library == "numpy":
        params = [w.copy() for w in weights]
        adam = numpy_adam(params) if optimizer == "adam" else None

        def numpy_step() -> float:
            loss, grads = numpy_loss_and_grads(params, x, y)
            if adam is None:
                for p, g in zip(params, grads):
                    p -= LR * g
            else:
                adam(grads)
            return loss

        return numpy_step, None

    model = tinyflo_model(weights)
    tx, ty = tinyflo.tensor(x), tinyflo.tensor(y)
    params = list(model.parameters())
    opt = SGD(params, lr=LR) if optimizer == "sgd" else Adam(params, lr=LR, flat=optimizer == "adam-flat")

    def tinyflo_step() -> float:
        loss = cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    def graph_bytes() -> int:
        """Bytes of the distinct arrays tinyflo's graph holds after one forward (parameters excluded)."""
        loss = cross_entropy(model(tx), ty)
        excluded = {id(_root(p.data)) for p in params}
        arrays: dict[int, int] = {}
        stack, seen = [loss], set()
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            held = [t.data]
            if t._ctx is not None:
                held += [a for a in (t._ctx.saved or ()) if isinstance(a, np.ndarray)]
                stack.extend(t._ctx.inputs)
            for a in held:
                root = _root(a)
                if id(root) not in excluded:
                    arrays[id(root)] = root.nbytes
        return sum(arrays.values())

    return tinyflo_step, graph_bytes


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


# ----- what the step should need ----------------------------------------------------------


def computed(optimizer: str) -> dict[str, int]:
    """Bytes of parameters, gradients, optimizer state and the activations a backward needs."""
    sizes, batch, f32 = SHAPE.sizes, SHAPE.batch, 4
    n_params = sum(m * n + n for m, n in zip(sizes, sizes[1:]))
    hidden = sum(batch * n for n in sizes[1:-1])
    activations = batch * sizes[0] + 2 * hidden + 2 * batch * sizes[-1]  # input; pre-act + ReLU; logits + softmax
    state = {"sgd": 0, "adam": 2 * n_params, "adam-flat": 3 * n_params}[optimizer]  # flat: + its gradient copy
    if optimizer == "adam-flat":
        state += flat_block_size(n_params)  # one scratch block
    return {"parameters": n_params * f32, "gradients": n_params * f32, "optimizer state": state * f32,
            "activations": activations * f32}


# ----- one measurement, in its own process -----------------------------------------------------


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def worker(variant: str, mode: str) -> dict[str, Any]:
    """Measure ``variant`` in this (fresh) process: ``mode`` is 'tracemalloc' or 'rss'."""
    library, optimizer = VARIANTS[variant]
    out: dict[str, Any] = {}
    if mode == "tracemalloc":
        tracemalloc.start()
        step, graph_bytes = make_step(library, optimizer)
        for _ in range(WARMUP_STEPS):
            step()
        if graph_bytes is not None:
            out["graph_bytes"] = graph_bytes()
        out["between_steps"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(MEASURED_STEPS):
            step()
        out["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    else:
        before = _resident_bytes()
        step, _ = make_step(library, optimizer)
        for _ in range(WARMUP_STEPS + MEASURED_STEPS):
            step()
        out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before  # Linux: KiB
    return out


def measure(variant: str, mode: str) -> dict[str, Any]:
    """Run ``worker`` in a fresh interpreter, so that no other variant's memory counts."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "--worker", variant, mode],
                          cwd=common.REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench_memory worker {variant!r} ({mode}) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure every variant (``rounds`` is unused: memory does not need medians), print, save."""
    rows, kept, numpy_peak = [], [], {}
    for variant, (library, optimizer) in VARIANTS.items():
        parts = computed(optimizer)
        total = sum(parts.values())
        traced, rss = measure(variant, "tracemalloc"), measure(variant, "rss")
        if library == "numpy":
            numpy_peak[optimizer] = traced["peak"]
        rows.append([variant, total / MB, traced["between_steps"] / MB, traced["peak"] / MB, traced["peak"] / total,
                     traced["peak"] / numpy_peak[optimizer.removesuffix("-flat")], rss["peak"] / MB, rss["peak"] / total])
        if "graph_bytes" in traced:
            kept.append([variant, parts["activations"] / MB, traced["graph_bytes"] / MB,
                         traced["graph_bytes"] / parts["activations"]])
    parts = computed("adam")
    sums = [[k, v / MB] for k, v in parts.items()]
    tables = [
        common.Table("Peak memory of one training step (MB = 10⁶ bytes)",
                     ["variant", "computed sum", "NumPy alive between steps", "NumPy peak", "peak / sum",
                      "peak / numpy's", "RSS growth", "RSS growth / sum"], rows),
        common.Table("The computed sum for Adam (SGD: no optimizer state; flat Adam: + a gradient copy and "
                     "a scratch block)", ["part", "MB"], sums),
        common.Table("Activations: what a backward needs vs what tinyflo's graph holds after the forward",
                     ["variant", "needed (MB)", "tinyflo's graph (MB)", "ratio"], kept),
    ]
    notes = [
        "NumPy peak: tracemalloc's peak over three steps after two warm-up steps, counted from before the model "
        "was built (so parameters, optimizer state and the batch are included); NumPy reports its array "
        "allocations to tracemalloc. It leaves out the interpreter, libraries and OpenBLAS's work buffers.",
        "RSS growth: ru_maxrss at the end minus the resident size after the imports, in a separate process "
        "without tracemalloc; it includes OpenBLAS's buffers and memory the allocator keeps for reuse.",
        "NumPy alive between steps: tracemalloc's current size after the warm-up, before the measured steps "
        "(parameters, optimizer state, batch; tinyflo drops the gradients with zero_grad()).",
        "Activations needed: input batch + each hidden layer's pre-activation and ReLU output + logits + "
        "softmax, float32. tinyflo's graph: every distinct array reachable from the loss after one forward "
        "(node outputs and saved arrays, parameters excluded).",
        "The step: forward, cross_entropy, backward, optimizer step, zero_grad() (tinyflo: Linear/ReLU "
        "modules, optim.SGD / optim.Adam); NumPy: the hand-derived backward of bench_mlp_step and SGD or "
        "Adam written out with NumPy's usual temporaries.",
    ]
    return common.save_result(
        "memory",
        "Memory of a training step",
        "Peak memory of one CPU training step (784-512-512-10 MLP, batch 256, float32) against the computed sum "
        "of parameters, gradients, optimizer state and activations: tinyflo vs a hand-written NumPy step.",
        tables,
        {},
        {"shape": "784-512-512-10", "batch": SHAPE.batch, "dtype": "float32", "lr": LR,
         "steps": f"{WARMUP_STEPS} warm-up + {MEASURED_STEPS} measured, each variant in a fresh process"},
        notes,
        out=out,
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3])))
    else:
        main(**vars(common.parse_args(__doc__.splitlines()[0], torch_rows=False)))
