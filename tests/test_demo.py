"""The README's main job: an MLP (64-128-10) learns the bundled digits, and the demo saves its loss curve."""

import re

import pytest

from tinyflo import demo


def test_mlp_learns_the_digits_default():
    """The proof that modules 01-05 fit together: >= 95% test accuracy on the fixed split."""
    _, losses, accuracy = demo.train(epochs=40, lr=0.2, batch_size=32, hidden=128, seed=0, device="cpu")
    assert losses[-1] < 0.1 * losses[0], f"the training loss did not fall: {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert accuracy >= 0.95, f"test accuracy {accuracy:.1%} is below 95%"


def test_demo_prints_accuracy_and_saves_the_plot(tmp_path, capsys):
    assert demo.main(["--epochs", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"test accuracy \d+\.\d%", out)
    plot = tmp_path / "loss.png"
    assert f"loss curve saved to {plot.resolve()}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "--epochs must be at least 1; got 0"),
    (["--lr", "-1"], "--lr must be positive; got -1.0"),
])
def test_demo_rejects_bad_arguments(args, message, capsys):
    with pytest.raises(SystemExit):
        demo.main(args)
    assert message in capsys.readouterr().err
