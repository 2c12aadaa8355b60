"""Every convolution, pooling and normalisation option against float64 central differences.

One table: each row draws small (N, C, H, W) shapes with Hypothesis and builds the function of
the input (and of any weights) to check. ``test_conv_conv2d_gradcheck_covers_every_function``
fails until every ``Function`` of ``tinyflo.core.conv`` has a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from gradcheck_support import functions_defined_in
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyflo
from tinyflo import Tensor, gradcheck
from tinyflo.core import conv

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass(frozen=True)
class Case:
    """A row: its task, the Functions it exercises, how to draw the input shapes, the function to check."""

    name: str
    task: str
    covers: tuple[str, ...]
    shapes: Callable[[st.DrawFn], tuple[tuple[int, ...], ...]]
    fn: Callable[..., Tensor]


def image(draw, channels: int | None = None, low: int = 3, high: int = 6) -> tuple[int, ...]:
    n = draw(st.integers(1, 2))
    c = channels if channels is not None else draw(st.integers(1, 3))
    return (n, c, draw(st.integers(low, high)), draw(st.integers(low, high)))


def conv_shapes(kernel=(3, 3), groups=1, bias=True, low=3, channels_per_group=None):
    """An input, a weight with `groups` groups, and a bias (optional)."""
    def draw_shapes(draw):
        cg = channels_per_group or draw(st.integers(1, 2))
        ocg = draw(st.integers(1, 2))
        x = image(draw, channels=cg * groups, low=low)
        shapes = (x, (ocg * groups, cg, *kernel))
        return shapes + (((ocg * groups,),) if bias else ())
    return draw_shapes


def pool_input(draw):
    return (image(draw, low=4),)


def adaptive_input(draw):
    return (image(draw, low=2, high=7),)


CASES = [
    Case("conv2d", "conv_conv2d", ("Conv2dFn",), conv_shapes(), conv.conv2d),
    Case("conv2d-no-bias", "conv_conv2d", ("Conv2dFn",), conv_shapes(bias=False), conv.conv2d),
    Case("conv2d-stride", "conv_conv2d", ("Conv2dFn",), conv_shapes(),
         lambda x, w, b: conv.conv2d(x, w, b, stride=2)),
    Case("conv2d-padding", "conv_conv2d", ("Conv2dFn",), conv_shapes(),
         lambda x, w, b: conv.conv2d(x, w, b, padding=1)),
    Case("conv2d-dilation", "conv_conv2d", ("Conv2dFn",), conv_shapes(kernel=(2, 2)),
         lambda x, w, b: conv.conv2d(x, w, b, dilation=2)),
    Case("conv2d-groups", "conv_conv2d", ("Conv2dFn",), conv_shapes(groups=2),
         lambda x, w, b: conv.conv2d(x, w, b, groups=2)),
    Case("conv2d-depthwise", "conv_conv2d", ("Conv2dFn",), conv_shapes(groups=3, bias=False, channels_per_group=1),
         lambda x, w: conv.conv2d(x, w, groups=3)),
    Case("conv2d-1x1", "conv_conv2d", ("Conv2dFn",), conv_shapes(kernel=(1, 1), low=1), conv.conv2d),
    Case("conv2d-1x1-stride", "conv_conv2d", ("Conv2dFn",), conv_shapes(kernel=(1, 1), low=2),
         lambda x, w, b: conv.conv2d(x, w, b, stride=2)),
    Case("conv2d-non-square", "conv_conv2d", ("Conv2dFn",), conv_shapes(kernel=(3, 1)),
         lambda x, w, b: conv.conv2d(x, w, b, stride=(2, 1), padding=(0, 1), dilation=(1, 2))),
    Case("conv2d-everything", "conv_conv2d", ("Conv2dFn",), conv_shapes(kernel=(2, 3), groups=2),
         lambda x, w, b: conv.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2)),
    # the graded, readable forms that the fast ones above are checked against, and the per-image layout,
    # which conv2d keeps for outputs of more than BATCH_LAST_POSITIONS positions per image
    Case("conv2d-readable", "conv_conv2d", ("Conv2dUnfoldFn",), conv_shapes(kernel=(2, 3), groups=2),
         lambda x, w, b: conv.Conv2dUnfoldFn.apply(x, w, b, stride=(2, 1), padding=(1, 1), groups=2)),
    Case("conv2d-per-image-layout", "conv_conv2d", ("Conv2dFn",), lambda draw: ((1, 2, 17, 18), (2, 2, 2, 2), (2,)),
         conv.conv2d),
    Case("max_pool2d", "conv_max_pool", ("MaxPool2dFn",), pool_input, lambda x: conv.max_pool2d(x, 2)),
    Case("max_pool2d-readable", "conv_max_pool", ("MaxPool2dWindowsFn",), pool_input,
         lambda x: conv.MaxPool2dWindowsFn.apply(x, kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))),
    Case("max_pool2d-overlap-padding", "conv_max_pool", ("MaxPool2dFn",), pool_input,
         lambda x: conv.max_pool2d(x, 3, stride=1, padding=1)),
    Case("max_pool2d-dilation-non-square", "conv_max_pool", ("MaxPool2dFn",), pool_input,
         lambda x: conv.max_pool2d(x, (2, 1), stride=(1, 2), dilation=(2, 1))),
    Case("max_pool2d-padding-and-dilation", "conv_max_pool", ("MaxPool2dFn",), pool_input,
         lambda x: conv.max_pool2d(x, (3, 2), stride=(2, 1), padding=(1, 1), dilation=(2, 2))),
    Case("avg_pool2d", "conv_avg_pool", ("AvgPool2dFn",), pool_input, lambda x: conv.avg_pool2d(x, 2)),
    Case("avg_pool2d-overlap-padding", "conv_avg_pool", ("AvgPool2dFn",), pool_input,
         lambda x: conv.avg_pool2d(x, 3, stride=2, padding=1)),
    Case("avg_pool2d-exclude-pad", "conv_avg_pool", ("AvgPool2dFn",), pool_input,
         lambda x: conv.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
    Case("avg_pool2d-non-square", "conv_avg_pool", ("AvgPool2dFn",), pool_input,
         lambda x: conv.avg_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 0))),
    Case("adaptive_avg_pool2d-non-divisible", "conv_adaptive_avg_pool", (), adaptive_input,
         lambda x: conv.adaptive_avg_pool2d(x, (3, 2))),
    Case("adaptive_avg_pool2d-larger-than-input", "conv_adaptive_avg_pool", (), lambda draw: (image(draw, low=1, high=3),),
         lambda x: conv.adaptive_avg_pool2d(x, (4, 5))),
    Case("adaptive_avg_pool2d-global", "conv_adaptive_avg_pool", ("AvgPool2dFn",), adaptive_input,
         lambda x: conv.adaptive_avg_pool2d(x, 1)),
]


def _inputs(shapes, seed, device):
    """Float64 inputs whose values are all distinct (no ties for max pooling)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        size = int(np.prod(shape))
        values = rng.permutation(size).reshape(shape) * (3.0 / size) - 1.5 + rng.uniform(0, 0.1 / size, shape)
        out.append(Tensor(values, device=device, requires_grad=True))
    return out


def _check(case: Case, data, seed, device) -> None:
    inputs = _inputs(case.shapes(data.draw), seed, device)
    assert gradcheck(case.fn, *inputs)


@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("case", [c for c in CASES if c.task == "conv_conv2d"], ids=lambda c: c.name)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_conv2d_gradcheck_every_option(case: Case, data, seed, device):
    _check(case, data, seed, device)


@pytest.mark.task("conv_max_pool")
@pytest.mark.parametrize("case", [c for c in CASES if c.task == "conv_max_pool"], ids=lambda c: c.name)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_max_pool_gradcheck_every_option(case: Case, data, seed, device):
    _check(case, data, seed, device)


@pytest.mark.task("conv_avg_pool")
@pytest.mark.parametrize("case", [c for c in CASES if c.task == "conv_avg_pool"], ids=lambda c: c.name)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_avg_pool_gradcheck_every_option(case: Case, data, seed, device):
    _check(case, data, seed, device)


@pytest.mark.task("conv_adaptive_avg_pool")
@pytest.mark.parametrize("case", [c for c in CASES if c.task == "conv_adaptive_avg_pool"], ids=lambda c: c.name)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_adaptive_avg_pool_gradcheck_every_option(case: Case, data, seed, device):
    _check(case, data, seed, device)


# ----- layers: the input and every parameter are checked -----------------------------

LAYERS = {
    "Conv2d": lambda c: conv.Conv2d(c, 2, 3, padding=1),
    "Conv2d-1x1": lambda c: conv.Conv2d(c, 3, 1),
    "Conv2d-groups-no-bias": lambda c: conv.Conv2d(c, 2 * c, (2, 3), stride=2, groups=c, bias=False),
    "BatchNorm2d-train": lambda c: conv.BatchNorm2d(c),
    "BatchNorm2d-eval": lambda c: conv.BatchNorm2d(c).eval(),
    "BatchNorm2d-no-affine": lambda c: conv.BatchNorm2d(c, affine=False),
    "BatchNorm2d-momentum-none": lambda c: conv.BatchNorm2d(c, momentum=None),
}


@pytest.mark.task("conv_batchnorm")
@pytest.mark.parametrize("name", list(LAYERS))
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_batchnorm_and_layers_gradcheck(name, data, seed, device):
    shape = image(data.draw, low=3, high=5)
    tinyflo.manual_seed(seed)
    layer = LAYERS[name](shape[1]).to(device, dtype=tinyflo.float64)
    if isinstance(layer, conv.BatchNorm2d) and not layer.training:
        with tinyflo.no_grad():  # eval mode uses the running statistics: make them non-trivial
            layer.running_mean[...] = np.linspace(-1, 1, shape[1])
            layer.running_var[...] = np.linspace(0.5, 2, shape[1])
    (x,) = _inputs((shape,), seed, device)
    assert gradcheck(lambda inp, *_: layer(inp), x, *layer.parameters())


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_gradcheck_covers_every_function():
    """Each Function subclass defined in core.conv is exercised by some row above."""
    functions = functions_defined_in(conv)
    covered = {name for case in CASES for name in case.covers}
    assert functions, "core.conv defines no Function at all?"
    assert functions - covered == set(), f"Functions without a gradcheck row: {sorted(functions - covered)}"


@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_pools_every_public_function_has_a_row():
    names = {"conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"}
    assert names <= {c.name.split("-")[0] for c in CASES}
