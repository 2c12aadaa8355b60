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
the results or the grading tree; its own memory through /proc; fds and variables it inherits;
signal the grader; the network, TCP and UDP, and unix sockets, a path's and abstract ones;
native code, through cffi's backend or an extension module copied to /tmp (both refused in bwrap
too), and with it a process of its own that outlives the run; files in /tmp for a later run, a tree
too deep to remove recursively, the grader's working folder swapped for a link) and reaches
none of it, the grader surviving all of it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
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
from tinyflo.course.grader.sandbox import (
    _KILL_ALL,
    SLOT_UID_BASE,
    _killer,
    bwrap_works,
    kill_leftovers,
    slot_uid,
)
from tinyflo.course.grader.tree import cached_tree, release_notebook
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.semester.gradescope import SLOT
from tinyflo.course.source import discover_modules

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="run_autograder runs as root, as Gradescope runs it"),
    pytest.mark.skipif(bool(bwrap_works()), reason=f"{bwrap_works()}"),
]

MODULES = discover_modules(REPO / "modules")
MODULE = next(m for m in MODULES if m.slug == "01_tensor")
EMAIL = "Ada.Student@example.edu"
TOKEN = f"tfx-gs-{secrets.token_hex(6)}"  # names what the attack leaves in /tmp and what it got, if anything

# Runs when the attack's first solution cell runs. Each try that works is named in what the cell
# raises at its end (nothing is raised when none does), which the student's results show; what it
# tries on the network reaches the test's own listeners or nothing; what it leaves behind (a
# process, files in /tmp, a grader's folder swapped for a link, a tree too deep for a recursive
# removal) the test looks for once the grading is done, and the grader must survive it.
ATTACK = '''
import os as _os, stat as _stat
_tok, _root, _installed, _shared = {token!r}, {root!r}, {installed!r}, {shared!r}
_got = []
for _i, _path in enumerate([_root + "/source/autograder.json", _root + "/source/modules/01_tensor/tensor.py",
                            _root + "/submission_metadata.json", _installed + "/core/tensor.py",
                            _installed + "/core/__init__.py"]):
    try:
        with open(_path, "rb") as _file:
            _file.read(1)
        _got.append("read-" + str(_i))
    except Exception:
        pass
for _name in ("maps", "mem", "environ"):
    try:
        with open("/dev/fd/../" + _name, "rb") as _file:  # /dev/fd is /proc/self/fd
            _file.read(1)
        _got.append("proc-" + _name)
    except Exception:
        pass
for _i, _folder in enumerate([_root, _root + "/source", _root + "/results", _installed]):
    try:
        if _os.listdir(_folder):  # bwrap shows the installed tinyflo as an empty folder
            _got.append("listed-" + str(_i))
    except Exception:
        pass
try:
    with open(_root + "/results/results.json", "w") as _file:
        _file.write('{{"score": 1000}}')
    _got.append("wrote")
except Exception:
    pass
_null, _pipes = _os.stat("/dev/null").st_rdev, 0
for _fd in range(3, 1024):  # inherited: /dev/null and the results pipe only
    try:
        _info = _os.fstat(_fd)
    except OSError:
        continue
    _pipes += _stat.S_ISFIFO(_info.st_mode)
    if not (_stat.S_ISCHR(_info.st_mode) and _info.st_rdev == _null or _stat.S_ISFIFO(_info.st_mode)):
        _got.append("fd-" + str(_fd))
if _pipes > 1:
    _got.append("pipes")
if any(_tok in _value for _value in _os.environ.values()):
    _got.append("environment")
import tinyflo as _tinyflo
_tree = _os.path.dirname(_tinyflo.__file__)
for _name, _mode in (("__init__.py", "ab"), ("planted.py", "wb")):
    try:
        open(_tree + "/" + _name, _mode).close()
        _got.append("tree-" + _name)
    except Exception:
        pass
for _pid in (_os.getppid(), 1):
    try:
        _os.kill(_pid, 0)
        _got.append("signal-" + str(_pid))
    except Exception:
        pass
import socket as _socket
for _family, _kind, _where in ((_socket.AF_INET, _socket.SOCK_STREAM, ("127.0.0.1", {tcp})),
                               (_socket.AF_UNIX, _socket.SOCK_STREAM, {unix!r}),
                               (_socket.AF_UNIX, _socket.SOCK_STREAM, "\\0" + _tok)):
    try:
        with _socket.socket(_family, _kind) as _sock:
            _sock.settimeout(2)
            _sock.connect(_where)
    except Exception:
        pass
try:
    with _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM) as _sock:
        _sock.sendto(_tok.encode(), ("127.0.0.1", {udp}))
except Exception:
    pass
try:  # native code (cffi's backend, where the environment has it): a process of its own, in a session of its own
    import _cffi_backend as _cffi
    _got.append("cffi")
    _int = _cffi.new_primitive_type("int")
    _libc = _cffi.load_library(None)
    _fork, _setsid = (_libc.load_function(_cffi.new_function_type((), _int, False), _n) for _n in ("fork", "setsid"))
    if _fork() == 0:
        _setsid()
        import time as _time
        while True:
            _time.sleep(1)
except Exception:
    pass
try:  # an extension module from /tmp: one of those already loaded, copied there
    import importlib.util as _util, sys as _sys
    _so = next(_m.__file__ for _m in list(_sys.modules.values())
               if (getattr(_m, "__file__", None) or "").endswith(".so"))
    _copy = "/tmp/" + _tok + "-" + _so.rsplit("/", 1)[1]
    with open(_so, "rb") as _src, open(_copy, "wb") as _dst:
        _dst.write(_src.read())
    _name = _so.rsplit("/", 1)[1].split(".")[0]
    _util.module_from_spec(_util.spec_from_file_location(_name, _copy))
    _got.append("native")
except Exception:
    pass
for _path in ("/tmp/" + _tok + "-planted", _shared + "/planted"):  # for a later run to find
    try:
        open(_path, "w").close()
    except Exception:
        pass
try:  # deeper than a recursive removal goes
    _here = _os.open(".", _os.O_RDONLY)
    _os.mkdir("/tmp/" + _tok + "-deep")
    _os.chdir("/tmp/" + _tok + "-deep")
    for _ in range(1200):
        _os.mkdir("d")
        _os.chdir("d")
    _os.fchdir(_here)
except Exception:
    pass
try:  # the grader's working folder for this run moved away, a link to / in its place
    _cwd = _os.getcwd()
    _os.rename(_cwd, "/tmp/" + _tok + "-moved")
    _os.symlink("/", _cwd)
except Exception:
    pass
try:
    exec(compile(open(_installed + "/core/tensor.py").read(), "tensor.py", "exec"), globals())
except Exception:
    pass
if _got:
    raise RuntimeError(_tok + " reached " + " ".join(_got))
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
    """The /autograder folder of one submission, as Gradescope's harness makes it (the notebook
    written later when it is None: an attack that names the folder)."""
    root = where / "autograder"
    (root / "source").mkdir(parents=True)
    os.chmod(where, 0o755)
    os.chmod(root, 0o755)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    os.chmod(root / "run_autograder", 0o755)
    (root / "submission").mkdir()
    if notebook is not None:
        write_notebook(notebook, root / "submission" / "tensor.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps(metadata))
    (root / "results").mkdir()
    return root


def _run(root: Path, venv: Path, without_bwrap: bool) -> dict:
    """run_autograder as Gradescope runs it (root, in /autograder, with a variable of the harness's
    own that no code of the student's may see); its results.json."""
    env = {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
           "HARNESS_SECRET": TOKEN}
    command = ["bash", str(root / "run_autograder")]
    if without_bwrap:
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f"mount --bind /bin/false {shutil.which('bwrap')} && exec \"$@\"", "sh", *command]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


def _submissions() -> dict:
    return {"reference": instructor_notebook(MODULE), "blank": release_notebook(MODULE)}


def _attack(root: Path, venv: Path, outside: _Outside) -> nbformat.NotebookNode:
    installed = next(venv.glob("lib/python*/site-packages/tinyflo"))
    release = release_notebook(MODULE)
    first = next(c for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")
                 and not c.metadata["nbgrader"].get("grade"))
    first.source = ATTACK.format(token=TOKEN, root=str(root), installed=str(installed), shared=str(outside.shared),
                                 tcp=outside.port("tcp"), udp=outside.port("udp"), unix=str(outside.unix)) + "\n" + first.source
    return combined_notebook(release, CORE, list(_tasks()))


class _Outside:
    """What the container holds beside the grader that no code of the student's may reach: a TCP
    and a UDP port on the loopback, a unix socket any user may connect to (a service's, in a folder
    the sandbox's uid can enter) and an abstract one, and a folder in /tmp any user may write in
    (as /tmp/.X11-unix is), where a run could leave something for a later one."""

    def __init__(self, folder: Path):
        self.sockets = {"tcp": socket.socket(socket.AF_INET, socket.SOCK_STREAM),
                        "udp": socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
                        "unix": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
                        "abstract": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)}
        self.unix = folder / "service.sock"
        for name, where in (("tcp", ("127.0.0.1", 0)), ("udp", ("127.0.0.1", 0)), ("unix", str(self.unix)),
                            ("abstract", "\0" + TOKEN)):
            self.sockets[name].bind(where)
            self.sockets[name].setblocking(False)
            if name != "udp":
                self.sockets[name].listen(8)
        os.chmod(self.unix, 0o666)
        self.shared = Path(f"/tmp/{TOKEN}-shared")
        self.shared.mkdir()
        os.chmod(self.shared, 0o1777)

    def port(self, name: str) -> int:
        return self.sockets[name].getsockname()[1]

    def heard(self) -> list[str]:
        """The sockets something connected or sent to."""
        heard = []
        for name, sock in self.sockets.items():
            try:
                (sock.recvfrom if name == "udp" else sock.accept)(*((64,) if name == "udp" else ()))
                heard.append(name)
            except BlockingIOError:
                pass
        return heard

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        shutil.rmtree(self.shared, ignore_errors=True)


@pytest.fixture
def outside(where):
    listening = _Outside(where)
    yield listening
    listening.close()
    _clear_slot()  # what a failed run left


def _slot_leftovers() -> list[str]:
    """Processes (ended ones waiting for their parent aside) and entries of /tmp, at its top and in
    the folders in it any user may write in, of the uid the autograder's runs take."""
    uid = slot_uid(SLOT)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid and "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text():
                left.append(f"process {pid}")
        except OSError:
            pass
    folders = [Path("/tmp")]
    for folder in folders:
        for entry in folder.iterdir():
            info = entry.lstat()
            if info.st_uid == uid:
                left.append(str(entry))
            elif entry.is_dir() and not entry.is_symlink() and info.st_mode & 0o002:
                folders.append(entry)
    return left


def _clear_slot() -> None:
    for left in _slot_leftovers():
        if left.startswith("process "):
            os.kill(int(left.split()[1]), signal.SIGKILL)
        else:
            subprocess.run(["rm", "-rf", "--", left], check=False)


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
def test_the_autograder_grades_as_course_autograde_does(autograder_zip, environment, where, outside, without_bwrap):
    with zipfile.ZipFile(autograder_zip) as archive:
        key = json.loads(archive.read("autograder.json"))["key"]
        names = set(archive.namelist())
    assert {"setup.sh", "run_autograder", "autograder.json", "modules/01_tensor/tensor.py"} <= names
    metadata = {"users": [{"email": EMAIL, "name": "Ada Student", "id": 7}], "submission_method": "upload"}
    hidden = hidden_only_lines(MODULE)
    notebooks = _submissions()
    for name in ("reference", "blank", "attack"):
        notebook = notebooks.get(name)
        root = _autograder(autograder_zip, where / name, notebook, metadata)
        if notebook is None:
            notebook = _attack(root, environment, outside)
            write_notebook(notebook, root / "submission" / "tensor.ipynb")
        results = _run(root, environment, without_bwrap)
        assert f"{TOKEN} reached" not in json.dumps(results), f"the attack reached what the sandbox closes: {results}"
        assert results["extra_data"]["sandbox"] == ("the container, with Landlock" if without_bwrap else "bubblewrap")
        graded = _graded(results)
        assert graded == _engine(notebook, key), name
        maximum = sum(test["max_score"] for test in results["tests"])
        assert results["score"] == {"reference": maximum}.get(name, 0.0), (name, results["output"])
        assert maximum > 0 and results["output_format"] == "text"
        shown = json.dumps(results)
        assert not [line for line in hidden if line in shown], name
    assert not outside.heard(), "the attack reached the network or a socket outside the sandbox"
    assert not _slot_leftovers(), "a run left something behind for the next one"


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


def test_no_process_of_a_slot_can_signal_what_kills_its_leftovers():
    """Where Landlock does not scope signals (before its sixth version), a process the code left
    behind could kill or stop the killer once it takes the slot's uid, before its kill(-1): it
    takes that uid as its effective uid only, which the slot's processes cannot signal."""
    argv = _killer(4097)
    argv[argv.index(_KILL_ALL)] = _KILL_ALL.replace("os.kill(-1, 9)", "import time; time.sleep(60)")
    killer = subprocess.Popen(argv)
    try:
        time.sleep(0.5)
        uid = SLOT_UID_BASE + 4097
        probe = f"import os; os.setgid({uid}); os.setuid({uid}); os.kill({killer.pid}, 9)"
        done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True)
        assert killer.poll() is None and "PermissionError" in done.stderr, done.stderr
    finally:
        killer.kill()
        killer.wait()


def test_a_submission_s_links_are_not_followed(autograder_zip, environment, where):
    """A notebook that is a link (a repository handed in may hold one) to the autograder's settings
    is not read, nor is a linked folder walked: nothing of the course key reaches the results."""
    root = _autograder(autograder_zip, where, nbformat.v4.new_notebook(), {"users": []})
    notebook = root / "submission" / "tensor.ipynb"
    notebook.unlink()
    notebook.symlink_to(root / "source" / "autograder.json")
    (root / "submission" / "more").symlink_to(root / "source" / "modules", target_is_directory=True)
    key = json.loads((root / "source" / "autograder.json").read_text())["key"]
    results = _run(root, environment, without_bwrap=False)
    assert results["score"] == 0 and results["tests"] == [] and key not in json.dumps(results)
    assert results["output"].startswith("not graded: tensor.ipynb is not a notebook tinyflo can grade"), results
