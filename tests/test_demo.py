"""The README's main job: the demo trains and its loss falls."""

import re

import pytest

from tinyflo import demo


def test_demo_loss_falls_and_it_learns(capsys):
    assert demo.main(["--steps", "300"]) == 0
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out)]
    accuracy = float(re.search(r"train accuracy (\d+\.\d+)%", out).group(1))
    assert len(losses) >= 5 and losses[-1] < 0.5 * losses[0]
    assert accuracy >= 95.0


def test_demo_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--steps", "0"])
    assert "--steps must be at least 1; got 0" in capsys.readouterr().err
