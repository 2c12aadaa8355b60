"""Milestone 4 (LeNet-5) runs headless in its quick form and reproduces its reduced, honest figures."""

import pytest
from test_milestones import ROOT, recorded_run, run_quick

from tinyflo import milestones


@pytest.mark.slow
def test_lenet_quick_run_reads_digits_mnist_and_fashion(tmp_path):
    result = run_quick("lenet", tmp_path)
    numbers = result["numbers"]
    assert numbers["digits_accuracy"] >= 0.95
    assert len(numbers["digits_test_accuracy_per_epoch"]) == numbers["digits_config"]["epochs"] == 5
    assert numbers["parameters"] == 61706  # LeNet-5 with 10 classes
    assert {"curves.png", "mistakes.png", "filters.png"} <= set(result["plots"])
    for name, key, floor in (("mnist", "mnist", 0.96), ("fashion-mnist", "fashion_mnist", 0.75)):
        if milestones.find_data(name, "train-images-idx3-ubyte.gz") is not None:  # the milestone finds it too
            assert numbers[f"{key}_accuracy"] >= floor
            assert numbers[f"{key}_train_images"] == 12000
            assert not any(part.lower().startswith(name) for part in numbers["skipped"])
        else:
            assert f"{key}_accuracy" not in numbers
            assert any(part.lower().startswith(name) for part in numbers["skipped"])
    if "fashion_mnist_accuracy" in numbers:
        assert "fashion_confusion.png" in result["plots"]
        assert len(numbers["fashion_mnist_accuracy_per_class"]) == 10


def test_lenet_recorded_full_run_holds_its_figures():
    numbers = recorded_run("lenet")["numbers"]
    assert numbers["digits_accuracy"] >= 0.98 and numbers["mnist_accuracy"] >= 0.985
    assert numbers["mnist_train_images"] == 60000
    assert numbers["fashion_mnist_accuracy"] > 0.897


def test_lenet_is_registered_with_the_convolutions_module():
    milestone = milestones.find_milestone("4")
    assert milestone.name == "lenet" and "10_convolutions" in milestone.modules
    assert milestone.path(ROOT) == ROOT / "milestones" / "04_lenet" / "lenet.py"
    assert "99.05%" in milestone.figure and "89.7%" in milestone.figure
