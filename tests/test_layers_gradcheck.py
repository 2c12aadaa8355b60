"""Every activation and every layer's forward against float64 central differences, on generated shapes.

Two tables: functions of tensors (the activations), and layers whose parameters are checked
along with their input. ``test_layers_gradcheck_covers_every_function`` fails until every
``Function`` of ``tinyflo.core.layers`` has a row.
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
from tinyflo.core import layers as nn

SHAPE = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
BATCHED = hnp.array_shapes(min_dims=2, max_dims=3, min_side=2, max_side=4)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass(frozen=True)
class Case:
    """An activation to check: the input shapes to draw and the function of the inputs."""

    name: str
    covers: tuple[str, ...]  # the Function classes of core.layers this row exercises
    shapes: Callable[[st.DrawFn], tuple]
    fn: Callable[..., Tensor]


def one(draw):
    return (draw(SHAPE),)


def with_channel_weight(draw):
    shape = draw(BATCHED)
    return shape, (shape[1],)


def with_shared_weight(draw):
    return draw(SHAPE), (1,)


def query_key_value(draw):
    *batch, L, E = draw(hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4))
    S, Ev = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    return (*batch, L, E), (*batch, S, E), (*batch, S, Ev)


def self_attention(draw):
    *batch, L, E = draw(hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4))
    return (*batch, L, E), (*batch, L, E), (*batch, L, draw(st.integers(1, 3)))


def _dropout_fixed_mask(x: Tensor) -> Tensor:
    tinyflo.manual_seed(11)  # the same mask on every call gradcheck makes
    return nn.dropout(x, 0.4)


CASES = [
    Case("relu", (), one, nn.relu),
    Case("sigmoid", (), one, nn.sigmoid),
    Case("tanh", (), one, nn.tanh),
    Case("leaky_relu", (), one, lambda x: nn.leaky_relu(x, 0.2)),
    Case("elu", ("EluFn",), one, nn.elu),
    Case("elu-alpha", ("EluFn",), one, lambda x: nn.elu(x, alpha=0.3)),
    Case("selu", ("EluFn",), one, nn.selu),
    Case("gelu", ("GeluFn",), one, nn.gelu),
    Case("gelu-tanh", ("GeluTanhFn",), one, lambda x: nn.gelu(x, approximate="tanh")),
    Case("silu", (), one, nn.silu),
    Case("mish", ("SoftplusFn",), one, nn.mish),
    Case("softplus", ("SoftplusFn",), one, nn.softplus),
    Case("softplus-beta-threshold", ("SoftplusFn",), one, lambda x: nn.softplus(x, beta=3.0, threshold=2.9)),
    Case("hardswish", (), one, nn.hardswish),
    Case("prelu-channels", (), with_channel_weight, nn.prelu),
    Case("prelu-shared", (), with_shared_weight, nn.prelu),
    Case("softmax", ("SoftmaxFn",), one, nn.softmax),
    Case("softmax-axis0", ("SoftmaxFn",), one, lambda x: nn.softmax(x, axis=0)),
    Case("log_softmax", ("LogSoftmaxFn",), one, nn.log_softmax),
    Case("log_softmax-axis0", ("LogSoftmaxFn",), one, lambda x: nn.log_softmax(x, axis=0)),
    Case("dropout-fixed-mask", (), one, _dropout_fixed_mask),
    Case("gelu-tanh-graded", ("GeluFn",), one, lambda x: nn._graded_gelu(x, approximate="tanh")),
    Case("attention", ("ScaledDotProductAttentionFn",), query_key_value, nn.scaled_dot_product_attention),
    Case("attention-causal", ("ScaledDotProductAttentionFn",), self_attention,
         lambda q, k, v: nn.scaled_dot_product_attention(q, k, v, is_causal=True)),
]


def _inputs(shapes, seed, device):
    """Float64 inputs away from the kinks of relu and friends (|x| >= 0.2)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        values = rng.uniform(0.2, 2.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        out.append(Tensor(values, device=device, requires_grad=True))
    return out


@pytest.mark.task("layers_activations")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_layers_activations_gradcheck_every_function(case: Case, data, seed, device):
    inputs = _inputs(case.shapes(data.draw), seed, device)
    assert gradcheck(case.fn, *inputs)


# ----- layers: the input and every parameter are checked -----------------------------

@dataclass(frozen=True)
class LayerCase:
    """A layer to check: how to draw its input shape and how to build it for that shape."""

    name: str
    shapes: Callable[[st.DrawFn], tuple[int, ...]]
    build: Callable[[tuple[int, ...]], nn.Module]
    integer_input: int | None = None  # Embedding: indices below this bound instead of floats
    covers: tuple[str, ...] = ()  # the Function classes of core.layers this row exercises


def batch_features(draw):
    return draw(BATCHED)


def batch_channels(draw):
    return draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=2, max_side=4))


LAYER_CASES = [
    LayerCase("linear", batch_features, lambda s: nn.Linear(s[-1], 3), covers=("LinearFn",)),
    LayerCase("linear-no-bias", batch_features, lambda s: nn.Linear(s[-1], 2, bias=False), covers=("LinearFn",)),
    LayerCase("layernorm", batch_features, lambda s: nn.LayerNorm(s[-1]), covers=("LayerNormFn",)),
    LayerCase("layernorm-2-axes", batch_features, lambda s: nn.LayerNorm(s[-2:]), covers=("LayerNormFn",)),
    LayerCase("batchnorm1d-train", batch_channels, lambda s: nn.BatchNorm1d(s[1])),
    LayerCase("batchnorm1d-eval", batch_channels, lambda s: nn.BatchNorm1d(s[1]).eval()),
    LayerCase("prelu", batch_channels, lambda s: nn.PReLU(s[1])),
    LayerCase("embedding", batch_features, lambda s: nn.Embedding(5, 3), integer_input=5),
    LayerCase("sequential-mlp", batch_features, lambda s: nn.Sequential(
        nn.Linear(s[-1], 4), nn.GELU(), nn.LayerNorm(4), nn.Linear(4, 2), nn.LogSoftmax())),
]


@pytest.mark.task("layers_linear")
@pytest.mark.parametrize("case", LAYER_CASES, ids=[c.name for c in LAYER_CASES])
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_layers_linear_gradcheck_every_layer(case: LayerCase, data, seed, device):
    shape = case.shapes(data.draw)
    tinyflo.manual_seed(seed)
    layer = case.build(shape).to(device, dtype=tinyflo.float64)
    if isinstance(layer, nn.BatchNorm1d) and not layer.training:
        with tinyflo.no_grad():  # eval mode uses running statistics: make them non-trivial
            layer.running_mean[...] = np.linspace(-1, 1, shape[1])
            layer.running_var[...] = np.linspace(0.5, 2, shape[1])
    params = list(layer.parameters())
    if case.integer_input is not None:
        indices = Tensor(np.random.default_rng(seed).integers(0, case.integer_input, size=shape), device=device)
        assert gradcheck(lambda *_: layer(indices), *params)
    else:
        (x,) = _inputs((shape,), seed, device)
        assert gradcheck(lambda inp, *_: layer(inp), x, *params)


@pytest.mark.task("layers_activations")
def test_layers_activations_gradcheck_covers_every_function():
    """Each Function subclass defined in core.layers is exercised by some row above."""
    functions = functions_defined_in(nn)
    covered = {name for case in CASES for name in case.covers}
    covered |= {name for case in LAYER_CASES for name in case.covers}
    assert functions, "core.layers defines no Function at all?"
    assert functions - covered == set(), f"Functions without a gradcheck row: {sorted(functions - covered)}"


@pytest.mark.task("layers_activations")
def test_layers_activations_every_public_activation_has_a_row():
    names = {"relu", "sigmoid", "tanh", "leaky_relu", "elu", "selu", "gelu", "silu", "mish",
             "softplus", "hardswish", "prelu", "softmax", "log_softmax"}
    assert names <= {c.name.split("-")[0] for c in CASES}
