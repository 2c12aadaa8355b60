# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 07 — Learning-rate schedules
#
# The learning rate is the one hyper-parameter that matters most, and the
# best value is not one value: large early, while the weights are far from
# anywhere good, small late, when each step should only polish. A *schedule*
# says which learning rate to use at step (or epoch) `t`.
#
# **Who owns the learning rate.** The optimizer does: each parameter group's
# rate is stated once, when the optimizer is built (module 06), and recorded
# as the group's `"initial_lr"`. A schedule never holds a rate of its own; it
# is a *shape*: `sched.lr(t, base_lr)` is the rate at index `t` (`t = 0` is
# the first step) for a group whose initial rate is `base_lr`. A model whose
# biases train at 0.1 and whose weights train at 0.001 keeps that ratio
# under every multiplicative schedule, as PyTorch's `base_lrs` do.
#
# `sched.apply(optimizer, t)` does the plumbing: it sets every group's
# `"lr"` to `sched.lr(t, group["initial_lr"])`. The training loop (module
# 08) calls it before each step (or epoch). There is no hidden counter:
# `lr(5, 0.1)` is the same number however often and in whatever order you
# ask. PyTorch's schedulers instead *mutate* the optimizer on every
# `step()`; the numbers are the same — the tests replay every group's rates
# recorded from PyTorch — but a function of `t` is easier to test, to plot
# and to resume.
#
# | task | points | what |
# |---|---|---|
# | `schedulers_step` | 2 | `StepLR`, `ExponentialLR`: multiply by `gamma` every few steps, or every step |
# | `schedulers_multistep` | 1 | `MultiStepLR`: multiply by `gamma` at chosen milestones |
# | `schedulers_cosine` | 2 | `CosineAnnealing`: half a cosine from the initial lr down to `min_lr` |
# | `schedulers_warmup` | 2 | `Warmup`: a linear ramp that hands over to any schedule |
# | `schedulers_onecycle` | 3 | `OneCycle`: up to the initial lr and far down again, in one cycle |
# | `schedulers_cyclic` | 2 | `CyclicLR`: a triangle wave between the initial lr and a multiple of it |
# | `schedulers_plateau` | 3 | `ReduceLROnPlateau`: cut the rate when the validation metric stalls |
#
# The names and defaults are PyTorch's (`torch.optim.lr_scheduler`) where the
# idea is the same, so the skills transfer.

# %%
#| default_exp core.schedulers

# %%
#| export
from __future__ import annotations

import bisect
import copy
import math
import numbers
from typing import Any

from tinyflo.core.tensor import brief

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.schedulers: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.schedulers"] = None



# Random inputs of the hidden checks: grading seeds check_rng per student and task.
import numpy as np

check_rng = np.random.default_rng(0)

# %% [markdown]
# ## The base class: a function of `t` and of a group's initial lr
#
# Every schedule below derives from `Scheduler`. It gives four things:
#
# * argument checks that say which argument is wrong, what was expected and
#   what came (`StepLR got gamma=-0.5; expected a finite number > 0`);
# * `apply(optimizer, t)`: every parameter group's `"lr"` becomes
#   `self.lr(t, group["initial_lr"])` (all rates are computed before any is
#   set, so a refused `t` changes nothing);
# * `state_dict()` / `load_state_dict()`: a schedule's settings (and, for
#   `ReduceLROnPlateau`, its running state) as plain data that `json.dumps`
#   can write — a checkpoint (module 09) stores it, and a resumed run
#   continues with exactly the same learning rates. No rate is in it: the
#   rates belong to the optimizer's groups, and are saved there, once;
# * a `repr` that shows the settings.
#
# A schedule keeps *all* of its state in its attributes, so `state_dict` is
# simply a copy of them (plus the class name, so that loading a `StepLR`'s
# state into a `CosineAnnealing` is an error rather than a surprise). A
# schedule that wraps another one (`Warmup`) stores the inner one's
# `state_dict` inside its own.
#
# Each `lr(t, base_lr)` starts with `t, base_lr = self._args(t, base_lr)`:
# `t` checked to be an integer >= 0 and `base_lr` a number >= 0.
#
# This cell is given: read it, run it.

# %%
#| export
def _check_number(owner: str, name: str, value: Any, low: float = 0.0, strict: bool = False) -> float:
    """A real number >= low (> low when strict), as a Python float; a clear ValueError otherwise."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (strict and value == low):
        relation = ">" if strict else ">="
        raise ValueError(f"{owner} got {name}={brief(value)}; expected a finite number {relation} {low:g}")
    return float(value)


def _check_fraction(owner: str, name: str, value: Any, open_low: bool = False, open_high: bool = False) -> float:
    """A real number in [0, 1] (open at either end when asked), as a Python float; a clear ValueError otherwise."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (0 < value if open_low else 0 <= value) or not (value < 1 if open_high else value <= 1):
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise ValueError(f"{owner} got {name}={brief(value)}; expected a number in {interval}")
    return float(value)


def _check_int(owner: str, name: str, value: Any, low: int = 1) -> int:
    """An integer >= low, as a Python int; a clear ValueError otherwise."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"{owner} got {name}={brief(value)}; expected an integer >= {low}")
    return int(value)


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a few strings; a clear ValueError otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{owner} got {name}={brief(value)}; expected one of {', '.join(map(repr, choices))}")
    return value


class Scheduler:
    """A learning-rate schedule: ``lr(t, base_lr)`` at step (or epoch) ``t`` for a group whose initial lr is ``base_lr``."""

    def lr(self, t: int, base_lr: float) -> float:
        """The learning rate at index ``t`` of a parameter group whose initial lr is ``base_lr``."""
        raise NotImplementedError(f"{type(self).__name__} does not define lr(t, base_lr)")

    def apply(self, optimizer: Any, t: int) -> None:
        """Set every parameter group's ``"lr"`` to ``self.lr(t, group["initial_lr"])``."""
        name = type(self).__name__
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list):
            raise TypeError(f"{name}.apply got optimizer={type(optimizer).__name__}; expected an optimizer "
                            "with param_groups (tinyflo.optim)")
        for i, group in enumerate(groups):
            if "initial_lr" not in group:
                raise ValueError(f"{name}.apply: parameter group {i} has no 'initial_lr'; expected an optimizer "
                                 "that records each group's initial lr when it is built (tinyflo.optim does)")
        rates = [self.lr(t, group["initial_lr"]) for group in groups]  # all first: a refused t changes nothing
        for group, rate in zip(groups, rates):
            group["lr"] = rate

    def _args(self, t: Any, base_lr: Any) -> tuple[int, float]:
        """``t`` and ``base_lr`` checked: an index >= 0 and a rate >= 0."""
        name = type(self).__name__
        if not isinstance(t, numbers.Integral) or isinstance(t, bool) or t < 0:
            raise ValueError(f"{name}.lr got t={brief(t)}; expected an integer >= 0 (t is the step or epoch index)")
        return int(t), _check_number(f"{name}.lr", "base_lr", base_lr)

    def state_dict(self) -> dict[str, Any]:
        """The settings and state as plain data (``json.dumps`` can write it)."""
        state: dict[str, Any] = {"type": type(self).__name__}
        for key, value in vars(self).items():
            state[key] = value.state_dict() if isinstance(value, Scheduler) else copy.deepcopy(value)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the settings and state that ``state_dict()`` returned."""
        name = type(self).__name__
        if not isinstance(state, dict) or state.get("type") != name:
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{name}.load_state_dict: expected the state of a {name}; got that of {found!r}")
        for key in vars(self):
            if key not in state:
                raise ValueError(f"{name}.load_state_dict: missing key {key!r}; expected a dict from {name}.state_dict()")
        for key, value in list(vars(self).items()):
            if isinstance(value, Scheduler):
                value.load_state_dict(state[key])
            else:
                setattr(self, key, copy.deepcopy(state[key]))

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({settings})"


# %% [markdown]
# A parameter group's initial lr is its `"initial_lr"`, which module 06's
# optimizers set once, when the group is made. Two groups, one schedule:

# %%
from tinyflo.core.layers import Parameter
from tinyflo.core.optim import SGD


def _two_groups(fast: float = 0.1, slow: float = 0.001) -> SGD:
    """An SGD optimizer with two parameter groups, at ``fast`` and ``slow``."""
    return SGD([{"params": [Parameter([1.0])], "lr": fast}, {"params": [Parameter([2.0])], "lr": slow}])


print([group["initial_lr"] for group in _two_groups().param_groups])


# %% [markdown]
# ## Steps and decay: `StepLR`, `ExponentialLR`, `MultiStepLR`
#
# The oldest schedules multiply the learning rate by a factor `gamma` now and
# then. ResNet (He et al., 2015) divided it by 10 at fixed epochs; that is
# still a strong baseline.
#
# | schedule | `lr(t, base_lr)` | PyTorch |
# |---|---|---|
# | `StepLR(step_size, gamma=0.1)` | `base_lr · gamma ** (t // step_size)` | `StepLR` |
# | `ExponentialLR(gamma)` | `base_lr · gamma ** t` | `ExponentialLR` |
# | `MultiStepLR(milestones, gamma=0.1)` | `base_lr · gamma ** (number of milestones <= t)` | `MultiStepLR` |
#
# Each multiplies every group's initial lr by the same factor, so the
# groups keep their ratios. `gamma` must be > 0 (`gamma > 1` makes the rate
# grow, which is allowed). These schedules never end: `StepLR` keeps
# dividing, `ExponentialLR` keeps shrinking, and after the last milestone
# `MultiStepLR` simply stays put.
#
# PyTorch computes them by multiplying the current rate on every `step()`;
# the powers here agree with that to within a few rounding errors.
#
# ### Task `schedulers_step` (2 points): `StepLR` and `ExponentialLR`
#
# Check the arguments (`step_size` an integer >= 1, `gamma > 0`) with the
# helpers above and write each `lr(t, base_lr)`: `base_lr` times a power of `gamma`.
#
# **Checked when graded** (besides the tests below), for any step size, gamma
# and initial lr, each rate to within a relative 1e-9:
#
# * StepLR: base_lr · gamma ** (t // step_size) at every t from 0 over four step sizes
# * StepLR's default gamma is 0.1
# * ExponentialLR: base_lr · gamma ** t at every t, starting at base_lr at t = 0
# * gamma > 1 is allowed: the rate grows by gamma at every step of StepLR(1, gamma) and ExponentialLR(gamma)
# * a StepLR or ExponentialLR loaded from another's state_dict must give the same rates
# * a step_size that is not an integer >= 1 must be refused with a ValueError (0, negative, fractional, a string)
# * the error for a bad step_size must name step_size
# * a gamma that is not a number > 0 must be refused with a ValueError (0, negative, a string)
# * the error for a bad gamma must name gamma
# * a negative t must be refused with a ValueError

# %% nbgrader={"grade": false, "grade_id": "schedulers_step_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class StepLR(Scheduler):
    """The initial lr times ``gamma`` once every ``step_size`` steps."""

    def __init__(self, step_size: int, gamma: float = 0.1) -> None:
        ### BEGIN SOLUTION
        self.step_size = _check_int("StepLR", "step_size", step_size)
        self.gamma = _check_number("StepLR", "gamma", gamma, strict=True)
        ### END SOLUTION

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr · gamma ** (t // step_size)``."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        return base_lr * self.gamma ** (t // self.step_size)
        ### END SOLUTION


class ExponentialLR(Scheduler):
    """The initial lr times ``gamma ** t``."""

    def __init__(self, gamma: float) -> None:
        ### BEGIN SOLUTION
        self.gamma = _check_number("ExponentialLR", "gamma", gamma, strict=True)
        ### END SOLUTION

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr · gamma ** t``."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        return base_lr * self.gamma**t
        ### END SOLUTION


# %%
print([StepLR(step_size=3).lr(t, 0.1) for t in range(8)])
stepped = _two_groups()
StepLR(step_size=3, gamma=0.5).apply(stepped, 3)
print([group["lr"] for group in stepped.param_groups])

# %% nbgrader={"grade": true, "grade_id": "schedulers_step", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import json

got = [StepLR(3, 0.5).lr(t, 0.1) for t in range(7)]
assert got == [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025], f"StepLR(3, 0.5) at 0.1 for t = 0..6 gave {got}"
assert StepLR(3).gamma == 0.1 and StepLR(3).step_size == 3
assert math.isclose(ExponentialLR(0.9).lr(3, 0.1), 0.1 * 0.9**3, rel_tol=1e-12)
groups = _two_groups(0.1, 0.001)
StepLR(2, 0.5).apply(groups, 2)
assert [g["lr"] for g in groups.param_groups] == [0.05, 0.0005], "every group's own initial lr is halved"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: a step size, a gamma below 1 and one above 1,
# an initial lr, and the bad arguments.
_size = int(check_rng.integers(2, 6))
_gamma, _grow = float(check_rng.uniform(0.2, 0.8)), float(check_rng.uniform(1.2, 2.0))
_base = float(check_rng.uniform(0.01, 1.0))
_neg = -int(check_rng.integers(1, 5))
_t = np.arange(4 * _size)
assert np.allclose(np.array([StepLR(_size, _gamma).lr(t, _base) for t in range(4 * _size)]),
                   _base * _gamma ** (_t // _size), rtol=1e-9, atol=0), (
    "StepLR: base_lr · gamma ** (t // step_size) at every t"
)
assert np.allclose(np.array([StepLR(_size).lr(t, _base) for t in range(4 * _size)]), _base * 0.1 ** (_t // _size), rtol=1e-9, atol=0), (
    "StepLR's default gamma is 0.1"
)
assert np.allclose(np.array([ExponentialLR(_gamma).lr(t, _base) for t in range(4 * _size)]), _base * _gamma ** _t, rtol=1e-9, atol=0), (
    "ExponentialLR: base_lr · gamma ** t at every t, starting at base_lr at t = 0"
)
assert np.allclose(np.array([StepLR(1, _grow).lr(t, _base) for t in range(5)] + [ExponentialLR(_grow).lr(t, _base) for t in range(5)]),
                   np.tile(_base * _grow ** np.arange(5), 2), rtol=1e-9, atol=0), (
    "gamma > 1 is allowed: the rate grows by gamma at every step of StepLR(1, gamma) and ExponentialLR(gamma)"
)
for _saved, _into, _rates in ((StepLR(_size, _gamma), StepLR(_size + 1), _base * _gamma ** (_t // _size)),
                              (ExponentialLR(_gamma), ExponentialLR(_grow), _base * _gamma ** _t)):
    _into.load_state_dict(json.loads(json.dumps(_saved.state_dict())))
    assert np.allclose(np.array([_into.lr(t, _base) for t in range(4 * _size)]), _rates, rtol=1e-9, atol=0), (
        "a StepLR or ExponentialLR loaded from another's state_dict must give the same rates"
    )
for make in (lambda: StepLR(0), lambda: StepLR(_neg), lambda: StepLR(_size + 0.5), lambda: StepLR(str(_size))):
    try:
        make()
        raise AssertionError("a step_size that is not an integer >= 1 must be refused with a ValueError")
    except ValueError as err:
        assert "step_size" in str(err), "the error for a bad step_size must name step_size"
for make in (lambda: StepLR(_size, gamma=0.0), lambda: StepLR(_size, gamma=-_gamma), lambda: StepLR(_size, gamma=str(_gamma)),
             lambda: ExponentialLR(0.0), lambda: ExponentialLR(-_gamma)):
    try:
        make()
        raise AssertionError("a gamma that is not a number > 0 must be refused with a ValueError")
    except ValueError as err:
        assert "gamma" in str(err), "the error for a bad gamma must name gamma"
for make in (lambda: StepLR(_size, _gamma).lr(_neg, _base), lambda: ExponentialLR(_gamma).lr(_neg, _base)):
    try:
        make()
        raise AssertionError("a negative t must be refused with a ValueError")
    except ValueError:
        pass
### END HIDDEN TESTS

# %% [markdown]
# ### Task `schedulers_multistep` (1 point): `MultiStepLR`
#
# A milestone is the first index that uses the lower rate: `MultiStepLR([2,
# 5])` at 1.0 gives `1, 1, 0.1, 0.1, 0.1, 0.01, ...`. Milestones must be sorted
# non-negative integers (an unsorted list is almost always a typo, so it is
# an error); a milestone listed twice applies `gamma` twice, as in PyTorch.
# `bisect.bisect_right(milestones, t)` counts the milestones <= t.
#
# **Checked when graded** (besides the tests below), for any milestones,
# gamma and initial lr, each rate to within a relative 1e-9:
#
# * MultiStepLR: base_lr · gamma ** (the number of milestones <= t) at every t, and after the last milestone the rate stays put
# * a milestone listed twice applies gamma twice
# * a milestone at 0 applies from the very first index
# * no milestones: the rate never changes
# * a MultiStepLR loaded from another's state_dict must give the same rates
# * milestones that are not sorted integers >= 0 must be refused with a ValueError (unsorted, negative, fractional)
# * the error for bad milestones must name milestones
# * a gamma that is not a number > 0 must be refused with a ValueError (0, negative)
# * the error for a bad gamma must name gamma

# %% nbgrader={"grade": false, "grade_id": "schedulers_multistep_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class MultiStepLR(Scheduler):
    """The initial lr times ``gamma`` at each milestone."""

    def __init__(self, milestones: list[int], gamma: float = 0.1) -> None:
        if not isinstance(milestones, (list, tuple)):
            raise ValueError(f"MultiStepLR got milestones={brief(milestones)}; expected a sorted list of integers >= 0")
        ### BEGIN SOLUTION
        self.milestones = [_check_int("MultiStepLR", "milestones", m, low=0) for m in milestones]
        if self.milestones != sorted(self.milestones):
            raise ValueError(f"MultiStepLR got milestones={list(milestones)!r}; expected them sorted in increasing order")
        self.gamma = _check_number("MultiStepLR", "gamma", gamma, strict=True)
        ### END SOLUTION

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr · gamma ** (number of milestones <= t)``."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)
        ### END SOLUTION


# %%
print([MultiStepLR([2, 5]).lr(t, 1.0) for t in range(7)])

# %% nbgrader={"grade": true, "grade_id": "schedulers_multistep", "locked": true, "points": 1, "schema_version": 3, "solution": false}
got = [MultiStepLR([2, 5], 0.5).lr(t, 1.0) for t in range(7)]
assert got == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25], f"MultiStepLR([2, 5], 0.5) at 1.0 for t = 0..6 gave {got}"
assert MultiStepLR([3]).gamma == 0.1, "the default gamma is 0.1"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: three milestones (then one of them listed twice),
# a gamma, an initial lr, and the bad arguments.
_ms = sorted(int(m) for m in check_rng.choice(np.arange(1, 12), 3, replace=False))
_twice = sorted(_ms + [_ms[int(check_rng.integers(0, 3))]])
_gamma, _base = float(check_rng.uniform(0.2, 0.8)), float(check_rng.uniform(0.01, 1.0))
_n = _ms[-1] + 5
_t = np.arange(_n)
assert np.allclose(np.array([MultiStepLR(_ms, _gamma).lr(t, _base) for t in range(_n)]),
                   _base * _gamma ** np.searchsorted(_ms, _t, side="right"), rtol=1e-9, atol=0), (
    "MultiStepLR: base_lr · gamma ** (the number of milestones <= t) at every t, and after the last milestone the rate stays put"
)
assert np.allclose(np.array([MultiStepLR(_twice, _gamma).lr(t, _base) for t in range(_n)]),
                   _base * _gamma ** np.searchsorted(_twice, _t, side="right"), rtol=1e-9, atol=0), (
    "a milestone listed twice applies gamma twice"
)
assert np.allclose(np.array([MultiStepLR([0, *_ms], _gamma).lr(t, _base) for t in range(_n)]),
                   _base * _gamma ** (1 + np.searchsorted(_ms, _t, side="right")), rtol=1e-9, atol=0), (
    "a milestone at 0 applies from the very first index"
)
assert np.allclose(np.array([MultiStepLR([], _gamma).lr(t, _base) for t in range(_n)]), np.full(_n, _base), rtol=1e-9, atol=0), (
    "no milestones: the rate never changes"
)
_into = MultiStepLR([_ms[0]])
_into.load_state_dict(json.loads(json.dumps(MultiStepLR(_twice, _gamma).state_dict())))
assert np.allclose(np.array([_into.lr(t, _base) for t in range(_n)]),
                   _base * _gamma ** np.searchsorted(_twice, _t, side="right"), rtol=1e-9, atol=0), (
    "a MultiStepLR loaded from another's state_dict must give the same rates"
)
for bad in (_ms[::-1], [-_ms[0]], [_ms[0] + 0.5]):
    try:
        MultiStepLR(bad)
        raise AssertionError("milestones that are not sorted integers >= 0 must be refused with a ValueError")
    except ValueError as err:
        assert "milestones" in str(err), "the error for bad milestones must name milestones"
for bad in (0.0, -_gamma):
    try:
        MultiStepLR(_ms, gamma=bad)
        raise AssertionError("a gamma that is not a number > 0 must be refused with a ValueError")
    except ValueError as err:
        assert "gamma" in str(err), "the error for a bad gamma must name gamma"
### END HIDDEN TESTS

# %% [markdown]
# ## Cosine annealing
#
# Loshchilov & Hutter (SGDR, 2017) let the learning rate follow half a
# cosine: flat at the start, steepest in the middle, flat again as it lands
# on `min_lr` at `t = total`:
#
# $$\text{lr}(t) = \text{min\_lr} + (\text{base\_lr} - \text{min\_lr})\,\frac{1 + \cos(\pi t / \text{total})}{2}$$
#
# This is PyTorch's `CosineAnnealingLR(optimizer, T_max=total, eta_min=min_lr)`
# in its *closed form*, group by group: each group starts at its own initial
# lr and every group lands on the same `min_lr` (an absolute rate, as
# PyTorch's `eta_min`). PyTorch computes the same curve in two ways: the
# closed form above (used by `step(epoch)`), and a *chainable* recursion that
# multiplies the previous learning rate by a ratio of cosines on every plain
# `step()`. The two agree in exact arithmetic; in floating point the
# recursion drifts by a few rounding errors per step (and it follows any
# change another scheduler made to the learning rate). We match the closed
# form to the last digits, and the recursion to about 1e-12 — the tests show
# both.
#
# After `total` the formula simply goes on: the cosine climbs back towards
# `base_lr` over the next `total` steps, with period `2 · total`, exactly as
# PyTorch does. If you want the rate to stay at `min_lr`, make `total` the
# length of the run.
#
# `CosineSchedule(max_lr, min_lr, total_epochs).get_lr(epoch)` is the same
# curve under the names TinyTorch (another course in which students build a
# framework) uses, in absolute rates; like TinyTorch's it
# stays at `min_lr` after `total_epochs`. Applied to an optimizer, it scales
# each group's initial lr by `get_lr(t) / max_lr`, so the groups keep their
# ratios there too.
#
# ### Task `schedulers_cosine` (2 points): `CosineAnnealing`
#
# Store the settings (checked with the helpers above: `total` an integer
# >= 1, `min_lr >= 0`) and write `lr(t, base_lr)`.
#
# **Checked when graded** (besides the tests below), for any total, min_lr
# and initial lr, each rate to within a relative 1e-9:
#
# * CosineAnnealing: min_lr + (base_lr − min_lr)(1 + cos(πt/total))/2 at every t from 0 to total
# * after total the cosine goes on (period 2 · total), as PyTorch's does, up to t = 3 · total
# * min_lr defaults to 0
# * TinyTorch's CosineSchedule follows the same curve and stays at min_lr after total_epochs
# * a CosineAnnealing loaded from another's state_dict must give the same rates
# * a total that is not an integer >= 1 must be refused with a ValueError (0, negative, fractional)
# * the error for a bad total must name total
# * a min_lr that is not a number >= 0 must be refused with a ValueError (negative, a string)
# * the error for a bad min_lr must name min_lr

# %% nbgrader={"grade": false, "grade_id": "schedulers_cosine_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class CosineAnnealing(Scheduler):
    """Half a cosine from the initial lr at t = 0 to ``min_lr`` at t = total (PyTorch's CosineAnnealingLR)."""

    def __init__(self, total: int, min_lr: float = 0.0) -> None:
        ### BEGIN SOLUTION
        self.total = _check_int("CosineAnnealing", "total", total)
        self.min_lr = _check_number("CosineAnnealing", "min_lr", min_lr)
        ### END SOLUTION

    def lr(self, t: int, base_lr: float) -> float:
        """The learning rate at index ``t``; after ``total`` the cosine goes on (period 2 · total)."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        return self.min_lr + (base_lr - self.min_lr) * (1 + math.cos(math.pi * t / self.total)) / 2
        ### END SOLUTION


class CosineSchedule(CosineAnnealing):
    """TinyTorch's cosine schedule: ``get_lr(epoch)`` from ``max_lr`` to ``min_lr``, constant after ``total_epochs``."""

    def __init__(self, max_lr: float = 0.1, min_lr: float = 0.01, total_epochs: int = 100) -> None:
        super().__init__(_check_int("CosineSchedule", "total_epochs", total_epochs),
                         _check_number("CosineSchedule", "min_lr", min_lr))
        self.max_lr = _check_number("CosineSchedule", "max_lr", max_lr, strict=True)

    @property
    def total_epochs(self) -> int:
        """The length of the schedule (``total``)."""
        return self.total

    def __repr__(self) -> str:
        return f"CosineSchedule(max_lr={self.max_lr!r}, min_lr={self.min_lr!r}, total_epochs={self.total!r})"

    def get_lr(self, epoch: int) -> float:
        """The learning rate for ``epoch``, from ``max_lr`` down to ``min_lr``; ``min_lr`` from ``total_epochs`` on."""
        epoch, _ = self._args(epoch, self.max_lr)
        return CosineAnnealing.lr(self, min(epoch, self.total), self.max_lr)

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr · get_lr(t) / max_lr``: TinyTorch's curve as a factor of a group's initial lr."""
        t, base_lr = self._args(t, base_lr)
        return base_lr * (self.get_lr(t) / self.max_lr)


# %%
cosine = CosineAnnealing(total=10, min_lr=0.001)
print(cosine, [round(cosine.lr(t, 0.1), 4) for t in range(0, 21, 2)])

# %% nbgrader={"grade": true, "grade_id": "schedulers_cosine", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import json

c = CosineAnnealing(total=10, min_lr=0.001)
assert c.total == 10 and c.min_lr == 0.001 and c.lr(0, 0.1) == 0.1
assert math.isclose(c.lr(10, 0.1), 0.001, rel_tol=1e-12), "min_lr is reached at t = total"
assert math.isclose(c.lr(5, 0.1), (0.1 + 0.001) / 2, rel_tol=1e-12), "halfway at t = total / 2"
assert all(c.lr(t, 0.1) > c.lr(t + 1, 0.1) for t in range(10)), "decreasing up to total"
assert c.lr(7, 0.1) == c.lr(7, 0.1), "lr(t, base_lr) is a pure function of t and base_lr"
assert math.isclose(CosineSchedule(0.1, 0.01, 100).get_lr(50), 0.055, rel_tol=1e-12)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the length, the floor, an initial lr, and the bad arguments.
_total = int(check_rng.integers(5, 30))
_min, _base = float(check_rng.uniform(0.001, 0.01)), float(check_rng.uniform(0.05, 1.0))
_neg = -int(check_rng.integers(1, 5))
_t = np.arange(3 * _total + 1)
_curve = _min + (_base - _min) * (1 + np.cos(np.pi * _t / _total)) / 2
_cos = CosineAnnealing(_total, _min)
assert np.allclose(np.array([_cos.lr(t, _base) for t in range(_total + 1)]), _curve[: _total + 1], rtol=1e-9, atol=1e-15), (
    "CosineAnnealing: min_lr + (base_lr − min_lr)(1 + cos(πt/total))/2 at every t from 0 to total"
)
assert np.allclose(np.array([_cos.lr(t, _base) for t in range(_total, 3 * _total + 1)]), _curve[_total:], rtol=1e-9, atol=1e-15), (
    "after total the cosine goes on (period 2 · total), as PyTorch's does"
)
assert np.allclose(np.array([CosineAnnealing(_total).lr(t, _base) for t in range(_total + 1)]),
                   _base * (1 + np.cos(np.pi * _t[: _total + 1] / _total)) / 2, rtol=1e-9, atol=1e-15), (
    "min_lr defaults to 0"
)
assert np.allclose(np.array([CosineSchedule(_base, _min, _total).get_lr(t) for t in range(3 * _total + 1)]),
                   np.where(_t <= _total, _curve, _min), rtol=1e-9, atol=1e-15), (
    "TinyTorch's CosineSchedule follows the same curve and stays at min_lr after total_epochs"
)
_into = CosineAnnealing(_total + 3)
_into.load_state_dict(json.loads(json.dumps(_cos.state_dict())))
assert np.allclose(np.array([_into.lr(t, _base) for t in range(3 * _total + 1)]), _curve, rtol=1e-9, atol=1e-15), (
    "a CosineAnnealing loaded from another's state_dict must give the same rates"
)
for bad in (0, _neg, _total + 0.5):
    try:
        CosineAnnealing(bad, _min)
        raise AssertionError("a total that is not an integer >= 1 must be refused with a ValueError")
    except ValueError as err:
        assert "total" in str(err), "the error for a bad total must name total"
for bad in (-_min, str(_min)):
    try:
        CosineAnnealing(_total, bad)
        raise AssertionError("a min_lr that is not a number >= 0 must be refused with a ValueError")
    except ValueError as err:
        assert "min_lr" in str(err), "the error for a bad min_lr must name min_lr"
### END HIDDEN TESTS

# %% [markdown]
# ## Warm-up
#
# At the very start the weights are random, the gradients are large and
# Adam's moment estimates have seen a single batch: a full-size step can
# throw the model somewhere it never recovers from. A *warm-up* starts with a
# fraction of the learning rate and raises it linearly to the full value over
# `warmup_steps` steps (Goyal et al., 2017, trained ResNet-50 in an hour this
# way; every transformer recipe does it).
#
# `Warmup(scheduler, warmup_steps, start_factor=1/3)` wraps *any* schedule:
#
# * for `t < warmup_steps`: `lr(t, base_lr) = base_lr · (start_factor + (1 - start_factor) · t / warmup_steps)`;
# * for `t >= warmup_steps`: the wrapped schedule takes over, **and its
#   clock starts at 0 then**: `lr(t, base_lr) = scheduler.lr(t - warmup_steps, base_lr)`. So
#   `Warmup(CosineAnnealing(total=90), 10)` warms up for 10 steps and
#   then anneals over the next 90 — plan `total` as the steps *after* the
#   warm-up.
#
# This is PyTorch's
# `SequentialLR([LinearLR(opt, start_factor, total_iters=warmup_steps), scheduler], milestones=[warmup_steps])`,
# with `LinearLR`'s default `start_factor = 1/3`. Unlike `LinearLR`,
# `start_factor = 0` is allowed (the first step then has learning rate 0, as
# in Hugging Face's linear warm-up). `warmup_steps = 0` means no warm-up.
# A wrapped `ReduceLROnPlateau`'s `observe` is reachable through the wrapper.
#
# ### Task `schedulers_warmup` (2 points): `Warmup`
#
# **Checked when graded** (besides the tests below), for any warm-up length,
# start factor and initial lr, around a wrapped schedule whose own rate at
# its t = 0 is below the initial lr, each rate to within a relative 1e-9:
#
# * for t < warmup_steps: base_lr · (start_factor + (1 − start_factor) · t / warmup_steps)
# * from t = warmup_steps on: scheduler.lr(t − warmup_steps, base_lr), the wrapped schedule's clock restarted at 0
# * start_factor defaults to 1/3
# * warmup_steps=0 means no warm-up: the wrapped schedule from t = 0
# * a Warmup loaded from another's state_dict must give the same rates, the wrapped schedule's state included
# * a warmup_steps that is not an integer >= 0 must be refused with a ValueError (negative, fractional)
# * the error for a bad warmup_steps must name warmup_steps
# * a start_factor outside [0, 1] must be refused with a ValueError
# * the error for a bad start_factor must name start_factor

# %% nbgrader={"grade": false, "grade_id": "schedulers_warmup_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Warmup(Scheduler):
    """A linear warm-up over ``warmup_steps`` that then hands over to ``scheduler`` (its t restarts at 0)."""

    def __init__(self, scheduler: Scheduler, warmup_steps: int, start_factor: float = 1.0 / 3) -> None:
        if not isinstance(scheduler, Scheduler):
            raise ValueError(f"Warmup got scheduler={brief(scheduler)}; expected a Scheduler")
        self.scheduler = scheduler
        ### BEGIN SOLUTION
        self.warmup_steps = _check_int("Warmup", "warmup_steps", warmup_steps, low=0)
        self.start_factor = _check_fraction("Warmup", "start_factor", start_factor)
        ### END SOLUTION

    def __getattr__(self, name: str) -> Any:
        # Only `observe` is forwarded, so that a trainer finds a wrapped ReduceLROnPlateau's.
        if name == "observe" and "scheduler" in vars(self):
            return getattr(self.scheduler, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr`` ramped up linearly until ``warmup_steps``, then ``scheduler.lr(t - warmup_steps, base_lr)``."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        if t < self.warmup_steps:
            return base_lr * (self.start_factor + (1 - self.start_factor) * t / self.warmup_steps)
        return self.scheduler.lr(t - self.warmup_steps, base_lr)
        ### END SOLUTION


# %%
warm = Warmup(CosineAnnealing(total=20), warmup_steps=5, start_factor=0.0)
print(warm, [round(warm.lr(t, 0.1), 4) for t in range(0, 26, 2)])

# %% nbgrader={"grade": true, "grade_id": "schedulers_warmup", "locked": true, "points": 2, "schema_version": 3, "solution": false}
class Halving(Scheduler):
    """A schedule for these tests only: the initial lr halved at every step."""

    def lr(self, t: int, base_lr: float) -> float:
        t, base_lr = self._args(t, base_lr)
        return base_lr * 0.5**t


w = Warmup(Halving(), warmup_steps=5, start_factor=0.0)
assert w.lr(0, 0.1) == 0.0 and math.isclose(w.lr(1, 0.1), 0.02, rel_tol=1e-12)
assert math.isclose(w.lr(4, 0.1), 0.08, rel_tol=1e-12)
assert w.lr(5, 0.1) == 0.1, "after the warm-up the wrapped schedule starts at its own t = 0"
assert math.isclose(w.lr(15, 0.1), Halving().lr(10, 0.1), rel_tol=1e-12)
assert math.isclose(Warmup(Halving(), 3).lr(0, 0.3), 0.1, rel_tol=1e-12), "start_factor defaults to 1/3"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: two warm-ups (one inside the other), their start
# factors, an initial lr, the wrapped schedule's first factor, and the bad arguments.
class _Below(Scheduler):
    """For these checks: ``first`` times the initial lr at t = 0, then halved at every step."""

    def __init__(self, first):
        self.first = first

    def lr(self, t, base_lr):
        t, base_lr = self._args(t, base_lr)
        return base_lr * self.first * 0.5**t


_steps, _steps2 = int(check_rng.integers(2, 8)), int(check_rng.integers(2, 6))
_start, _start2 = float(check_rng.uniform(0.1, 0.6)), float(check_rng.uniform(0.1, 0.6))
_first, _base = float(check_rng.uniform(0.3, 0.8)), float(check_rng.uniform(0.01, 1.0))
_ramp = np.arange(_steps)
_warm = Warmup(_Below(_first), _steps, _start)
assert np.allclose(np.array([_warm.lr(t, _base) for t in range(_steps)]), _base * (_start + (1 - _start) * _ramp / _steps),
                   rtol=1e-9, atol=0), (
    "for t < warmup_steps: base_lr · (start_factor + (1 − start_factor) · t / warmup_steps)"
)
assert np.allclose(np.array([_warm.lr(t, _base) for t in range(_steps, _steps + 8)]), _base * _first * 0.5 ** np.arange(8),
                   rtol=1e-9, atol=0), (
    "from t = warmup_steps on: scheduler.lr(t − warmup_steps, base_lr), the wrapped schedule's clock restarted at 0"
)
assert np.allclose(np.array([Warmup(_Below(_first), _steps).lr(t, _base) for t in range(_steps)]),
                   _base * (1 / 3 + (2 / 3) * _ramp / _steps), rtol=1e-9, atol=0), (
    "start_factor defaults to 1/3"
)
assert np.allclose(np.array([Warmup(_Below(_first), 0, _start).lr(t, _base) for t in range(8)]), _base * _first * 0.5 ** np.arange(8),
                   rtol=1e-9, atol=0), (
    "warmup_steps=0 means no warm-up: the wrapped schedule from t = 0"
)
_t = np.arange(_steps + _steps2 + 8)
_inner = np.where(_t - _steps < _steps2, _base * (_start2 + (1 - _start2) * (_t - _steps) / _steps2),
                  _base * _first * 0.5 ** (_t - _steps - _steps2))
_into = Warmup(Warmup(_Below(0.5), 1, 0.5), 1, 0.5)
_into.load_state_dict(json.loads(json.dumps(Warmup(Warmup(_Below(_first), _steps2, _start2), _steps, _start).state_dict())))
assert np.allclose(np.array([_into.lr(t, _base) for t in range(len(_t))]),
                   np.where(_t < _steps, _base * (_start + (1 - _start) * _t / _steps), _inner), rtol=1e-9, atol=0), (
    "a Warmup loaded from another's state_dict must give the same rates, the wrapped schedule's state included"
)
for bad in (-int(check_rng.integers(1, 5)), _steps + 0.5):
    try:
        Warmup(_Below(_first), bad)
        raise AssertionError("a warmup_steps that is not an integer >= 0 must be refused with a ValueError")
    except ValueError as err:
        assert "warmup_steps" in str(err), "the error for a bad warmup_steps must name warmup_steps"
for bad in (1 + float(check_rng.uniform(0.01, 1.0)), -float(check_rng.uniform(0.01, 1.0))):
    try:
        Warmup(_Below(_first), _steps, bad)
        raise AssertionError("a start_factor outside [0, 1] must be refused with a ValueError")
    except ValueError as err:
        assert "start_factor" in str(err), "the error for a bad start_factor must name start_factor"
### END HIDDEN TESTS

# %% [markdown]
# ## One cycle
#
# Smith & Topin's *super-convergence* (2018): warm up from a small rate to a
# large peak, then anneal far below where you started, in one cycle over
# the whole run. The large middle acts as a regulariser and the run needs
# fewer steps. The peak is the group's initial lr — the rate you gave the
# optimizer — as PyTorch's `OneCycleLR(optimizer, max_lr=[each group's lr])`.
# With `peak = base_lr`, it has two phases over `total_steps` steps
# (PyTorch's `three_phase=False`):
#
# * rise from `initial = peak / div_factor` to `peak`, over the first
#   `pct_start` of the run: phase 1 ends at step `e1 = pct_start · total_steps - 1`;
# * fall from `peak` to `final = initial / final_div_factor`, ending at
#   step `e2 = total_steps - 1`.
#
# Within a phase from `start` to `end` over steps `[s, e]`, with
# `pct = (t - s) / (e - s)`, the rate is `anneal(start, end, pct)`:
#
# * `anneal="cos"`: `end + (start - end) / 2 · (1 + cos(π · pct))`;
# * `anneal="linear"`: `start + (end - start) · pct`.
#
# Step `t` belongs to phase 1 while `t <= e1` and to phase 2 otherwise. The
# boundary `e1` need not be an integer: PyTorch keeps it fractional, and so
# do we. (When `e1` is exactly 0, phase 1 has no length; PyTorch then divides
# by zero, we start phase 2 at the peak instead.)
#
# The schedule is `total_steps` long: like PyTorch, `lr(t, base_lr)` works up to
# `t = total_steps` (one step past the end, the last phase's formula
# continued) and refuses any later `t` with a `ValueError` — a one-cycle run
# that outlives its plan is a bug worth hearing about.
#
# ### Task `schedulers_onecycle` (3 points): `OneCycle`
#
# **Checked when graded** (besides the tests below), for any total_steps,
# pct_start (phase 1 then ends at a fractional step), div_factor,
# final_div_factor and peak, at every t from 0 to total_steps, each rate to
# within a relative 1e-9:
#
# * anneal='cos': from peak / div_factor up to the peak until step pct_start · total_steps − 1, then down to initial / final_div_factor at step total_steps − 1, both halves of a cosine
# * anneal='linear': the same two phases, each a straight line
# * the defaults are PyTorch's: pct_start=0.3, div_factor=25, final_div_factor=1e4, anneal='cos'
# * each group's initial lr is its own peak: apply gives every group its own cycle
# * a t past total_steps must be refused with a ValueError, as in PyTorch
# * a OneCycle loaded from another's state_dict must give the same rates
# * bad settings must be refused with a ValueError (total_steps 0, pct_start above 1, div_factor 0, an unknown anneal)
# * the error for a bad setting must name the argument

# %% nbgrader={"grade": false, "grade_id": "schedulers_onecycle_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class OneCycle(Scheduler):
    """Up from ``peak / div_factor`` to the peak (the group's initial lr), then far below the start (PyTorch's OneCycleLR)."""

    def __init__(
        self,
        total_steps: int,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        anneal: str = "cos",
    ) -> None:
        self.total_steps = _check_int("OneCycle", "total_steps", total_steps)
        self.pct_start = _check_fraction("OneCycle", "pct_start", pct_start)
        self.div_factor = _check_number("OneCycle", "div_factor", div_factor, strict=True)
        self.final_div_factor = _check_number("OneCycle", "final_div_factor", final_div_factor, strict=True)
        self.anneal = _check_choice("OneCycle", "anneal", anneal, ("cos", "linear"))

    def lr(self, t: int, base_lr: float) -> float:
        """The one-cycle rate at step ``t`` (0 <= t <= total_steps) of a group whose peak is ``base_lr``."""
        t, base_lr = self._args(t, base_lr)
        if t > self.total_steps:
            raise ValueError(f"OneCycle.lr got t={t}; expected t <= total_steps={self.total_steps} (past the schedule's end)")
        ### BEGIN SOLUTION
        initial = base_lr / self.div_factor
        final = initial / self.final_div_factor
        phases = ((float(self.pct_start * self.total_steps) - 1, initial, base_lr),
                  (float(self.total_steps - 1), base_lr, final))
        start_step = 0.0
        for i, (end_step, start_lr, end_lr) in enumerate(phases):
            if t <= end_step or i == len(phases) - 1:
                pct = (t - start_step) / (end_step - start_step) if end_step != start_step else 1.0
                if self.anneal == "cos":
                    return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)
                return (end_lr - start_lr) * pct + start_lr
            start_step = end_step
        ### END SOLUTION


# %%
one = OneCycle(total_steps=20)
print(one, [round(one.lr(t, 0.1), 5) for t in range(0, 21, 2)])

# %% nbgrader={"grade": true, "grade_id": "schedulers_onecycle", "locked": true, "points": 3, "schema_version": 3, "solution": false}
o = OneCycle(total_steps=20)
assert math.isclose(o.lr(0, 0.1), 0.004, rel_tol=1e-12), "starts at the peak / div_factor"
assert math.isclose(o.lr(5, 0.1), 0.1, rel_tol=1e-12), "the peak (base_lr) at the end of phase 1 (0.3 * 20 - 1 = 5)"
assert math.isclose(o.lr(19, 0.1), 0.004 / 1e4, rel_tol=1e-12), "ends at initial / final_div_factor"
assert all(o.lr(t, 0.1) < o.lr(t + 1, 0.1) for t in range(5)), "up every step until step 5"
assert all(o.lr(t, 0.1) > o.lr(t + 1, 0.1) for t in range(5, 19)), "down every step after step 5"
assert math.isclose(o.lr(2, 0.1), 0.1 + (0.004 - 0.1) / 2 * (math.cos(math.pi * 0.4) + 1), rel_tol=1e-12)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the length, pct_start (phase 1 ends at a
# fractional step, after step 0), the two div factors, the peaks of two groups, a t past the end.
def _one_cycle(peak, total, pct=0.3, div=25.0, final_div=1e4, cos=True):
    """PyTorch's OneCycleLR (three_phase=False) at t = 0 .. total, replayed with NumPy."""
    t = np.arange(total + 1)
    end1, end2 = pct * total - 1, total - 1
    initial = peak / div
    up = t <= end1
    pct_in = np.where(up, t / end1, (t - end1) / (end2 - end1))
    start, end = np.where(up, initial, peak), np.where(up, peak, initial / final_div)
    return end + (start - end) / 2 * (1 + np.cos(np.pi * pct_in)) if cos else start + (end - start) * pct_in


_total = int(check_rng.integers(10, 40))
_pct = float(check_rng.uniform(0.15, 0.45))
_div, _final_div = float(check_rng.uniform(5.0, 50.0)), float(10 ** check_rng.uniform(2, 4))
_peak, _peak2 = float(check_rng.uniform(0.01, 0.5)), float(check_rng.uniform(0.0001, 0.005))
_past = _total + int(check_rng.integers(1, 5))
_cycle = OneCycle(_total, _pct, _div, _final_div)
assert np.allclose(np.array([_cycle.lr(t, _peak) for t in range(_total + 1)]), _one_cycle(_peak, _total, _pct, _div, _final_div),
                   rtol=1e-9, atol=1e-15), (
    "anneal='cos': from peak / div_factor up to the peak until step pct_start · total_steps − 1, "
    "then down to initial / final_div_factor at step total_steps − 1, both halves of a cosine"
)
_line = OneCycle(_total, _pct, _div, _final_div, anneal="linear")
assert np.allclose(np.array([_line.lr(t, _peak) for t in range(_total + 1)]),
                   _one_cycle(_peak, _total, _pct, _div, _final_div, cos=False), rtol=1e-9, atol=1e-15), (
    "anneal='linear': the same two phases, each a straight line"
)
assert np.allclose(np.array([OneCycle(_total).lr(t, _peak) for t in range(_total + 1)]), _one_cycle(_peak, _total),
                   rtol=1e-9, atol=1e-15), (
    "the defaults are PyTorch's: pct_start=0.3, div_factor=25, final_div_factor=1e4, anneal='cos'"
)
_groups = _two_groups(_peak, _peak2)
_rates = []
for t in range(_total + 1):
    _cycle.apply(_groups, t)
    _rates.append([group["lr"] for group in _groups.param_groups])
assert np.allclose(np.array(_rates), np.stack([_one_cycle(p, _total, _pct, _div, _final_div) for p in (_peak, _peak2)], axis=1),
                   rtol=1e-9, atol=1e-15), (
    "each group's initial lr is its own peak: apply gives every group its own cycle"
)
try:
    _cycle.lr(_past, _peak)
    raise AssertionError("a t past total_steps must be refused with a ValueError, as in PyTorch")
except ValueError:
    pass
_into = OneCycle(_total + 5)
_into.load_state_dict(json.loads(json.dumps(_line.state_dict())))
assert np.allclose(np.array([_into.lr(t, _peak) for t in range(_total + 1)]),
                   _one_cycle(_peak, _total, _pct, _div, _final_div, cos=False), rtol=1e-9, atol=1e-15), (
    "a OneCycle loaded from another's state_dict must give the same rates"
)
for bad in (dict(total_steps=0), dict(total_steps=_total, pct_start=1 + _pct),
            dict(total_steps=_total, div_factor=0.0), dict(total_steps=_total, anneal="cosine")):
    try:
        OneCycle(**bad)
        raise AssertionError("bad settings must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), "the error for a bad setting must name the argument"
### END HIDDEN TESTS

# %% [markdown]
# ## Cyclical learning rates
#
# Smith (2017): instead of only going down, let the rate bounce in a
# triangle wave between a low and a high rate — up for `step_size_up`
# steps, down for `step_size_down` (default: the same). Steps that are too
# large for the current valley get the model out of sharp minima; it also
# saves tuning, since somewhere in each cycle the rate is about right.
#
# The low end is the group's initial lr; the top is `max_factor` times it
# (`max_factor >= 1`). A top given *relative* to each group keeps the
# groups' ratios all along the wave — an absolute top shared by a group at
# 0.1 and one at 0.001 would not. In PyTorch's terms this is
# `CyclicLR(optimizer, base_lr=[each group's lr], max_lr=[max_factor × each group's lr])`.
#
# With `size = step_size_up + step_size_down`, PyTorch's `CyclicLR` computes
#
# * `cycle = floor(1 + t / size)` (the cycle number, from 1),
#   `x = 1 + t / size - cycle` (where in the cycle, from 0 to 1),
# * `scale = x / r` on the way up (`x <= r`, with `r = step_size_up / size`),
#   `(x - 1) / (r - 1)` on the way down,
# * `lr = base_lr + (max_lr - base_lr) · scale · amplitude`, with
#   `max_lr = max_factor · base_lr`, where the amplitude depends on `mode`:
#   `"triangular"`: 1; `"triangular2"`: `1 / 2 ** (cycle - 1)` (halved each
#   cycle); `"exp_range"`: `gamma ** t` (shrinks every step).
#
# The wave goes on forever. `gamma` (default 1.0) only matters for
# `"exp_range"`. PyTorch's default `step_size_up` is 2000 steps.
#
# ### Task `schedulers_cyclic` (2 points): `CyclicLR`
#
# **Checked when graded** (besides the tests below), for any max_factor,
# gamma, initial lr and step sizes (the way down longer than the way up),
# over three cycles, each rate to within a relative 1e-9:
#
# * triangular: base_lr + (max_lr − base_lr) · scale, up for step_size_up steps, down for step_size_down steps
# * triangular2 halves the amplitude every cycle, the first cycle at full amplitude
# * exp_range scales the amplitude by gamma ** t, t the step index
# * step_size_down defaults to step_size_up
# * gamma only matters for exp_range
# * a CyclicLR loaded from another's state_dict must give the same rates
# * bad settings must be refused with a ValueError (max_factor below 1, a step size of 0, an unknown mode, gamma 0)
# * the error for a bad setting must name the argument

# %% nbgrader={"grade": false, "grade_id": "schedulers_cyclic_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class CyclicLR(Scheduler):
    """A triangle wave between the initial lr and ``max_factor`` times it (PyTorch's CyclicLR, per group)."""

    def __init__(
        self,
        max_factor: float,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
    ) -> None:
        self.max_factor = _check_number("CyclicLR", "max_factor", max_factor, low=1.0)
        self.step_size_up = _check_int("CyclicLR", "step_size_up", step_size_up)
        self.step_size_down = self.step_size_up if step_size_down is None else _check_int(
            "CyclicLR", "step_size_down", step_size_down
        )
        self.mode = _check_choice("CyclicLR", "mode", mode, ("triangular", "triangular2", "exp_range"))
        self.gamma = _check_number("CyclicLR", "gamma", gamma, strict=True)

    def lr(self, t: int, base_lr: float) -> float:
        """The rate at step ``t`` of the triangle wave from ``base_lr`` up to ``max_factor · base_lr``."""
        t, base_lr = self._args(t, base_lr)
        ### BEGIN SOLUTION
        size = float(self.step_size_up + self.step_size_down)
        ratio = self.step_size_up / size
        cycle = math.floor(1 + t / size)
        x = 1.0 + t / size - cycle
        scale = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        if self.mode == "triangular":
            amplitude = 1.0
        elif self.mode == "triangular2":
            amplitude = 1 / (2.0 ** (cycle - 1))
        else:
            amplitude = self.gamma**t
        max_lr = self.max_factor * base_lr
        return base_lr + (max_lr - base_lr) * scale * amplitude
        ### END SOLUTION


# %%
tri = CyclicLR(10.0, step_size_up=4, mode="triangular2")
print(tri, [round(tri.lr(t, 0.01), 4) for t in range(17)])

# %% nbgrader={"grade": true, "grade_id": "schedulers_cyclic", "locked": true, "points": 2, "schema_version": 3, "solution": false}
c1 = CyclicLR(5.0, step_size_up=4)
got = [c1.lr(t, 1.0) for t in range(9)]
assert got == [1.0, 2.0, 3.0, 4.0, 5.0, 4.0, 3.0, 2.0, 1.0], f"one triangle from 1.0 up to 5.0 for t = 0..8 gave {got}"
assert c1.lr(12, 1.0) == 5.0, "the wave goes on"
c2 = CyclicLR(5.0, step_size_up=4, mode="triangular2")
assert c2.lr(4, 1.0) == 5.0 and c2.lr(12, 1.0) == 3.0 and c2.lr(20, 1.0) == 2.0, "triangular2 halves the amplitude every cycle"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the way up and the longer way down, the top as a
# multiple of the initial lr, gamma, and the initial lr.
_up = int(check_rng.integers(1, 5))
_down = _up + int(check_rng.integers(1, 4))
_factor, _gamma = float(check_rng.uniform(2.0, 10.0)), float(check_rng.uniform(0.8, 0.98))
_base = float(check_rng.uniform(0.001, 0.5))


def _wave(up, down, mode="triangular"):
    """PyTorch's CyclicLR over three cycles from _base up to _factor · _base, replayed with NumPy."""
    size = up + down
    t = np.arange(3 * size + 1)
    cycle = np.floor(1 + t / size)
    x = 1 + t / size - cycle
    ratio = up / size
    scale = np.where(x <= ratio, x / ratio, (x - 1) / (ratio - 1))
    amplitude = {"triangular": 1.0, "triangular2": 1 / 2.0 ** (cycle - 1), "exp_range": _gamma**t}[mode]
    return _base + (_factor * _base - _base) * scale * amplitude


_n = 3 * (_up + _down) + 1
assert np.allclose(np.array([CyclicLR(_factor, _up, _down).lr(t, _base) for t in range(_n)]), _wave(_up, _down),
                   rtol=1e-9, atol=0), (
    "triangular: base_lr + (max_lr − base_lr) · scale, up for step_size_up steps, down for step_size_down steps"
)
assert np.allclose(np.array([CyclicLR(_factor, _up, _down, mode="triangular2").lr(t, _base) for t in range(_n)]),
                   _wave(_up, _down, "triangular2"), rtol=1e-9, atol=0), (
    "triangular2 halves the amplitude every cycle, the first cycle at full amplitude"
)
_exp = CyclicLR(_factor, _up, _down, mode="exp_range", gamma=_gamma)
assert np.allclose(np.array([_exp.lr(t, _base) for t in range(_n)]), _wave(_up, _down, "exp_range"), rtol=1e-9, atol=0), (
    "exp_range scales the amplitude by gamma ** t, t the step index"
)
assert np.allclose(np.array([CyclicLR(_factor, _up).lr(t, _base) for t in range(6 * _up + 1)]), _wave(_up, _up),
                   rtol=1e-9, atol=0), (
    "step_size_down defaults to step_size_up"
)
assert np.allclose(np.array([CyclicLR(_factor, _up, _down, gamma=_gamma).lr(t, _base) for t in range(_n)]), _wave(_up, _down),
                   rtol=1e-9, atol=0), (
    "gamma only matters for exp_range"
)
_into = CyclicLR(_factor + 1, _up + 1)
_into.load_state_dict(json.loads(json.dumps(_exp.state_dict())))
assert np.allclose(np.array([_into.lr(t, _base) for t in range(_n)]), _wave(_up, _down, "exp_range"), rtol=1e-9, atol=0), (
    "a CyclicLR loaded from another's state_dict must give the same rates"
)
for bad in (dict(max_factor=float(check_rng.uniform(0.1, 0.9))), dict(step_size_up=0), dict(step_size_down=0),
            dict(mode=("sawtooth", "triangle", "exp")[int(check_rng.integers(0, 3))]), dict(gamma=0.0)):
    try:
        CyclicLR(**{"max_factor": _factor, **bad})
        raise AssertionError("bad settings must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), "the error for a bad setting must name the argument"
### END HIDDEN TESTS

# %% [markdown]
# ## Reduce on plateau: a schedule that listens
#
# All schedules so far are fixed in advance. `ReduceLROnPlateau` watches the
# validation metric instead and cuts the rate by `factor` when the metric has
# stopped improving for more than `patience` epochs. It is the one schedule
# with state: the trainer calls `observe(metric)` once per epoch, and
# `lr(t, base_lr)` is a group's rate after every cut so far, whatever `t`
# (it is there so that every schedule has the same interface).
#
# `observe(metric)` follows PyTorch's `ReduceLROnPlateau.step(metrics)`:
#
# 1. *Better?* In `mode="min"`, with `threshold_mode="rel"`, the metric is
#    better when `metric < best · (1 - threshold)`; with `"abs"`, when
#    `metric < best - threshold`. `mode="max"` mirrors it
#    (`metric > best · (1 + threshold)`, `metric > best + threshold`).
#    `best` starts at `+inf` (`-inf` for `max`). If better: `best = metric`
#    and the bad-epoch count goes to 0; otherwise it goes up by 1. A NaN is
#    never better.
# 2. *Cooling down?* While `cooldown_counter > 0`, count it down by 1 and
#    set the bad-epoch count back to 0 (bad epochs right after a cut do not count).
# 3. *Cut?* When the bad-epoch count exceeds `patience`: count one more cut
#    (`cuts += 1`); then `cooldown_counter = cooldown` and the bad-epoch
#    count goes to 0.
#
# The schedule stores how many cuts there were, not a rate: the rate
# belongs to each group. `lr(t, base_lr)` replays the cuts from `base_lr`,
# as PyTorch does for every group at each cut: the new rate is
# `max(rate · factor, min_lr)`, taken only if it is more than `eps` below the
# old one (so the rate does not creep down by tiny amounts). While `min_lr`
# and `eps` do not bite, that is `base_lr · factor ** cuts`: one factor for
# every group.
#
# `monitor` names the metric a Trainer (module 08) shows it once per epoch:
# a key of the training history such as `"val_acc"` (with `mode="max"`);
# None means the validation loss, or the training loss without validation.
#
# `state_dict()` holds the settings and the running state (`best`,
# `num_bad_epochs`, `cooldown_counter`, `last_epoch`, `cuts`).
#
# ### Task `schedulers_plateau` (3 points): `ReduceLROnPlateau`
#
# **Checked when graded** (besides the tests below), for any patience,
# factor, cooldown, threshold, min_lr, eps and initial lr, on metrics that
# fall by more than the threshold and then stall for at least two cuts; each
# rate after each metric compared with PyTorch's, to within a relative 1e-9:
#
# * a cut (the rate times factor) once the metric has not improved for more than patience epochs, and again after each further patience + 1
# * after a cut, bad epochs during the cooldown do not count
# * never below min_lr: a cut that would pass it stops at min_lr
# * a group already below min_lr is not raised to it
# * a cut of eps or less is skipped
# * a cut too small for one group still applies to a larger one
# * mode='min', threshold_mode='rel': better means metric < best · (1 − threshold)
# * mode='min', threshold_mode='abs': better means metric < best − threshold
# * mode='max', threshold_mode='rel': better means metric > best · (1 + threshold)
# * mode='max', threshold_mode='abs': better means metric > best + threshold
# * a NaN is never better
# * a ReduceLROnPlateau loaded from a state_dict must continue exactly like the original
# * bad settings must be refused with a ValueError (an unknown mode or threshold_mode, factor 1 or more, patience below 0, a fractional cooldown, min_lr below 0)
# * the error for a bad setting must name the argument

# %% nbgrader={"grade": false, "grade_id": "schedulers_plateau_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class ReduceLROnPlateau(Scheduler):
    """Cut the rate by ``factor`` when the observed metric stops improving (PyTorch's ReduceLROnPlateau)."""

    def __init__(
        self,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
        monitor: str | None = None,
    ) -> None:
        owner = "ReduceLROnPlateau"
        self.mode = _check_choice(owner, "mode", mode, ("min", "max"))
        self.factor = _check_fraction(owner, "factor", factor, open_low=True, open_high=True)
        self.patience = _check_int(owner, "patience", patience, low=0)
        self.threshold = _check_number(owner, "threshold", threshold)
        self.threshold_mode = _check_choice(owner, "threshold_mode", threshold_mode, ("rel", "abs"))
        self.cooldown = _check_int(owner, "cooldown", cooldown, low=0)
        self.min_lr = _check_number(owner, "min_lr", min_lr)
        self.eps = _check_number(owner, "eps", eps)
        if monitor is not None and not isinstance(monitor, str):
            raise ValueError(f"{owner} got monitor={brief(monitor)}; expected a history key such as 'val_acc', or None")
        self.monitor = monitor  # what a Trainer shows it (module 08): None means the validation loss, else the training loss
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self.cuts = 0

    def is_better(self, metric: float) -> bool:
        """Whether ``metric`` beats ``best`` by more than the threshold."""
        ### BEGIN SOLUTION
        if self.mode == "min" and self.threshold_mode == "rel":
            return metric < self.best * (1.0 - self.threshold)
        if self.mode == "min":
            return metric < self.best - self.threshold
        if self.threshold_mode == "rel":
            return metric > self.best * (self.threshold + 1.0)
        return metric > self.best + self.threshold
        ### END SOLUTION

    def observe(self, metric: float) -> None:
        """Take one epoch's validation metric; count a cut when it has stalled for more than ``patience`` epochs."""
        try:
            metric = float(metric)
        except (TypeError, ValueError):
            raise ValueError(f"ReduceLROnPlateau.observe got metric={metric!r}; expected a number") from None
        ### BEGIN SOLUTION
        self.last_epoch += 1
        if self.is_better(metric):
            self.best = metric
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self.cuts += 1
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        ### END SOLUTION

    def lr(self, t: int, base_lr: float) -> float:
        """``base_lr`` after every cut so far (``t`` is checked but does not matter)."""
        _, rate = self._args(t, base_lr)
        ### BEGIN SOLUTION
        for _ in range(self.cuts):
            new_lr = max(rate * self.factor, self.min_lr)
            if rate - new_lr > self.eps:
                rate = new_lr
        return rate
        ### END SOLUTION


# %%
plateau = ReduceLROnPlateau(patience=2)
rates = []
for loss in (1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8):
    plateau.observe(loss)
    rates.append(plateau.lr(0, 0.1))
print(plateau.cuts, rates)

# %% nbgrader={"grade": true, "grade_id": "schedulers_plateau", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _feed(sched, metrics, base_lr=1.0):
    """The rate of a group at ``base_lr`` after each metric."""
    rates = []
    for m in metrics:
        sched.observe(m)
        rates.append(sched.lr(0, base_lr))
    return rates


p = ReduceLROnPlateau(patience=2)
assert p.lr(0, 1.0) == 1.0 and p.cuts == 0
rates = _feed(p, (1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8))
expected = [1.0, 1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.01]
assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(rates, expected, strict=True)), (
    f"patience=2: expected the rates {expected}; got {rates}"
)
assert p.cuts == 2 and p.lr(123, 1.0) == p.lr(0, 1.0), "lr(t, base_lr) is the rate after every cut, whatever t"
assert math.isclose(p.lr(0, 0.5), 0.005, rel_tol=1e-12), "every group is cut by the same factors"
up = ReduceLROnPlateau(mode="max", patience=0, factor=0.5)
got = _feed(up, (0.5, 0.6, 0.6, 0.7, 0.65))
assert got == [1.0, 1.0, 0.5, 0.5, 0.25], f"mode='max', patience=0: expected [1.0, 1.0, 0.5, 0.5, 0.25]; got {got}"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: patience, cooldown, factor, thresholds, floors and
# initial lrs, and metrics that fall by more than the threshold, then stall long enough for two cuts.
def _replay(metrics, base, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
            cooldown=0, min_lr=0.0, eps=1e-8):
    """PyTorch's ReduceLROnPlateau.step replayed: the rate of a group at ``base`` after each metric."""
    best, bad, cooling, rate, rates = (math.inf if mode == "min" else -math.inf), 0, 0, base, []
    for metric in metrics:
        if mode == "min":
            better = metric < (best * (1 - threshold) if threshold_mode == "rel" else best - threshold)
        else:
            better = metric > (best * (1 + threshold) if threshold_mode == "rel" else best + threshold)
        best, bad = (metric, 0) if better else (best, bad + 1)
        if cooling > 0:
            cooling, bad = cooling - 1, 0
        if bad > patience:
            rate = max(rate * factor, min_lr) if rate - max(rate * factor, min_lr) > eps else rate
            cooling, bad = cooldown, 0
        rates.append(rate)
    return np.array(rates)


_patience, _cooldown = int(check_rng.integers(1, 4)), int(check_rng.integers(1, 4))
_factor, _base = float(check_rng.uniform(0.2, 0.7)), float(check_rng.uniform(0.01, 1.0))
_first = float(check_rng.uniform(1.0, 5.0))
_falls = [float(m) for m in _first * np.cumprod(check_rng.uniform(0.5, 0.9, int(check_rng.integers(1, 4))))]
_metrics = [_first, *_falls] + [_falls[-1]] * (3 * (_patience + _cooldown + 1))
_settings = dict(factor=_factor, patience=_patience)
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_settings), _metrics, _base)), _replay(_metrics, _base, **_settings),
                   rtol=1e-9, atol=0), (
    "a cut (the rate times factor) once the metric has not improved for more than patience epochs, "
    "and again after each further patience + 1"
)
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_settings, cooldown=_cooldown), _metrics, _base)),
                   _replay(_metrics, _base, **_settings, cooldown=_cooldown), rtol=1e-9, atol=0), (
    "after a cut, bad epochs during the cooldown do not count"
)
_floor = _base * _factor**1.5
_low = ReduceLROnPlateau(**_settings, min_lr=_floor)
assert np.allclose(np.array(_feed(_low, _metrics, _base)), _replay(_metrics, _base, **_settings, min_lr=_floor), rtol=1e-9, atol=0), (
    "never below min_lr: a cut that would pass it stops at min_lr"
)
assert np.allclose(_low.lr(0, _floor / 2), _floor / 2, rtol=1e-9, atol=0), "a group already below min_lr is not raised to it"
_eps = float(10 ** check_rng.uniform(-9, -6))
_tiny = _eps * float(check_rng.uniform(0.5, 0.95)) / (1 - _factor)
_fine = ReduceLROnPlateau(**_settings, eps=_eps)
assert np.allclose(np.array(_feed(_fine, _metrics, _tiny)), _replay(_metrics, _tiny, **_settings, eps=_eps), rtol=1e-9, atol=0), (
    "a cut of eps or less is skipped"
)
assert np.allclose(_fine.lr(0, _base), _replay(_metrics, _base, **_settings, eps=_eps)[-1], rtol=1e-9, atol=0), (
    "a cut too small for one group still applies to a larger one"
)
_threshold = float(check_rng.uniform(0.05, 0.2))
_short, _long = float(check_rng.uniform(0.2, 0.8)), float(check_rng.uniform(1.2, 1.8))


def _edge(mode, threshold_mode):
    """A best metric, one that improves on it by less than the threshold, then one by more; the
    settings (patience 0)."""
    sign = -1 if mode == "min" else 1
    metrics = [_first * (1 + sign * _threshold * k) if threshold_mode == "rel" else _first + sign * _threshold * k
               for k in (0.0, _short, _long)]
    return metrics, dict(mode=mode, threshold=_threshold, threshold_mode=threshold_mode, factor=_factor, patience=0)


_edges, _kind = _edge("min", "rel")
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_kind), _edges, _base)), _replay(_edges, _base, **_kind), rtol=1e-9, atol=0), (
    "mode='min', threshold_mode='rel': better means metric < best · (1 − threshold)"
)
_edges, _kind = _edge("min", "abs")
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_kind), _edges, _base)), _replay(_edges, _base, **_kind), rtol=1e-9, atol=0), (
    "mode='min', threshold_mode='abs': better means metric < best − threshold"
)
_edges, _kind = _edge("max", "rel")
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_kind), _edges, _base)), _replay(_edges, _base, **_kind), rtol=1e-9, atol=0), (
    "mode='max', threshold_mode='rel': better means metric > best · (1 + threshold)"
)
_edges, _kind = _edge("max", "abs")
assert np.allclose(np.array(_feed(ReduceLROnPlateau(**_kind), _edges, _base)), _replay(_edges, _base, **_kind), rtol=1e-9, atol=0), (
    "mode='max', threshold_mode='abs': better means metric > best + threshold"
)
_nan = [float("nan"), _first, float("nan")]
assert np.allclose(np.array(_feed(ReduceLROnPlateau(factor=_factor, patience=0), _nan, _base)),
                   _replay(_nan, _base, factor=_factor, patience=0), rtol=1e-9, atol=0), (
    "a NaN is never better"
)
_split = int(check_rng.integers(2, len(_metrics) - 2))
_half = ReduceLROnPlateau(**_settings, cooldown=_cooldown)
_feed(_half, _metrics[:_split], _base)
_resumed = ReduceLROnPlateau(mode="max")
_resumed.load_state_dict(json.loads(json.dumps(_half.state_dict())))
assert np.allclose(np.array(_feed(_resumed, _metrics[_split:], _base)),
                   _replay(_metrics, _base, **_settings, cooldown=_cooldown)[_split:], rtol=1e-9, atol=0), (
    "a ReduceLROnPlateau loaded from a state_dict must continue exactly like the original"
)
for bad in (dict(mode=("lowest", "minimum", "down")[int(check_rng.integers(0, 3))]),
            dict(factor=1 + float(check_rng.uniform(0.0, 1.0))), dict(patience=-int(check_rng.integers(1, 5))),
            dict(threshold_mode=("relative", "absolute")[int(check_rng.integers(0, 2))]),
            dict(cooldown=_cooldown + 0.5), dict(min_lr=-_floor)):
    try:
        ReduceLROnPlateau(**bad)
        raise AssertionError("bad settings must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), "the error for a bad setting must name the argument"
### END HIDDEN TESTS

# %% [markdown]
# ## Every schedule on one page
#
# The same 100 steps, drawn by each schedule for a group whose initial lr is
# 0.1 (the plateau one fed a loss that stalls). The differences that matter
# show at a glance: where the rate is large, how fast it falls, whether it
# ever comes back up.

# %%
import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # no window outside a notebook
import matplotlib.pyplot as plt

steps = range(100)
stalling = ReduceLROnPlateau(patience=5)
stalling_rates = []
for t in steps:
    stalling.observe(max(1.0 - 0.02 * t, 0.6))
    stalling_rates.append(stalling.lr(t, 0.1))
gallery = {
    "StepLR(30)": StepLR(30),
    "MultiStepLR([50, 80])": MultiStepLR([50, 80]),
    "ExponentialLR(0.97)": ExponentialLR(0.97),
    "CosineAnnealing(100)": CosineAnnealing(100),
    "Warmup(Cosine(90), 10)": Warmup(CosineAnnealing(90), 10, 0.0),
    "OneCycle(100)": OneCycle(100),
    "CyclicLR(10, 10) triangular2": CyclicLR(10.0, 10, mode="triangular2"),
}
curves = {title: [sched.lr(t, 0.1) for t in steps] for title, sched in gallery.items()}
curves["ReduceLROnPlateau (stalls)"] = stalling_rates
fig, axes = plt.subplots(2, 4, figsize=(12, 5), sharex=True)
for ax, (title, rates) in zip(axes.flat, curves.items(), strict=True):
    ax.plot(list(steps), rates)
    ax.set_title(title, fontsize=9)
fig.supxlabel("step t")
fig.supylabel("learning rate (initial lr 0.1)")
fig.tight_layout()
if matplotlib.get_backend().lower() == "agg":
    plt.close(fig)  # plt.show() would only warn that Agg cannot show anything
else:
    plt.show()

# %% [markdown]
# And on an optimizer: two groups, one at 0.1 and one at 0.001, under a
# warm-up and a cosine. `apply` keeps their ratio of 100 at every step.

# %%
groups = _two_groups(0.1, 0.001)
schedule = Warmup(CosineAnnealing(total=8), warmup_steps=2)
for t in range(10):
    schedule.apply(groups, t)
    fast, slow = (group["lr"] for group in groups.param_groups)
    print(f"t={t}: {fast:.5f} {slow:.7f} ratio {fast / slow:.1f}")

# %% [markdown]
# ## Systems corner
#
# * **One owner.** The rate is stated once, in the optimizer; a schedule is
#   a shape, and a checkpoint stores each group's rate once, in the
#   optimizer's state. A schedule that carried its own `base_lr` would state
#   it twice — and setting one number into every group would flatten a
#   model's per-group rates into one.
# * **A function, not a counter.** PyTorch's schedulers keep `last_epoch`
#   and change the optimizer's learning rate in place on every `step()`; the
#   value at step `t` then depends on every earlier call (and, for the
#   chainable forms, on rounding errors and on any other scheduler touching
#   the same optimizer). Here `lr(t, base_lr)` is a pure function: resuming a
#   run needs only `t` and the schedule's settings, and a plot is a list
#   comprehension. Only `ReduceLROnPlateau` has state, because its input —
#   the validation metric — is only known as training goes.
# * **Cost.** A schedule is a few floating-point operations per group once
#   per step: nothing next to a forward pass. Set the learning rate as a
#   Python float on the host — on a GPU, putting it in a device array would
#   cost a host-to-device copy per step, and reading the validation metric
#   back for `observe` is a device-to-host sync: do it once per epoch, not
#   per batch.
# * **Steps or epochs.** The same schedule object works for either; what
#   changes is the unit of `t` and so the numbers you give it: a cosine over
#   `total = epochs × batches_per_epoch` steps when the trainer steps it per
#   batch, over `total = epochs` when per epoch. Per-step schedules (warm-up,
#   one-cycle, cyclic) are smoother; per-epoch ones are the classic recipes.
# * **Large batches.** The linear scaling rule (Goyal et al., 2017): when the
#   batch grows `k`-fold, multiply the learning rate by `k` — and warm up,
#   because a large rate on random weights diverges. That is why data-parallel
#   training (module 12) almost always pairs with `Warmup`.
