"""Grading a class: wall time to autograde 40 submissions of a module, sandboxed and in parallel.

`tinyflo course autograde --jobs 1` and `--jobs 2` (the course's cells restored, each
submission's scenarios run in the bubblewrap sandbox and the reference's with that student's
own inputs, verdicts made outside) against plain sequential `nbgrader autograde` of the same
submissions in a course built the nbgrader way (hidden tests inline, the environment's own
python3 kernel, no sandbox). Each submission is the reference notebook, so every cell runs.
One round per variant (a round is minutes long); `--rounds N` repeats them in rotating order.

    python -m benchmarks.bench_grading [--rounds N] [--submissions 40] [--modules 01,08] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.source import discover_modules, resolve_module

MODULES_DIR = common.REPO_ROOT / "modules"
VARIANTS = ("nbgrader autograde (plain, sequential)", "tinyflo --jobs 1", "tinyflo --jobs 2")


def _run(command: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return took


def _plain_course(root: Path, module, timeout: int) -> Path:
    """A course the way nbgrader's documentation builds one: hidden tests inline, no sandbox."""
    course = root / "plain"
    (course / "source" / module.slug).mkdir(parents=True)
    write_notebook(instructor_notebook(module), course / "source" / module.slug / f"{module.name}.ipynb")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {json.dumps(str(course))}\n"
        "c.CourseDirectory.course_id = 'plain'\n"
        f"c.Execute.timeout = {timeout}\n"
    )
    _run([sys.executable, "-m", "nbgrader", "generate_assignment", module.slug], course)
    return course


def _tinyflo_course(root: Path, module) -> Path:
    course = root / "course"
    tinyflo = [sys.executable, "-m", "tinyflo.cli", "course"]
    where = ["--dir", str(course), "--modules", str(MODULES_DIR)]
    _run([*tinyflo, "build", *where], root)
    _run([*tinyflo, "release", module.slug, *where], root)
    return course


def _submit(course: Path, module, count: int) -> None:
    shutil.rmtree(course / "submitted", ignore_errors=True)
    shutil.rmtree(course / "autograded", ignore_errors=True)
    reference = instructor_notebook(module)
    for n in range(count):
        write_notebook(reference, course / "submitted" / f"s{n:02d}" / module.slug / f"{module.name}.ipynb")


def measure(module, submissions: int, rounds: int, timeout: int,
            graders: tuple[str, ...] = VARIANTS) -> dict[str, list[float]]:
    """Seconds to grade `submissions` copies of the reference, per variant and round."""
    samples: dict[str, list[float]] = {name: [] for name in graders}
    with tempfile.TemporaryDirectory(prefix="tinyflo-bench-grading-") as scratch:
        root = Path(scratch)
        plain, course = _plain_course(root, module, timeout), _tinyflo_course(root, module)
        runs = {
            VARIANTS[0]: (plain, [sys.executable, "-m", "nbgrader", "autograde", module.slug, "--force"]),
            VARIANTS[1]: (course, [sys.executable, "-m", "tinyflo.cli", "course", "autograde", module.slug,
                                   "--force", "--jobs", "1", "--timeout", str(timeout), "--dir", str(course),
                                   "--modules", str(MODULES_DIR)]),
            VARIANTS[2]: (course, [sys.executable, "-m", "tinyflo.cli", "course", "autograde", module.slug,
                                   "--force", "--jobs", "2", "--timeout", str(timeout), "--dir", str(course),
                                   "--modules", str(MODULES_DIR)]),
        }
        for round_ in range(rounds):
            turn = round_ % len(graders)
            order = graders[turn:] + graders[:turn]
            for name in order:
                folder, command = runs[name]
                _submit(folder, module, submissions)
                samples[name].append(_run(command, folder))
                print(f"  {module.slug} {name}: {samples[name][-1]:.1f} s", flush=True)
    return samples


def main(rounds: int = 1, submissions: int = 40, specs: str = "01,08", timeout: int = 60,
         graders: str = "", out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/grading.{json,md}``."""
    modules = discover_modules(MODULES_DIR)
    chosen = tuple(name for name in VARIANTS if not graders or name in graders.split(","))
    if not chosen:
        raise SystemExit(f"--graders: expected some of {', '.join(VARIANTS)}; got {graders!r}")
    rows, raw = [], {}
    for spec in specs.split(","):
        module = resolve_module(modules, spec)
        samples = measure(module, submissions, rounds, timeout, chosen)
        raw[module.slug] = samples
        base = statistics.median(samples[VARIANTS[0]]) if VARIANTS[0] in samples else None
        for name in chosen:
            median = statistics.median(samples[name])
            rows.append([module.slug, name, round(median, 1), round(median / submissions, 2),
                         round(median / base, 2) if base else "-"])
    table = common.Table(
        f"{submissions} submissions per module, wall time (median of {rounds} round(s))",
        ["module", "grader", "s", "s per submission", "x plain nbgrader"],
        rows,
    )
    return common.save_result(
        "grading",
        "Grading a class: sandboxed, parallel autograding against plain nbgrader",
        __doc__.split("\n\n")[0],
        [table],
        {},
        {"submissions": submissions, "rounds": rounds, "timeout_s": timeout, "samples_s": raw,
         "cores": os.cpu_count()},
        ["Each submission is the reference notebook: every cell runs, as in a class that did the work.",
         "Plain nbgrader runs the hidden tests inline and no sandbox; it is the baseline, not a "
         "safe way to grade (see README, For instructors).",
         "tinyflo runs two processes per submission: the student's scenarios and the reference's "
         "with that student's own inputs (every student's hidden inputs differ).",
         "Before the scenario engine (kernels in the sandbox; recorded 2026-11-25 at 0465842 on "
         "this machine), tinyflo --jobs 2 took 38.2 s for 01_tensor and 109 s for 08_training."],
        out=out,
    )


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--modules", dest="specs", default="01,08", help="comma-separated modules (default 01,08)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per cell")
    parser.add_argument("--graders", default="", help=f"comma-separated, of: {', '.join(VARIANTS)} (default all)")


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], options=_options, rounds=1, torch_rows=False)))
