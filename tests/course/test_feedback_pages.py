"""Feedback pages: tinyflo's exporter gives the page nbconvert gives, without the re-read that changes nothing."""

from __future__ import annotations

import base64
import copy

import nbformat
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config

from tinyflo.course.nbgrader_steps import (
    FEEDBACK_POLICY,
    FeedbackExporter,
    InertStudentMarkup,
    with_policy,
)

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)).decode()


def _notebook(image: bool) -> nbformat.NotebookNode:
    code = nbformat.v4.new_code_cell("def area(r):\n    return 3.14159 * r ** 2  # the circle's\n", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="12.566\n"),
    ])
    if image:
        code.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": PNG}))
    again = copy.deepcopy(code)  # the same code in a second cell: highlighted once
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Circles\n\nThe area is *pi r squared* — `area(2)`:"), code,
        nbformat.v4.new_code_cell("%%bash\necho magic", metadata={"magics_language": "bash"}), again,
    ])
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"
    notebook.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    return notebook


def _pages(image: bool) -> tuple[str, str]:
    """Our page, and nbconvert's with the same steps, sanitising and policy (test_markup_inert.py)."""
    config = Config()
    config.HTMLExporter.template_name = "classic"  # as nbgrader's feedback template: no JupyterLab cells
    ours = FeedbackExporter(config=config)
    config.HTMLExporter.preprocessors = [InertStudentMarkup]
    config.HTMLExporter.sanitize_html = True
    theirs = HTMLExporter(config=config)
    notebook = _notebook(image)
    for _ in range(2):  # the second time from what the first kept
        page = ours.from_notebook_node(copy.deepcopy(notebook))[0]
    return page, with_policy(theirs.from_notebook_node(copy.deepcopy(notebook))[0], FEEDBACK_POLICY)


def test_a_page_without_images_is_nbconverts_page_unparsed():
    ours, theirs = _pages(image=False)
    assert "<img" not in ours and 'class=" highlight hl-ipython3"' in ours
    assert str(BeautifulSoup(ours, features="html.parser")) == str(BeautifulSoup(theirs, features="html.parser"))


def test_a_page_with_an_image_goes_through_nbconvert_whole():
    ours, theirs = _pages(image=True)
    assert ours == theirs and 'alt="No description has been provided for this image"' in ours
