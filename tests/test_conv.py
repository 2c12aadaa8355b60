"""Module 10: im2col/col2im, conv2d, pooling, BatchNorm2d and LeNet5 against NumPy references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tinyflo
from tinyflo import ShapeError, Tensor
from tinyflo.core import conv

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def geometries(draw):
    """An (N, C, H, W) shape and kernel/stride/padding/dilation pairs under which the kernel fits."""
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    h, w = (draw(st.integers(max(1, s - 2 * p), s + 4)) for s, p in zip(span, padding))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w), kernel, stride, padding, dilation


LAYOUTS = st.sampled_from(["contiguous", "transposed", "flipped"])


def arrange(x: np.ndarray, layout: str) -> np.ndarray:
    """The same values as x, in memory that is contiguous, transposed (H and W swapped) or flipped (stride < 0)."""
    if layout == "transposed":
        out = np.ascontiguousarray(x.swapaxes(2, 3)).swapaxes(2, 3)
    elif layout == "flipped":
        out = np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1]
    else:
        return x
    return out


def im2col_loops(x, kernel, stride, padding, dilation):
    """One row per output position, each the (c, kh, kw)-ordered window, by explicit loops."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, h, w = padded.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    return np.array([padded[b, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw].ravel()
                     for b in range(n) for i in range(oh) for j in range(ow)])


def conv2d_loops(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """The definition of conv2d: each output channel's filter against its group's im2col rows."""
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    outs = []
    for g in range(groups):
        cols = im2col_loops(x[:, g * cg:(g + 1) * cg], (kh, kw), stride, padding, dilation)
        outs.append(cols @ w[g * (oc // groups):(g + 1) * (oc // groups)].reshape(oc // groups, -1).T)
    oh = conv.conv_output_size(h, kh, stride[0], padding[0], dilation[0])
    ow = conv.conv_output_size(wd, kw, stride[1], padding[1], dilation[1])
    out = np.concatenate(outs, axis=1).reshape(n, oh, ow, oc).transpose(0, 3, 1, 2)
    return out if b is None else out + b[None, :, None, None]


# ----- conv_im2col ---------------------------------------------------------------------

@pytest.mark.task("conv_im2col")
@pytest.mark.task("conv_col2im")
@SETTINGS
@given(geometry=geometries(), layout=LAYOUTS, seed=st.integers(0, 2**16))
def test_conv_im2col_matches_loops_and_col2im_is_its_adjoint(geometry, layout, seed):
    shape, kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(seed)
    x = arrange(rng.standard_normal(shape), layout)
    cols = conv.im2col(x, kernel, stride, padding, dilation)
    np.testing.assert_array_equal(cols, im2col_loops(x, kernel, stride, padding, dilation))
    c = rng.standard_normal(cols.shape)
    back = conv.col2im(c, shape, kernel, stride, padding, dilation)
    assert back.shape == shape
    assert np.isclose((cols * c).sum(), (x * back).sum()), "<im2col(x), c> == <x, col2im(c)>"


@pytest.mark.task("conv_im2col")
def test_conv_im2col_layout_rows_are_positions_columns_are_channel_then_kernel():
    x = np.arange(2 * 2 * 3 * 3, dtype=np.float32).reshape(2, 2, 3, 3)
    cols = conv.im2col(x, 2)
    assert cols.shape == (2 * 2 * 2, 2 * 2 * 2) and cols.dtype == np.float32
    np.testing.assert_array_equal(cols[5], x[1, :, 0:2, 1:3].ravel())  # n=1, oh=0, ow=1


@pytest.mark.task("conv_col2im")
def test_conv_col2im_overlaps_add_up_and_padding_is_cut_off():
    counts = conv.col2im(np.ones((9, 9)), (1, 1, 3, 3), 3, padding=1)
    np.testing.assert_array_equal(counts[0, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


@pytest.mark.task("conv_im2col")
def test_conv_im2col_windows_are_a_view_without_padding():
    x = np.zeros((1, 2, 6, 6), np.float32)
    assert np.shares_memory(conv._windows(x, (3, 3), (1, 1), (0, 0), (1, 1)), x)


@pytest.mark.task("conv_im2col")
def test_conv_im2col_is_a_view_of_its_input_only_when_the_windows_are_the_pixels():
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    assert np.shares_memory(conv.im2col(x, 1), x), "1×1 kernel, stride 1, C = 1: the documented view"
    assert not np.shares_memory(conv.im2col(np.ones((1, 2, 3, 4)), 1), x)
    assert not np.shares_memory(conv.im2col(x, 2), x)


@pytest.mark.task("conv_im2col")
@pytest.mark.task("conv_col2im")
def test_conv_im2col_errors_name_the_problem():
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(ShapeError, match=r"\(1, 1, 4, 4\)"):
        conv.im2col(x, 5)
    with pytest.raises(ShapeError, match="dilation"):
        conv.im2col(x, 3, dilation=2)
    with pytest.raises(ShapeError, match="expected columns of shape"):
        conv.col2im(np.ones((3, 9)), (1, 1, 4, 4), 3)
    with pytest.raises(ValueError, match="stride"):
        conv.im2col(x, 2, stride=0)
    with pytest.raises(TypeError, match="kernel_size"):
        conv.im2col(x, (1, 2, 3))
    with pytest.raises(ShapeError, match=r"\(N, C, H, W\)"):
        conv.im2col(np.zeros((4, 4)), 2)
    for bad in (None, 1.5, (1.0, 2), (1, 2, 3), "3", True):
        with pytest.raises(TypeError, match=r"im2col: padding must be an int or a pair of ints; got "):
            conv.im2col(x, 2, padding=bad)
    assert conv.im2col(x, np.int64(2), stride=[np.int32(2), 2]).shape == (4, 4)


# ----- conv_conv2d ---------------------------------------------------------------------

@pytest.mark.task("conv_conv2d")
@SETTINGS
@given(geometry=geometries(), groups=st.sampled_from([1, 2]), bias=st.booleans(), layout=LAYOUTS,
       seed=st.integers(0, 2**16))
def test_conv_conv2d_matches_the_definition(geometry, groups, bias, layout, seed, device):
    (n, c, h, w), kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(seed)
    x = arrange(rng.standard_normal((n, c * groups, h, w)).astype(np.float32), layout)
    weight = rng.standard_normal((2 * groups, c, *kernel)).astype(np.float32)
    b = rng.standard_normal(2 * groups).astype(np.float32) if bias else None
    out = conv.conv2d(Tensor(x, device=device), Tensor(weight, device=device),
                      None if b is None else Tensor(b, device=device), stride, padding, dilation, groups)
    assert out.dtype == np.float32 and out.device == tinyflo.device(device)
    np.testing.assert_allclose(out.numpy(), conv2d_loops(x, weight, b, stride, padding, dilation, groups),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_float32_stays_float32_through_backward(device):
    layer = conv.Conv2d(3, 4, 3, stride=2, padding=1).to(device)
    x = tinyflo.randn(2, 3, 7, 7, device=device, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = layer(x)
        out.sum().backward()
    assert out.dtype == x.grad.dtype == layer.weight.grad.dtype == layer.bias.grad.dtype == np.float32


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_float16_works_and_stays_float16():
    layer = conv.Conv2d(2, 3, 3, padding=1).half()
    x = Tensor(np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float16), requires_grad=True)
    out = layer(x)
    out.sum().backward()
    assert out.dtype == x.grad.dtype == layer.weight.grad.dtype == np.float16
    ref = conv2d_loops(x.numpy().astype(np.float64), layer.weight.numpy().astype(np.float64),
                       layer.bias.numpy().astype(np.float64), padding=(1, 1))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.task("conv_conv2d_layer")
def test_conv_conv2d_layer_init_like_pytorch():
    tinyflo.manual_seed(0)
    layer = conv.Conv2d(4, 8, (3, 5), groups=2)
    fan_in = 2 * 3 * 5
    assert layer.weight.shape == (8, 2, 3, 5) and layer.bias.shape == (8,)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert 0.9 / math.sqrt(fan_in) < np.abs(w).max() <= 1 / math.sqrt(fan_in)  # kaiming_uniform, a=√5
    assert np.abs(b).max() <= 1 / math.sqrt(fan_in)
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert layer.kernel_size == (3, 5) and layer.stride == (1, 1) and layer.padding == (0, 0)
    assert repr(layer) == "Conv2d(4, 8, kernel_size=(3, 5), stride=(1, 1), groups=2)"
    assert repr(conv.Conv2d(1, 2, 3, padding=1, bias=False)) == \
        "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)"
    tinyflo.manual_seed(0)
    again = conv.Conv2d(4, 8, (3, 5), groups=2)
    np.testing.assert_array_equal(again.weight.numpy(), w)


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_virtual_devices_and_mixing_is_an_error():
    layer = conv.Conv2d(1, 2, 3).to("cpu:1")
    out = layer(tinyflo.randn(1, 1, 5, 5, device="cpu:1"))
    assert out.device == tinyflo.device("cpu:1")
    with pytest.raises(tinyflo.DeviceError):
        layer(tinyflo.randn(1, 1, 5, 5))


@pytest.mark.task("conv_conv2d")
@pytest.mark.task("conv_conv2d_layer")
def test_conv_conv2d_errors_are_for_people():
    with pytest.raises(ShapeError) as err:
        conv.Conv2d(1, 6, 5)(tinyflo.randn(32, 3, 28, 28))
    assert str(err.value) == "Conv2d(1, 6, 5) got input of shape (32, 3, 28, 28); expected (N, 1, H, W)"
    with pytest.raises(ShapeError, match=r"Conv2d\(1, 6, 5\) got input of shape \(28, 28\)"):
        conv.Conv2d(1, 6, 5)(tinyflo.randn(28, 28))
    with pytest.raises(ShapeError, match="spans 5 pixels"):
        conv.Conv2d(1, 6, 5)(tinyflo.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"in_channels \(3\) must be divisible by groups \(2\)"):
        conv.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match=r"out_channels \(3\) must be divisible by groups \(2\)"):
        conv.Conv2d(4, 3, 3, groups=2)
    with pytest.raises(TypeError, match="float64"):
        conv.Conv2d(1, 2, 3)(tinyflo.randn(1, 1, 4, 4).double())
    x, w = tinyflo.randn(1, 4, 5, 5), tinyflo.randn(6, 2, 3, 3)
    with pytest.raises(ShapeError, match="expects 2"):
        conv.conv2d(x, w)
    with pytest.raises(ValueError, match="groups"):
        conv.conv2d(x, w, groups=4)
    with pytest.raises(ShapeError, match=r"bias of shape \(5,\); expected \(6,\)"):
        conv.conv2d(x, w, tinyflo.randn(5), groups=2)
    with pytest.raises(ValueError, match="padding"):
        conv.conv2d(x, w, padding=-1, groups=2)
    with pytest.raises(TypeError, match=r"conv2d: padding must be an int or a pair of ints; got None"):
        conv.conv2d(x, w, padding=None, groups=2)
    with pytest.raises(TypeError, match=r"conv2d: groups must be an int; got 2.0"):
        conv.conv2d(x, w, groups=2.0)
    with pytest.raises(TypeError, match=r"conv2d: bias is float64 but weight is float32"):
        conv.conv2d(x, w, tinyflo.randn(6).double(), groups=2)


@pytest.mark.task("conv_conv2d_layer")
def test_conv_conv2d_layer_checks_its_arguments_when_built():
    for kwargs, match in (({"kernel_size": 0}, r"Conv2d: kernel_size must be at least 1; got \(0, 0\)"),
                          ({"stride": (1, 0)}, r"Conv2d: stride must be at least 1; got \(1, 0\)"),
                          ({"dilation": 0}, "dilation"), ({"padding": -1}, "padding"),
                          ({"groups": 0}, r"Conv2d: groups must be a positive int; got 0")):
        with pytest.raises(ValueError, match=match):
            conv.Conv2d(1, 2, **{"kernel_size": 3, **kwargs})
    with pytest.raises(ValueError, match="groups must be a positive int; got 1.0"):
        conv.Conv2d(1, 2, 3, groups=1.0)
    with pytest.raises(TypeError, match=r"Conv2d: padding must be an int or a pair of ints; got None"):
        conv.Conv2d(1, 2, 3, padding=None)
    assert conv.Conv2d(np.int64(2), 4, np.int64(3), groups=np.int64(2)).kernel_size == (3, 3)


@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_conv2d_batch_of_zero_images(groups, device):
    layer = conv.Conv2d(2, 4, 3, padding=1, groups=groups).to(device)
    x = Tensor(np.zeros((0, 2, 5, 5), np.float32), device=device, requires_grad=True)
    out = layer(x)
    assert out.shape == (0, 4, 5, 5) and out.dtype == np.float32
    out.sum().backward()
    assert x.grad.shape == (0, 2, 5, 5)
    assert not layer.weight.grad.numpy().any() and not layer.bias.grad.numpy().any()


@pytest.mark.task("conv_conv2d_layer")
def test_conv_conv2d_layer_integer_input_becomes_the_weights_dtype():
    out = conv.Conv2d(1, 2, 2)(Tensor(np.ones((1, 1, 3, 3), np.int64)))
    assert out.dtype == np.float32


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_skips_the_input_gradient_of_a_data_batch(monkeypatch):
    layer = conv.Conv2d(1, 2, 3)
    x = tinyflo.randn(2, 1, 5, 5)

    def fold(*args, **kwargs):
        raise AssertionError("fold called: the gradient of an input that needs none was computed")

    monkeypatch.setattr(conv, "col2im", fold)
    monkeypatch.setattr(conv, "_fold", fold)
    monkeypatch.setattr(conv, "_fold_last", fold)  # the batch-last layout's fold
    layer(x).sum().backward()
    assert x.grad is None and layer.weight.grad is not None
    with pytest.raises(AssertionError, match="fold called"):  # the patch is live: a needed gradient calls it
        layer(tinyflo.randn(2, 1, 5, 5, requires_grad=True)).sum().backward()


# ----- conv_max_pool, conv_avg_pool, conv_adaptive_avg_pool -----------------------------------------------------------------------

@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@SETTINGS
@given(geometry=geometries(), layout=LAYOUTS, seed=st.integers(0, 2**16))
def test_conv_max_pool_and_avg_pool_match_window_reductions(geometry, layout, seed):
    shape, kernel, stride, padding, dilation = geometry
    padding = tuple(min(p, k // 2) for p, k in zip(padding, kernel))
    span = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    assume(all(s <= size + 2 * p for s, size, p in zip(span, shape[2:], padding)))
    assume(not _only_padding(shape, kernel, stride, padding, dilation))
    x = arrange(np.random.default_rng(seed).standard_normal(shape), layout)
    n, c = shape[:2]
    for pool, fill, reduce in ((conv.max_pool2d, -np.inf, np.max), (conv.avg_pool2d, 0.0, np.mean)):
        if pool is conv.avg_pool2d and dilation != (1, 1):
            continue
        args = (kernel, stride, padding) + ((dilation,) if pool is conv.max_pool2d else ())
        padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=fill)
        cols = im2col_loops(padded, kernel, stride, (0, 0), dilation if pool is conv.max_pool2d else (1, 1))
        out = pool(Tensor(x), *args).numpy()
        expected = reduce(cols.reshape(n, out.shape[2], out.shape[3], c, -1), axis=-1).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(out, expected, rtol=1e-12)


def _only_padding(shape, kernel, stride, padding, dilation):
    """Whether some window of this geometry holds padding only, by listing every window's taps."""
    for size, k, s, p, d in zip(shape[2:], kernel, stride, padding, dilation):
        for o in range(conv.conv_output_size(size, k, s, p, d)):
            if not any(0 <= o * s + i * d - p < size for i in range(k)):
                return True
    return False


@pytest.mark.task("conv_max_pool")
def test_conv_max_pool_windows_of_padding_only_are_an_error():
    x = tinyflo.randn(1, 2, 1, 9)
    with pytest.raises(ShapeError, match=r"max_pool2d: output row 0 would pool only padding \(input of shape "
                                         r"\(1, 2, 1, 9\), kernel \(2, 2\), stride \(3, 3\), padding \(1, 1\), "
                                         r"dilation \(2, 1\)\)"):
        conv.max_pool2d(x, 2, 3, 1, (2, 1))
    assert conv.max_pool2d(x, 2, 3, 1, (1, 2)).shape == (1, 2, 1, 3)  # each window keeps a real pixel


@pytest.mark.task("conv_max_pool")
def test_conv_max_pool_ties_send_the_gradient_to_one_element(device):
    x = tinyflo.ones(1, 1, 4, 4, device=device, requires_grad=True)
    conv.max_pool2d(x, 2).sum().backward()
    grad = x.grad.numpy()[0, 0]
    assert grad.sum() == 4 and grad[::2, ::2].tolist() == [[1, 1], [1, 1]], "the first maximum of each window"


@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_pools_dtypes(device):
    for dtype in (np.float32, np.float16):
        x = Tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(dtype), device=device,
                   requires_grad=True)
        for fn in (lambda t: conv.max_pool2d(t, 2), lambda t: conv.avg_pool2d(t, 3, 1, 1),
                   lambda t: conv.adaptive_avg_pool2d(t, (4, 5)), lambda t: conv.adaptive_avg_pool2d(t, 1)):
            x.grad = None
            out = fn(x)
            out.sum().backward()
            assert out.dtype == x.grad.dtype == dtype
    ints = Tensor(np.arange(16).reshape(1, 1, 4, 4))
    assert conv.max_pool2d(ints, 3, 1, 1).numpy()[0, 0, 0].tolist() == [5, 6, 7, 7]
    negative = Tensor(-np.arange(1, 17, dtype=np.int32).reshape(1, 1, 4, 4))
    assert conv.max_pool2d(negative, 3, 1, 1).numpy()[0, 0, 0].tolist() == [-1, -1, -2, -3], "padding never wins"
    with pytest.raises(TypeError, match="max_pool2d: expected a numeric input; got bool"):
        conv.max_pool2d(Tensor(np.ones((1, 1, 4, 4), bool)), 2)


@pytest.mark.task("conv_max_pool")
def test_conv_max_pool_bfloat16(device):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = -np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    x = Tensor(values.astype(ml_dtypes.bfloat16), device=device, requires_grad=True)
    out = conv.max_pool2d(x, 3, 1, 1)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.numpy().astype(np.float32),
                                  conv.max_pool2d(Tensor(values), 3, 1, 1).numpy())
    out.sum().backward()
    assert x.grad.dtype == ml_dtypes.bfloat16 and x.grad.numpy().astype(np.float32).sum() == 16


@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_pools_batch_of_zero_images(device):
    for fn in (lambda t: conv.max_pool2d(t, 2), lambda t: conv.avg_pool2d(t, 3, 1, 1),
               lambda t: conv.adaptive_avg_pool2d(t, 3)):
        x = Tensor(np.zeros((0, 2, 6, 6), np.float32), device=device, requires_grad=True)
        out = fn(x)
        out.sum().backward()
        assert out.shape[:2] == (0, 2) and x.grad.shape == (0, 2, 6, 6)


@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_avg_pool_float16_averages_accumulate_in_float32():
    x = Tensor(np.full((1, 1, 64, 64), 2049, np.float16))
    assert conv.avg_pool2d(x, 64).item() == 2048  # the nearest float16; a float16 sum would overflow to inf
    assert conv.adaptive_avg_pool2d(x, 3).numpy().min() == 2048


@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_adaptive_avg_pool_uses_pytorchs_windows():
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 7))
    out = conv.adaptive_avg_pool2d(Tensor(x), (3, 4)).numpy()
    for i in range(3):
        for j in range(4):
            r = slice(i * 5 // 3, math.ceil((i + 1) * 5 / 3))
            c = slice(j * 7 // 4, math.ceil((j + 1) * 7 / 4))
            np.testing.assert_allclose(out[:, :, i, j], x[:, :, r, c].mean(axis=(2, 3)))
    assert conv.adaptive_avg_pool2d(Tensor(x), (None, 2)).shape == (2, 2, 5, 2)
    assert conv.AdaptiveAvgPool2d((8, 9))(Tensor(x)).shape == (2, 2, 8, 9)  # larger than the input works too


@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
def test_conv_pools_layers_and_errors():
    x = tinyflo.randn(2, 3, 8, 8)
    assert conv.MaxPool2d(2)(x).shape == (2, 3, 4, 4) and conv.MaxPool2d(3, 1, 1)(x).shape == (2, 3, 8, 8)
    assert conv.AvgPool2d(2)(x).shape == (2, 3, 4, 4) and conv.AdaptiveAvgPool2d(1)(x).shape == (2, 3, 1, 1)
    assert repr(conv.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1)"
    assert repr(conv.AvgPool2d(3, 2)) == "AvgPool2d(kernel_size=3, stride=2, padding=0)"
    assert list(conv.MaxPool2d(2).parameters()) == []
    with pytest.raises(ValueError, match="padding"):
        conv.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="padding"):
        conv.avg_pool2d(x, 3, padding=2)
    with pytest.raises(ShapeError, match=r"\(3, 8, 8\)"):
        conv.max_pool2d(tinyflo.randn(3, 8, 8), 2)
    with pytest.raises(ShapeError, match="spans 9 pixels"):
        conv.avg_pool2d(x, 9)
    with pytest.raises(ValueError, match="output_size"):
        conv.adaptive_avg_pool2d(x, 0)
    with pytest.raises(ShapeError):
        conv.adaptive_avg_pool2d(tinyflo.randn(8, 8), 2)
    for bad in (2.0, (3,), (1, 2, 3), (2, 1.5), "2"):
        with pytest.raises(TypeError, match=r"adaptive_avg_pool2d: output_size must be an int or a pair of ints "
                                            r"\(or None\); got "):
            conv.adaptive_avg_pool2d(x, bad)
    assert conv.adaptive_avg_pool2d(x, np.int64(3)).shape == (2, 3, 3, 3)
    assert conv.adaptive_avg_pool2d(x, (np.int32(3), None)).shape == (2, 3, 3, 8)


# ----- conv_batchnorm ------------------------------------------------------------------

@pytest.mark.task("conv_batchnorm")
@SETTINGS
@given(n=st.integers(1, 4), c=st.integers(1, 3), h=st.integers(2, 4), w=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_conv_batchnorm_normalises_each_channel_over_batch_and_positions(n, c, h, w, seed):
    x = (np.random.default_rng(seed).standard_normal((n, c, h, w)) * 3 + 1).astype(np.float32)
    bn = conv.BatchNorm2d(c, momentum=0.5)
    out = bn(Tensor(x)).numpy()
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * mean.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-4)


@pytest.mark.task("conv_batchnorm")
def test_conv_batchnorm_reuses_batchnorm1d_state_and_dtypes(device):
    bn = conv.BatchNorm2d(4).to(device)
    assert isinstance(bn, tinyflo.core.layers.BatchNorm1d)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert repr(bn) == "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True)"
    x = tinyflo.randn(2, 4, 3, 3, device=device, requires_grad=True)
    out = bn(x)
    out.sum().backward()
    assert out.dtype == x.grad.dtype == np.float32
    half = conv.BatchNorm2d(4).to(device).half()
    assert half(x.detach().half() * 500).dtype == np.float16
    assert np.isfinite(half(x.detach().half() * 500).numpy()).all()


@pytest.mark.task("conv_batchnorm")
def test_conv_batchnorm_momentum_none_is_a_cumulative_average():
    rng = np.random.default_rng(4)
    batches = [(rng.standard_normal((3, 2, 4, 5)) * (k + 1) + k).astype(np.float32) for k in range(3)]
    bn = conv.BatchNorm2d(2, momentum=None)
    for x in batches:
        bn(Tensor(x))
    means = np.mean([x.mean(axis=(0, 2, 3)) for x in batches], axis=0)
    variances = np.mean([x.var(axis=(0, 2, 3), ddof=1) for x in batches], axis=0)
    np.testing.assert_allclose(bn.running_mean.numpy(), means, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), variances, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 3


@pytest.mark.task("conv_batchnorm")
def test_conv_batchnorm_errors():
    with pytest.raises(ShapeError) as err:
        conv.BatchNorm2d(4)(tinyflo.randn(6, 4))
    assert str(err.value) == "BatchNorm2d(4) got input of shape (6, 4); expected (N, 4, H, W)"
    with pytest.raises(ShapeError, match=r"\(2, 3, 5, 5\)"):
        conv.BatchNorm2d(4)(tinyflo.randn(2, 3, 5, 5))
    with pytest.raises(ValueError, match="BatchNorm2d: training needs more than 1 value per channel"):
        conv.BatchNorm2d(4)(tinyflo.randn(1, 4, 1, 1))
    assert conv.BatchNorm2d(4).eval()(tinyflo.randn(1, 4, 1, 1)).shape == (1, 4, 1, 1)


# ----- LeNet5 ---------------------------------------------------------------------------

@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("size", [28, 32])
def test_conv_conv2d_lenet5_shapes(size):
    tinyflo.manual_seed(0)
    model = conv.LeNet5()
    assert model.num_parameters() == 61_706  # the same weights for both input sizes
    x = tinyflo.randn(3, 1, size, size)
    out = model(x)
    assert out.shape == (3, 10) and out.dtype == np.float32
    out.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == np.float32 for p in model.parameters())
    assert conv.LeNet5(num_classes=7, in_channels=3)(tinyflo.randn(2, 3, size, size)).shape == (2, 7)


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_lenet5_28_is_32_zero_padded():
    model = conv.LeNet5()
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    np.testing.assert_allclose(model(Tensor(x)).numpy(), model(Tensor(padded)).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"LeNet5 got input of shape \(2, 1, 30, 30\); expected \(N, 1, 32, 32\)"):
        model(tinyflo.randn(2, 1, 30, 30))


# ----- the fast forms the package runs equal the readable ones graded in the module -------------------------------------


def _conv_results(fn, x, weight, bias, device, **geometry):
    """Output and input, weight and bias gradients of fn under (output²).sum(), as NumPy arrays."""
    xt, wt = Tensor(x, device=device, requires_grad=True), Tensor(weight, device=device, requires_grad=True)
    inputs = (xt, wt) if bias is None else (xt, wt, Tensor(bias, device=device, requires_grad=True))
    out = fn.apply(*inputs, **geometry)
    (out * out).sum().backward()
    return [out.numpy()] + [t.grad.numpy() for t in inputs]


@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("layout", ["batch last", "per image"])
@SETTINGS
@given(geometry=geometries(), groups=st.sampled_from([1, 2, 3]), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_conv_conv2d_fast_form_equals_the_readable_one(geometry, groups, bias, seed, layout, device, monkeypatch):
    """Conv2dFn (one GEMM over the batch, batch last) against Conv2dUnfoldFn, the graded per-image form,
    with the layout forced either way: stride, padding, dilation, non-square, batch 1 and channel 1 included."""
    monkeypatch.setattr(conv, "BATCH_LAST_POSITIONS", 10**9 if layout == "batch last" else -1)
    (n, c, h, w), kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c * groups, h, w))
    weight = rng.standard_normal((int(rng.integers(1, 3)) * groups, c, *kernel))
    b = rng.standard_normal(weight.shape[0]) if bias else None
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    fast = _conv_results(conv.Conv2dFn, x, weight, b, device, **geometry)
    readable = _conv_results(conv.Conv2dUnfoldFn, x, weight, b, device, **geometry)
    for got, expected, name in zip(fast, readable, ["output", "input grad", "weight grad", "bias grad"]):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10, err_msg=name)


@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("shape", [(128, 6, 14, 14), (3, 1, 28, 28), (1, 2, 30, 17)])
def test_conv_conv2d_picks_a_layout_by_output_size_and_both_keep_float32(shape, device):
    """LeNet's conv2 (10×10 outputs) runs batch last; large outputs per image keep the per-image GEMMs."""
    x = tinyflo.randn(*shape, device=device, requires_grad=True)
    layer = conv.Conv2d(shape[1], 4, 5).to(device)
    out = layer(x)
    assert out.grad_fn.batch_last == (out.shape[2] * out.shape[3] <= conv.BATCH_LAST_POSITIONS)
    out.sum().backward()
    assert out.dtype == x.grad.dtype == layer.weight.grad.dtype == layer.bias.grad.dtype == np.float32


@pytest.mark.task("conv_max_pool")
@SETTINGS
@given(n=st.integers(1, 3), c=st.integers(1, 3), kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       extra=st.tuples(st.integers(0, 2), st.integers(0, 2)), out=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.float64, np.int32]))
def test_conv_max_pool_tiling_backward_equals_the_general_one(n, c, kernel, extra, out, seed, dtype, device):
    """MaxPool2dFn's tiling backward (stride == kernel) against MaxPool2dWindowsFn's, ties included:
    small integers make many equal maxima, and rows or columns left over are in no window."""
    h, w = (o * k + min(e, k - 1) for o, k, e in zip(out, kernel, extra))
    x = np.random.default_rng(seed).integers(0, 3, (n, c, h, w)).astype(dtype)
    grads = []
    for fn in (conv.MaxPool2dFn, conv.MaxPool2dWindowsFn):
        t = Tensor(x, device=device, requires_grad=dtype != np.int32)
        pooled = fn.apply(t, kernel=kernel, stride=kernel, padding=(0, 0), dilation=(1, 1))
        grads.append(pooled.numpy())
        if t.requires_grad:
            pooled.sum().backward()
            grads.append(t.grad.numpy())
            assert t.grad.dtype == dtype
    for got, expected in zip(grads[:len(grads) // 2], grads[len(grads) // 2:]):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.task("conv_max_pool")
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_conv_max_pool_tiling_backward_keeps_a_non_finite_gradient_at_the_maximum(bad, device):
    """An inf or NaN output gradient reaches its window's maximum only; the other pixels get exactly 0."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    grads = []
    for fn in (conv.MaxPool2dFn, conv.MaxPool2dWindowsFn):
        t = Tensor(x, device=device, requires_grad=True)
        pooled = fn.apply(t, kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
        upstream = np.array([[[[bad, 1], [2, 3]]]], np.float32)
        (pooled * Tensor(upstream, device=device)).sum().backward()
        grads.append(t.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    assert grads[0][0, 0, :2, :2].tolist()[0][0] == 0 and np.isnan(grads[0]).sum() == (1 if np.isnan(bad) else 0)


@pytest.mark.task("conv_max_pool")
@pytest.mark.parametrize("shape", [(3, 2, 6, 8), (2, 3, 7, 5)])
def test_conv_max_pool_2x2_pairs_equal_the_window_form_with_nan_inputs_and_any_gradient(shape, device):
    """2×2 pooling by column pairs, then row pairs, against MaxPool2dWindowsFn: ties, a NaN maximum, a left-over
    row or column, and a random output gradient all give the same values and the same input gradient."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, shape).astype(np.float32)
    results = []
    for values in (x, np.where(rng.random(shape) < 0.1, np.nan, x).astype(np.float32)):
        for fn in (conv.MaxPool2dFn, conv.MaxPool2dWindowsFn):
            t = Tensor(values, device=device, requires_grad=True)
            pooled = fn.apply(t, kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
            upstream = np.random.default_rng(4).standard_normal(pooled.shape).astype(np.float32)
            (pooled * Tensor(upstream, device=device)).sum().backward()
            results.append((pooled.numpy(), t.grad.numpy()))
    for fast, windows in (results[:2], results[2:]):
        np.testing.assert_array_equal(fast[0], windows[0])
        np.testing.assert_array_equal(fast[1], windows[1])
    assert np.isnan(results[2][0]).any(), "the NaN case has a NaN maximum"
