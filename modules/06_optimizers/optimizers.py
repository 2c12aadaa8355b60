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
# # Module 06 — Optimizers
#
# Backward leaves a gradient in every parameter's `.grad`. An optimizer turns
# those gradients into a change of the parameters. Every optimizer here is an
# *elementwise* rule: each number of a parameter is updated from the same
# number of its gradient and of a few running averages the optimizer keeps
# (its *state*). That one fact shapes the whole module:
#
# * the rule is written once, against whole arrays, as `_update(p, g, state,
#   group, xp)` (`xp`: NumPy, or CuPy on a GPU) — it changes `p` and the
#   state arrays in place;
# * the teaching version calls it once per parameter tensor;
# * the fast version calls the same rule on one flat buffer that holds every
#   parameter of the group back to back (the parameters become views into
#   it), a few large blocks at a time, so a step is a handful of whole-buffer
#   NumPy operations instead of a Python loop that does them for each of 100
#   small tensors.
#
# | task | points | what |
# |---|---|---|
# | `optim_optimizer` | 3 | the base: parameter groups (each with its `initial_lr`), `step` skipping frozen and grad-less parameters, `zero_grad`, `set_lr` |
# | `optim_sgd` | 3 | SGD with momentum, dampening, Nesterov and weight decay |
# | `optim_adam` | 4 | Adam (with AMSGrad) and AdamW (decoupled weight decay), without temporary arrays |
# | `optim_rmsprop` | 2 | RMSprop (momentum, centered) |
# | `optim_adagrad` | 2 | Adagrad (lr decay, initial accumulator) |
# | `optim_radam` | 2 | RAdam: Adam with a rectified warm-up |
# | `optim_nadam` | 2 | NAdam: Adam with Nesterov momentum |
# | `optim_flat` | 1 | the flat buffer: a group's parameters become views of one array |
# | `optim_flat_step` | 2 | the flat step: one vectorised update per block of the buffer |
# | `optim_state_dict` | 1 | `state_dict`: the state as plain numbers and copies |
# | `optim_load_state_dict` | 2 | `load_state_dict`: an exact resume, in either layout |
#
# The update rules and defaults are PyTorch's, to the last term: the tests
# replay 20-step trajectories recorded from `torch.optim`.

# %%
#| default_exp core.optim

# %%
#| export
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from tinyflo.core.layers import check_arg
from tinyflo.core.tensor import Tensor, brief, described, is_array, to_host

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.optim: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.optim"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
from tinyflo.core.layers import Parameter


def _close(a, b, atol=1e-6):
    return np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=atol, rtol=0)


def _steps(cls, p0, grads, **settings):
    """A parameter that starts at ``p0``, after ``cls([p], **settings)`` took one step per row of ``grads``."""
    p = Parameter(p0.copy())
    opt = cls([p], **settings)
    for g in grads:
        p.grad = Tensor(g.copy())
        opt.step()
    return p.data


# %% [markdown]
# ## The optimizer base
#
# `Optimizer(params, defaults)` takes the parameters — an iterable of
# `Parameter`s, or of dicts that are *parameter groups* — and a dict of the
# optimizer's hyper-parameters with their default values. Each group is a dict
# with `"params"` (a list) and every hyper-parameter: what a group sets wins,
# the rest comes from `defaults`. That is how a model gives its biases no
# weight decay, or its last layer a larger learning rate:
#
# ```python
# AdamW([{"params": weights}, {"params": biases, "weight_decay": 0.0}], lr=1e-3)
# ```
#
# **The learning rate has one owner: the group.** Each group's rate is
# stated here, once, and the group also records it as `"initial_lr"`
# (PyTorch's key) when it is made. A schedule (module 07) never states a rate
# of its own: it sets each group's `"lr"` from that group's `"initial_lr"`,
# so a last layer at 10× keeps its 10× under every schedule.
#
# * `state` maps each parameter to its own dict: `"step"` (how many updates
#   it has had) and the arrays the rule keeps, made by
#   `_new_state(p.data, group, xp)`.
# * The rules work on raw arrays; `xp` is the parameter's array library,
#   `p.device.xp` (NumPy, or CuPy for a parameter on a GPU): module 01's
#   `Device` is the one place that decides, and nothing here guesses it
#   from an array's type.
# * `step()` visits every parameter of every group (but a flat one, see
#   below), **skipping** those that
#   are frozen (`requires_grad=False`) or got no gradient (`grad is None`):
#   for them nothing changes, not even the step count. For the others it
#   adds 1 to `"step"` and calls `self._update(p.data, p.grad.data, state,
#   group, p.device.xp)`.
# * `zero_grad(set_to_none=True)` forgets every gradient (`grad = None`,
#   which frees the memory and lets the next backward store a fresh array);
#   with `set_to_none=False` it writes zeros into the existing arrays.
# * `set_lr(lr)` sets `"lr"` of every group to one number: an explicit
#   action for a user who wants that (each group's `"initial_lr"` stays; a
#   schedule applied later starts from it again). Nothing in tinyflo needs it.
# * `add_param_group(group)` checks the group: a parameter may appear in only
#   one group, once; the group gets every missing hyper-parameter from
#   `defaults` and `"initial_lr"` from its `"lr"` (unless it brings its own);
#   hyper-parameters are checked by `_check(group)`, which each optimizer
#   writes, so `lr=-1` or `lr="0.1"` is an error that names `lr`.
# * A group made with `flat=True` keeps its parameters in one buffer (the
#   tasks after NAdam build it). The lines that hand such a group over are
#   given in the cell, outside your code: `self._flat` (a group's index ->
#   its buffer) exists before your `__init__` code runs, `add_param_group`
#   ends by calling `_flatten_group` for a flat group, and `step()` calls
#   `_flat_step` for each group in `self._flat` instead of your loop. Your
#   code needs neither name.
#
# ### Task `optim_optimizer` (3 points): parameter groups and the step loop
#
# **Checked when graded** (besides the tests below):
#
# * a parameter without a gradient is skipped: its values and its step count stay as they were
# * every step adds 1 to the step count of each parameter it updates and moves it by its group's lr times its gradient
# * `zero_grad(set_to_none=False)` writes zeros into the existing gradient arrays
# * `set_lr` sets the lr of every group
# * `set_lr` leaves each group's `initial_lr` as it was
# * `add_param_group` appends the group with its own lr
# * `add_param_group` records the new group's lr as its `initial_lr`
# * a group without its own lr takes the default lr, as lr and `initial_lr`
# * an empty parameter list must be refused with a ValueError
# * a parameter in two groups must be refused with a ValueError
# * a negative lr must be refused with a ValueError
# * the error for a negative lr must name lr

# %% nbgrader={"grade": false, "grade_id": "optim_optimizer_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _require(owner: str, name: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{owner} got {name}={brief(value)}; expected {expected}")


def _check_params(owner: str, params: Any) -> None:
    """An optimizer's first argument is what ``model.parameters()`` gives (or a list of groups): say so to
    one given the model, the method uncalled, or something that is no list of parameters at all."""
    if hasattr(params, "parameters") and callable(params.parameters):
        raise TypeError(f"{owner}: params must be the model's parameters, {owner}(model.parameters(), ...); "
                        f"got the {type(params).__name__} itself")
    if callable(params):
        raise TypeError(f"{owner}: params must be model.parameters(), called (with the brackets); got the function "
                        f"{getattr(params, '__qualname__', brief(params))} itself")
    if isinstance(params, dict):
        raise TypeError(f"{owner}: params must be an iterable of Parameters (model.parameters()) or a list of "
                        "groups; got a dict: a group goes in a list, [{'params': ..., 'lr': ...}]")
    if not isinstance(params, Iterable) or isinstance(params, str) or is_array(params):
        raise TypeError(f"{owner}: params must be an iterable of Parameters (model.parameters()) or a list of "
                        f"groups; got {described(params)}")


def _is_number(value: Any) -> bool:
    """A real number (a bool is not one)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_settings(owner: str, group: dict, expected: str, *names: str) -> None:
    """Each setting ``names`` of ``group`` is what ``expected`` says (module 03's ``check_arg``)."""
    for name in names:
        check_arg(owner, name, group[name], expected)


def _betas(owner: str, group: dict) -> None:
    betas = group["betas"]
    _require(owner, "betas", betas, isinstance(betas, tuple) and len(betas) == 2, "a pair (beta1, beta2)")
    for i, beta in enumerate(betas):
        _require(owner, f"betas[{i}]", beta, _is_number(beta) and 0.0 <= beta < 1.0, "a number in [0, 1)")


def _pair(value: Any) -> Any:
    """``betas`` as a tuple when it is a list or tuple (JSON brings tuples back as lists); anything else as it came."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


class Optimizer:
    """Base class: parameter groups, per-parameter state, and the step loop over parameters."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        _check_params(type(self).__name__, params)
        self._flat: dict[int, _FlatGroup] = {}  # index of a group made with flat=True -> its buffer
        ### BEGIN SOLUTION
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(f"{name} expects an iterable of Parameters or of dicts; got one {type(params).__name__}")
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}
        params = list(params)
        if not params:
            raise ValueError(f"{name} got an empty parameter list; pass model.parameters() or a list of groups")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)
        ### END SOLUTION

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyper-parameters (the rest from ``defaults``)."""
        ### BEGIN SOLUTION
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}.add_param_group expects a dict with 'params'; got {group!r:.80}")
        group = dict(group)
        params = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
        if not params:
            raise ValueError(f"{name}: parameter group {len(self.param_groups)} has no parameters")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: parameter {i} of group {len(self.param_groups)} is a {type(p).__name__}, not a Tensor")
            if id(p) in seen:
                raise ValueError(f"{name}: parameter {i} of group {len(self.param_groups)} (shape {p.shape}) "
                                 "appears twice; a parameter may be in only one group, once")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise TypeError(f"{name}: unknown hyper-parameter(s) {sorted(unknown)}; expected some of {sorted(self.defaults)}")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        group.setdefault("initial_lr", group["lr"])
        group["params"] = params
        self._check(group)
        self.param_groups.append(group)
        ### END SOLUTION
        if self.param_groups[-1].get("flat"):  # its parameters move into one buffer (the flat tasks)
            _flatten_group(self, len(self.param_groups) - 1)

    def _check(self, group: dict[str, Any]) -> None:
        """Raise a ValueError naming any hyper-parameter of ``group`` that is out of range."""
        _check_settings(type(self).__name__, group, "a number >= 0", "lr", "initial_lr")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        """The state of a parameter (array ``p``; ``xp`` its array library) before its first update."""
        return {"step": 0}

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        """Update array ``p`` in place from gradient ``g`` (``xp``: numpy or cupy); ``state['step']`` is already counted."""
        raise NotImplementedError

    _spares: dict[tuple, Any] | None = None  # made on first use: see _spare

    def _spare(self, p: Any, i: int = 0, xp: Any = np) -> Any:
        """Spare array number ``i`` shaped like ``p`` (``xp``: numpy, or cupy for ``p`` on a GPU), for a rule's
        intermediate results: a view of a buffer the optimizer keeps from step to step (grown to the largest
        ``p``), so a step allocates nothing."""
        if self._spares is None:
            self._spares = {}
        key = (p.dtype, i) if xp is np else (p.dtype, i, p.device)
        buffer = self._spares.get(key)
        if buffer is None or buffer.size < p.size:
            if xp is np:
                buffer = np.empty(p.size, p.dtype)
            else:
                with p.device:  # a GPU's spare is made on that GPU
                    buffer = xp.empty(p.size, p.dtype)
            self._spares[key] = buffer
        return buffer[:p.size].reshape(p.shape)

    def step(self) -> None:
        """Update every parameter that requires grad and has one."""
        for index, group in enumerate(self.param_groups):
            if index in self._flat:  # one update of the group's whole buffer (the flat tasks)
                _flat_step(self, index)
                continue
            ### BEGIN SOLUTION
            for p in group["params"]:
                if not p.requires_grad or p.grad is None:
                    continue
                xp = p.device.xp
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = self._new_state(p.data, group, xp)
                state["step"] += 1
                self._update(p.data, p.grad.data, state, group, xp)
            ### END SOLUTION

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``None``), or zero it in place."""
        ### BEGIN SOLUTION
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0
        ### END SOLUTION

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group to ``lr`` (each group's ``initial_lr`` stays as it was)."""
        ### BEGIN SOLUTION
        check_arg(type(self).__name__, "lr", lr, "a number >= 0")
        for group in self.param_groups:
            group["lr"] = float(lr)
        ### END SOLUTION

    def state_dict(self) -> dict[str, Any]:
        """Hyper-parameters and state: plain scalars and NumPy arrays, enough for an exact resume."""
        return _state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned, into an optimizer over the same parameters."""
        _load_state_dict(self, state_dict)

    def validate_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Every check ``load_state_dict`` makes, changing nothing: a ValueError saying what does not match."""
        _validate_state_dict(self, state_dict)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            options = ", ".join(f"{k}={v}" for k, v in group.items() if k != "params")
            lines.append(f"  group {i}: {len(group['params'])} parameters, {options}")
        return "\n".join(lines + [")"])


# %% [markdown]
# To try the base before any real rule exists, a rule that just subtracts
# `lr` times the gradient:

# %%
class _Plain(Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    def _update(self, p, g, state, group, xp):
        p -= group["lr"] * g


# %% nbgrader={"grade": true, "grade_id": "optim_optimizer", "locked": true, "points": 3, "schema_version": 3, "solution": false}
a, b, frozen = Parameter([1.0, 2.0]), Parameter([3.0]), Parameter([5.0], requires_grad=False)
opt = _Plain([{"params": [a, frozen]}, {"params": [b], "lr": 1.0}])
assert [g["lr"] for g in opt.param_groups] == [0.1, 1.0], "a group's own lr wins, the rest come from defaults"
assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 1.0], "each group records its lr as its initial_lr"
a.grad, b.grad = Tensor([1.0, 1.0]), Tensor([1.0])
frozen.grad = Tensor([1.0])
opt.step()
assert _close(a.data, [0.9, 1.9]) and _close(b.data, [2.0]), "each parameter moves by its group's lr times its gradient"
assert _close(frozen.data, [5.0]), "a frozen parameter (requires_grad=False) is never updated, even with a gradient"
assert opt.state[a]["step"] == 1 and frozen not in opt.state, "one step counted for a, no state for the frozen one"
opt.zero_grad()
assert a.grad is None and b.grad is None, "zero_grad() sets every .grad to None"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_x, _rs_y = check_rng.standard_normal(3), check_rng.standard_normal(2)
_rs_gx, _rs_gy = check_rng.standard_normal(3), check_rng.standard_normal(2)
_rs_lr, _rs_own = float(check_rng.uniform(0.05, 0.5)), float(check_rng.uniform(0.6, 2.0))
_rs_steps = int(check_rng.integers(2, 6))
_rs_p, _rs_q = Parameter(_rs_x.copy()), Parameter(_rs_y.copy())
_rs_opt = _Plain([{"params": [_rs_p]}, {"params": [_rs_q], "lr": _rs_own}], lr=_rs_lr)
_rs_p.grad = Tensor(_rs_gx.copy())
_rs_opt.step()  # p takes a step, q (no gradient) none
_rs_opt.zero_grad()
for _ in range(_rs_steps):  # q takes the steps, p (no gradient now) none
    _rs_q.grad = Tensor(_rs_gy.copy())
    _rs_opt.step()
assert _close(_rs_p.data, _rs_x - _rs_lr * _rs_gx) and _rs_opt.state[_rs_p]["step"] == 1, \
    "a parameter without a gradient is skipped: its values and its step count stay as they were"
assert _close(_rs_q.data, _rs_y - _rs_steps * _rs_own * _rs_gy) and _rs_opt.state[_rs_q]["step"] == _rs_steps, \
    "every step adds 1 to the step count of each parameter it updates and moves it by its group's lr times its gradient"
_rs_p.grad = Tensor(check_rng.standard_normal(3))
_rs_held = _rs_p.grad.data
_rs_opt.zero_grad(set_to_none=False)
assert _rs_p.grad is not None and _close(_rs_held, np.zeros(3)) and _rs_p.grad.data is _rs_held, \
    "zero_grad(set_to_none=False) writes zeros into the existing gradient arrays"
_rs_new = float(check_rng.uniform(0.01, 3.0))
_rs_opt.set_lr(_rs_new)
assert [g["lr"] for g in _rs_opt.param_groups] == [_rs_new, _rs_new], "set_lr sets the lr of every group"
assert [g["initial_lr"] for g in _rs_opt.param_groups] == [_rs_lr, _rs_own], "set_lr leaves each group's initial_lr as it was"
_rs_lr2 = float(check_rng.uniform(0.01, 3.0))
_rs_c, _rs_d = Parameter(check_rng.standard_normal(2)), Parameter(check_rng.standard_normal(4))
_rs_opt.add_param_group({"params": [_rs_c], "lr": _rs_lr2})
assert len(_rs_opt.param_groups) == 3 and _rs_opt.param_groups[-1]["params"][0] is _rs_c \
    and _rs_opt.param_groups[-1]["lr"] == _rs_lr2, "add_param_group appends the group with its own lr"
assert _rs_opt.param_groups[-1]["initial_lr"] == _rs_lr2, "add_param_group records the new group's lr as its initial_lr"
_rs_opt.add_param_group({"params": [_rs_d]})
assert _rs_opt.param_groups[-1]["lr"] == _rs_lr and _rs_opt.param_groups[-1]["initial_lr"] == _rs_lr, \
    "a group without its own lr takes the default lr, as lr and initial_lr"
try:
    _Plain([], lr=_rs_lr)
    raise AssertionError("an empty parameter list must be refused with a ValueError")
except ValueError:
    pass
try:
    _Plain([{"params": [_rs_c, _rs_p]}, {"params": [_rs_d, _rs_c]}], lr=_rs_lr)
    raise AssertionError("a parameter in two groups must be refused with a ValueError")
except ValueError:
    pass
try:
    _Plain([_rs_c], lr=-float(check_rng.uniform(0.01, 5.0)))
    raise AssertionError("a negative lr must be refused with a ValueError")
except ValueError as err:
    assert "lr" in str(err), f"the error for a negative lr must name lr; got {err}"
### END HIDDEN TESTS

# %% [markdown]
# ## SGD
#
# With gradient $g_t$ of parameter $\theta$, learning rate $\gamma$, weight
# decay $\lambda$, momentum $\mu$ and dampening $\tau$ (PyTorch's rule):
#
# $$g_t \leftarrow g_t + \lambda\,\theta_{t-1}$$
# $$b_t = \begin{cases} g_t & t = 1 \\ \mu\, b_{t-1} + (1-\tau)\, g_t & t > 1 \end{cases}
# \qquad
# g_t \leftarrow \begin{cases} g_t + \mu\, b_t & \text{nesterov} \\ b_t & \text{otherwise} \end{cases}$$
# $$\theta_t = \theta_{t-1} - \gamma\, g_t$$
#
# The momentum steps apply only when $\mu \ne 0$; the buffer $b$ is the
# state `"momentum_buffer"` (there is none without momentum). The first
# buffer is the gradient itself, not $(1-\tau)g_1$. Nesterov needs
# $\mu > 0$ and $\tau = 0$.
#
# Never write into `g`: it is the parameter's `.grad`, which the user may
# still read (and accumulate into). `g = g + λθ` makes a new array;
# `g += λθ` would not.
#
# ### Task `optim_sgd` (3 points): SGD with momentum
#
# **Checked when graded** (besides the tests below), for any parameter,
# gradients and settings:
#
# * SGD with Nesterov momentum and weight decay steps by γ(g + μb), where g = grad + λθ
# * SGD with dampening starts the buffer at the gradient itself, then b = μb + (1 − τ)g
# * float32 parameters stay float32
# * the step never writes into `p.grad` (g + λθ makes a new array)
# * `nesterov=True` without momentum must be refused with a ValueError
# * the error for `nesterov` without momentum must name momentum

# %% nbgrader={"grade": false, "grade_id": "optim_sgd_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and weight decay."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, flat: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, flat=flat)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        _check_settings("SGD", group, "a number >= 0", "lr", "initial_lr", "momentum", "weight_decay")
        _check_settings("SGD", group, "a number", "dampening")
        _check_settings("SGD", group, "True or False", "nesterov", "flat")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"SGD got nesterov=True with momentum={group['momentum']}, dampening={group['dampening']}; "
                             "Nesterov momentum requires momentum > 0 and dampening = 0")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        state = {"step": 0}
        if group["momentum"] != 0:
            state["momentum_buffer"] = xp.zeros_like(p)
        return state

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        ### BEGIN SOLUTION
        lr, momentum, dampening, decay = group["lr"], group["momentum"], group["dampening"], group["weight_decay"]
        if decay != 0:
            g = g + decay * p
        if momentum != 0:
            buf = state["momentum_buffer"]
            if state["step"] == 1:
                buf[...] = g
            else:
                buf *= momentum
                buf += g if dampening == 0 else (1 - dampening) * g  # no multiplying by 1 in the usual case
            g = g + momentum * buf if group["nesterov"] else buf
        p -= xp.multiply(g, lr, out=self._spare(p, xp=xp))  # γ·g into a kept array: no new one each step
        ### END SOLUTION


# %% [markdown]
# Expected values below come from `torch.optim.SGD` on the same numbers.

# %% nbgrader={"grade": true, "grade_id": "optim_sgd", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _run(make, steps=3, dtype=np.float64):
    """Parameters after ``steps`` updates on the fixed gradient function g = θ³ − 1 + 0.1·t."""
    p = Parameter(np.array([0.5, -1.0, 2.0], dtype))
    opt = make([p])
    for t in range(steps):
        p.grad = Tensor(p.data ** 3 - 1 + np.asarray(0.1 * t, dtype))
        opt.step()
    return p.data


assert _close(_run(lambda ps: SGD(ps, lr=0.1)), [0.708834, -0.550207, 1.090015]), "plain SGD"
assert _close(_run(lambda ps: SGD(ps, lr=0.05, momentum=0.9)), [0.716868, -0.51491, 0.673129]), "SGD with momentum"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0, _rs_g = check_rng.standard_normal(5), check_rng.standard_normal((4, 5))
_rs_lr, _rs_mu = float(check_rng.uniform(0.05, 0.2)), float(check_rng.uniform(0.5, 0.95))
_rs_wd, _rs_tau = float(check_rng.uniform(0.1, 0.5)), float(check_rng.uniform(0.1, 0.4))
_rs_got = _steps(SGD, _rs_p0, _rs_g, lr=_rs_lr, momentum=_rs_mu, nesterov=True, weight_decay=_rs_wd)
_rs_th, _rs_b = _rs_p0, None
for _rs_gt in _rs_g:
    _rs_gt = _rs_gt + _rs_wd * _rs_th
    _rs_b = _rs_gt if _rs_b is None else _rs_mu * _rs_b + _rs_gt
    _rs_th = _rs_th - _rs_lr * (_rs_gt + _rs_mu * _rs_b)
assert _close(_rs_got, _rs_th), "SGD with Nesterov momentum and weight decay steps by γ(g + μb), where g = grad + λθ"
_rs_got = _steps(SGD, _rs_p0, _rs_g, lr=_rs_lr, momentum=_rs_mu, dampening=_rs_tau)
_rs_th, _rs_b = _rs_p0, None
for _rs_gt in _rs_g:
    _rs_b = _rs_gt if _rs_b is None else _rs_mu * _rs_b + (1 - _rs_tau) * _rs_gt
    _rs_th = _rs_th - _rs_lr * _rs_b
assert _close(_rs_got, _rs_th), "SGD with dampening starts the buffer at the gradient itself, then b = μb + (1 − τ)g"
_rs_got = _steps(SGD, _rs_p0.astype(np.float32), _rs_g.astype(np.float32),
                 lr=_rs_lr, momentum=_rs_mu, weight_decay=_rs_wd)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
_rs_kept = Parameter(_rs_p0.copy())
_rs_kept.grad = Tensor(_rs_g[0].copy())
SGD([_rs_kept], lr=_rs_lr, momentum=_rs_mu, weight_decay=_rs_wd).step()
assert _close(_rs_kept.grad.data, _rs_g[0]), "the step never writes into p.grad (g + λθ makes a new array)"
try:
    SGD([Parameter(_rs_p0.copy())], lr=_rs_lr, nesterov=True)
    raise AssertionError("nesterov=True without momentum must be refused with a ValueError")
except ValueError as err:
    assert "momentum" in str(err), f"the error for nesterov without momentum must name momentum; got {err}"
### END HIDDEN TESTS

# %% [markdown]
# ## Adam and AdamW
#
# Adam keeps two running averages per number: of the gradient ($m$,
# `"exp_avg"`) and of its square ($v$, `"exp_avg_sq"`). Both start at 0, so
# early on they are too small; dividing by $1-\beta^t$ corrects that bias.
# With $\beta_1, \beta_2$ = `betas`:
#
# $$g_t \leftarrow g_t + \lambda\,\theta_{t-1} \quad\text{(Adam)}
# \qquad\text{or}\qquad \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda) \quad\text{(AdamW)}$$
# $$m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2$$
# $$\hat v_t = \max(\hat v_{t-1}, v_t) \text{ (amsgrad, state \texttt{"max\_exp\_avg\_sq"})}, \text{ else } \hat v_t = v_t$$
# $$\theta_t = \theta_{t-1} - \frac{\gamma}{1-\beta_1^t}\,\frac{m_t}{\sqrt{\hat v_t}/\sqrt{1-\beta_2^t} + \epsilon}$$
#
# AdamW (Loshchilov & Hutter) *decouples* the weight decay: instead of adding
# $\lambda\theta$ to the gradient, where Adam's division by $\sqrt{v}$ would
# rescale it, it shrinks the weights directly. Same class, one flag
# (`self._decoupled`); `AdamW`'s default `weight_decay` is 0.01, Adam's 0.
#
# **Without temporary arrays.** Written plainly, the rule makes a new array
# for almost every operation — `(1 - beta1) * g`, `g * g`, `np.sqrt(v)`,
# `m / denom`, ... — each the size of the parameter, allocated, written
# once, read once and freed, on every step. Adam is the optimizer of large
# models, and its step is the one the flat buffer (the tasks after NAdam) is made
# to speed up; so write this rule without them. Every intermediate result
# goes into one spare array, `tmp = self._spare(p)` (given in the base
# class: an array shaped like `p` that the optimizer keeps from step to
# step), through the `out=` argument of NumPy's functions and the in-place
# operators:
#
# ```python
# m += np.multiply(g, 1 - beta1, out=tmp)     # not: m += (1 - beta1) * g
# np.sqrt(v, out=tmp)                         # not: denom = np.sqrt(v)
# ```
#
# Compute the formulas as written, in their order (the denominator
# $\sqrt{\hat v_t}/\sqrt{1-\beta_2^t} + \epsilon$ first, then $m_t$ divided by
# it, then times $\gamma/(1-\beta_1^t)$), so that the numbers are PyTorch's.
# Never write into `g`, the user's gradient: Adam's $g + \lambda\theta$ goes
# into a second spare, `self._spare(p, 1)`. AMSGrad's maximum goes into its
# state array (`np.maximum(..., out=state["max_exp_avg_sq"])`). The tests
# check that a step allocates no array the size of the parameter.
#
# On a GPU, `_update` hands the whole step to one fused CuPy kernel (given
# after the grade cell); you write the NumPy rule.
#
# ### Task `optim_adam` (4 points): Adam and AdamW without temporary arrays
#
# **Checked when graded** (besides the tests below), for any parameter,
# gradients and settings:
#
# * Adam with weight decay and amsgrad adds λθ to g and divides by the running maximum of v
# * AdamW shrinks θ by (1 − γλ) before the Adam step and never adds λθ to g
# * Adam adds ε after dividing by √(1 − β2^t): the denominator is √v̂/√(1 − β2^t) + ε
# * float32 parameters stay float32
# * the step never writes into `p.grad` (Adam's g + λθ goes into `self._spare(p, 1)`)
# * a step allocates no array the size of the parameter: write every intermediate result into `self._spare(p)` with `out=` and in-place operators
# * betas outside [0, 1) and a negative eps must be refused with a ValueError

# %% nbgrader={"grade": false, "grade_id": "optim_adam_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Adam(Optimizer):
    """Adam: per-number step sizes from running averages of the gradient and its square."""

    _decoupled = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, flat: bool = False) -> None:
        defaults = dict(lr=lr, betas=_pair(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, flat=flat)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        name = type(self).__name__
        _check_settings(name, group, "a number >= 0", "lr", "initial_lr", "eps", "weight_decay")
        _betas(name, group)
        _check_settings(name, group, "True or False", "amsgrad", "flat")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        state = {"step": 0, "exp_avg": xp.zeros_like(p), "exp_avg_sq": xp.zeros_like(p)}
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = xp.zeros_like(p)
        return state

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        if xp is not np:  # a GPU: the whole step as one fused kernel (given after the grade cell)
            _adam_on_gpu(self, p, g, state, group)
            return
        ### BEGIN SOLUTION
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t = state["step"]
        bias1, bias2 = 1 - beta1**t, 1 - beta2**t
        m, v, tmp = state["exp_avg"], state["exp_avg_sq"], self._spare(p)
        if decay != 0:
            if self._decoupled:
                p *= 1 - lr * decay
            else:  # g + λθ into a second spare: never into g, the user's gradient
                g = np.add(g, np.multiply(p, decay, out=tmp), out=self._spare(p, 1))
        m *= beta1
        m += np.multiply(g, 1 - beta1, out=tmp)
        v *= beta2
        np.multiply(g, g, out=tmp)
        tmp *= 1 - beta2
        v += tmp
        if group["amsgrad"]:
            v = np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
        np.sqrt(v, out=tmp)
        tmp /= math.sqrt(bias2)
        tmp += eps
        np.divide(m, tmp, out=tmp)
        tmp *= lr / bias1
        p -= tmp
        ### END SOLUTION


class AdamW(Adam):
    """Adam with decoupled weight decay: the weights shrink by ``lr * weight_decay`` each step."""

    _decoupled = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, flat: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, flat)


# %% nbgrader={"grade": true, "grade_id": "optim_adam", "locked": true, "points": 4, "schema_version": 3, "solution": false}
assert _close(_run(lambda ps: Adam(ps, lr=0.1)), [0.793489, -0.703889, 1.702742]), "Adam"
assert _close(_run(lambda ps: AdamW(ps, lr=0.1)), [0.791736, -0.70123, 1.697136]), "AdamW (weight_decay=0.01)"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0 = check_rng.standard_normal(6)
_rs_g = check_rng.uniform(0.5, 1.5, (6, 6)) * check_rng.choice([-1.0, 1.0], (6, 6))
_rs_g[3:] *= 0.01  # the gradients shrink: v falls below its running maximum
_rs_lr, _rs_wd = float(check_rng.uniform(0.02, 0.2)), float(check_rng.uniform(0.1, 0.5))
_rs_b1, _rs_b2 = float(check_rng.uniform(0.7, 0.95)), float(check_rng.uniform(0.8, 0.95))
_rs_eps = float(check_rng.uniform(0.2, 1.0))
_rs_got = _steps(Adam, _rs_p0, _rs_g, lr=_rs_lr, betas=(_rs_b1, _rs_b2), weight_decay=_rs_wd, amsgrad=True)
_rs_th, _rs_m, _rs_v, _rs_vmax = _rs_p0, 0.0, 0.0, 0.0
for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
    _rs_gt = _rs_gt + _rs_wd * _rs_th
    _rs_m = _rs_b1 * _rs_m + (1 - _rs_b1) * _rs_gt
    _rs_v = _rs_b2 * _rs_v + (1 - _rs_b2) * _rs_gt**2
    _rs_vmax = np.maximum(_rs_vmax, _rs_v)
    _rs_th = _rs_th - _rs_lr / (1 - _rs_b1**_rs_t) * _rs_m / (np.sqrt(_rs_vmax / (1 - _rs_b2**_rs_t)) + 1e-8)
assert _close(_rs_got, _rs_th), "Adam with weight decay and amsgrad adds λθ to g and divides by the running maximum of v"
_rs_got = _steps(AdamW, _rs_p0, _rs_g, lr=_rs_lr, betas=(_rs_b1, _rs_b2), weight_decay=_rs_wd)
_rs_th, _rs_m, _rs_v = _rs_p0, 0.0, 0.0
for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
    _rs_th = _rs_th * (1 - _rs_lr * _rs_wd)
    _rs_m = _rs_b1 * _rs_m + (1 - _rs_b1) * _rs_gt
    _rs_v = _rs_b2 * _rs_v + (1 - _rs_b2) * _rs_gt**2
    _rs_th = _rs_th - _rs_lr / (1 - _rs_b1**_rs_t) * _rs_m / (np.sqrt(_rs_v / (1 - _rs_b2**_rs_t)) + 1e-8)
assert _close(_rs_got, _rs_th), "AdamW shrinks θ by (1 − γλ) before the Adam step and never adds λθ to g"
_rs_got = _steps(Adam, _rs_p0, _rs_g, lr=_rs_lr, betas=(_rs_b1, _rs_b2), eps=_rs_eps)
_rs_th, _rs_m, _rs_v = _rs_p0, 0.0, 0.0
for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
    _rs_m = _rs_b1 * _rs_m + (1 - _rs_b1) * _rs_gt
    _rs_v = _rs_b2 * _rs_v + (1 - _rs_b2) * _rs_gt**2
    _rs_th = _rs_th - _rs_lr / (1 - _rs_b1**_rs_t) * _rs_m / (np.sqrt(_rs_v / (1 - _rs_b2**_rs_t)) + _rs_eps)
assert _close(_rs_got, _rs_th), "Adam adds ε after dividing by √(1 − β2^t): the denominator is √v̂/√(1 − β2^t) + ε"
_rs_got = _steps(AdamW, _rs_p0.astype(np.float32), _rs_g.astype(np.float32), lr=_rs_lr, weight_decay=_rs_wd)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
import tracemalloc

_rs_n = int(check_rng.integers(40_000, 60_000))
for _rs_cls in (Adam, AdamW):
    _rs_big = Parameter(check_rng.standard_normal(_rs_n))
    _rs_big.grad = Tensor(check_rng.standard_normal(_rs_n))
    _rs_given = _rs_big.grad.data.copy()
    _rs_opt = _rs_cls([_rs_big], lr=_rs_lr, weight_decay=_rs_wd, amsgrad=True)
    _rs_opt.step()  # the first step makes the state and the spare arrays
    tracemalloc.start()
    _rs_opt.step()
    _rs_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.array_equal(_rs_big.grad.data, _rs_given), \
        "the step never writes into p.grad (Adam's g + λθ goes into self._spare(p, 1))"
    assert _rs_peak < 2 * _rs_n, ("a step allocates no array the size of the parameter: write every intermediate result "
                                  "into self._spare(p) with out= and in-place operators; got "
                                  f"{f'{_rs_peak:,} bytes for a parameter of {8 * _rs_n:,}'}")
_rs_bad_eps = -float(check_rng.uniform(1e-3, 1.0))
_rs_bad_betas = (float(check_rng.uniform(1.0, 2.0)), _rs_b2), (_rs_b1, -float(check_rng.uniform(1e-3, 1.0)))
for _rs_bad in ({"betas": _rs_bad_betas[0]}, {"betas": _rs_bad_betas[1]}, {"eps": _rs_bad_eps}):
    try:
        Adam([Parameter(_rs_p0.copy())], **_rs_bad)
        raise AssertionError(f"betas outside [0, 1) and a negative eps must be refused with a ValueError: {_rs_bad}")
    except ValueError:
        pass
### END HIDDEN TESTS

# %% [markdown]
# On a GPU the whole rule is one fused CuPy kernel: each number of θ, g, m,
# v is read once and written once, instead of a dozen separate passes over
# memory, one per operation of the NumPy rule. `_update` above calls it.

# %%
#| export
_ADAM_KERNELS: dict[bool, Any] = {}


def _adam_kernel(amsgrad: bool) -> Any:
    """The fused CuPy kernel for one Adam/AdamW step (built on first use, so import needs no GPU)."""
    if amsgrad not in _ADAM_KERNELS:
        import cupy

        keep = "vh = max((double)vmax, vd); vmax = vh;" if amsgrad else ""
        _ADAM_KERNELS[amsgrad] = cupy.ElementwiseKernel(
            "T g, float64 lr, float64 b1, float64 b2, float64 eps, float64 wd, float64 bc1, float64 bc2_sqrt, "
            "bool decoupled",
            "T p, T m, T v" + (", T vmax" if amsgrad else ""),
            f"""
            double gd = g, pd = p;
            if (wd != 0) {{ if (decoupled) pd *= 1 - lr * wd; else gd += wd * pd; }}
            double md = b1 * (double)m + (1 - b1) * gd;
            double vd = b2 * (double)v + (1 - b2) * gd * gd;
            double vh = vd;
            {keep}
            m = md; v = vd;
            p = pd - (lr / bc1) * md / (sqrt(vh) / bc2_sqrt + eps);
            """,
            "tinyflo_adam_amsgrad" if amsgrad else "tinyflo_adam",
        )
    return _ADAM_KERNELS[amsgrad]


def _adam_on_gpu(opt: Adam, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
    """One Adam/AdamW step of CuPy arrays, in place, as one fused kernel."""
    lr, (beta1, beta2), t = group["lr"], group["betas"], state["step"]
    extra = (state["max_exp_avg_sq"],) if group["amsgrad"] else ()
    # a captured step (tinyflo.graphs) lends lr and the bias corrections as device scalars it sets before each launch
    bias1, bias2_sqrt = state["bias"] if "bias" in state else (1 - beta1**t, math.sqrt(1 - beta2**t))
    _adam_kernel(group["amsgrad"])(g, lr, beta1, beta2, group["eps"], group["weight_decay"], bias1, bias2_sqrt,
                                   opt._decoupled, p, state["exp_avg"], state["exp_avg_sq"], *extra)


# %% [markdown]
# ## RMSprop
#
# RMSprop divides by a running root-mean-square of the gradient, with decay
# $\alpha$ (state `"square_avg"`); *centered* subtracts the square of the
# running mean gradient (`"grad_avg"`), an estimate of the variance; momentum
# keeps a buffer of the scaled steps (`"momentum_buffer"`):
#
# $$g_t \leftarrow g_t + \lambda\theta_{t-1} \qquad v_t = \alpha v_{t-1} + (1-\alpha) g_t^2$$
# $$\bar g_t = \alpha \bar g_{t-1} + (1-\alpha) g_t,\quad \tilde v_t = v_t - \bar g_t^2 \text{ (centered)}, \text{ else } \tilde v_t = v_t$$
# $$b_t = \mu b_{t-1} + \frac{g_t}{\sqrt{\tilde v_t} + \epsilon},\ \theta_t = \theta_{t-1} - \gamma b_t \text{ (momentum)}, \text{ else }
# \theta_t = \theta_{t-1} - \gamma \frac{g_t}{\sqrt{\tilde v_t} + \epsilon}$$
#
# ### Task `optim_rmsprop` (2 points): RMSprop
#
# **Checked when graded** (besides the test below), for any parameter,
# gradients and settings:
#
# * centered RMSprop with momentum and weight decay: b = μb + g/(√(v − ḡ²) + ε), θ moves by γb
# * RMSprop with momentum (not centered): b = μb + g/(√v + ε), θ moves by γb
# * RMSprop adds eps to the square root: g/(√v + ε), not g/√(v + ε)
# * float32 parameters stay float32

# %% nbgrader={"grade": false, "grade_id": "optim_rmsprop_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class RMSprop(Optimizer):
    """RMSprop: divide each step by a running root-mean-square of the gradient."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, flat: bool = False) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, flat=flat)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        _check_settings("RMSprop", group, "a number >= 0", "lr", "initial_lr", "alpha", "eps", "weight_decay", "momentum")
        _check_settings("RMSprop", group, "True or False", "centered", "flat")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        state = {"step": 0, "square_avg": xp.zeros_like(p)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = xp.zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = xp.zeros_like(p)
        return state

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        ### BEGIN SOLUTION
        lr, alpha, eps, decay, momentum = (group[k] for k in ("lr", "alpha", "eps", "weight_decay", "momentum"))
        if decay != 0:
            g = g + decay * p
        square_avg = state["square_avg"]
        square_avg *= alpha
        square_avg += (1 - alpha) * (g * g)
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg *= alpha
            grad_avg += (1 - alpha) * g
            avg = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            avg = xp.sqrt(square_avg)
        avg += eps
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf *= momentum
            buf += g / avg
            p -= lr * buf
        else:
            p -= lr * (g / avg)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_rmsprop", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert _close(_run(lambda ps: RMSprop(ps, lr=0.01)), [0.703803, -0.789038, 1.78419]), "RMSprop"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0, _rs_g = check_rng.standard_normal(6), check_rng.standard_normal((5, 6))
_rs_lr, _rs_alpha = float(check_rng.uniform(0.005, 0.05)), float(check_rng.uniform(0.8, 0.95))
_rs_mu, _rs_wd = float(check_rng.uniform(0.5, 0.9)), float(check_rng.uniform(0.1, 0.5))
_rs_eps = float(check_rng.uniform(1.5, 3.0))
for _rs_centered in (True, False):
    _rs_got = _steps(RMSprop, _rs_p0, _rs_g,
                     lr=_rs_lr, alpha=_rs_alpha, momentum=_rs_mu, weight_decay=_rs_wd, centered=_rs_centered)
    _rs_th, _rs_v, _rs_gbar, _rs_b = _rs_p0, 0.0, 0.0, 0.0
    for _rs_gt in _rs_g:
        _rs_gt = _rs_gt + _rs_wd * _rs_th
        _rs_v = _rs_alpha * _rs_v + (1 - _rs_alpha) * _rs_gt**2
        _rs_gbar = _rs_alpha * _rs_gbar + (1 - _rs_alpha) * _rs_gt
        _rs_b = _rs_mu * _rs_b + _rs_gt / (np.sqrt(_rs_v - _rs_gbar**2 if _rs_centered else _rs_v) + 1e-8)
        _rs_th = _rs_th - _rs_lr * _rs_b
    if _rs_centered:
        assert _close(_rs_got, _rs_th), \
            "centered RMSprop with momentum and weight decay: b = μb + g/(√(v − ḡ²) + ε), θ moves by γb"
    else:
        assert _close(_rs_got, _rs_th), "RMSprop with momentum (not centered): b = μb + g/(√v + ε), θ moves by γb"
_rs_got = _steps(RMSprop, _rs_p0, _rs_g, lr=_rs_lr, alpha=_rs_alpha, eps=_rs_eps)
_rs_th, _rs_v = _rs_p0, 0.0
for _rs_gt in _rs_g:
    _rs_v = _rs_alpha * _rs_v + (1 - _rs_alpha) * _rs_gt**2
    _rs_th = _rs_th - _rs_lr * _rs_gt / (np.sqrt(_rs_v) + _rs_eps)
assert _close(_rs_got, _rs_th), "RMSprop adds eps to the square root: g/(√v + ε), not g/√(v + ε)"
_rs_got = _steps(RMSprop, _rs_p0.astype(np.float32), _rs_g.astype(np.float32),
                 lr=_rs_lr, momentum=_rs_mu, centered=True)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
### END HIDDEN TESTS

# %% [markdown]
# ## Adagrad
#
# Adagrad divides by the root of the *sum* of all squared gradients so far
# (state `"sum"`, starting at `initial_accumulator_value`), so each number's
# step shrinks as it accumulates history; `lr_decay` also shrinks the
# learning rate itself:
#
# $$g_t \leftarrow g_t + \lambda\theta_{t-1} \qquad \tilde\gamma_t = \frac{\gamma}{1 + (t-1)\,\eta}
# \qquad s_t = s_{t-1} + g_t^2 \qquad \theta_t = \theta_{t-1} - \tilde\gamma_t\,\frac{g_t}{\sqrt{s_t} + \epsilon}$$
#
# ### Task `optim_adagrad` (2 points): Adagrad
#
# **Checked when graded** (besides the test below), for any parameter,
# gradients and settings:
#
# * Adagrad with lr_decay, weight decay and an initial accumulator: step t uses γ/(1 + (t − 1)η), s starts at initial_accumulator_value
# * Adagrad adds eps to the square root: g/(√s + ε), not g/√(s + ε)
# * float32 parameters stay float32

# %% nbgrader={"grade": false, "grade_id": "optim_adagrad_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Adagrad(Optimizer):
    """Adagrad: divide each step by the root of the sum of all squared gradients so far."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, flat: bool = False) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps, flat=flat)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        _check_settings("Adagrad", group, "a number >= 0", "lr", "initial_lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
        _check_settings("Adagrad", group, "True or False", "flat")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        return {"step": 0, "sum": xp.full_like(p, group["initial_accumulator_value"])}

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        ### BEGIN SOLUTION
        if group["weight_decay"] != 0:
            g = g + group["weight_decay"] * p
        lr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"]
        total += g * g
        std = xp.sqrt(total)
        std += group["eps"]
        p -= lr * (g / std)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_adagrad", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert _close(_run(lambda ps: Adagrad(ps, lr=0.1)), [0.703347, -0.789514, 1.784664]), "Adagrad"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0, _rs_g = check_rng.standard_normal(6), check_rng.standard_normal((5, 6))
_rs_lr, _rs_decay = float(check_rng.uniform(0.05, 0.5)), float(check_rng.uniform(0.2, 1.0))
_rs_wd, _rs_init = float(check_rng.uniform(0.1, 0.5)), float(check_rng.uniform(0.1, 1.0))
_rs_eps = float(check_rng.uniform(1.5, 3.0))
_rs_got = _steps(Adagrad, _rs_p0, _rs_g,
                 lr=_rs_lr, lr_decay=_rs_decay, weight_decay=_rs_wd, initial_accumulator_value=_rs_init)
_rs_th, _rs_s = _rs_p0, _rs_init
for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
    _rs_gt = _rs_gt + _rs_wd * _rs_th
    _rs_s = _rs_s + _rs_gt**2
    _rs_th = _rs_th - _rs_lr / (1 + (_rs_t - 1) * _rs_decay) * _rs_gt / (np.sqrt(_rs_s) + 1e-10)
assert _close(_rs_got, _rs_th), ("Adagrad with lr_decay, weight decay and an initial accumulator: "
                                 "step t uses γ/(1 + (t − 1)η), s starts at initial_accumulator_value")
_rs_got = _steps(Adagrad, _rs_p0, _rs_g, lr=_rs_lr, eps=_rs_eps)
_rs_th, _rs_s = _rs_p0, 0.0
for _rs_gt in _rs_g:
    _rs_s = _rs_s + _rs_gt**2
    _rs_th = _rs_th - _rs_lr * _rs_gt / (np.sqrt(_rs_s) + _rs_eps)
assert _close(_rs_got, _rs_th), "Adagrad adds eps to the square root: g/(√s + ε), not g/√(s + ε)"
_rs_got = _steps(Adagrad, _rs_p0.astype(np.float32), _rs_g.astype(np.float32),
                 lr=_rs_lr, lr_decay=_rs_decay, weight_decay=_rs_wd)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
### END HIDDEN TESTS

# %% [markdown]
# ## RAdam
#
# Early in training Adam's $v_t$ rests on a few gradients, so its step sizes
# vary wildly — the reason people warm Adam up. RAdam (Liu et al., 2019)
# computes how reliable $v_t$ is: the length of the approximated simple
# moving average, $\rho_t$. While $\rho_t \le 5$ it takes a plain momentum
# step; after that, Adam's step times a *rectification* $r_t < 1$:
#
# $$m_t, v_t \text{ as in Adam (weight decay added to } g_t), \qquad \hat m_t = \frac{m_t}{1-\beta_1^t}$$
# $$\rho_\infty = \frac{2}{1-\beta_2} - 1 \qquad \rho_t = \rho_\infty - \frac{2t\beta_2^t}{1-\beta_2^t}$$
# $$\theta_t = \begin{cases}
# \theta_{t-1} - \gamma\,\hat m_t\, r_t\, \dfrac{\sqrt{1-\beta_2^t}}{\sqrt{v_t} + \epsilon},\quad
# r_t = \sqrt{\dfrac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}} & \rho_t > 5 \\[2ex]
# \theta_{t-1} - \gamma\,\hat m_t & \text{otherwise}
# \end{cases}$$
#
# Note where ε goes: added to $\sqrt{v_t}$ *before* the bias correction
# multiplies, unlike Adam.
#
# ### Task `optim_radam` (2 points): RAdam
#
# **Checked when graded** (besides the test below), for any parameter,
# gradients and settings:
#
# * RAdam with weight decay takes momentum steps γm̂ while rho_t <= 5 and rectified Adam steps once rho_t > 5
# * RAdam adds ε to √v before the bias correction: √(1 − β2^t)/(√v + ε)
# * float32 parameters stay float32

# %% nbgrader={"grade": false, "grade_id": "optim_radam_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class RAdam(Adam):
    """Rectified Adam: momentum steps until the variance estimate is reliable, then rectified Adam steps."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, flat: bool = False) -> None:
        defaults = dict(lr=lr, betas=_pair(betas), eps=eps, weight_decay=weight_decay, flat=flat)
        Optimizer.__init__(self, params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        _check_settings("RAdam", group, "a number >= 0", "lr", "initial_lr", "eps", "weight_decay")
        _betas("RAdam", group)
        _check_settings("RAdam", group, "True or False", "flat")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        return {"step": 0, "exp_avg": xp.zeros_like(p), "exp_avg_sq": xp.zeros_like(p)}

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        ### BEGIN SOLUTION
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t = state["step"]
        if decay != 0:
            g = g + decay * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * (g * g)
        bias1, bias2 = 1 - beta1**t, 1 - beta2**t
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * t * beta2**t / bias2
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            denom = xp.sqrt(v)
            denom += eps
            p -= (lr * rect * math.sqrt(bias2) / bias1) * (m / denom)
        else:
            p -= (lr / bias1) * m
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_radam", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert _close(_run(lambda ps: RAdam(ps, lr=0.1)), [0.733588, -0.485487, 0.650465]), "RAdam's first steps (momentum steps)"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0, _rs_g = check_rng.standard_normal(6), check_rng.standard_normal((10, 6))
_rs_lr, _rs_wd = float(check_rng.uniform(0.01, 0.1)), float(check_rng.uniform(0.1, 0.5))
_rs_b1, _rs_b2 = float(check_rng.uniform(0.7, 0.9)), float(check_rng.uniform(0.8, 0.9))  # rho_t > 5 from step 6 or 7
_rs_eps = float(check_rng.uniform(0.2, 1.0))
for _rs_decay, _rs_e in ((_rs_wd, 1e-8), (0.0, _rs_eps)):
    _rs_got = _steps(RAdam, _rs_p0, _rs_g,
                     lr=_rs_lr, betas=(_rs_b1, _rs_b2), eps=_rs_e, weight_decay=_rs_decay)
    _rs_th, _rs_m, _rs_v = _rs_p0, 0.0, 0.0
    _rs_inf = 2 / (1 - _rs_b2) - 1
    for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
        _rs_gt = _rs_gt + _rs_decay * _rs_th
        _rs_m = _rs_b1 * _rs_m + (1 - _rs_b1) * _rs_gt
        _rs_v = _rs_b2 * _rs_v + (1 - _rs_b2) * _rs_gt**2
        _rs_mhat = _rs_m / (1 - _rs_b1**_rs_t)
        _rs_rho = _rs_inf - 2 * _rs_t * _rs_b2**_rs_t / (1 - _rs_b2**_rs_t)
        if _rs_rho > 5:
            _rs_r = np.sqrt((_rs_rho - 4) * (_rs_rho - 2) * _rs_inf / ((_rs_inf - 4) * (_rs_inf - 2) * _rs_rho))
            _rs_th = _rs_th - _rs_lr * _rs_mhat * _rs_r * np.sqrt(1 - _rs_b2**_rs_t) / (np.sqrt(_rs_v) + _rs_e)
        else:
            _rs_th = _rs_th - _rs_lr * _rs_mhat
    if _rs_decay:
        assert _close(_rs_got, _rs_th), \
            "RAdam with weight decay takes momentum steps γm̂ while rho_t <= 5 and rectified Adam steps once rho_t > 5"
    else:
        assert _close(_rs_got, _rs_th), "RAdam adds ε to √v before the bias correction: √(1 − β2^t)/(√v + ε)"
_rs_got = _steps(RAdam, _rs_p0.astype(np.float32), _rs_g.astype(np.float32),
                 lr=_rs_lr, betas=(_rs_b1, _rs_b2), weight_decay=_rs_wd)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
### END HIDDEN TESTS

# %% [markdown]
# ## NAdam
#
# NAdam (Dozat, 2016) puts Nesterov's look-ahead into Adam: the step mixes
# the current gradient and the *next* momentum. Its momentum coefficient
# $\mu_t$ warms up with `momentum_decay` $\psi$, and the product of all
# $\mu$ so far is a scalar state, `"mu_product"`:
#
# $$\mu_t = \beta_1\left(1 - \tfrac12\, 0.96^{t\psi}\right) \qquad \mu_{t+1} = \beta_1\left(1 - \tfrac12\, 0.96^{(t+1)\psi}\right)
# \qquad \Pi_t = \Pi_{t-1}\mu_t \ (\Pi_0 = 1)$$
# $$m_t, v_t \text{ as in Adam (weight decay added to } g_t) \qquad d_t = \sqrt{v_t / (1-\beta_2^t)} + \epsilon$$
# $$\theta_t = \theta_{t-1} - \gamma\frac{1-\mu_t}{1-\Pi_t}\frac{g_t}{d_t} - \gamma\frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\frac{m_t}{d_t}$$
#
# ### Task `optim_nadam` (2 points): NAdam
#
# **Checked when graded** (besides the test below), for any parameter,
# gradients and settings:
#
# * NAdam with momentum_decay and weight decay: μ_t = β1(1 − ½·0.96^(tψ)), weight decay added to g
# * NAdam adds eps to the bias-corrected square root: d_t = √(v_t/(1 − β2^t)) + ε
# * float32 parameters stay float32

# %% nbgrader={"grade": false, "grade_id": "optim_nadam_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class NAdam(Adam):
    """Adam with Nesterov momentum and a momentum warm-up (``momentum_decay``)."""

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 flat: bool = False) -> None:
        defaults = dict(lr=lr, betas=_pair(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay, flat=flat)
        Optimizer.__init__(self, params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        _check_settings("NAdam", group, "a number >= 0", "lr", "initial_lr", "eps", "weight_decay", "momentum_decay")
        _betas("NAdam", group)
        _check_settings("NAdam", group, "True or False", "flat")

    def _new_state(self, p: Any, group: dict[str, Any], xp: Any) -> dict[str, Any]:
        return {"step": 0, "mu_product": 1.0, "exp_avg": xp.zeros_like(p), "exp_avg_sq": xp.zeros_like(p)}

    def _update(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any], xp: Any) -> None:
        ### BEGIN SOLUTION
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t, psi = state["step"], group["momentum_decay"]
        if decay != 0:
            g = g + decay * p
        mu = beta1 * (1 - 0.5 * 0.96 ** (t * psi))
        mu_next = beta1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
        state["mu_product"] *= mu
        product = state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * (g * g)
        denom = xp.sqrt(v / (1 - beta2**t))
        denom += eps
        p -= (lr * (1 - mu) / (1 - product)) * (g / denom)
        p -= (lr * mu_next / (1 - product * mu_next)) * (m / denom)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_nadam", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert _close(_run(lambda ps: NAdam(ps, lr=0.1)), [0.729447, -0.762395, 1.757532]), "NAdam"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_p0, _rs_g = check_rng.standard_normal(6), check_rng.standard_normal((6, 6))
_rs_lr, _rs_wd = float(check_rng.uniform(0.02, 0.1)), float(check_rng.uniform(0.1, 0.5))
_rs_b1, _rs_b2 = float(check_rng.uniform(0.8, 0.95)), float(check_rng.uniform(0.9, 0.999))
_rs_psi, _rs_eps = float(check_rng.uniform(0.05, 0.3)), float(check_rng.uniform(0.2, 1.0))
for _rs_decay, _rs_e in ((_rs_wd, 1e-8), (0.0, _rs_eps)):
    _rs_got = _steps(NAdam, _rs_p0, _rs_g,
                     lr=_rs_lr, betas=(_rs_b1, _rs_b2), eps=_rs_e, weight_decay=_rs_decay,
                     momentum_decay=_rs_psi)
    _rs_th, _rs_m, _rs_v, _rs_prod = _rs_p0, 0.0, 0.0, 1.0
    for _rs_t, _rs_gt in enumerate(_rs_g, start=1):
        _rs_gt = _rs_gt + _rs_decay * _rs_th
        _rs_mu = _rs_b1 * (1 - 0.5 * 0.96 ** (_rs_t * _rs_psi))
        _rs_next = _rs_b1 * (1 - 0.5 * 0.96 ** ((_rs_t + 1) * _rs_psi))
        _rs_prod = _rs_prod * _rs_mu
        _rs_m = _rs_b1 * _rs_m + (1 - _rs_b1) * _rs_gt
        _rs_v = _rs_b2 * _rs_v + (1 - _rs_b2) * _rs_gt**2
        _rs_d = np.sqrt(_rs_v / (1 - _rs_b2**_rs_t)) + _rs_e
        _rs_th = (_rs_th - _rs_lr * (1 - _rs_mu) / (1 - _rs_prod) * _rs_gt / _rs_d
                  - _rs_lr * _rs_next / (1 - _rs_prod * _rs_next) * _rs_m / _rs_d)
    if _rs_decay:
        assert _close(_rs_got, _rs_th), \
            "NAdam with momentum_decay and weight decay: μ_t = β1(1 − ½·0.96^(tψ)), weight decay added to g"
    else:
        assert _close(_rs_got, _rs_th), \
            "NAdam adds eps to the bias-corrected square root: d_t = √(v_t/(1 − β2^t)) + ε"
_rs_got = _steps(NAdam, _rs_p0.astype(np.float32), _rs_g.astype(np.float32),
                 lr=_rs_lr, weight_decay=_rs_wd, momentum_decay=_rs_psi)
assert _rs_got.dtype == np.float32, "float32 parameters stay float32"
### END HIDDEN TESTS

# %% [markdown]
# ## Speed: one flat buffer per group
#
# The loop in `step` runs `_update` once per parameter tensor. Each call is
# about ten NumPy operations, and each NumPy operation costs about a
# microsecond of Python and dispatch before it touches a number. A model with
# 100 parameter tensors therefore pays ~1000 dispatches per step, however
# small its tensors — for small and medium models that overhead, not the
# arithmetic, *is* the step.
#
# But every rule is elementwise: updating 100 arrays one by one gives the
# same numbers as updating them laid end to end in one array. So, with
# `flat=True`, the optimizer copies every parameter of a group into **one
# contiguous buffer** and makes each `p.data` a view into its slice of it
# (`buffer[offset:offset + n].reshape(shape)`). The model keeps working on
# `p.data` as before — it is the same memory.
#
# ### Task `optim_flat` (1 point): a group's parameters in one buffer
#
# `_flatten_group(opt, index)` (the given end of `add_param_group` calls it
# for a group with `flat=True`): check that every parameter of the group has
# the first one's dtype and device (otherwise a `ValueError` naming the
# parameter by its number in the group, `parameter i`, its dtype and its
# device); make one buffer of the group's total size (on that
# device: `with first.device:`) and a zeroed gradient buffer of the same
# size; copy each parameter's values into its slice and make `p.data` the
# view of that slice; record `opt._flat[index] = _FlatGroup(buffer, grad,
# slices, first.device)`, with `slices` a list of `(offset, size, shape)` per
# parameter (`first.device.xp` is the array library to make the buffers with).
# `CHUNK`, `flat_block_size` and `_FlatGroup` are given (the next task uses
# them).
#
# **Checked when graded** (besides the tests below), for any shapes and
# values, in any group:
#
# * `opt._flat[index].params` is the group's buffer: every parameter's values in order, each `p.data` a view of it
# * the gradient buffer `opt._flat[index].grad` is a second array of the buffer's size
# * parameters of different dtypes must be refused with a ValueError
# * the error for mixed dtypes must say dtype and name the parameter (parameter i)

# %% nbgrader={"grade": false, "grade_id": "optim_flat_code", "locked": false, "schema_version": 3, "solution": true}
#| export
CHUNK = 1 << 17  # numbers per block of a flat NumPy step: 512 KB per array, a block's arrays stay in cache


def flat_block_size(size: int) -> int:
    """Numbers per block of a flat NumPy step over ``size`` numbers: equal blocks of at most CHUNK
    (300 k numbers make 3 blocks of 100 k, not 2 full ones and a stub)."""
    return -(-size // -(-size // CHUNK)) if size else 1


class _FlatGroup:
    """One group's flat buffers: parameters, gradients, state, and where each parameter lies."""

    def __init__(self, params: Any, grad: Any, slices: list[tuple[int, int, tuple[int, ...]]], device: Any) -> None:
        self.params, self.grad, self.slices, self.device = params, grad, slices, device
        self.state: dict[str, Any] | None = None
        self.blocks: list[tuple[Any, Any, dict[str, Any]]] = []

    def make_blocks(self) -> None:
        """(parameters, gradient, state) views of consecutive blocks of at most CHUNK numbers."""
        size = self.params.size
        step = flat_block_size(size) if self.device.xp is np else max(size, 1)  # a GPU wants it all at once
        self.blocks = [(self.params[i:i + step], self.grad[i:i + step],
                        {k: v[i:i + step] if is_array(v) else v for k, v in self.state.items()})
                       for i in range(0, size, step)]


def _flatten_group(opt: Optimizer, index: int) -> None:
    """Move the parameters of group ``index`` into one buffer; each ``p.data`` becomes a view of it."""
    ### BEGIN SOLUTION
    params = opt.param_groups[index]["params"]
    first = params[0]
    for i, p in enumerate(params):
        if p.dtype != first.dtype or p.device != first.device:
            raise ValueError(f"{type(opt).__name__}(flat=True): parameter {i} of group {index} is {p.dtype} on "
                             f"{p.device}, parameter 0 is {first.dtype} on {first.device}; a flat group needs one "
                             "dtype and one device")
    xp = first.device.xp
    slices, offset = [], 0
    for p in params:
        slices.append((offset, p.data.size, p.shape))
        offset += p.data.size
    with first.device:
        buffer = xp.empty(offset, first.dtype)
        grad = xp.zeros(offset, first.dtype)
    for p, (start, n, shape) in zip(params, slices):
        buffer[start:start + n] = p.data.reshape(-1)
        p.data = buffer[start:start + n].reshape(shape)
    opt._flat[index] = _FlatGroup(buffer, grad, slices, first.device)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "optim_flat", "locked": true, "points": 1, "schema_version": 3, "solution": false}
def _model(seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(shape)) for shape in [(4, 3), (3,), (3, 2), (2,)]]


ps = _model()
buffer_opt = SGD(ps, lr=0.1, momentum=0.9, flat=True)
base = ps[0].data.base if ps[0].data.base is not None else ps[0].data
assert all(np.shares_memory(p.data, base) for p in ps), "each p.data is a view of one buffer"
reference = [p.data.copy() for p in _model()]
assert all(p.data.shape == r.shape and np.array_equal(p.data, r) for p, r in zip(ps, reference)), \
    "each parameter keeps its shape and its values"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_shapes = [tuple(int(n) for n in check_rng.integers(1, 5, int(check_rng.integers(1, 3))))
              for _ in range(int(check_rng.integers(2, 6)))]
_rs_values = [check_rng.standard_normal(shape) for shape in _rs_shapes]
_rs_ps = [Parameter(v.copy()) for v in _rs_values]
_rs_opt = SGD([{"params": [Parameter(check_rng.standard_normal(3))]}, {"params": _rs_ps, "flat": True}], lr=0.1)
assert sorted(_rs_opt._flat) == [1] \
    and np.array_equal(_rs_opt._flat[1].params, np.concatenate([v.ravel() for v in _rs_values])) \
    and all(np.shares_memory(p.data, _rs_opt._flat[1].params) for p in _rs_ps), \
    "opt._flat[index].params is the group's buffer: every parameter's values in order, each p.data a view of it"
assert not np.shares_memory(_rs_opt._flat[1].grad, _rs_opt._flat[1].params) \
    and _rs_opt._flat[1].grad.size == sum(v.size for v in _rs_values), \
    "the gradient buffer opt._flat[index].grad is a second array of the buffer's size"
_rs_mixed = [Parameter(check_rng.standard_normal(2)) for _ in range(4)]
_rs_odd = int(check_rng.integers(1, 4))
_rs_mixed[_rs_odd] = Parameter(check_rng.standard_normal(2).astype(np.float32))
try:
    SGD(_rs_mixed, lr=0.1, flat=True)
    raise AssertionError("parameters of different dtypes must be refused with a ValueError")
except ValueError as err:
    assert "dtype" in str(err) and f"parameter {_rs_odd}" in str(err), \
        f"the error for mixed dtypes must say dtype and name the parameter (parameter i); got {err}"
### END HIDDEN TESTS

# %% [markdown]
# The state arrays get the same layout as the parameters: one flat
# `exp_avg` per group, each parameter's `state[p]["exp_avg"]` a view into
# it. A step is then
#
# 1. copy the gradients into the flat gradient buffer:
#    `np.concatenate([p.grad.data for p in params], axis=None, out=grad)`
#    (`axis=None` flattens each gradient) — one copy, done in C;
# 2. `_update(buffer, grad, flat_state, group)`: the very rule of the loop,
#    each of its operations over the whole group.
#
# One refinement for the CPU: each NumPy operation streams its arrays
# through memory once. Over a 10 MB buffer, ten operations mean ten trips to
# main memory, while the loop over 256 KB tensors kept each tensor in the
# CPU's cache between its ten operations — so on large models a naive flat
# step can be *slower* than the loop. The flat step therefore runs `_update`
# on consecutive, equal blocks of at most `CHUNK` numbers (views, made once
# by `_FlatGroup.make_blocks`): few enough calls that dispatch stays
# negligible, small enough blocks that each stays in cache (*cache
# blocking*). How small pays depends on the machine: on the 2-core
# development machine (1 MB L2, 32 MB L3 cache) blocks of 2¹⁷ numbers were
# fastest, 2¹⁵ about 8% slower (more dispatches), one unblocked pass over
# 1.7 M numbers about 3% slower. On a GPU the whole buffer is one block.
#
# This is where Adam's spare arrays pay: a block's intermediates go into
# one spare block that every block and every step reuses, instead of six
# fresh arrays per block — and because the flat step runs the loop's own
# rule, flat and loop give the same numbers to the last bit (a checkpoint
# resumes exactly in either layout).
#
# Keep the per-step bookkeeping over the parameters cheap too: with 100
# tensors, a check that costs a microsecond per parameter costs as much as
# the whole update of 10 k numbers. Collect what you need in one list
# (`[opt.state[p] for p in params]`) and test it with list methods rather
# than a nested generator per parameter.
#
# Why copy the gradients instead of making each `.grad` a view into the flat
# gradient buffer? Because `zero_grad()` sets `.grad = None`, and the next
# backward then stores a fresh array of its own (module 02): views would have
# to be re-installed after every `zero_grad`, and a single forgotten case
# silently trains on stale gradients. One copy is always right and costs one
# pass over memory, against the ten or so the rule makes anyway.
#
# ### Task `optim_flat_step` (2 points): one update per block
#
# * `_flat_state(opt, index)` makes the group's flat state once
#   (`opt._new_state(flat.params, group, flat.device.xp)`), then its blocks
#   (`flat.make_blocks()`), and makes each parameter's `opt.state[p]` a dict
#   of views of its slice of the flat state arrays (scalars copied as they
#   are). It returns the `_FlatGroup`. (`load_state_dict`, two tasks on,
#   calls it too.)
# * `_flat_step(opt, index)` (the given start of `step()` calls it for a
#   flat group) needs every parameter of the group to take
#   part, with the same step count and the same scalar state. When one does
#   not (frozen, no gradient this step), the group runs the per-parameter
#   loop on the views instead — same memory, same results, only slower.
#   Otherwise: copy the gradients into the flat gradient buffer
#   (`flat.grad`), add 1 to the step, run `opt._update` on
#   each block, every block starting from the same scalars (NAdam's
#   `mu_product` changes in each call), and give the scalars the last block
#   ended with to the flat state and to every parameter's state. A
#   parameter whose `p.data` is no longer a view of the buffer (the model
#   was moved after the optimizer was built) is a `RuntimeError` that says
#   so (given).
#
# **Checked when graded** (besides the tests below), for any shapes,
# gradients and settings:
#
# * each parameter's state arrays are views of the group's flat state
# * after a flat step every parameter's state, and the flat state, count one step
# * a parameter without a gradient is skipped (the group falls back to the loop)
# * the others are updated, and their step counted
# * NAdam over several blocks agrees with the loop to the bit: every block starts from the same scalar state

# %% nbgrader={"grade": false, "grade_id": "optim_flat_step_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _flat_state(opt: Optimizer, index: int) -> _FlatGroup:
    """Make the group's flat state (once); each parameter's state arrays become views of it."""
    ### BEGIN SOLUTION
    flat, group = opt._flat[index], opt.param_groups[index]
    if flat.state is None:
        flat.state = opt._new_state(flat.params, group, flat.device.xp)
        flat.make_blocks()
        for p, (start, n, shape) in zip(group["params"], flat.slices):
            opt.state[p] = {k: v[start:start + n].reshape(shape) if is_array(v) else v for k, v in flat.state.items()}
    return flat
    ### END SOLUTION


def _flat_step(opt: Optimizer, index: int) -> None:
    """One step of a flat group: ``_update`` on each block of the buffer when every parameter takes part."""
    group = opt.param_groups[index]
    params = group["params"]
    flat = _flat_state(opt, index)
    for i, p in enumerate(params):
        if p.data.base is not flat.params:  # e.g. model.to() swapped the arrays after flattening
            raise RuntimeError(
                f"{type(opt).__name__}(flat=True): parameter {i} of group {index} no longer lives in the "
                "optimizer's flat buffer (was the model moved or cast after the optimizer was built?); "
                "move the model first, then build the optimizer"
            )
    ### BEGIN SOLUTION
    # the per-parameter checks below run on every step: plain list operations keep them to a few µs
    states = [opt.state[p] for p in params]
    scalars = {k: v for k, v in states[0].items() if not is_array(v)}
    together = all(p.requires_grad and p.grad is not None for p in params) and all(
        [state[k] for state in states].count(v) == len(states) for k, v in scalars.items())
    if not together:
        for p, state in zip(params, states):
            if p.requires_grad and p.grad is not None:
                state["step"] += 1
                opt._update(p.data, p.grad.data, state, group, p.device.xp)
        return
    flat.device.xp.concatenate([p.grad.data for p in params], axis=None, out=flat.grad)  # None: flattened
    scalars["step"] += 1
    for block_params, block_grad, block_state in flat.blocks:
        block_state.update(scalars)  # every block starts from the same scalars (NAdam changes one)
        opt._update(block_params, block_grad, block_state, group, flat.device.xp)
    if flat.blocks:
        scalars = {k: v for k, v in flat.blocks[-1][2].items() if not is_array(v)}
    flat.state.update(scalars)
    for state in states:
        state.update(scalars)
    ### END SOLUTION


# %% [markdown]
# Try it: the same model, the same gradients, per-parameter and flat.

# %%
looped, flat = _model(), _model()
opt_loop, opt_flat = AdamW(looped, lr=0.1), AdamW(flat, lr=0.1, flat=True)
for t in range(5):
    for a, b in zip(looped, flat):
        a.grad = Tensor(np.cos(a.data) * (t + 1))
        b.grad = Tensor(np.cos(b.data) * (t + 1))
    opt_loop.step()
    opt_flat.step()
print("largest difference:", max(float(np.abs(a.data - b.data).max()) for a, b in zip(looped, flat)))

# %% nbgrader={"grade": true, "grade_id": "optim_flat_step", "locked": true, "points": 2, "schema_version": 3, "solution": false}
ps = _model()
buffer_opt = SGD(ps, lr=0.1, momentum=0.9, flat=True)
reference = [p.data.copy() for p in ps]
for p in ps:
    p.grad = Tensor(np.ones_like(p.data))
buffer_opt.step()
assert all(_close(p.data, r - 0.1) for p, r in zip(ps, reference)), "one SGD step over the flat buffer"
assert np.array_equal(buffer_opt._flat[0].grad, np.ones(23)), \
    "the flat step copies the gradients into the group's gradient buffer, opt._flat[0].grad"
assert all(np.array_equal(a.data, b.data) for a, b in zip(looped, flat)), "flat and loop agree to the last bit"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_shapes = [tuple(int(n) for n in check_rng.integers(1, 6, int(check_rng.integers(1, 3))))
              for _ in range(int(check_rng.integers(3, 7)))]
_rs_ps = [Parameter(check_rng.standard_normal(shape)) for shape in _rs_shapes]
_rs_x = [p.data.copy() for p in _rs_ps]
_rs_g = [check_rng.standard_normal(shape) for shape in _rs_shapes]
_rs_lr, _rs_mu = float(check_rng.uniform(0.05, 0.2)), float(check_rng.uniform(0.5, 0.95))
_rs_opt = SGD(_rs_ps, lr=_rs_lr, momentum=_rs_mu, flat=True)
for p, g in zip(_rs_ps, _rs_g):
    p.grad = Tensor(g.copy())
_rs_opt.step()
assert all(np.shares_memory(_rs_opt.state[p]["momentum_buffer"], _rs_opt._flat[0].state["momentum_buffer"])
           for p in _rs_ps), "each parameter's state arrays are views of the group's flat state"
assert all(_rs_opt.state[p]["step"] == 1 for p in _rs_ps) and _rs_opt._flat[0].state["step"] == 1, \
    "after a flat step every parameter's state, and the flat state, count one step"
_rs_skip = int(check_rng.integers(len(_rs_ps)))
_rs_ps[_rs_skip].grad = None
_rs_opt.step()  # the others: a second step with the same gradient, b = μg + g
assert _close(_rs_ps[_rs_skip].data, _rs_x[_rs_skip] - _rs_lr * _rs_g[_rs_skip]) \
    and _rs_opt.state[_rs_ps[_rs_skip]]["step"] == 1, \
    "a parameter without a gradient is skipped (the group falls back to the loop)"
assert all(_close(p.data, x - _rs_lr * (2 + _rs_mu) * g) and _rs_opt.state[p]["step"] == 2
           for i, (p, x, g) in enumerate(zip(_rs_ps, _rs_x, _rs_g)) if i != _rs_skip), \
    "the others are updated, and their step counted"
_rs_sizes = [int(n) for n in check_rng.integers(50_000, 85_000, 3)]  # 150 k to 255 k numbers: two blocks
_rs_loop = [Parameter(check_rng.standard_normal(n)) for n in _rs_sizes]
_rs_flat = [Parameter(p.data.copy()) for p in _rs_loop]
_rs_lr = float(check_rng.uniform(0.005, 0.05))
_rs_nadams = NAdam(_rs_loop, lr=_rs_lr), NAdam(_rs_flat, lr=_rs_lr, flat=True)
for t in range(3):
    for a, b in zip(_rs_loop, _rs_flat):
        a.grad = Tensor(np.sin(a.data + t))
        b.grad = Tensor(np.sin(b.data + t))
    for _rs_one in _rs_nadams:
        _rs_one.step()
assert len(_rs_nadams[1]._flat[0].blocks) == -(-sum(_rs_sizes) // CHUNK) \
    and all(np.array_equal(a.data, b.data) for a, b in zip(_rs_loop, _rs_flat)), \
    "NAdam over several blocks agrees with the loop to the bit: every block starts from the same scalar state"
### END HIDDEN TESTS

# %% [markdown]
# ## Saving and restoring: `state_dict`
#
# Resuming a run must continue *exactly* where it stopped: the same step
# counts (Adam's bias correction depends on them), the same running
# averages, the same hyper-parameters. `state_dict()` returns
#
# ```python
# {"state": {0: {"step": 12, "exp_avg": array(...), ...}, ...},   # by parameter index
#  "param_groups": [{"lr": 0.001, ..., "params": [0, 1, 2]}, ...]}
# ```
#
# Parameters are numbered in order across the groups: a parameter object
# means nothing in another process, its position does. A parameter that has
# not been updated yet has no state, so no entry in `"state"` — but it keeps
# its number in its group's `"params"`. Scalars are plain Python numbers,
# arrays are NumPy copies (taken off the GPU: `_host(value)`, given, does
# both), so the dict can go into JSON + safetensors, and changing it later
# changes nothing in the optimizer.
#
# ### Task `optim_state_dict` (1 point): the state as numbers and copies
#
# Write `_state_dict(opt)`, which `Optimizer.state_dict()` returns.
#
# **Checked when graded** (besides the tests below), for any groups and
# parameters:
#
# * state_dict holds copies of the state arrays, not the arrays themselves
# * a parameter without state has no entry in 'state' but keeps its number
# * each entry of 'state' holds its parameter's step count

# %% nbgrader={"grade": false, "grade_id": "optim_state_dict_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _host(value: Any) -> Any:
    """A NumPy copy of an array (from the GPU if need be); other values unchanged."""
    return to_host(value, copy=True) if is_array(value) else value


def _state_dict(opt: Optimizer) -> dict[str, Any]:
    ### BEGIN SOLUTION
    state: dict[int, dict[str, Any]] = {}
    groups = []
    index = 0
    for group in opt.param_groups:
        numbers = []
        for p in group["params"]:
            if p in opt.state:
                state[index] = {k: _host(v) for k, v in opt.state[p].items()}
            numbers.append(index)
            index += 1
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": numbers})
    return {"state": state, "param_groups": groups}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_state_dict", "locked": true, "points": 1, "schema_version": 3, "solution": false}
def _train(opt, params, steps):
    for _ in range(steps):
        for p in params:
            p.grad = Tensor(np.sin(3 * p.data) + 0.1 * p.data ** 2)
        opt.step()


w1, w2 = Parameter(np.array([0.5, -1.0], np.float32)), Parameter(np.array([[2.0]], np.float32))
opt = Adam([{"params": [w1]}, {"params": [w2], "lr": 0.01}], lr=0.1)
_train(opt, [w1, w2], 3)
saved = opt.state_dict()
assert saved["state"][0]["step"] == 3 and saved["state"][1]["exp_avg"].shape == (1, 1), \
    "state: each parameter's step count and arrays, under its number"
assert [g["params"] for g in saved["param_groups"]] == [[0], [1]] and saved["param_groups"][1]["lr"] == 0.01, \
    "param_groups: each group's hyper-parameters, and its parameters as numbers counted across the groups"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_n = int(check_rng.integers(3, 7))
_rs_k = int(check_rng.integers(1, _rs_n))  # the first group's share of the parameters
_rs_ps = [Parameter(check_rng.standard_normal(int(check_rng.integers(1, 5)))) for _ in range(_rs_n)]
_rs_idle, _rs_steps = int(check_rng.integers(_rs_n)), int(check_rng.integers(1, 5))
_rs_opt = SGD([{"params": _rs_ps[:_rs_k]}, {"params": _rs_ps[_rs_k:]}], lr=float(check_rng.uniform(0.01, 0.2)),
              momentum=float(check_rng.uniform(0.5, 0.95)))
for _ in range(_rs_steps):
    for i, p in enumerate(_rs_ps):
        p.grad = None if i == _rs_idle else Tensor(check_rng.standard_normal(p.shape))
    _rs_opt.step()
_rs_saved = _rs_opt.state_dict()
_rs_busy = (_rs_idle + 1) % _rs_n
_rs_live = _rs_opt.state[_rs_ps[_rs_busy]]["momentum_buffer"].copy()
_rs_saved["state"][_rs_busy]["momentum_buffer"][...] = float(check_rng.uniform(100.0, 200.0))
assert np.abs(_rs_opt.state[_rs_ps[_rs_busy]]["momentum_buffer"] - _rs_live).max() == 0, \
    "state_dict holds copies of the state arrays, not the arrays themselves"
assert sorted(_rs_saved["state"]) == [i for i in range(_rs_n) if i != _rs_idle] \
    and [g["params"] for g in _rs_saved["param_groups"]] == [list(range(_rs_k)), list(range(_rs_k, _rs_n))], \
    "a parameter without state has no entry in 'state' but keeps its number"
assert all(_rs_saved["state"][i]["step"] == _rs_steps for i in range(_rs_n) if i != _rs_idle), \
    "each entry of 'state' holds its parameter's step count"
### END HIDDEN TESTS

# %% [markdown]
# `load_state_dict` restores such a dict into an optimizer built over the
# same parameters; anything that does not match — the number of groups, of
# parameters in a group, a state entry's name or shape — is an error that
# says which group, which parameter, what was expected and what came. Those
# checks are given: `_validate_state_dict(opt, state_dict)` makes every one
# of them without changing anything; `opt.validate_state_dict(state_dict)`
# is its public name (a checkpoint loader calls it before it copies the
# first byte). Each group's `"initial_lr"` is a hyper-parameter like the
# others: saved once, in its group, and restored with it.

# %%
#| export
def _validate_state_dict(opt: Optimizer, state_dict: Any) -> None:
    """Every check ``load_state_dict`` makes, without changing anything: a ValueError saying what does not match."""
    name = type(opt).__name__
    if not isinstance(state_dict, dict) or not isinstance(state_dict.get("param_groups"), list) \
            or not isinstance(state_dict.get("state"), dict):
        raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' (a dict) and 'param_groups' (a list), "
                         "as state_dict() returns")
    groups, saved = state_dict["param_groups"], state_dict["state"]
    if len(groups) != len(opt.param_groups):
        raise ValueError(f"{name}.load_state_dict: the state has {len(groups)} parameter groups; "
                         f"this optimizer has {len(opt.param_groups)}")
    try:
        saved = {int(k): v for k, v in saved.items()}  # JSON turns the keys into strings
    except (TypeError, ValueError):
        raise ValueError(f"{name}.load_state_dict: the state's keys must be parameter numbers; "
                         f"got {sorted(map(str, saved))[:5]}") from None
    for i, (mine, theirs) in enumerate(zip(opt.param_groups, groups)):
        if not isinstance(theirs, dict) or not isinstance(theirs.get("params"), list):
            raise ValueError(f"{name}.load_state_dict: group {i} of the state is not a dict with a 'params' list")
        if len(mine["params"]) != len(theirs["params"]):
            raise ValueError(f"{name}.load_state_dict: group {i} has {len(theirs['params'])} parameters in the state; "
                             f"{len(mine['params'])} in this optimizer")
        unknown = set(theirs) - set(mine)
        if unknown:
            raise ValueError(f"{name}.load_state_dict: group {i} of the state has hyper-parameter(s) {sorted(unknown)}, "
                             f"which {name} does not have; was it saved from another optimizer?")
        merged = {**mine, **{k: _pair(v) for k, v in theirs.items() if k not in ("params", "flat")}}
        opt._check(merged)
        for p, number in zip(mine["params"], theirs["params"]):
            if number not in saved:
                continue
            entry, fresh = saved[number], opt._new_state(p.data, merged, p.device.xp)
            if not isinstance(entry, dict) or set(entry) != set(fresh):
                keys = sorted(entry) if isinstance(entry, dict) else entry
                raise ValueError(f"{name}.load_state_dict: parameter {number} (group {i}, shape {p.shape}) has state "
                                 f"{keys}; expected {sorted(fresh)}")
            for key, value in entry.items():
                if is_array(fresh[key]) and (not is_array(value) or tuple(value.shape) != p.shape):
                    shape = tuple(value.shape) if is_array(value) else type(value).__name__
                    raise ValueError(f"{name}.load_state_dict: state {key!r} of parameter {number} (group {i}) has "
                                     f"shape {shape}; the parameter has shape {p.shape}")


# %% [markdown]
# ### Task `optim_load_state_dict` (2 points): an exact resume
#
# Write `_load_state_dict(opt, state_dict)`, which
# `Optimizer.load_state_dict` calls:
#
# 1. `_validate_state_dict(opt, state_dict)` first: a dict that does not
#    fit changes nothing.
# 2. Loaded hyper-parameters replace the current ones, group by group
#    (all but `"params"` and `"flat"`; JSON brings tuples back as lists:
#    make `betas` a tuple again).
# 3. For each parameter with an entry in `"state"`: make its state if it
#    has none yet (`opt._new_state`), then copy each array **into** the
#    existing state array (`state[key][...] = ...`, in the parameter's
#    dtype, on its device: `p.device.xp.asarray(value, dtype=p.dtype)`) and
#    set each scalar. Copying in, rather than keeping the given arrays,
#    means that training on does not change the dict you were given — and
#    a flat group's state stays one buffer: for a flat group (`i in
#    opt._flat`), call `_flat_state(opt, i)` (task `optim_flat_step`) once
#    its hyper-parameters are loaded and before copying, so the views exist.
#
# **Checked when graded** (besides the test below), for any parameters,
# settings and number of steps:
#
# * the loaded hyper-parameters replace the optimizer's own
# * the loaded step count goes on counting
# * a resume is exact: the same numbers as a run that never stopped
# * training after a load must not change the dict that was loaded: copy its arrays into the optimizer's own
# * a flat optimizer resumes exactly too, its state still views of the flat state: call `_flat_state` before copying
# * betas loaded from JSON (a list) become a tuple again
# * a state that does not fit the optimizer must be refused with a ValueError
# * a refused state changes nothing: validate before loading

# %% nbgrader={"grade": false, "grade_id": "optim_load_state_dict_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _load_state_dict(opt: Optimizer, state_dict: dict[str, Any]) -> None:
    ### BEGIN SOLUTION
    _validate_state_dict(opt, state_dict)
    groups = state_dict["param_groups"]
    saved = {int(k): v for k, v in state_dict["state"].items()}
    for i, (mine, theirs) in enumerate(zip(opt.param_groups, groups)):
        for key, value in theirs.items():
            if key not in ("params", "flat"):
                mine[key] = tuple(value) if isinstance(value, list) else value
        if i in opt._flat:
            _flat_state(opt, i)
        for p, number in zip(mine["params"], theirs["params"]):
            if number not in saved:
                continue
            state = opt.state.setdefault(p, opt._new_state(p.data, mine, p.device.xp))
            for key, value in saved[number].items():
                if is_array(state[key]):
                    state[key][...] = p.device.xp.asarray(value, dtype=p.dtype)
                else:
                    state[key] = value
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "optim_load_state_dict", "locked": true, "points": 2, "schema_version": 3, "solution": false}
w1, w2 = Parameter(np.array([0.5, -1.0], np.float32)), Parameter(np.array([[2.0]], np.float32))
opt = Adam([{"params": [w1]}, {"params": [w2], "lr": 0.01}], lr=0.1)
_train(opt, [w1, w2], 3)
saved = opt.state_dict()
saved_exp_avg = saved["state"][0]["exp_avg"].copy()
v1, v2 = Parameter(w1.data.copy()), Parameter(w2.data.copy())
again = Adam([{"params": [v1]}, {"params": [v2]}], lr=0.5)
again.load_state_dict(saved)
_train(opt, [w1, w2], 4)
_train(again, [v1, v2], 4)
assert np.array_equal(w1.data, v1.data) and np.array_equal(w2.data, v2.data), "resume must be exact"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_x = [check_rng.standard_normal(3), check_rng.standard_normal((2, 2))]
_rs_lr1, _rs_lr2 = float(check_rng.uniform(0.01, 0.2)), float(check_rng.uniform(0.01, 0.2))
_rs_betas = (float(check_rng.uniform(0.7, 0.95)), float(check_rng.uniform(0.9, 0.999)))
_rs_before, _rs_after = int(check_rng.integers(2, 6)), int(check_rng.integers(2, 6))
_rs_a = [Parameter(x.copy()) for x in _rs_x]
_rs_opt = Adam([{"params": [_rs_a[0]]}, {"params": [_rs_a[1]], "lr": _rs_lr2}], lr=_rs_lr1, betas=_rs_betas)
_train(_rs_opt, _rs_a, _rs_before)
_rs_saved = _rs_opt.state_dict()
_rs_kept = _rs_saved["state"][0]["exp_avg"].copy()
_rs_b, _rs_c = [Parameter(p.data.copy()) for p in _rs_a], [Parameter(p.data.copy()) for p in _rs_a]
_rs_again = Adam([{"params": [_rs_b[0]]}, {"params": [_rs_b[1]]}], lr=0.5)
_rs_again.load_state_dict(_rs_saved)
assert [g["lr"] for g in _rs_again.param_groups] == [_rs_lr1, _rs_lr2] \
    and _rs_again.param_groups[0]["betas"] == _rs_betas, "the loaded hyper-parameters replace the optimizer's own"
_train(_rs_opt, _rs_a, _rs_after)
_train(_rs_again, _rs_b, _rs_after)
assert _rs_again.state[_rs_b[0]]["step"] == _rs_before + _rs_after, "the loaded step count goes on counting"
assert all(np.abs(a.data - b.data).max() == 0 for a, b in zip(_rs_a, _rs_b)), \
    "a resume is exact: the same numbers as a run that never stopped"
assert np.abs(_rs_saved["state"][0]["exp_avg"] - _rs_kept).max() == 0, \
    "training after a load must not change the dict that was loaded: copy its arrays into the optimizer's own"
_rs_flat = Adam([{"params": [_rs_c[0]]}, {"params": [_rs_c[1]]}], flat=True)
_rs_flat.load_state_dict(_rs_saved)
_train(_rs_flat, _rs_c, _rs_after)
assert all(np.abs(a.data - c.data).max() == 0 for a, c in zip(_rs_a, _rs_c)) \
    and all(np.shares_memory(_rs_flat.state[p]["exp_avg"], _rs_flat._flat[i].state["exp_avg"]) for i, p in enumerate(_rs_c)), \
    "a flat optimizer resumes exactly too, its state still views of the flat state: call _flat_state before copying"
_rs_back = Adam([{"params": [Parameter(x.copy())]} for x in _rs_x])
_rs_back.load_state_dict({"state": {}, "param_groups": [{**g, "betas": list(g["betas"])} for g in _rs_saved["param_groups"]]})
assert isinstance(_rs_back.param_groups[0]["betas"], tuple) and _rs_back.param_groups[0]["betas"] == _rs_betas, \
    "betas loaded from JSON (a list) become a tuple again"
_rs_wrong = int(check_rng.integers(4, 9))  # parameter 0 has 3 numbers
for _rs_broken in ({"param_groups": _rs_saved["param_groups"][:1], "state": _rs_saved["state"]},
                   {"param_groups": _rs_saved["param_groups"],
                    "state": {0: {"step": 1, "exp_avg": np.zeros(_rs_wrong), "exp_avg_sq": np.zeros(_rs_wrong)}}},
                   {"param_groups": _rs_saved["param_groups"], "state": {0: {"step": 1}}}):
    try:
        Adam([{"params": [Parameter(x.copy())]} for x in _rs_x]).load_state_dict(_rs_broken)
        raise AssertionError("a state that does not fit the optimizer must be refused with a ValueError")
    except ValueError:
        pass
_rs_fresh = Adam([{"params": [Parameter(x.copy())]} for x in _rs_x], lr=0.5)
_rs_misfit = {"param_groups": _rs_saved["param_groups"],
              "state": {**_rs_saved["state"], 1: {**_rs_saved["state"][1], "exp_avg": np.zeros(_rs_wrong)}}}
try:
    _rs_fresh.load_state_dict(_rs_misfit)
except ValueError:
    pass
assert [g["lr"] for g in _rs_fresh.param_groups] == [0.5, 0.5] and len(_rs_fresh.state) == 0, \
    "a refused state changes nothing: validate before loading"
### END HIDDEN TESTS

# %% [markdown]
# ## Systems questions
#
# 1. Adam keeps two arrays per parameter (three with AMSGrad). For a model
#    of 100 M float32 parameters, how much memory do parameters, gradients
#    and Adam's state take together? How does the flat buffer change that?
# 2. Count the passes over memory of one Adam step in the NumPy `_update`
#    (each operation reads its inputs and writes its output). The fused CuPy
#    kernel makes one. Which is faster for a large model, and why is the
#    difference smaller for a 1000-number model?
# 3. Why does `step()` skip a parameter with `grad is None` instead of
#    treating its gradient as zero? (Hint: what would Adam's momentum do to
#    a frozen embedding row?)
