"""One submission, one line: no notebook a student can hand in ends the class's autograde,
feedback or report.

The intake check (`source.read_notebook_bytes`) is fuzzed with notebooks Hypothesis makes from
an honest one: any part replaced by deep nesting, a value of the wrong type, huge or empty
values, keys taken away, bad Unicode. Whatever happens, the answer is the notebook or one
NotebookError line, and whatever it lets through, grading's own readers and writers take.
Then a class goes through real nbgrader once: honest students and odd but readable notebooks
keep their grade, page and released feedback while the notebooks that once stopped everyone, a
page that cannot be made, a submission without its feedback key and a failed autograde are each
that student's line.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from pathlib import Path

import nbformat
import pytest
from course_support import FIXTURE_MODULES, call_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from intake_cases import WORST, worst_case
from nbgrader.utils import notebook_hash

from tinyflo.course.grader.grading import restore_locked_cells
from tinyflo.course.notebooks import grading_notebook, instructor_notebook
from tinyflo.course.semester.nbgrader_steps import PlainOwnOutputs
from tinyflo.course.source import (
    CELL_LIMIT,
    NESTING_LIMIT,
    NotebookError,
    discover_modules,
    read_notebook_bytes,
)

MODULE = discover_modules(FIXTURE_MODULES)[0]
SLUG, NOTEBOOK = MODULE.slug, f"{MODULE.name}.ipynb"
HONEST = json.loads(nbformat.writes(instructor_notebook(MODULE)))
SOURCE = grading_notebook(MODULE)


def _paths(value, path=()):
    """Every place in a JSON value, as a path of keys and indexes."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


PLACES = list(_paths(HONEST))
TEXT = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(["", "x" * 5000, "\x00", "\u202e"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)


@st.composite
def deep(draw) -> object:
    """A list or object nested around the limit, with a value at the bottom."""
    value = draw(SCALARS)
    for _ in range(draw(st.integers(NESTING_LIMIT - 3, NESTING_LIMIT + 600))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


def _changed(notebook: dict, path: tuple, change: str, value: object) -> None:
    parent = notebook
    for key in path[:-1]:
        parent = parent[key]
    if not path:
        return
    if change == "delete":
        del parent[path[-1]]
    elif change == "replace":
        parent[path[-1]] = value
    elif isinstance(parent[path[-1]], list):  # "grow": many more of what a list holds
        parent[path[-1]].extend([value] * 3 + [copy.deepcopy(parent[path[-1]][:1])] * (CELL_LIMIT // 2))
    elif isinstance(parent[path[-1]], str):
        parent[path[-1]] += "\ud800"  # a lone surrogate: readable JSON, unwritable text


@st.composite
def submissions(draw) -> bytes:
    """The honest notebook with one to three places deleted, replaced or grown; or raw bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64) | st.sampled_from([b"\xef\xbb\xbf{}", b"[" * 100_000, b"{" * 3000]))
    notebook = copy.deepcopy(HONEST)
    for _ in range(draw(st.integers(1, 3))):
        places = list(_paths(notebook))
        path = draw(st.sampled_from(places))
        change = draw(st.sampled_from(["delete", "replace", "replace", "grow"]))
        _changed(notebook, path, change, draw(VALUES | deep()))
    text = json.dumps(notebook)  # NaN, Infinity and lone surrogates written as Python writes them
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(submissions())
def test_intake_says_one_line_or_gives_a_notebook_that_grading_can_read_and_write(data):
    try:
        notebook = read_notebook_bytes(data)
    except NotebookError as error:
        line = str(error)
        assert line and "\n" not in line and len(line) < 400 and line.isprintable(), line
        return
    # what the grader does with an accepted notebook: read it, restore the course's cells, keep
    # the student's outputs as plain text, write it back
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbformat warns of a missing or duplicate id and mends it
        read = nbformat.reads(data.decode("utf-8"), as_version=4)
    restored = restore_locked_cells(read, SOURCE)
    PlainOwnOutputs().preprocess(read, {})
    nbformat.writes(restored).encode("utf-8")
    nbformat.writes(read).encode("utf-8")
    assert notebook["nbformat"] == 4 and len(notebook["cells"]) <= CELL_LIMIT


@pytest.mark.parametrize("case", WORST)
def test_each_notebook_that_once_stopped_the_class_is_one_line(case):
    data, said = worst_case(HONEST, case)
    with pytest.raises(NotebookError) as refused:
        read_notebook_bytes(data)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_every_module_of_the_course_passes_as_released_and_as_solved():
    from tinyflo.course.notebooks import student_notebook

    modules = discover_modules(Path(__file__).parents[2] / "modules")
    for module in modules:
        for notebook in (instructor_notebook(module), student_notebook(grading_notebook(module), module.name)):
            read_notebook_bytes(nbformat.writes(notebook).encode("utf-8"))


# --- a class through real nbgrader ----------------------------------------------------------------

PAGE_BREAKS = "bob"  # graded; their graded notebook is then broken, so no page can be made of it
NO_KEY = "carol"  # graded, with no submission_secret.txt: collected some way other than the exchange
GRADING_FAILED = "dora"  # graded; then left as nbgrader leaves a failed autograde (below)
HONEST_STUDENT = "alice"
NBGRADER_FAILS = "erin"  # intake takes it; nbgrader cannot write its autograded folder (a file is in the way)
WORST_STUDENTS = {case: f"worst{n}" for n, case in enumerate(WORST)}


def _odd_but_readable() -> dict[str, dict]:
    """Notebooks intake takes that are still odd to grade, by student: a NUL in a solution (that
    task fails to compile), a 4.5 notebook without cell ids (as some tools write), an added cell
    that is no Python and one nested 5,000 parentheses deep."""
    nul, no_ids, odd_cells = (copy.deepcopy(HONEST) for _ in range(3))
    solution = next(c for c in nul["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    solution["source"] = "def square(x):\n    return x * x\x00\n"
    for cell in no_ids["cells"]:
        del cell["id"]
    odd_cells["cells"] += [{"cell_type": "code", "id": f"odd{n}", "metadata": {}, "outputs": [], "execution_count": None,
                            "source": source} for n, source in enumerate(["def (:", "x = " + "(" * 5000 + ")" * 5000])]
    return {"nul": nul, "noids": no_ids, "oddcells": odd_cells}


def _as_a_failed_autograde_leaves_it(course: Path, student: str) -> None:
    """nbgrader makes a submission's row and grades before it grades, and removes what it wrote when
    grading fails: the row stays, with no score."""
    from nbgrader.api import Gradebook

    from tinyflo.course.semester.instructor import COURSE_ID

    shutil.rmtree(course / "autograded" / student)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        for notebook in gradebook.find_submission(SLUG, student).notebooks:
            for grade in notebook.grades:
                grade.auto_score = None
        gradebook.db.commit()


@pytest.fixture(scope="module")
def semester(tmp_path_factory):
    """The demo module released, with an exchange for its feedback; the class handed in, autograded (no sandbox:
    intake is what is tried), its feedback made and released, its report written, its copies sought."""
    root = tmp_path_factory.mktemp("intake")
    course, exchange = root / "course", root / "exchange"
    exchange.mkdir(mode=0o1777)
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    assert call_cli("course", "release", SLUG, *common)[0] == 0
    (course / "course.toml").write_text(f'exchange = "{exchange}"\n')  # feedback is released into it
    submitted = course / "submitted"
    graded = dict.fromkeys((HONEST_STUDENT, PAGE_BREAKS, NO_KEY, GRADING_FAILED, NBGRADER_FAILS), HONEST)
    graded |= _odd_but_readable()
    for student, notebook in graded.items():
        folder = submitted / student / SLUG
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(json.dumps(notebook))
        (folder / "timestamp.txt").write_text("2026-09-01 12:00:00.000000 UTC")
        if student != NO_KEY:
            (folder / "submission_secret.txt").write_text(f"{student}-secret")
    for case, student in WORST_STUDENTS.items():
        (submitted / student / SLUG).mkdir(parents=True)
        (submitted / student / SLUG / NOTEBOOK).write_bytes(worst_case(HONEST, case)[0])
    (course / "autograded").mkdir()
    (course / "autograded" / NBGRADER_FAILS).write_text("in nbgrader's way")
    seen = {"autograde": call_cli("course", "autograde", SLUG, "--no-sandbox", *common)}
    (course / "autograded" / NBGRADER_FAILS).unlink()
    (course / "autograded" / PAGE_BREAKS / SLUG / NOTEBOOK).write_text('{"cells": 0}')
    _as_a_failed_autograde_leaves_it(course, GRADING_FAILED)
    seen["feedback"] = call_cli("course", "feedback", SLUG, *common)
    seen["report"] = call_cli("course", "report", "--csv", str(root / "grades.csv"), *common)
    seen["similarity"] = call_cli("course", "similarity", SLUG, *common)
    return course, exchange, seen


def test_each_bad_notebook_is_one_line_and_the_others_are_graded(semester):
    _, _, seen = semester
    code, out = seen["autograde"]
    assert code == 1, out
    for case, student in WORST_STUDENTS.items():
        said = worst_case(HONEST, case)[1]
        assert f"left out: student {student}, {SLUG}: {NOTEBOOK} is not a readable notebook (" in out, out
        assert any(said in line for line in out.splitlines() if f"student {student}," in line), (case, out)
    assert (f"autograded {SLUG}: alice 5/5, bob 5/5, carol 5/5, dora 5/5, erin (not graded), noids 5/5, "
            "nul 3/5, oddcells 5/5\n") in out, out
    assert f"left out: student {NBGRADER_FAILS}, {SLUG}: not graded (" in out, out  # after intake: its line too
    assert f"{len(WORST) + 1} submissions left out (above)" in out and "Traceback" not in out


def test_a_page_that_cannot_be_made_and_a_missing_key_are_each_one_line(semester):
    course, exchange, seen = semester
    code, out = seen["feedback"]
    assert code == 1, out
    lines = [line for line in out.splitlines() if line.startswith("left out: ")]
    assert len(lines) == 2, out
    assert lines[0].startswith(f"left out: student {PAGE_BREAKS}, {SLUG}: no feedback page could be made ("), out
    assert lines[1] == (f"left out: student {NO_KEY}, {SLUG}: feedback not released: no submission_secret.txt "
                        "(the key to the student's page comes with a submission through the exchange; return this "
                        "page by hand)"), out
    assert (course / "feedback" / HONEST_STUDENT / SLUG / f"{MODULE.name}.html").is_file()
    assert (course / "feedback" / NO_KEY / SLUG / f"{MODULE.name}.html").is_file()
    assert not (course / "feedback" / PAGE_BREAKS / SLUG / f"{MODULE.name}.html").exists()
    released = {page.name for page in (exchange / "tinyflo" / "feedback").glob("*.html")}
    keys = {student: notebook_hash(secret=f"{student}-secret", notebook_id=MODULE.name) + ".html"
            for student in (HONEST_STUDENT, *_odd_but_readable())}
    assert released == set(keys.values()), "each page with a key, named by it"
    page = (course / "feedback" / HONEST_STUDENT / SLUG / f"{MODULE.name}.html").read_text()
    assert (exchange / "tinyflo" / "feedback" / keys[HONEST_STUDENT]).read_text() == page


def test_the_report_has_every_graded_student_and_no_points_for_a_failed_autograde(semester):
    course, _, seen = semester
    code, out = seen["report"]
    assert code == 0, out
    assert (f"left out: student {GRADING_FAILED}, {SLUG}: in the gradebook but not autograded (its autograde "
            "failed); run autograde again") in out, out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:] if line.split()[:1] != ["wrote"]}
    assert rows == {"alice": "5/5", "bob": "5/5", "carol": "5/5", "noids": "5/5", "nul": "3/5", "oddcells": "5/5"}, out
    assert GRADING_FAILED not in (course.parent / "grades.csv").read_text()


def test_each_page_that_failed_says_its_own_cause_and_a_failure_of_everyones_stops(tmp_path, monkeypatch):
    from tinyflo.course.semester import instructor
    from tinyflo.course.source import CourseError

    def failed(cause: str) -> CourseError:
        return CourseError(f"`nbgrader generate_feedback` failed (exit 1) in {tmp_path}: {cause}\n--- last lines ---\nx")

    for student in ("alice", "bob", "carol"):
        (tmp_path / "autograded" / student / SLUG).mkdir(parents=True)
    (tmp_path / "feedback" / "alice" / SLUG).mkdir(parents=True)
    (tmp_path / "feedback" / "alice" / SLUG / f"{MODULE.name}.html").write_text("<p>alice</p>")
    runs = []

    def one_student(course_dir, *args, env=None):  # bob's page fails again; carol's is made this time
        runs.append(args)
        if "--student=bob" in args:
            raise failed("RecursionError: bob's own cause")
        return ""

    monkeypatch.setattr(instructor, "nbgrader", one_student)
    lines = instructor._pages_not_made(tmp_path, [MODULE], failed("TypeError: whoever failed last"), [])
    assert lines == [f"student bob, {SLUG}: no feedback page could be made (RecursionError: bob's own cause)"]
    assert [args[2] for args in runs] == ["--student=bob", "--student=carol"]
    shutil.rmtree(tmp_path / "feedback")
    with pytest.raises(CourseError, match="whoever failed last"):  # no page at all: not one submission's doing
        instructor._pages_not_made(tmp_path, [MODULE], failed("TypeError: whoever failed last"), [])


def test_similarity_leaves_out_what_autograde_does_and_compares_the_rest(semester):
    _, _, seen = semester
    code, out = seen["similarity"]
    assert code == 0, out
    for student in WORST_STUDENTS.values():
        assert f"left out: student {student}, {SLUG}: {NOTEBOOK} is not a readable notebook (" in out, out
    assert "alice and bob" in out and "pairs compared" in out and "Traceback" not in out, out
