"""``tinyflo doctor --gpu-proof``: prove that tinyflo works on this machine's GPU, and record it.

One command, inside ten minutes, runs on ``cuda:0``:

1. the ``gpu``-marked tests (``python -m pytest -m gpu``, a JUnit XML report kept);
2. the GPU benchmarks against PyTorch CUDA in the same process: the MLP training step,
   float16 autocast vs float32, LeNet-5, and milestone 6's GPT (200 of its 2000 steps;
   ``--full`` times all 2000);
3. milestones 3 to 6 in their quick form.

Each stage runs in its own process with a time budget; one that fails or runs past its budget
is stopped and recorded as failed, and the command exits non-zero. Everything measured — the
GPU, driver, CUDA, CuPy, NumPy and PyTorch versions, each stage's exit status, seconds, log
and output tail, each benchmark's targets — goes into one folder (default
``benchmarks/results/gpu/<gpu-name>/``) as ``proof.json`` and ``proof.md``. The folder is
built beside its final place and renamed into it at the end, so it always holds one whole
run. ``--smoke`` is the same run at toy sizes, for CI on the strict CuPy stand-in
(``TINYFLO_FAKE_GPU=strict``): it checks the command, not a GPU.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tinyflo
from tinyflo import environment, milestones

DEVICE = "cuda:0"
BUDGET_S = 600.0  # the whole proof, every stage included
TAIL_CHARS = 3000  # of each stage's output, kept in proof.json
# Benchmarks the proof runs: (module in benchmarks/, its result file on a GPU, budget in seconds, what it measures).
BENCHMARKS = [
    ("bench_captured", "captured_cuda", 90, "training steps eager and captured as a CUDA graph vs torch CUDA eager "
     "and torch.compile, with the device's share of the step; targets: MLP ≤ 1.1× both, LeNet-5 and GPT ≤ 1.3× "
     "eager and ≤ 1.0× captured"),
    ("bench_mlp_step", "mlp_step_cuda", 70, "MLP training step (batch 4096) vs torch CUDA; target ≤ 1.3×"),
    ("bench_amp", "amp", 40, "float16 autocast + GradScaler vs float32, step time and peak memory; target ≥ 2×"),
    ("bench_conv", "conv_cuda", 60, "LeNet-5 training step vs torch CUDA; target ≤ 1.5×"),
    ("bench_transformer", "transformer_cuda", 50, "milestone 6's GPT, 200 training steps vs torch CUDA; target ≤ 1.5×"),
]
FULL_TRANSFORMER_BUDGET_S = 400  # --full: all 2000 steps of tinyflo and of torch
MILESTONES = [("mlp", 40), ("lenet", 60), ("scale", 60), ("transformer", 40)]  # milestones 3-6, quick runs
TESTS_BUDGET_S = 170  # a fresh machine compiles (and caches) CuPy's kernels during the tests
SMOKE_TESTS = ["tests/test_tensor.py", "-k", "gpu_round_trip or device_helpers_on_a_gpu or matmul_matches_numpy"]


class ProofError(Exception):
    """The proof cannot start (no GPU, no checkout); the message says why, in one line."""


# ----- what the machine is ----------------------------------------------------------------------


def _cuda_version(code: int) -> str:
    """CUDA's version code (12080) as text (12.8)."""
    return f"{code // 1000}.{code % 1000 // 10}"


def _ask(what: Any) -> Any:
    """``what()``, or a line saying why it could not be answered (a fact missing is recorded, not fatal)."""
    try:
        return what()
    except Exception as error:
        return f"unknown ({type(error).__name__}: {error})"


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version, from nvidia-smi or /proc/driver/nvidia/version."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if smi.returncode == 0 and smi.stdout.strip():
            return smi.stdout.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        found = re.search(r"Kernel Module\s+([\d.]+)", Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        found = None
    return found.group(1) if found else "unknown (no nvidia-smi, no /proc/driver/nvidia/version)"


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"torch": "not installed", "torch_cuda": "torch not installed"}
    except Exception as error:
        return {"torch": f"fails to import ({type(error).__name__}: {error})", "torch_cuda": "unavailable"}
    available = _ask(torch.cuda.is_available)
    facts = {"torch": torch.__version__, "torch_built_for_cuda": torch.version.cuda,
             "torch_cuda_available": available}
    facts["torch_cuda"] = (_ask(lambda: torch.cuda.get_device_name(0)) if available is True
                           else "torch CUDA unavailable")
    return facts


def gpu_facts(index: int = 0) -> dict[str, Any]:
    """The GPU ``cuda:index`` and its software: name, memory, compute capability, driver, CUDA, CuPy, torch."""
    cupy = tinyflo.device(f"cuda:{index}").xp  # the one route to CuPy (or to the stand-in that plays it)
    properties = _ask(lambda: cupy.cuda.runtime.getDeviceProperties(index))
    if not isinstance(properties, dict):
        properties = {"name": properties}
    name = properties.get("name", "unknown")
    facts = {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "gpu_count": tinyflo.cuda_device_count(),
        "gpu_memory_gib": round(properties["totalGlobalMem"] / 2**30, 1) if "totalGlobalMem" in properties else "unknown",
        "compute_capability": (f"{properties['major']}.{properties['minor']}" if "major" in properties else "unknown"),
        "nvidia_driver": _nvidia_driver(),
        "cuda_driver": _ask(lambda: _cuda_version(cupy.cuda.runtime.driverGetVersion())),
        "cuda_runtime": _ask(lambda: _cuda_version(cupy.cuda.runtime.runtimeGetVersion())),
        "cupy": getattr(cupy, "__version__", "unknown"),
    }
    stand_in = environment.read("TINYFLO_FAKE_GPU")
    if stand_in:
        facts["stand_in"] = f"TINYFLO_FAKE_GPU={stand_in}: CuPy is played by tinyflo's stand-in, on NumPy"
    return facts | _torch_facts()


def machine_facts(checkout: Path | None) -> dict[str, Any]:
    """Everything a proof records about where it ran: the GPU's facts, the host, the versions, the commit."""
    import numpy

    facts = gpu_facts(0)
    facts |= {
        "numpy": numpy.__version__,
        "tinyflo": tinyflo.__version__,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(checkout) if checkout else "no checkout",
    }
    return facts


def _git_commit(checkout: Path) -> str:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return "unknown (not a git checkout, or no git)"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
    return commit + (" (with uncommitted changes)" if dirty else "")


def why_no_gpu() -> str | None:
    """Why tinyflo sees no GPU, in one line (module 01's reason: no CuPy, a broken one, no GPU); else None."""
    try:
        tinyflo.device(DEVICE)
    except tinyflo.DeviceError as error:
        return str(error).removeprefix("device: ")
    return None


def device_slug(name: str) -> str:
    """A folder name for a GPU: ``NVIDIA H100 80GB HBM3`` → ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


# ----- the stages --------------------------------------------------------------------------------


@dataclass
class Stage:
    """One part of the proof: a command run in its own process, with a time budget."""

    name: str
    kind: str  # "tests", "benchmark" or "milestone"
    what: str
    command: list[str]
    budget_s: float
    result: str = ""  # the file it writes, relative to the proof's folder

    @property
    def slug(self) -> str:
        """The stage's name as a file name (its log's)."""
        return device_slug(self.name)


@dataclass
class Outcome:
    """What one stage did: its status, exit code, seconds, log and what its result file says."""

    name: str
    kind: str
    what: str
    command: str
    budget_s: float
    status: str = "not run"  # passed, failed, timed out, interrupted, not run
    rc: int | None = None
    seconds: float = 0.0
    log: str = ""
    tail: str = ""
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """The stage ran to its end, within its time, and exited 0."""
        return self.status == "passed"


def plan(folder: Path, smoke: bool = False, full: bool = False) -> list[Stage]:
    """The stages of a proof that writes into ``folder``, each with its budget."""
    python = [sys.executable]
    # tests/course: the course tooling's tests, none on a GPU; they need nbformat, jupytext and nbgrader to load
    tests = python + ["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit2",
                      f"--junitxml={folder / 'gpu-tests.xml'}", "--ignore=tests/course"]
    tests += SMOKE_TESTS if smoke else ["tests"]
    stages = [Stage("gpu tests", "tests", "pytest -m gpu" + (" (a few, --smoke)" if smoke else ""), tests,
                    TESTS_BUDGET_S, "gpu-tests.xml")]
    for module, result, budget, what in BENCHMARKS:
        command = python + ["-m", f"benchmarks.{module}", "--device", DEVICE, "--out", str(folder / "benchmarks")]
        if smoke:
            command += ["--smoke", "--rounds", "3"]
        if module == "bench_transformer" and full:
            command.append("--full")
            budget, what = FULL_TRANSFORMER_BUDGET_S, what.replace("200 training steps", "all 2000 training steps")
        stages.append(Stage(f"bench {module.removeprefix('bench_')}", "benchmark", what, command, budget,
                            f"benchmarks/{result}.json"))
    for name, budget in MILESTONES:
        milestone = milestones.find_milestone(name)
        command = python + ["-m", "tinyflo.cli", "milestone", "run", name, "--quick", "--device", DEVICE,
                            "--out", str(folder / "milestones" / name)]
        stages.append(Stage(f"milestone {milestone.slug}", "milestone", f"{milestone.title}, quick run", command,
                            budget, f"milestones/{name}/result.json"))
    return stages


def _stop(process: subprocess.Popen) -> None:
    """Stop a stage and everything it started (its own process group): politely, then for good."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    """The last TAIL_CHARS characters of a log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-TAIL_CHARS:]


def _outcome(stage: Stage) -> Outcome:
    """A stage's outcome before it runs: "not run"."""
    return Outcome(stage.name, stage.kind, stage.what, subprocess.list2cmdline(stage.command), stage.budget_s,
                   log=f"logs/{stage.slug}.log")


def run_stage(stage: Stage, folder: Path, timeout_s: float, cwd: Path, env: dict[str, str]) -> Outcome:
    """Run one stage with a time limit; its output goes to ``folder/logs/<stage>.log``."""
    outcome = _outcome(stage)
    log = folder / outcome.log
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(stage.command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            outcome.rc = process.wait(timeout=timeout_s)
            outcome.status = "passed" if outcome.rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            _stop(process)
            outcome.rc, outcome.status = process.returncode, "timed out"
        except KeyboardInterrupt:
            _stop(process)
            outcome.rc, outcome.status = process.returncode, "interrupted"
    outcome.seconds = round(time.monotonic() - start, 1)
    if outcome.status == "timed out":
        with log.open("a") as sink:
            limit = "its budget" if timeout_s >= stage.budget_s else "the time the proof had left"
            sink.write(f"\n[tinyflo doctor --gpu-proof] stopped after {timeout_s:.0f} s: over {limit}\n")
    outcome.tail = _tail(log)
    outcome.summary = summarize(stage, folder)
    return outcome


def _test_report(path: Path) -> dict[str, Any]:
    """Counts from a JUnit XML report: tests, passed, failures, errors, skipped, and the failing tests' ids."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failing = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
               if case.find("failure") is not None or case.find("error") is not None]
    return counts | {"failing": failing[:50]}


def summarize(stage: Stage, folder: Path) -> dict[str, Any]:
    """The few numbers of a stage's result file worth showing in proof.md (empty when it wrote none)."""
    path = folder / stage.result
    if not stage.result or not path.is_file():
        return {}
    try:
        if stage.kind == "tests":
            return _test_report(path)
        record = json.loads(path.read_text())
    except (OSError, ValueError, ElementTree.ParseError) as error:
        return {"unreadable": f"{stage.result}: {type(error).__name__}: {error}"}
    if stage.kind == "benchmark":
        return {"targets": record.get("targets", []), "notes": record.get("notes", [])}
    return {"figures": record.get("figures", []), "skipped": record.get("numbers", {}).get("skipped", []),
            "seconds": record.get("seconds"), "device": record.get("device")}


# ----- the record --------------------------------------------------------------------------------


def _verdict(target: dict[str, Any]) -> str:
    """A benchmark target's verdict: met, MISSED, not judged (a smoke run) or not measured (no torch CUDA)."""
    if target["met"] is None:
        return "not measured" if target["value"] is None else "not judged"
    return "met" if target["met"] else "MISSED"


def _stage_line(outcome: Outcome) -> str:
    """What a stage found, in a few words: test counts, targets or figures."""
    s = outcome.summary
    if "tests" in s:
        return f"{s['passed']} passed, {s['failures']} failed, {s['errors']} errors, {s['skipped']} skipped"
    if "targets" in s:
        return "; ".join(f"{'—' if t['value'] is None else format(t['value'], '.3g')} "
                         f"({_verdict(t)})" for t in s["targets"]) or "no target"
    if "figures" in s:
        held = sum(f["passed"] for f in s["figures"])
        skipped = len(s["skipped"])
        return (f"{held} of {len(s['figures'])} figures hold"
                + (f"; {skipped} part{'s' if skipped != 1 else ''} skipped" if skipped else ""))
    return s.get("unreadable", "")


def _markdown(record: dict[str, Any]) -> str:
    """proof.md: the verdict, the stages, the targets, the machine, and each failure's output tail."""
    facts, outcomes = record["machine"], record["stages"]
    verdict = "PASSED" if record["passed"] else "FAILED"
    passed = sum(o["status"] == "passed" for o in outcomes)
    lines = [f"# GPU proof: {facts.get('gpu', 'unknown GPU')} — {verdict} ({passed} of {len(outcomes)} stages)", ""]
    if "stand_in" in facts:
        lines += [f"**Run on the strict CuPy stand-in** ({facts['stand_in']}): a check of the command, not a "
                  "proof of a GPU.", ""]
    lines += [f"`{record['command']}` — {record['mode']} run, {record['seconds']:.0f} s of its {record['budget_s']:.0f} s "
              f"budget, {facts.get('date', '')} on {facts.get('hostname', '?')}, tinyflo {facts.get('tinyflo', '?')} "
              f"at {facts.get('git_commit', '?')}.", ""]
    if record["failed"]:
        lines += ["Failed: " + ", ".join(record["failed"]) + " (logs and output tails below).", ""]
    lines += ["## Stages", "", "| stage | what | budget s | seconds | exit | result | found |", "|---|---|---:|---:|---:|---|---|"]
    for o in outcomes:
        result = o["status"] if o["status"] == "passed" else f"**{o['status'].upper()}**"
        lines.append(f"| {o['name']} | {o['what']} | {o['budget_s']:.0f} | {o['seconds']:.1f} | "
                     f"{'—' if o['rc'] is None else o['rc']} | {result} | {o['found']} |")
    if record["targets"]:
        lines += ["", "## Targets", "", "| stage | target | measured | limit | verdict |", "|---|---|---:|---:|---|"]
        for t in record["targets"]:
            verdict_t = _verdict(t).replace("MISSED", "**MISSED**")
            measured = "—" if t["value"] is None else f"{t['value']:.3g}"
            note = f" ({t['note']})" if t["note"] else ""
            lines.append(f"| {t['stage']} | {t['name']} | {measured} | {'≥' if t['at_least'] else '≤'} {t['limit']:g} "
                         f"| {verdict_t}{note} |")
        lines += ["", "A missed target is a measurement to act on, not a failed stage."]
    lines += ["", "## Machine", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in facts.items()]
    for o in outcomes:
        if o["status"] != "passed":
            lines += ["", f"## {o['name']}: {o['status']} (exit {o['rc']}, {o['seconds']:.1f} s of {o['budget_s']:.0f})",
                      "", f"`{o['command']}` — whole log: `{o['log']}`", "", "```", o["tail"].rstrip(), "```"]
    lines += ["", "## Files", "", "* `proof.json`: this page as data, with every stage's command and output tail",
              "* `gpu-tests.xml`: the tests' JUnit report", "* `benchmarks/`: each benchmark's result (`.json`, `.md`)",
              "* `milestones/<name>/`: each milestone's `result.json`, `result.md` and plots",
              "* `logs/`: each stage's whole output", ""]
    return "\n".join(lines)


def prove(stages: Sequence[Stage], out: Path, building: Path, facts: dict[str, Any], cwd: Path,
          env: dict[str, str], budget_s: float = BUDGET_S, mode: str = "standard",
          command: str = "tinyflo doctor --gpu-proof") -> int:
    """Run ``stages`` (they write into ``building``), record them, publish the folder as ``out``; 0 if all passed."""
    deadline = time.monotonic() + budget_s
    start = time.monotonic()
    outcomes: list[Outcome] = []
    interrupted = False
    for number, stage in enumerate(stages, 1):
        timeout = min(stage.budget_s, deadline - time.monotonic())
        print(f"[{number}/{len(stages)}] {stage.name} (budget {stage.budget_s:.0f} s) ...", end=" ", flush=True)
        if interrupted or timeout <= 0:
            outcome = _outcome(stage)
            outcome.tail = ("not started: the proof was interrupted" if interrupted else
                            f"not started: the stages before it spent the proof's {budget_s:.0f} s")
        else:
            outcome = run_stage(stage, building, timeout, cwd, env)
        outcomes.append(outcome)
        print(f"{outcome.status} ({outcome.seconds:.1f} s){': ' + _stage_line(outcome) if outcome.summary else ''}")
        if outcome.status != "passed" and outcome.tail and not interrupted:
            print("    " + "\n    ".join(outcome.tail.rstrip().splitlines()[-12:]), file=sys.stderr)
        interrupted = interrupted or outcome.status == "interrupted"

    targets = [{"stage": o.name} | t for o in outcomes for t in o.summary.get("targets", [])]
    record = {
        "command": command,
        "mode": mode,
        "passed": all(o.passed for o in outcomes),
        "failed": [o.name for o in outcomes if not o.passed],
        "budget_s": budget_s,
        "seconds": round(time.monotonic() - start, 1),
        "folder": str(out),
        "machine": facts,
        "stages": [asdict(o) | {"found": _stage_line(o)} for o in outcomes],
        "targets": targets,
    }
    milestones.write_atomically(building / "proof.json", json.dumps(record, indent=2, default=str) + "\n")
    milestones.write_atomically(building / "proof.md", _markdown(record))
    milestones.replace_folder(building, out)
    verdict = "passed" if record["passed"] else f"FAILED ({', '.join(record['failed'])})"
    print(f"GPU proof {verdict} in {record['seconds']:.0f} s; recorded in {out / 'proof.md'}")
    if any(t["met"] is False for t in targets):
        print("targets missed: " + "; ".join(f"{t['name']} = {t['value']:.3g}" for t in targets if t["met"] is False))
    if interrupted:
        return 130
    return 0 if record["passed"] else 1


def main(out: str | os.PathLike | None = None, smoke: bool = False, full: bool = False) -> int:
    """Run the whole proof on ``cuda:0`` and write its folder; the exit status (0: every stage passed).

    Raises :class:`ProofError` when there is no GPU, or no checkout to take the tests, benchmarks
    and milestones from.
    """
    reason = why_no_gpu()
    if reason is not None:
        raise ProofError(f"--gpu-proof needs a CUDA GPU, and tinyflo sees none: {reason}")
    checkout = milestones.checkout_dir()
    if checkout is None or not (checkout / "benchmarks").is_dir() or not (checkout / "tests").is_dir():
        raise ProofError("--gpu-proof runs the tests, benchmarks/ and milestones/ of a tinyflo checkout, and none "
                         "was found here or above; run it inside a clone of the repository")
    facts = machine_facts(checkout)
    target = Path(out) if out else checkout / "benchmarks" / "results" / "gpu" / device_slug(facts["gpu"])
    target = target.expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    building = target.with_name(f".{target.name}.partial")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    if smoke:
        env["TINYFLO_MILESTONE_DATA"] = "bundled"  # toy run: no MNIST or Tiny Shakespeare epochs on a stand-in
    budget = BUDGET_S + (FULL_TRANSFORMER_BUDGET_S - BENCHMARKS[-1][2] if full else 0)
    mode = "smoke" if smoke else "full" if full else "standard"
    command = "tinyflo doctor --gpu-proof" + (" --smoke" if smoke else "") + (" --full" if full else "")
    print(f"GPU proof on {DEVICE}: {facts['gpu']}; {mode} run, budget {budget:.0f} s; building {building}")
    return prove(plan(building, smoke, full), target, building, facts, checkout, env, budget, mode, command)
