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
assert ExponentialLR(0.9).lr(0, 0.1) == 0.1, "ExponentialLR starts at the group's initial lr (gamma ** 0 at t = 0)"
assert math.isclose(StepLR(1, 2.0).lr(4, 2.0), 32.0), "gamma > 1 is allowed: StepLR(1, gamma=2.0).lr(4, 2.0) is 32"
assert math.isclose(StepLR(4).lr(11, 1.0), 0.01, rel_tol=1e-12), "StepLR(4).lr(11, 1.0): two steps of the default gamma 0.1"
assert StepLR(3, 0.5).lr(5, 0.001) == 0.0005 and ExponentialLR(0.5).lr(2, 0.4) == 0.1, (
    "the rate scales the base_lr it is given, whatever it is"
)
for sched, again in ((StepLR(3, 0.5), StepLR(1)), (ExponentialLR(0.9), ExponentialLR(0.5))):
    again.load_state_dict(json.loads(json.dumps(sched.state_dict())))
    assert [again.lr(t, 0.1) for t in range(10)] == [sched.lr(t, 0.1) for t in range(10)], (
        f"a {type(sched).__name__} loaded from another's state_dict must give the same rates"
    )
for make, name in ((lambda: StepLR(0), "step_size"), (lambda: StepLR(2.5), "step_size"),
                   (lambda: StepLR("3"), "step_size"), (lambda: StepLR(3, gamma=0.0), "gamma"),
                   (lambda: StepLR(3, gamma="0.5"), "gamma"), (lambda: ExponentialLR(-0.5), "gamma"),
                   (lambda: ExponentialLR(0.0), "gamma")):
    try:
        make()
        raise AssertionError(f"a bad {name} must be refused with a ValueError")
    except ValueError as err:
        assert name in str(err), f"the error for a bad {name} must name it; got: {err}"
try:
    StepLR(3).lr(-1, 0.1)
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
assert math.isclose(MultiStepLR([2, 5]).lr(100, 1.0), 0.01, rel_tol=1e-12), "after the last milestone the rate stays put"
assert math.isclose(MultiStepLR([3, 3]).lr(3, 1.0), 0.01, rel_tol=1e-12), "a repeated milestone applies gamma twice"
assert MultiStepLR([3, 3]).lr(2, 1.0) == 1.0, "before a milestone the rate is untouched"
assert MultiStepLR([]).lr(50, 1.0) == 1.0, "no milestones: the rate never changes"
assert MultiStepLR([0]).lr(0, 1.0) == 0.1, "a milestone at 0 applies from the very first index"
assert MultiStepLR([2], 0.5).lr(2, 0.002) == 0.001, "the rate scales the base_lr it is given"
again = MultiStepLR([1])
again.load_state_dict(json.loads(json.dumps(MultiStepLR([2, 5], 0.5).state_dict())))
assert [again.lr(t, 1.0) for t in range(10)] == [MultiStepLR([2, 5], 0.5).lr(t, 1.0) for t in range(10)], (
    "a MultiStepLR loaded from another's state_dict must give the same rates"
)
for make, name in ((lambda: MultiStepLR([5, 2]), "milestones"), (lambda: MultiStepLR([-1]), "milestones"),
                   (lambda: MultiStepLR([1.5]), "milestones"), (lambda: MultiStepLR([2], gamma=0.0), "gamma")):
    try:
        make()
        raise AssertionError(f"a bad {name} must be refused with a ValueError")
    except ValueError as err:
        assert name in str(err), f"the error for a bad {name} must name it; got: {err}"
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
assert math.isclose(c.lr(3, 0.1), 0.001 + 0.099 * (1 + math.cos(math.pi * 0.3)) / 2, rel_tol=1e-12), (
    f"CosineAnnealing(total=10, min_lr=0.001).lr(3, 0.1) must follow the formula; got {c.lr(3, 0.1)}"
)
assert math.isclose(c.lr(15, 0.1), c.lr(5, 0.1), rel_tol=1e-12) and math.isclose(c.lr(20, 0.1), 0.1, rel_tol=1e-12), (
    "the cosine goes on after total"
)
assert math.isclose(CosineAnnealing(4).lr(4, 2.0), 0.0, abs_tol=1e-15), "min_lr defaults to 0"
assert math.isclose(c.lr(5, 0.5), (0.5 + 0.001) / 2, rel_tol=1e-12), "each base_lr starts its own cosine down to min_lr"
assert CosineSchedule(0.1, 0.01, 100).get_lr(150) == 0.01, "TinyTorch's schedule stays at min_lr"
copy_of = CosineAnnealing(3)
copy_of.load_state_dict(json.loads(json.dumps(c.state_dict())))
assert [copy_of.lr(t, 0.1) for t in range(12)] == [c.lr(t, 0.1) for t in range(12)], (
    "a CosineAnnealing loaded from another's state_dict must give the same rates"
)
for bad in (dict(total=0), dict(total=2.5), dict(total=10, min_lr=-1.0), dict(total=10, min_lr="0")):
    try:
        CosineAnnealing(**bad)
        raise AssertionError(f"CosineAnnealing({bad}) must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), f"the error for CosineAnnealing({bad}) must name the argument; got: {err}"
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_total = int(check_rng.integers(5, 50))
_rs_t = int(check_rng.integers(0, _rs_total + 1))
_rs_base, _rs_min = float(check_rng.uniform(0.01, 1.0)), float(check_rng.uniform(0.0, 0.005))
assert math.isclose(CosineAnnealing(total=_rs_total, min_lr=_rs_min).lr(_rs_t, _rs_base),
                    _rs_min + (_rs_base - _rs_min) * (1 + math.cos(math.pi * _rs_t / _rs_total)) / 2, rel_tol=1e-9), (
    "min_lr + (base − min_lr)(1 + cos(πt/total))/2, for any t, total and rates")
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
assert math.isclose(Warmup(Halving(), 3).lr(2, 0.3), 0.3 * (1 / 3 + (2 / 3) * (2 / 3)), rel_tol=1e-12), (
    "with start_factor 1/3, step 2 of 3 is base_lr · (1/3 + (2/3) · (2/3))"
)
assert math.isclose(Warmup(Halving(), 4, 0.5).lr(4, 0.4), 0.4, rel_tol=1e-12), "at t = warmup_steps the wrapped schedule takes over"
assert math.isclose(w.lr(2, 0.001), 0.0004, rel_tol=1e-12) and w.lr(6, 0.001) == 0.0005, (
    "the ramp and the wrapped schedule both scale the base_lr they are given"
)
no_warmup = Warmup(Halving(), 0)
assert [no_warmup.lr(t, 0.1) for t in range(12)] == [Halving().lr(t, 0.1) for t in range(12)], (
    "warmup_steps=0 means no warm-up: the wrapped schedule from t = 0"
)
nested = Warmup(Warmup(CosineAnnealing(10), 2), 3)
state = json.loads(json.dumps(nested.state_dict()))
back = Warmup(Warmup(CosineAnnealing(1), 1, 0.5), 1, 0.5)
back.load_state_dict(state)
assert [back.lr(t, 0.1) for t in range(30)] == [nested.lr(t, 0.1) for t in range(30)], (
    "the wrapped schedule's state comes back too"
)
for bad in (dict(warmup_steps=-1), dict(warmup_steps=2.5), dict(warmup_steps=3, start_factor=1.5),
            dict(warmup_steps=3, start_factor=-0.1)):
    try:
        Warmup(Halving(), **bad)
        raise AssertionError(f"Warmup({bad}) must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), f"the error for Warmup({bad}) must name the argument; got: {err}"
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
# PyTorch's OneCycleLR(max_lr=0.1, total_steps=20), and with anneal_strategy="linear", pct_start=0.25
assert math.isclose(o.lr(12, 0.1), 0.0500002, rel_tol=1e-10), "halfway down phase 2"
assert math.isclose(o.lr(20, 0.1), 0.0012539993764912555, rel_tol=1e-10), "t = total_steps still works"
assert math.isclose(o.lr(12, 0.001), 0.000500002, rel_tol=1e-10), "each group's initial lr is its own peak"
lin = OneCycle(total_steps=10, pct_start=0.25, anneal="linear")
assert math.isclose(lin.lr(1, 1.0), 0.04 + 0.96 / 1.5, rel_tol=1e-12), "phase 1 ends at the fractional step 1.5"
assert math.isclose(lin.lr(2, 1.0), 1.0 + (0.04 / 1e4 - 1.0) * (0.5 / 7.5), rel_tol=1e-12), (
    "anneal='linear': phase 2 runs from the fractional step 1.5 to step 9"
)
try:
    o.lr(21, 0.1)
    raise AssertionError("a t past total_steps must be refused with a ValueError, as in PyTorch")
except ValueError:
    pass
for bad in (dict(total_steps=0), dict(total_steps=10, pct_start=1.5), dict(total_steps=10, anneal="cosine"),
            dict(total_steps=10, div_factor=0.0)):
    try:
        OneCycle(**bad)
        raise AssertionError(f"OneCycle({bad}) must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), f"the error for OneCycle({bad}) must name the argument; got: {err}"
back = OneCycle(5)
back.load_state_dict(json.loads(json.dumps(lin.state_dict())))
assert [back.lr(t, 1.0) for t in range(11)] == [lin.lr(t, 1.0) for t in range(11)], (
    "a OneCycle loaded from another's state_dict must give the same rates"
)
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
c3 = CyclicLR(4.0, step_size_up=1, step_size_down=3)
assert [c3.lr(t, 1.0) for t in range(5)] == [1.0, 4.0, 3.0, 2.0, 1.0], (
    f"step_size_up=1, step_size_down=3: one step up, three steps down; got {[c3.lr(t, 1.0) for t in range(5)]}"
)
c4 = CyclicLR(11.0, step_size_up=2, mode="exp_range", gamma=0.9)
assert math.isclose(c4.lr(2, 0.1), 0.1 + 0.81, rel_tol=1e-12) and math.isclose(c4.lr(6, 0.1), 0.1 + 0.9**6, rel_tol=1e-12), (
    "exp_range scales the amplitude by gamma ** t, t the step index"
)
assert math.isclose(c1.lr(2, 0.001), 0.003, rel_tol=1e-12), "the wave of a group at 0.001 runs from 0.001 to 0.005"
assert CyclicLR(2.0, step_size_up=2, gamma=0.5).lr(6, 1.0) == 2.0, "gamma only matters for exp_range"
back = CyclicLR(2.0, 1)
back.load_state_dict(json.loads(json.dumps(c4.state_dict())))
assert [back.lr(t, 0.1) for t in range(20)] == [c4.lr(t, 0.1) for t in range(20)], (
    "a CyclicLR loaded from another's state_dict must give the same rates"
)
for bad in (dict(max_factor=0.5), dict(step_size_up=0), dict(step_size_down=0), dict(mode="sawtooth"), dict(gamma=0.0)):
    try:
        CyclicLR(**{**dict(max_factor=10.0), **bad})
        raise AssertionError(f"CyclicLR({bad}) must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), f"the error for CyclicLR({bad}) must name the argument; got: {err}"
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
cool = ReduceLROnPlateau(patience=0, cooldown=2, factor=0.5)
assert _feed(cool, [1.0] * 7) == [1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25], (
    "after a cut, bad epochs during the cooldown do not count"
)
floor = ReduceLROnPlateau(patience=0, factor=0.1, min_lr=0.05)
assert _feed(floor, [1.0] * 4) == [1.0, 0.1, 0.05, 0.05], "never below min_lr"
assert floor.lr(0, 0.01) == 0.01, "a group already below min_lr is not raised to it"
tiny = ReduceLROnPlateau(patience=0, factor=0.5)
assert _feed(tiny, [1.0] * 3, base_lr=1e-8) == [1e-8, 1e-8, 1e-8], "cuts smaller than eps are skipped"
assert tiny.lr(0, 1.0) == 0.25, "a cut too small for one group still applies to a larger one"
rel = ReduceLROnPlateau(patience=0, threshold=0.1)
assert _feed(rel, (1.0, 0.95, 0.8)) == [1.0, 0.1, 0.1], "0.95 is not 10% better than 1.0"
absolute = ReduceLROnPlateau(patience=0, threshold=0.1, threshold_mode="abs")
assert _feed(absolute, (5.0, 4.95, 4.8)) == [1.0, 0.1, 0.1], (
    "mode='min', threshold_mode='abs': 4.95 is not 0.1 below 5.0, 4.8 is"
)
absolute_max = ReduceLROnPlateau(mode="max", patience=0, threshold=0.1, threshold_mode="abs")
assert _feed(absolute_max, (5.0, 5.05, 5.2)) == [1.0, 0.1, 0.1], (
    "mode='max', threshold_mode='abs': 5.05 is not 0.1 above 5.0, 5.2 is"
)
relative_max = ReduceLROnPlateau(mode="max", patience=0, threshold=0.1)
assert _feed(relative_max, (1.0, 1.05, 1.2)) == [1.0, 0.1, 0.1], (
    "mode='max', threshold_mode='rel': 1.05 is not 10% above 1.0, 1.2 is"
)
nan = ReduceLROnPlateau(patience=0)
assert _feed(nan, (float("nan"), 1.0)) == [0.1, 0.1], "a NaN is never better"
half = ReduceLROnPlateau(patience=1)
_feed(half, (1.0, 2.0))
saved = json.loads(json.dumps(half.state_dict()))
resumed = ReduceLROnPlateau(mode="max")
resumed.load_state_dict(saved)
assert _feed(resumed, (2.0, 2.0, 2.0)) == _feed(half, (2.0, 2.0, 2.0)), (
    "a ReduceLROnPlateau loaded from a state_dict must continue exactly like the original"
)
for bad in (dict(mode="lowest"), dict(factor=1.0), dict(patience=-1), dict(threshold_mode="relative"),
            dict(cooldown=1.5), dict(min_lr=-1.0)):
    try:
        ReduceLROnPlateau(**bad)
        raise AssertionError(f"ReduceLROnPlateau({bad}) must be refused with a ValueError")
    except ValueError as err:
        assert any(name in str(err) for name in bad), (
            f"the error for ReduceLROnPlateau({bad}) must name the argument; got: {err}"
        )
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
