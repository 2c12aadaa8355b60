"""`tinyflo course collect` from nbgrader's exchange, against what students can put in it.

The exchange's inbound folder takes anything from anyone, so each way a student could pass something
off there is planted by hand, owned by the Unix users a machine has (daemon, bin, sys, nobody stand
in for students), and collected: only a student's own, real submission is taken, only its notebook
and feedback key, never through a link, and never at a time earlier than its files were written.
The whole loop with real logins, JupyterLab and feedback is tests/course/test_hub.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from course_support import FIXTURE_MODULES, call_cli

from tinyflo.course.source import NOTEBOOK_LIMIT

SLUG, NOTEBOOK = "00_demo", "demo.ipynb"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting submissions owned by other users needs root")


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A built course with the demo module released into an exchange of its own."""
    root = tmp_path_factory.mktemp("exchange")
    course, exchange = root / "course", root / "exchange"
    exchange.mkdir(mode=0o1777)
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    (course / "course.toml").write_text(f'exchange = "{exchange}"\n')
    code, out = call_cli("course", "release", "00", *common)
    assert code == 0 and f"in the exchange: {SLUG}" in out, out
    return course, exchange / "tinyflo" / "inbound", common


def _plant(inbound: Path, name: str, owner: str, files: dict[str, bytes], when: datetime | None = None) -> Path:
    """A submission folder as `nbgrader submit` leaves it, made by `owner`."""
    when = when or datetime.now(timezone.utc)
    folder = inbound / f"{name}+{SLUG}+{_stamp(when)}+{os.urandom(3).hex()}"
    folder.mkdir()
    for filename, data in files.items():
        (folder / filename).write_bytes(data)
    user = pwd.getpwnam(owner)
    for path in [folder, *folder.iterdir()]:
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    return folder


def _collect(course: Path, common: list[str]) -> tuple[int, str]:
    shutil.rmtree(course / "submitted", ignore_errors=True)
    return call_cli("course", "collect", "00", *common)


def _notebook(label: str) -> bytes:
    notebook = {"cells": [], "metadata": {"label": label}, "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(notebook) + "\n").encode()


@pytest.fixture
def inbound(released):
    course, inbound, common = released
    for entry in inbound.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    return course, inbound, common


def test_each_students_own_newest_submission_is_collected_with_its_feedback_key(inbound):
    course, box, common = inbound
    _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("old"), "submission_secret.txt": b"a" * 128},
           datetime(2026, 1, 1, tzinfo=timezone.utc))
    _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("new"), "submission_secret.txt": b"b" * 128})
    _plant(box, "bin", "bin", {NOTEBOOK: _notebook("bin"), "notes.txt": b"x", ".bashrc": b"y"})
    code, out = _collect(course, common)
    assert code == 0 and "collected 00_demo: 2 submissions (bin, daemon)" in out, out
    taken = course / "submitted" / "daemon" / SLUG
    assert (taken / NOTEBOOK).read_bytes() == _notebook("new")
    assert (taken / "submission_secret.txt").read_bytes() == b"b" * 128
    assert sorted(p.name for p in (course / "submitted" / "bin" / SLUG).iterdir()) == [NOTEBOOK, "timestamp.txt"]
    assert "bin, 00_demo: only the notebook is taken, not '.bashrc', 'notes.txt'" in out, out


def test_a_submission_in_another_students_name_is_left_out_and_hides_nothing(inbound):
    course, box, common = inbound
    _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("daemon's own")})
    forged = _plant(box, "daemon", "bin", {NOTEBOOK: _notebook("bin's, as daemon")},
                    datetime(2099, 1, 1, tzinfo=timezone.utc))
    code, out = _collect(course, common)
    assert code == 1, out
    assert f"left out 00_demo: {forged.name!r}: made by bin, not by daemon" in out, out
    assert (course / "submitted" / "daemon" / SLUG / NOTEBOOK).read_bytes() == _notebook("daemon's own")


def test_links_to_the_instructors_files_are_never_followed(inbound):
    course, box, common = inbound
    source = course / "source" / SLUG
    link = box / f"bin+{SLUG}+{_stamp(datetime.now(timezone.utc))}+x"
    link.symlink_to(source)  # the whole submission a link to the source folder (solutions)
    os.lchown(link, pwd.getpwnam("bin").pw_uid, -1)
    inner = _plant(box, "sys", "sys", {})
    (inner / NOTEBOOK).symlink_to(source / NOTEBOOK)  # the notebook a link
    os.lchown(inner / NOTEBOOK, pwd.getpwnam("sys").pw_uid, -1)
    hard = _plant(box, "nobody", "nobody", {})
    os.link(source / NOTEBOOK, hard / NOTEBOOK)  # a second name of the instructor's notebook
    code, out = _collect(course, common)
    assert code == 1, out
    assert f"left out 00_demo: {link.name!r}: not a folder (a link or a file)" in out, out
    assert f"left out 00_demo: {inner.name!r}: its demo.ipynb is not a regular file" in out, out
    assert f"left out 00_demo: {hard.name!r}: its demo.ipynb is not a regular file" in out, out
    assert not (course / "submitted").exists() or not any((course / "submitted").iterdir())


def test_fifos_oversized_notebooks_and_odd_names_are_left_out_without_waiting(inbound):
    course, box, common = inbound
    fifo = _plant(box, "bin", "bin", {})
    os.mkfifo(fifo / NOTEBOOK)
    big = _plant(box, "sys", "sys", {})
    with open(big / NOTEBOOK, "wb") as handle:
        handle.truncate(NOTEBOOK_LIMIT + 1)
    odd = box / f"no body+{SLUG}+{_stamp(datetime.now(timezone.utc))}+x"
    odd.mkdir()
    clock = box / f"daemon+{SLUG}+yesterday+x"
    clock.mkdir()
    started = time.monotonic()
    code, out = _collect(course, common)
    assert code == 1 and time.monotonic() - started < 60, out
    assert f"{fifo.name!r}: its demo.ipynb is not a regular file" in out, out
    assert f"{big.name!r}: its demo.ipynb is not a regular file of one name of at most {NOTEBOOK_LIMIT}" in out
    assert f"{odd.name!r}: 'no body' is not a student id" in out, out
    assert f"{clock.name!r}: 'yesterday' is not a time" in out, out


def test_a_backdated_submission_counts_from_when_its_files_were_written(inbound):
    course, box, common = inbound
    _plant(box, "daemon", "daemon", {NOTEBOOK: _notebook("late")}, datetime(2026, 1, 1, tzinfo=timezone.utc))
    code, out = _collect(course, common)
    assert code == 0, out
    assert "its name says it was submitted at 2026-01-01 00:00:00 UTC" in out, out
    written = (course / "submitted" / "daemon" / SLUG / "timestamp.txt").read_text()
    assert written.startswith(str(datetime.now(timezone.utc).year)) and not written.startswith("2026-01-01"), written
