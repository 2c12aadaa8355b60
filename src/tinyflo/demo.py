"""The end-to-end demo: an MLP learns the bundled handwritten digits with a hand-written loop.

Run it with ``tinyflo demo``. It uses modules 01-05: tensors and autograd,
``Linear`` and ``ReLU``, ``cross_entropy``, ``DataLoader`` and the 8x8 digits
that ship inside tinyflo (no download). The update is a plain gradient step,
written out, because optimizers are module 06.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import tinyflo
from tinyflo import datasets
from tinyflo.core.data import DataLoader
from tinyflo.core.layers import Linear, Module, ReLU, Sequential
from tinyflo.core.losses import cross_entropy


def mlp(hidden: int = 128) -> Sequential:
    """The 64-hidden-10 classifier: one hidden ReLU layer."""
    return Sequential(Linear(64, hidden), ReLU(), Linear(hidden, 10))


def sgd_step(model: Module, lr: float) -> None:
    """p ← p − lr · ∂L/∂p for every parameter, outside the graph."""
    with tinyflo.no_grad():
        for p in model.parameters():
            p.data -= lr * p.grad.data


def accuracy(model: Module, loader: DataLoader) -> float:
    """Fraction of correctly classified samples, in eval mode and without a graph."""
    model.eval()
    correct = total = 0
    with tinyflo.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(axis=1) == y).sum().item())
            total += len(y)
    model.train()
    return correct / total


def save_loss_plot(losses: list[float], path: Path) -> Path:
    """Draw the per-epoch training loss with matplotlib (no display needed) and save it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(1, len(losses) + 1), losses, marker="o", markersize=3)
    ax.set(xlabel="epoch", ylabel="mean training loss (cross-entropy)", yscale="log",
           title="tinyflo: MLP on the 8x8 digits")
    ax.grid(True, alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def train(epochs: int, lr: float, batch_size: int, hidden: int, seed: int, device: str) -> tuple[Module, list[float], float]:
    """Train the MLP; return it, the mean loss of every epoch, and the test accuracy."""
    tinyflo.manual_seed(seed)
    train_set, test_set = datasets.digits(train=True, flatten=True), datasets.digits(train=False, flatten=True)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, seed=seed, device=device)
    test_loader = DataLoader(test_set, batch_size=512, device=device)
    model = mlp(hidden).to(device)
    losses = []
    for epoch in range(1, epochs + 1):
        total = tinyflo.zeros((), device=device)  # summed on the device, read once per epoch
        for x, y in train_loader:
            loss = cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            sgd_step(model, lr)
            total = total + loss.detach()
        losses.append(total.item() / len(train_loader))
        if epoch == 1 or epoch % max(epochs // 10, 1) == 0:
            print(f"epoch {epoch:3d}  loss {losses[-1]:.4f}")
    return model, losses, accuracy(model, test_loader)


def main(argv: Sequence[str] | None = None) -> int:
    """Train on the digits, print the test accuracy, save the loss curve."""
    parser = argparse.ArgumentParser(prog="tinyflo demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40, help="passes over the training set (default 40)")
    parser.add_argument("--lr", type=float, default=0.2, help="learning rate of the gradient step (default 0.2)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data order (default 0)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    parser.add_argument("--out", default="tinyflo-demo", help="folder for the loss plot (default ./tinyflo-demo)")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; got {getattr(args, name)}")
    if not args.lr > 0:
        parser.error(f"--lr must be positive; got {args.lr}")

    print(f"tinyflo {tinyflo.__version__} demo: MLP 64-{args.hidden}-10 on the bundled 8x8 digits "
          f"(1,438 train / 359 test images), device {tinyflo.device(args.device)}")
    start = time.perf_counter()
    _, losses, test_accuracy = train(args.epochs, args.lr, args.batch_size, args.hidden, args.seed, args.device)
    print(f"test accuracy {test_accuracy:.1%} after {args.epochs} epochs in {time.perf_counter() - start:.1f} s")
    plot = save_loss_plot(losses, Path(args.out) / "loss.png")
    print(f"loss curve saved to {plot.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
