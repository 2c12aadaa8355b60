"""The student kit: a wheel with every graded region a stub, and the student loop working from it.

Built from the course's modules, installed into a folder of its own, and used as a student
would: no solution and no hidden check anywhere in it; `module start`, `test` and `complete`
work from its bundled release notebooks, and a later module runs on the completed earlier one.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import pytest
from browser_support import page_state, wait_for
from course_support import REPO, run_cli, secret_lines

from tinyflo.course.grader.tree import release_notebook
from tinyflo.course.kit.build import INSTRUCTOR_PLUGINS, NEWS_PLUGIN, build_student_kit, kit_readme
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.source import discover_modules

pytestmark = pytest.mark.slow
MODULES = discover_modules(REPO / "modules")


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """The kit's wheel, built once."""
    return build_student_kit(tmp_path_factory.mktemp("kit"), MODULES)


def test_the_kit_holds_no_solution_and_no_hidden_check(kit):
    with zipfile.ZipFile(kit) as wheel:
        text = "\n".join(
            wheel.read(name).decode("utf-8", "replace")
            for name in wheel.namelist()
            if name.endswith((".py", ".ipynb"))
        )
        names = wheel.namelist()
    # Notebooks are JSON: decode their strings so quotes read as in the module.
    text += "\n".join(
        "".join(cell["source"])
        for name in names
        if name.endswith(".ipynb")
        for cell in json.loads(zipfile.ZipFile(kit).read(name))["cells"]
    )
    lines = {line.strip() for line in text.splitlines()}
    secrets = {module.slug: set().union(*secret_lines(module)) for module in MODULES}
    # A line one module hides may be another's given code, the hand-written package's or a
    # milestone's:
    # only lines nothing public shows count.
    handwritten = [p for p in (REPO / "src" / "tinyflo").rglob("*.py") if p.parent.name != "core"]
    handwritten += sorted((REPO / "milestones").glob("*/*.py"))  # shipped in the kit, public
    public = {line.strip() for path in handwritten for line in path.read_text().splitlines()}
    for module in MODULES:
        every = {line.strip() for line in module.path.read_text().splitlines()}
        public |= every - secrets[module.slug]
    for module in MODULES:
        shown = {line for line in secrets[module.slug] - public if line in lines}
        assert not shown, (
            f"the kit shows lines of {module.slug}'s solutions or hidden checks: {sorted(shown)[:5]}"
        )
        assert f"tinyflo/course/release/{module.slug}/{module.name}.ipynb" in names
    assert not lines & {"### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"}, "grading markers left"
    assert (kit.parent / "README.md").read_text().count(f"pip install '{kit.name}[course]'") == 1


def install(kit: Path, prefix: Path) -> Path:
    """Install the kit under `prefix` as pip would for a student; its site-packages folder."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--prefix",
            str(prefix),
            "--ignore-installed",
            str(kit),
        ],  # --ignore-installed: never touch this environment's tinyflo
        check=True,
    )
    return next(prefix.glob("lib/python3*/site-packages"))


def _tinyflo(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    # The kit first on the path: the environment's own tinyflo comes after it.
    return run_cli(*args, cwd=cwd, env={"PYTHONPATH": str(site)})


def test_the_kits_readme_makes_and_activates_the_environment_it_installs_into(tmp_path):
    """The README's first lines, run as written in bash (all but the install, which needs PyPI):
    afterwards `python` and `pip` are the environment's own."""
    readme = kit_readme("tinyflo-0.1.0-py3-none-any.whl")
    assert "tinyflo module reset 01" in readme and "needs those completed first" in readme
    commands = [line.strip().split("  #")[0] for line in readme.splitlines() if line.startswith("    ")]
    install = next(i for i, line in enumerate(commands) if line.startswith("pip install"))
    assert install > 0 and any("activate" in line for line in commands[:install])
    python = sys.executable if Path(sys.executable).name.startswith("python3") else "python3"
    script = "\n".join(commands[:install]).replace("python3 ", f"{python} ", 1)
    done = subprocess.run(["bash", "-e", "-c", script + "\ncommand -v python pip"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [Path(line).parent for line in done.stdout.split()] == [tmp_path / ".venv" / "bin"] * 2


def test_the_student_loop_runs_from_the_kit(kit, tmp_path):
    home = tmp_path / "student"
    home.mkdir()
    site = install(kit, tmp_path / "prefix")
    done = _tinyflo(site, home, "module", "start", "01")
    assert done.returncode == 0, done.stderr
    notebook = home / "workspace" / "01_tensor" / "tensor.ipynb"
    blank = _tinyflo(site, home, "module", "test", "01")
    assert blank.returncode == 1 and "the checks you can see" in blank.stdout, (
        blank.stdout + blank.stderr
    )
    assert "total: 0/" in blank.stdout, blank.stdout
    # The student's finished notebook (here: the course's own answers) passes the visible tests.
    write_notebook(instructor_notebook(MODULES[0]), notebook)
    done = _tinyflo(site, home, "module", "complete", "01")
    assert done.returncode == 0, done.stdout + done.stderr
    own = home / "workspace" / "package" / "tinyflo" / "core" / "tensor.py"
    assert own.is_file()
    # `module list` says which earlier modules each one still waits for.
    listed = _tinyflo(site, home, "module", "list").stdout.splitlines()
    row = {line.split()[0]: line for line in listed if line.startswith("  ")}
    assert "runs on your code" not in row["01"] + row["02"], listed
    assert row["05"].endswith("(runs on your code of modules before it: complete 02-04 first)"), listed
    # Module 02 grades on the student's module 01, not on the kit's stubs.
    assert _tinyflo(site, home, "module", "start", "02").returncode == 0
    write_notebook(
        instructor_notebook(MODULES[1]), home / "workspace" / "02_autograd" / "autograd.ipynb"
    )
    done = _tinyflo(site, home, "module", "test", "02")
    assert done.returncode == 0, done.stdout + done.stderr
    # Milestones come with the kit and run on the student's own modules, or say which is missing.
    alone = _tinyflo(site, home, "milestone", "run", "perceptron", "--quick")
    assert alone.returncode != 0 and "student kit" in alone.stdout + alone.stderr
    workspace = {"PYTHONPATH": str(site), "TINYFLO_WORKSPACE": str(home / "workspace")}
    mine = run_cli("milestone", "run", "perceptron", "--quick", cwd=home, env=workspace)
    assert mine.returncode == 0, mine.stdout + mine.stderr  # it needs module 01 only
    assert "your own code from the workspace" in mine.stdout, mine.stdout
    later = run_cli("milestone", "run", "xor", "--quick", cwd=home, env=workspace)
    assert later.returncode != 0 and "03_layers" in later.stdout + later.stderr, later.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def student_lab(kit, tmp_path_factory):
    """JupyterLab on loopback, in an environment that has the kit installed (prefix install)."""
    root = tmp_path_factory.mktemp("lab")
    prefix, home = root / "prefix", root / "student"
    home.mkdir()
    site = install(kit, prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYFLO_", "JUPYTER"))}
    env |= {
        "PYTHONPATH": str(site),  # the kit's tinyflo, before the environment's own
        "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "jupyter"),  # what the kit installed
        "JUPYTER_CONFIG_DIR": str(root / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(root / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(root / "jupyter-runtime"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tinyflo.cli", "module", "start", "01"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    port, token = _free_port(), "kit-test"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={home}",
            "--ServerApp.port_retries=0",
            "--allow-root",  # CI runs as root
        ],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "lab.log", "w"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status?token={token}", 90)
        yield base, token, home
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_jupyterlab_shows_students_no_instructor_tools(student_lab):
    base, token, _ = student_lab
    page = urllib.request.urlopen(f"{base}/lab?token={token}", timeout=30).read().decode()
    config = json.loads(
        re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S).group(1)
    )
    for plugin in (*INSTRUCTOR_PLUGINS, NEWS_PLUGIN):
        assert plugin in config["disabledExtensions"], config["disabledExtensions"]
    assert "@jupyter/nbgrader:validate-assignment" not in config["disabledExtensions"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/formgrader?token={token}", timeout=30)
    assert missing.value.code == 404


def test_validate_agrees_with_module_test_on_the_visible_tests(student_lab):
    base, token, home = student_lab
    request = urllib.request.Request(
        f"{base}/assignments/validate",
        data=urllib.parse.urlencode({"path": "workspace/01_tensor/tensor.ipynb"}).encode(),
        headers={"Authorization": f"token {token}"},
    )
    reply = json.loads(urllib.request.urlopen(request, timeout=300).read())
    result = json.loads(reply["value"]) if isinstance(reply["value"], str) else reply["value"]
    assert reply["success"] and result.get("failed"), reply  # the blank release fails its tests
    assert all("hidden checks of this task" not in cell["source"] for cell in result["failed"])


def _kernel_states(base: str, token: str, notebook: str) -> list[str]:
    """The execution states the server reports for the kernels of `notebook`'s sessions."""
    request = urllib.request.Request(f"{base}/api/sessions", headers={"Authorization": f"token {token}"})
    sessions = json.loads(urllib.request.urlopen(request, timeout=10).read())
    return [s["kernel"]["execution_state"] for s in sessions if s.get("path", "").endswith(notebook) and s.get("kernel")]


def test_a_released_notebook_runs_in_chromium(student_lab, browser):
    from selenium.webdriver.common.by import By

    base, token, home = student_lab
    notebook = "workspace/01_tensor/tensor.ipynb"
    log = Path(home).parent / "lab.log"

    def server() -> str:  # what the server says, for a failure's message
        tail = log.read_text(errors="replace").splitlines()[-6:] if log.exists() else []
        return f"kernels of {notebook}: {_kernel_states(base, token, notebook)}; lab.log ends: {tail}"

    def menu_item(css: str, label: str):
        return wait_for(browser, f"the menu item {label!r} ({css})",
                        lambda b: next((e for e in b.find_elements(By.CSS_SELECTOR, css) if e.text == label), None),
                        60, server)

    browser.set_page_load_timeout(90)
    browser.get(f"{base}/lab/tree/{notebook}?token={token}")
    wait_for(browser, "the notebook's cells", lambda b: b.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell"),
             120, server)
    # The kernel is ready when the server says so: true in every JupyterLab, whatever its status bar
    # shows (its words and where it puts them change between versions and window widths).
    wait_for(browser, "the notebook's kernel to be idle (the server's /api/sessions)",
             lambda b: "idle" in _kernel_states(base, token, notebook), 120, server)
    time.sleep(3)  # the kernel's info has reached the page; what JupyterLab would change, it has changed
    # It opens clean: no unsaved mark (the release says what the kernel says of itself), and
    # no news prompt over the first task (the kit switches JupyterLab's announcements off).
    assert not browser.find_elements(By.CSS_SELECTOR, ".jp-mod-dirty"), "opened as unsaved"
    # the long given cells open folded: a placeholder in place of each one's code
    module = next(m for m in MODULES if m.slug == "01_tensor")
    folded = [c for c in release_notebook(module).cells if c.metadata.get("jupyter", {}).get("source_hidden")]
    # (JupyterLab draws only the cells near the view: the first folded one is near the top)
    assert folded and browser.find_elements(By.CSS_SELECTOR, ".jp-InputPlaceholder"), page_state(browser)
    toasts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".Toastify__toast")]
    assert not [t for t in toasts if "news" in t.lower()], toasts
    menu_item(".lm-MenuBar-itemLabel", "Run").click()
    menu_item(".lm-Menu-itemLabel", "Run All Cells").click()
    # Run All stops at the first stub a cell calls: its output names the task to write.
    output = wait_for(
        browser,
        "an output with NotImplementedError (Run All reaching the first stub)",
        lambda b: next((e.text for e in b.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                        if "NotImplementedError" in e.text), None),
        120,
        server,
    )
    assert "NotImplementedError" in output
    prompts = [
        e.text
        for e in browser.find_elements(By.CSS_SELECTOR, ".jp-InputPrompt")
        if e.text.strip("[]: ")
    ]
    assert "[1]:" in prompts, prompts


def test_completing_a_module_from_a_kit_that_carries_its_fast_forms_exports_them_with_the_students_code(tmp_path):
    """A kit built before module 10 closed has no fast forms: the student's completed module has
    their code only. Rebuilt after it closed, the kit's release carries them, and completing the
    module again puts them after the student's code, as the package has them."""
    from tinyflo.course.grader.tree import release_notebook
    from tinyflo.course.kit.student import own_code
    from tinyflo.course.source import discover_modules

    conv = next(module for module in MODULES if module.slug == "10_convolutions")
    answers = instructor_notebook(conv)
    answers.cells = [c for c in answers.cells if not c.metadata.get("tinyflo", {}).get("given_after")]
    for delivered in (False, True):
        kit = tmp_path / str(delivered) / "10_convolutions"
        write_notebook(release_notebook(conv, delivered), kit / "convolutions.ipynb")
        released = discover_modules(kit.parent)[0]
        assert released.released
        code = own_code(answers, released)
        assert "class Conv2dFn(Function):" in code and "raise NotImplementedError" not in code  # theirs
        assert ("class Conv2dFn(Conv2dUnfoldFn):" in code) is delivered
        assert ("BATCH_LAST_POSITIONS = 256" in code) is delivered, delivered
        assert ("MaxPool2dWindowsFn = MaxPool2dFn" in code) is delivered
