"""Submissions that look copied: each student's own code in one module, compared pair by pair.

The comparison is copydetect's (Stanford MOSS's winnowing): the code is tokenised, names become
placeholders and comments go, and each submission is reduced to fingerprints of its k-grams; two
submissions are alike by the share of their code whose fingerprints they have in common. Only the
code a student wrote counts: the cells nbgrader marks as solutions and the cells the student added.
The course's given code is not in them, and the stubs of the released solution cells (signatures,
docstrings, ``raise NotImplementedError``) are boilerplate that matches nothing.
"""

from __future__ import annotations

import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyflo.core.checkpoints import atomic_write
from tinyflo.course.notebooks import require
from tinyflo.course.source import NOTEBOOK_LIMIT, SIMILAR, CourseError, read_regular

# A page shows code as text with its own inline style: no script runs, nothing loads, no form is sent.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_HEAD = f"<!doctype html><html><head><meta http-equiv='Content-Security-Policy' content=\"{PAGE_POLICY}\"><meta charset='utf-8'>"

NOISE = 25  # copydetect's default: shorter matches than this (in filtered characters) are noise
GUARANTEE = 25  # every match at least this long is found (one fingerprint per k-gram)


@dataclass(frozen=True)
class Pair:
    """Two students and how much of each one's code the other has too (0 to 1)."""

    first: str
    second: str
    first_share: float
    second_share: float
    first_slices: tuple
    second_slices: tuple

    @property
    def similarity(self) -> float:
        """The larger share: a short submission copied whole into a long one is still a copy."""
        return max(self.first_share, self.second_share)


def own_code(notebook: dict) -> str:
    """The code a student wrote: the solution cells and the code cells they added, in order."""
    cells = []
    cells_in = notebook.get("cells") if isinstance(notebook, dict) else None
    for cell in cells_in if isinstance(cells_in, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        marks = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        if marks is None or (isinstance(marks, dict) and marks.get("solution")):
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(line, str) for line in source):
                source = "".join(source)
            if isinstance(source, str):  # anything else is not a notebook's code: nothing to compare
                cells.append(source)
    return "\n\n".join(cells) + "\n"


def _fingerprint(name: str, code: str, boilerplate: list):
    window = GUARANTEE - NOISE + 1
    return require("copydetect").CodeFingerprint(f"{name}.py", NOISE, window, boilerplate=boilerplate,
                                                 fp=io.StringIO(code), language="python")


def rank_pairs(codes: dict[str, str], boilerplate: str = "") -> list[Pair]:
    """Every pair of students, the most alike first."""
    compare_files = require("copydetect").compare_files
    stubs = np.unique(np.array(list(_fingerprint("boilerplate", boilerplate, []).hashes))) if boilerplate.strip() else []
    prints = {student: _fingerprint(student, code, stubs) for student, code in sorted(codes.items())}
    students = list(prints)
    pairs = []
    for i, first in enumerate(students):
        for second in students[i + 1:]:
            _, (share_1, share_2), (slices_1, slices_2) = compare_files(prints[first], prints[second])
            pairs.append(Pair(first, second, float(share_1), float(share_2),
                              tuple(map(tuple, slices_1)), tuple(map(tuple, slices_2))))
    return sorted(pairs, key=lambda p: (-p.similarity, p.first, p.second))


def _read(path: Path) -> dict:
    try:
        return json.loads(read_regular(path, NOTEBOOK_LIMIT).decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CourseError(f"cannot read {path}: {error}") from None


def _side(code: str, slices: tuple, name: str, share: float) -> str:
    """One column of a pair's page: the code with the parts the other student has too marked."""
    marked, _ = require("copydetect.utils").highlight_overlap(code, np.array(slices, dtype=int).reshape(2, -1), "<mark>", "</mark>",
                                  escape_html=True)
    return (f"<div class='side'><h2>{html.escape(name)}: {share:.0%} of this code is in the other</h2>"
            f"<pre>{marked}</pre></div>")


def pair_page(pair: Pair, codes: dict[str, str], module: str) -> str:
    """A self-contained HTML page: the two students' code side by side, the shared parts marked."""
    title = f"{module}: {pair.first} and {pair.second}, {pair.similarity:.0%} alike"
    style = ("body{font-family:sans-serif;margin:1em}.pair{display:flex;gap:1em}.side{flex:1;min-width:0}"
             "pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:85%}mark{background:#ffd54f}")
    return (f"{_HEAD}<title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            "<p>Marked: code the other submission has too, after names are replaced and comments removed. "
            "The course's given code and the released stubs are not counted.</p><div class='pair'>"
            + _side(codes[pair.first], pair.first_slices, pair.first, pair.first_share)
            + _side(codes[pair.second], pair.second_slices, pair.second, pair.second_share)
            + "</div></body></html>\n")


def similarity(course_dir: Path, module_slug: str, notebook_name: str, students: list[str], out: Path,
               threshold: float = SIMILAR) -> list[Pair]:
    """Rank the pairs of ``students``' submissions of one module; write a page per pair at least ``threshold``
    alike, and an index, into the folder ``out``."""
    release = course_dir / "release" / module_slug / f"{notebook_name}.ipynb"
    if not release.is_file():
        raise CourseError(f"{module_slug} is not released yet ({release} is missing): its stubs are what "
                          "every submission shares; run `tinyflo course release` first")
    if len(students) < 2:
        raise CourseError(f"{module_slug}: {len(students)} readable submission(s); comparing needs two")
    codes = {s: own_code(_read(course_dir / "submitted" / s / module_slug / f"{notebook_name}.ipynb"))
             for s in students}
    pairs = rank_pairs(codes, own_code(_read(release)))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pair in pairs:
        page = None
        if pair.similarity >= threshold:
            page = f"{pair.first}--{pair.second}.html"
            text = pair_page(pair, codes, module_slug)
            atomic_write(out / page, lambda handle, text=text: handle.write(text.encode("utf-8")))
        link = f"<a href='{html.escape(page)}'>side by side</a>" if page else ""
        rows.append(f"<tr><td>{html.escape(pair.first)}</td><td>{html.escape(pair.second)}</td>"
                    f"<td>{pair.similarity:.0%}</td><td>{link}</td></tr>")
    module = html.escape(module_slug)
    index = (f"{_HEAD}<title>{module}: similar submissions"
             f"</title></head><body><h1>{module}: pairs of submissions, the most alike first</h1>"
             "<table><tr><th>student</th><th>student</th><th>alike</th><th></th></tr>"
             + "".join(rows) + "</table></body></html>\n")
    atomic_write(out / "index.html", lambda handle: handle.write(index.encode("utf-8")))
    return pairs
