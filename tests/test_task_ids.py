"""One id per graded piece: grade cell, solution cells, the notebook's heading, test names and markers agree."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(ROOT.glob("modules/[0-9][0-9]_*/*.py"))
TEST_SOURCE = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


def grade_ids(path: Path) -> tuple[list[str], list[str]]:
    """(grade cell ids, solution cell ids) of a module source file."""
    graded, solutions = [], []
    for line in path.read_text().splitlines():
        if line.startswith("# %%") and "nbgrader=" in line:
            meta = json.loads(line.split("nbgrader=", 1)[1])
            if meta.get("grade"):
                graded.append(meta["grade_id"])
            elif meta.get("solution"):
                solutions.append(meta["grade_id"])
    return graded, solutions


def test_there_are_modules():
    assert MODULES, "no modules found under modules/"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.parent.name)
def test_each_task_id_appears_everywhere(path):
    graded, solutions = grade_ids(path)
    text = path.read_text()
    assert graded, f"{path.name} has no grade cells"
    assert len(set(graded)) == len(graded), f"duplicate grade ids in {path.name}"
    for task in graded:
        assert f"Task `{task}`" in text, f"{path.name}: no markdown heading names task {task}"
        assert f'task("{task}")' in TEST_SOURCE, f"no test in tests/ is marked @pytest.mark.task({task!r})"
        assert f"def test_{task}" in TEST_SOURCE, f"no test in tests/ is named test_{task}_..."
        assert any(re.fullmatch(rf"{task}_code\d*", s) for s in solutions), f"{task} has no solution cell"
    for solution in solutions:
        base = re.sub(r"_code\d*$", "", solution)
        assert base in graded, f"{path.name}: solution cell {solution} belongs to no grade cell"
