"""Every differentiable op against float64 central differences, on generated shapes.

One row per op: adding an op means adding a row, and
``test_every_function_has_a_row`` fails until someone does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from gradcheck_support import functions_defined_in
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinyflo
from tinyflo import Tensor, gradcheck
from tinyflo.core import tensor as core_tensor

pytestmark = pytest.mark.task("autograd_gradcheck")

SHAPE = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
MATRIX = hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4)
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass(frozen=True)
class Case:
    """An op to check: how to draw its input shapes, and the function of the inputs."""

    name: str
    covers: tuple[str, ...]  # the Function classes this row exercises
    shapes: Callable[[st.DrawFn], tuple]
    fn: Callable[..., Tensor]
    positive: bool = False  # inputs drawn from (0.2, 2) instead of ±(0.2, 2)


def one(draw):
    return (draw(SHAPE),)


def two_broadcast(draw):
    pair = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4))
    return pair.input_shapes


def with_axis(draw, min_dims=1):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=2, max_side=4))
    return (shape,)


def matrix(draw):
    return (draw(MATRIX),)


def matmul_shapes(draw):
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (2,), (3, 1)]))
    kind = draw(st.sampled_from(["mm", "batched", "vec-left", "vec-right", "batch-right"]))
    return {
        "mm": ((n, k), (k, m)),
        "batched": (batch + (n, k), (k, m)),
        "vec-left": ((k,), batch + (k, m)),
        "vec-right": (batch + (n, k), (k,)),
        "batch-right": ((n, k), batch + (k, m)),
    }[kind]


def cat_shapes(draw):
    base = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    axis = draw(st.integers(0, len(base) - 1))
    other = list(base)
    other[axis] = draw(st.integers(1, 3))
    return base, tuple(other)


def same_shapes(draw):
    shape = draw(SHAPE)
    return shape, shape


def first_axis(t: Tensor) -> int:
    return t.ndim - 1


CASES = [
    Case("add", ("Add",), two_broadcast, lambda a, b: a + b),
    Case("sub", ("Sub",), two_broadcast, lambda a, b: a - b),
    Case("mul", ("Mul",), two_broadcast, lambda a, b: a * b),
    Case("div", ("Div",), two_broadcast, lambda a, b: a / b),
    Case("pow-tensor", ("Pow",), two_broadcast, lambda a, b: a ** b, positive=True),
    Case("pow-scalar", ("Pow",), one, lambda a: a ** 3),
    Case("rpow", ("Pow",), one, lambda a: 2.0 ** a),
    Case("scalars", ("Add", "Sub", "Mul", "Div"), one, lambda a: (2.5 - a) * 3 / 4 + 1 - 1 / a),
    Case("neg", ("Neg",), one, lambda a: -a),
    Case("exp", ("Exp",), one, lambda a: a.exp()),
    Case("log", ("Log",), one, lambda a: a.log(), positive=True),
    Case("sqrt", ("Sqrt",), one, lambda a: a.sqrt(), positive=True),
    Case("tanh", ("Tanh",), one, lambda a: a.tanh()),
    Case("sigmoid", ("Sigmoid",), one, lambda a: a.sigmoid()),
    Case("relu", ("ReLU",), one, lambda a: a.relu()),
    Case("abs", ("Abs",), one, lambda a: abs(a)),
    Case("clip", ("Clip",), one, lambda a: a.clip(-1.0, 1.5)),
    Case("clip-min", ("Clip",), one, lambda a: a.clip(min=0.5)),
    Case("matmul", ("MatMul",), matmul_shapes, lambda a, b: a @ b),
    Case("sum", ("Sum",), one, lambda a: a.sum()),
    Case("sum-axis", ("Sum",), with_axis, lambda a: a.sum(axis=first_axis(a))),
    Case("sum-keepdims", ("Sum",), with_axis, lambda a: a.sum(axis=(0, -1), keepdims=True)),
    Case("mean", ("Sum", "Div"), with_axis, lambda a: a.mean(axis=0)),
    Case("var", ("Sum", "Sub", "Mul", "Div"), with_axis, lambda a: a.var(axis=first_axis(a))),
    Case("var-biased", ("Sum",), with_axis, lambda a: a.var(correction=0, keepdims=True)),
    Case("max", ("Max",), one, lambda a: a.max()),
    Case("max-axis", ("Max",), with_axis, lambda a: a.max(axis=0, keepdims=True)),
    Case("min-axis", ("Max", "Neg"), with_axis, lambda a: a.min(axis=-1)),
    Case("reshape", ("Reshape",), one, lambda a: a.reshape(-1) * 1.5),
    Case("flatten-squeeze", ("Reshape",), with_axis, lambda a: a.unsqueeze(1).flatten(1).squeeze()),
    Case("permute", ("Permute",), with_axis, lambda a: a.T),
    Case("transpose", ("Permute",), matrix, lambda a: a.transpose(0, -1)),
    Case("expand", ("Expand",), one, lambda a: a.expand((2,) + a.shape)),
    Case("getitem-basic", ("GetItem",), with_axis, lambda a: a[1:, ...][::-1]),
    Case("getitem-int-array", ("GetItem",), with_axis, lambda a: a[np.array([0, 1, 0, 0])]),
    Case("getitem-mask", ("GetItem",), with_axis, lambda a: a[a > 0]),
    Case("cat", ("Cat",), cat_shapes, lambda a, b: tinyflo.cat([a, b], axis=_differing_axis(a, b))),
    Case("stack", ("Stack",), same_shapes, lambda a, b: tinyflo.stack([a, b], axis=-1)),
    Case("unbind", ("Unbind", "UnbindPart"), with_axis,
         lambda a: sum(p * (i + 1) for i, p in enumerate(a.unbind(0)))),
    Case("unbind-one-part-twice", ("Unbind", "UnbindPart"), with_axis,
         lambda a: (lambda parts: parts[1] * 2 + parts[1].exp())(a.unbind(-1))),
    Case("where", ("Where",), two_broadcast, lambda a, b: tinyflo.where(a > b, a, b)),
    Case("to-device", ("To",), one, lambda a: (a.to("cpu:1") * 2).to(a.device) if a.device.type == "cpu" else a.cpu()),
]


def _differing_axis(a: Tensor, b: Tensor) -> int:
    """The axis along which two cat inputs differ (0 when they are equal)."""
    return next((i for i, (m, n) in enumerate(zip(a.shape, b.shape)) if m != n), 0)


def _inputs(shapes, seed, positive, device, layout):
    """Float64 inputs away from kinks (|x| >= 0.2) and ties; the first one laid out as asked."""
    rng = np.random.default_rng(seed)
    tensors = []
    # distinct magnitudes at least 1e-3 apart, across all the inputs: max, sorting and where(a > b)
    # never meet a near-tie that the finite difference (a step of 1e-6) would cross
    sizes = [int(np.prod(shape)) for shape in shapes]
    grid = rng.permutation(np.linspace(0.2, 2.0, 1801))[: sum(sizes)] + rng.uniform(0.0, 1e-4, sum(sizes))
    starts = np.cumsum([0, *sizes])
    for i, shape in enumerate(shapes):
        magnitude = grid[starts[i] : starts[i + 1]].reshape(shape)
        values = magnitude if positive else magnitude * rng.choice([-1.0, 1.0], size=shape)
        if i == 0 and layout == "transposed" and sum(n > 1 for n in shape) >= 2:
            values = np.ascontiguousarray(values.T).T  # same values, a non-contiguous view
            assert not values.flags.c_contiguous
        elif i == 0 and layout == "strided" and shape and shape[0] > 1:
            spaced = np.zeros((2 * shape[0],) + shape[1:])
            spaced[::2] = values
            values = spaced[::2]  # every other row of a bigger array
            assert not values.flags.c_contiguous
        tensors.append(Tensor(values, device=device, requires_grad=True))
    return tensors


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16), layout=st.sampled_from(["contiguous", "transposed", "strided"]))
def test_autograd_gradcheck_every_op(case: Case, data, seed, layout, device):
    shapes = case.shapes(data.draw)
    inputs = _inputs(shapes, seed, case.positive, device, layout)
    assert gradcheck(case.fn, *inputs)


def test_autograd_gradcheck_covers_every_function():
    """Each Function subclass of the tensor module is exercised by some row above."""
    functions = functions_defined_in(core_tensor)
    covered = {name for case in CASES for name in case.covers}
    assert functions - covered == set(), f"ops without a gradcheck row: {sorted(functions - covered)}"


def test_autograd_gradcheck_catches_a_wrong_backward():
    class Twice(core_tensor.Function):
        def forward(self, a):
            return a + a

        def backward(self, grad):
            return grad  # should be 2 * grad

    x = Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(tinyflo.GradcheckError, match="input 0"):
        gradcheck(lambda a: Twice.apply(a), x)


def test_autograd_gradcheck_refuses_float32():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(lambda a: a * 2, Tensor([1.0, 2.0], requires_grad=True))
