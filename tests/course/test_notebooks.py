"""Module source -> instructor notebook -> student notebook."""

from __future__ import annotations

import nbformat
import pytest
from course_support import REPO, proof_modules

from tinyflo.course.export import render_module
from tinyflo.course.notebooks import instructor_notebook, notebook_cells, require, student_notebook
from tinyflo.course.source import CourseError, discover_modules


def test_instructor_notebook_is_valid_v4_with_nbgrader_metadata(demo_module):
    notebook = instructor_notebook(demo_module)
    nbformat.validate(notebook)
    assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)
    assert notebook.metadata.kernelspec.name == "python3"
    assert "jupytext" not in notebook.metadata
    grade = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert grade.id == grade.metadata.nbgrader.grade_id == "demo_square"
    assert grade.metadata.nbgrader.points == 2
    assert "### BEGIN HIDDEN TESTS" in grade.source
    for cell in notebook.cells:
        assert set(cell.metadata) <= {"nbgrader", "tags", "deletable", "editable"}


def test_notebooks_are_byte_identical_across_builds(demo_module):
    first = nbformat.writes(instructor_notebook(demo_module))
    assert nbformat.writes(instructor_notebook(demo_module)) == first
    release = nbformat.writes(student_notebook(instructor_notebook(demo_module)))
    assert nbformat.writes(student_notebook(instructor_notebook(demo_module))) == release


def test_student_notebook_locks_tests_and_stubs_solutions(demo_module):
    notebook = student_notebook(instructor_notebook(demo_module))
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in notebook.cells}
    assert by_id["demo_square"].metadata.editable is False
    assert "HIDDEN" not in by_id["demo_square"].source
    assert "raise NotImplementedError()" in by_id["demo_relu_code"].source
    assert by_id["demo_relu_code"].source.startswith("#| export\n")


@pytest.mark.parametrize("module", proof_modules(), ids=lambda module: module.slug)
def test_notebook_exports_what_the_source_exports(module):
    """jupytext's cells and the exporter's own parser agree on every module."""
    from_source = render_module(module.cells(), "origin")
    from_notebook = render_module(notebook_cells(instructor_notebook(module)), "origin")
    assert from_notebook == from_source


def test_missing_course_tools_are_explained():
    with pytest.raises(CourseError, match=r"pip install 'tinyflo\[course\]'"):
        require("nbgrader_is_not_installed")


def test_long_given_code_opens_folded_under_a_line_that_says_what_it_holds():
    """In every module's release: each given code cell longer than LONG_GIVEN lines is folded in
    JupyterLab (source_hidden) and in the book (hide-input), right under a line that names what it
    defines and says whether the next task uses it."""
    from tinyflo.course.grader.tree import release_notebook
    from tinyflo.course.notebooks import LONG_GIVEN

    for module in discover_modules(REPO / "modules"):
        cells = release_notebook(module).cells
        for position, cell in enumerate(cells):
            meta = cell.metadata.get("nbgrader", {})
            given = cell.cell_type == "code" and not meta.get("solution") and not meta.get("grade")
            if not given or cell.source.count("\n") + 1 <= LONG_GIVEN:
                continue
            where = f"{module.slug}, cell {cell.id}"
            assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, where
            assert "hide-input" in cell.metadata.get("tags", []), where
            note = cells[position - 1]
            assert note.cell_type == "markdown" and note.source.startswith("**Given code, "), where
            assert "it defines `" in note.source, where
