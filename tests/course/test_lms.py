"""The roster and the LMS gradebook imports: `course roster FILE`, `course report --format canvas|moodle|gradescope`."""

from __future__ import annotations

import csv

import pytest
from course_support import FIXTURE_MODULES, call_cli

from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.sandbox import bwrap_works
from tinyflo.course.source import discover_modules

ROSTER = """id,first_name,last_name,email,lms_user_id
alice,Alice,Liddell,alice@example.edu,1001
bob,Bob,Builder,bob@example.edu,1002
"""


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory):
    """The demo module released, alice's reference and bob's untouched release autograded, the roster in."""
    if bwrap_works():
        pytest.skip(bwrap_works())
    course = tmp_path_factory.mktemp("lms") / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    assert call_cli("course", "release", "00_demo", *common)[0] == 0
    module = discover_modules(FIXTURE_MODULES)[0]
    write_notebook(instructor_notebook(module), course / "submitted" / "alice" / "00_demo" / "demo.ipynb")
    released = course / "release" / "00_demo" / "demo.ipynb"
    (course / "submitted" / "bob" / "00_demo").mkdir(parents=True)
    (course / "submitted" / "bob" / "00_demo" / "demo.ipynb").write_bytes(released.read_bytes())
    code, out = call_cli("course", "autograde", *common, "--timeout", "30")
    assert code == 0, out
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
