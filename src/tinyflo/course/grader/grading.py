"""Grade a student's notebook: the course's cells restored, scenarios run, verdicts made apart.

The course's cells (given code, tests) come back from the course; the student's solution cells
are kept and cells they added are left out. The notebook's code then runs in the grading
sandbox (tinyflo.course.grader.sandbox, tinyflo.course.grader.runner) with each grade cell replaced by its
*student scenario* (tinyflo.course.grader.scenarios), and separately, with the same inputs, against
the reference. The trusted grader (tinyflo.course.grader.verdicts) compares the two runs' values check
by check; a task earns its points when every check holds. What a student reads comes from
these records only: points, each failed check's message, and where their own code raised or
looped, never what their code printed or raised as text.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyflo.course.grader.engine import MAX_LINE, RunRecord, one_line, run_job
from tinyflo.course.grader.sandbox import Limits
from tinyflo.course.grader.scenarios import (
    TEXT,
    TYPE,
    VALUE,
    Check,
    TaskScenario,
    bound_names,
    build_task,
    names_read,
    pure_helpers,
    visible_source,
)
from tinyflo.course.grader.verdicts import (
    BadValue,
    Helpers,
    TypeInfo,
    decide,
    reference_values,
    student_values,
)
from tinyflo.course.notebooks import graded_source, grading_notebook, instructor_notebook
from tinyflo.course.source import CourseError, Module

DEFAULT_TIMEOUT = 60  # seconds per cell; a cell may ask for more: tinyflo={"timeout": 300}
VISIBLE_SEED = "visible"  # `tinyflo module test`: the visible scenarios, one fixed seed


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
    sandboxed: bool | str = True  # False: graded unconfined, not for credit

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


# --- scenarios of a module ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleScenarios:
    """Every grade cell of a module as scenarios, for one scope (visible only, or all)."""

    tasks: dict[str, TaskScenario]
    helpers: dict[str, str]  # the module's own comparison helpers, as source

    def check(self, check_id: str) -> Check | None:
        task = self.tasks.get(check_id.rsplit("/", 1)[0])
        return next((c for c in task.checks if c.id == check_id), None) if task else None


@functools.lru_cache(maxsize=32)
def _module_scenarios(path: Path, text: str, module: Module, hidden: bool) -> ModuleScenarios:
    notebook = instructor_notebook(module)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    course = [c.source for c in code if not _nbgrader(c).get("grade") and not _is_solution(c)]
    helpers = pure_helpers(course)
    tasks: dict[str, TaskScenario] = {}
    owned: set[str] = set()  # names the course's cells before this one bound
    read = [names_read(c.source) for c in code]  # each cell parsed once, not once per grade cell
    for index, cell in enumerate(code):
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            if not _is_solution(cell):
                owned |= bound_names(cell.source)
            continue
        others = frozenset().union(*(names for at, names in enumerate(read) if at != index))
        try:
            tasks[meta["grade_id"]] = build_task(
                meta["grade_id"], cell.source, hidden, frozenset(helpers), others, frozenset(owned)
            )
        except (SyntaxError, ValueError) as error:
            raise CourseError(
                f"{module.relpath()}, grade cell {meta['grade_id']!r}: {error}"
            ) from None
        owned |= tasks[meta["grade_id"]].binds
    return ModuleScenarios(tasks, helpers)


# CPython 3.11 counts the depth of AST conversions in state shared by threads: two threads
# parsing at once can fail with "AST constructor recursion depth mismatch". One at a time.
_AST_LOCK = threading.Lock()


def module_scenarios(module: Module, hidden: bool = True) -> ModuleScenarios:
    """The scenarios of every grade cell of `module` (hidden checks too, unless `hidden` is
    False: what `tinyflo module test` runs)."""
    with _AST_LOCK:
        return _module_scenarios(module.path, module.path.read_text("utf-8"), module, hidden)


def submission_inputs(student: str, notebook: Any) -> str:
    """Whose inputs a submission's hidden checks draw (`seed_for`'s `student`): the student's
    and this submission's code. The same notebook graded again draws the same inputs; handed
    in changed, it draws new ones, so what one graded submission showed (a value its hidden
    checks drew, what was expected of it) says nothing about the next one's."""
    sha = hashlib.sha256()
    for cell in notebook.cells:
        if cell.cell_type == "code" and _is_solution(cell):
            sha.update(str(_nbgrader(cell).get("grade_id")).encode() + b"\0")
            sha.update(cell.source.encode("utf-8", "surrogatepass") + b"\0")
    return f"{student}/{sha.hexdigest()[:16]}"


def seed_for(key: str, student: str, module: str, task: str) -> int:
    """The seed of one task's random inputs: the course's key, the student and the task."""
    digest = hashlib.sha256("\0".join((key, student, module, task)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


# --- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobCell:
    """One cell of a job, as the report names it."""

    name: str  # grade id, or `#N (a course cell)`
    student: bool
    source: str
    task: str | None = None


def _job(
    cells: list[Any],
    scenarios: ModuleScenarios,
    reference: bool,
    timeout: int,
    seeds: dict[str, int],
    course_ids: set,
) -> tuple[dict, list[JobCell]]:
    """The runner's job for a notebook's cells (course cells restored), and its cells' names."""
    job_cells, named = [], []
    modes: dict[str, list[str]] = {}
    for number, cell in enumerate(cells, start=1):
        if cell.cell_type != "code":
            continue
        meta = _nbgrader(cell)
        limit = cell_timeout(cell, timeout)
        if meta.get("grade"):
            task = scenarios.tasks.get(meta["grade_id"])
            if task is None:
                continue
            source = task.reference_code if reference else task.student_code
            job_cells.append(
                {"kind": "task", "task": task.task, "source": source, "timeout": limit,
                 "binds": sorted(task.binds)}
            )
            named.append(JobCell(meta["grade_id"], False, cell.source, task.task))
            for check in task.checks:
                modes[check.id] = [
                    op.mode if (reference or op.student) else "discard"
                    for op in check.operands
                    if reference or op.evaluated
                ]
            continue
        if cell.get("id") not in course_ids:
            continue  # a cell the student added: not part of the module's code
        student = _is_solution(cell)
        job_cells.append(
            {"kind": "code", "source": cell.source, "timeout": limit, "student": student,
             "binds": [] if student else sorted(bound_names(cell.source))}
        )
        named.append(JobCell(meta.get("grade_id") or f"#{number}", student, cell.source))
    return {"cells": job_cells, "modes": modes, "seeds": seeds}, named


# --- verdicts -----------------------------------------------------------------------------------


def _line(source: str, number: int) -> str:
    lines = source.splitlines()
    return one_line(lines[number - 1], 120) if 0 < number <= len(lines) else ""


def _place(named: list[JobCell], at: list | None) -> str:
    """`cell `x`, line 3: `return a + b`` for a place in the student's own code."""
    if not at or not 0 <= at[0] < len(named) or not named[at[0]].student:
        return ""
    cell = named[at[0]]
    text = _line(cell.source, at[1])
    return f"cell `{cell.name}`, line {at[1]}" + (f": `{text}`" if text else "")


SHOWN_VALUE = 120  # characters of a value shown beside a failed visible check
SEEDED_NOTE = ("the values compared follow a seeded draw: where your code draws random numbers, a "
               "valid draw made otherwise than the task says (another call, order or dtype) differs "
               "from the reference's draw")


def _value_text(value: Any) -> str:
    """A value as the student would print it, cut to SHOWN_VALUE characters."""
    if isinstance(value, np.ndarray):
        with np.printoptions(threshold=20, edgeitems=3, precision=6):
            text = f"array({np.array2string(value, separator=', ')}, dtype={value.dtype}, shape={value.shape})"
    elif isinstance(value, np.generic):
        text = f"{value.item()!r} ({value.dtype})"
    else:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 1] + "…"


def _failing_part(condition: tuple, check: Check, mine: list[Any], expected: list[Any],
                  helpers: Helpers) -> tuple:
    """The part of a check's condition that does not hold: the first failing operand of an
    `and`, recursively (`assert ga_ok and gb_ok`: the one that is wrong)."""
    if condition[0] == "and":
        for part in condition[1]:
            if not decide(part, check, mine, expected, helpers):
                return _failing_part(part, check, mine, expected, helpers)
    if condition[0] == "not":
        return _failing_part(condition[1], check, mine, expected, helpers)
    return condition


def _indices(condition: tuple) -> list[int]:
    """The operands a condition looks at, in order."""
    if condition[0] == "atom":
        return [*condition[2], *condition[3].values()]
    if condition[0] == "expr":
        return list(condition[2])
    return []


def _shape_note(value: Any, wanted: Any) -> str:
    """`shape (3, 2) where (2, 3) is expected`, when two arrays differ in shape; '' else."""
    mine, theirs = np.shape(value) if _is_array(value) else None, np.shape(wanted) if _is_array(wanted) else None
    if mine is not None and theirs is not None and mine != theirs:
        return f"shape {mine} where {theirs} is expected; "
    return ""


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic))


def _against_the_reference(check: Check, part: tuple) -> bool:
    """Whether the failing part of a check compares the student's values with ones the reference's
    run made (not literals, not the student's own second run)."""
    return any(not check.operands[i].student and not check.operands[i].literal for i in _indices(part))


def _what_it_gave(check: Check, part: tuple | None, wrong: list[Any] | None, expected: list[Any] | None,
                  values_shown: bool) -> str:
    """For a failed check, from the record that failed it: the part of the check that does not
    hold (`part`), what the student's code gave there and what was expected (`your code gave
    `square(3)` = 6 (int64); expected 9`). A hidden check shows values only where
    `values_shown` (its task draws this submission's own inputs) and never its code."""
    if check.kind == "reached":
        return "your code raised no error there" if check.must_raise else ""  # it was reached: it failed
    if part is None or (check.hidden and not values_shown):
        return ""
    indices = _indices(part)
    mine = [i for i in indices if check.operands[i].student and check.operands[i].mode == VALUE]
    theirs = [i for i in indices if not check.operands[i].student and check.operands[i].mode == VALUE]
    kinds = [i for i in indices if check.operands[i].mode == TYPE and isinstance(wrong[i], TypeInfo)]
    if not mine and kinds:  # isinstance(x, C): what x is
        kind = wrong[kinds[0]].mro[0].rsplit('.', 1)[-1]
        return "your code gave None" if kind == "NoneType" else f"your code gave a `{kind}`"
    # `part in said`: the text that lacks the part
    mine = mine or [i for i in indices if check.operands[i].mode == TEXT and isinstance(wrong[i], str)]
    if not mine:
        return ""
    def shown(index: int) -> str:
        text = check.operands[index].text
        return f"`{text}` = {_value_text(wrong[index])}" if text and not check.hidden else _value_text(wrong[index])

    first = mine[0]
    text = f"your code gave {shown(first)}"
    if part[0] == "atom" and theirs and part[1] != "truth":
        wanted = expected[theirs[0]]
        text = _shape_note(wrong[first], wanted) + text + f"; expected {_value_text(wanted)}"
    elif len(mine) > 1:
        text += ", " + ", ".join(shown(i) for i in mine[1:3])
    return text


def _label(check: Check, checks: list[Check]) -> str:
    total = sum(1 for c in checks if c.hidden == check.hidden)
    kind = "hidden check" if check.hidden else "check"
    return f"{kind} {check.number} of {total} of task `{check.task}`"


def _check_holds(
    check: Check, student: RunRecord, reference: RunRecord, helpers: Helpers
) -> tuple[bool | None, list[Any] | None, list[Any] | None]:
    """Whether the student's records of `check` match the reference's (None: the reference
    itself fails the check, a mistake in the course), and, when they do not, the student's
    and the reference's values of the first record that fails it (None when there is no such
    record)."""
    if check.kind == "reached":
        return student.reached.get(check.id, 0) == reference.reached.get(check.id, 0), None, None
    theirs = student.observations.get(check.id, [])
    ours = reference.observations.get(check.id, [])
    expected = [reference_values(check, raw) for raw in ours]
    for raw, values in zip(ours, expected):
        shipped = any(v is None and op.student for v, op in zip(raw, check.operands))
        if not shipped and not decide(check.condition, check, values, values, helpers):
            return None, None, None
    if len(theirs) != len(ours):
        return False, None, None
    for raw, values in zip(theirs, expected):
        try:
            mine = student_values(check, raw)
        except BadValue:
            return False, None, None
        if not decide(check.condition, check, mine, values, helpers):
            return False, mine, values
    return True, None, None


LOOPED = "not run again: it calls your code that ran out of time earlier"


def _deleted(cell: str) -> str:
    return f"cell `{cell}` is missing from your notebook (deleted?): grading put its stub back; write your code there"


def _why_task_failed(outcome, named: list[JobCell], timeout: int, deleted: frozenset[str] = frozenset()) -> str:
    """What stopped a task's scenario early, in the student's terms ('' if nothing did)."""
    if outcome.skipped is not None:
        where = _place(named, outcome.skipped)
        return LOOPED + (
            f" ({where})" if where else ""
        )
    if outcome.timeout is not None:
        where = _place(named, outcome.timeout)
        return f"its tests ran past {timeout} s and were stopped" + (
            f"; your code was running at {where}"
            if where
            else ": your code loops, or is far too slow"
        )
    if outcome.stopped == "budget":
        return "not run: the notebook's time budget ran out"
    if outcome.stopped == "line":
        return f"a value your code gave a check is larger than the grader takes ({MAX_LINE // 2**20} MiB)"
    if outcome.stopped == "results":
        return (f"your code's values for the checks came to more than the grader takes "
                f"({Limits().results // 2**20} MiB in all)")
    if outcome.stopped == "crash":
        return "your code ended the grading process"
    if outcome.stopped == "events":
        return "a line on the grader's results pipe was not signed by the grader: your code wrote to it"
    if outcome.stopped == "order":
        return ("a line of the grader's results was held back, repeated or moved: "
                "your code tampered with them")
    if not outcome.started:
        return "not run"
    if outcome.raised:
        where = _place(named, outcome.raised.get("at"))
        name = outcome.raised.get("type") or "an error"
        if name == "NotImplementedError" and where:
            stub = named[outcome.raised["at"][0]].name  # `where` is set: the place is a student cell
            if stub in deleted:
                return _deleted(stub)
            return f"your code raised NotImplementedError ({where}): a solution is still the stub"
        return f"your code raised {_raised(outcome.raised)}" + (f" ({where})" if where else "")
    return ""


def _raised(raised: dict) -> str:
    """`ValueError: operands could not be broadcast ...`: what the student's code raised, in
    its own words (a bounded line of the exception's text arguments)."""
    name = raised.get("type") or "an error"
    message = raised.get("message") or ""
    return f"{name}: {message}" if message else name


def _code_problems(student: RunRecord, named: list[JobCell], timeout: int,
                   deleted: frozenset[str] = frozenset()) -> tuple[dict[str, str], set[str]]:
    """For each task, the first problem of the student's own code cells before it, or of a
    course cell before it that ran the student's code out of time (an example that calls it);
    and the tasks whose first problem is a loop (what they raise is its fail-fast)."""
    problems: dict[str, str] = {}
    looped: set[str] = set()
    pending: list[tuple[str, bool]] = []  # each problem, and whether it is a loop
    for index, cell in enumerate(named):
        outcome = student.cells[index]
        if cell.task is not None:
            if pending:
                problems[cell.task] = pending[0][0]
                if pending[0][1]:
                    looped.add(cell.task)
            pending = []
            continue
        if outcome.timeout is not None and not cell.student:
            where = _place(named, outcome.timeout)
            caller = "an example cell" if cell.name.startswith("#") else f"cell `{cell.name}`"
            pending.append((f"your code ran past {timeout} s and was stopped"
                            + (f" (running at {where}, called from {caller})" if where else f" in {caller}"), True))
            continue
        if not cell.student:
            continue
        if outcome.timeout is not None:
            pending.append((f"your code in cell `{cell.name}` ran past {timeout} s and was stopped", True))
        elif outcome.raised:
            kind = outcome.raised.get("type") or "an error"
            where = _place(named, outcome.raised.get("at"))
            if kind == "NotImplementedError":
                pending.append((_deleted(cell.name) if cell.name in deleted
                                else f"cell `{cell.name}` is still the stub: write your code there", False))
            else:
                pending.append((f"your code in cell `{cell.name}` failed: {_raised(outcome.raised)}"
                                + (f" ({where})" if where else ""), False))
    return problems, looped


def score(
    named: list[JobCell],
    points: dict[str, float],
    scenarios: ModuleScenarios,
    student: RunRecord,
    reference: RunRecord,
    timeout: int,
    module: str = "",
    deleted: frozenset[str] = frozenset(),
    edited: frozenset[str] = frozenset(),
) -> list[CellScore]:
    """Every task's points and, where some were lost, why, from the two runs' records
    (`deleted`: solution cells the submission lacked, graded as their stubs; `edited`: test
    cells the submission changed, graded as the course wrote them)."""
    helpers = Helpers(scenarios.helpers)
    problems, looped = _code_problems(student, named, timeout, deleted)
    scores = []
    for index, cell in enumerate(named):
        if cell.task is None:
            continue
        task = scenarios.tasks[cell.task]
        outcome = student.cells[index]
        if reference.cells[index].raised or reference.cells[index].timeout is not None:
            raise CourseError(
                f"{module}: the reference does not pass task {cell.task}: it raised "
                f"{(reference.cells[index].raised or {}).get('type', 'nothing')} "
                f"(timeout: {reference.cells[index].timeout is not None})"
            )
        failure = None
        for check in task.checks:
            holds, wrong, wanted = _check_holds(check, student, reference, helpers)
            if holds is None:
                raise CourseError(
                    f"{module}: the reference fails its own check {check.id} "
                    f"({check.message!r}); fix the test or the solution"
                )
            if not holds:
                failure = f"{_label(check, task.checks)}: {check.message}"
                part = (_failing_part(check.condition, check, wrong, wanted, helpers)
                        if wrong and wanted is not None else None)
                gave = _what_it_gave(check, part, wrong, wanted, task.draws)
                failure += f" ({gave})" if gave else ""
                if check.after_seed and part is not None and _against_the_reference(check, part):
                    failure += f" [{SEEDED_NOTE}]"
                break
        stopped = _why_task_failed(outcome, named, timeout, deleted)
        if outcome.raised and cell.task in looped:
            stopped = LOOPED  # what it raised is the fail-fast of the code that looped, not an error of its own
        if failure is None and stopped:
            failure = stopped
        elif failure is not None and stopped:
            failure = f"{failure} — {stopped}"
        if failure is not None and cell.task in problems:
            failure = f"{problems[cell.task]}; {failure}"
        if failure is not None and cell.name in edited:
            failure += f" (the test cell `{cell.name}` was changed in your notebook: grading ran the course's own)"
        maximum = points[cell.task]
        scores.append(CellScore(cell.task, 0.0 if failure else maximum, maximum, failure))
    return scores


# --- grading ------------------------------------------------------------------------------------


def grade(
    submission: Any,
    module: Module,
    tree: Path,
    timeout: int = DEFAULT_TIMEOUT,
    sandboxed: bool | str = True,
    hidden: bool = True,
    student: str = "",
    key: str = VISIBLE_SEED,
    limits: Limits | None = None,
    reference_tree: Path | None = None,
    reference_record: RunRecord | None = None,
    slot: int = 0,
    through: str | None = None,
) -> GradeReport:
    """Grade `submission` (a notebook) on `module`: restore the course's cells, run the
    student's code and the reference on the same scenarios, compare.

    `hidden=False` runs the visible checks only (`tinyflo module test`); `student` and `key`
    choose the random inputs of each task (`seed_for`). `tree` is the grading tree the
    student's code runs on; the reference runs on `reference_tree` (default: the same).
    `through` runs and grades the notebook only as far as that task's grade cell (a test's
    seeded mistake in one task needs no later cell).
    """
    limits = limits or Limits(cell_timeout=timeout)
    limits = Limits(**{**vars(limits), "cell_timeout": timeout})
    scenarios = module_scenarios(module, hidden)
    source = grading_notebook(module)
    restored = restore_locked_cells(submission, _without_solutions(module))
    course_ids = {cell.get("id") for cell in source.cells}
    seeds = {task: seed_for(key, student, module.slug, task) for task in scenarios.tasks}
    job, named = _job(restored.cells, scenarios, False, timeout, seeds, course_ids)
    if through is not None:
        last = next(i for i, cell in enumerate(named) if cell.task == through)
        job["cells"], named = job["cells"][: last + 1], named[: last + 1]
    if reference_record is None:  # first: no code of the student's has run yet in this slot
        reference_record = reference_run(
            module, reference_tree or tree, timeout, hidden, seeds, limits, sandboxed, slot
        )
    record = run_job(job, tree, limits, sandboxed, slot)
    points = {
        _nbgrader(c)["grade_id"]: float(_nbgrader(c).get("points", 0))
        for c in source.cells
        if _nbgrader(c).get("grade")
    }
    if record.problem:
        cells = [
            CellScore(cell.task, 0.0, points[cell.task], f"not graded: {record.problem}")
            for cell in named
            if cell.task is not None
        ]
        return GradeReport(tuple(cells), sandboxed)
    answered = {_nbgrader(cell).get("grade_id") for cell in submission.cells}
    deleted = frozenset(_nbgrader(cell)["grade_id"] for cell in source.cells
                        if _is_solution(cell) and _nbgrader(cell).get("grade_id") not in answered)
    return GradeReport(
        tuple(score(named, points, scenarios, record, reference_record, timeout, module.relpath(), deleted,
                    _edited_tests(submission, source))),
        sandboxed,
    )


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines() if line.strip()]


def _edited_tests(submission: Any, source: Any) -> frozenset[str]:
    """Grade cells the submission holds changed from what the release gave (their visible
    lines; the hidden region is in no notebook)."""
    given = {_nbgrader(cell).get("grade_id"): _lines(visible_source(cell.source))
             for cell in source.cells if _nbgrader(cell).get("grade")}
    return frozenset(
        grade_id for cell in submission.cells
        if (grade_id := _nbgrader(cell).get("grade_id")) in given
        and _lines(visible_source(cell.source)) != given[grade_id]
    )


def reference_run(
    module: Module,
    tree: Path,
    timeout: int,
    hidden: bool,
    seeds: dict[str, int],
    limits: Limits,
    sandboxed: bool | str = True,
    slot: int = 0,
) -> RunRecord:
    """The reference's run of the module's scenarios with the given seeds."""
    scenarios = module_scenarios(module, hidden)
    notebook = grading_notebook(module)
    course_ids = {cell.get("id") for cell in notebook.cells}
    # A generous limit: the reference is never the one that loops.
    generous = Limits(**{**vars(limits), "notebook_timeout": max(limits.notebook_timeout, 3600)})
    job, _ = _job(notebook.cells, scenarios, True, max(timeout, 300), seeds, course_ids)
    record = run_job(job, tree, generous, sandboxed, slot)
    if record.problem:
        raise CourseError(f"{module.relpath()}: the reference run failed: {record.problem}")
    return record


def _without_solutions(module: Module) -> Any:
    """The notebook submissions are restored from: solutions as the release has them."""
    return copy.deepcopy(_restore_source(module.path, module.path.read_text("utf-8"), module))


@functools.lru_cache(maxsize=64)
def _restore_source(path: Path, text: str, module: Module) -> Any:
    """`_without_solutions`, made once per content of the module (nbgrader's steps validate every
    cell: a tenth of a second, for each submission graded)."""
    source = grading_notebook(module)
    return source if module.released else graded_source(source, module.name)


EXPECTED_NAME = "expected.json"  # beside a kit's release notebook: the reference's visible run


def visible_seeds(module: Module) -> dict[str, int]:
    """The fixed inputs of `tinyflo module test`."""
    return {
        task: seed_for(VISIBLE_SEED, "", module.slug, task)
        for task in module_scenarios(module, False).tasks
    }


def visible_reference(
    module: Module, tree: Path, timeout: int = DEFAULT_TIMEOUT, sandboxed: bool = True
) -> RunRecord:
    """The reference's run of the visible checks: shipped with a student kit, else computed
    once per grading tree and kept beside it."""
    if module.released:
        path = module.path.parent / EXPECTED_NAME
        if not path.is_file():
            raise CourseError(
                f"{path} is missing: this kit cannot grade {module.slug}; ask your instructor "
                "for a kit made by `tinyflo course release`"
            )
        return RunRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    cached = tree / EXPECTED_NAME
    if cached.is_file():
        return RunRecord.from_json(json.loads(cached.read_text(encoding="utf-8")))
    record = reference_run(
        module, tree, timeout, False, visible_seeds(module), Limits(cell_timeout=timeout), sandboxed
    )
    _write_atomically(cached, json.dumps(expected_only(record, module_scenarios(module, False))))
    return record


def expected_only(record: RunRecord, scenarios: ModuleScenarios) -> dict:
    """A reference run as a kit ships it: the expected side of each check, never the values
    the student's code must produce (those stay with the instructor)."""
    data = record.to_json()
    for check_id, records in data["observations"].items():
        check = scenarios.check(check_id)
        if check is None:
            continue
        data["observations"][check_id] = [
            [None if operand.student else value for operand, value in zip(check.operands, raw)]
            for raw in records
        ]
    return data


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
