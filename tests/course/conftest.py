"""Session fixtures for the course tooling: the demo module, and every module graded once."""

from __future__ import annotations

import pytest
from course_support import (
    CHEAT_ROWS,
    FIXTURE_MODULES,
    MUTATION_ROWS,
    copy_modules,
)

from tinyflo.course.source import Module, discover_modules


@pytest.fixture(scope="session")
def proof_root(tmp_path_factory):
    """Where the proofs' course folders live, with a copy of every module."""
    root = tmp_path_factory.mktemp("proofs")
    return root, copy_modules(root)


@pytest.fixture(scope="session")
def demo_module() -> Module:
    """The small fixture module the tooling tests run on."""
    return discover_modules(FIXTURE_MODULES)[0]


_TABLES: dict[str, list] = {MUTATION_ROWS: [], CHEAT_ROWS: []}


def pytest_runtest_logreport(report) -> None:
    """Rows the proofs recorded; with xdist, reports reach the controller with them."""
    if report.when == "call":
        for name, rows in report.user_properties:
            if name in _TABLES:
                _TABLES[name].extend(tuple(row) for row in rows)


def pytest_terminal_summary(terminalreporter) -> None:
    """The grading proofs' tables: mutants killed per task, and points per module and cheat."""
    if _TABLES[MUTATION_ROWS]:
        terminalreporter.section("mutation table (task, mutants, killed)")
        for module, task, mutants, killed in sorted(_TABLES[MUTATION_ROWS]):
            terminalreporter.line(f"{module:<20} {task:<36} {mutants:>3} {killed:>3}")
    if _TABLES[CHEAT_ROWS]:
        points = {(module, cheat): value for module, cheat, value in _TABLES[CHEAT_ROWS]}
        terminalreporter.section("cheat table (module x cheat -> points)")
        cheats = sorted({cheat for _, cheat in points})
        terminalreporter.line(f"{'module':<20} " + " ".join(f"{c:>12}" for c in cheats))
        for module in sorted({m for m, _ in points}):
            row = [points.get((module, c)) for c in cheats]
            terminalreporter.line(
                f"{module:<20} " + " ".join(f"{'-' if v is None else f'{v:g}':>12}" for v in row)
            )
