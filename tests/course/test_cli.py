"""`tinyflo doctor`, `tinyflo demo`, and the instructor loop's mistakes."""

from __future__ import annotations

import sys
import types

from course_support import FIXTURE_MODULES, call_cli


def test_doctor_reports_versions_without_a_gpu_stack(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if CuPy were not installed
    code, out = call_cli("doctor")
    assert code == 0
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["python"].strip() == sys.version.split()[0]
    assert lines["cupy"].strip().startswith("not installed: pip install")
    assert lines["gpu"].strip() == "no (CuPy not installed)"
    for name in ("numpy", "mpi4py", "nbgrader", "jupytext", "mpi", "nccl"):
        assert name in lines


def test_demo_passes_its_arguments_on(monkeypatch):
    seen = []
    fake = types.ModuleType("tinyflo.demo")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "tinyflo.demo", fake)
    assert call_cli("demo", "--steps", "3")[0] == 0
    assert seen == [["--steps", "3"]]


def test_demo_missing_is_explained(monkeypatch):
    monkeypatch.setitem(sys.modules, "tinyflo.demo", None)
    code, out = call_cli("demo")
    assert code == 2 and "no demo yet" in out


def test_course_commands_need_a_built_course(tmp_path):
    common = ["--dir", str(tmp_path / "course"), "--modules", str(FIXTURE_MODULES)]
    code, out = call_cli("course", "release", *common)
    assert code == 2 and "run `tinyflo course build`" in out
    code, out = call_cli("course", "report", *common)
    assert code == 2 and "no gradebook yet" in out


def test_course_build_writes_config_and_sources(tmp_path):
    course = tmp_path / "course"
    code, out = call_cli("course", "build", "--dir", str(course), "--modules", str(FIXTURE_MODULES))
    assert code == 0, out
    config = (course / "nbgrader_config.py").read_text()
    assert f'c.CourseDirectory.root = "{course}"' in config
    assert "ScenarioGrade, IgnorePattern" in config and "Execute" not in config
    assert f'c.ScenarioGrade.modules_dir = "{FIXTURE_MODULES.resolve()}"' in config
    key = course / "grading" / "course.key"
    assert key.is_file() and oct(key.stat().st_mode & 0o777) == "0o600"
    assert (course / "source" / "00_demo" / "demo.ipynb").is_file()
    (course / "source" / "07_gone").mkdir()
    call_cli("course", "build", "--dir", str(course), "--modules", str(FIXTURE_MODULES))
    assert not (course / "source" / "07_gone").exists()
