"""Every TINYFLO_ environment variable tinyflo reads, in one place: what it means, the values it
takes, its default, and how it is read.

``read(NAME)`` gives a variable's value, or None when it is unset or empty (its reader's default
then holds); a value it cannot take is a :class:`VariableError` in one line that names the
variable, what it takes and what came::

    TINYFLO_NUM_THREADS must be a positive whole number of threads; got 'abc'

``check()`` reads every variable that is set: the ``tinyflo`` command calls it before anything
else, so a bad value stops every subcommand at once. ``tinyflo doctor`` lists the ones set.

This module imports nothing of tinyflo, so every part of tinyflo can read through it: the
generated course modules too (``tinyflo.core``), which must not import the rest of the package.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "VARIABLES",
    "Variable",
    "VariableError",
    "check",
    "read",
    "set_variables",
    "unknown_variables",
]

PREFIX = "TINYFLO_"


class VariableError(ValueError):
    """An environment variable holds a value tinyflo cannot use; the message names the variable,
    what it takes and what came."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, what it means, what it takes, its default, its parser."""

    name: str
    meaning: str
    accepts: str  # as the error says it: "NAME must be <accepts>; got '...'"
    default: str  # what holds while it is unset (or empty)
    parse: Callable[[str], Any]  # its text (stripped, not empty) -> its value; ValueError if none
    set_by: str = ""  # the tinyflo command that sets it for a process it starts, if one does

    def read(self, environ: Mapping[str, str] | None = None) -> Any:
        """The value, None when unset or empty, or a VariableError saying what came."""
        text = (os.environ if environ is None else environ).get(self.name, "")
        if not text.strip():
            return None
        try:
            return self.parse(text.strip())
        except ValueError as error:
            why = f" ({error})" if str(error) else ""
            raise VariableError(f"{self.name} must be {self.accepts}; got {text!r}{why}") from None


def _one_of(*values: str, any_case: bool = True) -> Callable[[str], str]:
    """A parser taking one of `values` (in any case, unless `any_case` is False)."""

    def parse(text: str) -> str:
        value = text.lower() if any_case else text
        if value not in values:
            raise ValueError
        return value

    return parse


def _whole(least: int) -> Callable[[str], int]:
    """A parser taking a whole number >= `least` (digits only: no sign, no point)."""

    def parse(text: str) -> int:
        if not text.isdecimal() or int(text) < least:
            raise ValueError
        return int(text)

    return parse


def _verbosity(text: str) -> int:
    """0-3 from quiet, normal, verbose, debug or the number (as module 08's resolve_verbosity)."""
    levels = {"quiet": 0, "normal": 1, "verbose": 2, "debug": 3}
    if text.lower() in levels:
        return levels[text.lower()]
    if text.isdecimal() and int(text) <= 3:
        return int(text)
    raise ValueError


def _device(text: str) -> str:
    """'cpu', 'cpu:N', 'cuda' or 'cuda:N' (as module 01's as_device); whether that GPU is there is
    asked where the device is used."""
    name, _, index = text.partition(":")
    if name not in ("cpu", "cuda") or not (index == "" or index.isdigit()):
        raise ValueError
    return text


def _folder(text: str) -> Path:
    """A folder, or a path where one can be made: anything but a file."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError("a file, not a folder")
    return path


def _existing_folder(text: str) -> Path:
    path = _folder(text)
    if not path.is_dir():
        raise ValueError("no such folder")
    return path


_THREADS = "a positive whole number of threads"
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable(
            "TINYFLO_WORKSPACE",
            "the student's workspace: the modules completed there replace the "
            "package's (milestones, the demo, `import tinyflo`); `tinyflo module` works in it",
            "a folder",
            "unset: the package's own modules run; `tinyflo module` uses the workspace "
            "the current folder is in, else ./workspace",
            _folder,
        ),
        Variable(
            "TINYFLO_MODULES",
            "the course's modules/ folder the course commands read",
            "an existing folder",
            "the modules/ of the checkout the current folder is in, else tinyflo's",
            _existing_folder,
        ),
        Variable(
            "TINYFLO_DATA",
            "where data sets are read from and downloaded to (TINYFLO_DATA/NAME)",
            "a folder",
            "$XDG_CACHE_HOME/tinyflo, else ~/.cache/tinyflo",
            _folder,
        ),
        Variable(
            "TINYFLO_CACHE",
            "where grading trees are kept between runs (in its grading/)",
            "a folder",
            "$XDG_CACHE_HOME/tinyflo, else ~/.cache/tinyflo",
            _folder,
        ),
        Variable(
            "TINYFLO_NUM_THREADS",
            "threads for tinyflo's own passes over memory (matrix products "
            "use the BLAS's threads: OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS)",
            _THREADS,
            "the cores this process may use",
            _whole(1),
        ),
        Variable(
            "TINYFLO_VERBOSITY",
            "how much the Trainer prints when no verbosity= is given",
            "one of quiet, normal, verbose, debug (or 0-3)",
            "normal",
            _verbosity,
        ),
        Variable(
            "TINYFLO_FAKE_GPU",
            "strict: CuPy's API played on NumPy with two stand-in GPUs, to test "
            "GPU code without one",
            "'strict' (or unset)",
            "unset: the real CuPy, if any",
            _one_of("strict"),
        ),
        Variable(
            "TINYFLO_MILESTONE_MODE",
            "a milestone's run: quick (reduced, what CI checks) or full; "
            "--quick and --full win over it",
            "'quick' or 'full'",
            "full",
            _one_of("quick", "full"),
        ),
        Variable(
            "TINYFLO_MILESTONE_DEVICE",
            "the device a milestone runs on; --device wins over it",
            "'cpu', 'cpu:N', 'cuda' or 'cuda:N'",
            "cuda:0 when CuPy sees a GPU, else cpu",
            _device,
        ),
        Variable(
            "TINYFLO_MILESTONE_OUT",
            "the folder a milestone writes its plots and results to; --out "
            "and --record win over it",
            "a folder",
            "tinyflo-milestones/NAME in the current folder (NAME-quick for a quick run)",
            _folder,
        ),
        Variable(
            "TINYFLO_MILESTONE_DATA",
            "bundled: milestones use only the data sets inside tinyflo "
            "and skip the parts that need others",
            "'bundled' (or unset)",
            "unset: every data set found",
            _one_of("bundled"),
        ),
        Variable(
            "TINYFLO_BACKEND",
            "the process group backend init_process_group() takes when given none",
            "'local', 'mpi' or 'nccl'",
            "mpi under mpiexec, else none (an error)",
            _one_of("local", "mpi", "nccl", any_case=False),
            "tinyflo launch, from --backend",
        ),
        Variable(
            "TINYFLO_GRADING_TIMEOUT",
            "seconds per cell for nbgrader's grading step",
            "a whole number of seconds >= 1",
            "the course's default",
            _whole(1),
            "tinyflo course autograde, from --timeout",
        ),
        Variable(
            "TINYFLO_GRADING_SLOT",
            "which grading slot (and sandbox uid) an nbgrader process uses",
            "a whole number >= 0",
            "0",
            _whole(0),
            "tinyflo course autograde, from --jobs",
        ),
        Variable(
            "TINYFLO_NO_SANDBOX",
            "1: nbgrader's grading step runs without bubblewrap (a self-check)",
            "'0' or '1'",
            "0: sandboxed",
            _one_of("0", "1"),
            "tinyflo course autograde, from --no-sandbox",
        ),
    )
}


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the variable `name` (one of :data:`VARIABLES`), or None when it is unset or
    empty; a :class:`VariableError` when it holds a value it cannot take."""
    return VARIABLES[name].read(environ)


def check(environ: Mapping[str, str] | None = None) -> None:
    """Read every variable that is set; the first one holding a value it cannot take is a
    :class:`VariableError`."""
    for variable in VARIABLES.values():
        variable.read(environ)


def set_variables(environ: Mapping[str, str] | None = None) -> list[tuple[Variable, str]]:
    """Each variable that is set (not empty), with its text."""
    environ = os.environ if environ is None else environ
    return [(v, environ[v.name]) for v in VARIABLES.values() if environ.get(v.name, "").strip()]


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """TINYFLO_ variables that are set but that tinyflo does not read (a misspelling does nothing),
    each with the name it is likely meant to be, if any."""
    environ = os.environ if environ is None else environ
    unknown = sorted(name for name in environ if name.startswith(PREFIX) and name not in VARIABLES)
    return [
        (name, next(iter(difflib.get_close_matches(name, VARIABLES, n=1)), None))
        for name in unknown
    ]
