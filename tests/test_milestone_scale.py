"""Milestone 5 (training at scale) runs headless in its quick form; every feature keeps its promise."""


import json

import pytest
from test_milestones import ROOT, _bars_stand_on_zero, _figures_of, recorded_run

from tinyflo import milestones

RESULTS = ROOT / "milestones" / "results" / "scale"
ROWS = ["SGD, constant LR", "AdamW", "+ warm-up + cosine", "+ clipping", "+ AMP float16 + GradScaler"]


def check_promises(numbers: dict) -> None:
    """What every run, quick or full, must show: one assertion per feature."""
    rows = numbers["ablation"]
    assert list(rows) == ROWS
    sgd, adamw, scheduled, clipped, mixed = (rows[name] for name in ROWS)
    assert adamw["train_loss"] < sgd["train_loss"], "AdamW trains faster than SGD at the same budget"
    assert scheduled["accuracy"] >= adamw["accuracy"] and scheduled["train_loss"] < adamw["train_loss"]
    assert scheduled["accuracy"] >= sgd["accuracy"]
    assert 0 < numbers["clipped_steps"] < numbers["steps_per_run"]
    assert numbers["norm_max_after"] <= numbers["clip"] * (1 + 1e-4) < numbers["norm_max_before"]
    assert abs(mixed["accuracy"] - clipped["accuracy"]) <= 0.01, "float16 within 1 point of float32"
    assert mixed["config"]["amp"] == "float16" and clipped["config"]["amp"] is None
    activations = numbers["amp_activation_bytes"]
    assert activations["float16"] * 2 == activations["float32"]
    assert numbers["amp_skipped_steps"] < 0.05 * numbers["steps_per_run"]
    assert numbers["resume_crash_exit_code"] == 3 and numbers["resume_crash_at"] < numbers["resume_steps"]
    assert numbers["resume_max_delta"] == 0 and numbers["resume_bitwise"] and numbers["resume_history_equal"]
    assert numbers["dp_tolerance"] <= 1e-4 and numbers["dp_max_delta"] <= numbers["dp_tolerance"]
    assert numbers["dp_replicas_delta"] == 0
    assert numbers["dp_bytes_sent"][1] == numbers["dp_ring_bytes"] > 0


@pytest.mark.slow
def test_scale_quick_run_keeps_every_promise_on_the_digits(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYFLO_MILESTONE_DATA", "bundled")
    figure = _figures_of("scale", tmp_path, monkeypatch)["scale.png"]  # in this process: its picture too
    result = json.loads((tmp_path / "result.json").read_text())
    numbers = result["numbers"]
    assert numbers["data"] == "the 8×8 digits (bundled)" and numbers["train_images"] == 1438
    assert numbers["ablation"]["+ clipping"]["accuracy"] >= 0.95
    check_promises(numbers)
    assert result["plots"] == ["scale.png"] and len(result["figures"]) == 10
    assert "| 6 | + checkpoint, crash, resume |" in (tmp_path / "ablation.md").read_text()
    assert not list(tmp_path.glob("*.safetensors")), "checkpoints go to a temporary folder, not the results"
    _bars_stand_on_zero(figure)  # the ablation's accuracies: dots on a zoomed axis, not bars
    accuracy = figure.axes[5]
    assert accuracy.get_ylim()[0] > 50 and not accuracy.patches and len(accuracy.collections[0].get_offsets()) == 5
    assert all(ax.get_xlabel() or ax is accuracy for ax in figure.axes), "every axis says what it shows"


def test_scale_recorded_full_run_keeps_every_promise():
    numbers = recorded_run("scale")["numbers"]
    check_promises(numbers)
    if numbers["data"] == "MNIST at 14×14":
        assert numbers["train_images"] == 60000 and numbers["ablation"]["+ clipping"]["accuracy"] >= 0.97
    assert (RESULTS / "ablation.md").is_file()


def test_scale_needs_every_module_and_uses_the_public_api():
    milestone = milestones.find_milestone("5")
    assert milestone.name == "scale" and milestone.modules == tuple(milestones.MODULE_FILES)
    text = milestone.path(ROOT).read_text()
    assert "tinyflo.core" not in text
    assert 'need_data("mnist"' in text, "the full run reads MNIST when it is there"
