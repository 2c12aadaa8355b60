"""Course modules on disk: find them, name them, and read their percent-format cells; and the
one check every intake of a submitted notebook makes (`read_notebook_bytes`).

This file needs only the standard library, so `tinyflo export` works in a bare install (the
intake check, which only the course's commands call, imports nbformat's and nbgrader's schemas
when it runs).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinyflo import environment


class CourseError(Exception):
    """A mistake in the course sources or in a command's arguments, explained for a person."""


COURSE_DIR = "course"  # the instructor's course folder, in the current one, when no --dir is given
# Student and module ids as folder names: no glob characters, separators, spaces or newlines
# (an id is a pattern to nbgrader, an item of --student_id_exclude, and part of log lines).
VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}\Z")
NOTEBOOK_LIMIT = 16 * 1024 * 1024  # bytes: a submitted notebook larger than this is refused
# What a submitted notebook may hold. The largest module has ~110 cells and ~120k characters of
# source, and a notebook's JSON is nested ~10 deep; these leave room for any honest notebook and
# keep a crafted one from costing the grader minutes, gigabytes or a page of tens of megabytes.
NESTING_LIMIT = 64  # levels of JSON lists and objects (Python's own readers recurse per level)
VALUE_LIMIT = 500_000  # JSON values (lists, objects, strings, numbers) in one notebook
CELL_LIMIT = 2_000  # cells in one notebook
SOURCE_LIMIT = 2 * 1024 * 1024  # characters of all cells' sources together
LMS_FORMATS = ("canvas", "moodle", "gradescope")  # the gradebook imports `course report --format` writes
SIMILAR = 0.5  # `course similarity`: pairs at least this alike get a page of their own


def read_regular(path: str | Path, limit: int, dir_fd: int | None = None) -> bytes:
    """The bytes of `path`, which must be a regular file with one name, at most `limit` bytes
    (`path` relative to the open folder `dir_fd`, when given).

    Opened without following a link and without blocking on a fifo; OSError names the problem.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        raise OSError(f"{path}: not a regular file ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        if info.st_nlink != 1:
            raise OSError(f"{path}: a file with {info.st_nlink} names (hard links are refused)")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path}: larger than {limit} bytes")
    return data


class NotebookError(ValueError):
    """A submitted notebook tinyflo cannot grade, in one line: what was expected and what came."""


def _no_constant(name: str) -> float:
    raise NotebookError(f"JSON expected; {name} came (not a JSON number)")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e400 reads as infinity, which is written back as Infinity: not JSON
        raise NotebookError(f"a finite number expected; {_plain(text, 40)} came")
    return number


def _check_nesting(value: object) -> None:
    """NotebookError when `value` nests deeper than NESTING_LIMIT or holds more than VALUE_LIMIT
    values; walked with a stack of its own, so no depth reaches Python's recursion."""
    stack, count = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > VALUE_LIMIT:
            raise NotebookError(f"at most {VALUE_LIMIT} JSON values (lists, objects, strings, numbers) expected; "
                                "more came")
        if not isinstance(item, (dict, list)):
            continue
        if depth > NESTING_LIMIT:
            raise NotebookError(f"nested at most {NESTING_LIMIT} levels deep expected; more came")
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def _plain(text: str, limit: int = 200) -> str:
    """`text` for one line of a message: cut, with control and invisible characters escaped."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _check_cells(notebook: dict) -> None:
    """What every reader of a submission relies on before any schema: nbformat 4, and cells
    that are few enough and small enough."""
    if not isinstance(notebook, dict):
        raise NotebookError(f"a notebook (a JSON object) expected; {_kind(notebook)} came")
    version, minor = notebook.get("nbformat"), notebook.get("nbformat_minor")
    if type(version) is not int or type(minor) is not int or version != 4:
        raise NotebookError(f"nbformat 4 expected; nbformat {_plain(repr(version), 40)}.{_plain(repr(minor), 40)} came")
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f"cells expected as a list; {_kind(cells)} came")
    if len(cells) > CELL_LIMIT:
        raise NotebookError(f"at most {CELL_LIMIT} cells expected; {len(cells)} came")
    size = 0
    for number, cell in enumerate(cells, start=1):
        source = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            size += sum(map(len, source))
        elif isinstance(source, str):
            size += len(source)
        else:
            raise NotebookError(f"cell {number}: an object with a source (text or a list of lines) expected; "
                                f"{_kind(source) if isinstance(cell, dict) else _kind(cell)} came")
    if size > SOURCE_LIMIT:
        raise NotebookError(f"at most {SOURCE_LIMIT} characters of source in all cells expected; {size} came")


def _check_schema(notebook: dict) -> None:
    """nbformat's schema of the notebook's own version (cells, outputs and their data of known
    shapes), and nbgrader's schema of each cell's nbgrader metadata."""
    from nbformat import v4
    from nbformat.validator import better_validation_error, get_validator

    if not 0 <= notebook["nbformat_minor"] <= v4.nbformat_minor:  # a newer minor relaxes the schema
        raise NotebookError(f"nbformat 4.0 to 4.{v4.nbformat_minor} expected; 4.{notebook['nbformat_minor']} came")
    minor = notebook["nbformat_minor"]
    if minor >= 5:  # some tools write 4.5 without cell ids; nbformat gives each one as it reads
        notebook = {**notebook, "cells": [cell if "id" in cell else {**cell, "id": f"no-id-{number}"}
                                          for number, cell in enumerate(notebook["cells"])]}
    if next(iter(get_validator(4, minor).iter_errors(notebook)), None) is not None:
        # fastjsonschema finds it; jsonschema and nbformat's own pass say where and what
        error = better_validation_error(next(iter(get_validator(4, minor, name="jsonschema").iter_errors(notebook))),
                                        4, minor)
        where = "/".join(map(str, error.relative_path)) or "the notebook"
        raise NotebookError(f"a notebook in nbformat 4.{minor}'s shape expected; at {_plain(where, 80)}: "
                            f"{_plain(error.message)}")
    nbgrader = _nbgrader_validator()
    for number, cell in enumerate(notebook["cells"], start=1):
        if "nbgrader" in cell["metadata"]:
            failure = next(iter(nbgrader.iter_errors(cell["metadata"]["nbgrader"])), None)
            if failure is not None:
                raise NotebookError(f"cell {number}: nbgrader metadata in nbgrader's shape expected; "
                                    f"{_plain(failure.message)}")


@functools.cache
def _nbgrader_validator() -> Any:
    """nbgrader's own schema of a cell's nbgrader metadata (version 3, the one it writes)."""
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("nbgrader.nbgraderformat").joinpath("v3.json").read_text(encoding="utf-8"))
    return jsonschema.Draft4Validator(schema)


def read_notebook_bytes(data: bytes) -> dict:
    """The submitted notebook in `data`, as plain JSON, once it is what grading relies on.

    At most NOTEBOOK_LIMIT bytes of UTF-8 JSON, nested at most NESTING_LIMIT deep, with at most
    CELL_LIMIT cells and SOURCE_LIMIT characters of source, in nbformat 4's schema (outputs of
    known shapes) with nbgrader's cell metadata, and text that can be written back as UTF-8.
    Every problem, whatever raised it, is one NotebookError line saying what was expected and
    what came.
    """
    try:
        if len(data) > NOTEBOOK_LIMIT:
            raise NotebookError(f"at most {NOTEBOOK_LIMIT} bytes expected; {len(data)} came")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookError(f"UTF-8 text expected; byte {data[error.start]:#04x} came at "
                                f"offset {error.start}") from None
        # Millions of tiny lists ("[[],[],...") would take hundreds of MB to read: counted first
        # (brackets inside strings count too, so the bound is twice the limit).
        if (brackets := text.count("[") + text.count("{")) > 2 * VALUE_LIMIT:
            raise NotebookError(f"at most {VALUE_LIMIT} JSON values expected; {brackets} lists and objects came")
        try:
            notebook = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
        except RecursionError:
            raise NotebookError(f"nested at most {NESTING_LIMIT} levels deep expected; more came") from None
        except json.JSONDecodeError as error:
            raise NotebookError(f"JSON expected; {error.msg} at line {error.lineno} column {error.colno}") from None
        _check_cells(notebook)
        _check_nesting(notebook)
        try:  # a lone surrogate ("\ud800") reads as JSON but can be written neither as UTF-8 nor as a page
            json.dumps(notebook, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise NotebookError(f"text in UTF-8 expected; a lone surrogate {error.object[error.start]!r} "
                                "came (an escape like \\ud800)") from None
        _check_schema(notebook)
        return notebook
    except NotebookError:
        raise
    except Exception as error:  # whatever a reader or schema raises is still one line about this notebook
        raise NotebookError(f"a readable notebook expected; {type(error).__name__}: {_plain(str(error))}") from None


def make_folder(folder: Path, option: str) -> Path:
    """`folder` (absolute), created now if it is not there: one line naming `option` when it
    cannot be, before any work is done."""
    folder = Path(folder).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise CourseError(f"{option}: {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CourseError(
            f"{option}: cannot create the folder {folder}: {error.strerror or error}"
        ) from None
    return folder


@dataclass(frozen=True)
class Cell:
    """One notebook cell, read from a percent file or from a notebook."""

    kind: str  # "code", "markdown" or "raw"
    source: str
    metadata: Mapping = field(default_factory=dict)
    index: int = 0  # position among the cells, from 1
    line: int | None = None  # line of the `# %%` header in a percent file

    @property
    def nbgrader(self) -> Mapping:
        """The cell's nbgrader metadata ({} when it has none)."""
        return self.metadata.get("nbgrader") or {}

    @property
    def grade_id(self) -> str | None:
        """The cell's nbgrader `grade_id`, if any."""
        return self.nbgrader.get("grade_id")

    @property
    def is_grade(self) -> bool:
        """True for an nbgrader grade (test) cell."""
        return bool(self.nbgrader.get("grade"))

    def where(self, path: str) -> str:
        """Name this cell for an error message: file, line, cell number and grade id."""
        place = f"{path}:{self.line}" if self.line else path
        label = f"cell {self.index}"
        if self.grade_id:
            label += f", grade_id {self.grade_id!r}"
        return f"{place} ({label})"


_CELL_HEADER = re.compile(r"^#\s?%%(?=\s|\[|$)(?P<options>.*)$")
_CELL_KIND = re.compile(r"\[(markdown|md|raw)\]")
_METADATA_KEY = re.compile(r"\s*([A-Za-z_][\w.-]*)=")


def _parse_header(options: str, where: str) -> tuple[str, dict]:
    """Split a `# %%` header's options into the cell kind and its metadata."""
    kind = "code"
    marker = _CELL_KIND.search(options)
    if marker:
        kind = "raw" if marker.group(1) == "raw" else "markdown"
        options = options[marker.end() :]
    metadata: dict = {}
    key = _METADATA_KEY.search(options)
    decoder = json.JSONDecoder()
    while key:
        try:
            value, end = decoder.raw_decode(options, key.end())
        except json.JSONDecodeError as error:
            raise CourseError(
                f"{where}: metadata {key.group(1)}= on the cell header is not valid JSON "
                f"({error.msg} at column {error.pos + 1}); expected e.g. "
                '`# %% nbgrader={"grade": true, "grade_id": "x", ...}`'
            ) from None
        metadata[key.group(1)] = value
        key = _METADATA_KEY.match(options, end)
        if not key and options[end:].strip():
            raise CourseError(
                f"{where}: unexpected text {options[end:].strip()!r} after the cell metadata"
            )
    return kind, metadata


def parse_percent(text: str, path: str = "<module>") -> list[Cell]:
    """Read the cells of a jupytext percent file; text before the first `# %%` is ignored."""
    cells: list[Cell] = []
    header: tuple[int, str, dict] | None = None
    body: list[str] = []

    def close() -> None:
        if header is not None:
            line, kind, metadata = header
            source = "\n".join(body).strip("\n")
            cells.append(Cell(kind, source, metadata, index=len(cells) + 1, line=line))

    for number, line in enumerate(text.splitlines(), start=1):
        match = _CELL_HEADER.match(line)
        if match:
            close()
            kind, metadata = _parse_header(match.group("options"), f"{path}:{number}")
            header, body = (number, kind, metadata), []
        else:
            body.append(line)
    close()
    return cells


@dataclass(frozen=True)
class Module:
    """A course module: `modules/NN_name/name.py`."""

    number: int
    name: str
    path: Path  # the percent source file

    @property
    def slug(self) -> str:
        """The folder name, e.g. `01_tensor`."""
        return self.path.parent.name

    def relpath(self) -> str:
        """The source path relative to the repository, e.g. `modules/01_tensor/tensor.py`."""
        return f"{self.path.parent.parent.name}/{self.slug}/{self.path.name}"

    @property
    def released(self) -> bool:
        """True for a module of a student kit: its source is the release notebook itself."""
        return self.path.suffix == ".ipynb"

    def cells(self) -> list[Cell]:
        """The module's cells."""
        if self.released:
            notebook = json.loads(self.path.read_text(encoding="utf-8"))
            return [
                Cell(cell["cell_type"], "".join(cell["source"]), cell.get("metadata", {}), index=i)
                for i, cell in enumerate(notebook["cells"], start=1)
            ]
        return parse_percent(self.path.read_text(encoding="utf-8"), self.relpath())


_MODULE_DIR = re.compile(r"^(\d+)_([A-Za-z_]\w*)$")


def discover_modules(modules_dir: Path) -> list[Module]:
    """The modules under `modules_dir`, sorted by number; folders without any .py are skipped."""
    found: dict[int, Module] = {}
    for folder in sorted(modules_dir.iterdir()):
        match = _MODULE_DIR.match(folder.name)
        if not folder.is_dir() or not match:
            continue
        number, name = int(match.group(1)), match.group(2)
        source = folder / f"{name}.py"
        if not source.is_file() and (folder / f"{name}.ipynb").is_file():
            source = folder / f"{name}.ipynb"  # a student kit carries release notebooks
        if not source.is_file():
            others = sorted(p.name for p in folder.glob("*.py"))
            if others:
                raise CourseError(
                    f"module folder {folder} must hold {name}.py (the name after the number); "
                    f"found {', '.join(others)}"
                )
            continue
        if number in found:
            raise CourseError(
                f"two modules share number {number:02d}: {found[number].slug} and {folder.name}"
            )
        found[number] = Module(number, name, source)
    return [found[number] for number in sorted(found)]


def resolve_module(modules: list[Module], spec: str) -> Module:
    """Pick a module by `1`, `01`, `01_tensor` or `tensor`."""
    for module in modules:
        if spec == module.slug or spec == module.name:
            return module
        if spec.isdigit() and int(spec) == module.number:
            return module
    known = ", ".join(module.slug for module in modules) or "none"
    raise CourseError(f"no module {spec!r}; expected a number, NN_name or name of one of: {known}")


def is_checkout(folder: Path) -> bool:
    """Whether `folder` is a tinyflo checkout: its modules/ and its pyproject.toml."""
    return (folder / "modules").is_dir() and (folder / "pyproject.toml").is_file()


def find_modules_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Locate modules/: the argument, $TINYFLO_MODULES, a checkout above the cwd, or ours."""
    try:
        variable = None if explicit else environment.read("TINYFLO_MODULES")
    except environment.VariableError as error:
        raise CourseError(str(error)) from None
    for given, origin in ((explicit, "--modules"), (variable, "TINYFLO_MODULES")):
        if given:
            path = Path(given).expanduser().resolve()
            if not path.is_dir():
                raise CourseError(f"{origin} names {given!r}, which is not a directory")
            if not discover_modules(path):  # refused before anything is written (export removes files)
                raise CourseError(f"{origin}: {path} holds no course modules (folders NN_name holding name.py)")
            return path
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if is_checkout(folder):
            return folder / "modules"
    checkout = Path(__file__).resolve().parents[3]  # src/tinyflo/course/source.py -> repo
    if is_checkout(checkout):
        return checkout / "modules"
    kit = Path(__file__).resolve().parent / "release"  # a student kit's release notebooks
    if kit.is_dir():
        return kit
    raise CourseError(
        "cannot find the course modules/: pass --modules PATH, set TINYFLO_MODULES, or run "
        "inside a tinyflo checkout (a folder with modules/ beside pyproject.toml)"
    )
