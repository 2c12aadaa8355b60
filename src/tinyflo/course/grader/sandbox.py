"""The grading sandbox: where a submission's code runs, and what it can reach from there.

Grading module N runs the notebook's code and its scenarios in a plain Python process
(tinyflo.course.grader.runner) inside bubblewrap (`bwrap`, Debian's `bubblewrap` package). That
process sees:

* the system (`/usr`, `/etc`) and the Python that runs the grader, read-only, with every
  `tinyflo` removed from its site-packages;
* a *grading tree*: a `tinyflo` package whose modules before N are working code (the
  reference, or the student's own completed modules) and whose modules N and later are
  hollow: every function body raises (see `hollow`);
* an empty working folder and an empty /tmp, both small tmpfs of its own;
* no network, no other process, no host folder it can write, no repository, no course
  folder, no home folder, no other submission.

It runs as an unprivileged uid (one per grading slot, when the grader is root), with limits
on memory, processes, file size and open files, and it gets its job on standard input and
sends results on one pipe; what it prints goes nowhere. Without bwrap it runs unsandboxed
only when asked (`--no-sandbox`): the same limits and pipe, not for credit.

Where a disposable container is the sandbox and bwrap cannot run inside it (a Gradescope
autograder, tinyflo.course.semester.gradescope), `sandboxed=CONTAINER` runs the runner without bwrap but
as the slot's unprivileged uid, in a working folder of its own, with the same limits, confined by
Landlock (files) and seccomp (no socket); the grader (root) first closes to that uid everything it
must not read, and after each run every process the uid left behind is killed (`kill_leftovers`)
and everything it left in /tmp removed (`remove_leftovers`).
"""

from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE_DIR = "package"  # inside a grading tree: the tinyflo package the runner imports
SANDBOX_ROOT = "/grading"  # where the grading tree appears inside the sandbox
WORKDIR = "/sandbox"  # the runner's working folder inside the sandbox (a tmpfs)
NO_SANDBOX_VARIABLE = "TINYFLO_NO_SANDBOX"  # set by `tinyflo course autograde --no-sandbox`
TIMEOUT_VARIABLE = "TINYFLO_GRADING_TIMEOUT"  # seconds per cell, for nbgrader's grading step
SLOT_VARIABLE = "TINYFLO_GRADING_SLOT"  # which grading slot (and uid) an nbgrader process uses
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
RESULTS_FD = 3  # the runner's results pipe
SLOT_UID_BASE = 1_990_000_000  # uids the grader (as root) runs slots as: unused by any account
CONTAINER = "container"  # `sandboxed=CONTAINER`: no bwrap; the container is the sandbox (module docstring)
# Passed through to the runner: locale, time zone, and the GPU's settings.
_KEPT_VARIABLES = ("CUDA_", "NVIDIA_", "CUPY_", "LANG", "LC_", "TZ")


class SandboxError(RuntimeError):
    """The sandbox cannot be set up; the message says what is missing."""


@dataclass(frozen=True)
class Limits:
    """What one grading run may use."""

    memory: int = 4 * 2**30  # bytes of address space
    processes: int = 64  # processes and threads
    file_size: int = 64 * 2**20  # bytes of any one file it writes
    tmp_size: int = 128 * 2**20  # bytes of /tmp and of its working folder, each
    open_files: int = 256
    cell_timeout: int = 60  # seconds per cell (a course cell may ask for more)
    notebook_timeout: int = 600  # seconds for the whole notebook
    # Bytes of results it may send, restarts included: five times the course's largest honest
    # run (tinyflo.course.grader.runner states every cap on what a run sends). The grader keeps what
    # arrives as Python values, several times the bytes, for each job grading at once.
    results: int = 32 * 2**20


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


def _ancestors_open(path: Path, roots: list[Path]) -> list[str]:
    """bwrap makes the folders above a mount with the host's modes; an unprivileged uid must
    be able to pass through them (a Python under /root, for one)."""
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent == Path("/") or _within(parent, roots):
            continue
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def filesystem_arguments(tree: Path, limits: Limits) -> list[str]:
    """bwrap's mount arguments: the system and Python read-only, less every tinyflo."""
    # No /proc: through /proc/self/mem a process can rewrite its own memory, the runner's too.
    args = ["--dev", "/dev"]
    args += ["--size", str(limits.tmp_size), "--perms", "01777", "--tmpfs", "/tmp"]
    args += ["--size", str(limits.tmp_size), "--perms", "01777", "--tmpfs", WORKDIR]
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
            args += _ancestors_open(prefix, roots)
            args += ["--ro-bind", str(prefix), str(prefix)]
            roots.append(prefix)
    # Every site-packages the bound trees hold, less tinyflo: an empty folder over each of
    # its folders and an empty file over each of its files (an editable install's path file
    # too). Where one is a link, a tmpfs over the whole folder and every other entry bound back.
    for folder in _package_dirs([*map(str, roots), "/usr"]):
        entries = sorted(folder.iterdir())
        hidden = [entry for entry in entries if _is_tinyflo(entry)]
        if not hidden:
            continue
        if any(entry.is_symlink() for entry in hidden):
            args += ["--tmpfs", str(folder)]
            for entry in entries:
                if entry not in hidden:
                    args += ["--ro-bind", str(entry), str(entry)]
            continue
        for entry in hidden:
            if entry.is_dir():
                args += ["--tmpfs", str(entry)]
            else:
                args += ["--ro-bind", "/dev/null", str(entry)]
    for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
        args += ["--dev-bind", device, device]
    args += ["--ro-bind", str(tree), SANDBOX_ROOT]
    return args


@cache
def bwrap_works() -> str | None:
    """None when bwrap can start a sandbox here; otherwise why not, for a person."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap is not installed: {INSTALL_HINT}"
    done = subprocess.run(
        [bwrap, *_namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "true"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot create a sandbox on this machine ({reason})"
    return None


def _namespaces() -> list[str]:
    """Every namespace bwrap can make; as root, no user namespace: the uid is dropped for real."""
    if os.geteuid() == 0:
        return [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
    return ["--unshare-all", "--unshare-user", "--disable-userns"]


# Runs first inside the sandbox (as `python -I -S -c`): the limits, the results pipe on fd 3,
# then, when the grader is root, the slot's own unprivileged uid (its working folders given to
# it first), no_new_privs and, in a container (`confine`), Landlock's rules and seccomp's; then
# the runner.
_SHIM = r"""
import ctypes, json, os, resource, struct, sys
limits, uid, fd, folders, confine = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
for name, value in zip(("AS", "NPROC", "FSIZE", "NOFILE", "CORE"), map(int, limits.split(","))):
    resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.set_inheritable(3, True)
if os.geteuid() == 0 and uid:
    for folder in folders.split(os.pathsep):
        os.chown(folder, uid, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid program elevates
if confine:
    # Landlock: files only beneath the folders given (none of /proc, /sys, /root, /home, the
    # grader's own), no TCP, no signal or abstract socket outside. Any step failing ends here.
    def call(*args):
        result = libc.syscall(*map(ctypes.c_long, args))
        if result < 0:
            os._exit(70)
        return result
    spec = json.loads(confine)
    abi = libc.syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1))
    if abi < 1:
        os._exit(70)
    every = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    attr = ctypes.create_string_buffer(struct.pack("QQQ", every, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0))
    ruleset = call(444, ctypes.addressof(attr), 8 if abi < 4 else 16 if abi < 6 else 24, 0)
    for rights, paths in ((1 | 4 | 8, spec["read"]), (2 | 4 | 8, spec["devices"]), (every, spec["write"])):
        for path in paths:
            try:
                parent = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, parent))
            call(445, ruleset, 1, ctypes.addressof(rule), 0)
            os.close(parent)
    call(446, ruleset, 0)
    os.close(ruleset)
    # seccomp: no socket at all. Landlock leaves UDP and unix sockets open (a service's, anywhere),
    # and TCP and abstract sockets before its fourth and sixth versions; io_uring, which makes
    # sockets without the call, and calls of the machine's other ABIs (x86's 32-bit one, x32) are
    # refused too. Where the numbers are unknown here, Landlock alone.
    arch, number = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}.get(os.uname().machine, (0, 0))
    if arch:
        program = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in (
            (0x20, 0, 0, 4), (0x15, 0, 5, arch),  # the machine's own ABI, else refused
            (0x20, 0, 0, 0), (0x35, 3, 0, 0x40000000),  # x32
            (0x15, 2, 0, number), (0x15, 1, 0, 425),  # socket, io_uring_setup
            (0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x50001))))  # allowed; EPERM
        fprog = ctypes.create_string_buffer(struct.pack("@HP", 8, ctypes.addressof(program)))
        if libc.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0):  # PR_SET_SECCOMP, a filter
            os._exit(70)
os.execv(sys.argv[6], sys.argv[6:])
"""


@cache
def landlock_abi() -> int:
    """The version of Landlock this kernel lets a process confine itself with (0: none)."""
    try:
        import ctypes

        abi = ctypes.CDLL(None, use_errno=True).syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def _confinement(tree: Path, workdir: str) -> str:
    """Landlock's folders for a container's run: read the system, Python and the tree; write its
    working folder and /tmp; use /dev's devices. Nothing else."""
    python = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    python.add(Path(sys.executable).resolve().parent.parent)
    read = ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
            *sorted(map(str, python)), str(tree)]
    return json.dumps({"read": read, "devices": ["/dev"], "write": ["/tmp", workdir]})


def runner_environment() -> dict[str, str]:
    """The runner's whole environment: nothing of the grader's but locale and GPU settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key.startswith(_KEPT_VARIABLES) and not key.startswith("TINYFLO")
    }
    env.update(
        HOME="/tmp",
        PATH=os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",  # the same set and dict orders in the reference's run and the student's
        MPLCONFIGDIR="/tmp/matplotlib",
        MPLBACKEND="Agg",
        # One thread each: graders run side by side, and threads count against the limit. Each
        # BLAS NumPy may be built on reads its own variable (OpenBLAS, MKL, BLIS, Apple's
        # Accelerate; OpenMP's serves the rest), numexpr its own, tinyflo's passes over memory
        # TINYFLO_NUM_THREADS (tinyflo.environment).
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        BLIS_NUM_THREADS="1",
        VECLIB_MAXIMUM_THREADS="1",
        NUMEXPR_NUM_THREADS="1",
        TINYFLO_NUM_THREADS="1",
    )
    return env


def slot_uid(slot: int) -> int:
    """The unprivileged uid a grader running as root runs grading slot `slot` as."""
    return SLOT_UID_BASE + slot


def runner_command(
    tree: Path, fd: int, limits: Limits, slot: int = 0, sandboxed: bool | str = True, workdir: str = ""
) -> tuple[list[str], dict[str, str], str]:
    """The command, environment and working folder that run tinyflo.course.grader.runner on `tree`.

    The runner reads its job on standard input and writes results on `fd` (fd 3 inside).
    `sandboxed`: True (bwrap), False (unconfined, `--no-sandbox`) or CONTAINER (see the module
    docstring), which runs it in `workdir`, a folder of the grader's made for this run.
    """
    rlimits = ",".join(
        str(v) for v in (limits.memory, limits.processes, limits.file_size, limits.open_files, 0)
    )
    python = sys.executable

    def launch(package: str, uid: int, folders: str, confine: str = "") -> list[str]:
        # The shim (limits, fd 3, uid, Landlock), then the runner on the grading tree's package.
        runner = f"{package}/tinyflo/course/grader/runner.py"
        return [python, "-I", "-S", "-c", _SHIM, rlimits, str(uid), str(fd), folders, confine, python, "-s",
                runner, package]  # fmt: skip

    if sandboxed == CONTAINER:
        if os.geteuid() != 0 or not workdir:
            raise SandboxError("a container's grader runs the code as an unprivileged uid: it must run as root")
        if not landlock_abi():
            raise SandboxError("this kernel has no Landlock: without bwrap, nothing would keep the code from /proc")
        env = runner_environment() | {"HOME": workdir}
        return launch(str(tree / PACKAGE_DIR), slot_uid(slot), workdir, _confinement(tree, workdir)), env, workdir
    if not sandboxed:
        return launch(str(tree / PACKAGE_DIR), 0, ""), runner_environment(), str(tree)
    problem = bwrap_works()
    if problem:
        raise SandboxError(problem)
    env = runner_environment()
    argv = [
        shutil.which("bwrap"),
        *_namespaces(),
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    argv += filesystem_arguments(tree, limits)
    uid = slot_uid(slot) if os.geteuid() == 0 else 0
    argv += ["--chdir", WORKDIR, "--", *launch(f"{SANDBOX_ROOT}/{PACKAGE_DIR}", uid, f"/tmp{os.pathsep}{WORKDIR}")]
    return argv, {}, "/"


# kill(-1) from a process whose effective uid is the slot's reaches every process of that uid. Its
# real and saved uid are another unused one: a signal needs the sender's real or effective uid to
# be the target's real or saved one, so none of those processes can stop or kill it first (Landlock
# scopes their signals only from its sixth version on).
_KILL_ALL = ("import os, sys; uid, own = map(int, sys.argv[1:]); os.setgroups([]); os.setgid(uid); "
             "os.setresuid(own, uid, own); os.kill(-1, 9)")


def _killer(slot: int) -> list[str]:
    """The command that kills every process of the slot's uid (`_KILL_ALL`)."""
    return [sys.executable, "-I", "-S", "-c", _KILL_ALL, str(slot_uid(slot)), str(SLOT_UID_BASE - 1 - slot)]


def kill_leftovers(slot: int) -> None:
    """Kill every process the slot's uid still runs (a run's code may have left some behind,
    in a session of their own): from a process that takes that uid, kill(-1) reaches them all."""
    if os.geteuid() == 0:
        subprocess.run(_killer(slot), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def remove_leftovers(slot: int, tmp: str = "/tmp") -> None:
    """Remove what the slot's uid left in /tmp, the one folder beyond its own that a container's run
    may write in: the next run (the student's, after the reference's) starts from an empty /tmp, as
    in bwrap. Called once its processes are killed, so nothing moves while it looks: whatever the uid
    owns at /tmp's top or in a folder there any user may write in, removed by `rm`, which neither
    follows links nor stops at a tree deeper than a recursive removal goes."""
    if os.geteuid() != 0:
        return
    uid, left, folders = slot_uid(slot), [], [tmp]
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # another user's, removed meanwhile
                continue
            if info.st_uid == uid:
                left.append(entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o002:
                folders.append(entry.path)
    for start in range(0, len(left), 1000):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", *left[start : start + 1000]],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
