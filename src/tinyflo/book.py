"""`tinyflo book build`: the browsable book, made from modules/ and milestones/ with Sphinx.

The pages are generated into a staging folder, never into the checkout:

* ``index.md``, ``instructor.md``, ``threat-model.md`` and ``conf.py`` are hand-written, in
  ``book/``;
* ``modules/index.md`` (the module path) and one page per module — the module's *release*
  notebook, made by the same nbgrader steps as ``tinyflo course release``, so no solution
  and no hidden test reaches the book;
* ``milestones/index.md`` and one page per milestone — its notebook with the recorded run
  (``milestones/results/<name>/``: the result table and the plots) after the introduction,
  or a page that says the milestone has no notebook or no recorded run yet;
* ``api/`` — one autodoc page per public namespace;
* ``performance.md`` — the README's Performance section (the summary table) and every
  recorded benchmark result in ``benchmarks/results/``, with its machine and versions.

Then Sphinx builds the HTML with warnings as errors, so a missing image or a broken
cross-reference fails the build. Nothing is executed and nothing is fetched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tinyflo.course.notebooks import instructor_notebook, student_notebook, write_notebook
from tinyflo.course.source import CourseError, Module, discover_modules, make_folder

HAND_WRITTEN = ("conf.py", "index.md", "instructor.md", "threat-model.md")
BOOK_CSS = "tinyflo.css"  # conf.py's html_css_files names it
# A page with a plot (`full-width` containers, the milestones') gives its article the whole width
# beside the navigation, without the "on this page" column: a figure of two or three panels
# keeps its axis text readable.
BOOK_STYLE = """.bd-container:has(div.full-width) .bd-sidebar-secondary { display: none; }
.bd-main .bd-content .bd-article-container:has(div.full-width) { max-width: 100%; }
div.full-width img { max-width: 100%; height: auto; }
"""
INSTALL = "pip install 'tinyflo[book]'"

# The public namespaces and what each holds, in the order the API reference lists them.
API = (
    ("tinyflo", "Tensors, autograd, data loading, the Trainer, checkpoints and mixed precision."),
    ("tinyflo.nn", "Layers, containers, activation and loss modules."),
    ("tinyflo.nn.functional", "The same operations as functions."),
    ("tinyflo.nn.init", "Initializers."),
    ("tinyflo.optim", "Optimizers."),
    ("tinyflo.optim.lr_scheduler", "Learning-rate schedules."),
    ("tinyflo.datasets", "Bundled, downloadable and generated data sets."),
    ("tinyflo.models", "Ready-made models."),
    ("tinyflo.distributed", "Process groups, data parallelism and local SGD."),
)

# `### Task `id` (N points): what it is`; the points and the description may be left out.
_TASK_HEADING = re.compile(r"^###\s+Task\s+`(?P<id>\w+)`(?:\s+\([\d.]+ points?\))?(?::\s*(?P<what>.+?))?\s*$")
_TITLE = re.compile(r"^#\s+(?P<title>.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Task:
    """One graded piece of a module, as the module path lists it."""

    id: str
    what: str
    points: float


def _require_sphinx() -> None:
    """Fail with the install command when Sphinx or the book's extensions are missing."""
    import importlib.util

    missing = [name for name in ("sphinx", "myst_nb", "sphinx_book_theme", "jupyter_server_mathjax")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise CourseError(f"building the book needs {', '.join(missing)}: {INSTALL}")


def module_tasks(notebook) -> list[Task]:
    """The graded tasks of a module notebook: what each builds, and the points of its grade cell.

    What a task builds is its heading's text after the colon, else the section it sits in.
    """
    points = {
        cell.metadata["nbgrader"]["grade_id"]: float(cell.metadata["nbgrader"].get("points", 0))
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("grade")
    }
    tasks, section = [], ""
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("## "):
                section = line[3:].strip()
            match = _TASK_HEADING.match(line)
            if match:
                task_id = match.group("id")
                tasks.append(Task(task_id, match.group("what") or section, points.get(task_id, 0.0)))
    return tasks


def _title(notebook, fallback: str) -> str:
    """The first level-1 heading of a notebook."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            match = _TITLE.search(cell.source)
            if match:
                return match.group("title")
    return fallback


def _cell(text: str) -> str:
    """Text made safe for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def write_module_pages(modules: list[Module], dest: Path) -> int:
    """One page per module (its release notebook) and the module path; the number of pages."""
    dest.mkdir(parents=True, exist_ok=True)
    rows = []
    for module in modules:
        instructor = instructor_notebook(module)
        write_notebook(student_notebook(instructor, module.slug), dest / f"{module.slug}.ipynb")
        tasks = module_tasks(instructor)
        builds = "; ".join(_cell(task.what) for task in tasks if task.what) or "—"
        graded = ", ".join(f"`{task.id}` ({task.points:g})" for task in tasks) or "—"
        total = sum(task.points for task in tasks)
        title = _title(instructor, module.slug).split("—", 1)[-1].strip()
        rows.append(f"| {module.number:02d} | {{doc}}`{title} <{module.slug}>` | {builds} | "
                    f"{graded} | {total:g} |")
    page = [
        "# The module path",
        "",
        "Each module builds one part of the framework on top of the ones before it, and "
        "its code becomes that part of the `tinyflo` package (`tinyflo export`). Work "
        "through them in order: `tinyflo module start N` hands out module N, "
        "`tinyflo module test N` grades it task by task, `tinyflo module complete N` makes "
        "your code the package the next modules and the milestones run on.",
        "",
        "| # | module | what you build | graded tasks (points) | points |",
        "|---|---|---|---|---:|",
        *rows,
        "",
        "Each module page shows the notebook as a student receives it: the code to write is "
        "a `YOUR CODE HERE` stub, the hidden tests are left out, and the systems questions "
        "close the page.",
        "",
    ]
    (dest / "index.md").write_text("\n".join(page), encoding="utf-8")
    return len(modules) + 1


def _recorded_run(result: dict | None, results: Path, plots: list[Path], command: str) -> str:
    """The Markdown of a milestone's recorded run: when and where, its table, its plots (copied
    beside the page, in ``results/<name>/``)."""
    if result is None:
        return ("## Recorded run\n\nThis milestone has no recorded run yet. "
                f"`{command} --record` runs it in full and keeps its figures and plots in "
                f"`milestones/results/{results.name}/`.\n")
    lines = ["## Recorded run", ""]
    lines.append(f"A {result.get('mode', 'full')} run on {result.get('device', '?')} "
                 f"({result.get('machine', 'machine unknown')}), {result.get('seconds', '?')} s, "
                 f"tinyflo {result.get('versions', {}).get('tinyflo', '?')}, {result.get('date', '?')}; "
                 f"`{command}` runs it again.")
    lines.append("")
    table = results / "result.md"
    if table.is_file():
        text = table.read_text(encoding="utf-8")
        lines += [line for line in text.splitlines() if line.startswith("|")]
        lines.append("")
    for plot in plots:  # the page's full width, margin included: a plot's axis text stays readable
        lines += ["```{container} full-width", f"![{plot.stem}](results/{results.name}/{plot.name})", "```", ""]
    return "\n".join(lines)


def write_milestone_pages(checkout: Path, dest: Path) -> int:
    """One page per milestone in the registry, and the milestones' overview; the number of pages."""
    import jupytext
    import nbformat

    from tinyflo import milestones

    dest.mkdir(parents=True, exist_ok=True)
    rows = []
    for milestone in milestones.MILESTONES.values():
        results = milestone.results(checkout)
        result = milestones.load_result(milestone, checkout)
        plots = sorted(results.glob("*.png")) if result is not None else []
        if plots:
            copied = dest / "results" / milestone.name
            copied.mkdir(parents=True, exist_ok=True)
            for plot in plots:
                shutil.copy2(plot, copied / plot.name)
        recorded = _recorded_run(result, results, plots, f"tinyflo milestone run {milestone.name}")
        source = milestone.path(checkout)
        if source.is_file():
            notebook = jupytext.read(source, fmt="py:percent")
            notebook.metadata.pop("jupytext", None)
            at = next((i + 1 for i, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"), 0)
            notebook.cells.insert(at, nbformat.v4.new_markdown_cell(recorded))
            write_notebook(notebook, dest / f"{milestone.slug}.ipynb")
        else:
            page = [f"# Milestone {milestone.number} — {milestone.title}", "",
                    f"**The published figure.** {milestone.figure}.", "",
                    f"**Needs** modules {', '.join(milestone.modules)}.", "",
                    f"Its notebook, `milestones/{milestone.slug}/{milestone.name}.py`, is not in "
                    "this checkout yet.", "", recorded]
            (dest / f"{milestone.slug}.md").write_text("\n".join(page), encoding="utf-8")
        reproduced = _cell(milestones.recorded_figures(result)) if result else "no recorded run yet"
        rows.append(f"| {milestone.number} | {{doc}}`{_cell(milestone.title)} <{milestone.slug}>` | "
                    f"{_cell(milestone.figure)} | {reproduced} |")
    page = [
        "# Milestones",
        "",
        "Each milestone reproduces a published result using only tinyflo's public API — on "
        "the reference package, or with `TINYFLO_WORKSPACE` set, on the modules you "
        "completed. Each prints the figures it reproduces next to the published ones and "
        "saves its plots; the recorded full runs below are kept in `milestones/results/`.",
        "",
        "| # | milestone | published figure | recorded run |",
        "|---|---|---|---|",
        *rows,
        "",
        "```bash",
        "tinyflo milestone list              # milestones, the modules they need, recorded figures",
        "tinyflo milestone run mlp           # the full run",
        "tinyflo milestone run mlp --quick   # the reduced run CI checks",
        "```",
        "",
    ]
    (dest / "index.md").write_text("\n".join(page), encoding="utf-8")
    return len(milestones.MILESTONES) + 1


def write_api_pages(dest: Path) -> int:
    """One autodoc page per public namespace, and their index; the number of pages.

    autodoc writes reStructuredText, so its directive sits in an ``eval-rst`` block.
    """
    dest.mkdir(parents=True, exist_ok=True)
    toctree = ["```{toctree}", ":maxdepth: 1", "", *(name for name, _ in API), "```"]
    rows = [f"* {{doc}}`{name}` — {what}" for name, what in API]
    (dest / "index.md").write_text("\n".join(["# API reference", "",
        "The public names of the package, from their docstrings. Everything under "
        "`tinyflo.core` is exported from the course modules; these namespaces gather it, the "
        "way `torch`, `torch.nn` and `torch.optim` do.", "", *rows, "", *toctree, ""]),
        encoding="utf-8")
    for name, _ in API:
        (dest / f"{name}.md").write_text(
            f"# `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n```\n", encoding="utf-8")
    return len(API) + 1


def _readme_section(readme: Path, heading: str) -> list[str]:
    """The lines of the README's ``## heading`` section, without the heading."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index(f"## {heading}") + 1
    except ValueError:
        raise CourseError(f"{readme} has no '## {heading}' section for the book") from None
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def write_performance_page(checkout: Path, dest: Path) -> int:
    """The performance page: the README's summary, then each recorded benchmark; 1 page."""
    # The book holds no repository files: a link into benchmarks/ becomes the path it names; and
    # not the rest of the README: a link to another of its sections becomes its text.
    summary = [re.sub(r"\[([^]]*)\]\(#[^)]*\)", r"\1", re.sub(r"\[[^]]*\]\((benchmarks/[^)]*)\)", r"`\1`", line))
               for line in _readme_section(checkout / "README.md", "Performance")]
    page = ["# Performance", "", *summary, "", "## Recorded benchmark results", "",
            "Each table below is a file in `benchmarks/results/`, written by the benchmark that "
            "measured it (`python -m benchmarks.<name>`), with the machine and library versions "
            "it ran on.", ""]
    results = checkout / "benchmarks" / "results"
    for result in sorted(results.glob("*.md")):
        page += [("#" + line) if line.startswith("#") else line
                 for line in result.read_text(encoding="utf-8").splitlines()]
        page.append("")
    proofs = sorted(results.glob("gpu/*/proof.md"))
    if proofs:
        page += ["## GPU proofs", "", "The last `tinyflo doctor --gpu-proof` on each GPU (`benchmarks/results/gpu/"
                 "<gpu-name>/`, with the tests' report, each benchmark's and milestone's results and every "
                 "stage's log): what passed, what failed, and the targets met or missed.", ""]
    for proof in proofs:
        page += [("##" + line) if line.startswith("#") else line
                 for line in proof.read_text(encoding="utf-8").splitlines()]
        page.append("")
    (dest / "performance.md").write_text("\n".join(page), encoding="utf-8")
    return 1


def write_sources(checkout: Path, dest: Path) -> int:
    """Write every page of the book into ``dest``; the number of pages."""
    import jupyter_server_mathjax

    book = checkout / "book"
    dest.mkdir(parents=True, exist_ok=True)
    for name in HAND_WRITTEN:
        if not (book / name).is_file():
            raise CourseError(f"{book / name} is missing: the book's hand-written pages live in book/")
        shutil.copy2(book / name, dest / name)
    mathjax = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(mathjax, dest / "_static" / "mathjax")
    (dest / "_static" / BOOK_CSS).write_text(BOOK_STYLE, encoding="utf-8")
    pages = len(HAND_WRITTEN) - 1
    pages += write_module_pages(discover_modules(checkout / "modules"), dest / "modules")
    pages += write_milestone_pages(checkout, dest / "milestones")
    pages += write_api_pages(dest / "api")
    pages += write_performance_page(checkout, dest)
    return pages


def _clear_output(out: Path) -> None:
    """Empty an earlier book build in ``out``; refuse to touch a folder that is something else."""
    if not out.exists():
        return
    if not out.is_dir() or (any(out.iterdir()) and not (out / ".buildinfo").is_file()):
        raise CourseError(f"--out {out} exists and is not an earlier book build; choose an empty "
                          "or new folder")
    shutil.rmtree(out)


def build(out: Path, checkout: Path) -> Path:
    """Build the book's HTML into ``out``; the path of its index.html (the generated pages go into a
    temporary folder, removed afterwards)."""
    _require_sphinx()
    out = out.expanduser().resolve()
    _clear_output(out)
    make_folder(out, "--out")  # one line now, not Sphinx's crash report at the end
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tinyflo-book-") as temporary:
        staging = Path(temporary) / "src"
        pages = write_sources(checkout, staging)
        command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
                   "-d", str(Path(temporary) / "doctrees"), str(staging), str(out)]
        done = subprocess.run(command, cwd=staging)
        if done.returncode != 0:
            raise CourseError(f"Sphinx failed to build the book (exit {done.returncode}); its "
                              "warnings above name each broken page")
    print(f"built {pages} pages in {time.perf_counter() - start:.1f} s")
    return out / "index.html"


def run(out: str | None, checkout: Path) -> int:
    """The `tinyflo book build` command; returns the exit status."""
    index = build(Path(out) if out else checkout / "book" / "_build" / "html", checkout)
    print(index)
    return 0
