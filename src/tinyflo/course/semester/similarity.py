"""Submissions that look copied: each student's own code in one module, compared pair by pair.

Each student's code is compared by its structure (tinyflo.course.semester.structure): every helper function is put where
it is called, every name becomes one name, docstrings, comments and strings' contents go, and the
definitions are put in one order; so renaming, reordering, new comments, and splitting a function
into helpers or merging helpers back do not hide a copy. The comparison of those texts is copydetect's
(Stanford MOSS's winnowing): each is reduced to fingerprints of its k-grams of tokens, and two
submissions are alike by the share of their code whose fingerprints they have in common. Only the
code a student wrote counts: the cells nbgrader marks as solutions and the cells the student added.
The course's given code is not in them, and the stubs of the released solution cells (signatures,
docstrings, ``raise NotImplementedError``) are boilerplate that matches nothing. A pair's page shows
that code too, and only that, as the students wrote it: a row per task, the two students side by
side, the lines that match marked."""

from __future__ import annotations

import functools
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyflo.core.checkpoints import atomic_write
from tinyflo.course.notebooks import require
from tinyflo.course.semester.nbgrader_run import course_command
from tinyflo.course.semester.structure import origins, structure, structured
from tinyflo.course.source import NOTEBOOK_LIMIT, SIMILAR, CourseError, read_regular

# A page shows code as text with its own inline style: no script runs, nothing loads, no form is sent.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_HEAD = f"<!doctype html><html><head><meta http-equiv='Content-Security-Policy' content=\"{PAGE_POLICY}\"><meta charset='utf-8'>"

NOISE = 25  # copydetect's default: shorter matches than this (in filtered characters) are noise
GUARANTEE = 25  # every match at least this long is found (one fingerprint per k-gram)
ADDED = "cells of their own"  # what labels the code cells a student added


@dataclass(frozen=True)
class Pair:
    """Two students and how much of each one's code the other has too (0 to 1)."""

    first: str
    second: str
    first_share: float
    second_share: float

    @property
    def similarity(self) -> float:
        """The larger share: a short submission copied whole into a long one is still a copy."""
        return max(self.first_share, self.second_share)


@dataclass(frozen=True)
class Part:
    """One piece of a student's own code: a task's solution cell (labelled by the task) or a cell
    they added (labelled ADDED), and where it starts in their code as compared (joined)."""

    label: str
    source: str
    start: int


def _code_cells(notebook: dict) -> list[dict]:
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    return [cell for cell in (cells if isinstance(cells, list) else [])
            if isinstance(cell, dict) and cell.get("cell_type") == "code"]


def _marks(cell: dict) -> dict | None:
    """A cell's nbgrader metadata: a dict, {} when it is not one, None when there is none."""
    metadata = cell.get("metadata")
    marks = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return marks if marks is None or isinstance(marks, dict) else {}


def _source(cell: dict) -> str | None:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    return source if isinstance(source, str) else None  # anything else is not a notebook's code


def given_cells(release: dict) -> list[dict]:
    """The code cells of the release that are not solution cells: the course's given code."""
    return [cell for cell in _code_cells(release) if not (_marks(cell) or {}).get("solution")]


def own_parts(notebook: dict, release: dict | None = None) -> list[Part]:
    """The code a student wrote, in order: each solution cell, labelled by its task (its grade id
    without ``_code``), and each code cell they added, labelled ADDED. A cell of the ``release``
    (the same cell id, or the same text) is the course's, edited or not: grading puts it back."""
    given = given_cells(release or {})
    given_ids = [cell["id"] for cell in given if isinstance(cell.get("id"), str)]  # a list: an id may be anything
    given_sources = {_source(cell) for cell in given}
    parts, start = [], 0
    for cell in _code_cells(notebook):
        marks, source = _marks(cell), _source(cell)
        if source is None:
            continue
        if marks and marks.get("solution"):
            label = str(marks.get("grade_id", "")).removesuffix("_code") or "a solution cell"
        elif marks is None and not (cell.get("id") in given_ids or source in given_sources):
            label = ADDED
        else:
            continue
        parts.append(Part(label, source, start))
        start += len(source) + 2  # as joined
    return parts


def joined(parts: list[Part]) -> str:
    """The parts as one text, the way they are compared: each Part's start is its place in it."""
    return "\n\n".join(part.source for part in parts) + "\n"


def own_code(notebook: dict, release: dict | None = None) -> str:
    """The code a student wrote (own_parts), as one text."""
    return joined(own_parts(notebook, release))


def _fingerprint(name: str, code: str, boilerplate: list):
    window = GUARANTEE - NOISE + 1
    return require("copydetect").CodeFingerprint(f"{name}.py", NOISE, window, boilerplate=boilerplate,
                                                 fp=io.StringIO(code), language="python")


class Compared:
    """A student's code as it is compared (`structure`) and fingerprinted, and for each line of that
    text the lines of their code it stands for, so that `lines` can say where a match is."""

    def __init__(self, code: str, boilerplate: list):
        self.code = code
        self.text, tree, broken = structured(code)
        self.fingerprint = _fingerprint("code", self.text, boilerplate)
        text = self.text.split("\n")
        unparsed = len(text) - sum(last - first + 1 for first, last in broken)
        self.origins = ([[(n, n)] for n in range(1, len(text) + 1)] if tree is None else
                        origins(tree, "\n".join(text[:unparsed])) +
                        [[(n, n)] for first, last in broken for n in range(first, last + 1)])

    def lines(self, slices: tuple) -> list[tuple[int, int]]:
        """Where a match is in the student's code: ``slices`` (copydetect's starts and ends in the text
        compared) as the lines of their code that stand for a line of that text at least half matched,
        each from its indent to its end."""
        code, found = _spans(self.code), set()
        for (first, last), spans in zip(_spans(self.text), self.origins):
            matched = sum(max(0, min(last, end) - max(first, start)) for start, end in zip(*slices))
            if last > first and 2 * matched >= last - first:
                found.update(n for start, end in spans for n in range(start, min(end, len(code)) + 1))
        return [code[n - 1] for n in sorted(found) if code[n - 1][0] < code[n - 1][1]]


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each line of ``text`` is, from its indent to its last character that is not a space."""
    spans, at = [], 0
    for line in text.split("\n"):
        spans.append((at + len(line) - len(line.lstrip()), max(at + len(line) - len(line.lstrip()), at + len(line.rstrip()))))
        at += len(line) + 1
    return spans


@functools.lru_cache(maxsize=64)
def _stub_prints(boilerplate: str) -> list:
    """The fingerprints of what everyone was given, which count for nothing."""
    return (np.unique(np.array(list(_fingerprint("boilerplate", structure(boilerplate), []).hashes)))
            if boilerplate.strip() else [])


def rank_pairs(codes: dict[str, str], boilerplate: str = "") -> list[Pair]:
    """Every pair of students, the most alike first."""
    compare_files = require("copydetect").compare_files
    stubs = _stub_prints(boilerplate)
    prints = {student: _fingerprint(student, structure(code), stubs) for student, code in sorted(codes.items())}
    students = list(prints)
    pairs = []
    for i, first in enumerate(students):
        for second in students[i + 1:]:
            _, (share_1, share_2), _ = compare_files(prints[first], prints[second])
            pairs.append(Pair(first, second, float(share_1), float(share_2)))
    return sorted(pairs, key=lambda p: (-p.similarity, p.first, p.second))


def shared_lines(mine: str, theirs: str, boilerplate: str = "") -> tuple[list, list]:
    """The lines of ``mine`` that ``theirs`` has too, and of ``theirs`` that ``mine`` has (start and end
    of each, from its indent), as compared (`structure`), ``boilerplate`` counting for nothing."""
    one, two = _compared(mine, boilerplate), _compared(theirs, boilerplate)
    _, _, (slices_1, slices_2) = require("copydetect").compare_files(one.fingerprint, two.fingerprint)
    return one.lines(slices_1), two.lines(slices_2)


@functools.lru_cache(maxsize=256)  # some 600 KB each for 200 lines; pages of 200 students: each row made once
def _compared(code: str, boilerplate: str) -> Compared:
    """A row of a pair page as compared, kept for the next page that shows the same student's row."""
    return Compared(code, _stub_prints(boilerplate))


def _read(path: Path) -> dict:
    try:
        return json.loads(read_regular(path, NOTEBOOK_LIMIT).decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CourseError(f"cannot read {path}: {error}") from None


def _marked(code: str, ranges: list[tuple[int, int]]) -> str:
    """``code`` as HTML text, each of ``ranges`` (start, end) in a <mark>."""
    out, at = [], 0
    for start, end in ranges:
        out += [html.escape(code[at:start]), "<mark>", html.escape(code[start:end]), "</mark>"]
        at = end
    return "".join(out) + html.escape(code[at:])


def _by_label(parts: list[Part]) -> dict[str, str]:
    """A student's code under each label, a label's cells (the cells they added) joined."""
    cells: dict[str, list[str]] = {}
    for part in parts:
        cells.setdefault(part.label, []).append(part.source)
    return {label: joined([Part(label, source, 0) for source in sources]).removesuffix("\n")
            for label, sources in cells.items()}


PAGE_STYLE = ("body{font-family:sans-serif;margin:1em}.row{display:grid;grid-template-columns:1fr 1fr;gap:1em}"
              "h2,summary{font-size:105%;margin:1em 0 .3em}summary{color:#555;cursor:pointer}"
              "pre{background:#f6f6f6;padding:.5em;font-size:85%;white-space:pre-wrap;overflow-wrap:anywhere;"
              "margin:0 0 .5em}mark{background:#ffd54f}.none{color:#888;font-style:italic}"
              ".names{position:sticky;top:0;background:white;padding:.3em 0;border-bottom:1px solid #ccc}")


def pair_page(pair: Pair, parts: dict[str, list[Part]], module: str, stubs: dict[str, str] | None = None,
              given: int = 0) -> str:
    """A self-contained HTML page: the two students' own code side by side, a row per task (and a last
    one for the cells they added), the code they share marked; a row that shares none is folded.

    Each row is compared on its own, with the task's released stub (``stubs``, by label) as what
    both were given, so a mark is code of that task; ``given``: how many cells of given code the
    module has, which the page leaves out."""
    title = f"{module}: {pair.first} and {pair.second}, {pair.similarity:.0%} alike"
    first, second = _by_label(parts[pair.first]), _by_label(parts[pair.second])
    labels = [label for label in dict.fromkeys([*first, *second]) if label != ADDED]
    labels += [ADDED] if ADDED in first or ADDED in second else []  # they line up with nothing
    rows, shared = [], 0
    for label in labels:
        mine, theirs = first.get(label, ""), second.get(label, "")
        marks: tuple[list, list] = ([], [])
        if mine.strip() and theirs.strip():
            marks = shared_lines(mine, theirs, (stubs or {}).get(label, ""))
        columns = "".join(f"<div><pre>{_marked(code, ranges)}</pre></div>" if code else
                          "<div><p class='none'>no such cell</p></div>" for code, ranges in zip((mine, theirs), marks))
        name = html.escape(label if label == ADDED else f"task {label}")
        if marks[0] or marks[1]:
            shared += 1
            rows.append(f"<h2>{name}</h2><div class='row'>{columns}</div>")
        else:
            rows.append(f"<details><summary>{name}: nothing in common</summary><div class='row'>{columns}</div>"
                        "</details>")
    left_out = (f"The course's given code ({given} cell{'' if given == 1 else 's'}, the same in every submission) "
                "is left out. " if given else "")
    names = "".join(f"<div><b>{html.escape(student)}</b>: {share:.0%} of this code is in the other</div>"
                    for student, share in ((pair.first, pair.first_share), (pair.second, pair.second_share)))
    return (f"{_HEAD}<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>"
            "<p>What each student wrote: their solution cell of each task, and any cells they added. "
            f"{left_out}Marked: the lines of a task that the other has in the same task, compared by structure "
            "(helper functions put where they are called, names replaced, comments, docstrings and strings removed, "
            "definitions in one order), so a marked helper may stand for lines the other wrote in place; the "
            f"released stubs are not counted. {shared} of {len(labels)} rows share code; the others are folded.</p>"
            f"<div class='row names'>{names}</div>" + "".join(rows) + "</body></html>\n")


FEW_PAIRS = 10  # below this many pairs a class has no spread to stand out from: SIMILAR flags


@dataclass(frozen=True)
class Flag:
    """Which pairs get a page: those at least `threshold` alike; `how` says where it comes from."""

    threshold: float
    how: str


def class_flag(scores: list[float]) -> Flag:
    """The class's own outliers: pairs above Tukey's upper fence (the third quartile plus 1.5 times
    the spread between the quartiles) of every pair's score, where honest pairs gather; with fewer
    than FEW_PAIRS pairs, a fixed SIMILAR."""
    if len(scores) < FEW_PAIRS:
        return Flag(SIMILAR, f"at least {SIMILAR:.0%} alike (a fixed share: {len(scores)} pairs are too few to "
                             "stand out from)")
    first, third = np.percentile(scores, [25, 75])
    fence = float(third + 1.5 * (third - first))
    above = float(np.nextafter(fence, np.inf))  # above the fence, not on it
    return Flag(above, f"more than {fence:.0%} alike (the class's outliers: above the third quartile of "
                       f"every pair's score, {third:.0%}, by 1.5 times the spread between the quartiles)")


def similarity(course_dir: Path, module_slug: str, notebook_name: str, students: list[str], out: Path,
               threshold: float | None = None) -> tuple[list[Pair], Flag]:
    """Rank the pairs of ``students``' submissions of one module; write a page per pair the flag marks
    (``threshold`` alike or more, or by default the class's outliers: `class_flag`), and an index,
    into the folder ``out``."""
    release = course_dir / "release" / module_slug / f"{notebook_name}.ipynb"
    if not release.is_file():
        raise CourseError(f"{module_slug} is not released yet ({release} is missing): its stubs are what "
                          f"every submission shares; run `{course_command(f'release {module_slug}', course_dir)}` first")
    if len(students) < 2:
        raise CourseError(f"{module_slug}: {len(students)} readable submission(s); comparing needs two")
    given = _read(release)
    parts = {s: own_parts(_read(course_dir / "submitted" / s / module_slug / f"{notebook_name}.ipynb"), given)
             for s in students}
    pairs = rank_pairs({student: joined(own) for student, own in parts.items()}, own_code(given, given))
    stubs = _by_label(own_parts(given, given))
    flag = (class_flag([p.similarity for p in pairs]) if threshold is None
            else Flag(threshold, f"at least {threshold:.0%} alike (--threshold)"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pair in pairs:
        page = None
        if pair.similarity >= flag.threshold:
            page = f"{pair.first}--{pair.second}.html"
            text = pair_page(pair, parts, module_slug, stubs, len(given_cells(given)))
            atomic_write(out / page, lambda handle, text=text: handle.write(text.encode("utf-8")))
        link = f"<a href='{html.escape(page)}'>side by side</a>" if page else ""
        rows.append(f"<tr><td>{html.escape(pair.first)}</td><td>{html.escape(pair.second)}</td>"
                    f"<td>{pair.similarity:.0%}</td><td>{link}</td></tr>")
    module = html.escape(module_slug)
    index = (f"{_HEAD}<title>{module}: similar submissions"
             f"</title></head><body><h1>{module}: pairs of submissions, the most alike first</h1>"
             f"<p>{len(students)} submissions, {len(pairs)} pairs. How alike two are: the larger share of either "
             "one's own code (their solution cells and the cells they added) that the other has too, compared by "
             "structure: helper functions put where they are called, names replaced, comments, docstrings and "
             f"strings removed, definitions in one order. Each pair {html.escape(flag.how)} has a page, its code "
             "side by side. A high score is a reason to look, not a verdict: short tasks with one natural "
             "solution are alike in honest submissions too.</p><table><tr><th>student</th><th>student</th><th>alike</th><th></th></tr>"
             + "".join(rows) + "</table></body></html>\n")
    atomic_write(out / "index.html", lambda handle: handle.write(index.encode("utf-8")))
    return pairs, flag
