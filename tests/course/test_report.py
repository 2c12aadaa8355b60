"""`tinyflo course report`: what it says beside the table and the CSV."""

from __future__ import annotations

from tinyflo.course import instructor
from tinyflo.course.instructor import Score


def test_an_lms_import_names_the_students_the_roster_gives_no_identity_there(tmp_path, monkeypatch, capsys):
    # the gradebook as autograde leaves it (tests/course/test_lms.py reads a real one): no roster yet
    scores = [Score(student, "00_demo", points, 5.0, {}) for student, points in (("alice", 5.0), ("bob", 0.0))]
    monkeypatch.setattr(instructor, "gradebook_scores", lambda course_dir, left_out=None: scores)
    monkeypatch.setattr(instructor, "students", lambda course_dir: {})
    instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas")
    assert (
        "note: the roster has no Canvas user id for 2 of 2 graded students (alice, bob): their rows carry only "
        "their id here (SIS Login ID), which Canvas matches only if it is their login there; "
        f"`tinyflo course roster FILE --dir {tmp_path}` adds them\n") in capsys.readouterr().out
    instructor.report(tmp_path, tmp_path / "rows.csv")
    assert "note:" not in capsys.readouterr().out, "a row per task names the student by their id: nothing to match"
    roster = {"alice": {"email": "alice@example.edu", "lms_user_id": ""}, "bob": {"email": None}}
    monkeypatch.setattr(instructor, "students", lambda course_dir: roster)
    instructor.report(tmp_path, tmp_path / "moodle.csv", "moodle")
    assert "no email for 1 of 2 graded students (bob): their rows carry only their id here (Username)" \
        in capsys.readouterr().out
    instructor.report(tmp_path, tmp_path / "canvas.csv", "canvas")
    assert "no Canvas user id for 2 of 2" in capsys.readouterr().out, "an empty id is none"
