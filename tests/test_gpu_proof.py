"""`tinyflo doctor --gpu-proof`: its smoke run on the strict CuPy stand-in, a failing stage, and no GPU.

The smoke run is the whole command at toy sizes (a few gpu tests, each GPU benchmark, milestones 3-6
on bundled data only) on ``TINYFLO_FAKE_GPU=strict``; on a machine with a GPU it runs on the GPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tinyflo import gpu_proof, milestones

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["gpu tests", "bench captured", "bench mlp_step", "bench amp", "bench conv", "bench transformer", "milestone 03_mlp",
          "milestone 04_lenet", "milestone 05_scale", "milestone 06_transformer"]


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _doctor(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyflo.cli", "doctor", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _sees_a_gpu(env: dict[str, str]) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import tinyflo; print(tinyflo.cuda_is_available())"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return probe.stdout.strip().endswith("True")


def test_gpu_proof_smoke_run_records_every_stage_in_one_folder(tmp_path):
    env = _env(TINYFLO_FAKE_GPU="strict")
    assert _sees_a_gpu(env), "TINYFLO_FAKE_GPU=strict gives cuda:0 (the strict stand-in)"
    out = tmp_path / "proof"
    result = _doctor(["--gpu-proof", "--smoke", "--out", str(out)], env, timeout=500)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"recorded in {out / 'proof.md'}" in result.stdout

    record = json.loads((out / "proof.json").read_text())
    assert record["passed"] and record["failed"] == [] and record["mode"] == "smoke"
    assert [s["name"] for s in record["stages"]] == STAGES
    for stage in record["stages"]:
        assert stage["status"] == "passed" and stage["rc"] == 0, stage
        assert 0 < stage["seconds"] <= stage["budget_s"]
        assert (out / stage["log"]).is_file() and stage["tail"]
    machine = record["machine"]
    for fact in ("gpu", "nvidia_driver", "cuda_driver", "cuda_runtime", "cupy", "numpy", "torch", "torch_cuda",
                 "python", "hostname", "date", "git_commit"):
        assert fact in machine, fact
    tests = record["stages"][0]["summary"]
    assert tests["tests"] > 0 and tests["passed"] == tests["tests"] - tests["skipped"]
    assert {t["stage"] for t in record["targets"]} == set(STAGES[1:6])
    assert all(t["met"] is None for t in record["targets"]), "a smoke run judges no target"

    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"proof.json", "proof.md", "gpu-tests.xml", "benchmarks/captured_cuda.json",
            "benchmarks/mlp_step_cuda.json", "benchmarks/amp.json",
            "benchmarks/conv_cuda.json", "benchmarks/transformer_cuda.json", "milestones/mlp/result.json",
            "milestones/lenet/result.json", "milestones/scale/result.json",
            "milestones/transformer/result.json"} <= files
    for name in ("mlp", "lenet", "scale", "transformer"):
        result_json = json.loads((out / "milestones" / name / "result.json").read_text())
        assert result_json["device"] == "cuda:0" and result_json["mode"] == "quick"
    page = (out / "proof.md").read_text()
    assert "— PASSED (10 of 10 stages)" in page and "## Targets" in page and "## Machine" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proof"], "no half-built folder is left beside it"


def _stage(name: str, code: str, budget: float) -> gpu_proof.Stage:
    return gpu_proof.Stage(name, "benchmark", f"runs {code!r}", [sys.executable, "-c", code], budget)


def test_gpu_proof_failing_or_overrunning_stage_fails_the_proof_and_is_named(tmp_path, capsys):
    out, building = tmp_path / "proof", tmp_path / ".proof.partial"
    building.mkdir()
    stages = [_stage("fine", "print('all good')", 30),
              _stage("broken", "import sys; print('boom: the kernel failed'); sys.exit(3)", 30),
              _stage("endless", "import time; print('working', flush=True); time.sleep(60)", 60),
              _stage("late", "print('never started')", 30)]
    facts = {"gpu": "test GPU", "hostname": "here", "date": "today", "tinyflo": "0", "git_commit": "abc"}
    code = gpu_proof.prove(stages, out, building, facts, ROOT, dict(os.environ), budget_s=4.0)

    assert code == 1
    assert not building.exists() and (out / "proof.json").is_file()
    record = json.loads((out / "proof.json").read_text())
    assert [(s["name"], s["status"], s["rc"]) for s in record["stages"]] == [
        ("fine", "passed", 0), ("broken", "failed", 3), ("endless", "timed out", record["stages"][2]["rc"]),
        ("late", "not run", None)]
    assert record["failed"] == ["broken", "endless", "late"] and not record["passed"]
    endless = record["stages"][2]
    assert endless["seconds"] < 10 and "working" in endless["tail"] and "stopped after" in endless["tail"]
    page = (out / "proof.md").read_text()
    assert "— FAILED (1 of 4 stages)" in page
    assert "Failed: broken, endless, late" in page
    assert "## broken: failed (exit 3" in page and "boom: the kernel failed" in page
    assert "## endless: timed out" in page and "## late: not run" in page
    printed = capsys.readouterr()
    assert "FAILED (broken, endless, late)" in printed.out and "boom: the kernel failed" in printed.err


def test_gpu_proof_without_a_gpu_says_so_in_one_line_and_writes_nothing(tmp_path):
    env = _env(TINYFLO_FAKE_GPU=None, CUDA_VISIBLE_DEVICES="")
    result = _doctor(["--gpu-proof", "--out", str(tmp_path / "proof")], env, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("tinyflo doctor: error: --gpu-proof needs a CUDA GPU, and tinyflo sees none: ")
    assert not (tmp_path / "proof").exists()


def test_gpu_proof_options_need_the_flag():
    result = _doctor(["--smoke"], dict(os.environ), timeout=120)
    assert result.returncode == 2 and "go with --gpu-proof" in result.stderr


def test_gpu_proof_folder_is_named_after_the_gpu():
    assert gpu_proof.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpu_proof.device_slug("  ") == "gpu"


def test_milestone_without_matplotlib_skips_its_plots_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib.pyplot` now fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    run = milestones.Run("perceptron", tmp_path)
    assert run.pyplot() is None
    assert run.numbers["skipped"] == ["plots: matplotlib is not installed (pip install matplotlib)"]


def test_milestone_with_bundled_data_only_skips_a_data_set_it_would_look_for(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYFLO_MILESTONE_DATA", "bundled")
    run = milestones.Run("lenet", tmp_path)
    assert run.need_data("mnist", "train-images-idx3-ubyte.gz", "MNIST") is None
    assert "TINYFLO_MILESTONE_DATA=bundled" in run.numbers["skipped"][0]
