"""Hidden checks: the part of a grade cell a student never sees, run without showing its source.

In a module, a grade cell's hidden region sits between `### BEGIN HIDDEN TESTS` and
`### END HIDDEN TESTS`. For grading, that region is cut out of the cell and replaced by one
visible line, `run_hidden_checks("task_id")`; the code itself reaches the grading kernel in a
file only the grader's sandbox holds. So no notebook, traceback or feedback page ever
contains a line of it.

The region is split into *checks*: every top-level `assert`, and every compound statement
(`for`, `with`, `try`, `if`) that asserts or raises inside, is one check; plain statements
before it are its setup. Each check carries a message written for the student (the
assert's message, a string), which is what they read when it fails:

    hidden check 3 of 5 of task `tensor_dtypes`: bool with bool must stay bool

This file needs only the standard library: it runs inside the grading kernel.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import traceback
from dataclasses import dataclass

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CHECKS_FILE_VARIABLE = "TINYFLO_HIDDEN_CHECKS"  # the sandbox names the checks file with it
CALL = "run_hidden_checks({task!r})"
IMPORT = "from tinyflo.course.checks import run_hidden_checks"
_FILENAME = "<hidden check>"


class HiddenCheckFailed(AssertionError):
    """A hidden check did not pass; the message says which and why, never how it is written."""


@dataclass(frozen=True)
class Check:
    """One hidden check: its code (setup and the checking statement) and its message."""

    code: str
    message: str
    line: int  # line of the checking statement within the hidden region, from 1


def split_hidden(source: str) -> tuple[str, str, str] | None:
    """A grade cell's source as (before, hidden region, after), or None without a region."""
    lines = source.split("\n")
    marks = [i for i, line in enumerate(lines) if line.strip() in (BEGIN, END)]
    if not marks:
        return None
    if len(marks) != 2 or lines[marks[0]].strip() != BEGIN:
        raise ValueError(f"expected one `{BEGIN}` ... `{END}` pair in the grade cell")
    start, stop = marks
    return (
        "\n".join(lines[:start]),
        "\n".join(lines[start + 1 : stop]),
        "\n".join(lines[stop + 1 :]),
    )


def _is_check(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, (ast.For, ast.While, ast.With, ast.Try, ast.If)):
        return any(isinstance(inner, (ast.Assert, ast.Raise)) for inner in ast.walk(node))
    return False


def _message(node: ast.stmt) -> str | None:
    """The student's message of a check: a string (an f-string's literal parts), or None."""
    asserts = [n for n in ast.walk(node) if isinstance(n, ast.Assert)]
    raises = [n for n in ast.walk(node) if isinstance(n, ast.Raise)]
    texts = []
    for message in [a.msg for a in asserts] + [
        r.exc.args[0] if isinstance(r.exc, ast.Call) and r.exc.args else None for r in raises
    ]:
        if isinstance(message, ast.Constant) and isinstance(message.value, str):
            texts.append(message.value)
        elif isinstance(message, ast.JoinedStr):
            texts.append(
                "".join(
                    part.value if isinstance(part, ast.Constant) else "…" for part in message.values
                )
            )
        else:
            return None  # one unlabelled assert in a compound check is one too many
    return texts[0] if texts else None


def parse_checks(region: str, require_messages: bool = True) -> list[Check]:
    """Split a hidden region into checks; raises ValueError naming a check without a message.

    With `require_messages=False` such a check gets a plain "this check failed" instead (the
    course's structure tests insist on messages; grading never refuses a notebook over one).
    """
    tree = ast.parse(region)
    lines = region.split("\n")
    checks: list[Check] = []
    setup_start = 0
    for node in tree.body:
        if not _is_check(node):
            continue
        message = _message(node)
        if message is None and not require_messages:
            message = "the expected result was not produced"
        if message is None:
            raise ValueError(
                f"hidden line {node.lineno} has no message for the student: "
                f'{lines[node.lineno - 1].strip()!r}; write `assert ..., "what must hold"`'
            )
        code = "\n".join(lines[setup_start : node.end_lineno])
        checks.append(Check(code, message, node.lineno))
        setup_start = node.end_lineno
    rest = "\n".join(lines[setup_start:]).strip()
    if rest and any(not line.lstrip().startswith("#") for line in rest.split("\n")):
        raise ValueError(
            f"hidden lines after line {setup_start} check nothing; end the region with an assert"
        )
    return checks


def graded_cell_source(source: str, task: str) -> tuple[str, list[Check]]:
    """A grade cell's source with its hidden region replaced by the runner call, and the checks."""
    parts = split_hidden(source)
    if parts is None:
        return source, []
    before, region, after = parts
    checks = parse_checks(region, require_messages=False)
    call = f"{IMPORT}\n{CALL.format(task=task)}"
    marked = "\n".join([BEGIN, call, END])  # the markers let nbgrader strip the call in releases
    return "\n".join(part for part in (before, marked, after) if part), checks


def _raised_by_check(tb) -> bool:
    """True when the innermost frame is the check itself, not code it called."""
    frames = traceback.extract_tb(tb)
    return bool(frames) and frames[-1].filename == _FILENAME


def _student_frame(tb) -> str:
    """Where the student's own code raised: the innermost frame outside the hidden check."""
    frames = [
        frame
        for frame in traceback.extract_tb(tb)
        if frame.filename != _FILENAME and frame.filename != __file__
    ]
    if not frames:
        return ""
    frame = frames[-1]
    text = f" ({frame.name}, line {frame.lineno}"
    return text + (f": `{frame.line.strip()}`)" if frame.line else ")")


def run_hidden_checks(task: str) -> None:
    """Run the hidden checks of `task` in the caller's namespace (the notebook's)."""
    path = os.environ.get(CHECKS_FILE_VARIABLE)
    if not path:
        # Only a graded notebook calls this: without the file, passing would be a free grade.
        raise HiddenCheckFailed(f"the grader did not provide the hidden checks of task `{task}`")
    with open(path, encoding="utf-8") as handle:
        checks = json.load(handle).get(task, [])
    namespace = sys._getframe(1).f_globals
    for number, check in enumerate(checks, start=1):
        label = f"hidden check {number} of {len(checks)} of task `{task}`"
        try:
            exec(compile(check["code"], _FILENAME, "exec"), namespace)
        except Exception as error:
            if isinstance(error, AssertionError) and _raised_by_check(error.__traceback__):
                detail = error.args[0] if error.args and isinstance(error.args[0], str) else ""
                raise HiddenCheckFailed(f"{label}: {detail or check['message']}") from None
            where = _student_frame(error.__traceback__)
            raise HiddenCheckFailed(
                f"{label}: {check['message']} — your code raised "
                f"{type(error).__name__}: {error}{where}"
            ) from None


SCRUBBED = "[a hidden check's code]"


def secret_lines(checks: dict[str, list[dict]]) -> list[str]:
    """The lines of hidden checks worth scrubbing (long enough not to be common code)."""
    lines = {
        line.strip()
        for task in checks.values()
        for check in task
        for line in check["code"].splitlines()
        if len(line.strip()) >= 12 and not line.strip().startswith("#")
    }
    return sorted(lines, key=len, reverse=True)


def scrub(text: str, lines: list[str]) -> str:
    """`text` with every line of hidden-check code in it replaced.

    Hidden code never enters a notebook, but a submission may print what the grading kernel
    can read; nothing a student gets back shows it.
    """
    for line in lines:
        if line in text:
            text = text.replace(line, SCRUBBED)
    return text
