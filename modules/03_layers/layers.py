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
# # Module 03 — Layers
#
# With tensors (module 01) and the engine that differentiates them (module
# 02) you can already train a network: keep a few weight tensors, compute a
# loss, call `backward()`, nudge the weights. What you cannot yet do is keep
# a *real* network tidy. A ResNet has hundreds of weight tensors; an
# optimizer needs all of them, a checkpoint needs each one under a stable
# name, dropout must switch off at evaluation time, and fine-tuning freezes
# some of them.
#
# This module builds the layer library every later module and milestone
# uses, with PyTorch's names and defaults so your skills transfer:
#
# | task | points | what |
# |---|---|---|
# | `layers_elu`, `layers_softplus`, `layers_gelu` | 1 + 1 + 1 | three activations as graph nodes, each with its own backward |
# | `layers_activations` | 1 | ReLU's other relatives, built from tensor ops |
# | `layers_softmax` | 2 | `softmax` and `log_softmax` that stay finite for logits of ±10⁴ |
# | `layers_module` | 2 | `Module`: `self.name = value` registers parameters, buffers and sub-modules |
# | `layers_module_walk` | 1 | qualified names: `named_modules()`, `named_parameters()`, `named_buffers()` |
# | `layers_module_train` | 1 | `train()` / `eval()` through the whole tree |
# | `layers_module_to` | 1 | `to()`: move and cast a model in place |
# | `layers_state_dict` | 1 | `state_dict()`: the model's state by name |
# | `layers_load_state_dict` | 2 | `load_state_dict()` with errors that name keys and shapes |
# | `layers_init_fans`, `layers_init` | 1 + 1 | fans, gains, and the variance-scaling initializers of `torch.nn.init` |
# | `layers_orthogonal`, `layers_trunc_normal` | 1 + 1 | two more initializers, seeded through `tinyflo.manual_seed` |
# | `layers_linear` | 2 | `Linear` (PyTorch's default init) as one graph node |
# | `layers_embedding` | 1 | `Embedding`, a lookup table with checked indices |
# | `layers_dropout` | 2 | inverted dropout, reproducible under `manual_seed` |
# | `layers_layer_norm` | 1 | `LayerNorm` |
# | `layers_batch_norm` | 2 | `BatchNorm1d` with running statistics |

# %%
#| default_exp core.layers

# %%
#| export
from __future__ import annotations

import functools
import math
import numbers
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from tinyflo.core.autograd import no_grad
from tinyflo.core.tensor import (
    AutocastMode,
    Device,
    DeviceError,
    Function,
    ShapeError,
    Tensor,
    as_device,
    as_dtype,
    brief,
    check_tensor,
    described,
    float16,
    float32,
    float64,
    is_array,
    is_floating,
    block_count,
    normalize_axis,
    parallel,
    per_block,
    ones,
    rand,
    randn,
    where,
    zeros,
)

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.layers: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.layers"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
from tinyflo.core.autograd import gradcheck


def _close_text(message, words):
    """Whether an error's message names each of ``words``: how a check reads an error's text."""
    return all(str(word) in message for word in words)

# %% [markdown]
# ## Arguments are checked where they come in
#
# `Linear(-1, 3)` could fail deep inside `zeros` with a message about a
# shape the user never wrote; `Dropout("0.5")` would fail only at the first
# forward. Every constructor here (and every function with a setting)
# checks its numbers and choices first, with one given helper, and a bad one
# is a `ValueError` (as in PyTorch) of one line: who, which argument, what
# came, what was expected — `Linear got in_features=-1; expected a positive
# integer`. A `bool` is not a size, although Python counts it as an int.
# Modules 04 and 05 use the same helper.

# %%
#| export
def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


_EXPECTED: dict[str, Callable[[Any], bool]] = {
    "an integer": _is_integer,
    "a positive integer": lambda v: _is_integer(v) and v > 0,
    "an integer >= 0": lambda v: _is_integer(v) and v >= 0,
    "a positive integer or a tuple of them": lambda v: (
        _is_integer(v) and v > 0
        or isinstance(v, tuple | list) and len(v) > 0 and all(_is_integer(n) and n > 0 for n in v)
    ),
    "a number": _is_number,
    "a number > 0": lambda v: _is_number(v) and v > 0,
    "a number >= 0": lambda v: _is_number(v) and v >= 0,
    "a number in [0, 1]": lambda v: _is_number(v) and 0 <= v <= 1,
    "a number in [0, 1] or None": lambda v: v is None or _is_number(v) and 0 <= v <= 1,
    "True or False": lambda v: isinstance(v, bool | np.bool_),
}


def check_arg(owner: str, name: str, value: Any, expected: str | tuple[str, ...]) -> Any:
    """``value`` if it is what ``expected`` says, else a one-line ValueError naming owner, argument and value.

    ``expected`` is a phrase of ``_EXPECTED`` or a tuple of the strings allowed:
    ``Linear got in_features=-1; expected a positive integer``.
    """
    if isinstance(expected, tuple):
        ok = isinstance(value, str) and value in expected
        choices = [repr(c) for c in expected]
        expected = " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)
    else:
        ok = _EXPECTED[expected](value)
    if not ok:
        raise ValueError(f"{owner} got {name}={brief(value)}; expected {expected}")
    return value

# %% [markdown]
# ## Activation functions
#
# A network of linear layers alone is one linear map, however deep. The
# nonlinearity between the layers is what lets it bend. Each activation is a
# function of one number applied elementwise, and there are two ways to give
# it a gradient:
#
# * **compose** it from module 01's ops, which already have backwards —
#   `silu(x) = x · σ(x)` is `x * x.sigmoid()`, and autograd does the rest;
# * write a dedicated **`Function`** with `forward` and `backward` side by
#   side, when that is much more stable or much faster than the composition.
#
# Composition is the default: less code, and every piece is already
# gradchecked. Three activations here earn a `Function`:
#
# | Function | forward | backward (× grad) | why not compose |
# |---|---|---|---|
# | `EluFn(α)` | x if x > 0 else α(eˣ − 1) | 1 if x > 0 else out + α | `expm1` is exact near 0, and `exp` of a large positive x would overflow in the branch `where` throws away |
# | `SoftplusFn(β, t)` | (1/β) log(1 + e^{βx}), and x where βx > t | σ(βx), and 1 where βx > t | stable: `max(βx, 0) + log1p(e^{−|βx|})` never overflows |
# | `GeluFn` | x Φ(x) = ½x(1 + erf(x/√2)) | Φ(x) + x φ(x) | NumPy has no `erf` (see below) |
#
# `GeluFn` also has PyTorch's `approximate="tanh"` form,
# ½x(1 + tanh(u)) with u = √(2/π)(x + 0.044715x³), whose derivative is
# ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
#
# In every `forward`, keep the input's dtype: Python floats such as `alpha`
# meet a float32 array as float32 (NumPy 2's rule). The functions that call
# a `Function` pass it `x._floating()` (module 01), so an integer input
# arrives as float32.
#
# ### An `erf` for NumPy
#
# GELU needs the error function, and NumPy does not have one. SciPy's
# `scipy.special.erf` is a fast ufunc, but tinyflo does not depend on SciPy;
# Python's `math.erf` is exact but works on one float at a time (applied
# per element with `np.frompyfunc`, about 100 ms for a (768, 512)
# activation). So `erf` below uses SciPy when it is installed and otherwise
# `_erf_rational`: the rational approximations of fdlibm's `s_erf.c` (Sun,
# 1993 — the same algorithm as most C libraries' `erf`, and so as
# `math.erf`), evaluated on whole arrays. Each of five ranges of |x| has its
# own ratio of polynomials; beyond 1.25 it approximates erfc(x)·x·e^{x²}
# instead, because erf(x) is so close to 1 there that only its distance from
# 1 carries information. Its error is below one unit in the last place of a
# float64. Float32 and float16 inputs are evaluated in float64 and rounded
# back, so they are exact to their own rounding too. On a GPU, CuPy has
# `erf` built in.

# %%
#| export
def _poly(z: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """c₀ + c₁z + c₂z² + … by Horner's rule."""
    out = np.full_like(z, coefficients[-1])
    for c in coefficients[-2::-1]:
        out *= z
        out += c
    return out


# fdlibm s_erf.c (Sun Microsystems, 1993): erf on [0, 0.84375) as x + x·P(x²)/Q(x²), on [0.84375, 1.25)
# as erx + P(s)/Q(s) with s = |x| − 1, and erfc on [1.25, 1/0.35) and [1/0.35, 6) as
# exp(−x² − 0.5625 + R(1/x²)/S(1/x²)) / x. Q and S have a leading 1.
_ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
           -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_ERF_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
           1.32494738004321644526e-04, -3.96022827877536812320e-06)
_ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
           3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
           -2.16637559486879084300e-03)
_ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
           1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
           -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
           -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_ERF_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
           6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
           6.57024977031928170135e+00, -6.04244152148580987438e-02)
_ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
           -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
           -4.83519191608651397019e+02)
_ERF_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
           3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
           -2.24409524465858183362e+01)
_ERX = 8.45062911510467529297e-01  # erf(1) rounded to float, so erx + P/Q loses nothing


def _erf_rational(x: np.ndarray) -> np.ndarray:
    """erf of a NumPy array by fdlibm's rational approximations, in float64, under 1 ulp."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.ravel()
    ax = np.abs(flat)
    out = np.where(np.isnan(flat), flat, np.sign(flat))  # |x| ≥ 6 (and ±inf): ±1 to double precision; NaN stays
    # Each range works on the positions it owns; integer indices (flatnonzero) gather and scatter several
    # times faster than a boolean mask does on a random mixture of ranges.
    i = np.flatnonzero(ax < 0.84375)
    xs = flat[i]
    z = xs * xs
    out[i] = xs + xs * (_poly(z, _ERF_PP) / _poly(z, _ERF_QQ))
    i = np.flatnonzero((ax >= 0.84375) & (ax < 1.25))
    s = ax[i] - 1
    out[i] = np.copysign(_ERX + _poly(s, _ERF_PA) / _poly(s, _ERF_QA), flat[i])
    for low, high, r, q in ((1.25, 1 / 0.35, _ERF_RA, _ERF_SA), (1 / 0.35, 6.0, _ERF_RB, _ERF_SB)):
        i = np.flatnonzero((ax >= low) & (ax < high))
        a = ax[i]
        s = 1 / (a * a)
        hi = (a.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)  # a with its low 32 bits cut
        # exp(−a²) as exp(−hi²)·exp((hi − a)(hi + a)): hi² is exact, so squaring a adds no rounding error
        erfc = np.exp(-hi * hi - 0.5625) * np.exp((hi - a) * (hi + a) + _poly(s, r) / _poly(s, q)) / a
        out[i] = np.copysign(1 - erfc, flat[i])
    return out.reshape(x.shape)


@functools.cache
def _numpy_erf() -> Any:
    """SciPy's erf ufunc when SciPy is installed, else the vectorised fdlibm erf."""
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:
        return _erf_rational
    return scipy_erf


def erf(x: Any) -> Any:
    """The error function of a NumPy or CuPy array, elementwise, in the array's dtype."""
    if not isinstance(x, np.ndarray | np.generic):
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(x)
    return np.asarray(_numpy_erf()(x)).astype(x.dtype, copy=False)


# %% [markdown]
# Check it against `math.erf` at a few thousand points:

# %%
_points = np.linspace(-7, 7, 5001)
print("largest difference from math.erf:", np.abs(erf(_points) - np.array([math.erf(v) for v in _points])).max())

# %% [markdown]
# ### Task `layers_elu` (1 point): ELU as a graph node
#
# Write `EluFn` (the table above: its `forward` and its `backward`) and
# `elu(x, alpha=1.0)`, which applies it to `x._floating()`.
#
# **Checked when graded** (besides the tests below), with values of both
# signs and an α drawn for you:
#
# * elu(x, alpha=α) must be α · (eˣ − 1) for x ≤ 0
# * the gradient of elu(x, alpha=α) is out + α where x ≤ 0
# * elu must be one EluFn node in the graph
# * an integer input is computed in float32 (x._floating())
# * elu of large ±x (10² to 10⁴) must stay finite: x where x > 0, −1 (that is −α) where x < 0

# %% nbgrader={"grade": false, "grade_id": "layers_elu_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class EluFn(Function):
    def forward(self, a, alpha=1.0):
        ### BEGIN SOLUTION
        alpha = a.dtype.type(alpha)
        self.alpha = alpha
        out = self.xp.where(a > 0, a, alpha * self.xp.expm1(self.xp.minimum(a, 0)))
        self.save_for_backward(a, out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        a, out = self.saved
        return self.xp.where(a > 0, grad, grad * (out + self.alpha))
        ### END SOLUTION


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x where x > 0, else alpha · (eˣ − 1)."""
    check_tensor("elu", "x", x)
    check_arg("elu", "alpha", alpha, "a number")
    ### BEGIN SOLUTION
    return EluFn.apply(x._floating(), alpha=alpha)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_elu", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([-3.0, -1.0, -0.25, 0.5, 2.0], np.float32)
x64 = Tensor(np.array([-2.5, -0.7, 0.3, 1.9]), requires_grad=True)
assert np.allclose(elu(Tensor(X)).numpy(), np.where(X > 0, X, np.expm1(X)), atol=1e-6)
assert elu(Tensor(X)).dtype == np.float32, "elu must keep float32"
assert gradcheck(elu, x64)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(6, 10))
_signs = np.resize([1.0, -1.0], _n)  # half of the values negative
_X = (check_rng.permutation(_signs) * check_rng.uniform(0.1, 3.0, _n)).astype(np.float32)
_alpha = round(float((check_rng.uniform(0.2, 0.8), check_rng.uniform(1.3, 2.5))[int(check_rng.integers(0, 2))]), 2)
assert np.allclose(elu(Tensor(_X), alpha=_alpha).numpy(), np.where(_X > 0, _X, _alpha * np.expm1(_X)), atol=1e-6), (
    "elu(x, alpha=α) must be α · (eˣ − 1) for x ≤ 0"
)
_x64 = Tensor(check_rng.permutation(_signs) * check_rng.uniform(0.1, 3.0, _n), requires_grad=True)
assert gradcheck(lambda a: elu(a, alpha=_alpha), _x64), "the gradient of elu(x, alpha=α) is out + α where x ≤ 0"
assert isinstance(elu(Tensor(_X, requires_grad=True))._ctx, EluFn), "elu must be one EluFn node in the graph"
assert elu(Tensor(check_rng.integers(-5, 6, _n))).dtype == np.float32, "an integer input is computed in float32 (x._floating())"
_big = (check_rng.permutation(_signs) * check_rng.uniform(1e2, 1e4, _n)).astype(np.float32)
assert np.allclose(elu(Tensor(_big)).numpy(), np.where(_big > 0, _big, -1.0)), (
    "elu of large ±x (10² to 10⁴) must stay finite: x where x > 0, −1 (that is −α) where x < 0"
)
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_softplus` (1 point): Softplus that never overflows
#
# Write `SoftplusFn` (the table above) and
# `softplus(x, beta=1.0, threshold=20.0)`, which applies it to
# `x._floating()`. The threshold compares β·x, as in PyTorch.
#
# **Checked when graded** (besides the tests below), with values, β and
# thresholds drawn for you:
#
# * softplus(x, beta=β) must be log(1 + e^(βx)) / β
# * the gradient of softplus(x, beta=β, threshold=t) is σ(βx), and 1 where βx > threshold
# * above the threshold softplus is x itself
# * the threshold compares beta · x, not x: where βx > threshold (and x does not), softplus is x itself
# * softplus(x) for x of 90 to 1000 with the threshold out of reach must be x: e^x overflows float32, so never compute it
# * the gradient at large ±x (10³ to 10⁴) must be σ(±x) = 1 and 0, finite
# * softplus must be one SoftplusFn node
# * an integer input is computed in float32 (x._floating())

# %% nbgrader={"grade": false, "grade_id": "layers_softplus_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class SoftplusFn(Function):
    def forward(self, a, beta=1.0, threshold=20.0):
        ### BEGIN SOLUTION
        xp = self.xp
        scaled = a * a.dtype.type(beta)
        e = xp.exp(-xp.abs(scaled))  # never overflows
        self.linear = scaled > threshold
        self.sig = xp.where(scaled >= 0, 1 / (1 + e), e / (1 + e))  # σ(βx), the derivative
        soft = (xp.maximum(scaled, 0) + xp.log1p(e)) / a.dtype.type(beta)
        return xp.where(self.linear, a, soft)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        return self.xp.where(self.linear, grad, grad * self.sig)
        ### END SOLUTION


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """(1/beta) · log(1 + exp(beta · x)), and x itself where beta · x > threshold."""
    check_tensor("softplus", "x", x)
    check_arg("softplus", "beta", beta, "a number > 0")
    check_arg("softplus", "threshold", threshold, "a number")
    ### BEGIN SOLUTION
    return SoftplusFn.apply(x._floating(), beta=beta, threshold=threshold)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_softplus", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([-3.0, -1.0, -0.25, 0.5, 2.0], np.float32)
x64 = Tensor(np.array([-2.5, -0.7, 0.3, 1.9]), requires_grad=True)
assert np.allclose(softplus(Tensor(X)).numpy(), np.log1p(np.exp(X)), atol=1e-6)
assert softplus(Tensor(X)).dtype == np.float32, "softplus must keep float32"
assert gradcheck(softplus, x64)
assert np.all(np.isfinite(softplus(Tensor([1e4, -1e4])).numpy())), "softplus must not overflow"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(6, 10))
_signs = np.resize([1.0, -1.0], _n)  # half of the values negative
_X = (check_rng.permutation(_signs) * check_rng.uniform(0.1, 3.0, _n)).astype(np.float32)
_beta = round(float(check_rng.uniform(0.5, 3.0)), 2)
assert np.allclose(softplus(Tensor(_X), beta=_beta).numpy(), np.log1p(np.exp(_beta * _X)) / _beta, atol=1e-6), (
    "softplus(x, beta=β) must be log(1 + e^(βx)) / β"
)
# βx on both sides of the threshold, none within 0.5 of it (where the gradient jumps)
_b, _t = round(float(check_rng.uniform(1.5, 3.0)), 2), round(float(check_rng.uniform(1.0, 4.0)), 2)
_bx = np.concatenate([check_rng.uniform(-6.0, _t - 0.5, 3), check_rng.uniform(_t + 0.5, _t + 4.0, 3)])
_x64 = Tensor(check_rng.permutation(_bx) / _b, requires_grad=True)
assert gradcheck(lambda a: softplus(a, beta=_b, threshold=_t), _x64), (
    "the gradient of softplus(x, beta=β, threshold=t) is σ(βx), and 1 where βx > threshold"
)
_above = check_rng.uniform(25.0, 1e4, 3)
assert np.allclose(softplus(Tensor(_above)).numpy(), _above), "above the threshold softplus is x itself"
# β above 2 and βx just above the threshold t ≥ 1: x itself stays below t
_b2, _t2 = round(float(check_rng.uniform(2.0, 3.0)), 2), round(float(check_rng.uniform(1.0, 4.0)), 2)
_x2 = (_t2 + float(check_rng.uniform(0.2, 1.0))) / _b2
assert np.allclose(softplus(Tensor(np.array([_x2])), beta=_b2, threshold=_t2).numpy(), [_x2], rtol=0, atol=1e-12), (
    "the threshold compares beta · x, not x: where βx > threshold (and x does not), softplus is x itself"
)
_huge = check_rng.uniform(90.0, 1000.0, 3).astype(np.float32)
assert np.allclose(softplus(Tensor(_huge), threshold=1e9).numpy(), _huge), (
    "softplus(x) for x of 90 to 1000 with the threshold out of reach must be x: e^x overflows float32, so never compute it"
)
_B = float(check_rng.uniform(1e3, 1e4))
_big = Tensor(np.array([_B, -_B]), requires_grad=True)
softplus(_big, threshold=1e9).sum().backward()
assert np.allclose(_big.grad.numpy(), [1.0, 0.0]), "the gradient at large ±x (10³ to 10⁴) must be σ(±x) = 1 and 0, finite"
assert isinstance(softplus(Tensor(_X, requires_grad=True))._ctx, SoftplusFn), "softplus must be one SoftplusFn node"
assert softplus(Tensor(check_rng.integers(-5, 6, _n))).dtype == np.float32, (
    "an integer input is computed in float32 (x._floating())"
)
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_gelu` (1 point): GELU, exact and with the tanh approximation
#
# Write `GeluFn` (the table above) with both forms, and
# `gelu(x, approximate="none")`, which applies it to `x._floating()`;
# `approximate` is `"none"` or `"tanh"` (the given first line refuses
# anything else).
#
# **Checked when graded** (besides the tests below), with values drawn for
# you:
#
# * gelu(x, approximate='tanh') must be ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
# * the gradient of the tanh form must match central differences
# * the exact gradient Φ(x) + x·φ(x) must hold from −6 to 6
# * gelu must be one GeluFn node
# * an integer input is computed in float32 (x._floating())
# * gelu with an unknown approximate (not 'none' or 'tanh') must raise a ValueError
# * the ValueError should name the unknown approximation

# %% nbgrader={"grade": false, "grade_id": "layers_gelu_code", "locked": false, "schema_version": 3, "solution": true}
#| export
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class GeluFn(Function):
    def forward(self, a, approximate="none"):
        ### BEGIN SOLUTION
        xp = self.xp
        self.approximate = approximate
        if approximate == "tanh":
            t = xp.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a * a * a))
            self.save_for_backward(a, t)
            return 0.5 * a * (1 + t)
        cdf = 0.5 * (1 + erf(a * (1 / math.sqrt(2))))  # Φ(x)
        self.save_for_backward(a, cdf)
        return a * cdf
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        xp = self.xp
        if self.approximate == "tanh":
            a, t = self.saved
            du = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * a * a)
            return grad * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * du)
        a, cdf = self.saved
        pdf = xp.exp(-0.5 * a * a) * (1 / math.sqrt(2 * math.pi))  # φ(x)
        return grad * (cdf + a * pdf)
        ### END SOLUTION


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x · Φ(x), exactly (``"none"``) or with the tanh approximation (``"tanh"``)."""
    check_tensor("gelu", "x", x)
    check_arg("gelu", "approximate", approximate, ("none", "tanh"))
    ### BEGIN SOLUTION
    return GeluFn.apply(x._floating(), approximate=approximate)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_gelu", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([-3.0, -1.0, -0.25, 0.5, 2.0], np.float32)
x64 = Tensor(np.array([-2.5, -0.7, 0.3, 1.9]), requires_grad=True)
_phi = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in X])
assert np.allclose(gelu(Tensor(X)).numpy(), X * _phi, atol=1e-6)
assert gelu(Tensor(X)).dtype == np.float32, "gelu must keep float32"
assert gradcheck(gelu, x64)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(6, 10))
_signs = np.resize([1.0, -1.0], _n)  # half of the values negative
_X = (check_rng.permutation(_signs) * check_rng.uniform(0.1, 4.0, _n)).astype(np.float32)
_tanh_form = 0.5 * _X * (1 + np.tanh(math.sqrt(2 / math.pi) * (_X + 0.044715 * _X ** 3)))
assert np.allclose(gelu(Tensor(_X), approximate="tanh").numpy(), _tanh_form, atol=1e-6), (
    "gelu(x, approximate='tanh') must be ½x(1 + tanh(√(2/π)(x + 0.044715x³)))"
)
_x64 = Tensor(check_rng.permutation(_signs) * check_rng.uniform(0.5, 3.0, _n), requires_grad=True)
assert gradcheck(lambda a: gelu(a, approximate="tanh"), _x64), "the gradient of the tanh form must match central differences"
_wide = Tensor(np.sort(check_rng.uniform(-6.0, 6.0, 13)), requires_grad=True)
assert gradcheck(gelu, _wide), "the exact gradient Φ(x) + x·φ(x) must hold from −6 to 6"
assert isinstance(gelu(Tensor(_X, requires_grad=True))._ctx, GeluFn), "gelu must be one GeluFn node"
assert gelu(Tensor(check_rng.integers(-5, 6, _n))).dtype == np.float32, "an integer input is computed in float32 (x._floating())"
_bad = ("fast", "sigmoid", "quick", "exact", "erf")[int(check_rng.integers(0, 5))]
try:
    gelu(Tensor(_X), approximate=_bad)
    raise AssertionError("gelu with an unknown approximate (not 'none' or 'tanh') must raise a ValueError")
except ValueError as err:
    assert _close_text(str(err), [_bad]), "the ValueError should name the unknown approximation"
### END HIDDEN TESTS

# %% [markdown] tinyflo={"given_after": "layers_gelu"}
# GELU's tanh form runs in every block of a GPT, on its widest activations
# (4 × the channels). Written as above, each `*` and `+` allocates a new
# array, and backward makes about a dozen. The given `GeluTanhFn` computes
# the same formulas in place — two arrays forward, two backward — in
# cache-sized blocks shared among the cores, and from
# this cell on `gelu(x, approximate="tanh")` runs it; the exact form stays
# yours. The tests check both forms against each other, PyTorch and central
# differences.

# %% tinyflo={"given_after": "layers_gelu"}
#| export
GELU_BLOCK = 1 << 16  # elements per block on the CPU: every pass over a block finds it in the core's cache
_GELU_U3 = 0.044715 * _SQRT_2_OVER_PI  # the constants folded, so each costs no pass of its own
_GELU_W3 = 1.5 * 0.044715 * _SQRT_2_OVER_PI


class GeluTanhFn(Function):
    """½x(1 + tanh(√(2/π)(x + 0.044715x³))) with its derivative, computed in place.

    On the CPU it works block by block, on every thread (`parallel`, module 01), so the passes over
    a block (eight forward, nine backward) read it from the core's cache rather than from memory;
    on a GPU every pass is one kernel over the whole array.
    """

    def _each_block(self, fn, *arrays):
        """fn(*blocks) on matching flat blocks of equally shaped contiguous arrays."""
        flats = [a.reshape(-1) for a in arrays]
        parallel(lambda start, stop: fn(*(flat[start:stop] for flat in flats)), flats[0].size, GELU_BLOCK, self.xp)

    def forward(self, a):
        xp = self.xp
        a = xp.ascontiguousarray(a)
        p, out = xp.empty_like(a), xp.empty_like(a)

        def block(x, pb, ob):
            xp.multiply(x, x, out=pb)  # u = √(2/π)(x + 0.044715x³) = x(√(2/π)·0.044715·x² + √(2/π))
            pb *= _GELU_U3
            pb += _SQRT_2_OVER_PI
            pb *= x
            xp.tanh(pb, out=pb)
            pb += 1  # p = 1 + tanh(u), kept for backward
            xp.multiply(pb, x, out=ob)
            ob *= 0.5

        self._each_block(block, a, p, out)
        self.save_for_backward(a, p)
        return out

    def backward(self, grad):
        xp = self.xp
        # ½(1 + t) + ½x(1 − t²)·u′ = p(½ + (2 − p)w), with p = 1 + t, 1 − t² = p(2 − p), w = ½x·u′
        a, p = self.saved
        grad = xp.ascontiguousarray(grad)
        d = xp.empty_like(a)

        def block(x, pb, g, db):
            w = xp.multiply(x, x)  # w = x(1.5·0.044715·√(2/π)·x² + ½√(2/π))
            w *= _GELU_W3
            w += 0.5 * _SQRT_2_OVER_PI
            w *= x
            xp.subtract(2, pb, out=db)
            db *= w
            db += 0.5
            db *= pb
            db *= g

        self._each_block(block, a, p, grad, d)
        return d


_graded_gelu = gelu


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x · Φ(x), exactly (``"none"``) or with the tanh approximation (``"tanh"``)."""
    check_tensor("gelu", "x", x)
    if approximate == "tanh":
        return GeluTanhFn.apply(x._floating())
    return _graded_gelu(x, approximate)


# %% [markdown]
# ### Task `layers_activations` (1 point): the rest, composed from tensor ops
#
# The activations that are compositions are one line each (PyTorch's
# definitions):
#
# | function | definition |
# |---|---|
# | `relu(x)`, `sigmoid(x)`, `tanh(x)` | module 01's ops |
# | `leaky_relu(x, negative_slope=0.01)` | x if x > 0 else slope · x (`where`) |
# | `selu(x)` | scale · elu(x, α) with α ≈ 1.6733, scale ≈ 1.0507 (constants below) |
# | `silu(x)` | x · σ(x) |
# | `mish(x)` | x · tanh(softplus(x)) |
# | `hardswish(x)` | x · clip(x + 3, 0, 6) / 6 |
# | `prelu(x, weight)` | x if x > 0 else weight · x, with one weight per channel (axis 1), or one for all |
#
# For `prelu`, a weight with one entry applies everywhere; a weight with C
# entries applies along axis 1 of an input of shape (N, C, ...), so it must
# be reshaped to (C, 1, ..., 1) to broadcast. Any other size is a
# `ShapeError` naming both shapes.
#
# **Checked when graded** (besides the tests below), with values, shapes
# and weights drawn for you:
#
# * leaky_relu's default slope is 0.01
# * sigmoid(x) must be 1 / (1 + e⁻ˣ)
# * tanh(x) must be the hyperbolic tangent
# * selu(x) must be scale · elu(x, alpha) with alpha ≈ 1.6733 and scale ≈ 1.0507
# * mish(x) must be x · tanh(softplus(x))
# * hardswish(x) must be x · clip(x + 3, 0, 6) / 6
# * the gradient of leaky_relu, selu, silu, mish and hardswish must match central differences
# * prelu: one weight per channel, along axis 1
# * prelu: a weight with one entry applies everywhere
# * prelu with C + 1 weights for an input of C channels must raise ShapeError
# * the ShapeError should name both shapes

# %% nbgrader={"grade": false, "grade_id": "layers_activations_code", "locked": false, "schema_version": 3, "solution": true}
#| export
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def relu(x: Tensor) -> Tensor:
    """max(x, 0), elementwise."""
    check_tensor("relu", "x", x)
    ### BEGIN SOLUTION
    return x.relu()
    ### END SOLUTION


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e⁻ˣ), elementwise (stable for large |x|)."""
    check_tensor("sigmoid", "x", x)
    ### BEGIN SOLUTION
    return x.sigmoid()
    ### END SOLUTION


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent, elementwise."""
    check_tensor("tanh", "x", x)
    ### BEGIN SOLUTION
    return x.tanh()
    ### END SOLUTION


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, else negative_slope · x."""
    check_tensor("leaky_relu", "x", x)
    check_arg("leaky_relu", "negative_slope", negative_slope, "a number")
    ### BEGIN SOLUTION
    return where(x > 0, x, x * negative_slope)
    ### END SOLUTION


def selu(x: Tensor) -> Tensor:
    """Self-normalising ELU: scale · elu(x, alpha) with the constants of Klambauer et al. (2017)."""
    check_tensor("selu", "x", x)
    ### BEGIN SOLUTION
    return elu(x, _SELU_ALPHA) * _SELU_SCALE
    ### END SOLUTION


def silu(x: Tensor) -> Tensor:
    """x · σ(x) (also called swish)."""
    check_tensor("silu", "x", x)
    ### BEGIN SOLUTION
    return x * x.sigmoid()
    ### END SOLUTION


def mish(x: Tensor) -> Tensor:
    """x · tanh(softplus(x))."""
    check_tensor("mish", "x", x)
    ### BEGIN SOLUTION
    return x * softplus(x).tanh()
    ### END SOLUTION


def hardswish(x: Tensor) -> Tensor:
    """x · relu6(x + 3) / 6, a cheap piecewise silu."""
    check_tensor("hardswish", "x", x)
    ### BEGIN SOLUTION
    return x * (x + 3).clip(0.0, 6.0) / 6
    ### END SOLUTION


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, else weight · x, with one weight for all or one per channel (axis 1)."""
    check_tensor("prelu", "x", x)
    check_tensor("prelu", "weight", weight)
    ### BEGIN SOLUTION
    n = weight.numel()
    if n != 1:
        channels = x.shape[1] if x.ndim >= 2 else (x.shape[0] if x.ndim == 1 else None)
        if channels != n:
            raise ShapeError(
                f"prelu: a weight of shape {weight.shape} needs 1 or {n} channels on axis 1 of the "
                f"input; got input of shape {x.shape}"
            )
        weight = weight.reshape((n,) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else weight
    return where(x > 0, x, weight * x)
    ### END SOLUTION


# %%
_x = Tensor(np.linspace(-3, 3, 7, dtype=np.float32))
for _f in (relu, leaky_relu, elu, selu, gelu, silu, softplus, mish, hardswish):
    print(f"{_f.__name__:>10}", np.round(_f(_x).numpy(), 3))

# %% nbgrader={"grade": true, "grade_id": "layers_activations", "locked": true, "points": 1, "schema_version": 3, "solution": false}
X = np.array([-3.0, -1.0, -0.25, 0.5, 2.0], np.float32)
x64 = Tensor(np.array([-2.5, -0.7, 0.3, 1.9]), requires_grad=True)
x = Tensor(X, requires_grad=True)
assert np.allclose(relu(x).numpy(), np.maximum(X, 0))
assert np.allclose(leaky_relu(x, 0.1).numpy(), np.where(X > 0, X, 0.1 * X))
assert np.allclose(silu(x).numpy(), X / (1 + np.exp(-X)), atol=1e-6)
for _f in (relu, leaky_relu, selu, silu, mish, hardswish, sigmoid, tanh):
    assert _f(x).dtype == np.float32, f"{_f.__name__} must keep float32"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(6, 10))
_signs = np.resize([1.0, -1.0], _n)  # half of the values negative
_X = (check_rng.permutation(_signs) * check_rng.uniform(0.1, 5.0, _n)).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
assert np.allclose(leaky_relu(_x).numpy(), np.where(_X > 0, _X, 0.01 * _X)), "leaky_relu's default slope is 0.01"
assert np.allclose(sigmoid(_x).numpy(), 1 / (1 + np.exp(-_X)), atol=1e-6), "sigmoid(x) must be 1 / (1 + e⁻ˣ)"
assert np.allclose(tanh(_x).numpy(), np.tanh(_X), atol=1e-6), "tanh(x) must be the hyperbolic tangent"
assert np.allclose(selu(_x).numpy(), 1.0507009873554805 * np.where(_X > 0, _X, 1.6732632423543772 * np.expm1(_X)), atol=1e-5), (
    "selu(x) must be scale · elu(x, alpha) with alpha ≈ 1.6733 and scale ≈ 1.0507"
)
_sp = np.log1p(np.exp(_X))
assert np.allclose(mish(_x).numpy(), _X * np.tanh(_sp), atol=1e-6), "mish(x) must be x · tanh(softplus(x))"
assert np.allclose(hardswish(_x).numpy(), _X * np.clip(_X + 3, 0, 6) / 6, atol=1e-6), (
    "hardswish(x) must be x · clip(x + 3, 0, 6) / 6"
)
# no value within 0.1 of a kink (0 and ±3), where central differences cannot agree
_x64 = Tensor(check_rng.permutation(_signs) * check_rng.uniform(0.1, 2.9, _n), requires_grad=True)
for _f in (leaky_relu, selu, silu, mish, hardswish):
    assert gradcheck(_f, _x64), f"the gradient of {_f.__name__} must match central differences"
_C, _L = int(check_rng.integers(2, 6)), int(check_rng.integers(2, 5))
_w = check_rng.uniform(0.05, 0.5, _C).astype(np.float32)
_X3 = -check_rng.uniform(0.1, 2.0, (2, _C, _L)).astype(np.float32)  # all negative: every entry is scaled
assert np.allclose(prelu(Tensor(_X3), Tensor(_w)).numpy(), _w[None, :, None] * _X3), "prelu: one weight per channel, along axis 1"
_a = float(check_rng.uniform(0.05, 0.5))
assert np.allclose(prelu(_x, Tensor([_a])).numpy(), np.where(_X > 0, _X, np.float32(_a) * _X)), (
    "prelu: a weight with one entry applies everywhere"
)
try:
    prelu(Tensor(_X3), Tensor(np.full(_C + 1, 0.1, np.float32)))
    raise AssertionError("prelu with C + 1 weights for an input of C channels must raise ShapeError")
except ShapeError as err:
    assert _close_text(str(err), [str((_C + 1,)), str(_X3.shape)]), "the ShapeError should name both shapes"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_softmax` (2 points): `softmax` and `log_softmax`
#
# softmax(x)ᵢ = eˣⁱ / Σⱼ eˣʲ along one axis turns scores (logits) into
# probabilities. Written that way it overflows for a logit of 1000 (e¹⁰⁰⁰ is
# inf, inf/inf is NaN). Subtracting the maximum first changes nothing
# mathematically — the factor e^{−max} cancels — and makes every exponent
# ≤ 0, so no exponential overflows and the largest is exactly 1.
#
# log_softmax(x) = x − max − log Σ e^{x − max} is the same trick; computing
# it as `softmax(x).log()` instead is a classic bug: a probability that
# underflows to 0 gives log(0) = −inf, and a NaN gradient.
#
# Both are `Function`s: one node instead of five, and a backward that needs
# only the output:
#
# * softmax: with s the output, ∂L/∂x = s · (g − Σ g·s), sums along the axis;
# * log_softmax: with o the output, ∂L/∂x = g − eᵒ · Σ g.
#
# `axis` may be negative; an axis the input does not have is a `ShapeError`.
#
# **Checked when graded** (besides the tests below), with logits, shapes
# and axes drawn for you:
#
# * softmax(x, axis=0) normalises each column
# * the gradient of log_softmax along axis 0 must match central differences
# * the gradient of softmax along axis -2 must match central differences
# * the gradient of log_softmax at logits of ±10³ to ±10⁴ must stay finite
# * log_softmax of a row holding B, −B and 0 (B up to 10⁴) must be x − B: 0, −2B and −B
# * log_softmax must be one LogSoftmaxFn node
# * softmax must be one SoftmaxFn node
# * an integer input is computed in float32 (x._floating())
# * softmax along an axis the input does not have (2, 3 or −3 of a 2-D input) must raise ShapeError

# %% nbgrader={"grade": false, "grade_id": "layers_softmax_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class SoftmaxFn(Function):
    def forward(self, a, axis=-1):
        ### BEGIN SOLUTION
        e = self.xp.exp(a - a.max(axis=axis, keepdims=True))
        out = e / e.sum(axis=axis, keepdims=True)
        self.axis = axis
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return out * (grad - (grad * out).sum(axis=self.axis, keepdims=True))
        ### END SOLUTION


class LogSoftmaxFn(Function):
    def forward(self, a, axis=-1):
        ### BEGIN SOLUTION
        shifted = a - a.max(axis=axis, keepdims=True)
        out = shifted - self.xp.log(self.xp.exp(shifted).sum(axis=axis, keepdims=True))
        self.axis = axis
        self.save_for_backward(out)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        (out,) = self.saved
        return grad - self.xp.exp(out) * grad.sum(axis=self.axis, keepdims=True)
        ### END SOLUTION


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed without overflow."""
    check_tensor("softmax", "x", x)
    ### BEGIN SOLUTION
    return SoftmaxFn.apply(x._floating(), axis=normalize_axis(axis, max(x.ndim, 1), "softmax"))
    ### END SOLUTION


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) along ``axis``, computed without overflow or log(0)."""
    check_tensor("log_softmax", "x", x)
    ### BEGIN SOLUTION
    return LogSoftmaxFn.apply(x._floating(), axis=normalize_axis(axis, max(x.ndim, 1), "log_softmax"))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_softmax", "locked": true, "points": 2, "schema_version": 3, "solution": false}
L = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]], np.float32)
logits = Tensor(L, requires_grad=True)
expected = np.exp(L) / np.exp(L).sum(axis=1, keepdims=True)
assert np.allclose(softmax(logits).numpy(), expected, atol=1e-6) and softmax(logits).dtype == np.float32
assert np.allclose(log_softmax(logits).numpy(), np.log(expected), atol=1e-6)
extreme = Tensor([[1e4, -1e4, 0.0]], requires_grad=True)
assert np.all(np.isfinite(log_softmax(extreme).numpy())) and np.allclose(softmax(extreme).numpy(), [[1, 0, 0]])
l64 = Tensor(L.astype(np.float64), requires_grad=True)
assert gradcheck(softmax, l64) and gradcheck(log_softmax, l64)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_L = (2 * check_rng.standard_normal((int(check_rng.integers(2, 5)), int(check_rng.integers(2, 5))))).astype(np.float32)
_logits = Tensor(_L, requires_grad=True)
_l64 = Tensor(_L.astype(np.float64), requires_grad=True)
assert np.allclose(softmax(_logits, axis=0).numpy(), np.exp(_L) / np.exp(_L).sum(axis=0, keepdims=True), atol=1e-6), (
    "softmax(x, axis=0) normalises each column"
)
assert gradcheck(lambda a: log_softmax(a, axis=0), _l64), "the gradient of log_softmax along axis 0 must match central differences"
assert gradcheck(lambda a: softmax(a, axis=-2), _l64), "the gradient of softmax along axis -2 must match central differences"
_B = round(float(check_rng.uniform(1e3, 1e4)))
_row = check_rng.permutation(np.array([_B, -_B, 0.0], np.float32))[None]
_extreme = Tensor(_row, requires_grad=True)
_out = log_softmax(_extreme)
_out.sum().backward()
assert np.all(np.isfinite(_extreme.grad.numpy())), "the gradient of log_softmax at logits of ±10³ to ±10⁴ must stay finite"
assert np.allclose(_out.numpy(), _row - _B), "log_softmax of a row holding B, −B and 0 (B up to 10⁴) must be x − B: 0, −2B and −B"
assert isinstance(_out._ctx, LogSoftmaxFn), "log_softmax must be one LogSoftmaxFn node"
assert isinstance(softmax(_logits)._ctx, SoftmaxFn), "softmax must be one SoftmaxFn node"
assert softmax(Tensor(check_rng.integers(-5, 6, (2, 3)))).dtype == np.float32, "an integer input is computed in float32 (x._floating())"
_axis = (2, 3, -3)[int(check_rng.integers(0, 3))]
try:
    softmax(_logits, axis=_axis)
    raise AssertionError("softmax along an axis the input does not have (2, 3 or −3 of a 2-D input) must raise ShapeError")
except ShapeError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## Attention as one graph node (given)
#
# Scaled dot-product attention (Vaswani et al., 2017) is
# softmax(q kᵀ · scale + mask) v, with scale = 1/√E for queries and keys of
# E channels. Written out of `@`, `where` and the `softmax` you just
# graded it is about six graph nodes, and it keeps every one of their
# (…, L, S) score arrays alive until backward. Frameworks fuse it instead
# (PyTorch's `F.scaled_dot_product_attention`): one `Function` that keeps
# only the weights P = softmax(…) and the output O = P v. With G the
# gradient of O, the derivative on paper is
#
# * ∂L/∂v = Pᵀ G,
# * ∂L/∂P = G vᵀ, and through the softmax (the rule above)
#   ∂L/∂S = P ⊙ (G vᵀ − δ), where δ = rowsum(P ⊙ G vᵀ) = rowsum(G ⊙ O):
#   an (L, E) product instead of an (L, S) one (FlashAttention's trick);
# * ∂L/∂q = scale · (∂L/∂S) k and ∂L/∂k = scale · (∂L/∂S)ᵀ q.
#
# `is_causal=True` lets query i see keys j ≤ i (the top-left triangle, as
# in PyTorch); `attn_mask` is a boolean mask (True takes part) or a float
# bias added to the scores. With `dropout_p > 0` the weights are dropped
# (and the rest scaled by 1/(1 − p)) after the softmax; δ is unchanged,
# since O is computed from the dropped weights. On the CPU the heads go
# to every core in blocks (module 01's `parallel`): a head's products are
# (64, 32) by (32, 64), too small for BLAS to share out by itself. The
# tests check it against the written-out form, against PyTorch, and
# against central differences.

# %%
#| export
class ScaledDotProductAttentionFn(Function):
    """softmax(q kᵀ · scale + bias) v over the last two axes, as one node.

    It works on the transposed scores Sᵀ (..., S, L), one column per query: NumPy reduces across
    rows (max, sum over axis −2) several times faster than along short rows, and every product
    below is a matmul of Sᵀ or of its transposed view, which BLAS takes as it is. On the CPU the
    heads go in blocks on every thread (`parallel`, module 01): each head's products are too small
    for BLAS to share among cores by itself. The blocks are slices of the first axis (the batch), so
    queries, keys and values that are views of one projection (a model's ``q, k, v = qkv.unbind``)
    go to BLAS as they are, uncopied; and the output is laid out as (..., L, heads, Ev), handed on
    as its (..., heads, L, Ev) view, so the ``y.transpose(1, 2).reshape(B·T, C)`` that puts the heads
    side by side again is a view too (PyTorch's fused attention lays its output out the same way).
    """

    def forward(self, q, k, v, bias=None, keep=None, scale=1.0):
        xp = self.xp
        self.scale = scale
        lead = q.shape[:-2]
        # one block of heads per call: each head on its own, when the heads are all alike (no broadcasting)
        self.by_heads = xp is np and len(lead) > 0 and k.shape[:-2] == v.shape[:-2] == lead and (
            bias is None or bias.ndim == 2)
        if not self.by_heads:
            weights, out = self._attend(q, k, v, bias, keep)
            self.save_for_backward(q, k, v, weights, keep, out)
            return out
        L, S, Ev = q.shape[-2], k.shape[-2], v.shape[-1]
        dtype = np.result_type(q, k, v)
        weights = np.empty(lead + (S, L), dtype=dtype)
        out = np.empty(lead[:-1] + (L, lead[-1], Ev), dtype=dtype).swapaxes(-2, -3)

        def heads(start, stop):
            self._attend(q[start:stop], k[start:stop], v[start:stop], bias,
                         None if keep is None else keep[start:stop], weights[start:stop], out[start:stop])

        self.block = max(1, per_block(S * L) // math.prod(lead[1:]))  # entries of the first axis per block
        parallel(heads, lead[0], self.block)
        self.save_for_backward(q, k, v, weights, keep, out)
        return out

    def _attend(self, q, k, v, bias, keep, weights=None, out=None):
        """The weights Pᵀ and the output O = P v of some heads (written into ``weights`` and ``out`` if given)."""
        xp = self.xp
        scores = xp.matmul(k, q.swapaxes(-1, -2), out=weights)  # Sᵀ
        scores *= scores.dtype.type(self.scale)
        if bias is not None:
            scores = xp.add(scores, bias.swapaxes(-1, -2), out=scores if weights is not None else None)
        scores -= scores.max(axis=-2, keepdims=True)
        xp.exp(scores, out=scores)  # Pᵀ
        scores *= 1 / scores.sum(axis=-2, keepdims=True)
        dropped = scores if keep is None else scores * keep
        return scores, xp.matmul(dropped.swapaxes(-1, -2), v, out=out)

    def backward(self, grad):
        q, k, v, weights, keep, out = self.saved
        wanted = self.needs_input_grad
        if not self.by_heads:
            return self._attend_backward(grad, q, k, v, weights, keep, out, wanted)
        into = tuple(np.empty(a.shape, dtype=out.dtype) if want else None for a, want in zip((q, k, v), wanted))

        def heads(start, stop):
            part = slice(start, stop)
            self._attend_backward(grad[part], q[part], k[part], v[part], weights[part],
                                  None if keep is None else keep[part], out[part], wanted,
                                  tuple(None if g is None else g[part] for g in into))

        parallel(heads, weights.shape[0], self.block)
        return into

    def _attend_backward(self, grad, q, k, v, weights, keep, out, wanted, into=(None, None, None)):
        """The gradients of some heads' q, k and v (those ``wanted``), written into ``into`` if given."""
        xp = self.xp
        dropped = weights if keep is None else weights * keep
        grad_v = xp.matmul(dropped, grad, out=into[2]) if wanted[2] else None
        if not (wanted[0] or wanted[1]):
            return None, None, grad_v
        d_scores = v @ grad.swapaxes(-1, -2)  # (∂L/∂P)ᵀ
        if keep is not None:
            d_scores *= keep
        d_scores -= xp.einsum("...i,...i->...", grad, out)[..., None, :]  # δ = rowsum(G ⊙ O)
        d_scores *= weights
        d_scores *= d_scores.dtype.type(self.scale)  # (∂L/∂S)ᵀ
        grad_q = xp.matmul(d_scores.swapaxes(-1, -2), k, out=into[0]) if wanted[0] else None
        grad_k = xp.matmul(d_scores, q, out=into[1]) if wanted[1] else None
        return grad_q, grad_k, grad_v


def _attention_bias(attn_mask: Any, is_causal: bool, L: int, S: int, like: Tensor) -> Any:
    """The additive bias of the scores (0 where a key takes part, −inf where not), or None."""
    xp, dtype = like.device.xp, like.dtype
    bias = None
    if is_causal:
        bias = xp.where(xp.tri(L, S, dtype=bool), dtype.type(0), dtype.type(-math.inf))
    if attn_mask is not None:
        mask = attn_mask.data if isinstance(attn_mask, Tensor) else xp.asarray(attn_mask)
        if mask.dtype == bool:
            mask = xp.where(mask, dtype.type(0), dtype.type(-math.inf))
        mask = mask.astype(dtype, copy=False)
        bias = mask if bias is None else bias + mask
    return bias


def _check_attention_mask(attn_mask: Any, L: int, S: int) -> None:
    """A mask is a Tensor or an array whose last two axes fit the (L, S) scores (or are 1)."""
    owner = "scaled_dot_product_attention"
    if not isinstance(attn_mask, Tensor) and not is_array(attn_mask):
        raise TypeError(f"{owner}: attn_mask must be a Tensor (bool: True where a key takes part; float: added "
                        f"to the scores) or None; got {described(attn_mask)}")
    shape = tuple(attn_mask.shape)
    if len(shape) < 2 or any(m not in (1, n) for m, n in zip(shape[-2:], (L, S))):
        raise ShapeError(f"{owner}: attn_mask of shape {shape} does not fit scores of shape (..., {L}, {S})")
    if attn_mask.dtype.kind not in "biuf":
        raise TypeError(f"{owner}: attn_mask must be bool or floating; got dtype {attn_mask.dtype}")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """softmax(query keyᵀ · scale + mask) value for inputs (..., L, E), (..., S, E), (..., S, Ev)."""
    check_tensor("scaled_dot_product_attention", "query", query)
    check_tensor("scaled_dot_product_attention", "key", key)
    check_tensor("scaled_dot_product_attention", "value", value)
    check_arg("scaled_dot_product_attention", "dropout_p", dropout_p, "a number in [0, 1]")
    check_arg("scaled_dot_product_attention", "is_causal", is_causal, "True or False")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal=True, not both (as PyTorch)")
    if query.ndim < 2 or query.ndim != key.ndim or key.ndim != value.ndim:
        raise ShapeError(f"scaled_dot_product_attention: query, key and value need the same number of axes "
                         f"(at least 2); got shapes {query.shape}, {key.shape}, {value.shape}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: got query {query.shape}, key {key.shape}, value "
                         f"{value.shape}; expected (..., L, E), (..., S, E), (..., S, Ev)")
    query, key, value = query._floating(), key._floating(), value._floating()
    L, S = query.shape[-2], key.shape[-2]
    if scale is not None:
        check_arg("scaled_dot_product_attention", "scale", scale, "a number")
    if attn_mask is not None:
        _check_attention_mask(attn_mask, L, S)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    keep = None
    if dropout_p > 0:
        shape = query.shape[:-2] + (S, L)  # laid out as the transposed scores
        keep = (rand(shape, device=query.device).data >= dropout_p).astype(query.dtype)
        keep *= query.dtype.type(1 / (1 - dropout_p) if dropout_p < 1 else 0)
    return ScaledDotProductAttentionFn.apply(query, key, value, bias=_attention_bias(attn_mask, is_causal, L, S, query),
                                             keep=keep, scale=scale)


# %%
_Q = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
_S = np.where(np.tril(np.ones((3, 3), bool)), _Q @ _Q.swapaxes(-1, -2) / 2, -np.inf)  # scale 1/√4
_P = np.exp(_S - _S.max(-1, keepdims=True))
_P /= _P.sum(-1, keepdims=True)
_out = scaled_dot_product_attention(Tensor(_Q), Tensor(_Q), Tensor(_Q), is_causal=True)
assert np.allclose(_out.numpy(), _P @ _Q, atol=1e-6) and _out.dtype == np.float32

# %% [markdown]
# ## Parameters and Modules
#
# A `Parameter` is a `Tensor` that is a learnable weight. It differs from a
# tensor in two small ways: it requires a gradient unless told otherwise,
# and assigning one to an attribute of a `Module` *registers* it. Made from
# an existing tensor it shares that tensor's array, as in PyTorch.
# `freeze()` / `unfreeze()` switch its gradient off and on.

# %%
#| export
class Parameter(Tensor):
    """A Tensor that is a learnable weight: requires grad by default; a Module registers it."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        if isinstance(data, Tensor):  # share the array, as torch.nn.Parameter does
            self.grad, self._ctx, self.requires_grad = None, None, False
            self.set_(data)
        else:
            super().__init__(data)
        self.requires_grad_(requires_grad)

    def freeze(self) -> Parameter:
        """Stop computing a gradient for this parameter."""
        return self.requires_grad_(False)

    def unfreeze(self) -> Parameter:
        """Compute a gradient for this parameter again."""
        return self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


# %% [markdown]
# ### Task `layers_module` (2 points): the `Module` registers what you assign
#
# Every layer and every model is a `Module`. Writing one reads like plain
# Python:
#
# ```python
# class MLP(Module):
#     def __init__(self):
#         super().__init__()
#         self.hidden = Linear(784, 128)
#         self.out = Linear(128, 10)
#
#     def forward(self, x):
#         return self.out(relu(self.hidden(x)))
# ```
#
# and yet the model knows its parameters: `named_parameters()` will yield
# `("hidden.weight", ...)`, `("hidden.bias", ...)`, `("out.weight", ...)`,
# `("out.bias", ...)` in that order. The trick is `__setattr__`: every
# assignment `self.name = value` passes through it, and it files the value
# in one of three ordered dicts instead of the instance's `__dict__`:
#
# * a `Parameter` → `self._parameters[name]` (the given `register_parameter`
#   does exactly that);
# * a `Module` → `self._modules[name]`, a *sub-module* (`add_module`);
# * a tensor registered with `register_buffer(name, tensor)` → `self._buffers`.
#   Buffers are state that is saved and moved with the model but not trained,
#   such as BatchNorm's running mean. Assigning a new tensor (or None) to a
#   buffer's name replaces the buffer.
#
# Anything else is an ordinary attribute (`object.__setattr__`). A name lives
# in one place only: assigning a Module to a name that held a Parameter
# moves it (the given `_forget` removes a name from everywhere else).
# Assigning anything but a Parameter or None to a parameter's name is a
# `TypeError` naming the attribute (it would silently stop training that
# weight); the same goes for a sub-module's name and anything but a Module
# or None, and for a buffer's name and anything but a Tensor or None.
# Assigning a Parameter or Module before the dicts exist is an
# `AttributeError` whose message tells the author to call
# `super().__init__()` first.
#
# Reading `self.hidden` back finds nothing in `__dict__`, so Python falls
# back to `__getattr__`, which looks in the three dicts (given below).
#
# The walks over the tree, the training mode and the moves between devices
# are the next three tasks: the methods below call the functions you write
# there (Python looks a name up when the method runs, so the order does not
# matter). Everything else (`parameters()`, `zero_grad()`, `freeze()`,
# `num_parameters()`, the `repr`) is given and built on them.
#
# **Checked when graded** (besides the tests below), on modules of sizes,
# values and counts drawn for you:
#
# * assigning None to a parameter's name keeps the name, holding None
# * a Module assigned to a parameter's name moves it: a name lives in one place
# * a Parameter assigned to a sub-module's name moves it back: a name lives in one place
# * a Parameter assigned to a plain attribute's name leaves __dict__ and is registered
# * a tensor assigned to a buffer's name replaces the buffer
# * None assigned to a buffer's name keeps the name, holding None
# * assigning an int to a buffer's name must raise TypeError
# * the TypeError should name the buffer
# * assigning an int to a sub-module's name must raise TypeError
# * the TypeError should name the sub-module
# * None assigned to a sub-module's name keeps the name, holding None
# * assigning a Parameter before super().__init__() must raise AttributeError
# * the AttributeError should tell the author to call super().__init__()
# * a plain attribute may be set before super().__init__()

# %% nbgrader={"grade": false, "grade_id": "layers_module_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _is_data(value: Any) -> bool:
    """Whether ``value`` is data that should have been a Tensor: an array, a number, a (nested) list of
    numbers, a str or None. (A model's own kinds of input, a dict or a tuple of tensors, are not.)"""
    first = value
    while isinstance(first, list | tuple) and first:
        first = first[0]
    return first is None or isinstance(first, str | numbers.Number | list | tuple) or is_array(first)


def _check_name(owner: str, name: Any) -> None:
    """A registered name is a str: it becomes part of every qualified name (``encoder.0.weight``)."""
    if not isinstance(name, str):
        raise TypeError(f"{owner}: name must be a str; got {described(name)}")


class Module:
    """Base class of layers and models: parameters, buffers and sub-modules, registered by name."""

    training: bool
    # True where forward() takes data that is not a Tensor: Embedding's indices (an array or a list), and
    # what a Sequential or an Identity passes on. Otherwise a call on an array, a number, a list of numbers,
    # a str or None (the commonest first slip) is one line that names the module and says how to make a Tensor.
    takes_arrays = False

    def __init__(self) -> None:
        # object.__setattr__ because our own __setattr__ files values into these dicts
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation of this module; every subclass defines it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args and not isinstance(args[0], Tensor) and not self.takes_arrays and _is_data(args[0]):
            check_tensor(type(self).__name__, "input", args[0])
        return self.forward(*args, **kwargs)

    def _forget(self, name: str, keep: dict | None = None) -> None:
        """Remove ``name`` from wherever it was registered, except ``keep`` (so it keeps its place there)."""
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent.discard(name)

    def __setattr__(self, name: str, value: Any) -> None:
        ### BEGIN SOLUTION
        if isinstance(value, Parameter | Module) and "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: cannot assign {name!r} before Module.__init__() ran; "
                "call super().__init__() first"
            )
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self.add_module(name, value)
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}.{name} is a parameter: assign a Parameter or None; "
                    f"got {type(value).__name__}"
                )
            self._parameters[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"{type(self).__name__}.{name} is a buffer: assign a Tensor or None; got {type(value).__name__}"
                )
            self._buffers[name] = value
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}.{name} is a sub-module: assign a Module or None; got {type(value).__name__}"
                )
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)
        ### END SOLUTION

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the registered names live in the dicts.
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters or name in self._buffers or name in self._modules:
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Keep ``tensor`` as state that is saved (if persistent) and moved, but not trained."""
        _check_name("register_buffer", name)
        check_arg("register_buffer", "persistent", persistent, "True or False")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None; got {type(tensor).__name__}")
        self._forget(name, keep=self._buffers)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` under ``name`` (None keeps the name, holding no parameter)."""
        _check_name("register_parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None; got {type(param).__name__}")
        self._forget(name, keep=self._parameters)
        self._parameters[name] = param

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` as a sub-module called ``name``."""
        _check_name("add_module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None; got {type(module).__name__}")
        self._forget(name, keep=self._modules)
        self._modules[name] = module

    # ----- walking the tree: written in task layers_module_walk, below -------
    def named_modules(self, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every sub-module below it, with dotted names, depth first."""
        return _named_modules(self, prefix, remove_duplicate)

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Every parameter with its qualified name (``encoder.0.weight``), each once."""
        return _named_members(self, "_parameters", prefix, recurse)

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """Every buffer with its qualified name, each once."""
        return _named_members(self, "_buffers", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, each once (what an optimizer takes)."""
        return (p for _, p in self.named_parameters(recurse=recurse))

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer, each once."""
        return (b for _, b in self.named_buffers(recurse=recurse))

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct sub-modules with their names."""
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self) -> Iterator[Module]:
        """The direct sub-modules."""
        return (m for _, m in self.named_children())

    def modules(self) -> Iterator[Module]:
        """This module and every module below it."""
        return (m for _, m in self.named_modules())

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every sub-module and then on this one (e.g. to initialise weights)."""
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}.apply: fn must be a function of a module; got {described(fn)}")
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ----- modes and gradients: train() is written in task layers_module_train ---
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active, batch statistics) for this module and all below it."""
        if not isinstance(mode, bool | int | np.bool_ | np.integer):  # train(1) is train(True)
            raise ValueError(f"{type(self).__name__}.train got mode={brief(mode)}; expected True or False")
        return _train(self, mode)

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``.grad = None``)."""
        for p in self.parameters():
            p.grad = None

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Switch gradients on or off for every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def freeze(self) -> Module:
        """No gradients for any parameter of this module (fine-tuning keeps it fixed)."""
        return self.requires_grad_(False)

    def unfreeze(self) -> Module:
        """Gradients again for every parameter of this module."""
        return self.requires_grad_(True)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many numbers the parameters hold (only those that require grad, if asked)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    # ----- devices and dtypes: to() is written in task layers_module_to --------
    def to(self, device: Any = None, dtype: Any = None) -> Module:
        """Move every parameter and buffer in place (floating ones also cast to ``dtype``)."""
        return _to(self, device, dtype)

    def cpu(self) -> Module:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Module:
        return self.to(f"cuda:{index}")

    def float(self) -> Module:
        return self.to(dtype=float32)

    def double(self) -> Module:
        return self.to(dtype=float64)

    def half(self) -> Module:
        return self.to(dtype=float16)

    # ----- saving and loading: written in tasks layers_state_dict and layers_load_state_dict ---
    def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
        """Every parameter and persistent buffer by qualified name (detached views, no copies)."""
        return _state_dict(self, prefix)

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state`` into this module's tensors in place; mismatches are one error naming them."""
        if not (hasattr(state, "keys") and hasattr(state, "__getitem__")):
            raise TypeError(f"{type(self).__name__}.load_state_dict: state must be a mapping of names to tensors "
                            f"(what state_dict() gives); got {type(state).__name__}")
        check_arg(f"{type(self).__name__}.load_state_dict", "strict", strict, "True or False")
        return _load_state_dict(self, state, strict)

    # ----- printing -----------------------------------------------------------
    def extra_repr(self) -> str:
        """The settings shown between the parentheses of this module's repr."""
        return ""

    def __repr__(self) -> str:
        lines = [self.extra_repr()] if self.extra_repr() else []
        lines += [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self.named_children()]
        if not self._modules:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


# %% [markdown]
# Here is a tiny model written without any layer classes yet, and where its
# assignments went:

# %%
class _Affine(Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = Parameter(np.ones((n_out, n_in), np.float32))
        self.bias = Parameter(np.zeros(n_out, np.float32))
        self.register_buffer("calls", Tensor(0))

    def forward(self, x):
        return x @ self.weight.T + self.bias


class _TwoLayers(Module):
    def __init__(self):
        super().__init__()
        self.first = _Affine(3, 4)
        self.second = _Affine(4, 2)
        self.scale = 2.0  # a plain attribute

    def forward(self, x):
        return self.second(relu(self.first(x))) * self.scale


_net = _TwoLayers()
print(_net)
print("modules:", list(_net._modules), "first's parameters:", list(_net.first._parameters),
      "buffers:", list(_net.first._buffers), "plain:", [k for k in vars(_net) if not k.startswith("_")])

# %% nbgrader={"grade": true, "grade_id": "layers_module", "locked": true, "points": 2, "schema_version": 3, "solution": false}
net = _TwoLayers()
assert list(net._modules) == ["first", "second"] and list(net.first._parameters) == ["weight", "bias"]
assert list(net.first._buffers) == ["calls"]
assert "weight" not in net.first.__dict__ and isinstance(net.first.weight, Parameter)
assert net.scale == 2.0 and "scale" in net.__dict__, "a plain attribute stays an ordinary attribute"
try:
    net.first.weight = Tensor(np.ones((4, 3), np.float32))
    raise AssertionError("a plain tensor must not replace a parameter")
except TypeError as err:
    assert "weight" in str(err), f"the TypeError should name the attribute; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n_in, _n_out = int(check_rng.integers(2, 7)), int(check_rng.integers(2, 7))
_layer = _Affine(_n_in, _n_out)
_layer.weight = None
assert list(_layer._parameters) == ["weight", "bias"] and _layer.weight is None, (
    "assigning None to a parameter's name keeps the name, holding None"
)
_layer.bias = _Affine(_n_in, 1)
assert [list(_layer._parameters), list(_layer._modules)] == [["weight"], ["bias"]], (
    "a Module assigned to a parameter's name moves it: a name lives in one place"
)
_bias = check_rng.standard_normal(_n_out).astype(np.float32)
_layer.bias = Parameter(_bias)
assert [list(_layer._parameters), list(_layer._modules)] == [["weight", "bias"], []] and np.array_equal(_layer.bias.numpy(), _bias), (
    "a Parameter assigned to a sub-module's name moves it back: a name lives in one place"
)
_net = _TwoLayers()
_scale = check_rng.uniform(0.5, 3.0, 1)
_net.scale = Parameter(_scale)
assert [list(_net._parameters), "scale" in list(_net.__dict__)] == [["scale"], False] and np.array_equal(_net.scale.numpy(), _scale), (
    "a Parameter assigned to a plain attribute's name leaves __dict__ and is registered"
)
_count = int(check_rng.integers(1, 1000))
_counter = Tensor(_count)
_layer.calls = _counter
assert [list(_layer._buffers), _layer._buffers["calls"].item(), "calls" in list(_layer.__dict__)] == [["calls"], _count, False] and (
    _layer._buffers["calls"] is _counter
), "a tensor assigned to a buffer's name replaces the buffer"
_layer.calls = None
assert list(_layer._buffers) == ["calls"] and _layer.calls is None, "None assigned to a buffer's name keeps the name, holding None"
try:
    _layer.calls = int(check_rng.integers(1, 1000))
    raise AssertionError("assigning an int to a buffer's name must raise TypeError")
except TypeError as err:
    assert "calls" in str(err), "the TypeError should name the buffer"
try:
    _net.second = int(check_rng.integers(1, 1000))
    raise AssertionError("assigning an int to a sub-module's name must raise TypeError")
except TypeError as err:
    assert "second" in str(err), "the TypeError should name the sub-module"
_net.second = None
assert list(_net._modules) == ["first", "second"] and _net.second is None, (
    "None assigned to a sub-module's name keeps the name, holding None"
)


class _Early(Module):
    def __init__(self, value):
        self.w = Parameter([value])


try:
    _Early(float(check_rng.standard_normal()))
    raise AssertionError("assigning a Parameter before super().__init__() must raise AttributeError")
except AttributeError as err:
    assert "super().__init__()" in str(err), "the AttributeError should tell the author to call super().__init__()"


class _PlainFirst(Module):
    def __init__(self, size):
        self.size = size  # a plain attribute before the dicts exist: allowed
        super().__init__()


_size = int(check_rng.integers(1, 100))
assert _PlainFirst(_size).size == _size, "a plain attribute may be set before super().__init__()"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_module_walk` (1 point): walk the tree of modules
#
# The walks over the tree, each a generator:
#
# * `_named_modules(module, prefix, remove_duplicate)` (behind
#   `named_modules()`) yields `(prefix, module)` and then every sub-module
#   below it, depth first in registration order, with dotted names
#   (`"encoder.0"`); with `remove_duplicate` a module that appears twice
#   (shared) is yielded once; `None` entries are skipped;
# * `_named_members(module, registry, prefix, recurse)` (behind
#   `named_parameters()` and `named_buffers()`; `registry` is
#   `"_parameters"` or `"_buffers"`) yields each entry of that dict of every
#   module with its qualified name (`"encoder.0.weight"`), a shared one only
#   once (tied weights must not be updated twice), `None` entries skipped;
#   with `recurse=False` only this module's own.
#
# Write them without recursion if you like (an explicit stack, as in module
# 02) — a model is rarely deep enough to need it, but the order must be the
# depth-first one: a module's own entries, then its first child's subtree,
# then its second child's.
#
# **Checked when graded** (besides the tests below), on trees of a depth,
# prefix and shared or missing entries drawn for you:
#
# * unfreeze() makes every parameter trainable again
# * recurse=False lists only the module's own parameters, none of its sub-modules'
# * a prefix goes in front of every qualified name
# * depth first in registration order with dotted names
# * a nested module's parameters are named through every level (inner.first.weight)
# * a shared parameter is listed once
# * a shared module is listed once
# * named_modules(remove_duplicate=False) lists a shared module under each of its names
# * None entries (parameters and sub-modules) are skipped
# * a sub-module set to None is skipped

# %% nbgrader={"grade": false, "grade_id": "layers_module_walk_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _named_modules(module: Module, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
    """Module.named_modules: ``module`` and every sub-module below it, with dotted names, depth first."""
    ### BEGIN SOLUTION
    seen: set[int] = set()
    stack = [(prefix, module)]
    while stack:
        name, current = stack.pop()
        if remove_duplicate:
            if id(current) in seen:
                continue
            seen.add(id(current))
        yield name, current
        children = [(f"{name}.{n}" if name else n, m) for n, m in current._modules.items() if m is not None]
        stack.extend(reversed(children))
    ### END SOLUTION


def _named_members(module: Module, registry: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
    """Module.named_parameters / named_buffers: each entry of ``registry`` with its qualified name, once."""
    ### BEGIN SOLUTION
    seen: set[int] = set()
    modules = _named_modules(module, prefix) if recurse else [(prefix, module)]
    for module_name, owner in modules:
        for name, t in getattr(owner, registry).items():
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            yield (f"{module_name}.{name}" if module_name else name), t
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_module_walk", "locked": true, "points": 1, "schema_version": 3, "solution": false}
net = _TwoLayers()
assert [n for n, _ in net.named_parameters()] == ["first.weight", "first.bias", "second.weight", "second.bias"]
assert [n for n, _ in net.named_buffers()] == ["first.calls", "second.calls"]
assert [n for n, _ in net.named_modules()] == ["", "first", "second"]
assert net.num_parameters() == 4 * 3 + 4 + 2 * 4 + 2
net.first.freeze()
assert net.num_parameters(trainable_only=True) == 2 * 4 + 2
out = net(Tensor(np.ones((5, 3), np.float32)))
out.sum().backward()
assert net.first.weight.grad is None and net.second.weight.grad is not None
net.zero_grad()
assert net.second.weight.grad is None
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_net = _TwoLayers()
(_net.first, _net.second)[int(check_rng.integers(0, 2))].freeze()
_net.unfreeze()
assert _net.num_parameters(trainable_only=True) == _net.num_parameters(), "unfreeze() makes every parameter trainable again"
_net.scale = Parameter(check_rng.uniform(0.5, 2.0, 1))
assert [n for n, _ in _net.named_parameters(recurse=False)] == ["scale"], (
    "recurse=False lists only the module's own parameters, none of its sub-modules'"
)
# A chain of 1 to 3 _TwoLayers, each the `inner` of the one before, and a last layer.
_depth = int(check_rng.integers(1, 4))
_deep, _modules, _params = _TwoLayers(), ["", "first", "second"], []
_at, _path = _deep, ""
for _level in range(_depth):
    _params += [_path + name for name in ("first.weight", "first.bias", "second.weight", "second.bias")]
    _at.inner = _TwoLayers()
    _at, _path = _at.inner, _path + "inner."
    _modules += [_path[:-1], _path + "first", _path + "second"]
_params += [_path + name for name in ("first.weight", "first.bias", "second.weight", "second.bias")]
_deep.last = _Affine(2, 1)
_modules, _params = _modules + ["last"], _params + ["last.weight", "last.bias"]
_prefix = ("model", "net", "encoder", "backbone")[int(check_rng.integers(0, 4))]
assert [n for n, _ in _deep.named_parameters(prefix=_prefix)] == [_prefix + "." + name for name in _params], (
    "a prefix goes in front of every qualified name"
)
assert [n for n, _ in _deep.named_modules()] == _modules, "depth first in registration order with dotted names"
assert [n for n, _ in _deep.named_parameters()] == _params, (
    "a nested module's parameters are named through every level (inner.first.weight)"
)
_shared = _TwoLayers()
_tied = ("weight", "bias")[int(check_rng.integers(0, 2))]
setattr(_shared.second, _tied, getattr(_shared.first, _tied))  # tied (shapes differ, but the walk does not care)
assert [n for n, _ in _shared.named_parameters()] == [
    n for n in ("first.weight", "first.bias", "second.weight", "second.bias") if n != "second." + _tied
], "a shared parameter is listed once"
_shared.third = _shared.first
assert [n for n, _ in _shared.named_modules()] == ["", "first", "second"], "a shared module is listed once"
assert [n for n, _ in _shared.named_modules(remove_duplicate=False)] == ["", "first", "second", "third"], (
    "named_modules(remove_duplicate=False) lists a shared module under each of its names"
)
_holes = _TwoLayers()
_gone = ("weight", "bias")[int(check_rng.integers(0, 2))]
setattr(_holes.first, _gone, None)
_holes.second = None
assert [n for n, _ in _holes.named_parameters()] == [n for n in ("first.weight", "first.bias") if n != "first." + _gone], (
    "None entries (parameters and sub-modules) are skipped"
)
assert [n for n, _ in _holes.named_modules()] == ["", "first"], "a sub-module set to None is skipped"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_module_train` (1 point): training and evaluation mode
#
# Some layers behave differently while training: dropout drops only then,
# and BatchNorm uses the batch's statistics only then. `train(mode=True)`
# (through `_train(module, mode)`) sets `training` to `bool(mode)` — always
# a `bool`: `train(1)` sets True, not 1 — on this module and on every module
# below it, at any depth, and returns the module it was called on, so that
# `model.eval()` can be chained. `eval()` is `train(False)`.
#
# **Checked when graded** (besides the tests below), on a chain of modules
# of a depth drawn for you:
#
# * eval() reaches every module below, at any depth
# * train() on a sub-module changes that subtree only
# * train(False) is eval(): every module below leaves training mode, and it returns the module
# * training is a bool: train(1) (or any other nonzero integer) sets True

# %% nbgrader={"grade": false, "grade_id": "layers_module_train_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _train(module: Module, mode: bool = True) -> Module:
    """Module.train: set ``training`` on ``module`` and every module below it; return ``module``."""
    ### BEGIN SOLUTION
    for m in module.modules():
        m.training = bool(mode)
    return module
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_module_train", "locked": true, "points": 1, "schema_version": 3, "solution": false}
net = _TwoLayers()
assert net.training and net.first.training
assert [net.eval().training, net.first.training, net.second.training] == [False, False, False] and net.eval() is net
assert [net.train().training, net.first.training, net.second.training] == [True, True, True] and net.train() is net
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
# A chain of 1 to 3 _TwoLayers, each the `inner` of the one before; _all lists every module, depth first.
_depth = int(check_rng.integers(1, 4))
_deep = _TwoLayers()
_all, _at = [_deep, _deep.first, _deep.second], _deep
for _level in range(_depth):
    _at.inner = _TwoLayers()
    _at = _at.inner
    _all += [_at, _at.first, _at.second]
_deep.eval()
assert [m.training for m in _all] == [False] * len(_all), "eval() reaches every module below, at any depth"
_k = int(check_rng.integers(1, _depth + 1))  # the k-th `inner`: its subtree is everything from _all[3k] on
_all[3 * _k].train()
assert [m.training for m in _all] == [False] * (3 * _k) + [True] * (len(_all) - 3 * _k), (
    "train() on a sub-module changes that subtree only"
)
_returned = _deep.train(False)
assert [m.training for m in _all] == [False] * len(_all) and _returned is _deep, (
    "train(False) is eval(): every module below leaves training mode, and it returns the module"
)
_deep.train(int(check_rng.integers(1, 10)))
assert [repr(m.training) for m in _all] == ["True"] * len(_all), (
    "training is a bool: train(1) (or any other nonzero integer) sets True"
)
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_module_to` (1 point): move a model in place
#
# `to(device=None, dtype=None)` (through `_to(module, device, dtype)`) moves
# every parameter and buffer — and any `.grad` — **in place**: the
# `Parameter` objects stay the same objects, only the array they hold and its
# device change (`held.set_(moved)`, module 01's in-place move), so an
# optimizer built before the move still holds the right tensors. `dtype` casts floating tensors only: an integer buffer (a counter)
# keeps its dtype, and a dtype that is not floating is a `TypeError`. Like
# PyTorch, a dtype may be passed as the first argument (`model.to(float64)`):
# the given `_is_device_spec` tells a device from anything else, and a first
# argument that is neither a device nor a dtype is a `TypeError` naming it.
# Work inside `no_grad()`. Return the module.
#
# **Checked when graded** (besides the tests below), with gradients,
# dtypes, devices (`cpu:N`) and wrong arguments drawn for you:
#
# * every parameter is cast, in every sub-module, and a gradient keeps its values
# * to('cpu:N') moves the parameter itself, not a copy
# * buffers move with the parameters
# * a parameter's .grad moves with it
# * moving to a device keeps the dtype
# * model.to(float32): a dtype as the first argument casts, the device stays
# * to(device=..., dtype=...) does both
# * a moved parameter still requires grad and is no graph node
# * to() with a first argument that is neither a device nor a floating dtype (an int, an integer dtype) must raise TypeError
# * the TypeError should name what was passed

# %% nbgrader={"grade": false, "grade_id": "layers_module_to_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _is_device_spec(spec: Any) -> bool:
    return isinstance(spec, Device) or (isinstance(spec, str) and spec.partition(":")[0] in ("cpu", "cuda"))


def _to(module: Module, device: Any = None, dtype: Any = None) -> Module:
    """Module.to: move every parameter, buffer and gradient in place (floating ones also cast to ``dtype``)."""
    ### BEGIN SOLUTION
    if device is not None and not _is_device_spec(device):
        try:
            device, dtype = None, as_dtype(device)  # model.to(float64)
        except TypeError:
            raise TypeError(
                f"Module.to: expected a device ('cpu', 'cpu:N', 'cuda:N') or a floating dtype; got {brief(device)}"
            ) from None
    dev = None if device is None else as_device(device)
    dt = None if dtype is None else as_dtype(dtype)
    if dt is not None and not is_floating(dt):
        raise TypeError(f"Module.to: dtype must be floating (integer buffers keep theirs); got {dt}")
    with no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            target = dt if dt is not None and is_floating(t.dtype) else t.dtype
            for held in (t, t.grad):
                if held is not None:
                    held.set_(held.to(device=dev or held.device, dtype=target))
    return module
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_module_to", "locked": true, "points": 1, "schema_version": 3, "solution": false}
moved = _TwoLayers()
w = moved.first.weight
moved.first.weight.grad = Tensor(np.ones((4, 3), np.float32))
assert moved.to(dtype="float64") is moved and moved.first.weight is w and w.dtype == np.float64
assert w.grad.dtype == np.float64 and moved.first.calls.dtype == np.int64, "integer buffers keep their dtype"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_model = _TwoLayers()
_w = _model.first.weight
_g = check_rng.standard_normal((4, 3))
_w.grad = Tensor(_g.astype(np.float32))
_cast = ("float64", "float16")[int(check_rng.integers(0, 2))]
_model.to(dtype=_cast)
assert [str(p.dtype) for p in _model.parameters()] + [str(_w.grad.dtype)] == [_cast] * 5 and np.allclose(
    _w.grad.numpy(), _g, atol=1e-2
), "every parameter is cast, in every sub-module, and a gradient keeps its values"
_device = f"cpu:{int(check_rng.integers(1, 4))}"
_model.to(_device)
assert str(_w.device) == _device and _model.first.weight is _w, "to('cpu:N') moves the parameter itself, not a copy"
assert [str(b.device) for b in _model.buffers()] == [_device] * 2, "buffers move with the parameters"
assert str(_w.grad.device) == _device, "a parameter's .grad moves with it"
assert str(_w.dtype) == _cast, "moving to a device keeps the dtype"
_model.to(float32)
assert [str(_w.dtype), str(_w.device)] == ["float32", _device], "model.to(float32): a dtype as the first argument casts, the device stays"
_model.to(device="cpu", dtype=float64)
assert [str(_w.dtype), str(_w.device)] == ["float64", "cpu"], "to(device=..., dtype=...) does both"
assert [_w.requires_grad, _w._ctx] == [True, None], "a moved parameter still requires grad and is no graph node"
for _bad in (int(check_rng.integers(2, 100)), ("int64", "int32", "bool", "uint8")[int(check_rng.integers(0, 4))]):
    try:
        _model.to(_bad)
        raise AssertionError(
            "to() with a first argument that is neither a device nor a floating dtype (an int, an integer dtype) must raise TypeError"
        )
    except TypeError as err:
        assert _close_text(str(err), [_bad]), "the TypeError should name what was passed"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_state_dict` (1 point): the model's state by name
#
# `state_dict()` is the model's state as a flat dict from qualified name to
# tensor: every parameter, then every persistent buffer, of each module in
# `named_modules()` order (`{"first.weight": ..., "first.bias": ...,
# "first.calls": ..., "second.weight": ...}`), each name after `prefix`. A
# module shared under two names appears under both (walk with
# `remove_duplicate=False`), as in PyTorch, so that loading finds every name
# it expects. The tensors are `detach()`ed views of the module's own arrays —
# no copy, no graph. A buffer registered with `persistent=False` is left out,
# and so are `None` entries.
#
# `Module.state_dict` above is one line: it calls `_state_dict`, which you
# write here.
#
# **Checked when graded** (besides the tests below), on models holding
# values, counts, depths, prefixes and missing entries drawn for you:
#
# * state_dict() tensors are detached: no gradient, no graph
# * a buffer keeps its dtype and value
# * a buffer with persistent=False is left out
# * None entries are left out
# * nested modules' entries are named through every level (inner.first.weight)
# * prefix goes in front of every name
# * a module shared under two names appears under both

# %% nbgrader={"grade": false, "grade_id": "layers_state_dict_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _state_dict(self: Module, prefix: str = "") -> dict[str, Tensor]:
    """Module.state_dict: every parameter and persistent buffer by qualified name (detached views, no copies)."""
    ### BEGIN SOLUTION
    state: dict[str, Tensor] = {}
    for module_name, module in self.named_modules(remove_duplicate=False):
        entries = [*module._parameters.items()]
        entries += [(n, b) for n, b in module._buffers.items() if n not in module._non_persistent]
        for name, t in entries:
            if t is not None:
                state[prefix + (f"{module_name}.{name}" if module_name else name)] = t.detach()
    return state
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_state_dict", "locked": true, "points": 1, "schema_version": 3, "solution": false}
src = _TwoLayers()
state = src.state_dict()
assert list(state) == ["first.weight", "first.bias", "first.calls", "second.weight", "second.bias", "second.calls"]
assert np.shares_memory(state["first.weight"].data, src.first.weight.data), "views of the module's arrays, no copies"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_KEYS = ["weight", "bias", "calls"]  # each _Affine's entries, in order
_src = _TwoLayers()
_W = check_rng.standard_normal((4, 3)).astype(np.float32)
_count = int(check_rng.integers(1, 1000))
with no_grad():
    _src.first.weight[...] = _W
_src.first.calls = Tensor(_count)
_state = _src.state_dict()
assert [[t.requires_grad for t in _state.values()], [t._ctx for t in _state.values()]] == [[False] * 6, [None] * 6] and (
    np.array_equal(_state["first.weight"].numpy(), _W)
), "state_dict() tensors are detached: no gradient, no graph"
assert [str(_state["first.calls"].dtype), _state["first.calls"].item()] == ["int64", _count], "a buffer keeps its dtype and value"
_hidden = _Affine(int(check_rng.integers(1, 5)), int(check_rng.integers(1, 5)))
_hidden.register_buffer("scratch", Tensor(check_rng.standard_normal(2)), persistent=False)
assert [list(_hidden.state_dict()), [n for n, _ in _hidden.named_buffers()]] == [_KEYS, ["calls", "scratch"]], (
    "a buffer with persistent=False is left out"
)
_gone = ("weight", "bias")[int(check_rng.integers(0, 2))]
setattr(_hidden, _gone, None)
assert list(_hidden.state_dict()) == [k for k in _KEYS if k != _gone], "None entries are left out"
# A chain of 1 to 3 _TwoLayers, each the `inner` of the one before.
_depth = int(check_rng.integers(1, 4))
_nested, _keys, _path = _TwoLayers(), [], ""
_at = _nested
for _level in range(_depth):
    _keys += [_path + part + "." + k for part in ("first", "second") for k in _KEYS]
    _at.inner = _TwoLayers()
    _at, _path = _at.inner, _path + "inner."
_keys += [_path + part + "." + k for part in ("first", "second") for k in _KEYS]
assert list(_nested.state_dict()) == _keys, "nested modules' entries are named through every level (inner.first.weight)"
_prefix = ("model.", "net.", "encoder.", "module.")[int(check_rng.integers(0, 4))]
assert list(_nested.state_dict(prefix=_prefix)) == [_prefix + k for k in _keys], "prefix goes in front of every name"
_shared = _TwoLayers()
_alias = ("third", "again", "copy")[int(check_rng.integers(0, 3))]
setattr(_shared, _alias, _shared.first)
assert list(_shared.state_dict()) == [part + "." + k for part in ("first", "second", _alias) for k in _KEYS], (
    "a module shared under two names appears under both"
)
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_load_state_dict` (2 points): load a state by name, or say what does not fit
#
# `load_state_dict(state, strict=True)` copies values back **into** the
# existing tensors (`target.data[...] = value`), so that every `Parameter`
# stays the same object, keeps its dtype and device, and an optimizer that
# holds it keeps working. A value may be a `Tensor` (on any device, any
# dtype) or anything `Tensor()` accepts (a NumPy array, a list).
#
# Check everything before copying anything — a half-loaded model is worse
# than an error — and raise one `RuntimeError` that lists every problem:
#
# * with `strict=True`, the **missing** keys (the model has them, `state`
#   does not) and the **unexpected** keys (the other way round), by name;
# * always (also with `strict=False`), every key whose shape differs, with
#   both shapes: `second.weight: the state has shape (3, 4), the model (2, 4)`.
#
# Return `IncompatibleKeys(missing_keys, unexpected_keys)` (both lists),
# as PyTorch does, so that `strict=False` tells the caller what was skipped.
#
# **Checked when graded** (besides the tests below), with states of values,
# missing, unexpected and misshapen keys drawn for you:
#
# * strict=False returns IncompatibleKeys(missing_keys, unexpected_keys): what the model has and the state lacks, and the other way round
# * loading copies the values into the model's own arrays: changing the source afterwards must not change the model
# * a shape mismatch must raise RuntimeError, with strict=True and with strict=False
# * the error should name the key and both shapes
# * nothing is copied when anything is wrong
# * values are cast to the model's dtype (float64 into float32, any number into an int64 counter)
# * the parameters stay the same objects
# * a nested model loads by name

# %% nbgrader={"grade": false, "grade_id": "layers_load_state_dict_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _load_state_dict(self: Module, state: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
    """Module.load_state_dict: copy ``state`` into this module's tensors in place; mismatches are one error naming them."""
    ### BEGIN SOLUTION
    own = self.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    for key, target in own.items():
        if key in state:
            value = state[key]
            shape = value.shape if isinstance(value, Tensor) else tuple(np.shape(value))
            if tuple(shape) != target.shape:
                problems.append(f"{key}: the state has shape {tuple(shape)}, the model {target.shape}")
    if problems:
        raise RuntimeError(f"load_state_dict into {type(self).__name__}: " + "; ".join(problems))
    with no_grad():
        for key, target in own.items():
            if key in state:
                value = state[key]
                if isinstance(value, Tensor):
                    array = value.to(device=target.device, dtype=target.dtype).data
                else:
                    array = Tensor(value, dtype=target.dtype, device=target.device).data
                target.data[...] = array
    return IncompatibleKeys(missing, unexpected)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_load_state_dict", "locked": true, "points": 2, "schema_version": 3, "solution": false}
src, dst = _TwoLayers(), _TwoLayers()
with no_grad():
    src.first.weight[...] = np.arange(12, dtype=np.float32).reshape(4, 3)
state = src.state_dict()
keep = dst.first.weight
assert dst.load_state_dict(state) == IncompatibleKeys([], [])
assert dst.first.weight is keep and np.array_equal(keep.numpy(), src.first.weight.numpy())
assert keep.dtype == np.float32
bad = dict(state)
del bad["second.bias"]
bad["extra.weight"] = np.zeros(2, np.float32)
try:
    dst.load_state_dict(bad)
    raise AssertionError("missing and unexpected keys must raise")
except RuntimeError as err:
    assert "second.bias" in str(err) and "extra.weight" in str(err), f"the error should name both keys; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_keys = ["first.weight", "first.bias", "first.calls", "second.weight", "second.bias", "second.calls"]
_shapes = [(4, 3), (4,), (), (2, 4), (2,), ()]
_state = {}
for _key, _shape in zip(_keys, _shapes):
    _state[_key] = np.array(check_rng.integers(1, 1000)) if _key.endswith("calls") else check_rng.standard_normal(_shape).astype(np.float32)
_dst = _TwoLayers()
_keep = _dst.first.weight
_missing = _keys[int(check_rng.integers(0, 6))]
_extra = ("extra.weight", "head.bias", "third.weight")[int(check_rng.integers(0, 3))]
_partial = {k: v for k, v in _state.items() if k != _missing}
_partial[_extra] = check_rng.standard_normal(3)
_result = _dst.load_state_dict(_partial, strict=False)
assert [_result.missing_keys, _result.unexpected_keys] == [[_missing], [_extra]], (
    "strict=False returns IncompatibleKeys(missing_keys, unexpected_keys): what the model has and the state lacks, and the other way round"
)
_source = Tensor(_state["first.weight"].copy())
_dst.load_state_dict({**_state, "first.weight": _source})
with no_grad():
    _source[...] = 0.0
assert np.array_equal(_dst.first.weight.numpy(), _state["first.weight"]), (
    "loading copies the values into the model's own arrays: changing the source afterwards must not change the model"
)
_before = [p.numpy().copy() for p in _dst.parameters()]
_wrong_key = ("first.weight", "first.bias", "second.weight", "second.bias")[int(check_rng.integers(0, 4))]
_grow = int(check_rng.integers(1, 3))
_right_shape = _state[_wrong_key].shape
_wrong_shape = tuple(n + _grow for n in _right_shape)
_wrong = {k: v + 1 for k, v in _state.items()}  # new values everywhere, and one key of the wrong shape
_wrong[_wrong_key] = np.zeros(_wrong_shape, np.float32)
for _strict in (True, False):
    try:
        _dst.load_state_dict(_wrong, strict=_strict)
        raise AssertionError("a shape mismatch must raise RuntimeError, with strict=True and with strict=False")
    except RuntimeError as err:
        assert _close_text(str(err), [_wrong_key, str(_wrong_shape), str(_right_shape)]), "the error should name the key and both shapes"
assert np.array_equal(np.concatenate([p.numpy().ravel() for p in _dst.parameters()]), np.concatenate([b.ravel() for b in _before])), (
    "nothing is copied when anything is wrong"
)
_dst.load_state_dict({k: np.asarray(v, np.float64) + 0.5 for k, v in _state.items()})
assert [str(_dst.first.weight.dtype), str(_dst.first.calls.dtype), _dst.first.calls.item()] == [
    "float32", "int64", int(_state["first.calls"])
] and np.allclose(_dst.first.weight.numpy(), _state["first.weight"] + 0.5), (
    "values are cast to the model's dtype (float64 into float32, any number into an int64 counter)"
)
assert np.allclose(_keep.numpy(), _state["first.weight"] + 0.5) and _dst.first.weight is _keep, "the parameters stay the same objects"
_nested = _TwoLayers()
_nested.inner = _TwoLayers()
with no_grad():
    for _p in _nested.parameters():
        _p[...] = check_rng.standard_normal(_p.shape)
_copy = _TwoLayers()
_copy.inner = _TwoLayers()
_copy.load_state_dict({k: v.numpy() for k, v in _nested.state_dict().items()})
assert np.array_equal(
    np.concatenate([p.numpy().ravel() for p in _copy.parameters()]), np.concatenate([p.numpy().ravel() for p in _nested.parameters()])
), "a nested model loads by name"
### END HIDDEN TESTS

# %% [markdown]
# ## Initialisation
#
# Where the weights start decides whether a deep network trains at all. If
# each layer multiplies the spread of its input by more than 1, activations
# explode with depth; by less than 1, they vanish. A layer's output unit
# sums `fan_in` products wᵢxᵢ, so its variance is fan_in · Var(w) · E[x²]:
# choose Var(w) ∝ 1/fan_in and the spread stays put.
#
# ### Task `layers_init_fans` (1 point): fans and gains
#
# For a weight of shape (out, in, k₁, k₂, ...) — a linear layer's (out, in)
# or a convolution's — fan_in = in · k₁k₂⋯ and fan_out = out · k₁k₂⋯ (the
# *receptive field* multiplies both). A tensor with fewer than two axes has
# no fans: `ValueError`.
#
# `calculate_gain(nonlinearity, param=None)` follows `torch.nn.init`:
# 1 for `linear`, `identity`, `sigmoid` and the `conv*` names; 5/3 for
# `tanh`; √2 for `relu`; √(2 / (1 + slope²)) for `leaky_relu` (slope =
# `param`, default 0.01); 3/4 for `selu`. Anything else is a `ValueError`
# naming it.
#
# **Checked when graded** (besides the tests below), with shapes, slopes
# and names drawn for you:
#
# * a weight of shape (out, in, k₁, ...) has fan_in in·k₁⋯ and fan_out out·k₁⋯
# * leaky_relu's default slope is 0.01: √(2 / 1.0001)
# * leaky_relu with slope a: √(2 / (1 + a²))
# * selu's gain is 3/4
# * conv1d, conv2d, conv3d, the conv_transpose names, sigmoid, identity and linear have gain 1
# * calculate_gain of an unknown nonlinearity must raise ValueError
# * the ValueError should name the nonlinearity
# * a tensor with one axis has no fans: ValueError

# %% nbgrader={"grade": false, "grade_id": "layers_init_fans_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of shape (out, in, *kernel)."""
    check_tensor("calculate_fan_in_and_fan_out", "tensor", tensor)
    ### BEGIN SOLUTION
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 axes; got shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive
    ### END SOLUTION


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor that keeps the spread of activations through ``nonlinearity`` (torch.nn.init's table)."""
    if not isinstance(nonlinearity, str):
        raise TypeError(f"calculate_gain: nonlinearity must be a str such as 'relu'; got {described(nonlinearity)}")
    if param is not None:
        check_arg("calculate_gain", "param", param, "a number")
    ### BEGIN SOLUTION
    ones = {"linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d",
            "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
    if nonlinearity in ones:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_init_fans", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert calculate_fan_in_and_fan_out(zeros(64, 32)) == (32, 64)
assert calculate_fan_in_and_fan_out(zeros(16, 3, 5, 5)) == (75, 400)
assert calculate_gain("relu") == math.sqrt(2) and calculate_gain("tanh") == 5 / 3 and calculate_gain("linear") == 1
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_out, _in = int(check_rng.integers(2, 20)), int(check_rng.integers(1, 10))
_kernel = tuple(int(k) for k in check_rng.integers(2, 6, int(check_rng.integers(1, 3))))
assert calculate_fan_in_and_fan_out(zeros((_out, _in) + _kernel)) == (_in * math.prod(_kernel), _out * math.prod(_kernel)), (
    "a weight of shape (out, in, k₁, ...) has fan_in in·k₁⋯ and fan_out out·k₁⋯"
)
assert math.isclose(calculate_gain("leaky_relu"), math.sqrt(2 / 1.0001), rel_tol=1e-12), "leaky_relu's default slope is 0.01: √(2 / 1.0001)"
_slope = round(float(check_rng.uniform(0.05, 0.5)), 3)
assert math.isclose(calculate_gain("leaky_relu", _slope), math.sqrt(2 / (1 + _slope ** 2)), rel_tol=1e-12), (
    "leaky_relu with slope a: √(2 / (1 + a²))"
)
assert calculate_gain("selu") == 0.75, "selu's gain is 3/4"
_ones = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid", "identity", "linear"]
_order = check_rng.permutation(len(_ones))
assert [calculate_gain(_ones[i]) for i in _order] == [1.0] * len(_ones), (
    "conv1d, conv2d, conv3d, the conv_transpose names, sigmoid, identity and linear have gain 1"
)
_unknown = ("swish", "gelu", "mish", "softplus", "elu")[int(check_rng.integers(0, 5))]
try:
    calculate_gain(_unknown)
    raise AssertionError("calculate_gain of an unknown nonlinearity must raise ValueError")
except ValueError as err:
    assert _close_text(str(err), [_unknown]), "the ValueError should name the nonlinearity"
try:
    calculate_fan_in_and_fan_out(zeros(int(check_rng.integers(1, 10))))
    raise AssertionError("a tensor with one axis has no fans: ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_init` (1 point): the variance-scaling initializers
#
# * **Xavier/Glorot** (2010), for tanh/sigmoid: Var(w) = gain² · 2 / (fan_in + fan_out),
#   a compromise between the forward (fan_in) and backward (fan_out) passes.
# * **Kaiming/He** (2015), for ReLU, which zeroes half its input:
#   Var(w) = gain² / fan, with gain = √2 for ReLU and √(2 / (1 + a²)) for a
#   leaky ReLU of slope a; `mode` picks fan_in (default) or fan_out.
# * A uniform U(−b, b) has variance b²/3, so a uniform init with standard
#   deviation σ uses b = √3 · σ.
#
# PyTorch's `Linear` and `Conv` use `kaiming_uniform_(w, a=√5)`, which works
# out to U(−1/√fan_in, 1/√fan_in), and the same bound for the bias
# (`fan_in_uniform_`).
#
# Every initializer works **in place** on a `Tensor` or `Parameter`, inside
# `no_grad()` (writing into a parameter is not part of any graph), draws
# from tinyflo's seeded generator (`rand` / `randn` with the tensor's shape,
# dtype and device, so `manual_seed` reproduces it), and returns the tensor.
# The given `_fill_` and `_draw` do the writing and the drawing. The
# trailing underscore is PyTorch's mark for "changes its argument".
#
# The draw is fixed, so that `manual_seed` gives the same values as the
# reference, bit for bit (the last test below compares them): each call
# draws once, with the given `_draw`, and writes exactly
# `a + (b − a) * _draw("uniform", t)` (`uniform_(t, a, b)`) or
# `mean + std * _draw("normal", t)` (`normal_(t, mean, std)`), with `a`,
# `b`, `mean` and `std` Python floats, so the arithmetic runs in the
# tensor's dtype; the Kaiming and Xavier initializers and
# `fan_in_uniform_` call `uniform_(t, −bound, bound)` or
# `normal_(t, 0, std)`.
#
# **Checked when graded** (besides the tests below), on tensors of shapes,
# gains, bounds, means and deviations drawn for you:
#
# * xavier_uniform_(w, gain=g) must fill U(−b, b) with b = g·√(6/(fan_in + fan_out))
# * xavier_normal_ must have std √(2/(fan_in + fan_out))
# * kaiming_normal_(mode='fan_out', nonlinearity='relu') divides by fan_out: std √(2/fan_out)
# * kaiming_uniform_(nonlinearity='relu') must fill U(−√(6/fan_in), √(6/fan_in)): std √(2/fan_in)
# * uniform_(t, a, b) must fill U(a, b): every value in [a, b), the mean (a + b)/2
# * normal_(t, mean, std) must have that mean and std
# * fan_in_uniform_(t, n) must fill U(−1/√n, 1/√n)
# * an initializer changes the parameter in place and returns it, still a trainable float32 leaf
# * an initializer keeps the tensor's dtype
# * ones_ and zeros_ fill in place

# %% nbgrader={"grade": false, "grade_id": "layers_init_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _fill_(tensor: Tensor, values: Any) -> Tensor:
    """Write ``values`` (an array or Tensor on tensor's device) into ``tensor`` in place."""
    with no_grad():
        tensor[...] = values
    return tensor


def _draw(kind: str, tensor: Tensor, shape: tuple[int, ...] | None = None) -> Any:
    """Uniform [0, 1) or standard normal samples shaped like ``tensor``, from tinyflo's generator."""
    if not is_floating(tensor.dtype):
        raise TypeError(f"init: only floating tensors can be initialised this way; got {tensor.dtype}")
    draw = rand if kind == "uniform" else randn
    return draw(tensor.shape if shape is None else shape, dtype=tensor.dtype, device=tensor.device).data


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with samples of U(a, b)."""
    check_tensor("uniform_", "tensor", tensor)
    check_arg("uniform_", "a", a, "a number")
    check_arg("uniform_", "b", b, "a number")
    ### BEGIN SOLUTION
    return _fill_(tensor, a + (b - a) * _draw("uniform", tensor))
    ### END SOLUTION


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with samples of N(mean, std²)."""
    check_tensor("normal_", "tensor", tensor)
    check_arg("normal_", "mean", mean, "a number")
    check_arg("normal_", "std", std, "a number >= 0")
    ### BEGIN SOLUTION
    return _fill_(tensor, mean + std * _draw("normal", tensor))
    ### END SOLUTION


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    check_tensor("zeros_", "tensor", tensor)
    return _fill_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    check_tensor("ones_", "tensor", tensor)
    return _fill_(tensor, 1)


def constant_(tensor: Tensor, value: float) -> Tensor:
    """Fill with ``value``."""
    check_tensor("constant_", "tensor", tensor)
    return _fill_(tensor, check_arg("constant_", "value", value, "a number"))


def _fan(tensor: Tensor, mode: str) -> int:
    check_arg("init", "mode", mode, ("fan_in", "fan_out"))
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He initialisation, uniform: U(−b, b) with b = gain · √(3 / fan)."""
    check_tensor("kaiming_uniform_", "tensor", tensor)
    check_arg("kaiming_uniform_", "a", a, "a number")
    ### BEGIN SOLUTION
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)
    ### END SOLUTION


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He initialisation, normal: N(0, gain² / fan)."""
    check_tensor("kaiming_normal_", "tensor", tensor)
    check_arg("kaiming_normal_", "a", a, "a number")
    ### BEGIN SOLUTION
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)))
    ### END SOLUTION


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot initialisation, uniform: U(−b, b) with b = gain · √(6 / (fan_in + fan_out))."""
    check_tensor("xavier_uniform_", "tensor", tensor)
    check_arg("xavier_uniform_", "gain", gain, "a number")
    ### BEGIN SOLUTION
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)
    ### END SOLUTION


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot initialisation, normal: N(0, gain² · 2 / (fan_in + fan_out))."""
    check_tensor("xavier_normal_", "tensor", tensor)
    check_arg("xavier_normal_", "gain", gain, "a number")
    ### BEGIN SOLUTION
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
    ### END SOLUTION


def fan_in_uniform_(tensor: Tensor, fan_in: int) -> Tensor:
    """U(−1/√fan_in, 1/√fan_in): PyTorch's default bias init for Linear and Conv."""
    check_tensor("fan_in_uniform_", "tensor", tensor)
    check_arg("fan_in_uniform_", "fan_in", fan_in, "an integer >= 0")
    ### BEGIN SOLUTION
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform_(tensor, -bound, bound)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_init", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from tinyflo.core.tensor import manual_seed

w = zeros(400, 500)
kaiming_uniform_(w, a=math.sqrt(5))
assert abs(np.abs(w.numpy()).max() - 1 / math.sqrt(500)) < 1e-3 and np.abs(w.numpy()).max() <= 1 / math.sqrt(500)
kaiming_normal_(w, nonlinearity="relu")
assert abs(w.numpy().std() - math.sqrt(2 / 500)) < 2e-3 and abs(w.numpy().mean()) < 1e-3
manual_seed(3)
first = xavier_uniform_(zeros(8, 4)).numpy()
manual_seed(3)
assert np.array_equal(xavier_uniform_(zeros(8, 4)).numpy(), first), "manual_seed reproduces an init"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task. A
# (rows, cols) weight has fan_in = cols and fan_out = rows; with 40,000 values or more, each
# statistic below lies well within its tolerance.
_rows, _cols = int(check_rng.integers(200, 500)), int(check_rng.integers(200, 500))
_w = zeros(_rows, _cols)
_gain = round(float(check_rng.uniform(1.5, 3.0)), 2)
xavier_uniform_(_w, gain=_gain)
_bound = _gain * math.sqrt(6 / (_rows + _cols))
assert np.allclose(np.abs(_w.numpy()).max(), _bound, rtol=0.01, atol=0) and np.abs(_w.numpy()).max() / _bound <= 1 + 1e-6, (
    "xavier_uniform_(w, gain=g) must fill U(−b, b) with b = g·√(6/(fan_in + fan_out))"
)
xavier_normal_(_w)
assert np.allclose(_w.numpy().std(), math.sqrt(2 / (_rows + _cols)), rtol=0.03, atol=0), (
    "xavier_normal_ must have std √(2/(fan_in + fan_out))"
)
kaiming_normal_(_w, mode="fan_out", nonlinearity="relu")
assert np.allclose(_w.numpy().std(), math.sqrt(2 / _rows), rtol=0.03, atol=0), (
    "kaiming_normal_(mode='fan_out', nonlinearity='relu') divides by fan_out: std √(2/fan_out)"
)
kaiming_uniform_(_w, nonlinearity="relu")
assert np.allclose([_w.numpy().std(), np.abs(_w.numpy()).max()], [math.sqrt(2 / _cols), math.sqrt(6 / _cols)], rtol=0.03, atol=0) and (
    np.abs(_w.numpy()).max() / math.sqrt(6 / _cols) <= 1 + 1e-6
), "kaiming_uniform_(nonlinearity='relu') must fill U(−√(6/fan_in), √(6/fan_in)): std √(2/fan_in)"
_lo = round(float(check_rng.uniform(-5.0, 0.0)), 2)
_hi = round(_lo + float(check_rng.uniform(0.5, 5.0)), 2)
_u = uniform_(zeros(50000), _lo, _hi).numpy()
assert np.allclose([_u.min(), _u.max(), _u.mean()], [_lo, _hi, (_lo + _hi) / 2], rtol=0, atol=0.03 * (_hi - _lo)) and [
    bool(_u.min() >= _lo), bool(_u.max() < _hi)
] == [True, True], "uniform_(t, a, b) must fill U(a, b): every value in [a, b), the mean (a + b)/2"
_mean, _std = round(float(check_rng.uniform(-3.0, 3.0)), 2), round(float(check_rng.uniform(0.2, 2.0)), 2)
_z = normal_(zeros(50000), _mean, _std).numpy()
assert np.allclose([_z.mean(), _z.std()], [_mean, _std], rtol=0, atol=0.03 * _std), "normal_(t, mean, std) must have that mean and std"
_n_fan = int(check_rng.integers(4, 400))
_f = fan_in_uniform_(zeros(5000), _n_fan).numpy()
assert np.allclose(np.abs(_f).max(), 1 / math.sqrt(_n_fan), rtol=0.01, atol=0) and np.abs(_f).max() * math.sqrt(_n_fan) <= 1 + 1e-6, (
    "fan_in_uniform_(t, n) must fill U(−1/√n, 1/√n)"
)
_p = Parameter(np.zeros((int(check_rng.integers(2, 9)), int(check_rng.integers(2, 9))), np.float32))
_returned = kaiming_uniform_(_p)
assert [str(_p.dtype), _p.requires_grad, _p._ctx, bool(np.abs(_p.numpy()).max() > 0)] == ["float32", True, None, True] and _returned is _p, (
    "an initializer changes the parameter in place and returns it, still a trainable float32 leaf"
)
assert str(normal_(zeros(int(check_rng.integers(2, 9)), dtype=float64)).dtype) == "float64", "an initializer keeps the tensor's dtype"
_k = int(check_rng.integers(2, 9))
assert [ones_(zeros(_k)).tolist(), float(zeros_(_p).numpy().sum())] == [[1.0] * _k, 0.0], "ones_ and zeros_ fill in place"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_orthogonal` (1 point): an orthogonal start
#
# `orthogonal_(t, gain=1)`: the Q of the QR decomposition of a normal
# matrix of shape (rows, numel/rows) — transposed first when it is wide, so
# Q has orthonormal rows or columns, whichever there are fewer of — with
# each column multiplied by the sign of R's diagonal (without this fix Q is
# not uniformly distributed). Then QᵀQ = gain²·I (or QQᵀ for a wide one).
# A tensor with fewer than two axes is a `ValueError`. For a float16 tensor,
# decompose in float32 (NumPy's `qr` has no float16) and round back. Draw the
# normal matrix from tinyflo's generator (`_draw("normal", t, (rows, cols))`),
# so that `manual_seed` reproduces the result.
#
# **Checked when graded** (besides the tests below), on shapes, gains and a
# seed drawn for you:
#
# * a wide (r, a, b) tensor with a·b > r gets r orthonormal rows of a·b
# * a tall (rows, cols) tensor with gain g has orthogonal columns of length g: QᵀQ = g²·I
# * orthogonal_ fills the parameter in place and returns it, still a trainable float32 leaf
# * orthogonal_ keeps the tensor's dtype
# * a float16 tensor is decomposed in float32 and rounded back: float16, orthogonal to float16's precision
# * the entries of a random orthogonal matrix average to 0 (its diagonal too, over 1000 draws): multiply Q's columns by the signs of R's diagonal
# * manual_seed reproduces orthogonal_: the same seed, the same matrix (draw with _draw, from tinyflo's generator)
# * orthogonal_ of a tensor with one axis must raise ValueError

# %% nbgrader={"grade": false, "grade_id": "layers_orthogonal_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """A (semi-)orthogonal matrix, scaled by ``gain``: QR of a normal matrix with the sign fix."""
    check_tensor("orthogonal_", "tensor", tensor)
    check_arg("orthogonal_", "gain", gain, "a number")
    ### BEGIN SOLUTION
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: needs a tensor with at least 2 axes; got shape {tensor.shape}")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _draw("normal", tensor, (rows, cols))
    xp = tensor.device.xp
    if tensor.dtype.itemsize < 4:
        flat = flat.astype(float32)
    if rows < cols:
        flat = flat.T
    q, r = xp.linalg.qr(flat)
    q = q * xp.sign(xp.diagonal(r))
    if rows < cols:
        q = q.T
    return _fill_(tensor, (gain * q).reshape(tensor.shape).astype(tensor.dtype))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_orthogonal", "locked": true, "points": 1, "schema_version": 3, "solution": false}
q = orthogonal_(zeros(30, 20), gain=2.0).numpy()
assert np.allclose(q.T @ q, 4 * np.eye(20), atol=1e-4)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_r = int(check_rng.integers(2, 6))
_a, _b = int(check_rng.integers(2, 5)), int(check_rng.integers(_r, _r + 4))  # a·b ≥ 2r: wide
_wide = orthogonal_(zeros(_r, _a, _b)).numpy().reshape(_r, _a * _b)
assert np.allclose(_wide @ _wide.T, np.eye(_r), atol=1e-5), "a wide (r, a, b) tensor with a·b > r gets r orthonormal rows of a·b"
_cols = int(check_rng.integers(2, 8))
_rows = _cols + int(check_rng.integers(1, 8))
_gain = round(float(check_rng.uniform(0.5, 3.0)), 2)
_tall = orthogonal_(zeros(_rows, _cols), gain=_gain).numpy()
assert np.allclose(_tall.T @ _tall, _gain ** 2 * np.eye(_cols), atol=1e-4), (
    "a tall (rows, cols) tensor with gain g has orthogonal columns of length g: QᵀQ = g²·I"
)
_k = int(check_rng.integers(2, 7))
_p = Parameter(np.zeros((_k, _k), np.float32))
_returned = orthogonal_(_p)
assert np.allclose(_p.numpy().T @ _p.numpy(), np.eye(_k), atol=1e-5) and [str(_p.dtype), _p.requires_grad, _p._ctx] == [
    "float32", True, None
] and _returned is _p, "orthogonal_ fills the parameter in place and returns it, still a trainable float32 leaf"
assert str(orthogonal_(zeros(_rows, _cols, dtype=float64)).dtype) == "float64", "orthogonal_ keeps the tensor's dtype"
_half = orthogonal_(zeros(_rows, _cols, dtype=float16))
assert str(_half.dtype) == "float16" and np.allclose(
    _half.numpy().astype(np.float32).T @ _half.numpy().astype(np.float32), np.eye(_cols), atol=1e-2
), "a float16 tensor is decomposed in float32 and rounded back: float16, orthogonal to float16's precision"
# With the sign fix Q is uniformly distributed: the mean of its diagonal over 1000 draws is 0 within
# about 0.01; without it, numpy's Q has a diagonal whose mean is about −0.2.
manual_seed(int(check_rng.integers(0, 2**31)))
_n = int(check_rng.integers(4, 7))
_diagonals = np.array([np.diag(orthogonal_(zeros(_n, _n, dtype=float64)).numpy()).mean() for _ in range(1000)])
assert abs(float(_diagonals.mean())) < 0.07, (
    "the entries of a random orthogonal matrix average to 0 (its diagonal too, over 1000 draws): multiply Q's columns by the signs of R's diagonal"
)
_seed = int(check_rng.integers(0, 2**31))
manual_seed(_seed)
_first = orthogonal_(zeros(_rows, _cols)).numpy()
manual_seed(_seed)
assert float(np.abs(orthogonal_(zeros(_rows, _cols)).numpy() - _first).max()) == 0.0, (
    "manual_seed reproduces orthogonal_: the same seed, the same matrix (draw with _draw, from tinyflo's generator)"
)
try:
    orthogonal_(zeros(int(check_rng.integers(1, 10))))
    raise AssertionError("orthogonal_ of a tensor with one axis must raise ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_trunc_normal` (1 point): a normal start without outliers
#
# `trunc_normal_(t, mean=0, std=1, a=-2, b=2)`: normal samples N(mean, std²),
# where any outside [a, b] (in absolute units, as in PyTorch) are **drawn
# again** until all are inside — clamping them would pile mass on the
# edges. An empty interval (a ≥ b) is a `ValueError`; so is one so unlikely
# that 1000 rounds of redrawing do not fill it. Draw from tinyflo's
# generator (`_draw`), as the other initializers do.
#
# **Checked when graded** (besides the tests below), with means, deviations
# and intervals drawn for you (an interval of N(μ, σ²) four or more σ away
# from 0):
#
# * samples outside [a, b] are drawn again, not clamped onto the edges
# * a and b are absolute bounds: every sample of N(μ, σ²) cut to [a, b] lies in [a, b]
# * N(μ, σ²) cut to [a, b] has the truncated normal's mean and std (redrawn samples come from N(μ, σ²) too)
# * the defaults cut N(0, 1) to [−2, 2]: mean 0 and std 0.880
# * trunc_normal_ fills the parameter in place and returns it
# * trunc_normal_ with a > b must raise ValueError
# * an interval too unlikely to fill in 1000 rounds of redrawing (40σ or more away from the mean) must raise ValueError

# %% nbgrader={"grade": false, "grade_id": "layers_trunc_normal_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """N(mean, std²) restricted to [a, b]: samples outside are drawn again, not clamped."""
    check_tensor("trunc_normal_", "tensor", tensor)
    for name, value in (("mean", mean), ("a", a), ("b", b)):
        check_arg("trunc_normal_", name, value, "a number")
    check_arg("trunc_normal_", "std", std, "a number >= 0")
    ### BEGIN SOLUTION
    if not a < b:
        raise ValueError(f"trunc_normal_: the interval [a, b] = [{a}, {b}] is empty")
    values = mean + std * _draw("normal", tensor)
    for _ in range(1000):
        outside = (values < a) | (values > b)
        count = int(outside.sum())
        if count == 0:
            return _fill_(tensor, values)
        values[outside] = mean + std * _draw("normal", tensor, (count,))
    raise ValueError(f"trunc_normal_: [{a}, {b}] is too unlikely under N({mean}, {std}²) to sample by redrawing")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "layers_trunc_normal", "locked": true, "points": 1, "schema_version": 3, "solution": false}
t = trunc_normal_(zeros(20000), std=1.0, a=-1.0, b=1.5).numpy()
assert t.min() >= -1.0 and t.max() <= 1.5 and (t > 1.4).mean() > 0.01
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task. The
# interval [a, b] = [μ − c₁σ, μ + c₂σ] (bounds rounded to quarters, exact in float32) holds 24% to
# 68% of N(μ, σ²), and lies four or more σ away from 0.
_sigma = round(float(check_rng.uniform(1.5, 3.0)), 2)
_mu = float((-1, 1)[int(check_rng.integers(0, 2))] * round(float(check_rng.uniform(5.0, 7.0)) * _sigma, 2))
_lo = round(4 * (_mu - float(check_rng.uniform(0.3, 1.0)) * _sigma)) / 4
_hi = round(4 * (_mu + float(check_rng.uniform(0.3, 1.0)) * _sigma)) / 4
_s = trunc_normal_(zeros(50000), mean=_mu, std=_sigma, a=_lo, b=_hi).numpy()
# Clamped, a third or more of the samples would sit exactly on an edge; drawn again, almost none do.
assert int(np.sum((_s == np.float32(_lo)) | (_s == np.float32(_hi)))) < 10, (
    "samples outside [a, b] are drawn again, not clamped onto the edges"
)
assert float(np.abs(_s - np.clip(_s, _lo, _hi)).max()) == 0.0, (
    "a and b are absolute bounds: every sample of N(μ, σ²) cut to [a, b] lies in [a, b]"
)
_alpha, _beta = (_lo - _mu) / _sigma, (_hi - _mu) / _sigma
_phi_a, _phi_b = math.exp(-_alpha ** 2 / 2) / math.sqrt(2 * math.pi), math.exp(-_beta ** 2 / 2) / math.sqrt(2 * math.pi)
_mass = (math.erf(_beta / math.sqrt(2)) - math.erf(_alpha / math.sqrt(2))) / 2
_shift = (_phi_a - _phi_b) / _mass
_std = _sigma * math.sqrt(1 + (_alpha * _phi_a - _beta * _phi_b) / _mass - _shift ** 2)
assert np.allclose([_s.mean(), _s.std()], [_mu + _sigma * _shift, _std], rtol=0, atol=0.03 * _sigma), (
    "N(μ, σ²) cut to [a, b] has the truncated normal's mean and std (redrawn samples come from N(μ, σ²) too)"
)
_d = trunc_normal_(zeros(int(check_rng.integers(40000, 60000)))).numpy()
assert np.allclose([_d.mean(), _d.std(), np.abs(_d).max() <= 2], [0.0, 0.8796, True], rtol=0, atol=0.02), (
    "the defaults cut N(0, 1) to [−2, 2]: mean 0 and std 0.880"
)
_p = Parameter(np.zeros(int(check_rng.integers(5, 20)), np.float32))
_width = round(float(check_rng.uniform(0.01, 0.1)), 3)
_returned = trunc_normal_(_p, std=_width, a=-2 * _width, b=2 * _width)
assert [str(_p.dtype), _p.requires_grad, bool(np.abs(_p.numpy()).max() > 0)] == ["float32", True, True] and _returned is _p, (
    "trunc_normal_ fills the parameter in place and returns it"
)
_top = round(float(check_rng.uniform(-2.0, 2.0)), 2)
try:
    trunc_normal_(zeros(3), a=_top, b=_top - round(float(check_rng.uniform(0.1, 2.0)), 2))
    raise AssertionError("trunc_normal_ with a > b must raise ValueError")
except ValueError:
    pass
_far = float(check_rng.integers(40, 100))
try:
    trunc_normal_(zeros(10), a=_far, b=_far + 1)
    raise AssertionError(
        "an interval too unlikely to fill in 1000 rounds of redrawing (40σ or more away from the mean) must raise ValueError"
    )
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## Layers
#
# ### Task `layers_linear` (2 points): `Linear`
#
# `Linear(in_features, out_features, bias=True)` computes y = x Wᵀ + b for
# an input of shape (..., in_features). As in PyTorch, the weight has shape
# **(out_features, in_features)** and is initialised with
# `kaiming_uniform_(weight, a=√5)` — U(−1/√in, 1/√in) — and the bias with
# `fan_in_uniform_(bias, in_features)`. Without a bias, register `bias` as
# None (`register_parameter("bias", None)`), so `layer.bias` is None and no
# `bias` appears among the parameters. An input whose last axis is not
# `in_features` is a `ShapeError` that says which layer, what came and what
# was expected: `Linear(784, 10) got input of shape (32, 785); expected
# (..., 784)`. `extra_repr` gives `in_features=784, out_features=10, bias=True`.
#
# The forward could be one line of module 01 ops, `x @ self.weight.T +
# self.bias`, and that is correct. It costs three graph nodes (matmul,
# transpose, add), and the weight's gradient comes back through the
# transpose as a *transposed view*, which the engine must copy into a fresh
# array: for a 784×512 layer that copy is a third of the layer's backward.
# So `Linear` is one `Function`, `LinearFn`, whose backward writes each
# gradient in the layout its parameter has: for y = x Wᵀ + b with x
# flattened to (rows, in), ∂L/∂x = g W, ∂L/∂W = gᵀ x (already (out, in)),
# ∂L/∂b = Σ_rows g.
#
# Flatten the leading axes for the products, and restore them after: for
# x of shape (12, 64, 128), `x @ W.T` is NumPy's *stacked* matmul, which
# for a transposed weight loops in C without BLAS and took 57–190 ms where
# the same numbers as one (768, 128) @ (128, out) product take about 1 ms.
# Reshaping a contiguous x to (rows, in) is free.
#
# `reset_parameters` draws the weight first and then the bias, one
# `kaiming_uniform_` and one `fan_in_uniform_` call (each one draw, as the
# initializer task fixed it), so that after `manual_seed` a layer holds the
# reference's values bit for bit: the tests below compare the output with
# the reference layer's.
#
# **Checked when graded** (besides the tests below), with sizes, inputs,
# weights and a seed drawn for you:
#
# * Linear(bias=False) has bias None and only a weight
# * without a bias, y = x Wᵀ
# * repr of Linear(i, o, bias=False) must be Linear(in_features=i, out_features=o, bias=False)
# * the weight is U(−1/√in, 1/√in): kaiming_uniform_(a=√5)
# * the weight's std is 1/√(3·in)
# * the bias is U(−1/√in, 1/√in)
# * an input of shape (d₁, d₂, in) gives (d₁, d₂, out)
# * a batched input gives the same rows as a 2-D one: x Wᵀ + b on every row
# * LinearFn's gradients for x, W and b (3-D input) must match central differences
# * LinearFn without a bias must have correct gradients
# * Linear must be one LinearFn node in the graph
# * manual_seed reproduces Linear's initialisation: the same seed, the same weight and bias
# * y = x Wᵀ + b for any x, W and b

# %% nbgrader={"grade": false, "grade_id": "layers_linear_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class LinearFn(Function):
    """y = x Wᵀ (+ b) as one graph node, its gradients in their parameters' layout."""

    def forward(self, x, weight, bias=None):
        ### BEGIN SOLUTION
        self.save_for_backward(x, weight)
        if x.ndim == 2:  # (rows, in) already, the usual case: nothing to reshape
            out = x @ weight.T
        else:
            rows = math.prod(x.shape[:-1])  # explicit, not -1: works for an empty batch too
            out = (x.reshape(rows, x.shape[-1]) @ weight.T).reshape(*x.shape[:-1], weight.shape[0])
        if bias is not None:
            out += bias  # `out` is a fresh array: adding in place saves allocating another
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        x, weight = self.saved
        needs = self.needs_input_grad
        if x.ndim == 2:
            rows, x_rows = grad, x  # (rows, out) and (rows, in)
        else:
            rows, x_rows = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
        grad_x = (rows @ weight).reshape(x.shape) if needs[0] else None
        grad_w = rows.T @ x_rows if needs[1] else None
        grad_b = rows.sum(axis=0) if len(needs) > 2 and needs[2] else None
        return grad_x, grad_w, grad_b
        ### END SOLUTION


class Linear(Module):
    """y = x Wᵀ + b, with PyTorch's shapes and default initialisation."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features = check_arg("Linear", "in_features", in_features, "a positive integer")
        self.out_features = check_arg("Linear", "out_features", out_features, "a positive integer")
        check_arg("Linear", "bias", bias, "True or False")
        ### BEGIN SOLUTION
        self.weight = Parameter(zeros(out_features, in_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(zeros(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        ### END SOLUTION

    def reset_parameters(self) -> None:
        """PyTorch's default: kaiming_uniform_(a=√5) for the weight, U(±1/√in) for the bias."""
        ### BEGIN SOLUTION
        kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in_uniform_(self.bias, self.in_features)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # Each read of self.weight goes through Module.__getattr__: read each parameter once.
        weight, bias = self.weight, self.bias
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(
                f"Linear({self.in_features}, {self.out_features}) got input of shape {x.shape}; "
                f"expected (..., {self.in_features})"
            )
        if x.dtype != weight.dtype:
            if not is_floating(x.dtype):
                x = x.to(dtype=weight.dtype)  # integer or bool data becomes the weights' dtype
            elif AutocastMode.policy is None:  # inside autocast() the op casts both (module 11)
                raise TypeError(
                    f"Linear({self.in_features}, {self.out_features}) holds {weight.dtype} weights "
                    f"but got a {x.dtype} input; convert one of them with .to(dtype=...), or mix precisions "
                    "with autocast() / cast_parameters() (module 11)"
                )
        if bias is None:
            return LinearFn.apply(x, weight)
        return LinearFn.apply(x, weight, bias)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


# %% nbgrader={"grade": true, "grade_id": "layers_linear", "locked": true, "points": 2, "schema_version": 3, "solution": false}
manual_seed(0)
layer = Linear(4, 3)
assert layer.weight.shape == (3, 4) and layer.bias.shape == (3,) and layer.weight.dtype == np.float32
assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
X = np.arange(8, dtype=np.float32).reshape(2, 4)
assert np.allclose(layer(Tensor(X)).numpy(), X @ layer.weight.numpy().T + layer.bias.numpy(), atol=1e-5)
assert np.abs(layer.weight.numpy()).max() <= 0.5 and np.abs(layer.bias.numpy()).max() <= 0.5
assert repr(layer) == "Linear(in_features=4, out_features=3, bias=True)"
try:
    Linear(784, 10)(Tensor(np.zeros((32, 785), np.float32)))
    raise AssertionError("a wrong input size must raise")
except ShapeError as err:
    assert "(32, 785)" in str(err) and "784" in str(err), f"the ShapeError should name the input's shape and in_features; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_in, _out = int(check_rng.integers(2, 8)), int(check_rng.integers(2, 8))
_X = check_rng.standard_normal((int(check_rng.integers(2, 7)), _in)).astype(np.float32)
_nobias = Linear(_in, _out, bias=False)
assert [n for n, _ in _nobias.named_parameters()] == ["weight"] and _nobias.bias is None, "Linear(bias=False) has bias None and only a weight"
assert np.allclose(_nobias(Tensor(_X)).numpy(), _X @ _nobias.weight.numpy().T, atol=1e-5), "without a bias, y = x Wᵀ"
assert repr(_nobias) == f"Linear(in_features={_in}, out_features={_out}, bias=False)", (
    "repr of Linear(i, o, bias=False) must be Linear(in_features=i, out_features=o, bias=False)"
)
# 150,000 weights or more and 300 biases or more: each statistic lies well within its tolerance.
_big_in, _big_out = int(check_rng.integers(500, 1500)), int(check_rng.integers(300, 500))
_big = Linear(_big_in, _big_out)
_bound = 1 / math.sqrt(_big_in)
assert np.allclose(np.abs(_big.weight.numpy()).max(), _bound, rtol=0.01, atol=0) and (
    np.abs(_big.weight.numpy()).max() / _bound <= 1 + 1e-6
), "the weight is U(−1/√in, 1/√in): kaiming_uniform_(a=√5)"
assert np.allclose(_big.weight.numpy().std(), 1 / math.sqrt(3 * _big_in), rtol=0.03, atol=0), "the weight's std is 1/√(3·in)"
assert np.allclose(np.abs(_big.bias.numpy()).max(), _bound, rtol=0.1, atol=0) and (
    np.abs(_big.bias.numpy()).max() / _bound <= 1 + 1e-6
), "the bias is U(−1/√in, 1/√in)"
_lead = (int(check_rng.integers(2, 6)), int(check_rng.integers(2, 4)))
_X3 = check_rng.standard_normal(_lead + (_in,)).astype(np.float32)
_layer = Linear(_in, _out)
_batched = _layer(Tensor(_X3))
assert _batched.shape == _lead + (_out,), "an input of shape (d₁, d₂, in) gives (d₁, d₂, out)"
assert np.allclose(_batched.numpy(), _X3 @ _layer.weight.numpy().T + _layer.bias.numpy(), atol=1e-5), (
    "a batched input gives the same rows as a 2-D one: x Wᵀ + b on every row"
)
_x3 = Tensor(check_rng.standard_normal(_lead + (_in,)), requires_grad=True)
_w3 = Tensor(check_rng.standard_normal((_out, _in)), requires_grad=True)
_b3 = Tensor(check_rng.standard_normal(_out), requires_grad=True)
assert gradcheck(lambda a, w, b: LinearFn.apply(a, w, b), _x3, _w3, _b3), (
    "LinearFn's gradients for x, W and b (3-D input) must match central differences"
)
assert gradcheck(lambda a, w: LinearFn.apply(a, w), Tensor(check_rng.standard_normal((_lead[0], _in)), requires_grad=True), _w3), (
    "LinearFn without a bias must have correct gradients"
)
assert isinstance(_layer(Tensor(_X))._ctx, LinearFn), "Linear must be one LinearFn node in the graph"
_seed = int(check_rng.integers(0, 2**31))
manual_seed(_seed)
_first = Linear(_in, _out)
manual_seed(_seed)
_again = Linear(_in, _out)
assert float(np.abs(_again.weight.numpy() - _first.weight.numpy()).max() + np.abs(_again.bias.numpy() - _first.bias.numpy()).max()) == 0.0, (
    "manual_seed reproduces Linear's initialisation: the same seed, the same weight and bias"
)
_rs_w = check_rng.standard_normal((_out, _in)).astype(np.float32)
_rs_b = check_rng.standard_normal(_out).astype(np.float32)
with no_grad():
    _layer.weight[...] = _rs_w
    _layer.bias[...] = _rs_b
assert np.allclose(_layer(Tensor(_X)).numpy(), _X @ _rs_w.T + _rs_b, atol=1e-5), "y = x Wᵀ + b for any x, W and b"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `layers_embedding` (1 point): `Embedding`, a lookup table
#
# `Embedding(num_embeddings, embedding_dim)` is a lookup table: row i of a
# weight of shape (num_embeddings, embedding_dim), initialised N(0, 1). Its
# input is an integer tensor (or array, or list) of indices of any shape;
# the output has that shape plus (embedding_dim,). Indexing the weight with
# an integer array is module 01's `GetItem`, whose backward already
# *scatters* the gradient into the rows that were used (adding up repeats).
# A floating input, or an index outside [0, num_embeddings), is an error
# that names the layer as `Embedding(10, 3)`: `TypeError` and `IndexError`
# respectively.
# `extra_repr` gives `10, 3`.
#
# On a GPU the range check would cost a wait for the device (see the
# systems corner): there the given first line hands the lookup to
# `_lookup_without_reading`, written after this task.
#
# Initialise the weight with one `normal_(weight)` call, so that after
# `manual_seed` it holds the reference's values bit for bit (the tests below
# compare rows with the reference layer's).
#
# **Checked when graded** (besides the tests below), with sizes, tables and
# indices drawn for you:
#
# * a list of k indices is accepted and gives shape (k, embedding_dim)
# * a NumPy array of indices picks those rows
# * the weight starts as N(0, 1)
# * repr must be Embedding(num_embeddings, embedding_dim)
# * the table is one parameter called weight
# * out-of-range indices (num_embeddings itself, or negative) must raise IndexError, and floating ones TypeError
# * the error should name the layer as Embedding(num_embeddings, embedding_dim)

# %% nbgrader={"grade": false, "grade_id": "layers_embedding_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Embedding(Module):
    """A lookup table: integer indices in, rows of a learned weight out."""

    takes_arrays = True  # indices may come as a NumPy or CuPy array

    def __init__(self, num_embeddings: int, embedding_dim: int, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings = check_arg("Embedding", "num_embeddings", num_embeddings, "a positive integer")
        self.embedding_dim = check_arg("Embedding", "embedding_dim", embedding_dim, "a positive integer")
        ### BEGIN SOLUTION
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=dtype, device=device))
        normal_(self.weight)
        ### END SOLUTION

    def forward(self, indices: Any) -> Tensor:
        if self.weight.device.reads_wait:  # a GPU: no read, an index out of range gives a row of NaN
            return _lookup_without_reading(self, indices)
        ### BEGIN SOLUTION
        if not isinstance(indices, Tensor):
            indices = Tensor(indices, device=self.weight.device)
        name = f"Embedding({self.num_embeddings}, {self.embedding_dim})"
        if indices.dtype.kind not in "iu":
            raise TypeError(f"{name}: indices must be integers; got {indices.dtype}")
        if indices.numel():
            low, high = int(indices.data.min()), int(indices.data.max())
            if low < 0 or high >= self.num_embeddings:
                bad = low if low < 0 else high
                raise IndexError(f"{name}: index {bad} is out of range [0, {self.num_embeddings})")
        return self.weight[indices]
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


# %% nbgrader={"grade": true, "grade_id": "layers_embedding", "locked": true, "points": 1, "schema_version": 3, "solution": false}
manual_seed(0)
emb = Embedding(10, 3)
out = emb(Tensor([[1, 2], [1, 9]]))
assert out.shape == (2, 2, 3) and np.allclose(out.numpy()[1, 1], emb.weight.numpy()[9])
out.sum().backward()
assert np.allclose(emb.weight.grad.numpy()[:, 0], [0, 2, 1, 0, 0, 0, 0, 0, 0, 1]), "gradient into the used rows"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n, _d = int(check_rng.integers(3, 12)), int(check_rng.integers(2, 6))
_e = Embedding(_n, _d)
_table = check_rng.standard_normal((_n, _d)).astype(np.float32)
with no_grad():
    _e.weight[...] = _table
_k = int(check_rng.integers(1, 8))
assert _e(check_rng.integers(0, _n, _k).tolist()).shape == (_k, _d), "a list of k indices is accepted and gives shape (k, embedding_dim)"
_picks = check_rng.integers(0, _n, (int(check_rng.integers(1, 4)), int(check_rng.integers(1, 4))))
assert np.allclose(_e(_picks).numpy(), _table[_picks]), "a NumPy array of indices picks those rows"
# 10,000 values or more: the sample's mean and std lie within 0.02 of N(0, 1)'s
_start = Embedding(int(check_rng.integers(200, 400)), int(check_rng.integers(50, 80))).weight.numpy()
assert np.allclose([_start.mean(), _start.std()], [0.0, 1.0], rtol=0, atol=0.05), "the weight starts as N(0, 1)"
assert repr(_e) == f"Embedding({_n}, {_d})", "repr must be Embedding(num_embeddings, embedding_dim)"
assert [n for n, _ in _e.named_parameters()] == ["weight"], "the table is one parameter called weight"
_negative = -int(check_rng.integers(1, _n + 1))
for _bad, _kind in ((Tensor([_n]), IndexError), (Tensor([_negative]), IndexError), (Tensor([float(check_rng.integers(0, _n))]), TypeError)):
    try:
        _e(_bad)
        raise AssertionError(
            "out-of-range indices (num_embeddings itself, or negative) must raise IndexError, and floating ones TypeError"
        )
    except _kind as err:
        assert _close_text(str(err), [f"Embedding({_n}, {_d})"]), "the error should name the layer as Embedding(num_embeddings, embedding_dim)"
### END HIDDEN TESTS

# %% [markdown]
# On a GPU (`device.reads_wait`), `Embedding` keeps its range check on the
# device instead: an index out of range gets a row of NaN, never another
# row's weights (see the systems corner).

# %%
#| export
def _lookup_without_reading(layer: Embedding, indices: Any) -> Tensor:
    """The lookup with the range check kept on the device: rows of out-of-range indices are NaN."""
    device, dtype = layer.weight.device, layer.weight.dtype
    name = f"Embedding({layer.num_embeddings}, {layer.embedding_dim})"
    if not isinstance(indices, Tensor):
        indices = Tensor(indices, device=device)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{name}: indices must be integers; got {indices.dtype}")
    if indices.device is not device:
        raise DeviceError(f"{name}: indices are on {indices.device}, the weight on {device}")
    data = indices.data
    with device:
        bad = (data < 0) | (data >= layer.num_embeddings)
        mask = device.xp.where(bad, dtype.type("nan"), dtype.type(1))[..., None]
        safe = device.xp.where(bad, 0, data)
    return layer.weight[Tensor._wrap(safe, device)] * Tensor._wrap(mask, device)

# %% [markdown]
# ### Containers and activation modules
#
# These are given: each is a few lines on top of `Module`.
#
# * `Sequential(a, b, c)` calls its children in order, and can be indexed
#   (`model[0]`, `model[1:]` is a `Sequential` again), iterated and `len()`ed;
#   the children are named `0`, `1`, ... so parameters are `0.weight` etc.
#   It also takes one dict of name → module.
# * `ModuleList` holds modules for a `forward` you write yourself.
# * `Identity` returns its input; `Flatten(start_axis=1)` flattens all but
#   the batch axis.
# * One module per activation function: a thin wrapper so a model can be a
#   `Sequential` of layers and activations. `PReLU` owns its slope(s) as a
#   parameter (initial value 0.25, one per channel or one for all).

# %%
#| export
def _position(container: Module, index: Any) -> int:
    """``index`` of a Sequential or a ModuleList, checked: an integer, within its length."""
    owner = type(container).__name__
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise TypeError(f"{owner}: index must be an integer or a slice; got {described(index)}")
    if not -len(container) <= index < len(container):
        raise IndexError(f"{owner}: index {index} is out of range for {len(container)} modules")
    return int(index)


def _item(container: Module, module: Any) -> Module:
    """``module`` if it is a Module, else one line naming the container and the position it was to take."""
    if not isinstance(module, Module):
        raise TypeError(f"{type(container).__name__}: module {len(container)} must be a Module; "
                        f"got {described(module)}")
    return module


class Sequential(Module):
    """Modules applied one after the other."""

    takes_arrays = True  # its first module says whether it does

    def __init__(self, *modules: Module | dict[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                if not isinstance(module, Module):
                    raise TypeError(f"Sequential: argument {i} is a {type(module).__name__}, not a Module")
                self.add_module(str(i), module)

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, index: int | slice) -> Module:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(dict(items[index]))
        return items[_position(self, index)][1]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self)), _item(self, module))
        return self


class ModuleList(Module):
    """A list of modules whose parameters are registered (``forward`` is yours to write)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self)), _item(self, module))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        if not isinstance(modules, Iterable) or isinstance(modules, str):
            raise TypeError(f"ModuleList: modules must be a list of Modules; got {described(modules)}")
        for module in modules:
            self.append(module)
        return self

    def __getitem__(self, index: int | slice) -> Module | ModuleList:
        values = list(self._modules.values())
        return ModuleList(values[index]) if isinstance(index, slice) else values[_position(self, index)]

    def __setitem__(self, index: int, module: Module) -> None:
        self.add_module(list(self._modules)[_position(self, index)], module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class Identity(Module):
    """Returns its input unchanged (a placeholder, e.g. for a removed head)."""

    takes_arrays = True  # whatever comes goes on

    def forward(self, x: Any) -> Any:
        return x


class Flatten(Module):
    """Merge axes start_axis..end_axis into one (by default all but the batch axis)."""

    def __init__(self, start_axis: int = 1, end_axis: int = -1) -> None:
        super().__init__()
        self.start_axis = check_arg("Flatten", "start_axis", start_axis, "an integer")
        self.end_axis = check_arg("Flatten", "end_axis", end_axis, "an integer")

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_axis, self.end_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}, end_axis={self.end_axis}"


class _Elementwise(Module):
    """An activation function as a module; subclasses name the function and its settings."""

    function: Callable[..., Tensor] = staticmethod(relu)
    settings: tuple[str, ...] = ()

    def forward(self, x: Tensor) -> Tensor:
        return type(self).function(x, **{name: getattr(self, name) for name in self.settings})

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in self.settings)


class ReLU(_Elementwise):
    function = staticmethod(relu)


class Sigmoid(_Elementwise):
    function = staticmethod(sigmoid)


class Tanh(_Elementwise):
    function = staticmethod(tanh)


class SiLU(_Elementwise):
    function = staticmethod(silu)


class Mish(_Elementwise):
    function = staticmethod(mish)


class SELU(_Elementwise):
    function = staticmethod(selu)


class Hardswish(_Elementwise):
    function = staticmethod(hardswish)


class LeakyReLU(_Elementwise):
    function, settings = staticmethod(leaky_relu), ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self.negative_slope = check_arg("LeakyReLU", "negative_slope", negative_slope, "a number")


class ELU(_Elementwise):
    function, settings = staticmethod(elu), ("alpha",)

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = check_arg("ELU", "alpha", alpha, "a number")


class GELU(_Elementwise):
    function, settings = staticmethod(gelu), ("approximate",)

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = check_arg("GELU", "approximate", approximate, ("none", "tanh"))


class Softplus(_Elementwise):
    function, settings = staticmethod(softplus), ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = check_arg("Softplus", "beta", beta, "a number > 0")
        self.threshold = check_arg("Softplus", "threshold", threshold, "a number")


class Softmax(_Elementwise):
    function, settings = staticmethod(softmax), ("axis",)

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = check_arg("Softmax", "axis", axis, "an integer")


class LogSoftmax(_Elementwise):
    function, settings = staticmethod(log_softmax), ("axis",)

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = check_arg("LogSoftmax", "axis", axis, "an integer")


class PReLU(Module):
    """leaky ReLU whose slope is learned: one for all channels, or one per channel (axis 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_parameters = check_arg("PReLU", "num_parameters", num_parameters, "a positive integer")
        check_arg("PReLU", "init", init, "a number")
        self.weight = Parameter(Tensor(np.full(num_parameters, init), dtype=dtype or float32, device=device))

    def forward(self, x: Tensor) -> Tensor:
        return prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


# %%
_mlp = Sequential(Linear(784, 128), ReLU(), Linear(128, 10))
print(_mlp)
print(f"{_mlp.num_parameters():,} parameters:", [name for name, _ in _mlp.named_parameters()])

# %% [markdown]
# ### Task `layers_dropout` (2 points): inverted dropout
#
# During training, dropout zeroes each element independently with
# probability p, so no unit can rely on any one other being there. The
# survivors are scaled by 1/(1 − p) *during training* ("inverted" dropout),
# so the expected value of every element is unchanged and evaluation needs
# no rescaling at all: in eval mode, and for p = 0, `dropout` returns its
# input itself. p = 1 zeroes everything. (The given first lines refuse a
# p outside [0, 1].)
#
# The mask must come from tinyflo's seeded generator, drawn one way, so that
# `manual_seed` reproduces the reference's mask bit for bit (the tests below
# compare with it): per call, draw once `u = rand(x.shape, device=x.device)`
# (`rand` of module 01, float32 whatever x's dtype), keep the elements where
# `u < 1 − p` (a Python float), and multiply `x` by the constant tensor
# `keep.astype(x.dtype) * x.dtype.type(1 / (1 − p))`, so that the gradient
# flows through exactly the kept elements, scaled the same way. Keep the
# input's dtype.
#
# `dropout(x, p=0.5, training=True)` is the function; `Dropout(p)` the
# module, which passes its own `training` flag.
#
# **Checked when graded** (besides the tests below), with inputs, p and a
# seed drawn for you:
#
# * dropout(x, training=False) returns x itself
# * p = 1 zeroes everything
# * Dropout(p) in training zeroes a fraction p of the elements, each on its own
# * the kept elements are scaled by 1/(1 − p)
# * manual_seed reproduces Dropout's mask: the same seed, the same mask (draw it with rand)
# * the next call draws a new mask
# * dropout with p outside [0, 1] must raise ValueError
# * the ValueError should name p
# * dropout keeps float64
# * repr must be Dropout(p=…), with the module's p

# %% nbgrader={"grade": false, "grade_id": "layers_dropout_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1 − p) (training only)."""
    check_tensor("dropout", "x", x)
    check_arg("dropout", "p", p, "a number in [0, 1]")
    check_arg("dropout", "training", training, "True or False")
    ### BEGIN SOLUTION
    if not is_floating(x.dtype):
        raise TypeError(f"dropout: expected a floating tensor; got {x.dtype}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = 1 - p
    mask = rand(x.shape, device=x.device).data < keep
    scale = mask.astype(x.dtype) * x.dtype.type(1 / keep)
    return x * Tensor._wrap(scale, x.device)
    ### END SOLUTION


class Dropout(Module):
    """Inverted dropout: active in training mode, the identity in eval mode."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_arg("Dropout", "p", p, "a number in [0, 1]")

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# %% nbgrader={"grade": true, "grade_id": "layers_dropout", "locked": true, "points": 2, "schema_version": 3, "solution": false}
all_ones = Tensor(np.ones((200, 100), np.float32), requires_grad=True)
manual_seed(1)
out = dropout(all_ones, 0.3)
kept = out.numpy() != 0
assert abs(kept.mean() - 0.7) < 0.02 and np.allclose(out.numpy()[kept], 1 / 0.7) and out.dtype == np.float32
assert abs(out.numpy().mean() - 1) < 0.03, "inverted dropout keeps the mean"
manual_seed(1)
assert np.array_equal(dropout(all_ones, 0.3).numpy(), out.numpy()), "manual_seed reproduces the mask"
out.sum().backward()
assert np.array_equal(all_ones.grad.numpy(), out.numpy()), "the gradient flows through the kept elements"
layer = Dropout(0.5)
assert np.array_equal(layer.eval()(all_ones).numpy(), all_ones.numpy()) and layer.eval()(all_ones) is all_ones and dropout(all_ones, 0.0) is all_ones
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task. With
# 40,000 elements or more, the fraction dropped lies within 0.01 of p.
_p = round(float(check_rng.uniform(0.2, 0.8)), 2)
_X = check_rng.uniform(0.5, 2.0, (int(check_rng.integers(200, 300)), int(check_rng.integers(200, 300)))).astype(np.float32)
_x = Tensor(_X, requires_grad=True)
assert np.array_equal(dropout(_x, _p, training=False).numpy(), _X) and dropout(_x, _p, training=False) is _x, (
    "dropout(x, training=False) returns x itself"
)
assert float(np.abs(dropout(_x, 1.0).numpy()).max()) == 0.0, "p = 1 zeroes everything"
_layer = Dropout(_p)
_layer.train()
_y = _layer(_x).numpy()
assert np.allclose((_y == 0).mean(), _p, rtol=0, atol=0.02), "Dropout(p) in training zeroes a fraction p of the elements, each on its own"
assert np.allclose((_y / _X)[_y != 0], 1 / (1 - _p), rtol=1e-5, atol=0), "the kept elements are scaled by 1/(1 − p)"
_seed = int(check_rng.integers(0, 2**31))
manual_seed(_seed)
_first = _layer(_x).numpy()
manual_seed(_seed)
assert float(np.abs(_layer(_x).numpy() - _first).max()) == 0.0, (
    "manual_seed reproduces Dropout's mask: the same seed, the same mask (draw it with rand)"
)
assert float(np.abs(_layer(_x).numpy() - _first).max()) > 0, "the next call draws a new mask"
for _bad in (-round(float(check_rng.uniform(0.01, 1.0)), 2), round(float(check_rng.uniform(1.01, 3.0)), 2)):
    try:
        dropout(_x, _bad)
        raise AssertionError("dropout with p outside [0, 1] must raise ValueError")
    except ValueError as err:
        assert _close_text(str(err), [_bad]), "the ValueError should name p"
assert str(dropout(Tensor(check_rng.standard_normal(int(check_rng.integers(2, 20)))), _p).dtype) == "float64", "dropout keeps float64"
_p2 = round(float(check_rng.uniform(0.05, 0.95)), 2)
assert repr(Dropout(_p2)) == f"Dropout(p={_p2})", "repr must be Dropout(p=…), with the module's p"
### END HIDDEN TESTS

# %% [markdown]
# ### Normalisation layers
#
# Normalisation layers rescale activations to mean 0 and variance 1, then
# let the network choose the scale and shift it wants with a learned weight
# γ (initially 1) and bias β (initially 0):
# y = (x − mean) / √(var + eps) · γ + β. They differ in *what* they average
# over. Build both from module 01's ops (`mean`, `-`, `*`, `sqrt`), so they
# need no backward of their own. A float16 input is normalised in float32
# (`x._accurate()`, module 01) and the result cast back to the input's
# dtype: in float16 a square overflows once |x − mean| passes 256.
#
# ### Task `layers_layer_norm` (1 point): `LayerNorm`
#
# **`LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True)`**
# normalises each example over its last `len(normalized_shape)` axes
# (`normalized_shape` may be an int or a tuple). It behaves the same in
# training and evaluation. γ and β have shape `normalized_shape` (named
# `weight` and `bias`; none with `elementwise_affine=False`). An input whose
# trailing axes are not `normalized_shape` is a `ShapeError` naming both:
# `LayerNorm((4,)) got input of shape (6, 5); expected (..., 4)`.
# The variance is the biased one (divide by n).
#
# **Checked when graded** (besides the tests below), with shapes, inputs,
# γ and β drawn for you:
#
# * LayerNorm keeps float32
# * LayerNorm((a, b)) normalises each example over its last two axes together
# * LayerNorm((a, b)) must have correct gradients
# * the output is scaled by weight (γ) and shifted by bias (β)
# * eps is added to the variance, inside the square root (rows of values about 10⁻³ apart)
# * elementwise_affine=False: no weight, no bias
# * elementwise_affine=False still normalises
# * a float16 input is normalised in float32 and handed back as float16
# * float16 with values of ±300 to ±1000 must normalise without overflow
# * LayerNorm(k) on an input whose last axis is not k must raise ShapeError
# * the ShapeError should name the input's shape

# %% nbgrader={"grade": false, "grade_id": "layers_layer_norm_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class LayerNorm(Module):
    """Normalise each example over its last axes, then scale and shift (learned)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        check_arg("LayerNorm", "normalized_shape", normalized_shape, "a positive integer or a tuple of them")
        check_arg("LayerNorm", "eps", eps, "a number >= 0")
        check_arg("LayerNorm", "elementwise_affine", elementwise_affine, "True or False")
        shape = (int(normalized_shape),) if _is_integer(normalized_shape) else tuple(map(int, normalized_shape))
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(shape, dtype=dtype, device=device))
            self.bias = Parameter(zeros(shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        k = len(self.normalized_shape)
        if x.ndim < k or x.shape[x.ndim - k:] != self.normalized_shape:
            raise ShapeError(
                f"LayerNorm({self.normalized_shape}) got input of shape {x.shape}; "
                f"expected (..., {', '.join(map(str, self.normalized_shape))})"
            )
        axes = tuple(range(x.ndim - k, x.ndim))
        dtype, x = x.dtype, x._accurate()  # float16 squares overflow past |x - mean| ≈ 256
        centered = x - x.mean(axis=axes, keepdims=True)
        var = (centered * centered).mean(axis=axes, keepdims=True)
        out = centered / (var + self.eps).sqrt()
        if self.weight is not None:
            out = out * self.weight + self.bias
        if AutocastMode.policy is not None:  # inside autocast() (module 11) a norm hands on float32
            return out
        return out.to(dtype=dtype)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


# %% nbgrader={"grade": true, "grade_id": "layers_layer_norm", "locked": true, "points": 1, "schema_version": 3, "solution": false}
rng = np.random.default_rng(0)
X = rng.standard_normal((6, 4)).astype(np.float32) * 3 + 1
ln = LayerNorm(4)
y = ln(Tensor(X)).numpy()
assert np.allclose(y, (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + 1e-5), atol=1e-5)
assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"] and ln.weight.tolist() == [1, 1, 1, 1]
x64 = Tensor(X.astype(np.float64), requires_grad=True)
assert gradcheck(lambda t: LayerNorm(4).to(float64)(t), x64)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
def _normed(x, axes, eps=1e-5):
    """(x − mean) / √(var + eps) over ``axes``, in NumPy: what LayerNorm must give."""
    centered = x - x.mean(axis=axes, keepdims=True)
    return centered / np.sqrt((centered ** 2).mean(axis=axes, keepdims=True) + eps)


_n, _w = int(check_rng.integers(2, 7)), int(check_rng.integers(3, 8))
_X = (check_rng.standard_normal((_n, _w)) * check_rng.uniform(0.5, 4.0) + check_rng.uniform(-3.0, 3.0)).astype(np.float32)
assert str(LayerNorm(_w)(Tensor(_X)).dtype) == "float32", "LayerNorm keeps float32"
_a, _b = int(check_rng.integers(2, 4)), int(check_rng.integers(2, 4))
_X4 = check_rng.standard_normal((_n, _a, _b)).astype(np.float32)
assert np.allclose(LayerNorm((_a, _b))(Tensor(_X4)).numpy(), _normed(_X4, (1, 2)), atol=1e-5), (
    "LayerNorm((a, b)) normalises each example over its last two axes together"
)
_x64 = Tensor(check_rng.standard_normal((2, _a, _b)), requires_grad=True)
assert gradcheck(lambda t: LayerNorm((_a, _b)).to(float64)(t), _x64), "LayerNorm((a, b)) must have correct gradients"
_gamma, _beta = check_rng.uniform(0.5, 3.0, _w).astype(np.float32), check_rng.standard_normal(_w).astype(np.float32)
_affine = LayerNorm(_w)
with no_grad():
    _affine.weight[...] = _gamma
    _affine.bias[...] = _beta
assert np.allclose(_affine(Tensor(_X)).numpy(), _normed(_X, 1) * _gamma + _beta, atol=1e-4), (
    "the output is scaled by weight (γ) and shifted by bias (β)"
)
_tiny = (check_rng.permutation(_w) * 1e-3 + check_rng.uniform(-1.0, 1.0, (_n, 1))).astype(np.float32)
assert np.allclose(LayerNorm(_w)(Tensor(_tiny)).numpy(), _normed(_tiny.astype(np.float64), 1), atol=1e-3), (
    "eps is added to the variance, inside the square root (rows of values about 10⁻³ apart)"
)
_plain = LayerNorm(_w, elementwise_affine=False)
assert [n for n, _ in _plain.named_parameters()] == [] and _plain.weight is None, "elementwise_affine=False: no weight, no bias"
assert np.allclose(_plain(Tensor(_X)).numpy(), _normed(_X, 1), atol=1e-5), "elementwise_affine=False still normalises"
# every row holds values of both signs, 300 to 1000 in size: some |x − mean| passes 256, whose square overflows float16
_signs = np.resize([1.0, -1.0], _w)
_H = np.stack([check_rng.permutation(_signs) for _ in range(_n)]) * check_rng.uniform(300.0, 1000.0, (_n, _w))
_half = Tensor(_H.astype(np.float16))
_h = LayerNorm(_w)(_half)
assert str(_h.dtype) == "float16" and np.all(np.isfinite(_h.numpy())), "a float16 input is normalised in float32 and handed back as float16"
assert np.allclose(_h.numpy().astype(np.float32), _normed(_H.astype(np.float16).astype(np.float32), 1), atol=1e-2), (
    "float16 with values of ±300 to ±1000 must normalise without overflow"
)
_k = _w + int(check_rng.integers(1, 4))
try:
    LayerNorm(_k)(Tensor(_X))
    raise AssertionError("LayerNorm(k) on an input whose last axis is not k must raise ShapeError")
except ShapeError as err:
    assert _close_text(str(err), ["got input of shape", str(_X.shape)]), "the ShapeError should name the input's shape"
### END HIDDEN TESTS

# %% [markdown]
# `layer_norm(x, normalized_shape, weight, bias, eps)` is PyTorch's functional
# form (given): it runs your `LayerNorm`'s `forward` with the weight and
# bias it is handed.

# %%
#| export
def layer_norm(input: Tensor, normalized_shape: int | tuple[int, ...], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last axes (``normalized_shape``), then scale by ``weight`` and shift by ``bias``."""
    check_tensor("layer_norm", "input", input)
    check_arg("layer_norm", "normalized_shape", normalized_shape, "a positive integer or a tuple of them")
    check_arg("layer_norm", "eps", eps, "a number >= 0")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_tensor("layer_norm", name, t)
    return _layer_norm(input, normalized_shape, weight, bias, eps)


def _layer_norm(input: Tensor, normalized_shape: int | tuple[int, ...], weight: Tensor | None,
                bias: Tensor | None, eps: float) -> Tensor:
    """layer_norm once its arguments are known to be good: LayerNorm's forward on them."""
    if bias is not None and weight is None:
        raise ValueError("layer_norm: a bias without a weight is not supported; give weight=ones")
    shape = (int(normalized_shape),) if _is_integer(normalized_shape) else tuple(map(int, normalized_shape))
    held = types.SimpleNamespace(normalized_shape=shape, eps=eps, weight=weight, bias=bias,
                                 elementwise_affine=weight is not None)
    return _composed_layer_norm_forward(held, input)


_composed_layer_norm_forward = LayerNorm.forward

# %% [markdown] tinyflo={"given_after": "layers_layer_norm"}
# ### The same normalisation as one graph node (given)
#
# The `LayerNorm` you wrote is the definition: about eight graph nodes
# (mean, subtract, square, mean, add, sqrt, divide, scale, shift), each
# keeping an array for backward. A transformer calls it twice per block, so
# frameworks fuse it. With x̂ = (x − μ) · r, r = 1/√(σ² + eps), y = x̂ γ + β
# and g the gradient of y, the derivative on paper (means over the
# normalised axes) is
#
# * ∂L/∂x = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)), where ĝ = g ⊙ γ;
# * ∂L/∂γ = Σ g ⊙ x̂ and ∂L/∂β = Σ g, summed over the other axes.
#
# `LayerNormFn` keeps only x̂ and r. From this cell on `layer_norm` and
# `LayerNorm` run it (float16 is still normalised in float32). On the CPU
# it takes the rows in blocks that fit a core's cache, on every core
# (module 01's `parallel`); ∂L/∂γ and ∂L/∂β add one share per block, in
# block order, so they come out the same on any number of threads. The
# tests check it against your composed form, against PyTorch and against
# central differences.

# %% tinyflo={"given_after": "layers_layer_norm"}
#| export
class LayerNormFn(Function):
    """(x − mean) / √(var + eps) · weight + bias over the last ``n`` axes, as one node.

    The input is seen as rows of the normalised values, and each mean over a row is a product
    with a vector of 1/n: a BLAS matrix-vector product, several times faster in NumPy than a
    reduction along short rows. On the CPU the rows go in cache-sized blocks, on every thread
    (`parallel`, module 01); the weight's and bias's gradients add one share per block, in block
    order, so they have the same bits for any thread count.
    """

    def forward(self, x, *affine, n=1, eps=1e-5):
        xp = self.xp
        rows = x.reshape(-1, math.prod(x.shape[x.ndim - n:]))
        count, width = rows.shape
        average = xp.full(width, 1 / width, dtype=x.dtype)
        weight = affine[0].reshape(-1) if affine else None
        bias = affine[1].reshape(-1) if len(affine) > 1 else None
        normed, out = xp.empty_like(rows), xp.empty_like(rows)
        rstd = xp.empty((count, 1), dtype=x.dtype)
        eps = x.dtype.type(eps)
        # rows per block: cache-sized on the CPU; on a GPU one block, as parallel runs it there
        self.block = per_block(width) if xp is np else max(count, 1)

        def block(start, stop):
            xb, nb, ob = rows[start:stop], normed[start:stop], out[start:stop]
            xp.subtract(xb, (xb @ average)[:, None], out=nb)
            xp.multiply(nb, nb, out=ob)  # out holds the squares for a moment
            rb = rstd[start:stop]
            xp.sqrt((ob @ average)[:, None] + eps, out=rb)
            xp.divide(1, rb, out=rb)
            nb *= rb
            if weight is None:
                ob[...] = nb  # x̂ is saved: hand out another array
            else:
                xp.multiply(nb, weight, out=ob)
                if bias is not None:
                    ob += bias

        parallel(block, count, self.block, xp)
        self.shape, self.normalized, self.average = x.shape, x.shape[x.ndim - n:], average
        self.save_for_backward(normed, rstd, *(() if weight is None else (weight,)))
        return out.reshape(x.shape)

    def backward(self, grad):
        xp = self.xp
        normed, rstd, *weight = self.saved
        g = grad.reshape(normed.shape)
        needs = self.needs_input_grad
        want_w, want_b = len(needs) > 1 and needs[1], len(needs) > 2 and needs[2]
        count = normed.shape[0]
        blocks = block_count(count, self.block)
        shares_w = xp.empty((blocks, normed.shape[1]), dtype=g.dtype) if want_w else None
        shares_b = xp.empty((blocks, normed.shape[1]), dtype=g.dtype) if want_b else None
        dx = xp.empty_like(normed) if needs[0] else None
        scaled = self.average * weight[0] if weight else self.average  # a mean of ĝ = g ⊙ γ is g @ (γ/n)

        def block(start, stop):
            gb, nb = g[start:stop], normed[start:stop]
            gn = gb * nb
            if want_w:
                xp.sum(gn, axis=0, out=shares_w[start // self.block])
            if want_b:
                xp.sum(gb, axis=0, out=shares_b[start // self.block])
            if dx is not None:  # r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂))
                db = dx[start:stop]
                if weight:
                    xp.multiply(gb, weight[0], out=db)
                else:
                    db[...] = gb
                db -= (gb @ scaled)[:, None]
                nb_mean = (gn @ scaled)[:, None]
                gn = xp.multiply(nb, nb_mean, out=gn)
                db -= gn
                db *= rstd[start:stop]

        parallel(block, count, self.block, xp)
        grads = [None if dx is None else dx.reshape(self.shape)]
        if len(needs) > 1:
            grads.append(shares_w.sum(axis=0).reshape(self.normalized) if want_w else None)
        if len(needs) > 2:
            grads.append(shares_b.sum(axis=0).reshape(self.normalized) if want_b else None)
        return tuple(grads)


def _layer_norm(input: Tensor, normalized_shape: int | tuple[int, ...], weight: Tensor | None,
                bias: Tensor | None, eps: float) -> Tensor:
    """layer_norm once its arguments are known to be good (a LayerNorm checked its own when it was built), fused."""
    shape = (int(normalized_shape),) if _is_integer(normalized_shape) else tuple(map(int, normalized_shape))
    k = len(shape)
    if input.ndim < k or input.shape[input.ndim - k:] != shape:
        raise ShapeError(f"LayerNorm({shape}) got input of shape {input.shape}; "
                         f"expected (..., {', '.join(map(str, shape))})")
    if bias is not None and weight is None:
        raise ValueError("layer_norm: a bias without a weight is not supported; give weight=ones")
    dtype, x = input.dtype, input._accurate()  # float16 squares overflow past |x - mean| ≈ 256
    affine = [t for t in (weight, bias) if t is not None]
    out = LayerNormFn.apply(x, *affine, n=k, eps=float(eps))
    if AutocastMode.policy is not None:  # inside autocast() (module 11) a norm hands on float32
        return out
    return out.to(dtype=dtype)


def _fused_layer_norm_forward(self: LayerNorm, x: Tensor) -> Tensor:
    return _layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


LayerNorm.forward = _fused_layer_norm_forward

# %% [markdown]
# ### Task `layers_batch_norm` (2 points): `BatchNorm1d` and its running statistics
#
# **`BatchNorm1d(num_features, eps=1e-5, momentum=0.1)`** normalises each
# *feature* (channel) over the batch: the input is (N, C) or (N, C, L), and
# statistics are taken over axis 0 (and axis 2). Anything else, or C ≠
# `num_features`, is a `ShapeError` in the same words:
# `BatchNorm1d(4) got input of shape (6, 5); expected (N, 4) or (N, 4, L)`. At evaluation time there may be one
# example, so the layer keeps running estimates, as buffers
# `running_mean` (zeros), `running_var` (ones) and `num_batches_tracked`
# (an int64 0-d counter). PyTorch's rule, which you must match exactly:
#
# * **training**: normalise with the batch mean and the **biased** batch
#   variance (÷ n), where n = N (or N·L) values per channel; then, outside
#   the graph, count the batch (`num_batches_tracked += 1`) and update
#   `running = (1 − momentum) · running + momentum · batch_stat`, using the
#   **unbiased** variance (÷ (n − 1)) for `running_var`. With
#   `momentum=None` the factor is 1/num_batches_tracked (a plain average
#   of all batches so far). Training with n = 1 is a `ValueError` (no
#   variance to estimate).
# * **evaluation**: normalise with `running_mean` and `running_var`; the
#   buffers do not change.
#
# γ and β are `weight` and `bias` of shape (C,), reshaped to broadcast along
# axis 1. The running buffers are updated in place, keeping their dtype.
# As for LayerNorm, a float16 input is normalised in float32.
#
# **Checked when graded** (besides the tests below), with sizes, batches,
# momentum, γ and β drawn for you:
#
# * step t: an (N, C, L) input is normalised per channel over axes 0 and 2, then scaled by γ and shifted by β
# * with momentum m, running_mean after the batches is (1 − m) · running + m · batch mean, batch after batch
# * with momentum m, running_var after the batches is (1 − m) · running + m · unbiased batch variance, batch after batch
# * the buffers keep their dtypes
# * every training batch is counted
# * momentum=None averages all batches so far: running_mean and running_var
# * BatchNorm1d in training must have correct gradients
# * an input that is not (N, C) or (N, C, L) with C = num_features must raise ShapeError
# * the ShapeError should name the input's shape
# * training on one value per channel must raise ValueError
# * in eval mode a batch of one is fine: (x − running_mean) / √(running_var + eps)
# * a float16 input is normalised in float32 and handed back as float16

# %% nbgrader={"grade": false, "grade_id": "layers_batch_norm_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class BatchNorm1d(Module):
    """Normalise each channel over the batch; running statistics for evaluation."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__  # BatchNorm2d (module 10) too
        check_arg(name, "num_features", num_features, "a positive integer")
        check_arg(name, "eps", eps, "a number >= 0")
        check_arg(name, "momentum", momentum, "a number in [0, 1] or None")
        check_arg(name, "affine", affine, "True or False")
        self.num_features, self.eps, self.momentum, self.affine = num_features, eps, momentum, affine
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
        self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
        self.register_buffer("num_batches_tracked", Tensor(0, device=device))

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            c = self.num_features
            raise ShapeError(
                f"BatchNorm1d({c}) got input of shape {x.shape}; expected (N, {c}) or (N, {c}, L)"
            )
        axes = (0,) if x.ndim == 2 else (0, 2)
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        dtype, x = x.dtype, x._accurate()  # statistics in float32 for float16 input, as LayerNorm
        if self.training:
            n = x.numel() // self.num_features
            if n < 2:
                raise ValueError(f"BatchNorm1d: training needs more than 1 value per channel; got input of shape {x.shape}")
            mean = x.mean(axis=axes)
            centered = x - mean.reshape(shape)
            var = (centered * centered).mean(axis=axes)
            with no_grad():
                self.num_batches_tracked.data += 1
                factor = self.momentum if self.momentum is not None else 1 / int(self.num_batches_tracked.item())
                for running, stat in ((self.running_mean, mean.data), (self.running_var, var.data * (n / (n - 1)))):
                    running.data[...] = (1 - factor) * running.data + factor * stat
            out = centered / (var.reshape(shape) + self.eps).sqrt()
        else:
            out = (x - self.running_mean.reshape(shape)) / (self.running_var.reshape(shape) + self.eps).sqrt()
        if self.weight is not None:
            out = out * self.weight.reshape(shape) + self.bias.reshape(shape)
        if AutocastMode.policy is not None:  # inside autocast() (module 11) a norm hands on float32
            return out
        return out.to(dtype=dtype)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


# %% nbgrader={"grade": true, "grade_id": "layers_batch_norm", "locked": true, "points": 2, "schema_version": 3, "solution": false}
rng = np.random.default_rng(0)
X = rng.standard_normal((6, 4)).astype(np.float32) * 3 + 1
x64 = Tensor(X.astype(np.float64), requires_grad=True)
bn = BatchNorm1d(4)
assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
y = bn(Tensor(X)).numpy()
assert np.allclose(y, (X - X.mean(0)) / np.sqrt(X.var(0) + 1e-5), atol=1e-5), "biased variance in training"
assert np.allclose(bn.running_mean.numpy(), 0.1 * X.mean(0), atol=1e-6)
assert np.allclose(bn.running_var.numpy(), 0.9 + 0.1 * X.var(0, ddof=1), atol=1e-5), "unbiased in the running estimate"
assert bn.num_batches_tracked.item() == 1
bn.eval()
y = bn(Tensor(X)).numpy()
assert np.allclose(y, (X - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5), atol=1e-5)
assert bn.num_batches_tracked.item() == 1, "evaluation does not update the statistics"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_C, _N, _L = int(check_rng.integers(2, 6)), int(check_rng.integers(3, 8)), int(check_rng.integers(2, 6))
_m = round(float(check_rng.uniform(0.2, 0.8)), 2)
_steps = int(check_rng.integers(2, 5))
_gamma, _beta = check_rng.uniform(0.5, 3.0, _C).astype(np.float32), check_rng.standard_normal(_C).astype(np.float32)
_bn = BatchNorm1d(_C, momentum=_m)
with no_grad():
    _bn.weight[...] = _gamma
    _bn.bias[...] = _beta
_rm, _rv = np.zeros(_C), np.ones(_C)
for _step in range(_steps):
    _batch = (check_rng.standard_normal((_N, _C, _L)) * check_rng.uniform(0.5, 3.0) + check_rng.uniform(-2.0, 2.0)).astype(np.float32)
    _y = _bn(Tensor(_batch)).numpy()
    _mean, _var = _batch.mean(axis=(0, 2)), _batch.var(axis=(0, 2))
    _expected = (_batch - _mean[None, :, None]) / np.sqrt(_var[None, :, None] + 1e-5) * _gamma[None, :, None] + _beta[None, :, None]
    assert np.allclose(_y, _expected, atol=1e-4), (
        f"step {_step}: an (N, C, L) input is normalised per channel over axes 0 and 2, then scaled by γ and shifted by β"
    )
    _rm, _rv = (1 - _m) * _rm + _m * _mean, (1 - _m) * _rv + _m * _batch.var(axis=(0, 2), ddof=1)
assert np.allclose(_bn.running_mean.numpy(), _rm, atol=1e-5), (
    "with momentum m, running_mean after the batches is (1 − m) · running + m · batch mean, batch after batch"
)
assert np.allclose(_bn.running_var.numpy(), _rv, atol=1e-5), (
    "with momentum m, running_var after the batches is (1 − m) · running + m · unbiased batch variance, batch after batch"
)
assert [str(_bn.running_mean.dtype), str(_bn.running_var.dtype), str(_bn.num_batches_tracked.dtype)] == ["float32", "float32", "int64"], (
    "the buffers keep their dtypes"
)
assert _bn.num_batches_tracked.item() == _steps, "every training batch is counted"
_avg = BatchNorm1d(_C, momentum=None)
_means, _vars = [], []
for _step in range(_steps):
    _batch = (check_rng.standard_normal((_N, _C)) * check_rng.uniform(0.5, 3.0) + check_rng.uniform(-2.0, 2.0)).astype(np.float32)
    _avg(Tensor(_batch))
    _means.append(_batch.mean(axis=0))
    _vars.append(_batch.var(axis=0, ddof=1))
assert np.allclose([_avg.running_mean.numpy(), _avg.running_var.numpy()], [np.mean(_means, axis=0), np.mean(_vars, axis=0)], atol=1e-5), (
    "momentum=None averages all batches so far: running_mean and running_var"
)
_x64 = Tensor(check_rng.standard_normal((_N, _C)), requires_grad=True)
assert gradcheck(lambda t: BatchNorm1d(_C).to(float64)(t), _x64), "BatchNorm1d in training must have correct gradients"
_X2 = check_rng.standard_normal((_N, _C)).astype(np.float32)
_wrong_c = _C + int(check_rng.integers(1, 4))
for _bad, _shape in ((lambda: BatchNorm1d(_wrong_c)(Tensor(_X2)), _X2.shape), (lambda: BatchNorm1d(_C)(Tensor(_X2[0])), _X2[0].shape)):
    try:
        _bad()
        raise AssertionError("an input that is not (N, C) or (N, C, L) with C = num_features must raise ShapeError")
    except ShapeError as err:
        assert _close_text(str(err), ["got input of shape", str(_shape)]), "the ShapeError should name the input's shape"
try:
    BatchNorm1d(_C)(Tensor(_X2[:1]))
    raise AssertionError("training on one value per channel must raise ValueError")
except ValueError:
    pass
assert np.allclose(BatchNorm1d(_C).eval()(Tensor(_X2[:1])).numpy(), _X2[:1] / np.sqrt(1 + 1e-5), atol=1e-6), (
    "in eval mode a batch of one is fine: (x − running_mean) / √(running_var + eps)"
)
_H = (check_rng.standard_normal((_N, _C)) * 600).astype(np.float16)
_h = BatchNorm1d(_C)(Tensor(_H))
_H32 = _H.astype(np.float32)
assert str(_h.dtype) == "float16" and np.allclose(
    _h.numpy().astype(np.float32), (_H32 - _H32.mean(axis=0)) / np.sqrt(_H32.var(axis=0) + 1e-5), atol=1e-2
), "a float16 input is normalised in float32 and handed back as float16"
### END HIDDEN TESTS

# %% [markdown]
# ## Putting it together
#
# A small classifier, its parameter count, and one training step by hand
# (module 06 writes the optimizers):

# %%
manual_seed(0)
model = Sequential(Linear(20, 64), BatchNorm1d(64), GELU(), Dropout(0.1), Linear(64, 3), LogSoftmax())
print(model)
xb = randn(32, 20)
yb = np.arange(32) % 3
for step in range(3):
    logp = model(xb)
    loss = -logp[np.arange(32), yb].mean()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data -= 0.1 * p.grad.data  # plain SGD, outside the graph
    print(f"step {step}: loss {loss.item():.4f}")

# %% [markdown]
# ## Systems corner
#
# * **Where the parameters are.** `Linear(784, 128)` holds 100,480 numbers
#   (400 KB in float32); a batch of 32 activations of that layer is 4,096
#   numbers. For small batches the weights dominate memory; for large ones
#   (and for convolutions) the saved activations do.
# * **FLOPs.** A `Linear` forward is one matmul of 2·N·in·out FLOPs; its
#   backward two more of the same size (one fewer for the first layer,
#   whose input needs no gradient — `LinearFn` skips it, as module 01's
#   `MatMul` does).
# * **Moving in place.** `Module.to()` swaps each parameter's array, not the
#   parameter. An optimizer built before `model.to("cuda")` holds the same
#   `Parameter` objects, so it keeps working — PyTorch had to add this rule
#   after many users moved models *after* building their optimizers.
# * **Dropout's randomness is a sync point only if you make it one.** The
#   mask is drawn on the tensor's device; nothing crosses to the host.
#   `Embedding`'s range check reads two numbers back (`min` and `max`).
#   That is free on the CPU; on a GPU it would be a sync per call, so there
#   (`device.reads_wait`) the given `_lookup_without_reading` keeps the
#   check on the device: an index out of range gets a row of NaN instead of
#   an error, never another row's weights, and the NaN reaches the loss,
#   which the Trainer checks. Without a loss (generating text) NaN logits
#   make `argmax` answer 0: validate token ids once, where they are made.
# * **BatchNorm and the batch.** In training mode an example's output
#   depends on the rest of its batch, and a batch of one has no variance.
#   That is why `eval()` matters before inference, and why LayerNorm
#   (per example) took over in transformers.
