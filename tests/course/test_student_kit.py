"""The student kit: a wheel with every graded region a stub, and the student loop working from it.

Built from the course's modules, installed into a folder of its own, and used as a student
would: no solution and no hidden check anywhere in it; `module start`, `test` and `complete`
work from its bundled release notebooks, and a later module runs on the completed earlier one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from course_support import REPO, secret_lines

from tinyflo.course.kit import build_student_kit
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.source import discover_modules

pytestmark = pytest.mark.slow
MODULES = discover_modules(REPO / "modules")


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """The kit's wheel, built once."""
    return build_student_kit(tmp_path_factory.mktemp("kit"), MODULES)


def test_the_kit_holds_no_solution_and_no_hidden_check(kit):
    with zipfile.ZipFile(kit) as wheel:
        text = "\n".join(
            wheel.read(name).decode("utf-8", "replace")
            for name in wheel.namelist()
            if name.endswith((".py", ".ipynb"))
        )
        names = wheel.namelist()
    # Notebooks are JSON: decode their strings so quotes read as in the module.
    text += "\n".join(
        "".join(cell["source"])
        for name in names
        if name.endswith(".ipynb")
        for cell in json.loads(zipfile.ZipFile(kit).read(name))["cells"]
    )
    lines = {line.strip() for line in text.splitlines()}
    secrets = {module.slug: set().union(*secret_lines(module)) for module in MODULES}
    # A line one module hides may be another's given code, or the hand-written package's:
    # only lines nothing public shows count.
    handwritten = (p for p in (REPO / "src" / "tinyflo").rglob("*.py") if p.parent.name != "core")
    public = {line.strip() for path in handwritten for line in path.read_text().splitlines()}
    for module in MODULES:
        every = {line.strip() for line in module.path.read_text().splitlines()}
        public |= every - secrets[module.slug]
    for module in MODULES:
        shown = {line for line in secrets[module.slug] - public if line in lines}
        assert not shown, (
            f"the kit shows lines of {module.slug}'s solutions or hidden checks: {sorted(shown)[:5]}"
        )
        assert f"tinyflo/course/release/{module.slug}/{module.name}.ipynb" in names
    assert not lines & {"### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"}, "grading markers left"
    assert (kit.parent / "README.md").read_text().count(f"pip install '{kit.name}[course]'") == 1


def _tinyflo(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    env["PYTHONPATH"] = str(site)  # the kit first: the environment's own tinyflo comes after
    return subprocess.run(
        [sys.executable, "-m", "tinyflo.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_student_loop_runs_from_the_kit(kit, tmp_path):
    site, home = tmp_path / "site", tmp_path / "student"
    home.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(kit),
        ],
        check=True,
    )
    done = _tinyflo(site, home, "module", "start", "01")
    assert done.returncode == 0, done.stderr
    notebook = home / "workspace" / "01_tensor" / "tensor.ipynb"
    blank = _tinyflo(site, home, "module", "test", "01")
    assert blank.returncode == 1 and "visible tests only" in blank.stdout, (
        blank.stdout + blank.stderr
    )
    assert "total: 0/" in blank.stdout, blank.stdout
    # The student's finished notebook (here: the course's own answers) passes the visible tests.
    write_notebook(instructor_notebook(MODULES[0]), notebook)
    done = _tinyflo(site, home, "module", "complete", "01")
    assert done.returncode == 0, done.stdout + done.stderr
    own = home / "workspace" / "package" / "tinyflo" / "core" / "tensor.py"
    assert own.is_file()
    # Module 02 grades on the student's module 01, not on the kit's stubs.
    assert _tinyflo(site, home, "module", "start", "02").returncode == 0
    write_notebook(
        instructor_notebook(MODULES[1]), home / "workspace" / "02_autograd" / "autograd.ipynb"
    )
    done = _tinyflo(site, home, "module", "test", "02")
    assert done.returncode == 0, done.stdout + done.stderr
