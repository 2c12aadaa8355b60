"""Feedback pages: tinyflo's exporter gives the page nbconvert gives, without the re-read that changes nothing."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import nbformat
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config

from tinyflo.course.semester.nbgrader_steps import (
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
    again.id = "again"  # a cell's id is its own (nbformat warns of a copied one)
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


# --- nbgrader's feedback page, as `tinyflo course feedback` makes it -----------------------------------

LONG_VERDICT = ("check 2 of 3 of task `tensor_add`: adding a float32 tensor and a Python float keeps float32 "
                "(your code gave `(tensor(np.ones((2, 3), dtype=np.float32)) + 0.5).data.dtype` = "
                "dtype('float64'), where the check expected a tensor whose array keeps the dtype of the "
                "tensor operand: a Python number never widens it)")
WIDE_CODE = "    return Tensor(np.add(self.data, other.data if isinstance(other, Tensor) else other, " + \
            "dtype=np.result_type(self.data, np.float32)), requires_grad=self.requires_grad or other.requires_grad)"


COURSE_MARKDOWN = ["### Task `tensor_add` (1 point): `+` for tensors\n\nAdd two tensors.",
                   "### Task `tensor_matmul` (2 points): `@`\n\nA word too long for a line: " + "ab" * 150]


def graded_notebook() -> nbformat.NotebookNode:
    """A notebook as nbgrader's feedback step has it: the course's task headings, the student's solution
    cells (one with the gradebook's comment), grade cells with their scores and verdicts, a markdown
    cell of the student's that claims to be a task, and a comment on a cell of no task."""
    def cell(kind, source, **marks):
        made = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(source)
        if marks:
            made.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False,
                                         **marks}
        return made

    failed = cell("code", "assert (a + b).dtype == np.float32", grade=True, grade_id="tensor_add", points=1.0,
                  score=0.0, locked=True)
    failed.outputs = [nbformat.v4.new_output("error", ename="CheckFailed", evalue=LONG_VERDICT,
                                             traceback=[LONG_VERDICT])]
    notebook = nbformat.v4.new_notebook(cells=[
        cell("markdown", "### Task `tensor_add` (9 points): my own heading"),  # the student's: made inert
        cell("markdown", COURSE_MARKDOWN[0]),
        cell("code", f"def add(self, other):\n{WIDE_CODE}\n", solution=True, grade_id="tensor_add_code",
             comment="No response."),
        failed,
        cell("markdown", COURSE_MARKDOWN[1]),
        cell("code", "def matmul(self, other):\n    return Tensor(self.data @ other.data)\n", solution=True,
             grade_id="tensor_matmul_code"),
        cell("code", "assert (a @ b).shape == (2, 4)", grade=True, grade_id="tensor_matmul", points=2.0, score=2.0,
             locked=True),
        cell("code", "helper = 1\n", solution=True, grade_id="scratch", comment="<b>see</b> me\nlater"),
    ])
    notebook.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    return notebook


def nbgrader_feedback_page(notebook: nbformat.NotebookNode, folder: Path, late_penalty: float = 0.0) -> str:
    """The page `nbgrader generate_feedback` makes of `notebook` with the course's exporter: nbgrader's
    configuration of its feedback template, the course's source notebook in `folder` (its markdown is
    the course's), and the resources nbgrader's GetGrades step gives the template."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    source = folder / "source" / "01_tensor" / "tensor.ipynb"
    source.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(t) for t in COURSE_MARKDOWN]), source)
    config = GenerateFeedback(coursedir=CourseDirectory(root=str(folder))).config
    config.InertStudentMarkup.source_dir = str(folder / "source")  # as the course's nbgrader_config.py says
    resources = {"nbgrader": {"assignment": "01_tensor", "notebook": "tensor", "score": 2.0 - late_penalty,
                              "max_score": 3.0, "late_penalty": late_penalty}}
    return FeedbackExporter(config=config).from_notebook_node(copy.deepcopy(notebook), resources=resources)[0]


def test_the_contents_of_a_feedback_page_name_each_task_with_its_points_and_comment(tmp_path):
    soup = BeautifulSoup(nbgrader_feedback_page(graded_notebook(), tmp_path, late_penalty=0.5), "html.parser")
    entries = [" ".join(li.get_text(" ", strip=True).split()) for li in soup.select("#toc li")]
    assert entries == [
        "tensor_add (1 point): 0/1 — + for tensors ( comment : No response.)",
        "tensor_matmul (2 points): 2/2 — @",
        "scratch ( comment : <b>see</b> me)",
        "Late submission penalty (Score: -0.5)",
    ], entries
    for link in soup.select("#toc a"):  # each leads to its cell on the page
        assert soup.find("a", attrs={"name": link["href"].removeprefix("#")}), link
    assert [li.get("class") for li in soup.select("#toc li")][:2] == [["lost"], None]
    assert not soup.select("#toc img") and soup.h4.get_text() == "tensor (Score: 1.5 / 3.0)"
    # one page: nbconvert's own <body>, <main> and #notebook are not nested inside nbgrader's
    assert len(soup.find_all("body")) == 1 and not soup.find("main") and len(soup.select("#notebook")) == 1
    assert soup.head.find(True).attrs == {"http-equiv": "Content-Security-Policy", "content": FEEDBACK_POLICY}
