"""The `tinyflo` command as a user meets it: run in a fresh process, judged by what it prints, exits with and writes.

Bad input is one line on stderr (the argument, what was expected, what came) and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tinyflo
from tinyflo import cli, demo
from tinyflo.milestones import find_data

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def tinyflo_cli(*args: str, cwd: Path = ROOT, env: dict | None = None, hide: tuple[str, ...] = (),
                tmp_path: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m tinyflo.cli ARGS` in a fresh process, without any TINYFLO_ setting unless given.

    ``hide`` names modules that are not installed for this run: a folder on PYTHONPATH (under ``tmp_path``)
    holds a stand-in for each whose import fails, as ``import`` fails where the package is missing.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    environment.update(env or {})
    if hide:
        shims = tmp_path / "not-installed"
        shims.mkdir(exist_ok=True)
        for name in hide:
            message = f"No module named {name!r}"  # what Python says where the package is missing
            (shims / f"{name}.py").write_text(f"raise ModuleNotFoundError({message!r}, name={name!r})\n")
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shims), environment.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "tinyflo.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The single line a refused command printed on stderr (after checking it refused, in one line)."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def git_status(path: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


# ----- tinyflo bench: a scratch folder unless --record ------------------------------------------------


@pytest.mark.slow
def test_bench_smoke_writes_a_scratch_folder_and_leaves_the_recorded_results_alone(tmp_path):
    status, files = git_status(RESULTS), snapshot(RESULTS)
    done = tinyflo_cli("bench", "--smoke", "--rounds", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    scratch = tmp_path / "tinyflo-bench"
    assert f"results go to {scratch} (--record writes benchmarks/results/)" in done.stdout
    assert f"results in {scratch}" in done.stdout.splitlines()[-1]
    for name in ("mlp_step", "conv", "transformer"):
        assert (scratch / f"{name}.json").is_file() and (scratch / f"{name}.md").is_file()
    assert git_status(RESULTS) == status and snapshot(RESULTS) == files


def test_bench_record_without_torch_refuses_in_one_line(tmp_path):
    files = snapshot(RESULTS)
    done = tinyflo_cli("bench", "--record", hide=("torch",), tmp_path=tmp_path, cwd=tmp_path)
    line = one_line_error(done)
    assert line.startswith("benchmarks: --record needs torch for the PyTorch rows, and here torch is not "
                           "installed: pip install torch, or run without --record")
    assert snapshot(RESULTS) == files and not (tmp_path / "tinyflo-bench").exists()


def test_bench_record_is_for_full_measurements(tmp_path):
    line = one_line_error(tinyflo_cli("bench", "--record", "--smoke", cwd=tmp_path))
    assert line == "benchmarks: --smoke measures nothing worth keeping: it cannot go with --record"
    line = one_line_error(tinyflo_cli("bench", "--record", "--out", str(tmp_path), cwd=tmp_path))
    assert line == "tinyflo bench: error: argument --out: not allowed with argument --record (see tinyflo bench --help)"


# ----- a wrong or unavailable device --------------------------------------------------------------------

COMMANDS_WITH_A_DEVICE = [("demo", "--epochs", "1"), ("bench", "--smoke"), ("milestone", "run", "mlp", "--quick")]


@pytest.mark.parametrize("command", COMMANDS_WITH_A_DEVICE, ids=lambda c: c[0])
def test_a_misspelt_device_is_one_line(command, tmp_path):
    line = one_line_error(tinyflo_cli(*command, "--device", "gpu", cwd=tmp_path))
    assert line == f"tinyflo {command[0]}: error: --device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'gpu'"


@pytest.mark.parametrize("command", COMMANDS_WITH_A_DEVICE, ids=lambda c: c[0])
def test_a_gpu_without_cupy_is_one_line_naming_what_to_install(command, tmp_path):
    done = tinyflo_cli(*command, "--device", "cuda:0", hide=("cupy",), tmp_path=tmp_path, cwd=tmp_path)
    assert one_line_error(done) == (
        f'tinyflo {command[0]}: error: --device: cuda:0: CuPy is not installed; install it with pip install '
        '"tinyflo[gpu-cuda12]" (CUDA 12) or "tinyflo[gpu-cuda13]" (CUDA 13)')
    assert not (tmp_path / "tinyflo-bench").exists() and not (tmp_path / "tinyflo-milestones").exists()


def test_a_broken_cupy_is_not_called_missing(tmp_path):
    """CuPy installed but its CUDA libraries broken: the line says what CuPy said, not to install it."""
    shims = tmp_path / "broken"
    shims.mkdir()
    (shims / "cupy.py").write_text("raise ImportError('CuPy is not correctly installed (libcudart.so.13 missing)')\n")
    done = tinyflo_cli("demo", "--device", "cuda:0", cwd=tmp_path, env={"PYTHONPATH": str(shims)})
    assert one_line_error(done) == ("tinyflo demo: error: --device: cuda:0: CuPy fails to import (ImportError: CuPy is "
                                    "not correctly installed (libcudart.so.13 missing))")


def test_a_gpu_that_is_there_runs_and_one_that_is_not_is_one_line(tmp_path):
    stand_in = {"TINYFLO_FAKE_GPU": "strict"}  # CuPy's API on the CPU, with cuda:0 and cuda:1
    line = one_line_error(tinyflo_cli("demo", "--device", "cuda:2", env=stand_in, cwd=tmp_path))
    assert line == "tinyflo demo: error: --device: cuda:2: CuPy sees 2 GPUs: cuda:0, cuda:1"
    done = tinyflo_cli("demo", "--device", "cuda:0", "--epochs", "2", env=stand_in, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "device cuda:0" in done.stdout and re.search(r"^epoch 2/2 ", done.stdout, re.M)


# ----- milestones: progress, missing data, quick and full results -------------------------------------


def mlp_checkout(tmp_path: Path) -> Path:
    """A checkout holding milestone 3 alone, with no ../shared/data beside it."""
    checkout = tmp_path / "checkout"
    (checkout / "milestones" / "03_mlp").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    notebook = ROOT / "milestones" / "03_mlp" / "mlp.py"
    (checkout / "milestones" / "03_mlp" / "mlp.py").write_text(notebook.read_text())
    return checkout


@pytest.mark.slow
def test_mlp_milestone_shows_each_epoch_and_says_how_to_get_mnist(tmp_path):
    empty = tmp_path / "no-data"
    done = tinyflo_cli("milestone", "run", "mlp", "--quick", "--device", "cpu", cwd=mlp_checkout(tmp_path),
                       env={"TINYFLO_DATA": str(empty)})
    assert done.returncode == 0, done.stdout + done.stderr
    shown = re.findall(r"^epoch (\d+)/20  loss=\S+  val_loss=\S+  val_acc=\S+", done.stdout, re.M)
    assert shown == [str(e) for e in range(1, 21)], "the Trainer's line for every epoch of the digits MLP"
    # said once, when it happens (result.md keeps it under the table)
    (skipped,) = [line for line in done.stdout.splitlines() if line.startswith("skipped: MNIST")]
    assert skipped.startswith(f"skipped: MNIST (part 3): mnist (all of its files) not found in {empty / 'mnist'}")
    assert skipped.endswith("; get it with: tinyflo download mnist")


def test_a_milestone_that_skipped_everything_says_so_once_and_shows_no_empty_table(tmp_path):
    done = tinyflo_cli("milestone", "run", "transformer", "--quick", "--out", str(tmp_path / "t"), cwd=tmp_path,
                       env={"TINYFLO_MILESTONE_DATA": "bundled"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("skipped: Tiny Shakespeare") == 1, done.stdout
    assert "| figure |" not in done.stdout and "no figure reproduced: every part was skipped" in done.stdout
    assert "skipped: Tiny Shakespeare" in (tmp_path / "t" / "result.md").read_text()


def milestone_checkout(tmp_path: Path, slug: str, name: str) -> Path:
    """A checkout holding one milestone alone, with no ../shared/data beside it."""
    checkout = tmp_path / "checkout"
    (checkout / "milestones" / slug).mkdir(parents=True)
    (checkout / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (checkout / "milestones" / slug / f"{name}.py").write_text((ROOT / "milestones" / slug / f"{name}.py").read_text())
    return checkout


@pytest.mark.slow
def test_record_swaps_in_a_complete_run_whole_and_refuses_one_that_skipped_a_part(tmp_path):
    perceptron = milestone_checkout(tmp_path / "a", "01_perceptron", "perceptron")
    recorded = perceptron / "milestones" / "results" / "perceptron"
    recorded.mkdir(parents=True)
    (recorded / "old-plot.png").write_bytes(b"an earlier run's plot")
    done = tinyflo_cli("milestone", "run", "perceptron", "--record", "--device", "cpu", cwd=perceptron)
    assert done.returncode == 0 and f"recorded: {recorded}" in done.stdout, done.stdout + done.stderr
    assert '"mode": "full"' in (recorded / "result.json").read_text()
    assert not (recorded / "old-plot.png").exists(), "the folder is replaced whole: no plot of an earlier run stays"
    assert sorted(p.name for p in recorded.parent.iterdir()) == ["perceptron"], "no staging folder left behind"

    mlp = milestone_checkout(tmp_path / "b", "03_mlp", "mlp")
    recorded = mlp / "milestones" / "results" / "mlp"
    recorded.mkdir(parents=True)
    (recorded / "result.json").write_text('{"a": "complete earlier run"}')
    done = tinyflo_cli("milestone", "run", "mlp", "--record", "--device", "cpu", cwd=mlp,
                       env={"TINYFLO_DATA": str(tmp_path / "no-data")})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "tinyflo milestone run: not recorded: a part was skipped (MNIST (part 3): mnist (all of its files) not found")
    assert (recorded / "result.json").read_text() == '{"a": "complete earlier run"}', "the recorded run is unchanged"
    assert sorted(p.name for p in recorded.parent.iterdir()) == ["mlp"]


def test_data_is_found_only_where_every_file_of_the_set_is(tmp_path, monkeypatch):
    """A download cut short leaves part of a set: that folder does not count, and the next one is looked in."""
    from tinyflo import datasets

    monkeypatch.setenv("TINYFLO_DATA", str(tmp_path / "data"))
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    files = list(datasets.DOWNLOADS["mnist"][0])
    (folder / files[0]).write_bytes(b"")
    assert find_data("mnist", files[0]) != folder, "the half-filled folder is passed over (for ../shared/data, if any)"
    for name in files[1:]:
        (folder / name).write_bytes(b"")
    assert find_data("mnist", files[0]) == folder


def test_a_relative_data_folder_is_the_callers_not_the_notebooks(tmp_path):
    checkout = mlp_checkout(tmp_path)
    done = tinyflo_cli("milestone", "run", "mlp", "--quick", "--device", "cpu", cwd=checkout,
                       env={"TINYFLO_DATA": "no-data"})
    assert f"not found in {checkout / 'no-data' / 'mnist'}" in done.stdout, done.stdout


def test_bench_needs_two_rounds(tmp_path):
    line = one_line_error(tinyflo_cli("bench", "--smoke", "--rounds", "1", "--out", str(tmp_path), cwd=tmp_path))
    assert line == ("tinyflo bench: error: argument --rounds: expected a whole number >= 2 (quartiles need two rounds), "
                    "got '1' (see tinyflo bench --help)")


@pytest.mark.slow
def test_quick_and_full_runs_keep_separate_results(tmp_path):
    for mode in ("--quick", "--full"):
        done = tinyflo_cli("milestone", "run", "perceptron", mode, "--device", "cpu", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    quick = (tmp_path / "tinyflo-milestones" / "perceptron-quick" / "result.json").read_text()
    full = (tmp_path / "tinyflo-milestones" / "perceptron" / "result.json").read_text()
    assert '"mode": "quick"' in quick and '"mode": "full"' in full


# ----- tinyflo download ------------------------------------------------------------------------------


def test_download_refuses_an_unknown_name_in_one_line(tmp_path):
    line = one_line_error(tinyflo_cli("download", "mnst", cwd=tmp_path))
    assert line == "tinyflo download: error: NAME: expected mnist, fashion-mnist, tinyshakespeare; got 'mnst'"


def test_download_refuses_a_file_that_is_not_the_original(tmp_path):
    folder = tmp_path / "data" / "tinyshakespeare"
    folder.mkdir(parents=True)
    (folder / "input.txt").write_text("not Shakespeare\n")
    line = one_line_error(tinyflo_cli("download", "tinyshakespeare", env={"TINYFLO_DATA": str(tmp_path / "data")}))
    assert line.startswith(f"tinyflo download: error: tinyshakespeare: {folder / 'input.txt'}: SHA-256 is ")


def test_download_checks_the_files_already_there_and_fetches_nothing(tmp_path):
    original = find_data("tinyshakespeare", "input.txt")
    if original is None:
        pytest.skip("no Tiny Shakespeare here (tinyflo download tinyshakespeare, or set TINYFLO_DATA)")
    folder = tmp_path / "data" / "tinyshakespeare"
    folder.mkdir(parents=True)
    (folder / "input.txt").write_bytes((original / "input.txt").read_bytes())
    done = tinyflo_cli("download", "tinyshakespeare", env={"TINYFLO_DATA": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tinyshakespeare: every file is in {folder}, its SHA-256 checked\n"


# ----- --version, --help --------------------------------------------------------------------------------


def test_version_is_the_packages():
    done = tinyflo_cli("--version")
    assert done.returncode == 0 and done.stdout == f"tinyflo {tinyflo.__version__}\n"
    declared = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert tinyflo.__version__ == declared, "pyproject.toml and tinyflo.__version__ must agree"


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (command path, its parser) under ``parser``, the top level included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def shown_options(parser: argparse.ArgumentParser) -> list[str]:
    """What a parser's help must show: each option's long name and each positional argument's name."""
    return [max(a.option_strings, key=len) if a.option_strings else a.metavar or a.dest
            for a in parser._actions if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]


COMMANDS = list(commands(cli.build_parser()))


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[" ".join(path) or "tinyflo" for path, _ in COMMANDS])
def test_every_commands_help_shows_its_options(path, parser):
    done = tinyflo_cli(*path, "--help")
    assert done.returncode == 0, done.stderr
    expected = shown_options(demo.build_parser() if path == ("demo",) else parser)  # the demo reads its own
    missing = [option for option in expected if option not in done.stdout]
    assert not missing, f"`tinyflo {' '.join(path)} --help` does not show {missing}"


def test_bad_arguments_are_one_line_that_points_at_help(tmp_path):
    line = one_line_error(tinyflo_cli("bench", "--rounds", "0", cwd=tmp_path))
    assert line == ("tinyflo bench: error: argument --rounds: expected a whole number >= 1, got '0' "
                    "(see tinyflo bench --help)")
    assert one_line_error(tinyflo_cli("demo", "--epochs", "0", cwd=tmp_path)) == (
        "tinyflo demo: error: --epochs must be at least 1; got 0 (see tinyflo demo --help)")


def test_unknown_arguments_point_at_the_subcommands_own_help(tmp_path):
    line = one_line_error(tinyflo_cli("milestone", "run", "lenet", "--epochs", "3", cwd=tmp_path))
    assert line == ("tinyflo milestone run: error: unrecognized arguments: --epochs 3 "
                    "(see tinyflo milestone run --help)")
    line = one_line_error(tinyflo_cli("module", "test", "1", "--bogus", cwd=tmp_path))
    assert line.endswith("(see tinyflo module test --help)")


@pytest.mark.parametrize("command", [("milestone", "list"), ("module", "list"), ("--help",),
                                     ("module", "--help"), ("milestone", "run", "xor", "--quick"),
                                     ("launch", "-n", "2", "lines.py")])
def test_every_command_behaves_in_a_pipe_whose_reader_stops(command, tmp_path):
    """`tinyflo milestone list | head -1`: the reader closes the pipe at once; tinyflo ends
    quietly, as a command cut off by its pipe does (no BrokenPipeError), and so do the scripts
    it runs (a milestone's, every rank of a launch)."""
    (tmp_path / "lines.py").write_text("for i in range(5000):\n    print('line', i)\n")
    reader, writer = os.pipe()
    os.close(reader)  # nobody will read: the first write fails
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", *command], cwd=tmp_path, stdout=writer,
                          stderr=subprocess.PIPE, text=True, env=environment, timeout=120)
    os.close(writer)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode in (0, 141), done.returncode


@pytest.mark.parametrize("variable, value, expected", [
    ("TINYFLO_MILESTONE_MODE", "fast", "TINYFLO_MILESTONE_MODE must be 'quick' or 'full'; got 'fast'"),
    ("TINYFLO_MILESTONE_DATA", "bundle", "TINYFLO_MILESTONE_DATA must be 'bundled' (or unset); got 'bundle'"),
    ("TINYFLO_FAKE_GPU", "yes", "TINYFLO_FAKE_GPU must be 'strict' (or unset); got 'yes'"),
    ("TINYFLO_VERBOSITY", "loud", "TINYFLO_VERBOSITY must be one of"),
    ("TINYFLO_NUM_THREADS", "abc", "TINYFLO_NUM_THREADS must be a positive whole number of threads; got 'abc'"),
])
def test_an_unknown_value_of_any_variable_is_refused_in_one_line(variable, value, expected, tmp_path):
    for command in (("milestone", "run", "perceptron", "--out", str(tmp_path / "m")), ("demo", "--epochs", "1")):
        line = one_line_error(tinyflo_cli(*command, cwd=tmp_path, env={variable: value}))
        assert expected in line, line


def test_the_milestone_mode_variable_chooses_the_run_unless_an_option_does(tmp_path):
    done = tinyflo_cli("milestone", "run", "perceptron", "--out", str(tmp_path / "m"), cwd=tmp_path,
                       env={"TINYFLO_MILESTONE_MODE": "quick"}, timeout=600)
    assert done.returncode == 0 and "quick run on cpu" in done.stdout, done.stdout + done.stderr


def test_a_diverging_demo_says_so_in_one_line_with_advice_that_fits_it(tmp_path):
    done = tinyflo_cli("demo", "--lr", "1e6", "--epochs", "2", "--out", str(tmp_path / "d"), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert re.fullmatch(r"tinyflo demo: the run diverged at step \d+ \(epoch 1, batch \d+\): .* with --lr 1e\+06, "
                        r"although the gradients are clipped to norm 1.0; try a lower --lr \(the default is 0.01\)\n",
                        done.stderr), done.stderr
    one = tinyflo_cli("demo", "--epochs", "1", "--out", str(tmp_path / "d"), cwd=tmp_path)
    assert re.search(r"after 1 epoch in", one.stdout), one.stdout


def test_the_demo_in_a_student_kit_refuses_in_one_line_as_a_milestone_does(tmp_path, monkeypatch, capsys):
    from tinyflo import milestones

    monkeypatch.setattr(milestones, "student_kit", lambda: True)  # as in a kit's wheel (course/release inside)
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    with pytest.raises(SystemExit) as stopped:
        demo.main(["--epochs", "1", "--out", str(tmp_path / "d")])
    assert stopped.value.code == 2
    line = capsys.readouterr().err
    assert line.startswith("tinyflo demo: error: this tinyflo is a student kit: every graded part is yours to "
                           "write, so the demo runs on your completed modules; set TINYFLO_WORKSPACE") and \
        line.count("\n") == 1, line
    monkeypatch.setenv("TINYFLO_WORKSPACE", str(tmp_path / "workspace"))
    with pytest.raises(SystemExit):
        demo.main(["--epochs", "1", "--out", str(tmp_path / "d")])
    assert "TINYFLO_WORKSPACE names " in capsys.readouterr().err, "a workspace that is not there is said as such"
    (tmp_path / "workspace").mkdir()
    with pytest.raises(SystemExit):
        demo.main(["--epochs", "1", "--out", str(tmp_path / "d")])
    assert "the demo needs your own modules:" in capsys.readouterr().err


def test_the_authors_commands_in_a_student_kit_refuse_in_one_line(monkeypatch, capsys):
    from tinyflo import milestones

    monkeypatch.setattr(milestones, "student_kit", lambda: True)
    for check in ([], ["--check"]):
        assert cli.main(["export", *check]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tinyflo export: error: export writes a tinyflo checkout's modules/ into its package, "
                              "and this is a student kit") and err.count("\n") == 1, err
    for command in (["course", "build"], ["course", "release"]):
        assert cli.main(command) == 2
        assert "a course is built from a tinyflo checkout's modules/" in capsys.readouterr().err
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    assert cli._workspace().startswith("unset: in a student kit the milestones and the demo need it")


def test_ctrl_c_in_a_milestone_is_one_line_and_leaves_no_empty_folder(tmp_path):
    """Ctrl-C reaches the whole foreground process group: tinyflo and the milestone's script."""
    import signal

    out = tmp_path / "run"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    process = subprocess.Popen([sys.executable, "-m", "tinyflo.cli", "milestone", "run", "lenet", "--out", str(out)],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=environment)
    assert process.stdout.readline().startswith("milestone 04_lenet")  # the script is about to start
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert err == "tinyflo milestone: stopped (Ctrl-C); nothing more was done\n", err
    assert not out.exists()


def test_a_stop_that_python_wraps_in_another_error_is_still_a_quiet_stop(tmp_path):
    """A stop that lands in a ``__set_name__`` (matplotlib's, while the milestone imports it) reaches
    the script as a RuntimeError on Python 3.11: it is still a stop, with no traceback."""
    script = tmp_path / "script.py"
    script.write_text(
        "import os, signal, time\n"
        "class Stops:\n"
        "    def __set_name__(self, owner, name):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(30)\n"
        "class Owner:\n"
        "    field = Stops()\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", cli._QUIET, "tinyflo milestone", script.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")


@pytest.mark.parametrize("stop, code, said", [("SIGINT", 130, "Ctrl-C"), ("SIGTERM", 143, "SIGTERM")])
def test_a_stop_sent_to_tinyflo_alone_stops_the_milestone_it_runs(stop, code, said, tmp_path):
    """A supervisor or an IDE's stop button signals tinyflo's process alone (Ctrl-C signals the whole
    group): tinyflo passes the stop on to the milestone's process, waits for it to end, then says so."""
    import signal

    import psutil

    out = tmp_path / "run"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    process = subprocess.Popen([sys.executable, "-m", "tinyflo.cli", "milestone", "run", "lenet", "--quick", "--out",
                                str(out)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=environment)
    assert process.stdout.readline().startswith("milestone 04_lenet")  # its script runs
    (script,) = psutil.Process(process.pid).children()
    process.send_signal(getattr(signal, stop))  # to tinyflo's process alone
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (code, f"tinyflo milestone: stopped ({said}); nothing more was done\n")
    assert not script.is_running(), "the milestone's process ended with tinyflo"
    assert not out.exists(), "the run stopped before it saved anything, as the line says"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="a full disk is played by Linux's /dev/full")
@pytest.mark.parametrize("command, said_by", [(("--help",), "tinyflo"), (("milestone", "list"), "tinyflo milestone"),
                                              (("milestone", "run", "perceptron", "--quick"), "tinyflo milestone")])
def test_output_into_a_full_disk_is_one_line_and_exit_status_1(command, said_by, tmp_path):
    """`tinyflo doctor > /dev/full`: what is written at exit, and what a milestone's own process writes, too."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tinyflo.cli", *command], cwd=tmp_path, stdout=full,
                              stderr=subprocess.PIPE, text=True, env=environment, timeout=120)
    assert (done.returncode, done.stderr) == (1, f"{said_by}: error: write error: No space left on device\n")
    assert not list(tmp_path.iterdir()), "no folder left for results never written"


def test_ctrl_c_in_a_benchmark_is_one_line(tmp_path):
    import signal

    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    process = subprocess.Popen([sys.executable, "-m", "tinyflo.cli", "bench", "--smoke", "--out", str(tmp_path / "b")],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=environment)
    while not process.stdout.readline().startswith("=== bench_mlp_step"):
        pass  # the first benchmark has started
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.endswith("tinyflo bench: stopped (Ctrl-C); nothing more was done\n"), err


def test_the_readmes_train_save_load_predict_example_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Train, save, load, predict", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = code.rstrip().splitlines()[-1].removeprefix("# ")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected, "the README's comment shows what the example prints"
    assert (tmp_path / "digits.safetensors").is_file()


def test_doctor_names_tinyflo_matplotlib_and_the_sandbox_and_how_to_install_what_is_missing(tmp_path):
    done = tinyflo_cli("doctor", cwd=tmp_path, hide=("nbgrader", "cupy"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in done.stdout.splitlines())
    assert rows["tinyflo"] == tinyflo.__version__
    assert rows["matplotlib"][0].isdigit()
    assert rows["bubblewrap"].startswith(("works (", "bubblewrap is not installed", "bubblewrap cannot"))
    assert rows["nbgrader"] == "not installed: pip install 'tinyflo[course]'"
    assert rows["cupy"].startswith("not installed: pip install 'tinyflo[gpu-cuda12]'")


def test_doctor_says_what_the_stand_in_data_and_workspace_are(tmp_path):
    done = tinyflo_cli("doctor", cwd=tmp_path, env={"TINYFLO_FAKE_GPU": "strict", "TINYFLO_WORKSPACE": str(tmp_path / "ws"),
                                                    "TINYFLO_DATA": str(tmp_path / "data")})
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in done.stdout.splitlines())
    assert rows["gpu"].startswith("the strict stand-in (TINYFLO_FAKE_GPU=strict)")
    assert rows["workspace"] == f"{tmp_path / 'ws'} does not exist yet (tinyflo module start 01 makes it)"
    assert rows["data"].startswith(f"{tmp_path / 'data'} (TINYFLO_DATA); found: ")
    assert {"jupyterlab", "psutil", "torch"} <= set(rows) and "nbclient" not in rows
    help_text = tinyflo_cli("milestone", "run", "--help", cwd=tmp_path).stdout
    assert "tinyflo-milestones/NAME" in help_text, "a hyphenated name is never broken across lines"


def test_a_workspace_that_cannot_be_made_is_one_line(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    line = one_line_error(tinyflo_cli("module", "start", "1", "--workspace", str(blocked / "ws"), cwd=tmp_path))
    assert line == f"tinyflo module: error: --workspace: cannot create the folder {blocked / 'ws'}: Not a directory"
    line = one_line_error(tinyflo_cli("module", "test", "1", cwd=tmp_path, env={"TINYFLO_WORKSPACE": str(blocked)}))
    assert line == f"tinyflo module: error: TINYFLO_WORKSPACE must be a folder; got '{blocked}' (a file, not a folder)"
    line = one_line_error(tinyflo_cli("module", "list", "--workspace", str(blocked), cwd=tmp_path))
    assert line == f"tinyflo module: error: the workspace {blocked} is a file, not a folder"
    line = one_line_error(tinyflo_cli("module", "start", "13", "--workspace", str(tmp_path / "ws"), cwd=tmp_path))
    assert line.startswith("tinyflo module: error: no module '13'") and not (tmp_path / "ws").exists()


def test_numbers_and_folders_that_cannot_be_used_are_one_line_each(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    cases = [
        (("demo", "--lr", "inf"), {}, "--lr must be a positive finite number; got inf"),
        (("demo", "--seed", "-1"), {}, "--seed must be a whole number >= 0; got -1"),
        (("course", "build", "--dir", str(blocked / "c")), {}, f"--dir: cannot create the folder {blocked / 'c'}"),
        (("bench", "--smoke", "--out", str(blocked / "b")), {}, f"--out: cannot create the folder {blocked / 'b'}"),
        (("book", "build", "--out", str(blocked / "k")), {}, f"--out: cannot create the folder {blocked / 'k'}"),
        (("module", "test", "1", "--workspace", str(tmp_path / "ws")), {"TINYFLO_CACHE": str(blocked)},
         f"TINYFLO_CACHE must be a folder; got '{blocked}' (a file, not a folder)"),
        (("download", "mnist"), {"TINYFLO_DATA": str(blocked / "d")},
         f"TINYFLO_DATA: cannot create the folder {blocked / 'd' / 'mnist'}"),
        (("launch", "--backend", "mpi", "--nnodes", "2", str(blocked)), {},
         "--nnodes: for --backend mpi list the machines in a host file instead"),
    ]
    for command, env, expected in cases:
        if command[:2] == ("module", "test"):
            assert tinyflo_cli("module", "start", "1", "--workspace", str(tmp_path / "ws"), cwd=tmp_path).returncode == 0
        line = one_line_error(tinyflo_cli(*command, cwd=tmp_path, env=env))
        assert expected in line, (command, line)


@pytest.mark.parametrize("command", [("demo", "--out"), ("milestone", "run", "perceptron", "--out"),
                                     ("module", "start", "1", "--workspace"), ("course", "build", "--dir"),
                                     ("bench", "--smoke", "--out"), ("book", "build", "--out")])
def test_an_empty_path_is_refused_not_taken_for_the_current_folder(command, tmp_path):
    line = one_line_error(tinyflo_cli(*command, "", cwd=tmp_path))
    assert f"argument {command[-1]}: expected a path; got an empty string" in line, line
    assert not list(tmp_path.iterdir()), "nothing written"


def test_every_hint_repeats_the_workspace_the_student_gave(tmp_path):
    flag = ["--workspace", str(tmp_path / "my work")]
    assert tinyflo_cli("module", "start", "1", *flag, cwd=tmp_path).returncode == 0
    again = tinyflo_cli("module", "start", "1", *flag, cwd=tmp_path)
    assert f"tinyflo module reset 01_tensor --workspace '{tmp_path / 'my work'}'" in again.stdout, again.stdout
    line = one_line_error(tinyflo_cli("module", "test", "2", *flag, cwd=tmp_path))
    assert line.endswith(f"run `tinyflo module start 02_autograd --workspace '{tmp_path / 'my work'}'`"), line
    listed = tinyflo_cli("module", "list", "--workspace", str(tmp_path / "none"), cwd=tmp_path)
    assert "(not made yet: `tinyflo module start 01 --workspace " in listed.stdout and listed.returncode == 0


def test_demo_monitor_shows_resources_in_each_epoch_line_and_writes_the_report(tmp_path):
    done = tinyflo_cli("demo", "--epochs", "2", "--batch-size", "8", "--monitor", "--out", str(tmp_path / "run"),
                       cwd=tmp_path)  # batches of 8: epochs long enough for the CPU clocks' 10 ms ticks
    assert done.returncode == 0, done.stderr
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2 and all(re.search(r"\]  cpu \d+% \(this process \d+%\)  ram [\d.]+/[\d.]+ GB$", line)
                                    for line in epochs), done.stdout
    report = (tmp_path / "run" / "report.html").read_text()
    assert "<th title='sys_cpu_pct'>machine (CPU %)</th>" in report and "<th title='proc_ram_gb'>" in report
    assert (tmp_path / "run" / "training.log").read_text().count("  cpu ") == 2


def test_demo_dashboard_serves_while_training_and_ends_with_the_run_without_a_terminal(tmp_path):
    done = tinyflo_cli("demo", "--epochs", "1", "--dashboard", "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/$", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^the dashboard at http://127\.0\.0\.1:\d+/ closes with the run: no terminal to keep it "
                     r"open \(run tinyflo demo --dashboard in a terminal", done.stdout, re.MULTILINE), done.stdout


def test_the_commands_output_folders_are_ignored_by_git():
    folders = ["tinyflo-demo/loss.png", "tinyflo-bench/conv.json", "tinyflo-milestones/mlp/result.json",
               "runs/Nov25_10-00-00_host/events.out.tfevents.1"]
    done = subprocess.run(["git", "check-ignore", *folders], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == folders


def test_an_output_folder_that_cannot_be_made_or_a_bad_device_variable_is_one_line(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    line = one_line_error(tinyflo_cli("demo", "--out", str(blocked / "x"), cwd=tmp_path))
    assert line == f"tinyflo demo: error: --out: cannot create the folder {blocked / 'x'}: Not a directory"
    line = one_line_error(tinyflo_cli("milestone", "run", "perceptron", "--quick", "--out", str(blocked / "x"),
                                      cwd=tmp_path))
    assert line.endswith(f"--out: cannot create the folder {blocked / 'x'}: Not a directory")
    line = one_line_error(tinyflo_cli("milestone", "run", "perceptron", "--quick", cwd=tmp_path,
                                      env={"TINYFLO_MILESTONE_DEVICE": "gpu"}))
    assert line.endswith("TINYFLO_MILESTONE_DEVICE must be 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'gpu'")


def test_bench_record_moves_results_in_only_when_every_benchmark_ran(tmp_path, monkeypatch):
    """A recording that fails part-way leaves benchmarks/results/ as it was; one that lacks a reference refuses."""
    from types import SimpleNamespace

    from benchmarks import common, run_all

    results = tmp_path / "results"
    results.mkdir()
    (results / "kept.md").write_text("an earlier recording")
    monkeypatch.setattr(common, "RESULTS_DIR", results)
    monkeypatch.setattr(common, "wait_for_quiet", lambda: 0.0)
    monkeypatch.setattr(run_all, "missing_references", lambda: [])

    def writes(name: str) -> SimpleNamespace:
        def main(rounds, out):
            path = Path(out) / f"{name}.md"
            path.write_text(f"{name}, {rounds} rounds")
            return [path]
        return SimpleNamespace(__name__=f"benchmarks.{name}", main=main)

    def fails(rounds, out):
        raise RuntimeError("the third benchmark broke")

    monkeypatch.setattr(run_all, "BENCHMARKS", [writes("first"), writes("kept"), SimpleNamespace(__name__="x", main=fails)])
    with pytest.raises(RuntimeError, match="third benchmark broke"):
        run_all.main(2, out=str(results))
    assert snapshot(results) == snapshot_of({"kept.md": "an earlier recording"}, tmp_path), "nothing moved in"
    monkeypatch.setattr(run_all, "BENCHMARKS", [writes("first"), writes("kept")])
    run_all.main(2, out=str(results))
    assert {p.name: p.read_text() for p in results.iterdir()} == {"first.md": "first, 2 rounds", "kept.md": "kept, 2 rounds"}
    monkeypatch.setattr(run_all, "missing_references", lambda: ["valgrind is missing: apt-get install valgrind"])
    with pytest.raises(SystemExit, match=r"--record needs every reference row, and here valgrind is missing"):
        run_all.main(2, out=str(results))


def snapshot_of(files: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """:func:`snapshot` of a folder holding just ``files``."""
    folder = tmp_path / "expected"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return snapshot(folder)


def test_in_a_kit_a_module_waits_for_the_earlier_ones_to_be_completed(tmp_path, monkeypatch, capsys):
    """A kit holds no reference: module 02's tests run on the student's 01, so 02 says so at once."""
    from tinyflo import milestones

    monkeypatch.setattr(milestones, "student_kit", lambda: True)
    workspace = ["--workspace", str(tmp_path / "ws")]
    assert cli.main(["module", "start", "2", *workspace]) == 0
    assert "note: 02_autograd runs on your code of every earlier module; before testing it, complete 01_tensor " \
           f"(`tinyflo module complete 01_tensor --workspace {tmp_path / 'ws'}`)" in capsys.readouterr().out
    assert cli.main(["module", "test", "2", *workspace]) == 2
    assert capsys.readouterr().err == (
        "tinyflo module: error: 02_autograd runs on your code of every earlier module, and 01_tensor is not "
        f"completed in this workspace; first run `tinyflo module complete 01_tensor --workspace {tmp_path / 'ws'}`\n")


def test_the_dashboards_closing_prompt_takes_ctrl_d_quietly(tmp_path):
    import pty

    terminal, typed = pty.openpty()  # the demo waits at its prompt only when stdin is a terminal
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    process = subprocess.Popen([sys.executable, "-m", "tinyflo.cli", "demo", "--epochs", "1", "--dashboard",
                                "--out", str(tmp_path / "d")], stdin=typed, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=environment)
    os.close(typed)
    try:
        seen = ""
        while "until you press Enter" not in seen:
            seen += os.read(process.stdout.fileno(), 4096).decode()
        os.write(terminal, b"\x04")  # the terminal's end of input (Ctrl-C takes the same way out)
        _, err = process.communicate(timeout=60)
    finally:
        os.close(terminal)
        process.kill()
    assert process.returncode == 0 and err == "", err
