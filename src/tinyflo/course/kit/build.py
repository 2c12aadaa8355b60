"""The student kit: the wheel a student installs, with every graded region a stub, exactly as
in the release notebooks it carries, and its README."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from tinyflo.course.export import default_exp, render_init, target_path
from tinyflo.course.grader.tree import (
    PACKAGE_ROOT,
    cached_tree,
    copy_handwritten,
    release_notebook,
    stub_source,
)
from tinyflo.course.source import Module

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
    checks, reduced to their expected sides (tinyflo.course.grader.grading.expected_only)."""
    from tinyflo.course.grader.grading import (  # grading builds on this file: imported on use
        EXPECTED_NAME,
        expected_only,
        module_scenarios,
        visible_reference,
    )
    from tinyflo.course.grader.sandbox import bwrap_works

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
        copy_handwritten(package)
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
