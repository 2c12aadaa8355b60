"""The instructor guide's commands are real: each `tinyflo course ...` line in book/instructor.md parses
as the command line it shows, and the semester's commands are the ones the tests run."""

from __future__ import annotations

import re
import shlex

from course_support import FIXTURE_MODULES, REPO, call_cli

from tinyflo.cli import build_parser
from tinyflo.course.semester import hub as course_hub

GUIDE = REPO / "book" / "instructor.md"
HUB_TEST = REPO / "tests" / "course" / "test_hub.py"


def _blocks(text: str) -> list[list[str]]:
    """The lines of each bash block in `text`, without their comments."""
    return [[line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
            for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def _commands() -> list[str]:
    return [line for block in _blocks(GUIDE.read_text()) for line in block if line.startswith("tinyflo course ")]


def _run_in_test(words: list[str], test: str) -> bool:
    """Whether `test` holds `words` as the arguments of a command it runs: "a", "b", ... (on one
    line or more), followed by no other word the guide would show (a path may follow)."""
    shown = re.escape(", ".join(f'"{w}"' for w in words)) + r'(?!, ")'
    return re.search(shown, re.sub(r",\s+", ", ", test)) is not None


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
        assert _run_in_test(words, hub), f"the hub test does not run `{shown}`"


def test_the_hub_test_sets_the_hub_up_with_the_guides_commands(tmp_path, monkeypatch):
    section = GUIDE.read_text().split("\n## A semester on a JupyterHub\n", 1)[1].split("\n## ", 1)[0]
    blocks = _blocks(section)
    hub_test = HUB_TEST.read_text()
    # the environment, made by root: each word the test's own, but for the paths (and the kit's name)
    for marker in (" -m venv ", "/bin/pip install "):
        line = next(line for block in blocks for line in block if marker in line)
        assert _run_in_test([w for w in shlex.split(line) if "/" not in w], hub_test), \
            f"the hub test does not make the hub's environment with `{line}`"
        assert not line.endswith("[course]\"") or '[course]")' in hub_test, f"the kit's course extra: `{line}`"
    # the configuration, written by the instructor with the guide's options
    at = next(n for n, block in enumerate(blocks) if block[0].startswith("tinyflo course hub "))
    options = [w for w in shlex.split(blocks[at][0]) if w.startswith("--")]
    call = re.search(r'"course", "hub", (.*?)\)\n', hub_test, re.S)
    assert call and all(f'"{o}"' in call[1] for o in options), f"the hub test's `course hub` lacks one of {options}"
    # root's steps and the hub's start are the ones `course hub` prints for the guide's command (on a
    # machine with systemd, for its limits), which the hub test runs one by one
    monkeypatch.setattr(course_hub, "runs_systemd", lambda: True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "course.toml").write_text('exchange = "/srv/nbgrader/exchange"\n')
    code, out = call_cli(*shlex.split(blocks[at][0])[1:], "--dir", "course", "--modules", str(FIXTURE_MODULES))
    assert code == 0, out
    printed = [line.strip().replace(f"{tmp_path}/", "") for line in out.splitlines() if line.startswith("  ")]
    assert blocks[at + 1] == printed, "the guide's steps for root are not what `course hub` prints"
    assert "for step in steps[:-1]:" in hub_test and "Hub(shlex.split(steps[-1])" in hub_test
