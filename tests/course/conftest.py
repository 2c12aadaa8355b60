"""Session fixtures for the course tooling: the demo module, and every module graded once."""

from __future__ import annotations

import pytest
from course_support import FIXTURE_MODULES, ModuleProof, grade_all_modules

from tinyflo.course.source import Module, discover_modules


@pytest.fixture(scope="session")
def proofs(tmp_path_factory) -> dict[str, ModuleProof]:
    """Every module released and graded by nbgrader and by the student loop (the slow part)."""
    return grade_all_modules(tmp_path_factory.mktemp("proofs"))


@pytest.fixture(scope="session")
def demo_module() -> Module:
    """The small fixture module the tooling tests run on."""
    return discover_modules(FIXTURE_MODULES)[0]
