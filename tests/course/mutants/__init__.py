"""Seeded wrong implementations: each must lose points, or grading cannot tell right from wrong.

One file per module, named after its folder (`01_tensor.py`), holding
`MUTANTS = [(task, exact text in the module source, wrong replacement), ...]` with a comment
above each entry saying what is wrong. Applied alone to the reference notebook, a mutant's
text must match exactly once (a mutant that no longer matches fails its test, so mutants
cannot silently rot), and the task it names must lose points. Every task needs at least
`MIN_PER_TASK` mutants; a module without a file here fails its grading proof.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

MIN_PER_TASK = 3


class Mutant(NamedTuple):
    """One seeded wrong implementation of a task."""

    task: str
    old: str
    new: str


def _load(path: Path) -> list[Mutant]:
    spec = importlib.util.spec_from_file_location(f"mutants_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [Mutant(*entry) for entry in module.MUTANTS]


MUTANTS: dict[str, list[Mutant]] = {
    path.stem: _load(path) for path in sorted(Path(__file__).parent.glob("[0-9]*_*.py"))
}
