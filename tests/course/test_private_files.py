"""Nothing that holds a solution is readable by another local user.

On a shared hub every student is a local user of the instructor's machine. The course folder
(solutions, key, grades), the grading cache (each tree holds the reference of every module before
its own) and the course's clone are the instructor's alone: made private when tinyflo makes them
(the course commands run with umask 077; the cache folder is made 700), whatever the instructor's
own umask, and tried here as a second Unix user.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from course_support import FIXTURE_MODULES, REPO

from tinyflo.course.grader.tree import cached_tree
from tinyflo.course.source import discover_modules

NOBODY = 65534


def _other_user(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command],
                          capture_output=True, text=True)


def _tinyflo(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    # the instructor's own umask is the usual 022: what tinyflo makes must be private anyway
    return subprocess.run(["sh", "-c", 'umask 022; exec "$@"', "sh", sys.executable, "-m", "tinyflo.cli", *args],
                          cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv: two Unix users")
def test_another_local_user_reads_nothing_the_instructor_makes(tmp_path, monkeypatch, capsys):
    os.chmod(tmp_path, 0o755)  # the instructor's home is open, as Debian's useradd makes it
    clone = tmp_path / "course-repo"  # the instructor's clone of the course (tinyflo runs from elsewhere)
    shutil.copytree(FIXTURE_MODULES, clone / "modules")
    shutil.copy(REPO / "pyproject.toml", clone / "pyproject.toml")
    os.chmod(clone, 0o755)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    (cache / "grading").mkdir(mode=0o755)  # as an older tinyflo left it
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")} | {"TINYFLO_CACHE": str(cache)}
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(clone / "modules")]
    built = _tinyflo(tmp_path, env, "course", "build", *common)
    assert built.returncode == 0, built.stdout + built.stderr
    assert f"closed {clone} to other users" in built.stdout
    released = _tinyflo(tmp_path, env, "course", "release", "00_demo", *common)
    assert released.returncode == 0, released.stdout + released.stderr
    monkeypatch.setenv("TINYFLO_CACHE", str(cache))
    umask = os.umask(0o022)
    try:  # a grading tree, as autograde makes one
        cached_tree(discover_modules(clone / "modules"), discover_modules(clone / "modules")[0])
    finally:
        os.umask(umask)
    assert "closed" in capsys.readouterr().err

    # created private, not closed afterwards: every file the course commands wrote is the instructor's alone
    for path in course.rglob("*"):
        assert not os.lstat(path).st_mode & 0o077, f"{path}: {stat.filemode(os.lstat(path).st_mode)}"
    for folder in (course, cache / "grading", clone):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    tree = next((cache / "grading").glob("00_demo-*"))
    for seen in (course, course / "source", cache / "grading", tree, clone / "modules", clone):
        assert _other_user("ls", str(seen)).returncode != 0, f"another user lists {seen}"
    for secret in (course / "grading" / "course.key", next(course.glob("source/*/*.ipynb")),
                   next(tree.rglob("*.py")), next(clone.glob("modules/*/*.py"))):
        done = _other_user("cat", str(secret))
        assert done.returncode != 0 and not done.stdout, f"another user reads {secret}"


def test_a_clone_tinyflo_runs_from_is_not_closed_but_the_command_is_said(tmp_path, capsys):
    """Closing the checkout tinyflo itself runs from would stop every other user's tinyflo."""
    from tinyflo.course.semester import instructor

    if not REPO.stat().st_mode & 0o077 or not Path(instructor.__file__).resolve().is_relative_to(REPO):
        pytest.skip("this checkout is closed, or tinyflo does not run from it")
    instructor._close_clone(REPO / "modules")
    said = capsys.readouterr().err
    assert f"close it with `chmod go= {REPO}` (tinyflo runs from it" in said, said
    assert REPO.stat().st_mode & 0o077
