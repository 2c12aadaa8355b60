"""The instructor guide's commands are real: each `tinyflo course ...` line in book/instructor.md parses
as the command line it shows, and the semester's commands are the ones the tests run."""

from __future__ import annotations

import re
import shlex

from course_support import REPO

from tinyflo.cli import build_parser

GUIDE = REPO / "book" / "instructor.md"


def _commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), re.S)
    lines = [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("tinyflo course ")]


def test_every_course_command_in_the_guide_parses():
    parser = build_parser()
    commands = _commands()
    assert len(commands) > 25, commands
    for line in commands:
        words = shlex.split(line)[1:]
        try:
            parser.parse_args(words)
        except SystemExit:
            raise AssertionError(f"the guide's `{line}` is not a command tinyflo takes") from None


def test_the_semesters_commands_are_the_ones_the_tests_run():
    tests = "\n".join(path.read_text() for path in (REPO / "tests" / "course").glob("test_*.py"))
    for line in _commands():
        action = shlex.split(line)[2]
        assert f'"{action}"' in tests, f"no test runs `tinyflo course {action}` ({line})"
    hub = (REPO / "tests" / "course" / "test_hub.py").read_text()
    for words in (["release", "01"], ["collect", "01"], ["autograde", "01", "--jobs", "3"], ["feedback", "01"],
                  ["report", "--format", "canvas", "--csv", "grades.csv"], ["hub", "--env"], ["build"], ["roster"]):
        shown = "tinyflo course " + " ".join(words)
        assert any(line.startswith(shown) for line in _commands()), f"the guide does not show `{shown}`"
        assert ", ".join(f'"{w}"' for w in words) in hub, f"the hub test does not run `{shown}`"
