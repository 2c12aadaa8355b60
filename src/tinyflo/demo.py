"""The end-to-end demo: a small network built only from tensor ops and autograd learns spirals.

Run it with ``tinyflo demo``. Everything here is modules 01 and 02: tensors,
ops, ``backward()`` and ``no_grad()`` — no layers, losses or optimizers yet
(those are the next modules). The data is generated, so it runs offline.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

import tinyflo
from tinyflo import Tensor


def spirals(points_per_class: int = 200, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Interleaved 2-D spirals, one arm per class: not separable by a line."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(classes):
        radius = np.linspace(0.05, 1.0, points_per_class)
        angle = np.linspace(k * 4.0, (k + 1) * 4.0, points_per_class) + rng.normal(0, 0.2, points_per_class)
        xs.append(np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1))
        ys.append(np.full(points_per_class, k))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


def cross_entropy(logits: Tensor, labels: np.ndarray) -> Tensor:
    """Mean negative log-likelihood of ``labels`` under softmax(logits), computed stably."""
    shifted = logits - logits.max(axis=1, keepdims=True).detach()
    log_probs = shifted - shifted.exp().sum(axis=1, keepdims=True).log()
    return -log_probs[np.arange(len(labels)), labels].mean()


def main(argv: Sequence[str] | None = None) -> int:
    """Train a 2-64-3 tanh network on spirals with plain gradient descent and print the loss."""
    parser = argparse.ArgumentParser(prog="tinyflo demo", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="gradient-descent steps (default 600)")
    parser.add_argument("--lr", type=float, default=1.0, help="learning rate (default 1.0)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data and weights (default 0)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1; got {args.steps}")

    tinyflo.manual_seed(args.seed)
    device = tinyflo.device(args.device)
    x_np, labels = spirals(seed=args.seed)
    x = Tensor(x_np, device=device)
    w1 = (tinyflo.randn(2, args.hidden, device=device) * 1.0).requires_grad_()
    b1 = tinyflo.zeros(args.hidden, device=device, requires_grad=True)
    w2 = (tinyflo.randn(args.hidden, 3, device=device) * (1 / args.hidden**0.5)).requires_grad_()
    b2 = tinyflo.zeros(3, device=device, requires_grad=True)
    params = [w1, b1, w2, b2]

    print(f"tinyflo {tinyflo.__version__} demo: 2-{args.hidden}-3 tanh network, {len(labels)} spiral points, "
          f"device {device}")
    start = time.perf_counter()
    every = max(args.steps // 10, 1)
    for step in range(1, args.steps + 1):
        logits = (x @ w1 + b1).tanh() @ w2 + b2
        loss = cross_entropy(logits, labels)
        for p in params:
            p.grad = None
        loss.backward()
        with tinyflo.no_grad():
            for p in params:
                p.data -= args.lr * p.grad.data
        if step == 1 or step % every == 0:
            print(f"step {step:5d}  loss {loss.item():.4f}")
    with tinyflo.no_grad():
        predictions = ((x @ w1 + b1).tanh() @ w2 + b2).argmax(axis=1).numpy()
    accuracy = float((predictions == labels).mean())
    print(f"train accuracy {accuracy:.1%} after {args.steps} steps in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
