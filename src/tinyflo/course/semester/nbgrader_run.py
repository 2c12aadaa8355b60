"""Running nbgrader in a course folder, and what every course command shares: the course's id in
nbgrader, how a command is advised, the students the gradebook knows."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tinyflo.course.notebooks import require, require_installed
from tinyflo.course.source import COURSE_DIR, CourseError

COURSE_ID = "tinyflo"
ROSTER_COLUMNS = ("id", "first_name", "last_name", "email", "lms_user_id")  # nbgrader's student table


def course_command(action: str, course_dir: Path) -> str:
    """A command to advise, naming the course folder unless it is the default ./course."""
    folder = "" if course_dir == Path(COURSE_DIR).resolve() else f" --dir {shlex.quote(str(course_dir))}"
    return f"tinyflo course {action}{folder}"


# Expected on every run: the kernel's transport notice, and the checksum of grade cells
# whose hidden tests nbgrader restores.
_NOISE = (
    "Kernel is running over TCP",
    "Attribute 'checksum' for cell",
    "not recognized by `ScrubHiddenChecks`",  # nbconvert hands every step the exporter's options
    "seconds late",  # autograde's own line says how late and what it cost
    "Late submission penalty",
)
_EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(?:Error|Exception|MissingEntry)\b.*$")


_SKIPPED = "Skipping existing "  # nbgrader's warning for an assignment or submission it left as it was


def skipped(output: str) -> list[Path]:
    """What an nbgrader run left as it was, already there (without --force): its folders."""
    return [Path(line.split(_SKIPPED, 1)[1].split(": ", 1)[-1].strip())
            for line in output.splitlines() if _SKIPPED in line]


def nbgrader(course_dir: Path, *args: str, env: dict[str, str] | None = None, say_skipped: bool = True) -> str:
    """Run `python -m nbgrader ARGS` in the course folder; its output, or its errors raised.

    `say_skipped`: repeat nbgrader's line for each thing it left as it was (False: the caller says
    it, from :func:`skipped`)."""
    require_installed("nbgrader")
    # Autograding must run against the reference package, not someone's workspace overlay.
    env = {key: value for key, value in os.environ.items() if key != "TINYFLO_WORKSPACE"} | (
        env or {}
    )
    # nbgrader runs helper tools (alembic) by name: find them beside this Python.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    start = (  # `python -m nbgrader`, without the grammars no notebook needs
        "from tinyflo.course.notebooks import without_iri_grammars; without_iri_grammars(); "
        "from tinyflo.course.semester.nbgrader_run import nbgrader_api; nbgrader_api(); "
        "from nbgrader.apps.nbgraderapp import main; main()"
    )
    command = [sys.executable, "-c", start, *args]
    done = subprocess.run(command, cwd=course_dir, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    lines = output.splitlines()
    if done.returncode != 0:
        causes = [line.strip() for line in lines if _EXCEPTION_LINE.match(line)]
        cause = causes[-1] if causes else "see its output below"
        refused = sorted({line.split("submission refused: ", 1)[1] for line in lines
                          if "submission refused: " in line})  # fmt: skip
        if refused:
            cause = "submissions refused (nothing of them was graded):\n  " + "\n  ".join(refused)
        tail = "\n".join(lines[-15:])
        raise CourseError(
            f"`nbgrader {' '.join(args)}` failed (exit {done.returncode}) in {course_dir}: "
            f"{cause}\n--- last lines of nbgrader's output ---\n{tail}"
        )
    for line in lines:
        if _SKIPPED in line:
            if say_skipped:
                print(f"  nbgrader: {line.split('] ', 1)[-1]} (--force overwrites)")
        elif ("WARNING" in line or "ERROR" in line) and not any(n in line for n in _NOISE):
            print(f"  nbgrader: {line.strip()}")
    return output


def nbgrader_api() -> ModuleType:
    """nbgrader's gradebook API. A new gradebook is stamped with the version of its schema, which
    nbgrader finds by running `alembic heads` in a process of its own: three seconds, on the first
    command of every course. Here it is read in this process from the same migration scripts, in
    a quarter of a second (`test_the_gradebooks_schema_version_is_nbgraders_own` holds the two equal)."""
    api = require("nbgrader.api")
    api.get_alembic_version = _schema_version
    return api


def _schema_version() -> str:
    """What `alembic heads` says first, for nbgrader's migration scripts."""
    api, script = require("nbgrader.api"), require("alembic.script")
    return script.ScriptDirectory(str(Path(api.__file__).parent / "alembic")).get_current_head()


def students(course_dir: Path) -> dict[str, dict[str, str]]:
    """Every student in the gradebook with what the roster gave: names, email, LMS id."""
    api = nbgrader_api()
    with api.Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        return {s.id: {k: getattr(s, k) for k in ROSTER_COLUMNS[1:]} for s in gradebook.students}
