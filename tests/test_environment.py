"""The TINYFLO_ environment variables: one registry reads them all (tinyflo.environment), every
value it cannot take is one line naming the variable, and the `tinyflo` command refuses a bad one
before it does anything, whatever the subcommand."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from tinyflo import cli, environment
from tinyflo.environment import VARIABLES, VariableError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "src" / "tinyflo"

# A value each variable cannot take, and how the refusal names what it takes.
BAD = {
    "TINYFLO_WORKSPACE": ("{file}", "a folder; got '{file}' (a file, not a folder)"),
    "TINYFLO_MODULES": ("{missing}", "an existing folder; got '{missing}' (no such folder)"),
    "TINYFLO_DATA": ("{file}", "a folder; got '{file}' (a file, not a folder)"),
    "TINYFLO_CACHE": ("{file}", "a folder; got '{file}' (a file, not a folder)"),
    "TINYFLO_NUM_THREADS": ("abc", "a positive whole number of threads; got 'abc'"),
    "TINYFLO_VERBOSITY": ("loud", "one of quiet, normal, verbose, debug (or 0-3); got 'loud'"),
    "TINYFLO_FAKE_GPU": ("yes", "'strict' (or unset); got 'yes'"),
    "TINYFLO_MILESTONE_MODE": ("fast", "'quick' or 'full'; got 'fast'"),
    "TINYFLO_MILESTONE_DEVICE": ("gpu", "'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'gpu'"),
    "TINYFLO_MILESTONE_OUT": ("{file}", "a folder; got '{file}' (a file, not a folder)"),
    "TINYFLO_MILESTONE_DATA": ("bundle", "'bundled' (or unset); got 'bundle'"),
    "TINYFLO_BACKEND": ("gloo", "'local', 'mpi' or 'nccl'; got 'gloo'"),
    "TINYFLO_GRADING_TIMEOUT": ("0", "a whole number of seconds >= 1; got '0'"),
    "TINYFLO_GRADING_SLOT": ("x", "a whole number >= 0; got 'x'"),
    "TINYFLO_NO_SANDBOX": ("yes", "'0' or '1'; got 'yes'"),
}

# Every subcommand, as a newcomer would start it: each is refused before it does anything.
COMMANDS = [
    ["doctor"], ["demo", "--epochs", "1"], ["milestone", "run", "perceptron", "--quick"], ["milestone", "list"],
    ["module", "list"], ["module", "test", "1"], ["download", "mnist"], ["export", "--check"],
    ["course", "report"], ["bench", "--smoke"], ["book", "build"], ["launch", "script.py"],
]


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`tinyflo ARGV` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def bad_values(tmp_path):
    """BAD with its places filled in: a file where a folder goes, a folder that is not there."""
    file = tmp_path / "a-file"
    file.write_text("")
    places = {"file": str(file), "missing": str(tmp_path / "not-there")}
    return {name: (value.format(**places), said.format(**places)) for name, (value, said) in BAD.items()}


def test_every_variable_tinyflo_names_is_in_the_registry_and_every_entry_is_read():
    named = set()
    for path in SOURCES.rglob("*.py"):
        named |= set(re.findall(r"\bTINYFLO_[A-Z][A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8")))
    assert named - set(VARIABLES) == set(), "a variable tinyflo names but the registry does not list"
    assert set(VARIABLES) - named == set(), "a registered variable nothing in tinyflo names"
    assert set(BAD) == set(VARIABLES), "each variable has a bad value below"
    for variable in VARIABLES.values():
        assert variable.meaning and variable.accepts and variable.default, variable.name


# Files that still read a variable themselves, each mirrored by the registry (tested below): the
# generated course modules (edited in modules/, by their owners) and the grading step's settings.
READS_ITS_OWN = {"core/distributed.py", "core/__init__.py", "course/export.py"}


def test_no_other_part_of_tinyflo_reads_a_variable_itself():
    direct = re.compile(r"(environ\.get\(|environ\[|getenv\()\s*[\"']TINYFLO_")
    readers = {str(path.relative_to(SOURCES)) for path in SOURCES.rglob("*.py")
               if direct.search(path.read_text(encoding="utf-8"))}
    assert readers - READS_ITS_OWN == set(), "read it with tinyflo.environment.read"


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_bad_value_is_one_line_naming_the_variable_what_it_takes_and_what_came(name, bad_values):
    value, said = bad_values[name]
    with pytest.raises(VariableError) as refused:
        environment.read(name, {name: value})
    assert str(refused.value) == f"{name} must be {said}"
    assert environment.read(name, {}) is None and environment.read(name, {name: "  "}) is None, "unset or empty"


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_subcommand_refuses_a_bad_variable_before_doing_anything(name, bad_values, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for other in VARIABLES:
        monkeypatch.delenv(other, raising=False)
    value, said = bad_values[name]
    monkeypatch.setenv(name, value)
    before = sorted(tmp_path.iterdir())
    for command in COMMANDS:
        code, out, err = run_cli(*command)
        assert (code, out, err) == (2, "", f"tinyflo {command[0]}: error: {name} must be {said}\n"), command
    assert sorted(tmp_path.iterdir()) == before, "nothing written"


def test_the_registry_reads_as_the_course_modules_do(monkeypatch):
    """Module 01's thread count and device, module 08's verbosity and module 12's backend read their
    variables themselves; the registry, which the command checks at start, takes what they take."""
    from tinyflo.core import distributed, tensor, training

    def module_01_threads(text):
        monkeypatch.setenv("TINYFLO_NUM_THREADS", text)
        return tensor._threads_from_environment()

    def module_08_verbosity(text):
        monkeypatch.setenv("TINYFLO_VERBOSITY", text)
        return training.resolve_verbosity()

    def module_12_backend(text):
        monkeypatch.setenv("TINYFLO_BACKEND", text)
        try:  # devices= is refused by every backend after the backend is taken: nothing starts
            distributed.init_process_group(devices=["cpu"])
        except ValueError as error:
            if "backend must be" in str(error):
                raise
        return text

    class Place:  # the form of a device alone: whether that GPU is there is asked where it is used
        def __init__(self, kind: str, index: int = 0) -> None:
            self.kind, self.index = kind, index

    def as_device(text):
        monkeypatch.setattr(tensor, "Device", Place)
        place = tensor.as_device(text)
        return f"{place.kind}:{place.index}"

    readers = {
        "TINYFLO_NUM_THREADS": (module_01_threads, ["1", "3", " 2 ", "0", "-1", "1.5", "two", "²", "+3"]),
        "TINYFLO_VERBOSITY": (module_08_verbosity, ["quiet", "Normal", " debug ", "0", "3", "4", "-1", "loud",
                                                    "²", "1.0"]),
        "TINYFLO_BACKEND": (module_12_backend, ["local", "mpi", "nccl", "MPI", "gloo"]),
        "TINYFLO_MILESTONE_DEVICE": (as_device, ["cpu", "cuda", "cuda:1", "cpu:0", "gpu", "cuda:x", "CPU",
                                                 "cuda:-1"]),
    }
    for name, (module_reads, values) in readers.items():
        for text in values:
            try:
                expected = module_reads(text)
            except (ValueError, RuntimeError, ImportError):
                expected = None
            try:
                got = environment.read(name, {name: text})
            except VariableError:
                got = None
            if name == "TINYFLO_MILESTONE_DEVICE" and got is not None:
                got = as_device(got)
            assert got == expected, (name, text, got, expected)


def test_the_grading_sandbox_gives_each_grader_one_thread_of_every_kind(monkeypatch):
    """Graders run side by side under a process limit that counts threads: every pool a submission's
    process may start (tinyflo's own passes, the BLAS, numexpr) is told one thread, by the names they
    read."""
    from tinyflo.core import tensor
    from tinyflo.course.grader.sandbox import runner_environment

    env = runner_environment()
    ours = {name for name in env if name.startswith("TINYFLO_")}
    assert ours <= set(VARIABLES), "every variable the sandbox sets is one tinyflo reads"
    environment.check(env)
    for name in ("TINYFLO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        assert env.get(name) == "1", name
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert tensor._threads_from_environment() == 1


def test_doctor_lists_the_variables_that_are_set_and_any_that_tinyflo_does_not_read(monkeypatch, tmp_path):
    for name in [name for name in os.environ if name.startswith("TINYFLO_")]:  # CI's TINYFLO_REQUIRE_* too
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli, "_mpi", lambda: "not probed")  # a child process: not what this test is about
    code, out, _ = run_cli("doctor")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert code == 0 and rows["variables"] == "no TINYFLO_ variable is set (tinyflo --help lists them)"
    monkeypatch.setenv("TINYFLO_NUM_THREADS", "2")
    monkeypatch.setenv("TINYFLO_DATA", str(tmp_path))
    monkeypatch.setenv("TINYFLO_NUM_THREAD", "4")  # a misspelling: it does nothing
    code, out, _ = run_cli("doctor")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert code == 0 and "variables" not in rows
    assert rows["TINYFLO_NUM_THREADS"] == f"'2': {VARIABLES['TINYFLO_NUM_THREADS'].meaning}"
    assert rows["TINYFLO_DATA"] == f"'{tmp_path}': {VARIABLES['TINYFLO_DATA'].meaning}"
    assert rows["TINYFLO_NUM_THREAD"] == ("not a variable tinyflo reads, so it does nothing: did you mean "
                                          "TINYFLO_NUM_THREADS?")


def test_help_lists_every_variable():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["--help"])
    for name in VARIABLES:
        assert f"  {name}: " in out.getvalue(), name
