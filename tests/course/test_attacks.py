"""The adversarial suite: hostile submissions earn nothing, leak nothing and touch nothing.

Two layers. The engine layer grades every attack of tests/course/attacks.py, in the sandbox
with the hidden checks, on modules 01, 04 and 08 (and a core subset on every other module):
no attack earns a point over the honest work it is laid on, nothing it makes reaches the
report, and every submission ends within its budget. The class layer grades a class of
honest and hostile submissions together through real nbgrader (`tinyflo course autograde
--jobs 2`, `feedback`, `report`), as root and as an unprivileged user: submissions that carry
files, links, fifos and oversized notebooks; the instructor's files, the other submissions
and a file outside the course are byte-identical afterwards, and honest students get the
grades the engine gives them alone.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from attacks import (
    ALL,
    CORE,
    FORGERIES,
    MARKER,
    TRUTH_FORGERIES,
    attack_notebook,
    combined_notebook,
)
from course_support import COURSE_KEY, REPO, apply_mutant, hidden_only_lines, secret_lines
from mutants import MUTANTS

from tinyflo.course.grader.grading import grade, module_scenarios, reference_run, seed_for
from tinyflo.course.grader.sandbox import Limits, bwrap_works
from tinyflo.course.grader.tree import cached_tree, release_notebook
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.source import Module, discover_modules

pytestmark = pytest.mark.skipif(bool(bwrap_works()), reason=f"{bwrap_works()}")

FULL = ("01_tensor", "04_losses", "08_training")  # every attack; the other modules: CORE
BUDGET = 120  # seconds a notebook may take here (the default is 900)
LOOP_TIMEOUT = 4  # seconds per cell for the looping attack
MODULES = discover_modules(REPO / "modules")
STUDENT = "attacker"  # every attack is graded as one student: one reference run per module


def _module(slug: str) -> Module:
    return next(module for module in MODULES if module.slug == slug)


def _graded(module: Module, notebooks: dict[str, object], hidden: bool = True) -> dict:
    """Each notebook graded in the sandbox, two at a time: name -> (report, seconds)."""
    tree = cached_tree(MODULES, module)
    seeds = {
        task: seed_for(COURSE_KEY, STUDENT, module.slug, task)
        for task in module_scenarios(module, hidden).tasks
    }
    reference = reference_run(module, tree, 60, hidden, seeds, Limits())

    def one(item):
        name, notebook = item
        started = time.monotonic()
        report = grade(
            notebook,
            module,
            tree,
            timeout=LOOP_TIMEOUT if name == "loop" else 60,
            hidden=hidden,
            student=STUDENT,
            key=COURSE_KEY,
            limits=Limits(notebook_timeout=BUDGET),
            reference_record=reference,
        )
        return name, (report, time.monotonic() - started)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, notebooks.items()))


def _problems(module: Module, results: dict, ceiling: dict[str, float]) -> list[str]:
    """What went wrong: points over the ceiling, a leak in a report, a budget overrun."""
    hidden = hidden_only_lines(module)
    found = []
    for name, (report, seconds) in results.items():
        if report.points > ceiling[name]:
            found.append(f"{name}: {report.points:g} points, at most {ceiling[name]:g}")
        text = "\n".join(cell.error or "" for cell in report.cells)
        if MARKER in text:
            found.append(f"{name}: its own text reached the report")
        leaked = [line for line in hidden if line in text]
        if leaked:
            found.append(f"{name}: hidden check lines in the report: {leaked[:2]}")
        if seconds > BUDGET + 15:
            found.append(f"{name}: {seconds:.0f} s, over the {BUDGET} s budget")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("slug", FULL)
def test_no_attack_earns_a_point_or_leaks(slug):
    """The whole catalogue, each attack alone, over the blank release (which scores 0)."""
    module = _module(slug)
    tasks = list(module_scenarios(module).tasks)
    blank = release_notebook(module)
    notebooks = {name: attack_notebook(blank, name, tasks) for name in ALL}
    results = _graded(module, notebooks)
    assert not _problems(module, results, dict.fromkeys(notebooks, 0.0)), results


@pytest.mark.slow
@pytest.mark.parametrize("slug", FULL)
def test_no_forgery_lifts_buggy_code(slug):
    """Laid over a seeded mutant, the forging attacks score no more than the mutant alone."""
    _assert_no_lift(slug, MUTANTS[slug][0], FORGERIES)


def _assert_no_lift(slug: str, mutant, attacks: tuple[str, ...]) -> None:
    """`mutant` loses points alone, and none of `attacks` laid over it earns one back."""
    module = _module(slug)
    tasks = list(module_scenarios(module).tasks)
    buggy = apply_mutant(instructor_notebook(module), mutant.old, mutant.new, slug)
    notebooks = {"mutant": buggy} | {
        name: attack_notebook(buggy, name, tasks) for name in attacks
    }
    results = _graded(module, notebooks)
    alone = results["mutant"][0].points
    assert alone < results["mutant"][0].max_points, "the mutant should lose points alone"
    assert not _problems(module, results, dict.fromkeys(notebooks, alone)), results


# Mutants only checks of the student's own values catch: gradcheck (a wrong derivative whose
# forward is right), `all(np.shares_memory(...))` (a copy where a view belongs) and `_same`
# of two models trained two ways (gradients of the last group kept).
TRUTH_MUTANTS = {
    "03_layers": "grad * (out + self.alpha)",
    "06_optimizers": "opt.state[p] = {k: v[start:start + n].reshape(shape) if",
    "08_training": "    self.zero_grad()\n    total = None",
}


@pytest.mark.slow
@pytest.mark.parametrize("slug", sorted(TRUTH_MUTANTS))
def test_no_forgery_lifts_code_that_only_self_comparisons_catch(slug):
    """Rebinding or patching what a check of the student's own values calls (numpy's
    comparisons, builtins, the course's gradcheck and helpers) lifts no such mutant: those
    checks are decided by the grader, on data, or against the reference's gradients."""
    mutant = next(m for m in MUTANTS[slug] if TRUTH_MUTANTS[slug] in m.old)
    _assert_no_lift(slug, mutant, TRUTH_FORGERIES)


@pytest.mark.slow
@pytest.mark.parametrize("slug", [m.slug for m in MODULES if m.slug not in FULL])
def test_core_attacks_earn_nothing_on_every_module(slug):
    """Every other module: the core attacks at once, graded as nbgrader grades (hidden
    checks) and as `module test` does (visible checks)."""
    module = _module(slug)
    tasks = list(module_scenarios(module).tasks)
    attacked = combined_notebook(release_notebook(module), CORE, tasks)
    for hidden in (True, False):
        results = _graded(module, {"core": attacked}, hidden=hidden)
        assert not _problems(module, results, {"core": 0.0}), (hidden, results)


# --- a class through real nbgrader --------------------------------------------------------------

HOST_MARKER = Path("/tmp") / f"tfx-shadow-ran-{os.getpid()}"
SHADOW = f"open({str(HOST_MARKER)!r}, 'w').write('ran on the host')\n"
SLUG, NAME = "01_tensor", "tensor.ipynb"
HONEST = ("ref", "bug", "blank")
REFUSED = ("nblink", "hardlink", "fifo", "dirlink", "huge", "deepnest")
# Notebooks that once stopped the class's run: each is now that student's line, or a 0.
MALFORMED = ("listdata", "manycells")
MARKUP_MARK = "TFX-MARKUP"  # what the student's markup would write, were it live
MARKUP = f"""# My notes

Some *emphasis*, `code` and a [link](https://example.org).

<script>document.title = "{MARKUP_MARK}"</script>
<img src="x" onerror="document.title = '{MARKUP_MARK}'">
<svg onload="document.title = '{MARKUP_MARK}'"></svg>
<iframe src="javascript:document.title = '{MARKUP_MARK}'"></iframe>
<a href="javascript:document.title = '{MARKUP_MARK}'">click</a>
"""
NOBODY = 65534


def _submissions(course: Path, canary: Path) -> None:
    """The class: three honest students and the attackers, as collected into submitted/."""
    module = _module(SLUG)
    tasks = list(module_scenarios(module).tasks)
    blank = release_notebook(module)
    reference = instructor_notebook(module)
    mutant = MUTANTS[SLUG][0]
    source = course / "source" / SLUG / NAME
    notebooks = {
        "ref": reference,
        "bug": apply_mutant(reference, mutant.old, mutant.new, SLUG),
        "blank": blank,
        "shadow": blank,
        "links": blank,
        "fifoextra": blank,
        "forger": combined_notebook(blank, CORE, tasks),
        "looper": attack_notebook(blank, "loop", tasks),
        "flooder": combined_notebook(
            blank, ("output_flood", "disk", "memory", "processes", "fake_log"), tasks
        ),
        "exfil": attack_notebook(blank, "exfiltrate", tasks),
    }
    for student, notebook in notebooks.items():
        write_notebook(notebook, course / "submitted" / student / SLUG / NAME)
    shadow = course / "submitted" / "shadow" / SLUG
    for name in (
        "tinyflo/__init__.py",
        "tinyflo/course/__init__.py",
        "ipykernel_launcher.py",
        "sitecustomize.py",
        "usercustomize.py",
        "nbgrader/__init__.py",
        "numpy.py",
        "nbgrader_config.py",
    ):
        (shadow / name).parent.mkdir(parents=True, exist_ok=True)
        (shadow / name).write_text(SHADOW)
    links = course / "submitted" / "links" / SLUG
    for name, target in {
        "gradebook.db": course / "gradebook.db",
        "course.key": course / "grading" / "course.key",
        "solution.ipynb": source,
        "timestamp.txt": Path("/etc/hostname"),
        "secret.txt": canary,
        "source": course / "source",
    }.items():
        (links / name).symlink_to(target)
    os.mkfifo(course / "submitted" / "fifoextra" / SLUG / "data.fifo")
    for student in REFUSED:
        (course / "submitted" / student).mkdir(parents=True)
    (course / "submitted" / "nblink" / SLUG).mkdir()
    (course / "submitted" / "nblink" / SLUG / NAME).symlink_to(source)
    (course / "submitted" / "hardlink" / SLUG).mkdir()
    os.link(source, course / "submitted" / "hardlink" / SLUG / NAME)
    (course / "submitted" / "fifo" / SLUG).mkdir()
    os.mkfifo(course / "submitted" / "fifo" / SLUG / NAME)
    (course / "submitted" / "dirlink" / SLUG).symlink_to(course / "submitted" / "ref" / SLUG)
    huge = nbformat.v4.new_notebook()
    huge.cells = [nbformat.v4.new_code_cell("x" * (20 * 2**20))]
    write_notebook(huge, course / "submitted" / "huge" / SLUG / NAME)
    _malformed(course, blank)


def _malformed(course: Path, blank) -> None:
    """Small notebooks that once stopped the whole class: nesting past Python's recursion limit,
    an output whose `data` is a list, 90,000 added cells; and live markup for the instructor."""
    deep = nbformat.from_dict(copy.deepcopy(dict(blank)))
    (course / "submitted" / "deepnest" / SLUG).mkdir(parents=True)
    text = nbformat.writes(deep)
    nested = '"x": ' + "[" * 600 + "]" * 600 + ", "  # JSON reads it; what validates it recursed
    text = text.replace('"metadata": {', '"metadata": {' + nested, 1)
    (course / "submitted" / "deepnest" / SLUG / NAME).write_text(text)
    listed = nbformat.from_dict(copy.deepcopy(dict(blank)))
    code = next(cell for cell in listed.cells if cell.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "x"})]
    text = nbformat.writes(listed).replace('"data": {\n', '"data": [{\n', 1)
    text = text.replace('"text/plain": "x"\n', '"text/plain": "x"}]\n', 1)
    (course / "submitted" / "listdata" / SLUG).mkdir(parents=True)
    (course / "submitted" / "listdata" / SLUG / NAME).write_text(text)
    many = json.loads(nbformat.writes(blank))  # as JSON: nbformat takes seconds to make and check 90,000 cells
    many["cells"] += [{"cell_type": "markdown", "id": f"added-{n}", "metadata": {}, "source": ""}
                      for n in range(90_000)]
    (course / "submitted" / "manycells" / SLUG).mkdir(parents=True)
    (course / "submitted" / "manycells" / SLUG / NAME).write_text(json.dumps(many))
    marked = nbformat.from_dict(copy.deepcopy(dict(blank)))
    marked.cells.insert(1, nbformat.v4.new_markdown_cell(MARKUP))
    marked.cells.insert(2, nbformat.v4.new_raw_cell(MARKUP, metadata={"format": "text/html"}))
    write_notebook(marked, course / "submitted" / "markup" / SLUG / NAME)


def _live_markup(text: str) -> list[str]:
    """Where MARKUP_MARK sits in a page or in the HTML of a notebook's markdown as something a
    browser would run: a script's text, or any attribute's value (a handler, a javascript: URL)."""
    from html.parser import HTMLParser

    found: list[str] = []

    class Parser(HTMLParser):
        script = False

        def handle_starttag(self, tag, attrs):
            self.script = tag == "script"
            found.extend(f"<{tag} {name}=...>" for name, value in attrs if value and MARKUP_MARK in value)

        def handle_data(self, data):
            if self.script and MARKUP_MARK in data:
                found.append("<script>")

    Parser().feed(text)
    return found


def _fingerprint(paths: list[Path]) -> dict[str, str]:
    """Every file and link under `paths`, hashed without following a link (mode included)."""
    found = {}
    for top in paths:
        for folder, dirs, files in os.walk(top):
            for name in sorted(dirs + files):
                path = Path(folder) / name
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    found[str(path)] = f"link {os.readlink(path)}"
                elif stat.S_ISREG(info.st_mode):
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                    found[str(path)] = f"{oct(info.st_mode)} {digest}"
                elif not stat.S_ISDIR(info.st_mode):
                    found[str(path)] = f"special {oct(info.st_mode)}"
        if Path(top).is_file():
            found[str(top)] = hashlib.sha256(Path(top).read_bytes()).hexdigest()
    return found


def _as(user: str, home: Path) -> list[str]:
    if user == "root":
        return []
    return [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        "env", f"HOME={home}", f"XDG_CACHE_HOME={home / 'cache'}",
    ]  # fmt: skip


def _tinyflo(user: str, home: Path, course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYFLO_", "JUPYTER"))}
    command = [*_as(user, home), sys.executable, "-m", "tinyflo.cli", *args]
    command += ["--dir", str(course), "--modules", str(REPO / "modules")]
    return subprocess.run(
        command, cwd=home, env=env, capture_output=True, text=True, timeout=600
    )


def _unprivileged_problem() -> str | None:
    if os.geteuid() != 0:
        return None  # the suite itself runs unprivileged: that is the user case
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run(
        [*_as("unprivileged", Path("/tmp")), sys.executable, "-c", "import tinyflo, nbgrader"],
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        return f"an unprivileged user cannot run {sys.executable}: {probe.stderr.strip()[-200:]}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("user", ["root", "unprivileged"])
def test_a_class_with_attackers_leaves_the_instructor_untouched(user):
    if user == "root" and os.geteuid() != 0:
        pytest.skip("the suite runs unprivileged: the root case needs root")
    if user == "unprivileged" and (problem := _unprivileged_problem()):
        pytest.skip(problem)
    # Not pytest's tmp_path: its folders are closed to other users.
    tmp_path = Path(tempfile.mkdtemp(prefix="tinyflo-class-"))
    os.chmod(tmp_path, 0o755)
    try:
        _grade_a_class(user, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _grade_a_class(user: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    course = home / "course"
    canary = tmp_path / "host" / "secret.txt"
    canary.parent.mkdir(parents=True)
    canary.write_text(f"host secret {MARKER}\n")
    home.mkdir()
    if user != "root":
        os.chown(home, NOBODY, NOBODY)
    assert _tinyflo(user, home, course, "course", "build").returncode == 0
    done = _tinyflo(user, home, course, "course", "release", SLUG)
    assert done.returncode == 0, done.stdout + done.stderr
    key = (course / "grading" / "course.key").read_text().strip()
    _submissions(course, canary)
    if user != "root":
        for folder, dirs, files in os.walk(course / "submitted"):
            for name in [".", *dirs, *files]:
                os.chown(Path(folder) / name, NOBODY, NOBODY, follow_symlinks=False)
    kept = [
        course / "source",
        course / "release",
        course / "grading",
        course / "submitted",
        course / "nbgrader_config.py",
        canary,
    ]
    before = _fingerprint(kept)
    gradebook_mode = os.stat(course / "gradebook.db").st_mode

    grading = _tinyflo(
        user, home, course, "course", "autograde", SLUG, "--jobs", "2", "--timeout", "10"
    )
    said = grading.stdout + grading.stderr
    assert grading.returncode != 0, "refused submissions must make autograde say so"
    for student in REFUSED:
        assert f"student {student}, {SLUG}" in said, said[-3000:]
    assert MARKER not in said and "[AutogradeApp | ERROR] " + MARKER not in said
    assert _tinyflo(user, home, course, "course", "feedback", SLUG).returncode == 0
    report = home / "report.csv"
    done = _tinyflo(user, home, course, "course", "report", "--csv", str(report))
    assert done.returncode == 0, done.stdout + done.stderr

    # Nothing of the instructor's, of another student's or of the host changed or ran.
    assert _fingerprint(kept) == before
    assert os.stat(course / "gradebook.db").st_mode == gradebook_mode
    assert not HOST_MARKER.exists()
    # What grading wrote holds the notebooks and pages only: no link, no copied file.
    for top in ("autograded", "feedback"):
        for path in (course / top).rglob("*"):
            info = os.lstat(path)
            assert stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode), path
            if stat.S_ISREG(info.st_mode):
                assert path.name in (NAME, NAME.replace(".ipynb", ".html"), "timestamp.txt"), path
    for student in REFUSED:
        assert not (course / "autograded" / student).exists(), student
    for student in MALFORMED:  # that student's line, or graded: never the class's run
        assert f"student {student}" in said or (course / "autograded" / student).exists(), said[-3000:]
    # The student's markup is inert wherever a person opens it: formgrader renders the
    # autograded notebook's markdown; the feedback page is HTML.
    page = course / "feedback" / "markup" / SLUG / NAME.replace(".ipynb", ".html")
    assert page.is_file() and not _live_markup(page.read_text()), _live_markup(page.read_text())
    assert "emphasis" in page.read_text()  # the harmless text still shows
    graded = nbformat.read(course / "autograded" / "markup" / SLUG / NAME, as_version=4)
    assert not [_live_markup(c.source) for c in graded.cells if c.cell_type == "markdown" and _live_markup(c.source)]
    # a raw cell is shown as its text: nothing says to render it as HTML any more
    assert not [c.metadata for c in graded.cells if c.cell_type == "raw" and {"format", "raw_mimetype"} & set(c.metadata)]
    # Nothing hidden, of the reference, of the host or of the attack reaches what is returned.
    solution, _ = secret_lines(_module(SLUG))
    hidden = hidden_only_lines(_module(SLUG))
    canary_text = canary.read_text().strip()
    for path in list((course / "feedback").rglob("*.html")) + list(
        (course / "autograded").rglob("*.ipynb")
    ):
        student = path.relative_to(course).parts[1]
        text = path.read_text(errors="replace")
        assert MARKER not in text and canary_text not in text, path
        if path.suffix == ".ipynb":
            continue  # the instructor's copy: nbgrader keeps the hidden checks in it
        assert not [line for line in hidden if line in text], path
        if student not in ("ref", "bug"):
            assert not [line for line in solution if len(line) > 20 and line in text], path

    rows = [row for row in _csv(report) if row["module"] == SLUG]
    totals = {row["student"]: float(row["points"]) for row in rows if row["grade_id"] == "total"}
    for student in set(totals) - set(HONEST):
        assert totals[student] == 0, (student, totals)
    # Honest students get what the engine gives each of them alone.
    module = _module(SLUG)
    tree = cached_tree(MODULES, module)
    alone = {}
    for student in HONEST:
        notebook = nbformat.read(course / "submitted" / student / SLUG / NAME, as_version=4)
        alone[student] = grade(notebook, module, tree, hidden=True, student=student, key=key)
        assert totals[student] == alone[student].points, (student, totals, alone[student].cells)
    assert alone["ref"].full_marks and 0 < totals["bug"] < totals["ref"], totals


def _csv(path: Path):
    import csv

    with open(path, newline="") as handle:
        yield from csv.DictReader(handle)


def test_attack_catalogue_covers_every_class_the_threat_model_names():
    """The catalogue keeps an attack for each class of the threat model (book/)."""
    classes = {
        "frames": ("getframe", "traceback_frame", "generator_frame", "signal_frame", "settrace"),
        "gc": ("gc_objects", "gc_referrers", "subclasses"),
        "memory": ("ctypes", "ctypes_via_numpy", "proc_mem", "crafted_code"),
        "patching": (
            "patch_builtins",
            "patch_libraries",
            "set_code",
            "rebind_reporters",
            "rebind_names",
            "patch_numpy_deep",
        ),
        "forging": ("forge_pipe", "fork_forge", "equal_to_anything", "bool_subclass_truth"),
        "leaks": ("exfiltrate", "fake_log"),
        "exhaustion": ("memory", "processes", "disk", "output_flood", "loop"),
        "links": ("links",),
    }
    for name, members in classes.items():
        assert set(members) <= set(ALL), name
