"""`tinyflo course collect` from nbgrader's exchange, against what students can put in it.

The exchange's inbound folder takes anything from anyone, so each way a student could pass something
off there is planted by hand, owned by the Unix users a machine has (daemon, bin, sys, nobody and the
other system users stand in for students), and collected in one run: only a student's own, real
submission is taken, only its notebook and feedback key, never through a link, and never at a time
earlier than its files were written. The whole loop with real logins, JupyterLab and feedback is
tests/course/test_hub.py.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from course_support import FIXTURE_MODULES, call_cli

from tinyflo.course.source import NOTEBOOK_LIMIT

SLUG, NOTEBOOK = "00_demo", "demo.ipynb"
STUDENTS = ("daemon", "bin", "sys", "nobody", "mail", "news", "uucp", "proxy", "www-data", "backup")
LONG_AGO = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "planting submissions owned by other users needs root"
    absent = []
    for name in STUDENTS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            absent.append(name)
    return f"no Unix users {absent} to stand in for students" if absent else None


pytestmark = pytest.mark.skipif(bool(_missing()), reason=str(_missing()))


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _notebook(label: str) -> bytes:
    notebook = {"cells": [], "metadata": {"label": label}, "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(notebook) + "\n").encode()


def _chown(path: Path, owner: str) -> None:
    user = pwd.getpwnam(owner)
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def _plant(inbound: Path, name: str, owner: str, files: dict[str, bytes], when: datetime | None = None) -> Path:
    """A submission folder as `nbgrader submit` leaves it, made by `owner`."""
    folder = inbound / f"{name}+{SLUG}+{_stamp(when or datetime.now(timezone.utc))}+{os.urandom(3).hex()}"
    folder.mkdir()
    for filename, data in files.items():
        (folder / filename).write_bytes(data)
    for path in [folder, *folder.iterdir()]:
        _chown(path, owner)
    return folder


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """The demo module released into an exchange of its own; the inbound folder filled with honest
    and hostile submissions; one `tinyflo course collect`. The course, the planted folders by case,
    the exit status and what it printed."""
    root = tmp_path_factory.mktemp("exchange")
    course, exchange = root / "course", root / "exchange"
    exchange.mkdir(mode=0o1777)
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    (course / "course.toml").write_text(f'exchange = "{exchange}"\n')
    code, out = call_cli("course", "release", "00", *common)
    assert code == 0 and f"in the exchange: {SLUG}" in out, out
    box = exchange / "tinyflo" / "inbound"
    source = course / "source" / SLUG
    planted = {
        # daemon: an older and a newer submission of their own; bin: files beside the notebook
        "old": _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("old"), "submission_secret.txt": b"a" * 128},
                      LONG_AGO),
        "new": _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("new"), "submission_secret.txt": b"b" * 128}),
        "beside": _plant(box, "bin", "bin", {NOTEBOOK: _notebook("bin"), "notes.txt": b"x", ".bashrc": b"y"}),
        # sys, in daemon's name, newer than daemon's own
        "forged": _plant(box, "daemon", "sys", {NOTEBOOK: _notebook("sys, as daemon")},
                         datetime(2099, 1, 1, tzinfo=timezone.utc)),
        # nobody: a folder made today with a time long past in its name; lp: a minute before its copy
        "backdated": _plant(box, "nobody", "nobody", {NOTEBOOK: _notebook("late")}, LONG_AGO),
        "a minute back": _plant(box, "lp", "lp", {NOTEBOOK: _notebook("just late")},
                                datetime.now(timezone.utc) - timedelta(seconds=60)),
        # links to the instructor's files: the whole folder, the notebook, a second name of it
        "folder link": box / f"mail+{SLUG}+{_stamp(datetime.now(timezone.utc))}+x",
        "notebook link": _plant(box, "news", "news", {}),
        "hard link": _plant(box, "uucp", "uucp", {}),
        # a notebook that blocks whoever opens it, and one over the size limit
        "fifo": _plant(box, "proxy", "proxy", {}),
        "oversized": _plant(box, "www-data", "www-data", {}),
        # names nbgrader would split into a student id and a time
        "odd id": box / f"no body+{SLUG}+{_stamp(datetime.now(timezone.utc))}+x",
        "odd time": box / f"bin+{SLUG}+yesterday+x",
        # backup's own folder, its notebook put there by sys (the folder open to all, as nbgrader makes it)
        "added by another": _plant(box, "backup", "backup", {NOTEBOOK: _notebook("sys, in backup's folder")}),
    }
    _chown(planted["added by another"] / NOTEBOOK, "sys")
    planted["folder link"].symlink_to(source)
    _chown(planted["folder link"], "mail")
    (planted["notebook link"] / NOTEBOOK).symlink_to(source / NOTEBOOK)
    _chown(planted["notebook link"] / NOTEBOOK, "news")
    os.link(source / NOTEBOOK, planted["hard link"] / NOTEBOOK)
    os.mkfifo(planted["fifo"] / NOTEBOOK)
    with open(planted["oversized"] / NOTEBOOK, "wb") as handle:
        handle.truncate(NOTEBOOK_LIMIT + 1)
    planted["odd id"].mkdir()
    planted["odd time"].mkdir()
    started = time.monotonic()
    code, out = call_cli("course", "collect", "00", *common)
    return course, planted, code, out, time.monotonic() - started


def test_each_students_own_newest_submission_is_collected_with_its_feedback_key(collected):
    course, _, code, out, _ = collected
    assert code == 1 and "collected 00_demo: 4 submissions (bin, daemon, lp, nobody)" in out, out
    taken = course / "submitted" / "daemon" / SLUG
    assert (taken / NOTEBOOK).read_bytes() == _notebook("new")
    assert (taken / "submission_secret.txt").read_bytes() == b"b" * 128
    assert sorted(p.name for p in (course / "submitted" / "bin" / SLUG).iterdir()) == [NOTEBOOK, "timestamp.txt"]
    assert "bin, 00_demo: only the notebook is taken, not '.bashrc', 'notes.txt'" in out, out


def test_a_file_another_user_put_in_a_students_folder_leaves_the_submission_out(collected):
    course, planted, code, out, _ = collected
    assert "left out backup, 00_demo: demo.ipynb was written by sys, not by backup" in out, out
    assert not (course / "submitted" / "backup").exists()


def test_a_submission_in_another_students_name_is_left_out_and_hides_nothing(collected):
    course, planted, _, out, _ = collected
    assert f"left out 00_demo: {planted['forged'].name!r}: made by sys, not by daemon" in out, out
    assert (course / "submitted" / "daemon" / SLUG / NOTEBOOK).read_bytes() == _notebook("new")


def test_links_to_the_instructors_files_are_never_followed(collected):
    course, planted, _, out, _ = collected
    assert f"left out 00_demo: {planted['folder link'].name!r}: not a folder (a link or a file)" in out, out
    for case in ("notebook link", "hard link"):
        assert f"left out 00_demo: {planted[case].name!r}: its demo.ipynb is not a regular file" in out, out
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["bin", "daemon", "lp", "nobody"]


def test_fifos_oversized_notebooks_and_odd_names_are_left_out_without_waiting(collected):
    _, planted, _, out, seconds = collected
    assert seconds < 60, out
    assert f"{planted['fifo'].name!r}: its demo.ipynb is not a regular file" in out, out
    assert (f"{planted['oversized'].name!r}: its demo.ipynb is not a regular file of one name of at most "
            f"{NOTEBOOK_LIMIT}") in out, out
    assert f"{planted['odd id'].name!r}: 'no body' is not a student id" in out, out
    assert f"{planted['odd time'].name!r}: 'yesterday' is not a time" in out, out


def test_a_backdated_submission_counts_from_when_its_files_were_written(collected):
    """The time in a submission's name is its student's to write; when its files last changed is
    the kernel's: that is taken, and where the two disagree by more than a copy's seconds a line
    says so (a minute back as much as a year)."""
    course, planted, _, out, _ = collected
    assert ("nobody, 00_demo: its name says it was submitted at 2026-01-01 00:00:00 UTC, its files were last "
            "written at ") in out, out
    for student, case in (("nobody", "backdated"), ("lp", "a minute back"), ("daemon", "new")):
        written = (course / "submitted" / student / SLUG / "timestamp.txt").read_text()
        changed = max(path.stat().st_ctime for path in [planted[case], *planted[case].iterdir()])
        taken = datetime.strptime(written, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=timezone.utc)
        assert abs(taken.timestamp() - changed) < 1e-3, (student, written)
    assert "lp, 00_demo: its name says it was submitted at" in out, out
    assert "daemon, 00_demo: its name says" not in out, "an honest submission: its name and its files agree"
