"""Milestones: historical results reproduced with tinyflo's public API (``tinyflo milestone ...``).

A milestone is a percent notebook ``milestones/NN_name/name.py`` in a checkout. It

* declares the course modules it needs with :func:`require` — with
  ``$TINYFLO_WORKSPACE`` set, those must be the student's own completed modules;
* reads its settings from the environment, which ``tinyflo milestone run`` sets:
  ``TINYFLO_MILESTONE_MODE`` (``quick``: the reduced run CI checks, or ``full``),
  ``TINYFLO_MILESTONE_DEVICE`` (default ``cuda:0`` when a GPU is there, else ``cpu``)
  and ``TINYFLO_MILESTONE_OUT`` (where plots and results go); with
  ``TINYFLO_MILESTONE_DATA=bundled`` it uses only the data sets inside tinyflo and skips
  the parts that need others (the smoke run of ``tinyflo doctor --gpu-proof``);
* prints each figure it reproduces beside the published one and saves its plots and
  a ``result.json`` / ``result.md`` through a :class:`Run`; without matplotlib
  (:meth:`Run.pyplot` gives None) it skips the plots and says so.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from tinyflo import environment

__all__ = [
    "MILESTONES", "Milestone", "MilestoneError", "Run", "bundled_only", "checkout_dir", "data_folders", "default_out",
    "figure_problems", "find_data", "find_milestone", "load_result", "milestone_device", "milestone_mode",
    "recorded_figures", "require", "save_png", "start", "student_kit", "write_atomically",
]

# course module -> the file `tinyflo module complete` writes into the workspace package
MODULE_FILES = {
    "01_tensor": "tensor", "02_autograd": "autograd", "03_layers": "layers", "04_losses": "losses",
    "05_data": "data", "06_optimizers": "optim", "07_schedulers": "schedulers",
    "08_training": "training", "09_checkpoints": "checkpoints", "10_convolutions": "conv",
    "11_mixed_precision": "amp", "12_distributed": "distributed",
}
MODES = ("quick", "full")


class MilestoneError(Exception):
    """A milestone cannot run as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Milestone:
    """One entry of the registry: where the notebook lives and what it reproduces."""

    number: int
    name: str
    title: str
    modules: tuple[str, ...]
    figure: str  # the published figure it reproduces, with its source

    @property
    def slug(self) -> str:
        """The folder name, e.g. ``01_perceptron``."""
        return f"{self.number:02d}_{self.name}"

    def path(self, checkout: Path) -> Path:
        """The milestone's percent file inside a checkout."""
        return checkout / "milestones" / self.slug / f"{self.name}.py"

    def results(self, checkout: Path) -> Path:
        """The folder of its recorded full run inside a checkout (``--record`` writes there)."""
        return checkout / "milestones" / "results" / self.name


_BASICS = ("01_tensor", "02_autograd", "03_layers", "04_losses")
MILESTONES = {
    m.name: m
    for m in (
        Milestone(1, "perceptron", "Perceptron (Rosenblatt, 1958)", ("01_tensor",),
                  "the perceptron rule reaches 0 training errors on separable data, after at most "
                  "(R/γ)² mistakes (Rosenblatt 1958; Novikoff 1962)"),
        Milestone(2, "xor", "The XOR crisis (Minsky & Papert, 1969)", _BASICS + ("06_optimizers",),
                  "no single-layer linear threshold unit exceeds 75% (3 of 4) on XOR "
                  "(Minsky & Papert 1969)"),
        Milestone(3, "mlp", "Backpropagation revives the MLP (Rumelhart, Hinton & Williams, 1986)",
                  _BASICS + ("05_data", "06_optimizers", "07_schedulers", "08_training"),
                  "a 2-2-1 net learns XOR (100%) by backpropagation (Rumelhart, Hinton & Williams "
                  "1986); an MLP reaches ≥ 97.5% on MNIST"),
        Milestone(4, "lenet", "LeNet-5 (LeCun, Bottou, Bengio & Haffner, 1998)",
                  _BASICS + ("05_data", "06_optimizers", "07_schedulers", "08_training", "10_convolutions"),
                  "LeNet-5 reaches 99.05% on MNIST (0.95% test error; LeCun et al. 1998); on "
                  "Fashion-MNIST a CNN beats the best classic classifier, 89.7% (SVC; Xiao, Rasul & "
                  "Vollgraf 2017)"),
        Milestone(5, "scale", "Training at scale: everything on at once",
                  tuple(MODULE_FILES),
                  "AdamW and warm-up + cosine train better than SGD at a constant rate (Kingma & Ba "
                  "2015; Loshchilov & Hutter 2017, 2019; Goyal et al. 2017); clipping bounds the gradient "
                  "norm (Pascanu et al. 2013); float16 with loss scaling stays within 1 point of float32 "
                  "(Micikevicius et al. 2018); a crashed run resumes bit for bit; 2 data-parallel ranks "
                  "match 1 device"),
        Milestone(6, "transformer", "A character-level Transformer (Vaswani et al., 2017)",
                  _BASICS + ("05_data", "06_optimizers", "07_schedulers", "08_training"),
                  "nanoGPT's baby GPT on a CPU (4 layers, 4 heads, 128 channels, context 64, 2000 "
                  "iterations) reaches a validation loss of 1.88 nats per character on Tiny Shakespeare "
                  "(Karpathy, nanoGPT README, 2023)"),
    )
}


def find_milestone(name: str) -> Milestone:
    """The milestone called ``name``: ``1``, ``01``, ``perceptron`` or ``01_perceptron``."""
    key = name.strip().lower()
    for milestone in MILESTONES.values():
        if key in (milestone.name, milestone.slug) or (key.isdigit() and int(key) == milestone.number):
            return milestone
    known = ", ".join(m.slug for m in MILESTONES.values())
    raise MilestoneError(f"no milestone called {name!r}; the milestones are {known}")


def checkout_dir() -> Path | None:
    """The tinyflo checkout (the folder with milestones/ beside pyproject.toml), or None when installed."""
    candidates = [Path.cwd().resolve(), *Path.cwd().resolve().parents, Path(__file__).resolve().parents[2]]
    for folder in candidates:
        if (folder / "pyproject.toml").is_file() and (folder / "milestones").is_dir():
            return folder
    return None


def milestone_mode() -> str:
    """``quick`` (the reduced run CI checks) or ``full``, from ``$TINYFLO_MILESTONE_MODE`` (default full)."""
    return _variable("TINYFLO_MILESTONE_MODE") or "full"


def _variable(name: str) -> Any:
    """``environment.read(name)``, its error a MilestoneError (what a milestone's caller catches)."""
    try:
        return environment.read(name)
    except environment.VariableError as error:
        raise MilestoneError(str(error)) from None


def milestone_device() -> tinyflo.Device:
    """``$TINYFLO_MILESTONE_DEVICE`` if set, else ``cuda:0`` when CuPy sees a GPU, else ``cpu``."""
    chosen = _variable("TINYFLO_MILESTONE_DEVICE") or ("cuda:0" if tinyflo.cuda_is_available() else "cpu")
    return tinyflo.device(chosen)


def _workspace_problem(workspace: Path, records: dict, slug: str) -> str | None:
    """Why the workspace's ``slug`` cannot be used (None when it can)."""
    code = workspace / "package" / "tinyflo" / "core" / f"{MODULE_FILES[slug]}.py"
    record = records.get(slug)
    if record is None and not (workspace / slug).is_dir():
        return (f"module {slug} is not started in the workspace {workspace}: run `tinyflo module start {slug}`, "
                f"fill it in, then `tinyflo module complete {slug}`")
    if record is None or not record.get("completed") or not code.is_file():
        return (f"module {slug} is not complete in the workspace {workspace}: "
                f"run `tinyflo module test {slug}`, then `tinyflo module complete {slug}`")
    if record.get("points") != record.get("max_points"):
        return (f"module {slug} fails its tests in the workspace {workspace} (last test: "
                f"{record.get('points')}/{record.get('max_points')} points): fix the notebook, "
                f"run `tinyflo module test {slug}`, then `tinyflo module complete {slug}`")
    return None


def student_kit() -> bool:
    """Whether this tinyflo is a student kit's (every graded part a stub to write)."""
    return (Path(__file__).resolve().parent / "course" / "release").is_dir()


def require(modules: list[str] | tuple[str, ...], what: str = "this milestone") -> str:
    """Check that the course modules `what` (a milestone, the demo) needs are there; say whose
    code runs.

    With ``$TINYFLO_WORKSPACE`` set, each module must be completed in that workspace
    (``tinyflo module complete``) and its tests must pass; otherwise a
    :class:`MilestoneError` names the module and the command to run. Without a
    workspace the reference package runs. Returns ``"workspace"`` or ``"reference"``.
    """
    unknown = [slug for slug in modules if slug not in MODULE_FILES]
    if unknown:
        raise MilestoneError(f"require: unknown module(s) {unknown}; expected names like {list(MODULE_FILES)[:2]}")
    workspace = _variable("TINYFLO_WORKSPACE")
    if not workspace and student_kit():
        raise MilestoneError(f"this tinyflo is a student kit: every graded part is yours to write, so {what} "
                             "runs on your completed modules; set TINYFLO_WORKSPACE to your "
                             "workspace (e.g. export TINYFLO_WORKSPACE=$PWD/workspace)")
    if not workspace:
        print(f"modules {', '.join(modules)}: the reference package (set TINYFLO_WORKSPACE to run on your own)")
        return "reference"
    root = workspace.resolve()
    if not root.is_dir():
        raise MilestoneError(f"TINYFLO_WORKSPACE names {root}, which is not a folder; start your workspace with "
                             f"`tinyflo module start {modules[0]}` (or set TINYFLO_WORKSPACE to the one you have)")
    progress = root / "progress.json"
    try:
        records = json.loads(progress.read_text()) if progress.is_file() else {}
    except json.JSONDecodeError:
        raise MilestoneError(f"{progress} is damaged (not JSON); delete it and run `tinyflo module test`") from None
    problems = [p for slug in modules if (p := _workspace_problem(root, records, slug))]
    if problems:
        raise MilestoneError(f"{what} needs your own modules:\n  " + "\n  ".join(problems))
    for slug in modules:
        name = f"tinyflo.core.{MODULE_FILES[slug]}"
        try:
            module = __import__(name, fromlist=["_"])
        except Exception as error:
            raise MilestoneError(f"module {slug}: your exported code fails to import ({type(error).__name__}: "
                                 f"{error}); fix it and run `tinyflo module complete {slug}`") from error
        if not Path(module.__file__).resolve().is_relative_to(root):
            raise MilestoneError(f"module {slug}: {name} was already imported from {module.__file__}, not from "
                                 f"the workspace {root}; set TINYFLO_WORKSPACE before starting Python")
    print(f"modules {', '.join(modules)}: your own code from the workspace {root}")
    return "workspace"


def default_out(name: str, mode: str = "full") -> Path:
    """Where a run without ``$TINYFLO_MILESTONE_OUT`` saves: ``tinyflo-milestones/<name>`` here for a full run,
    ``tinyflo-milestones/<name>-quick`` for a quick one, so neither overwrites the other."""
    return Path.cwd() / "tinyflo-milestones" / (name if mode == "full" else f"{name}-{mode}")


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class Run:
    """One run of a milestone: its settings, the figures it reproduced, its plots, and the saved result."""

    def __init__(self, name: str, out: str | os.PathLike | None = None) -> None:
        self.milestone = find_milestone(name)
        self.mode = milestone_mode()
        self.quick = self.mode == "quick"
        self.device = milestone_device()
        given = out or _variable("TINYFLO_MILESTONE_OUT")  # an argument wins over the variable
        self._out = Path(given).expanduser().resolve() if given else default_out(self.milestone.name, self.mode)
        self.rows: list[dict[str, Any]] = []
        self.numbers: dict[str, Any] = {}
        self.plots: list[str] = []
        self.code = "reference"
        self._start = time.perf_counter()
        print(f"milestone {self.milestone.slug}: {self.milestone.title} — {self.mode} run on {self.device}")

    @property
    def out(self) -> Path:
        """The folder the run's plots and results go to, made when first asked for (a run refused
        before it wrote anything leaves none)."""
        self._out.mkdir(parents=True, exist_ok=True)
        return self._out

    def require(self) -> str:
        """Check the modules this milestone needs (see :func:`require`)."""
        self.code = require(self.milestone.modules)
        return self.code

    def figure(self, name: str, reproduced: Any, published: Any, source: str, passed: bool,
               judged: str | None = None) -> bool:
        """Record one figure: what this run got, what was published, where, and whether it holds against
        ``judged``, the bar this run is held to (default: the published figure itself; a quick run's bar is
        lower than what was published, and the table says so)."""
        self.rows.append({"figure": name, "reproduced": reproduced, "published": published,
                          "source": source, "judged": "the published figure" if judged is None else judged,
                          "passed": bool(passed)})
        return bool(passed)

    def skip_part(self, reason: str) -> None:
        """Leave out one part of the milestone (its data is missing); the printed and saved results say so."""
        self.numbers.setdefault("skipped", []).append(reason)
        print(f"skipped: {reason}")

    def need_data(self, name: str, filename: str, part: str, needed: bool = False) -> Path | None:
        """The folder of data set ``name`` (see :func:`find_data`); None, with ``part`` skipped, when absent.

        With ``TINYFLO_MILESTONE_DATA=bundled`` only the data sets inside tinyflo count: ``part`` is skipped.
        ``needed``: nothing of the milestone runs without it, so a missing data set ends the run with
        exit status 1 and one line that says how to get it, and no result is saved (a recorded run
        stays as it was); not looked for (``bundled``), the run saves a result that says so and exits 0.
        """
        if bundled_only():
            self.skip_part(f"{part}: not looked for (TINYFLO_MILESTONE_DATA=bundled: only the data inside tinyflo)")
            if needed:
                self.finish()
                raise SystemExit(0)
            return None
        root = find_data(name, filename)
        if root is None:
            reason = (f"{part}: {name} (all of its files) not found in "
                      f"{', '.join(map(str, data_folders(name)))}; get it with: tinyflo download {name}")
            if needed:  # said once, as the run's error
                raise SystemExit(f"milestone {self.milestone.slug} could not run: {reason}")
            self.skip_part(reason)
        return root

    def pyplot(self) -> Any | None:
        """``matplotlib.pyplot`` to draw with, or None when matplotlib is not installed (the run skips its plots,
        and its result says so: the figures it reproduces need no plot)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            self.skip_part("plots: matplotlib is not installed (pip install matplotlib)")
            return None
        return plt

    def savefig(self, fig: Any, filename: str) -> Path:
        """Save a matplotlib figure into the output folder (showing it first in a notebook) and close it;
        what would be hard to read in the book is said first (see `figure_problems`)."""
        import matplotlib.pyplot as plt

        for problem in figure_problems(fig):
            print(f"figure {filename}: {problem}", file=sys.stderr)
        path = save_png(fig, self.out / filename)
        if _in_notebook():
            from IPython.display import display

            display(fig)
        plt.close(fig)
        self.plots.append(filename)
        print(f"plot saved: {path}")
        return path

    def table(self, skipped: bool = True) -> str:
        """The figures as a Markdown table: figure | reproduced | published (source), and what was skipped
        (``skipped=False`` leaves that out: a run prints each skip as it happens)."""
        if self.rows:
            lines = ["| figure | reproduced | published (source) | judged against | holds |", "|---|---|---|---|---|"]
            for row in self.rows:
                lines.append(f"| {row['figure']} | {_shown(row['reproduced'])} | {_shown(row['published'])} "
                             f"({row['source']}) | {row['judged']} | "
                             f"{'yes' if row['passed'] else 'NO'} |")
        else:
            lines = ["no figure reproduced: every part was skipped"]
        if skipped:
            lines += [f"\nskipped: {reason}" for reason in self.numbers.get("skipped", [])]
        return "\n".join(lines)

    def finish(self) -> dict[str, Any]:
        """Print the table, write result.json and result.md; exit with a message if a figure does not hold."""
        import numpy

        seconds = time.perf_counter() - self._start
        result = {
            "milestone": self.milestone.slug, "title": self.milestone.title, "mode": self.mode,
            "device": str(self.device), "code": self.code, "seconds": round(seconds, 2),
            "figures": self.rows, "numbers": self.numbers, "plots": self.plots,
            "versions": {"tinyflo": tinyflo.__version__, "numpy": numpy.__version__,
                         "python": platform.python_version(), **_cupy_version()},
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
            "date": time.strftime("%Y-%m-%d"),
        }
        write_atomically(self.out / "result.json", json.dumps(result, indent=2, default=_plain) + "\n")
        table = self.table()
        header = (f"# {self.milestone.title}\n\n{self.mode} run on {result['device']} ({result['machine']}), "
                  f"{seconds:.1f} s, tinyflo {tinyflo.__version__}, {result['date']}\n\n")
        write_atomically(self.out / "result.md", header + table + "\n")
        print(self.table(skipped=False))
        print(f"{seconds:.1f} s; result saved: {self.out / 'result.json'}")
        failed = [row["figure"] for row in self.rows if not row["passed"]]
        if failed:
            raise SystemExit(f"milestone {self.milestone.slug}: not reproduced: {', '.join(failed)}")
        return result


def replace_folder(building: Path, out: Path) -> None:
    """Put the finished folder ``building`` where ``out`` is: the previous ``out`` goes only once the new one
    is whole, so a crash leaves one of the two, never a mix."""
    previous = out.with_name(f".{out.name}.replaced")
    shutil.rmtree(previous, ignore_errors=True)
    if out.exists():
        out.rename(previous)
    building.rename(out)
    shutil.rmtree(previous, ignore_errors=True)


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to a file beside ``path``, flush it to disk, then rename it over ``path``:
    a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def bundled_only() -> bool:
    """Whether ``TINYFLO_MILESTONE_DATA=bundled`` asks for the data sets inside tinyflo alone."""
    return _variable("TINYFLO_MILESTONE_DATA") == "bundled"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    return shell is not None and shell.get_ipython() is not None and "ipykernel" in sys.modules


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _cupy_version() -> dict[str, str]:
    try:
        import cupy
    except Exception:
        return {}
    return {"cupy": cupy.__version__}


def start(name: str, out: str | os.PathLike | None = None) -> Run:
    """Begin a milestone run: settings from the environment, then the module check (a refusal exits)."""
    run = Run(name, out)
    try:
        run.require()
    except MilestoneError as error:
        raise SystemExit(f"milestone {run.milestone.slug} cannot run: {error}") from None
    return run


def load_result(milestone: Milestone, checkout: Path) -> dict[str, Any] | None:
    """The recorded full-run result of ``milestone`` in a checkout, or None."""
    path = milestone.results(checkout) / "result.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def data_folders(name: str) -> list[Path]:
    """Where data set ``name`` may be: the tinyflo data root, then the checkout's ../shared/data."""
    folders = [tinyflo.datasets.data_root(name)]
    checkout = checkout_dir()
    if checkout is not None:
        folders.append(checkout.parent / "shared" / "data" / name)
    return folders


def recorded_figures(result: dict[str, Any]) -> str:
    """A recorded result's figures in one line: ``figure: what this run got; ...``."""
    return "; ".join(f"{row['figure']}: {row['reproduced']}" for row in result.get("figures", []))


def find_data(name: str, filename: str) -> Path | None:
    """The first of :func:`data_folders` holding every file of data set ``name`` (``filename`` for a set
    tinyflo cannot download), or None: a folder a broken download left half-filled does not count."""
    files = list(tinyflo.datasets.DOWNLOADS[name][0]) if name in tinyflo.datasets.DOWNLOADS else [filename]
    return next((folder for folder in data_folders(name) if all((folder / f).is_file() for f in files)), None)


BOOK_FIGURE_PX = 1000  # how wide the book shows a milestone's figure beside its navigation (a 1366-px window)
SMALLEST_TEXT_PX = 9  # the smallest text that stays readable there
SAVE_DPI = 120  # the pixels per inch of a saved plot
COUNTED = ("epoch", "step", "iteration")  # an axis labelled so counts: its ticks are whole numbers


def save_png(fig: Any, path: Path) -> Path:
    """Save a figure as the book shows it (SAVE_DPI, cropped to what is drawn) in a PNG of 256 colours:
    a third of the bytes of matplotlib's own PNG, the same to the eye; whole or not at all."""
    import io

    from PIL import Image  # matplotlib's own dependency

    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=SAVE_DPI, bbox_inches="tight")
    image = Image.open(drawn).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small = io.BytesIO()
    image.save(small, format="PNG", optimize=True)
    write_atomically(path, small.getvalue())
    return path


def figure_problems(fig: Any, width_px: int = BOOK_FIGURE_PX) -> list[str]:
    """What makes a figure hard to read when the book shows it `width_px` wide: text smaller than
    SMALLEST_TEXT_PX once scaled, titles that run into each other, an axis's text over another panel,
    a legend over its own curves, an axis that counts (epochs, steps) ticked between whole numbers."""
    if not hasattr(fig.canvas, "get_renderer"):  # a Figure made without pyplot: drawn as savefig draws it
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [*_small_texts(fig, width_px), *_colliding_titles(fig, renderer), *_texts_over_panels(fig, renderer),
            *_legends_over_data(fig, renderer), *_fractional_counts(fig)]


def _axis_texts(ax: Any) -> list[Any]:
    """The labels and tick labels an axes draws beside its panel (none when its axis is off)."""
    texts = [ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]
    return [t for t in texts if t.get_visible() and t.get_text().strip()] if ax.axison else []


def _small_texts(fig: Any, width_px: int) -> list[str]:
    # The book shows the saved picture (SAVE_DPI, cropped to what is drawn) at its own size, or
    # narrower: `width_px` at most (its CSS: max-width 100%).
    import matplotlib

    inches = fig.get_tightbbox().width + 2 * matplotlib.rcParams["savefig.pad_inches"]
    per_inch = min(SAVE_DPI, width_px / inches)

    def shown(text: Any) -> float:  # the text's height in the book's pixels
        return text.get_fontsize() / 72 * per_inch

    hidden = {id(t) for ax in fig.axes if not ax.axison
              for t in (ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels())}
    texts = fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
    small = sorted({(round(shown(t), 1), t.get_text()[:30]) for t in texts
                    if t.get_visible() and t.get_text().strip() and id(t) not in hidden and shown(t) < SMALLEST_TEXT_PX})
    if not small:
        return []
    return [f"{len(small)} texts smaller than {SMALLEST_TEXT_PX} px at {width_px} px wide, "
            f"e.g. {small[0][1]!r} at {small[0][0]} px"]


def _colliding_titles(fig: Any, renderer: Any) -> list[str]:
    titles = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title) if t.get_text().strip()]
    titles += [fig._suptitle] if fig._suptitle is not None and fig._suptitle.get_text().strip() else []
    gap = 0.01 * fig.bbox.width  # titles closer than this read as one
    boxes = [(t.get_text(), t.get_window_extent(renderer).padded(gap / 2)) for t in titles]
    return [f"titles {first[:30]!r} and {second[:30]!r} run into each other"
            for i, (first, a) in enumerate(boxes) for second, b in boxes[i + 1:] if a.overlaps(b)]


def _texts_over_panels(fig: Any, renderer: Any) -> list[str]:
    problems = []
    for ax in fig.axes:  # an axis label or a tick label of one panel over another panel
        for other in fig.axes:
            if other is ax or not other.get_visible() or other.bbox.overlaps(ax.bbox):
                continue  # twin or inset axes share their place on purpose
            text = next((t for t in _axis_texts(ax) if t.get_window_extent(renderer).overlaps(other.bbox)), None)
            if text is not None:
                problems.append(f"{text.get_text()[:30]!r} of {ax.get_title()[:30]!r} is drawn over "
                                f"{other.get_title()[:30]!r}")
    return problems


def _legends_over_data(fig: Any, renderer: Any) -> list[str]:
    """A legend over what its axes plots: a line's points and the segments between them (looked at
    every 2 pixels), a scatter's dots."""
    import numpy as np

    problems = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        drawn = [(line.get_label(), line.get_transform().transform(line.get_xydata()),
                  line.get_linestyle() not in ("None", "none", "", " ")) for line in ax.get_lines()]
        drawn += [(dots.get_label(), dots.get_offset_transform().transform(dots.get_offsets()), False)
                  for dots in ax.collections if len(dots.get_offsets())]
        for label, points, joined in drawn:
            points = np.asarray(points, dtype=float)
            points = points[np.isfinite(points).all(axis=1)]
            if joined and len(points) > 1:  # along each segment, a point every 2 pixels or so
                steps = np.maximum(1, np.ceil(np.hypot(*np.diff(points, axis=0).T) / 2)).astype(int)
                starts, ends = np.repeat(points[:-1], steps, axis=0), np.repeat(points[1:], steps, axis=0)
                where = np.concatenate([np.arange(n) / n for n in steps])[:, None]
                points = np.vstack([starts + (ends - starts) * where, points[-1:]])
            inside = ((box.x0 <= points[:, 0]) & (points[:, 0] <= box.x1)
                      & (box.y0 <= points[:, 1]) & (points[:, 1] <= box.y1))
            if inside.any():
                problems.append(f"the legend of {ax.get_title()[:30]!r} is drawn over {label[:30]!r}")
                break
    return problems


def _fractional_counts(fig: Any) -> list[str]:
    """An axis that counts epochs or steps with a tick between two whole numbers (1.5 epochs)."""
    problems = []
    for ax in fig.axes:
        for axis, low_high in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            label = axis.label.get_text().strip().lower()
            if not ax.axison or not label.startswith(COUNTED):
                continue
            low, high = sorted(low_high)
            ticks = [t for t in axis.get_majorticklocs() if low <= t <= high]
            fractional = [t for t in ticks if not float(t).is_integer()]
            if fractional:
                problems.append(f"the {label!r} axis of {ax.get_title()[:30]!r} counts in whole numbers but has "
                                f"ticks {', '.join(f'{t:g}' for t in fractional[:3])}")
    return problems
