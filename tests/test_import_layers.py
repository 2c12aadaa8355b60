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
    done = subprocess.run([_lint_imports(), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def test_lint_imports_catches_a_backward_import(tmp_path):
    """The contract can fail: a copy of the package whose module 01 imports module 08 breaks it."""
    package = tmp_path / "src" / "tinyflo"
    shutil.copytree(ROOT / "src" / "tinyflo", package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    tensor = package / "core" / "tensor.py"
    tensor.write_text(tensor.read_text() + "\n\ndef _late():\n    from tinyflo.core.training import Trainer\n")
    done = subprocess.run([_lint_imports(), "--config", str(ROOT / "pyproject.toml")], cwd=tmp_path / "src",
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "src")})
    assert done.returncode != 0
    assert "tinyflo.core.tensor is not allowed to import tinyflo.core.training" in done.stdout


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
