"""tinyflo's steps in nbgrader's own pipeline, named by the course's nbgrader_config.py.

So plain `nbgrader autograde` and `nbgrader generate_feedback` in a course folder grade the
way `tinyflo course autograde` does:

* RestoreCourseCells (first step of autograde): the course's cells back in place, edited or
  deleted ones included (tinyflo.course.grading.restore_locked_cells);
* ScenarioGrade (in place of nbgrader's Execute): the submission is graded by tinyflo's engine
  (scenarios in the sandbox, verdicts in this process) and each grade cell gets the verdict as
  its only output: none when it passed, an error naming the failed check when it did not, which
  nbgrader's own rule turns into full or no points. No kernel runs, and nothing the student's
  code printed or raised reaches the notebook, the gradebook or the feedback page.

Only nbgrader imports this file, so it may import nbgrader.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from tinyflo.course.grading import DEFAULT_TIMEOUT, grade, restore_locked_cells
from tinyflo.course.kit import cached_tree
from tinyflo.course.notebooks import graded_source, read_notebook, require
from tinyflo.course.sandbox import NO_SANDBOX_VARIABLE, SLOT_VARIABLE, TIMEOUT_VARIABLE
from tinyflo.course.source import discover_modules, resolve_module

FAILED = "CheckFailed"  # the error a failed grade cell shows


class RestoreCourseCells(NbGraderPreprocessor):
    """The course's cells back in place before a submission is graded."""

    source_dir = Unicode("", help="the course's source/ folder").tag(config=True)

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources["nbgrader"]
        path = Path(self.source_dir) / info["assignment"] / f"{info['notebook']}.ipynb"
        source = graded_source(read_notebook(path), info["notebook"])
        return restore_locked_cells(nb, source), resources


class ScenarioGrade(NbGraderPreprocessor):
    """Grade the submission with tinyflo's engine and write each grade cell's verdict."""

    modules_dir = Unicode("", help="the course's modules/ folder").tag(config=True)
    key_file = Unicode("", help="the course's key: each student's inputs derive from it").tag(
        config=True
    )

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        nbformat = require("nbformat")
        info = resources["nbgrader"]
        modules = discover_modules(Path(self.modules_dir))
        module = resolve_module(modules, info["assignment"])
        timeout = int(os.environ.get(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT))
        sandboxed = os.environ.get(NO_SANDBOX_VARIABLE) != "1"
        key = Path(self.key_file).read_text(encoding="utf-8").strip()
        report = grade(
            nb,
            module,
            cached_tree(modules, module),
            timeout,
            sandboxed,
            hidden=True,
            student=str(info["student"]),
            key=key,
            slot=int(os.environ.get(SLOT_VARIABLE, "0")),
        )
        verdicts = {cell.grade_id: cell for cell in report.cells}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.execution_count = None
            meta = cell.metadata.get("nbgrader", {})
            verdict = verdicts.get(meta.get("grade_id")) if meta.get("grade") else None
            if not meta.get("grade") or (verdict is not None and verdict.passed):
                cell.outputs = []
                continue
            why = verdict.error if verdict is not None else "this cell is not one the course grades"
            cell.outputs = [
                nbformat.v4.new_output(
                    "error", ename=FAILED, evalue=why or "", traceback=[why or ""]
                )
            ]
        return nb, resources
