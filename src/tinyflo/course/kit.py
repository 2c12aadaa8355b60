"""What grading and students get from the modules: grading trees, hidden checks, the student kit.

* `grading_notebook(module)`: the instructor's notebook with every hidden region replaced by
  a placeholder line (course/source/ holds this; nbgrader restores its grade cells, so the
  hidden code itself is in no notebook).
* `build_tree(...)`: the `tinyflo` package a grading kernel imports — working code for the
  modules before the graded one, hollow copies (see tinyflo.course.sandbox.hollow) of the
  graded module and every later one.
* `build_student_kit(...)`: the wheel a student installs: the package with every graded
  region a stub, exactly as in the release notebooks, which it carries.
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
from tinyflo.course.notebooks import (
    grading_notebook,
    instructor_notebook,
    notebook_cells,
    student_notebook,
    withheld_task,
)
from tinyflo.course.sandbox import PACKAGE_DIR, hollow
from tinyflo.course.source import CourseError, Module, make_folder

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the calling environment's tinyflo/


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
    secret: bool | None = None,
) -> Path:
    """Write the grading tree of `graded` into `target` (replaced); returns `target`.

    `secret`: the earlier modules' code is the reference (the default when `earlier` is
    `reference_source`), kept as bytecode only."""
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
    (tinyflo.course.runner.preload), and nothing in the sandbox can read them as source."""
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


# --- the student kit --------------------------------------------------------------------------

KIT_EXTRAS = (
    "course",
    "gpu",
    "gpu-cuda12",
    "gpu-cuda13",
)  # what a student may add: the course tools, a GPU
# JupyterLab in a student's environment: nbgrader's instructor tools switched off (its
# create-assignment panel, formgrader and course list), Validate and the assignment list kept.
INSTRUCTOR_PLUGINS = (
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
)
# And JupyterLab's news: its "get notified about Jupyter news?" prompt covers the first task.
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
INSTRUCTOR_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
)
STUDENT_JUPYTER_CONFIG = {
    # Later files of a .d folder win: this one sorts after nbgrader.json.
    "jupyter_server_config.d/tinyflo-student.json": {
        "ServerApp": {"jpserver_extensions": dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, False)}
    },
    "labconfig/page_config.d/tinyflo-student.json": {
        "disabledExtensions": dict.fromkeys((*INSTRUCTOR_PLUGINS, NEWS_PLUGIN), True)
    },
}
RELEASE_DIR = PACKAGE_ROOT / "course" / "release"  # where a kit carries its notebooks


def _requirements() -> tuple[list[str], dict[str, list[str]]]:
    """This tinyflo's own dependencies, and those of the extras a student kit offers."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        found = requires("tinyflo") or []
    except PackageNotFoundError:
        found = []
    base: list[str] = []
    extras: dict[str, list[str]] = {extra: [] for extra in KIT_EXTRAS}
    for line in found:
        requirement, _, marker = line.partition(";")
        if not marker:
            base.append(requirement.strip())
            continue
        for extra in KIT_EXTRAS:
            if f'extra == "{extra}"' in marker:
                extras[extra].append(requirement.strip())
    return base or ["numpy>=1.26", "matplotlib>=3.7", "tqdm>=4.66"], extras


def _entry_points() -> str:
    """This tinyflo's entry points (the command, the Trainer's plug-ins), for the kit's wheel to declare too."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("tinyflo").read_text("entry_points.txt")
    except PackageNotFoundError:
        text = None
    return text or "[console_scripts]\ntinyflo = tinyflo.cli:main\n"


def write_wheel(out: Path, package: Path, version: str,
                summary: str = "tinyflo, the course kit: every graded part left for you to write") -> Path:
    """Pack `package` (a tinyflo/ folder) into a pure-Python wheel (PEP 427) in `out`.

    The format is a zip with a .dist-info folder; writing it directly needs no build tool
    or network on the instructor's machine.
    """
    import base64
    import zipfile

    base, extras = _requirements()
    info = f"tinyflo-{version}.dist-info"
    requires = [f"Requires-Dist: {r}" for r in base]
    for extra, reqs in extras.items():
        requires += [f"Provides-Extra: {extra}"]
        requires += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    meta = {
        f"{info}/METADATA": "\n".join(
            [
                "Metadata-Version: 2.1",
                "Name: tinyflo",
                f"Version: {version}",
                f"Summary: {summary}",
                "Requires-Python: >=3.10",
                *requires,
            ]
        )
        + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tinyflo course release\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": _entry_points(),
    }
    files = {
        f"tinyflo/{path.relative_to(package).as_posix()}": path.read_bytes()
        for path in sorted(package.rglob("*"))
        if path.is_file()
    } | {name: text.encode() for name, text in meta.items()}
    # Installed into the environment's etc/jupyter/ (the wheel's data scheme).
    for name, config in STUDENT_JUPYTER_CONFIG.items():
        data = (json.dumps(config, indent=1) + "\n").encode()
        files[f"tinyflo-{version}.data/data/etc/jupyter/{name}"] = data
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out / f"tinyflo-{version}-py3-none-any.whl"
    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data, zipfile.ZIP_DEFLATED)
    partial.replace(wheel)
    return wheel


MILESTONES_DIR = "milestones"  # in a kit's tinyflo/course/: the milestone notebooks


def _copy_milestones(modules: list[Module], target: Path) -> None:
    """The checkout's milestone notebooks (percent files, not their recorded results)."""
    source = modules[0].path.parents[2] / "milestones" if modules else None
    if source is None or not source.is_dir():
        return
    for script in sorted(source.glob("[0-9][0-9]_*/*.py")):
        destination = target / script.parent.name / script.name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(script, destination)


def _write_expected(folder: Path, modules: list[Module], module: Module) -> None:
    """What `tinyflo module test` compares with in a kit: the reference's run of the visible
    checks, reduced to their expected sides (tinyflo.course.grading.expected_only)."""
    from tinyflo.course.grading import (  # grading builds on this file: imported on use
        EXPECTED_NAME,
        expected_only,
        module_scenarios,
        visible_reference,
    )
    from tinyflo.course.sandbox import bwrap_works

    if module.released:
        source = module.path.parent / EXPECTED_NAME
        if source.is_file():
            shutil.copyfile(source, folder / EXPECTED_NAME)
        return
    record = visible_reference(module, cached_tree(modules, module), sandboxed=not bwrap_works())
    data = expected_only(record, module_scenarios(module, False))
    (folder / EXPECTED_NAME).write_text(json.dumps(data), encoding="utf-8")


def kit_readme(wheel: str) -> str:
    """The README of a student kit: the one command that installs it, and the loop."""
    return (
        "# tinyflo: your course kit\n\n"
        "Install it (Python 3.10 or newer) into a virtual environment of its own, in this\n"
        "folder: make the environment, switch to it, install the kit:\n\n"
        "    python3 -m venv .venv\n"
        "    source .venv/bin/activate        # on Windows: .venv\\Scripts\\activate\n"
        f"    pip install '{wheel}[course]'\n\n"
        "(On Debian or Ubuntu, `python3 -m venv` needs the `python3-venv` package.) In each\n"
        "new terminal, `source .venv/bin/activate` again before the commands below.\n\n"
        "Then, in the folder where you want to work:\n\n"
        "    tinyflo module list            # the modules and your progress\n"
        "    tinyflo module start 01        # writes workspace/01_tensor/tensor.ipynb\n"
        "    jupyter lab workspace/         # fill in the YOUR CODE HERE cells\n"
        "    tinyflo module test 01         # runs the tests you can see, points per task\n"
        "    tinyflo module complete 01     # tests, then makes your code the package's\n"
        "    tinyflo module reset 01        # a fresh notebook (yours is backed up first)\n"
        "    TINYFLO_WORKSPACE=$PWD/workspace tinyflo milestone run perceptron\n\n"
        "Modules build on each other, in order: module 05 runs on your code of modules\n"
        "01 to 04, so `tinyflo module test 05` needs those completed first\n"
        "(`tinyflo module complete 01`, then 02, ...). `tinyflo module list` says, for each\n"
        "module, which earlier ones it still waits for.\n\n"
        "The package in this kit has every graded part of every module left for you to\n"
        "write, exactly as in the notebooks: later modules and milestones run on the\n"
        "modules you completed (`export TINYFLO_WORKSPACE=$PWD/workspace`).\n"
        "`tinyflo module test` runs the visible tests only; your instructor grades your\n"
        "notebook with hidden checks as well, in a sandbox where the modules from the one\n"
        "being graded on are empty, so your own code is what earns the points. Each task's\n"
        "text lists what those hidden checks enforce, under *Checked when graded*, and\n"
        "their inputs are drawn for your submission alone. Tests you change in your\n"
        "notebook are put back when it is graded.\n"
    )


def build_student_kit(out: Path, modules: list[Module], version: str | None = None,
                      delivered: frozenset[str] = frozenset()) -> Path:
    """Build the student kit into `out` (replaced): the stub wheel and its README; the wheel.

    `delivered`: the modules whose withheld fast forms it carries (every task of theirs is
    closed: no submission can earn its points any more)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    from tinyflo.course.notebooks import write_notebook

    try:
        version = version or installed_version("tinyflo")
    except PackageNotFoundError:
        version = "0.0.0"
    with tempfile.TemporaryDirectory(prefix="tinyflo-kit-") as staging:
        package = Path(staging) / "tinyflo"
        _copy_handwritten(package)
        produced = []
        for module in modules:
            dotted = default_exp(module.cells(), module.relpath())
            produced.append((dotted, module.relpath()))
            path = target_path(package, dotted)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(stub_source(module, module.slug in delivered), encoding="utf-8")
            release = release_notebook(module, module.slug in delivered)
            folder = package / "course" / "release" / module.slug
            write_notebook(release, folder / module.path.with_suffix(".ipynb").name)
            _write_expected(folder, modules, module)
        (package / "core" / "__init__.py").write_text(render_init("core", produced))
        _copy_milestones(modules, package / "course" / MILESTONES_DIR)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        wheel = write_wheel(out, package, version)
    (out / "README.md").write_text(kit_readme(wheel.name), encoding="utf-8")
    return wheel
