"""The `tinyflo` command: export, the student's and the instructor's loops, doctor, demo."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tinyflo.course.source import CourseError, find_modules_dir


def _export(args: argparse.Namespace) -> int:
    from tinyflo.course import export

    package_dir = Path(args.package_dir).resolve() if args.package_dir else None
    return export.run(find_modules_dir(args.modules), package_dir, check_only=args.check)


def _module(args: argparse.Namespace) -> int:
    from tinyflo.course import student

    return student.run(args)


def _course(args: argparse.Namespace) -> int:
    from tinyflo.course import instructor

    return instructor.run(args)


def _version(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except ImportError:
        return "not installed"
    except Exception as error:  # a broken install should be reported, not crash doctor
        return f"fails to import ({type(error).__name__}: {error})"
    return getattr(module, "__version__", "installed (version unknown)")


def _gpu() -> str:
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


def _doctor(args: argparse.Namespace) -> int:
    rows = [("python", sys.version.split()[0])]
    rows += [(name, _version(name)) for name in ("numpy", "cupy")]
    rows.append(("gpu", _gpu()))
    rows += [(name, _version(name)) for name in ("mpi4py", "nbgrader", "jupytext", "nbclient")]
    workspace = os.environ.get("TINYFLO_WORKSPACE")
    rows.append(
        (
            "workspace",
            f"{workspace} (completed modules shadow the package)" if workspace else "unset",
        )
    )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        demo = importlib.import_module("tinyflo.demo")
    except ModuleNotFoundError as error:
        if error.name != "tinyflo.demo":
            raise
        raise CourseError("this tinyflo has no demo yet (tinyflo/demo.py is missing)") from None
    return demo.main(args.argv) or 0


def _bench(args: argparse.Namespace) -> int:
    checkout = find_modules_dir(args.modules).parent
    if not (checkout / "benchmarks" / "run_all.py").is_file():
        raise CourseError(f"no benchmarks/ beside {checkout / 'modules'}: run inside a tinyflo checkout")
    command = [sys.executable, "-m", "benchmarks", "--rounds", str(args.rounds)]
    return subprocess.run(command, cwd=checkout).returncode


def _workspace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workspace",
        metavar="PATH",
        help="student workspace (default: $TINYFLO_WORKSPACE, else ./workspace)",
    )


def _modules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modules",
        metavar="PATH",
        help="course modules/ folder (default: $TINYFLO_MODULES, else the checkout's modules/)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every `tinyflo` subcommand."""
    parser = argparse.ArgumentParser(prog="tinyflo", description=__doc__)
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

    module = commands.add_parser("module", help="the student's loop: start, test, complete")
    module_commands = module.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, summary in (
        ("list", "list modules and your progress"),
        ("start", "write a module's student notebook into your workspace (never overwrites)"),
        ("test", "grade your notebook, hidden tests included"),
        ("reset", "back up your notebook and write a fresh one"),
        ("complete", "test, then export your code into the workspace package"),
    ):
        sub = module_commands.add_parser(action, help=summary)
        if action != "list":
            sub.add_argument("module", help="module number or name: 1, 01, 01_tensor or tensor")
        _workspace_option(sub)
        _modules_option(sub)
    module.set_defaults(handler=_module)

    course = commands.add_parser("course", help="the instructor's loop, wrapping nbgrader")
    course_commands = course.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, summary in (
        ("build", "create the nbgrader course folder with source notebooks from modules/"),
        ("release", "nbgrader generate_assignment (all modules by default)"),
        ("autograde", "nbgrader autograde the submissions in submitted/"),
        ("report", "points per student and module from the gradebook"),
    ):
        sub = course_commands.add_parser(action, help=summary)
        sub.add_argument(
            "--dir", default="course", metavar="PATH", help="course folder (default: ./course)"
        )
        if action in ("release", "autograde"):
            sub.add_argument("module", nargs="?", help="one module (default: all)")
            sub.add_argument("--force", action="store_true", help="overwrite existing output")
        if action == "report":
            sub.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
        _modules_option(sub)
    course.set_defaults(handler=_course)

    doctor = commands.add_parser("doctor", help="versions, backend, GPU")
    doctor.set_defaults(handler=_doctor)

    bench = commands.add_parser("bench", help="run benchmarks/ and record results (needs a checkout)")
    bench.add_argument("--rounds", type=int, default=11, help="interleaved rounds per comparison")
    _modules_option(bench)
    bench.set_defaults(handler=_bench)

    demo = commands.add_parser(
        "demo", help="run the tinyflo demo", description="Arguments after `demo` go to the demo."
    )
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tinyflo` with `argv` (default: the command line); returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "demo":
        args.argv = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.handler(args)
    except CourseError as error:
        print(f"tinyflo {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
