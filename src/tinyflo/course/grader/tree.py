"""What grading runs on: the grading tree of a module, and the code it is made of.

* `build_tree(...)`: the `tinyflo` package a grading run imports — working code for the
  modules before the graded one, hollow copies (see tinyflo.course.grader.sandbox.hollow) of the
  graded module and every later one; `cached_tree` builds each distinct tree once.
* `reference_source`, `stub_source`, `release_notebook`: a module's exported code with its
  solutions, as the release has it, and the release notebook (the student kit, kit.build,
  carries the last two).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tinyflo import environment
from tinyflo.course.export import default_exp, render_init, render_module, target_path
from tinyflo.course.grader.sandbox import PACKAGE_DIR, hollow
from tinyflo.course.notebooks import (
    grading_notebook,
    instructor_notebook,
    notebook_cells,
    student_notebook,
    withheld_task,
)
from tinyflo.course.source import CourseError, Module, make_folder

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the calling environment's tinyflo/


def _digest(*parts: str | bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode() if isinstance(part, str) else part)
        sha.update(b"\0")
    return sha.hexdigest()[:16]


def reference_source(module: Module) -> str:
    """The module's exported code, solutions included (what src/tinyflo/core/ holds)."""
    return render_module(module.cells(), module.relpath())


@lru_cache(maxsize=64)
def _stub_source(path: Path, text: str, module: Module, delivered: bool) -> str:
    return render_module(notebook_cells(release_notebook(module, delivered)), module.relpath())


def release_notebook(module: Module, delivered: bool = False) -> Any:
    """The notebook a student gets: solutions replaced by stubs, no hidden checks, cells locked,
    and no fast form of a task's code unless `delivered` (see notebooks.withheld_task).

    A student kit's module is already its release (nbgrader's steps must not run on it again:
    they would turn each solution cell, whose markers are gone, into a bare stub).
    """
    if module.released:
        return instructor_notebook(module)
    return student_notebook(grading_notebook(module, delivered), module.name)


def stub_source(module: Module, delivered: bool = False) -> str:
    """The module's exported code as the release has it: every solution region a stub."""
    return _stub_source(module.path, module.path.read_text("utf-8"), module, delivered)


def withheld_tasks(module: Module) -> list[str]:
    """The tasks of `module` whose fast forms the course withholds until they are closed."""
    return list(dict.fromkeys(task for cell in module.cells() if (task := withheld_task(cell)) is not None))


def copy_handwritten(target: Path) -> None:
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
    secret: bool | None = None,
) -> Path:
    """Write the grading tree of `graded` into `target` (replaced); returns `target`.

    `secret`: the earlier modules' code is the reference (the default when `earlier` is
    `reference_source`), kept as bytecode only."""
    if target.exists():
        shutil.rmtree(target)
    package = target / PACKAGE_DIR
    copy_handwritten(package / "tinyflo")
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
    if secret is None:
        secret = earlier is reference_source
    _compile(package, [dotted for dotted, _ in produced if dotted not in hollowed] if secret else [])
    for path in [target, *target.rglob("*")]:  # read by the sandbox's uid, whatever modes it was copied from
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return target


def _compile(package: Path, secret: list[str]) -> None:
    """Every module of the tree compiled once, here, instead of in each grading run; the
    reference code of the earlier modules (`secret`) kept only as bytecode, its source
    removed: the runner imports those modules before the notebook's code starts
    (tinyflo.course.grader.runner.preload), and nothing in the sandbox can read them as source."""
    import compileall
    import py_compile

    for dotted in secret:
        path = target_path(package / "tinyflo", dotted)
        py_compile.compile(str(path), cfile=str(path.with_suffix(".pyc")), dfile=f"<tinyflo.{dotted}>",
                           doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        path.unlink()
    if not compileall.compile_dir(str(package), quiet=2, workers=1):
        raise CourseError(f"the grading tree {package} does not compile")


def cache_dir() -> Path:
    """Where grading trees are kept between runs ($TINYFLO_CACHE, else the user's cache), made
    now: one line naming the variable when it cannot be.

    A tree holds the reference of every module before its own, so the folder is the user's
    alone: made so (mode 700), and closed if an older tinyflo left it open. The trees inside
    stay readable to the grading sandbox's own uid, which reaches them by a bind mount, not
    through this folder."""
    try:
        given = environment.read("TINYFLO_CACHE")
    except environment.VariableError as error:
        raise CourseError(str(error)) from None
    base = given or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tinyflo")
    option = "TINYFLO_CACHE" if given else "the grading cache"
    folder = make_folder(Path(base), option) / "grading"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.stat().st_mode & 0o077:
            os.chmod(folder, 0o700)
            print(f"closed {folder} to other users (its grading trees hold the reference solutions)", file=sys.stderr)
    except OSError as error:
        raise CourseError(f"{option}: cannot make {folder} private: {error.strerror or error}") from None
    return folder


_TREE_UMASK = threading.Lock()  # the umask is the process's: one tree is built under it at a time


def cached_tree(
    modules: list[Module],
    graded: Module,
    earlier: Callable[[Module], str] = reference_source,
) -> Path:
    """A grading tree for `graded`, built once per distinct content of everything in it."""
    # Each earlier module's code, computed once: it names the tree and then fills it.
    before = {m.slug: earlier(m) for m in modules if m.number < graded.number}
    parts = [str(graded.number), sys.version, importlib.util.MAGIC_NUMBER]  # its bytecode is this Python's
    for module in modules:
        parts.append(before[module.slug] if module.slug in before else module.path.read_text())
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if path.parent != PACKAGE_ROOT / "core":
            parts.append(path.read_bytes())
    target = cache_dir() / f"{graded.slug}-{_digest(*parts)}"
    if (target / "complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{graded.slug}-", dir=target.parent))
    # Readable by the sandbox's uid (a grader running as root drops to one per slot), inside a
    # folder no other user can enter (cache_dir): the course commands' own umask is 077.
    with _TREE_UMASK:
        umask = os.umask(0o022)
        try:
            build_tree(building, modules, graded, lambda module: before[module.slug],
                       secret=earlier is reference_source)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        finally:
            os.umask(umask)
    (building / "complete").write_text("")
    try:
        building.rename(target)
    except OSError:  # built by another grader at the same time: theirs is as good
        shutil.rmtree(building, ignore_errors=True)
    return target
