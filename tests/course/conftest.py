"""Session fixtures for the course tooling: the demo module, and every module graded once."""

from __future__ import annotations

import pytest
from course_support import (
    CHEAT_ROWS,
    FIXTURE_MODULES,
    MUTATION_ROWS,
    ModuleProof,
    grade_all_modules,
)

from tinyflo.course.source import Module, discover_modules


@pytest.fixture(scope="session")
def proofs(tmp_path_factory) -> dict[str, ModuleProof]:
    """Every module released and graded by nbgrader and by the student loop (the slow part)."""
    return grade_all_modules(tmp_path_factory.mktemp("proofs"))


@pytest.fixture(scope="session")
def demo_module() -> Module:
    """The small fixture module the tooling tests run on."""
    return discover_modules(FIXTURE_MODULES)[0]


def pytest_terminal_summary(terminalreporter) -> None:
    """The grading proofs' tables: mutants killed per task, and points per module and cheat."""
    if MUTATION_ROWS:
        terminalreporter.section("mutation table (task, mutants, killed)")
        for module, task, mutants, killed in MUTATION_ROWS:
            terminalreporter.line(f"{module:<20} {task:<36} {mutants:>3} {killed:>3}")
    if CHEAT_ROWS:
        terminalreporter.section("cheat table (module x cheat -> points)")
        cheats = sorted({cheat for _, cheat in CHEAT_ROWS})
        terminalreporter.line(f"{'module':<20} " + " ".join(f"{c:>12}" for c in cheats))
        for module in sorted({m for m, _ in CHEAT_ROWS}):
            row = [CHEAT_ROWS.get((module, c)) for c in cheats]
            terminalreporter.line(
                f"{module:<20} " + " ".join(f"{'-' if v is None else f'{v:g}':>12}" for v in row)
            )
