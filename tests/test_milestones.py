"""Milestones 1-3 run headless in their quick form and reproduce their (reduced, honest) figures."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinyflo import cli, milestones

ROOT = Path(__file__).resolve().parents[1]
MNIST = milestones.find_data("mnist", "train-images-idx3-ubyte.gz")


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`tinyflo ARGS` in a fresh process (from the checkout, without a student workspace unless given;
    $TINYFLO_DATA stays, so the milestone finds the data this test process finds)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_") or k == "TINYFLO_DATA"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "tinyflo.cli", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=300)


def run_quick(name: str, out: Path, env: dict | None = None) -> dict:
    """Run a milestone in quick mode into `out`; its result.json, after checking the process and the plots."""
    done = run_cli("milestone", "run", name, "--quick", "--device", "cpu", "--out", str(out), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not re.findall(r"^figure .*", done.stderr, re.M), "a figure hard to read in the book"
    result = json.loads((out / "result.json").read_text())
    assert result["mode"] == "quick" and result["device"] == "cpu"
    assert result["plots"] and all((out / plot).stat().st_size > 1000 for plot in result["plots"])
    assert "| figure | reproduced | published (source) | judged against | holds |" in done.stdout
    assert (out / "result.md").read_text().count("| yes |") == len(result["figures"])
    if "tinyflo.Trainer" in milestones.find_milestone(name).path(ROOT).read_text():
        assert re.search(r"^epoch 1/\d+  loss=", done.stdout, re.M), "a milestone shows the Trainer's epoch lines"
    return result


@pytest.mark.slow
def test_perceptron_converges_within_novikoffs_bound(tmp_path):
    result = run_quick("perceptron", tmp_path)
    numbers = result["numbers"]
    assert numbers["mistakes_per_epoch"][-1] == 0, "the last epoch must be mistake-free"
    assert 0 < numbers["mistakes"] <= numbers["novikoff_bound"]
    assert numbers["gamma"] > 0 and all(row["passed"] for row in result["figures"])


@pytest.mark.slow
def test_xor_single_layer_never_exceeds_75_percent(tmp_path):
    numbers = run_quick("2", tmp_path)["numbers"]
    assert numbers["single_layer_accuracy"] <= 0.75
    assert numbers["grid_best_accuracy"] == 0.75 and numbers["grid_size"] >= 61 ** 3
    assert numbers["perceptron_min_mistakes"] > 0


@pytest.mark.slow
def test_mlp_solves_xor_and_learns_the_digits(tmp_path):
    result = run_quick("03_mlp", tmp_path)
    numbers = result["numbers"]
    assert numbers["xor_accuracy"] == 1.0
    assert numbers["xor_seeds_solved"] >= numbers["xor_seeds"] // 2
    assert numbers["digits_accuracy"] >= 0.96
    if MNIST is not None:  # the milestone looks where this test did
        assert numbers["mnist_accuracy"] >= 0.93
    else:
        assert "mnist_accuracy" not in numbers and numbers["skipped"][0].startswith("MNIST")


def recorded_run(name: str) -> dict:
    """The committed full run of milestone `name` (the test skips without one), with its common checks done."""
    folder = ROOT / "milestones" / "results" / name
    path = folder / "result.json"
    if not path.is_file():
        pytest.skip(f"no recorded full run at {path}")
    result = json.loads(path.read_text())
    assert result["milestone"] == milestones.MILESTONES[name].slug and result["mode"] == "full"
    assert all(row["passed"] for row in result["figures"])
    assert all((folder / plot).is_file() for plot in result["plots"])
    return result


def fake_workspace(path: Path, records: dict, files: tuple[str, ...] = ()) -> Path:
    """A student workspace with this progress.json and these reference files as the student's code."""
    (path / "package" / "tinyflo" / "core").mkdir(parents=True)
    for name in files:
        shutil.copy(ROOT / "src" / "tinyflo" / "core" / f"{name}.py", path / "package" / "tinyflo" / "core")
    (path / "progress.json").write_text(json.dumps(records))
    return path


def passed(points: float = 10, max_points: float = 10) -> dict:
    return {"points": points, "max_points": max_points, "completed": True}


def test_require_refuses_a_module_the_workspace_lacks(tmp_path, monkeypatch):
    workspace = fake_workspace(tmp_path, {"01_tensor": passed()}, ("tensor",))
    monkeypatch.setenv("TINYFLO_WORKSPACE", str(workspace))
    with pytest.raises(milestones.MilestoneError) as error:
        milestones.require(["01_tensor", "02_autograd"])
    message = str(error.value)
    assert "02_autograd is not started" in message and "01_tensor" not in message, "never started: said as such"
    assert "tinyflo module start 02_autograd" in message and "tinyflo module complete 02_autograd" in message
    (workspace / "02_autograd").mkdir()  # started, not completed
    with pytest.raises(milestones.MilestoneError) as error:
        milestones.require(["01_tensor", "02_autograd"])
    message = str(error.value)
    assert "02_autograd is not complete" in message
    assert "tinyflo module test 02_autograd" in message and "tinyflo module complete 02_autograd" in message


def test_require_refuses_a_module_whose_tests_fail(tmp_path, monkeypatch):
    workspace = fake_workspace(tmp_path, {"01_tensor": passed(7, 10)}, ("tensor",))
    monkeypatch.setenv("TINYFLO_WORKSPACE", str(workspace))
    with pytest.raises(milestones.MilestoneError, match=r"01_tensor fails its tests .*7/10 points"):
        milestones.require(["01_tensor"])


def test_require_without_a_workspace_uses_the_reference(monkeypatch, capsys):
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    assert milestones.require(["01_tensor", "08_training"]) == "reference"
    assert "reference package" in capsys.readouterr().out
    with pytest.raises(milestones.MilestoneError, match="unknown module"):
        milestones.require(["13_transformers"])


@pytest.mark.slow
def test_milestone_runs_on_the_students_code_and_refuses_without_it(tmp_path):
    workspace = fake_workspace(tmp_path / "ws", {"01_tensor": passed()}, ("tensor",))
    env = {"TINYFLO_WORKSPACE": str(workspace)}
    result = run_quick("perceptron", tmp_path / "out", env=env)
    assert result["code"] == "workspace"
    refused = run_cli("milestone", "run", "xor", "--quick", "--out", str(tmp_path / "xor"), env=env)
    assert refused.returncode != 0
    assert "milestone 02_xor cannot run" in refused.stderr
    assert "tinyflo module complete 02_autograd" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "xor" / "result.json").exists()


@pytest.mark.slow
def test_cli_default_out_and_a_relative_workspace_follow_the_callers_folder(tmp_path):
    fake_workspace(tmp_path / "ws", {"01_tensor": passed()}, ("tensor",))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    environment["TINYFLO_WORKSPACE"] = "ws"
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "milestone", "run", "1", "--quick"],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "tinyflo-milestones" / "perceptron-quick" / "result.json").read_text())
    assert result["code"] == "workspace" and result["mode"] == "quick"


def test_cli_record_is_for_full_runs_only(capsys):
    assert cli.main(["milestone", "run", "1", "--quick", "--record"]) == 2
    assert "--record keeps the full run" in capsys.readouterr().err


def test_cli_lists_the_milestones_with_their_modules(capsys):
    assert cli.main(["milestone", "list"]) == 0
    out = capsys.readouterr().out
    for milestone in milestones.MILESTONES.values():
        assert milestone.slug in out and milestone.title in out
    assert "needs 01_tensor, 02_autograd, 03_layers, 04_losses, 06_optimizers" in out


def test_cli_run_explains_unknown_names_and_a_missing_checkout(monkeypatch, capsys):
    assert cli.main(["milestone", "run", "lenet-9"]) == 2
    assert "no milestone called 'lenet-9'; the milestones are 01_perceptron" in capsys.readouterr().err
    monkeypatch.setattr(milestones, "checkout_dir", lambda: None)
    assert cli.main(["milestone", "run", "1"]) == 2
    assert "live in a tinyflo checkout" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["1", "01", "perceptron", "01_perceptron", " Perceptron "])
def test_find_milestone_accepts_number_name_and_folder(name):
    assert milestones.find_milestone(name).slug == "01_perceptron"


def test_mode_and_device_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYFLO_MILESTONE_MODE", "quick")
    monkeypatch.setenv("TINYFLO_MILESTONE_DEVICE", "cpu:1")
    monkeypatch.setenv("TINYFLO_MILESTONE_OUT", str(tmp_path / "out"))
    run = milestones.Run("xor")
    assert (run.mode, run.quick, str(run.device), run.out) == ("quick", True, "cpu:1", tmp_path / "out")
    monkeypatch.setenv("TINYFLO_MILESTONE_MODE", "fast")
    with pytest.raises(milestones.MilestoneError, match="TINYFLO_MILESTONE_MODE must be 'quick' or 'full'; got 'fast'"):
        milestones.milestone_mode()


def test_finish_refuses_a_figure_that_does_not_hold(monkeypatch, tmp_path):
    monkeypatch.delenv("TINYFLO_MILESTONE_MODE", raising=False)
    run = milestones.Run("perceptron", out=tmp_path)
    run.figure("training errors", 3, 0, "Rosenblatt 1958", passed=False)
    with pytest.raises(SystemExit, match="not reproduced: training errors"):
        run.finish()
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["figures"][0]["passed"] is False and saved["mode"] == "full"


def test_every_registered_milestone_has_its_notebook():
    for milestone in milestones.MILESTONES.values():
        text = milestone.path(ROOT).read_text()
        assert f'milestones.start("{milestone.name}")' in text
        assert "tinyflo.core" not in text, f"{milestone.slug} must use only the public API"


@pytest.mark.slow
def test_a_milestone_runs_as_a_notebook(tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("TINYFLO_MILESTONE_MODE", "quick")
    monkeypatch.setenv("TINYFLO_MILESTONE_DEVICE", "cpu")
    monkeypatch.setenv("TINYFLO_MILESTONE_OUT", str(tmp_path))
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    path = milestones.MILESTONES["xor"].path(ROOT)
    notebook = jupytext.read(path)
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert any("image/png" in out.get("data", {}) for out in outputs), "the plot is shown in the notebook"
    assert "| best of 226,981 linear thresholds | 75% |" in "".join(out.get("text", "") for out in outputs)
    assert json.loads((tmp_path / "result.json").read_text())["mode"] == "quick"


def _figures_of(name: str, tmp_path: Path, monkeypatch) -> dict:
    """Run milestone `name` (quick) in this process and keep each figure it saves, by file name."""
    import runpy

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved = {}
    real = milestones.Run.savefig

    def keep(self, fig, filename):
        problems = milestones.figure_problems(fig)
        assert not problems, f"{filename} is hard to read in the book: {problems}"
        saved[filename] = fig
        return real(self, fig, filename)

    monkeypatch.setattr(milestones.Run, "savefig", keep)
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)  # keep the figures to look at
    monkeypatch.setenv("TINYFLO_MILESTONE_MODE", "quick")
    monkeypatch.setenv("TINYFLO_MILESTONE_OUT", str(tmp_path))
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    script = milestones.find_milestone(name).path(ROOT)
    monkeypatch.chdir(script.parent)
    runpy.run_path(str(script), run_name="__main__")
    return saved


def test_the_pictures_show_counts_as_counts(tmp_path, monkeypatch):
    """XOR's histogram of thresholds: a log axis, so an empty level has no bar (none drawn below 1) but
    keeps its place and its '0'; the perceptron's mistakes per epoch: whole-number ticks only."""
    xor = _figures_of("xor", tmp_path / "xor", monkeypatch)["xor.png"]
    right = xor.axes[1]
    heights = [bar.get_height() for bar in right.patches]
    assert all(height != height or height >= 1 for height in heights), heights  # nan: no bar
    assert [label.get_text() for label in right.get_xticklabels()] == ["0%", "25%", "50%", "75%", "100%"]
    assert right.get_xlim()[0] < 0 and right.get_xlim()[1] > 4, "the empty levels stay in view"
    assert "0" in [text.get_text() for text in right.texts]
    perceptron = _figures_of("perceptron", tmp_path / "perceptron", monkeypatch)["perceptron.png"]
    ticks = perceptron.axes[1].get_yticks()
    assert all(float(tick).is_integer() for tick in ticks), ticks
    _bars_stand_on_zero(perceptron)
    mistakes = [int(bar.get_height()) for bar in perceptron.axes[1].patches]
    assert [text.get_text() for text in perceptron.axes[1].texts] == [str(m) for m in mistakes], "each count written"
    for figure in (perceptron, xor):
        figure.canvas.draw()
        left = figure.axes[0]
        below = left.get_window_extent().y0 - left.xaxis.get_tightbbox().height
        assert left.get_legend().get_window_extent().y1 <= below, "the legend covers no point and no axis label"
    assert [line.get_label() for line in xor.axes[0].lines][0].startswith("a best line: 75% right")
    assert all(ax.get_xlabel() for ax in (*xor.axes, *perceptron.axes)), "every axis says what it shows"


def _bars_stand_on_zero(figure) -> None:
    """A bar's length shows its value: on a linear axis every bar starts at 0 (dots where it cannot)."""
    for ax in figure.axes:
        if ax.patches and ax.get_yscale() == "linear":
            assert min(ax.get_ylim()) <= 0, (ax.get_title(), ax.get_ylim())


def test_lenets_mistakes_fill_their_rows_and_say_how_many(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYFLO_MILESTONE_DATA", "bundled")  # the digits: a handful of mistakes
    figure = _figures_of("lenet", tmp_path, monkeypatch)["mistakes.png"]
    shown = [ax for ax in figure.axes if ax.images]
    title = figure._suptitle.get_text()
    count = int(re.search(r"(\d+) digits test images it gets wrong$", title).group(1))
    assert len(figure.axes) - len(shown) < 8, "no row left empty"
    if count <= len(figure.axes):
        assert title == f"LeNet-5: the {count} digits test images it gets wrong" and len(shown) == count
    else:
        assert title.startswith(f"LeNet-5: the first {len(shown)} of the {count} ")


def test_a_refused_milestone_makes_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(milestones, "student_kit", lambda: True)  # a kit, and no workspace: refused
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    monkeypatch.delenv("TINYFLO_MILESTONE_OUT", raising=False)
    with pytest.raises(SystemExit, match="cannot run: this tinyflo is a student kit"):
        milestones.start("perceptron", out=tmp_path / "m")
    assert not (tmp_path / "m").exists() and "results" not in capsys.readouterr().out


@pytest.mark.parametrize("readme", ["README.md", "milestones/README.md"])
def test_the_readmes_milestone_tables_quote_the_recorded_runs(readme):
    """Every accuracy and difference a README's milestone table states is one the recorded run printed:
    re-recording a milestone without updating its row fails here."""
    names = {"1": "perceptron", "2": "xor", "3": "mlp", "4": "lenet", "5": "scale", "6": "transformer"}
    rows = [line for line in (ROOT / readme).read_text(encoding="utf-8").splitlines() if re.match(r"\| \d\. ", line)]
    assert len(rows) == len(names), rows
    for row in rows:
        folder = ROOT / "milestones" / "results" / names[row[2]]
        recorded = "".join(path.read_text(encoding="utf-8") for path in sorted([*folder.glob("*.md"), *folder.glob("*.json")]))
        reproduced = row.split("|")[3]
        for figure in re.findall(r"\d+\.\d+%|Δ = [\d.e-]+|\d\.\d{3}\b", reproduced):
            assert figure.replace("\\", "") in recorded, f"{readme}, milestone {row[2]}: {figure} is not in {folder}"
