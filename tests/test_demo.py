"""The README's main job, and the proofs that the modules fit together on the bundled digits."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tinyflo
from tinyflo import datasets, demo
from tinyflo.core.data import DataLoader
from tinyflo.core.losses import cross_entropy


def test_hand_written_loop_learns_the_digits():
    """Modules 01-05 alone: a plain gradient step reaches >= 95% test accuracy on the fixed split."""
    tinyflo.manual_seed(0)
    loader = DataLoader(datasets.digits(train=True, flatten=True), batch_size=32, shuffle=True, seed=0)
    model = demo.mlp(128)
    losses = []
    for _ in range(40):
        total = tinyflo.zeros(())
        for x, y in loader:
            loss = cross_entropy(model(x), y)
            model.zero_grad()
            loss.backward()
            with tinyflo.no_grad():
                for p in model.parameters():
                    p.data -= 0.2 * p.grad.data
            total = total + loss.detach()
        losses.append(total.item() / len(loader))
    x_test, y_test = datasets.digits(train=False, flatten=True, as_arrays=True)
    with tinyflo.no_grad():
        accuracy = (model(tinyflo.tensor(x_test)).argmax(axis=1).numpy() == y_test).mean()
    assert losses[-1] < 0.1 * losses[0], f"the training loss did not fall: {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert accuracy >= 0.95, f"test accuracy {accuracy:.1%} is below 95%"


def test_trainer_with_adamw_warmup_cosine_and_clipping_reaches_97_percent():
    """Modules 06-08: the demo's Trainer run reaches >= 97% test accuracy."""
    trainer, accuracy = demo.train(verbosity="quiet")
    assert accuracy >= 0.97, f"test accuracy {accuracy:.1%} is below 97%"
    losses = trainer.history["train_loss"]
    assert losses[-1] < losses[0] and len(losses) == 20


def test_demo_prints_accuracy_and_saves_the_plot(tmp_path, capsys):
    assert demo.main(["--epochs", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"test accuracy \d+\.\d%", out)
    plot = tmp_path / "loss.png"
    assert f"loss and accuracy curves saved to {plot.resolve()}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_demos_picture_shows_both_losses_and_the_accuracy_on_whole_epochs(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to look at
    history = {"train_loss": [1.4, 0.7, 0.6], "val_loss": [0.9, 0.75, 0.7], "val_acc": [0.9, 0.95, 0.975]}
    demo.save_loss_plot(history, tmp_path / "loss.png")
    losses, accuracy = figures[0].axes
    assert [len(line.get_xdata()) for line in losses.lines] == [3, 3] and losses.get_legend() is not None
    assert losses.get_yscale() == "linear" and "test accuracy (%)" == accuracy.get_ylabel()
    assert all(ax.get_xlabel() == "epoch" for ax in (losses, accuracy))
    assert all(float(t).is_integer() for ax in (losses, accuracy) for t in ax.get_xticks()), "whole epochs"
    assert accuracy.get_title() == "test accuracy: 97.5%"


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "--epochs must be at least 1; got 0"),
    (["--lr", "-1"], "--lr must be a positive finite number; got -1.0"),
    (["--lr", "inf"], "--lr must be a positive finite number; got inf"),
    (["--seed", "-1"], "--seed must be a whole number >= 0; got -1"),
])
def test_demo_rejects_bad_arguments(args, message, capsys):
    with pytest.raises(SystemExit):
        demo.main(args)
    assert message in capsys.readouterr().err


def readme_epoch_lines() -> list[str]:
    """The epoch lines the README quotes from the demo's output (``# epoch 20/20  loss=...``, up to a ``...``)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return [quoted.removesuffix("...").strip() for quoted in re.findall(r"# (epoch \d+/\d+ .*)$", readme, re.M)]


def test_readme_quotes_what_the_demo_prints(tmp_path):
    quoted = readme_epoch_lines()
    assert quoted, "the README quotes the demo's last epoch line"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "demo"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    for line in quoted:
        assert any(out.startswith(line) for out in printed), f"the README quotes {line!r}; the demo printed:\n{done.stdout}"
    assert (tmp_path / "tinyflo-demo" / "loss.png").is_file(), "the README says the plot goes to tinyflo-demo/loss.png"


@pytest.mark.parametrize("epochs", [1, 3, 20])
def test_the_demos_curves_tick_whole_epochs_and_read_well_in_the_book(epochs, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from tinyflo import milestones
    from tinyflo.demo import save_loss_plot

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to look at
    history = {"train_loss": [1.0 / (e + 1) for e in range(epochs)], "val_loss": [1.1 / (e + 1) for e in range(epochs)],
               "val_acc": [0.5 + e / 50 for e in range(epochs)]}
    save_loss_plot(history, tmp_path / "loss.png")
    (figure,) = kept
    for ax in figure.axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() and 1 <= t <= epochs for t in ticks), ticks
    assert milestones.figure_problems(figure) == []
