"""The book: `tinyflo book build` renders modules (student releases only), milestones and the API,
offline; headless Chromium opens it, follows its navigation and sees a milestone plot."""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyflo import book, milestones
from tinyflo.course.source import discover_modules

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "book"
MODULES = discover_modules(ROOT / "modules")
MILESTONES = list(milestones.MILESTONES.values())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str, float]:
    """The book built once by the command a person runs: (html folder, its output, seconds).

    Once for the whole run: the workers of pytest-xdist share one build (the first to ask makes
    it, under a lock; the others wait and read it), which the tests only read."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder the workers' own folders are in
    out, record = shared / "book" / "html", shared / "book" / "built.json"
    out.parent.mkdir(exist_ok=True)
    with open(shared / "book" / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.is_file():
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "book", "build", "--out", str(out)],
                                  cwd=ROOT, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            assert done.returncode == 0, f"tinyflo book build failed:\n{done.stdout}\n{done.stderr}"
            record.write_text(json.dumps([done.stdout + done.stderr, seconds]))
    output, seconds = json.loads(record.read_text())
    return out, output, seconds


def _text(page: Path) -> str:
    """A page's text as a reader sees it: tags stripped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def _secret_lines(source: Path) -> set[str]:
    """Distinctive lines that occur only inside a module's SOLUTION or HIDDEN TESTS regions."""
    secret: set[str] = set()
    public: set[str] = set()
    region = None
    for line in source.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
            region = secret
        elif text in ("### END SOLUTION", "### END HIDDEN TESTS"):
            region = None
        elif region is not None:
            region.add(text)
        else:
            public.update((text, text.lstrip("#").strip()))  # prose is shown without its "# "
    return {line for line in secret - public if len(line) >= 24}


def _recorded_plot() -> tuple[milestones.Milestone, Path]:
    """A milestone with a notebook and a recorded plot in this checkout."""
    for milestone in MILESTONES:
        plots = sorted((ROOT / "milestones" / "results" / milestone.name).glob("*.png"))
        if plots and milestone.path(ROOT).is_file():
            return milestone, plots[0]
    pytest.fail("no milestone in milestones/results/ has a recorded plot; record one with "
                "`tinyflo milestone run perceptron --record`")


@pytest.mark.slow
def test_book_build_writes_every_page(built):
    out, output, seconds = built
    index = out / "index.html"
    assert output.strip().splitlines()[-1] == str(index), output
    expected = ["index.html", "instructor.html", "modules/index.html", "milestones/index.html",
                "api/index.html", *(f"modules/{m.slug}.html" for m in MODULES),
                *(f"milestones/{m.slug}.html" for m in MILESTONES),
                *(f"api/{name}.html" for name, _ in book.API), "performance.html"]
    missing = [page for page in expected if not (out / page).is_file()]
    assert not missing, f"the book lacks {missing}"
    path = _text(out / "modules" / "index.html")
    index_html = (out / "modules" / "index.html").read_text()
    for module in MODULES:
        assert module.slug in index_html, module.slug
    assert "tensor_arithmetic" in path and "autograd_backward" in path
    api = _text(out / "api" / "tinyflo.nn.html")
    assert "class tinyflo.nn.Linear" in api and "Conv2d" in api, "autodoc documented no classes"
    print(f"book built in {seconds:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.slug)
def test_book_module_pages_hold_no_solutions(built, module):
    page = built[0] / "modules" / f"{module.slug}.html"
    text = _text(page)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text, f"{page} shows {marker!r}"
    shown = {line.strip() for line in text.splitlines()}
    leaked = sorted(_secret_lines(module.path) & shown)
    assert not leaked, f"{page} leaks solution or hidden-test lines: {leaked[:5]}"
    assert "YOUR CODE HERE" in text and "NotImplementedError" in text, "no student stub on the page"
    assert "Systems" in text or "Questions" in text, "the systems questions are missing"


@pytest.mark.slow
def test_book_is_offline(built):
    out = built[0]
    remote = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    pages = sorted(out.rglob("*.html"))
    assert len(pages) > 30
    fetching = [str(p.relative_to(out)) for p in pages if remote.search(p.read_text(encoding="utf-8"))]
    assert not fetching, f"pages that load remote assets: {fetching}"
    assert (out / "_static" / "mathjax" / "MathJax.js").is_file()


def test_book_milestone_pages_say_what_is_not_there_yet(tmp_path):
    # a checkout with one milestone notebook and no recorded run at all
    shutil.copytree(ROOT / "milestones" / "01_perceptron", tmp_path / "milestones" / "01_perceptron")
    pages = book.write_milestone_pages(tmp_path, tmp_path / "out")
    assert pages == len(MILESTONES) + 1
    notebook = (tmp_path / "out" / "01_perceptron.ipynb").read_text()
    assert "no recorded run yet" in notebook and "--record" in notebook
    for milestone in MILESTONES[1:]:
        page = (tmp_path / "out" / f"{milestone.slug}.md").read_text()
        assert "not in this checkout yet" in page and "no recorded run yet" in page
        assert milestone.title in page
    overview = (tmp_path / "out" / "index.md").read_text()
    assert overview.count("no recorded run yet") == len(MILESTONES)


def test_book_performance_page_holds_the_readme_summary_and_every_recorded_benchmark(tmp_path):
    assert book.write_performance_page(ROOT, tmp_path) == 1
    page = (tmp_path / "performance.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    summary = readme.split("## Performance", 1)[1]
    rows = [line for line in summary.splitlines() if line.startswith("| MLP")]
    assert rows and all(row in page for row in rows), "the README's summary table"
    assert "](benchmarks/" not in page, "a link into the repository would be broken in the book"
    assert "](#" not in page, "a link to another README section would be broken in the book"
    # a README whose summary links to another of its sections and into benchmarks/
    fake = tmp_path / "checkout"
    (fake / "benchmarks" / "results").mkdir(parents=True)
    (fake / "README.md").write_text("## Performance\n\nSee [Devices](#devices) and "
                                    "[the method](benchmarks/README.md).\n\n## Devices\n")
    book.write_performance_page(fake, tmp_path)
    assert "See Devices and `benchmarks/README.md`." in (tmp_path / "performance.md").read_text(encoding="utf-8")
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.md")):
        title = result.read_text(encoding="utf-8").splitlines()[0]
        assert f"#{title}" in page.splitlines(), f"{result.name} is missing from the page"
    assert page.count("## Machine") >= len(list((ROOT / "benchmarks" / "results").glob("*.md")))
    for proof in sorted((ROOT / "benchmarks" / "results").glob("gpu/*/proof.md")):
        title = proof.read_text(encoding="utf-8").splitlines()[0]  # "# GPU proof: NVIDIA H200 — ..."
        assert f"##{title}" in page.splitlines(), f"{proof.parent.name}'s GPU proof is missing from the page"


def test_book_module_path_lists_tasks_and_points():
    from tinyflo.course.notebooks import instructor_notebook

    tensor = instructor_notebook(MODULES[0])
    tasks = book.module_tasks(tensor)
    grade_cells = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
                   for c in tensor.cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert all(t.points == grade_cells[t.id] for t in tasks)
    assert next(t for t in tasks if t.id == "tensor_dtypes").what == "`promote_types(a, b)`"


def test_book_build_refuses_to_clear_a_folder_that_is_not_a_build(tmp_path):
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "book", "build", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert "is not an earlier book build" in done.stderr and str(tmp_path) in done.stderr
    assert keep.read_text() == "mine"


def _sidebar(session) -> dict[str, str]:
    """The primary sidebar's links: page path (relative to the book) -> link text."""
    links = session.execute_script(
        "return Array.from(document.querySelectorAll('.bd-sidebar-primary nav a.reference.internal'))"
        ".map(a => [a.href, a.textContent.trim()])")
    return {href.split("/html/", 1)[-1]: text for href, text in links}


@pytest.mark.slow
def test_book_in_chromium(browser, built):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out = built[0]
    milestone, plot = _recorded_plot()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    session = browser
    wait = WebDriverWait(session, 20)
    session.get((out / "index.html").as_uri())
    wait.until(lambda s: s.execute_script("return document.readyState") == "complete")
    assert session.find_element(By.CSS_SELECTOR, "article h1").text.startswith("tinyflo")
    sidebar = _sidebar(session)
    pages = [f"modules/{m.slug}.html" for m in MODULES] + [f"milestones/{m.slug}.html" for m in MILESTONES]
    missing = [page for page in pages if page not in sidebar]
    assert not missing, f"the sidebar does not list {missing}; it lists {sorted(sidebar)}"
    session.save_screenshot(str(ARTIFACTS / "index.png"))

    # follow the sidebar to a module page, then to the milestone page
    for target, heading in ((f"modules/{MODULES[1].slug}.html", f"Module {MODULES[1].number:02d}"),
                            (f"milestones/{milestone.slug}.html", f"Milestone {milestone.number}")):
        link = session.find_element(By.CSS_SELECTOR, f'.bd-sidebar-primary a[href$="{target}"]')
        session.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
        link.click()
        wait.until(lambda s, target=target: s.current_url.endswith(target))
        wait.until(lambda s: s.execute_script("return document.readyState") == "complete")
        assert session.find_element(By.CSS_SELECTOR, "article h1").text.startswith(heading)

    image = session.find_element(By.CSS_SELECTOR, f'article img[src$="{plot.name}"]')
    session.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
    wait.until(lambda s: s.execute_script("return arguments[0].complete", image))
    width = session.execute_script("return arguments[0].naturalWidth", image)
    assert width > 0, f"{plot.name} did not render on {milestone.slug}"
    shown = session.execute_script("return arguments[0].getBoundingClientRect().width", image)
    room = session.execute_script("return document.querySelector('.bd-content').getBoundingClientRect().width")
    assert shown >= 0.9 * min(width, room), (
        f"{plot.name} is shown {shown:.0f} px wide of the {room:.0f} px beside the navigation: its axis text "
        "is unreadable when a wide figure is squeezed")
    session.save_screenshot(str(ARTIFACTS / "milestone.png"))
