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
# # Module 04 — Losses
#
# A loss turns a network's output and the right answer into one number that
# training pushes down. Writing one is easy; writing one that stays finite
# when the network is very sure and very wrong — logits of ±10⁴, a
# probability of exactly 0 — is where frameworks earn their keep. This
# module builds PyTorch's losses (`torch.nn.functional.*`: same names,
# argument names and defaults), each with `reduction="mean" | "sum" | "none"`.
#
# | task | points | what |
# |---|---|---|
# | `losses_regression` | 1 | `mse_loss`, `l1_loss`, and the reductions |
# | `losses_huber` | 2 | `smooth_l1_loss`, `huber_loss`: quadratic near 0, linear far away |
# | `losses_nll` | 2 | `nll_loss`: class indices, `weight`, `ignore_index` |
# | `losses_cross_entropy` | 2 | `cross_entropy`: class indices or probabilities, `label_smoothing` |
# | `losses_binary` | 1 | `binary_cross_entropy`, with its own clamped backward |
# | `losses_bce_logits` | 1 | `binary_cross_entropy_with_logits` (stable), `pos_weight` |
# | `losses_focal` | 1 | `sigmoid_focal_loss` |
# | `losses_divergence` | 1 | `kl_div` |
# | `losses_poisson` | 1 | `poisson_nll_loss` |
# | `losses_triplet` | 1 | `triplet_margin_loss` |
# | `losses_cosine` | 1 | `cosine_embedding_loss` |
# | `losses_margin` | 1 | `hinge_embedding_loss`, `margin_ranking_loss` |
# | `losses_ctc` | 2 | `ctc_loss`: the forward dynamic programme, in log space |
# | `losses_ctc_backward` | 2 | `ctc_loss`'s own backward: the second dynamic programme |
#
# Almost every loss here is a *composition* of ops that already have a
# gradient (module 01) — the chain rule comes for free. Two earn their own
# `Function`, the way `softplus` and `log_softmax` did in module 03:
# `binary_cross_entropy` (PyTorch clamps its logarithms, and the gradient of
# a clamp would be zero exactly where it matters) and CTC (a dynamic
# programme whose backward is a second dynamic programme, not thousands of
# tiny graph nodes).
#
# **Signatures.** PyTorch still carries the deprecated `size_average` and
# `reduce` arguments in the middle of its signatures. tinyflo leaves them
# out and makes everything after their place keyword-only, so a call that is
# valid in modern PyTorch either means the same here or fails loudly — never
# silently something else.

# %%
#| default_exp core.losses

# %%
#| export
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyflo.core.layers import Module, check_arg, log_softmax, softplus
from tinyflo.core.tensor import (
    AutocastMode,
    DeviceError,
    Function,
    ShapeError,
    Tensor,
    check_tensor,
    described,
    is_floating,
    where,
)

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.losses: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.losses"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
from tinyflo.core.autograd import gradcheck

# %% [markdown]
# ## Shared checks
#
# Every loss starts the same way: the input must be a floating tensor; the
# target may be a tensor, an array or a list, and becomes a tensor on the
# input's device — in the input's dtype when it is floating, so float32 in
# gives float32 out. Shapes must match exactly. PyTorch only *warns* when
# they do not, and then broadcasts: an input of shape (N, 1) against a
# target of shape (N,) silently becomes an (N, N) loss, a classic bug that
# trains a regression model to predict the mean. Here it is an error.
#
# Class weights (`weight`, `pos_weight`) are constants, as in PyTorch:
# nothing flows back into them.
#
# Every option of every loss is checked by module 03's `check_arg` against the table `_OPTIONS` (the loss modules
# at the end of this notebook check the same table when they are built):
# `cross_entropy got label_smoothing=1.5; expected a number in [0, 1]`.
#
# A mean over no elements at all (a batch of 0 rows) is NaN, as in PyTorch,
# and a sum over them 0. `_reduce` gives that NaN as `loss.sum() * nan`,
# which NumPy computes without its "invalid value" warning, and whose
# gradient is the empty array it should be.

# %%
#| export
_REDUCTIONS = ("mean", "sum", "none")
_OPTIONS = {  # what each option of a loss must be (``reduction``: one of the loss's reductions)
    "beta": "a number >= 0",
    "delta": "a number > 0",
    "label_smoothing": "a number in [0, 1]",
    "ignore_index": "an integer",
    "margin": "a number",
    "p": "a number > 0",
    "eps": "a number >= 0",
    "alpha": "a number",
    "gamma": "a number >= 0",
    "blank": "an integer >= 0",
    "swap": "True or False",
    "log_target": "True or False",
    "log_input": "True or False",
    "full": "True or False",
    "zero_infinity": "True or False",
}


def _check_options(loss: str, reductions: tuple[str, ...] = _REDUCTIONS, **options: Any) -> None:
    """A ValueError naming the first option that is not what ``_OPTIONS`` (or ``reductions``) says."""
    for name, value in options.items():
        check_arg(loss, name, value, reductions if name == "reduction" else _OPTIONS[name])


def _input(x: Any, loss: str, argument: str = "input") -> Tensor:
    """The prediction argument: a floating Tensor."""
    check_tensor(loss, argument, x)
    if not is_floating(x.dtype):
        raise TypeError(f"{loss}: {argument} must be floating (float32, float64, ...); got {x.dtype}")
    policy = AutocastMode.policy
    if policy is not None:  # inside autocast() (module 11) every loss runs in float32
        (x,) = policy.cast_inputs("loss", (x,))
    return x


def _like(value: Any, input: Tensor, loss: str, argument: str = "target", floating: bool = True) -> Tensor:
    """``value`` as a tensor on ``input``'s device; in its dtype when floating (float32 stays float32)."""
    if isinstance(value, Tensor):
        if value.device is not input.device:
            raise DeviceError(f"{loss}: {argument} is on {value.device} but the input is on {input.device}")
    else:
        try:
            value = Tensor(value, device=input.device)
        except TypeError:
            raise TypeError(f"{loss}: {argument} must be a Tensor, an array or a (nested) list of numbers; "
                            f"got {described(value)}") from None
    if floating and value.dtype != input.dtype:
        value = value.to(dtype=input.dtype)
    return value


def _same_shape(input: Tensor, other: Tensor, loss: str, argument: str = "target") -> None:
    if other.shape != input.shape:
        raise ShapeError(
            f"{loss}: {argument} has shape {other.shape} but input has shape {input.shape}; they must "
            "match (broadcasting (N, 1) against (N,) would silently give an (N, N) loss)"
        )


def _constant(value: Any, input: Tensor, loss: str, argument: str, shape: tuple | None = None) -> Tensor:
    """A weight: a constant tensor (no gradient) on input's device, in its dtype, of ``shape`` if given."""
    t = _like(value, input, loss, argument).detach()
    if shape is not None and t.shape != shape:
        raise ShapeError(f"{loss}: {argument} must have shape {shape}; got {t.shape}")
    return t


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    """Apply ``reduction``: the mean or sum of every element, or the elementwise losses."""
    _check_options(name, reduction=reduction)
    if reduction == "mean":
        if loss.numel() == 0:  # the mean of nothing: NaN, as in PyTorch, without dividing 0 by 0
            return loss.sum() * math.nan
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


# %% [markdown]
# ## Regression losses
#
# With d = input − target, elementwise:
#
# | loss | value | PyTorch's parameter |
# |---|---|---|
# | `mse_loss` | d² | |
# | `l1_loss` | \|d\| | |
# | `smooth_l1_loss` | ½d²/β where \|d\| < β, else \|d\| − ½β | `beta=1.0` (β = 0 is plain L1) |
# | `huber_loss` | ½d² where \|d\| ≤ δ, else δ(\|d\| − ½δ) | `delta=1.0` |
#
# Squared error punishes outliers quadratically, so one bad label can
# dominate a batch's gradient; L1's gradient is ±1 whatever the size of the
# error, but has a kink at 0 where training jitters. Huber and smooth L1
# take the quadratic near 0 and the linear far away; the two branches meet
# with equal value *and* slope. (Smooth L1 is Huber divided by β.)
#
# Write each as a composition of tensor ops, and hand the elementwise
# losses to `_reduce`. Compute d² as `d * d` rather than through `|d|`:
# its gradient, 2d, needs no sign.
#
# ### Task `losses_regression` (1 point): `mse_loss` and `l1_loss`
#
# **Checked when graded** (besides the tests below), with a shape, values
# and errors d of both signs drawn for you:
#
# * mse_loss with reduction='none': d² per element
# * mse_loss: the mean of d² over every element, not over the first axis only
# * l1_loss: the mean of |d| over every element
# * l1_loss with reduction='sum' gives the sum of |d|
# * the gradients of mse_loss and l1_loss must match finite differences
# * l1_loss with an unknown reduction must raise a ValueError
# * the error must name the argument reduction
# * an input of shape (n, 1) against a target of shape (n,) must raise a ShapeError
# * the error must show both shapes

# %% nbgrader={"grade": false, "grade_id": "losses_regression_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def mse_loss(input: Tensor, target: Any, *, reduction: str = "mean") -> Tensor:
    """Mean squared error: (input − target)², reduced."""
    input = _input(input, "mse_loss")
    target = _like(target, input, "mse_loss")
    _same_shape(input, target, "mse_loss")
    ### BEGIN SOLUTION
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")
    ### END SOLUTION


def l1_loss(input: Tensor, target: Any, *, reduction: str = "mean") -> Tensor:
    """Mean absolute error: |input − target|, reduced."""
    input = _input(input, "l1_loss")
    target = _like(target, input, "l1_loss")
    _same_shape(input, target, "l1_loss")
    ### BEGIN SOLUTION
    return _reduce((input - target).abs(), reduction, "l1_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_regression", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([[0.5, 2.0, -3.0], [0.1, -0.2, 1.5]])
Y = np.array([[0.0, 1.0, 0.0], [0.3, 0.3, -1.0]])
D = X - Y
x = Tensor(X, requires_grad=True)
assert np.allclose(mse_loss(x, Y).item(), (D ** 2).mean()), "mse_loss: the mean of d² over every element"
assert np.allclose(mse_loss(x, Y, reduction="sum").item(), (D ** 2).sum())
assert np.allclose(l1_loss(x, Y, reduction="none").numpy(), np.abs(D))
assert mse_loss(Tensor([1.0, 2.0]), [0.0, 0.0]).dtype == np.float32, "float32 in, float32 out"
try:
    mse_loss(x, Y, reduction="avg")
    raise AssertionError("an unknown reduction must raise")
except ValueError as err:
    assert "reduction" in str(err) and "avg" in str(err)
### BEGIN HIDDEN TESTS
# This student's own inputs: a shape and values drawn per student; the errors d hold both signs.
_shape = (int(check_rng.integers(2, 5)), int(check_rng.integers(2, 5)))
_signs = check_rng.permutation(np.resize([1.0, -1.0], _shape[0] * _shape[1])).reshape(_shape)
_X = check_rng.standard_normal(_shape)
_Y = _X - _signs * check_rng.uniform(0.1, 2.0, _shape)
_D = _X - _Y
_x = Tensor(_X, requires_grad=True)
assert np.allclose(mse_loss(_x, _Y, reduction="none").numpy(), _D ** 2), "mse_loss with reduction='none': d² per element"
assert np.allclose(mse_loss(_x, _Y).item(), np.mean(_D ** 2)), (
    "mse_loss: the mean of d² over every element, not over the first axis only"
)
assert np.allclose(l1_loss(_x, _Y).item(), np.mean(np.abs(_D))), "l1_loss: the mean of |d| over every element"
assert np.allclose(l1_loss(_x, _Y, reduction="sum").item(), np.sum(np.abs(_D))), "l1_loss with reduction='sum' gives the sum of |d|"
assert gradcheck(lambda a: mse_loss(a, _Y) + l1_loss(a, _Y, reduction="sum"), _x), (
    "the gradients of mse_loss and l1_loss must match finite differences"
)
_bad = ("batchmean", "avg", "total", "elementwise")[int(check_rng.integers(0, 4))]
try:
    l1_loss(_x, _Y, reduction=_bad)
    raise AssertionError("l1_loss with an unknown reduction must raise a ValueError")
except ValueError as err:
    assert "reduction" in str(err), f"the error must name the argument reduction; got: {err}"
_n = int(check_rng.integers(2, 10))
try:
    mse_loss(Tensor(np.ones((_n, 1))), np.ones(_n))
    raise AssertionError("an input of shape (n, 1) against a target of shape (n,) must raise a ShapeError")
except ShapeError as err:
    assert f"({_n}, 1)" in str(err) and f"({_n},)" in str(err), f"the error must show both shapes; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `losses_huber` (2 points): `smooth_l1_loss` and `huber_loss`
#
# Both pick a branch per element with `where(condition, a, b)`; autograd
# differentiates only the branch that was picked. Mind the edges of the
# table above: smooth L1 is quadratic where |d| < β, Huber where |d| ≤ δ,
# and β = 0 makes smooth L1 plain L1 (there is no quadratic part to divide
# by 0).
#
# **Checked when graded** (besides the tests below), with thresholds, values
# and errors d drawn for you (both signs, on both sides of each threshold):
#
# * smooth_l1_loss with beta=β: ½d²/β where |d| < β, |d| − ½β elsewhere (for a β below 1 and one above)
# * smooth_l1_loss with beta=0 is l1_loss
# * smooth_l1_loss with beta=0 has l1_loss's gradient, no NaN
# * smooth_l1_loss with reduction='sum' gives the sum of the elementwise losses (beta 1 by default)
# * huber_loss with delta=δ: ½d² where |d| ≤ δ, δ(|d| − ½δ) above δ
# * huber_loss's default delta is 1 and its default reduction the mean
# * the gradients of huber_loss and smooth_l1_loss must match finite differences
# * huber_loss: float32 in, float32 out
# * huber_loss with an unknown reduction must raise a ValueError
# * the error must name the argument reduction

# %% nbgrader={"grade": false, "grade_id": "losses_huber_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def smooth_l1_loss(input: Tensor, target: Any, *, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Quadratic below ``beta``, linear above: ½d²/β or |d| − ½β."""
    input = _input(input, "smooth_l1_loss")
    target = _like(target, input, "smooth_l1_loss")
    _same_shape(input, target, "smooth_l1_loss")
    _check_options("smooth_l1_loss", reduction=reduction, beta=beta)
    ### BEGIN SOLUTION
    d = input - target
    size = d.abs()
    if beta == 0:
        return _reduce(size, reduction, "smooth_l1_loss")
    loss = where(size < beta, 0.5 * d * d / beta, size - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")
    ### END SOLUTION


def huber_loss(input: Tensor, target: Any, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """Quadratic below ``delta``, linear above: ½d² or δ(|d| − ½δ)."""
    input = _input(input, "huber_loss")
    target = _like(target, input, "huber_loss")
    _same_shape(input, target, "huber_loss")
    _check_options("huber_loss", reduction=reduction, delta=delta)
    ### BEGIN SOLUTION
    d = input - target
    size = d.abs()
    loss = where(size <= delta, 0.5 * d * d, delta * (size - 0.5 * delta))
    return _reduce(loss, reduction, "huber_loss")
    ### END SOLUTION


# %%
x = Tensor([0.5, 2.0, -3.0], requires_grad=True)
y = Tensor([0.0, 0.0, 0.0])
for f in (mse_loss, l1_loss, smooth_l1_loss, huber_loss):
    print(f.__name__, f(x, y, reduction="none").tolist())

# %% nbgrader={"grade": true, "grade_id": "losses_huber", "locked": true, "points": 2, "schema_version": 3, "solution": false}
x = Tensor(X, requires_grad=True)
assert np.allclose(smooth_l1_loss(x, Y, reduction="none").numpy(), np.where(np.abs(D) < 1, 0.5 * D ** 2, np.abs(D) - 0.5))
assert np.allclose(huber_loss(x, Y, reduction="none", delta=2.0).numpy(), np.where(np.abs(D) <= 2, 0.5 * D ** 2, 2 * (np.abs(D) - 1)))
assert gradcheck(lambda a: smooth_l1_loss(a, Y, beta=0.5), x)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: the thresholds, and errors d = x − target with both
# signs on both sides of each threshold, none closer to it than a tenth of it.
def _spread(threshold, inside, outside, order):
    """Errors of sizes inside · threshold and outside · threshold, alternating in sign, in `order`."""
    size = np.concatenate([inside, outside]) * threshold * np.resize([1.0, -1.0], 2 * len(inside))
    return size[order].reshape(2, -1)


_pairs = int(check_rng.integers(2, 4))
for beta in (round(float(check_rng.uniform(0.3, 0.8)), 2), round(float(check_rng.uniform(1.5, 3.0)), 2)):
    _T = check_rng.standard_normal((2, _pairs))
    _X = _T + _spread(beta, check_rng.uniform(0.05, 0.9, _pairs), check_rng.uniform(1.1, 3.0, _pairs), check_rng.permutation(2 * _pairs))
    _D = _X - _T
    assert np.allclose(
        smooth_l1_loss(Tensor(_X), _T, reduction="none", beta=beta).numpy(),
        np.where(np.abs(_D) < beta, 0.5 * _D ** 2 / beta, np.abs(_D) - 0.5 * beta),
    ), f"smooth_l1_loss with beta={beta}: ½d²/β where |d| < β, |d| − ½β elsewhere"
_T = check_rng.standard_normal((2, _pairs))
_X = _T + _spread(1.0, check_rng.uniform(0.05, 0.9, _pairs), check_rng.uniform(1.1, 3.0, _pairs), check_rng.permutation(2 * _pairs))
_D = _X - _T
_x = Tensor(_X, requires_grad=True)
assert np.allclose(smooth_l1_loss(_x, _T, beta=0.0).item(), np.mean(np.abs(_D))), "smooth_l1_loss with beta=0 is l1_loss"
assert gradcheck(lambda a: smooth_l1_loss(a, _T, beta=0.0), _x), "smooth_l1_loss with beta=0 has l1_loss's gradient, no NaN"
assert np.allclose(
    smooth_l1_loss(_x, _T, reduction="sum").item(), np.sum(np.where(np.abs(_D) < 1, 0.5 * _D ** 2, np.abs(_D) - 0.5))
), "smooth_l1_loss with reduction='sum' gives the sum of the elementwise losses (beta 1 by default)"
_delta = round(float(check_rng.uniform(0.2, 0.6)), 2)
_Th = check_rng.standard_normal((2, _pairs))
_Xh = _Th + _spread(_delta, check_rng.uniform(0.05, 0.9, _pairs), check_rng.uniform(1.1, 3.0, _pairs), check_rng.permutation(2 * _pairs))
_Dh = _Xh - _Th
assert np.allclose(
    huber_loss(Tensor(_Xh), _Th, reduction="none", delta=_delta).numpy(),
    np.where(np.abs(_Dh) <= _delta, 0.5 * _Dh ** 2, _delta * (np.abs(_Dh) - 0.5 * _delta)),
), f"huber_loss with delta={_delta}: ½d² where |d| ≤ δ, δ(|d| − ½δ) above δ"
assert np.allclose(huber_loss(_x, _T).item(), np.mean(np.where(np.abs(_D) <= 1, 0.5 * _D ** 2, np.abs(_D) - 0.5))), (
    "huber_loss's default delta is 1 and its default reduction the mean"
)
assert gradcheck(lambda a: huber_loss(a, _T, delta=_delta) + smooth_l1_loss(a, _T, beta=2 * _delta, reduction="sum"), _x), (
    "the gradients of huber_loss and smooth_l1_loss must match finite differences"
)
assert huber_loss(Tensor(_Xh.astype(np.float32)), _Th).dtype == np.float32, "huber_loss: float32 in, float32 out"
_bad = (None, "avg", "batchmean", "total")[int(check_rng.integers(0, 4))]
try:
    huber_loss(_x, _T, reduction=_bad)
    raise AssertionError("huber_loss with an unknown reduction must raise a ValueError")
except ValueError as err:
    assert "reduction" in str(err), f"the error must name the argument reduction; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ## Cross-entropy, and the log-sum-exp trick
#
# A classifier outputs *logits* z₁ … z_C, one per class. Softmax turns them
# into probabilities pᵢ = e^{zᵢ} / Σⱼ e^{zⱼ}, and the cross-entropy of the
# right class y is −log p_y = log Σⱼ e^{zⱼ} − z_y.
#
# Computed literally, this breaks at both ends of the float range. A logit
# of 1000 makes e^{1000} overflow to inf (inf/inf is NaN); a logit of −1000
# makes every e^{zⱼ} underflow to 0 and log 0 = −inf. The fix is the
# **log-sum-exp trick**: for m = maxⱼ zⱼ,
#
# log Σⱼ e^{zⱼ} = m + log Σⱼ e^{zⱼ − m},
#
# where every exponent is ≤ 0 (no overflow) and one of them is exactly 0 (the
# sum is ≥ 1, so no log 0). Module 03's `log_softmax` does exactly this, so
# `cross_entropy` is `nll_loss(log_softmax(logits))` — the log-probabilities
# never pass through a probability that could round to 0. Taking
# `log(softmax(z))` in two steps would throw that away.
#
# `nll_loss(input, target)` takes log-probabilities of shape (N, C) — or
# (N, C, d₁, …) for per-pixel classification, or (C,) for one sample — and
# class indices of shape (N,) (or (N, d₁, …), or ()). With per-class
# weights w (default all 1), for the elements whose target is not
# `ignore_index`:
#
# * `"none"`: loss_k = −w_{y_k} · input[k, y_k] (0 for ignored elements);
# * `"sum"`: Σ_k loss_k;
# * `"mean"`: Σ_k loss_k / Σ_k w_{y_k} — a *weighted* mean over the
#   non-ignored elements, not a division by N. (Padding tokens marked
#   `ignore_index` must not dilute the loss of a short batch.)
#
# To pick `input[k, y_k]` move the class axis last and flatten to (M, C)
# (`_class_last` below), then index with two integer arrays
# (`x[rows, classes]` — module 01's `GetItem` scatters the gradient back).
# `_class_targets` below checks the targets and gives you `valid` (not
# ignored) and `safe` (a class index in every place: an ignored target
# outside [0, C), such as the default -100, becomes class 0, so indexing
# never goes out of range). Use `valid` only as a factor
# (`valid.astype(dtype)`, `* valid`), never as a condition or an index: on a
# GPU it is a mask of numbers, 1 or 0, and NaN for a target out of range
# (the systems corner says why), and a NaN factor is what carries that
# error into the loss. The checks are given: read them, run them.

# %%
#| export
def _class_last(x: Tensor) -> Tensor:
    """(N, C, d1, ...) → (N·d1·..., C): one row of class scores per element."""
    if x.ndim == 2:
        return x  # already one row per element: no graph node for a reshape that changes nothing
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim > 2:
        x = x.permute((0,) + tuple(range(2, x.ndim)) + (1,))
    return x.reshape(-1, x.shape[-1])


def _class_targets(input: Tensor, target: Any, ignore_index: int, loss: str) -> tuple[Any, Any]:
    """Check class-index targets against ``input``; return (valid, safe) arrays of the target's shape.

    ``valid`` is a boolean mask on the CPU. On a GPU it is a mask of the input's dtype: 1 counts, 0 is
    ignored, NaN marks a target out of range (see below).
    """
    check_arg(loss, "ignore_index", ignore_index, "an integer")
    target = _like(target, input, loss, floating=False)
    expected = () if input.ndim == 1 else (input.shape[0],) + input.shape[2:]
    if target.dtype.kind not in "iu":
        raise TypeError(f"{loss}: class-index target must be integer; got {target.dtype}")
    if target.shape != expected:
        raise ShapeError(
            f"{loss}: input of shape {input.shape} needs a target of shape {expected} "
            f"(class indices) or {input.shape} (probabilities); got {target.shape}"
        )
    xp, data = input.device.xp, target.data
    classes = input.shape[0] if input.ndim == 1 else input.shape[1]
    valid = data != ignore_index
    on_cpu = not input.device.reads_wait
    if on_cpu and (data.size == 0 or (data.min() >= 0 and data.max() < classes)):
        return valid, data  # every target is a class index already: two reductions check it, no masks
    if on_cpu:
        bad = valid & ((data < 0) | (data >= classes))
        if bad.any():
            raise IndexError(
                f"{loss}: target holds {data[bad].ravel()[0].item()}, not a class index in [0, {classes}) "
                f"nor ignore_index={ignore_index}"
            )
        return valid, xp.where(valid, data, 0)
    # On a GPU, `if bad.any()` would make Python wait for every queued kernel, once per batch. The mask
    # carries the check instead: NaN where a target is out of range makes the loss NaN, which the
    # Trainer's nan check reports (module 08), and no read is needed. Five kernels, each one pass: read
    # as unsigned, a negative index is huge, so one comparison checks both ends of [0, classes).
    unsigned = np.dtype(data.dtype.str.replace("i", "u"))
    in_range = data.view(unsigned) < classes
    with input.device:
        mask = xp.where(valid > in_range, input.dtype.type("nan"), valid).astype(input.dtype, copy=False)
        return mask, xp.where(in_range, data, 0)


def _class_weights(weight: Any, input: Tensor, loss: str) -> Tensor | None:
    if weight is None:
        return None
    classes = input.shape[0] if input.ndim == 1 else input.shape[1]
    return _constant(weight, input, loss, "weight", shape=(classes,))


# %% [markdown]
# ### Task `losses_nll` (2 points): `nll_loss`
#
# `_nll_parts` does the work that `nll_loss` and `cross_entropy` share: the
# picked, weighted, masked losses −w_{y_k} · logp[k, y_k] (in the target's
# shape) and the total weight Σ_k w_{y_k} of the non-ignored elements. Then
# `nll_loss` reduces them. If every target is ignored the total weight is 0:
# the mean must come out 0 with a zero gradient, not 0/0.
# (A batch of no elements at all is another case: its mean is NaN, as in
# PyTorch, and the given lines before your code return it.)
#
# **Checked when graded** (besides the tests below), with sizes,
# log-probabilities, targets (some ignored) and class weights drawn for you:
#
# * reduction='none': −logp[y] per sample, 0 where the target is ignored
# * with weights and an ignored target, the mean divides by the weights of the non-ignored targets only
# * reduction='none' with weights: −w_y · logp[y] per sample, 0 where the target is ignored
# * with weights, the mean is Σ −w_y · logp[y] divided by Σ w_y, not by the number of samples
# * an ignore_index that is a class drops those targets
# * (N, C, d1, d2) log-probabilities: one loss per element, of shape (N, d1, d2)
# * (N, C, d1, d2): the mean over the non-ignored
# * one sample of shape (C,) gives a loss of shape ()
# * one sample of shape (C,): its loss is −logp[y]
# * every target ignored: loss 0 and gradient 0, not NaN
# * float32 in, float32 out
# * an unknown reduction must raise a ValueError
# * the error must name the argument reduction

# %% nbgrader={"grade": false, "grade_id": "losses_nll_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _nll_parts(logp: Tensor, valid: Any, safe: Any, w: Tensor | None) -> tuple[Tensor, Tensor]:
    """(−w_y · logp[y] per element (0 where ignored), the weights w_y summed over valid elements)."""
    ### BEGIN SOLUTION
    xp = logp.device.xp
    rows = _class_last(logp)
    flat = safe.reshape(-1)
    picked = rows[xp.arange(flat.shape[0]), flat].reshape(safe.shape)
    w_y = valid.astype(logp.dtype) if w is None else w.data[safe] * valid
    w_y = Tensor._wrap(w_y, logp.device)
    # If every target is ignored the total is 0: a floor turns 0/0 into loss 0, gradient 0.
    return -picked * w_y, w_y.sum().clip(min=float(np.finfo(logp.dtype).tiny))
    ### END SOLUTION


def nll_loss(
    input: Tensor, target: Any, weight: Any = None, *, ignore_index: int = -100, reduction: str = "mean"
) -> Tensor:
    """Negative log-likelihood of class indices, given log-probabilities along axis 1."""
    input = _input(input, "nll_loss")
    _check_options("nll_loss", reduction=reduction)
    valid, safe = _class_targets(input, target, ignore_index, "nll_loss")
    w = _class_weights(weight, input, "nll_loss")
    if reduction == "mean" and input.numel() == 0:
        return _reduce(input, reduction, "nll_loss")  # no elements: NaN, as in PyTorch
    ### BEGIN SOLUTION
    loss, total_weight = _nll_parts(input, valid, safe, w)
    if reduction == "mean":
        return loss.sum() / total_weight
    return loss.sum() if reduction == "sum" else loss
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_nll", "locked": true, "points": 2, "schema_version": 3, "solution": false}
Z = np.array([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0], [1.0, 1.0, 1.0], [-2.0, 0.0, 4.0]])
LP = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
y = np.array([0, 2, 1, 2])
lp = Tensor(LP, requires_grad=True)
assert np.allclose(nll_loss(lp, y, reduction="none").numpy(), -LP[np.arange(4), y])
assert np.allclose(nll_loss(lp, y).item(), -LP[np.arange(4), y].mean())
y_ignored = np.array([0, -100, 1, 2])
keep = np.array([0, 2, 3])
assert np.allclose(nll_loss(lp, y_ignored).item(), -LP[keep, y_ignored[keep]].mean()), "mean over the non-ignored"
W = np.array([0.5, 2.0, 1.0])
assert np.allclose(nll_loss(lp, y, weight=W).item(), (-W[y] * LP[np.arange(4), y]).sum() / W[y].sum()), "a weighted mean"
assert gradcheck(lambda a: nll_loss(a, y_ignored, weight=W), lp)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: sizes, log-probabilities, targets (at least one
# ignored and two kept), and class weights above 1 (so a weighted mean is never the plain one).
_N, _C = int(check_rng.integers(4, 8)), int(check_rng.integers(3, 6))
_Z = check_rng.standard_normal((_N, _C))
_LP = _Z - np.log(np.sum(np.exp(_Z), axis=1, keepdims=True))
_lp = Tensor(_LP, requires_grad=True)
_rows = np.arange(_N)
_y = check_rng.integers(0, _C, _N)
_y_ign = _y.copy()
_y_ign[check_rng.permutation(_N)[: int(check_rng.integers(1, _N - 1))]] = -100
_kept = _y_ign != -100
_safe = np.where(_kept, _y_ign, 0)
_W = check_rng.uniform(1.2, 2.5, _C)
_Wy = np.where(_kept, _W[_safe], 0)
assert np.allclose(nll_loss(_lp, _y_ign, reduction="none").numpy(), np.where(_kept, -_LP[_rows, _safe], 0)), (
    "reduction='none': −logp[y] per sample, 0 where the target is ignored"
)
assert np.allclose(nll_loss(_lp, _y_ign, weight=_W).item(), np.sum(-_Wy * _LP[_rows, _safe]) / np.sum(_Wy)), (
    "with weights and an ignored target, the mean divides by the weights of the non-ignored targets only"
)
assert np.allclose(nll_loss(_lp, _y_ign, weight=_W, reduction="none").numpy(), -_Wy * _LP[_rows, _safe]), (
    "reduction='none' with weights: −w_y · logp[y] per sample, 0 where the target is ignored"
)
assert np.allclose(nll_loss(_lp, _y, weight=_W).item(), np.sum(-_W[_y] * _LP[_rows, _y]) / np.sum(_W[_y])), (
    "with weights, the mean is Σ −w_y · logp[y] divided by Σ w_y, not by the number of samples"
)
_cls = int(check_rng.integers(0, _C))
_y_cls = _y.copy()
_y_cls[:2] = _cls, (_cls + 1) % _C  # the ignored class appears, and so does another one
_y_cls = check_rng.permutation(_y_cls)
_others = _y_cls != _cls
assert np.allclose(
    nll_loss(_lp, _y_cls, ignore_index=_cls, reduction="sum").item(), -np.sum(_LP[_rows[_others], _y_cls[_others]])
), "an ignore_index that is a class drops those targets"
_shape4 = (2, _C, int(check_rng.integers(2, 4)), int(check_rng.integers(2, 4)))
_Z4 = check_rng.standard_normal(_shape4)
_LP4 = _Z4 - np.log(np.sum(np.exp(_Z4), axis=1, keepdims=True))
_y4 = check_rng.integers(0, _C, (_shape4[0],) + _shape4[2:])
_y4.flat[int(check_rng.integers(0, _y4.size))] = -100
_picked4 = np.take_along_axis(_LP4, np.where(_y4 < 0, 0, _y4)[:, None], axis=1)[:, 0]
assert np.allclose(nll_loss(Tensor(_LP4), _y4, reduction="none").numpy(), np.where(_y4 < 0, 0, -_picked4)), (
    "(N, C, d1, d2) log-probabilities: one loss per element, of shape (N, d1, d2)"
)
assert np.allclose(nll_loss(Tensor(_LP4), _y4).item(), -np.mean(_picked4[_y4 >= 0])), "(N, C, d1, d2): the mean over the non-ignored"
_one = int(check_rng.integers(0, _C))
assert nll_loss(Tensor(_LP[0]), np.array(_one), reduction="none").shape == (), "one sample of shape (C,) gives a loss of shape ()"
assert np.allclose(nll_loss(Tensor(_LP[0]), np.array(_one)).item(), -_LP[0, _one]), "one sample of shape (C,): its loss is −logp[y]"
_none_kept = Tensor(_LP, dtype="float32", requires_grad=True)
_out = nll_loss(_none_kept, np.full(_N, -100))
_out.backward()
assert _out.item() == 0 and np.all(_none_kept.grad.numpy() == 0), "every target ignored: loss 0 and gradient 0, not NaN"
assert nll_loss(Tensor(_LP, dtype="float32"), _y).dtype == np.float32, "float32 in, float32 out"
_bad = ("mean_over_batch", "avg", "batchmean", "total")[int(check_rng.integers(0, 4))]
try:
    nll_loss(_lp, _y, reduction=_bad)
    raise AssertionError("an unknown reduction must raise a ValueError")
except ValueError as err:
    assert "reduction" in str(err), f"the error must name the argument reduction; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# `cross_entropy(input, target)` takes logits and is the negative
# log-likelihood of their `log_softmax` along the class axis, with two
# additions:
#
# * **label smoothing** ε: the target is (1 − ε) on the right class and ε/C
#   spread over all classes, so the loss is
#   (1 − ε) · nll + (ε/C) · Σ_c −w_c log p_c, both terms masked and (for
#   `"mean"`) divided by the same Σ_k w_{y_k};
# * **soft targets**: a floating `target` of the input's shape holds a
#   probability per class; the loss is −Σ_c w_c target_c log p_c per sample,
#   and `"mean"` is the plain mean over samples (label smoothing mixes the
#   target with ε/C first; `ignore_index` does not apply).
#
# `_cross_entropy_arguments` below checks the arguments and says whether the
# targets are soft; `_along_classes` shapes the class weights to multiply
# log-probabilities of any rank.

# %%
#| export
def _holds_probabilities(target: Any) -> bool:
    """Whether a cross_entropy target holds class probabilities (floating) rather than class indices."""
    return is_floating(np.dtype(target.dtype if hasattr(target, "dtype") else np.asarray(target).dtype))


def _cross_entropy_arguments(
    input: Any, target: Any, weight: Any, reduction: str, label_smoothing: float
) -> tuple[Tensor, Tensor | None, bool]:
    """Check cross_entropy's arguments; return (input, class weights or None, whether targets are soft)."""
    input = _input(input, "cross_entropy")
    _check_options("cross_entropy", reduction=reduction, label_smoothing=label_smoothing)
    w = _class_weights(weight, input, "cross_entropy")
    soft = _holds_probabilities(target)
    target_shape = tuple(target.shape if hasattr(target, "shape") else np.shape(target))
    if soft and target_shape != input.shape:
        raise ShapeError(
            f"cross_entropy: a floating target holds class probabilities and needs the input's shape "
            f"{input.shape}; got {target_shape} (class indices must be integers)"
        )
    return input, w, soft


def _along_classes(w: Tensor, input: Tensor) -> Tensor:
    """Per-class weights shaped to broadcast along axis 1 (or 0) of ``input``."""
    return w if input.ndim == 1 else w.reshape((1, -1) + (1,) * (input.ndim - 2))


# %% [markdown]
# ### Task `losses_cross_entropy` (2 points): `cross_entropy`
#
# **Checked when graded** (besides the tests below), with sizes, logits,
# targets (some ignored), class weights, smoothing and soft targets drawn
# for you:
#
# * label_smoothing=ε: (1 − ε) · nll + (ε/C) · Σ_c −log p_c, averaged
# * label smoothing with weights and an ignored target: both terms weighted, masked, divided by Σ w_y
# * class-index targets with weights, reduction='none': −w_y · log p_y per sample
# * soft targets, reduction='none': −Σ_c target_c log p_c per sample
# * soft targets: the plain mean over samples
# * soft targets with weights: −Σ_c w_c target_c log p_c
# * soft targets with label_smoothing=ε: the target becomes (1 − ε) · target + ε / C
# * gradients with soft targets, with respect to the logits and the targets, must match finite differences
# * (N, C, d1, d2) logits: the softmax runs along axis 1, one loss per element
# * (N, C, d1, d2): mean over the non-ignored
# * one sample of shape (C,) gives a loss of shape ()
# * logits of ±1e4: exact loss and a finite gradient
# * float32 in, float32 out
# * a class index out of range (C or more, for C classes) must raise an IndexError
# * the error must name the bad index
# * cross_entropy is the mean of −log softmax at the labels, for any logits

# %% nbgrader={"grade": false, "grade_id": "losses_cross_entropy_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Any = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits along axis 1 against class indices or class probabilities."""
    input, w, soft = _cross_entropy_arguments(input, target, weight, reduction, label_smoothing)
    class_axis = 0 if input.ndim == 1 else 1
    classes = input.shape[class_axis]
    if reduction == "mean" and input.numel() == 0:
        return _reduce(input, reduction, "cross_entropy")  # no elements: NaN, as in PyTorch
    ### BEGIN SOLUTION
    logp = log_softmax(input, axis=class_axis)
    weighted = logp if w is None else logp * _along_classes(w, input)
    if soft:
        target = _like(target, input, "cross_entropy")
        _same_shape(input, target, "cross_entropy")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        return _reduce(-(weighted * target).sum(axis=class_axis), reduction, "cross_entropy")
    valid, safe = _class_targets(input, target, ignore_index, "cross_entropy")
    loss, total_weight = _nll_parts(logp, valid, safe, w)
    if label_smoothing > 0:
        uniform = -weighted.sum(axis=class_axis) * Tensor._wrap(valid.astype(input.dtype), input.device)
        loss = (1 - label_smoothing) * loss + (label_smoothing / classes) * uniform
    if reduction == "mean":
        return loss.sum() / total_weight
    return loss.sum() if reduction == "sum" else loss
    ### END SOLUTION


# %%
logits = Tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]], requires_grad=True)
print(cross_entropy(logits, [0, 2]), cross_entropy(logits, [0, 2], label_smoothing=0.1))
print("very sure, very wrong:", cross_entropy(Tensor([[1e4, -1e4]]), [1]))

# %% nbgrader={"grade": true, "grade_id": "losses_cross_entropy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
y_ignored, keep, W = np.array([0, -100, 1, 2]), np.array([0, 2, 3]), np.array([0.5, 2.0, 1.0])
z = Tensor(Z, requires_grad=True)
assert np.allclose(cross_entropy(z, y).item(), -LP[np.arange(4), y].mean())
assert np.allclose(cross_entropy(z, y_ignored).item(), -LP[keep, y_ignored[keep]].mean()), "mean over the non-ignored"
assert np.isfinite(cross_entropy(Tensor([[1e4, -1e4, 0.0]]), [1]).item()), "extreme logits stay finite"
assert gradcheck(lambda a: cross_entropy(a, y_ignored, weight=W, label_smoothing=0.2), z)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: sizes, logits, class targets (at least one ignored
# and two kept), class weights, label smoothing, soft targets, and where the logits of ±1e4 sit.
_N, _C = int(check_rng.integers(4, 8)), int(check_rng.integers(3, 6))
_Z = check_rng.standard_normal((_N, _C))
_LP = _Z - np.log(np.sum(np.exp(_Z), axis=1, keepdims=True))
_z = Tensor(_Z, requires_grad=True)
_rows = np.arange(_N)
_y = check_rng.integers(0, _C, _N)
_y_ign = _y.copy()
_y_ign[check_rng.permutation(_N)[: int(check_rng.integers(1, _N - 1))]] = -100
_kept = _y_ign != -100
_safe = np.where(_kept, _y_ign, 0)
_W = check_rng.uniform(0.5, 2.0, _C)
_Wy = np.where(_kept, _W[_safe], 0)
_eps = round(float(check_rng.uniform(0.1, 0.4)), 2)
assert np.allclose(
    cross_entropy(_z, _y, label_smoothing=_eps).item(),
    np.mean((1 - _eps) * -_LP[_rows, _y] + _eps / _C * -np.sum(_LP, axis=1)),
), f"label_smoothing={_eps}: (1 − ε) · nll + (ε/C) · Σ_c −log p_c, averaged"
assert np.allclose(
    cross_entropy(_z, _y_ign, weight=_W, label_smoothing=_eps).item(),
    np.sum(np.where(_kept, (1 - _eps) * -_Wy * _LP[_rows, _safe] + _eps / _C * -np.sum(_LP * _W, axis=1), 0)) / np.sum(_Wy),
), "label smoothing with weights and an ignored target: both terms weighted, masked, divided by Σ w_y"
assert np.allclose(cross_entropy(_z, _y, weight=_W, reduction="none").numpy(), -_W[_y] * _LP[_rows, _y]), (
    "class-index targets with weights, reduction='none': −w_y · log p_y per sample"
)
_P = check_rng.dirichlet(np.ones(_C), _N)
assert np.allclose(cross_entropy(_z, _P, reduction="none").numpy(), -np.sum(_P * _LP, axis=1)), (
    "soft targets, reduction='none': −Σ_c target_c log p_c per sample"
)
assert np.allclose(cross_entropy(_z, _P).item(), np.mean(-np.sum(_P * _LP, axis=1))), "soft targets: the plain mean over samples"
assert np.allclose(cross_entropy(_z, _P, weight=_W, reduction="sum").item(), -np.sum(_P * _LP * _W)), (
    "soft targets with weights: −Σ_c w_c target_c log p_c"
)
_eps_soft = round(float(check_rng.uniform(0.05, 0.3)), 2)
assert np.allclose(
    cross_entropy(_z, _P, label_smoothing=_eps_soft, reduction="none").numpy(),
    -np.sum(((1 - _eps_soft) * _P + _eps_soft / _C) * _LP, axis=1),
), f"soft targets with label_smoothing={_eps_soft}: the target becomes (1 − ε) · target + ε / C"
assert gradcheck(lambda a, p: cross_entropy(a, p, label_smoothing=_eps_soft), _z, Tensor(_P, requires_grad=True)), (
    "gradients with soft targets, with respect to the logits and the targets, must match finite differences"
)
_shape4 = (2, _C, int(check_rng.integers(2, 4)), int(check_rng.integers(2, 4)))
_Z4 = check_rng.standard_normal(_shape4)
_LP4 = _Z4 - np.log(np.sum(np.exp(_Z4), axis=1, keepdims=True))
_y4 = check_rng.integers(0, _C, (_shape4[0],) + _shape4[2:])
_y4.flat[int(check_rng.integers(0, _y4.size))] = -100
_picked4 = np.take_along_axis(_LP4, np.where(_y4 < 0, 0, _y4)[:, None], axis=1)[:, 0]
assert np.allclose(cross_entropy(Tensor(_Z4), _y4, reduction="none").numpy(), np.where(_y4 < 0, 0, -_picked4)), (
    "(N, C, d1, d2) logits: the softmax runs along axis 1, one loss per element"
)
assert np.allclose(cross_entropy(Tensor(_Z4), _y4).item(), -np.mean(_picked4[_y4 >= 0])), "(N, C, d1, d2): mean over the non-ignored"
assert cross_entropy(Tensor(_Z[0]), np.array(_y[0]), reduction="none").shape == (), "one sample of shape (C,) gives a loss of shape ()"
_big_Z = check_rng.permuted(np.tile([1e4, -1e4, 0.0], (int(check_rng.integers(2, 4)), 1)), axis=1)
_big_y = check_rng.integers(0, 3, len(_big_Z))
_big = Tensor(_big_Z, requires_grad=True)
cross_entropy(_big, _big_y).backward()
assert np.all(np.isfinite(_big.grad.numpy())) and np.allclose(
    cross_entropy(_big, _big_y).item(), np.mean(1e4 - _big_Z[np.arange(len(_big_Z)), _big_y])
), "logits of ±1e4: exact loss and a finite gradient"
assert cross_entropy(Tensor(_Z, dtype="float32"), _y).dtype == np.float32, "float32 in, float32 out"
_out_of_range = _C + int(check_rng.integers(0, 3))
_y_bad = _y.copy()
_y_bad[int(check_rng.integers(0, _N))] = _out_of_range
try:
    cross_entropy(_z, _y_bad)
    raise AssertionError("a class index out of range (C or more, for C classes) must raise an IndexError")
except IndexError as err:
    assert str(_out_of_range) in str(err), f"the error must name the bad index; got: {err}"
_rs_z = check_rng.standard_normal((6, 5)).astype(np.float32)
_rs_y = check_rng.integers(0, 5, size=6)
_rs_lp = _rs_z - np.max(_rs_z, axis=1, keepdims=True)
_rs_lp = _rs_lp - np.log(np.sum(np.exp(_rs_lp), axis=1, keepdims=True))
assert np.allclose(cross_entropy(Tensor(_rs_z), _rs_y).item(), -np.mean(_rs_lp[np.arange(6), _rs_y]), atol=1e-5), (
    "cross_entropy is the mean of −log softmax at the labels, for any logits"
)
### END HIDDEN TESTS

# %% [markdown] tinyflo={"given_after": "losses_cross_entropy"}
# ## The same loss as one graph node (given)
#
# The `cross_entropy` you wrote is the definition: every step is an op you
# know, and autograd derives the gradient. It is also about eight graph
# nodes — `log_softmax`, a reshape, the pick, a multiply, a sum, a divide —
# and on a small classifier (a batch of 32, 10 classes) recording and
# walking them costs more than the arithmetic: each node is a few µs of
# Python. Frameworks therefore *fuse* the loss: one `Function` whose
# backward is the derivative worked out on paper. For row k with
# probabilities p = softmax(z), class y, weight w_y and smoothing ε,
#
# ∂ loss_k / ∂ z = (1 − ε) · w_y · (p − onehot(y)) + (ε/C) · (W·p − w),
#
# where w is the vector of class weights (all 1 without `weight`) and W its
# sum. For plain cross-entropy that is the famous p − onehot(y).
# `CrossEntropyFn` below computes the loss and this gradient from one pass
# of exponentials and keeps only the probabilities for backward.
#
# From this cell on, `cross_entropy` means the fused version for class-index
# targets; probabilities as targets still go through the composition above.
# The tests check that both give the same values and gradients (and
# `gradcheck` checks the fused one on its own), so the fast path can never
# drift from the definition. PyTorch does the same: `F.cross_entropy` is one
# fused kernel, not `nll_loss(log_softmax(x))`.

# %% tinyflo={"given_after": "losses_cross_entropy"}
#| export
class CrossEntropyFn(Function):
    """Softmax cross-entropy of (M, C) logits against M class indices, reduced, as one node."""

    def forward(self, logits, target, valid, weight=None, smoothing=0.0, reduction="mean"):
        xp = self.xp
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = xp.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        log_total = xp.log(total)
        rows = xp.arange(target.shape[0])
        w_y = valid.astype(logits.dtype, copy=False) if weight is None else weight[target] * valid
        # −log p_y = log Σ e^z − z_y, per row: the full (M, C) log-probabilities only for smoothing
        loss = (log_total[:, 0] - shifted[rows, target]) * w_y
        if smoothing:
            logp = shifted - log_total
            per_class = logp if weight is None else logp * weight
            loss = (1 - smoothing) * loss - (smoothing / logits.shape[1]) * per_class.sum(axis=1) * valid
        w_total = None
        if reduction == "mean":  # a weighted mean; an all-ignored batch (Σ w_y = 0) gives 0, not 0/0
            w_total = xp.maximum(w_y.sum(), np.finfo(w_y.dtype).tiny) if target.shape[0] else w_y.dtype.type("nan")
            out = loss.sum() / w_total  # no rows: NaN, as in PyTorch
        else:
            out = loss.sum() if reduction == "sum" else loss
        probs = xp.divide(exp, total, out=exp)  # softmax, written over exp (not needed again)
        self.save_for_backward(probs, rows, target, valid, w_y, weight, w_total)
        self.smoothing = smoothing
        return out

    def backward(self, grad):
        probs, rows, target, valid, w_y, weight, w_total = self.saved
        eps = self.smoothing
        g = grad if w_total is None else grad / w_total  # one number, or one per row (reduction="none")
        coef = w_y * ((1 - eps) * g if eps else g)  # (M,): the incoming gradient goes in here, not into dz
        dz = probs * coef[:, None]
        dz[rows, target] -= coef
        if eps:
            uniform = (eps / probs.shape[1]) * g * valid
            if weight is None:
                dz += uniform[:, None] * (probs.shape[1] * probs - 1)
            else:
                dz += uniform[:, None] * (weight.sum() * probs - weight)
        return dz


_composed_cross_entropy = cross_entropy


def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Any = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits along axis 1 against class indices or class probabilities."""
    input, w, soft = _cross_entropy_arguments(input, target, weight, reduction, label_smoothing)
    if soft:  # class probabilities: the composition above
        return _composed_cross_entropy(input, target, weight, ignore_index=ignore_index,
                                       reduction=reduction, label_smoothing=label_smoothing)
    valid, safe = _class_targets(input, target, ignore_index, "cross_entropy")
    loss = CrossEntropyFn.apply(
        _class_last(input), target=safe.reshape(-1), valid=valid.reshape(-1),
        weight=None if w is None else w.data, smoothing=float(label_smoothing), reduction=reduction,
    )
    return loss.reshape(safe.shape) if reduction == "none" else loss


# %% tinyflo={"given_after": "losses_cross_entropy"}
_z = Tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]], requires_grad=True)
cross_entropy(_z, [0, 2]).backward()
print("one node:", type(cross_entropy(_z, [0, 2])._ctx).__name__, " gradient p − onehot(y), over 2:", _z.grad)

# %% [markdown]
# ## Binary losses: why `binary_cross_entropy_with_logits` beats `bce(sigmoid(x))`
#
# For a probability p = σ(x) and a target t ∈ [0, 1], the binary
# cross-entropy is −[t log p + (1 − t) log(1 − p)].
#
# **`binary_cross_entropy(input, target)`** takes p itself. When p is
# exactly 0 or 1, log 0 = −inf and the loss (and its gradient) is infinite or
# NaN. PyTorch clamps each logarithm at −100, so the loss stays finite (at
# most 100 per element). Clamping with tensor ops would also set the
# gradient to 0 exactly where the prediction is most wrong; so this loss gets
# its own `Function` with PyTorch's backward:
#
# ∂/∂p = (p − t) / max(p(1 − p), 10⁻¹²),  ∂/∂t = log(1 − p) − log p (clamped logs).
#
# The first is what the chain rule gives, −t/p + (1 − t)/(1 − p), over a
# common denominator, guarded against dividing by 0. In float16, 10⁻¹²
# rounds to 0: make the floor the larger of 10⁻¹² and the dtype's smallest
# normal number, `np.finfo(p.dtype).tiny`, so that the gradient at p = 0 or 1
# stays finite there too. Compute the logarithms inside
# `np.errstate(divide="ignore")`: log 0 is expected here, and a warning would
# be noise (nbgrader even counts it as a failure). `weight` multiplies each
# element's loss.
#
# ### Task `losses_binary` (1 point): `binary_cross_entropy`
#
# **Checked when graded** (besides the tests below), with probabilities
# (never 0.5), targets, weights, and where probabilities of exactly 0 and 1
# sit drawn for you:
#
# * weight multiplies each element's loss
# * binary_cross_entropy with reduction='sum' gives the sum of the elementwise losses
# * each log is clamped at −100: a probability of exactly 0 or 1 against the opposite target costs 100
# * at p = 0 or 1 the gradient is clamped, finite, but still pushes hard
# * ∂/∂t = log(1 − p) − log p
# * float32 in, float32 out
# * in float16 too, the gradient at p = 0 or 1 stays finite
# * a probability above 1 must raise a ValueError
# * the error must point to binary_cross_entropy_with_logits

# %% nbgrader={"grade": false, "grade_id": "losses_binary_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class BinaryCrossEntropyFn(Function):
    def forward(self, p, t):
        ### BEGIN SOLUTION
        xp, floor = self.xp, p.dtype.type(-100)
        with np.errstate(divide="ignore"):
            log_p = xp.maximum(xp.log(p), floor)
            log_q = xp.maximum(xp.log(1 - p), floor)
        self.save_for_backward(p, t, log_p, log_q)
        return -(t * log_p + (1 - t) * log_q)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        p, t, log_p, log_q = self.saved
        floor = max(1e-12, float(np.finfo(p.dtype).tiny))  # 1e-12 is 0 in float16
        denominator = self.xp.maximum(p * (1 - p), p.dtype.type(floor))
        grad_p = grad * (p - t) / denominator
        grad_t = grad * (log_q - log_p) if self.needs_input_grad[1] else None
        return grad_p, grad_t
        ### END SOLUTION


def binary_cross_entropy(input: Tensor, target: Any, weight: Any = None, *, reduction: str = "mean") -> Tensor:
    """−[t log p + (1 − t) log(1 − p)] for probabilities p, each log clamped at −100."""
    input = _input(input, "binary_cross_entropy")
    target = _like(target, input, "binary_cross_entropy")
    _same_shape(input, target, "binary_cross_entropy")
    if bool(((input.data < 0) | (input.data > 1)).any()):
        raise ValueError(
            "binary_cross_entropy: input must hold probabilities in [0, 1]; "
            "for logits use binary_cross_entropy_with_logits"
        )
    ### BEGIN SOLUTION
    loss = BinaryCrossEntropyFn.apply(input, target)
    if weight is not None:
        loss = loss * _constant(weight, input, "binary_cross_entropy", "weight")
    return _reduce(loss, reduction, "binary_cross_entropy")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_binary", "locked": true, "points": 1, "schema_version": 3, "solution": false}
P = np.array([[0.1, 0.6, 0.9], [0.5, 0.3, 0.99]])
T = np.array([[0.0, 1.0, 1.0], [0.5, 0.0, 1.0]])
BCE = -(T * np.log(P) + (1 - T) * np.log(1 - P))
p = Tensor(P, requires_grad=True)
assert np.allclose(binary_cross_entropy(p, T, reduction="none").numpy(), BCE)
assert gradcheck(lambda a, b: binary_cross_entropy(a, b), p, Tensor(T, requires_grad=True))
assert np.allclose(binary_cross_entropy(Tensor([0.0, 1.0]), [1.0, 0.0], reduction="none").numpy(), [100, 100]), (
    "each log is clamped at −100"
)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: probabilities (never 0.5, where ∂/∂t is 0), targets,
# weights, and where probabilities of exactly 0 and 1 (both present) sit.
_shape = (2, int(check_rng.integers(2, 5)))
_P = check_rng.uniform(0.05, 0.45, _shape)
_P = np.where(check_rng.integers(0, 2, _shape) == 1, 1 - _P, _P)
_T = check_rng.choice([0.0, 0.25, 0.5, 1.0], _shape)
_BCE = -(_T * np.log(_P) + (1 - _T) * np.log(1 - _P))
_p = Tensor(_P, requires_grad=True)
_W = check_rng.uniform(0.1, 3.0, _shape)
assert np.allclose(binary_cross_entropy(_p, _T, weight=_W).item(), np.mean(_W * _BCE)), "weight multiplies each element's loss"
assert np.allclose(binary_cross_entropy(_p, _T, reduction="sum").item(), np.sum(_BCE)), (
    "binary_cross_entropy with reduction='sum' gives the sum of the elementwise losses"
)
_edge = check_rng.permutation(np.concatenate([[0.0, 1.0], check_rng.integers(0, 2, int(check_rng.integers(0, 3)))]))
_wrong = 1 - _edge
assert np.allclose(binary_cross_entropy(Tensor(_edge), _wrong, reduction="none").numpy(), np.full(len(_edge), 100.0)), (
    "each log is clamped at −100: a probability of exactly 0 or 1 against the opposite target costs 100"
)
_g = Tensor(_edge, requires_grad=True)
binary_cross_entropy(_g, _wrong, reduction="sum").backward()
assert np.all(np.isfinite(_g.grad.numpy())) and np.all(np.abs(_g.grad.numpy()) > 1e6), (
    "at p = 0 or 1 the gradient is clamped, finite, but still pushes hard"
)
_t = Tensor(_T, requires_grad=True)
binary_cross_entropy(Tensor(_P), _t, reduction="sum").backward()
assert np.allclose(_t.grad.numpy(), np.log(1 - _P) - np.log(_P)), "∂/∂t = log(1 − p) − log p"
assert binary_cross_entropy(Tensor(_P.astype(np.float32)), _T).dtype == np.float32, "float32 in, float32 out"
_half = Tensor(_edge.astype(np.float16), requires_grad=True)
binary_cross_entropy(_half, _wrong, reduction="sum").backward()
assert np.all(np.isfinite(_half.grad.numpy())), "in float16 too, the gradient at p = 0 or 1 stays finite"
_above = 1 + round(float(check_rng.uniform(0.01, 1.0)), 2)
try:
    binary_cross_entropy(Tensor([_above]), [1.0])
    raise AssertionError("a probability above 1 must raise a ValueError")
except ValueError as err:
    assert "with_logits" in str(err), f"the error must point to binary_cross_entropy_with_logits; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# **`binary_cross_entropy_with_logits(input, target)`** takes the logit x.
# In float32, σ(x) rounds to exactly 1.0 once x > 17 or so; from then on
# `bce(sigmoid(x))` for a target of 0 sees log(1 − 1) and returns the clamp,
# 100, whatever x is — and its gradient with respect to x is 0, so the
# network never learns it is wrong. Working with x directly avoids the
# rounding: −log σ(x) = softplus(−x) and −log(1 − σ(x)) = x + softplus(−x),
# so
#
# loss = (1 − t) · x + softplus(−x),
#
# and module 03's `softplus` never overflows (it is max(z, 0) + log1p(e^{−|z|})).
# With `pos_weight` (one factor per class, weighting the positive term
# t · softplus(−x), for imbalanced data) the second term becomes
# (1 + (pos_weight − 1) · t) · softplus(−x). `weight` multiplies each
# element's loss; both broadcast against the input.
#
# ### Task `losses_bce_logits` (1 point): `binary_cross_entropy_with_logits`
#
# **Checked when graded** (besides the tests below), with logits, targets
# (0, 1 and in between), weights, pos_weight and where logits of ±1e4 sit
# drawn for you:
#
# * pos_weight weights only the positive term t · log σ(x)
# * weight multiplies each element's loss
# * the default reduction is the mean
# * the gradient is σ(x) − t, finite for logits of ±1e4
# * float32 in, float32 out
# * float32 logits far out (±1,000 to ±10,000) against the wrong target cost exactly |x|, no overflow

# %% nbgrader={"grade": false, "grade_id": "losses_bce_logits_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def binary_cross_entropy_with_logits(
    input: Tensor, target: Any, weight: Any = None, *, reduction: str = "mean", pos_weight: Any = None
) -> Tensor:
    """Binary cross-entropy of σ(input), computed from the logits without overflow."""
    input = _input(input, "binary_cross_entropy_with_logits")
    target = _like(target, input, "binary_cross_entropy_with_logits")
    _same_shape(input, target, "binary_cross_entropy_with_logits")
    ### BEGIN SOLUTION
    positive = softplus(-input)
    if pos_weight is not None:
        pos_weight = _constant(pos_weight, input, "binary_cross_entropy_with_logits", "pos_weight")
        positive = positive * (1 + (pos_weight - 1) * target)
    loss = (1 - target) * input + positive
    if weight is not None:
        loss = loss * _constant(weight, input, "binary_cross_entropy_with_logits", "weight")
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")
    ### END SOLUTION


# %%
x = Tensor([-120.0, 0.0, 30.0], requires_grad=True)
print("with logits     :", binary_cross_entropy_with_logits(x, [1.0, 1.0, 0.0], reduction="none").tolist())
print("bce of sigmoid  :", binary_cross_entropy(x.sigmoid(), [1.0, 1.0, 0.0], reduction="none").tolist())

# %% nbgrader={"grade": true, "grade_id": "losses_bce_logits", "locked": true, "points": 1, "schema_version": 3, "solution": false}
W = np.array([[1.0, 2.0, 0.5], [0.1, 1.0, 3.0]])
Z = np.log(P / (1 - P))
z = Tensor(Z, requires_grad=True)
assert np.allclose(binary_cross_entropy_with_logits(z, T, reduction="none").numpy(), BCE)
assert gradcheck(lambda a: binary_cross_entropy_with_logits(a, T, pos_weight=[2.0, 0.5, 1.0]), z)
big = Tensor([1e4, -1e4, 1e4], requires_grad=True)
out = binary_cross_entropy_with_logits(big, [0.0, 1.0, 1.0], reduction="none")
assert np.allclose(out.numpy(), [1e4, 1e4, 0]), "logits of ±1e4 stay finite and exact"
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: logits, targets (0, 1 and 0.3, each present),
# weights, pos_weight per class, and where the logits of ±1e4 sit (both signs present).
_shape = (2, int(check_rng.integers(2, 5)))
_Z = 2 * check_rng.standard_normal(_shape)
_T = check_rng.permutation(np.resize([0.0, 1.0, 0.3], _shape[0] * _shape[1])).reshape(_shape)
_log_p = -np.logaddexp(0, -_Z)  # log σ(x)
_log_q = -np.logaddexp(0, _Z)  # log(1 − σ(x))
_BCE = -(_T * _log_p + (1 - _T) * _log_q)
_z = Tensor(_Z, requires_grad=True)
_PW = check_rng.uniform(0.2, 3.0, _shape[1])
assert np.allclose(
    binary_cross_entropy_with_logits(_z, _T, pos_weight=_PW, reduction="none").numpy(),
    -(_PW * _T * _log_p + (1 - _T) * _log_q),
), "pos_weight weights only the positive term t · log σ(x)"
_W = check_rng.uniform(0.1, 3.0, _shape)
assert np.allclose(binary_cross_entropy_with_logits(_z, _T, weight=_W, reduction="sum").item(), np.sum(_W * _BCE)), (
    "weight multiplies each element's loss"
)
assert np.allclose(binary_cross_entropy_with_logits(_z, _T).item(), np.mean(_BCE)), "the default reduction is the mean"
_signs = check_rng.permutation(np.resize([1.0, -1.0], int(check_rng.integers(3, 6))))
_big_t = check_rng.integers(0, 2, len(_signs)).astype(np.float64)
_big = Tensor(1e4 * _signs, requires_grad=True)
binary_cross_entropy_with_logits(_big, _big_t, reduction="sum").backward()
assert np.allclose(_big.grad.numpy(), np.where(_signs > 0, 1.0, 0.0) - _big_t), "the gradient is σ(x) − t, finite for logits of ±1e4"
assert binary_cross_entropy_with_logits(Tensor(_Z.astype(np.float32)), _T).dtype == np.float32, "float32 in, float32 out"
_far = float(check_rng.integers(1000, 10001))
_small = binary_cross_entropy_with_logits(Tensor(np.array([-_far, _far], np.float32)), [1.0, 0.0], reduction="none")
assert np.allclose(_small.numpy(), [_far, _far]), (
    "float32 logits far out (±1,000 to ±10,000) against the wrong target cost exactly |x|, no overflow"
)
### END HIDDEN TESTS

# %% [markdown]
# **`sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2)`** (from
# torchvision, for detectors with thousands of easy background boxes)
# scales the logits' cross-entropy by (1 − p_t)^γ, where
# p_t = p t + (1 − p)(1 − t) is the probability given to the right answer:
# well-classified examples (p_t → 1) stop contributing. With α ≥ 0 it is
# also weighted by α t + (1 − α)(1 − t); α < 0 switches that off. As in
# torchvision its `reduction` defaults to `"none"` (one loss per anchor;
# detectors normalise by the number of positive boxes themselves), and its
# arguments are torchvision's `inputs` and `targets`. γ = 0 leaves out the
# factor (x⁰'s derivative at x = 0 would be 0 · ∞).
#
# ### Task `losses_focal` (1 point): `sigmoid_focal_loss`
#
# **Checked when graded** (besides the tests below), with logits, 0/1
# targets (both present), alpha and gamma drawn for you:
#
# * alpha < 0 switches the α weighting off
# * gamma = 0 leaves out the (1 − p_t)^γ factor; alpha=α weights t by α and 1 − t by 1 − α
# * the gradient with gamma = 0 must match finite differences
# * logits of ±1e4 give a finite focal loss
# * float32 in, float32 out

# %% nbgrader={"grade": false, "grade_id": "losses_focal_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def sigmoid_focal_loss(
    inputs: Tensor, targets: Any, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none"
) -> Tensor:
    """torchvision's focal loss: the logits' cross-entropy scaled by (1 − p_t)^γ and α_t."""
    inputs = _input(inputs, "sigmoid_focal_loss", "inputs")
    targets = _like(targets, inputs, "sigmoid_focal_loss", "targets")
    _same_shape(inputs, targets, "sigmoid_focal_loss", "targets")
    _check_options("sigmoid_focal_loss", reduction=reduction, alpha=alpha, gamma=gamma)
    ### BEGIN SOLUTION
    p = inputs.sigmoid()
    loss = binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    if gamma != 0:
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = loss * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return _reduce(loss, reduction, "sigmoid_focal_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_focal", "locked": true, "points": 1, "schema_version": 3, "solution": false}
PT = P * T + (1 - P) * (1 - T)
focal = 0.25 * T + 0.75 * (1 - T)
assert np.allclose(sigmoid_focal_loss(z, T).numpy(), focal * BCE * (1 - PT) ** 2), "default reduction is 'none'"
assert gradcheck(lambda a: sigmoid_focal_loss(a, T, gamma=1.5), z)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: logits, 0/1 targets (both present), alpha, gamma.
_shape = (2, int(check_rng.integers(2, 5)))
_Z = 2 * check_rng.standard_normal(_shape)
_T = check_rng.permutation(np.resize([0.0, 1.0], _shape[0] * _shape[1])).reshape(_shape)
_Pr = 1 / (1 + np.exp(-_Z))
_PT = _Pr * _T + (1 - _Pr) * (1 - _T)
_BCE = _T * np.logaddexp(0, -_Z) + (1 - _T) * np.logaddexp(0, _Z)
_z = Tensor(_Z, requires_grad=True)
_gamma = round(float(check_rng.uniform(0.5, 3.0)), 2)
_off = -round(float(check_rng.uniform(0.1, 1.0)), 2)
assert np.allclose(sigmoid_focal_loss(_z, _T, alpha=_off, gamma=_gamma).numpy(), _BCE * (1 - _PT) ** _gamma), (
    "alpha < 0 switches the α weighting off"
)
_alpha = round(float(check_rng.uniform(0.55, 0.9)), 2)
assert np.allclose(
    sigmoid_focal_loss(_z, _T, alpha=_alpha, gamma=0.0).numpy(), (_alpha * _T + (1 - _alpha) * (1 - _T)) * _BCE
), f"gamma = 0 leaves out the (1 − p_t)^γ factor; alpha={_alpha} weights t by α and 1 − t by 1 − α"
assert gradcheck(lambda a: sigmoid_focal_loss(a, _T, alpha=_alpha, gamma=0.0, reduction="sum"), _z), (
    "the gradient with gamma = 0 must match finite differences"
)
_signs = check_rng.permutation(np.resize([1.0, -1.0], int(check_rng.integers(3, 6))))
_big_t = check_rng.permutation(np.resize([0.0, 1.0], len(_signs)))
assert np.all(np.isfinite(sigmoid_focal_loss(Tensor(1e4 * _signs), _big_t).numpy())), "logits of ±1e4 give a finite focal loss"
assert sigmoid_focal_loss(Tensor(_Z.astype(np.float32)), _T).dtype == np.float32, "float32 in, float32 out"
### END HIDDEN TESTS

# %% [markdown]
# ## Divergences and counts
#
# **`kl_div(input, target)`** is the Kullback–Leibler divergence
# KL(target ‖ q) = Σ target · (log target − log q), with PyTorch's
# convention: `input` holds **log**-probabilities log q (the output of
# `log_softmax`, for the same stability reasons as above), and `target`
# holds probabilities — or log-probabilities with `log_target=True`. Per
# element:
#
# * `log_target=False`: target · log target − target · input, where
#   0 · log 0 counts as 0 (the limit). Compute target · log target with a
#   `where` on a *safe* target (1 where the target is 0): `log(0)` would be
#   −inf, 0 · −inf is NaN, and NaN poisons the gradient even in the branch
#   `where` discards;
# * `log_target=True`: e^{target} · (target − input).
#
# `reduction="batchmean"` divides the sum by the batch size (the first
# axis): that is the KL divergence per sample. `"mean"` divides by the
# number of *elements* — batch size × classes — which is not a divergence of
# anything; PyTorch keeps it as the default for compatibility (and warns),
# and so does tinyflo (without the warning). Ask for `"batchmean"`.
#
# ### Task `losses_divergence` (1 point): `kl_div`
#
# **Checked when graded** (besides the tests below), with sizes,
# log-probabilities and targets (an exact 0 in every row) drawn for you:
#
# * log_target=True: e^target · (target − input)
# * kl_div with reduction='sum' gives the sum of the elementwise terms
# * reduction='batchmean' divides the sum by the batch size (the first axis), not by the number of elements
# * the gradients with respect to input and target must match finite differences
# * a target of exactly 0 gives a finite gradient, no NaN from 0 · log 0: −input there, log t + 1 − input elsewhere
# * an unknown reduction must raise a ValueError
# * the error must list the reductions, batchmean among them
# * log_softmax of ±1e4 logits: finite KL and gradient
# * float32 in, float32 out

# %% nbgrader={"grade": false, "grade_id": "losses_divergence_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _xlogx(t: Tensor) -> Tensor:
    """t · log t, with 0 · log 0 = 0 and no NaN in the gradient."""
    ### BEGIN SOLUTION
    positive = t > 0
    safe = where(positive, t, 1.0)
    return where(positive, safe * safe.log(), 0.0)
    ### END SOLUTION


def kl_div(input: Tensor, target: Any, *, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL(target ‖ exp(input)) elementwise, for log-probabilities ``input``."""
    input = _input(input, "kl_div")
    target = _like(target, input, "kl_div")
    _same_shape(input, target, "kl_div")
    _check_options("kl_div", _REDUCTIONS + ("batchmean",), reduction=reduction, log_target=log_target)
    if reduction == "batchmean" and input.ndim and input.shape[0] == 0:
        reduction = "mean"  # no rows to divide by: the mean of nothing, NaN, as in PyTorch
    ### BEGIN SOLUTION
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = _xlogx(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction, "kl_div")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_divergence", "locked": true, "points": 1, "schema_version": 3, "solution": false}
Z = np.array([[1.0, 0.0, -1.0], [0.5, 2.0, 0.1]])
LQ = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
P = np.array([[0.2, 0.8, 0.0], [0.3, 0.3, 0.4]])
KL = np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0) - P * LQ
lq = Tensor(LQ, requires_grad=True)
assert np.allclose(kl_div(lq, P, reduction="none").numpy(), KL), "0 · log 0 counts as 0"
assert np.allclose(kl_div(lq, P, reduction="batchmean").item(), KL.sum() / 2)
assert np.allclose(kl_div(lq, P).item(), KL.mean())
assert gradcheck(lambda a: kl_div(a, P, reduction="batchmean"), lq)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: sizes, log-probabilities, and targets with an exact 0
# in every row (the other entries at least 0.02, so finite differences never cross 0).
_N, _C = int(check_rng.integers(2, 5)), int(check_rng.integers(3, 6))
_Zq = check_rng.standard_normal((_N, _C))
_LQ = _Zq - np.log(np.sum(np.exp(_Zq), axis=1, keepdims=True))
_P = check_rng.uniform(0.1, 1.0, (_N, _C))
_P[np.arange(_N), check_rng.integers(0, _C, _N)] = 0.0
_P = _P / np.sum(_P, axis=1, keepdims=True)
_KL = np.where(_P > 0, _P * np.log(np.where(_P > 0, _P, 1)), 0) - _P * _LQ
_lq = Tensor(_LQ, requires_grad=True)
_Q = check_rng.uniform(0.1, 1.0, (_N, _C))
_LT = np.log(_Q / np.sum(_Q, axis=1, keepdims=True))
assert np.allclose(kl_div(_lq, _LT, log_target=True, reduction="sum").item(), np.sum(np.exp(_LT) * (_LT - _LQ))), (
    "log_target=True: e^target · (target − input)"
)
assert np.allclose(kl_div(_lq, _P, reduction="sum").item(), np.sum(_KL)), "kl_div with reduction='sum' gives the sum of the elementwise terms"
assert np.allclose(kl_div(_lq, _P, reduction="batchmean").item(), np.sum(_KL) / _N), (
    "reduction='batchmean' divides the sum by the batch size (the first axis), not by the number of elements"
)
_pos = Tensor(np.where(_P > 0, _P, 0.3), requires_grad=True)
assert gradcheck(lambda a, b: kl_div(a, b, reduction="sum"), _lq, _pos), (
    "the gradients with respect to input and target must match finite differences"
)
_t = Tensor(_P, requires_grad=True)
kl_div(_lq, _t, reduction="sum").backward()
assert np.allclose(_t.grad.numpy(), np.where(_P > 0, np.log(np.where(_P > 0, _P, 1)) + 1 - _LQ, -_LQ)), (
    "a target of exactly 0 gives a finite gradient, no NaN from 0 · log 0: −input there, log t + 1 − input elsewhere"
)
_bad = ("batch", "avg", "total", "per_sample")[int(check_rng.integers(0, 4))]
try:
    kl_div(_lq, _P, reduction=_bad)
    raise AssertionError("an unknown reduction must raise a ValueError")
except ValueError as err:
    assert "batchmean" in str(err), f"the error must list the reductions, batchmean among them; got: {err}"
_big = Tensor(check_rng.permuted(np.tile([1e4, -1e4, 0.0], (int(check_rng.integers(1, 3)), 1)), axis=1), requires_grad=True)
kl_div(log_softmax(_big, axis=1), check_rng.dirichlet(np.ones(3), _big.shape[0]), reduction="batchmean").backward()
assert np.all(np.isfinite(_big.grad.numpy())), "log_softmax of ±1e4 logits: finite KL and gradient"
assert kl_div(Tensor(_LQ, dtype="float32"), _P).dtype == np.float32, "float32 in, float32 out"
### END HIDDEN TESTS

# %% [markdown]
# **`poisson_nll_loss(input, target)`**: the negative log-likelihood of
# counts under a Poisson distribution of rate λ, dropping log(target!), a
# constant. With `log_input=True` (the default) the input is log λ and the
# loss is e^{input} − target · input; otherwise it is
# input − target · log(input + eps). `full=True` adds Stirling's
# approximation of log(target!), target · log target − target +
# ½ log(2π target), for targets above 1 (0 elsewhere). Compute it on a
# *safe* target again (1 where the target is not above 1), so that no
# discarded branch takes the log of 0.
#
# ### Task `losses_poisson` (1 point): `poisson_nll_loss`
#
# **Checked when graded** (besides the tests below), with log-rates and
# counts (0, 1 and above 1 all present) drawn for you:
#
# * full=True adds Stirling's t · log t − t + ½ log(2π t), only where the target is above 1
# * log_input=False: input − target · log(input + eps)
# * log_input=False with a rate of 0: eps keeps the log finite
# * the gradient with log_input=False and full=True must match finite differences
# * float32 in, float32 out

# %% nbgrader={"grade": false, "grade_id": "losses_poisson_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def poisson_nll_loss(
    input: Tensor,
    target: Any,
    log_input: bool = True,
    full: bool = False,
    *,
    eps: float = 1e-8,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of counts ``target`` under a Poisson rate given by ``input``."""
    input = _input(input, "poisson_nll_loss")
    target = _like(target, input, "poisson_nll_loss")
    _same_shape(input, target, "poisson_nll_loss")
    _check_options("poisson_nll_loss", reduction=reduction, log_input=log_input, full=full, eps=eps)
    ### BEGIN SOLUTION
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        above = target > 1
        safe = where(above, target, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (safe * (2 * math.pi)).log()
        loss = loss + where(above, stirling, 0.0)
    return _reduce(loss, reduction, "poisson_nll_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_poisson", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([[0.5, -1.0], [2.0, 0.0]])
C = np.array([[1.0, 0.0], [6.0, 2.0]])
x = Tensor(X, requires_grad=True)
assert np.allclose(poisson_nll_loss(x, C).item(), (np.exp(X) - C * X).mean())
assert gradcheck(lambda a: poisson_nll_loss(a, C, reduction="sum"), x)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: log-rates, and counts with 0, 1 and above 1 present.
_shape = (2, int(check_rng.integers(2, 5)))
_X = check_rng.uniform(-1.5, 2.0, _shape)
_Cnt = check_rng.permutation(np.concatenate([[0.0, 1.0], check_rng.integers(2, 9, _shape[0] * _shape[1] - 2)])).reshape(_shape)
_safe = np.where(_Cnt > 1, _Cnt, 1)
_stirling = np.where(_Cnt > 1, _safe * np.log(_safe) - _safe + 0.5 * np.log(2 * np.pi * _safe), 0)
_x = Tensor(_X, requires_grad=True)
assert np.allclose(poisson_nll_loss(_x, _Cnt, full=True, reduction="none").numpy(), np.exp(_X) - _Cnt * _X + _stirling), (
    "full=True adds Stirling's t · log t − t + ½ log(2π t), only where the target is above 1"
)
_R = np.exp(_X)
assert np.allclose(poisson_nll_loss(Tensor(_R), _Cnt, log_input=False, reduction="sum").item(), np.sum(_R - _Cnt * np.log(_R + 1e-8))), (
    "log_input=False: input − target · log(input + eps)"
)
_rate, _count = round(float(check_rng.uniform(0.5, 3.0)), 2), float(check_rng.integers(0, 5))
_zero_rate = poisson_nll_loss(Tensor([0.0, _rate]), [_count, 2.0], log_input=False, reduction="none").numpy()
assert np.all(np.isfinite(_zero_rate)) and np.allclose(_zero_rate, [-_count * np.log(1e-8), _rate - 2 * np.log(_rate + 1e-8)]), (
    "log_input=False with a rate of 0: eps keeps the log finite"
)
assert gradcheck(lambda a: poisson_nll_loss(a.exp(), _Cnt, log_input=False, full=True), _x), (
    "the gradient with log_input=False and full=True must match finite differences"
)
assert poisson_nll_loss(Tensor(_X.astype(np.float32)), _Cnt).dtype == np.float32, "float32 in, float32 out"
### END HIDDEN TESTS

# %% [markdown]
# ## Metric learning: losses on distances and similarities
#
# These losses compare *embeddings*: they ask that similar things end up
# close and different things far apart, by at least a `margin`. Each is a
# hinge max(0, ·) — `relu` — of a difference, so examples that already
# satisfy the margin contribute nothing (and no gradient).
#
# * `triplet_margin_loss(anchor, positive, negative)`:
#   max(0, d(a, p) − d(a, n) + margin), with PyTorch's pairwise distance
#   d(x, y) = ‖x − y + eps‖_p along the last axis (eps keeps the norm's
#   gradient finite when x = y). `swap=True` uses min(d(a, n), d(p, n)) as the
#   negative distance — the harder of the two.
# * `cosine_embedding_loss(x1, x2, y)`: with cos the cosine similarity
#   along the last axis, 1 − cos where y = 1 and max(0, cos − margin) where
#   y = −1. PyTorch computes cos = Σ x1x2 / √((Σx1² + ε)(Σx2² + ε)) with
#   ε = 10⁻¹², so a zero vector gives 0, not NaN.
# * `hinge_embedding_loss(x, y)`: x where y = 1, max(0, margin − x) where
#   y = −1 (x is typically a distance).
# * `margin_ranking_loss(x1, x2, y)`: max(0, −y · (x1 − x2) + margin) for
#   y = ±1 ("x1 should rank above x2" when y = 1).
#
# Targets y hold ±1; use them as masks (`y == 1`) or factors, never
# differentiate through them.
#
# ### Task `losses_triplet` (1 point): `triplet_margin_loss`
#
# **Checked when graded** (besides the tests below), with sizes, anchors,
# positives and negatives drawn for you:
#
# * swap=True takes the smaller of d(a, n) and d(p, n) as the negative distance
# * p=3, eps=1e-3: d(x, y) = ‖x − y + eps‖_3
# * the defaults: margin 1, p 2, the mean
# * float32 in, float32 out
# * a negative of another shape must raise a ShapeError
# * the error must name the argument negative

# %% nbgrader={"grade": false, "grade_id": "losses_triplet_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _pairwise_distance(x1: Tensor, x2: Tensor, p: float, eps: float) -> Tensor:
    """‖x1 − x2 + eps‖_p along the last axis (torch.nn.functional.pairwise_distance)."""
    ### BEGIN SOLUTION
    return ((x1 - x2 + eps).abs() ** p).sum(axis=-1) ** (1 / p)
    ### END SOLUTION


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    *,
    reduction: str = "mean",
) -> Tensor:
    """max(0, d(anchor, positive) − d(anchor, negative) + margin), with p-norm distances."""
    anchor = _input(anchor, "triplet_margin_loss", "anchor")
    positive = _input(positive, "triplet_margin_loss", "positive")
    negative = _input(negative, "triplet_margin_loss", "negative")
    _same_shape(anchor, positive, "triplet_margin_loss", "positive")
    _same_shape(anchor, negative, "triplet_margin_loss", "negative")
    _check_options("triplet_margin_loss", reduction=reduction, margin=margin, p=p, eps=eps, swap=swap)
    ### BEGIN SOLUTION
    d_pos = _pairwise_distance(anchor, positive, p, eps)
    d_neg = _pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_swap = _pairwise_distance(positive, negative, p, eps)
        d_neg = where(d_swap < d_neg, d_swap, d_neg)
    return _reduce((d_pos - d_neg + margin).relu(), reduction, "triplet_margin_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_triplet", "locked": true, "points": 1, "schema_version": 3, "solution": false}
rng = np.random.default_rng(0)
A, Pp, N = rng.standard_normal((3, 4, 5))
dist = lambda u, v, p=2, e=1e-6: (np.abs(u - v + e) ** p).sum(axis=-1) ** (1 / p)
a, pp, n = (Tensor(v, requires_grad=True) for v in (A, Pp, N))
assert np.allclose(triplet_margin_loss(a, pp, n, margin=2.0, reduction="none").numpy(), np.maximum(dist(A, Pp) - dist(A, N) + 2, 0))
assert gradcheck(lambda u, v, w: triplet_margin_loss(u, v, w, margin=3.0), a, pp, n)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: sizes, and positives and negatives near their
# anchors; the margins are large enough that every hinge is active.
_n, _d = int(check_rng.integers(3, 6)), int(check_rng.integers(3, 7))
_A = check_rng.standard_normal((_n, _d))
_Pp = _A + 0.5 * check_rng.standard_normal((_n, _d))
_Nn = _A + 0.6 * check_rng.standard_normal((_n, _d))
_a, _pp, _nn = Tensor(_A, requires_grad=True), Tensor(_Pp, requires_grad=True), Tensor(_Nn, requires_grad=True)
_m1 = float(np.ceil(np.max(np.maximum(dist(_A, _Nn, 1), dist(_Pp, _Nn, 1))))) + 1
assert np.allclose(
    triplet_margin_loss(_a, _pp, _nn, p=1, swap=True, margin=_m1).item(),
    np.mean(np.maximum(dist(_A, _Pp, 1) - np.minimum(dist(_A, _Nn, 1), dist(_Pp, _Nn, 1)) + _m1, 0)),
), "swap=True takes the smaller of d(a, n) and d(p, n) as the negative distance"
_m3 = float(np.ceil(np.max(dist(_A, _Nn, 3, 1e-3)))) + 1
assert np.allclose(
    triplet_margin_loss(_a, _pp, _nn, p=3, eps=1e-3, margin=_m3, reduction="none").numpy(),
    np.maximum(dist(_A, _Pp, 3, 1e-3) - dist(_A, _Nn, 3, 1e-3) + _m3, 0),
), "p=3, eps=1e-3: d(x, y) = ‖x − y + eps‖_3"
assert np.allclose(triplet_margin_loss(_a, _pp, _nn).item(), np.mean(np.maximum(dist(_A, _Pp) - dist(_A, _Nn) + 1, 0))), (
    "the defaults: margin 1, p 2, the mean"
)
assert triplet_margin_loss(
    Tensor(_A, dtype="float32"), Tensor(_Pp, dtype="float32"), Tensor(_Nn, dtype="float32")
).dtype == np.float32, "float32 in, float32 out"
try:
    triplet_margin_loss(_a, _pp, Tensor(np.ones((_n, _d + 1))))
    raise AssertionError("a negative of another shape must raise a ShapeError")
except ShapeError as err:
    assert "negative" in str(err), f"the error must name the argument negative; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `losses_cosine` (1 point): `cosine_embedding_loss`
#
# `_COSINE_EPS` is PyTorch's ε. The target has the shape of the inputs
# without their last axis: one ±1 per pair of embeddings.
#
# **Checked when graded** (besides the tests below), with embeddings, ±1
# targets (both present) and a margin drawn for you:
#
# * margin=m: max(0, cos − margin) where the target is −1
# * where the target is −1, a negative cosine costs nothing (margin 0 by default)
# * the gradients with respect to both inputs must match finite differences
# * a zero vector has cosine 0 with anything: loss 1 where the target is 1, no NaN
# * float32 in, float32 out

# %% nbgrader={"grade": false, "grade_id": "losses_cosine_code", "locked": false, "schema_version": 3, "solution": true}
#| export
_COSINE_EPS = 1e-12


def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Any, margin: float = 0.0, *, reduction: str = "mean"
) -> Tensor:
    """1 − cos(x1, x2) where target is 1; max(0, cos(x1, x2) − margin) where it is −1."""
    input1 = _input(input1, "cosine_embedding_loss", "input1")
    input2 = _input(input2, "cosine_embedding_loss", "input2")
    _same_shape(input1, input2, "cosine_embedding_loss", "input2")
    target = _like(target, input1, "cosine_embedding_loss")
    if target.shape != input1.shape[:-1]:
        raise ShapeError(f"cosine_embedding_loss: target must have shape {input1.shape[:-1]}; got {target.shape}")
    _check_options("cosine_embedding_loss", reduction=reduction, margin=margin)
    ### BEGIN SOLUTION
    dot = (input1 * input2).sum(axis=-1)
    norms = ((input1 * input1).sum(axis=-1) + _COSINE_EPS) * ((input2 * input2).sum(axis=-1) + _COSINE_EPS)
    cos = dot / norms.sqrt()
    loss = where(target == 1, 1 - cos, 0.0) + where(target == -1, (cos - margin).relu(), 0.0)
    return _reduce(loss, reduction, "cosine_embedding_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_cosine", "locked": true, "points": 1, "schema_version": 3, "solution": false}
Y = np.array([1, -1, 1, -1])
COS = (A * Pp).sum(-1) / np.sqrt(((A * A).sum(-1) + 1e-12) * ((Pp * Pp).sum(-1) + 1e-12))
assert np.allclose(cosine_embedding_loss(a, pp, Y, reduction="none").numpy(), np.where(Y == 1, 1 - COS, np.maximum(COS, 0)))
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: embeddings, ±1 targets (both present), a margin,
# and second embeddings that point away from the first (a negative cosine) for the hinge.
_n, _d = int(check_rng.integers(4, 7)), int(check_rng.integers(3, 6))
_A = check_rng.standard_normal((_n, _d))
_B = check_rng.standard_normal((_n, _d))
_Y = check_rng.permutation(np.resize([1, -1], _n))
_COS = np.sum(_A * _B, axis=-1) / np.sqrt((np.sum(_A * _A, axis=-1) + 1e-12) * (np.sum(_B * _B, axis=-1) + 1e-12))
_a, _b = Tensor(_A, requires_grad=True), Tensor(_B, requires_grad=True)
_margin = -round(float(check_rng.uniform(0.1, 0.5)), 2)
assert np.allclose(
    cosine_embedding_loss(_a, _b, _Y, margin=_margin, reduction="none").numpy(),
    np.where(_Y == 1, 1 - _COS, np.maximum(_COS - _margin, 0)),
), f"margin={_margin}: max(0, cos − margin) where the target is −1"
_noise = check_rng.standard_normal((_n, _d))
_away = -_A + _noise - np.sum(_noise * _A, axis=-1, keepdims=True) / np.sum(_A * _A, axis=-1, keepdims=True) * _A
_COS2 = np.sum(_A * _away, axis=-1) / np.sqrt((np.sum(_A * _A, axis=-1) + 1e-12) * (np.sum(_away * _away, axis=-1) + 1e-12))
assert np.allclose(cosine_embedding_loss(_a, Tensor(_away), _Y, reduction="sum").item(), np.sum(np.where(_Y == 1, 1 - _COS2, 0))), (
    "where the target is −1, a negative cosine costs nothing (margin 0 by default)"
)
assert gradcheck(lambda u, v: cosine_embedding_loss(u, v, _Y, margin=_margin), _a, _b), (
    "the gradients with respect to both inputs must match finite differences"
)
_zero = cosine_embedding_loss(Tensor(np.zeros((1, _d))), Tensor(check_rng.standard_normal((1, _d))), [1]).item()
assert np.isfinite(_zero) and np.isclose(_zero, 1.0), "a zero vector has cosine 0 with anything: loss 1 where the target is 1, no NaN"
assert cosine_embedding_loss(Tensor(_A, dtype="float32"), Tensor(_B, dtype="float32"), _Y).dtype == np.float32, (
    "float32 in, float32 out"
)
### END HIDDEN TESTS

# %% [markdown]
# ### Task `losses_margin` (1 point): `hinge_embedding_loss` and `margin_ranking_loss`
#
# **Checked when graded** (besides the tests below), with scores, ±1 targets
# (both present) and margins drawn for you:
#
# * hinge_embedding_loss with margin=m: max(0, margin − x) where the target is −1
# * hinge_embedding_loss with reduction='none': x where the target is 1, max(0, 1 − x) where it is −1
# * margin_ranking_loss: the default margin is 0, the default reduction the mean
# * margin_ranking_loss with margin=m: max(0, −y · (x1 − x2) + margin) per pair
# * margin_ranking_loss's gradients must match finite differences
# * hinge_embedding_loss's gradient must match finite differences
# * float32 in, float32 out

# %% nbgrader={"grade": false, "grade_id": "losses_margin_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def hinge_embedding_loss(input: Tensor, target: Any, margin: float = 1.0, *, reduction: str = "mean") -> Tensor:
    """input where target is 1; max(0, margin − input) where it is −1."""
    input = _input(input, "hinge_embedding_loss")
    target = _like(target, input, "hinge_embedding_loss")
    _same_shape(input, target, "hinge_embedding_loss")
    _check_options("hinge_embedding_loss", reduction=reduction, margin=margin)
    ### BEGIN SOLUTION
    loss = where(target != 1, (margin - input).relu(), 0.0) + where(target != -1, input, 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")
    ### END SOLUTION


def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Any, margin: float = 0.0, *, reduction: str = "mean"
) -> Tensor:
    """max(0, −target · (input1 − input2) + margin)."""
    input1 = _input(input1, "margin_ranking_loss", "input1")
    input2 = _input(input2, "margin_ranking_loss", "input2")
    _same_shape(input1, input2, "margin_ranking_loss", "input2")
    target = _like(target, input1, "margin_ranking_loss")
    _same_shape(input1, target, "margin_ranking_loss")
    _check_options("margin_ranking_loss", reduction=reduction, margin=margin)
    ### BEGIN SOLUTION
    return _reduce((-target * (input1 - input2) + margin).relu(), reduction, "margin_ranking_loss")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "losses_margin", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X1, X2 = A[:, 0], Pp[:, 0]
assert np.allclose(margin_ranking_loss(Tensor(X1), Tensor(X2), Y, margin=0.5, reduction="none").numpy(), np.maximum(-Y * (X1 - X2) + 0.5, 0))
H = np.abs(A[:, :2])
YH = np.array([[1, -1]] * 4)
assert np.allclose(hinge_embedding_loss(Tensor(H), YH, reduction="sum").item(), np.where(YH == 1, H, np.maximum(1 - H, 0)).sum())
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: scores (pairs closer than half the ranking margin,
# distances below the hinge margin), ±1 targets with both present, and the margins.
_n = int(check_rng.integers(4, 8))
_Y = check_rng.permutation(np.resize([1, -1], _n))
_m = round(float(check_rng.uniform(0.3, 1.0)), 2)
_X1 = check_rng.standard_normal(_n)
_X2 = _X1 + check_rng.permutation(np.resize([1.0, -1.0], _n)) * check_rng.uniform(0.1, 0.45, _n) * _m
_H = check_rng.uniform(0.05, 1.2, (_n, 2))
_YH = check_rng.permutation(np.resize([1, -1], 2 * _n)).reshape(_n, 2)
_hm = round(float(check_rng.uniform(1.5, 3.0)), 2)
assert np.allclose(hinge_embedding_loss(Tensor(_H), _YH, margin=_hm).item(), np.mean(np.where(_YH == 1, _H, np.maximum(_hm - _H, 0)))), (
    f"hinge_embedding_loss with margin={_hm}: max(0, margin − x) where the target is −1"
)
assert np.allclose(hinge_embedding_loss(Tensor(_H), _YH, reduction="none").numpy(), np.where(_YH == 1, _H, np.maximum(1 - _H, 0))), (
    "hinge_embedding_loss with reduction='none': x where the target is 1, max(0, 1 − x) where it is −1"
)
assert np.allclose(margin_ranking_loss(Tensor(_X1), Tensor(_X2), _Y).item(), np.mean(np.maximum(-_Y * (_X1 - _X2), 0))), (
    "margin_ranking_loss: the default margin is 0, the default reduction the mean"
)
assert np.allclose(
    margin_ranking_loss(Tensor(_X1), Tensor(_X2), _Y, margin=_m, reduction="none").numpy(), np.maximum(-_Y * (_X1 - _X2) + _m, 0)
), f"margin_ranking_loss with margin={_m}: max(0, −y · (x1 − x2) + margin) per pair"
_x1, _x2 = Tensor(_X1, requires_grad=True), Tensor(_X2, requires_grad=True)
assert gradcheck(lambda u, v: margin_ranking_loss(u, v, _Y, margin=_m), _x1, _x2), (
    "margin_ranking_loss's gradients must match finite differences"
)
_h = Tensor(_H, requires_grad=True)
assert gradcheck(lambda u: hinge_embedding_loss(u, _YH, margin=_hm), _h), "hinge_embedding_loss's gradient must match finite differences"
assert margin_ranking_loss(Tensor(_X1, dtype="float32"), Tensor(_X2, dtype="float32"), _Y).dtype == np.float32, (
    "float32 in, float32 out"
)
### END HIDDEN TESTS

# %% [markdown]
# ## CTC: aligning a sequence of predictions with a shorter label
#
# A speech or handwriting model emits one distribution over C symbols per
# time step — T of them — but the label ("cat") is shorter and nobody knows
# which step belongs to which letter. Connectionist Temporal Classification
# (Graves et al., 2006) sums the probability of **every alignment**: add a
# *blank* symbol, let a path emit one symbol per step, and read it by
# merging repeats and dropping blanks (`cc-aa-t` and `c-a--tt` both read
# `cat`). The loss is −log Σ_{paths that read the label} Π_t p_t(path_t).
#
# There are exponentially many paths; dynamic programming sums them in
# O(T · S). Interleave the label with blanks, l′ = (␣, l₁, ␣, l₂, …, l_S, ␣),
# of length L = 2S + 1. α_t(s) is the probability of all path prefixes of
# length t + 1 that end at position s of l′. A path at s at step t came from
# s (stayed), s − 1 (moved on), or s − 2 (skipped a blank) — the skip only
# when l′_s is a label that differs from l′_{s−2}: between two equal labels
# (`l-l`) the blank is mandatory, or they would merge.
#
# α₀(0) = p₀(␣), α₀(1) = p₀(l₁), and
# α_t(s) = [α_{t−1}(s) + α_{t−1}(s−1) + α_{t−1}(s−2)·skip(s)] · p_t(l′_s),
# and the label's probability is α_{T−1}(L−1) + α_{T−1}(L−2).
#
# **Log space.** Products of T probabilities underflow: 0.01¹⁰⁰ is 10⁻²⁰⁰,
# and float32 stops at 10⁻³⁸. So the recursion runs on log-probabilities:
# products become sums, and sums become log-sum-exps —
# `xp.logaddexp(a, b)` = log(eᵃ + eᵇ), which is the trick of the cross-entropy
# task, handles −inf (log 0) gracefully, and is the same on NumPy and CuPy.
#
# **Vectorised over the batch.** Each sample has its own input length T_n
# and target length S_n. Run one loop over t for the whole batch, on
# (N, L) arrays; padded positions are harmless because nothing flows from
# a position s ≥ L_n to a smaller one, and the result of sample n is read
# at its own last step, t = T_n − 1.
#
# `ctc_loss` returns per-sample losses; `"mean"` divides each by its target
# length (at least 1) and averages over the batch, like PyTorch; `"sum"`
# adds them. A label that cannot fit into its input (too short for its
# letters and the blanks that repeats need) has probability 0 and an
# infinite loss; `zero_infinity=True` turns that into 0 (and no gradient),
# which keeps one bad sample from wrecking a batch.
#
# **The plumbing is given.** `ctc_loss` below checks and normalises its
# arguments — targets padded (N, S) or concatenated (ΣS_n,), lengths as
# anything integer — and applies `zero_infinity` and the reduction with
# tensor ops. Its `CTCLossFn` builds l′ with `_extended_labels`, gathers
# lp_t(s) = log p_t(l′_s) into a (T, N, L) array, and hands it to the two
# dynamic programmes you write in the next two tasks: `_ctc_alpha` (forward)
# and `_ctc_occupancy` (backward). `_shift` moves an array along its last
# axis, filling the gap: `_shift(prev, 1, -inf)[s]` is `prev[s - 1]`.

# %%
#| export
def _shift(a: Any, by: int, fill: Any) -> Any:
    """``a`` moved ``by`` places along its last axis (right when by > 0), the gap filled."""
    out = a.copy()
    if by > 0:
        out[..., by:], out[..., :by] = a[..., :-by], fill
    else:
        out[..., :by], out[..., by:] = a[..., -by:], fill
    return out


class CTCLossFn(Function):
    """Per-sample −log p(target | log_probs), summed over alignments in log space."""

    def forward(self, log_probs, targets, input_lengths, target_lengths, blank):
        xp = self.xp
        ext, skip = _extended_labels(targets, target_lengths, blank, xp)
        lp = log_probs[:, xp.arange(targets.shape[0])[:, None], ext]  # (T, N, L): log p_t(l′_s)
        alpha, nll = _ctc_alpha(lp, skip, input_lengths, target_lengths, xp)
        self.save_for_backward(lp, alpha, ext, skip, nll, input_lengths, target_lengths)
        self.classes = log_probs.shape[2]
        return nll

    def backward(self, grad):
        xp = self.xp
        lp, alpha, ext, skip, nll, input_lengths, target_lengths = self.saved
        gamma = _ctc_occupancy(lp, alpha, skip, nll, input_lengths, target_lengths, xp)  # (T, N, L)
        one_hot = (ext[:, :, None] == xp.arange(self.classes)).astype(lp.dtype)  # (N, L, C)
        per_symbol = (gamma.transpose(1, 0, 2) @ one_hot).transpose(1, 0, 2)  # (T, N, C)
        return -per_symbol * grad[None, :, None]


def _int_array(value: Any) -> np.ndarray:
    """Integer data (a Tensor, array or list) as a NumPy int64 array on the host."""
    data = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if data.dtype.kind not in "iu":
        raise TypeError(f"expected integers; got {data.dtype}")
    return data.astype(np.int64)


def ctc_loss(
    log_probs: Tensor,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """Connectionist Temporal Classification loss of log_probs (T, N, C) against shorter targets."""
    log_probs = _input(log_probs, "ctc_loss", "log_probs")
    _check_options("ctc_loss", reduction=reduction, blank=blank, zero_infinity=zero_infinity)
    if log_probs.ndim != 3:
        raise ShapeError(f"ctc_loss: log_probs must have shape (T, N, C); got {log_probs.shape}")
    steps, n, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank must be a class index in [0, {classes}); got {blank}")
    try:
        t_len = _int_array(input_lengths).reshape(-1)
        s_len = _int_array(target_lengths).reshape(-1)
        tgt = _int_array(targets)
    except TypeError as err:
        raise TypeError(f"ctc_loss: targets, input_lengths and target_lengths: {err}") from None
    if t_len.shape != (n,) or s_len.shape != (n,):
        raise ShapeError(
            f"ctc_loss: input_lengths and target_lengths need one entry per sample ({n}); "
            f"got {t_len.shape[0]} and {s_len.shape[0]}"
        )
    if (t_len < 1).any() or (t_len > steps).any():
        raise ValueError(f"ctc_loss: input_lengths must be in [1, {steps}] (T); got {t_len.tolist()}")
    if tgt.ndim == 1:  # concatenated: cut into padded rows
        if tgt.shape[0] != s_len.sum():
            raise ShapeError(f"ctc_loss: 1-D targets hold {tgt.shape[0]} labels but target_lengths sum to {s_len.sum()}")
        padded = np.full((n, int(s_len.max(initial=0))), blank, dtype=np.int64)
        for i, start in enumerate(np.cumsum(s_len) - s_len):
            padded[i, : s_len[i]] = tgt[start : start + s_len[i]]
        tgt = padded
    if tgt.ndim != 2 or tgt.shape[0] != n or (s_len < 0).any() or (s_len > tgt.shape[1]).any():
        raise ShapeError(
            f"ctc_loss: targets must be (N, S) padded with N={n} and target_lengths <= S, or 1-D "
            f"concatenated; got shape {tgt.shape} and target_lengths {s_len.tolist()}"
        )
    used = tgt[np.arange(tgt.shape[1])[None, :] < s_len[:, None]]
    if ((used < 0) | (used >= classes) | (used == blank)).any():
        raise ValueError(f"ctc_loss: targets must be class indices in [0, {classes}) other than blank={blank}")
    xp = log_probs.device.xp
    with log_probs.device:
        tgt, t_len, s_len_dev = xp.asarray(tgt), xp.asarray(t_len), xp.asarray(s_len)
    nll = CTCLossFn.apply(log_probs, targets=tgt, input_lengths=t_len, target_lengths=s_len_dev, blank=blank)
    if zero_infinity:
        nll = where(Tensor._wrap(xp.isinf(nll.data), nll.device), 0.0, nll)
    if reduction == "mean":
        per_label = Tensor._wrap(xp.maximum(s_len_dev, 1).astype(log_probs.dtype), log_probs.device)
        nll = nll / per_label
    return _reduce(nll, reduction, "ctc_loss")



# %% [markdown]
# ### Task `losses_ctc` (2 points): the forward recursion
#
# Two pieces. In `_extended_labels`, write the skip mask: `skip[n, s]` is
# True where a path may jump from s − 2 to s (see the rule above; positions
# 0 and 1 never skip). In `_ctc_alpha`, run the recursion over the (T, N, L)
# array `lp`: α starts at −inf (log 0) everywhere, α₀ is lp₀ at positions 0
# and 1, and each step adds lp_t to the log-sum-exp of the ways in. Return
# all of α (the backward task needs it) and each sample's loss
# −log(α(L_n − 1) + α(L_n − 2)), read at its own last step T_n − 1, where
# L_n = 2S_n + 1 (an empty target, S_n = 0, has only position 0).
#
# **Checked when graded** (besides the tests below), with log-probabilities,
# label symbols and lengths drawn for you:
#
# * a repeated label needs a blank between its letters: no skip from one to the other
# * concatenated 1-D targets give the same losses as padded ones
# * a label that cannot fit (a repeated symbol in 2 steps) has an infinite loss; the other sample is unaffected
# * zero_infinity=True turns the infinite loss into 0
# * an empty target is all blanks
# * an empty target next to a longer one in the same batch is all blanks, and the longer one keeps its own loss
# * blank=2: class 2 is the blank
# * log space: over 150 to 250 steps the loss stays finite, no underflow
# * float32 in, float32 out
# * an unknown reduction must raise a ValueError
# * the error must name the argument reduction

# %% nbgrader={"grade": false, "grade_id": "losses_ctc_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _extended_labels(targets: Any, target_lengths: Any, blank: int, xp: Any) -> tuple[Any, Any]:
    """l′ (blank, l1, blank, ..., blank; blanks past each target's end) and where a skip is allowed."""
    n, s_max = targets.shape
    ext = xp.full((n, 2 * s_max + 1), blank, dtype=targets.dtype)
    ext[:, 1::2] = xp.where(xp.arange(s_max)[None, :] < target_lengths[:, None], targets, blank)
    skip = xp.zeros(ext.shape, dtype=bool)
    ### BEGIN SOLUTION
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    ### END SOLUTION
    return ext, skip


def _ctc_alpha(lp: Any, skip: Any, input_lengths: Any, target_lengths: Any, xp: Any) -> tuple[Any, Any]:
    """(α: log-probabilities of the path prefixes, (T, N, L); −log p(label) of each sample, (N,))."""
    ### BEGIN SOLUTION
    neg_inf = lp.dtype.type(-np.inf)
    alpha = xp.full(lp.shape, neg_inf, dtype=lp.dtype)
    alpha[0, :, :2] = lp[0, :, :2]
    for t in range(1, lp.shape[0]):
        prev = alpha[t - 1]
        paths = xp.logaddexp(prev, _shift(prev, 1, neg_inf))
        paths = xp.logaddexp(paths, xp.where(skip, _shift(prev, 2, neg_inf), neg_inf))
        alpha[t] = paths + lp[t]
    batch, end = xp.arange(lp.shape[1]), 2 * target_lengths
    last = alpha[input_lengths - 1, batch]  # (N, L): each sample at its own last step
    before_end = xp.where(target_lengths > 0, last[batch, end - 1], neg_inf)
    return alpha, -xp.logaddexp(last[batch, end], before_end)
    ### END SOLUTION


# %%
rng = np.random.default_rng(0)
logits = Tensor(rng.standard_normal((6, 2, 4)), requires_grad=True)
print(ctc_loss(log_softmax(logits, axis=2), [[1, 2, 2], [3, 0, 0]], [6, 4], [3, 1], reduction="none"))

# %% nbgrader={"grade": true, "grade_id": "losses_ctc", "locked": true, "points": 2, "schema_version": 3, "solution": false}
def brute_force_nll(LP, label):
    """−log Σ over every path of length T that reads `label` (blank = 0): the definition, slowly."""
    import itertools
    total = 0.0
    for path in itertools.product(range(LP.shape[1]), repeat=LP.shape[0]):
        read = [k for i, k in enumerate(path) if k != 0 and (i == 0 or path[i - 1] != k)]
        if read == list(label):
            total += np.exp(sum(LP[t, k] for t, k in enumerate(path)))
    return -np.log(total)

rng = np.random.default_rng(1)
Z = rng.standard_normal((4, 2, 3))
LP = Z - np.log(np.exp(Z).sum(axis=2, keepdims=True))
lp = Tensor(LP, requires_grad=True)
out = ctc_loss(lp, [[1, 2], [1, 0]], [4, 3], [2, 1], reduction="none")
assert np.allclose(out.numpy(), [brute_force_nll(LP[:, 0], [1, 2]), brute_force_nll(LP[:3, 1], [1])])
assert np.allclose(ctc_loss(lp, [[1, 2], [1, 0]], [4, 3], [2, 1]).item(), (out.numpy() / [2, 1]).mean())
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: log-probabilities, which label symbol repeats (_k,
# the other is _o), input lengths, and a long input.
_Z = check_rng.standard_normal((4, 2, 3))
_LP = _Z - np.log(np.sum(np.exp(_Z), axis=2, keepdims=True))
_lp = Tensor(_LP, requires_grad=True)
_k = int(check_rng.integers(1, 3))
_o = 3 - _k
_repeats = ctc_loss(_lp, [[_k, _k], [_o, _o]], [4, 4], [2, 2], reduction="none").numpy()
assert np.allclose(_repeats, [brute_force_nll(_LP[:, 0], [_k, _k]), brute_force_nll(_LP[:, 1], [_o, _o])]), (
    "a repeated label needs a blank between its letters: no skip from one to the other"
)
assert np.allclose(
    ctc_loss(_lp, [_k, _o, _o], [4, 3], [2, 1], reduction="sum").item(),
    brute_force_nll(_LP[:, 0], [_k, _o]) + brute_force_nll(_LP[:3, 1], [_o]),
), "concatenated 1-D targets give the same losses as padded ones"
_impossible = ctc_loss(_lp, [[_k, _k], [_o, 0]], [2, 3], [2, 1], reduction="none").numpy()
assert np.isinf(_impossible[0]) and np.allclose(_impossible[1], brute_force_nll(_LP[:3, 1], [_o])), (
    "a label that cannot fit (a repeated symbol in 2 steps) has an infinite loss; the other sample is unaffected"
)
_zeroed = ctc_loss(_lp, [[_k, _k], [_o, 0]], [2, 3], [2, 1], reduction="sum", zero_infinity=True)
assert np.allclose(_zeroed.item(), brute_force_nll(_LP[:3, 1], [_o])), "zero_infinity=True turns the infinite loss into 0"
_steps_empty = int(check_rng.integers(1, 5))
_empty = ctc_loss(_lp, np.zeros((2, 0), int), [4, _steps_empty], [0, 0], reduction="none").numpy()
assert np.allclose(_empty, [-np.sum(_LP[:, 0, 0]), -np.sum(_LP[:_steps_empty, 1, 0])]), "an empty target is all blanks"
_mixed = ctc_loss(_lp, [[_o, _k], [0, 0]], [4, 3], [2, 0], reduction="none").numpy()
assert np.allclose(_mixed, [brute_force_nll(_LP[:, 0], [_o, _k]), -np.sum(_LP[:3, 1, 0])]), (
    "an empty target next to a longer one in the same batch is all blanks, and the longer one keeps its own loss"
)
_LP_relabelled = _LP[..., [2, 0, 1]]  # class 2 as the blank is class 0 after this relabelling
assert np.allclose(
    ctc_loss(_lp, [[0, 1], [0, 0]], [4, 3], [2, 1], blank=2, reduction="none").numpy(),
    [brute_force_nll(_LP_relabelled[:, 0], [1, 2]), brute_force_nll(_LP_relabelled[:3, 1], [1])],
), "blank=2: class 2 is the blank"
_steps = int(check_rng.integers(150, 251))
_Zl = check_rng.standard_normal((_steps, 1, 3))
_long = Tensor(_Zl - np.log(np.sum(np.exp(_Zl), axis=2, keepdims=True)))
assert np.isfinite(ctc_loss(_long, [[1, 2]], [_steps], [2]).item()), "log space: over 150 to 250 steps the loss stays finite, no underflow"
assert ctc_loss(Tensor(_LP, dtype="float32"), [[_k, _o], [_o, 0]], [4, 3], [2, 1]).dtype == np.float32, "float32 in, float32 out"
_bad = ("avg", "batchmean", "total", "per_label")[int(check_rng.integers(0, 4))]
try:
    ctc_loss(_lp, [[_k, _o], [_o, 0]], [4, 3], [2, 1], reduction=_bad)
    raise AssertionError("an unknown reduction must raise a ValueError")
except ValueError as err:
    assert "reduction" in str(err), f"the error must name the argument reduction; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `losses_ctc_backward` (2 points): the backward recursion
#
# The backward recursion β_t(s) — the log-probability of the path
# *suffixes* from (t, s) to the end, including lp_t(s) — runs the same way
# as α, from each sample's last step t = T_n − 1 back to 0: there β starts
# at lp_t(s) on the two final positions L_n − 1 and L_n − 2 (only L_n − 1 for
# an empty target), and before it a path at s moves on to s, s + 1, or
# s + 2 where a skip *into* s + 2 is allowed. Then α_t(s) + β_t(s) − lp_t(s)
# is the log-probability of all paths through (t, s), and
#
# γ_t(s) = exp(α_t(s) + β_t(s) − lp_t(s) + nll) ∈ [0, 1]
#
# is the fraction of the label's probability that goes through it: its
# *occupancy*. Return γ; for a sample whose loss is infinite (an impossible
# label) it is 0 everywhere. `CTCLossFn.backward` then adds up γ over the
# positions that show the same symbol: the derivative of the loss with
# respect to log p_t(k) is −Σ_{s: l′_s = k} γ_t(s). (PyTorch returns this plus
# exp(log p), which is the same gradient for the logits behind a
# `log_softmax` — log_softmax's backward removes that extra term — but not
# the derivative with respect to `log_probs` itself. tinyflo's passes
# gradcheck on any input.)
#
# **Checked when graded** (besides the tests below), with log-probabilities,
# label symbols and lengths drawn for you:
#
# * the gradient with a repeated label and a shorter input (mean reduction) must match finite differences
# * the gradient where skips over a blank are allowed must match finite differences
# * the gradient with blank=2 must match finite differences
# * the gradient with an empty target in the batch must match finite differences
# * zero_infinity=True: an impossible sample gets gradient 0, no NaN, and the others keep theirs
# * at every step the occupancies of a sample add up to 1: the gradient sums to −1 over the symbols
# * float32 in, float32 gradient

# %% nbgrader={"grade": false, "grade_id": "losses_ctc_backward_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _ctc_occupancy(
    lp: Any, alpha: Any, skip: Any, nll: Any, input_lengths: Any, target_lengths: Any, xp: Any
) -> Any:
    """γ (T, N, L): the share of each sample's label probability that passes through (t, s)."""
    ### BEGIN SOLUTION
    steps, n, length = lp.shape
    neg_inf = lp.dtype.type(-np.inf)
    end = 2 * target_lengths
    positions = xp.arange(length)[None, :]
    finals = (positions == end[:, None]) | (positions == end[:, None] - 1)
    skip_into = _shift(skip, -2, False)  # from s, a skip lands on s + 2
    beta = xp.full(lp.shape, neg_inf, dtype=lp.dtype)
    following = xp.full((n, length), neg_inf, dtype=lp.dtype)
    for t in range(steps - 1, -1, -1):
        paths = xp.logaddexp(following, _shift(following, -1, neg_inf))
        paths = xp.logaddexp(paths, xp.where(skip_into, _shift(following, -2, neg_inf), neg_inf))
        start = (input_lengths - 1 == t)[:, None]
        beta[t] = xp.where(start, xp.where(finals, lp[t], neg_inf), paths + lp[t])
        following = beta[t]
    finite = xp.isfinite(nll)
    safe_nll = xp.where(finite, nll, 0)
    return xp.exp(alpha + beta - lp + safe_nll[None, :, None]) * finite[None, :, None]
    ### END SOLUTION


# %%
loss = ctc_loss(log_softmax(logits, axis=2), [[1, 2, 2], [3, 0, 0]], [6, 4], [3, 1])
loss.backward()
print(loss, logits.grad.shape)

# %% nbgrader={"grade": true, "grade_id": "losses_ctc_backward", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert gradcheck(lambda a: ctc_loss(a, [[1, 2], [1, 0]], [4, 3], [2, 1], reduction="sum"), lp)
### BEGIN HIDDEN TESTS
# This student's own inputs, drawn per student: log-probabilities, which label symbol repeats (_k,
# the other is _o), and a longer input.
_Z = check_rng.standard_normal((4, 2, 3))
_LP = _Z - np.log(np.sum(np.exp(_Z), axis=2, keepdims=True))
_lp = Tensor(_LP, requires_grad=True)
_k = int(check_rng.integers(1, 3))
_o = 3 - _k
assert gradcheck(lambda a: ctc_loss(a, [[_k, _k], [_o, 0]], [4, 2], [2, 1]), _lp), (
    "the gradient with a repeated label and a shorter input (mean reduction) must match finite differences"
)
assert gradcheck(lambda a: ctc_loss(a, [[_k, _o], [_o, _k]], [4, 4], [2, 2], reduction="sum"), _lp), (
    "the gradient where skips over a blank are allowed must match finite differences"
)
assert gradcheck(lambda a: ctc_loss(a, [[0, 1], [0, 0]], [4, 3], [2, 1], blank=2, reduction="sum"), _lp), (
    "the gradient with blank=2 must match finite differences"
)
assert gradcheck(lambda a: ctc_loss(a, np.array([[_k], [0]]), [3, 4], [1, 0], reduction="sum"), _lp), (
    "the gradient with an empty target in the batch must match finite differences"
)
_lp.grad = None
ctc_loss(_lp, [[_k, _k], [_o, 0]], [2, 3], [2, 1], reduction="sum", zero_infinity=True).backward()
_alone = Tensor(_LP[:, 1:], requires_grad=True)
ctc_loss(_alone, [[_o]], [3], [1], reduction="sum").backward()
assert np.all(np.isfinite(_lp.grad.numpy())) and np.all(_lp.grad.numpy()[:, 0] == 0) and np.allclose(
    _lp.grad.numpy()[:, 1], _alone.grad.numpy()[:, 0]
), "zero_infinity=True: an impossible sample gets gradient 0, no NaN, and the others keep theirs"
_steps = int(check_rng.integers(40, 81))
_Zs = check_rng.standard_normal((_steps, 1, 3))
_long = Tensor(_Zs - np.log(np.sum(np.exp(_Zs), axis=2, keepdims=True)), requires_grad=True)
ctc_loss(_long, [[1, 2, 1]], [_steps], [3], reduction="sum").backward()
assert np.allclose(_long.grad.numpy().sum(axis=2), -1.0), (
    "at every step the occupancies of a sample add up to 1: the gradient sums to −1 over the symbols"
)
_g32 = Tensor(_LP, dtype="float32", requires_grad=True)
ctc_loss(_g32, [[_k, _o], [_o, 0]], [4, 3], [2, 1]).backward()
assert _g32.grad.dtype == np.float32, "float32 in, float32 gradient"
### END HIDDEN TESTS

# %% [markdown]
# ## Losses as modules
#
# PyTorch also offers every loss as a `Module` (`nn.CrossEntropyLoss()`),
# which keeps its options so that a training loop can call `criterion(out, y)`.
# Each is a thin shell around the function above: nothing to write, but
# worth reading once. A per-class `weight` tensor becomes a buffer, so it
# moves with `.to(device)` and lands in the `state_dict`, as in PyTorch.

# %%
#| export
class _Loss(Module):
    """A loss function as a Module: it keeps the options and calls the function in forward."""

    _function: Any = None
    _reductions: tuple[str, ...] = _REDUCTIONS

    def __init__(self, **options: Any) -> None:
        super().__init__()
        checked = {name: value for name, value in options.items() if name not in ("weight", "pos_weight")}
        _check_options(type(self).__name__, self._reductions, **checked)
        for name, value in options.items():
            if name in ("weight", "pos_weight") and value is not None and not isinstance(value, Tensor):
                try:
                    value = Tensor(value)  # a weight given as a list or array is state too
                except TypeError:
                    raise TypeError(f"{type(self).__name__}: {name} must be a Tensor, an array or a list of numbers "
                                    f"(one per class) or None; got {described(value)}") from None
            if isinstance(value, Tensor):
                self.register_buffer(name, value)
            else:
                setattr(self, name, value)
        self._options = tuple(options)

    def forward(self, *inputs: Any) -> Tensor:
        return type(self)._function(*inputs, **{name: getattr(self, name) for name in self._options})

    def extra_repr(self) -> str:
        return ", ".join(f"{n}={getattr(self, n)!r}" for n in self._options if not isinstance(getattr(self, n), Tensor))


class MSELoss(_Loss):
    _function = staticmethod(mse_loss)

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)


class L1Loss(_Loss):
    _function = staticmethod(l1_loss)

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)


class SmoothL1Loss(_Loss):
    _function = staticmethod(smooth_l1_loss)

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction=reduction, beta=beta)


class HuberLoss(_Loss):
    _function = staticmethod(huber_loss)

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction, delta=delta)


class PoissonNLLLoss(_Loss):
    _function = staticmethod(poisson_nll_loss)

    def __init__(self, log_input: bool = True, full: bool = False, eps: float = 1e-8, reduction: str = "mean") -> None:
        super().__init__(log_input=log_input, full=full, eps=eps, reduction=reduction)


class CrossEntropyLoss(_Loss):
    _function = staticmethod(cross_entropy)

    def __init__(
        self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0
    ) -> None:
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing)


class NLLLoss(_Loss):
    _function = staticmethod(nll_loss)

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction)


class BCELoss(_Loss):
    _function = staticmethod(binary_cross_entropy)

    def __init__(self, weight: Any = None, reduction: str = "mean") -> None:
        super().__init__(weight=weight, reduction=reduction)


class BCEWithLogitsLoss(_Loss):
    _function = staticmethod(binary_cross_entropy_with_logits)

    def __init__(self, weight: Any = None, reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__(weight=weight, reduction=reduction, pos_weight=pos_weight)


class KLDivLoss(_Loss):
    _function = staticmethod(kl_div)
    _reductions = _REDUCTIONS + ("batchmean",)

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(reduction=reduction, log_target=log_target)


class TripletMarginLoss(_Loss):
    _function = staticmethod(triplet_margin_loss)

    def __init__(
        self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False, reduction: str = "mean"
    ) -> None:
        super().__init__(margin=margin, p=p, eps=eps, swap=swap, reduction=reduction)


class CosineEmbeddingLoss(_Loss):
    _function = staticmethod(cosine_embedding_loss)

    def __init__(self, margin: float = 0.0, reduction: str = "mean") -> None:
        super().__init__(margin=margin, reduction=reduction)


class HingeEmbeddingLoss(_Loss):
    _function = staticmethod(hinge_embedding_loss)

    def __init__(self, margin: float = 1.0, reduction: str = "mean") -> None:
        super().__init__(margin=margin, reduction=reduction)


class MarginRankingLoss(_Loss):
    _function = staticmethod(margin_ranking_loss)

    def __init__(self, margin: float = 0.0, reduction: str = "mean") -> None:
        super().__init__(margin=margin, reduction=reduction)


class CTCLoss(_Loss):
    _function = staticmethod(ctc_loss)

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        super().__init__(blank=blank, reduction=reduction, zero_infinity=zero_infinity)


# %%
criterion = CrossEntropyLoss(label_smoothing=0.1)
print(criterion, criterion(Tensor([[2.0, 0.5, -1.0]]), [0]))

# %% [markdown]
# ## Systems corner
#
# * **Where the time goes.** Every loss here is a handful of elementwise
#   ops over the network's output — negligible next to the matmuls that
#   produced it — except CTC, whose T-step loop runs T small vectorised ops
#   forward and T backward. Vectorising over the batch is what keeps it
#   usable: a loop over samples inside the loop over time would be N times
#   as many Python calls.
# * **Memory.** A composed loss keeps every intermediate for backward: the
#   log-probabilities of a (N, C) cross-entropy are a second copy of the
#   logits. For language models with C = 50,000 that copy matters, which is
#   why fused kernels compute the loss and its gradient without keeping it.
#   CTC keeps α (T × N × (2S + 1)) for its backward.
# * **Sync points.** `binary_cross_entropy` checks that its input lies in
#   [0, 1]: a reduction read back to Python, free on the CPU, a device sync
#   on a GPU. `nll_loss` and `cross_entropy` check that class indices are in
#   range; on the CPU the same way, but that check runs on every batch of a
#   classifier, so on a GPU (`device.reads_wait`) `_class_targets` reads
#   nothing: an index out of range puts NaN in the `valid` mask, the loss
#   comes out NaN, and the Trainer's NaN check, which reads once per log
#   interval, reports it. PyTorch checks on the GPU too, asynchronously, as
#   a device-side assert that stops the process.
# * **Precision.** Keep losses in float32 even under mixed precision
#   (module 11): the sum of a batch of losses and log-sum-exp lose too many
#   digits in float16.
