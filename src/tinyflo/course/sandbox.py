"""The grading sandbox: a kernel that cannot reach a working copy of the module it is graded on.

Grading module N runs the notebook's kernel inside bubblewrap (`bwrap`, Debian's
`bubblewrap` package). The kernel sees:

* the system (`/usr`, `/etc`) and the Python that runs the grader, read-only, with every
  `tinyflo` removed from its site-packages;
* a *grading tree* on its PYTHONPATH: a `tinyflo` package whose modules before N are working
  code (the reference, or the student's own completed modules) and whose modules N and later
  are hollow: every function body raises (see `hollow`);
* the hidden checks of module N (`checks.json`, see tinyflo.course.checks);
* its working folder (read-write) and a private /tmp;
* no network, no repository, no course folder, no home folder.

`tinyflo module test` and `tinyflo course autograde` both start kernels through
`python -m tinyflo.course.sandbox`, which turns the kernel command into a bwrap command and
execs it. Without bwrap a kernel runs unsandboxed only when asked (`--no-sandbox`), with the
same grading tree on its path.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

PACKAGE_DIR = "package"  # inside a grading tree: the tinyflo package the kernel imports
CHECKS_NAME = "checks.json"  # inside a grading tree: the hidden checks of the graded module
SANDBOX_ROOT = "/grading"  # where the grading tree appears inside the sandbox
NO_SANDBOX_VARIABLE = "TINYFLO_NO_SANDBOX"  # set by `tinyflo course autograde --no-sandbox`
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
# Passed through to the kernel: numerical libraries' settings, and the GPU's.
_KEPT_VARIABLES = ("OPENBLAS_", "OMP_", "MKL_", "CUDA_", "NVIDIA_", "CUPY_", "LANG", "LC_", "TZ")


class SandboxError(RuntimeError):
    """The sandbox cannot be set up; the message says what is missing."""


# --- hollow modules ---------------------------------------------------------------------------


class _Hollow(ast.NodeTransformer):
    def __init__(self, keep: frozenset[tuple[str, int]], module: str):
        self.keep = keep
        self.module = module

    def visit_FunctionDef(self, node):
        if node.name in ("__init_subclass__", "__set_name__", "__class_getitem__"):
            return node  # run while classes are built, at import: given code only
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if (node.name, first) in self.keep:
            self.generic_visit(node)
            return node
        docstring = ast.get_docstring(node, clean=False)
        body: list[ast.stmt] = [ast.Expr(ast.Constant(docstring))] if docstring else []
        message = f"{self.module}.{node.name} is not available while this module is graded"
        body.append(
            ast.Raise(
                ast.Call(ast.Name("NotImplementedError", ast.Load()), [ast.Constant(message)], [])
            )
        )
        node.body = body
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def hollow(text: str, module: str, keep: Iterable[tuple[str, int]] = ()) -> str:
    """`text` (a module's source) with every function body replaced by a raise.

    Signatures, docstrings, classes, constants and imports stay, so the module imports and
    later modules can import its names; nothing in it works. Functions named in `keep` (name,
    line) — those the module itself calls while it is imported — keep their bodies.
    """
    tree = ast.parse(text)
    tree = _Hollow(frozenset(keep), module).visit(tree)
    return (
        f"# Hollow copy of {module} for grading: its functions raise NotImplementedError.\n"
        + ast.unparse(ast.fix_missing_locations(tree))
        + "\n"
    )


# --- the kernel's filesystem ------------------------------------------------------------------


def _is_tinyflo(entry: Path) -> bool:
    """A site-packages entry that is, or points at, a tinyflo install."""
    name = entry.name.lower()
    if "tinyflo" in name:
        return True
    if entry.suffix == ".pth" and entry.is_file():
        try:
            return "tinyflo" in entry.read_text(encoding="utf-8", errors="replace").lower()
        except OSError:
            return True
    return False


def _package_dirs(prefixes: Iterable[str]) -> list[Path]:
    """site-packages and dist-packages folders under the given prefixes."""
    found: set[Path] = set()
    for prefix in prefixes:
        for pattern in (
            "lib/python3*/site-packages",
            "lib/python3*/dist-packages",
            "lib/python3/dist-packages",
            "local/lib/python3*/site-packages",
            "local/lib/python3*/dist-packages",
        ):
            found.update(Path(p) for p in glob.glob(os.path.join(prefix, pattern)))
    return sorted(p for p in found if p.is_dir())


def _within(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def filesystem_arguments(tree: Path, workdir: Path, writable: list[Path]) -> list[str]:
    """bwrap's mount arguments: the system and Python read-only, less every tinyflo."""
    args = ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for name in ("usr", "etc", "opt/conda"):
        if Path("/", name).is_dir() and not Path("/", name).is_symlink():
            args += ["--ro-bind", f"/{name}", f"/{name}"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    roots = [Path("/usr"), Path("/etc")]
    for prefix in sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}):
        if not _within(prefix, roots):
            args += ["--ro-bind", str(prefix), str(prefix)]
            roots.append(prefix)
    # Every site-packages the bound trees hold, less tinyflo: a tmpfs over it, then each
    # other entry bound back. This also hides an editable install's path file.
    for folder in _package_dirs([*map(str, roots), "/usr"]):
        entries = sorted(folder.iterdir())
        kept = [entry for entry in entries if not _is_tinyflo(entry)]
        if len(kept) == len(entries):
            continue
        args += ["--tmpfs", str(folder)]
        for entry in kept:
            args += ["--ro-bind", str(entry), str(entry)]
    for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
        args += ["--dev-bind", device, device]
    args += ["--ro-bind", str(tree), SANDBOX_ROOT]
    for folder in [workdir, *writable]:
        args += ["--bind", str(folder), str(folder)]
    return args


def kernel_environment(tree_in_kernel: str, checks: bool) -> dict[str, str]:
    """The kernel's whole environment: nothing of the grader's but numerical settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key.startswith(_KEPT_VARIABLES) and not key.startswith("TINYFLO")
    }
    env.update(
        HOME="/tmp/home",
        PATH=os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        PYTHONPATH=f"{tree_in_kernel}/{PACKAGE_DIR}",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        MPLCONFIGDIR="/tmp/matplotlib",
        IPYTHONDIR="/tmp/ipython",
        JUPYTER_RUNTIME_DIR="/tmp/jupyter-runtime",
    )
    if checks:
        env["TINYFLO_HIDDEN_CHECKS"] = f"{tree_in_kernel}/{CHECKS_NAME}"
    return env


@cache
def bwrap_works() -> str | None:
    """None when bwrap can start a sandbox here; otherwise why not, for a person."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap is not installed: {INSTALL_HINT}"
    done = subprocess.run(
        [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "true"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot create a sandbox on this machine ({reason})"
    return None


def sandbox_command(
    tree: Path, workdir: Path, writable: list[Path], command: list[str], sandboxed: bool = True
) -> tuple[list[str], dict[str, str]]:
    """The command (and environment) that runs `command` in the grading sandbox.

    `workdir` becomes the kernel's working folder; it and the `writable` folders (the
    kernel's connection file and sockets) are the only places it can write outside /tmp.
    """
    checks = (tree / CHECKS_NAME).is_file()
    if not sandboxed:
        return command, kernel_environment(str(tree), checks) | {"HOME": str(writable[0])}
    problem = bwrap_works()
    if problem:
        raise SandboxError(problem)
    env = kernel_environment(SANDBOX_ROOT, checks)
    argv = [shutil.which("bwrap"), "--unshare-all", "--die-with-parent", "--clearenv"]
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    argv += filesystem_arguments(tree, workdir, writable)
    argv += ["--chdir", str(workdir), "--", *command]
    return argv, {}


def _socket_folder(connection: Path) -> Path | None:
    """Where an ipc kernel's sockets go (the connection file's `ip` is their path prefix)."""
    try:
        info = json.loads(connection.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if info.get("transport") != "ipc":
        return None
    return (Path.cwd() / info.get("ip", "kernel-ipc")).resolve().parent


def main(argv: list[str] | None = None) -> int:
    """Start a Jupyter kernel in the grading sandbox (a kernelspec's command)."""
    parser = argparse.ArgumentParser(prog="python -m tinyflo.course.sandbox")
    parser.add_argument("--tree", help="the grading tree (package/ and checks.json)")
    parser.add_argument(
        "--trees", help="a folder of grading trees, one per module; the module is the cwd's name"
    )
    parser.add_argument("--no-sandbox", action="store_true", help="run without bubblewrap")
    parser.add_argument("-f", dest="connection_file", required=True)
    args, kernel_args = parser.parse_known_args(argv)  # the rest goes to the kernel
    if os.environ.get(NO_SANDBOX_VARIABLE) == "1":
        args.no_sandbox = True
    workdir = Path.cwd()
    tree = Path(args.tree) if args.tree else Path(args.trees or ".") / workdir.name
    if not (tree / PACKAGE_DIR).is_dir():
        print(f"no grading tree for module {workdir.name!r} at {tree}", file=sys.stderr)
        return 2
    connection = Path(args.connection_file).resolve()
    sockets = _socket_folder(connection)
    if (
        sockets is None
        or sockets in (Path("/"), Path("/tmp"), Path.home())
        or sockets in workdir.parents
    ):
        print(
            "cannot start the grading sandbox: its kernel must talk over Unix sockets (transport "
            f"ipc) in a folder of their own; got {sockets or 'another transport'}",
            file=sys.stderr,
        )
        return 2
    # The one folder the kernel may write in besides its own: its sockets' (the connection
    # file is copied there; the folder a client put it in, often /tmp, stays out of reach).
    private = sockets / connection.name
    if private != connection:
        shutil.copyfile(connection, private)
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(private), *kernel_args]
    try:
        command, env = sandbox_command(tree, workdir, [sockets], kernel, not args.no_sandbox)
    except SandboxError as error:
        print(f"cannot start the grading sandbox: {error}", file=sys.stderr)
        return 2
    if env:
        os.environ.clear()
        os.environ.update(env)
    # The kernel talks over its sockets; what it prints at start goes to the grader's log.
    os.dup2(2, 1)
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
