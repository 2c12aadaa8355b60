"""`tinyflo module ...`: the student's loop in a workspace folder.

Layout of a workspace (--workspace, else $TINYFLO_WORKSPACE, else the workspace the current
folder is in, else ./workspace):

    01_tensor/tensor.ipynb          the student's notebook (`start`, never overwritten)
    01_tensor/tensor.backup-*.ipynb earlier notebooks kept by `reset`
    progress.json                   scores of the last `test` of each module
    package/tinyflo/core/tensor.py  the student's exported code (`complete`)

With TINYFLO_WORKSPACE pointing at the workspace, `import tinyflo.core.tensor` loads the
student's `package/tinyflo/core/tensor.py` instead of the reference (see core/__init__.py).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shlex
import time
from pathlib import Path

from tinyflo import environment, milestones
from tinyflo.course.export import default_exp, render_module, target_path
from tinyflo.course.grader.grading import (
    DEFAULT_TIMEOUT,
    GradeReport,
    grade,
    restore_locked_cells,
    visible_reference,
)
from tinyflo.course.grader.sandbox import bwrap_works
from tinyflo.course.grader.tree import cached_tree, reference_source, release_notebook
from tinyflo.course.notebooks import (
    notebook_cells,
    read_notebook,
    write_notebook,
)
from tinyflo.course.source import (
    CourseError,
    Module,
    discover_modules,
    find_modules_dir,
    make_folder,
    resolve_module,
)


def find_workspace(explicit: str | None = None, modules: list[Module] = ()) -> tuple[Path, str]:
    """The workspace folder and what chose it: the argument (--workspace), else $TINYFLO_WORKSPACE,
    else the workspace the current folder is in (found as git finds a repository: here or in a
    folder above, the first holding a started module's notebook), else ./workspace."""
    if explicit:
        return Path(explicit).expanduser().resolve(), "--workspace"
    try:
        variable = environment.read("TINYFLO_WORKSPACE")
    except environment.VariableError as error:
        raise CourseError(str(error)) from None
    if variable is not None:
        return variable.resolve(), "TINYFLO_WORKSPACE"
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if any(notebook_path(folder, module).is_file() for module in modules):
            return folder, f"the workspace {folder}"
    return here / "workspace", "the workspace (./workspace)"


def notebook_path(workspace: Path, module: Module) -> Path:
    """Where the student's notebook of `module` lives."""
    return workspace / module.slug / f"{module.name}.ipynb"


@functools.cache
def _exported_as(module: Module) -> str:
    """The dotted name `module`'s code is exported as (`core.tensor`), read once per module."""
    return default_exp(module.cells(), module.relpath())


def _own_code(workspace: Path, module: Module) -> Path:
    """Where `tinyflo module complete` puts the student's code of `module` in `workspace`."""
    return target_path(workspace / "package" / "tinyflo", _exported_as(module))


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _points(value: float) -> str:
    return f"{value:g}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Progress:
    """The workspace's progress.json: the last test result per module."""

    def __init__(self, workspace: Path):
        self.path = workspace / "progress.json"
        self.records: dict = {}
        if self.path.is_file():
            try:
                self.records = json.loads(self.path.read_text())
            except json.JSONDecodeError:
                raise CourseError(
                    f"{self.path} is damaged (not JSON); delete it, then run `tinyflo module test`"
                ) from None

    def record(self, module: Module, notebook: Path, report: GradeReport, completed: bool) -> None:
        """Remember a test result, and which version of the notebook earned it."""
        self.records[module.slug] = {
            "points": report.points,
            "max_points": report.max_points,
            "cells": report.by_id(),
            "notebook_sha256": _digest(notebook),
            "tested_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "completed": completed or self.records.get(module.slug, {}).get("completed", False),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.records, indent=2, sort_keys=True) + "\n")

    def forget(self, module: Module) -> None:
        """Drop the last test of `module` (its notebook was replaced)."""
        if self.records.pop(module.slug, None) is not None:
            self.path.write_text(json.dumps(self.records, indent=2, sort_keys=True) + "\n")

    def status(self, module: Module, notebook: Path) -> str:
        """One line for `module list`."""
        if not notebook.is_file():
            return "not started"
        record = self.records.get(module.slug)
        if record is None:
            return "started, not tested yet"
        score = f"{_points(record['points'])}/{_points(record['max_points'])} points"
        if record["notebook_sha256"] != _digest(notebook):
            return f"started, edited since the last test ({score})"
        if record["points"] == record["max_points"] and record["max_points"] > 0:
            done = ", completed" if record["completed"] else ""
            return f"tests passing ({score}){done}"
        return f"started, tests failing ({score})"


def _command(action: str, module: Module, flag: str) -> str:
    """The command a hint tells the student to run, with the --workspace they gave."""
    return f"tinyflo module {action} {module.slug}{flag}"


def _start(workspace: Path, module: Module, flag: str = "") -> int:
    path = notebook_path(workspace, module)
    if path.exists():
        print(
            f"{_shown(path)} already exists; keeping your work.\n"
            f"For a fresh copy (yours is backed up first): {_command('reset', module, flag)}"
        )
        return 0
    write_notebook(release_notebook(module), path)
    print(f"started {module.slug}: {_shown(path)}")
    return 0


def _not_completed(workspace: Path, module: Module, modules: list[Module]) -> list[Module]:
    """In a student kit, the earlier modules not completed in the workspace: the kit holds no
    reference code, so grading a module runs on the student's own code of every earlier one."""
    if not milestones.student_kit():
        return []  # a checkout grades on the reference where the student has not completed one
    return [m for m in modules if m.number < module.number and not _own_code(workspace, m).is_file()]


def _reset(workspace: Path, module: Module, flag: str = "") -> int:
    path = notebook_path(workspace, module)
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{module.name}.backup-{stamp}.ipynb")
        counter = 1
        while backup.exists():
            counter += 1
            backup = path.with_name(f"{module.name}.backup-{stamp}-{counter}.ipynb")
        path.rename(backup)
        print(f"your previous notebook is kept at {_shown(backup)}")
    write_notebook(release_notebook(module), path)
    Progress(workspace).forget(module)  # the last test was of the notebook kept aside
    print(f"fresh notebook: {_shown(path)}")
    return 0


def _own_or_reference(workspace: Path):
    """Earlier modules for grading: the student's completed code where there is some."""

    def source(module: Module) -> str:
        own = _own_code(workspace, module)
        return own.read_text(encoding="utf-8") if own.is_file() else reference_source(module)

    return source


def grade_module(
    workspace: Path,
    module: Module,
    modules: list[Module],
    completed: bool = False,
    timeout: int = DEFAULT_TIMEOUT,
    sandboxed: bool = True,
    flag: str = "",
) -> GradeReport:
    """Grade the student's notebook of `module`, print each grade cell, and record the result
    (`flag`: the --workspace the student gave, repeated in the hints)."""
    path = notebook_path(workspace, module)
    if not path.is_file():
        raise CourseError(
            f"{module.slug} is not started: no {_shown(path)}; "
            f"run `{_command('start', module, flag)}`"
        )
    problem = bwrap_works() if sandboxed else "--no-sandbox was given"
    if problem:
        print(f"note: grading outside the sandbox ({problem}); treat this grade as a self-check")
    print(
        f"grading {_shown(path)} (the checks you can see; your instructor's grading adds hidden "
        f"ones; {timeout} s per cell) ...",
        flush=True,
    )
    tree = cached_tree(modules, module, _own_or_reference(workspace))
    report = grade(
        read_notebook(path),
        module,
        tree,
        timeout,
        not problem,
        hidden=False,
        reference_record=visible_reference(module, tree, timeout, not problem),
    )
    width = max((len(cell.grade_id) for cell in report.cells), default=0)
    for cell in report.cells:
        verdict = cell.error or "passed"
        score = f"{_points(cell.points)}/{_points(cell.max_points)}"
        print(f"  {cell.grade_id:<{width}}  {score}  {verdict}")
    print(f"total: {_points(report.points)}/{_points(report.max_points)} points")
    Progress(workspace).record(module, path, report, completed and report.full_marks)
    return report


def _test(workspace: Path, module: Module, modules: list[Module], args, flag: str = "") -> int:
    report = grade_module(workspace, module, modules, False, args.timeout, args.sandboxed, flag)
    if not report.full_marks:
        print(f"not yet: fix the failing cells, then run `{_command('test', module, flag)}` again")
        return 1
    print(f"full marks. Next: {_command('complete', module, flag)}")
    return 0


def own_code(notebook, module: Module, flag: str = "") -> str:
    """The package file `module complete` writes: the course's cells as the release has them now
    (a kit built once the module closed carries the given fast forms of its tasks), with the
    student's answers from `notebook` in them."""
    mine = restore_locked_cells(notebook, release_notebook(module))
    return render_module(
        notebook_cells(mine),
        f"{module.slug}/{module.name}.ipynb",
        command="tinyflo module complete",
        advice=f"edit your notebook and run `{_command('complete', module, flag)}`",
    )


def _complete(workspace: Path, module: Module, modules: list[Module], args, flag: str = "") -> int:
    report = grade_module(workspace, module, modules, True, args.timeout, args.sandboxed, flag)
    if not report.full_marks:
        print(f"{module.slug} is not complete: every grade cell must pass first")
        return 1
    text = own_code(read_notebook(notebook_path(workspace, module)), module, flag)
    target = _own_code(workspace, module)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8", newline="\n")
    print(f"completed {module.slug}: your code is exported to {_shown(target)}")
    print(
        "To run tinyflo (milestones, the demo) on your own code:\n"
        f"  export TINYFLO_WORKSPACE={workspace}\n"
        f"Check with: python -c 'import tinyflo.{_exported_as(module)} as m; print(m.__file__)'"
    )
    return 0


def _list(workspace: Path, modules: list[Module], flag: str = "") -> int:
    if workspace.exists() and not workspace.is_dir():
        raise CourseError(f"the workspace {workspace} is a file, not a folder")
    progress = Progress(workspace)
    made = "" if workspace.is_dir() else f" (not made yet: `tinyflo module start 01{flag}` makes it)"
    print(f"workspace: {_shown(workspace)}{made}")
    width = max((len(module.name) for module in modules), default=6)
    for module in modules:
        status = progress.status(module, notebook_path(workspace, module))
        waits = _not_completed(workspace, module, modules)
        needs = f"  (runs on your code of modules before it: complete {_ranges(waits)} first)" if waits else ""
        print(f"  {module.number:02d}  {module.name:<{width}}  {status}{needs}")
    return 0


def _ranges(modules: list[Module]) -> str:
    """`01-04, 06`: module numbers, runs of consecutive ones joined."""
    runs: list[list[int]] = []
    for number in sorted(module.number for module in modules):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"{run[0]:02d}" if len(run) == 1 else f"{run[0]:02d}-{run[-1]:02d}" for run in runs)


def run(args: argparse.Namespace) -> int:
    """The `tinyflo module ACTION` command; returns the exit status."""
    modules = discover_modules(find_modules_dir(args.modules))
    workspace, where = find_workspace(args.workspace, modules)
    flag = f" --workspace {shlex.quote(args.workspace)}" if args.workspace else ""
    if args.action == "list":
        return _list(workspace, modules, flag)
    module = resolve_module(modules, args.module)  # a wrong module number makes no folder
    if workspace.exists() and not workspace.is_dir():
        raise CourseError(f"{where}: {workspace} is a file, not a folder")
    if args.action in ("start", "reset") and not workspace.is_dir():  # only what writes a notebook makes it:
        make_folder(workspace, where)  # one line now, not a traceback from the first write
    if workspace.is_dir() and not os.access(workspace, os.W_OK | os.X_OK):
        raise CourseError(f"{where}: cannot write into the folder {workspace}: it is read-only to you")
    missing = _not_completed(workspace, module, modules)
    if missing and args.action in ("test", "complete"):
        raise CourseError(
            f"{module.slug} runs on your code of every earlier module, and {', '.join(m.slug for m in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not completed in this workspace; first run "
            f"`{_command('complete', missing[0], flag)}`")
    if args.action in ("test", "complete"):
        action = {"test": _test, "complete": _complete}[args.action]
        return action(workspace, module, modules, args, flag)
    code = {"start": _start, "reset": _reset}[args.action](workspace, module, flag)
    if missing:
        print(f"note: {module.slug} runs on your code of every earlier module; before testing it, complete "
              f"{', '.join(m.slug for m in missing)} (`{_command('complete', missing[0], flag)}`)")
    return code
