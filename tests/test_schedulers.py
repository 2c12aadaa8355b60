"""Module 07's schedules against PyTorch's per-group learning rates, stored by scripts/make_scheduler_fixtures.py.

No torch here: tests/fixtures/schedulers/<Scheduler>.json holds, for each of an optimizer's two
parameter groups, its learning rate after each ``scheduler.step()`` of the matching
``torch.optim.lr_scheduler`` class (see the script). Each case is replayed through
``Scheduler.apply`` on a tinyflo SGD with the same two groups, and every group's rate at every t
is compared at rtol 1e-10. Plus what parity does not show: lr(t, base_lr) is a pure function,
apply sets every group at once or none, state_dict round trips and holds no rate, errors, the
edges (past the end, degenerate phases), TinyTorch's alias.
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
from tinyflo.core.layers import Parameter
from tinyflo.core.optim import SGD, Adam

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


def groups(lrs: list[float]) -> SGD:
    """A tinyflo SGD with one parameter group per initial lr."""
    return SGD([{"params": [Parameter([float(i)])], "lr": lr} for i, lr in enumerate(lrs)], momentum=0.9)


def cases(task: str) -> list:
    return [pytest.param(name, case, id=f"{name}-{case['name']}") for name in TASKS[task] for case in load(name)]


def replay(name: str, case: dict) -> list[list[float]]:
    """Each group's rate, set by ``apply``, at every t PyTorch recorded (for the plateau: after each metric)."""
    sched, opt = build(name, case["kwargs"]), groups(case["lrs"])
    rows = []
    if name == "ReduceLROnPlateau":
        sched.apply(opt, 0)
        rows.append([g["lr"] for g in opt.param_groups])
        for t, metric in enumerate(case["metrics"], start=1):
            sched.observe(metric)
            sched.apply(opt, t)
            rows.append([g["lr"] for g in opt.param_groups])
    else:
        for t in range(len(case["lr"][0])):
            sched.apply(opt, t)
            rows.append([g["lr"] for g in opt.param_groups])
    assert [g["initial_lr"] for g in opt.param_groups] == case["lrs"], "apply never touches initial_lr"
    return [list(column) for column in zip(*rows)]


def assert_matches(name: str, case: dict) -> None:
    ours = replay(name, case)
    assert len(ours) == len(case["lr"]) == 2, "two groups"
    for group, (mine, theirs) in enumerate(zip(ours, case["lr"])):
        assert all(type(v) is float for v in mine), "apply sets Python floats"
        np.testing.assert_allclose(mine, theirs, rtol=RTOL, atol=0, err_msg=f"{name} {case['torch']}, group {group}")
    if name != "ReduceLROnPlateau" and not has_floor(case["kwargs"]):  # no absolute rate (min_lr, the plateau's eps)
        ratio = case["lrs"][0] / case["lrs"][1]
        assert all(math.isclose(a, ratio * b, rel_tol=1e-9, abs_tol=1e-18) for a, b in zip(*ours)), f"{name} keeps the ratio"


def has_floor(kwargs: dict) -> bool:
    """Whether a schedule has an absolute rate (min_lr > 0) anywhere in it."""
    inner = kwargs.get("scheduler")
    return kwargs.get("min_lr", 0.0) > 0 or (inner is not None and has_floor(inner["kwargs"]))


@pytest.mark.task("schedulers_step")
@pytest.mark.parametrize("name, case", cases("schedulers_step"))
def test_schedulers_step_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_step")
def test_schedulers_step_apply_keeps_per_group_rates():
    """The bug this design removes: groups at [0.1, 0.001] under StepLR must not both become 0.05."""
    opt = groups([0.1, 0.001])
    S.StepLR(step_size=1, gamma=0.5).apply(opt, 1)
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.0005]
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.001]
    S.StepLR(step_size=1, gamma=0.5).apply(opt, 0)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.001], "apply reads initial_lr, not the current lr"


@pytest.mark.task("schedulers_step")
def test_schedulers_step_apply_on_any_optimizer_and_added_groups():
    a, b, c = Parameter([1.0]), Parameter([2.0]), Parameter([3.0])
    opt = Adam([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1)
    opt.add_param_group({"params": [c], "lr": 1.0})
    S.ExponentialLR(0.5).apply(opt, 2)
    assert [g["lr"] for g in opt.param_groups] == [0.025, 0.0025, 0.25]
    opt.set_lr(7.0)  # an explicit user action: every group's lr, initial_lr untouched
    S.ExponentialLR(0.5).apply(opt, 1)
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.005, 0.5]


@pytest.mark.task("schedulers_step")
def test_schedulers_step_apply_refuses_what_it_cannot_use():
    with pytest.raises(TypeError, match="StepLR.apply got optimizer=list"):
        S.StepLR(2).apply([{"lr": 0.1}], 0)

    class Bare:
        param_groups = [{"lr": 0.1}]

    with pytest.raises(ValueError, match="group 0 has no 'initial_lr'"):
        S.StepLR(2).apply(Bare(), 0)
    with pytest.raises(ValueError, match="base_lr"):
        S.StepLR(2).lr(0, -0.1)
    with pytest.raises(ValueError, match="base_lr"):
        S.StepLR(2).lr(0, "0.1")


@pytest.mark.task("schedulers_onecycle")
def test_schedulers_onecycle_apply_changes_nothing_when_t_is_refused():
    opt = groups([0.1, 0.001])
    sched = S.OneCycle(total_steps=5)
    sched.apply(opt, 5)
    before = [g["lr"] for g in opt.param_groups]
    with pytest.raises(ValueError, match="total_steps"):
        sched.apply(opt, 6)
    assert [g["lr"] for g in opt.param_groups] == before


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
    """We match PyTorch's closed form to the bit, per group; its chainable recursion drifts by rounding only."""
    ours = replay("CosineAnnealing", case)
    assert ours == case["closed_form"]
    total = case["kwargs"]["total"]
    for group, base_lr in enumerate(case["lrs"]):
        chain, closed = np.array(case["lr"][group]), np.array(case["closed_form"][group])
        assert np.max(np.abs(chain - closed)) < 1e-14 * base_lr * len(chain)
        assert len(ours[group]) > 2 * total + 1, "the fixture goes past total"
        assert math.isclose(ours[group][2 * total], base_lr, rel_tol=1e-12), "the cosine goes on, period 2 total"


@pytest.mark.task("schedulers_cosine")
def test_schedulers_cosine_tinytorch_alias():
    sched = S.CosineSchedule(max_lr=0.1, min_lr=0.01, total_epochs=100)
    assert isinstance(sched, S.CosineAnnealing) and sched.max_lr == 0.1 and sched.total_epochs == 100
    for epoch in (0, 1, 37, 50, 99):  # TinyTorch's formula, in absolute rates
        expected = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * epoch / 100)) / 2
        assert math.isclose(sched.get_lr(epoch), expected, rel_tol=1e-12)
        assert math.isclose(sched.lr(epoch, 0.1), expected, rel_tol=1e-12), "at initial lr max_lr: TinyTorch's rates"
    assert sched.get_lr(100) == sched.get_lr(150) == 0.01, "like TinyTorch, min_lr from total_epochs on"
    default = S.CosineSchedule()
    assert (default.max_lr, default.min_lr, default.total_epochs) == (0.1, 0.01, 100)
    opt = groups([0.2, 0.002])
    for t in (0, 30, 100, 140):
        sched.apply(opt, t)
        fast, slow = (g["lr"] for g in opt.param_groups)
        assert math.isclose(fast, 0.2 * sched.get_lr(t) / 0.1, rel_tol=1e-12), "each group scaled by get_lr(t) / max_lr"
        assert math.isclose(fast / slow, 100.0, rel_tol=1e-12), "so the groups keep their ratio"
    with pytest.raises(ValueError, match="max_lr"):
        S.CosineSchedule(max_lr=0.0)


@pytest.mark.task("schedulers_warmup")
@pytest.mark.parametrize("name, case", cases("schedulers_warmup"))
def test_schedulers_warmup_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_warmup")
def test_schedulers_warmup_hands_over_at_inner_t_zero():
    inner = S.StepLR(step_size=2, gamma=0.5)
    w = S.Warmup(inner, warmup_steps=4, start_factor=0.0)
    assert w.lr(0, 0.4) == 0.0
    assert [w.lr(t, 0.4) for t in range(4, 12)] == [inner.lr(t, 0.4) for t in range(8)]
    assert not hasattr(w, "observe"), "no observe unless the wrapped schedule has one"
    assert not hasattr(w, "base_lr"), "no rate of its own"
    assert [S.Warmup(inner, 0).lr(t, 0.4) for t in range(6)] == [inner.lr(t, 0.4) for t in range(6)]


@pytest.mark.task("schedulers_warmup")
def test_schedulers_warmup_forwards_observe_to_a_plateau():
    plateau = S.ReduceLROnPlateau(patience=0)
    w = S.Warmup(plateau, warmup_steps=2, start_factor=0.5)
    assert w.lr(0, 1.0) == 0.5 and w.lr(1, 1.0) == 0.75 and w.lr(2, 1.0) == 1.0
    w.observe(1.0)
    w.observe(1.0)
    assert plateau.lr(0, 1.0) == w.lr(5, 1.0) == 0.1
    nested = S.Warmup(S.Warmup(S.CosineAnnealing(10), 2), 3)
    assert nested.lr(3, 1.0) == 1.0 / 3 and nested.lr(5, 1.0) == 1.0, "each wrapper restarts the inner t"
    back = S.Warmup(S.Warmup(S.CosineAnnealing(1), 1), 1)
    back.load_state_dict(json.loads(json.dumps(nested.state_dict())))
    assert [back.lr(t, 1.0) for t in range(20)] == [nested.lr(t, 1.0) for t in range(20)]


@pytest.mark.task("schedulers_onecycle")
@pytest.mark.parametrize("name, case", cases("schedulers_onecycle"))
def test_schedulers_onecycle_matches_pytorch(name, case):
    assert_matches(name, case)
    sched = build(name, case["kwargs"])
    assert case["raises_at"] == case["kwargs"]["total_steps"] + 1
    with pytest.raises(ValueError, match="total_steps"):
        sched.lr(case["raises_at"], case["lrs"][0])


@pytest.mark.task("schedulers_onecycle")
def test_schedulers_onecycle_degenerate_phases():
    # pct_start * total_steps == 1: phase 1 ends at step 0 (PyTorch divides by zero here).
    sched = S.OneCycle(total_steps=10, pct_start=0.1)
    assert sched.lr(0, 1.0) == 1.0 and sched.lr(9, 1.0) == pytest.approx(1.0 / 25 / 1e4)
    assert sched.lr(1, 1.0) < 1.0
    one = S.OneCycle(total_steps=1)
    assert all(math.isfinite(one.lr(t, 1.0)) for t in (0, 1))
    assert S.OneCycle(total_steps=10, pct_start=0.0).lr(0, 1.0) == pytest.approx(
        1.0 - 0.5 * (1 - 4e-6) * (1 - math.cos(math.pi / 10)))
    assert S.OneCycle(100).lr(0, 0.5) == pytest.approx(0.5 / 25, rel=1e-12), "starts at the group's lr / div_factor"


@pytest.mark.task("schedulers_cyclic")
@pytest.mark.parametrize("name, case", cases("schedulers_cyclic"))
def test_schedulers_cyclic_matches_pytorch(name, case):
    assert_matches(name, case)


@pytest.mark.task("schedulers_cyclic")
def test_schedulers_cyclic_defaults():
    sched = S.CyclicLR(6.0)
    assert (sched.step_size_up, sched.step_size_down, sched.mode, sched.gamma) == (2000, 2000, "triangular", 1.0)
    assert sched.lr(2000, 0.001) == pytest.approx(0.006) and sched.lr(4000, 0.001) == pytest.approx(0.001)
    assert S.CyclicLR(1.0, 3).lr(4, 0.2) == 0.2, "max_factor=1: a flat wave"


@pytest.mark.task("schedulers_plateau")
@pytest.mark.parametrize("name, case", cases("schedulers_plateau"))
def test_schedulers_plateau_matches_pytorch(name, case):
    assert len(set(case["lr"][0])) > 2, "the metric sequence makes the rate drop more than once"
    assert_matches(name, case)


@pytest.mark.task("schedulers_plateau")
def test_schedulers_plateau_groups_stop_at_their_own_cut():
    """min_lr and eps act per group, as in PyTorch: one cut count, but each group stops on its own."""
    case = next(c for c in load("ReduceLROnPlateau") if c["name"] == "floor-and-eps")
    fast, slow = case["lr"]
    assert min(slow) == slow[-1] > case["kwargs"]["min_lr"] and len(set(slow)) == 2, "the slow group stops after one cut"
    assert min(fast) < min(slow) and len(set(fast)) > 3, "the fast group goes on being cut"


@pytest.mark.task("schedulers_plateau")
@pytest.mark.parametrize("case", load("ReduceLROnPlateau"), ids=lambda c: c["name"])
@pytest.mark.parametrize("cut", [0, 7, 23])
def test_schedulers_plateau_resumes_exactly(case, cut):
    first = build("ReduceLROnPlateau", case["kwargs"])
    for m in case["metrics"][:cut]:
        first.observe(m)
    resumed = S.ReduceLROnPlateau(mode="max")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for group, base_lr in enumerate(case["lrs"]):
        assert resumed.lr(cut, base_lr) == pytest.approx(case["lr"][group][cut], rel=RTOL)
    rates = []
    for m in case["metrics"][cut:]:
        resumed.observe(m)
        rates.append([resumed.lr(0, base_lr) for base_lr in case["lrs"]])
    for group, column in enumerate(zip(*rates)):
        np.testing.assert_allclose(column, case["lr"][group][cut + 1 :], rtol=RTOL, atol=0)


@pytest.mark.task("schedulers_plateau")
def test_schedulers_plateau_edges():
    nan = S.ReduceLROnPlateau(patience=0)
    rates = []
    for m in (float("nan"), 1.0, float("nan")):
        assert nan.observe(m) is None
        rates.append(nan.lr(0, 1.0))
    assert rates == pytest.approx([0.1, 0.1, 0.01]), "NaN is never better"
    accepts = S.ReduceLROnPlateau()
    accepts.observe(np.float32(0.5))
    assert accepts.best == 0.5 and type(accepts.lr(0, 1.0)) is float
    with pytest.raises(ValueError, match="metric"):
        accepts.observe("low")
    with pytest.raises(ValueError, match="t is the step"):
        accepts.lr(-1, 1.0)


# --- properties shared by every schedule -------------------------------------------------------

def every_schedule() -> list[S.Scheduler]:
    return [
        S.StepLR(3, 0.5), S.MultiStepLR([2, 5, 9], 0.5), S.ExponentialLR(0.9),
        S.CosineAnnealing(10, 0.001), S.CosineSchedule(0.1, 0.01, 20), S.Warmup(S.CosineAnnealing(20), 5),
        S.OneCycle(60), S.CyclicLR(10.0, 3, 5, "triangular2"),
        S.CyclicLR(10.0, 4, mode="exp_range", gamma=0.97), S.ReduceLROnPlateau(patience=1, factor=0.5),
    ]


SCHEDULE_TASK = {
    "StepLR": "schedulers_step", "MultiStepLR": "schedulers_multistep", "ExponentialLR": "schedulers_step",
    "CosineAnnealing": "schedulers_cosine", "CosineSchedule": "schedulers_cosine", "Warmup": "schedulers_warmup",
    "OneCycle": "schedulers_onecycle", "CyclicLR": "schedulers_cyclic", "ReduceLROnPlateau": "schedulers_plateau",
}


def with_tasks() -> list:
    return [pytest.param(s, id=f"{type(s).__name__}-{i}", marks=pytest.mark.task(SCHEDULE_TASK[type(s).__name__]))
            for i, s in enumerate(every_schedule())]


@pytest.mark.parametrize("sched", with_tasks())
@settings(max_examples=25, deadline=None)
@given(order=st.lists(st.integers(0, 60), min_size=1, max_size=30), base_lr=st.sampled_from([0.1, 0.001, 1.0]))
def test_lr_is_a_pure_function_of_t_and_base_lr(sched, order, base_lr):
    expected = {t: sched.lr(t, base_lr) for t in range(61)}
    assert [sched.lr(t, base_lr) for t in order] == [expected[t] for t in order], "the order of the calls does not matter"
    assert sched.lr(5, base_lr) == sched.lr(np.int64(5), np.float64(base_lr))
    assert all(type(v) is float for v in expected.values())


@pytest.mark.parametrize("sched", with_tasks())
def test_state_dict_round_trip_holds_no_rate(sched):
    if isinstance(sched, S.ReduceLROnPlateau):
        for m in (1.0, 2.0, 2.0, 2.0, 2.0):
            sched.observe(m)
    state = json.loads(json.dumps(sched.state_dict()))
    assert state["type"] == type(sched).__name__
    # a rate belongs to the optimizer's groups; CosineSchedule's max_lr is the top of TinyTorch's absolute curve
    copies = {"base_lr", "current_lr", "lr", "initial_lr", "max_lr"} - ({"max_lr"} if isinstance(sched, S.CosineSchedule) else set())
    assert not copies & set(state) and not copies & set(state.get("scheduler", {})), "no learning rate in the state"
    fresh = build_like(sched)
    assert [fresh.lr(t, 0.1) for t in range(40)] != [sched.lr(t, 0.1) for t in range(40)]
    fresh.load_state_dict(state)
    assert [fresh.lr(t, 0.1) for t in range(61)] == [sched.lr(t, 0.1) for t in range(61)]
    assert repr(fresh) == repr(sched)


def build_like(sched: S.Scheduler) -> S.Scheduler:
    """The same kind of schedule with other settings."""
    other = {
        "StepLR": lambda: S.StepLR(1), "MultiStepLR": lambda: S.MultiStepLR([1]),
        "ExponentialLR": lambda: S.ExponentialLR(0.5), "CosineAnnealing": lambda: S.CosineAnnealing(2),
        "CosineSchedule": lambda: S.CosineSchedule(1.0, 0.0, 2), "Warmup": lambda: S.Warmup(S.CosineAnnealing(2), 1),
        "OneCycle": lambda: S.OneCycle(61), "CyclicLR": lambda: S.CyclicLR(2.0, 1),
        "ReduceLROnPlateau": lambda: S.ReduceLROnPlateau(mode="max"),
    }
    return other[type(sched).__name__]()


@pytest.mark.task("schedulers_step")
def test_schedulers_step_load_state_dict_errors():
    with pytest.raises(ValueError, match="StepLR.*CosineAnnealing"):
        S.StepLR(3).load_state_dict(S.CosineAnnealing(3).state_dict())
    state = S.StepLR(3).state_dict()
    del state["gamma"]
    with pytest.raises(ValueError, match="'gamma'"):
        S.StepLR(3).load_state_dict(state)
    with pytest.raises(ValueError, match="StepLR"):
        S.StepLR(3).load_state_dict([1, 2])
    with pytest.raises(NotImplementedError, match="lr"):
        S.Scheduler().lr(0, 0.1)


BAD = [
    ("schedulers_step", lambda: S.StepLR(0), "step_size=0"),
    ("schedulers_step", lambda: S.StepLR(2.0), "step_size=2.0"),
    ("schedulers_step", lambda: S.StepLR("3"), "step_size='3'"),
    ("schedulers_step", lambda: S.StepLR(True), "step_size=True"),
    ("schedulers_step", lambda: S.StepLR(3, gamma=0), "gamma=0"),
    ("schedulers_step", lambda: S.StepLR(3, gamma="0.5"), "gamma='0.5'"),
    ("schedulers_step", lambda: S.StepLR(3, gamma=float("nan")), "gamma=nan"),
    ("schedulers_multistep", lambda: S.MultiStepLR([5, 2]), "milestones"),
    ("schedulers_multistep", lambda: S.MultiStepLR([1, -2]), "milestones=-2"),
    ("schedulers_multistep", lambda: S.MultiStepLR([1.5]), "milestones=1.5"),
    ("schedulers_multistep", lambda: S.MultiStepLR(5), "milestones=5"),
    ("schedulers_multistep", lambda: S.MultiStepLR([2], gamma=None), "gamma=None"),
    ("schedulers_step", lambda: S.ExponentialLR(-0.9), "gamma=-0.9"),
    ("schedulers_step", lambda: S.ExponentialLR(True), "gamma=True"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(0), "total=0"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(-5), "total=-5"),
    ("schedulers_cosine", lambda: S.CosineAnnealing("10"), "total='10'"),
    ("schedulers_cosine", lambda: S.CosineAnnealing(10, min_lr=-0.1), "min_lr=-0.1"),
    ("schedulers_cosine", lambda: S.CosineSchedule(0.1, 0.01, 0), "total_epochs=0"),
    ("schedulers_cosine", lambda: S.CosineSchedule("0.1"), "max_lr='0.1'"),
    ("schedulers_cosine", lambda: S.CosineSchedule(0.1, -0.01), "min_lr=-0.01"),
    ("schedulers_warmup", lambda: S.Warmup(S.StepLR(3), -1), "warmup_steps=-1"),
    ("schedulers_warmup", lambda: S.Warmup(S.StepLR(3), 5, start_factor=2.0), "start_factor=2.0"),
    ("schedulers_warmup", lambda: S.Warmup(S.StepLR(3), 5, start_factor="0.5"), "start_factor='0.5'"),
    ("schedulers_warmup", lambda: S.Warmup(0.1, 5), "scheduler=0.1"),
    ("schedulers_onecycle", lambda: S.OneCycle(0), "total_steps=0"),
    ("schedulers_onecycle", lambda: S.OneCycle(10, pct_start=1.1), "pct_start=1.1"),
    ("schedulers_onecycle", lambda: S.OneCycle(10, div_factor=0), "div_factor=0"),
    ("schedulers_onecycle", lambda: S.OneCycle(10, final_div_factor=-1), "final_div_factor=-1"),
    ("schedulers_onecycle", lambda: S.OneCycle(10, anneal="cosine"), "anneal='cosine'"),
    ("schedulers_cyclic", lambda: S.CyclicLR(0.5), "max_factor=0.5"),
    ("schedulers_cyclic", lambda: S.CyclicLR("6"), "max_factor='6'"),
    ("schedulers_cyclic", lambda: S.CyclicLR(6.0, 0), "step_size_up=0"),
    ("schedulers_cyclic", lambda: S.CyclicLR(6.0, 5, 0), "step_size_down=0"),
    ("schedulers_cyclic", lambda: S.CyclicLR(6.0, mode="sine"), "mode='sine'"),
    ("schedulers_cyclic", lambda: S.CyclicLR(6.0, gamma=0.0), "gamma=0.0"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(mode="minimum"), "mode='minimum'"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(factor=1.0), "factor=1.0"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(factor=0.0), "factor=0.0"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(factor="0.5"), "factor='0.5'"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(patience=-1), "patience=-1"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(threshold=-1e-4), "threshold=-0.0001"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(threshold_mode="relative"), "threshold_mode='relative'"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(cooldown=-1), "cooldown=-1"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(min_lr=-1.0), "min_lr=-1.0"),
    ("schedulers_plateau", lambda: S.ReduceLROnPlateau(eps=-1.0), "eps=-1.0"),
]


@pytest.mark.parametrize(
    "make, argument",
    [pytest.param(make, arg, id=f"{task}-{i}-{arg}", marks=pytest.mark.task(task)) for i, (task, make, arg) in enumerate(BAD)],
)
def test_bad_arguments_are_refused_by_name(make, argument):
    """One line: the class, the argument and the value that came, then what was expected."""
    with pytest.raises(ValueError) as err:
        make()
    message = str(err.value)
    assert f" got {argument}" in message and "; expected " in message and "\n" not in message, message


@pytest.mark.parametrize("sched", with_tasks())
@pytest.mark.parametrize("t", [-1, 1.5, "3", None, True])
def test_t_must_be_a_non_negative_integer(sched, t):
    with pytest.raises(ValueError, match=r"got t=.*; expected an integer >= 0 \(t is the step or epoch index\)"):
        sched.lr(t, 0.1)


def test_the_notebook_runs_quietly_and_quickly(tmp_path):
    """The module as a script: every cell passes, the figure is drawn, nothing lands on stderr."""
    env = {"PATH": "", "MPLCONFIGDIR": str(tmp_path), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    # A fresh MPLCONFIGDIR means a font cache to build first; matplotlib warns when that takes over 5 s.
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, capture_output=True, timeout=120)
    result = subprocess.run([sys.executable, "schedulers.py"], cwd=ROOT / "modules" / "07_schedulers",
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
