"""A module exported as a Gradescope autograder grades as `tinyflo course autograde` does.

`tinyflo course gradescope` writes the zip; the test lays it out as Gradescope's autograder
specification does (/autograder/source holds the zip, run_autograder beside it, the student's
files in submission/, who submitted in submission_metadata.json, results/ for results.json),
installs tinyflo from the zip's own wheel into a fresh environment (its dependencies taken from
this one's instead of downloaded: the one substitution for setup.sh), and runs run_autograder as
Gradescope runs it, as root, on the reference, the blank release and an attack submission. Each
is graded as the engine behind `course autograde` grades it for the same student and course key:
the same points and the same message for every task.

Twice: in a container where bubblewrap starts (the code runs in it) and in one where it cannot
(bwrap replaced by `false` in a mount namespace of the run's own): there the container is the
sandbox, and the attack submission tries what a student's code could try in it (read the
solutions, the course key, the installed reference and the other submitters' metadata; write
the results; its own memory through /proc; the network) and reaches none of it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from attacks import CORE, combined_notebook
from course_support import REPO, call_cli, hidden_only_lines

from tinyflo.course.grader.grading import grade, submission_inputs
from tinyflo.course.grader.sandbox import SLOT_UID_BASE, bwrap_works, kill_leftovers
from tinyflo.course.grader.tree import cached_tree, release_notebook
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.source import discover_modules

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="run_autograder runs as root, as Gradescope runs it"),
    pytest.mark.skipif(bool(bwrap_works()), reason=f"{bwrap_works()}"),
]

MODULES = discover_modules(REPO / "modules")
MODULE = next(m for m in MODULES if m.slug == "01_tensor")
EMAIL = "Ada.Student@example.edu"
TOKEN = f"tfx-gs-{secrets.token_hex(6)}"  # names what the attack leaves in /tmp, were it to get anything

# Runs when the attack's first solution cell runs: each try that works leaves a file in /tmp.
ATTACK = '''
import os as _os
_tok, _root, _installed = {token!r}, {root!r}, {installed!r}
for _i, _path in enumerate([_root + "/source/autograder.json", _root + "/source/modules/01_tensor/tensor.py",
                            _root + "/submission_metadata.json", _installed + "/core/tensor.py",
                            _installed + "/core/__init__.py"]):
    try:
        with open(_path, "rb") as _file:
            _file.read(1)
        open("/tmp/" + _tok + "-read-" + str(_i), "w").close()
    except Exception:
        pass
for _name in ("maps", "mem", "environ"):
    try:
        with open("/dev/fd/../" + _name, "rb") as _file:  # /dev/fd is /proc/self/fd
            _file.read(1)
        open("/tmp/" + _tok + "-proc-" + _name, "w").close()
    except Exception:
        pass
import socket as _socket
try:
    _socket.create_connection(("127.0.0.1", 9), timeout=2)
except PermissionError:
    pass  # no TCP at all
except Exception:
    open("/tmp/" + _tok + "-network", "w").close()  # refused or reached: the network is there
for _i, _folder in enumerate([_root, _root + "/source", _root + "/results", _installed]):
    try:
        _os.listdir(_folder)
        open("/tmp/" + _tok + "-listed-" + str(_i), "w").close()
    except Exception:
        pass
try:
    _os.makedirs(_root + "/results", exist_ok=True)
    with open(_root + "/results/results.json", "w") as _file:
        _file.write('{{"score": 1000}}')
    open("/tmp/" + _tok + "-wrote", "w").close()
except Exception:
    pass
try:
    exec(compile(open(_installed + "/core/tensor.py").read(), "tensor.py", "exec"), globals())
except Exception:
    pass
'''


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory) -> Path:
    """`tinyflo course gradescope 01` of a course built from the repository's modules."""
    course = tmp_path_factory.mktemp("course") / "course"
    assert call_cli("course", "build", "--dir", str(course))[0] == 0
    out = course.parent / "01_tensor-gradescope.zip"
    code, said = call_cli("course", "gradescope", "01", "--dir", str(course), "--out", str(out))
    assert code == 0, said
    assert oct(out.stat().st_mode & 0o777) == "0o600"  # the course key and every solution
    return out


@pytest.fixture(scope="module")
def environment(autograder_zip) -> Path:
    """A fresh environment with tinyflo installed from the zip's wheel, as setup.sh does (its
    dependencies hard-linked from this environment's), where any user can run it, as
    /opt/tinyflo-autograder is (pytest's own folders are root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="tinyflo-gradescope-env-"))
    os.chmod(home, 0o755)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():  # the dependencies, linked not downloaded
        if "tinyflo" not in entry.name.lower() and entry.name != "__pycache__":
            copy = shutil.copytree if entry.is_dir() else shutil.copy2
            copy(entry, purelib / entry.name, **({"copy_function": _link} if entry.is_dir() else {}))
    with zipfile.ZipFile(autograder_zip) as archive:
        wheel = next(name for name in archive.namelist() if name.endswith(".whl"))
        archive.extract(wheel, venv.parent)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(purelib), str(venv.parent / wheel)], check=True)
    yield venv
    shutil.rmtree(home, ignore_errors=True)


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


@pytest.fixture
def where(tmp_path):
    """A folder any user may enter, as / is: what /autograder's own mode does not close stays open."""
    folder = Path(tempfile.mkdtemp(prefix="tinyflo-gradescope-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _autograder(zip_path: Path, where: Path, notebook, metadata: dict) -> Path:
    """The /autograder folder of one submission, as Gradescope's harness makes it."""
    root = where / "autograder"
    (root / "source").mkdir(parents=True)
    os.chmod(where, 0o755)
    os.chmod(root, 0o755)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    os.chmod(root / "run_autograder", 0o755)
    (root / "submission").mkdir()
    write_notebook(notebook, root / "submission" / "tensor.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps(metadata))
    (root / "results").mkdir()
    return root


def _run(root: Path, venv: Path, without_bwrap: bool) -> dict:
    """run_autograder as Gradescope runs it (root, in /autograder); its results.json."""
    env = {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
    command = ["bash", str(root / "run_autograder")]
    if without_bwrap:
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f"mount --bind /bin/false {shutil.which('bwrap')} && exec \"$@\"", "sh", *command]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


def _submissions() -> dict:
    release = release_notebook(MODULE)
    return {"reference": instructor_notebook(MODULE), "blank": release}


def _attack(root: Path, venv: Path) -> nbformat.NotebookNode:
    installed = next(venv.glob("lib/python*/site-packages/tinyflo"))
    release = release_notebook(MODULE)
    first = next(c for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")
                 and not c.metadata["nbgrader"].get("grade"))
    first.source = ATTACK.format(token=TOKEN, root=str(root), installed=str(installed)) + "\n" + first.source
    return combined_notebook(release, CORE, list(_tasks()))


def _tasks() -> list[str]:
    from tinyflo.course.grader.grading import module_scenarios

    return list(module_scenarios(MODULE).tasks)


def _engine(notebook, key: str) -> dict[str, tuple[float, str]]:
    """What the engine behind `course autograde` gives each task, in bubblewrap."""
    report = grade(notebook, MODULE, cached_tree(MODULES, MODULE), 60, True, hidden=True,
                   student=submission_inputs(EMAIL.lower(), notebook), key=key)
    return {f"{MODULE.slug} {cell.grade_id}": (cell.points, cell.error or "passed") for cell in report.cells}


def _graded(results: dict) -> dict[str, tuple[float, str]]:
    return {test["name"]: (test["score"], test["output"]) for test in results["tests"]}


@pytest.mark.parametrize("without_bwrap", [False, True], ids=["bwrap", "container"])
def test_the_autograder_grades_as_course_autograde_does(autograder_zip, environment, where, without_bwrap):
    with zipfile.ZipFile(autograder_zip) as archive:
        key = json.loads(archive.read("autograder.json"))["key"]
        names = set(archive.namelist())
    assert {"setup.sh", "run_autograder", "autograder.json", "modules/01_tensor/tensor.py"} <= names
    metadata = {"users": [{"email": EMAIL, "name": "Ada Student", "id": 7}], "submission_method": "upload"}
    hidden = hidden_only_lines(MODULE)
    notebooks = _submissions()
    for name in ("reference", "blank", "attack"):
        root = _autograder(autograder_zip, where / name, notebooks.get(name) or nbformat.v4.new_notebook(),
                           metadata)
        notebook = notebooks[name] if name in notebooks else _attack(root, environment)
        write_notebook(notebook, root / "submission" / "tensor.ipynb")
        results = _run(root, environment, without_bwrap)
        assert results["extra_data"]["sandbox"] == ("the container, with Landlock" if without_bwrap else "bubblewrap")
        graded = _graded(results)
        assert graded == _engine(notebook, key), name
        maximum = sum(test["max_score"] for test in results["tests"])
        assert results["score"] == {"reference": maximum}.get(name, 0.0), (name, results["output"])
        assert maximum > 0 and results["output_format"] == "text"
        shown = json.dumps(results)
        assert not [line for line in hidden if line in shown], name
    reached = sorted(Path("/tmp").glob(f"{TOKEN}-*"))
    for path in reached:
        path.unlink()
    assert not reached, "the attack reached what the container closes"


def test_a_submission_without_the_notebook_is_told_what_was_expected(autograder_zip, environment, where):
    root = _autograder(autograder_zip, where, nbformat.v4.new_notebook(), {"users": []})
    (root / "submission" / "tensor.ipynb").rename(root / "submission" / "notes.txt")
    results = _run(root, environment, without_bwrap=False)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"] == "not graded: expected one notebook named tensor.ipynb; the submission holds no notebook"


def test_leftover_processes_of_a_container_run_are_killed():
    """What a run's code left running in a session of its own, as the slot's uid, is ended."""
    uid = SLOT_UID_BASE + 4097
    script = f"import os, time; os.setgid({uid}); os.setuid({uid}); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", script], start_new_session=True)
    time.sleep(0.5)
    assert child.poll() is None
    kill_leftovers(4097)
    assert child.wait(timeout=10) == -9
