"""What a newcomer gets wrong with each `tinyflo` command, and what it then gets: one line naming the
argument (or variable), what was expected and what came, exit status 2, and nothing left behind:
no empty folder from a command refused, stopped, cut off by its pipe or offline, and no traceback
from output that cannot be written.

The commands run in this process (`tinyflo.cli.main`), so each case costs milliseconds; what needs
a real process (signals, a real full disk) is in test_front_door.py.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import sys
from pathlib import Path

import pytest

from tinyflo import cli, datasets, demo, milestones
from tinyflo.environment import VARIABLES

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_MODULES = ROOT / "tests" / "course" / "fixtures" / "modules"


def run_cli(*argv: str, stdout: io.StringIO | None = None) -> tuple[int, str, str]:
    """`tinyflo ARGV` in this process: its exit status, stdout and stderr (SystemExit, as argparse
    ends, is its status)."""
    out, err = stdout or io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as done:
            code = done.code
    return code, out.getvalue() if stdout is None else "", err.getvalue()


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A fresh current folder holding a file (``a-file``) where a folder may be asked for, no
    TINYFLO_ variable set; the folder's entries before the command ran."""
    monkeypatch.chdir(tmp_path)
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "a-file").write_text("")
    return tmp_path


def entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# (command, what the one line on stderr says after "tinyflo COMMAND: error: "): {here} is the current folder.
MISUSE = [
    # export
    (["export", "--modules", "not-there"], "--modules names 'not-there', which is not a directory"),
    (["export", "--modules", "a-file"], "--modules names 'a-file', which is not a directory"),
    (["export", "--package-dir", "a-file"], "--package-dir: expected the tinyflo package's folder (src/tinyflo in "
     "a checkout); got {here}/a-file, a file"),
    # module
    (["module", "start", "99"], "no module '99'; expected a number, NN_name or name of one of: 01_tensor, "),
    (["module", "test", "tensr"], "no module 'tensr'; expected a number, NN_name or name of one of: 01_tensor, "),
    (["module", "test", "1"], "01_tensor is not started: no workspace/01_tensor/tensor.ipynb; run "
     "`tinyflo module start 01_tensor`"),
    (["module", "complete", "1", "--workspace", "ws"], "01_tensor is not started: no ws/01_tensor/tensor.ipynb; "
     "run `tinyflo module start 01_tensor --workspace ws`"),
    (["module", "start", "1", "--workspace", "a-file"], "--workspace: {here}/a-file is a file, not a folder"),
    (["module", "test", "1", "--workspace", "a-file"], "--workspace: {here}/a-file is a file, not a folder"),
    (["module", "start", "1", "--workspace", "a-file/ws"], "--workspace: cannot create the folder "
     "{here}/a-file/ws: Not a directory"),
    (["module", "list", "--workspace", "a-file"], "the workspace {here}/a-file is a file, not a folder"),
    (["module", "start", "1", "--modules", "not-there"], "--modules names 'not-there', which is not a directory"),
    (["module", "test", "1", "--timeout", "0"], "argument --timeout: expected a whole number >= 1, got '0' "
     "(see tinyflo module test --help)"),
    (["module", "start"], "the following arguments are required: module (see tinyflo module start --help)"),
    (["module", "begin", "1"], "argument ACTION: invalid choice: 'begin' (choose from 'list', 'start', 'test', "
     "'reset', 'complete') (see tinyflo module --help)"),
    # course
    (["course", "build", "--dir", "a-file"], "--dir: {here}/a-file is a file, not a course folder"),
    (["course", "build", "--dir", "a-file/c"], "--dir: cannot create the folder {here}/a-file/c: Not a directory"),
    (["course", "release", "--dir", "c"], "{here}/c is not a course folder yet; run `tinyflo course build --dir "
     "{here}/c`"),
    (["course", "release", "99"], "no module '99'; expected a number, NN_name or name of one of: 01_tensor, "),
    (["course", "similarity", "1", "--threshold", "2"], "argument --threshold: expected a number from 0 to 1, got "
     "'2' (see tinyflo course similarity --help)"),
    (["course", "autograde", "--jobs", "0"], "argument --jobs: expected a whole number >= 1, got '0' (see tinyflo "
     "course autograde --help)"),
    (["course", "report", "--format", "excel"], "argument --format: invalid choice: 'excel' (choose from 'canvas', "
     "'moodle', 'gradescope') (see tinyflo course report --help)"),
    (["course", "roster"], "the following arguments are required: FILE (see tinyflo course roster --help)"),
    (["course", "hub", "--env", "/opt/hub", "--instructor", "prof", "--group", "students", "--idle-minutes", "1h"],
     "argument --idle-minutes: expected a whole number of minutes >= 0, got '1h' (see tinyflo course hub --help)"),
    # milestone
    (["milestone", "run", "99"], "no milestone called '99'; the milestones are 01_perceptron, 02_xor, 03_mlp, "),
    (["milestone", "run", "lenet-9"], "no milestone called 'lenet-9'; the milestones are 01_perceptron, "),
    (["milestone", "run"], "the following arguments are required: name (see tinyflo milestone run --help)"),
    (["milestone", "run", "1", "--out", "a-file"], "--out: {here}/a-file is a file, not a folder"),
    (["milestone", "run", "1", "--out", "a-file/m"], "--out: cannot create the folder {here}/a-file/m: Not a "
     "directory"),
    (["milestone", "run", "1", "--record", "--quick"], "--record keeps the full run with the checkout; it cannot be "
     "combined with --quick"),
    (["milestone", "run", "1", "--out", "m", "--record"], "argument --record: not allowed with argument --out (see "
     "tinyflo milestone run --help)"),
    (["milestone", "run", "1", "--device", "gpu"], "--device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got "
     "'gpu'"),
    (["milestone", "run", "1", "--epochs", "3"], "unrecognized arguments: --epochs 3 (see tinyflo milestone run "
     "--help)"),
    # doctor
    (["doctor", "--out", "proof"], "--out, --smoke and --full go with --gpu-proof"),
    (["doctor", "--smoke"], "--out, --smoke and --full go with --gpu-proof"),
    # bench
    (["bench", "--rounds", "1"], "argument --rounds: expected a whole number >= 2 (quartiles need two rounds), got "
     "'1' (see tinyflo bench --help)"),
    (["bench", "--rounds", "many"], "argument --rounds: expected a whole number >= 1, got 'many' (see tinyflo bench "
     "--help)"),
    (["bench", "--device", "gpu"], "--device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'gpu'"),
    (["bench", "--out", "a-file"], "--out: {here}/a-file is a file, not a folder"),
    (["bench", "--modules", "not-there"], "--modules names 'not-there', which is not a directory"),
    # download
    (["download"], "the following arguments are required: NAME (see tinyflo download --help)"),
    (["download", "mnst"], "NAME: expected mnist, fashion-mnist, tinyshakespeare; got 'mnst'"),
    # book
    (["book"], "the following arguments are required: ACTION (see tinyflo book --help)"),
    (["book", "build", "--out", "a-file/b"], "--out: cannot create the folder {here}/a-file/b: Not a directory"),
    # launch
    (["launch"], "script: missing; give the Python script every rank runs"),
    (["launch", "train.py"], "script: no such file: train.py"),
    (["launch", "-n", "0", "train.py"], "argument -n/--nproc: expected a whole number >= 1, got '0' (see tinyflo "
     "launch --help)"),
    (["launch", "--grace", "-1", "train.py"], "argument --grace: expected seconds >= 0, got '-1' (see tinyflo launch "
     "--help)"),
    (["launch", "--backend", "gloo", "train.py"], "argument --backend: invalid choice: 'gloo' (choose from 'mpi', "
     "'nccl') (see tinyflo launch --help)"),
    # demo
    (["demo", "--epochs", "0"], "--epochs must be at least 1; got 0 (see tinyflo demo --help)"),
    (["demo", "--epochs", "ten"], "argument --epochs: invalid int value: 'ten' (see tinyflo demo --help)"),
    (["demo", "--batch-size", "0"], "--batch-size must be at least 1; got 0 (see tinyflo demo --help)"),
    (["demo", "--lr", "nan"], "--lr must be a positive finite number; got nan (see tinyflo demo --help)"),
    (["demo", "--seed", "-1"], "--seed must be a whole number >= 0; got -1 (see tinyflo demo --help)"),
    (["demo", "--device", "cuda:x"], "--device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'cuda:x'"),
    (["demo", "--out", "a-file"], "--out: {here}/a-file is a file, not a folder"),
    (["demo", "--out", ""], "argument --out: expected a path; got an empty string (see tinyflo demo --help)"),
    (["demo", "--bogus"], "unrecognized arguments: --bogus (see tinyflo demo --help)"),
    # tinyflo itself
    (["train"], "argument COMMAND: invalid choice: 'train' (choose from 'export', 'module', 'course', 'milestone', "
     "'doctor', 'bench', 'download', 'book', 'launch', 'demo') (see tinyflo --help)"),
]


@pytest.mark.parametrize("command, expected", MISUSE, ids=[" ".join(c) or "-" for c, _ in MISUSE])
def test_each_misuse_is_one_line_with_exit_status_2_and_writes_nothing(command, expected, place):
    before = entries(place)
    code, out, err = run_cli(*command)
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    line = err.rstrip("\n")
    assert re.match(r"tinyflo( [a-z]+)*: error: ", line), line
    said = line.split(": error: ", 1)[1]
    assert said.startswith(expected.format(here=place)), line
    assert entries(place) == before, "nothing written"


def as_unprivileged(monkeypatch, folder: Path) -> None:
    """``folder`` read-only, as a user without root sees a folder they may not write to (root may
    write anywhere, so the test says what access() would)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path).resolve() != folder.resolve()
                        and real(path, mode, **kw))


@pytest.mark.parametrize("command, option", [
    (["demo", "--out", "ro"], "--out"),
    (["milestone", "run", "1", "--out", "ro"], "--out"),
    (["bench", "--out", "ro"], "--out"),
    (["module", "start", "1", "--workspace", "ro"], "--workspace"),
    (["course", "build", "--dir", "ro"], "--dir"),
])
def test_a_read_only_folder_is_one_line_before_any_work(command, option, place, monkeypatch):
    (place / "ro").mkdir()
    as_unprivileged(monkeypatch, place / "ro")
    code, _, err = run_cli(*command)
    assert (code, err) == (2, f"tinyflo {command[0]}: error: {option}: cannot write into the folder {place / 'ro'}: "
                              "it is read-only to you\n")
    assert not list((place / "ro").iterdir())


# ----- nothing left behind ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop, code", [(KeyboardInterrupt, 130), (BrokenPipeError, 141)])
def test_a_demo_stopped_or_cut_off_by_its_pipe_leaves_no_folder(stop, code, place, monkeypatch):
    """Ctrl-C early, or `tinyflo demo | head -1`: the folder made for the plot goes again."""

    def train(*args, **kwargs):
        print("epoch 1/20 ...")
        raise stop

    monkeypatch.setattr(demo, "train", train)
    for out in ([], ["--out", "runs/demo"]):
        assert run_cli("demo", *out)[0] == code
        assert entries(place) == ["a-file"], "no tinyflo-demo/ (or runs/demo, or runs/) left behind"


def test_a_demo_refused_in_a_student_kit_leaves_no_folder(place, monkeypatch):
    monkeypatch.setattr(milestones, "student_kit", lambda: True)
    code, _, err = run_cli("demo")
    assert code == 2 and "this tinyflo is a student kit" in err
    assert entries(place) == ["a-file"]


def test_a_download_that_cannot_reach_a_mirror_is_one_line_and_leaves_no_folder(place, monkeypatch):
    hashes, _ = datasets.DOWNLOADS["mnist"]
    offline = (place / "no-mirror").as_uri() + "/"  # a mirror that is not there: no network needed
    monkeypatch.setitem(datasets.DOWNLOADS, "mnist", (hashes, [offline]))
    monkeypatch.setenv("TINYFLO_DATA", str(place / "data"))
    code, _, err = run_cli("download", "mnist")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"tinyflo download: error: mnist: could not download {next(iter(hashes))} from any "
                          f"mirror: {offline}{next(iter(hashes))}: ")
    assert entries(place) == ["a-file"], "no data/ nor data/mnist/ left behind"


def test_module_test_without_a_workspace_makes_none(place):
    code, _, err = run_cli("module", "test", "1")
    assert code == 2 and "01_tensor is not started" in err
    assert entries(place) == ["a-file"], "no workspace/ made for a module that is not there"


def test_course_build_without_the_course_tools_makes_nothing(place, monkeypatch):
    monkeypatch.setitem(sys.modules, "jupytext", None)  # as if `tinyflo[course]` were not installed
    code, _, err = run_cli("course", "build", "--modules", str(FIXTURE_MODULES))
    assert (code, err) == (2, "tinyflo course: error: this command needs jupytext, part of the course tools: "
                              "pip install 'tinyflo[course]'\n")
    assert entries(place) == ["a-file"], "no course/ nor course/course.toml"


def test_a_course_command_that_runs_nbgrader_without_it_says_what_to_install(tmp_path, monkeypatch):
    from tinyflo.course.semester.nbgrader_run import nbgrader
    from tinyflo.course.source import CourseError

    monkeypatch.setitem(sys.modules, "nbgrader", None)  # as if `tinyflo[course]` were not installed
    with pytest.raises(CourseError, match=r"^this command needs nbgrader, part of the course tools: "
                                          r"pip install 'tinyflo\[course\]'$"):
        nbgrader(tmp_path, "--version")


# ----- output that cannot be written ----------------------------------------------------------------------------


class FullDisk(io.StringIO):
    """Standard output on a full disk: every write fails, as on /dev/full."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("command, said_by", [
    (["doctor"], "tinyflo doctor"), (["milestone", "list"], "tinyflo milestone"), (["module", "list"], "tinyflo module"),
    (["--help"], "tinyflo"), (["--version"], "tinyflo"), (["course", "--help"], "tinyflo course"),
    (["demo", "--help"], "tinyflo demo"), (["download", "--help"], "tinyflo download"),
])
def test_output_on_a_full_disk_is_one_line_and_exit_status_1(command, said_by, place, monkeypatch):
    monkeypatch.setattr(cli, "_mpi", lambda: "not probed")  # doctor's child process is not what is tested here
    code, _, err = run_cli(*command, stdout=FullDisk())
    assert (code, err) == (1, f"{said_by}: error: write error: No space left on device\n")


# ----- TINYFLO_MILESTONE_OUT and --out ---------------------------------------------------------------------------


@pytest.fixture
def milestone_runs(place, monkeypatch):
    """What each `milestone run` would have written to: the folder its script is told."""
    told = []

    def run_script(script, env):
        told.append(Path(env["TINYFLO_MILESTONE_OUT"]))
        (told[-1] / "result.json").write_text("{}")
        return 0

    monkeypatch.setattr(cli, "_run_script", run_script)
    return told


def test_the_milestone_out_variable_is_used_and_an_out_option_wins_over_it_and_says_so(place, milestone_runs,
                                                                                        monkeypatch):
    monkeypatch.setenv("TINYFLO_MILESTONE_OUT", "from-variable")
    code, _, err = run_cli("milestone", "run", "perceptron", "--quick")
    assert code == 0 and err == "" and milestone_runs == [place / "from-variable"], "relative to where tinyflo ran"
    code, _, err = run_cli("milestone", "run", "perceptron", "--quick", "--out", "from-option")
    assert code == 0 and milestone_runs[-1] == place / "from-option"
    assert err == (f"tinyflo milestone run: note: --out {place / 'from-option'} wins over "
                   f"TINYFLO_MILESTONE_OUT={place / 'from-variable'}\n")
    monkeypatch.delenv("TINYFLO_MILESTONE_OUT")
    assert run_cli("milestone", "run", "perceptron", "--quick")[0] == 0
    assert milestone_runs[-1] == place / "tinyflo-milestones" / "perceptron-quick"


def test_a_milestone_run_that_writes_nothing_leaves_no_folder(place, monkeypatch):
    monkeypatch.setattr(cli, "_run_script", lambda script, env: 1)  # refused: a needed data set is missing
    assert run_cli("milestone", "run", "mlp", "--quick")[0] == 1
    assert run_cli("milestone", "run", "mlp", "--quick", "--out", "runs/mlp")[0] == 1
    assert entries(place) == ["a-file"], "no tinyflo-milestones/ nor runs/ left behind"
