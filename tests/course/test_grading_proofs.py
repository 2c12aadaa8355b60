"""Grading must be able to fail: one test per module, through nbgrader, the engine and the student loop.

(a) the release holds no solution code and no hidden tests; (b) the untouched release scores
0; (c) the reference scores full points; (d) every seeded mutant loses points. And nbgrader
agrees with the engine cell by cell. New modules are picked up from modules/ automatically.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from course_support import (
    CHEAT_ROWS,
    CHEATS,
    GIVEN,
    LOOP_CHEATS,
    MUTATION_ROWS,
    ModuleProof,
    Outcome,
    grade_module,
    hidden_only_lines,
    proof_modules,
    secret_lines,
)

pytestmark = pytest.mark.slow

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _outcome(proof: ModuleProof, student: str, nbgrader: bool = True, loop: bool = True,
             engine: bool = True) -> Outcome:
    outcome = proof.outcomes.get(student)
    assert outcome and (outcome.nbgrader is not None or not nbgrader), (
        f"nbgrader produced no grade for {student}/{proof.module.slug}:\n{proof.explain()}"
    )
    assert outcome.engine is not None or not engine, (
        f"the engine produced no grade for {student}/{proof.module.slug}:\n{proof.explain()}"
    )
    assert outcome.loop is not None or not loop, (
        f"`tinyflo module test` recorded no grade for {student}/{proof.module.slug}:\n{proof.explain()}"
    )
    return outcome


def _cells(path) -> list[tuple[str, str, dict]]:
    notebook = json.loads(path.read_text())
    return [
        (cell["cell_type"], "".join(cell["source"]), cell["metadata"].get("nbgrader", {}))
        for cell in notebook["cells"]
    ]


def _release_has_no_solutions_and_no_hidden_tests(proof, record_property):
    solution, hidden = secret_lines(proof.module)
    assert solution, f"{proof.module.relpath()} has no solution code to hide"
    for release in (proof.nbgrader_release, proof.loop_release):
        assert release and release.is_file(), f"no release notebook:\n{proof.explain()}"
        lines = {line.strip() for _, source, _ in _cells(release) for line in source.splitlines()}
        text = "\n".join(lines)
        assert not [m for m in MARKERS if m in text], f"{release} still holds grading markers"
        assert not lines & solution, f"{release} leaks solution lines: {sorted(lines & solution)}"
        assert not lines & hidden, f"{release} leaks hidden tests: {sorted(lines & hidden)}"


def _student_loop_releases_what_nbgrader_releases(proof, record_property):
    assert proof.nbgrader_release and proof.loop_release, proof.explain()
    assert _cells(proof.loop_release) == _cells(proof.nbgrader_release)


def _untouched_release_scores_zero(proof, record_property):
    blank = _outcome(proof, "blank")
    assert blank.nbgrader_max > 0, f"{proof.module.slug} has no points to earn"
    assert blank.nbgrader["total"] == 0, (
        f"nbgrader gave points to a blank notebook: {blank.nbgrader}"
    )
    assert blank.engine["total"] == 0, blank.engine_errors
    assert blank.loop["points"] == 0 and blank.loop["max_points"] == blank.nbgrader_max, blank.loop
    assert blank.loop_exit == 1, blank.loop_output


def _reference_scores_full_points(proof, record_property):
    reference = _outcome(proof, "reference")
    assert reference.nbgrader["total"] == reference.nbgrader_max > 0, (
        f"nbgrader: {reference.nbgrader}\n{proof.explain()}"
    )
    assert reference.engine["total"] == reference.nbgrader_max, reference.engine_errors
    assert reference.loop["points"] == reference.loop["max_points"] == reference.nbgrader_max
    assert reference.loop_exit == 0, reference.loop_output


def _seeded_mutants_lose_points(proof, record_property):
    """Every mutant loses points on the task it breaks (the engine grades them all with the
    hidden checks, nbgrader the first of each module)."""
    if proof.mutant_error:
        pytest.fail(proof.mutant_error)
    mutants = [student for student in proof.students if student.startswith("mutant")]
    assert mutants, f"no seeded mutant for {proof.module.slug}"
    full = _outcome(proof, "reference").engine
    survivors, rows = [], []
    for task in sorted(set(proof.mutant_tasks.values()), key=list(full).index):
        mine = [s for s in mutants if proof.mutant_tasks[s] == task]
        killed = [
            s
            for s in mine
            if _outcome(proof, s, nbgrader=False, loop=False).engine[task] < full[task]
        ]
        rows.append((proof.module.slug, task, len(mine), len(killed)))
        survivors += [(s, task) for s in mine if s not in killed]
    record_property(MUTATION_ROWS, rows)  # for the table at the end (from any xdist worker)
    assert not survivors, (
        f"mutants of {proof.module.slug} that lose no points on their task: {survivors}"
    )
    first = _outcome(proof, "mutant", loop=False)
    assert first.nbgrader["total"] < first.nbgrader_max, (
        f"nbgrader gave the first mutant of {proof.module.slug} full points"
    )


def _each_mutant_is_told_what_its_code_gave(proof, record_property):
    """Every seeded mistake's message names what the code gave there, or what it raised (hidden
    checks too: each draws the submission's own inputs): a student can act on it."""
    if proof.module.slug == "00_demo":
        return
    told = ("your code gave", "your code raised", "your code in cell", "ran past", "was stopped")
    silent = []
    for student in proof.students:
        if not student.startswith("mutant"):
            continue
        task = proof.mutant_tasks[student]
        error = _outcome(proof, student, nbgrader=False, loop=False).engine_errors.get(task) or ""
        if not any(words in error for words in told):
            silent.append(f"{student} ({task}): {error}")
    assert not silent, "mutants whose message names no value:\n" + "\n".join(silent)


def _given_code_solves_no_task(proof, record_property):
    """Nothing a student gets solves a task while it is open: every given code cell of the
    release, pasted into a task's code cell of the blank release, earns that task nothing (the
    fast forms of a task's code are withheld: see tinyflo.course.notebooks.withheld_task)."""
    points = _outcome(proof, GIVEN, nbgrader=False, loop=False).engine
    solved = sorted(task for task, earned in points.items() if task != "total" and earned > 0)
    assert not solved, f"given cells of {proof.module.slug}'s release earn points in tasks {solved}"


def _nbgrader_and_the_engine_agree(proof, record_property):
    """nbgrader's pipeline (tinyflo's grading step) and the engine called directly give the
    same points, cell by cell, for the same student and course key."""
    for student in proof.students:
        if student.startswith("cheat_"):
            continue  # graded by nbgrader (and the loop), whose step is the engine
        outcome = _outcome(proof, student, nbgrader=False, loop=False)
        if outcome.nbgrader is None:
            continue  # a mutant graded by the engine only
        assert outcome.engine == outcome.nbgrader, f"{student}: {outcome.engine_errors}"


def _known_cheats_score_zero(proof, record_property):
    """Delegating to the reference, importing or reading it, deleting the setup cell, editing
    the tests or printing what the grader holds earns nothing: the sandbox sees hollow
    modules, and the cells come back."""
    rows = []
    for cheat in CHEATS:
        outcome = _outcome(proof, f"cheat_{cheat}", loop=cheat in LOOP_CHEATS, engine=False)
        loop = outcome.loop["points"] if cheat in LOOP_CHEATS else 0
        rows.append((proof.module.slug, cheat, max(outcome.nbgrader["total"], loop)))
    record_property(CHEAT_ROWS, rows)
    for cheat in CHEATS:
        outcome = _outcome(proof, f"cheat_{cheat}", loop=cheat in LOOP_CHEATS, engine=False)
        assert outcome.nbgrader["total"] == 0, (
            f"nbgrader gave the {cheat} cheat points in {proof.module.slug}: {outcome.nbgrader}"
        )
        if cheat in LOOP_CHEATS:
            assert outcome.loop["points"] == 0, (cheat, outcome.loop_output)


def _no_hidden_line_reaches_the_student(proof, record_property):
    """Neither `module test` nor nbgrader's feedback page shows a line of hidden checks, even
    to a submission that printed them (the print_checks cheat)."""
    hidden = hidden_only_lines(proof.module)
    assert hidden, f"{proof.module.slug} has no hidden checks"
    for student in proof.students:
        looped = not student.startswith("mutant") and student != GIVEN and (
            not student.startswith("cheat_") or student[len("cheat_") :] in LOOP_CHEATS
        )
        outcome = _outcome(proof, student, nbgrader=False, loop=looped,
                           engine=not student.startswith("cheat_"))
        shown = [("module test", outcome.loop_output)]
        if outcome.autograded is not None:
            assert outcome.feedback is not None, f"no feedback page for {student}"
            page = html.unescape(re.sub(r"<[^>]+>", "", outcome.feedback.read_text()))
            shown.append(("the feedback page", page))
        for what, text in shown:
            leaked = sorted(line for line in hidden if line in text)
            assert not leaked, f"{what} of {student} shows hidden lines: {leaked[:3]}"


PROOFS = (
    _release_has_no_solutions_and_no_hidden_tests,
    _student_loop_releases_what_nbgrader_releases,
    _untouched_release_scores_zero,
    _reference_scores_full_points,
    _seeded_mutants_lose_points,
    _given_code_solves_no_task,
    _each_mutant_is_told_what_its_code_gave,
    _nbgrader_and_the_engine_agree,
    _known_cheats_score_zero,
    _no_hidden_line_reaches_the_student,
)


@pytest.mark.parametrize("module", proof_modules(), ids=lambda module: module.slug)
def test_grading_of_the_module_holds(module, proof_root, record_property):
    """One module released and graded (blank, reference, cheats, every mutant) through real
    nbgrader, the engine and the student loop; then every proof above, each failure named."""
    root, modules_dir = proof_root
    proof = grade_module(root, modules_dir, module)
    failures = []
    for check in PROOFS:
        try:
            check(proof, record_property)
        except (AssertionError, pytest.fail.Exception) as error:
            failures.append(f"{check.__name__.strip('_')}: {str(error)[:4000]}")
    assert not failures, "\n\n".join(failures)
