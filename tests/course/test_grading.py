"""The grading engine: course cells restored, scenarios run in the sandbox, verdicts made apart."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

from tinyflo.course.grader.engine import run_job
from tinyflo.course.grader.grading import grade, module_scenarios
from tinyflo.course.grader.sandbox import Limits, bwrap_works
from tinyflo.course.grader.scenarios import build_task
from tinyflo.course.grader.tree import cached_tree
from tinyflo.course.notebooks import instructor_notebook, student_notebook

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(bool(bwrap_works()), reason=f"{bwrap_works()}")


@pytest.fixture
def tree(demo_module):
    """The demo module's grading tree (the package with the demo module hollow)."""
    return cached_tree([demo_module], demo_module)


def _with_code(notebook, grade_id: str, extra: str):
    """A copy of `notebook` with `extra` appended to the cell `grade_id`."""
    changed = copy.deepcopy(notebook)
    for cell in changed.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source += "\n" + extra
    return changed


def test_the_student_scenario_holds_no_expected_value_message_or_comparison():
    task = build_task(
        "t",
        "x = Tensor([1.0, 2.0])\ns = 1 / (1 + np.exp(-x.data))\n"
        'assert _close(x.sigmoid().data, s), "sigmoid is 1 / (1 + exp(-a))"\n'
        "### BEGIN HIDDEN TESTS\n"
        'assert f(3) == 9.125, "f(3) must be 9.125"\n'
        "### END HIDDEN TESTS",
        helpers=frozenset({"_close"}),
    )
    assert "9.125" not in task.student_code and "must be" not in task.student_code
    assert "np.exp" not in task.student_code, "an expected value computed before the call"
    assert "_close" not in task.student_code
    assert "9.125" in task.reference_code
    assert [(c.number, c.hidden, c.message) for c in task.checks] == [
        (1, False, "sigmoid is 1 / (1 + exp(-a))"),
        (1, True, "f(3) must be 9.125"),
    ]


def test_a_visible_check_without_a_message_quotes_itself_and_a_hidden_one_never_does():
    task = build_task(
        "t",
        "y = f(2)\nassert y == 4\n"
        "### BEGIN HIDDEN TESTS\n"
        "assert f(3) == 9.125\n"
        "### END HIDDEN TESTS",
    )
    visible, hidden = task.checks
    assert visible.message == "this does not hold: assert y == 4", "the student's notebook shows that line"
    assert hidden.message == "the expected result was not produced" and "9.125" not in hidden.message


def test_checks_of_the_students_own_values_are_decided_outside_on_data():
    """`all(...)` over the student's objects, numpy's tests and comparisons of two student
    values leave the scenario as rows of values; the grader runs the condition itself."""
    from tinyflo.course.grader.verdicts import Helpers, decide

    task = build_task(
        "t",
        "ps = make()\n"
        "assert all(np.allclose(p.data, q) for p, q in zip(ps, qs)), 'the same'\n"
        "assert np.all(np.isfinite(h.numpy())) and h.requires_grad, 'finite'\n"
        "assert first.lr(0) > first.lr(1), 'decreasing'\n"
        "assert a is not b and 'x' in str(err), 'a new object'\n",
    )
    code = task.student_code
    for name in ("allclose", "isfinite", "np.all", " > ", "all("):
        assert name not in code, name
    assert "__tf_pristine['str'](err)" in code, "an object's text through the runner's own str"
    rows, finite, order, identity = (check.condition for check in task.checks)
    assert rows[0] == "expr" and rows[3], "a comprehension over the student's objects: rows"

    def holds(condition, check, student, reference=None):
        reference = student if reference is None else reference
        return decide(condition, check, student, reference, Helpers())

    one, two = np.ones(3), np.full(3, 2.0)
    check = task.checks[0]
    assert holds(rows, check, [[(one, one), (two, two)]])
    assert not holds(rows, check, [[(one, one), (two, one)]])
    assert not holds(rows, check, [[]], [[(one, one)]]), "an emptied all() must not hold"
    assert holds(finite, task.checks[1], [one, True])
    assert not holds(finite, task.checks[1], [np.array([1.0, np.inf]), True])
    assert holds(order, task.checks[2], [0.1, 0.05]) and not holds(order, task.checks[2], [0.1, 0.2])
    assert identity[0] == "and" and identity[1][0][1] == "truth", "`is` asked of the objects"


def test_the_courses_names_come_from_the_runners_record_and_gradcheck_is_matched():
    """A name a course cell bound is read from what that cell left (not the notebook's
    namespace, where `gradcheck = lambda *a: True` would land); gradcheck's gradients are
    recorded beside its verdict, to match the reference's."""
    task = build_task(
        "t",
        "y = x64 * 2\nassert gradcheck(lambda t: elu(t, x64), x64)\nassert _close(y.data, 2)\n",
        helpers=frozenset({"_close"}),
        course=frozenset({"gradcheck", "x64", "elu_fast"}),
    )
    code = task.student_code
    assert "__tf_pristine['course:gradcheck'](" in code
    assert "__tf_pristine['gradients'](lambda t: elu(t, x64), __tf_pristine['course:x64'])" in code
    assert "y = __tf_pristine['course:x64'] * 2" in code, "the cell's own names stay its own"
    condition = task.checks[0].condition
    assert condition[0] == "and" and condition[1][0][1] == "same_gradients"


@pytest.mark.slow
def test_tampered_tests_are_restored_and_deleted_ones_come_back(demo_module, tree):
    """A blank notebook whose student weakened one test, deleted another and added a fake one."""
    submission = student_notebook(instructor_notebook(demo_module))
    cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in submission.cells}
    cells["demo_square"].source = "pass"
    cells["demo_square"].metadata["nbgrader"]["points"] = 100
    submission.cells.remove(cells["demo_relu"])
    fake = copy.deepcopy(cells["demo_square"])
    fake.id = "fake"
    fake.metadata["nbgrader"]["grade_id"] = "bonus"
    submission.cells.append(fake)
    report = grade(submission, demo_module, tree)
    assert [(c.grade_id, c.points, c.max_points) for c in report.cells] == [
        ("demo_square", 0, 2),
        ("demo_relu", 0, 3),
    ]
    assert all("still the stub" in cell.error for cell in report.cells), report.cells


@pytest.mark.slow
def test_a_looping_cell_is_stopped_where_it_loops_and_later_callers_fail_fast(demo_module, tree):
    submission = _with_code(
        instructor_notebook(demo_module),
        "demo_square_code",
        "def _spin(x):\n    while True:\n        x = x + 1\n    return x\n\nsquare = _spin",
    )
    started = time.monotonic()
    report = grade(submission, demo_module, tree, timeout=3)
    assert time.monotonic() - started < 3 + 3 + 20, "the loop stops at its limit"
    square, relu = report.cells
    assert square.points == 0
    assert "ran past 3 s" in square.error and "cell `demo_square_code`, line" in square.error
    assert "`x = x + 1`" in square.error or "`while True:`" in square.error, square.error
    assert "called from an example cell" in square.error and "not run again" in square.error, (
        "the loop began in the course's example: said as a loop, not as an error the tests hit")
    assert "raised" not in square.error, square.error
    assert relu.passed, relu.error


@pytest.mark.slow
def test_a_syntax_error_is_reported_against_its_cell_and_line(demo_module, tree):
    submission = _with_code(instructor_notebook(demo_module), "demo_relu_code", "y = (1,")
    report = grade(submission, demo_module, tree, timeout=30)
    assert report.by_id() == {"demo_square": 2, "demo_relu": 0}
    error = report.cells[1].error
    assert "your code in cell `demo_relu_code` failed: SyntaxError" in error, error


@pytest.mark.slow
def test_a_failing_hidden_check_says_which_and_why_but_never_how(demo_module, tree):
    wrong = copy.deepcopy(instructor_notebook(demo_module))
    for cell in wrong.cells:
        cell.source = cell.source.replace("np.maximum(x, 0)", "np.maximum(x, -1)")
    relu = grade(wrong, demo_module, tree, timeout=30).cells[1]
    assert relu.points == 0
    assert relu.error == "hidden check 1 of 1 of task `demo_relu`: relu(-1.5) should be 0.0"


@pytest.mark.slow
def test_what_the_code_prints_never_reaches_the_report_and_what_it_raises_does_in_one_bounded_line(
    demo_module, tree
):
    printed, said = "a line the student's code printed", "operands could not be broadcast\ntogether\x1b[2J\u202e"
    submission = _with_code(
        instructor_notebook(demo_module),
        "demo_relu_code",
        f"print({printed!r})\nimport sys\nprint({printed!r}, file=sys.stderr)\n"
        "class Loud:\n    def __str__(self):\n        raise SystemExit('its __str__ ran')\n"
        f"def relu(x):\n    raise type('Value\\x1b[2JError', (ValueError,), {{}})({said!r}, Loud(), 'x' * 10_000)",
    )
    report = grade(submission, demo_module, tree, timeout=30)
    assert report.by_id() == {"demo_square": 2, "demo_relu": 0}
    error = report.cells[1].error
    assert printed not in error and "__str__ ran" not in error, error
    # its own words: the text arguments joined on one line, at most 300 characters of them
    assert "your code raised Value\\x1b[2JError: operands could not be broadcast together\\x1b[2J\\u202e; xxx" in error, error
    message = error.split("Error: ", 1)[1].split(" (cell `demo_relu_code`, line")[0]
    assert len(message) == 300 and message.endswith("…"), message


@pytest.mark.slow
def test_equal_to_anything_objects_and_forged_records_earn_nothing(demo_module, tree):
    submission = _with_code(
        instructor_notebook(demo_module),
        "demo_relu_code",
        "class _Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "    def __bool__(self):\n        return True\n"
        "def relu(x):\n    return _Any()\n"
        "import sys\n"
        "_real = sys.modules['__main__'].__dict__.get('__tf_check')\n",
    )
    assert grade(submission, demo_module, tree, timeout=30).by_id()["demo_relu"] == 0


@pytest.mark.slow
def test_ctrl_c_ends_grading_with_one_line(demo_module, tmp_path):
    """Ctrl-C during `module test` stops it with one line and no traceback."""
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
    time.sleep(4)  # the runner is in the loop by now
    grader.send_signal(signal.SIGINT)
    _, stderr = grader.communicate(timeout=30)
    assert grader.returncode == 130, stderr
    assert stderr.strip().splitlines() == [
        "tinyflo module: stopped (Ctrl-C); nothing more was done"
    ], stderr


PROBE = """
import os, socket, sys, resource
seen = {"repository": any(os.path.exists(os.path.join(REPO, p)) for p in ("src", "modules")),
        "marker": os.path.exists(MARKER), "uid": os.getuid()}
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2)
    seen["network"] = True
except OSError:
    seen["network"] = False
def _holds_something(path):  # the installed copies are hidden as empty folders and files
    return bool(os.listdir(path)) if os.path.isdir(path) else os.path.getsize(path) > 0
seen["tinyflo_dists"] = sorted(p for d in sys.path if os.path.isdir(d) for p in os.listdir(d)
                               if "tinyflo" in p.lower() and _holds_something(os.path.join(d, p)))
seen["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
seen["memory"] = resource.getrlimit(resource.RLIMIT_AS)[0]
seen["environment"] = sorted(k for k in os.environ if k.startswith("TINYFLO_") and k != "TINYFLO_NUM_THREADS")
try:
    open("/tmp/big", "wb").write(b"x" * (200 * 2**20))
    seen["big_file"] = True
except OSError:
    seen["big_file"] = False
try:
    import tinyflo.core.tensor as t
    t.Tensor([1.0])
    seen["working_tensor"] = True
except (NotImplementedError, ImportError):
    seen["working_tensor"] = False
"""


@pytest.mark.slow
def test_the_sandbox_has_no_repository_host_tmp_network_reference_or_privilege(tmp_path):
    """Checked from inside, by code in a cell: what a submission's process can reach."""
    from tinyflo.course.source import discover_modules

    modules = discover_modules(ROOT / "modules")  # module 01 graded: its package copy is hollow
    marker = Path("/tmp") / f"tinyflo-probe-{os.getpid()}"
    marker.write_text("host")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        setup = f"REPO, MARKER, PORT = {str(ROOT)!r}, {str(marker)!r}, {listener.getsockname()[1]}"
        job = {
            "cells": [
                {"kind": "code", "source": setup + PROBE, "timeout": 60, "student": True},
                {"kind": "task", "task": "p", "source": "__tf_check('p/1', seen)", "timeout": 60},
            ],
            "modes": {"p/1": ["value"]},
            "seeds": {},
        }
        record = run_job(job, cached_tree(modules, modules[0]), Limits(tmp_size=64 * 2**20))
    finally:
        listener.close()
        marker.unlink()
    from tinyflo.course.grader.verdicts import decode

    (raw,) = record.observations["p/1"]
    seen = decode(raw[0])
    assert seen["repository"] is False and seen["marker"] is False, seen
    assert seen["network"] is False, seen
    assert seen["tinyflo_dists"] == ["tinyflo"], seen  # the grading tree's package, nothing else
    assert seen["working_tensor"] is False, seen
    assert seen["environment"] == [], seen
    assert seen["big_file"] is False, seen
    assert seen["nproc"] == Limits().processes and seen["memory"] == Limits().memory, seen
    if os.geteuid() == 0:
        assert seen["uid"] != 0, seen


@pytest.mark.slow
def test_limits_stop_memory_process_and_output_floods(demo_module, tree):
    flood = (
        "import os\n"
        "try:\n    bytearray(8 * 2**30)\nexcept MemoryError:\n    pass\n"
        "children = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n"
        "        children += 1\n"
        "except OSError:\n    pass\n"
        "print('x' * 2**20 * 64)\n"
    )
    submission = _with_code(instructor_notebook(demo_module), "demo_square_code", flood)
    started = time.monotonic()
    report = grade(submission, demo_module, tree, timeout=30)
    assert time.monotonic() - started < 60
    assert report.full_marks, report.cells


@pytest.mark.slow
def test_every_module_converts_to_scenarios():
    from tinyflo.course.source import discover_modules

    for module in discover_modules(ROOT / "modules"):
        scenarios = module_scenarios(module)
        assert scenarios.tasks and all(task.checks for task in scenarios.tasks.values()), module


def test_the_runners_reporting_code_looks_nothing_up_once_it_runs():
    """Every function the runner builds uses only names it bound before the first cell: none
    looks up a global or a builtin, which the submission's code could have replaced."""
    import dis
    import types

    from tinyflo.course.grader import runner

    def nested(code):
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield const
                yield from nested(const)

    found = sorted(
        f"{code.co_name}: {ins.argval}"
        for code in nested(runner.build.__code__)
        for ins in dis.get_instructions(code)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    )
    assert not found, found


def test_a_deleted_solution_cell_is_said_to_be_missing_not_still_the_stub(demo_module, tree):
    submission = copy.deepcopy(instructor_notebook(demo_module))
    submission.cells = [c for c in submission.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "demo_square_code"]
    square, relu = grade(submission, demo_module, tree, timeout=30).cells
    assert square.points == 0 and "cell `demo_square_code` is missing from your notebook (deleted?)" in square.error
    assert "still the stub" not in square.error and relu.passed, square.error


def test_a_failed_visible_check_shows_what_the_code_gave_and_a_hidden_one_never(demo_module, tree):
    wrong = copy.deepcopy(instructor_notebook(demo_module))
    for cell in wrong.cells:
        cell.source = cell.source.replace("return np.asarray(x) * np.asarray(x)", "return np.asarray(x) + np.asarray(x)")
    square, _ = grade(wrong, demo_module, tree, timeout=30).cells
    assert square.error == ("check 1 of 1 of task `demo_square`: square(3) should be 9 "
                            "(your code gave `square(3)` = 6 (int64); expected 9)"), square.error
    for cell in wrong.cells:  # right on 3, wrong on arrays: only the hidden check fails, and shows nothing
        cell.source = cell.source.replace("return np.asarray(x) + np.asarray(x)",
                                          "return np.asarray(x) * 3 if np.ndim(x) == 0 else np.asarray(x) * 0")
    square, _ = grade(wrong, demo_module, tree, timeout=30).cells
    assert square.error == "hidden check 1 of 1 of task `demo_square`: square must work elementwise on arrays", square.error


@pytest.mark.slow
def test_the_earlier_modules_reference_is_bytecode_the_sandbox_cannot_read_as_source(tmp_path, monkeypatch):
    """Module 02's grading tree holds module 01's reference compiled, its source removed, and
    imported before the notebook's code runs: looked for from inside, there is no source."""
    from tinyflo.course.grader.sandbox import PACKAGE_DIR
    from tinyflo.course.source import discover_modules

    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path))
    modules = discover_modules(ROOT / "modules")
    autograd = next(module for module in modules if module.slug == "02_autograd")
    tree = cached_tree(modules, autograd)
    core = tree / PACKAGE_DIR / "tinyflo" / "core"
    assert (core / "tensor.pyc").is_file() and not (core / "tensor.py").exists()
    assert (core / "autograd.py").is_file(), "the graded module is hollow source, not bytecode"
    probe = (
        "import inspect, linecache, os\n"
        "import tinyflo.core.tensor as _t\n"
        "_seen = []\n"
        "for _get in (lambda: inspect.getsource(_t.Tensor), lambda: inspect.getsource(_t),\n"
        "             lambda: ''.join(linecache.getlines(_t.__file__))):\n"
        "    try:\n"
        "        _seen.append(_get())\n"
        "    except (OSError, TypeError):\n"
        "        pass\n"
        "for _name in os.listdir(os.path.dirname(_t.__file__)):\n"
        "    if _name.startswith('tensor') and _name.endswith('.py'):\n"
        "        _seen.append(open(os.path.join(os.path.dirname(_t.__file__), _name)).read())\n"
        "class SourceFound(Exception): pass\n"
        "class NoSource(Exception): pass\n"
        "raise (SourceFound if any('class Tensor' in text for text in _seen) else NoSource)()\n"
    )
    notebook = instructor_notebook(autograd)
    first = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution"))
    first.source = probe
    report = grade(notebook, autograd, tree, timeout=60, hidden=False)
    errors = " ".join(cell.error or "" for cell in report.cells)
    assert "failed: NoSource" in errors and "failed: SourceFound" not in errors, errors


SUBTRACT = """# %% [markdown]
# # A module of one task

# %%
#| default_exp core.subtract

# %%
#| export
import numpy as np

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
check_rng = np.random.default_rng(0)

# %% [markdown]
# ### Task `sub_grads` (2 points): the gradients of a - b

# %% nbgrader={"grade": false, "grade_id": "sub_grads_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def sub_grads(g):
    \"\"\"The gradients of a - b for the output gradient g: (g, -g).\"\"\"
    ### BEGIN SOLUTION
    return np.asarray(g), -np.asarray(g)
    ### END SOLUTION


def matmul_grad_b(a, g):
    \"\"\"The gradient of a @ b with respect to b.\"\"\"
    ### BEGIN SOLUTION
    return a.T @ g
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "sub_grads", "locked": true, "points": 2, "schema_version": 3, "solution": false}
ga, gb = sub_grads(np.ones(2))
assert np.allclose(ga, [1, 1]) and np.allclose(gb, [-1, -1]), "a - b: a gets g, b gets -g"
### BEGIN HIDDEN TESTS
g = check_rng.standard_normal(3)
ga, gb = sub_grads(g)
assert np.allclose(ga, g) and np.allclose(gb, -g), "a - b: a gets g and b gets -g, for any g"
a = check_rng.standard_normal((2, 3))
assert np.allclose(matmul_grad_b(a, np.ones((2, 4))), a.T @ np.ones((2, 4))), "the gradient of b is a.T @ g"
### END HIDDEN TESTS
"""


def _one_module(tmp_path, source: str):
    """A course of one module written from `source`, and its grading tree."""
    from tinyflo.course.source import discover_modules

    folder = tmp_path / "modules" / "01_subtract"
    folder.mkdir(parents=True)
    (folder / "subtract.py").write_text(source)
    module = discover_modules(tmp_path / "modules")[0]
    return module, cached_tree([module], module)


@pytest.mark.parametrize("filled", [
    "signs = []\nfor v in g:\n    signs.append(float(sub_grads(v)[1]))\n",
    "signs = [0.0, 0.0, 0.0]\nfor i, v in enumerate(g):\n    signs[i] = float(sub_grads(v)[1])\n",
    "signs = []\nkept = signs\nfor v in g:\n    kept += [float(sub_grads(v)[1])]\n",
    "signs = []\nlist.extend(signs, [float(sub_grads(v)[1]) for v in g])\n",
], ids=["append", "item", "alias", "passed"])
def test_a_container_the_scenario_fills_is_the_students_value(tmp_path, monkeypatch, filled):
    """A name bound to `[]` and filled from the student's code afterwards is the student's
    value, not a constant: the check compares what the student's run put in it with what the
    reference's run put in it (a wrong submission loses the check's points)."""
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    hidden = SUBTRACT[SUBTRACT.index("### BEGIN HIDDEN TESTS"):SUBTRACT.index("### END HIDDEN TESTS")]
    source = SUBTRACT.replace(hidden, "### BEGIN HIDDEN TESTS\ng = check_rng.standard_normal(3)\n" + filled
                              + "assert signs == [float(-v) for v in g], \"b's gradient is -g, value by value\"\n")
    module, tree = _one_module(tmp_path, source)
    assert grade(instructor_notebook(module), module, tree, timeout=30).full_marks
    wrong = "def sub_grads(g):\n    return np.asarray(g), -np.abs(np.asarray(g))\n"  # right for g = 1 only
    for student in ("ada", "bob", "cy"):
        result = grade(_with_code(instructor_notebook(module), "sub_grads_code", wrong), module, tree,
                       timeout=30, student=student, key="k")
        assert not result.full_marks and "value by value" in result.cells[0].error, result.cells[0].error


def test_a_failed_compound_check_shows_the_part_that_fails_with_both_values_and_shapes(tmp_path, monkeypatch):
    """`assert ga_ok and gb_ok`: the message shows gb when gb is wrong (not the right ga), with
    what was expected; a hidden check of a task that draws the submission's own inputs shows
    the values too (never its code), and arrays of the wrong shape say both shapes."""
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    module, tree = _one_module(tmp_path, SUBTRACT)

    def graded(old: str, new: str):
        wrong = copy.deepcopy(instructor_notebook(module))
        for cell in wrong.cells:
            cell.source = cell.source.replace(old, new)
        return grade(wrong, module, tree, timeout=30, student="ada", key="k").cells[0]

    sign = graded("-np.asarray(g)", "np.asarray(g)")
    assert sign.error == (
        "check 1 of 1 of task `sub_grads`: a - b: a gets g, b gets -g "
        "(your code gave `gb` = array([1., 1.], dtype=float64, shape=(2,)); "
        "expected [-1, -1])"
    ), sign.error
    both = graded("return np.asarray(g), -np.asarray(g)", "return np.asarray(g) * 0 + 2, -np.asarray(g)")
    assert "your code gave `ga` = array([2., 2.]" in both.error, both.error
    right = grade(instructor_notebook(module), module, tree, timeout=30, student="ada", key="k")
    assert right.full_marks, right.cells
    transpose = graded("return a.T @ g", "return (g.T @ a).T[:, :2]")
    assert transpose.error.startswith(
        "hidden check 2 of 2 of task `sub_grads`: the gradient of b is a.T @ g "
        "(shape (3, 2) where (3, 4) is expected; your code gave array("
    ), transpose.error
    assert "matmul_grad_b(" not in transpose.error, "a hidden check's code is never shown"


def test_code_a_hidden_check_hands_to_the_submission_cannot_be_read(tmp_path, monkeypatch):
    """A hidden check calls the student's code with a function of its own: the code may call
    it, never read its code (constants, names, bytecode), nor a generator's."""
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    source = SUBTRACT.replace(
        "### END HIDDEN TESTS",
        "assert sub_grads(lambda v: v * 7.25)[0] == 14.5, \"a function is called on 2.0\"\n"
        "assert sub_grads(x * 1.5 for x in [2.0])[0] == 3.0, \"a generator is read once\"\n"
        "### END HIDDEN TESTS",
    ).replace(
        "    return np.asarray(g), -np.asarray(g)\n    ### END",
        "    if callable(g) or hasattr(g, '__next__'):\n"
        "        return (g(2.0) if callable(g) else next(g)), None\n"
        "    return np.asarray(g), -np.asarray(g)\n    ### END",
    )
    module, tree = _one_module(tmp_path, source)
    assert grade(instructor_notebook(module), module, tree, timeout=30).full_marks
    spy = (
        "def sub_grads(g):\n"
        "    for read in (lambda: g.__code__.co_consts, lambda: g.gi_code.co_consts):\n"
        "        try:\n"
        "            read()\n"
        "        except AttributeError:\n"
        "            continue\n"
        "        except RuntimeError:\n"
        "            raise LookupError('refused')\n"
        "        raise LookupError('read')\n"
        "    return np.asarray(g), -np.asarray(g)\n"
    )
    submission = _with_code(instructor_notebook(module), "sub_grads_code", spy)
    error = grade(submission, module, tree, timeout=30).cells[0].error
    assert "LookupError: refused" in error and "LookupError: read" not in error, error


def test_each_submission_draws_its_own_hidden_inputs_and_the_same_one_the_same_again(demo_module):
    """nbgrader's grading step seeds a student's hidden inputs from their code as well: the same
    notebook graded again draws what it drew; changed, or another student's, it draws anew."""
    from tinyflo.course.grader.grading import seed_for, submission_inputs

    notebook = instructor_notebook(demo_module)
    again = copy.deepcopy(notebook)
    changed = _with_code(notebook, "demo_relu_code", "# another try")
    given = copy.deepcopy(notebook)
    course_cell = next(c for c in given.cells if c.cell_type == "code" and not c.metadata.get("nbgrader"))
    course_cell.source += "\n# a course cell is not the student's code"
    ada = submission_inputs("ada", notebook)
    assert ada == submission_inputs("ada", again) == submission_inputs("ada", given)
    assert len({ada, submission_inputs("ada", changed), submission_inputs("bo", notebook)}) == 3
    seeds = {seed_for("key", who, "00_demo", "demo_relu") for who in (ada, submission_inputs("ada", changed))}
    assert len(seeds) == 2


def test_a_test_cell_the_student_changed_is_put_back_and_the_verdict_says_so(demo_module, tree):
    wrong = copy.deepcopy(instructor_notebook(demo_module))
    for cell in wrong.cells:
        cell.source = cell.source.replace("return np.maximum(x, 0)", "return x")
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "demo_relu":
            cell.source = "assert relu(2.0) == 2.0  # the one I pass"
    square, relu = grade(wrong, demo_module, tree, timeout=30).cells
    assert relu.points == 0 and relu.error.endswith(
        "(the test cell `demo_relu` was changed in your notebook: grading ran the course's own)"
    ), relu.error
    assert square.passed and square.error is None
    untouched = copy.deepcopy(wrong)  # the release's own copy of the cell: nothing to say
    released = student_notebook(instructor_notebook(demo_module), "demo")
    for cell, given in zip(untouched.cells, released.cells):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = given.source
    assert "was changed" not in grade(untouched, demo_module, tree, timeout=30).cells[1].error


def test_equality_of_lists_and_dicts_holding_arrays_is_item_by_item():
    """`assert opt.param_groups[0]["params"] == [w]` holds in a notebook by identity; the grader
    sees copies, and compares them item by item (an array: same shape, same elements)."""
    from tinyflo.course.grader.verdicts import Helpers, _atom

    def equal(a, b):
        return _atom("Eq", [a, b], {}, Helpers())

    w, v = np.arange(6.0).reshape(2, 3), np.ones(4)
    assert equal([w, v], [w.copy(), v.copy()]) and equal({"params": [w]}, {"params": [w.copy()]})
    assert not equal([w], [w.T]) and not equal([w, v], [w]) and not equal([w], (w,))
    assert not equal([w], [w + 1]) and not equal({"a": w}, {"b": w})
    assert not equal(w, w.copy().reshape(3, 2)) and equal(np.array([2.0]), 2.0)


NOISE = """# %% [markdown]
# # A module of one task

# %%
#| default_exp core.noise

# %%
#| export
import numpy as np

# %% [markdown]
# ### Task `noise` (1 point): uniform noise, drawn with `np.random.rand`

# %% nbgrader={"grade": false, "grade_id": "noise_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def noise(n):
    \"\"\"n uniform draws from NumPy's global generator, as float32.\"\"\"
    ### BEGIN SOLUTION
    return np.random.rand(n).astype(np.float32)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "noise", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert noise(4).shape == (4,), "noise(n) gives n numbers"
np.random.seed(7)
assert np.allclose(noise(3), np.random.default_rng(0).random(3) * 0 + noise_ref), "the draws of np.random.rand"
"""


def test_a_failed_check_after_a_seeded_draw_says_a_draw_made_otherwise_differs(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    source = NOISE.replace(
        "np.random.default_rng(0).random(3) * 0 + noise_ref", "(lambda: (np.random.seed(7), np.random.rand(3))[1])()"
    )
    module, tree = _one_module(tmp_path, source)
    assert grade(instructor_notebook(module), module, tree, timeout=30).full_marks

    def graded(body: str) -> str:
        submission = _with_code(instructor_notebook(module), "noise_code", f"def noise(n):\n    {body}")
        return grade(submission, module, tree, timeout=30).cells[0].error

    other_draw = graded("return np.random.standard_normal(n).astype(np.float32)")
    assert other_draw.startswith("check 2 of 2 of task `noise`") and other_draw.endswith(
        "[the values compared follow a seeded draw: where your code draws random numbers, a valid draw "
        "made otherwise than the task says (another call, order or dtype) differs from the reference's draw]"
    ), other_draw
    wrong_size = graded("return np.random.rand(n + 1).astype(np.float32)")
    assert wrong_size.startswith("check 1 of 2") and "seeded draw" not in wrong_size, wrong_size


def _subtract_with(tmp_path, monkeypatch, hidden: str, text_error: str = ""):
    """SUBTRACT with `hidden` checks at the end of its hidden region and, given `text_error` (an
    f-string's body), a reference sub_grads that raises TypeError(text_error) for a text; the
    reference graded first, with full marks. Returns the module and its grading tree."""
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    source = SUBTRACT.replace("### END HIDDEN TESTS", hidden + "### END HIDDEN TESTS")
    if text_error:
        source = source.replace(
            "    return np.asarray(g), -np.asarray(g)\n    ### END",
            f"    if isinstance(g, str):\n        raise TypeError(f'{text_error}')\n"
            "    return np.asarray(g), -np.asarray(g)\n    ### END",
        )
    module, tree = _one_module(tmp_path, source)
    assert grade(instructor_notebook(module), module, tree, timeout=30).full_marks
    return module, tree


def _error_of(module, tree, code: str) -> str:
    """The message of the first task when `code` is appended to the task's code cell."""
    submission = _with_code(instructor_notebook(module), "sub_grads_code", code)
    return grade(submission, module, tree, timeout=30, student="ada", key="k").cells[0].error


def test_a_call_that_had_to_raise_and_a_value_of_the_wrong_type_are_named(tmp_path, monkeypatch):
    module, tree = _subtract_with(
        tmp_path, monkeypatch,
        "try:\n    sub_grads('x')\n    raise AssertionError(\"a text gradient must raise TypeError\")\n"
        "except TypeError:\n    pass\n"
        "assert isinstance(sub_grads(g)[1], np.ndarray), \"b's gradient is an array\"\n",
        text_error="a gradient is a number or an array",
    )
    quiet = _error_of(module, tree, "def sub_grads(g):\n"
                      "    g = np.asarray(g, dtype=float) if not isinstance(g, str) else np.zeros(1)\n"
                      "    return g, -g\n")
    assert quiet.endswith("a text gradient must raise TypeError (your code raised no error there)"), quiet
    listed = _error_of(module, tree, "def sub_grads(g):\n    if isinstance(g, str):\n        raise TypeError('no')\n"
                       "    return np.asarray(g), list(-np.asarray(g))\n")
    assert listed.endswith("b's gradient is an array (your code gave a `list`)"), listed


def test_an_error_text_that_lacks_a_word_the_rule_asks_for_is_shown(tmp_path, monkeypatch):
    """`part in said`, both drawn or read from the run: the check is decided where the objects
    are, and the text is shown when it is a str (never an object of the submission's own, whose
    `__contains__` or repr is its code)."""
    module, tree = _subtract_with(
        tmp_path, monkeypatch,
        "try:\n    sub_grads('x' * len(g))\n    raise AssertionError(\"a text gradient must raise TypeError\")\n"
        "except TypeError as err:\n    said = err.args[0]\n"
        "assert str(len(g)) in said, \"the error names the text's length\"\n",
        text_error="a gradient is a number or an array; got text of length {len(g)}",
    )

    def graded(raised: str) -> str:
        return _error_of(module, tree, f"def sub_grads(g):\n    if isinstance(g, str):\n        raise TypeError({raised})\n"
                         "    return np.asarray(g), -np.asarray(g)\n")

    plain = graded("'no gradient for text'")
    assert plain.endswith("the error names the text's length (your code gave 'no gradient for text')"), plain
    # an object of the submission's own in place of the text: the verdict, and no value of it
    odd = graded("type('Said', (str,), {'__contains__': lambda self, part: False})('a length of 3')")
    assert odd.endswith("the error names the text's length"), odd


def test_an_identity_check_shows_what_came(tmp_path, monkeypatch):
    """`x is None` (x a name or its attribute): decided where the object is; the verdict shows
    what x was."""
    module, tree = _subtract_with(
        tmp_path, monkeypatch,
        "first, second = sub_grads(g)\nassert second.base is None, \"b's gradient is an array of its own\"\n",
    )
    error = _error_of(module, tree, "def sub_grads(g):\n    return np.asarray(g), (-np.asarray(g))[:]\n")
    assert "b's gradient is an array of its own (your code gave array([" in error, error


def test_what_a_submission_can_carry_out_of_the_sandbox_is_its_own_draw(tmp_path, monkeypatch):
    """A submission that smuggles a hidden input out (here in the name of the exception it
    raises, which the feedback shows) learns the input drawn for itself: another student's
    submission, or its own next one, drew another."""
    from tinyflo.course.grader.grading import submission_inputs

    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    module, tree = _one_module(tmp_path, SUBTRACT)
    spy = (
        "def sub_grads(g):\n"
        "    g = np.asarray(g)\n"
        "    if g.shape == (3,):  # the hidden check's own input\n"
        "        raise type('Seen' + str(int(abs(g[0]) * 1e6)), (Exception,), {})()\n"
        "    return g, -g\n"
    )

    def carried(student: str, note: str = "") -> str:
        notebook = _with_code(instructor_notebook(module), "sub_grads_code", spy + note)
        error = grade(notebook, module, tree, timeout=30, student=submission_inputs(student, notebook), key="k").cells[0].error
        return error.split("your code raised ", 1)[1].split(" ", 1)[0]

    ada = carried("ada")
    assert ada.startswith("Seen") and ada == carried("ada"), "the same notebook draws the same again"
    assert carried("bo") != ada and carried("ada", "# handed in again") != ada


def test_a_statistical_check_after_a_seed_does_not_speak_of_the_reference_draw(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYFLO_CACHE", str(tmp_path / "cache"))
    source = NOISE.replace(
        "assert np.allclose(noise(3), np.random.default_rng(0).random(3) * 0 + noise_ref), \"the draws of np.random.rand\"",
        "assert abs(float(noise(4000).mean()) - 0.5) < 0.05, \"uniform on [0, 1): the mean is near 0.5\"",
    )
    module, tree = _one_module(tmp_path, source)
    assert grade(instructor_notebook(module), module, tree, timeout=30).full_marks
    zeros = _with_code(instructor_notebook(module), "noise_code", "def noise(n):\n    return np.zeros(n, np.float32)")
    error = grade(zeros, module, tree, timeout=30).cells[0].error
    assert error.startswith("check 2 of 2 of task `noise`: uniform on [0, 1): the mean is near 0.5") and (
        "seeded draw" not in error), error


PRELOAD_PROBE = """
import json, os, sys
sys.modules["ctypes"] = None  # as the runner keeps it from loading
import importlib
from tinyflo.course.grader.runner import PRELOADED, REFUSED_MODULES, native_places
before = set(sys.modules)
for name in PRELOADED:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
loaded = set(sys.modules) - before
places, _ = native_places()  # the installation and its environment, as the runner's guard has them
outside = sorted(name for name in loaded if getattr(sys.modules[name], "__file__", None)
                 and not os.path.realpath(sys.modules[name].__file__).startswith(places))
print(json.dumps({"refused": sorted(n for n in loaded if n.split(".")[0] in REFUSED_MODULES),
                  "processes": sorted(n for n in loaded if n in ("subprocess", "_posixsubprocess", "multiprocessing")),
                  "outside": outside}))
"""


def test_what_the_runner_loads_before_the_code_runs_is_the_installations_and_refuses_nothing():
    """The standard-library modules the runner loads from bytecode before the notebook's code runs
    (`PRELOADED`) bring in no module the code may not import, nothing that starts a process, and
    nothing from outside the Python installation and its environment."""
    import json

    done = subprocess.run([sys.executable, "-s", "-c", PRELOAD_PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"refused": [], "processes": [], "outside": []}
