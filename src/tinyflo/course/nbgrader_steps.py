"""tinyflo's steps in nbgrader's own pipeline, named by the course's nbgrader_config.py.

So plain `nbgrader autograde` and `nbgrader generate_feedback` in a course folder grade the
way `tinyflo module test` does:

* RestoreCourseCells (first step of autograde): the course's cells back in place, edited or
  deleted ones included (tinyflo.course.grading.restore_locked_cells);
* SandboxExecute (replaces nbgrader's Execute): a kernel that keeps looping after its cell's
  time ran out is stopped, and the cells after it are reported as not run;
* ScrubHiddenChecks (first step of feedback): no output shows a line of hidden-check code.

Only nbgrader imports this file, so it may import nbgrader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode

from tinyflo.course.grading import (
    StopsLoopingKernels,
    restore_locked_cells,
    scrub_notebook,
    tree_secrets,
)
from tinyflo.course.notebooks import graded_source, read_notebook


class RestoreCourseCells(NbGraderPreprocessor):
    """The course's cells back in place before a submission runs."""

    source_dir = Unicode("", help="the course's source/ folder").tag(config=True)

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources["nbgrader"]
        path = Path(self.source_dir) / info["assignment"] / f"{info['notebook']}.ipynb"
        source = graded_source(read_notebook(path), info["notebook"])
        return restore_locked_cells(nb, source), resources


class SandboxExecute(StopsLoopingKernels, Execute):
    """nbgrader's Execute, stopping a kernel that keeps looping after its cell's time ran out."""


class ScrubHiddenChecks(NbGraderPreprocessor):
    """No output of a feedback page shows a line of a hidden check's code."""

    grading_dir = Unicode("", help="the course's grading/ folder").tag(config=True)

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        tree = Path(self.grading_dir) / resources["nbgrader"]["assignment"]
        return scrub_notebook(nb, tree_secrets(tree)), resources
