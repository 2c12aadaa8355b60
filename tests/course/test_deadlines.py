"""course.toml: due dates, extensions and the late penalty, charged through nbgrader."""

from __future__ import annotations

import csv
import os
import sys
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from course_support import FIXTURE_MODULES, call_cli

from tinyflo.course.semester.instructor import COURSE_ID, Score
from tinyflo.course.semester.settings import (
    COURSE_FILE,
    Semester,
    apply_semester,
    late_points,
    read_penalty,
    read_semester,
)
from tinyflo.course.source import CourseError, discover_modules

MODULES = discover_modules(FIXTURE_MODULES)  # one module, 00_demo (5 points)
DUE = "2026-09-14T23:59:00-04:00"  # 2026-09-15 03:59 UTC


def _read(tmp_path: Path, text: str) -> Semester:
    (tmp_path / COURSE_FILE).write_text(text)
    return read_semester(tmp_path, MODULES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[deadlines\n", "not valid TOML (Expected ']'"),
        (
            "deadline = 1\n",
            "deadline: expected exchange, [deadlines], [extensions.<student>], [late] or [titles] "
            "at the top level; got an unknown key",
        ),
        ('[deadline]\n"00" = 1\n', "[deadline]: expected exchange, [deadlines]"),
        (
            'exchange = "exchange"\n',
            "exchange: expected an absolute path in quotes "
            "(e.g. \"/srv/nbgrader/exchange\"); got 'exchange'",
        ),
        (
            "deadlines = 3\n",
            "[deadlines]: expected a table [deadlines] of module = due date; got 3",
        ),
        (
            '[deadlines]\n"00" = 2026-09-14T23:59:00\n',
            "[deadlines] '00': expected a date and time with its UTC offset, unquoted "
            "(e.g. 2026-09-14T23:59:00-04:00); got 2026-09-14T23:59:00 (no UTC offset)",
        ),
        ('[deadlines]\n"00" = 2026-09-14\n', "got 2026-09-14 (a date without a time)"),
        (f'[deadlines]\n"00" = "{DUE}"\n', f"got the text '{DUE}' (write the date without quotes)"),
        ('[deadlines]\n"00" = 5\n', "[deadlines] '00': expected a date and time"),
        (
            f'[deadlines]\n"07" = {DUE}\n',
            "[deadlines] '07': no module '07'; expected a number, NN_name or name of one of: "
            "00_demo",
        ),
        (
            f'[deadlines]\n"00" = {DUE}\ndemo = {DUE}\n',
            "[deadlines] 'demo': expected each module once in [deadlines]; got 00_demo as '00' too",
        ),
        (
            f'[deadlines]\n"00" = {DUE}\n[extensions."al ice"]\n"00" = {DUE}\n',
            "[extensions.al ice]: expected a student id as their folder in submitted/ is named "
            "(letters, digits and . _ @ + -); got 'al ice'",
        ),
        (
            f'[deadlines]\n"00" = {DUE}\n[extensions]\nalice = 3\n',
            "[extensions.alice]: expected a table [extensions.alice] of module = due date; got 3",
        ),
        (
            f'[extensions.alice]\n"00" = {DUE}\n',
            "[extensions.alice] '00_demo': expected a due date for 00_demo in [deadlines] "
            "(an extension replaces it); got none there",
        ),
        (
            f'[deadlines]\n"00" = {DUE}\n[extensions.alice]\ndemo = 2026-09-13T23:59:00-04:00\n',
            "[extensions.alice] '00_demo': expected a date no earlier than 00_demo's due date "
            f"{DUE}; "
            "got 2026-09-13T23:59:00-04:00, before it",
        ),
        (
            '[late]\npenalty = "150% per day"\n',
            '[late] penalty: expected "none", "zero" or "N% per day" with N above 0 and at most '
            "100 (e.g. \"10% per day\"); got '150% per day'",
        ),
        ('[late]\npenalty = "ten%"\n', '[late] penalty: expected "none"'),
        ('[late]\npenalty = "0% per day"\n', "got '0% per day'"),
        ("[late]\npenalty = 10\n", '[late] penalty: expected "none", "zero" or "N% per day"'),
        (
            '[late]\ngrace = "1 h"\n',
            "[late] grace: expected only penalty in [late]; got an unknown key",
        ),
        ('late = "zero"\n', "[late]: expected a table [late] of penalty = ...; got 'zero'"),
        ('[titles]\n"00" = 4521\n', "[titles] '00': expected the assignment's title in the LMS, in quotes, on one "
                                     "line of at most 255 characters (e.g. \"Module 1: Tensor (4521)\"); got 4521"),
        ('[titles]\n"00" = "Lab\\nOne"\n', "[titles] '00': expected the assignment's title in the LMS"),
        ('[titles]\n"00" = "  "\n', "got '  '"),
        ('[titles]\n"00" = "Lab 1"\ndemo = "Lab 2"\n', "[titles] 'demo': expected each module once, each with a "
                                                       "title of its own; got a repeat"),
        ('[titles]\n"07" = "Lab 7"\n', "[titles] '07': no module '07'"),
        ('titles = "Lab 1"\n', "[titles]: expected a table [titles] of module = \"title in the LMS\"; got 'Lab 1'"),
    ],
)
def test_each_mistake_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    with pytest.raises(CourseError) as caught:
        _read(tmp_path, text)
    error = str(caught.value)
    assert error.startswith(f"{tmp_path / COURSE_FILE}: ") and message in error, error
    assert "\n" not in error


def test_no_file_is_an_empty_semester(tmp_path):
    assert read_semester(tmp_path, MODULES) == Semester(None, {}, {}, "none", {})
    assert read_penalty(tmp_path / COURSE_FILE) == "none"


@pytest.mark.parametrize("alias", ["00_demo", "00", "0", "demo"])
def test_a_module_by_any_alias_is_its_slug_and_offsets_are_kept(tmp_path, alias):
    semester = _read(
        tmp_path,
        f'exchange = "/srv/nbgrader/exchange"\n[deadlines]\n"{alias}" = {DUE}\n'
        f'[extensions.alice]\n"{alias}" = 2026-09-16T09:29:00+05:30\n'
        '[late]\npenalty = " 12.5 %  Per Day "\n',
    )
    utc = timezone.utc
    assert semester.exchange == Path("/srv/nbgrader/exchange")
    assert semester.deadlines["00_demo"].astimezone(utc) == datetime(2026, 9, 15, 3, 59, tzinfo=utc)
    assert semester.extensions["alice", "00_demo"].astimezone(utc) == datetime(
        2026, 9, 16, 3, 59, tzinfo=utc
    )
    assert semester.late == "12.5% per day"


@pytest.mark.parametrize(
    ("penalty", "seconds", "lost"),
    [
        ("none", 3600, None),
        ("zero", 1, 5),
        ("10% per day", 1, 0.5),  # part of a day counts as a day
        ("10% per day", 86400, 0.5),
        ("10% per day", 86401, 1.0),
        ("10% per day", 11 * 86400, 5),  # never more than the notebook scored
        ("10% per day", 0, None),
    ],
)
def test_the_penalty_per_day_or_part_of_a_day(penalty, seconds, lost):
    assert late_points(penalty, 5, seconds) == lost


def test_nbgrader_asks_the_plugin_which_reads_course_toml_each_time(tmp_path):
    from tinyflo.course.semester.nbgrader_steps import LatePenalty

    plugin = LatePenalty(course_file=str(tmp_path / COURSE_FILE))
    assert plugin.late_submission_penalty("alice", 4.0, 90000) is None, "no file: no penalty"
    for penalty, lost in (
        ("none", None),
        ("zero", 4.0),
        ("25% per day", 2.0),
    ):  # 90000 s: 2 days begun
        (tmp_path / COURSE_FILE).write_text(f'[late]\npenalty = "{penalty}"\n')
        assert plugin.late_submission_penalty("alice", 4.0, 90000) == lost, penalty


@pytest.mark.parametrize(
    ("seconds", "penalty", "shown"),
    [
        (0, 0, "5/5"),
        (30, 0, "5/5 (late 1 min)"),
        (2 * 3600 + 5 * 60, 1, "4/5 (late 2 h 5 min: -1)"),
        (86400 + 2 * 3600 + 59, 2, "3/5 (late 1 d 2 h: -2)"),
        (3 * 86400, 0.25, "4.75/5 (late 3 d: -0.25)"),
    ],
)
def test_a_score_shows_points_after_the_penalty_and_how_late(seconds, penalty, shown):
    score = Score(
        "bob", "00_demo", 5, 5, {"demo_square": (2, 2), "demo_relu": (3, 3)}, penalty, seconds
    )
    assert score.shown() == shown


def _gradebook(course: Path, monkeypatch):
    """A gradebook holding the demo module and another, made with nbgrader's API (no nbgrader
    run): the other is due 2026-01-01 00:00 UTC."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv(
        "PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )  # alembic
    monkeypatch.setattr(warnings, "filters", warnings.filters[:])
    warnings.filterwarnings("ignore", message=".*not in session.*")
    course.mkdir(exist_ok=True)
    gradebook = Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID)
    gradebook.update_or_create_assignment("00_demo")
    gradebook.add_notebook("demo", "00_demo")
    gradebook.add_grade_cell("demo_square", "demo", "00_demo", max_score=2, cell_type="code")
    gradebook.update_or_create_assignment("01_other", duedate=datetime(2026, 1, 1))
    return gradebook


def test_the_file_owns_the_due_dates_and_extensions_of_the_modules_graded(tmp_path, monkeypatch):
    course = tmp_path / "course"
    gradebook = _gradebook(course, monkeypatch)
    semester = _read(
        course,
        f'[deadlines]\n"00" = {DUE}\n'
        '[extensions.alice]\n"00" = 2026-09-15T23:59:00-04:00\n'
        '[extensions.bob]\n"00" = 2026-09-16T23:59:00-04:00\n',
    )
    apply_semester(course, semester, {"00_demo": ["alice"]})  # bob is not being graded
    gradebook.db.expire_all()
    assignment = gradebook.find_assignment("00_demo")
    assert assignment.duedate == datetime(2026, 9, 15, 3, 59)  # nbgrader's UTC
    assert [(s.student.id, s.extension) for s in assignment.submissions] == [
        ("alice", timedelta(days=1))
    ]
    apply_semester(course, Semester(), {"00_demo": ["alice"]})  # both taken out of the file
    gradebook.db.expire_all()
    assert assignment.duedate is None and assignment.submissions[0].extension is None
    assert gradebook.find_assignment("01_other").duedate == datetime(2026, 1, 1), "not graded now"
    gradebook.close()


@pytest.fixture(scope="module")
def semester_course(tmp_path_factory):
    """The demo module graded by nbgrader with a due date, an extension and "20% per day": alice on
    time, bob 1 d 2 h late, carol late but within her extension, dave 5 days late; then graded again
    (--force) with the penalty edited to "zero". What each step printed, and the gradebook."""
    from nbgrader.api import Gradebook

    from tinyflo.course.grader.sandbox import bwrap_works
    from tinyflo.course.notebooks import instructor_notebook, write_notebook

    if bwrap_works():
        pytest.skip(bwrap_works())
    course = tmp_path_factory.mktemp("deadlines") / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    seen = {"build": call_cli("course", "build", *common)}
    seen["template"] = (course / COURSE_FILE).read_text()
    seen["template semester"] = read_semester(course, MODULES)
    assert call_cli("course", "release", "00", *common)[0] == 0
    (course / COURSE_FILE).write_text(
        f'[deadlines]\n"00_demo" = {DUE}\n'
        "[extensions.carol]\ndemo = 2026-09-16T23:59:00-04:00\n"
        "[extensions.erin]\ndemo = 2026-09-16T23:59:00-04:00\n"  # never submits
        '[late]\npenalty = "20% per day"\n'
    )
    reference = instructor_notebook(MODULES[0])
    for student, stamp in (
        ("alice", "2026-09-15 03:00:00"),
        ("bob", "2026-09-16 05:59:00"),
        ("carol", "2026-09-16 12:00:00"),
        ("dave", "2026-09-20 04:00:00"),
    ):
        folder = course / "submitted" / student / "00_demo"
        write_notebook(reference, folder / "demo.ipynb")
        (folder / "timestamp.txt").write_text(
            f"{stamp}.000000 UTC"
        )  # as nbgrader's exchange writes it
    seen["autograde"] = call_cli("course", "autograde", "00", *common)
    seen["report"] = call_cli(
        "course", "report", "--csv", str(course.parent / "cells.csv"), *common
    )
    seen["canvas"] = call_cli(
        "course",
        "report",
        "--format",
        "canvas",
        "--csv",
        str(course.parent / "canvas.csv"),
        "--ids-are-logins",  # no roster: each id here is the student's Canvas login
        *common,
    )
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        assignment = gradebook.find_assignment("00_demo")
        seen["due"] = assignment.duedate
        seen["submissions"] = {
            s.student.id: (s.timestamp, s.extension, s.late_submission_penalty)
            for s in assignment.submissions
        }
    (course / COURSE_FILE).write_text(
        (course / COURSE_FILE).read_text().replace("20% per day", "zero")
    )
    seen["again"] = call_cli("course", "autograde", "00", "--force", *common)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        seen["extension again"] = gradebook.find_submission("00_demo", "carol").extension
    seen["build again"] = call_cli("course", "build", *common)
    return course, common, seen


def test_build_writes_a_template_that_reads_as_no_deadlines_and_never_replaces_it(semester_course):
    course, _, seen = semester_course
    assert f"wrote {course / COURSE_FILE}: due dates, extensions" in seen["build"][1]
    assert '# "00_demo" = 2026-09-14T23:59:00-04:00' in seen["template"]
    assert seen["template semester"] == Semester()
    assert seen["build again"][0] == 0 and COURSE_FILE not in seen["build again"][1]
    assert 'penalty = "zero"' in (course / COURSE_FILE).read_text()
    assert (
        f'c.LatePenalty.course_file = "{course / COURSE_FILE}"'
        in (course / "nbgrader_config.py").read_text()
    )


def test_autograde_puts_due_dates_and_extensions_in_the_gradebook(semester_course):
    _, _, seen = semester_course
    assert seen["autograde"][0] == 0, seen["autograde"][1]
    assert seen["due"] == datetime(2026, 9, 15, 3, 59)
    assert seen["submissions"] == {
        "alice": (datetime(2026, 9, 15, 3, 0), None, 0),
        "bob": (datetime(2026, 9, 16, 5, 59), None, 2),  # 2 days begun: 40% of 5
        "carol": (datetime(2026, 9, 16, 12, 0), timedelta(days=2), 0),
        "dave": (datetime(2026, 9, 20, 4, 0), None, 5),  # 6 days begun: all of it
    }, "erin has an extension but no submission: no row made for her"
    assert (
        "autograded 00_demo: alice 5/5, bob 3/5 (late 1 d 2 h: -2), carol 5/5, "
        "dave 0/5 (late 5 d: -5)\n"
    ) in seen["autograde"][1]


def test_report_shows_points_after_the_penalty_how_late_and_which_extension_applied(semester_course):
    course, _, seen = semester_course
    code, out = seen["report"]
    assert code == 0, out
    assert out.splitlines()[:5] == [
        "student  00_demo",
        "alice        5/5",
        "bob          3/5 (late 1 d 2 h: -2)",
        "carol        5/5 (extended to 2026-09-16T23:59-04:00)",  # submitted late, within her own date
        "dave         0/5 (late 5 d: -5)",
    ]
    with open(course.parent / "cells.csv", newline="") as handle:
        rows = [
            (r["student"], r["grade_id"], r["points"], r["max_points"])
            for r in csv.DictReader(handle)
        ]
    assert [row for row in rows if row[0] == "bob"] == [
        ("bob", "demo_square", "2", "2"),
        ("bob", "demo_relu", "3", "3"),
        ("bob", "late penalty", "-2", "0"),
        ("bob", "total", "3", "5"),
    ]
    assert ("alice", "total", "5", "5") in rows and not any(
        r[0] == "alice" and r[1] == "late penalty" for r in rows
    )
    with open(course.parent / "canvas.csv", newline="") as handle:
        canvas = {row["SIS Login ID"]: row["00_demo"] for row in csv.DictReader(handle)}
    assert canvas == {"": "5", "alice": "5", "bob": "3", "carol": "5", "dave": "0"}


def test_grading_again_reads_the_edited_penalty_and_keeps_the_extension(semester_course):
    _, _, seen = semester_course
    code, out = seen["again"]
    assert code == 0, out
    assert (
        "autograded 00_demo: alice 5/5, bob 0/5 (late 1 d 2 h: -5), carol 5/5, "
        "dave 0/5 (late 5 d: -5)\n"
    ) in out
    assert seen["extension again"] == timedelta(days=2)


def test_a_mistake_in_course_toml_stops_autograde_before_any_grading(tmp_path):
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    (course / COURSE_FILE).write_text('[late]\npenalty = "ten%"\n')
    code, out = call_cli("course", "autograde", *common)
    assert code == 2
    assert out == (
        f"tinyflo course: error: {course / COURSE_FILE}: [late] penalty: expected "
        '"none", "zero" or "N% per day" with N above 0 and at most 100 (e.g. "10% per day"); '
        "got 'ten%'\n"
    )
    assert not (course / "autograded").exists()


@pytest.mark.parametrize(
    ("late", "closed"),
    [
        ('[late]\npenalty = "zero"\n', "2026-09-20T03:59:00+00:00"),  # the last extension
        ('[late]\npenalty = "30% per day"\n', "2026-09-24T03:59:00+00:00"),  # 4 days on: worth 0
        ('[late]\npenalty = "none"\n', None),  # late work is never worth nothing
        ("", None),  # no [late]: no penalty
    ],
)
def test_a_module_is_closed_once_no_submission_can_earn_its_points(tmp_path, late, closed):
    from tinyflo.course.semester.settings import closed_from

    semester = _read(tmp_path, f'[deadlines]\n"00" = {DUE}\n[extensions.ada]\n"00" = 2026-09-19T23:59:00-04:00\n{late}')
    when = closed_from(semester, "00_demo")
    assert (when and when.astimezone(timezone.utc).isoformat()) == closed
    assert closed_from(_read(tmp_path, late), "00_demo") is None, "no due date: never closed"


def test_the_kit_carries_a_modules_fast_forms_only_once_it_is_closed(tmp_path, capsys):
    """`course release` (the kit) says which modules keep their fast forms withheld and until
    when; a module whose last submission can earn nothing any more has them in the kit."""
    from tinyflo.course.semester.instructor import _closed_fast_forms

    modules = discover_modules(Path(__file__).resolve().parents[2] / "modules")
    past = (datetime.now(timezone.utc) - timedelta(days=30)).isoformat(timespec="seconds")
    soon = (datetime.now(timezone.utc) + timedelta(days=3)).isoformat(timespec="seconds")
    (tmp_path / COURSE_FILE).write_text(
        f'[deadlines]\n"10" = {past}\n"03" = {soon}\n[late]\npenalty = "zero"\n'
    )
    assert _closed_fast_forms(tmp_path, modules) == {"10_convolutions"}
    said = capsys.readouterr().out
    assert "10_convolutions: the given fast forms of `conv_conv2d`, `conv_max_pool` are in the kit" in said
    assert f"03_layers: the fast forms of `layers_gelu`, `layers_layer_norm` are withheld until {soon}" in said, said
    (tmp_path / COURSE_FILE).write_text(f'[deadlines]\n"10" = {past}\n')
    assert _closed_fast_forms(tmp_path, modules) == frozenset()
    assert "until course.toml gives the module a due date and a late penalty that ends" in capsys.readouterr().out
