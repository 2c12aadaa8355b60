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
# # Module 10 — Convolutions
#
# A `Linear` layer on a 28×28 image treats pixel (3, 4) and pixel (3, 5) as
# strangers: it has to learn separately, at every position, what an edge
# looks like. A **convolution** slides one small filter over the whole image,
# so a pattern learned in one place is recognised everywhere, with a
# fraction of the weights. That idea — local filters, shared weights,
# pooling — is LeNet (LeCun et al., 1998), and with more layers it is every
# image network since.
#
# This module builds the convolution layers of the package, with PyTorch's
# names, signatures and defaults (NCHW layout: batch, channels, height,
# width):
#
# | task | points | what |
# |---|---|---|
# | `conv_im2col` | 2 | `im2col`: every sliding window as one row of a matrix |
# | `conv_col2im` | 2 | `col2im`: the rows added back onto the image (backward's half) |
# | `conv_conv2d` | 3 | `conv2d` (stride, padding, dilation, groups, bias) as matrix products (GEMMs), forward and backward |
# | `conv_conv2d_layer` | 1 | the `Conv2d` layer: PyTorch's arguments and initialisation |
# | `conv_max_pool` | 2 | `max_pool2d`: a running maximum, the gradient to the first maximum |
# | `conv_avg_pool` | 1 | `avg_pool2d`, with or without the padding in the mean |
# | `conv_adaptive_avg_pool` | 1 | `adaptive_avg_pool2d`: you choose the output size |
# | `conv_batchnorm` | 2 | `BatchNorm2d`: module 03's `BatchNorm1d`, per channel over (N, H, W) |
#
# At the end, `LeNet5` puts them together, and a systems section counts
# what a convolution costs.

# %%
#| default_exp core.conv

# %%
#| export
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyflo.core.layers import (
    BatchNorm1d,
    Linear,
    Module,
    Parameter,
    calculate_fan_in_and_fan_out,
    check_arg,
    fan_in_uniform_,
    kaiming_uniform_,
)
from tinyflo.core.tensor import (
    AutocastMode,
    Function,
    ShapeError,
    Tensor,
    brief,
    check_tensor,
    device_of,
    float32,
    block_count,
    is_floating,
    parallel,
    per_block,
    zeros,
)

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.conv: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.conv"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %%
from tinyflo.core.autograd import gradcheck
from tinyflo.core.tensor import float64, manual_seed, randn

# %% [markdown]
# ## Geometry: how big is the output?
#
# A kernel of size k with dilation d touches d·(k − 1) + 1 pixels (dilation
# spreads the taps apart: d = 2 skips every other pixel). On an input of
# size H padded by p on both sides, stepping by `stride` s, it fits
#
#     OH = ⌊(H + 2p − d·(k − 1) − 1) / s⌋ + 1
#
# times. Every size argument may be an int (the same for height and width)
# or a pair `(h, w)`, as in PyTorch. These helpers are given: they turn the
# arguments into pairs and say clearly what is wrong when something is.

# %%
#| export
def _is_int(value: Any) -> bool:
    """A Python or NumPy integer (not a bool, not a float that happens to be whole)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _pair(value: int | tuple[int, int], name: str, op: str) -> tuple[int, int]:
    """An int or a pair of ints as a pair, or an error that names the argument."""
    pair = (value, value) if _is_int(value) else value
    if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(_is_int(v) for v in pair)):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints; got {brief(value)}")
    return int(pair[0]), int(pair[1])


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Positions a kernel fits along one axis: ⌊(size + 2·padding − dilation·(kernel − 1) − 1) / stride⌋ + 1."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _output_hw(hw: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
               dilation: tuple[int, int]) -> tuple[int, int]:
    """(OH, OW) for an input of height and width hw under the given pairs."""
    oh, ow = (conv_output_size(*args) for args in zip(hw, kernel, stride, padding, dilation))
    return oh, ow


def _pairs(op: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple[tuple[int, int], ...]:
    """Checked (kernel, stride, padding, dilation) pairs: ints ≥ 1 (padding ≥ 0)."""
    kernel = _pair(kernel_size, "kernel_size", op)
    stride, padding, dilation = (_pair(v, n, op) for v, n in
                                 ((stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    for name, pair, low in (("kernel_size", kernel, 1), ("stride", stride, 1), ("dilation", dilation, 1),
                            ("padding", padding, 0)):
        if min(pair) < low:
            raise ValueError(f"{op}: {name} must be at least {low}; got {pair}")
    return kernel, stride, padding, dilation


def _geometry(op: str, shape: tuple[int, ...], kernel_size: Any, stride: Any, padding: Any,
              dilation: Any) -> tuple[tuple[int, int], ...]:
    """Checked (kernel, stride, padding, dilation) pairs for an (N, C, H, W) input."""
    kernel, stride, padding, dilation = _pairs(op, kernel_size, stride, padding, dilation)
    if len(shape) != 4:
        raise ShapeError(f"{op}: expected an input of shape (N, C, H, W); got {shape}")
    for axis, size in enumerate(shape[2:]):
        span = dilation[axis] * (kernel[axis] - 1) + 1
        if span > size + 2 * padding[axis]:
            raise ShapeError(
                f"{op}: kernel {kernel} with dilation {dilation} spans {span} pixels, larger than the "
                f"padded input ({shape[2] + 2 * padding[0]} × {shape[3] + 2 * padding[1]}; input of shape "
                f"{shape}, padding {padding})"
            )
    return kernel, stride, padding, dilation


# %%
print("LeNet's first conv on 32×32:", conv_output_size(32, 5), "; on 28×28 with padding 2:", conv_output_size(28, 5, padding=2))
print("3×3, stride 2, padding 1 on 7:", conv_output_size(7, 3, 2, 1), "; dilation 2:", conv_output_size(7, 3, 1, 0, 2))

# %% [markdown]
# ### Task `conv_im2col` (2 points): every window as a row
#
# The direct way to convolve is six nested loops (batch, output channel,
# output row, output column, input channel, kernel offset). Written in
# Python that is hopeless; even in C it is hard to make fast. The trick
# every framework uses is **im2col**: copy each window the kernel sees into
# one row of a matrix, and the whole convolution becomes one matrix product
# with the flattened filters — work for BLAS, which runs near the machine's
# peak.
#
# **Windows without loops.** A NumPy array is a block of memory plus
# *strides*: how many bytes to step for one index along each axis. For an
# (N, C, H, W) array with strides (s₀, s₁, s₂, s₃), the windows form a 6-d
# array of shape (N, C, OH, OW, KH, KW) whose strides are
#
#     (s₀, s₁, s₂·stride_h, s₃·stride_w, s₂·dilation_h, s₃·dilation_w)
#
# — moving one output row steps `stride` input rows, moving one kernel row
# steps `dilation` input rows. `xp.lib.stride_tricks.as_strided` builds that
# array as a *view*: no copy, no loop (CuPy has the same function under the
# same name, so one line serves both). Pad first (`xp.pad`, with a fill
# value: 0 for convolution, −∞ for max pooling).
#
# Write two functions on raw arrays (NumPy or CuPy; take `xp = device_of(x).xp`):
#
# * `_windows(x, kernel, stride, padding, dilation, fill=0)` — the
#   (N, C, OH, OW, KH, KW) view above (arguments are pairs);
# * `im2col(x, kernel_size, stride=1, padding=0, dilation=1)` — the public
#   function, in the **column-matrix layout** below. Check the arguments
#   with the given `_geometry` first (it turns them into pairs and raises a
#   `ShapeError` when the kernel does not fit).
#
# **The layout.** `im2col` returns an (N·OH·OW, C·KH·KW) matrix: one *row*
# per output position (n, oh, ow), one column per (c, kh, kw) — the
# textbook layout. A weight of shape (OC, C, KH, KW) flattens, without a
# copy, to (OC, C·KH·KW) with columns in the same (c, kh, kw) order, so the
# convolution is one large GEMM `cols @ W.T`, and the weight gradient
# `gradᵀ @ cols` comes out in the weight's own layout. (`conv2d` below
# will use the same windows in the other order, PyTorch's `unfold` layout
# (N, C·KH·KW, OH·OW), because on the CPU it measures faster; the task
# explains why.) Building the matrix from the view is normally the one
# real copy (a `reshape` of a non-contiguous view copies). Not always: when
# the view happens to be contiguous — a 1×1 kernel, stride 1, no padding,
# C = 1 — the reshape is free and `im2col` returns a *view of its input*.
# Treat its result as read-only.
#
# **Checked when graded** (besides the tests below), on an image and
# geometries drawn for you:
#
# * im2col gives the windows copied one by one, for any kernel, stride, padding and dilation
# * a kernel, stride and dilation given as (height, width) pairs: each axis uses its own
# * padding (0, p) pads the width only
# * a kernel larger than the padded input must raise a `ShapeError`
# * the error names the input's shape

# %% nbgrader={"grade": false, "grade_id": "conv_im2col_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _windows(x: Any, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
             dilation: tuple[int, int], fill: float = 0) -> Any:
    """The (N, C, OH, OW, KH, KW) sliding windows of x as a strided view (of a padded copy if padding)."""
    ### BEGIN SOLUTION
    xp = device_of(x).xp
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    if ph or pw:
        x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    n, c = x.shape[:2]
    oh, ow = _output_hw(x.shape[2:], kernel, stride, (0, 0), dilation)  # x is padded by now
    s0, s1, s2, s3 = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s0, s1, s2 * sh, s3 * sw, s2 * dh, s3 * dw))
    ### END SOLUTION


def im2col(x: Any, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1) -> Any:
    """(N, C, H, W) array → (N·OH·OW, C·KH·KW) matrix: a row per output position, columns (c, kh, kw)."""
    ### BEGIN SOLUTION
    geometry = _geometry("im2col", x.shape, kernel_size, stride, padding, dilation)
    win = _windows(x, *geometry)
    n, c, oh, ow, kh, kw = win.shape
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    ### END SOLUTION


# %% [markdown]
# A 4×4 image, 3×3 windows, stride 1: four rows of nine values each.

# %%
_img = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
print(im2col(_img, 3))

# %% nbgrader={"grade": true, "grade_id": "conv_im2col", "locked": true, "points": 2, "schema_version": 3, "solution": false}
img = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
cols = im2col(img, 3)
assert cols.shape == (4, 9) and cols.dtype == np.float32, "four 3×3 windows of a 4×4 image, kept float32"
assert cols[0].tolist() == [0, 1, 2, 4, 5, 6, 8, 9, 10] and cols[3].tolist() == [5, 6, 7, 9, 10, 11, 13, 14, 15], (
    "row 0 is the top-left window, row 3 the bottom-right one")
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 5, 6))
cols = im2col(x, (2, 3), stride=(2, 1), padding=1)
assert cols.shape == (2 * 3 * 6, 3 * 2 * 3), "(N·OH·OW, C·KH·KW) with stride (2, 1) and padding 1"
padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
assert np.array_equal(cols[7], padded[0, :, 2:4, 1:4].ravel()), "row (n=0, oh=1, ow=1); columns (c, kh, kw)"
### BEGIN HIDDEN TESTS
# This student's own image and geometries: sizes, kernels, strides, paddings and dilations drawn.
_n, _c = (int(v) for v in check_rng.integers(1, 4, 2))
_h, _w = (int(v) for v in check_rng.integers(5, 9, 2))
_x = check_rng.standard_normal((_n, _c, _h, _w))


def _loops(x, kh, kw, sh, sw, ph, pw, dh, dw):
    n, c, h, w = x.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    rows = [xp_[b, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw].ravel()
            for b in range(n) for i in range(oh) for j in range(ow)]
    return np.array(rows)


_square = [(3, 1, 0, 1)] + [tuple(int(v) for v in (check_rng.integers(1, 4), check_rng.integers(1, 4),
                                                   check_rng.integers(0, 3), check_rng.integers(1, 3)))
                            for _ in range(3)]
for _k, _s, _p, _d in _square:
    assert np.array_equal(im2col(_x, _k, _s, _p, _d), _loops(_x, _k, _k, _s, _s, _p, _p, _d, _d)), (
        "im2col gives the windows copied one by one, for any kernel, stride, padding and dilation")
_kh, _kw = (int(v) for v in check_rng.permutation([2, 3])[:2])
_sh, _sw = (int(v) for v in check_rng.permutation([1, 2]))
_dh, _dw = (int(v) for v in check_rng.permutation([1, 2]))
assert np.array_equal(im2col(_x, (_kh, _kw), stride=(_sh, _sw), dilation=(_dh, _dw)),
                      _loops(_x, _kh, _kw, _sh, _sw, 0, 0, _dh, _dw)), (
    "a kernel, stride and dilation given as (height, width) pairs: each axis uses its own")
_pw = int(check_rng.integers(1, 3))
assert np.array_equal(im2col(_x, 3, padding=(0, _pw)), _loops(_x, 3, 3, 1, 1, 0, _pw, 1, 1)), (
    "padding (0, p) pads the width only")
try:
    im2col(_x, max(_h, _w) + 1)
    raise AssertionError("a kernel larger than the padded input must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert str(_x.shape) in _said, "the error names the input's shape"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `conv_col2im` (2 points): the windows added back
#
# Backward needs the reverse of `im2col`: a gradient for every entry of the
# column matrix, to be turned into a gradient for the image. Windows
# overlap, so one pixel sits in several windows and receives from each of
# them: their contributions must **add up**, never overwrite. (That makes
# `col2im` the *adjoint* of `im2col`: ⟨im2col(x), c⟩ = ⟨x, col2im(c)⟩ for
# every x and c — what backward needs.)
#
# * `_fold(windows, input_shape, kernel, stride, padding, dilation)` — each
#   (N, C, OH, OW, KH, KW) window's values *added* into the place of the
#   input they came from. Loop over the KH·KW kernel offsets (each one adds
#   a strided slice of the padded result: rows `i·dh, i·dh + sh, …`), never
#   over pixels, and cut the padding off at the end. The result is in the
#   windows' dtype (float16 windows fold into a float16 image);
# * `col2im(cols, input_shape, kernel_size, stride=1, padding=0,
#   dilation=1)` — the public function: `im2col`'s (N·OH·OW, C·KH·KW)
#   layout back into windows, folded. Columns of the wrong shape for that
#   input are a `ShapeError` that says which shape was expected.
#
# **Checked when graded** (besides the tests below), on shapes, geometries
# and columns drawn for you:
#
# * col2im adds each window's values back where they came from, and cuts the padding off (windows that overlap, windows that tile the image, any geometry)
# * float16 columns fold into float16
# * the result has the input's shape
# * columns of the wrong shape must raise a `ShapeError`
# * the error names the expected shape of the columns

# %% nbgrader={"grade": false, "grade_id": "conv_col2im_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _fold(windows: Any, input_shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
          padding: tuple[int, int], dilation: tuple[int, int]) -> Any:
    """Add (N, C, OH, OW, KH, KW) window values back onto an input of input_shape (overlaps add up)."""
    ### BEGIN SOLUTION
    xp = device_of(windows).xp
    n, c, h, w = input_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = windows.shape[2:4]
    out = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=windows.dtype)
    if (sh, sw) == (kh, kw) and (dh, dw) == (1, 1):  # windows tile the input: no overlaps, one copy
        tiles = windows.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, oh * kh, ow * kw)
        out[:, :, :oh * kh, :ow * kw] = tiles
        return out[:, :, ph:ph + h, pw:pw + w] if ph or pw else out
    for i in range(kh):  # KH·KW strided additions, each covering every window at once
        for j in range(kw):
            out[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += windows[..., i, j]
    return out[:, :, ph:ph + h, pw:pw + w] if ph or pw else out
    ### END SOLUTION


def col2im(cols: Any, input_shape: tuple[int, ...], kernel_size: Any, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1) -> Any:
    """The adjoint of im2col: (N·OH·OW, C·KH·KW) rows added back into an (N, C, H, W) array."""
    ### BEGIN SOLUTION
    kernel, stride, padding, dilation = _geometry("col2im", tuple(input_shape), kernel_size, stride, padding, dilation)
    n, c, h, w = input_shape
    oh, ow = _output_hw((h, w), kernel, stride, padding, dilation)
    if cols.shape != (n * oh * ow, c * kernel[0] * kernel[1]):
        raise ShapeError(f"col2im: expected columns of shape {(n * oh * ow, c * kernel[0] * kernel[1])} for an "
                         f"input of shape {tuple(input_shape)}; got {cols.shape}")
    win = cols.reshape(n, oh, ow, c, *kernel).transpose(0, 3, 1, 2, 4, 5)
    return _fold(win, input_shape, kernel, stride, padding, dilation)
    ### END SOLUTION


# %% [markdown]
# `col2im` of a matrix of ones counts how many windows see each pixel —
# the centre pixels four times, the corners once:

# %%
print(col2im(np.ones((4, 9), np.float32), (1, 1, 4, 4), 3)[0, 0])

# %% nbgrader={"grade": true, "grade_id": "conv_col2im", "locked": true, "points": 2, "schema_version": 3, "solution": false}
counts = col2im(np.ones((4, 9), np.float32), (1, 1, 4, 4), 3)[0, 0]
assert counts.tolist() == [[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]], "overlapping windows add up"
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 5, 6))
c = rng.standard_normal(im2col(x, (2, 3), stride=(2, 1), padding=1).shape)
assert np.isclose((im2col(x, (2, 3), stride=(2, 1), padding=1) * c).sum(),
                  (x * col2im(c, x.shape, (2, 3), stride=(2, 1), padding=1)).sum()), (
    "col2im is the adjoint of im2col: <im2col(x), c> == <x, col2im(c)>")
### BEGIN HIDDEN TESTS
# This student's own shapes and geometries (the first always overlaps its windows) and columns, drawn.
_n, _c = (int(v) for v in check_rng.integers(1, 4, 2))
_h, _w = (int(v) for v in check_rng.integers(5, 9, 2))
_shape = (_n, _c, _h, _w)


def _folded_by_loops(cols, kh, kw, sh, sw, ph, pw, dh, dw):
    out = np.zeros((_n, _c, _h + 2 * ph, _w + 2 * pw))
    oh, ow = (_h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (_w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    row = 0
    for b in range(_n):
        for i in range(oh):
            for j in range(ow):
                out[b, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw] += \
                    cols[row].reshape(_c, kh, kw)
                row += 1
    return out[:, :, ph:ph + _h, pw:pw + _w]


# windows that overlap, windows that tile the image (stride = kernel, with and without padding), any
_tile_h, _tile_w = (int(v) for v in check_rng.integers(2, 4, 2))
_geometries = [(3, 2, 1, 1, 0, 1, 1, 1), (_tile_h, _tile_w, _tile_h, _tile_w, 0, 0, 1, 1),
               (_tile_h, _tile_w, _tile_h, _tile_w, 1, 1, 1, 1)] + [
    tuple(int(v) for v in (*check_rng.integers(1, 4, 2), *check_rng.integers(1, 3, 2), *check_rng.integers(0, 2, 2),
                           *check_rng.integers(1, 3, 2)))
    for _ in range(3)]
for _kh, _kw, _sh, _sw, _ph, _pw, _dh, _dw in _geometries:
    _rows = im2col(np.zeros(_shape), (_kh, _kw), (_sh, _sw), (_ph, _pw), (_dh, _dw)).shape[0]
    _cols = check_rng.standard_normal((_rows, _c * _kh * _kw))
    assert np.allclose(col2im(_cols, _shape, (_kh, _kw), (_sh, _sw), (_ph, _pw), (_dh, _dw)),
                       _folded_by_loops(_cols, _kh, _kw, _sh, _sw, _ph, _pw, _dh, _dw)), (
        "col2im adds each window's values back where they came from, and cuts the padding off")
_cols = check_rng.standard_normal(((_h - 2) * (_w - 2) * _n, _c * 9))
assert col2im(_cols.astype(np.float16), _shape, 3).dtype == np.float16, "float16 columns fold into float16"
assert col2im(_cols, _shape, 3).shape == _shape, "the result has the input's shape"
try:
    col2im(np.ones((_cols.shape[0] + 1, _c * 9)), _shape, 3)
    raise AssertionError("columns of the wrong shape must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert str(_cols.shape) in _said, "the error names the expected shape of the columns"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `conv_conv2d` (3 points): convolution as matrix products
#
# `conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`
# takes x of shape (N, C, H, W) and a weight of shape (OC, C/groups, KH, KW)
# and computes, for every output channel o and position (i, j),
#
#     out[n, o, i, j] = bias[o] + Σ_{c, a, b} weight[o, c, a, b] · x_pad[n, c, i·s + a·d, j·s + b·d]
#
# (a cross-correlation, strictly speaking — no kernel flip, like every
# framework). **Groups** split the C input channels into `groups` blocks of
# C/groups and the OC filters into blocks of OC/groups; block g of the
# filters sees only block g of the channels (`groups = C` is a depthwise
# convolution). Columns are ordered by channel first, so the (c, kh, kw)
# entries of group g are one contiguous block of K = C/groups·KH·KW.
#
# **One GEMM per image.** `im2col`'s matrix makes the whole convolution a
# single GEMM, but on the CPU a different order of the same numbers is
# faster: per image, a (C·KH·KW, OH·OW) matrix — PyTorch's `unfold`
# layout — so that the filters times it, (OC, K) @ (K, OH·OW), *is* the
# image's (OC, OH, OW) output, already in NCHW. Three reasons, measured on
# LeNet (by tinyflo's benchmark of it, `tinyflo bench` in the course's
# repository): the copy out of the window view moves
# runs of OW neighbouring pixels instead of KW (5), which is several times
# faster; the output needs no transpose copy; and in backward the column
# gradient comes out with OW contiguous again, so each of `_fold`'s KH·KW
# strided additions reads whole rows instead of gathering one number per
# row of a matrix. The price is N smaller GEMMs instead of one large one;
# `matmul` broadcasts over the batch and runs them in one call. With
# L = OH·OW:
#
# * **forward**: the windows from `_windows`, transposed to (N, C, KH, KW,
#   OH, OW) and reshaped — the one copy — to `cols` of shape (N, G, K, L);
#   the weight viewed as (G, OC/G, K); `w @ cols` broadcasts to
#   (N, G, OC/G, L), which reshapes for free to (N, OC, OH, OW); plus the
#   bias along axis 1. Save `cols` and the weight for backward.
# * **backward**: view the gradient as (N, G, OC/G, L) `g`; then grad_w =
#   Σₙ g @ colsᵀ (reshaped to the weight's shape); the column gradient
#   wᵀ @ g, of shape (N, G, K, L) = (N, C, KH, KW, OH, OW), transposed to the
#   windows' (N, C, OH, OW, KH, KW) order (a view) and added back with
#   `_fold`; grad_b = the gradient summed over (N, OH, OW). Skip what
#   `needs_input_grad` says is not needed: the first layer's input is a
#   data batch, and its gradient would be a whole fold.
#
# `conv2d` checks its arguments before it builds anything, with errors for
# people: input and weight must be 4-d, C must equal weight.shape[1] ·
# groups and the bias must have shape (OC,) (a `ShapeError` naming the
# shapes); OC must be divisible by groups (a `ValueError` naming groups);
# the kernel must fit the padded input (`_geometry` does that); groups must
# be an int, and input, weight and bias must have the same dtype (`TypeError`:
# a float64 bias on float32 weights would otherwise be cast down silently).
# Use explicit sizes in the reshapes, never −1: with a batch of N = 0 images
# there are M = 0 rows, and `reshape(0, G, -1)` cannot work out the −1.
#
# **Checked when graded** (besides the tests below), on images, groups,
# geometries, weights, biases and output gradients drawn for you:
#
# * conv2d gives the definition's sums, with and without a bias, for any stride, padding, dilation and groups (ints or (height, width) pairs)
# * the input's gradient: each output's gradient times its filter, added back where its window came from
# * the weight's gradient: the output gradient times the windows, summed over positions and over the images of the batch
# * the bias's gradient: the output gradient summed over positions and over the images of the batch
# * the input gradient of a data batch (requires_grad=False) is not computed: needs_input_grad says so
# * with an input that needs no gradient, the weight still gets its gradient
# * a bias of another dtype than the weight must raise a `TypeError`
# * the error names the bias
# * an input of another dtype than the weight must raise a `TypeError`
# * the error names both dtypes
# * an input whose channels are not weight.shape[1] · groups must raise a `ShapeError`
# * the error names the input's shape
# * output channels that groups does not divide must raise a `ValueError`
# * the error names groups
# * a kernel larger than the padded input must raise a `ShapeError`
# * a batch of zero images gives zero output images

# %% nbgrader={"grade": false, "grade_id": "conv_conv2d_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Conv2dFn(Function):
    """2-d convolution (cross-correlation) as unfolded windows and one GEMM per image and group."""

    def forward(self, x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        ### BEGIN SOLUTION
        n, c, h, w = x.shape
        oc, _, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.x_shape, self.groups = x.shape, groups
        oh, ow = _output_hw((h, w), *self.geometry)
        k = c // groups * kh * kw  # explicit sizes: no -1, so a batch of 0 works
        win = _windows(x, *self.geometry)  # (N, C, OH, OW, KH, KW), a view
        cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, k, oh * ow)  # (N, G, K, L), the one copy
        wg = weight.reshape(groups, oc // groups, k)  # (G, OC/G, K), a view
        # (N, G, OC/G, L): one GEMM per image, and already NCHW. `out` is a new array, so += cannot touch an input.
        out = (wg @ cols).reshape(n, oc, oh, ow)
        if bias is not None:
            out += bias.reshape(1, oc, 1, 1)
        self.save_for_backward(cols, weight)
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        cols, weight = self.saved
        needs, g = self.needs_input_grad, self.groups
        n, oc, oh, ow = grad.shape
        k = cols.shape[2]
        gl = grad.reshape(n, g, oc // g, oh * ow)  # (N, G, OC/G, L)
        grad_x = grad_w = grad_b = None
        if needs[0]:
            (kh, kw), c = self.geometry[0], self.x_shape[1]
            dcols = weight.reshape(g, oc // g, k).transpose(0, 2, 1) @ gl  # (N, G, K, L)
            win = dcols.reshape(n, c, kh, kw, oh, ow).transpose(0, 1, 4, 5, 2, 3)  # the windows' order, a view
            grad_x = _fold(win, self.x_shape, *self.geometry)
        if needs[1]:
            grad_w = (gl @ cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(weight.shape)
        if len(needs) > 2 and needs[2]:
            grad_b = grad.sum(axis=(0, 2, 3))
        return grad_x, grad_w, grad_b
        ### END SOLUTION


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d convolution of an (N, C, H, W) input with an (OC, C/groups, KH, KW) weight, as torch's conv2d."""
    check_tensor("conv2d", "x", x)
    check_tensor("conv2d", "weight", weight)
    if bias is not None:
        check_tensor("conv2d", "bias", bias)
    ### BEGIN SOLUTION
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-d input (N, C, H, W) and a 4-d weight (OC, C/groups, KH, KW); "
                         f"got input {x.shape} and weight {weight.shape}")
    if not _is_int(groups):
        raise TypeError(f"conv2d: groups must be an int; got {brief(groups)}")
    if groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"conv2d: groups must be a positive divisor of the weight's {weight.shape[0]} output "
                         f"channels; got groups={groups}")
    if x.shape[1] != weight.shape[1] * groups:
        raise ShapeError(f"conv2d: input of shape {x.shape} has {x.shape[1]} channels; the weight of shape "
                         f"{weight.shape} with groups={groups} expects {weight.shape[1] * groups}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ShapeError(f"conv2d: bias of shape {bias.shape}; expected ({weight.shape[0]},)")
    if AutocastMode.policy is None:  # inside autocast() (module 11) Conv2dFn casts all three itself
        mix = "; convert one with .to(dtype=...), or mix precisions with autocast() / cast_parameters() (module 11)"
        if x.dtype != weight.dtype:
            raise TypeError(f"conv2d: input is {x.dtype} but weight is {weight.dtype}{mix}")
        if bias is not None and bias.dtype != weight.dtype:
            raise TypeError(f"conv2d: bias is {bias.dtype} but weight is {weight.dtype}{mix}")
    _, stride, padding, dilation = _geometry("conv2d", x.shape, weight.shape[2:], stride, padding, dilation)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2dFn.apply(*inputs, stride=stride, padding=padding, dilation=dilation, groups=groups)
    ### END SOLUTION


# %% [markdown]
# Check against `im2col`: with one group, the convolution is one GEMM of
# `im2col`'s matrix with the flattened filters, `cols @ W.T`, reshaped to
# NCHW:

# %%
_rng = np.random.default_rng(0)
_x, _w = _rng.standard_normal((2, 4, 7, 6)), _rng.standard_normal((6, 4, 3, 2))
_ours = conv2d(Tensor(_x), Tensor(_w), stride=2, padding=1).numpy()
_gemm = (im2col(_x, (3, 2), 2, 1) @ _w.reshape(6, -1).T).reshape(2, 4, 4, 6).transpose(0, 3, 1, 2)
print("largest difference from im2col's GEMM:", np.abs(_ours - _gemm).max())

# %% nbgrader={"grade": true, "grade_id": "conv_conv2d", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def conv2d_loops(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """The definition of conv2d, one output number at a time (NumPy, slow but obviously right)."""
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = conv_output_size(h, kh, stride, padding, dilation), conv_output_size(wd, kw, stride, padding, dilation)
    out = np.zeros((n, oc, oh, ow), x.dtype)
    for o in range(oc):
        g = o // (oc // groups)
        for i in range(oh):
            for j in range(ow):
                patch = xp_[:, g * cg:(g + 1) * cg, i * stride:i * stride + dilation * (kh - 1) + 1:dilation,
                            j * stride:j * stride + dilation * (kw - 1) + 1:dilation]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + (0 if b is None else b[o])
    return out


rng = np.random.default_rng(1)
X, W, B = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
out = conv2d(Tensor(X), Tensor(W), Tensor(B))
assert out.shape == (2, 4, 4, 3) and np.allclose(out.numpy(), conv2d_loops(X, W, B)), "conv2d agrees with the loops"
out = conv2d(Tensor(X), Tensor(W), stride=2, padding=1)
assert np.allclose(out.numpy(), conv2d_loops(X, W, None, 2, 1)), "stride 2, padding 1, no bias"
x64, w64, b64 = (Tensor(a, requires_grad=True) for a in (X[:1, :, :5, :4], W[:2], B[:2]))
assert gradcheck(lambda x, w, b: conv2d(x, w, b), x64, w64, b64), "the gradients of input, weight and bias"
assert gradcheck(lambda x, w, b: conv2d(x, w, b, stride=2, padding=1), x64, w64, b64), (
    "the gradients with stride 2 and padding 1")
### BEGIN HIDDEN TESTS
# This student's own inputs: sizes, groups, geometries, weights, biases and output gradients, drawn.
def _conv_loops(x, w, b, stride, padding, dilation):
    """conv2d's definition, one output number at a time, for (height, width) pairs."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    groups = c // cg
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    for o in range(oc):
        g = o // (oc // groups)
        for i in range(oh):
            for j in range(ow):
                patch = xp_[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                            j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + (0 if b is None else b[o])
    return out


def _conv_grads_loops(x, w, grad, stride, padding, dilation):
    """The gradients of sum(conv2d(x, w, b) · grad) for the input, the weight and the bias, by the same loops."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    groups = c // cg
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    gx, gw = np.zeros_like(xp_), np.zeros_like(w)
    for o in range(oc):
        g = o // (oc // groups)
        for i in range(grad.shape[2]):
            for j in range(grad.shape[3]):
                rows, cols = slice(i * sh, i * sh + dh * (kh - 1) + 1, dh), slice(j * sw, j * sw + dw * (kw - 1) + 1, dw)
                gx[:, g * cg:(g + 1) * cg, rows, cols] += grad[:, o, i, j][:, None, None, None] * w[o]
                gw[o] += np.tensordot(grad[:, o, i, j], xp_[:, g * cg:(g + 1) * cg, rows, cols], axes=1)
    return gx[:, :, ph:ph + h, pw:pw + wd], gw, grad.sum(axis=(0, 2, 3))


_N, _G = int(check_rng.integers(2, 4)), int(check_rng.integers(2, 4))
_CG, _OCG = (int(v) for v in check_rng.integers(1, 3, 2))
_C, _OC = _G * _CG, _G * _OCG
_H, _W = (int(v) for v in check_rng.integers(5, 9, 2))
_x = check_rng.standard_normal((_N, _C, _H, _W))
# (kernel, stride, padding, dilation, groups) as conv2d takes them: ints, pairs, one group or _G; no bias in the second
_geometries = [
    (int(check_rng.integers(1, 4)), 1, 0, 1, 1),
    (int(check_rng.integers(2, 4)), int(check_rng.integers(2, 4)), int(check_rng.integers(0, 3)), 1, _G),
    (2, 1, 1, 2, _G),
    (tuple(int(v) for v in check_rng.permutation([2, 3])), tuple(int(v) for v in check_rng.permutation([1, 2])),
     tuple(int(v) for v in check_rng.permutation([0, 1])), tuple(int(v) for v in check_rng.permutation([1, 2])), _G),
]


def _two(v):
    return (v, v) if isinstance(v, int) else v


for _case, (_k, _s, _p, _d, _g) in enumerate(_geometries):
    _w = check_rng.standard_normal((_OC, _C // _g, *_two(_k)))
    _b = None if _case == 1 else check_rng.standard_normal(_OC)
    assert np.allclose(conv2d(Tensor(_x), Tensor(_w), None if _b is None else Tensor(_b), _s, _p, _d, _g).numpy(),
                       _conv_loops(_x, _w, _b, _two(_s), _two(_p), _two(_d))), (
        "conv2d gives the definition's sums, with and without a bias, for any stride, padding, dilation and groups "
        "(ints or (height, width) pairs)")
# the gradients, for one geometry with a stride of 2, padding, dilation 2 and groups; an output gradient drawn
_k, _s, _p, _d = ((3, 2), (2, int(check_rng.integers(1, 3))), (1, int(check_rng.integers(0, 2))),
                  tuple(int(v) for v in check_rng.permutation([1, 2])))
_w, _b = check_rng.standard_normal((_OC, _CG, *_k)), check_rng.standard_normal(_OC)
_out_hw = tuple(conv_output_size(*args) for args in zip((_H, _W), _k, _s, _p, _d))
_grad_out = check_rng.standard_normal((_N, _OC, *_out_hw))
_gx, _gw, _gb = _conv_grads_loops(_x, _w, _grad_out, _s, _p, _d)
_xt, _wt, _bt = (Tensor(a, requires_grad=True) for a in (_x, _w, _b))
(conv2d(_xt, _wt, _bt, _s, _p, _d, _G) * Tensor(_grad_out)).sum().backward()
assert np.allclose(_xt.grad.numpy(), _gx), (
    "the input's gradient: each output's gradient times its filter, added back where its window came from")
assert np.allclose(_wt.grad.numpy(), _gw), (
    "the weight's gradient: the output gradient times the windows, summed over positions and over the images of the batch")
assert np.allclose(_bt.grad.numpy(), _gb), (
    "the bias's gradient: the output gradient summed over positions and over the images of the batch")
_xn, _wn = Tensor(_x), Tensor(_w, requires_grad=True)
_col2im, _fold_ = col2im, _fold
class _InputGradient(BaseException):
    """Raised where the input's gradient would be computed: past `except Exception`."""
def col2im(*args, **kwargs):
    raise _InputGradient()
_fold = col2im
try:
    (conv2d(_xn, _wn, None, _s, _p, _d, _G) * Tensor(_grad_out)).sum().backward()
    _input_gradient = "not computed"
except _InputGradient:
    _input_gradient = "computed"
finally:
    col2im, _fold = _col2im, _fold_
assert _input_gradient == "not computed", (
    "the input gradient of a data batch (requires_grad=False) is not computed: needs_input_grad says so")
assert np.allclose(_wn.grad.numpy(), _gw), "with an input that needs no gradient, the weight still gets its gradient"
_weight_dtype, _other_dtype = (np.float32, np.float64)[::1 if check_rng.integers(2) else -1]
try:
    conv2d(Tensor(_x.astype(_weight_dtype)), Tensor(_w.astype(_weight_dtype)), Tensor(_b.astype(_other_dtype)),
           groups=_G)
    raise AssertionError("a bias of another dtype than the weight must raise a TypeError")
except TypeError as err:
    _said = str(err)
assert "bias" in _said, "the error names the bias"
try:
    conv2d(Tensor(_x.astype(_other_dtype)), Tensor(_w.astype(_weight_dtype)), groups=_G)
    raise AssertionError("an input of another dtype than the weight must raise a TypeError")
except TypeError as err:
    _said = str(err)
assert np.dtype(_other_dtype).name in _said and np.dtype(_weight_dtype).name in _said, (
    "the error names both dtypes")
_x_wrong = check_rng.standard_normal((_N, _C + int(check_rng.integers(1, 3)), _H, _W))
try:
    conv2d(Tensor(_x_wrong), Tensor(_w), groups=_G)
    raise AssertionError("an input whose channels are not weight.shape[1] · groups must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert str(_x_wrong.shape) in _said, "the error names the input's shape"
try:
    conv2d(Tensor(_x), Tensor(check_rng.standard_normal((_OC + int(check_rng.integers(1, _G)), _CG, 2, 2))), groups=_G)
    raise AssertionError("output channels that groups does not divide must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "groups" in _said, "the error names groups"
try:
    conv2d(Tensor(_x), Tensor(check_rng.standard_normal((_OC, _CG, _H + 3, 2))), padding=1, groups=_G)
    raise AssertionError("a kernel larger than the padded input must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
assert str(_x.shape) in _said, "the error names the input's shape"
assert conv2d(Tensor(_x[:0]), Tensor(_w), None, _s, _p, _d, _G).shape == (0, _OC, *_out_hw), (
    "a batch of zero images gives zero output images")
### END HIDDEN TESTS

# %% [markdown] tinyflo={"given_after": "conv_conv2d"}
# ### Given: the same convolution, laid out for one large GEMM
#
# Your `Conv2dFn` runs one small GEMM per image. On LeNet's second
# convolution (6→16 channels, 10×10 outputs) each of those GEMMs is
# (16, 150) @ (150, 100): too small for BLAS to reach its speed, and the
# weight gradient is 128 such products summed. `_fold`'s strided additions
# move runs of only OW = 10 numbers. The cure is a layout, not less
# arithmetic: put the **batch last**. In (C, H, W, N) memory a window
# offset (c, kh, kw) of every image at every output position is one
# contiguous run of OW·N numbers, so
#
# * the column matrix (C·KH·KW, OH·OW·N) is copied in long runs;
# * forward is **one** GEMM (OC, K) @ (K, OH·OW·N), the weight gradient is
#   one GEMM, and the column gradient is one GEMM;
# * the fold adds KH·KW slices of OW·N contiguous numbers each.
#
# The price is two transposes, of the input and of the output gradient to
# (C, H, W, N), and one of the output back to NCHW — each the size of an
# activation, cheap next to the column matrix. When each image has many
# output positions (conv1: 28×28), the per-image GEMMs are already large
# and the transposes cost more than one GEMM saves; there the package
# keeps your layout. Measured on LeNet at batch 128 (forward + backward):
# batch last takes about half the per-image time on conv2 (10×10
# outputs) and over twice as long on conv1 (28×28 outputs); the switch,
# `BATCH_LAST_POSITIONS`, sits between the two. Your class stays
# available as `Conv2dUnfoldFn`; `conv2d` now runs this one.
#
# On the CPU both layouts use every core through module 01's `parallel`:
# your per-image layout hands each thread a block of images (their
# column copy and their GEMMs, too small for BLAS to share out by
# itself), batch last a block of channels (their column copy and their
# part of the fold). The weight and bias gradients of the per-image
# layout add one share per block of images, in block order, so a result
# has the same bits on one thread as on eight. On LeNet's conv1 at batch
# 128 the two threads of the development machine take about 0.75× the
# time of one.
#
# On a GPU the step is bound by launches, not arithmetic: each NumPy-style
# call is one kernel launch, and at LeNet's sizes a launch costs more
# host time than the kernel runs. There the fold's KH·KW strided
# additions (25 launches on conv2) become one sum that *gathers* instead
# of scattering (`_gather_last`): input pixel y is covered by window
# offset i of output row y − i, so after padding the window rows with
# zeros every covering entry is a fixed stride away, and one strided view
# holds all KH·KW of them — three kernels in all. On the CPU the
# additions stay: there the view's scattered reads take about four times
# as long.

# %% tinyflo={"given_after": "conv_conv2d"}
#| export
Conv2dUnfoldFn = Conv2dFn  # the readable, per-image form graded above: the reference the fast one must equal
BATCH_LAST_POSITIONS = 256  # up to this many output positions per image, the batch goes last (one GEMM)


class Conv2dFn(Conv2dUnfoldFn):
    """conv2d as one GEMM over the whole batch, in (C, H, W, N) memory; the per-image form for large outputs."""

    def forward(self, x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        n, c, h, w = x.shape
        oc, _, kh, kw = weight.shape
        oh, ow = _output_hw((h, w), (kh, kw), stride, padding, dilation)
        self.batch_last = oh * ow <= BATCH_LAST_POSITIONS
        if not self.batch_last:
            if self.xp is not np:  # on a GPU the broadcast GEMM is already one call
                return super().forward(x, weight, bias, stride, padding, dilation, groups)
            return self._forward_per_image(x, weight, bias, stride, padding, dilation, groups)
        xp = self.xp
        (ph, pw), k = padding, c // groups * kh * kw
        self.geometry, self.x_shape, self.groups = ((kh, kw), stride, padding, dilation), x.shape, groups
        if ph or pw:  # padded, batch last
            xt = xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=x.dtype)
            xt[:, ph:ph + h, pw:pw + w] = x.transpose(1, 2, 3, 0)
        else:
            xt = xp.ascontiguousarray(x.transpose(1, 2, 3, 0))
        windows = _windows_last(xt, *self.geometry)  # (C, KH, KW, OH, OW, N), a view
        cols = xp.empty((groups, k, oh * ow * n), dtype=x.dtype)
        rows = cols.reshape(c, kh, kw, oh, ow, n)  # the one large copy, a block of channels per thread
        parallel(lambda start, stop: xp.copyto(rows[start:stop], windows[start:stop]), c,
                 per_block(kh * kw * oh * ow * n), xp)
        out = weight.reshape(groups, oc // groups, k) @ cols  # (G, OC/G, OH·OW·N): one GEMM per group
        out = out.reshape(oc, oh, ow, n).transpose(3, 0, 1, 2)  # NCHW order, a view
        self.save_for_backward(cols, weight)
        if bias is None:
            return xp.ascontiguousarray(out)
        nchw = xp.empty((n, oc, oh, ow), dtype=out.dtype)
        return xp.add(out, bias.reshape(1, oc, 1, 1), out=nchw)  # the bias added in the copy to NCHW memory

    def backward(self, grad):
        if not self.batch_last:
            if self.xp is not np:
                return super().backward(grad)
            return self._backward_per_image(grad)
        xp = self.xp
        cols, weight = self.saved
        needs, g = self.needs_input_grad, self.groups
        n, oc, oh, ow = grad.shape
        k = cols.shape[1]
        gt = xp.ascontiguousarray(grad.transpose(1, 2, 3, 0)).reshape(g, oc // g, oh * ow * n)
        grad_x = grad_w = grad_b = None
        if needs[0]:
            dcols = weight.reshape(g, oc // g, k).transpose(0, 2, 1) @ gt  # (G, K, OH·OW·N)
            grad_x = _fold_last(dcols, self.x_shape, *self.geometry)
        if needs[1]:
            grad_w = (cols @ gt.transpose(0, 2, 1)).transpose(0, 2, 1).reshape(weight.shape)
        if len(needs) > 2 and needs[2]:
            grad_b = gt.reshape(oc, oh * ow * n).sum(axis=1)
        return grad_x, grad_w, grad_b

    def _forward_per_image(self, x, weight, bias, stride, padding, dilation, groups):
        """Your per-image layout on the CPU, a block of images per thread: copy its columns, then its GEMMs."""
        n, c, h, w = x.shape
        oc, _, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.x_shape, self.groups = x.shape, groups
        oh, ow = _output_hw((h, w), *self.geometry)
        k = c // groups * kh * kw
        windows = _windows(x, *self.geometry).transpose(0, 1, 4, 5, 2, 3)  # (N, C, KH, KW, OH, OW), a view
        cols = np.empty((n, groups, k, oh * ow), dtype=x.dtype)
        out = np.empty((n, groups, oc // groups, oh * ow), dtype=x.dtype)
        wg = weight.reshape(groups, oc // groups, k)
        shift = None if bias is None else bias.reshape(groups, oc // groups, 1)

        def images(start, stop):
            np.copyto(cols[start:stop].reshape(stop - start, c, kh, kw, oh, ow), windows[start:stop])
            np.matmul(wg, cols[start:stop], out=out[start:stop])
            if shift is not None:
                out[start:stop] += shift

        self.images = per_block(groups * k * oh * ow)  # images per block
        parallel(images, n, self.images)
        self.save_for_backward(cols, weight)
        return out.reshape(n, oc, oh, ow)

    def _backward_per_image(self, grad):
        """Each block of images on a thread: its input gradient, and its share of the weight and bias sums.

        The shares are added in block order, so the sums have the same bits for any thread count.
        """
        cols, weight = self.saved
        needs, g, block = self.needs_input_grad, self.groups, self.images
        n, oc, oh, ow = grad.shape
        k = cols.shape[2]
        (kh, kw), c = self.geometry[0], self.x_shape[1]
        gl = grad.reshape(n, g, oc // g, oh * ow)
        wt = weight.reshape(g, oc // g, k).transpose(0, 2, 1)
        want_b = len(needs) > 2 and needs[2]
        grad_x = np.empty(self.x_shape, dtype=grad.dtype) if needs[0] else None
        shares_w = np.empty((block_count(n, block), g, oc // g, k), dtype=grad.dtype) if needs[1] else None
        shares_b = np.empty((block_count(n, block), oc), dtype=grad.dtype) if want_b else None

        def images(start, stop):
            if needs[0]:
                dcols = wt @ gl[start:stop]  # (b, G, K, L)
                win = dcols.reshape(stop - start, c, kh, kw, oh, ow).transpose(0, 1, 4, 5, 2, 3)
                grad_x[start:stop] = _fold(win, (stop - start, *self.x_shape[1:]), *self.geometry)
            if needs[1]:
                np.sum(gl[start:stop] @ cols[start:stop].transpose(0, 1, 3, 2), axis=0, out=shares_w[start // block])
            if want_b:
                np.sum(grad[start:stop], axis=(0, 2, 3), out=shares_b[start // block])

        parallel(images, n, block)
        grad_w = shares_w.sum(axis=0).reshape(weight.shape) if needs[1] else None
        grad_b = shares_b.sum(axis=0) if want_b else None
        return grad_x, grad_w, grad_b


def _windows_last(xt: Any, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                  dilation: tuple[int, int]) -> Any:
    """The (C, KH, KW, OH, OW, N) windows of a padded (C, H, W, N) array, as a strided view."""
    xp = device_of(xt).xp
    c, hp, wp, n = xt.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = _output_hw((hp, wp), kernel, stride, (0, 0), dilation)
    s0, s1, s2, s3 = xt.strides
    return xp.lib.stride_tricks.as_strided(xt, (c, kh, kw, oh, ow, n), (s0, s1 * dh, s2 * dw, s1 * sh, s2 * sw, s3))


def _fold_last(dcols: Any, input_shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int]) -> Any:
    """_fold for batch-last columns: (…, C·KH·KW, OH·OW·N) added back onto an (N, C, H, W) gradient."""
    xp = device_of(dcols).xp
    n, c, h, w = input_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = _output_hw((h, w), kernel, stride, padding, dilation)
    win = dcols.reshape(c, kh, kw, oh, ow, n)
    if xp is not np and (sh, sw) == (1, 1):  # on a GPU each addition below is a kernel launch
        return _gather_last(win, input_shape, kernel, padding, dilation)
    out = xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=dcols.dtype)

    def channels(start, stop):
        for i in range(kh):  # KH·KW additions, each of whole (OW·N)-long runs
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                out[start:stop, rows, j * dw:j * dw + sw * (ow - 1) + 1:sw] += win[start:stop, i, j]

    parallel(channels, c, per_block(kh * kw * oh * ow * n), xp)  # a block of channels per thread
    return xp.ascontiguousarray(out[:, ph:ph + h, pw:pw + w].transpose(3, 0, 1, 2))


def _gather_last(win: Any, input_shape: tuple[int, ...], kernel: tuple[int, int], padding: tuple[int, int],
                 dilation: tuple[int, int]) -> Any:
    """_fold_last at stride 1 as one sum: each input pixel gathers the KH·KW window entries that cover it.

    Padded-input row y is covered by window offset i of output row y − i·DH. With the windows' rows padded by
    the (KH − 1)·DH rows a window spans beyond its first, on both sides, that entry sits at row y − i·DH of
    the padded rows, a fixed stride away for every (y, i) — and the same for columns — so all the entries
    are one strided view, summed over (i, j). Three kernels (zeros, copy, sum) instead of KH·KW additions:
    on a GPU launches cost more than the arithmetic; on the CPU the additions are faster.
    """
    xp = device_of(win).xp
    n, c, h, w = input_shape
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    oh, ow = win.shape[3:5]
    eh, ew = (kh - 1) * dh, (kw - 1) * dw
    padded = xp.zeros((c, kh, kw, oh + 2 * eh, ow + 2 * ew, n), dtype=win.dtype)
    padded[:, :, :, eh:eh + oh, ew:ew + ow] = win
    s0, s1, s2, s3, s4, s5 = padded.strides
    # covers[c, y, x, n, i, j] = padded[c, i, j, eh + ph + y − i·DH, ew + pw + x − j·DW, n]
    first = padded[:, 0, 0, eh + ph:, ew + pw:]
    covers = xp.lib.stride_tricks.as_strided(first, (c, h, w, n, kh, kw),
                                             (s0, s3, s4, s5, s1 - dh * s3, s2 - dw * s4))
    grad_x = xp.empty(input_shape, dtype=win.dtype)
    xp.sum(covers, axis=(4, 5), out=grad_x.transpose(1, 2, 3, 0))  # written straight into NCHW
    return grad_x


# %% [markdown] tinyflo={"given_after": "conv_conv2d"}
# The two layouts compute the same numbers (up to the order of float
# additions):

# %% tinyflo={"given_after": "conv_conv2d"}
_rng = np.random.default_rng(5)
_x, _w, _b = (Tensor(_rng.standard_normal(s), requires_grad=True) for s in ((3, 4, 9, 7), (6, 2, 3, 2), (6,)))
_grads = []
for _fn in (Conv2dUnfoldFn, Conv2dFn):
    _x.grad = _w.grad = _b.grad = None
    _out = _fn.apply(_x, _w, _b, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    (_out * _out).sum().backward()
    _grads.append([_out.numpy(), _x.grad.numpy(), _w.grad.numpy(), _b.grad.numpy()])
print("largest difference, batch-last vs per image (output, input, weight, bias gradients):",
      [float(np.abs(a - b).max()) for a, b in zip(*_grads)])

# %% [markdown]
# ### Task `conv_conv2d_layer` (1 point): the `Conv2d` layer
#
# The layer `Conv2d(in_channels, out_channels, kernel_size, stride=1,
# padding=0, dilation=1, groups=1, bias=True, device=None, dtype=None)`
# keeps `weight` (OC, C/groups, KH, KW) and `bias` (OC,), initialised like
# PyTorch's: `kaiming_uniform_(weight, a=√5)` and the bias uniform in
# ±1/√fan_in with fan_in = C/groups·KH·KW (module 03's helpers). It stores
# its size arguments as pairs (`layer.kernel_size == (5, 5)`, checked when
# the layer is built, with the given `_pairs`), raises a `ValueError` when
# in_channels, out_channels or groups is not a positive int or the channels
# are not divisible by groups, and a `ShapeError` for an input that does not fit:
# `Conv2d(1, 6, 5) got input of shape (32, 3, 28, 28); expected (N, 1, H, W)`.
# An integer input is converted to the weight's dtype; a floating input of
# another dtype is a `TypeError`, as for `Linear`.
#
# **Checked when graded** (besides the tests below), on channels, groups,
# kernels, strides, paddings, dilations, seeds, weights and inputs drawn
# for you:
#
# * kaiming_uniform_(a=√5): the weight is uniform in ±1/√fan_in, fan_in = C/groups·KH·KW
# * the bias is uniform in ±1/√fan_in, fan_in = C/groups·KH·KW
# * bias=False: the layer has a weight and no bias
# * the weight has shape (OC, C/groups, KH, KW)
# * the layer keeps kernel_size, stride, padding and dilation as (height, width) pairs
# * the layer computes conv2d with its own weight, bias, stride, padding, dilation and groups
# * an integer input becomes the weight's dtype
# * an input that is not (N, C, H, W) with C = in_channels must raise a `ShapeError`
# * the error names the layer, the input's shape and what was expected
# * in_channels or out_channels that groups does not divide must raise a `ValueError`
# * the error names groups
# * in_channels, out_channels or groups that is not a positive int must raise a `ValueError`
# * the error names that argument
# * a floating input of another dtype than the weights must raise a `TypeError`
# * the error names the input's dtype

# %% nbgrader={"grade": false, "grade_id": "conv_conv2d_layer_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Conv2d(Module):
    """A 2-d convolution layer with PyTorch's arguments, shapes and default initialisation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        check_arg("Conv2d", "bias", bias, "True or False")
        ### BEGIN SOLUTION
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if not _is_int(value) or value < 1:
                raise ValueError(f"Conv2d: {name} must be a positive int; got {brief(value)}")
        for name, channels in (("in_channels", in_channels), ("out_channels", out_channels)):
            if channels % groups:
                raise ValueError(f"Conv2d: {name} ({channels}) must be divisible by groups ({groups})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.padding, self.dilation = _pairs("Conv2d", kernel_size, stride, padding,
                                                                            dilation)
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(zeros(shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(zeros(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        ### END SOLUTION

    def reset_parameters(self) -> None:
        """PyTorch's default: kaiming_uniform_(a=√5) for the weight, U(±1/√fan_in) for the bias."""
        ### BEGIN SOLUTION
        kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in_uniform_(self.bias, calculate_fan_in_and_fan_out(self.weight)[0])
        ### END SOLUTION

    def _name(self) -> str:
        k = self.kernel_size[0] if self.kernel_size[0] == self.kernel_size[1] else self.kernel_size
        return f"Conv2d({self.in_channels}, {self.out_channels}, {k})"

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(f"{self._name()} got input of shape {x.shape}; expected (N, {self.in_channels}, H, W)")
        if x.dtype != self.weight.dtype:
            if not is_floating(x.dtype):
                x = x.to(dtype=self.weight.dtype)
            elif AutocastMode.policy is None:  # inside autocast() Conv2dFn casts both (module 11)
                raise TypeError(f"{self._name()} holds {self.weight.dtype} weights but got a {x.dtype} input; "
                                "convert one of them with .to(dtype=...), or mix precisions with autocast() / "
                                "cast_parameters() (module 11)")
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        ### END SOLUTION

    def extra_repr(self) -> str:
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            text += f", padding={self.padding}"
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + ("" if self.bias is not None else ", bias=False")

# %% nbgrader={"grade": true, "grade_id": "conv_conv2d_layer", "locked": true, "points": 1, "schema_version": 3, "solution": false}
manual_seed(0)
layer = Conv2d(3, 6, 5)
assert layer.weight.shape == (6, 3, 5, 5) and layer.bias.shape == (6,) and layer.weight.dtype == np.float32, (
    "weight (OC, C/groups, KH, KW) and bias (OC,), float32 by default")
assert layer.kernel_size == (5, 5) and layer.stride == (1, 1), "the size arguments are kept as pairs"
bound = 1 / math.sqrt(3 * 25)
assert np.abs(layer.weight.numpy()).max() <= bound and np.abs(layer.weight.numpy()).max() > 0.9 * bound, (
    "kaiming_uniform_(a=√5): the weight is uniform in ±1/√fan_in")
y = layer(randn(2, 3, 9, 9))
assert y.shape == (2, 6, 5, 5) and y.dtype == np.float32, "a 5×5 kernel on 9×9 images gives 5×5 maps"
try:
    Conv2d(1, 6, 5)(randn(32, 3, 28, 28))
    raise AssertionError("a wrong number of channels must raise")
except ShapeError as err:
    assert str(err) == "Conv2d(1, 6, 5) got input of shape (32, 3, 28, 28); expected (N, 1, H, W)", (
        f"the error names the layer, the input's shape and what was expected; got {err}")
### BEGIN HIDDEN TESTS
# This student's own layers: channels, groups, kernel, stride, padding, dilation, seed, weights and inputs, drawn.
def _layer_loops(x, w, b, stride, padding, dilation):
    """conv2d's definition, one output number at a time, for (height, width) pairs."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    groups = c // cg
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    for o in range(oc):
        g = o // (oc // groups)
        for i in range(oh):
            for j in range(ow):
                patch = xp_[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                            j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + (0 if b is None else b[o])
    return out


_G = int(check_rng.integers(2, 4))
_C, _OC = _G * int(check_rng.integers(1, 3)), _G * int(check_rng.integers(1, 3))
_k = tuple(int(v) for v in check_rng.integers(2, 4, 2))
_fan_in = _C // _G * _k[0] * _k[1]
manual_seed(int(check_rng.integers(0, 2**31)))
_big = Conv2d(_C, _G * 32, _k, groups=_G)  # 32 filters per group: enough values to see the bounds
assert 0.9 < np.abs(_big.weight.numpy()).max() * math.sqrt(_fan_in) <= 1 + 1e-6, (
    "kaiming_uniform_(a=√5): the weight is uniform in ±1/√fan_in, fan_in = C/groups·KH·KW")
assert 0.5 < np.abs(_big.bias.numpy()).max() * math.sqrt(_fan_in) <= 1 + 1e-6, (
    "the bias is uniform in ±1/√fan_in, fan_in = C/groups·KH·KW")
assert [name for name, _ in Conv2d(_C, _OC, _k, groups=_G, bias=False).named_parameters()] == ["weight"], (
    "bias=False: the layer has a weight and no bias")
# stride, padding and dilation as (height, width) pairs, each with one axis off its default
_s = tuple(int(v) for v in check_rng.permutation([2, int(check_rng.integers(1, 3))]))
_p = tuple(int(v) for v in check_rng.permutation([1, int(check_rng.integers(0, 2))]))
_d = tuple(int(v) for v in check_rng.permutation([2, int(check_rng.integers(1, 3))]))
_layer = Conv2d(_C, _OC, _k, stride=_s, padding=_p, dilation=_d, groups=_G)
assert _layer.weight.shape == (_OC, _C // _G, *_k), "the weight has shape (OC, C/groups, KH, KW)"
assert [_layer.kernel_size, _layer.stride, _layer.padding, _layer.dilation] == [_k, _s, _p, _d], (
    "the layer keeps kernel_size, stride, padding and dilation as (height, width) pairs")
_w, _b = check_rng.standard_normal((_OC, _C // _G, *_k)), check_rng.standard_normal(_OC)
_layer.weight.data[...] = _w
_layer.bias.data[...] = _b
_x = check_rng.standard_normal((int(check_rng.integers(1, 3)), _C, *(int(v) for v in check_rng.integers(5, 9, 2))))
assert np.allclose(_layer(Tensor(_x.astype(np.float32))).numpy(), _layer_loops(_x, _w, _b, _s, _p, _d), atol=1e-4), (
    "the layer computes conv2d with its own weight, bias, stride, padding, dilation and groups")
_dtype = (float32, float64)[int(check_rng.integers(2))]
_ints = check_rng.integers(-5, 6, (1, _C, 5, 5))
assert str(Conv2d(_C, _OC, 2, groups=_G, dtype=_dtype)(Tensor(_ints)).dtype) == str(np.dtype(_dtype)), (
    "an integer input becomes the weight's dtype")
_bad_shape = ((2, _C + int(check_rng.integers(1, 3)), 6, 6), (_C, 6, 6))[int(check_rng.integers(2))]
try:
    _layer(Tensor(np.zeros(_bad_shape, np.float32)))
    raise AssertionError("an input that is not (N, C, H, W) with C = in_channels must raise a ShapeError")
except ShapeError as err:
    _said = str(err)
_kname = _k[0] if _k[0] == _k[1] else _k
assert _said == f"Conv2d({_C}, {_OC}, {_kname}) got input of shape {_bad_shape}; expected (N, {_C}, H, W)", (
    "the error names the layer, the input's shape and what was expected")
_a, _o = _G * int(check_rng.integers(1, 3)), _G * int(check_rng.integers(1, 3))
_channels = ((_a + 1, _o), (_a, _o + 1))[int(check_rng.integers(2))]
try:
    Conv2d(*_channels, 3, groups=_G)
    raise AssertionError("in_channels or out_channels that groups does not divide must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "groups" in _said, "the error names groups"
_which = int(check_rng.integers(3))
_args = [_C, _OC, 3, 1, 0, 1, 1]
_args[(0, 1, 6)[_which]] = -int(check_rng.integers(0, 3))
try:
    Conv2d(*_args)
    raise AssertionError("in_channels, out_channels or groups that is not a positive int must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert ("in_channels", "out_channels", "groups")[_which] in _said, "the error names that argument"
_weights_dtype = (float32, float64)[int(check_rng.integers(2))]
_input_dtype = [d for d in (np.float16, np.float32, np.float64) if np.dtype(d) != np.dtype(_weights_dtype)][
    int(check_rng.integers(2))]
try:
    Conv2d(_C, _OC, 2, groups=_G, dtype=_weights_dtype)(Tensor(_x.astype(_input_dtype)))
    raise AssertionError("a floating input of another dtype than the weights must raise a TypeError")
except TypeError as err:
    _said = str(err)
assert np.dtype(_input_dtype).name in _said, "the error names the input's dtype"
### END HIDDEN TESTS

# %% [markdown]
# ## Pooling
#
# Pooling shrinks the feature map and makes the network care less about
# exactly where a feature sits. Three kinds follow, one task each. All
# reuse `_windows` and `_fold`; each is a `Function` (or a composition) on
# (N, C, H, W) inputs, with PyTorch's signatures. `stride=None` means
# `stride = kernel_size`.
#
# Both max and average pooling require padding ≤ kernel_size / 2
# (PyTorch's rule; otherwise a window could hold only padding): a
# `ValueError` naming the padding. Dilation can still spread a window's
# taps so that all of them land in the padding (kernel 2, dilation 2,
# padding 1 on an input one pixel high: taps at rows −1 and 1); where
# PyTorch would return −∞, `_pool_geometry` (given) raises a `ShapeError`
# naming the geometry. Call it first: it returns the checked
# (kernel, stride, padding, dilation) pairs. The layers `MaxPool2d`,
# `AvgPool2d`, `AdaptiveAvgPool2d` (given) hold the arguments and call
# your functions.

# %%
#| export
def _pool_geometry(op: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any,
                   dilation: Any = 1) -> tuple[tuple[int, int], ...]:
    """Checked pairs for a pooling op; stride=None means the kernel size; padding at most half the kernel."""
    geometry = _geometry(op, x.shape, kernel_size, kernel_size if stride is None else stride, padding, dilation)
    kernel, stride, pad, dilation = geometry
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ValueError(f"{op}: padding {pad} must be at most half the kernel size {kernel}")
    for axis, size in enumerate(x.shape[2:]):  # dilated taps can straddle the input and miss it
        positions = np.arange(conv_output_size(size, kernel[axis], stride[axis], pad[axis], dilation[axis]))
        taps = positions[:, None] * stride[axis] + np.arange(kernel[axis]) * dilation[axis] - pad[axis]
        empty = ~((taps >= 0) & (taps < size)).any(axis=1)
        if empty.any():
            raise ShapeError(
                f"{op}: output {'row' if axis == 0 else 'column'} {int(positions[empty][0])} would pool only "
                f"padding (input of shape {x.shape}, kernel {kernel}, stride {stride}, padding {pad}, "
                f"dilation {dilation}); use less padding or dilation")
    return geometry


# %% [markdown]
# ### Task `conv_max_pool` (2 points): the largest value of each window
#
# **`max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1)`** —
# the largest value of each window (pad with −∞, so padding never wins).
# Backward: each window's gradient goes to its maximum. With ties, PyTorch
# sends it to *one* element (the first maximum in the window); so does
# ours. The simplest way: copy the windows into (N, C, OH, OW, KH·KW),
# take `argmax` along the last axis and keep the indices. That copy is
# KH·KW times the output, so do what `_fold` does instead — loop over the
# KH·KW kernel offsets, never over pixels: the output is a *running
# maximum* of the strided slices `windows[..., i, j]` (`xp.maximum(out,
# slice, out=out)`), and nothing is copied but the output. In backward,
# walk the offsets in the same order: at each one, the positions that
# equal the window's maximum *and* whose window has not had its gradient
# yet (a boolean "taken" array) receive it — so a tie goes to the first
# maximum. You could write those into a window-shaped array and `_fold`
# it; it is about twice as fast (LeNet's pools, measured) to do `_fold`'s
# strided addition yourself, offset by offset, straight into a zero
# gradient of the padded input, and cut the padding off at the end: no
# KH·KW-times-the-output array to fill and then copy. Pad floating inputs
# with −∞ and integer ones with their smallest value; a bool input is a
# `TypeError`.
#
# **Checked when graded** (besides the tests below), on sizes, geometries,
# values (distinct, except where ties are built into every window) and
# output gradients drawn for you:
#
# * max_pool2d gives each window's largest value, for any kernel, stride, padding and dilation (stride None: the kernel size)
# * each window's gradient goes to its largest value, added up where windows overlap, for any kernel, stride, padding and dilation
# * padding never wins: windows of negative numbers keep their largest real value
# * integer inputs stay integer
# * integer inputs are padded with their smallest value: windows of negative integers keep their largest real value
# * a tie sends each window's gradient to one element only: the window's first maximum, in row-major order (windows that tile the image, windows that overlap)
# * padding above half the kernel must raise a `ValueError`
# * the error names the padding
# * a bool input must raise a `TypeError`
# * the error names the bool input

# %% nbgrader={"grade": false, "grade_id": "conv_max_pool_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class MaxPool2dFn(Function):
    """The maximum of each window; the gradient goes to the (first) maximum."""

    def forward(self, x, kernel, stride, padding, dilation):
        ### BEGIN SOLUTION
        xp = self.xp
        fill = -xp.inf if is_floating(x.dtype) else xp.iinfo(x.dtype).min  # padding never wins
        win = _windows(x, kernel, stride, padding, dilation, fill=fill)  # a view: nothing copied yet
        out = win[..., 0, 0].copy()
        for i in range(kernel[0]):  # a running maximum over the KH·KW offsets, never over pixels
            for j in range(kernel[1]):
                if i or j:
                    xp.maximum(out, win[..., i, j], out=out)
        self.win, self.out = win, out
        self.geometry, self.x_shape = (kernel, stride, padding, dilation), x.shape
        return out
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        xp = self.xp
        win, out = self.win, self.out
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.geometry
        n, c, h, w = self.x_shape
        oh, ow = out.shape[2:]
        dx = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=grad.dtype)  # the padded input's gradient
        taken = xp.zeros(out.shape, dtype=bool)  # windows whose maximum has had its gradient
        zero = grad.dtype.type(0)
        for i in range(kh):  # in window order, so a tie goes to the first maximum
            for j in range(kw):
                first = (win[..., i, j] == out) & ~taken
                taken |= first
                # _fold's strided addition, done here directly: no window-shaped array to fill and fold
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                dx[:, :, rows, cols] += xp.where(first, grad, zero)
        return dx[:, :, ph:ph + h, pw:pw + w] if ph or pw else dx
        ### END SOLUTION


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> Tensor:
    """The maximum over each (dilated) window of an (N, C, H, W) input."""
    check_tensor("max_pool2d", "x", x)
    ### BEGIN SOLUTION
    if x.dtype == np.bool_:
        raise TypeError("max_pool2d: expected a numeric input; got bool (convert it with .to(dtype=...))")
    kernel, stride, padding, dilation = _pool_geometry("max_pool2d", x, kernel_size, stride, padding, dilation)
    return MaxPool2dFn.apply(x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    ### END SOLUTION


class MaxPool2d(Module):
    """Max pooling over (dilated) windows; stride defaults to the kernel size."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> None:
        super().__init__()
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = kernel_size if stride is None else stride

    def forward(self, x: Tensor) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, dilation={self.dilation}"


# %% nbgrader={"grade": true, "grade_id": "conv_max_pool", "locked": true, "points": 2, "schema_version": 3, "solution": false}
img = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), requires_grad=True)
out = max_pool2d(img, 2)
assert out.shape == (1, 1, 2, 2) and out.numpy()[0, 0].tolist() == [[5, 7], [13, 15]] and out.dtype == np.float32, (
    "the largest value of each 2×2 window, in float32")
out.sum().backward()
assert img.grad.numpy()[0, 0].tolist() == [[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1]], (
    "each window's gradient goes to its maximum")
rng = np.random.default_rng(2)
x64 = Tensor(rng.standard_normal((2, 2, 5, 5)), requires_grad=True)
assert gradcheck(lambda t: max_pool2d(t, 3, stride=2, padding=1), x64), "the gradient with stride 2 and padding 1"
assert MaxPool2d(2)(img).shape == (1, 1, 2, 2), "the layer calls max_pool2d"
### BEGIN HIDDEN TESTS
# This student's own inputs: sizes, geometries, values (distinct, so no ties, except where a check is about
# ties, which are built into every window) and output gradients, drawn.
def _max_loops(x, kernel, stride, padding, dilation, fill):
    """Each window's largest value, one window at a time, the input padded with fill."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp_[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw].max(
                axis=(2, 3))
    return out


def _max_grad_loops(x, grad, kernel, stride, padding, dilation):
    """Each window's gradient added to its first maximum (row-major order), one window at a time."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    gx = np.zeros(xp_.shape)
    for b in range(n):
        for ch in range(c):
            for i in range(grad.shape[2]):
                for j in range(grad.shape[3]):
                    window = xp_[b, ch, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw]
                    r, q = divmod(int(np.argmax(window)), kw)
                    gx[b, ch, i * sh + r * dh, j * sw + q * dw] += grad[b, ch, i, j]
    return gx[:, :, ph:ph + h, pw:pw + w]


def _as_pair(v):
    return (v, v) if isinstance(v, int) else v


_N, _C = (int(v) for v in check_rng.integers(1, 3, 2))
_H, _W = (int(v) for v in check_rng.integers(5, 9, 2))
_count = _N * _C * _H * _W
_x = (check_rng.permutation(_count) - _count // 2).reshape(_N, _C, _H, _W) / 4  # distinct, both signs: no ties
# (kernel, stride, padding, dilation) as max_pool2d takes them, padding at most half the kernel
_k3 = int(check_rng.integers(2, 4))
_geometries = [
    (_k3, None, _k3 // 2, 1),
    (tuple(int(v) for v in check_rng.permutation([2, 3])), tuple(int(v) for v in check_rng.permutation([1, 2])),
     tuple(int(v) for v in check_rng.permutation([0, 1])), 1),
    (2, int(check_rng.integers(1, 3)), int(check_rng.integers(0, 2)), 2),
    (3, 1, 1, tuple(int(v) for v in check_rng.permutation([1, 2]))),
]
for _k, _s, _p, _d in _geometries:
    assert np.array_equal(max_pool2d(Tensor(_x), _k, _s, _p, _d).numpy(),
                          _max_loops(_x, _as_pair(_k), _as_pair(_k if _s is None else _s), _as_pair(_p), _as_pair(_d),
                                     -np.inf)), (
        "max_pool2d gives each window's largest value, for any kernel, stride, padding and dilation "
        "(stride None: the kernel size)")
for _k, _s, _p, _d in _geometries[2:]:  # overlapping windows, padding, dilation
    _xt = Tensor(_x, requires_grad=True)
    _out = max_pool2d(_xt, _k, _s, _p, _d)
    _g = check_rng.standard_normal(_out.shape)
    (_out * Tensor(_g)).sum().backward()
    assert np.allclose(_xt.grad.numpy(), _max_grad_loops(_x, _g, _as_pair(_k), _as_pair(_s), _as_pair(_p), _as_pair(_d))), (
        "each window's gradient goes to its largest value, added up where windows overlap, for any kernel, stride, "
        "padding and dilation")
_negative = -(check_rng.permutation(_count) + 1).reshape(_N, _C, _H, _W).astype(np.float32)
assert np.array_equal(max_pool2d(Tensor(_negative), 3, 1, 1).numpy(),
                      _max_loops(_negative, (3, 3), (1, 1), (1, 1), (1, 1), -np.inf)), (
    "padding never wins: windows of negative numbers keep their largest real value")
_int_dtype = (np.int32, np.int64)[int(check_rng.integers(2))]
_pooled = max_pool2d(Tensor(_negative.astype(_int_dtype)), 3, 1, 1)
assert str(_pooled.dtype) == np.dtype(_int_dtype).name, "integer inputs stay integer"
assert np.array_equal(_pooled.numpy(), _max_loops(_negative.astype(_int_dtype), (3, 3), (1, 1), (1, 1), (1, 1),
                                                  np.iinfo(_int_dtype).min)), (
    "integer inputs are padded with their smallest value: windows of negative integers keep their largest real value")
# ties by construction: small integers, and the value 5 at two places of every window of a tiling
_tk = int(check_rng.integers(2, 4))
_th, _tw = _tk * int(check_rng.integers(2, 4)), _tk * int(check_rng.integers(2, 4))
_tied = check_rng.integers(0, 4, (_N, _C, _th, _tw)).astype(np.float64)
for _b in range(_N):
    for _c in range(_C):
        for _i in range(0, _th, _tk):
            for _j in range(0, _tw, _tk):
                for _pos in check_rng.choice(_tk * _tk, 2, replace=False):
                    _tied[_b, _c, _i + _pos // _tk, _j + _pos % _tk] = 5.0
for _s in (_tk, 1):  # windows that tile the image, windows that overlap
    _xt = Tensor(_tied, requires_grad=True)
    _out = max_pool2d(_xt, _tk, _s)
    _g = check_rng.standard_normal(_out.shape)
    (_out * Tensor(_g)).sum().backward()
    assert np.allclose(_xt.grad.numpy(), _max_grad_loops(_tied, _g, (_tk, _tk), (_s, _s), (0, 0), (1, 1))), (
        "a tie sends each window's gradient to one element only: the window's first maximum, in row-major order "
        "(windows that tile the image, windows that overlap)")
_k = int(check_rng.integers(2, 5))
try:
    max_pool2d(Tensor(_x), _k, padding=_k // 2 + 1)
    raise AssertionError("padding above half the kernel must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "padding" in _said, "the error names the padding"
try:
    max_pool2d(Tensor(_x > 0), 2)
    raise AssertionError("a bool input must raise a TypeError")
except TypeError as err:
    _said = str(err)
assert "bool" in _said, "the error names the bool input"
### END HIDDEN TESTS

# %% [markdown] tinyflo={"given_after": "conv_max_pool"}
# ### Given: max pooling's backward when the windows tile the image
#
# LeNet pools with kernel 2 and stride 2: the windows do not overlap, no
# pixel is in two of them, and the image reshapes for free to
# (N, C, OH, KH, OW, KW) — axis 3 is the row in the window, axis 5 the
# column. Then backward needs neither a zero image nor additions: each
# kernel offset (i, j) *writes* its share, `where(first, grad, 0)`, into
# the slice `[:, :, :, i, :, j]`, and the KH·KW writes together fill every
# pixel exactly once. On LeNet's two pools that halves the time of
# forward + backward. Ties still go to the first maximum, with the same
# "taken" array. Other geometries (overlapping windows, padding, dilation)
# keep your backward; your class stays available as `MaxPool2dWindowsFn`.
#
# On a GPU each of those passes is a kernel launch — six per offset, 25
# for a 2×2 backward — and launches, not arithmetic, bound a GPU's step
# at LeNet's sizes. There forward copies each window's KH·KW values side
# by side, then takes their `max` and `argmax` (the first maximum, as in
# your window order), and backward is one select in the image's own
# layout: the gradient where a pixel's offset is its window's argmax, 0
# elsewhere — eight kernels for forward and backward instead of 29.

# %% tinyflo={"given_after": "conv_max_pool"}
#| export
MaxPool2dWindowsFn = MaxPool2dFn  # the general form graded above: the reference the fast one must equal


class MaxPool2dFn(MaxPool2dWindowsFn):
    """Max pooling; when the windows tile the input, backward writes each offset's share in place.

    2×2 windows with stride 2 on the CPU go in two halves: the larger of each pair of columns, then of
    each pair of rows, keeping which one won. Backward then spreads the gradient back with four in-place
    products over long strided runs instead of four passes of compares over short ones.
    """

    def forward(self, x, kernel, stride, padding, dilation):
        self.winners = self.first = None
        tiling = kernel == stride and padding == (0, 0) and dilation == (1, 1)
        if tiling and self.xp is not np:
            return self._forward_first(x, kernel)
        if not tiling or kernel != (2, 2):
            return super().forward(x, kernel, stride, padding, dilation)
        n, c, h, w = x.shape
        hh, ww = h - h % 2, w - w % 2  # rows or columns left over are in no window
        right_wins = np.empty((n, c, hh, ww // 2), dtype=bool)
        bottom_wins = np.empty((n, c, hh // 2, ww // 2), dtype=bool)
        out = np.empty((n, c, hh // 2, ww // 2), dtype=x.dtype)
        self.images = per_block(c * h * w)  # images per block, one block per thread at a time
        nan = np.zeros(block_count(n, self.images), dtype=bool)

        def images(start, stop):
            whole = x[start:stop, :, :hh, :ww]
            left, right = whole[..., 0::2], whole[..., 1::2]
            np.greater(right, left, out=right_wins[start:stop])  # a tie goes to the left: the first maximum
            pairs = np.maximum(left, right)
            top, bottom = pairs[:, :, 0::2], pairs[:, :, 1::2]
            np.greater(bottom, top, out=bottom_wins[start:stop])
            np.maximum(top, bottom, out=out[start:stop])
            # NaN wins no comparison, so a NaN maximum goes to the window form; a sum is NaN if any element is
            nan[start // self.images] = is_floating(out.dtype) and np.isnan(out[start:stop].sum(dtype=np.float32))

        parallel(images, n, self.images)
        self.x, self.out, self.win = x, out, None  # the window form below takes over the cases this cannot
        self.geometry, self.x_shape = (kernel, stride, padding, dilation), x.shape
        if not nan.any():
            self.winners = (right_wins, bottom_wins)
        return out

    def backward(self, grad):
        if self.first is not None:
            return self._backward_first(grad)
        # 0 · inf is NaN: a non-finite gradient takes the window form, which selects instead of multiplying
        if self.winners is not None and np.isfinite(grad).all():
            return self._backward_pairs(grad)
        (kh, kw), stride, padding, dilation = self.geometry
        if self.win is None:
            self.win = _windows(self.x, (kh, kw), stride, padding, dilation)
        if stride != (kh, kw) or padding != (0, 0) or dilation != (1, 1):
            return super().backward(grad)
        xp = self.xp
        win, out = self.win, self.out
        n, c, h, w = self.x_shape
        oh, ow = out.shape[2:]
        tiled = (h, w) == (oh * kh, ow * kw)  # otherwise the last rows or columns are in no window
        dx = (xp.empty if tiled else xp.zeros)(self.x_shape, dtype=grad.dtype)
        tiles = dx[:, :, :oh * kh, :ow * kw].reshape(n, c, oh, kh, ow, kw)  # a view: splitting axes never copies
        taken = xp.zeros(out.shape, dtype=bool)
        # first · grad writes in place and is twice as fast as where(first, grad, 0), but 0 · inf is NaN:
        # it is used on the CPU, where checking that the gradient is finite costs no device round trip
        multiply = xp is np and bool(np.isfinite(grad).all())
        zero = grad.dtype.type(0)
        for i in range(kh):  # in window order, so a tie goes to the first maximum
            for j in range(kw):
                first = win[..., i, j] == out
                first &= ~taken
                taken |= first
                if multiply:
                    xp.multiply(first, grad, out=tiles[:, :, :, i, :, j])
                else:
                    tiles[:, :, :, i, :, j] = xp.where(first, grad, zero)
        return dx

    def _backward_pairs(self, grad):
        """Each output's gradient to its row's winner, then to that row's winning column, written in place."""
        right_wins, bottom_wins = self.winners
        n, c, h, w = self.x_shape
        dx = (np.empty if h % 2 == w % 2 == 0 else np.zeros)(self.x_shape, dtype=grad.dtype)

        def images(start, stop):
            rw, bw, g = right_wins[start:stop], bottom_wins[start:stop], grad[start:stop]
            pairs = np.empty(rw.shape, dtype=grad.dtype)  # the gradient of the column pairs' maxima
            np.multiply(g, ~bw, out=pairs[:, :, 0::2])
            np.multiply(g, bw, out=pairs[:, :, 1::2])
            whole = dx[start:stop, :, :h - h % 2, :w - w % 2]
            np.multiply(pairs, ~rw, out=whole[..., 0::2])
            np.multiply(pairs, rw, out=whole[..., 1::2])

        parallel(images, n, self.images)
        return dx

    def _forward_first(self, x, kernel):
        """On a GPU: each window's KH·KW values side by side (one copy), then their max and argmax."""
        xp = self.xp
        (kh, kw), (n, c, h, w) = kernel, x.shape
        oh, ow = h // kh, w // kw
        tiles = x[:, :, :oh * kh, :ow * kw].reshape(n, c, oh, kh, ow, kw)  # a view
        values = tiles.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, oh, ow, kh * kw)  # the one copy
        out = values.max(axis=-1)
        first = values.argmax(axis=-1)  # offset i·KW + j of the first maximum, as in your window order
        if is_floating(x.dtype):  # a NaN maximum equals no value: offset KH·KW, which no pixel has
            first = xp.where(xp.isnan(out), kh * kw, first)
        self.first, self.geometry, self.x_shape = first, (kernel, kernel, (0, 0), (1, 1)), x.shape
        return out

    def _backward_first(self, grad):
        """Each pixel: the gradient of its window if it is the window's first maximum, else 0, in one select."""
        xp = self.xp
        (kh, kw), n, c, h, w = self.geometry[0], *self.x_shape
        oh, ow = grad.shape[2:]
        offset = xp.arange(kh * kw).reshape(kh, 1, kw)  # (i, 1, j): offset i·KW + j
        chosen = self.first[:, :, :, None, :, None] == offset  # (N, C, OH, KH, OW, KW): the image's own order
        tiles = xp.where(chosen, grad[:, :, :, None, :, None], grad.dtype.type(0))
        if (h, w) == (oh * kh, ow * kw):
            return tiles.reshape(self.x_shape)  # a view: merging neighbouring axes never copies
        dx = xp.zeros(self.x_shape, dtype=grad.dtype)  # rows or columns left over are in no window
        dx[:, :, :oh * kh, :ow * kw] = tiles.reshape(n, c, oh * kh, ow * kw)
        return dx


# %% tinyflo={"given_after": "conv_max_pool"}
_x = Tensor(np.random.default_rng(6).integers(0, 3, (2, 3, 9, 8)).astype(np.float32), requires_grad=True)
_grads = []
for _kernel in ((2, 3), (2, 2)):
    for _fn in (MaxPool2dWindowsFn, MaxPool2dFn):  # small integers: many ties
        _x.grad = None
        _fn.apply(_x, kernel=_kernel, stride=_kernel, padding=(0, 0), dilation=(1, 1)).sum().backward()
        _grads.append(_x.grad.numpy())
print("tiling backward equals the general one:", np.array_equal(*_grads[:2]), np.array_equal(*_grads[2:]))

# %% [markdown]
# ### Task `conv_avg_pool` (1 point): the mean of each window
#
# **`avg_pool2d(x, kernel_size, stride=None, padding=0,
# count_include_pad=True)`** — the mean of each window. With
# `count_include_pad=False`, padded positions do not count: the divisor of
# each window is the number of real pixels in it (the window sums of an
# all-ones image). Backward: each output's gradient, divided by its
# divisor, spread over its window with `_fold`. Sum float16 windows in
# float32 (`dtype=` of `sum`) and cast the result back. Integer inputs are
# averaged as float32 (`x._floating()`).
#
# **Checked when graded** (besides the tests below), on sizes, geometries,
# values, output gradients and float16 windows drawn for you:
#
# * avg_pool2d gives each window's mean, padded zeros counted, for any kernel, stride and padding (stride None: the kernel size)
# * count_include_pad=False: each window's sum divided by the number of real pixels in it
# * the gradient: each output's gradient over its divisor, added to every pixel of its window (count_include_pad True and False)
# * float16 in, float16 out
# * float16 windows give their means to float16's precision
# * float16 windows are summed in float32: the mean of k² equal values is that value, though their float16 sum overflows
# * an integer input is averaged as float32
# * an integer input's window means are not rounded
# * padding above half the kernel must raise a `ValueError`
# * the error names the padding

# %% nbgrader={"grade": false, "grade_id": "conv_avg_pool_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class AvgPool2dFn(Function):
    """The mean of each window (padding counted or not); the gradient spread evenly over it."""

    def forward(self, x, kernel, stride, padding, count_include_pad=True):
        ### BEGIN SOLUTION
        xp = self.xp
        geometry = (kernel, stride, padding, (1, 1))
        acc = float32 if x.dtype.itemsize < 4 else x.dtype  # float16 window sums in float32
        total = _windows(x, *geometry).sum(axis=(4, 5), dtype=acc)
        if count_include_pad or padding == (0, 0):
            self.divisor = acc.type(kernel[0] * kernel[1])
        else:
            ones = xp.ones((1, 1, *x.shape[2:]), dtype=acc)
            self.divisor = _windows(ones, *geometry).sum(axis=(4, 5))  # real pixels per window
        self.geometry, self.x_shape = geometry, x.shape
        return (total / self.divisor).astype(x.dtype, copy=False)
        ### END SOLUTION

    def backward(self, grad):
        ### BEGIN SOLUTION
        xp = self.xp
        share = (grad / self.divisor).astype(grad.dtype, copy=False)
        kernel = self.geometry[0]
        spread = xp.broadcast_to(share[..., None, None], (*share.shape, *kernel))
        return _fold(spread, self.x_shape, *self.geometry)
        ### END SOLUTION


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               count_include_pad: bool = True) -> Tensor:
    """The mean over each window of an (N, C, H, W) input."""
    check_tensor("avg_pool2d", "x", x)
    ### BEGIN SOLUTION
    kernel, stride, padding, _ = _pool_geometry("avg_pool2d", x, kernel_size, stride, padding)
    return AvgPool2dFn.apply(x._floating(), kernel=kernel, stride=stride, padding=padding,
                             count_include_pad=count_include_pad)
    ### END SOLUTION


class AvgPool2d(Module):
    """Average pooling; stride defaults to the kernel size."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


# %% nbgrader={"grade": true, "grade_id": "conv_avg_pool", "locked": true, "points": 1, "schema_version": 3, "solution": false}
img = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), requires_grad=True)
assert avg_pool2d(img, 2).numpy()[0, 0].tolist() == [[2.5, 4.5], [10.5, 12.5]], "the mean of each 2×2 window"
rng = np.random.default_rng(2)
x64 = Tensor(rng.standard_normal((2, 2, 5, 5)), requires_grad=True)
assert gradcheck(lambda t: avg_pool2d(t, 3, stride=2, padding=1), x64), "the gradient with stride 2 and padding 1"
assert AvgPool2d(3, 1)(img).shape == (1, 1, 2, 2), "the layer calls avg_pool2d"
### BEGIN HIDDEN TESTS
# This student's own inputs: sizes, geometries, values, output gradients and float16 windows, drawn.
def _avg_loops(x, kernel, stride, padding, count_include_pad):
    """Each window's sum over its divisor (the kernel's area, or the real pixels in it), one window at a time."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, c, h, w = x.shape
    xp_ = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    real = np.pad(np.ones((h, w)), ((ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows, cols = slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw)
            divisor = kh * kw if count_include_pad else real[rows, cols].sum()
            out[:, :, i, j] = xp_[:, :, rows, cols].sum(axis=(2, 3)) / divisor
    return out


def _avg_grad_loops(grad, shape, kernel, stride, padding, count_include_pad):
    """Each output's gradient over its window's divisor, added to every pixel of the window, one window at a time."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, c, h, w = shape
    real = np.pad(np.ones((h, w)), ((ph, ph), (pw, pw)))
    gx = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    for i in range(grad.shape[2]):
        for j in range(grad.shape[3]):
            rows, cols = slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw)
            divisor = kh * kw if count_include_pad else real[rows, cols].sum()
            gx[:, :, rows, cols] += (grad[:, :, i, j] / divisor)[:, :, None, None]
    return gx[:, :, ph:ph + h, pw:pw + w]


def _as_pair(v):
    return (v, v) if isinstance(v, int) else v


_N, _C = (int(v) for v in check_rng.integers(1, 3, 2))
_H, _W = (int(v) for v in check_rng.integers(5, 9, 2))
_x = check_rng.standard_normal((_N, _C, _H, _W))
# (kernel, stride, padding) as avg_pool2d takes them; each pads at least one axis, by at most half the kernel
_k3 = int(check_rng.integers(2, 4))
_geometries = [
    (_k3, None, _k3 // 2),
    (tuple(int(v) for v in check_rng.permutation([2, 3])), tuple(int(v) for v in check_rng.permutation([1, 2])),
     tuple(int(v) for v in check_rng.permutation([0, 1]))),
    (3, int(check_rng.integers(1, 3)), 1),
]
for _k, _s, _p in _geometries:
    assert np.allclose(avg_pool2d(Tensor(_x), _k, _s, _p).numpy(),
                       _avg_loops(_x, _as_pair(_k), _as_pair(_k if _s is None else _s), _as_pair(_p), True)), (
        "avg_pool2d gives each window's mean, padded zeros counted, for any kernel, stride and padding "
        "(stride None: the kernel size)")
for _k, _s, _p in _geometries:
    assert np.allclose(avg_pool2d(Tensor(_x), _k, _s, _p, count_include_pad=False).numpy(),
                       _avg_loops(_x, _as_pair(_k), _as_pair(_k if _s is None else _s), _as_pair(_p), False)), (
        "count_include_pad=False: each window's sum divided by the number of real pixels in it")
_k, _s, _p = _geometries[2]
for _counted in (True, False):
    _xt = Tensor(_x, requires_grad=True)
    _out = avg_pool2d(_xt, _k, _s, _p, _counted)
    _g = check_rng.standard_normal(_out.shape)
    (_out * Tensor(_g)).sum().backward()
    assert np.allclose(_xt.grad.numpy(), _avg_grad_loops(_g, _x.shape, (3, 3), (_s, _s), (1, 1), _counted)), (
        "the gradient: each output's gradient over its divisor, added to every pixel of its window "
        "(count_include_pad True and False)")
_half = avg_pool2d(Tensor(_x.astype(np.float16)), _k3, 1)
assert str(_half.dtype) == "float16", "float16 in, float16 out"
assert np.allclose(_half.numpy().astype(np.float64),
                   _avg_loops(_x.astype(np.float16), (_k3, _k3), (1, 1), (0, 0), True), atol=1e-2), (
    "float16 windows give their means to float16's precision")
# k² equal float16 values whose float16 sum overflows (above 65504); their mean is exact in float32
_k16, _v = int(check_rng.integers(16, 33)), np.float16(check_rng.uniform(300, 3000))
assert np.array_equal(avg_pool2d(Tensor(np.full((1, 1, _k16, _k16), _v, np.float16)), _k16).numpy(),
                      np.full((1, 1, 1, 1), _v, np.float16)), (
    "float16 windows are summed in float32: the mean of k² equal values is that value, though their float16 sum overflows")
_int_dtype = (np.int32, np.int64)[int(check_rng.integers(2))]
_ints = check_rng.integers(-50, 50, (_N, _C, _H, _W)).astype(_int_dtype)
_pooled = avg_pool2d(Tensor(_ints), 2, 1)
assert str(_pooled.dtype) == "float32", "an integer input is averaged as float32"
assert np.allclose(_pooled.numpy(), _avg_loops(_ints, (2, 2), (1, 1), (0, 0), True), atol=1e-5), (
    "an integer input's window means are not rounded")
_k = int(check_rng.integers(2, 5))
try:
    avg_pool2d(Tensor(_x), _k, padding=_k // 2 + 1)
    raise AssertionError("padding above half the kernel must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "padding" in _said, "the error names the padding"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `conv_adaptive_avg_pool` (1 point): you choose the output size
#
# **`adaptive_avg_pool2d(x, output_size)`** — you choose the output size,
# the windows adapt. PyTorch's rule: output row i averages input rows
# `start = ⌊i·H/OH⌋` to `end = ⌈(i+1)·H/OH⌉` (exclusive), so windows may
# differ in size and overlap when OH does not divide H. An average over a
# rectangle is an average over its rows of averages over its columns, so
# the whole operation is two matrix products, `P_h @ x @ P_wᵀ`, with
# P_h[i, start:end] = 1/(end − start) (`_adaptive_matrix(H, OH)`) — a
# composition of module 01's `matmul`, so no new backward. When the sizes
# divide, use `avg_pool2d` with kernel = stride = H/OH. `output_size` is an
# int or a pair; `None` in the pair keeps that axis's size (the given
# `_output_size_pair` reads it). An output size of 0 or less is a
# `ValueError` naming `output_size`.
#
# **Checked when graded** (besides the tests below), on sizes, output sizes
# (that do not divide the input's, that divide it, larger), values and
# output gradients drawn for you:
#
# * output (i, j) averages rows ⌊i·H/OH⌋ to ⌈(i+1)·H/OH⌉ (exclusive) and columns ⌊j·W/OW⌋ to ⌈(j+1)·W/OW⌉: windows that differ in size and overlap
# * output size 1 is the mean over the whole image
# * sizes that divide: (H/OH) × (W/OW) blocks are averaged
# * None keeps that axis's size
# * float32 in, float32 out
# * an output larger than the input works too, with the same rule
# * the gradient: each output's gradient shared equally by the pixels of its window
# * an output_size of 0 or less must raise a `ValueError`
# * the error names output_size

# %% nbgrader={"grade": false, "grade_id": "conv_adaptive_avg_pool_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) averaging matrix: row i is 1/(end − start) on PyTorch's window [start, end)."""
    ### BEGIN SOLUTION
    i = np.arange(out)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return inside / (end - start)[:, None]
    ### END SOLUTION


def _output_size_pair(output_size: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    """adaptive_avg_pool2d's output_size (an int, or a pair of ints or None) as (OH, OW)."""
    pair = (output_size, output_size) if output_size is None or _is_int(output_size) else output_size
    if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(v is None or _is_int(v) for v in pair)):
        raise TypeError(f"adaptive_avg_pool2d: output_size must be an int or a pair of ints (or None); "
                        f"got {brief(output_size)}")
    oh, ow = (shape[2 + axis] if v is None else int(v) for axis, v in enumerate(pair))
    return oh, ow


def adaptive_avg_pool2d(x: Tensor, output_size: int | tuple[int | None, int | None]) -> Tensor:
    """Average-pool an (N, C, H, W) input to output_size with PyTorch's window rule."""
    check_tensor("adaptive_avg_pool2d", "x", x)
    ### BEGIN SOLUTION
    if x.ndim != 4:
        raise ShapeError(f"adaptive_avg_pool2d: expected an input of shape (N, C, H, W); got {x.shape}")
    oh, ow = _output_size_pair(output_size, x.shape)
    if oh < 1 or ow < 1:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be positive; got {output_size}")
    h, w = x.shape[2:]
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(x, (h // oh, w // ow))
    dtype, acc = x._floating().dtype, x._floating()._accurate()
    rows = Tensor(_adaptive_matrix(h, oh).astype(acc.dtype), device=x.device)
    cols = Tensor(_adaptive_matrix(w, ow).T.astype(acc.dtype), device=x.device)
    return (rows @ acc @ cols).to(dtype=dtype)
    ### END SOLUTION


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size, whatever the input size."""

    def __init__(self, output_size: int | tuple[int | None, int | None]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


# %%
_x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
print(max_pool2d(_x, 2).numpy()[0, 0], avg_pool2d(_x, 2).numpy()[0, 0], adaptive_avg_pool2d(_x, 3).numpy()[0, 0], sep="\n")

# %% nbgrader={"grade": true, "grade_id": "conv_adaptive_avg_pool", "locked": true, "points": 1, "schema_version": 3, "solution": false}
img = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
assert np.allclose(adaptive_avg_pool2d(img, 3).numpy()[0, 0], [[2.5, 3.5, 4.5], [6.5, 7.5, 8.5], [10.5, 11.5, 12.5]]), (
    "3×3 from 4×4: overlapping 2×2 windows")
rng = np.random.default_rng(2)
x64 = Tensor(rng.standard_normal((2, 2, 5, 5)), requires_grad=True)
assert gradcheck(lambda t: adaptive_avg_pool2d(t, (3, 2)), x64), "the gradient of a (3, 2) output"
assert AdaptiveAvgPool2d(1)(img).shape == (1, 1, 1, 1), "the layer calls adaptive_avg_pool2d"
### BEGIN HIDDEN TESTS
# This student's own inputs: sizes, output sizes (that do not divide, that divide, larger), values and output
# gradients, drawn.
def _adaptive_loops(x, oh, ow):
    """PyTorch's rule, one output at a time: rows ⌊i·H/OH⌋ to ⌈(i+1)·H/OH⌉ (exclusive), columns likewise, averaged."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, r1, c0, c1 = (i * h) // oh, -((-(i + 1) * h) // oh), (j * w) // ow, -((-(j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].astype(np.float64).mean(axis=(2, 3))
    return out


def _adaptive_grad_loops(grad, shape):
    """Each output's gradient shared equally by the pixels of its window, one window at a time."""
    n, c, h, w = shape
    oh, ow = grad.shape[2:]
    gx = np.zeros(shape)
    for i in range(oh):
        for j in range(ow):
            r0, r1, c0, c1 = (i * h) // oh, -((-(i + 1) * h) // oh), (j * w) // ow, -((-(j + 1) * w) // ow)
            gx[:, :, r0:r1, c0:c1] += grad[:, :, i, j][:, :, None, None] / ((r1 - r0) * (c1 - c0))
    return gx


_N, _C = (int(v) for v in check_rng.integers(1, 3, 2))
_H, _W = (int(v) for v in check_rng.integers(5, 10, 2))
_x = check_rng.standard_normal((_N, _C, _H, _W))
_oh = int(check_rng.choice([o for o in range(2, _H) if _H % o]))  # output sizes that do not divide the input's
_ow = int(check_rng.choice([o for o in range(2, _W) if _W % o]))
assert np.allclose(adaptive_avg_pool2d(Tensor(_x), (_oh, _ow)).numpy(), _adaptive_loops(_x, _oh, _ow)), (
    "output (i, j) averages rows ⌊i·H/OH⌋ to ⌈(i+1)·H/OH⌉ (exclusive) and columns ⌊j·W/OW⌋ to ⌈(j+1)·W/OW⌉: "
    "windows that differ in size and overlap")
assert np.allclose(adaptive_avg_pool2d(Tensor(_x), 1).numpy(), _x.mean(axis=(2, 3), keepdims=True)), (
    "output size 1 is the mean over the whole image")
_oh2, _a = (int(v) for v in check_rng.permutation([2, 3, 4])[:2])  # a block of a rows, a ≠ OH
_ow2, _b = (int(v) for v in check_rng.permutation([2, 3, 4])[:2])
_xd = check_rng.standard_normal((_N, _C, _oh2 * _a, _ow2 * _b))
assert np.allclose(adaptive_avg_pool2d(Tensor(_xd), (_oh2, _ow2)).numpy(),
                   _xd.reshape(_N, _C, _oh2, _a, _ow2, _b).mean(axis=(3, 5))), (
    "sizes that divide: (H/OH) × (W/OW) blocks are averaged")
_size, _kept = ((None, _ow), (_H, _ow)) if check_rng.integers(2) else ((_oh, None), (_oh, _W))
assert np.allclose(adaptive_avg_pool2d(Tensor(_x), _size).numpy(), _adaptive_loops(_x, *_kept)), (
    "None keeps that axis's size")
_single = adaptive_avg_pool2d(Tensor(_x.astype(np.float32)), (_oh, _ow))
assert str(_single.dtype) == "float32", "float32 in, float32 out"
_big = max(_H, _W) + int(check_rng.integers(1, 4))
assert np.allclose(adaptive_avg_pool2d(Tensor(_x), _big).numpy(), _adaptive_loops(_x, _big, _big)), (
    "an output larger than the input works too, with the same rule")
_xt = Tensor(_x, requires_grad=True)
_g = check_rng.standard_normal((_N, _C, _oh, _ow))
(adaptive_avg_pool2d(_xt, (_oh, _ow)) * Tensor(_g)).sum().backward()
assert np.allclose(_xt.grad.numpy(), _adaptive_grad_loops(_g, _x.shape)), (
    "the gradient: each output's gradient shared equally by the pixels of its window")
_bad = (-int(check_rng.integers(0, 2)), _ow) if check_rng.integers(2) else (_oh, -int(check_rng.integers(0, 2)))
try:
    adaptive_avg_pool2d(Tensor(_x), _bad)
    raise AssertionError("an output_size of 0 or less must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "output_size" in _said, "the error names output_size"
### END HIDDEN TESTS

# %% [markdown]
# ### Task `conv_batchnorm` (2 points): `BatchNorm2d`
#
# Batch normalisation of images normalises each *channel* over the batch
# and all positions: statistics over axes (0, 2, 3), one mean and variance
# per channel, the same training/evaluation rule and running statistics as
# module 03's `BatchNorm1d`. Module 03 already handles (N, C, L) inputs —
# statistics over (0, 2). An image (N, C, H, W) reshaped to
# (N, C, H·W) is exactly that (a free reshape: the H and W axes are
# adjacent and contiguous), so `BatchNorm2d` is `BatchNorm1d` with a
# different front door: subclass it and override `forward` to check the
# input and reshape on the way in and out. Nothing is written twice.
#
# Careful with the reshape: it must keep the channel axis where it is.
# `x.reshape(N, H·W, C)` has the right shape for a channels-last layout
# but mixes the channels of an NCHW array.
#
# An input that is not (N, C, H, W) with C = `num_features` is a
# `ShapeError`: `BatchNorm2d(4) got input of shape (6, 4); expected
# (N, 4, H, W)`. In training mode, fewer than two values per channel
# (N·H·W < 2) is a `ValueError` naming `BatchNorm2d`.
#
# **Checked when graded** (besides the tests below), on sizes, momentum,
# eps, γ, β, batches and output gradients drawn for you:
#
# * batch t: each channel is normalised over (N, H, W) with the biased variance and eps, then scaled by γ and shifted by β
# * with momentum m, running_mean after the batches is (1 − m) · running + m · the batch's channel means, batch after batch
# * with momentum m, running_var after the batches is (1 − m) · running + m · the batch's unbiased channel variances over (N, H, W), batch after batch
# * every training batch is counted
# * eval mode normalises with the running statistics, then scales by γ and shifts by β
# * eval mode does not count a batch
# * eval mode leaves the running statistics alone
# * evaluation works on one value per channel
# * affine=False: no weight and no bias
# * training on one image works: it has H·W values per channel
# * an input that is not (N, C, H, W) with C = num_features must raise a `ShapeError`
# * the error names the layer, the input's shape and what was expected
# * training on one value per channel must raise a `ValueError`
# * the error names BatchNorm2d
# * the repr names BatchNorm2d and its channels
# * the input's gradient: γ/σ · (g − mean(g) − x̂ · mean(g · x̂)), means per channel over (N, H, W)
# * the weight's gradient: Σ g · x̂ per channel over (N, H, W)
# * the bias's gradient: Σ g per channel over (N, H, W)

# %% nbgrader={"grade": false, "grade_id": "conv_batchnorm_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class BatchNorm2d(BatchNorm1d):
    """Normalise each channel of (N, C, H, W) images over (N, H, W); running statistics for evaluation."""

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        c = self.num_features
        if x.ndim != 4 or x.shape[1] != c:
            raise ShapeError(f"BatchNorm2d({c}) got input of shape {x.shape}; expected (N, {c}, H, W)")
        n, _, h, w = x.shape
        if self.training and n * h * w < 2:
            raise ValueError(f"BatchNorm2d: training needs more than 1 value per channel; got input of shape {x.shape}")
        return super().forward(x.reshape(n, c, h * w)).reshape(n, c, h, w)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "conv_batchnorm", "locked": true, "points": 2, "schema_version": 3, "solution": false}
rng = np.random.default_rng(3)
X = (rng.standard_normal((4, 3, 5, 6)) * np.array([1, 2, 3])[None, :, None, None] + 1).astype(np.float32)
bn = BatchNorm2d(3)
assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"] and bn.weight.shape == (3,), (
    "BatchNorm2d(3) has BatchNorm1d's weight and bias, one per channel")
y = bn(Tensor(X)).numpy()
m, v = X.mean(axis=(0, 2, 3), keepdims=True), X.var(axis=(0, 2, 3), keepdims=True)
assert y.shape == X.shape and y.dtype == np.float32, "the output has the input's shape and dtype"
assert np.allclose(y, (X - m) / np.sqrt(v + 1e-5), atol=1e-5), "per channel over (N, H, W)"
assert np.allclose(bn.running_mean.numpy(), 0.1 * m.ravel(), atol=1e-6), "the running mean per channel, momentum 0.1"
assert np.allclose(bn.running_var.numpy(), 0.9 + 0.1 * X.var(axis=(0, 2, 3), ddof=1), atol=1e-5), (
    "the running variance per channel (unbiased), momentum 0.1")
x64 = Tensor(X[:2, :, :3, :3].astype(np.float64), requires_grad=True)
assert gradcheck(lambda t: BatchNorm2d(3).to(dtype=float64)(t), x64), "the gradient with respect to the input"
### BEGIN HIDDEN TESTS
# This student's own inputs: sizes, momentum, eps, γ, β, batches and output gradients, drawn.
_C, _N = int(check_rng.integers(2, 5)), int(check_rng.integers(2, 4))
_H, _W = (int(v) for v in check_rng.integers(2, 5, 2))
_m = round(float(check_rng.uniform(0.2, 0.8)), 2)
_eps = float(10.0 ** -int(check_rng.integers(1, 6)))
_steps = int(check_rng.integers(2, 4))
_gamma, _beta = check_rng.uniform(0.5, 3.0, _C), check_rng.standard_normal(_C)
_shape = (1, _C, 1, 1)


def _scaled(z, scale, offset):
    """Images z whose channels get their own scale and offset, as float32."""
    return (z * scale[None, :, None, None] + offset[None, :, None, None]).astype(np.float32)


_bn = BatchNorm2d(_C, eps=_eps, momentum=_m)
_bn.weight.data[...] = _gamma
_bn.bias.data[...] = _beta
_rm, _rv = np.zeros(_C), np.ones(_C)
for _step in range(_steps):
    _batch = _scaled(check_rng.standard_normal((_N, _C, _H, _W)),
                     check_rng.uniform(0.5, 3.0, _C), check_rng.uniform(-2.0, 2.0, _C))
    _mean, _var = _batch.mean(axis=(0, 2, 3), dtype=np.float64), _batch.var(axis=(0, 2, 3), dtype=np.float64)
    _expected = ((_batch - _mean.reshape(_shape)) / np.sqrt(_var.reshape(_shape) + _eps) * _gamma.reshape(_shape)
                 + _beta.reshape(_shape))
    assert np.allclose(_bn(Tensor(_batch)).numpy(), _expected, atol=1e-4), (
        f"batch {_step}: each channel is normalised over (N, H, W) with the biased variance and eps, then scaled by γ "
        "and shifted by β")
    _rm = (1 - _m) * _rm + _m * _mean
    _rv = (1 - _m) * _rv + _m * _batch.var(axis=(0, 2, 3), ddof=1, dtype=np.float64)
assert np.allclose(_bn.running_mean.numpy(), _rm, atol=1e-5), (
    "with momentum m, running_mean after the batches is (1 − m) · running + m · the batch's channel means, batch after batch")
assert np.allclose(_bn.running_var.numpy(), _rv, atol=1e-5), (
    "with momentum m, running_var after the batches is (1 − m) · running + m · the batch's unbiased channel variances "
    "over (N, H, W), batch after batch")
assert _bn.num_batches_tracked.item() == _steps, "every training batch is counted"
_bn.eval()
_e = _scaled(check_rng.standard_normal((_N, _C, _H, _W)),
             check_rng.uniform(0.5, 3.0, _C), check_rng.uniform(-2.0, 2.0, _C))
_normalised = (_e - _rm.reshape(_shape)) / np.sqrt(_rv.reshape(_shape) + _eps) * _gamma.reshape(_shape) + _beta.reshape(_shape)
assert np.allclose(_bn(Tensor(_e)).numpy(), _normalised, atol=1e-4), (
    "eval mode normalises with the running statistics, then scales by γ and shifts by β")
assert _bn.num_batches_tracked.item() == _steps, "eval mode does not count a batch"
assert np.allclose(_bn.running_mean.numpy(), _rm, atol=1e-5), "eval mode leaves the running statistics alone"
assert np.allclose(_bn(Tensor(_e[:1, :, :1, :1])).numpy(), _normalised[:1, :, :1, :1], atol=1e-4), (
    "evaluation works on one value per channel")
assert [name for name, _ in BatchNorm2d(_C, affine=False).named_parameters()] == [], "affine=False: no weight and no bias"
_one = _scaled(check_rng.standard_normal((1, _C, _H, _W)),
               check_rng.uniform(0.5, 3.0, _C), check_rng.uniform(-2.0, 2.0, _C))
_one_mean, _one_var = _one.mean(axis=(0, 2, 3), dtype=np.float64), _one.var(axis=(0, 2, 3), dtype=np.float64)
assert np.allclose(BatchNorm2d(_C, eps=_eps)(Tensor(_one)).numpy(),
                   (_one - _one_mean.reshape(_shape)) / np.sqrt(_one_var.reshape(_shape) + _eps), atol=1e-4), (
    "training on one image works: it has H·W values per channel")
_bad_shapes = [(_N, _C + int(check_rng.integers(1, 3)), _H, _W), (_N, _C), (_N, _C, _H * _W)]
for _index in check_rng.permutation(3):
    _bad = _bad_shapes[int(_index)]
    try:
        BatchNorm2d(_C)(Tensor(np.ones(_bad, np.float32)))
        raise AssertionError("an input that is not (N, C, H, W) with C = num_features must raise a ShapeError")
    except ShapeError as err:
        _said = str(err)
    assert _said == f"BatchNorm2d({_C}) got input of shape {_bad}; expected (N, {_C}, H, W)", (
        "the error names the layer, the input's shape and what was expected")
try:
    BatchNorm2d(_C)(Tensor(_one[:, :, :1, :1]))
    raise AssertionError("training on one value per channel must raise a ValueError")
except ValueError as err:
    _said = str(err)
assert "BatchNorm2d" in _said, "the error names BatchNorm2d"
assert repr(BatchNorm2d(_C)).startswith(f"BatchNorm2d({_C}"), "the repr names BatchNorm2d and its channels"
# the gradients in float64, by the closed form: x̂ = (x − mean) / σ, σ = √(var + eps), per channel over (N, H, W)
_x64 = _scaled(check_rng.standard_normal((_N, _C, _H, _W)),
               check_rng.uniform(0.5, 3.0, _C), check_rng.uniform(-2.0, 2.0, _C)).astype(np.float64)
_g = check_rng.standard_normal(_x64.shape)
_mu, _sigma = _x64.mean(axis=(0, 2, 3), keepdims=True), np.sqrt(_x64.var(axis=(0, 2, 3), keepdims=True) + _eps)
_xhat = (_x64 - _mu) / _sigma
_gx = _gamma.reshape(_shape) / _sigma * (_g - _g.mean(axis=(0, 2, 3), keepdims=True)
                                         - _xhat * (_g * _xhat).mean(axis=(0, 2, 3), keepdims=True))
_bnw = BatchNorm2d(_C, eps=_eps).to(dtype=float64)
_bnw.weight.data[...] = _gamma
_bnw.bias.data[...] = _beta
_xt = Tensor(_x64, requires_grad=True)
(_bnw(_xt) * Tensor(_g)).sum().backward()
assert np.allclose(_xt.grad.numpy(), _gx), (
    "the input's gradient: γ/σ · (g − mean(g) − x̂ · mean(g · x̂)), means per channel over (N, H, W)")
assert np.allclose(_bnw.weight.grad.numpy(), (_g * _xhat).sum(axis=(0, 2, 3))), (
    "the weight's gradient: Σ g · x̂ per channel over (N, H, W)")
assert np.allclose(_bnw.bias.grad.numpy(), _g.sum(axis=(0, 2, 3))), "the bias's gradient: Σ g per channel over (N, H, W)"
### END HIDDEN TESTS

# %% [markdown]
# ## LeNet-5
#
# LeCun, Bottou, Bengio and Haffner (1998) read handwritten cheques with
# this network: 32×32 images, a 5×5 convolution to 6 maps (28×28),
# subsampling to 14×14, a 5×5 convolution to 16 maps (10×10), subsampling
# to 5×5, then fully connected layers of 120, 84 and 10 units. The paper
# used a scaled tanh (1.7159·tanh(⅔x)), *trainable* subsampling (average ×
# a learned coefficient + bias), a sparse connection table between the two
# convolutions, and RBF output units. What people mean by "LeNet-5" today
# is the modern variant below: ReLU, max pooling, a full second
# convolution, a plain linear classifier.
#
# MNIST images are 28×28, and the common MNIST variant pads them by 2 in
# the first convolution (`padding=2`), so that the feature maps from there
# on are exactly the paper's. Rather than two models, `LeNet5.forward`
# accepts either size with the *same* weights: 32×32 inputs go through the
# first convolution unpadded, 28×28 inputs with padding 2 (the same as
# padding the image to 32×32 with zeros). Any other size is a `ShapeError`.

# %%
#| export
class LeNet5(Module):
    """LeNet-5 (1998) in its modern form — ReLU, max pooling — for 32×32 or 28×28 inputs."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = Conv2d(in_channels, 6, 5)
        self.conv2 = Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = Linear(16 * 5 * 5, 120), Linear(120, 84), Linear(84, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        c = self.conv1.in_channels
        if x.ndim != 4 or x.shape[1] != c or x.shape[2:] not in ((28, 28), (32, 32)):
            raise ShapeError(f"LeNet5 got input of shape {x.shape}; expected (N, {c}, 32, 32) or (N, {c}, 28, 28)")
        if not is_floating(x.dtype):
            x = x.to(dtype=self.conv1.weight.dtype)  # integer pixels become the weights' dtype
        pad = (32 - x.shape[2]) // 2  # 28×28 (MNIST) is padded to the paper's 32×32
        x = conv2d(x, self.conv1.weight, self.conv1.bias, padding=pad).relu()
        x = max_pool2d(x, 2)
        x = max_pool2d(self.conv2(x).relu(), 2)
        x = x.reshape(x.shape[0], -1)
        return self.fc3(self.fc2(self.fc1(x).relu()).relu())


# %%
manual_seed(0)
lenet = LeNet5()
print(lenet)
print("parameters:", lenet.num_parameters(), "| output on 28×28:", lenet(randn(2, 1, 28, 28)).shape,
      "| on 32×32:", lenet(randn(2, 1, 32, 32)).shape)

# %% [markdown]
# ## Systems view: what a convolution costs
#
# **FLOPs.** Each output number is a dot product of C/groups·KH·KW
# products and as many additions, so a forward convolution costs
#
#     FLOPs = 2 · N · OC · OH · OW · (C / groups) · KH · KW
#
# and backward twice that (the input gradient and the weight gradient are
# each a GEMM of the same size).
#
# **Memory.** The column matrix holds N·OH·OW·C·KH·KW numbers — every
# input pixel copied about KH·KW / stride² times. A 3×3 convolution with
# stride 1 makes a copy nine times the size of its input, and the forward
# keeps it for the backward.
#
# **Direct convolution** needs no copy: six nested loops, reading each
# input pixel in place. It does the same FLOPs, so why does every framework
# (cuDNN included, for many shapes) use GEMM? Because a FLOP is cheap and
# moving data is not. A tuned GEMM keeps blocks of both matrices in
# registers and cache and reuses each loaded number dozens of times,
# running at 80–90 % of peak; a direct loop nest streams through memory
# with little reuse and strided access, and is hard to vectorise for every
# combination of kernel size, stride and channel count. Copying the input
# once (memory-bound, but linear in its size) buys a compute-bound,
# near-peak matrix product. When the copy gets too big (large inputs,
# 3×3 stride 1), libraries switch to Winograd or FFT convolutions, or to
# "implicit GEMM", which forms the column tiles on the fly inside the
# GEMM's own blocking and never writes the whole matrix.
#
# LeNet's two convolutions at batch 128 on 28×28 inputs:

# %%
def conv_cost(n, c, h, w, oc, k, padding=0, stride=1, groups=1, itemsize=4):
    """Forward FLOPs, and bytes of the input and of its im2col matrix."""
    oh, ow = conv_output_size(h, k, stride, padding), conv_output_size(w, k, stride, padding)
    flops = 2 * n * oc * oh * ow * (c // groups) * k * k
    return flops, n * c * h * w * itemsize, n * oh * ow * c * k * k * itemsize


print(f"{'layer':<28}{'GFLOP fwd':>10}{'input MB':>10}{'cols MB':>10}{'ratio':>7}")
for _name, _args in (("conv1 1→6, 5×5, pad 2, 28²", (128, 1, 28, 28, 6, 5, 2)),
                     ("conv2 6→16, 5×5, 14²", (128, 6, 14, 14, 16, 5))):
    _f, _inb, _colb = conv_cost(*_args)
    print(f"{_name:<28}{_f / 1e9:>10.3f}{_inb / 1e6:>10.2f}{_colb / 1e6:>10.2f}{_colb / _inb:>7.1f}")

# %% [markdown]
# Read the table: conv1's column matrix is 25 times its input (every pixel
# in 25 windows), but its GEMM is skinny — 6 output channels — so it is
# memory-bound: copying dominates. conv2's matrix is ~13 times its input
# (the 10×10 output is smaller than the 14×14 input), and with 150 columns
# and 16 outputs the GEMM has more work per byte. Both are tiny by modern
# standards: a ResNet-50 forward is about 8 GFLOP per image.
#
# ## What's next
#
# The package now has everything LeNet needs. `tinyflo.nn.Conv2d`,
# `MaxPool2d`, `BatchNorm2d` and `LeNet5` train on the digits with module
# 08's `Trainer`, and the LeNet milestone reproduces the 1998 result.
