"""What grading and students get from the modules: grading trees, hidden checks, the student kit.

* `grading_notebook(module)`: the instructor's notebook with every hidden region replaced by
  a call to `run_hidden_checks` (course/source/ holds this; nbgrader restores its grade
  cells, so the hidden code itself is in no notebook).
* `hidden_checks(module)`: the checks the grading kernel runs, by task.
* `build_tree(...)`: the `tinyflo` package a grading kernel imports — working code for the
  modules before the graded one, hollow copies (see tinyflo.course.sandbox.hollow) of the
  graded module and every later one.
* `build_student_kit(...)`: the wheel a student installs: the package with every graded
  region a stub, exactly as in the release notebooks, which it carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tinyflo.course.checks import graded_cell_source, split_hidden
from tinyflo.course.export import default_exp, render_init, render_module, target_path
from tinyflo.course.notebooks import instructor_notebook, notebook_cells, student_notebook
from tinyflo.course.sandbox import CHECKS_NAME, PACKAGE_DIR, hollow
from tinyflo.course.source import CourseError, Module

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the calling environment's tinyflo/


def _digest(*parts: str | bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode() if isinstance(part, str) else part)
        sha.update(b"\0")
    return sha.hexdigest()[:16]


@lru_cache(maxsize=64)
def _grading_notebook(path: Path, text: str, module: Module) -> tuple[Any, dict]:
    notebook = instructor_notebook(module)
    checks: dict[str, list[dict]] = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or split_hidden(cell.source) is None:
            continue
        try:
            cell.source, found = graded_cell_source(cell.source, meta["grade_id"])
        except (ValueError, SyntaxError) as error:
            where = f"{module.relpath()}, grade cell {meta['grade_id']!r}"
            raise CourseError(f"{where}: {error}") from None
        checks[meta["grade_id"]] = [{"code": c.code, "message": c.message} for c in found]
    return notebook, checks


def grading_notebook(module: Module) -> Any:
    """The instructor's notebook with each hidden region replaced by the checks' runner."""
    import copy

    notebook, _ = _grading_notebook(module.path, module.path.read_text("utf-8"), module)
    return copy.deepcopy(notebook)


def hidden_checks(module: Module) -> dict[str, list[dict]]:
    """{task: [{"code", "message"}, ...]}: what `run_hidden_checks` runs for each task."""
    _, checks = _grading_notebook(module.path, module.path.read_text("utf-8"), module)
    return checks


def reference_source(module: Module) -> str:
    """The module's exported code, solutions included (what src/tinyflo/core/ holds)."""
    return render_module(module.cells(), module.relpath())


@lru_cache(maxsize=64)
def _stub_source(path: Path, text: str, module: Module) -> str:
    release = student_notebook(instructor_notebook(module), module.name)
    return render_module(notebook_cells(release), module.relpath())


def stub_source(module: Module) -> str:
    """The module's exported code as the release has it: every solution region a stub."""
    return _stub_source(module.path, module.path.read_text("utf-8"), module)


def _copy_handwritten(target: Path) -> None:
    """The package's hand-written part (everything but the generated core/ modules)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        if Path(folder) == PACKAGE_ROOT / "core":
            skipped |= {n for n in names if n.endswith(".py")}
        if Path(folder) == PACKAGE_ROOT / "course":
            skipped.add("release")  # a student kit's notebooks: not for the grader
        return skipped

    shutil.copytree(PACKAGE_ROOT, target, ignore=ignore)


_PROFILE = """
import json, sys
targets = set(sys.argv[2:])
calls = set()
def watch(frame, event, arg):
    if event == "call" and frame.f_code.co_filename in targets:
        calls.add((frame.f_code.co_filename, frame.f_code.co_name, frame.f_code.co_firstlineno))
sys.setprofile(watch)
for name in sys.argv[1].split(","):
    __import__(name)
sys.setprofile(None)
print(json.dumps(sorted(calls)))
"""


def _import_time_calls(package: Path, dotted: list[str]) -> dict[str, set[tuple[str, int]]]:
    """The functions each file runs while `dotted` modules are imported: they stay whole."""
    files = {str(target_path(package / "tinyflo", name)): name for name in dotted}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYFLO_", "PYTHONPATH"))} | {
        "PYTHONPATH": str(package),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE, ",".join(f"tinyflo.{d}" for d in dotted), *files],
        capture_output=True,
        text=True,
        env=env,
        cwd=package,
    )
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["no message"]
        raise CourseError(f"the release's package does not import ({lines[-1]})")
    calls: dict[str, set[tuple[str, int]]] = {name: set() for name in dotted}
    for filename, function, line in json.loads(done.stdout):
        calls[files[filename]].add((function, line))
    return calls


def build_tree(
    target: Path,
    modules: list[Module],
    graded: Module,
    earlier: Callable[[Module], str] = reference_source,
    checks: bool = True,
) -> Path:
    """Write the grading tree of `graded` into `target` (replaced); returns `target`."""
    if target.exists():
        shutil.rmtree(target)
    package = target / PACKAGE_DIR
    _copy_handwritten(package / "tinyflo")
    produced, hollowed = [], []
    for module in modules:
        dotted = default_exp(module.cells(), module.relpath())
        produced.append((dotted, module.relpath()))
        path = target_path(package / "tinyflo", dotted)
        path.parent.mkdir(parents=True, exist_ok=True)
        if module.number < graded.number:
            path.write_text(earlier(module), encoding="utf-8")
        else:
            path.write_text(stub_source(module), encoding="utf-8")
            hollowed.append(dotted)
    (package / "tinyflo" / "core" / "__init__.py").write_text(render_init("core", produced))
    keep = _import_time_calls(package, hollowed)
    for dotted in hollowed:
        path = target_path(package / "tinyflo", dotted)
        path.write_text(hollow(path.read_text("utf-8"), f"tinyflo.{dotted}", keep[dotted]))
    if checks:
        (target / CHECKS_NAME).write_text(json.dumps(hidden_checks(graded)), encoding="utf-8")
    return target


def cache_dir() -> Path:
    """Where grading trees are kept between runs ($TINYFLO_CACHE, else the user's cache)."""
    base = os.environ.get("TINYFLO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tinyflo"
    )
    return Path(base) / "grading"


def cached_tree(
    modules: list[Module],
    graded: Module,
    earlier: Callable[[Module], str] = reference_source,
    checks: bool = True,
) -> Path:
    """A grading tree for `graded`, built once per distinct content of everything in it."""
    parts = [str(graded.number), str(checks)]
    for module in modules:
        parts.append(earlier(module) if module.number < graded.number else module.path.read_text())
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if path.parent != PACKAGE_ROOT / "core":
            parts.append(path.read_bytes())
    target = cache_dir() / f"{graded.slug}-{_digest(*parts)}"
    if (target / "complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{graded.slug}-", dir=target.parent))
    build_tree(building, modules, graded, earlier, checks)
    (building / "complete").write_text("")
    try:
        building.rename(target)
    except OSError:  # built by another grader at the same time: theirs is as good
        shutil.rmtree(building, ignore_errors=True)
    return target
