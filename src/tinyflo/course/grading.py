"""Grade a student's notebook the way `nbgrader autograde` does, without a course folder.

Locked cells (tests) are restored from the instructor's notebook, which brings the
hidden tests back; the notebook runs top to bottom in a fresh kernel; each grade cell
scores with nbgrader's own rule (full points unless it raised or wrote to stderr).
"""

from __future__ import annotations

import atexit
import copy
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyflo.course.notebooks import graded_source, require
from tinyflo.course.source import CourseError

DEFAULT_TIMEOUT = 600  # seconds per cell: module tests may train small models
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class CellScore:
    """The result of one grade cell."""

    grade_id: str
    points: float
    max_points: float
    error: str | None = None  # why points were lost, for a person

    @property
    def passed(self) -> bool:
        """True when the cell earned all its points."""
        return self.points == self.max_points


@dataclass(frozen=True)
class GradeReport:
    """Scores of every grade cell of one notebook, in notebook order."""

    cells: tuple[CellScore, ...]

    @property
    def points(self) -> float:
        """Points earned."""
        return sum(cell.points for cell in self.cells)

    @property
    def max_points(self) -> float:
        """Points available."""
        return sum(cell.max_points for cell in self.cells)

    @property
    def full_marks(self) -> bool:
        """True when every grade cell earned all its points (and there was something to earn)."""
        return self.max_points > 0 and all(cell.passed for cell in self.cells)

    def by_id(self) -> dict[str, float]:
        """Points per grade id."""
        return {cell.grade_id: cell.points for cell in self.cells}


def _nbgrader(cell: Any) -> dict:
    return cell.metadata.get("nbgrader", {})


def restore_locked_cells(submission: Any, source: Any) -> Any:
    """Overwrite the submission's locked cells from `source`, like nbgrader's OverwriteCells."""
    originals = {_nbgrader(cell).get("grade_id"): cell for cell in source.cells}
    originals.pop(None, None)
    notebook = copy.deepcopy(submission)
    seen: set[str] = set()
    for cell in notebook.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id is None:
            continue
        original = originals.get(grade_id)
        if original is None or grade_id in seen:
            # An unknown or copied grade cell runs, but earns nothing.
            del cell.metadata["nbgrader"]
            continue
        seen.add(grade_id)
        cell.metadata["nbgrader"] = copy.deepcopy(original.metadata["nbgrader"])
        if original.cell_type != cell.cell_type or original.metadata["nbgrader"].get("locked"):
            cell.cell_type = original.cell_type
            cell.source = original.source
            if cell.cell_type == "code":
                cell.setdefault("outputs", [])
                cell.setdefault("execution_count", None)
            else:
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
    return notebook


def execute(notebook: Any, workdir: Path, timeout: int = DEFAULT_TIMEOUT) -> str | None:
    """Run every cell in a fresh python3 kernel in `workdir`; returns why the kernel died, if so."""
    nbclient = require("nbclient")
    kernelspec = require("jupyter_client.kernelspec")
    traitlets_config = require("traitlets.config")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory(prefix="tinyflo-kernel-") as scratch:
        config = traitlets_config.Config()
        if os.name == "posix":
            # Unix sockets in a folder of our own instead of TCP ports: a port picked for this
            # kernel can be taken by another kernel starting at the same moment (nbgrader
            # grading beside us), and the kernel then dies before it ever replies.
            config.KernelManager.transport = "ipc"
            config.KernelManager.connection_file = os.path.join(scratch, "kernel.json")
        client = nbclient.NotebookClient(
            notebook,
            config=config,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={
                "ename": "CellTimeoutError",
                "evalue": f"the cell ran longer than {timeout} s",
                "traceback": [f"CellTimeoutError: the cell ran longer than {timeout} s"],
            },
            extra_arguments=["--HistoryManager.hist_file=:memory:"],  # as nbgrader's Execute does
            resources={"metadata": {"path": str(workdir)}},
        )
        log_path = Path(scratch) / "kernel-stderr.txt"
        # The kernel's own stderr carries launcher noise (cell output comes separately), but
        # when the kernel dies its last line says why.
        with open(log_path, "wb") as log:
            try:
                client.execute(stderr=log)
            except nbclient.exceptions.DeadKernelError as error:
                return f"the kernel died ({_last_line(log_path) or error})"
            except kernelspec.NoSuchKernel:
                raise CourseError(
                    "cannot start a `python3` Jupyter kernel to run the notebook: "
                    "pip install ipykernel"
                ) from None
            except RuntimeError as error:
                if "before replying to kernel_info" not in str(error):
                    raise
                return f"the kernel did not start ({_last_line(log_path) or error})"
            finally:
                # After a failed start nbclient has cleaned up but left its exit hook behind,
                # which would fail at interpreter exit; after a good run it is gone already.
                atexit.unregister(client._cleanup_kernel)
    return None


def _last_line(path: Path) -> str:
    """The last non-blank line of a text file, or ''."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _failure(cell: Any) -> str | None:
    """The first line a student needs: the exception, or what went to stderr."""
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            if output.evalue:
                return f"{output.ename}: {output.evalue}"
            if output.ename == "NotImplementedError":
                return "NotImplementedError: a solution is still the stub; write your code there"
            # A bare `assert x == y` has no message: show the line that failed instead.
            arrows = [line for line in map(_plain, output.traceback) if "---->" in line]
            if not arrows:
                return output.ename
            failing = arrows[-1].split("---->", 1)[1].strip().split(" ", 1)[-1]
            return f"{output.ename} at `{failing.strip()}`"
        if output.output_type == "stream" and output.name == "stderr":
            first = next((line.strip() for line in output.text.splitlines() if line.strip()), "")
            return f"wrote to stderr, which nbgrader grades as a failure: {first}"
    return None


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def score_cell(cell: Any, died: str | None = None) -> CellScore:
    """Score one executed grade cell with nbgrader's own `determine_grade`."""
    utils = require("nbgrader.utils")
    meta = _nbgrader(cell)
    max_points = float(meta["points"])
    if cell.cell_type == "code" and cell.execution_count is None:
        return CellScore(meta["grade_id"], 0.0, max_points, died or "the cell did not run")
    points, _ = utils.determine_grade(cell)
    error = _failure(cell)
    if points is None:
        return CellScore(meta["grade_id"], 0.0, max_points, "needs manual grading in nbgrader")
    if points < max_points and error is None:
        error = "the cell reported partial credit"
    return CellScore(meta["grade_id"], float(points), max_points, error)


def grade(
    submission: Any, instructor: Any, workdir: Path, timeout: int = DEFAULT_TIMEOUT
) -> GradeReport:
    """Restore tests from the instructor's notebook, run the submission, and score it."""
    source = graded_source(instructor)
    notebook = restore_locked_cells(submission, source)
    died = execute(notebook, workdir, timeout)
    executed = {
        _nbgrader(cell)["grade_id"]: cell for cell in notebook.cells if _nbgrader(cell).get("grade")
    }
    results = []
    for cell in source.cells:
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            continue
        if meta["grade_id"] in executed:
            results.append(score_cell(executed[meta["grade_id"]], died))
        else:
            results.append(
                CellScore(
                    meta["grade_id"], 0.0, float(meta["points"]), "the grade cell was deleted"
                )
            )
    return GradeReport(tuple(results))
