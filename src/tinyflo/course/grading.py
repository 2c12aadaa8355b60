"""Grade a student's notebook the way `nbgrader autograde` does, without a course folder.

Locked cells (given code and tests) are restored from the course's grading notebook, which
brings back the call that runs the hidden checks; the notebook runs top to bottom in a fresh
kernel inside the grading sandbox (tinyflo.course.sandbox); each grade cell scores with
nbgrader's own rule (full points unless it raised or wrote to stderr). Every cell has a time
limit; what went wrong is reported against the task and the student's own cell.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import functools
import json
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyflo.course.checks import scrub, secret_lines
from tinyflo.course.notebooks import graded_source, require
from tinyflo.course.sandbox import CHECKS_NAME

DEFAULT_TIMEOUT = 60  # seconds per cell; a cell may ask for more: tinyflo={"timeout": 300}
TIMEOUT_ERROR = "CellTimeoutError"
KERNEL_STOPPED = "KernelStopped"  # the error of a cell that did not run: see StopsLoopingKernels
INTERRUPT_GRACE = 5  # seconds a kernel has to answer after its cell was interrupted
_CELL_FILE = re.compile(r"\(\d+\.py, line (\d+)\)")  # IPython's name for a cell's code
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cell_timeout(cell: Any, default: int = DEFAULT_TIMEOUT) -> int:
    """The time limit of one cell: its own `tinyflo.timeout` metadata, else `default`."""
    asked = cell.get("metadata", {}).get("tinyflo", {}).get("timeout")
    return max(default, int(asked)) if isinstance(asked, (int, float)) else default


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
    sandboxed: bool = True

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


def _is_solution(cell: Any) -> bool:
    return bool(_nbgrader(cell).get("solution")) and not _nbgrader(cell).get("grade")


def restore_locked_cells(submission: Any, source: Any) -> Any:
    """The notebook to grade: the course's cells, with the student's answers in them.

    Every cell of `source` comes back in its order: given code, locked cells and grade cells
    as the course wrote them (edited or deleted ones restored), solution cells as the student
    wrote them (a deleted one comes back as its stub). Cells the student added stay where they
    were, after the course cell they followed. Copied or unknown grade ids earn nothing, and
    no student cell chooses its own time limit.
    """
    notebook = copy.deepcopy(source)
    answers: dict[str, Any] = {}
    added: dict[str | None, list[Any]] = {}
    known_ids = {cell.get("id") for cell in source.cells}
    anchor: str | None = None
    source_ids = {_nbgrader(cell).get("grade_id"): cell for cell in source.cells}
    source_ids.pop(None, None)
    for cell in submission.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        original = source_ids.get(grade_id)
        if original is not None and grade_id not in answers:
            answers[grade_id] = cell
            anchor = original.get("id")
            continue
        if cell.get("id") in known_ids and original is None and grade_id is None:
            anchor = cell.get("id")  # given code: the course's copy runs instead
            continue
        extra = copy.deepcopy(cell)
        extra.metadata.pop("nbgrader", None)
        extra.metadata.pop("tinyflo", None)
        added.setdefault(anchor, []).append(extra)
    cells = list(added.get(None, []))
    for cell in notebook.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        answer = answers.get(grade_id)
        if answer is not None and _is_solution(cell) and answer.cell_type == cell.cell_type:
            cell.source = answer.source
        cells.append(cell)
        cells.extend(added.get(cell.get("id"), []))
    for cell in cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.cells = cells
    return notebook


@functools.cache
def kernel_manager_class() -> type:
    """A kernel manager whose kernels start in the grading sandbox of one grading tree."""
    manager = require("jupyter_client.manager")
    traitlets = require("traitlets")

    class SandboxKernelManager(manager.AsyncKernelManager):
        tree = traitlets.Unicode("", help="the grading tree").tag(config=True)
        sandboxed = traitlets.Bool(True, help="run inside bubblewrap").tag(config=True)

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            """`python -m tinyflo.course.sandbox` with the tree, not the kernelspec's command."""
            command = [sys.executable, "-m", "tinyflo.course.sandbox", "--tree", self.tree]
            if not self.sandboxed:
                command.append("--no-sandbox")
            return [*command, "-f", self.connection_file, *(extra_arguments or [])]

        async def interrupt_kernel(self) -> None:
            # By message, not by signal: a SIGINT to the kernel's process group would reach
            # bubblewrap first, which dies and takes the kernel with it.
            if self.has_kernel:
                self._connect_control_socket()
                self.session.send(self._control_socket, self.session.msg("interrupt_request", {}))

    return SandboxKernelManager


def execute(
    notebook: Any,
    workdir: Path,
    tree: Path,
    timeout: int = DEFAULT_TIMEOUT,
    sandboxed: bool = True,
) -> str | None:
    """Run every cell in a fresh kernel in the grading sandbox; returns why the kernel died, if so."""
    nbclient = require("nbclient")
    traitlets_config = require("traitlets.config")
    with tempfile.TemporaryDirectory(prefix="tinyflo-kernel-") as scratch:
        config = traitlets_config.Config()
        # Unix sockets in a folder of our own instead of TCP ports: the sandbox has no network,
        # and a port picked for this kernel could be taken by another kernel starting beside it.
        config.SandboxKernelManager.transport = "ipc"
        config.SandboxKernelManager.ip = os.path.join(scratch, "kernel-ipc")
        config.SandboxKernelManager.connection_file = os.path.join(scratch, "kernel.json")
        config.SandboxKernelManager.tree = str(tree)
        config.SandboxKernelManager.sandboxed = sandboxed
        client = _grading_client_class()(
            notebook,
            config=config,
            kernel_manager_class=kernel_manager_class(),
            timeout=timeout,
            timeout_func=lambda cell: cell_timeout(cell, timeout),
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": TIMEOUT_ERROR, "evalue": "", "traceback": []},
            extra_arguments=["--HistoryManager.hist_file=:memory:"],  # as nbgrader's Execute does
            resources={"metadata": {"path": str(workdir)}},
        )
        log_path = Path(scratch) / "kernel-stderr.txt"
        # The kernel's own stderr carries launcher noise (cell output comes separately), but
        # when the kernel dies its last line says why.
        with open(log_path, "wb") as log:
            try:
                _execute_interruptibly(client, log)
            except nbclient.exceptions.DeadKernelError as error:
                return f"the kernel died ({_last_line(log_path) or error})"
            except RuntimeError as error:
                if "before replying to kernel_info" not in str(error) and "died" not in str(error):
                    raise
                return f"the kernel did not start ({_last_line(log_path) or error})"
            finally:
                # After a failed start nbclient has cleaned up but left its exit hook behind,
                # which would fail at interpreter exit; after a good run it is gone already.
                atexit.unregister(client._cleanup_kernel)
    return None


def _kill_kernel(km: Any) -> None:
    """Kill a kernel's process (in the sandbox: bubblewrap, which takes the kernel with it)."""
    process = getattr(getattr(km, "provisioner", None), "process", None)
    if process is not None and process.poll() is None:
        process.kill()


def _execute_interruptibly(client: Any, log: Any) -> None:
    """`client.execute()` in a worker thread, so that Ctrl-C reaches this one.

    A SIGINT inside nbclient's event loop ends in a cancelled task and a traceback; here the
    main thread catches it, kills the kernel (bubblewrap takes the sandbox with it) and
    raises a plain KeyboardInterrupt, which the command line reports in one line.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            client.execute(stderr=log)
        except BaseException as error:  # handed to the main thread
            failure.append(error)

    worker = threading.Thread(target=run, name="tinyflo-grading", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        _kill_kernel(client.km)
        worker.join(10)
        raise KeyboardInterrupt from None
    if failure:
        raise failure[0]


class StopsLoopingKernels:
    """For a notebook client (ours, or nbgrader's Execute): after each cell, record an error the
    cell hid; when a cell ran out of time and its kernel still does not answer a few seconds
    after the interrupt (a loop that swallows KeyboardInterrupt), stop the kernel and report
    every later cell as not run, instead of letting each wait out its own limit."""

    stopped: str | None = None

    async def on_cell_executed(self, cell: Any, execute_reply: dict, **_: Any) -> None:
        _record_unshown_error(cell, execute_reply)
        if self.stopped is not None:
            # Only now: stopped while its cell was still awaited, nbclient would call the
            # whole notebook's kernel dead.
            _kill_kernel(self.km)

    async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
        reply = await super()._async_handle_timeout(timeout, cell)  # interrupts the kernel
        try:
            await self.kc.kernel_info(reply=True, timeout=INTERRUPT_GRACE)
        except Exception:
            name = _nbgrader(cell).get("grade_id") or f"#{self.nb.cells.index(cell) + 1}"
            self.stopped = (
                f"not run: cell `{name}` kept running past its limit, so its kernel was stopped"
            )
            self.raise_on_iopub_timeout = False  # a looping kernel sends nothing more
        return reply

    async def async_execute_cell(
        self, cell: Any, cell_index: int, *args: Any, **kwargs: Any
    ) -> Any:
        if self.stopped is None or cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        nbformat = require("nbformat")
        cell.outputs = [
            nbformat.v4.new_output("error", ename=KERNEL_STOPPED, evalue=self.stopped, traceback=[])
        ]
        return cell

    def execute_cell(self, *args: Any, **kwargs: Any) -> Any:
        # nbconvert's ExecutePreprocessor (nbgrader's Execute) calls the synchronous form.
        return require("jupyter_core.utils").run_sync(self.async_execute_cell)(*args, **kwargs)


@functools.cache
def _grading_client_class() -> type:
    nbclient = require("nbclient")

    class GradingClient(StopsLoopingKernels, nbclient.NotebookClient):
        """nbclient's NotebookClient that stops a kernel which keeps looping."""

    return GradingClient


def _record_unshown_error(cell: Any, execute_reply: dict) -> None:
    """A cell whose reply is an error but that showed none (its code hid the traceback) fails.

    nbgrader's Execute does the same, so the two graders agree.
    """
    content = execute_reply.get("content", {})
    if content.get("status") != "error":
        return
    if any(o.output_type == "error" and o.ename == content.get("ename") for o in cell.outputs):
        return
    nbformat = require("nbformat")
    cell.outputs.append(
        nbformat.v4.new_output(
            "error",
            ename=content.get("ename", "Error"),
            evalue=content.get("evalue", ""),
            traceback=content.get("traceback") or ["the cell's code hid its error"],
        )
    )


_KERNEL_BANNER = ("--existing", "To connect another client", "NOTE:", "To exit, ", "To read more")


def _last_line(path: Path) -> str:
    """The last non-blank line of a kernel's log that is not its start-up banner, or ''."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    meaningful = (line.strip() for line in reversed(lines) if line.strip())
    return next((line for line in meaningful if not line.startswith(_KERNEL_BANNER)), "")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def _student_line(output: Any) -> str:
    """The line of the student's own code an error points at, from the kernel's traceback."""
    lines = [_plain(line) for entry in output.get("traceback", []) for line in entry.splitlines()]
    if output.ename in ("SyntaxError", "IndentationError", "TabError"):
        # IPython shows the offending line just above its caret line.
        for before, line in zip(lines, lines[1:]):
            if line.strip() and set(line.strip()) <= {"^", "~"}:
                return before.strip()
        return ""
    arrows = [line for line in lines if "---->" in line]
    if not arrows:
        return ""
    return arrows[-1].split("---->", 1)[1].strip().split(" ", 1)[-1].strip()


def _failure(cell: Any) -> str | None:
    """The first thing a student needs: the exception and their line, or what went to stderr."""
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            if output.ename == KERNEL_STOPPED:
                return output.evalue
            if output.ename == "NotImplementedError" and not output.evalue.startswith("tinyflo."):
                return "NotImplementedError: a solution is still the stub; write your code there"
            evalue = _CELL_FILE.sub(r"(line \1 of the cell)", output.evalue)
            text = f"{output.ename}: {evalue}" if evalue else output.ename
            line = "" if output.ename == "HiddenCheckFailed" else _student_line(output)
            return f"{text} (at `{line}`)" if line else text
        if output.output_type == "stream" and output.name == "stderr":
            first = next((line.strip() for line in output.text.splitlines() if line.strip()), "")
            return f"wrote to stderr, which nbgrader grades as a failure: {first}"
    return None


def _timed_out(cell: Any) -> bool:
    return any(
        o.output_type == "error" and o.ename == TIMEOUT_ERROR for o in cell.get("outputs", [])
    )


def score_cell(cell: Any, died: str | None = None) -> CellScore:
    """Score one executed grade cell with nbgrader's own `determine_grade`."""
    utils = require("nbgrader.utils")
    meta = _nbgrader(cell)
    max_points = float(meta["points"])
    if cell.cell_type == "code" and cell.execution_count is None and not cell.get("outputs"):
        return CellScore(meta["grade_id"], 0.0, max_points, died or "the cell did not run")
    points, _ = utils.determine_grade(cell)
    error = _failure(cell)
    if points is None:
        return CellScore(meta["grade_id"], 0.0, max_points, "needs manual grading in nbgrader")
    if points < max_points and error is None:
        error = "the cell reported partial credit"
    return CellScore(meta["grade_id"], float(points), max_points, error)


def _task_problems(cells: list[Any], timeout: int, course_ids: set[str]) -> dict[str, str]:
    """What went wrong in the student's code cells before each grade cell, against its task."""
    problems: dict[str, str] = {}
    pending: list[str] = []
    for number, cell in enumerate(cells, start=1):
        meta = _nbgrader(cell)
        if meta.get("grade"):
            if pending:
                problems[meta["grade_id"]] = pending[0]
            elif _timed_out(cell):
                limit = cell_timeout(cell, timeout)
                problems[meta["grade_id"]] = (
                    f"the tests in cell `{meta['grade_id']}` ran past {limit} s and were stopped: "
                    "your code loops, or is far too slow"
                )
            pending = []
            continue
        if cell.cell_type != "code":
            continue
        if not (_is_solution(cell) or cell.get("id") not in course_ids):
            continue  # given code: its errors follow from the student's, reported there
        name = meta.get("grade_id") or f"#{number} (a cell you added)"
        if _timed_out(cell):
            limit = cell_timeout(cell, timeout)
            pending.append(f"your code in cell `{name}` ran past {limit} s and was stopped")
        elif not any(o.get("ename") == KERNEL_STOPPED for o in cell.get("outputs", [])):
            failure = _failure(cell)
            if failure and not failure.startswith("wrote to stderr"):
                pending.append(f"your code in cell `{name}` failed: {failure}")
    return problems


def tree_secrets(tree: Path) -> list[str]:
    """The hidden-check lines of a grading tree, to scrub from what the student reads."""
    path = tree / CHECKS_NAME
    return secret_lines(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else []


def grade(
    submission: Any,
    source: Any,
    workdir: Path,
    tree: Path,
    timeout: int = DEFAULT_TIMEOUT,
    sandboxed: bool = True,
    released: bool = False,
) -> GradeReport:
    """Restore the course's cells from `source` (the grading notebook), run, and score it.

    `released`: `source` is a release notebook (a student kit's), already without solutions.
    """
    graded = copy.deepcopy(source) if released else graded_source(source)
    notebook = restore_locked_cells(submission, graded)
    died = execute(notebook, workdir, tree, timeout, sandboxed)
    problems = _task_problems(notebook.cells, timeout, {cell.get("id") for cell in graded.cells})
    executed = {
        _nbgrader(cell)["grade_id"]: cell for cell in notebook.cells if _nbgrader(cell).get("grade")
    }
    results = []
    hidden = tree_secrets(tree)
    for cell in graded.cells:
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            continue
        score = score_cell(executed[meta["grade_id"]], died)
        problem = problems.get(meta["grade_id"])
        if problem:
            score = dataclasses.replace(
                score, error=problem if not score.passed else f"passed, but {problem}"
            )
        if score.error:
            score = dataclasses.replace(score, error=scrub(score.error, hidden))
        results.append(score)
    return GradeReport(tuple(results), sandboxed)


def scrub_notebook(notebook: Any, lines: list[str]) -> Any:
    """Every output of `notebook` with hidden-check code replaced (see checks.scrub)."""
    if not lines:
        return notebook
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output.text = scrub(output.text, lines)
            if "evalue" in output:
                output.evalue = scrub(output.evalue, lines)
                output.traceback = [scrub(entry, lines) for entry in output.traceback]
            for kind, value in output.get("data", {}).items():
                if isinstance(value, str) and kind.startswith("text/"):
                    output.data[kind] = scrub(value, lines)
    return notebook
