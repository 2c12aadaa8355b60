"""Module 07's schedules against PyTorch's learning rates, stored by scripts/make_scheduler_fixtures.py.

No torch here: tests/fixtures/schedulers/<Scheduler>.json holds the optimizer's learning rate
after each ``scheduler.step()`` of the matching ``torch.optim.lr_scheduler`` class (see the script).
Every t is compared at rtol 1e-10. Plus what parity does not show: lr(t) is a pure function of t,
state_dict round trips, errors, the edges (past the end, degenerate phases), TinyTorch's alias.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyflo.core import schedulers as S

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "schedulers"
RTOL = 1e-10

TASKS = {
    "schedulers_step": ("StepLR", "ExponentialLR"),
    "schedulers_multistep": ("MultiStepLR",),
    "schedulers_cosine": ("CosineAnnealing",),
    "schedulers_warmup": ("Warmup",),
    "schedulers_onecycle": ("OneCycle",),
    "schedulers_cyclic": ("CyclicLR",),
    "schedulers_plateau": ("ReduceLROnPlateau",),
}


def load(name: str) -> list[dict]:
    return json.loads((FIXTURES / f"{name}.json").read_text())["cases"]


def build(name: str, kwargs: dict) -> S.Scheduler:
    """The tinyflo schedule a fixture case describes."""
    if name == "Warmup":
        kwargs = dict(kwargs)
        inner = kwargs.pop("scheduler")
        return S.Warmup(build(inner["type"], inner["kwargs"]), **kwargs)
    return getattr(S, name)(**kwargs)


def cases(task: str) -> list:
    return [pytest.param(name, case, id=f"{name}-{case['name']}") for name in TASKS[task] for case in load(name)]


def replay(name: str, case: dict) -> list[float]:
    """tinyflo's rates for every t PyTorch recorded (for the plateau: after each metric)."""
    sched = build(name, case["kwargs"])
    if name == "ReduceLROnPlateau":
        return [sched.lr(0)] + [sched.observe(m) for m in case["metrics"]]
    return [sched.lr(t) for t in range(len(case["lr"]))]


def assert_matches(name: str, case: dict) -> None:
    ours = replay(name, case)
    assert all(type(v) is float for v in ours), "lr(t) is a Python float"
    np.testing.assert_allclose(ours, case["lr"], rtol=RTOL, atol=0, err_msg=f"{name} {case['torch']}")


@pytest.mark.task("schedulers_step")
@pytest.mark.parametrize("name, case", cases("schedulers_step"))
def test_schedulers_step_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_multistep")
@pytest.mark.parametrize("name, case", cases("schedulers_multistep"))
def test_schedulers_multistep_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_cosine")
@pytest.mark.parametrize("name, case", cases("schedulers_cosine"))
def test_schedulers_cosine_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_cosine")
@pytest.mark.parametrize("case", load("CosineAnnealing"), ids=lambda c: c["name"])
def test_schedulers_cosine_is_the_closed_form(case):
    """We match PyTorch's closed form to the bit; its chainable recursion drifts by rounding only."""
    ours = replay("CosineAnnealing", case)
    assert ours == case["closed_form"]
    chain, closed = np.array(case["lr"]), np.array(case["closed_form"])
    assert np.max(np.abs(chain - closed)) < 1e-14 * case["kwargs"]["base_lr"] * len(chain)
    total = case["kwargs"]["total"]
    assert len(ours) > 2 * total + 1, "the fixture goes past total"
    assert math.isclose(ours[2 * total], case["kwargs"]["base_lr"], rel_tol=1e-12), "the cosine goes on, period 2 total"


@pytest.mark.task("schedulers_cosine")
def test_schedulers_cosine_tinytorch_alias():
    sched = S.CosineSchedule(max_lr=0.1, min_lr=0.01, total_epochs=100)
    assert isinstance(sched, S.CosineAnnealing) and sched.max_lr == 0.1 and sched.total_epochs == 100
    for epoch in (0, 1, 37, 50, 99):  # TinyTorch's formula
        expected = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * epoch / 100)) / 2
        assert math.isclose(sched.get_lr(epoch), expected, rel_tol=1e-12)
        assert sched.get_lr(epoch) == sched.lr(epoch)
    assert sched.get_lr(100) == sched.get_lr(150) == 0.01, "like TinyTorch, min_lr from total_epochs on"
    assert sched.lr(150) > 0.01, "lr(t) stays PyTorch's (the cosine goes on)"
    default = S.CosineSchedule()
    assert (default.max_lr, default.min_lr, default.total_epochs) == (0.1, 0.01, 100)


@pytest.mark.task("schedulers_warmup")
@pytest.mark.parametrize("name, case", cases("schedulers_warmup"))
def test_schedulers_warmup_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_warmup")
def test_schedulers_warmup_hands_over_at_inner_t_zero():
    inner = S.StepLR(0.4, step_size=2, gamma=0.5)
    w = S.Warmup(inner, warmup_steps=4, start_factor=0.0)
    assert w.base_lr == 0.4 and w.lr(0) == 0.0
    assert [w.lr(t) for t in range(4, 12)] == [inner.lr(t) for t in range(8)]
    assert not hasattr(w, "observe"), "no observe unless the wrapped schedule has one"
    assert [S.Warmup(inner, 0).lr(t) for t in range(6)] == [inner.lr(t) for t in range(6)]


@pytest.mark.task("schedulers_warmup")
def test_schedulers_warmup_forwards_observe_to_a_plateau():
    plateau = S.ReduceLROnPlateau(1.0, patience=0)
    w = S.Warmup(plateau, warmup_steps=2, start_factor=0.5)
    assert w.lr(0) == 0.5 and w.lr(1) == 0.75 and w.lr(2) == 1.0
    w.observe(1.0)
    w.observe(1.0)
    assert plateau.lr() == w.lr(5) == 0.1
    nested = S.Warmup(S.Warmup(S.CosineAnnealing(1.0, 10), 2), 3)
    assert nested.lr(3) == 1.0 / 3 and nested.lr(5) == 1.0, "each wrapper restarts the inner t"
    back = S.Warmup(S.Warmup(S.CosineAnnealing(5.0, 1), 1), 1)
    back.load_state_dict(json.loads(json.dumps(nested.state_dict())))
    assert [back.lr(t) for t in range(20)] == [nested.lr(t) for t in range(20)]


@pytest.mark.task("schedulers_onecycle")
@pytest.mark.parametrize("name, case", cases("schedulers_onecycle"))
def test_schedulers_onecycle_matches_pytorch(name, case):
    assert_matches(name, case)
    sched = build(name, case["kwargs"])
    assert case["raises_at"] == case["kwargs"]["total_steps"] + 1
    with pytest.raises(ValueError, match="total_steps"):
        sched.lr(case["raises_at"])


@pytest.mark.task("schedulers_onecycle")
def test_schedulers_onecycle_degenerate_phases():
    # pct_start * total_steps == 1: phase 1 ends at step 0 (PyTorch divides by zero here).
    sched = S.OneCycle(1.0, total_steps=10, pct_start=0.1)
    assert sched.lr(0) == 1.0 and sched.lr(9) == pytest.approx(1.0 / 25 / 1e4)
    assert sched.lr(1) < 1.0
    one = S.OneCycle(1.0, total_steps=1)
    assert all(math.isfinite(one.lr(t)) for t in (0, 1))
    assert S.OneCycle(1.0, total_steps=10, pct_start=0.0).lr(0) == pytest.approx(1.0 - 0.5 * (1 - 4e-6) * (1 - math.cos(math.pi / 10)))
    assert S.OneCycle(0.5, 100).base_lr == 0.5 / 25


@pytest.mark.task("schedulers_cyclic")
@pytest.mark.parametrize("name, case", cases("schedulers_cyclic"))
def test_schedulers_cyclic_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_cyclic")
def test_schedulers_cyclic_defaults():
    sched = S.CyclicLR(0.001, 0.006)
    assert (sched.step_size_up, sched.step_size_down, sched.mode, sched.gamma) == (2000, 2000, "triangular", 1.0)
    assert sched.lr(2000) == pytest.approx(0.006) and sched.lr(4000) == pytest.approx(0.001)


@pytest.mark.task("schedulers_plateau")
@pytest.mark.parametrize("name, case", cases("schedulers_plateau"))
def test_schedulers_plateau_matches_pytorch(name, case):
    assert len(set(case["lr"])) > 2, "the fixture's metric sequence makes the rate drop more than once"
    assert_matches(name, case)


@pytest.mark.task("schedulers_plateau")
@pytest.mark.parametrize("case", load("ReduceLROnPlateau"), ids=lambda c: c["name"])
@pytest.mark.parametrize("cut", [0, 7, 23])
def test_schedulers_plateau_resumes_exactly(case, cut):
    first = build("ReduceLROnPlateau", case["kwargs"])
    for m in case["metrics"][:cut]:
        first.observe(m)
    resumed = S.ReduceLROnPlateau(123.0, mode="max")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert [resumed.observe(m) for m in case["metrics"][cut:]] == case["lr"][cut + 1 :]


@pytest.mark.task("schedulers_plateau")
def test_schedulers_plateau_edges():
    nan = S.ReduceLROnPlateau(1.0, patience=0)
    assert [nan.observe(m) for m in (float("nan"), 1.0, float("nan"))] == pytest.approx([0.1, 0.1, 0.01]), "NaN is never better"
    accepts = S.ReduceLROnPlateau(1.0)
    accepts.observe(np.float32(0.5))
    assert accepts.best == 0.5 and type(accepts.lr()) is float
    with pytest.raises(ValueError, match="metric"):
        accepts.observe("low")
    with pytest.raises(ValueError, match="t "):
        accepts.lr(-1)


# --- properties shared by every schedule -------------------------------------------------------

def every_schedule() -> list[S.Scheduler]:
    return [
        S.StepLR(0.1, 3, 0.5), S.MultiStepLR(0.1, [2, 5, 9], 0.5), S.ExponentialLR(0.1, 0.9),
        S.CosineAnnealing(0.1, 10, 0.001), S.CosineSchedule(0.1, 0.01, 20), S.Warmup(S.CosineAnnealing(0.1, 20), 5),
        S.OneCycle(0.1, 60), S.CyclicLR(0.01, 0.1, 3, 5, "triangular2"),
        S.CyclicLR(0.01, 0.1, 4, mode="exp_range", gamma=0.97),
    ]


SCHEDULE_TASK = {
    "StepLR": "schedulers_step", "MultiStepLR": "schedulers_multistep", "ExponentialLR": "schedulers_step",
    "CosineAnnealing": "schedulers_cosine", "CosineSchedule": "schedulers_cosine", "Warmup": "schedulers_warmup",
    "OneCycle": "schedulers_onecycle", "CyclicLR": "schedulers_cyclic",
}


def with_tasks() -> list:
    return [pytest.param(s, id=f"{type(s).__name__}-{i}", marks=pytest.mark.task(SCHEDULE_TASK[type(s).__name__]))
            for i, s in enumerate(every_schedule())]


@pytest.mark.parametrize("sched", with_tasks())
@settings(max_examples=25, deadline=None)
@given(order=st.lists(st.integers(0, 60), min_size=1, max_size=30))
def test_lr_is_a_pure_function_of_t(sched, order):
    expected = {t: sched.lr(t) for t in range(61)}
    assert [sched.lr(t) for t in order] == [expected[t] for t in order], "the order of the calls does not matter"
    assert sched.lr(5) == sched.lr(5) == sched.lr(np.int64(5))


@pytest.mark.parametrize("sched", with_tasks())
def test_state_dict_round_trip(sched):
    state = json.loads(json.dumps(sched.state_dict()))
    assert state["type"] == type(sched).__name__
    fresh = build_like(sched)
    assert [fresh.lr(t) for t in range(40)] != [sched.lr(t) for t in range(40)]
    fresh.load_state_dict(state)
    assert [fresh.lr(t) for t in range(61)] == [sched.lr(t) for t in range(61)]
    assert repr(fresh) == repr(sched)


def build_like(sched: S.Scheduler) -> S.Scheduler:
    """The same kind of schedule with other settings."""
    other = {
        "StepLR": lambda: S.StepLR(1.0, 1), "MultiStepLR": lambda: S.MultiStepLR(1.0, [1]),
        "ExponentialLR": lambda: S.ExponentialLR(1.0, 0.5), "CosineAnnealing": lambda: S.CosineAnnealing(1.0, 2),
        "CosineSchedule": lambda: S.CosineSchedule(1.0, 0.0, 2), "Warmup": lambda: S.Warmup(S.CosineAnnealing(1.0, 2), 1),
        "OneCycle": lambda: S.OneCycle(1.0, 61), "CyclicLR": lambda: S.CyclicLR(1.0, 2.0, 1),
    }
    return other[type(sched).__name__]()


@pytest.mark.task("schedulers_step")
def test_schedulers_step_load_state_dict_errors():
    with pytest.raises(ValueError, match="StepLR.*CosineAnnealing"):
        S.StepLR(0.1, 3).load_state_dict(S.CosineAnnealing(0.1, 3).state_dict())
    state = S.StepLR(0.1, 3).state_dict()
    del state["gamma"]
    with pytest.raises(ValueError, match="'gamma'"):
        S.StepLR(0.1, 3).load_state_dict(state)
    with pytest.raises(ValueError, match="StepLR"):
        S.StepLR(0.1, 3).load_state_dict([1, 2])
    with pytest.raises(NotImplementedError, match="lr"):
        S.Scheduler().lr(0)


BAD = [
    ("schedulers_step", lambda: S.StepLR(-0.1, 3), "base_lr"),
    ("schedulers_step", lambda: S.StepLR(0.1, 0), "step_size"),
    ("schedulers_step", lambda: S.StepLR(0.1, 2.0), "step_size"),
    ("schedulers_step", lambda: S.StepLR(0.1, 3, gamma=0), "gamma"),
    ("schedulers_step", lambda: S.StepLR(float("nan"), 3), "base_lr"),
    ("schedulers_multistep", lambda: S.MultiStepLR(0.1, [5, 2]), "milestones"),
    ("schedulers_multistep", lambda: S.MultiStepLR(0.1, [1, -2]), "milestones"),
    ("schedulers_multistep", lambda: S.MultiStepLR(0.1, [1.5]), "milestones"),
    ("schedulers_step", lambda: S.ExponentialLR(0.1, -0.9), "gamma"),
    ("schedulers_step", lambda: S.ExponentialLR(True, 0.9), "base_lr"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(0.1, 0), "total"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(0.1, -5), "total"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(0.1, 10, min_lr=-0.1), "min_lr"),
    ("schedulers_cosine", lambda: S.CosineSchedule(0.1, 0.01, 0), "total"),
    ("schedulers_warmup", lambda: S.Warmup(S.StepLR(0.1, 3), -1), "warmup_steps"),
    ("schedulers_warmup", lambda: S.Warmup(S.StepLR(0.1, 3), 5, start_factor=2.0), "start_factor"),
    ("schedulers_warmup", lambda: S.Warmup(0.1, 5), "scheduler"),
    ("schedulers_onecycle", lambda: S.OneCycle(0.1, 0), "total_steps"),
    ("schedulers_onecycle", lambda: S.OneCycle(0.1, 10, pct_start=1.1), "pct_start"),
    ("schedulers_onecycle", lambda: S.OneCycle(0.1, 10, div_factor=0), "div_factor"),
    ("schedulers_onecycle", lambda: S.OneCycle(0.1, 10, final_div_factor=-1), "final_div_factor"),
    ("schedulers_onecycle", lambda: S.OneCycle(0.1, 10, anneal="cosine"), "anneal"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.1, -1.0), "max_lr"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.1, 1.0, 0), "step_size_up"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.1, 1.0, 5, 0), "step_size_down"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.1, 1.0, mode="sine"), "mode"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.1, 1.0, gamma=0.0), "gamma"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, mode="minimum"), "mode"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, factor=1.0), "factor"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, factor=0.0), "factor"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, patience=-1), "patience"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, threshold=-1e-4), "threshold"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, threshold_mode="relative"), "threshold_mode"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, cooldown=-1), "cooldown"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, min_lr=-1.0), "min_lr"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(0.1, eps=-1.0), "eps"),
]


@pytest.mark.parametrize(
    "make, argument",
    [pytest.param(make, arg, id=f"{task}-{i}-{arg}", marks=pytest.mark.task(task)) for i, (task, make, arg) in enumerate(BAD)],
)
def test_bad_arguments_are_refused_by_name(make, argument):
    with pytest.raises(ValueError, match=argument) as err:
        make()
    assert "got" in str(err.value), "the error says what came"


@pytest.mark.parametrize("sched", with_tasks())
@pytest.mark.parametrize("t", [-1, 1.5, "3", None, True])
def test_t_must_be_a_non_negative_integer(sched, t):
    with pytest.raises(ValueError, match=r"t \(the step or epoch index\)"):
        sched.lr(t)


def test_the_notebook_runs_quietly_and_quickly(tmp_path):
    """The module as a script: every cell passes, the figure is drawn, nothing lands on stderr."""
    env = {"PATH": "", "MPLCONFIGDIR": str(tmp_path), "HOME": str(tmp_path)}
    # A fresh MPLCONFIGDIR means a font cache to build first; matplotlib warns when that takes over 5 s.
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, capture_output=True, timeout=120)
    result = subprocess.run([sys.executable, "schedulers.py"], cwd=ROOT / "modules" / "07_schedulers",
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
