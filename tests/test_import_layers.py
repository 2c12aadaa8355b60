"""Course order is import order: `lint-imports` (import-linter) checks the contracts in pyproject.toml.

The layers contract lets a module of the course import only the modules before it; the acyclic
contract forbids import circles anywhere in the package. import-linter sees modules, not names, so
the last test adds what it cannot: a module takes only public names from the modules it imports.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "src" / "tinyflo" / "core"


def _lint_imports() -> str:
    here = Path(sys.executable).parent / "lint-imports"
    found = str(here) if here.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: install the dev extra (pip install -e '.[dev]')")
    return found


def test_lint_imports_keeps_every_contract():
    done = subprocess.run([_lint_imports(), str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("where, late, said", [
    ("core/tensor.py", "from tinyflo.core.training import Trainer",
     "tinyflo.core.tensor is not allowed to import tinyflo.core.training"),
    # The grading side stands alone: the semester's commands and the kit are built on it.
    ("course/grader/engine.py", "from tinyflo.course.semester.settings import read_semester",
     "tinyflo.course.grader is not allowed to import tinyflo.course.semester"),
    ("course/notebooks.py", "from tinyflo.course.kit.build import write_wheel",
     "tinyflo.course.notebooks is not allowed to import tinyflo.course.kit"),
], ids=["course-order", "grader-below-semester", "notebooks-below-kit"])
def test_lint_imports_catches_a_backward_import(tmp_path, where, late, said):
    """The contracts can fail: a copy of the package with one import against them breaks it."""
    package = tmp_path / "src" / "tinyflo"
    shutil.copytree(ROOT / "src" / "tinyflo", package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    module = package / where
    module.write_text(module.read_text() + f"\n\ndef _late():\n    {late}\n")
    done = subprocess.run([_lint_imports(), str(ROOT / "pyproject.toml")], cwd=tmp_path / "src",
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "src")})
    assert done.returncode != 0
    assert said in done.stdout, done.stdout[-3000:]


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinyflo.core."):
            if node.module.split(".")[-1] == path.stem:
                continue
            found += [f"{path.name}:{node.lineno} takes {alias.name} from {node.module}"
                      for alias in node.names if alias.name.startswith("_")]
    return found


def test_core_modules_take_only_public_names_from_each_other():
    found = [line for path in sorted(CORE.glob("*.py")) for line in _private_imports(path)]
    assert not found, "\n".join(found)
