"""Hidden checks: the part of a grade cell a student never sees.

In a module, a grade cell's hidden region sits between `### BEGIN HIDDEN TESTS` and
`### END HIDDEN TESTS`. No notebook carries it: the release leaves it out, and the notebooks
nbgrader keeps (source/, autograded/, feedback) hold one comment line in its place. Grading
takes the region from the module itself and turns it into scenarios (tinyflo.course.grader.scenarios),
which run where no verdict is made.

Every check (a top-level `assert`, or a compound statement that asserts or raises inside)
carries a message written for the student, which is what they read when it fails:

    hidden check 3 of 5 of task `tensor_dtypes`: bool with bool must stay bool

This file needs only the standard library.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
PLACEHOLDER = "# The hidden checks of this task run here when your instructor grades."


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


def is_check(node: ast.stmt) -> bool:
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
        if not is_check(node):
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
    """A grade cell's source with its hidden region replaced by a placeholder, and the checks."""
    parts = split_hidden(source)
    if parts is None:
        return source, []
    before, region, after = parts
    checks = parse_checks(region, require_messages=False)
    marked = "\n".join([BEGIN, PLACEHOLDER, END])  # the markers let nbgrader strip it in releases
    return "\n".join(part for part in (before, marked, after) if part), checks
