"""The `tinyflo` command: export, the student's and the instructor's loops, milestones, data, the book, doctor, demo."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tinyflo import environment
from tinyflo.course.source import (
    COURSE_DIR,
    LMS_FORMATS,
    SIMILAR,
    CourseError,
    find_modules_dir,
    make_folder,
)
from tinyflo.launch import BACKENDS, INSTALL_MPI, LaunchError, launch, mpiexec_path


def _export(args: argparse.Namespace) -> int:
    from tinyflo import milestones
    from tinyflo.course import export

    if milestones.student_kit() and not (args.modules or args.package_dir):
        raise CourseError("export writes a tinyflo checkout's modules/ into its package, and this is a student "
                          "kit; your own code goes into your workspace with `tinyflo module complete N`")
    package_dir = Path(args.package_dir).expanduser().resolve() if args.package_dir else None
    if package_dir is not None and package_dir.exists() and not package_dir.is_dir():
        # a folder export writes into may be new (--check then says the package differs)
        raise CourseError(f"--package-dir: expected the tinyflo package's folder (src/tinyflo in a checkout); "
                          f"got {package_dir}, a file")
    return export.run(find_modules_dir(args.modules), package_dir, check_only=args.check)


def _module(args: argparse.Namespace) -> int:
    from tinyflo.course.kit import student

    return student.run(args)


def _course(args: argparse.Namespace) -> int:
    from tinyflo import milestones
    from tinyflo.course.semester import instructor

    if milestones.student_kit() and not args.modules:
        raise CourseError("a course is built from a tinyflo checkout's modules/ (solutions and hidden checks), "
                          "and this is a student kit; `tinyflo module ...` is the student's loop")
    if args.action == "build":  # checked before the course folder is made: nothing is left half-made
        from tinyflo.course.notebooks import require

        for tool in ("jupytext", "nbformat", "nbgrader"):
            require(tool)
        folder = Path(args.dir).expanduser().resolve()
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise CourseError(f"--dir: cannot write into the folder {folder}: it is read-only to you")
    # What the instructor's commands write holds solutions, the course key, grades or student work:
    # private from creation, for this process and the nbgrader runs it starts. (nbgrader opens up
    # what it puts in the exchange itself, by its own permissions.)
    umask = os.umask(0o077)
    try:
        return instructor.run(args)
    finally:
        os.umask(umask)  # for a caller that runs the command in its own process


INSTALL_HINTS = {  # what to install for each tool doctor looks for
    "cupy": "pip install 'tinyflo[gpu-cuda12]' or 'tinyflo[gpu-cuda13]' (the machine's CUDA)",
    "nbgrader": "pip install 'tinyflo[course]'",
    "jupytext": "pip install 'tinyflo[course]'",
    "jupyterlab": "pip install 'tinyflo[course]'",
    "matplotlib": "pip install matplotlib",
    "psutil": "pip install psutil (the Monitor's CPU and memory columns)",
    "torch": "optional, the benchmarks' reference: pip install torch",
}


def _version(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except ImportError:
        hint = INSTALL_HINTS.get(name)
        return f"not installed: {hint}" if hint else "not installed"
    except Exception as error:  # a broken install should be reported, not crash doctor
        return f"fails to import ({type(error).__name__}: {error})"
    return getattr(module, "__version__", "installed (version unknown)")


def _gpu() -> str:
    from tinyflo import strict_gpu

    if strict_gpu.active():
        return "the strict stand-in (TINYFLO_FAKE_GPU=strict): CuPy played on NumPy, no GPU"
    try:
        import cupy
    except ImportError:
        return "no (CuPy not installed)"
    except Exception as error:
        return f"no (CuPy fails to import: {type(error).__name__}: {error})"
    try:
        if not cupy.cuda.is_available():
            return "no (CuPy found no CUDA device)"
        count = cupy.cuda.runtime.getDeviceCount()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as error:
        return f"no ({type(error).__name__}: {error})"
    return f"yes ({count} device{'s' if count != 1 else ''}: {name})"


_MPI_PROBE = """
import mpi4py
mpi4py.rc.initialize = False  # the library's version needs no MPI_Init (and no mpiexec)
from mpi4py import MPI
print(mpi4py.__version__)
print(MPI.Get_library_version().split(",")[0].strip())
"""


def _mpi() -> str:
    if importlib.util.find_spec("mpi4py") is None:
        return f"not installed: {INSTALL_MPI}"
    # in a child process: loading the MPI library can crash, and must not initialise MPI here
    try:
        probe = subprocess.run([sys.executable, "-c", _MPI_PROBE], capture_output=True, text=True,
                               timeout=60)
    except subprocess.TimeoutExpired:
        return "mpi4py found, but loading the MPI library did not finish in 60 s"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return f"mpi4py found, but the MPI library fails to load ({last})"
    version, library = probe.stdout.split("\n")[:2]
    mpiexec = mpiexec_path() or f"no mpiexec found: {INSTALL_MPI}"
    return f"mpi4py {version}, {library}, {mpiexec}"


def _nccl() -> str:
    try:
        from cupy.cuda import nccl
    except ImportError:
        return "no (CuPy not installed)"
    except Exception as error:
        return f"no (CuPy fails to import: {type(error).__name__}: {error})"
    if not getattr(nccl, "available", False):
        return "no (CuPy found no NCCL library: python -m cupyx.tools.install_library --library nccl)"
    try:
        code = nccl.get_version()
    except Exception:
        return "yes (version unknown)"
    return f"yes (NCCL {code // 10000}.{code // 100 % 100}.{code % 100})" if code >= 10000 else "yes"


def _data() -> str:
    """Where data sets are read from, and which of them are there."""
    from tinyflo import datasets, milestones

    root = datasets.data_root("x").parent
    where = f"{root} (TINYFLO_DATA)" if environment.read("TINYFLO_DATA") else str(root)
    found: dict[Path, list[str]] = {}
    for name in datasets.DOWNLOADS:
        folder = milestones.find_data(name, "")
        if folder is not None:
            found.setdefault(folder.parent, []).append(name)
    have = "; ".join(f"{', '.join(names)} in {folder}" for folder, names in found.items())
    return (f"{where}; found: {have or 'none yet (tinyflo download mnist fashion-mnist tinyshakespeare)'}; "
            "the 8×8 digits are inside tinyflo")


def _threads() -> str:
    """How many threads tinyflo's CPU passes use and why, and what sets the BLAS's."""
    import tinyflo
    from tinyflo.core.tensor import _usable_cores

    try:
        count = tinyflo.get_num_threads()
    except ValueError as error:
        return f"{error}: unset it or give a count"
    why = "TINYFLO_NUM_THREADS" if environment.read("TINYFLO_NUM_THREADS") else "the cores this process may use"
    blas = next((f"{name}={os.environ[name]}" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                 if os.environ.get(name)), "its own default")
    return (f"{count} for tinyflo's passes over memory ({why}; {_usable_cores()} usable); "
            f"matrix products: BLAS's own threads ({blas})")


def _workspace() -> str:
    """TINYFLO_WORKSPACE and what it does, or what is wrong with it."""
    from tinyflo import milestones

    try:
        workspace = environment.read("TINYFLO_WORKSPACE")
    except environment.VariableError as error:
        return str(error)
    if workspace is None:
        return ("unset: in a student kit the milestones and the demo need it (your completed modules)"
                if milestones.student_kit() else "unset (the reference modules run)")
    if not workspace.is_dir():
        return f"{workspace} does not exist yet (tinyflo module start 01 makes it)"
    return f"{workspace} (completed modules shadow the package)"


def _variables() -> list[tuple[str, str]]:
    """A row for each TINYFLO_ variable that is set: its value and what it does; one for each that
    tinyflo does not read (a misspelling does nothing)."""
    rows = [(variable.name, f"{text!r}: {variable.meaning}") for variable, text in environment.set_variables()]
    for name, meant in environment.unknown_variables():
        rows.append((name, "not a variable tinyflo reads, so it does nothing"
                     + (f": did you mean {meant}?" if meant else " (tinyflo --help lists them)")))
    return rows or [("variables", "no TINYFLO_ variable is set (tinyflo --help lists them)")]


def _doctor(args: argparse.Namespace) -> int:
    if args.gpu_proof:
        from tinyflo import gpu_proof

        try:
            return gpu_proof.main(args.out, smoke=args.smoke, full=args.full)
        except gpu_proof.ProofError as error:
            raise CourseError(str(error)) from None
    if args.out or args.smoke or args.full:
        raise CourseError("--out, --smoke and --full go with --gpu-proof")
    import tinyflo
    from tinyflo.course.grader.sandbox import bwrap_works

    rows = [("tinyflo", tinyflo.__version__), ("python", sys.version.split()[0])]
    rows += [(name, _version(name)) for name in ("numpy", "matplotlib", "cupy")]
    rows += [("gpu", _gpu()), ("threads", _threads())]
    rows += [(name, _version(name)) for name in ("mpi4py", "nbgrader", "jupytext", "jupyterlab", "psutil", "torch")]
    rows += [("mpi", _mpi()), ("nccl", _nccl())]
    sandbox = bwrap_works()
    rows.append(("bubblewrap", sandbox or f"works ({shutil.which('bwrap')}): grading is sandboxed"))
    rows += [("data", _data()), ("workspace", _workspace()), *_variables()]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def _launch(args: argparse.Namespace) -> int:
    return launch(args.script, args.args, args.nproc, args.backend, args.grace, args.timeout,
                  args.port, args.nnodes, args.node_rank, args.master_addr)


def _check_device(spec: str) -> None:
    """Refuse in one line a ``--device`` tinyflo cannot use: a misspelling, or no CuPy or no such GPU behind it."""
    import tinyflo

    try:
        tinyflo.device(spec)
    except tinyflo.DeviceError as error:  # "device: cuda:0: CuPy is not installed; ..."
        raise CourseError(f"--{error}") from None


@contextlib.contextmanager
def output_folder(folder: Path, option: str) -> Iterator[Path]:
    """`folder` (absolute), made now, before any work (one line naming `option` when it cannot be),
    and removed again, with every folder made for it, if the command ends, done, failed or stopped,
    before anything was put in it: no empty folder is left behind."""
    folder = Path(folder).expanduser().resolve()
    made = [path for path in (folder, *folder.parents) if not path.exists()]  # deepest first
    make_folder(folder, option)
    if not os.access(folder, os.W_OK | os.X_OK):  # said now, not by the first write after the work
        raise CourseError(f"{option}: cannot write into the folder {folder}: it is read-only to you")
    try:
        yield folder
    finally:
        for path in made:
            try:
                path.rmdir()
            except OSError:  # it holds something (or is gone): kept, and so is every folder above it
                break


def _demo(args: argparse.Namespace) -> int:
    try:
        demo = importlib.import_module("tinyflo.demo")
    except ModuleNotFoundError as error:
        if error.name != "tinyflo.demo":
            raise
        raise CourseError("this tinyflo has no demo yet (tinyflo/demo.py is missing)") from None
    return demo.main(args.argv) or 0


# Folders the variables may name relatively: a milestone runs in its own folder, where a relative
# path would point elsewhere, so it is told the absolute one.
_FOLDER_VARIABLES = ("TINYFLO_WORKSPACE", "TINYFLO_DATA", "TINYFLO_CACHE", "TINYFLO_MODULES")


def _milestone_out(args: argparse.Namespace, name: str) -> tuple[Path, str]:
    """Where a milestone run writes, and what chose it: --out, else $TINYFLO_MILESTONE_OUT, else
    tinyflo-milestones/NAME here. The option wins over the variable, and says so when they differ."""
    from tinyflo import milestones

    variable = environment.read("TINYFLO_MILESTONE_OUT")
    if variable is not None:
        variable = variable.resolve()
    if args.out:
        out = Path(args.out).expanduser().resolve()
        if variable is not None and variable != out:
            print(f"tinyflo milestone run: note: --out {out} wins over TINYFLO_MILESTONE_OUT={variable}",
                  file=sys.stderr)
        return out, "--out"
    if variable is not None:
        return variable, "TINYFLO_MILESTONE_OUT"
    return milestones.default_out(name, args.mode), "the output folder"


def _milestone(args: argparse.Namespace) -> int:
    from tinyflo import milestones

    checkout = milestones.checkout_dir()
    if args.action == "list":
        for m in milestones.MILESTONES.values():
            result = milestones.load_result(m, checkout) if checkout else None
            recorded = (milestones.recorded_figures(result)
                        + f" ({result['mode']}, {result['device']}, {result['seconds']:g} s)"
                        if result else "no recorded run")
            print(f"{m.slug:<14} {m.title}\n{'':<14} needs {', '.join(m.modules)}\n"
                  f"{'':<14} published: {m.figure}\n{'':<14} recorded: {recorded}")
        return 0
    try:
        milestone = milestones.find_milestone(args.name)
    except milestones.MilestoneError as error:
        raise CourseError(str(error)) from None
    kit = Path(__file__).resolve().parent / "course" / "milestones"  # a student kit carries them
    if checkout is None and not kit.is_dir():
        raise CourseError("the milestone notebooks live in a tinyflo checkout (milestones/ beside "
                          "pyproject.toml), and none was found here or above; clone the repository "
                          "and run `tinyflo milestone run` inside it")
    if args.record and checkout is None:
        raise CourseError("--record keeps the full run with a checkout's milestones/results/")
    script = milestone.path(checkout) if checkout else kit / milestone.slug / f"{milestone.name}.py"
    if not script.is_file():
        raise CourseError(f"{script} is missing from this checkout")
    args.mode = args.mode or milestones.milestone_mode()  # checked when tinyflo started
    env = dict(os.environ, TINYFLO_MILESTONE_MODE=args.mode, MPLBACKEND="Agg")
    for variable in _FOLDER_VARIABLES:
        if (folder := environment.read(variable)) is not None:
            env[variable] = str(folder.resolve())
    if args.record and args.mode != "full":
        raise CourseError("--record keeps the full run with the checkout; it cannot be combined with --quick")
    if args.device:
        _check_device(args.device)
        env["TINYFLO_MILESTONE_DEVICE"] = args.device
    elif device := environment.read("TINYFLO_MILESTONE_DEVICE"):
        try:
            _check_device(device)
        except CourseError as error:
            raise CourseError(f"TINYFLO_MILESTONE_DEVICE: {str(error).removeprefix('--device: ')}") from None
    if args.record:
        if (variable := environment.read("TINYFLO_MILESTONE_OUT")) is not None:
            print(f"tinyflo milestone run: note: --record writes {milestone.results(checkout)}, not "
                  f"TINYFLO_MILESTONE_OUT={variable}", file=sys.stderr)
        return _record_milestone(milestone, checkout, script, env)
    with output_folder(*_milestone_out(args, milestone.name)) as out:
        env["TINYFLO_MILESTONE_OUT"] = str(out)
        return _run_script(script, env)


# A script (a milestone's) or a module (`-m benchmarks`) as `python` runs it, except that a stop
# (Ctrl-C, or one tinyflo passes on) ends it without a traceback, and so does a pipe whose reader
# stopped (`tinyflo milestone run xor | head -1`): the `tinyflo` process around it says, in one
# line, that it stopped. A full disk under its output is one line too. argv: the command's name
# for that line, then the script and its arguments, or -m and the module and its arguments.
_QUIET = """
import errno, os, runpy, signal, sys, time

stops = []


def stop(signum, frame):
    # Ctrl-C at a terminal comes twice: from the terminal, and passed on by tinyflo (which a stop
    # sent to tinyflo alone needs). One of them stops the run; another, a second later, again.
    if stops and time.monotonic() - stops[-1] < 1:
        return
    stops.append(time.monotonic())
    raise KeyboardInterrupt


def quiet_output():  # what is still buffered goes nowhere
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def a_stop(error):  # Python 3.11 wraps a stop raised in a __set_name__ (matplotlib's, mid-import)
    while error is not None and not isinstance(error, KeyboardInterrupt):
        error = error.__cause__
    return error is not None


signal.signal(signal.SIGINT, stop)
command, module = sys.argv[1], sys.argv[2] == "-m"
sys.argv = sys.argv[3:] if module else sys.argv[2:]
try:
    try:
        if module:
            runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.stdout.flush()  # here, where a failure can be said in one line
except KeyboardInterrupt:
    sys.exit(130)
except BrokenPipeError:
    quiet_output()
    sys.exit(141)
except OSError as error:
    if error.filename is not None or error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
        raise
    quiet_output()
    sys.exit(f"{command}: error: write error: {error.strerror}")
except Exception as error:
    if not a_stop(error):
        raise
    sys.exit(130)
"""

_PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)  # the first stop, the second, any later one


def _run_quietly(target: list[str], cwd: Path, env: dict[str, str] | None = None,
                 command: str = "tinyflo") -> int:
    """Run ``[script, args...]`` or ``["-m", module, args...]`` in its own process; its exit status.

    A stop that reaches this process (Ctrl-C, which the child has too; SIGINT sent to tinyflo alone,
    by a supervisor or an IDE's stop button; SIGTERM) is passed on, SIGINT first, SIGTERM if a
    second comes, then SIGKILL; tinyflo waits for the child to end, then raises the stop. A child
    that ended well although a stop came is a run that finished: its status, 0, is returned."""
    process = subprocess.Popen([sys.executable, "-c", _QUIET, command, *target], cwd=cwd, env=env)
    stops: list[KeyboardInterrupt] = []
    while True:
        try:
            code = process.wait()
            break
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (Terminated)
            process.send_signal(_PASSED_ON[min(len(stops), len(_PASSED_ON) - 1)])
            stops.append(stop)
    if stops and code != 0:
        raise stops[0]
    return code


def _run_script(script: Path, env: dict[str, str]) -> int:
    """Run a milestone's script in its own process, in its folder; its exit status."""
    return _run_quietly([script.name], script.parent, env, "tinyflo milestone")


def _record_milestone(milestone: Any, checkout: Path, script: Path, env: dict[str, str]) -> int:
    """A full run into a folder beside the recorded one, swapped in whole only when every part ran."""
    recorded = milestone.results(checkout)
    staging = recorded.with_name(f".{recorded.name}.recording")
    shutil.rmtree(staging, ignore_errors=True)
    env["TINYFLO_MILESTONE_OUT"] = str(staging)
    try:
        code = _run_script(script, env)
    except KeyboardInterrupt:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = staging / "result.json"
    skipped = json.loads(result.read_text()).get("numbers", {}).get("skipped", []) if result.is_file() else []
    if code != 0 or not result.is_file() or skipped:
        shutil.rmtree(staging, ignore_errors=True)
        why = f"a part was skipped ({skipped[0]})" if skipped else f"the run failed (exit code {code or 1})"
        print(f"tinyflo milestone run: not recorded: {why}; {recorded} is unchanged", file=sys.stderr)
        return code or 1
    from tinyflo import milestones

    milestones.replace_folder(staging, recorded)
    print(f"recorded: {recorded}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    checkout = find_modules_dir(args.modules).parent
    if not (checkout / "benchmarks" / "run_all.py").is_file():
        from tinyflo import milestones

        raise CourseError("the benchmarks come with a tinyflo checkout, not with a student kit" if milestones.student_kit()
                          else f"no benchmarks/ beside {checkout / 'modules'}: run inside a tinyflo checkout")
    _check_device(args.device)
    command = ["-m", "benchmarks", "--rounds", str(args.rounds), "--device", args.device]
    if args.smoke:
        command.append("--smoke")
    if args.record:
        command.append("--record")
        return _run_quietly(command, checkout, command="tinyflo bench")
    # a scratch folder here: the recorded results change only when asked to
    with output_folder(Path(args.out or "tinyflo-bench"), "--out") as out:
        return _run_quietly([*command, "--out", str(out)], checkout, command="tinyflo bench")


def _download(args: argparse.Namespace) -> int:
    from tinyflo import datasets

    unknown = [name for name in args.names if name not in datasets.DOWNLOADS]
    if unknown:
        raise CourseError(f"NAME: expected {', '.join(datasets.DOWNLOADS)}; got {', '.join(map(repr, unknown))}")
    where = "TINYFLO_DATA" if environment.read("TINYFLO_DATA") else "the data folder"
    for name in args.names:
        with output_folder(datasets.data_root(name), where):  # removed again if nothing came
            try:
                folder = datasets.download(name)
            except (OSError, RuntimeError, ValueError) as error:  # no network, a full disk, not the original
                raise CourseError(f"{name}: {error}") from None
        print(f"{name}: every file is in {folder}, its SHA-256 checked")
    return 0


def _book(args: argparse.Namespace) -> int:
    from tinyflo import book, milestones

    checkout = milestones.checkout_dir()
    if checkout is None or not (checkout / "book" / "conf.py").is_file():
        raise CourseError("the book is built from a tinyflo checkout (book/, modules/ and milestones/ "
                          "beside pyproject.toml), and none was found here or above")
    return book.run(args.out, checkout)


def _rounds(text: str) -> int:
    """A whole number >= 2, for bench --rounds: a median and its quartiles need two rounds."""
    value = _count(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 2 (quartiles need two rounds), got {text!r}")
    return value


def path_arg(text: str) -> str:
    """A file or folder argument: anything but empty (an empty --out would quietly mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path; got an empty string")
    return text


def _share(text: str) -> float:
    """A number from 0 to 1, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def _minutes(text: str) -> int:
    """A whole number of minutes >= 0, for argparse."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of minutes >= 0, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    """A whole number >= 1, for argparse."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    """A number of seconds >= 0, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _workspace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workspace",
        type=path_arg,
        metavar="PATH",
        help="student workspace (default: $TINYFLO_WORKSPACE, else the workspace the current folder is in, "
        "else ./workspace)",
    )


def _modules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modules",
        type=path_arg,
        metavar="PATH",
        help="course modules/ folder (default: $TINYFLO_MODULES, else for a course command the modules the "
        "course folder was built from, else the checkout's modules/)",
    )


class _HelpLayout(argparse.HelpFormatter):
    """argparse's help layout, except that a line never breaks inside a hyphenated name
    (``tinyflo-milestones/NAME`` stays whole)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Each line of a description its own paragraph, wrapped under its first words' indent."""
        lines = []
        for line in text.splitlines():
            margin = indent + " " * (len(line) - len(line.lstrip()))
            lines.append(textwrap.fill(" ".join(line.split()), width, initial_indent=margin,
                                       subsequent_indent=margin + "    ", break_on_hyphens=False))
        return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: the command, what was wrong, where to read more."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpLayout)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse's, except that a write that fails (help into a full disk) is not passed over:
        `tinyflo` says it in one line."""
        if message:
            (file or sys.stderr).write(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `tinyflo` subcommand."""
    import tinyflo  # only its version: the generated modules load on first use

    variables = "\n".join(f"  {v.name}: {v.meaning}" + (f" (set by {v.set_by})" if v.set_by else "")
                          for v in environment.VARIABLES.values())
    parser = Parser(prog="tinyflo", description=__doc__, epilog="environment variables (checked when tinyflo "
                    f"starts; tinyflo doctor shows those set):\n{variables}")
    parser.add_argument("--version", action="version", version=f"tinyflo {tinyflo.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    export = commands.add_parser("export", help="write modules' export cells into the package")
    _modules_option(export)
    export.add_argument(
        "--package-dir",
        metavar="PATH",
        help="tinyflo package folder to write into (default: src/tinyflo beside modules/)",
    )
    export.add_argument(
        "--check", action="store_true", help="write nothing; show differences and exit 1 if any"
    )
    export.set_defaults(handler=_export)

    module = commands.add_parser("module", help="the student's loop: list, start, test, reset, complete")
    module_commands = module.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, summary in (
        ("list", "list modules and your progress"),
        ("start", "write a module's student notebook into your workspace (never overwrites)"),
        ("test", "run the checks you can see, points per task (your instructor's grading adds hidden ones)"),
        ("reset", "back up your notebook and write a fresh one"),
        ("complete", "test, then export your code into the workspace package"),
    ):
        sub = module_commands.add_parser(action, help=summary)
        if action != "list":
            sub.add_argument("module", help="module number or name: 1, 01, 01_tensor or tensor")
        if action in ("test", "complete"):
            _grading_options(sub)
        _workspace_option(sub)
        _modules_option(sub)
    module.set_defaults(handler=_module)

    course = commands.add_parser("course", help="the instructor's loop, wrapping nbgrader")
    course_commands = course.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, summary in (
        ("build", "create the nbgrader course folder with source notebooks from modules/"),
        ("release", "nbgrader generate_assignment (all modules by default); into the exchange when the course has one"),
        ("collect", "submissions into submitted/: from nbgrader's exchange, or an LMS's download (--zip)"),
        ("autograde", "nbgrader autograde the submissions in submitted/, each in the sandbox"),
        ("feedback", "nbgrader generate_feedback: an HTML page per submission, no hidden code"),
        ("report", "points per student and module from the gradebook"),
        ("similarity", "pairs of submissions of one module, ranked by how alike the students' own code is"),
        ("roster", "the students' names, emails and LMS ids from a CSV (nbgrader db student import)"),
        ("hub", "the configuration of a JupyterHub serving the course with nbgrader's exchange"),
        ("gradescope", "one module as a Gradescope autograder zip: Gradescope's machines grade with tinyflo's engine"),
    ):
        sub = course_commands.add_parser(action, help=summary)
        sub.add_argument(
            "--dir", default=COURSE_DIR, type=path_arg, metavar="PATH", help=f"course folder (default: ./{COURSE_DIR})"
        )
        if action in ("release", "autograde", "feedback"):
            sub.add_argument("module", nargs="?", help="one module (default: all)")
            sub.add_argument("--force", action="store_true", help="overwrite existing output")
        if action == "collect":
            sub.add_argument("module", nargs="?", help="one module (default: all; --zip needs one)")
            sub.add_argument("--zip", type=path_arg, metavar="FILE",
                             help="a Canvas or Moodle submissions download of MODULE, instead of the exchange")
            sub.add_argument("--worksheet", type=path_arg, metavar="CSV",
                             help="with a Moodle --zip: Moodle's grading worksheet of the assignment, so each "
                                  "file is matched by its sender's email, not by the name they show")
        if action == "autograde":
            _grading_options(sub)
            sub.add_argument("--jobs", type=_count, default=1, metavar="N",
                             help="grade N submissions at a time, each in its own sandbox (default 1)")
        if action == "report":
            sub.add_argument("--csv", type=path_arg, metavar="FILE", help="also write the table as CSV")
            sub.add_argument("--format", choices=LMS_FORMATS,
                             help="write --csv as that LMS's gradebook import: its id columns, a column per module")
            sub.add_argument("--ids-are-logins", action="store_true",
                             help="with --format: every student id here is the student's login in the LMS, "
                                  "so rows the roster gives no LMS identity are matched by it")
        if action == "roster":
            sub.add_argument("file", type=path_arg, metavar="FILE",
                             help="CSV with a header: id (as in submitted/), first_name, last_name, email, lms_user_id")
        if action == "hub":
            sub.add_argument("--env", type=path_arg, required=True, metavar="PATH",
                             help="the hub's Python environment: JupyterHub, JupyterLab, nbgrader and the student kit")
            sub.add_argument("--instructor", required=True, metavar="USER", help="the instructor's Unix user (the hub's admin)")
            sub.add_argument("--group", required=True, metavar="GROUP", help="the students' Unix group (who may log in)")
            sub.add_argument("--out", type=path_arg, default="hub", metavar="DIR",
                             help="folder the two files are written to, for root to install (default: ./hub)")
            sub.add_argument("--config-dir", type=path_arg, default="/etc/jupyterhub", metavar="DIR",
                             help="root's folder the hub's configuration is installed into (default: /etc/jupyterhub)")
            sub.add_argument("--state", type=path_arg, default="/var/lib/jupyterhub", metavar="DIR",
                             help="root's folder for the hub's database and cookie secret (default: /var/lib/jupyterhub)")
            sub.add_argument("--idle-minutes", type=_minutes, default=60, metavar="N",
                             help="stop a student's JupyterLab after N minutes without activity, with "
                                  "jupyterhub-idle-culler in the hub's environment (default 60; 0: never)")
            sub.add_argument("--memory", default="1G", metavar="SIZE",
                             help="the most memory each user's JupyterLab and kernels may hold, e.g. 1G or 512M "
                                  "(default 1G; 0: no limit); with --cpus, needs systemd and "
                                  "jupyterhub-systemdspawner in the hub's environment")
            sub.add_argument("--cpus", default="1", metavar="N",
                             help="the CPUs' worth of time each user's JupyterLab and kernels may use, e.g. 1 or "
                                  "0.5 (default 1; 0: no limit)")
        if action == "gradescope":
            sub.add_argument("module", help="module number or name: 1, 01, 01_tensor or tensor")
            sub.add_argument("--out", type=path_arg, metavar="FILE",
                             help="the zip to write (default: DIR/gradescope/MODULE.zip in the course folder)")
            _timeout_option(sub)
        if action == "similarity":
            sub.add_argument("module", help="module number or name: 1, 01, 01_tensor or tensor")
            sub.add_argument("--threshold", type=_share, metavar="F",
                             help="write a side-by-side page for each pair at least this alike, 0 to 1 (default: "
                                  f"the class's outliers, or {SIMILAR} with fewer than 10 pairs)")
            sub.add_argument("--out", type=path_arg, metavar="DIR",
                             help="folder for the pages (default: DIR/similarity/MODULE in the course folder)")
        _modules_option(sub)
    course.set_defaults(handler=_course)

    milestone = commands.add_parser("milestone", help="historical results reproduced: list, run NAME")
    milestone_commands = milestone.add_subparsers(dest="action", required=True, metavar="ACTION")
    milestone_commands.add_parser("list", help="milestones, the modules they need, recorded figures")
    run = milestone_commands.add_parser("run", help="run one milestone (in a student kit: on your completed modules)")
    run.add_argument("name", help="milestone number or name: 1, 01, perceptron or 01_perceptron")
    modes = run.add_mutually_exclusive_group()
    modes.add_argument("--quick", dest="mode", action="store_const", const="quick",
                       help="the reduced run CI checks (fewer epochs, lower but honest figures)")
    modes.add_argument("--full", dest="mode", action="store_const", const="full",
                       help="the full run (default, unless TINYFLO_MILESTONE_MODE says quick)")
    run.set_defaults(mode=None)
    run.add_argument("--device", help="cpu or cuda:N (default: cuda:0 when a GPU is there, else cpu)")
    places = run.add_mutually_exclusive_group()
    places.add_argument("--out", type=path_arg, metavar="DIR", help="folder for plots and results (default: "
                        "$TINYFLO_MILESTONE_OUT, else tinyflo-milestones/NAME in the current folder; NAME-quick "
                        "for --quick)")
    places.add_argument("--record", action="store_true", help="write the full run's results into the "
                        "checkout's milestones/results/NAME, the recorded figures `milestone list` shows")
    milestone.set_defaults(handler=_milestone)

    doctor = commands.add_parser("doctor", help="versions, GPU, MPI, NCCL, the grading sandbox, data, workspace; "
                                  "--gpu-proof: prove the GPU")
    doctor.add_argument("--gpu-proof", action="store_true",
                        help="on cuda:0, run the gpu tests, the GPU benchmarks against PyTorch and milestones 3-6 "
                        "(quick), each stage with a time budget, ten minutes in all; record everything in one "
                        "folder (proof.json, proof.md); exit 1 if a stage fails, 2 without a GPU (needs a checkout)")
    doctor.add_argument("--out", type=path_arg, metavar="DIR", help="the proof's folder (default: "
                        "benchmarks/results/gpu/<gpu-name>/ in the checkout)")
    doctor.add_argument("--smoke", action="store_true", help="the proof at toy sizes, a few tests, bundled data "
                        "only: checks the command in CI (e.g. on TINYFLO_FAKE_GPU=strict), proves no GPU")
    doctor.add_argument("--full", action="store_true", help="time all 2000 steps of milestone 6's GPT against "
                        "torch (beyond the ten minutes)")
    doctor.set_defaults(handler=_doctor)

    bench = commands.add_parser(
        "bench", help="run benchmarks/ into ./tinyflo-bench, or --record them (needs a checkout)",
        description="Run every benchmark: about 195 s on a 2-core CPU without PyTorch (its rows add to that); "
        "--device cuda:N runs the four GPU benchmarks. Results go to ./tinyflo-bench unless --out or --record "
        "says otherwise: the recorded results in benchmarks/results/ change only with --record.")
    bench.add_argument("--rounds", type=_rounds, default=11, metavar="N",
                       help="interleaved rounds per comparison (default 11)")
    bench.add_argument("--device", default="cpu", help="cpu (default: every benchmark) or cuda:N (the GPU "
                       "benchmarks, against PyTorch CUDA)")
    bench.add_argument("--smoke", action="store_true", help="toy sizes: checks that the benchmarks run")
    places = bench.add_mutually_exclusive_group()
    places.add_argument("--out", type=path_arg, metavar="DIR", help="folder for the results (default: ./tinyflo-bench)")
    places.add_argument("--record", action="store_true", help="write the recorded results, benchmarks/results/ "
                        "(refused without torch: the PyTorch rows would be missing)")
    _modules_option(bench)
    bench.set_defaults(handler=_bench)

    download = commands.add_parser(
        "download", help="fetch the data sets the milestones read: mnist, fashion-mnist, tinyshakespeare",
        description="Fetch each data set's original files into $TINYFLO_DATA/NAME (default ~/.cache/tinyflo/NAME), "
        "each checked against its SHA-256; files already there are checked, not fetched again.")
    download.add_argument("names", nargs="+", metavar="NAME", help="mnist, fashion-mnist or tinyshakespeare")
    download.set_defaults(handler=_download)

    book = commands.add_parser("book", help="the browsable book of modules and milestones (needs a checkout)")
    book_commands = book.add_subparsers(dest="action", required=True, metavar="ACTION")
    book_build = book_commands.add_parser(
        "build", help="build the book's HTML offline with Sphinx; prints the path of index.html"
    )
    book_build.add_argument("--out", type=path_arg, metavar="DIR",
                            help="folder for the HTML (default: book/_build/html in the checkout)")
    book.set_defaults(handler=_book)

    launcher = commands.add_parser(
        "launch",
        help="run a script on N ranks (mpiexec, or one process per GPU); one failing stops all",
        description="Start N ranks of SCRIPT. When one fails, the others get --grace seconds, "
        "then are stopped; the exit status is 0 only when every rank exited 0.",
    )
    launcher.add_argument("-n", "--nproc", type=_count, default=1, metavar="N",
                        help="how many ranks (per machine with --nnodes; default: 1)")
    launcher.add_argument("--backend", choices=BACKENDS,
                        help="mpi: mpiexec -n N python -m mpi4py SCRIPT; nccl: N processes with "
                        "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (default: mpi)")
    launcher.add_argument("--grace", type=_seconds, default=5.0, metavar="SECONDS",
                        help="after a rank fails, how long the others may run on (default: 5)")
    launcher.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                        help="stop the whole job after this long (default: no limit)")
    launcher.add_argument("--port", type=int, metavar="PORT",
                        help="MASTER_PORT for --backend nccl (default: a free port)")
    launcher.add_argument("--nnodes", type=_count, default=1, metavar="K",
                        help="nccl on K machines: run the launcher on each (default: 1)")
    launcher.add_argument("--node-rank", type=int, default=0, metavar="I",
                        help="this machine's index 0..K-1; its ranks are I*N .. I*N+N-1 (default: 0)")
    launcher.add_argument("--master-addr", default="127.0.0.1", metavar="HOST",
                        help="machine 0's address, for --nnodes > 1 (default: 127.0.0.1)")
    launcher.add_argument("script", nargs="?", help="the Python script every rank runs")
    launcher.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    launcher.set_defaults(handler=_launch)

    # The demo reads its own options (tinyflo demo --help lists them): building them here would import
    # the generated modules, or a student's, for every command.
    demo = commands.add_parser("demo", help="train an MLP on the bundled digits (options: tinyflo demo --help)",
                               add_help=False)
    demo.set_defaults(handler=_demo)
    return parser


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    from tinyflo.course.grader.grading import DEFAULT_TIMEOUT

    parser.add_argument("--timeout", type=_count, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time limit per cell (default {DEFAULT_TIMEOUT} s; a course cell may ask for more)")


def _grading_options(parser: argparse.ArgumentParser) -> None:
    _timeout_option(parser)
    parser.add_argument("--no-sandbox", dest="sandboxed", action="store_false",
                        help="grade without bubblewrap: the notebook's code runs unconfined and grades can be "
                             "faked (a self-check, never for credit)")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands `parser` takes, by name."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _each_parser(parser: argparse.ArgumentParser):
    """`parser` and every subcommand's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                yield from _each_parser(sub)


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs: it ends as Ctrl-C ends it, tidied up, in one line."""


def _stop_on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Terminated`; the handler it replaces (None off the main thread,
    where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise Terminated

    return signal.signal(signal.SIGTERM, stop)


def _quiet_output() -> None:
    """Send what is still buffered for standard output nowhere: it cannot be written, and Python
    would try again as it exits, with a traceback."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no file behind it (a test's StringIO): nothing to do
        pass


def _output_failed(command: str, error: OSError) -> int:
    """One line for a write that failed (the output on a full disk, as coreutils say it, or a
    file that cannot be written); exit status 1."""
    reason = error.strerror or str(error)
    said = f"{error.filename}: {reason}" if error.filename is not None else f"write error: {reason}"
    _quiet_output()
    try:
        print(f"{command}: error: {said}", file=sys.stderr)
    except OSError:
        pass
    return 1


def _run(command: str, args: argparse.Namespace) -> int:
    """The subcommand, after every TINYFLO_ variable is checked; a refusal or a stop in one line."""
    try:
        environment.check()  # before anything: a bad value is refused at once, whatever the command
        return args.handler(args)
    except (CourseError, LaunchError, environment.VariableError) as error:
        print(f"{command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        signal_name = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
        print(f"{command}: stopped ({signal_name}); nothing more was done", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tinyflo` with `argv` (default: the command line); returns the exit status."""
    from tinyflo.course.notebooks import without_iri_grammars

    without_iri_grammars()  # a second off every command that reads a notebook
    command = "tinyflo"
    previous = _stop_on_sigterm()
    try:
        try:
            parser = build_parser()
            for each in _each_parser(parser):  # the deepest one parsed sets it last
                each.set_defaults(parser_used=each)
            words = sys.argv[1:] if argv is None else list(argv)
            if words and words[0] in _subcommands(parser):  # named even if parsing stops (--help)
                command = f"tinyflo {words[0]}"
            args, extra = parser.parse_known_args(argv)
            command = f"tinyflo {args.command}"
            if args.command == "demo":
                args.argv = extra
            elif extra:  # said by the subcommand, so its --help is the one named
                args.parser_used.error(f"unrecognized arguments: {' '.join(extra)}")
            code = _run(command, args)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # here, where a failure can still be said in one line
        return code
    except BrokenPipeError:
        # The reader of a pipe stopped (`tinyflo milestone list | head -1`): as any command
        # in a pipe, end quietly; what is still buffered goes nowhere.
        _quiet_output()
        return 141  # 128 + SIGPIPE, what a shell reports for a command a pipe cut off
    except OSError as error:  # `tinyflo doctor > /dev/full`
        return _output_failed(command, error)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
