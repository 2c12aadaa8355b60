"""PyTorch's values and input gradients for every loss of module 04, as small reference files.

Run from the repository root where torch is installed::

    .venv/bin/python scripts/make_loss_fixtures.py

It writes ``tests/fixtures/losses/<loss>.npz``. Each file holds a JSON list of cases under
``cases`` and, per case, its input arrays (``<case>/in/<name>``), the loss (``<case>/out``) and
the gradient of ``sum(loss * v)`` (``v`` = ``<case>/v``, a fixed random direction) with respect
to each input that requires one (``<case>/grad/<name>``). ``tests/test_losses.py`` replays them
against tinyflo without importing torch. Everything is float64 and seeded, so the files only
change when a case does.

A case's ``transform`` (``"log_softmax:<axis>"``) is applied to its first input before the
call: CTC and ``kl_div`` take log-probabilities, and PyTorch's CTC backward is only meaningful
for normalised ones (its gradient differs from d loss / d log_probs by ``exp(log_probs)``,
which log_softmax's backward maps to zero). Gradients are taken with respect to the raw input.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "losses"
REDUCTIONS = ("mean", "sum", "none")


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="none"):
    """torchvision.ops.sigmoid_focal_loss, verbatim in substance (torchvision is not installed)."""
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


TORCH = {name: getattr(F, name) for name in (
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss", "cross_entropy",
    "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    "triplet_margin_loss", "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
    "ctc_loss",
)}
TORCH["sigmoid_focal_loss"] = sigmoid_focal_loss


class Cases:
    """Collects the cases of one loss: inputs, keyword arguments, PyTorch's answers."""

    def __init__(self, loss: str, seed: int) -> None:
        self.loss, self.rng, self.cases, self.arrays = loss, np.random.default_rng(seed), [], {}

    def add(self, name, args, kwargs=None, tensor_kwargs=None, grad=(), transform=None):
        """One call: ``args`` positional arrays, ``tensor_kwargs`` array keywords, ``grad`` their names."""
        kwargs, tensor_kwargs = dict(kwargs or {}), dict(tensor_kwargs or {})
        arrays = {**{f"arg{i}": a for i, a in enumerate(args)}, **tensor_kwargs}
        tensors = {
            k: torch.tensor(a, requires_grad=k in grad) if a.dtype.kind == "f" else torch.tensor(a)
            for k, a in arrays.items()
        }
        first = tensors["arg0"]
        if transform:
            first = first.log_softmax(int(transform.split(":")[1]))
        positional = [first] + [tensors[f"arg{i}"] for i in range(1, len(args))]
        out = TORCH[self.loss](*positional, **kwargs, **{k: tensors[k] for k in tensor_kwargs})
        v = self.rng.standard_normal(out.shape)
        if grad:
            (out * torch.tensor(v)).sum().backward()
        self.cases.append({"name": name, "nargs": len(args), "kwargs": kwargs,
                           "tensor_kwargs": sorted(tensor_kwargs), "grad": list(grad),
                           "transform": transform})
        for k, a in arrays.items():
            self.arrays[f"{name}/in/{k}"] = a
        self.arrays[f"{name}/out"] = out.detach().numpy()
        self.arrays[f"{name}/v"] = v
        for k in grad:
            self.arrays[f"{name}/grad/{k}"] = tensors[k].grad.numpy()

    def save(self) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(OUT / f"{self.loss}.npz", cases=np.array(json.dumps(self.cases)), **self.arrays)


def normal(rng, *shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def regression():
    for loss, extra in [("mse_loss", [{}]), ("l1_loss", [{}]),
                        ("smooth_l1_loss", [{}, {"beta": 0.5}, {"beta": 0.0}]),
                        ("huber_loss", [{}, {"delta": 0.3}, {"delta": 2.0}])]:
        c = Cases(loss, seed=len(loss))
        for r in REDUCTIONS:
            for i, kw in enumerate(extra):
                x, y = normal(c.rng, 3, 4), normal(c.rng, 3, 4)
                c.add(f"{r}-{i}", [x, y], {"reduction": r, **kw}, grad=("arg0", "arg1"))
        c.add("3d", [normal(c.rng, 2, 3, 2), normal(c.rng, 2, 3, 2)], grad=("arg0", "arg1"))
        c.save()


def poisson():
    c = Cases("poisson_nll_loss", seed=1)
    for r in REDUCTIONS:
        for log_input in (True, False):
            for full in (False, True):
                x = normal(c.rng, 3, 4) if log_input else c.rng.uniform(0.1, 3.0, (3, 4))
                y = c.rng.poisson(2.0, (3, 4)).astype(np.float64)
                c.add(f"{r}-log{log_input:d}-full{full:d}", [x, y],
                      {"log_input": log_input, "full": full, "reduction": r}, grad=("arg0",))
    c.save()


def classification():
    c = Cases("cross_entropy", seed=2)
    n, k = 5, 4
    for r in REDUCTIONS:
        x, t = normal(c.rng, n, k, scale=2), c.rng.integers(0, k, n)
        c.add(f"{r}-plain", [x, t], {"reduction": r}, grad=("arg0",))
        t_ignored = t.copy()
        t_ignored[[1, 3]] = -100
        w = c.rng.uniform(0.2, 2.0, k)
        c.add(f"{r}-ignore-weight-smooth", [x, t_ignored], {"reduction": r, "label_smoothing": 0.2},
              {"weight": w}, grad=("arg0",))
        c.add(f"{r}-ignore-index-2", [x, t], {"reduction": r, "ignore_index": 2}, grad=("arg0",))
        c.add(f"{r}-weight", [x, t], {"reduction": r}, {"weight": w}, grad=("arg0",))
        c.add(f"{r}-smooth", [x, t], {"reduction": r, "label_smoothing": 0.1}, grad=("arg0",))
        probs = c.rng.dirichlet(np.ones(k), n)
        c.add(f"{r}-soft", [x, probs], {"reduction": r}, grad=("arg0", "arg1"))
        c.add(f"{r}-soft-weight-smooth", [x, probs], {"reduction": r, "label_smoothing": 0.3},
              {"weight": w}, grad=("arg0", "arg1"))
        x3, t3 = normal(c.rng, 2, k, 3, 2), c.rng.integers(0, k, (2, 3, 2))
        t3[0, 1, 1] = -100
        c.add(f"{r}-spatial", [x3, t3], {"reduction": r, "label_smoothing": 0.1}, {"weight": w},
              grad=("arg0",))
        c.add(f"{r}-spatial-soft", [x3, c.rng.dirichlet(np.ones(k), (2, 3, 2)).transpose(0, 3, 1, 2).copy()],
              {"reduction": r}, grad=("arg0", "arg1"))
    c.add("unbatched", [normal(c.rng, k), np.array(2)], grad=("arg0",))
    c.add("extreme", [np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]]), np.array([1, 0])], grad=("arg0",))
    c.save()

    c = Cases("nll_loss", seed=3)
    for r in REDUCTIONS:
        lp = np.log(c.rng.dirichlet(np.ones(k), n))
        t = c.rng.integers(0, k, n)
        t[2] = -100
        w = c.rng.uniform(0.2, 2.0, k)
        c.add(f"{r}-plain", [lp, t], {"reduction": r}, grad=("arg0",))
        c.add(f"{r}-weight", [lp, t], {"reduction": r}, {"weight": w}, grad=("arg0",))
        c.add(f"{r}-ignore-1", [lp, t.clip(0)], {"reduction": r, "ignore_index": 1}, grad=("arg0",))
        c.add(f"{r}-spatial", [normal(c.rng, 2, k, 3), c.rng.integers(0, k, (2, 3))], {"reduction": r},
              grad=("arg0",))
    c.save()


def binary():
    c = Cases("binary_cross_entropy", seed=4)
    for r in REDUCTIONS:
        p, t = c.rng.uniform(0.05, 0.95, (3, 4)), c.rng.uniform(0, 1, (3, 4))
        c.add(f"{r}-plain", [p, t], {"reduction": r}, grad=("arg0", "arg1"))
        c.add(f"{r}-weight", [p, t], {"reduction": r}, {"weight": c.rng.uniform(0.5, 2, (3, 4))},
              grad=("arg0", "arg1"))
        c.add(f"{r}-weight-broadcast", [p, (t > 0.5).astype(float)], {"reduction": r},
              {"weight": c.rng.uniform(0.5, 2, 4)}, grad=("arg0",))
    c.add("clamped", [np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0, 1.0])])
    c.save()

    for loss in ("binary_cross_entropy_with_logits", "sigmoid_focal_loss"):
        c = Cases(loss, seed=5)
        for r in REDUCTIONS:
            x, t = normal(c.rng, 3, 4, scale=2), c.rng.uniform(0, 1, (3, 4))
            tb = (t > 0.5).astype(float)
            if loss == "sigmoid_focal_loss":
                c.add(f"{r}-plain", [x, tb], {"reduction": r}, grad=("arg0",))
                c.add(f"{r}-soft", [x, t], {"reduction": r, "alpha": 0.7, "gamma": 1.5}, grad=("arg0", "arg1"))
                c.add(f"{r}-no-alpha", [x, tb], {"reduction": r, "alpha": -1, "gamma": 0.0}, grad=("arg0",))
            else:
                c.add(f"{r}-plain", [x, t], {"reduction": r}, grad=("arg0", "arg1"))
                c.add(f"{r}-weight-pos", [x, t], {"reduction": r},
                      {"weight": c.rng.uniform(0.5, 2, (3, 4)), "pos_weight": c.rng.uniform(0.5, 3, 4)},
                      grad=("arg0", "arg1"))
        extreme = np.array([[1e4, -1e4], [-1e4, 1e4], [0.0, 30.0]])
        c.add("extreme", [extreme, np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 1.0]])], {"reduction": "none"},
              grad=("arg0",))
        c.save()


def divergence():
    c = Cases("kl_div", seed=6)
    for r in (*REDUCTIONS, "batchmean"):
        x = normal(c.rng, 3, 5)
        q = c.rng.dirichlet(np.ones(5), 3)
        q[0, 2] = 0.0  # 0 · log 0 counts as 0
        c.add(f"{r}-probs", [x, q], {"reduction": r}, grad=("arg0", "arg1"), transform="log_softmax:-1")
        c.add(f"{r}-log-target", [x, np.log(c.rng.dirichlet(np.ones(5), 3))], {"reduction": r, "log_target": True},
              grad=("arg0", "arg1"), transform="log_softmax:-1")
    c.add("extreme", [np.array([[1e4, -1e4, 0.0]]), np.array([[0.5, 0.25, 0.25]])], {"reduction": "batchmean"},
          grad=("arg0",), transform="log_softmax:-1")
    c.save()


def embedding():
    c = Cases("triplet_margin_loss", seed=7)
    for r in REDUCTIONS:
        a, p, n = (normal(c.rng, 4, 3) for _ in range(3))
        g = ("arg0", "arg1", "arg2")
        c.add(f"{r}-plain", [a, p, n], {"reduction": r, "margin": 2.0}, grad=g)
        c.add(f"{r}-p1-swap", [a, p, n], {"reduction": r, "margin": 1.5, "p": 1, "swap": True}, grad=g)
        c.add(f"{r}-p3", [a, p, n], {"reduction": r, "p": 3, "eps": 1e-3, "margin": 3.0}, grad=g)
    c.add("unbatched", [normal(c.rng, 3), normal(c.rng, 3), normal(c.rng, 3)], {"margin": 5.0}, grad=("arg0",))
    c.save()

    c = Cases("cosine_embedding_loss", seed=8)
    for r in REDUCTIONS:
        a, b, y = normal(c.rng, 5, 3), normal(c.rng, 5, 3), np.array([1, -1, 1, -1, -1])
        c.add(f"{r}-plain", [a, b, y], {"reduction": r}, grad=("arg0", "arg1"))
        c.add(f"{r}-margin", [a, b, y], {"reduction": r, "margin": -0.3}, grad=("arg0", "arg1"))
    c.save()

    c = Cases("hinge_embedding_loss", seed=9)
    for r in REDUCTIONS:
        x, y = c.rng.uniform(0.1, 2.5, (3, 4)), c.rng.choice([-1.0, 1.0], (3, 4))
        c.add(f"{r}-plain", [x, y], {"reduction": r}, grad=("arg0",))
        c.add(f"{r}-margin", [x, y], {"reduction": r, "margin": 2.0}, grad=("arg0",))
    c.save()

    c = Cases("margin_ranking_loss", seed=10)
    for r in REDUCTIONS:
        a, b, y = normal(c.rng, 6), normal(c.rng, 6), c.rng.choice([-1.0, 1.0], 6)
        c.add(f"{r}-plain", [a, b, y], {"reduction": r}, grad=("arg0", "arg1"))
        c.add(f"{r}-margin", [a, b, y], {"reduction": r, "margin": 0.5}, grad=("arg0", "arg1"))
    c.save()


def ctc():
    c = Cases("ctc_loss", seed=11)
    t_max, n, k = 8, 3, 5
    for r in REDUCTIONS:
        x = normal(c.rng, t_max, n, k)
        lengths, tl = np.array([8, 6, 7]), np.array([3, 1, 2])
        padded = c.rng.integers(1, k, (n, 4))
        padded[0, :3] = [2, 2, 3]  # a repeated label needs a blank between
        concat = np.concatenate([padded[i, :tl[i]] for i in range(n)])
        c.add(f"{r}-padded", [x, padded, lengths, tl], {"reduction": r}, grad=("arg0",), transform="log_softmax:2")
        c.add(f"{r}-concat", [x, concat, lengths, tl], {"reduction": r}, grad=("arg0",), transform="log_softmax:2")
        c.add(f"{r}-blank-last", [x, padded - 1, lengths, tl], {"reduction": r, "blank": k - 1}, grad=("arg0",),
              transform="log_softmax:2")
        # sample 1 cannot fit 4 labels with 2 repeats into 3 steps: an infinite loss
        impossible = np.array([[1, 1, 2, 2], [1, 1, 2, 2], [3, 0, 0, 0]])
        c.add(f"{r}-zero-infinity", [x, impossible, np.array([8, 3, 5]), np.array([4, 4, 1])],
              {"reduction": r, "zero_infinity": True}, grad=("arg0",), transform="log_softmax:2")
    c.add("empty-target", [normal(c.rng, 4, 2, 3), np.array([[1, 2], [0, 0]]), np.array([4, 3]), np.array([2, 0])],
          {"reduction": "none"}, grad=("arg0",), transform="log_softmax:2")
    c.save()


def main() -> None:
    torch.set_default_dtype(torch.float64)
    warnings.filterwarnings("ignore", message="reduction: .mean. divides")
    for make in (regression, poisson, classification, binary, divergence, embedding, ctc):
        make()
    total = sum(p.stat().st_size for p in OUT.glob("*.npz"))
    print(f"wrote {len(list(OUT.glob('*.npz')))} files, {total / 1024:.0f} KiB, to {OUT}")


if __name__ == "__main__":
    main()
