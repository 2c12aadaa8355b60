"""The end-to-end demo: an MLP learns the bundled handwritten digits through the Trainer.

Run it with ``tinyflo demo``. It uses modules 01-08: tensors and autograd,
``Linear`` and ``ReLU``, ``cross_entropy`` (with label smoothing),
``DataLoader`` and the 8x8 digits that ship inside tinyflo (no download),
AdamW, a warm-up + cosine schedule, gradient clipping and the ``Trainer``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from tinyflo import datasets, environment, milestones
from tinyflo.cli import Parser, output_folder, path_arg  # as every tinyflo command: one-line errors
from tinyflo.core.data import DataLoader
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import AdamW
from tinyflo.core.schedulers import CosineAnnealing, Warmup
from tinyflo.core.training import Monitor, Trainer
from tinyflo.course.source import CourseError


def mlp(hidden: int = 128) -> Sequential:
    """The 64-hidden-10 classifier: one hidden ReLU layer."""
    return Sequential(Linear(64, hidden), ReLU(), Linear(hidden, 10))


def save_loss_plot(history: dict[str, list[float]], path: Path) -> Path:
    """Draw the run's losses (training and test) and its test accuracy per epoch with matplotlib
    (no display needed) and save them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = range(1, len(history["train_loss"]) + 1)
    fig, (losses, accuracy) = plt.subplots(1, 2, figsize=(10, 4))
    losses.plot(epochs, history["train_loss"], marker="o", markersize=3, label="training (mean over the epoch)")
    losses.plot(epochs, history["val_loss"], marker="s", markersize=3, label="test (after the epoch)")
    losses.set(xlabel="epoch", ylabel="cross-entropy (label smoothing 0.1)", title="loss")
    losses.legend()
    accuracy.plot(epochs, [100 * a for a in history["val_acc"]], marker="o", markersize=3, color="C2")
    accuracy.set(xlabel="epoch", ylabel="test accuracy (%)", title=f"test accuracy: {history['val_acc'][-1]:.1%}")
    for ax in (losses, accuracy):
        if len(epochs) <= 10:  # every epoch its tick (a locator puts 0 and 2 around one epoch)
            ax.set_xticks(list(epochs))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # whole: 5, 10, 15, 20
        ax.grid(True, alpha=0.3)
    fig.suptitle("tinyflo demo: an MLP on the 8×8 digits")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    milestones.save_png(fig, path)  # as the milestones' plots: small, whole or not at all
    plt.close(fig)
    return path


DEMO_MODULES = ("01_tensor", "02_autograd", "03_layers", "04_losses", "05_data", "06_optimizers", "07_schedulers",
                "08_training")  # what the demo's training uses


def train(epochs: int = 20, lr: float = 1e-2, batch_size: int = 32, hidden: int = 128, seed: int = 0,
          device: str = "cpu", verbosity: str = "normal", callbacks: Sequence[Any] = ()) -> tuple[Trainer, float]:
    """Train the MLP with AdamW, warm-up + cosine and clipping; return the Trainer and the test accuracy."""
    tinyflo.manual_seed(seed)
    train_loader = DataLoader(datasets.digits(train=True, flatten=True), batch_size=batch_size,
                              shuffle=True, seed=seed, device=device)
    test_loader = DataLoader(datasets.digits(train=False, flatten=True), batch_size=512, device=device)
    model = mlp(hidden).to(device)
    per_epoch = len(train_loader)
    schedule = Warmup(CosineAnnealing(max(epochs - 1, 1) * per_epoch), warmup_steps=per_epoch)  # 1 epoch: warm-up
    trainer = Trainer(
        model,
        AdamW(model.parameters(), lr=lr, weight_decay=0.05),
        lambda logits, labels: cross_entropy(logits, labels, label_smoothing=0.1),
        scheduler=schedule,
        scheduler_interval="step",
        grad_clip_norm=1.0,
        verbosity=verbosity,
    )
    trainer.fit(train_loader, test_loader, epochs=epochs, callbacks=callbacks)
    return trainer, trainer.history["val_acc"][-1]


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line (``tinyflo demo --help``)."""
    parser = Parser(prog="tinyflo demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    parser.add_argument("--lr", type=float, default=1e-2, help="peak learning rate of AdamW (default 0.01)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data order (default 0)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    parser.add_argument("--out", default="tinyflo-demo", type=path_arg,
                        help="folder for the loss plot (default ./tinyflo-demo)")
    parser.add_argument("--monitor", action="store_true", help="sample CPU, RAM (and GPU) into each epoch line, and "
                        "write report.html, history.csv and training.log into --out")
    parser.add_argument("--dashboard", action="store_true", help="--monitor, and a live dashboard in the browser "
                        "(a page on 127.0.0.1; it stays up after training until you press Enter)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Train on the digits, print the test accuracy, save the loss curve."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; got {getattr(args, name)}")
    if not 0 < args.lr < float("inf"):
        parser.error(f"--lr must be a positive finite number; got {args.lr}")
    if args.seed < 0:
        parser.error(f"--seed must be a whole number >= 0; got {args.seed}")
    try:
        device = tinyflo.device(args.device)
    except tinyflo.DeviceError as error:  # one line, as `tinyflo` says it: no traceback for a wrong device
        parser.exit(2, f"{parser.prog}: error: --{error}\n")
    # The folder the plot and reports go to is made before training, not after it, and removed
    # again if the demo ends (refused, stopped, cut off by its pipe) before anything was put in it.
    try:
        with output_folder(Path(args.out), "--out"):
            return _run(args, parser, device)
    except CourseError as error:  # the folder cannot be made
        parser.exit(2, f"{parser.prog}: error: {error}\n")


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser, device: tinyflo.Device) -> int:
    """The demo once its options are checked and its folder made."""
    if environment.read("TINYFLO_WORKSPACE") or milestones.student_kit():  # whose modules 01-08 train
        try:
            milestones.require(DEMO_MODULES, what="the demo")
        except milestones.MilestoneError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(f"tinyflo {tinyflo.__version__} demo: MLP 64-{args.hidden}-10 on the bundled 8x8 digits "
          f"(1,438 train / 359 test images), AdamW + warm-up/cosine + clipping, device {device}")
    monitor = Monitor(out_dir=args.out, live=False, dashboard=args.dashboard) if args.monitor or args.dashboard \
        else None
    start = time.perf_counter()
    try:
        # A run that diverges overflows on the way; the Trainer's guard says where, once.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            trainer, test_accuracy = train(args.epochs, args.lr, args.batch_size, args.hidden, args.seed,
                                           args.device, callbacks=[monitor] if monitor else ())
    except FloatingPointError as error:
        where = re.search(r"at (step \d+ \(epoch [^)]*\))", str(error))
        parser.exit(1, f"{parser.prog}: the run diverged{' at ' + where.group(1) if where else ''}: the loss or "
                       f"the gradients became inf or nan with --lr {args.lr:g}, although the gradients are "
                       f"clipped to norm 1.0; try a lower --lr (the default is {parser.get_default('lr'):g})\n")
    epochs = f"{args.epochs} epoch" + ("s" if args.epochs != 1 else "")
    print(f"test accuracy {test_accuracy:.1%} after {epochs} in {time.perf_counter() - start:.1f} s")
    plot = save_loss_plot(trainer.history, Path(args.out) / "loss.png")
    print(f"loss and accuracy curves saved to {plot.resolve()}")
    if monitor is not None:
        print(f"report saved to {(Path(args.out) / 'report.html').resolve()}")
    if monitor is not None and monitor.dashboard is not None:
        if sys.stdin.isatty():
            try:  # Enter, Ctrl-D or Ctrl-C: each only closes the page; the run is complete
                input(f"the dashboard stays at {monitor.dashboard.url} until you press Enter ")
            except (EOFError, KeyboardInterrupt):
                print()
        else:  # nobody to press Enter (a pipe, a job, an IDE's run button): say why the page goes now
            print(f"the dashboard at {monitor.dashboard.url} closes with the run: no terminal to keep it open "
                  "(run tinyflo demo --dashboard in a terminal to keep it; the report above holds the same curves)")
        monitor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
