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
# # Module 11 — Mixed precision
#
# A float32 number takes 4 bytes; a float16 or bfloat16 number takes 2. On a
# GPU with tensor cores a 16-bit matrix product runs several times faster
# than a float32 one, and every activation kept for backward takes half the
# memory. *Mixed precision* trains with 16-bit matmuls while keeping
# everything that 16 bits would spoil in float32:
#
# * **autocast**: inside `with autocast("float16"):` matmuls, linear layers
#   and convolutions compute in 16 bits; softmax, log-softmax, sums, norms
#   and every loss run in float32. Which op does what is one table.
# * **master weights**: the parameters stay float32. Each forward casts a
#   16-bit copy for the matmul; the gradient flows back through that cast and
#   reaches the parameter as float32, where the optimizer adds it.
# * **loss scaling**: small gradients underflow to zero in float16. Multiply
#   the loss by a large factor before backward, divide the gradients by it
#   before the step, and lower the factor when something overflows.
#
# | task | points | what |
# |---|---|---|
# | `amp_policy` | 2 | the policy's `cast_inputs` / `cast_output`: which inputs to cast, to what |
# | `amp_autocast` | 2 | `autocast` as a context manager and a decorator |
# | `amp_grad_scaler_unscale` | 3 | unscale the gradients in place and find inf/NaN, without a sync |
# | `amp_grad_scaler_update` | 3 | the dynamic scale: back off on overflow, grow after a clean stretch |
#
# The names and defaults are PyTorch's (`torch.autocast`,
# `torch.amp.GradScaler`), so the skills transfer.

# %%
#| default_exp core.amp

# %%
#| export
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.amp: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.amp"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
#| export
from tinyflo.core.autograd import no_grad
from tinyflo.core.tensor import (
    AutocastMode,
    Function,
    Tensor,
    as_dtype,
    bfloat16,
    brief,
    described,
    device_of,
    float16,
    float32,
    float64,
    is_floating,
)
from tinyflo.core.training import Precision, register_plugin

# %%
import tinyflo
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy, mse_loss
from tinyflo.core.optim import SGD

# %% [markdown]
# ## Sixteen bits, two ways
#
# A floating-point number is a sign, an exponent (how big) and a mantissa
# (how precise). float16 and bfloat16 spend their 16 bits differently:
#
# | format | sign · exponent · mantissa | largest | smallest normal | eps (1 → next) |
# |---|---|---|---|---|
# | float32 | 1 · 8 · 23 | 3.4e38 | 1.2e-38 | 1.2e-7 |
# | float16 | 1 · 5 · 10 | 65504 | 6.1e-5 (subnormals to 6e-8) | 9.8e-4 |
# | bfloat16 | 1 · 8 · 7 | 3.4e38 | 1.2e-38 | 7.8e-3 |
#
# float16 keeps more precision but its range is tiny: anything above 65504 is
# `inf`, anything below about 6e-8 is 0. bfloat16 ("brain float") keeps
# float32's exponent — the same range, so no loss scaling is needed — but
# only about 3 significant digits. On NumPy, bfloat16 comes from the
# `ml_dtypes` package (`pip install ml_dtypes`); CuPy has no bfloat16 dtype,
# so on the GPU tinyflo's autocast works in float16.
#
# With 10 mantissa bits, float16 counts exactly only up to 2048: 2049 is not
# a float16 number. Sums suffer first: adding ones one at a time, a float16
# total gets stuck at 2048, because 2048 + 1 rounds back to 2048.

# %%
for name, dt in (("float32", float32), ("float16", float16)) + ((("bfloat16", bfloat16),) if bfloat16 else ()):
    info = np.finfo(dt) if dt != bfloat16 else __import__("ml_dtypes").finfo(dt)  # NumPy's finfo knows no bfloat16
    print(f"{name:9s} max {float(info.max):.4g}  tiny {float(info.tiny):.3g}  eps {float(info.eps):.3g}")
print("float16(2049) =", np.float16(2049))
total = np.float16(0)
for _ in range(3000):
    total += np.float16(1)
print("3000 ones added in float16:", total, "  in float32:", np.ones(3000, np.float32).sum())

# %% [markdown]
# ## Which op runs in which precision: one table
#
# A matrix product of float16 inputs is where the speed is (tensor cores
# multiply float16 and *accumulate in float32* inside the GEMM), and its
# result is well within float16's range for activations of a healthy
# network. A sum over thousands of elements, a softmax's exponentials, a
# logarithm, a loss: those need float32's range or its precision. So:
#
# * `"low"`: cast floating inputs to the autocast dtype (float16 or
#   bfloat16). float64 inputs are left alone: float64 is always a deliberate
#   choice (gradchecks), as in PyTorch.
# * `"float32"`: cast float16 / bfloat16 inputs up to float32 (float64 stays
#   float64).
# * an op not in the table runs **as it comes**: elementwise ops such as
#   `relu`, `tanh`, additions, reshapes keep their inputs' dtype (a binary op
#   with one float16 and one float32 input gives float32, module 01's rule).
#
# `"loss"` is not an op but the entry every loss of module 04 goes through
# (`_input`), so each loss computes in float32. The norms (`LayerNorm`,
# `BatchNorm1d/2d`) already compute their statistics in float32; under
# autocast they hand on float32 too. `RUNS_AS_IT_COMES` lists the ops that
# were reviewed and deliberately left out of the table: a test checks that
# every `Function` in tinyflo is in one of the two, so a new op cannot slip
# through without someone deciding.

# %%
#| export
AUTOCAST_POLICY: dict[str, str] = {
    # where the speed is: tensor cores multiply 16-bit inputs
    "MatMul": "low",
    "LinearFn": "low",
    "Conv2dFn": "low",
    # where float16 loses range or precision: exponentials, logarithms, powers, long sums
    "SoftmaxFn": "float32",
    "LogSoftmaxFn": "float32",
    "Exp": "float32",
    "Log": "float32",
    "Pow": "float32",
    "Sqrt": "float32",
    "SoftplusFn": "float32",
    "Sum": "float32",
    "ScaledDotProductAttentionFn": "float32",  # a softmax inside
    "LayerNormFn": "float32",  # squares and a long mean
    # every loss: the module-04 losses' entry point, and the losses that are Functions themselves
    "loss": "float32",
    "BinaryCrossEntropyFn": "float32",
    "CrossEntropyFn": "float32",
    "CTCLossFn": "float32",
}

RUNS_AS_IT_COMES: frozenset[str] = frozenset({
    "To",  # the cast itself: never re-cast
    "Add", "Sub", "Mul", "Div", "Neg",  # mixed dtypes promote to the wider one
    "Tanh", "Sigmoid", "ReLU", "Abs", "EluFn", "GeluFn", "GeluTanhFn",  # bounded, elementwise
    "Max", "MaxPool2dFn",  # picking an element is exact in any precision
    "AvgPool2dFn",  # accumulates in float32 inside
    "Reshape", "Permute", "Expand", "GetItem", "Cat", "Stack", "Where", "Clip",  # move or pick values
    "Unbind", "UnbindPart",  # split into views: the identity and its slices
})

# %% [markdown]
# ### Task `amp_policy` (2 points): which inputs to cast, to what
#
# Module 01's `Function.apply` begins with three given lines: when
# `AutocastMode.policy` is not None, it hands the op to
# `policy.apply(cls, inputs, params)`. `AutocastPolicy.apply` (given) switches
# the policy off, casts the inputs with `cast_inputs`, runs the op, switches
# the policy back on and passes the output's array through `cast_output`.
# You write:
#
# * `cast_inputs(op, inputs)` — the tuple of input tensors cast by the
#   table's rule for `op` (the op's class name, or `"loss"`): for `"low"`,
#   every floating input that is neither float64 nor already `self.dtype`
#   becomes `self.dtype`; for `"float32"`, every float16/bfloat16 input
#   becomes float32; an op not in the table, and every integer or bool
#   input, is left as it is (return `inputs` itself when nothing changes).
#   Cast with `t.to(dtype=...)`: that is a differentiable `To` op, so the
#   gradient flows back through it and reaches a float32 parameter as
#   float32 — the master weights.
# * `cast_output(op, data)` — the output array, cast to `self.dtype` when
#   the rule is `"low"` and the array came out float32. (ml_dtypes' bfloat16
#   matmul returns float32; a low op must hand on its low dtype.) Any other
#   array comes back unchanged.
#
# The grade cell puts your policy in force by hand (`AutocastMode.policy =
# policy`); the next task writes `autocast()`, which does that for you.
#
# **Checked when graded** (besides the tests below), for any op of each
# rule, and shapes, values and integer dtypes drawn for you:
#
# * 'low': float64 is never cast down
# * 'float32': float64 is never cast down
# * "loss" is a float32 entry: losses compute in float32
# * 'low': integer inputs are never cast, and the floating ones beside them are
# * 'float32': integer inputs are never cast
# * 'low': bool inputs are never cast
# * already low: nothing to cast, the same tuple comes back
# * only a float32 result is cast down
# * an op not in the table: the result as it is
# * an op not in the table: its inputs as they are
# * a bfloat16 policy casts to bfloat16
# * 'float32' casts bfloat16 up
# * a low op hands on bfloat16 even though ml_dtypes' matmul gives float32

# %% nbgrader={"grade": false, "grade_id": "amp_policy_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class AutocastPolicy:
    """The rules autocast() applies to each op: which inputs to cast, to what."""

    def __init__(self, dtype: np.dtype, table: dict[str, str] = AUTOCAST_POLICY) -> None:
        self.dtype, self.table = dtype, table

    def __repr__(self) -> str:
        return f"AutocastPolicy({self.dtype})"

    def cast_inputs(self, op: str, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """The inputs of ``op`` cast by the table's rule (unchanged when the op is not listed)."""
        ### BEGIN SOLUTION
        rule = self.table.get(op)
        if rule == "low":
            low = self.dtype
            wanted = [is_floating(t.dtype) and t.dtype != float64 and t.dtype != low for t in inputs]
            target = low
        elif rule == "float32":
            wanted = [is_floating(t.dtype) and t.dtype.itemsize < 4 for t in inputs]
            target = float32
        else:
            return inputs
        if True not in wanted:
            return inputs
        return tuple(t.to(dtype=target) if cast else t for t, cast in zip(inputs, wanted))
        ### END SOLUTION

    def cast_output(self, op: str, data: Any) -> Any:
        """A low op's float32 result in the low dtype; every other array as it is."""
        ### BEGIN SOLUTION
        if data.dtype == float32 and self.table.get(op) == "low":
            return data.astype(self.dtype)
        return data
        ### END SOLUTION

    def apply(self, fn: type[Function], inputs: tuple[Tensor, ...], params: dict[str, Any]) -> Tensor:
        """``fn.apply`` on the cast inputs, with the policy off while it runs (so a cast is never re-cast)."""
        op = fn.__name__
        if self.dtype == bfloat16 and op in self.table and inputs and inputs[0].device.type == "cuda":
            raise TypeError(f"autocast(dtype='bfloat16'): {op} on {inputs[0].device}: CuPy has no bfloat16 "
                            "dtype; use autocast('float16') on the GPU")
        AutocastMode.policy = None
        try:
            out = fn.apply(*self.cast_inputs(op, inputs), **params)
        finally:
            AutocastMode.policy = self
        data = self.cast_output(op, out.data)
        if data is not out.data:  # a fresh output no one else holds yet: retype it in place
            out.data = data
        return out


# %% nbgrader={"grade": true, "grade_id": "amp_policy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
a = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
b = Tensor(np.ones((3, 2), np.float32))
i = Tensor(np.arange(3))
p = AutocastPolicy(float16)
ca, cb = p.cast_inputs("MatMul", (a, b))
assert ca.dtype == float16 and cb.dtype == float16, "'low' casts float32 inputs to the autocast dtype"
ci = p.cast_inputs("MatMul", (a, i))[1]
assert ci.dtype == i.dtype and ci is i, "integer inputs are never cast"
h = Tensor(np.ones(3, np.float16))
assert p.cast_inputs("Sum", (h,))[0].dtype == float32, "'float32' casts float16 up"
ch = p.cast_inputs("ReLU", (h,))[0]
assert ch.dtype == h.dtype and ch is h, "an op not in the table runs as it comes"
assert p.cast_output("MatMul", np.ones(2, np.float32)).dtype == float16, "a low op hands on the low dtype"
assert p.cast_output("Sum", np.ones(2, np.float32)).dtype == float32, "a float32 op's result stays float32"
AutocastMode.policy = p  # by hand, for now: autocast() (the next task) does this for you
try:
    y = a @ b
    s = a.sum()
finally:
    AutocastMode.policy = None
assert y.dtype == float16 and s.dtype == float32, "with the policy in force: the matmul in float16, the sum in float32"
y.sum().backward()
assert a.grad.dtype == float32 and np.allclose(a.grad.numpy(), 2.0), "the gradient reaches float32 master weights"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_lows = sorted(op for op, rule in AUTOCAST_POLICY.items() if rule == "low")
_rs_ups = sorted(op for op, rule in AUTOCAST_POLICY.items() if rule == "float32" and op != "loss")
_rs_low = _rs_lows[int(check_rng.integers(len(_rs_lows)))]
_rs_up = _rs_ups[int(check_rng.integers(len(_rs_ups)))]
_rs_plain = sorted(RUNS_AS_IT_COMES)[int(check_rng.integers(len(RUNS_AS_IT_COMES)))]
_rs_shape = tuple(int(n) for n in check_rng.integers(1, 5, size=int(check_rng.integers(1, 4))))
_rs_x64 = Tensor(check_rng.standard_normal(_rs_shape))
_rs_x32 = Tensor(check_rng.standard_normal(_rs_shape).astype(np.float32))
_rs_x16 = Tensor(check_rng.standard_normal(_rs_shape).astype(np.float16))
_rs_int = Tensor(check_rng.integers(-9, 10, _rs_shape).astype((np.int32, np.int64)[int(check_rng.integers(2))]))
_rs_flags = Tensor(check_rng.random(_rs_shape) < 0.5)
assert p.cast_inputs(_rs_low, (_rs_x64,))[0].dtype == float64, "'low': float64 is never cast down"
assert p.cast_inputs(_rs_up, (_rs_x64,))[0].dtype == float64, "'float32': float64 is never cast down"
assert p.cast_inputs("loss", (_rs_x16,))[0].dtype == float32, "\"loss\" is a float32 entry: losses compute in float32"
_rs_mixed = p.cast_inputs(_rs_low, (_rs_int, _rs_x32))
assert _rs_mixed[0].dtype == _rs_int.dtype and _rs_mixed[1].dtype == float16 and _rs_mixed[0] is _rs_int, (
    "'low': integer inputs are never cast, and the floating ones beside them are")
_rs_kept = p.cast_inputs(_rs_up, (_rs_int,))
assert _rs_kept[0].dtype == _rs_int.dtype and _rs_kept[0] is _rs_int, "'float32': integer inputs are never cast"
_rs_kept = p.cast_inputs(_rs_low, (_rs_flags,))
assert _rs_kept[0].dtype == _rs_flags.dtype and _rs_kept[0] is _rs_flags, "'low': bool inputs are never cast"
_rs_already = (_rs_x16,) * int(check_rng.integers(1, 4))
_rs_kept = p.cast_inputs(_rs_low, _rs_already)
assert _rs_kept[0].dtype == float16 and _rs_kept is _rs_already, (
    "already low: nothing to cast, the same tuple comes back")
assert p.cast_output(_rs_low, _rs_x64.numpy()).dtype == float64, "only a float32 result is cast down"
assert p.cast_output(_rs_plain, _rs_x32.numpy()).dtype == float32, "an op not in the table: the result as it is"
_rs_kept = p.cast_inputs(_rs_plain, (_rs_x32, _rs_x16))
assert _rs_kept[0].dtype == float32 and _rs_kept[1].dtype == float16, "an op not in the table: its inputs as they are"
if bfloat16 is not None:
    pb = AutocastPolicy(bfloat16)
    assert pb.cast_inputs(_rs_low, (_rs_x32,))[0].dtype == bfloat16, "a bfloat16 policy casts to bfloat16"
    _rs_xb = Tensor(check_rng.standard_normal(_rs_shape).astype(bfloat16))
    assert pb.cast_inputs(_rs_up, (_rs_xb,))[0].dtype == float32, "'float32' casts bfloat16 up"
    _rs_m, _rs_k, _rs_n = (int(n) for n in check_rng.integers(1, 6, 3))
    _rs_u = Tensor(check_rng.standard_normal((_rs_m, _rs_k)).astype(np.float32))
    _rs_v = Tensor(check_rng.standard_normal((_rs_k, _rs_n)).astype(np.float32))
    AutocastMode.policy = pb
    try:
        z = _rs_u @ _rs_v
    finally:
        AutocastMode.policy = None
    assert z.dtype == bfloat16, "a low op hands on bfloat16 even though ml_dtypes' matmul gives float32"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `amp_autocast` (2 points): the context manager and the decorator
#
# `autocast(dtype="float16", enabled=True)` puts an `AutocastPolicy` in force:
#
# * `dtype` is `"float16"` or `"bfloat16"` (or those NumPy dtypes);
#   anything else is a `ValueError` naming the argument. bfloat16 without
#   ml_dtypes installed is a `RuntimeError` saying `pip install ml_dtypes`.
#   Keep `self.dtype` (the NumPy dtype) and `self.enabled`.
# * As a context manager, `__enter__` remembers the policy in force and puts
#   in its own (`AutocastPolicy(self.dtype)`), or None when `enabled=False`
#   (a way to switch autocast off inside an autocast region); `__exit__`
#   puts back what was there, also when the block raised. Contexts nest:
#   keep a stack of the remembered policies, so the same `autocast` object
#   can even be entered twice.
# * As a decorator, `@autocast("bfloat16")` runs the function inside a
#   fresh `autocast(self.dtype, self.enabled)` per call (`functools.wraps`
#   keeps its name). Fresh, not `self`: the policy is per thread (module
#   01), but the stack of remembered policies lives on the object, and a
#   decorated function may be called by two threads at once.
#
# **Checked when graded** (besides the tests below), with shapes, values,
# dtypes (as names or NumPy dtypes), nesting depths and errors drawn for you:
#
# * `enabled=False` switches autocast off inside
# * leaving an inner context puts the outer context's policy back
# * after nested contexts, autocast is off again
# * the same object entered several times still nests
# * the same object entered several times: off again after every exit
# * an exception inside still restores the policy
# * a NumPy dtype is accepted as well as its name
# * `autocast` keeps `dtype` and `enabled`
# * a function decorated with `enabled=False` runs with autocast off, even inside an autocast region
# * `autocast` with any dtype but float16 or bfloat16 must be refused with a ValueError
# * the error names the dtype argument
# * `autocast('bfloat16')` runs the matmul in bfloat16

# %% nbgrader={"grade": false, "grade_id": "amp_autocast_code", "locked": false, "schema_version": 3, "solution": true}
#| export
_AUTOCAST_DTYPES = {"float16": float16, "bfloat16": bfloat16}


class autocast:
    """Run matmuls, linear layers and convolutions in float16/bfloat16, the rest as AUTOCAST_POLICY says.

    A context manager (``with autocast("float16"):``) and a decorator (``@autocast("bfloat16")``).
    It applies to the thread that enters it (as torch.autocast): ops in other threads run as they come.
    One object is entered by one thread at a time; a decorated function may run in several threads at once.
    """

    def __init__(self, dtype: Any = "float16", enabled: bool = True) -> None:
        if not isinstance(enabled, bool | np.bool_):
            raise ValueError(f"autocast: enabled must be True or False; got {brief(enabled)}")
        ### BEGIN SOLUTION
        try:
            name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        except TypeError:
            name = None
        if name not in _AUTOCAST_DTYPES:
            raise ValueError(f"autocast: dtype must be 'float16' or 'bfloat16'; got {dtype!r}")
        if _AUTOCAST_DTYPES[name] is None:
            raise RuntimeError("autocast: dtype 'bfloat16' needs the ml_dtypes package on NumPy: pip install ml_dtypes")
        self.dtype, self.enabled = _AUTOCAST_DTYPES[name], bool(enabled)
        self._policy = AutocastPolicy(self.dtype) if self.enabled else None
        self._previous: list[Any] = []
        ### END SOLUTION

    def __enter__(self) -> autocast:
        ### BEGIN SOLUTION
        self._previous.append(AutocastMode.policy)
        AutocastMode.policy = self._policy
        return self
        ### END SOLUTION

    def __exit__(self, *exc: Any) -> None:
        ### BEGIN SOLUTION
        AutocastMode.policy = self._previous.pop()
        ### END SOLUTION

    def __call__(self, fn: Callable) -> Callable:
        ### BEGIN SOLUTION
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.dtype, self.enabled):  # a fresh context per call: safe from several threads
                return fn(*args, **kwargs)

        return wrapper
        ### END SOLUTION

    def __repr__(self) -> str:
        return f"autocast(dtype={self.dtype.name!r}, enabled={self.enabled})"


# %% [markdown]
# Inside autocast the linear layer's product is float16, the loss is float32,
# and the weight's gradient arrives float32 — through the cast.

# %%
tinyflo.manual_seed(0)
_layer = Linear(8, 4)
_x = tinyflo.randn(16, 8)
with autocast("float16"):
    _out = _layer(_x)
    _loss = cross_entropy(_out, np.arange(16) % 4)
_loss.backward()
print("output", _out.dtype, "| loss", _loss.dtype, "| weight", _layer.weight.dtype, "| weight.grad", _layer.weight.grad.dtype)

# %% nbgrader={"grade": true, "grade_id": "amp_autocast", "locked": true, "points": 2, "schema_version": 3, "solution": false}
a = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
b = Tensor(np.ones((3, 2), np.float32))
with autocast("float16"):
    y = a @ b
    s = a.sum()
assert y.dtype == float16 and s.dtype == float32, "inside autocast: the matmul in float16, the sum in float32"
assert AutocastMode.policy is None, "leaving the context switches autocast off"


@autocast("float16")
def _half_matmul(u, v):
    return u @ v


assert _half_matmul(a, b).dtype == float16, "a decorated function runs under autocast"
assert _half_matmul.__name__ == "_half_matmul", "the decorator keeps the function's name (functools.wraps)"
assert AutocastMode.policy is None, "after the decorated call, autocast is off again"
try:
    autocast("float32")
    raise AssertionError("autocast('float32') must raise")
except ValueError as err:
    assert "dtype" in str(err), f"the error names the dtype argument; got {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_m, _rs_k, _rs_n = (int(n) for n in check_rng.integers(1, 6, 3))
_rs_a = Tensor(check_rng.standard_normal((_rs_m, _rs_k)).astype(np.float32))
_rs_b = Tensor(check_rng.standard_normal((_rs_k, _rs_n)).astype(np.float32))
_rs_half = ("float16", np.float16, np.dtype("float16"))[int(check_rng.integers(3))]
with autocast(_rs_half):
    with autocast(_rs_half, enabled=False):
        assert (_rs_a @ _rs_b).dtype == float32, "enabled=False switches autocast off inside"
    assert (_rs_a @ _rs_b).dtype == float16, "leaving an inner context puts the outer context's policy back"
assert (_rs_a @ _rs_b).dtype == float32, "after nested contexts, autocast is off again"
_rs_ctx = autocast(_rs_half)
_rs_depth = int(check_rng.integers(2, 5))
for _ in range(_rs_depth):
    _rs_ctx.__enter__()
for _ in range(_rs_depth - 1):
    _rs_ctx.__exit__(None, None, None)
assert (_rs_a @ _rs_b).dtype == float16, "the same object entered several times still nests"
_rs_ctx.__exit__(None, None, None)
assert (_rs_a @ _rs_b).dtype == float32, "the same object entered several times: off again after every exit"
_rs_raised = (KeyError, ValueError, RuntimeError)[int(check_rng.integers(3))]


def _rs_raises_inside():
    with autocast(_rs_half):
        raise _rs_raised()


try:
    _rs_raises_inside()
except _rs_raised:
    pass
assert (_rs_a @ _rs_b).dtype == float32, "an exception inside still restores the policy"
_rs_np = (np.float16, np.dtype("float16"))[int(check_rng.integers(2))]
assert autocast(_rs_np).dtype == float16, "a NumPy dtype is accepted as well as its name"
_rs_on = bool(check_rng.integers(2))
_rs_kept = autocast(_rs_half, enabled=_rs_on)
assert (_rs_kept.dtype, _rs_kept.enabled) == (float16, _rs_on), "autocast keeps dtype and enabled"


@autocast(_rs_half, enabled=False)
def _rs_plain_matmul(u, v):
    return u @ v


with autocast(_rs_half):
    assert _rs_plain_matmul(_rs_a, _rs_b).dtype == float32, (
        "a function decorated with enabled=False runs with autocast off, even inside an autocast region")
_rs_bad = ("float32", "float64", "int8", np.float32, np.float64, np.int16)[int(check_rng.integers(6))]
try:
    autocast(_rs_bad)
    raise AssertionError("autocast with any dtype but float16 or bfloat16 must be refused with a ValueError")
except ValueError as err:
    assert "dtype" in str(err), f"the error names the dtype argument; got {err}"
if bfloat16 is not None:
    with autocast(("bfloat16", bfloat16)[int(check_rng.integers(2))]):
        z = _rs_a @ _rs_b
    assert z.dtype == bfloat16, "autocast('bfloat16') runs the matmul in bfloat16"
### END HIDDEN TESTS

# %% [markdown]
# ## Master weights, and casting them yourself
#
# Why not simply make the whole model float16 (`model.half()`)? Because of
# the update. A weight of 1.0 and an update of `lr · grad = 1e-4`: in
# float16, `1.0 + 0.0001` is `1.0` — the step is below half of float16's
# eps at 1 (about 4.9e-4) and vanishes. Thousands of such steps make
# training stall. So the parameters stay float32 (the *master weights*), the
# optimizer updates them in float32, and autocast makes a 16-bit copy for
# each matmul.
#
# `cast_parameters(model, dtype)` is for when you do want a model in another
# precision (inference in float16, or a float64 model for a gradcheck). It
# casts every floating parameter and buffer **in place** — the same `Tensor`
# objects, so an optimizer built on them still holds them — and keeps
# integer buffers (a BatchNorm's step counter). It refuses to cast
# parameters that are views of a flat optimizer's buffer
# (`SGD(..., flat=True)`): replacing their arrays would silently cut them off
# from the optimizer (a "cast" to the dtype they already have is fine); cast
# before building the optimizer.

# %%
print("float16: 1 + 1e-4 =", np.float16(1) + np.float16(1e-4), "   float32:", np.float32(1) + np.float32(1e-4))


# %%
#| export
def cast_parameters(model: Any, dtype: Any) -> Any:
    """Cast every floating parameter and buffer of ``model`` to ``dtype`` in place; the model."""
    if not hasattr(model, "named_parameters"):
        raise TypeError(f"cast_parameters: model must be a Module; got {described(model)}")
    dt = as_dtype(dtype, "cast_parameters: dtype")
    if not is_floating(dt):
        raise TypeError(f"cast_parameters: dtype must be floating (integer buffers keep theirs); got {dt}")
    for name, p in model.named_parameters():
        if p.data.base is not None and is_floating(p.dtype) and p.dtype != dt:
            raise ValueError(
                f"cast_parameters: parameter {name!r} is a view into another array (a flat optimizer's buffer?); "
                "casting it would cut it off from that buffer. Cast the model before building the optimizer"
            )
    return model.to(dtype=dt)


# %% [markdown]
# ## Gradients that vanish: underflow, and loss scaling
#
# Under autocast the backward pass runs in float16 wherever the forward did:
# the gradient flowing into a linear layer's output is float16. float16
# cannot hold anything below about 6e-8; a smaller gradient becomes exactly
# 0, and the weights it should have moved do not move.
#
# The cure is simple. Multiply the loss by a large factor `S` (say
# 2¹⁶ = 65536) before backward: every gradient in the graph is `S` times
# larger and clears the underflow line. Divide the gradients by `S` again
# (in float32, on the master weights) before the optimizer uses them. Here
# is a tiny loss whose gradient underflows to zero in float16 and is rescued
# by the scale:

# %%
def _tiny_gradient(amp: str | None, scale: float = 1.0) -> np.ndarray:
    """The weight gradient of a tiny loss (1e-8 × an MSE), with the loss scaled by ``scale``."""
    tinyflo.manual_seed(0)
    layer = Linear(4, 1)
    x, target = tinyflo.randn(8, 4), tinyflo.randn(8, 1)
    with autocast(amp or "float16", enabled=amp is not None):
        loss = mse_loss(layer(x), target) * 1e-8
    (loss * scale).backward()
    return layer.weight.grad.numpy() / scale


_exact, _unscaled, _scaled = _tiny_gradient(None), _tiny_gradient("float16"), _tiny_gradient("float16", 2.0**16)
print("float32          ", _exact)
print("float16, no scale", _unscaled, " <- underflowed to zero")
print("float16, scaled  ", _scaled)

# %% [markdown]
# ### Dynamic scaling
#
# Which `S`? Too small and gradients underflow; too large and they overflow
# to `inf` (float16's largest is 65504). The answer is to let the training
# find it, as PyTorch's `GradScaler` does:
#
# * start high (`init_scale=2**16`);
# * after each backward, look for inf/NaN in the gradients. If there is one,
#   **skip the step** (the gradients are garbage; the weights stay as they
#   were) and halve the scale (`backoff_factor=0.5`);
# * after `growth_interval=2000` clean steps in a row, double it
#   (`growth_factor=2.0`), to get back up when the gradients have shrunk.
#
# A skipped step now and then is the price: with a growth interval of 2000
# it is about one step in 2000.
#
# **The order of a step**: `scaler.scale(loss).backward()` →
# `scaler.unscale_(optimizer)` → `clip_grad_norm(...)` →
# `scaler.step(optimizer)` → `scaler.update()`. Clipping must come after
# unscaling: a max norm of 1.0 means the *true* gradient's norm, and the
# scaled gradients are 65536 times longer — clipping them would shrink every
# step to nothing. `step` unscales itself when you have not, but only once:
# calling `unscale_` twice before `update` would divide twice, so it is an
# error.
#
# ### Task `amp_grad_scaler_unscale` (3 points): unscale in place, find inf/NaN
#
# `_unscale_grads(grads, inv_scale)` multiplies every gradient array in
# `grads` (a list of NumPy/CuPy arrays, the optimizer's `p.grad.data`) by
# `inv_scale` **in place** (keep each array's dtype: multiply by
# `g.dtype.type(inv_scale)` or use `out=`), and returns whether any of them
# holds an inf or a NaN — as a 0-d **device** bool array, never a Python
# bool: reading it would make a GPU wait, once per parameter. Combine the
# per-array checks with `xp.logical_or` (`xp.isfinite(g).all()` is a 0-d
# array). With no gradients at all, return a 0-d False (NumPy).
#
# **Checked when graded** (besides the tests below), with scales (powers of
# two), numbers and sizes of arrays, their values and where an inf or a NaN
# sits drawn for you:
#
# * NaN is found
# * any one array decides
# * no gradients at all: a 0-d False
# * a float16 gradient is unscaled in place and stays float16
# * every gradient is unscaled, also after one with an inf
# * finite gradients: a 0-d False, nothing found
# * any gradients are multiplied by any inverse scale, in place

# %% nbgrader={"grade": false, "grade_id": "amp_grad_scaler_unscale_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _unscale_grads(grads: list[Any], inv_scale: float) -> Any:
    """Multiply every gradient by ``inv_scale`` in place; a 0-d device bool: was any inf or NaN?"""
    ### BEGIN SOLUTION
    found = None
    for g in grads:
        xp = device_of(g).xp
        xp.multiply(g, g.dtype.type(inv_scale), out=g)
        if found is None:
            found = xp.zeros((), bool)  # on the gradients' device: no read
        xp.logical_or(found, ~xp.isfinite(g).all(), out=found)
    return np.zeros((), bool) if found is None else found
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "amp_grad_scaler_unscale", "locked": true, "points": 3, "schema_version": 3, "solution": false}
g1 = np.array([2.0, 4.0], np.float32)
g2 = np.array([[8.0]], np.float32)
found = _unscale_grads([g1, g2], 0.5)
assert g1.tolist() == [1.0, 2.0] and g2.tolist() == [[4.0]], "gradients are divided by the scale in place"
assert g1.dtype == np.float32, "in place keeps float32"
assert isinstance(found, np.ndarray) and found.shape == () and not bool(found), "a 0-d array, not a Python bool"
assert bool(_unscale_grads([np.array([1.0, np.inf], np.float32)], 0.5)), "inf is found"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_scale = float(2.0 ** int(check_rng.integers(1, 16)))
_rs_count = int(check_rng.integers(2, 5))
_rs_sizes = [int(n) for n in check_rng.integers(1, 6, _rs_count)]
_rs_g = [(check_rng.standard_normal(n) * _rs_scale).astype(np.float32) for n in _rs_sizes]
_rs_nan = [g.copy() for g in _rs_g]
_rs_at = int(check_rng.integers(_rs_count))
_rs_nan[_rs_at][int(check_rng.integers(_rs_sizes[_rs_at]))] = np.nan
assert bool(_unscale_grads(_rs_nan, 1.0 / _rs_scale)), "NaN is found"
_rs_inf = [g.copy() for g in _rs_g]
_rs_at = int(check_rng.integers(_rs_count - 1))  # any array but the last
_rs_inf[_rs_at][int(check_rng.integers(_rs_sizes[_rs_at]))] = np.inf * check_rng.choice([-1.0, 1.0])
assert bool(_unscale_grads(_rs_inf, 1.0 / _rs_scale)), "any one array decides"
_rs_none = _unscale_grads([], 1.0 / _rs_scale)
assert isinstance(_rs_none, np.ndarray) and _rs_none.shape == () and not bool(_rs_none), (
    "no gradients at all: a 0-d False")
_rs_h = check_rng.uniform(8.0, 6.0e4, int(check_rng.integers(1, 6))).astype(np.float16)
_rs_h_kept = _rs_h.copy()
_unscale_grads([_rs_h], 1.0 / _rs_scale)
assert _rs_h.dtype == np.float16 and np.allclose(_rs_h, _rs_h_kept.astype(np.float32) / _rs_scale, rtol=1e-3, atol=0), (
    "a float16 gradient is unscaled in place and stays float16")
_rs_inf = [g.copy() for g in _rs_g]
_rs_inf[0][int(check_rng.integers(_rs_sizes[0]))] = np.inf
_rs_kept = [g.copy() for g in _rs_inf[1:]]
_unscale_grads(_rs_inf, 1.0 / _rs_scale)
assert np.allclose(np.concatenate(_rs_inf[1:]), np.concatenate(_rs_kept) * np.float32(1.0 / _rs_scale)), (
    "every gradient is unscaled, also after one with an inf")
_rs_kept = [g.copy() for g in _rs_g]
_rs_found = _unscale_grads(_rs_g, 1.0 / _rs_scale)
assert _rs_found.shape == () and not bool(_rs_found), "finite gradients: a 0-d False, nothing found"
assert np.allclose(np.concatenate(_rs_g), np.concatenate(_rs_kept) * np.float32(1.0 / _rs_scale)), (
    "any gradients are multiplied by any inverse scale, in place")
### END HIDDEN TESTS

# %% [markdown]
# `GradScaler` (given) keeps the scale and the tracker, and one small
# record per optimizer for the current step (unscaled yet? found inf?), so
# several optimizers can share one scaler: the update backs off when any of
# them found an inf.
#
# Where are the syncs? `scale()`, `unscale_()` and `update()` never read a
# device value. `step()` must decide on the host whether to call
# `optimizer.step()`, so it reads the found-inf flag: one device-to-host
# read per optimizer per step, exactly what PyTorch's `GradScaler.step`
# does. The scale itself is a Python float: multiplying the loss by it needs
# no copy to the device, and `update()` works on host numbers the step has
# already read. The Trainer (module 08, `amp="float16"`) adds no other sync.
#
# Its `update()` calls `_update_scale`, the next task.

# %%
#| export
def _check_optimizer(owner: str, optimizer: Any) -> None:
    """What a GradScaler steps: an optimizer (it has param_groups and step())."""
    if not isinstance(getattr(optimizer, "param_groups", None), list) or not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"{owner}: optimizer must be an optimizer (tinyflo.optim); got {described(optimizer)}")


class GradScaler:
    """Dynamic loss scaling for float16 training, with torch.amp.GradScaler's rules and names."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        for name, value in (("init_scale", init_scale), ("growth_factor", growth_factor),
                            ("backoff_factor", backoff_factor)):
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise ValueError(f"GradScaler: {name} must be a number; got {brief(value)}")
        if not init_scale > 0:
            raise ValueError(f"GradScaler: init_scale must be > 0; got {init_scale!r}")
        if not growth_factor > 1:
            raise ValueError(f"GradScaler: growth_factor must be > 1; got {growth_factor!r}")
        if not 0 < backoff_factor < 1:
            raise ValueError(f"GradScaler: backoff_factor must be between 0 and 1 (exclusive); got {backoff_factor!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int | np.integer) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive int; got {brief(growth_interval)}")
        if not isinstance(enabled, bool | np.bool_):
            raise ValueError(f"GradScaler: enabled must be True or False; got {brief(enabled)}")
        self._scale, self._growth_tracker = float(init_scale), 0
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._enabled = int(growth_interval), bool(enabled)
        self.skipped_steps = 0  # updates after an inf/NaN gradient since this scaler was made (one per step)
        self.last_step_skipped = False
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"GradScaler(scale={self._scale}, growth_tracker={self._growth_tracker}, enabled={self._enabled})"

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, loss: Tensor) -> Tensor:
        """``loss`` multiplied by the scale (float16 losses are brought to float32 first, to avoid overflow)."""
        if not isinstance(loss, Tensor):
            raise TypeError(f"GradScaler.scale: loss must be a Tensor; got {type(loss).__name__}")
        if not self._enabled:
            return loss
        if loss.dtype.itemsize < 4:
            loss = loss.to(dtype=float32)
        return loss * self._scale

    def _state(self, optimizer: Any) -> dict[str, Any]:
        return self._per_optimizer.setdefault(id(optimizer), {"unscaled": False, "found_inf": None, "stepped": False})

    def unscale_(self, optimizer: Any) -> None:
        """Divide the gradients of ``optimizer``'s parameters by the scale, in place (once per step)."""
        _check_optimizer("GradScaler.unscale_", optimizer)
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["unscaled"]:
            raise RuntimeError("GradScaler.unscale_: unscale_() has already been called on this optimizer since "
                               "the last update(); a second call would divide the gradients twice")
        if state["stepped"]:
            raise RuntimeError("GradScaler.unscale_: step() was already called on this optimizer since the last update()")
        grads = [p.grad.data for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        with no_grad():
            state["found_inf"] = _unscale_grads(grads, 1.0 / self._scale)
        state["unscaled"] = True

    def step(self, optimizer: Any) -> bool:
        """Unscale if not done yet; ``optimizer.step()`` unless a gradient is inf/NaN. Whether it stepped."""
        _check_optimizer("GradScaler.step", optimizer)
        if not self._enabled:
            optimizer.step()
            return True
        state = self._state(optimizer)
        if state["stepped"]:
            raise RuntimeError("GradScaler.step: step() has already been called on this optimizer since the last update()")
        if not state["unscaled"]:
            self.unscale_(optimizer)
        found = bool(state["found_inf"])  # the one device-to-host read of a step, as in PyTorch
        state["found_inf"], state["stepped"] = found, True
        self.last_step_skipped = found
        if found:
            return False
        optimizer.step()
        return True

    def update(self, new_scale: float | None = None) -> None:
        """Set the scale for the next step: backoff on inf/NaN, growth after growth_interval clean steps."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        else:
            flags = [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None]
            if not flags:
                raise RuntimeError("GradScaler.update: no inf checks were recorded before update(); call "
                                   "scaler.step(optimizer) (or unscale_) after backward")
            found = any(bool(f) for f in flags)
            self.skipped_steps += int(found)  # one training step, however many optimizers (or replicas) it has
            self._scale, self._growth_tracker = _update_scale(
                self._scale, self._growth_tracker, found, self._growth_factor, self._backoff_factor,
                self._growth_interval)
        self._per_optimizer = {}

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys (plus skipped_steps), as plain JSON data; empty when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker,
                "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state_dict() (a disabled scaler ignores it, as in PyTorch)."""
        if not self._enabled:
            return
        if not isinstance(state, dict):
            raise TypeError(f"GradScaler.load_state_dict: state must be the dict GradScaler.state_dict() gave; "
                            f"got {described(state)}")
        if not state:
            raise RuntimeError("GradScaler.load_state_dict: the state is empty (saved from a disabled GradScaler?)")
        missing = [key for key in ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
                   if key not in state]
        if missing:
            raise ValueError(f"GradScaler.load_state_dict: the state lacks {', '.join(missing)}; expected the dict "
                             "GradScaler.state_dict() gave")
        self._scale = float(np.asarray(state["scale"]))
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
        self.skipped_steps = int(state.get("skipped_steps", 0))


# %% [markdown]
# ### Task `amp_grad_scaler_update` (3 points): the dynamic scale
#
# `_update_scale(scale, growth_tracker, found_inf, growth_factor,
# backoff_factor, growth_interval)` returns the new `(scale,
# growth_tracker)` after one step:
#
# * `found_inf` (a Python bool: whether any optimizer's gradients had an
#   inf/NaN this step) → `scale · backoff_factor`, and the tracker back to 0;
# * otherwise the tracker counts one more clean step; when it reaches
#   `growth_interval` → `scale · growth_factor` and the tracker back to 0.
#
# `GradScaler` (given, above) calls it from `update()`.
#
# **Checked when graded** (besides the tests below), with scales, factors
# (powers of two), growth intervals, trackers, weights, gradients, learning
# rates and where the inf sits drawn for you:
#
# * an inf gradient skips the step: the weights stay as they were
# * after a skipped step the scale is multiplied by `backoff_factor`
# * after a back-off, the scale is multiplied by `growth_factor` at the `growth_interval`-th clean step, not before
# * the clean steps used unscaled gradients
# * the `growth_interval`-th clean step grows the scale by `growth_factor` and resets the tracker
# * a clean step before `growth_interval` only counts
# * inf or NaN: the scale times `backoff_factor` (not divided by `growth_factor`), the tracker 0

# %% nbgrader={"grade": false, "grade_id": "amp_grad_scaler_update_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _update_scale(scale: float, growth_tracker: int, found_inf: bool, growth_factor: float,
                  backoff_factor: float, growth_interval: int) -> tuple[float, int]:
    """The next (scale, growth_tracker): back off on inf/NaN, grow after ``growth_interval`` clean steps."""
    ### BEGIN SOLUTION
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return scale, growth_tracker
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "amp_grad_scaler_update", "locked": true, "points": 3, "schema_version": 3, "solution": false}
assert _update_scale(1024.0, 5, True, 2.0, 0.5, 3) == (512.0, 0), "inf: back off and reset the tracker"
assert _update_scale(1024.0, 0, False, 2.0, 0.5, 3) == (1024.0, 1), "a clean step counts"
assert _update_scale(1024.0, 2, False, 2.0, 0.5, 3) == (2048.0, 0), "growth after growth_interval clean steps"
w = Tensor(np.ones(2, np.float32), requires_grad=True)
opt = SGD([w], lr=1.0)
scaler = GradScaler(init_scale=4.0, growth_interval=2)
scaler.scale((w * Tensor(np.array([np.inf, 1.0], np.float32))).sum()).backward()
stepped = scaler.step(opt)
assert (stepped, w.numpy().tolist()) == (False, [1.0, 1.0]), "an inf gradient skips the step"
scaler.update()
assert scaler.get_scale() == 2.0 and scaler.skipped_steps == 1, "after a skipped step the scale is halved: 4 → 2"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_backoff = float((0.5, 0.25, 0.125)[int(check_rng.integers(3))])
_rs_growths = [g for g in (2.0, 4.0, 8.0) if g * _rs_backoff != 1.0]  # a back-off that undoes no growth
_rs_growth = _rs_growths[int(check_rng.integers(len(_rs_growths)))]
_rs_interval = int(check_rng.integers(2, 7))
_rs_init = float(2.0 ** int(check_rng.integers(4, 17)))
_rs_size, _rs_lr = int(check_rng.integers(1, 6)), float(check_rng.uniform(0.1, 1.0))
_rs_w0 = check_rng.standard_normal(_rs_size).astype(np.float32)
_rs_c = check_rng.standard_normal(_rs_size).astype(np.float32)
_rs_w = Tensor(_rs_w0.copy(), requires_grad=True)
_rs_opt = SGD([_rs_w], lr=_rs_lr)
_rs_scaler = GradScaler(init_scale=_rs_init, growth_factor=_rs_growth, backoff_factor=_rs_backoff,
                        growth_interval=_rs_interval)
_rs_bad = _rs_c.copy()
_rs_bad[int(check_rng.integers(_rs_size))] = np.inf
_rs_scaler.scale((_rs_w * Tensor(_rs_bad)).sum()).backward()
assert (_rs_scaler.step(_rs_opt), _rs_w.numpy().tolist()) == (False, _rs_w0.tolist()), (
    "an inf gradient skips the step: the weights stay as they were")
_rs_scaler.update()
assert _rs_scaler.get_scale() == _rs_init * _rs_backoff, "after a skipped step the scale is multiplied by backoff_factor"
for _rs_step in range(1, _rs_interval + 1):
    _rs_opt.zero_grad()
    _rs_scaler.scale((_rs_w * Tensor(_rs_c)).sum()).backward()
    _rs_stepped = _rs_scaler.step(_rs_opt)
    _rs_scaler.update()
    assert (_rs_stepped, _rs_scaler.get_scale()) == (
        True, _rs_init * _rs_backoff * (_rs_growth if _rs_step == _rs_interval else 1.0)), (
        "after a back-off, the scale is multiplied by growth_factor at the growth_interval-th clean step, not before")
assert np.allclose(_rs_w.numpy(), _rs_w0 - _rs_interval * _rs_lr * _rs_c, rtol=1e-5, atol=1e-5), (
    "the clean steps used unscaled gradients")
_rs_scale = float(2.0 ** int(check_rng.integers(0, 20)))
_rs_count = int(check_rng.integers(0, _rs_interval - 1))
assert _update_scale(_rs_scale, _rs_interval - 1, False, _rs_growth, _rs_backoff, _rs_interval) == (
    _rs_scale * _rs_growth, 0), "the growth_interval-th clean step grows the scale by growth_factor and resets the tracker"
assert _update_scale(_rs_scale, _rs_count, False, _rs_growth, _rs_backoff, _rs_interval) == (
    _rs_scale, _rs_count + 1), "a clean step before growth_interval only counts"
_rs_count = int(check_rng.integers(1, _rs_interval))
assert _update_scale(_rs_scale, _rs_count, True, _rs_growth, _rs_backoff, _rs_interval) == (
    _rs_scale * _rs_backoff, 0), "inf or NaN: the scale times backoff_factor (not divided by growth_factor), the tracker 0"
### END HIDDEN TESTS

# %% [markdown]
# ## Loss scaling rescues the vanishing gradient
#
# The tiny loss of before, now through a `GradScaler`: scale, backward,
# unscale. The float16 gradient matches float32 again.

# %%
def _scaled_step_gradient() -> np.ndarray:
    tinyflo.manual_seed(0)
    layer = Linear(4, 1)
    x, target = tinyflo.randn(8, 4), tinyflo.randn(8, 1)
    scaler, opt = GradScaler(), SGD(layer.parameters(), lr=0.0)
    with autocast("float16"):
        loss = mse_loss(layer(x), target) * 1e-8
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    return layer.weight.grad.numpy()


_rescued = _scaled_step_gradient()
print("float32            ", _exact)
print("float16, GradScaler", _rescued)
assert not _unscaled.any() and np.allclose(_rescued, _exact, rtol=2e-2)

# %% [markdown]
# ## The Trainer's precision plug-in
#
# Module 08's Trainer calls a precision plug-in at fixed points of its loop:
# around every forward, for the backward, before clipping (unscale), for the
# step, and after it (update). `MixedPrecision` fills them with what this
# module built, and registers itself as the Trainer's `"amp"` plug-in, so
# `Trainer(..., amp="float16")` means `plugins=[MixedPrecision("float16")]`.
# Give it your own scaler with `MixedPrecision("float16", scaler=GradScaler(...))`;
# the Trainer's `trainer.scaler` is this plug-in's, and checkpoints save it.
# The loop you wrote in module 08 does not change.
#
# Overflowed gradients are expected now and then under a GradScaler (it
# skips that step and lowers the scale), so NumPy's overflow warnings are
# silenced while the gradients are handled, and the Trainer's guard leaves
# overflowed gradients to the scaler (`skips_nonfinite`).

# %%
#| export
class MixedPrecision(Precision):
    """The Trainer's mixed-precision plug-in: autocast around every forward, a GradScaler for float16."""

    def __init__(self, dtype: str = "float16", scaler: GradScaler | None = None) -> None:
        if not isinstance(dtype, str) or dtype not in ("float16", "bfloat16"):
            raise ValueError(f"MixedPrecision got dtype={brief(dtype)}; expected 'float16' or 'bfloat16'")
        if scaler is not None and not isinstance(scaler, GradScaler):
            raise TypeError(f"MixedPrecision got scaler={type(scaler).__name__}; expected a GradScaler or None")
        autocast(dtype)  # fails now, not at the first batch, when bfloat16 has no ml_dtypes to run on
        self.dtype = dtype
        # float16 gradients underflow without loss scaling; bfloat16 has float32's range and needs none
        self.scaler = GradScaler() if scaler is None and dtype == "float16" else scaler

    def __repr__(self) -> str:
        return f"MixedPrecision({self.dtype!r}, scaler={self.scaler!r})"

    @property
    def skips_nonfinite(self) -> bool:
        return self.scaler is not None and self.scaler.is_enabled()

    def forward_context(self) -> autocast:
        return autocast(self.dtype)

    def gradient_context(self) -> Any:
        return np.errstate(over="ignore", invalid="ignore") if self.skips_nonfinite else super().gradient_context()

    def backward(self, loss: Tensor, backward: Callable[[Tensor], None]) -> None:
        if self.scaler is None:
            backward(loss)
            return
        with np.errstate(over="ignore", invalid="ignore"):  # a scaled float16 backward may overflow on purpose
            backward(self.scaler.scale(loss))

    def unscale(self, optimizer: Any) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: Any) -> None:
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)  # a skipped step still counts as a step, as in PyTorch

    def update(self) -> None:
        if self.scaler is not None:
            self.scaler.update()

    def abandon(self) -> None:
        if self.scaler is not None:
            self.scaler._per_optimizer = {}  # this step's unscale is forgotten: the next step starts clean

    def setup(self, trainer: Any) -> None:
        if getattr(self, "_trainer", trainer) is not trainer:
            raise ValueError("MixedPrecision: this plug-in (and its GradScaler) already serves another Trainer; give "
                             "each Trainer its own")
        self._trainer = trainer


register_plugin("amp", MixedPrecision)

# %% [markdown]
# ## Training in float16 (and what it costs on a CPU)
#
# The whole recipe, written out: the model and the loss under autocast,
# then scale → backward → unscale → clip → step → update — what
# `MixedPrecision` does inside the Trainer. A few epochs of the digits MLP
# in float32 and in float16, same seed, same recipe:

# %%
def _digits_accuracy(amp: str | None, epochs: int = 3) -> float:
    from tinyflo import datasets
    from tinyflo.core.data import DataLoader
    from tinyflo.core.optim import Adam
    from tinyflo.core.training import clip_grad_norm

    tinyflo.manual_seed(0)
    train = DataLoader(datasets.digits(train=True, flatten=True), batch_size=64, shuffle=True, seed=0)
    x_test, y_test = next(iter(DataLoader(datasets.digits(train=False, flatten=True), batch_size=10_000)))
    model = Sequential(Linear(64, 64), ReLU(), Linear(64, 10))
    opt = Adam(model.parameters(), lr=1e-2)
    scaler = GradScaler(enabled=amp == "float16")
    for _ in range(epochs):
        for x, y in train:
            opt.zero_grad()
            with autocast(amp or "float16", enabled=amp is not None):
                loss = cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            clip_grad_norm(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
    with no_grad(), autocast(amp or "float16", enabled=amp is not None):
        predicted = model(x_test).numpy().argmax(axis=1)
    return float((predicted == y_test.numpy()).mean())


print(f"digits MLP, 3 epochs: float32 {_digits_accuracy(None):.1%}   float16 {_digits_accuracy('float16'):.1%}")

# %% [markdown]
# **Speed is a GPU figure.** NumPy has no BLAS for float16: its float16
# matmul is a plain loop, a couple of hundred times slower than float32.
# On a CPU, mixed precision here is for *correctness* — the same code, the
# same numbers as on the GPU. On a GPU with tensor cores (V100 and later),
# cuBLAS multiplies float16 inputs several times faster than float32, and
# every activation saved for backward takes half the memory.
# tinyflo's mixed-precision benchmark (`tinyflo bench --device cuda:0` in the
# course's repository) records both, step time and peak GPU memory
# (CuPy's memory pool), float16 next to float32 for a matmul-heavy MLP at a
# large batch, with PyTorch's CUDA autocast alongside as a reference.

# %% [markdown]
# ## Systems corner
#
# * **Memory.** Parameters stay float32 and the optimizer's state with them
#   (Adam: two more float32 copies); what halves is the activations saved
#   for backward — at a large batch the biggest part. The 16-bit copies of
#   the weights are made per forward (PyTorch caches them per autocast
#   region; we do not, to keep the policy one small class).
# * **Syncs.** One device-to-host read per optimizer step (the found-inf flag
#   in `GradScaler.step`), nothing per op. The scale is a host float.
# * **bfloat16** needs no scaler (float32's range), but its 8-bit mantissa
#   makes the matmul results coarser; it is the default on TPUs and recent
#   GPUs. CuPy has no bfloat16 dtype: on the GPU use float16.
# * **Threads.** `AutocastMode` (module 01) is a `threading.local`: an
#   `autocast()` reaches the ops of the thread that entered it and no other,
#   as in PyTorch. (A process-wide flag would be wrong twice over: another
#   thread's ops would suddenly run in float16, and an op finishing in that
#   thread after the `with` block ended could switch the policy back on.)
#   A thread you start inside an autocast region starts outside it; enter
#   `autocast()` in the thread if its ops should be cast too.
# * **Skipped steps count as steps**: a scheduler advances through them, as
#   with PyTorch. `scaler.skipped_steps` says how many there were.
