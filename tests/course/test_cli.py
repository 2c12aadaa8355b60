"""`tinyflo doctor`, `tinyflo demo`, and the instructor loop's mistakes."""

from __future__ import annotations

import os
import shutil
import sys
import types

import pytest
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
    assert code == 2 and f"run `tinyflo course build --dir {tmp_path / 'course'}`" in out, "the hint keeps --dir"
    code, out = call_cli("course", "report", *common)
    assert code == 2 and "no gradebook yet" in out
    (tmp_path / "a-file").write_text("")
    code, out = call_cli("course", "report", "--dir", str(tmp_path / "a-file"), "--modules", str(FIXTURE_MODULES))
    assert code == 2 and f"--dir: {tmp_path / 'a-file'} is a file, not a course folder" in out
    code, out = call_cli("course", "feedback", *common)
    assert code == 2


def test_the_course_commands_work_as_printed_on_the_modules_the_course_was_built_from(tmp_path, monkeypatch):
    monkeypatch.delenv("TINYFLO_MODULES", raising=False)
    monkeypatch.chdir(tmp_path)  # in no checkout: the search finds tinyflo's own modules/, not the course's
    course = tmp_path / "fall"
    code, out = call_cli("course", "build", "--dir", str(course), "--modules", str(FIXTURE_MODULES))
    assert code == 0 and out.endswith(f"next: `tinyflo course release --dir {course}`\n"), out
    code, out = call_cli("course", "feedback", "--dir", str(course))  # as autograde's next: line has it
    assert code == 2 and f"modules: {FIXTURE_MODULES.resolve()}, which fall/ was built from" in out, out
    assert f"nothing of any module is autograded yet; run `tinyflo course autograde --dir {course}`" in out, out
    code, out = call_cli("course", "feedback", "--dir", str(course), "--modules", str(FIXTURE_MODULES))
    assert code == 2 and "modules:" not in out, "given, they are not said"
    code, out = call_cli("course", "collect", "--zip", "canvas.zip", "--dir", str(course))
    assert code == 2 and f"e.g. `tinyflo course collect 01 --zip canvas.zip --dir {course}`" in out, out


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
    # A configuration an older tinyflo wrote names nbgrader's steps where they no longer are: the
    # course's commands say to build again before nbgrader fails on it.
    written = (course / "nbgrader_config.py").read_text()
    (course / "nbgrader_config.py").write_text(written.replace("tinyflo.course.semester.nbgrader_steps",
                                                               "tinyflo.course.nbgrader_steps"))
    code, out = call_cli("course", "release", "--dir", str(course), "--modules", str(FIXTURE_MODULES))
    assert code == 2 and "was written by another tinyflo (nbgrader would not find its steps); run `tinyflo " \
        f"course build --dir {course}" in out, out


def test_autograde_leaves_out_each_submission_it_cannot_take_and_grades_the_rest(tmp_path):
    from tinyflo.course.grader.sandbox import bwrap_works
    from tinyflo.course.notebooks import instructor_notebook, write_notebook
    from tinyflo.course.source import discover_modules

    if bwrap_works():
        pytest.skip(bwrap_works())
    course, two = tmp_path / "course", tmp_path / "modules"
    shutil.copytree(FIXTURE_MODULES, two)
    second = (two / "00_demo" / "demo.py").read_text().replace("demo", "echo")
    (two / "01_echo").mkdir()
    (two / "01_echo" / "echo.py").write_text(second)  # a second module, which nobody hands in
    common = ["--dir", str(course), "--modules", str(two)]
    assert call_cli("course", "build", *common)[0] == 0
    code, out = call_cli("course", "release", "00_demo", *common)
    assert code == 0 and f"next: hand out the kit (`tinyflo course release --dir {course}` with no module builds " \
        "it); put each submission in" in out, out  # one module's release builds no kit
    submitted = course / "submitted"
    write_notebook(instructor_notebook(discover_modules(FIXTURE_MODULES)[0]), submitted / "alice" / "00_demo" / "demo.ipynb")
    (submitted / "bob" / "00_demo").mkdir(parents=True)
    (submitted / "bob" / "00_demo" / "demo (1).ipynb").write_text("{}")
    (submitted / "carol" / "00_demo").mkdir(parents=True)
    (submitted / "carol" / "00_demo" / "demo.ipynb").write_text("{not json")
    (submitted / "dave" / "99_foo").mkdir(parents=True)
    (submitted / "erin" / "00_demo").mkdir(parents=True)
    (submitted / "erin" / "00_demo" / "demo.ipynb").symlink_to(course / "grading" / "course.key")
    code, out = call_cli("course", "feedback", "00_demo", *common)
    assert code == 2 and f"nothing of 00_demo is autograded yet; run `tinyflo course autograde 00_demo --dir {course}`" in out
    code, out = call_cli("course", "autograde", *common, "--timeout", "30")
    assert code == 1, "graded what it could; exit 1 says not everything"
    assert "left out: student bob, 00_demo: no demo.ipynb; the folder holds 'demo (1).ipynb': rename the notebook" in out
    assert "left out: student carol, 00_demo: demo.ipynb is not a readable notebook (" in out
    assert "left out: student dave, 99_foo: no module '99_foo' in this course" in out
    assert "left out: student erin, 00_demo: demo.ipynb: not a regular file" in out, out
    assert "autograded 00_demo: alice 5/5\n" in out and "4 submissions left out (above)" in out
    assert f"next: `tinyflo course feedback --dir {course}` (a page per submission)" in out
    code, out = call_cli("course", "feedback", *common)  # as the next: line says
    assert code == 0 and "no feedback for 01_echo: nothing of it is autograded yet" in out, out
    page = course / "feedback" / "alice" / "00_demo" / "demo.html"
    assert "feedback for 00_demo: 1 page(s)" in out and "demo (Score: 5.0 / 5.0)" in page.read_text()
    code, out = call_cli("course", "report", *common)
    assert code == 0 and "alice" in out and not any(name in out for name in ("bob", "carol", "dave", "erin")), out
    # alice hands in again (the blank release, copied with its old modification time): without
    # --force, autograde grades the new one and feedback makes its page again
    for name in ("bob", "carol", "dave", "erin"):
        shutil.rmtree(submitted / name)
    shutil.copy2(course / "release" / "00_demo" / "demo.ipynb", submitted / "alice" / "00_demo" / "demo.ipynb")
    code, out = call_cli("course", "autograde", *common, "--timeout", "30")
    assert code == 0 and "alice, 00_demo: handed in again since it was graded: grading it again" in out, out
    assert "autograded 00_demo: alice 0/5\n" in out, out
    code, out = call_cli("course", "feedback", *common)
    assert code == 0 and "alice, 00_demo: graded again since its page was made: making it again" in out, out
    assert "demo (Score: 0.0 / 5.0)" in page.read_text()
    # its contents name each task (test_feedback_pages.py has the rest): nbgrader's page through the course's config
    assert ">demo_square (2 points): 0/2</a> &mdash; square every element (<a href=\"#comment-demo_square_code\">" \
        "comment</a>: No response.)" in page.read_text()
    code, out = call_cli("course", "feedback", *common)  # nothing new: what is kept is said once
    assert code == 0 and "00_demo: kept the page of alice (unchanged since; --force makes it again)" in out, out
    assert "Skipping existing" not in out, out


def test_feedbacks_next_line_says_how_the_pages_reach_the_students(tmp_path, demo_module):
    from tinyflo.course.semester.instructor import _returning

    assert _returning(tmp_path, [demo_module]).startswith(f"return each student's pages from {tmp_path}/feedback/")
    (tmp_path / "exchange").mkdir()
    (tmp_path / "course.toml").write_text(f'exchange = "{tmp_path / "exchange"}"\n')  # feedback released them there
    assert _returning(tmp_path, [demo_module]) == "students fetch their pages from their Assignments tab (Fetch Feedback)"


def test_what_nbgrader_made_is_kept_until_what_it_was_made_from_changes(tmp_path, capsys):
    from tinyflo.course.semester.instructor import _forget_outdated

    for student in ("alice", "bob"):
        (tmp_path / "submitted" / student / "00_demo").mkdir(parents=True)
        (tmp_path / "submitted" / student / "00_demo" / "demo.ipynb").write_text("{}")
    for student in ("alice", "bob"):  # graded after both handed in
        (tmp_path / "autograded" / student / "00_demo").mkdir(parents=True)
        (tmp_path / "autograded" / student / "00_demo" / "demo.ipynb").write_text("{}")
    chosen = {"00_demo": ["alice", "bob", "carol"]}  # carol's is not graded yet: nothing to say
    _forget_outdated(tmp_path, "submitted", "autograded", chosen, "grade", "handed in again")
    assert capsys.readouterr().out == "00_demo: kept the grades of alice, bob (unchanged since; --force makes them again)\n"
    later = tmp_path / "submitted" / "bob" / "00_demo" / "demo.ipynb"
    os.utime(later, (later.stat().st_mtime + 60,) * 2)
    _forget_outdated(tmp_path, "submitted", "autograded", chosen, "grade", "handed in again")
    assert capsys.readouterr().out == ("bob, 00_demo: handed in again\n"
                                       "00_demo: kept the grade of alice (unchanged since; --force makes it again)\n")
    assert not (tmp_path / "autograded" / "bob" / "00_demo").exists() and (tmp_path / "autograded" / "alice").is_dir()


def test_module_commands_find_the_workspace_they_stand_in(tmp_path, monkeypatch):
    """As git finds its repository: from the workspace or any folder in it, `module` works on that
    workspace, not on a new ./workspace inside it."""
    from tinyflo.course.kit import student

    monkeypatch.setenv("TINYFLO_MODULES", str(FIXTURE_MODULES))
    monkeypatch.delenv("TINYFLO_WORKSPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert call_cli("module", "start", "demo")[0] == 0
    workspace = tmp_path / "workspace"
    graded = []
    monkeypatch.setattr(student, "grade_module", lambda folder, *args: graded.append(folder) or types.SimpleNamespace(
        full_marks=True))  # the grading itself is tested in test_student_loop.py
    for inside in (workspace, workspace / "00_demo"):
        monkeypatch.chdir(inside)
        code, out = call_cli("module", "list")
        assert code == 0 and f"workspace: {student._shown(workspace)}\n" in out, out
        assert "00  demo  started, not tested yet" in out
        code, out = call_cli("module", "start", "demo")
        assert code == 0 and "already exists; keeping your work" in out
        assert call_cli("module", "test", "demo")[0] == 0 and graded[-1] == workspace
    assert sorted(p.name for p in workspace.iterdir()) == ["00_demo"], "no workspace/ made inside the workspace"
    assert sorted(p.name for p in (workspace / "00_demo").iterdir()) == ["demo.ipynb"]


def test_a_second_release_says_the_module_was_already_released_and_nothing_changed(tmp_path, monkeypatch, capsys):
    from tinyflo.course.semester import instructor
    from tinyflo.course.source import discover_modules

    modules = discover_modules(FIXTURE_MODULES)
    course = tmp_path / "course"
    (course / "kit").mkdir(parents=True)
    (course / "kit" / "tinyflo-0.1.0-py3-none-any.whl").write_bytes(b"the kit of the first release")
    release = course / "release" / "00_demo"
    said_by_nbgrader = {  # nbgrader 0.9's line (converters/base.py) for an assignment released before
        "first": "", "again": f"[GenerateAssignmentApp | INFO] Skipping existing assignment: {release}\n"}
    runs = []

    def nbgrader(course_dir, *args, say_skipped=True, env=None):
        runs.append((args, say_skipped))
        return said_by_nbgrader[when]

    monkeypatch.setattr(instructor, "nbgrader", nbgrader)
    monkeypatch.setattr(instructor, "_require_built", lambda course_dir, chosen: None)
    monkeypatch.setattr(instructor, "build_student_kit", lambda folder, modules, delivered: folder / "rebuilt.whl")
    when = "first"
    instructor.release(course, modules)
    assert capsys.readouterr().out == (f"released 00_demo: {release}\n"
                                       f"student kit: {course / 'kit' / 'rebuilt.whl'} (its README.md says how "
                                       "students install it)\n")
    when = "again"
    instructor.release(course, modules)
    assert capsys.readouterr().out == (
        f"00_demo was already released ({release}): left as it was, nothing changed (--force releases it again "
        f"from source/)\nstudent kit: {course / 'kit' / 'tinyflo-0.1.0-py3-none-any.whl'}, left as it was\n")
    instructor.release(course, modules, "00")
    assert "00_demo was already released" in capsys.readouterr().out
    assert [said for _, said in runs] == [False] * 3, "nbgrader's own skip line is not repeated"
    # Once a module closes, releasing again rebuilds the kit with its fast forms, and says so.
    monkeypatch.setattr(instructor, "_closed_fast_forms", lambda course_dir, modules: frozenset({"00_demo"}))
    instructor.release(course, modules)
    said = capsys.readouterr().out
    assert f"student kit: {course / 'kit' / 'rebuilt.whl'}" in said and (
        "the kit now carries the fast forms of 00_demo: students who reinstall it and run "
        "`tinyflo module complete` again get them") in said, said
    instructor.release(course, modules)
    assert "left as it was" in capsys.readouterr().out


def test_the_gradebooks_schema_version_is_nbgraders_own():
    """A new gradebook is stamped with what nbgrader itself would run `alembic heads` for (as its
    `get_alembic_version` does), read in this process instead."""
    import subprocess

    from nbgrader.dbutil import _temp_alembic_ini

    from tinyflo.course.semester.nbgrader_run import nbgrader_api

    alembic = os.path.join(os.path.dirname(sys.executable), "alembic")
    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        heads = subprocess.run([alembic, "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    assert nbgrader_api().get_alembic_version() == heads.split("\n")[0].split(" ")[0] != ""
