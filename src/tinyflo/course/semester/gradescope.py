"""`tinyflo course gradescope MODULE`: a module as a Gradescope autograder, graded by tinyflo's engine.

Gradescope builds a container image from an autograder zip (running its `setup.sh` once, as
root), then, for each submission, runs `/autograder/run_autograder` as root with the student's
files in /autograder/submission and who submitted in /autograder/submission_metadata.json, and
takes the grade from /autograder/results/results.json (Gradescope's autograder specification).
The zip `export_autograder` writes holds:

* `setup.sh`: Python and bubblewrap from apt, a virtual environment in /opt/tinyflo-autograder,
  and this tinyflo (its wheel, in the zip) installed there;
* `run_autograder`: `python -I -m tinyflo.course.semester.gradescope /autograder`, i.e. `grade_submission`;
* the course's `modules/` (solutions and hidden checks) and `autograder.json`: the module, the
  course key and the time per cell.

`grade_submission` grades as `tinyflo course autograde` does: the same engine, scenarios and
limits, each student's own inputs (drawn from the course key, the submitters' emails and the
submission), the reference's run before any of the student's code. The code runs in bubblewrap
when the container lets bwrap start; otherwise the container is the sandbox (`sandbox.CONTAINER`):
before anything of the student's runs, /autograder (the zip's solutions and key, the
submission's metadata, the results) and the installed tinyflo (the reference of every module)
are closed to all but root, and the code runs as an unprivileged uid confined by Landlock (no
file outside the system, Python, the grading tree and /tmp: no /proc) and seccomp (no socket);
after each run its leftover processes are killed and what it left in /tmp is removed. A container
with neither is refused, in one line.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

from tinyflo.course.source import (
    NOTEBOOK_LIMIT,
    CourseError,
    Module,
    NotebookError,
    discover_modules,
    read_notebook_bytes,
    read_regular,
)

SETTINGS = "autograder.json"  # in the zip's root (/autograder/source/): module, key, timeout
VENV = "/opt/tinyflo-autograder"  # where setup.sh installs tinyflo in Gradescope's image
RESULTS = "results/results.json"  # under the autograder's root
# The grading slot (and so the uid) its runs take: none that `course autograde --jobs N` takes on
# the same machine, since every process of that uid is killed after each run.
SLOT = 4096

SETUP_SH = """#!/usr/bin/env bash
# tinyflo's autograder image, built once by Gradescope (as root): Python, bubblewrap (the sandbox,
# used when the container lets it start) and this course's tinyflo, whose wheel is in this zip.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends python3 python3-venv bubblewrap
python3 -m venv {venv}
{venv}/bin/pip install --no-cache-dir "/autograder/source/{wheel}[course]"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Grades /autograder/submission's notebook with tinyflo's engine; writes results/results.json.
set -euo pipefail
root="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
python={venv}/bin/python
[ -x "$python" ] || python="$(command -v python3)"
exec "$python" -I -m tinyflo.course.semester.gradescope "$root"
"""


def _wheel(out: Path) -> Path:
    """This tinyflo (the whole package: the grading engine and the reference) as a wheel in `out`."""
    from importlib.metadata import PackageNotFoundError, version

    from tinyflo.course.grader.tree import PACKAGE_ROOT
    from tinyflo.course.kit.build import write_wheel

    try:
        number = version("tinyflo")
    except PackageNotFoundError:
        number = "0.0.0"
    package = out / "package" / "tinyflo"
    shutil.copytree(PACKAGE_ROOT, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "release"))
    return write_wheel(out, package, number, "tinyflo, the course's grader (solutions inside: instructors only)")


def export_autograder(module: Module, modules: list[Module], key: str, timeout: int, out: Path) -> Path:
    """Write `out` (replaced atomically): the Gradescope autograder zip of `module`."""
    settings = {"module": module.slug, "notebook": f"{module.name}.ipynb", "key": key, "timeout": timeout}
    with tempfile.TemporaryDirectory(prefix="tinyflo-gradescope-") as staging:
        wheel = _wheel(Path(staging))
        files: dict[str, tuple[bytes, int]] = {
            "setup.sh": (SETUP_SH.format(venv=VENV, wheel=wheel.name).encode(), 0o755),
            "run_autograder": (RUN_AUTOGRADER.format(venv=VENV).encode(), 0o755),
            SETTINGS: ((json.dumps(settings, indent=1) + "\n").encode(), 0o600),
            wheel.name: (wheel.read_bytes(), 0o644),
        }
        for each in modules:  # every module: the earlier ones' reference fills the grading tree
            files[f"modules/{each.slug}/{each.path.name}"] = (each.path.read_bytes(), 0o644)
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, (content, mode) in files.items():
                entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                entry.external_attr = (stat.S_IFREG | mode) << 16
                archive.writestr(entry, content, zipfile.ZIP_DEFLATED)
    from tinyflo.core.checkpoints import atomic_write

    out.parent.mkdir(parents=True, exist_ok=True)
    # The course key and every solution: the instructor's alone from the first byte, whatever the umask.
    atomic_write(out, lambda f: (os.fchmod(f.fileno(), 0o600), f.write(data.getvalue())))
    return out


# --- in Gradescope's container ------------------------------------------------------------------


def _close(path: Path) -> None:
    """Only root may enter `path` from now on."""
    os.chmod(path, 0o700)


def _submitters(root: Path) -> str:
    """Who submitted (the emails Gradescope's metadata lists, joined for a group): whose inputs
    the hidden checks draw. Empty when the metadata says nobody."""
    try:
        metadata = json.loads(read_regular(root / "submission_metadata.json", 2**20))
        users = metadata.get("users") or []
        emails = sorted(str(user.get("email", "")).strip().lower() for user in users if isinstance(user, dict))
    except (OSError, ValueError, AttributeError):
        return ""
    return "+".join(email for email in emails if email)


def _notebook(folder: Path, name: str) -> tuple[Path | None, str]:
    """The submitted notebook (`name` anywhere in the submission, else its only notebook) and,
    when there is none to grade, why, for the student."""
    found = []
    for where, folders, files in os.walk(folder):  # links are not followed
        folders.sort()
        found += sorted(Path(where) / file for file in files if file.endswith(".ipynb"))
    named = [path for path in found if path.name == name]
    if len(named) == 1:
        return named[0], ""
    if not named and len(found) == 1:
        return found[0], ""
    shown = ", ".join(str(path.relative_to(folder)) for path in found[:5]) or "no notebook"
    return None, f"expected one notebook named {name}; the submission holds {shown}"


def _result(score: float, output: str, tests: list[dict], extra: dict) -> dict:
    return {"score": score, "output": output, "output_format": "text", "stdout_visibility": "hidden",
            "tests": tests, "extra_data": extra}


def grade_submission(root: Path) -> dict:
    """Grade the submission under `root` (Gradescope's /autograder) and write its results.json;
    returns what it wrote."""
    from tinyflo.course.grader.grading import grade, submission_inputs
    from tinyflo.course.grader.sandbox import CONTAINER, Limits, bwrap_works, landlock_abi
    from tinyflo.course.grader.tree import build_tree
    from tinyflo.course.notebooks import require

    if os.geteuid() != 0:
        raise CourseError("run_autograder runs as root (as Gradescope runs it): it grades the code as another user")
    settings = json.loads(read_regular(root / "source" / SETTINGS, 2**20))
    modules = discover_modules(root / "source" / "modules")
    module = next((m for m in modules if m.slug == settings["module"]), None)
    if module is None:
        raise CourseError(f"{SETTINGS}: module {settings['module']!r} is not in the autograder's modules/")
    import tinyflo

    _close(root)  # the solutions, the key, the metadata and the results: before anything of the student's runs
    sandboxed: bool | str = True if bwrap_works() is None else CONTAINER
    if sandboxed == CONTAINER and not landlock_abi():
        raise CourseError(f"this container confines nothing: {bwrap_works()}, and its kernel has no Landlock; "
                          "grade with `tinyflo course autograde` on a machine with bubblewrap instead")
    extra = {"tinyflo": tinyflo.__version__, "module": module.slug,
             "sandbox": "bubblewrap" if sandboxed is True else "the container, with Landlock"}
    path, problem = _notebook(root / "submission", settings["notebook"])
    if path is not None:
        try:
            data = read_regular(path, NOTEBOOK_LIMIT)
            read_notebook_bytes(data)  # what grading relies on, checked before nbformat reads it
            notebook = require("nbformat").reads(data.decode("utf-8"), as_version=4)
        except (OSError, NotebookError) as error:
            problem = f"{path.name} is not a notebook tinyflo can grade ({error})"
    if problem:
        results = _result(0.0, f"not graded: {problem}", [], extra)
    else:
        tree = Path(tempfile.mkdtemp(prefix="tinyflo-tree-"))
        try:
            build_tree(tree, modules, module)
            _close(Path(tinyflo.__file__).resolve().parent)  # the installed reference, once the tree is made of it
            timeout = int(settings["timeout"])
            report = grade(notebook, module, tree, timeout, sandboxed, hidden=True,
                           student=submission_inputs(_submitters(root), notebook), key=settings["key"],
                           limits=Limits(cell_timeout=timeout), slot=SLOT)
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        tests = [{"name": f"{module.slug} {cell.grade_id}", "score": cell.points, "max_score": cell.max_points,
                  "output": cell.error or "passed", "output_format": "text", "visibility": "visible"}
                 for cell in report.cells]
        results = _result(report.points, f"{module.slug}: {report.points:g} of {report.max_points:g} points",
                          tests, extra)
    from tinyflo.core.checkpoints import atomic_write

    (root / "results").mkdir(exist_ok=True)
    atomic_write(root / RESULTS, lambda f: f.write((json.dumps(results, indent=1) + "\n").encode()))
    return results


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m tinyflo.course.semester.gradescope AUTOGRADER_ROOT (Gradescope's /autograder)", file=sys.stderr)
        return 2
    try:
        results = grade_submission(Path(arguments[0]))
    except CourseError as error:
        print(f"tinyflo: {error}", file=sys.stderr)
        return 1
    print(results["output"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
