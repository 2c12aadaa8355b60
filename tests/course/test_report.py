"""`tinyflo course report`: what it says beside the table and the CSV."""

from __future__ import annotations

from course_support import FIXTURE_MODULES

from tinyflo.course.semester import instructor
from tinyflo.course.semester.instructor import Score
from tinyflo.course.source import discover_modules


def test_an_lms_import_is_refused_while_the_roster_gives_a_graded_student_no_identity_there(tmp_path, monkeypatch,
                                                                                          capsys):
    """A row whose LMS id column is empty reaches no one's grade in the LMS: the import is refused,
    naming the students who lack one and how to add it, and nothing is written; unless every id here
    is the student's login there (--ids-are-logins)."""
    import pytest

    from tinyflo.course.source import CourseError

    # the gradebook as autograde leaves it (tests/course/test_lms.py reads a real one): no roster yet
    scores = [Score(student, "00_demo", points, 5.0, {}) for student, points in (("alice", 5.0), ("bob", 0.0))]
    monkeypatch.setattr(instructor, "gradebook_scores", lambda course_dir, left_out=None: scores)
    monkeypatch.setattr(instructor, "students", lambda course_dir: {})
    with pytest.raises(CourseError) as refused:
        instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas")
    assert str(refused.value) == (
        "--format canvas: the roster has no Canvas user id for 2 of 2 graded students (alice, bob), so Canvas "
        "could match their rows only by their id here (SIS Login ID); add a lms_user_id column with "
        f"`tinyflo course roster FILE --dir {tmp_path}`, or, where every id here is the student's login in "
        "Canvas, give --ids-are-logins")
    assert not (tmp_path / "canvas.csv").exists()
    instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas", logins=True)
    assert (tmp_path / "canvas.csv").read_text().splitlines()[2].startswith("alice,,,alice,"), "matched by login"
    instructor.report(tmp_path, tmp_path / "rows.csv")  # a row per task names the student by their id
    with pytest.raises(CourseError, match="--ids-are-logins says how an LMS's import matches its rows"):
        instructor.report(tmp_path, tmp_path / "rows.csv", logins=True)
    roster = {"alice": {"email": "alice@example.edu", "lms_user_id": ""}, "bob": {"email": None}}
    monkeypatch.setattr(instructor, "students", lambda course_dir: roster)
    with pytest.raises(CourseError, match=r"no email for 1 of 2 graded students \(bob\), so Moodle could match"):
        instructor.report(tmp_path, tmp_path / "moodle.csv", "moodle")
    with pytest.raises(CourseError, match="no Canvas user id for 2 of 2"):  # an empty id is none
        instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas")
    roster["bob"]["email"] = "bob@example.edu"
    instructor.report(tmp_path, tmp_path / "gradescope.csv", "gradescope")
    assert "bob@example.edu" in (tmp_path / "gradescope.csv").read_text()


def test_the_report_says_an_extension_applied_and_heads_lms_columns_with_the_assignments_titles(
        tmp_path, monkeypatch, capsys):
    """course.toml's [extensions] show beside the points they applied to; [titles] head the
    module's column in every LMS format (Canvas fills the existing assignment `Title (id)`)."""
    modules = discover_modules(FIXTURE_MODULES)
    (tmp_path / "course.toml").write_text(
        '[deadlines]\n"00" = 2026-09-14T23:59:00-04:00\n[extensions.alice]\n"00" = 2026-09-16T23:59:00-04:00\n'
        '[titles]\ndemo = "Lab 0: Demo (4521)"\n')
    scores = [Score("alice", "00_demo", 5.0, 5.0, {}), Score("bob", "00_demo", 2.0, 5.0, {})]
    monkeypatch.setattr(instructor, "gradebook_scores", lambda course_dir, left_out=None: scores)
    roster = {s: {"email": f"{s}@example.edu", "lms_user_id": str(n)} for n, s in enumerate(("alice", "bob"))}
    monkeypatch.setattr(instructor, "students", lambda course_dir: roster)
    for lms, first_columns in (("canvas", 5), ("moodle", 4), ("gradescope", 3)):
        instructor.report(tmp_path, tmp_path / f"{lms}.csv", lms, modules=modules)
        header = (tmp_path / f"{lms}.csv").read_text().splitlines()[0].split(",")
        assert header[first_columns:] == ["Lab 0: Demo (4521)"], (lms, header)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[:3]] == [
        ["student", "00_demo"], ["alice", "5/5", "(extended", "to", "2026-09-16T23:59-04:00)"], ["bob", "2/5"]]
    instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas")  # no modules given: no course.toml read
    assert (tmp_path / "canvas.csv").read_text().splitlines()[0].endswith(",00_demo")
