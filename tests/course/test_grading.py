"""The grading engine: tests come back from the instructor's copy, and only passing cells score."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from course_support import call_cli

from tinyflo.course.grading import grade, score_cell
from tinyflo.course.instructor import gradebook_scores
from tinyflo.course.kit import cached_tree, grading_notebook
from tinyflo.course.notebooks import instructor_notebook, student_notebook
from tinyflo.course.source import discover_modules

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(demo_module):
    """The demo module's grading tree (the package with the demo module hollow)."""
    return cached_tree([demo_module], demo_module)


def _grade_cell(source: str, outputs: list, executed: bool = True) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 2, "solution": False}
    cell.outputs = [nbformat.from_dict(output) for output in outputs]
    cell.execution_count = 1 if executed else None
    return cell


def test_a_clean_cell_earns_its_points():
    assert score_cell(_grade_cell("assert True", [])).points == 2


def test_an_assertion_message_is_reported():
    error = {
        "output_type": "error",
        "ename": "AssertionError",
        "evalue": "relu(-1) should be 0",
        "traceback": [],
    }
    result = score_cell(_grade_cell("...", [error]))
    assert (result.points, result.error) == (0, "AssertionError: relu(-1) should be 0")


def test_a_bare_assert_reports_the_failing_line():
    traceback = ["\x1b[0;31m----> 3\x1b[0m \x1b[38;5;28;01massert\x1b[39;00m f(2) == 4"]
    error = {
        "output_type": "error",
        "ename": "AssertionError",
        "evalue": "",
        "traceback": traceback,
    }
    assert score_cell(_grade_cell("...", [error])).error == "AssertionError (at `assert f(2) == 4`)"


def test_stderr_scores_zero_as_in_nbgrader():
    stderr = {"output_type": "stream", "name": "stderr", "text": "RuntimeWarning: overflow\n"}
    result = score_cell(_grade_cell("...", [stderr]))
    assert result.points == 0 and "stderr" in result.error and "overflow" in result.error


def test_a_cell_that_never_ran_scores_zero():
    result = score_cell(_grade_cell("assert True", [], executed=False), died="the kernel died")
    assert (result.points, result.error) == (0, "the kernel died")


@pytest.mark.slow
def test_tampered_tests_are_restored_and_deleted_ones_come_back(demo_module, tmp_path, tree):
    """A blank notebook whose student weakened one test, deleted another and added a fake one."""
    instructor = instructor_notebook(demo_module)
    submission = student_notebook(instructor)
    cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in submission.cells}
    cells["demo_square"].source = "pass"
    cells["demo_square"].metadata["nbgrader"]["points"] = 100
    submission.cells.remove(cells["demo_relu"])
    fake = copy.deepcopy(cells["demo_square"])
    fake.id = "fake"
    fake.metadata["nbgrader"]["grade_id"] = "bonus"
    submission.cells.append(fake)

    report = grade(submission, instructor, tmp_path, tree)
    assert [(c.grade_id, c.points, c.max_points) for c in report.cells] == [
        ("demo_square", 0, 2),
        ("demo_relu", 0, 3),
    ]
    assert all("still the stub" in cell.error for cell in report.cells), report.cells
    assert not report.full_marks


@pytest.mark.slow
def test_cells_after_a_dead_kernel_score_zero(demo_module, tmp_path, tree):
    instructor = instructor_notebook(demo_module)
    submission = copy.deepcopy(instructor)
    submission.cells.insert(2, nbformat.v4.new_code_cell("import os\nos._exit(1)"))
    report = grade(submission, instructor, tmp_path, tree, timeout=60)
    assert report.points == 0 and report.max_points == 5
    assert all("kernel died" in cell.error for cell in report.cells)


@pytest.mark.slow
def test_a_kernel_that_cannot_start_says_why(demo_module, tmp_path, tree):
    """The kernel starts in the student's folder; a file there shadowing its launcher stops it."""
    instructor = instructor_notebook(demo_module)
    (tmp_path / "ipykernel_launcher.py").write_text("raise SystemExit('launcher replaced')\n")
    report = grade(copy.deepcopy(instructor), instructor, tmp_path, tree, timeout=60)
    assert report.points == 0
    assert all(
        cell.error == "the kernel did not start (launcher replaced)" for cell in report.cells
    )


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="Unix sockets are POSIX only")
def test_the_grading_kernel_talks_over_unix_sockets_not_tcp_ports(demo_module, tmp_path, tree):
    """A TCP port picked for one kernel can be taken by another starting beside it (nbgrader)."""
    instructor = instructor_notebook(demo_module)
    submission = copy.deepcopy(instructor)
    check = "from ipykernel.kernelapp import IPKernelApp\nassert IPKernelApp.instance().transport == 'ipc'"
    submission.cells.insert(2, nbformat.v4.new_code_cell(check))
    report = grade(submission, instructor, tmp_path, tree, timeout=60)
    assert report.full_marks


def _with_code(notebook, grade_id: str, extra: str):
    """A copy of `notebook` with `extra` appended to the cell `grade_id`."""
    changed = copy.deepcopy(notebook)
    for cell in changed.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source += "\n" + extra
    return changed


@pytest.mark.slow
def test_a_looping_cell_is_stopped_and_the_rest_is_graded(demo_module, tmp_path, tree):
    instructor = instructor_notebook(demo_module)
    submission = _with_code(instructor, "demo_square_code", "while True:\n    pass")
    submission = _with_code(
        submission, "demo_relu_code", "def relu(x):\n    while True:\n        pass"
    )
    started = time.monotonic()
    report = grade(submission, instructor, tmp_path, tree, timeout=3)
    assert time.monotonic() - started < 3 + 3 + 20, "each loop stops at its limit"
    square, relu = report.cells
    assert square.passed and square.error == (
        "passed, but your code in cell `demo_square_code` ran past 3 s and was stopped"
    )
    assert relu.points == 0 and relu.error.startswith("the tests in cell `demo_relu` ran past 3 s")


@pytest.mark.slow
def test_a_syntax_error_is_reported_against_its_cell_and_line(demo_module, tmp_path, tree):
    instructor = instructor_notebook(demo_module)
    submission = _with_code(instructor, "demo_relu_code", "y = (1,")
    report = grade(submission, instructor, tmp_path, tree, timeout=30)
    relu = report.by_id()
    assert relu["demo_square"] == 2 and relu["demo_relu"] == 0
    error = report.cells[1].error
    assert error.startswith("your code in cell `demo_relu_code` failed: SyntaxError"), error
    assert "line" in error and "`y = (1,`" in error, error


@pytest.mark.slow
def test_a_failing_hidden_check_says_which_and_why_but_never_how(demo_module, tmp_path, tree):
    """The demo's relu mutant fails only the hidden check; the student reads its message."""
    instructor = instructor_notebook(demo_module)
    source = grading_notebook(demo_module)
    wrong = copy.deepcopy(instructor)
    for cell in wrong.cells:
        cell.source = cell.source.replace("np.maximum(x, 0)", "np.maximum(x, -1)")
    report = grade(wrong, source, tmp_path, tree, timeout=30)
    relu = report.cells[1]
    assert relu.points == 0
    assert relu.error == (
        "HiddenCheckFailed: hidden check 1 of 1 of task `demo_relu`: relu(-1.5) should be 0.0"
    )
    assert "assert relu(-1.5)" not in json.dumps(nbformat.v4.new_notebook(cells=source.cells))


@pytest.mark.slow
def test_ctrl_c_ends_grading_with_one_line(demo_module, tmp_path):
    """Ctrl-C during `module test` stops it with one line and no traceback, and kills the kernel."""
    workspace = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    env["TINYFLO_MODULES"] = str(demo_module.path.parent.parent)
    command = [sys.executable, "-m", "tinyflo.cli", "module"]
    subprocess.run([*command, "start", "demo", "--workspace", str(workspace)], env=env, check=True)
    notebook = workspace / "00_demo" / "demo.ipynb"
    looping = _with_code(
        nbformat.read(notebook, as_version=4), "demo_square_code", "while True:\n    pass"
    )
    nbformat.write(looping, notebook)
    grader = subprocess.Popen(
        [*command, "test", "demo", "--workspace", str(workspace)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    while (
        "grading" not in (grader.stdout.readline() or "grading") and time.monotonic() - started < 60
    ):
        pass
    time.sleep(4)  # the kernel is in the loop by now
    grader.send_signal(signal.SIGINT)
    _, stderr = grader.communicate(timeout=30)
    assert grader.returncode == 130, stderr
    assert stderr.strip().splitlines() == [
        "tinyflo module: stopped (Ctrl-C); nothing more was done"
    ], stderr


@pytest.mark.slow
def test_a_loop_that_swallows_the_interrupt_does_not_hold_up_grading(demo_module, tmp_path, tree):
    instructor = instructor_notebook(demo_module)
    stubborn = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
    submission = _with_code(instructor, "demo_square_code", stubborn)
    started = time.monotonic()
    report = grade(submission, instructor, tmp_path, tree, timeout=3)
    assert time.monotonic() - started < 3 + 5 + 20
    square, relu = report.cells
    assert square.error == "your code in cell `demo_square_code` ran past 3 s and was stopped"
    assert relu.points == 0 and relu.error.startswith(
        "not run: cell `demo_square_code` kept running"
    )


@pytest.mark.slow
def test_nbgrader_stops_a_looping_kernel_and_grades_the_rest(demo_module, tmp_path):
    """Through real nbgrader (`tinyflo course autograde`): a loop that swallows the interrupt is
    stopped, reported against its cell, and grading ends as in the student loop."""
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(demo_module.path.parent.parent)]
    for action in ("build", "release"):
        assert call_cli("course", action, *common)[0] == 0
    stubborn = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
    submission = _with_code(instructor_notebook(demo_module), "demo_relu_code", stubborn)
    target = course / "submitted" / "s" / "00_demo" / "demo.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(submission, target)
    started = time.monotonic()
    code, out = call_cli("course", "autograde", "--timeout", "3", *common)
    assert code == 0 and time.monotonic() - started < 3 + 5 + 60, out
    scores = {s.module: s for s in gradebook_scores(course)}
    assert scores["00_demo"].by_id() == {"demo_square": 2, "demo_relu": 0}


PROBE = """
import json, os, socket, sys
seen = {"repository": any(os.path.exists(os.path.join(REPO, p)) for p in ("src", "modules")), "marker": os.path.exists(MARKER)}
seen["home"] = sorted(os.listdir(os.path.expanduser("~"))) if os.path.isdir(os.path.expanduser("~")) else []
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    seen["network"] = True
except OSError:
    seen["network"] = False
seen["tinyflo_dists"] = [p for d in sys.path if os.path.isdir(d) for p in os.listdir(d) if "tinyflo" in p.lower()]
try:
    import tinyflo.core.tensor as t
    t.Tensor([1.0])
    seen["working_tensor"] = True
except (NotImplementedError, ImportError):  # hollow, or not in this course at all
    seen["working_tensor"] = False
json.dump(seen, open("probe.json", "w"))
"""


def _probe(repo, marker) -> str:
    return f"REPO, MARKER = {str(repo)!r}, {str(marker)!r}\n{PROBE}"


def _assert_sandboxed(seen: dict) -> None:
    assert seen["repository"] is False and seen["marker"] is False, seen
    assert seen["network"] is False, seen
    assert seen["tinyflo_dists"] == ["tinyflo"], seen  # the grading tree's package, nothing else
    assert seen["home"] == [], seen


@pytest.fixture
def marker():
    """A file in the real /tmp, which no grading kernel may see."""
    with tempfile.NamedTemporaryFile(prefix="tinyflo-probe-", dir="/tmp") as handle:
        yield Path(handle.name)


@pytest.mark.slow
def test_the_grading_kernel_sees_no_repository_tmp_network_or_reference(
    demo_module, tmp_path, marker
):
    """What `module test` runs a notebook in: checked from inside, by a student's cell."""
    instructor = instructor_notebook(demo_module)
    submission = copy.deepcopy(instructor)
    submission.cells.insert(2, nbformat.v4.new_code_cell(_probe(ROOT, marker)))
    modules = discover_modules(ROOT / "modules")  # module 01 graded: its package copy is hollow
    grade(submission, instructor, tmp_path, cached_tree(modules, modules[0]), timeout=60)
    _assert_sandboxed(json.loads((tmp_path / "probe.json").read_text()))


@pytest.mark.slow
def test_nbgraders_kernels_are_sandboxed_too(demo_module, tmp_path, marker):
    """The same probe through real nbgrader: the kernelspec `course build` writes is the sandbox."""
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(demo_module.path.parent.parent)]
    for action in ("build", "release"):
        assert call_cli("course", action, *common)[0] == 0
    submission = instructor_notebook(demo_module)
    submission.cells.insert(2, nbformat.v4.new_code_cell(_probe(ROOT, marker)))
    target = course / "submitted" / "s" / "00_demo" / "demo.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(submission, target)
    code, out = call_cli("course", "autograde", *common)
    assert code == 0, out
    _assert_sandboxed(
        json.loads((course / "autograded" / "s" / "00_demo" / "probe.json").read_text())
    )
