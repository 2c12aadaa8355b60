"""Helpers for the course tooling tests: the CLI, seeded mutants, and grading every module three ways.

`grade_module` releases one module, then grades a blank, a reference, the known cheats
and each seeded mutant submission: through real nbgrader (`tinyflo course ...`: blank,
reference, cheats and the first mutant), through the grading engine directly with the hidden
checks and the course's key (every submission but the cheats, which nbgrader's grading step,
the same engine, grades; nbgrader must agree with it exactly), and
through the student loop (`tinyflo module test`, the visible checks: blank, reference, cheats).
conftest.py runs it once per module, just before that module's proofs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mutants import MUTANTS

import tinyflo
from tinyflo.cli import main
from tinyflo.course.export import default_exp, target_path
from tinyflo.course.grader.grading import (
    DEFAULT_TIMEOUT,
    grade,
    module_scenarios,
    reference_run,
    seed_for,
)
from tinyflo.course.grader.sandbox import Limits
from tinyflo.course.grader.tree import cached_tree
from tinyflo.course.notebooks import (
    grading_notebook,
    instructor_notebook,
    student_notebook,
    write_notebook,
)
from tinyflo.course.source import Module, discover_modules

REPO = Path(__file__).resolve().parents[2]
FIXTURE_MODULES = Path(__file__).parent / "fixtures" / "modules"
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()"}


def proof_modules() -> list[Module]:
    """The demo fixture module and every module of the course.

    TINYFLO_PROOF_MODULES (comma-separated folder names, e.g. `01_tensor,00_demo`) narrows
    the proofs to those modules while working on them; CI always runs them all.
    """
    modules = discover_modules(FIXTURE_MODULES) + discover_modules(REPO / "modules")
    chosen = os.environ.get("TINYFLO_PROOF_MODULES")
    if chosen:
        wanted = set(chosen.split(","))
        modules = [module for module in modules if module.slug in wanted]
    return modules


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`tinyflo ARGS` in a fresh process, with no TINYFLO_ setting taken from the caller
    (`env` adds to the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "tinyflo.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )


class MutantError(AssertionError):
    """A seeded mutant that no longer matches its module."""


def apply_mutant(notebook: Any, old: str, new: str, where: str) -> Any:
    """A copy of `notebook` with `old` replaced by `new`; `old` must occur exactly once."""
    count = sum(cell.source.count(old) for cell in notebook.cells)
    if count != 1:
        raise MutantError(
            f"mutant for {where} must match exactly once, matched {count} times: {old!r}. "
            "Update tests/course/mutants.py to the module's current code."
        )
    mutated = copy.deepcopy(notebook)
    for cell in mutated.cells:
        cell.source = cell.source.replace(old, new)
    return mutated


def secret_lines(module: Module) -> tuple[set[str], set[str]]:
    """Lines found only inside SOLUTION regions, and only inside HIDDEN TESTS regions."""
    solution: set[str] = set()
    hidden: set[str] = set()
    public: set[str] = set(STUB_LINES) | {""}
    for cell in module.cells():
        region = public
        for line in cell.source.splitlines():
            text = line.strip()
            if text in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                region = solution if "SOLUTION" in text else hidden
            elif text in ("### END SOLUTION", "### END HIDDEN TESTS"):
                region = public
            else:
                region.add(text)
                if cell.kind == "markdown" and region is public:
                    public.add(text.lstrip("#").strip())  # the notebook shows prose uncommented
    return solution - public, hidden - public


def hidden_only_lines(module: Module) -> set[str]:
    """Lines of hidden checks that nothing the module shows holds, even inside a longer line
    (solutions included: the reference shows those): what must never reach a student. A line
    like `assert np.allclose(` that opens a hidden check is also the start of a visible one."""
    _, hidden = secret_lines(module)
    shown_anywhere = "\n".join(
        re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S)
        for cell in module.cells()
    )
    return {
        line
        for line in hidden
        if len(line) > 12 and not line.startswith("#") and line not in shown_anywhere
    }


@dataclass
class Outcome:
    """One submission, graded by nbgrader and by `tinyflo module test`."""

    nbgrader: dict[str, float] | None = None  # grade id -> points, plus "total"
    nbgrader_max: float = 0.0
    engine: dict[str, float] | None = None  # the engine with hidden checks: grade id -> points
    engine_errors: dict[str, str | None] = field(default_factory=dict)
    loop: dict | None = None  # the progress.json record of `module test`
    loop_exit: int | None = None
    loop_output: str = ""
    autograded: Path | None = None  # nbgrader's executed copy of the submission
    feedback: Path | None = None  # the HTML page `tinyflo course feedback` made of it


@dataclass
class ModuleProof:
    """Everything the grading proofs of one module look at."""

    module: Module
    students: list[str]
    mutant_error: str | None = None
    nbgrader_release: Path | None = None
    loop_release: Path | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    mutant_tasks: dict[str, str] = field(default_factory=dict)  # student -> the task it breaks

    def explain(self) -> str:
        """The command output gathered for this module, for assertion messages."""
        return "\n".join(self.log)


def _record(
    proofs: list[ModuleProof], done: subprocess.CompletedProcess
) -> subprocess.CompletedProcess:
    for proof in proofs:
        proof.log.append(f"$ tinyflo {' '.join(done.args[3:])}\n{done.stdout}{done.stderr}")
    return done


# What the proofs found, for the tables printed at the end of the run (conftest.py).
MUTANT_TASKS: dict[tuple[str, str], str] = {}
# Names of the rows each proof records (record_property), read back by conftest.py.
MUTATION_ROWS = "mutation_rows"  # (module, task, mutants, killed)
CHEAT_ROWS = "cheat_rows"  # (module, cheat, points: the higher grader)

CHEATS = ("delegate", "import", "read_source", "delete_setup", "edit_tests", "print_checks")
# Cheats the student loop (`module test`) need not grade too: it runs the same engine as
# nbgrader's step, which grades every cheat; the loop keeps delegating and reading the source.
LOOP_CHEATS = ("delegate", "read_source")
COURSE_KEY = "proofs-course-key"
MUTANT_SEEDS = "mutants"  # every mutant of a module graded with one student's inputs


def _defined_names(source: str) -> list[str]:
    """The top-level names a solution cell defines."""
    names = []
    try:
        body = ast.parse(source).body
    except SyntaxError:  # a written answer, not code
        return []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def cheat_notebook(module: Module, cheat: str) -> Any:
    """The release with one of the known cheats in place of the student's work.

    delegate: every solution cell drops the module from sys.modules and takes its names from a
    fresh import; import: a plain import of them; read_source: exec of the reference source
    from where the calling environment has it; delete_setup: the locked setup cell deleted and
    `from tinyflo.core.<module> import *` instead; edit_tests: every grade cell made `pass`;
    print_checks: every solution cell prints the hidden checks the grading kernel can read.
    """
    instructor = instructor_notebook(module)
    release = student_notebook(grading_notebook(module), module.name)
    dotted = "tinyflo." + default_exp(module.cells(), module.relpath())
    reference_file = target_path(Path(tinyflo.__file__).parent, dotted.split(".", 1)[1])
    originals = {
        cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source for cell in instructor.cells
    }
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        names = (
            _defined_names(originals.get(meta.get("grade_id"), ""))
            if cell.cell_type == "code"
            else []
        )
        if meta.get("solution") and not meta.get("grade") and names:
            lines = {
                "delegate": [
                    "import importlib, sys",
                    f"sys.modules.pop({dotted!r}, None)",
                    f"_reference = importlib.import_module({dotted!r})",
                    *(f"{name} = _reference.{name}" for name in names),
                ],
                "import": [f"from {dotted} import {', '.join(names)}"],
                "read_source": [
                    f"_path = {str(reference_file)!r}",
                    "exec(compile(open(_path).read(), _path, 'exec'), globals())",
                ],
                "print_checks": [
                    "import json, os",
                    "_checks = json.load(open(os.environ['TINYFLO_HIDDEN_CHECKS']))",
                    "print('\\n'.join(c['code'] for t in _checks.values() for c in t))",
                ],
            }.get(cheat)
            if lines:
                cell.source = "\n".join(lines)
        if cheat == "edit_tests" and meta.get("grade"):
            cell.source = "pass"
    if cheat == "delete_setup":
        setup = [
            c for c in release.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"
        ]
        index = release.cells.index(setup[0]) if setup else 0
        release.cells[index : index + len(setup)] = [
            nbformat.v4.new_code_cell(f"from {dotted} import *")
        ]
    return release


def _submissions(module: Module, root: Path) -> tuple[dict[str, Path | None], str | None]:
    """Notebooks to hand in: None for blank (the release itself), else a file under root."""
    instructor = instructor_notebook(module)
    files: dict[str, Path | None] = {"blank": None, "reference": root / "reference.ipynb"}
    write_notebook(instructor, files["reference"])
    for cheat in CHEATS:
        files[f"cheat_{cheat}"] = root / f"cheat_{cheat}.ipynb"
        write_notebook(cheat_notebook(module, cheat), files[f"cheat_{cheat}"])
    error = None
    mutants = MUTANTS.get(module.slug, [])
    for number, mutant in enumerate(mutants, start=1):
        student = "mutant" if number == 1 else f"mutant{number}"
        try:
            mutated = apply_mutant(
                instructor, mutant.old, mutant.new, f"{module.slug} (mutant {number})"
            )
        except MutantError as failure:
            error = str(failure)
            continue
        files[student] = root / f"{student}.ipynb"
        write_notebook(mutated, files[student])
        MUTANT_TASKS[(module.slug, student)] = mutant.task
    if not mutants:
        error = f"no seeded mutant for {module.slug}: add one to tests/course/mutants.py"
    files[GIVEN] = root / f"{GIVEN}.ipynb"
    write_notebook(given_pasted(module), files[GIVEN])
    return files, error


GIVEN = "given_in_every_task"  # the blank release with every given cell pasted into each task's code


def given_pasted(module: Module) -> Any:
    """The blank release with every given code cell of the release pasted into each task's first
    code cell (each given cell run on its own, its errors ignored): what the release gives must
    not solve any task while it is open. One notebook graded once: each task's points are its own."""
    release = student_notebook(grading_notebook(module), module.name)
    given = [
        cell.source for cell in release.cells
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("solution")
        and not cell.metadata.get("nbgrader", {}).get("grade")
    ]
    paste = "\n".join([
        f"for _given in {given!r}:",
        "    try:",
        "        exec(compile(_given, '<given>', 'exec'), globals())",
        "    except Exception:",
        "        pass",
    ])
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade") and meta.get("grade_id", "").endswith("_code"):
            cell.source = paste
    return release


def _instructor_pipeline(
    root: Path, modules_dir: Path, proofs: dict[str, ModuleProof], files
) -> None:
    """Real nbgrader through `tinyflo course`; runs only subprocesses, so it can run in a thread."""
    course = root / "course"
    common = ["--dir", str(course), "--modules", str(modules_dir)]
    everyone = list(proofs.values())
    key = course / "grading" / "course.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(COURSE_KEY + "\n")  # `course build` keeps a key it finds
    if _record(everyone, run_cli("course", "build", *common, cwd=root)).returncode:
        return
    # A module that fails to release leaves no release file.
    for slug in proofs:
        _record(everyone, run_cli("course", "release", slug, *common, cwd=root))
    for slug, proof in proofs.items():
        release = course / "release" / slug / f"{proof.module.name}.ipynb"
        if not release.is_file():
            continue
        proof.nbgrader_release = release
        for student, path in files[slug].items():
            if _engine_only(student):
                continue  # every mutant goes through the engine; nbgrader takes the first
            target = course / "submitted" / student / slug / release.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path or release, target)
    for slug in proofs:
        _record(everyone, run_cli("course", "autograde", slug, *common, cwd=root))
        _record(everyone, run_cli("course", "feedback", slug, *common, cwd=root))
    for slug, proof in proofs.items():
        for student in files[slug]:
            name = f"{student}/{slug}/{proof.module.name}"
            executed = course / "autograded" / f"{name}.ipynb"
            if executed.is_file():
                outcome = proof.outcomes.setdefault(student, Outcome())
                outcome.autograded = executed
                page = course / "feedback" / f"{name}.html"
                outcome.feedback = page if page.is_file() else None
    report = root / "report.csv"
    _record(everyone, run_cli("course", "report", "--csv", str(report), *common, cwd=root))
    if report.is_file():
        with open(report, newline="") as handle:
            for row in csv.DictReader(handle):
                outcome = proofs[row["module"]].outcomes.setdefault(row["student"], Outcome())
                outcome.nbgrader = outcome.nbgrader or {}
                outcome.nbgrader[row["grade_id"]] = float(row["points"])
                if row["grade_id"] == "total":
                    outcome.nbgrader_max = float(row["max_points"])


def call_cli(*args: str) -> tuple[int, str]:
    """`tinyflo ARGS` in this process; the exit status and everything it printed."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = main(list(args))
    return code, output.getvalue()


LOOP_WORKERS = 2  # engine runs at a time


def _engine_only(student: str) -> bool:
    """Graded by the engine alone, as far as the task it is about, on the shared mutant seeds:
    every mutant but the first, and each paste of the given cells."""
    return (student.startswith("mutant") and student != "mutant") or student == GIVEN
_NBGRADER_ONLY = {f"cheat_{cheat}" for cheat in CHEATS if cheat not in LOOP_CHEATS}
# nbgrader's grading step is the engine, with the same student and key: a cheat is graded there
# (and by the loop, for LOOP_CHEATS), not a second time by calling the engine directly. The
# engine's own grading of the blank, the reference and the first mutant is what nbgrader's is
# compared with, cell by cell.
_CHEAT_STUDENTS = {f"cheat_{cheat}" for cheat in CHEATS}


def _student_pipeline(root: Path, modules_dir: Path, proofs: dict[str, ModuleProof], files) -> None:
    """`tinyflo module start`, then `module test`, in this process, for the blank, the reference and
    the loop's cheats; one workspace per student and module. In this process, the module's parsed
    notebook and scenarios are made once for all of them (a process of its own took three seconds
    more for each)."""
    jobs = []
    for slug, proof in proofs.items():
        for student, path in files[slug].items():
            if student.startswith("mutant") or student == GIVEN or student in _NBGRADER_ONLY:
                continue  # the engine grades mutants with the hidden checks (`_engine`)
            workspace = root / "workspaces" / slug / student
            common = ["--workspace", str(workspace), "--modules", str(modules_dir)]
            code, output = call_cli("module", "start", slug, *common)
            proof.log.append(f"$ tinyflo module start {slug} ({student})\n{output}")
            if code:
                continue
            notebook = workspace / slug / f"{proof.module.name}.ipynb"
            if path is None:
                proof.loop_release = notebook
            else:
                shutil.copyfile(path, notebook)
            jobs.append((proof, slug, student, workspace, common))

    for proof, slug, student, workspace, common in jobs:
        code, output = call_cli("module", "test", slug, *common)
        proof.log.append(f"$ tinyflo module test {slug} ({student})\n{output}")
        outcome = proof.outcomes.setdefault(student, Outcome())
        outcome.loop_exit, outcome.loop_output = code, output
        progress = workspace / "progress.json"
        if progress.is_file():
            outcome.loop = json.loads(progress.read_text()).get(slug)


def _engine(modules_dir: Path, proofs: dict[str, ModuleProof], files) -> None:
    """Every submission but the cheats graded by the engine with the hidden checks, as nbgrader's step does:
    the course's key, the student's name (one shared name for a module's mutants, whose
    reference run is then made once)."""
    modules = discover_modules(modules_dir)
    jobs = []
    for slug, proof in proofs.items():
        module = next(m for m in modules if m.slug == slug)
        tree = cached_tree(modules, module)
        reference = {}
        for student, path in files[slug].items():
            if student not in _CHEAT_STUDENTS:
                jobs.append((proof, module, tree, student, path, reference))

    def one(job) -> None:
        proof, module, tree, student, path, shared = job
        notebook = (
            nbformat.read(str(path), as_version=4)
            if path is not None
            else student_notebook(grading_notebook(module), module.name)
        )
        seeds_of = MUTANT_SEEDS if student.startswith("mutant") or student == GIVEN else student
        try:
            report = grade(
                notebook,
                module,
                tree,
                hidden=True,
                student=seeds_of,
                key=COURSE_KEY,
                reference_record=shared.get(seeds_of),
                # A mutant breaks one task: the cells after it need not run (the first is
                # graded whole, to compare with nbgrader's grading of it).
                through=None if student == "mutant" else proof.mutant_tasks.get(student),
            )
        except Exception as error:  # the proofs report it against the submission
            proof.log.append(f"engine grading of {student} failed: {error!r}")
            return
        outcome = proof.outcomes.setdefault(student, Outcome())
        outcome.engine = report.by_id() | {"total": report.points}
        outcome.engine_errors = {cell.grade_id: cell.error for cell in report.cells}

    # Mutants share one reference run per module: grade one first, then the rest.
    first = [job for job in jobs if not _engine_only(job[3])]
    rest = [job for job in jobs if job not in first]
    with ThreadPoolExecutor(max_workers=LOOP_WORKERS) as pool:
        list(pool.map(one, first))
    for _, module, tree, _, _, shared in {id(j[5]): j for j in rest}.values():
        shared[MUTANT_SEEDS] = reference_run(
            module,
            tree,
            DEFAULT_TIMEOUT,
            True,
            {
                task: seed_for(COURSE_KEY, MUTANT_SEEDS, module.slug, task)
                for task in module_scenarios(module).tasks
            },
            Limits(),
        )
    with ThreadPoolExecutor(max_workers=LOOP_WORKERS) as pool:
        list(pool.map(one, rest))


def copy_modules(root: Path) -> Path:
    """Every module of the course (a module's grading tree holds the ones before it)."""
    modules_dir = root / "modules"
    for module in discover_modules(FIXTURE_MODULES) + discover_modules(REPO / "modules"):
        shutil.copytree(
            module.path.parent,
            modules_dir / module.slug,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return modules_dir


def grade_module(root: Path, modules_dir: Path, module: Module) -> ModuleProof:
    """One module released and graded (blank, reference, cheats, mutants) by nbgrader, the
    engine and the student loop; its own course folder under `root`."""
    here = root / module.slug
    files = {}
    files[module.slug], error = _submissions(module, here / "submissions")
    proofs = {
        module.slug: ModuleProof(
            module,
            list(files[module.slug]),
            mutant_error=error,
            mutant_tasks={s: t for (m, s), t in MUTANT_TASKS.items() if m == module.slug},
        )
    }
    with pytest.MonkeyPatch.context() as env, ThreadPoolExecutor(max_workers=1) as pool:
        # Graders inherit the environment: a developer's workspace overlay must not leak in.
        env.delenv("TINYFLO_WORKSPACE", raising=False)
        env.delenv("TINYFLO_MODULES", raising=False)
        nbgrader_side = pool.submit(_instructor_pipeline, here, modules_dir, proofs, files)
        _student_pipeline(here, modules_dir, proofs, files)
        _engine(modules_dir, proofs, files)
        nbgrader_side.result()
    return proofs[module.slug]
