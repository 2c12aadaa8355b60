"""Notebooks from modules: the instructor's (solutions, hidden tests) and the student's release.

The release is made by nbgrader's own `generate_assignment` preprocessors, run in
process, so `tinyflo module start` hands out exactly what `nbgrader generate_assignment`
releases.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import platform
import re
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from tinyflo.course.checks import graded_cell_source, split_hidden
from tinyflo.course.source import Cell, CourseError, Module

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
KEPT_CELL_METADATA = ("nbgrader", "tags", "deletable", "editable", "tinyflo", "jupyter")
_CELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def language_info() -> dict[str, Any]:
    """What the Python kernel of this interpreter reports about itself. A notebook that says it
    already opens unchanged: JupyterLab writes the kernel's own words into a notebook's metadata
    when it starts, and shows a notebook it changed that way as unsaved."""
    return {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": platform.python_version(),
    }


# jsonschema, which nbformat validates every notebook with, builds the 38 grammars of
# rfc3987-syntax at import whenever that package is installed (jupyter-events pulls it in):
# over a second at the start of every process, for an `iri` string format that no notebook
# schema uses. tinyflo's commands, and the nbgrader it starts, go without it.
IRI_GRAMMARS = "rfc3987_syntax"


def without_iri_grammars() -> None:
    """Keep jsonschema from building rfc3987-syntax's grammars in this process (unless it
    already has): notebooks never use the `iri` format they check."""
    sys.modules.setdefault(IRI_GRAMMARS, None)  # `import` of it raises ImportError


def require(name: str) -> ModuleType:
    """Import an optional course dependency, or explain how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise _missing(name) from None


def require_installed(name: str) -> None:
    """`require` for a dependency another process runs: found, not imported (nbgrader takes a
    second to import)."""
    try:
        found = importlib.util.find_spec(name)  # None too for a module set to None in sys.modules
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise _missing(name)


def _missing(name: str) -> CourseError:
    return CourseError(
        f"this command needs {name.split('.')[0]}, part of the course tools: pip install 'tinyflo[course]'"
    )


def instructor_notebook(module: Module) -> Any:
    """The module as an nbformat v4 notebook, solutions and hidden tests included.

    A student kit's module is its release notebook: stubs, no hidden tests.
    """
    if module.released:
        return read_notebook(module.path)
    return copy.deepcopy(_parsed_module(module.path, module.path.read_text(encoding="utf-8"), module))


@lru_cache(maxsize=64)
def _parsed_module(path: Path, text: str, module: Module) -> Any:
    """`instructor_notebook` of a module's source, made once per content of the file."""
    jupytext = require("jupytext")
    nbformat = require("nbformat")
    parsed = jupytext.reads(text, fmt="py:percent")
    notebook = nbformat.v4.new_notebook(
        metadata={"kernelspec": dict(KERNELSPEC), "language_info": language_info()}
    )
    for index, parsed_cell in enumerate(parsed.cells, start=1):
        metadata = {
            k: parsed_cell.metadata[k] for k in KEPT_CELL_METADATA if k in parsed_cell.metadata
        }
        make = {
            "code": nbformat.v4.new_code_cell,
            "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell,
        }[parsed_cell.cell_type]
        cell = make(parsed_cell.source, metadata=metadata)
        grade_id = metadata.get("nbgrader", {}).get("grade_id", "")
        # Ids must not change between builds, or every rebuild would look like a new notebook.
        cell.id = grade_id if _CELL_ID.match(grade_id) else f"cell-{index:03d}"
        notebook.cells.append(cell)
    notebook.cells = _fold_long_given(notebook.cells, nbformat)
    ids = [cell.id for cell in notebook.cells]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CourseError(f"{module.relpath()}: grade_id used by more than one cell: {duplicates}")
    nbformat.validate(notebook)
    return notebook


LONG_GIVEN = 40  # lines: given code longer than this opens collapsed, under a line that says what it holds


def _is_given_code(cell: Any) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and not meta.get("solution") and not meta.get("grade")


def _fold_long_given(cells: list[Any], nbformat: Any) -> list[Any]:
    """Each long given code cell collapsed (in JupyterLab, `source_hidden`; in the book, the
    `hide-input` tag) under a line that says what it defines and whether the next task uses it."""
    folded = []
    for position, cell in enumerate(cells):
        if _is_given_code(cell) and cell.source.count("\n") + 1 > LONG_GIVEN:
            withheld = {key: value for key, value in cell.metadata.get("tinyflo", {}).items() if key == GIVEN_AFTER}
            note = nbformat.v4.new_markdown_cell(_given_note(cell, cells[position + 1 :]),
                                                 metadata={"tinyflo": {"given_note": True, **withheld}})
            note.id = f"{cell.id}-given"
            folded.append(note)
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
        folded.append(cell)
    return folded


def _given_note(cell: Any, after: list[Any]) -> str:
    """One line for a collapsed given cell: its size, what it defines, and whether the student's
    next task calls any of it (read from the names the reference's next solution uses)."""
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    defined = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [t.id for t in targets if isinstance(t, ast.Name)]
    public = [name for name in dict.fromkeys(defined) if not name.startswith("__")]
    shown = ", ".join(f"`{name}`" for name in public[:6]) + (" and more" if len(public) > 6 else "")
    lines = cell.source.count("\n") + 1
    text = f"**Given code, {lines} lines, folded** (open it with the arrow at its left)"
    text += f": it defines {shown}." if shown else "."
    task = next((c for c in after if c.metadata.get("nbgrader", {}).get("solution")), None)
    if task is not None:
        try:
            nodes = list(ast.walk(ast.parse(task.source)))
        except SyntaxError:
            nodes = []
        used = {n.id for n in nodes if isinstance(n, ast.Name)}
        used |= {n.attr for n in nodes if isinstance(n, ast.Attribute)}
        needed = [name for name in public if name in used]
        text += (" Your next task uses " + ", ".join(f"`{n}`" for n in needed)
                 + (": read it." if len(needed) == 1 else ": read those.")
                 if needed else " Your next task does not use it; read it to see how it works.")
    return text


def notebook_cells(notebook: Any) -> list[Cell]:
    """A notebook's cells as `Cell`s, for the exporter."""
    return [
        Cell(cell.cell_type, cell.source, cell.metadata, index=index)
        for index, cell in enumerate(notebook.cells, start=1)
    ]


def _release_stages() -> tuple[list[type], list[type]]:
    """generate_assignment's preprocessors, before and after it saves cells to the gradebook."""
    converters = require("nbgrader.converters")
    preprocessors = require("nbgrader.preprocessors")
    steps = list(
        converters.GenerateAssignment.class_traits()["preprocessors"].make_dynamic_default()
    )
    cut = steps.index(preprocessors.SaveCells)
    return steps[:cut], steps[cut + 1 :]


def _apply(notebook: Any, steps: list[type], name: str) -> Any:
    notebook = copy.deepcopy(notebook)
    resources = {"metadata": {"name": name, "path": "."}}
    for step in steps:
        try:
            notebook, resources = step().preprocess(notebook, resources)
        except Exception as error:  # nbgrader explains metadata mistakes in its exceptions
            raise CourseError(
                f"{name}: nbgrader's {step.__name__} rejected the notebook: {error}"
            ) from error
    return notebook


def graded_source(instructor: Any, name: str = "notebook") -> Any:
    """The notebook as nbgrader's gradebook stores it: solutions cleared, hidden tests kept.

    Locked cells of a submission are restored from this copy before grading.
    """
    before_save, _ = _release_stages()
    return _apply(instructor, before_save, name)


def graded_source_file(path: Path, name: str) -> Any:
    """`graded_source` of the notebook file at `path`, made once per content of the file: nbgrader's
    steps run on each submission graded against it would take a tenth of a second each."""
    return copy.deepcopy(_graded_source_text(path, path.read_text("utf-8"), name))


@lru_cache(maxsize=16)
def _graded_source_text(path: Path, text: str, name: str) -> Any:
    return graded_source(_notebook_from_text(text, path), name)


def student_notebook(instructor: Any, name: str = "notebook") -> Any:
    """The release: solutions replaced by stubs, hidden tests removed, cells locked."""
    before_save, after_save = _release_stages()
    return _apply(_apply(instructor, before_save, name), after_save, name)


def write_notebook(notebook: Any, path: Path) -> None:
    """Write a notebook as nbformat v4 JSON, creating the folder."""
    nbformat = require("nbformat")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8", newline="\n")


def read_notebook(path: Path) -> Any:
    """Read an nbformat v4 notebook, explaining what is wrong with a broken file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except Exception as error:
        raise CourseError(f"cannot read notebook {path}: {error}") from None
    return _notebook_from_text(text, path)


def _notebook_from_text(text: str, path: Path) -> Any:
    """The notebook `text` (read from `path`) holds, or what is wrong with it, in one line."""
    nbformat = require("nbformat")
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as error:
        raise CourseError(f"cannot read notebook {path}: {error}") from None


GRADING_NOTE = (
    "**How this notebook is graded.** Each task's heading says its points; its tests come right "
    "after its code. JupyterLab's *Validate* button and `tinyflo module test` run the tests you "
    "can see. Your instructor's grading also runs hidden checks, in a sandbox where this module "
    "and the later ones are empty: only your own code earns points, and each cell has a time "
    "limit (a loop is stopped and reported)."
)


GIVEN_AFTER = "given_after"  # a cell's `tinyflo` metadata: withheld until that task is closed


def withheld_task(cell: Any) -> str | None:
    """The task a cell is a fast form of, when the course withholds it until that task is closed
    (`# %% tinyflo={"given_after": "conv_conv2d"}`): it could stand in for the student's code."""
    task = (getattr(cell, "metadata", None) or {}).get("tinyflo", {}).get(GIVEN_AFTER)
    return task if isinstance(task, str) and task else None


@lru_cache(maxsize=64)
def _grading_notebook(path: Path, text: str, module: Module, delivered: bool) -> Any:
    nbformat = require("nbformat")
    notebook = instructor_notebook(module)
    if not delivered:  # a fast form of a task's code reaches no release, no kit, no grading run
        notebook.cells = [cell for cell in notebook.cells if withheld_task(cell) is None]
    if not module.released:  # a kit's release has the note already
        note = nbformat.v4.new_markdown_cell(GRADING_NOTE)
        note.id = "grading-note"
        notebook.cells.insert(1, note)
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or split_hidden(cell.source) is None:
            continue
        try:
            cell.source, _ = graded_cell_source(cell.source, meta["grade_id"])
        except (ValueError, SyntaxError) as error:
            where = f"{module.relpath()}, grade cell {meta['grade_id']!r}"
            raise CourseError(f"{where}: {error}") from None
    return notebook


def grading_notebook(module: Module, delivered: bool = False) -> Any:
    """The instructor's notebook with each hidden region replaced by a placeholder line, and
    without the cells withheld until their task is closed (`withheld_task`), unless
    `delivered` (a kit built after every such task of the module closed)."""
    notebook = _grading_notebook(module.path, module.path.read_text("utf-8"), module, delivered)
    return copy.deepcopy(notebook)
