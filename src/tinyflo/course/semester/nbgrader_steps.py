"""tinyflo's steps in nbgrader's own pipeline, named by the course's nbgrader_config.py.

So plain `nbgrader autograde` and `nbgrader generate_feedback` in a course folder grade the
way `tinyflo course autograde` does:

* RestoreCourseCells (first step of autograde): the course's cells back in place, edited or
  deleted ones included (tinyflo.course.grader.grading.restore_locked_cells);
* InertStudentMarkup (next, and again whenever formgrader or the feedback exporter renders a
  notebook): the markdown and raw cells a student wrote run, load and style nothing;
* PlainOwnOutputs (in place of ClearOutput): the outputs the student's notebook came with, as
  they ran it themselves, kept as plain text and PNG images only and cut to a size;
* ScenarioGrade (in place of nbgrader's Execute): the submission is graded by tinyflo's engine
  (scenarios in the sandbox, verdicts in this process) and each grade cell gets the verdict as
  its only output: none when it passed, an error naming the failed check when it did not, which
  nbgrader's own rule turns into full or no points. No kernel runs, and nothing the student's
  code printed or raised while it was graded reaches the notebook, the gradebook or the
  feedback page.

`harden_nbgrader()`, called by the course's config, changes how nbgrader's autograde and
feedback steps handle a submission's files: see its docstring.

Only nbgrader imports this file, so it may import nbgrader.
"""

from __future__ import annotations

import base64
import binascii
import copy
import html
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import nh3
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from nbgrader.converters import Autograde, BaseConverter, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import parse_utc
from traitlets import Bool, Unicode

from tinyflo import environment
from tinyflo.course.grader.grading import (
    DEFAULT_TIMEOUT,
    grade,
    restore_locked_cells,
    submission_inputs,
)
from tinyflo.course.grader.sandbox import NO_SANDBOX_VARIABLE, SLOT_VARIABLE, TIMEOUT_VARIABLE
from tinyflo.course.grader.tree import cached_tree
from tinyflo.course.notebooks import graded_source_file, require
from tinyflo.course.semester.settings import late_points, read_penalty
from tinyflo.course.source import (
    NOTEBOOK_LIMIT,
    VALID_ID,
    NotebookError,
    discover_modules,
    read_notebook_bytes,
    read_regular,
    resolve_module,
)

FAILED = "CheckFailed"  # the error a failed grade cell shows

# What autograde takes from a submission folder besides its notebooks; nothing else is copied.
# timestamp.txt: when it was submitted; submission_secret.txt: the exchange's key to the student's feedback page.
SUBMISSION_FILES = ("timestamp.txt", "submission_secret.txt")
SMALL_FILE_LIMIT = 4096  # bytes: timestamp.txt, submission_secret.txt

TEXT_LIMIT = 64 * 1024  # characters of a cell's own text outputs kept
IMAGE_LIMIT = 1024 * 1024  # bytes of one PNG output kept
NOTEBOOK_OUTPUT_LIMIT = 8 * 1024 * 1024  # bytes of outputs kept for a whole notebook
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _real_folder(path: Path) -> None:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path}: not a folder (a link or a file)")


def check_submission(coursedir: Any, assignment_id: str, student_id: str) -> None:
    """Check a submission's folders and notebooks; OSError names the first problem.

    `submitted/<student>/<module>/` must be real folders (no link to someone else's), named by
    valid ids, each notebook a regular file of its own under the size limit, and each notebook
    the module has one a grader can read (read_notebook_bytes, as `tinyflo course autograde`
    checks first, so plain `nbgrader autograde` refuses the same).
    """
    for name, value in (("student id", student_id), ("module id", assignment_id)):
        if not VALID_ID.match(value):
            raise OSError(f"{name} {value!r}: letters, digits and . _ @ + - expected")
    root = Path(coursedir.root) / coursedir.submitted_directory
    student_dir = root / student_id
    folder = student_dir / assignment_id
    _real_folder(student_dir)
    _real_folder(folder)
    source = Path(coursedir.root) / coursedir.source_directory / assignment_id
    graded = {path.name for path in source.glob("*.ipynb")}  # nbgrader skips any other notebook
    for notebook in sorted(path for path in folder.iterdir() if path.suffix == ".ipynb"):
        data = read_regular(notebook, NOTEBOOK_LIMIT)
        if notebook.name in graded:
            try:
                read_notebook_bytes(data)
            except NotebookError as error:
                raise OSError(f"{notebook.name} is not a readable notebook ({error})") from None


def _take_own_files(self: BaseConverter, assignment_id: str, student_id: str) -> None:
    """init_assignment for autograde and feedback: a submission's notebooks are checked and,
    of its other files, only SUBMISSION_FILES that are regular files are copied."""
    if isinstance(self, Autograde):
        try:
            check_submission(self.coursedir, assignment_id, student_id)
        except OSError as error:
            raise OSError(
                f"submission refused: student {student_id}, {assignment_id}: {error}"
            ) from None
    source = Path(self._format_source(assignment_id, student_id))
    dest = Path(self._format_dest(assignment_id, student_id))
    for name in SUBMISSION_FILES:
        try:
            data = read_regular(source / name, SMALL_FILE_LIMIT)
        except FileNotFoundError:
            continue
        except OSError as error:
            if os.path.lexists(source / name):
                self.log.warning("Not copied: %s", error)
            continue
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / name
        if os.path.lexists(target):
            os.unlink(target)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)


def _set_permissions_on_own_files(self: BaseConverter, assignment_id: str, student_id: str) -> None:
    """set_permissions without following links: only regular files are changed."""
    dest = os.path.normpath(self._format_dest(assignment_id, student_id))
    permissions = int(str(self.permissions), 8)
    for folder, _, names in os.walk(dest):
        for name in names:
            try:
                fd = os.open(
                    os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                )
            except OSError:
                self.log.warning("Not a regular file, left alone: %s", os.path.join(folder, name))
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.fchmod(fd, permissions)
            finally:
                os.close(fd)


def _existing_timestamp(self: CourseDirectory, dest_path: str) -> Any:
    """get_existing_timestamp reading timestamp.txt only as a small regular file."""
    path = os.path.join(dest_path, "timestamp.txt")
    if not os.path.lexists(path):
        return None
    try:
        text = read_regular(path, SMALL_FILE_LIMIT).decode("utf-8", "replace").strip()
    except OSError as error:
        self.log.warning("Timestamp ignored: %s", error)
        return None
    if not text:
        return None
    try:
        return parse_utc(text)
    except ValueError:
        self.fail(f"Invalid timestamp string: {path}")


def harden_nbgrader() -> None:
    """Make nbgrader's autograde and feedback steps handle a submission's files as hostile.

    nbgrader copies every other file of a submission folder into autograded/ and feedback/
    (following links), reads notebooks and timestamp.txt through links, and chmods what it
    finds in its output folders through links. After this call, for autograde and feedback:

    * a submission is refused (an error for that student, the others go on) unless
      `submitted/<student>/<module>/` are real folders named by valid ids and each notebook
      is a regular file with one name, at most NOTEBOOK_LIMIT bytes;
    * only timestamp.txt, as a small regular file, is copied besides the notebooks;
    * permissions are set on regular files only, never through a link.

    generate_assignment (whose input is the instructor's source/) is left as nbgrader has it.
    """
    if getattr(BaseConverter, "_tinyflo_hardened", False):
        return
    take_files = BaseConverter.init_assignment
    set_permissions = BaseConverter.set_permissions

    def init_assignment(self: BaseConverter, assignment_id: str, student_id: str) -> None:
        if isinstance(self, (Autograde, GenerateFeedback)):
            _take_own_files(self, assignment_id, student_id)
        else:
            take_files(self, assignment_id, student_id)

    def permissions(self: BaseConverter, assignment_id: str, student_id: str) -> None:
        if isinstance(self, (Autograde, GenerateFeedback)):
            _set_permissions_on_own_files(self, assignment_id, student_id)
        else:
            set_permissions(self, assignment_id, student_id)

    BaseConverter.init_assignment = init_assignment
    BaseConverter.set_permissions = permissions
    CourseDirectory.get_existing_timestamp = _existing_timestamp
    BaseConverter._tinyflo_hardened = True


class RestoreCourseCells(NbGraderPreprocessor):
    """The course's cells back in place before a submission is graded."""

    source_dir = Unicode("", help="the course's source/ folder").tag(config=True)

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        info = resources["nbgrader"]
        path = Path(self.source_dir) / info["assignment"] / f"{info['notebook']}.ipynb"
        source = graded_source_file(path, info["notebook"])
        return restore_locked_cells(nb, source), resources


# What a student's markdown keeps once rendered: its text and the structure markdown gives it
# (headings, paragraphs, lists, emphasis, code, quotes, tables) and links to web pages. Nothing that
# runs, loads or styles: no script, style, image, frame, object, form or meta, no event or style
# attribute, and no class or id (the pages' own scripts and styles key on them).
MARKUP_TAGS = frozenset({
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "hr", "blockquote", "pre", "code", "kbd", "samp",
    "em", "strong", "b", "i", "u", "s", "del", "ins", "mark", "sub", "sup", "small", "span", "div",
    "ul", "ol", "li", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "th", "td", "a",
})
MARKUP_ATTRIBUTES = {"a": {"href"}, "ol": {"start"}}
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
# MathJax leaves the TeX of an element of this class as the student typed it: their TeX is never run.
INERT_CLASS = "tex2jax_ignore"
_INERT_OPEN = f'<div class="{INERT_CLASS}">'
# Cell metadata that grading reads; the rest (tags, raw_mimetype, transient, jupyter, ...) is what
# pages render or use to hide a cell's text, so it goes.
KEPT_METADATA = ("nbgrader", "tinyflo", "deletable", "editable")


class _TextImages(IPythonRenderer):
    """nbconvert's markdown renderer with each image shown as its alt text: nothing is loaded (and
    a missing attachment is no error)."""

    def image(self, text: str, url: str, title: str | None = None) -> str:
        return text


def _clean(html: str) -> str:
    return nh3.clean(html, tags=set(MARKUP_TAGS), attributes=MARKUP_ATTRIBUTES,
                     url_schemes=set(LINK_SCHEMES), url_relative="deny",
                     allowed_classes={"div": {INERT_CLASS}})


def _one_block(clean: str) -> str:
    # One line in one <div>: markdown passes an HTML block through as it is, up to a blank line,
    # which would let the rest be read as markdown again (a character reference is the same text).
    return clean.replace("\r", "&#13;").replace("\n", "&#10;")


# Markdown renders in time that grows faster than its length (nested brackets: 0.2 s for 16 KB,
# hours for 2 MiB), so a student's markdown is rendered as markdown up to these sizes, a cell's
# and a notebook's; past them it is shown as the text it is, which takes linear time.
MARKDOWN_CELL_LIMIT = 16 * 1024
MARKDOWN_NOTEBOOK_LIMIT = 64 * 1024


def inert_markdown(source: str, as_markdown: bool = True) -> str:
    """A markdown cell's source as markdown that renders to inert HTML: the same text, headings,
    lists, emphasis, code and tables, and links to web pages only (nh3 with MARKUP_TAGS); with
    `as_markdown=False`, its text as it is, in a <pre>."""
    if source.startswith(_INERT_OPEN) and _one_block(_clean(source)) == source:
        return source  # already inert: the pages' second pass changes nothing
    if as_markdown:
        renderer = _TextImages(escape=False, exclude_anchor_links=True)
        rendered = MarkdownWithMath(renderer=renderer).render(source)
    else:
        rendered = "<pre>" + html.escape(source, quote=False) + "</pre>"
    return _INERT_OPEN + _one_block(_clean(rendered)) + "</div>"


def _markup(cell: Any) -> str:
    attachments = cell.get("attachments") or {}
    return json.dumps([cell.cell_type, cell.source, attachments], sort_keys=True)


ROSTER_NAMES = ("first_name", "last_name")  # in formgrader's resources: an LMS lets students choose them


class InertStudentMarkup(Preprocessor):
    """The markdown and raw cells a student wrote, made inert; cell metadata cut to what grading reads.

    A markdown cell whose text and attachments are not one of the course's becomes inert_markdown
    of its text, without attachments; a raw cell the student wrote loses the format that would
    make a page render it. Every cell keeps only KEPT_METADATA. The course's cells are those of
    its graded source (as RestoreCourseCells restores them); when the notebook's module is not
    known, every cell counts as the student's. Autograde runs this after RestoreCourseCells, and
    formgrader and the feedback pages again before they render, so a notebook autograded
    before this step existed is rendered inert too.
    """

    source_dir = Unicode("", help="the course's source/ folder: its cells are the course's").tag(
        config=True
    )
    # nbconvert's kind of step, not nbgrader's (formgrader's exporter runs it too); on wherever it
    # is named, and no setting turns it off
    enabled = Bool(True)

    def _course_markup(self, resources: dict) -> set[str]:
        info = resources.get("nbgrader") or {}
        # autograde and feedback name the notebook in resources["nbgrader"], formgrader beside it
        module = info.get("assignment", resources.get("assignment_id"))
        name = info.get("notebook", resources.get("notebook_id"))
        if not (self.source_dir and isinstance(module, str) and isinstance(name, str)
                and VALID_ID.match(module) and VALID_ID.match(name)):
            return set()
        path = Path(self.source_dir) / module / f"{name}.ipynb"
        if not path.is_file():
            return set()
        return {_markup(cell) for cell in graded_source_file(path, name).cells}

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        for name in ROSTER_NAMES:  # formgrader's page prints the roster's names unescaped
            if isinstance(resources.get(name), str):
                resources[name] = html.escape(resources[name])
        course = self._course_markup(resources)
        room = MARKDOWN_NOTEBOOK_LIMIT  # of the student's markdown rendered as markdown
        for cell in nb.cells:
            cell.metadata = {key: cell.metadata[key] for key in KEPT_METADATA if key in cell.metadata}
            if cell.cell_type not in ("markdown", "raw") or _markup(cell) in course:
                continue
            cell.pop("attachments", None)
            if cell.cell_type == "markdown":
                as_markdown = len(cell.source) <= min(MARKDOWN_CELL_LIMIT, room)
                room -= len(cell.source) if as_markdown else 0
                cell.source = inert_markdown(cell.source, as_markdown)
        return nb, resources


def _plain_output(output: Any, room: int) -> tuple[Any | None, int]:
    """One output as the student's notebook had it, reduced to text and PNG, and its size."""
    nbformat = require("nbformat")
    kind = output.get("output_type")
    if kind == "stream":
        text = _text(output.get("text", ""))[: min(TEXT_LIMIT, room)]
        name = "stderr" if output.get("name") == "stderr" else "stdout"
        return nbformat.v4.new_output("stream", name=name, text=text), len(text)
    if kind == "error":
        text = f"{_text(output.get('ename', ''))}: {_text(output.get('evalue', ''))}"
        text = text[: min(TEXT_LIMIT, room)]
        return nbformat.v4.new_output("stream", name="stderr", text=text), len(text)
    if kind not in ("execute_result", "display_data"):
        return None, 0
    data = output.get("data", {})
    kept: dict[str, str] = {}
    image = data.get("image/png")
    if isinstance(image, str) and len(image) <= min(IMAGE_LIMIT * 4 // 3 + 4, room):
        try:
            if base64.b64decode(image, validate=True)[:8] == PNG_MAGIC:
                kept["image/png"] = image
        except (binascii.Error, ValueError):
            pass
    text = _text(data.get("text/plain", ""))[: min(TEXT_LIMIT, room)]
    if text or not kept:
        kept["text/plain"] = text
    size = sum(len(value) for value in kept.values())
    return nbformat.v4.new_output("display_data", data=kept), size


def _text(value: Any) -> str:
    if isinstance(value, list):
        value = "".join(part for part in value if isinstance(part, str))
    return value if isinstance(value, str) else ""


class PlainOwnOutputs(NbGraderPreprocessor):
    """The outputs a submission came with, kept as plain text and PNG images, cut to size.

    They are what the student's own kernel showed them before they submitted, so the feedback
    page shows the notebook as submitted. HTML, JavaScript, widgets and other rich outputs are
    dropped (the instructor's formgrader renders this notebook); each cell keeps at most
    TEXT_LIMIT characters of text, the notebook at most NOTEBOOK_OUTPUT_LIMIT bytes.
    """

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        room = NOTEBOOK_OUTPUT_LIMIT
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            kept = []
            cell_room = min(room, TEXT_LIMIT + IMAGE_LIMIT * 2)
            for output in cell.get("outputs", []):
                if cell_room <= 0:
                    break
                plain, size = _plain_output(output, cell_room)
                if plain is not None:
                    kept.append(plain)
                    cell_room -= size
                    room -= size
            cell.outputs = kept
            if not isinstance(cell.get("execution_count"), int):
                cell.execution_count = None
        return nb, resources


class ScenarioGrade(NbGraderPreprocessor):
    """Grade the submission with tinyflo's engine and write each grade cell's verdict."""

    modules_dir = Unicode("", help="the course's modules/ folder").tag(config=True)
    key_file = Unicode("", help="the course's key: each student's inputs derive from it").tag(
        config=True
    )

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        nbformat = require("nbformat")
        info = resources["nbgrader"]
        modules = discover_modules(Path(self.modules_dir))
        module = resolve_module(modules, info["assignment"])
        timeout = environment.read(TIMEOUT_VARIABLE) or DEFAULT_TIMEOUT  # read and checked in one place
        sandboxed = environment.read(NO_SANDBOX_VARIABLE) != "1"
        key = Path(self.key_file).read_text(encoding="utf-8").strip()
        report = grade(
            nb,
            module,
            cached_tree(modules, module),
            timeout,
            sandboxed,
            hidden=True,
            student=submission_inputs(str(info["student"]), nb),
            key=key,
            slot=environment.read(SLOT_VARIABLE) or 0,
        )
        verdicts = {cell.grade_id: cell for cell in report.cells}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            if not meta.get("grade"):
                continue  # the student's own outputs, as PlainOwnOutputs kept them
            cell.execution_count = None
            verdict = verdicts.get(meta.get("grade_id"))
            if verdict is not None and verdict.passed:
                cell.outputs = []
                continue
            why = verdict.error if verdict is not None else "this cell is not one the course grades"
            cell.outputs = [
                nbformat.v4.new_output(
                    "error", ename=FAILED, evalue=why or "", traceback=[why or ""]
                )
            ]
        return nb, resources


class LatePenalty(LateSubmissionPlugin):
    """The points a late notebook loses, as course.toml's [late] penalty says when nbgrader grades.

    nbgrader's AssignLatePenalties asks it for each notebook submitted after the student's due
    date (their extension's, if any) and records the answer, at most the notebook's score.
    """

    course_file = Unicode("", help="the course's course.toml").tag(config=True)

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float | None:
        return late_points(read_penalty(Path(self.course_file)), score, total_seconds_late)


# A feedback page needs its inline styles and PNG images as data: URLs, and nothing else. MathJax
# (from a CDN) is not loaded: the course's TeX shows as typed, and nothing leaves for another host.
FEEDBACK_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                   "base-uri 'none'; form-action 'none'")


def with_policy(page: str, policy: str) -> str:
    """The page with a Content-Security-Policy meta tag first in its head, before anything it governs."""
    head = page.find("<head>")
    if head < 0:
        raise ValueError("a page without <head>: its Content-Security-Policy has no place (check the template)")
    end = head + len("<head>")
    return f'{page[:end]}\n<meta http-equiv="Content-Security-Policy" content="{policy}">{page[end:]}'


# What nbconvert's HTML accessibility pass changes: images without alt text, JupyterLab's cells.
_ACCESSIBILITY_MARKS = ("<img", "jp-Cell-inputWrapper", "jp-OutputArea-output")


class _KeptHighlight(Highlight2HTML):
    """Pygments' highlighting of a code cell, made once per text: the course's cells are the same in
    every submission of a module."""

    def __init__(self, kept: dict, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kept = kept

    def __call__(self, source: str, language: str | None = None, metadata: Any = None) -> str:
        # what the highlighting reads of the cell's metadata: the language its magics name
        magics = (metadata or {}).get("magics_language")
        key = (source, language, self.pygments_lexer, magics)
        if key not in self.kept:
            self.kept[key] = super().__call__(source, language, metadata)
        return self.kept[key]


# A task's heading: ### Task `tensor_add` (1 point): what it asks
TASK_HEADING = re.compile(r"^#+[ \t]*Task[ \t]+`([^`]+)`[ \t]*(?:\([^)\n]*\))?[ \t]*:?[ \t]*(.*)$", re.MULTILINE)
COMMENT_SHOWN = 60  # characters of a comment's first line the contents show


def feedback_contents(nb: Any) -> list[dict[str, str]]:
    """A feedback page's contents: an entry per graded task, in the notebook's order, named by its
    task (the grade cell's id), e.g. ``{"anchor": "tensor_add", "text": "tensor_add (1 point): 0/1",
    "about": "add two tensors", "comment": "tensor_add_code", "said": "No response.", "lost": "yes"}``.
    ``about`` is what the task's heading (``### Task `tensor_add`: add two tensors``) says it asks;
    ``comment`` the anchor of the comment on the task's solution cell (``<task>_code``) and ``said``
    its first line. A comment on a cell of no task is an entry of its own. All of it is text, to escape.
    """
    about: dict[str, str] = {}
    comments: dict[str, str] = {}
    for cell in nb.cells:
        marks = cell.metadata.get("nbgrader") or {}
        if cell.cell_type == "markdown":  # the course's (a student's is one inert line: no heading)
            for task, words in TASK_HEADING.findall(cell.source):
                about.setdefault(task, words.replace("`", "").strip())
        elif marks.get("solution") and str(marks.get("comment") or "").strip():
            first = str(marks["comment"]).strip().splitlines()[0]
            comments[str(marks.get("grade_id", ""))] = (
                first if len(first) <= COMMENT_SHOWN else first[:COMMENT_SHOWN - 3] + "...")
    entries = []
    for cell in nb.cells:
        marks = cell.metadata.get("nbgrader") or {}
        if not marks.get("grade") or marks.get("solution"):
            continue
        task, points, score = str(marks.get("grade_id", "")), float(marks.get("points") or 0), marks.get("score")
        got = "not graded yet" if score is None else f"{float(score):g}/{points:g}"
        comment = f"{task}_code" if f"{task}_code" in comments else ""
        entries.append({"anchor": task, "text": f"{task} ({points:g} point{'' if points == 1 else 's'}): {got}",
                        "about": about.get(task, ""), "comment": comment, "said": comments.get(comment, ""),
                        "lost": "yes" if score is not None and float(score) < points else ""})
    attached = {entry["comment"] for entry in entries}
    entries += [{"anchor": "", "text": grade_id, "about": "", "comment": grade_id, "said": said, "lost": ""}
                for grade_id, said in comments.items() if grade_id not in attached]
    return entries


# nbgrader's feedback page (its template 'feedback', as GenerateFeedback names it) with tinyflo's
# changes: the contents name each task and its points (nbgrader's say "Test cell" and "Comment"), and
# long lines wrap (a verdict is one line, and a student's code may be wide) instead of running past
# the page's edge. nbconvert's classic body (inside nbgrader's panel) is rendered without its own
# <body>, <main> and #notebook, which nbgrader's page already has.
FEEDBACK_TEMPLATE = """{%- extends 'index.html.j2' -%}

{%- block header -%}
{{ super() | replace('</head>', '<style>
div.output_subarea pre, div.input_area pre, div.panel-footer pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
#toc, div.rendered_html, span.nbgrader-label {
  overflow-wrap: anywhere;
}
div.nbgrader_cell .panel-heading {
  height: auto;
  min-height: 37px;
}
#toc li.lost {
  color: #a94442;
}
</style>
</head>') }}
{%- endblock header -%}

{% block body %}
<body>
  <a name="top"></a>
  <div class="container">
    <div class="panel panel-default">
      <div class="panel-heading">
        <h4>{{ resources.nbgrader.notebook | e }} (Score: {{ resources.nbgrader.score | float | round(2) }} / {{ resources.nbgrader.max_score | float | round(2) }})</h4>
        <div id="toc">
          <ol>
          {%- for entry in nb | feedback_contents %}
            <li{{ ' class="lost"' if entry.lost }}>
              {%- if entry.anchor %}<a href="#{{ entry.anchor | e }}">{{ entry.text | e }}</a>{% else %}{{ entry.text | e }}{% endif %}
              {%- if entry.about %} &mdash; {{ entry.about | e }}{% endif %}
              {%- if entry.comment %} (<a href="#comment-{{ entry.comment | e }}">comment</a>: {{ entry.said | e }}){% endif -%}
            </li>
          {%- endfor %}
          {%- if resources.nbgrader.late_penalty > 0 %}
            <li class="late-penalty">Late submission penalty (Score: -{{ resources.nbgrader.late_penalty | float | round(2) }})</li>
          {%- endif %}
          </ol>
        </div>
      </div>
      <div class="panel-body">
        <div id="notebook" class="border-box-sizing">
          <div class="container" id="notebook-container">
            {{ self.body_loop() }}
          </div>
        </div>
      </div>
    </div>
  </div>
</body>
{%- endblock body %}
"""
NBGRADER_FEEDBACK = "feedback"  # nbgrader's template, which FEEDBACK_TEMPLATE extends


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter for feedback pages, without the work that changes nothing.

    After rendering, nbconvert parses the whole page again to give images alt text and JupyterLab's
    cells a tab stop; nbgrader's feedback template has no such cells, so for a page without an image
    that parse (half of a module's feedback time) changes nothing. Such a page is rendered exactly as
    nbconvert renders it and kept; one with an image goes through nbconvert whole. And a code cell
    is highlighted once however many submissions show it.

    On nbgrader's feedback template (GenerateFeedback's own choice) the page is FEEDBACK_TEMPLATE:
    the contents name each task with its points (feedback_contents), and long lines wrap.

    Students, TAs and the instructor open these pages, so whatever the configuration says, the
    student's markup is made inert first (InertStudentMarkup), nbconvert sanitises HTML outputs
    (sanitize_html), and the page carries FEEDBACK_POLICY: no script runs, nothing is loaded from
    anywhere, no form is sent.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.highlighted: dict = {}  # (source, language, lexer, magics) -> its HTML, for every page
        self.sanitize_html = True
        if self.template_name == NBGRADER_FEEDBACK:
            self.raw_template = FEEDBACK_TEMPLATE
        if not any(isinstance(step, InertStudentMarkup) for step in self._preprocessors):
            self.register_preprocessor(InertStudentMarkup(parent=self), enabled=True)

    def default_filters(self) -> Any:
        yield from super().default_filters()
        yield ("feedback_contents", feedback_contents)  # FEEDBACK_TEMPLATE's

    def from_notebook_node(self, nb: Any, resources: dict | None = None, **kw: Any) -> tuple[str, dict]:
        rendered = copy.deepcopy(resources)
        # HTMLExporter's own preparation, then the template (nbconvert's steps, in its order)
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        highlight = self.filters.get("highlight_code",
                                     _KeptHighlight(self.highlighted, pygments_lexer=lexer, parent=self))
        rendered = self._init_resources(rendered)
        data_types = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=rendered)
        self.register_filter("highlight_code", highlight)
        self.register_filter("filter_data_type", data_types)
        page, rendered = TemplateExporter.from_notebook_node(self, nb, rendered, **kw)
        if any(mark in page for mark in _ACCESSIBILITY_MARKS):
            page, rendered = super().from_notebook_node(nb, resources, **kw)
        return with_policy(page, FEEDBACK_POLICY), rendered
