"""Tasks a student can learn from: small, graded right after their code, with points in the heading.

Static rules over modules/, checked without running a notebook:
* a task is worth at most 4 points, and its heading says how many;
* its solution cells come after the previous task's grade cell, and its grade cell follows its
  last solution cell with at most one ungraded code cell (a demonstration) between them;
* every hidden check carries a message for the student (see tinyflo.course.checks);
* every task has at least MIN_PER_TASK seeded mutants (tests/course/mutants/).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from mutants import MIN_PER_TASK, MUTANTS

from tinyflo.course.checks import parse_checks, split_hidden
from tinyflo.course.grader.rules import module_rules, rules_table, tasks
from tinyflo.course.source import Cell, Module, discover_modules

REPO = Path(__file__).resolve().parents[2]
MODULES = discover_modules(REPO / "modules")
MAX_POINTS = 4


def _points(value: float) -> str:
    return f"({value:g} point{'' if value == 1 else 's'})"


def _tasks(module: Module) -> list[tuple[Cell, list[Cell], list[Cell]]]:
    """(grade cell, solution cells, cells since the previous grade cell) per task, in order."""
    return [(grade, [c for c in since if c.nbgrader.get("solution")], since) for grade, since in tasks(module)]


@pytest.fixture(params=MODULES, ids=lambda module: module.slug)
def module(request) -> Module:
    return request.param


def test_tasks_are_small_and_state_their_points(module):
    for grade, _, before in _tasks(module):
        points = float(grade.nbgrader["points"])
        where = grade.where(module.relpath())
        assert 0 < points <= MAX_POINTS, (
            f"{where}: {points:g} points; split tasks above {MAX_POINTS}"
        )
        headings = [
            c for c in before if c.kind == "markdown" and f"### Task `{grade.grade_id}`" in c.source
        ]
        assert headings, f"{where}: no `### Task `{grade.grade_id}`` heading before its code"
        heading = next(
            line for line in headings[0].source.splitlines() if f"Task `{grade.grade_id}`" in line
        )
        assert _points(points) in heading, (
            f"{where}: the heading {heading.strip()!r} must state {_points(points)}"
        )


def test_given_code_comes_before_a_tasks_heading_never_under_it(module):
    """Between `### Task `x`` and the student's first cell of x there is prose only: given code
    under a task's heading reads as the task."""
    for grade, solutions, before in _tasks(module):
        heading = next(
            i for i, c in enumerate(before)
            if c.kind == "markdown" and f"### Task `{grade.grade_id}`" in c.source
        )
        first = before.index(solutions[0]) if solutions else len(before)
        given = [c for c in before[heading + 1 : first] if c.kind == "code"]
        assert not given, (
            f"{given[0].where(module.relpath())}: given code between the heading of task "
            f"{grade.grade_id!r} and its cell; put it before the heading"
        )


def test_grade_cells_follow_the_code_they_grade(module):
    for grade, solutions, before in _tasks(module):
        where = grade.where(module.relpath())
        assert solutions, f"{where}: no solution cell since the previous grade cell"
        for cell in solutions:
            assert re.fullmatch(rf"{grade.grade_id}_code\d*", cell.grade_id or ""), (
                f"{cell.where(module.relpath())}: a solution cell before grade cell "
                f"{grade.grade_id!r} must be named {grade.grade_id}_code (or _code2, ...)"
            )
        between = before[before.index(solutions[-1]) + 1 :]
        code = [c for c in between if c.kind == "code"]
        assert len(code) <= 1, (
            f"{where}: {len(code)} code cells between the last solution cell and its grade cell; "
            "grade the code right after it (at most one demonstration cell between)"
        )


def test_every_hidden_check_has_a_message_for_the_student(module):
    for grade, _, _ in _tasks(module):
        parts = split_hidden(grade.source)
        if parts is None:
            continue
        try:
            checks = parse_checks(parts[1])
        except ValueError as error:
            pytest.fail(f"{grade.where(module.relpath())}: {error}")
        assert checks, f"{grade.where(module.relpath())}: an empty hidden region"


def test_every_task_has_seeded_mutants(module):
    tasks = [grade.grade_id for grade, _, _ in _tasks(module)]
    mutants = MUTANTS.get(module.slug, [])
    unknown = sorted({m.task for m in mutants} - set(tasks))
    assert not unknown, f"tests/course/mutants/{module.slug}.py names unknown tasks: {unknown}"
    short = {
        task: count
        for task in tasks
        if (count := sum(m.task == task for m in mutants)) < MIN_PER_TASK
    }
    assert not short, (
        f"{module.slug}: tasks with fewer than {MIN_PER_TASK} seeded mutants "
        f"(tests/course/mutants/{module.slug}.py): {short}"
    )


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.slug)
def test_every_mutant_matches_its_module_once(module):
    """A mutant's text occurs exactly once in the module source (the slow proofs need it; found here first)."""
    source = module.path.read_text()
    wrong = [
        f"{m.task}: {source.count(m.old)} matches of {m.old[:60]!r}"
        for m in MUTANTS.get(module.slug, [])
        if source.count(m.old) != 1
    ]
    assert not wrong, f"tests/course/mutants/{module.slug}.py:\n" + "\n".join(wrong)




def test_every_rule_a_hidden_check_enforces_is_stated_in_its_tasks_text(module):
    """A hidden check is fair only when the task said what it checks: each hidden check's
    message is a rule, and a line of the task's text (since the previous grade cell) states
    it, its words in order (tinyflo.course.grader.rules)."""
    unstated = [
        f"task `{rule.task}`, hidden check {rule.number}: {rule.rule!r}"
        for rule in module_rules(module)
        if rule.stated is None
    ]
    assert not unstated, (
        f"{module.relpath()}: rules its hidden checks enforce that no line of the task's text "
        "states (add them to the task's list of what grading checks):\n" + "\n".join(unstated)
    )


def test_every_hidden_check_draws_this_students_inputs(module):
    """What one student learns about their hidden inputs helps nobody else: every task's
    hidden region draws its inputs from `check_rng`, which grading seeds from the course's
    key, the student, the submission and the task."""
    fixed = sorted({rule.task for rule in module_rules(module) if not rule.draws})
    assert not fixed, f"{module.relpath()}: tasks whose hidden checks draw no input from check_rng: {fixed}"


def test_the_audit_table_is_current():
    """modules/RULES.md is what scripts/hidden_rules.py writes from the modules today."""
    table = rules_table(MODULES)
    written = (REPO / "modules" / "RULES.md").read_text(encoding="utf-8")
    assert written == table, "modules/RULES.md is out of date: run `python scripts/hidden_rules.py`"


def test_a_rule_is_its_message_without_the_value_it_shows_and_a_line_states_it_word_for_word():
    from tinyflo.course.grader.rules import rule_of, states

    assert rule_of("the error must name the argument reduction; got: …") == (
        "the error must name the argument reduction"
    )
    assert rule_of("with beta=…: ½d²/β where |d| < β") == "with beta=…: ½d²/β where |d| < β"
    rule = rule_of("smooth_l1_loss with beta=…: ½d²/β where |d| < β")
    assert states("* `smooth_l1_loss` with `beta=β`: ½d²/β where |d| < β", rule)
    assert not states("* smooth_l1_loss: ½d²/β where |d| < β", rule)  # a word left out
    assert not states("* ½d²/β where |d| < β, smooth_l1_loss with beta", rule)  # out of order


# Given cells that patch a task's class on purpose, replacing none of what the task asks for.
PATCHES_THAT_REPLACE_NOTHING = {
    # floDl's readings of a Trend under names of their own; `mean()` without an argument
    # extends the student's `mean(n)`, which it calls.
    "08_training": {"Trend"},
}


def test_no_given_cell_of_a_release_redefines_what_a_task_asks_for(module):
    """A given cell after a task that binds one of the task's names again (a fused or faster
    form of it) would solve the task if pasted into it: the release withholds it until the task
    is closed (tinyflo.course.notebooks.withheld_task), and the kit with it."""
    from tinyflo.course.grader.tree import release_notebook

    asked: dict[str, str] = {}
    found = set()
    for cell in release_notebook(module).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade"):
            continue
        names, patched = _bindings(cell.source)
        if meta.get("solution"):
            asked.update(dict.fromkeys(names, meta.get("grade_id")))
        else:
            patched -= PATCHES_THAT_REPLACE_NOTHING.get(module.slug, set())
            found |= {name for name in names | patched if name in asked}
    assert not found, (
        f"{module.relpath()}: given cells of the release bind again {sorted(found)}, which "
        "tasks ask for; mark them (and their prose) `tinyflo={\"given_after\": \"<task>\"}`"
    )


def _bindings(source: str) -> tuple[set[str], set[str]]:
    """The names a cell's top level binds (`def`, `class`, `name = ...`), and those whose
    attributes it assigns (`LayerNorm.forward = ...`)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return set(), set()
    names, patched = set(), set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for item in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(item, ast.Name) and item is target:
                        names.add(item.id)
                    elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name):
                        patched.add(item.value.id)
    return names, patched


def test_a_withheld_cell_follows_the_task_it_is_a_fast_form_of_and_reaches_no_release(module):
    """Each withheld cell names a task of its module and comes after that task's grade cell;
    no line of its code is in the release notebook or the kit's package until it is delivered."""
    from tinyflo.course.grader.tree import release_notebook, stub_source
    from tinyflo.course.notebooks import instructor_notebook, withheld_task

    graded: list[str] = []
    withheld_lines: set[str] = set()
    cells = instructor_notebook(module).cells
    shown = {line.strip() for cell in cells if withheld_task(cell) is None for line in cell.source.splitlines()}
    for cell in cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            graded.append(meta["grade_id"])
        task = withheld_task(cell)
        if task is not None:
            assert task in graded, (
                f"{module.relpath()}: a cell withheld until task {task!r} is closed comes before "
                f"that task's grade cell (or the task does not exist)"
            )
            if cell.cell_type == "code":
                withheld_lines |= {line.strip() for line in cell.source.splitlines()
                                   if len(line.strip()) > 25 and line.strip() not in shown}
    if not withheld_lines:
        return
    released = "\n".join(cell.source for cell in release_notebook(module).cells) + "\n" + stub_source(module)
    leaked = sorted(withheld_lines & {line.strip() for line in released.splitlines()})
    assert not leaked, f"{module.slug}: withheld code in the release or the kit: {leaked[:3]}"
    delivered = "\n".join(cell.source for cell in release_notebook(module, True).cells) + "\n" + stub_source(module, True)
    assert withheld_lines <= {line.strip() for line in delivered.splitlines()}, "a delivered kit carries them"


def test_the_modules_task_table_gives_every_tasks_points(module):
    """The table at the top of a module lists each task once with its points (`1 + 2` for a row
    of two tasks), as their headings and grade cells say."""
    points = {grade.grade_id: float(grade.nbgrader["points"]) for grade, _, _ in _tasks(module)}
    text = module.cells()[0].source
    assert "| task | points | what |" in text, f"{module.relpath()}: the first cell's table has no points column"
    listed = {}
    for row in text.splitlines():
        cells = [part.strip() for part in row.lstrip("# ").strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            tasks = re.findall(r"`([^`]+)`", cells[0])
            values = [float(value) for value in cells[1].split("+")]
            assert len(tasks) == len(values), f"{module.relpath()}: {row!r}"
            listed.update(zip(tasks, values))
    assert listed == points, f"{module.relpath()}: the task table says {listed}, the grade cells {points}"
