"""The Tensor of module 01: values against NumPy, dtype rules, devices, and errors people read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinyflo
from tinyflo import DeviceError, ShapeError, Tensor

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FLOATS = [tinyflo.float16, tinyflo.float32, tinyflo.float64]


def arrays(shape, dtype=np.float32, low=-3.0, high=3.0):
    """A strategy for arrays of ``shape`` with finite values in [low, high]."""
    return hnp.arrays(dtype, shape, elements=st.floats(low, high, width=32))


# ----- task tensor_dtypes -------------------------------------------------------

@pytest.mark.task("tensor_dtypes")
@pytest.mark.parametrize("a", FLOATS + [tinyflo.int32, tinyflo.int64, tinyflo.bool_])
@pytest.mark.parametrize("b", FLOATS + [tinyflo.int32, tinyflo.int64, tinyflo.bool_])
def test_tensor_dtypes_promotion_never_invents_float64(a, b):
    result = tinyflo.promote_types(a, b)
    assert result == tinyflo.promote_types(b, a)
    if tinyflo.float64 not in (a, b):
        assert result != tinyflo.float64
    floats = [d for d in (a, b) if d.kind == "f"]
    if floats:
        assert result == max(floats, key=lambda d: d.itemsize)


# ----- tasks tensor_python_data / tensor_creation ------------------------------

@pytest.mark.task("tensor_python_data")
def test_tensor_python_data_defaults():
    assert Tensor([1.5, 2]).dtype == tinyflo.float32
    assert Tensor([1, 2]).dtype == tinyflo.int64
    assert Tensor([True, False]).dtype == tinyflo.bool_
    assert tinyflo.tensor(2.0, dtype=float).dtype == tinyflo.float32
    assert Tensor([0.1], dtype="float64").item() == 0.1, "a requested float64 keeps every digit"


@pytest.mark.task("tensor_creation")
def test_tensor_creation_arrays_keep_their_dtype():
    assert Tensor(np.arange(3, dtype=np.float64)).dtype == tinyflo.float64
    assert Tensor(np.arange(3, dtype=np.int32)).dtype == tinyflo.int32
    assert Tensor(np.float64(2.5)).dtype == tinyflo.float64
    assert Tensor(np.arange(3, dtype=np.float64), dtype="float32").dtype == tinyflo.float32


@pytest.mark.task("tensor_creation")
def test_tensor_creation_constructors(device):
    assert tinyflo.zeros(2, 3, device=device).shape == (2, 3)
    assert tinyflo.zeros((2, 3), device=device).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert tinyflo.ones(4, dtype="float16", device=device).dtype == tinyflo.float16
    assert tinyflo.full((2,), 3.5, device=device).tolist() == [3.5, 3.5]
    assert tinyflo.full(2, True).dtype == tinyflo.bool_
    assert tinyflo.arange(2, 8, 2, device=device).tolist() == [2, 4, 6]
    assert tinyflo.arange(1.0).dtype == tinyflo.float32
    x = tinyflo.randn(3, 4, device=device, requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.device == tinyflo.device(device)
    for like in (tinyflo.zeros_like, tinyflo.ones_like, tinyflo.rand_like, tinyflo.randn_like):
        y = like(x)
        assert y.shape == x.shape and y.dtype == x.dtype and y.device is x.device
    assert tinyflo.full_like(x, 7.0).numpy().max() == 7.0


@pytest.mark.task("tensor_creation")
def test_tensor_creation_manual_seed_reproduces_draws():
    tinyflo.manual_seed(123)
    first = (tinyflo.randn(5).numpy(), tinyflo.rand(5).numpy())
    tinyflo.manual_seed(123)
    again = (tinyflo.randn(5).numpy(), tinyflo.rand(5).numpy())
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    tinyflo.manual_seed(124)
    assert not np.array_equal(tinyflo.randn(5).numpy(), first[0])


@pytest.mark.task("tensor_creation")
def test_tensor_creation_random_statistics():
    tinyflo.manual_seed(0)
    normal = tinyflo.randn(200_000).numpy()
    uniform = tinyflo.rand(200_000).numpy()
    assert abs(normal.mean()) < 0.01 and abs(normal.std() - 1) < 0.01
    assert 0 <= uniform.min() and uniform.max() < 1 and abs(uniform.mean() - 0.5) < 0.01
    assert normal.dtype == np.float32 and tinyflo.randn(3, dtype="float16").dtype == tinyflo.float16


@pytest.mark.task("tensor_creation")
def test_tensor_creation_from_numpy_shares_memory_and_tensor_copies():
    array = np.zeros(3, np.float32)
    shared, copied = tinyflo.from_numpy(array), Tensor(array)
    array[0] = 5
    assert shared.tolist()[0] == 5 and copied.tolist()[0] == 0
    source = Tensor([1.0])
    Tensor(source).data[0] = 9
    assert source.item() == 1.0


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: Tensor("abc"), ["tensor", "str"]),
        (lambda: Tensor([[1, 2], [3]]), ["rectangular"]),
        (lambda: Tensor(np.zeros(2, np.complex64)), ["complex64"]),
        (lambda: tinyflo.zeros(2, dtype="int8"), ["dtype", "int8", "float32"]),
        (lambda: tinyflo.zeros(2, -1), ["zeros", "shape", "-1"]),
        (lambda: tinyflo.randn(2, dtype="int64"), ["randn", "floating", "int64"]),
        (lambda: Tensor([1, 2], requires_grad=True), ["floating", "int64"]),
        (lambda: tinyflo.device("gpu"), ["device", "'cpu'", "'gpu'"]),
        (lambda: tinyflo.device("cuda:99"), ["cuda:99"]),
        (lambda: tinyflo.manual_seed(-1), ["manual_seed", "-1"]),
        (lambda: Tensor([1.0, 2.0]).item(), ["item", "(2,)"]),
    ],
)
def test_bad_input_names_the_argument(make, words):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


# ----- the ops' values and dtypes (tensor_arithmetic ... tensor_relu_abs) -----

ADD_SUB = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
}
MUL_DIV = {
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
}
BINARY = {**ADD_SUB, **MUL_DIV}
EXP_LOG = {
    "exp": (lambda t: t.exp(), np.exp),
    "log": (lambda t: (abs(t) + 0.5).log(), lambda x: np.log(np.abs(x) + 0.5)),
    "sqrt": (lambda t: abs(t).sqrt(), lambda x: np.sqrt(np.abs(x))),
}
TANH_SIGMOID = {
    "tanh": (lambda t: t.tanh(), np.tanh),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
}
RELU_ABS = {
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0)),
    "abs": (lambda t: abs(t), np.abs),
}
UNARY = {
    **EXP_LOG,
    **TANH_SIGMOID,
    **RELU_ABS,
    "neg": (lambda t: -t, np.negative),
    "square": (lambda t: t ** 2, np.square),
}


def _binary_matches_numpy(ops, name, data, device):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    x = data.draw(arrays(shapes.input_shapes[0]))
    y = data.draw(arrays(shapes.input_shapes[1], low=0.5, high=3.0))
    ours, theirs = ops[name]
    out = ours(Tensor(x, device=device), Tensor(y, device=device))
    assert out.shape == shapes.result_shape and out.dtype == tinyflo.float32
    np.testing.assert_allclose(out.numpy(), theirs(x, y), rtol=1e-5, atol=1e-6)


def _unary_matches_numpy(ops, name, x, device):
    ours, theirs = ops[name]
    expected = theirs(x.astype(np.float64))
    np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), expected, rtol=1e-5, atol=1e-6)


UNARY_INPUTS = arrays(hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), low=-5, high=5)


@pytest.mark.task("tensor_arithmetic")
@pytest.mark.parametrize("name", ADD_SUB)
@SETTINGS
@given(data=st.data())
def test_tensor_arithmetic_binary_ops_broadcast_like_numpy(name, data, device):
    _binary_matches_numpy(ADD_SUB, name, data, device)


@pytest.mark.task("tensor_arithmetic")
@SETTINGS
@given(x=UNARY_INPUTS)
def test_tensor_arithmetic_negation_matches_numpy(x, device):
    _unary_matches_numpy(UNARY, "neg", x, device)


@pytest.mark.task("tensor_mul_div")
@pytest.mark.parametrize("name", MUL_DIV)
@SETTINGS
@given(data=st.data())
def test_tensor_mul_div_broadcast_like_numpy(name, data, device):
    _binary_matches_numpy(MUL_DIV, name, data, device)


@pytest.mark.task("tensor_pow")
@SETTINGS
@given(x=UNARY_INPUTS)
def test_tensor_pow_matches_numpy(x, device):
    _unary_matches_numpy(UNARY, "square", x, device)
    base = np.abs(x) + 0.5
    np.testing.assert_allclose((Tensor(base, device=device) ** 1.5).numpy(), base.astype(np.float64) ** 1.5, rtol=1e-5)


@pytest.mark.task("tensor_pow")
def test_tensor_pow_gradients_only_where_wanted():
    a, e = tinyflo.tensor([1.0, 2.0], requires_grad=True), tinyflo.tensor(3.0, requires_grad=True)
    grads = (a ** 3)._ctx.backward(np.ones(2, np.float32))
    assert grads[1] is None
    np.testing.assert_allclose(grads[0], [3, 12])
    grads = (tinyflo.tensor(2.0) ** e)._ctx.backward(np.float32(1.0))
    assert grads[0] is None
    np.testing.assert_allclose(grads[1], 8 * np.log(2.0), rtol=1e-6)


@pytest.mark.task("tensor_exp_log")
@pytest.mark.parametrize("name", EXP_LOG)
@SETTINGS
@given(x=UNARY_INPUTS)
def test_tensor_exp_log_match_numpy(name, x, device):
    _unary_matches_numpy(EXP_LOG, name, x, device)


@pytest.mark.task("tensor_tanh_sigmoid")
@pytest.mark.parametrize("name", TANH_SIGMOID)
@SETTINGS
@given(x=UNARY_INPUTS)
def test_tensor_tanh_sigmoid_match_numpy(name, x, device):
    _unary_matches_numpy(TANH_SIGMOID, name, x, device)


@pytest.mark.task("tensor_relu_abs")
@pytest.mark.parametrize("name", RELU_ABS)
@SETTINGS
@given(x=UNARY_INPUTS)
def test_tensor_relu_abs_match_numpy(name, x, device):
    _unary_matches_numpy(RELU_ABS, name, x, device)


@pytest.mark.task("tensor_tanh_sigmoid")
def test_tensor_tanh_sigmoid_is_stable_at_extremes():
    out = Tensor([-1e4, -100.0, 0.0, 100.0, 1e4]).sigmoid().numpy()
    assert np.all(np.isfinite(out)) and out[0] == 0 and out[-1] == 1 and out[2] == 0.5


# Every op, on each floating dtype, with tensor and Python-scalar operands: dtype in == dtype out.
DTYPE_OPS = {
    **{f"{k}-tensor": (lambda f: lambda t: f(t, t + 1))(v[0]) for k, v in BINARY.items()},
    **{f"{k}-scalar": (lambda f: lambda t: f(t, 2.5))(v[0]) for k, v in BINARY.items()},
    **{f"{k}-rscalar": (lambda f: lambda t: f(3, t + 1))(v[0]) for k, v in BINARY.items()},
    **{k: v[0] for k, v in UNARY.items()},
    "pow-scalar": lambda t: t ** 0.5,
    "rpow": lambda t: 2 ** t,
    "numpy-scalar": lambda t: t * np.float64(2.0) + np.sqrt(2.0),
    "matmul": lambda t: t @ t.T,
    "sum": lambda t: t.sum(axis=0),
    "mean": lambda t: t.mean(),
    "var": lambda t: t.var(axis=1),
    "max": lambda t: t.max(axis=1),
    "min": lambda t: t.min(),
    "clip": lambda t: t.clip(0.1, 0.9),
    "where": lambda t: tinyflo.where(t > 0.5, t, 0.0),
    "reshape": lambda t: t.reshape(-1),
    "permute": lambda t: t.permute(1, 0),
    "expand": lambda t: t.expand(2, 3, 4),
    "getitem": lambda t: t[[0, 0, 1]],
    "cat": lambda t: tinyflo.cat([t, t], axis=1),
    "stack": lambda t: tinyflo.stack([t, t]),
}


@pytest.mark.task("tensor_dtypes")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", DTYPE_OPS)
def test_tensor_dtypes_every_op_keeps_the_dtype(op, dtype, device):
    x = tinyflo.rand(3, 4, dtype=dtype, device=device, requires_grad=True)
    out = DTYPE_OPS[op](x)
    assert out.dtype == dtype, f"{op} turned {dtype} into {out.dtype}"
    out.sum().backward()
    assert x.grad.dtype == dtype, f"the gradient of {op} is {x.grad.dtype}, not {dtype}"


@pytest.mark.task("tensor_dtypes")
def test_tensor_dtypes_integer_rules():
    i = tinyflo.arange(4)
    assert (i + 1).dtype == tinyflo.int64 and (i * 0.5).dtype == tinyflo.float32
    assert (i / 2).dtype == tinyflo.float32 and (1 / i[1:]).dtype == tinyflo.float32
    assert i.mean().dtype == tinyflo.float32 and i.exp().dtype == tinyflo.float32
    assert i.sum().dtype == tinyflo.int64 and (i > 1).sum().dtype == tinyflo.int64
    assert (Tensor([True]) + 1).dtype == tinyflo.int64
    assert (i + Tensor([1.0], dtype="float16")).dtype == tinyflo.float16


# ----- task tensor_matmul ---------------------------------------------------------

@pytest.mark.task("tensor_matmul")
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)), ((2, 1, 2, 3), (4, 3, 2))],
)
def test_tensor_matmul_matches_numpy(a_shape, b_shape, device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape, np.float32), rng.standard_normal(b_shape, np.float32)
    out = Tensor(a, device=device) @ Tensor(b, device=device)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.task("tensor_matmul")
def test_tensor_matmul_skips_the_gradient_nobody_needs():
    data, weight = tinyflo.randn(8, 3), tinyflo.randn(3, 2, requires_grad=True)
    grads = (data @ weight)._ctx.backward(np.ones((8, 2), np.float32))
    assert grads[0] is None and grads[1].shape == (3, 2)


@pytest.mark.task("tensor_matmul")
def test_tensor_matmul_error_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(32, 785\) and \(784, 10\)"):
        tinyflo.zeros(32, 785) @ tinyflo.zeros(784, 10)
    with pytest.raises(ShapeError, match="at least one axis"):
        tinyflo.tensor(2.0) @ tinyflo.zeros(2)


# ----- tasks tensor_sum / tensor_mean_var / tensor_max ------------------------

REDUCTION_INPUTS = dict(
    x=arrays(hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4)),
    keepdims=st.booleans(),
    data=st.data(),
)


def _reductions_match_numpy(x, keepdims, data, pairs):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    t, x64 = Tensor(x), x.astype(np.float64)
    for ours, theirs in pairs(t, x, x64, axis, keepdims):
        assert ours.shape == np.shape(theirs)
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.task("tensor_sum")
@SETTINGS
@given(**REDUCTION_INPUTS)
def test_tensor_sum_matches_numpy(x, keepdims, data):
    _reductions_match_numpy(x, keepdims, data, lambda t, x, x64, axis, keepdims: [
        (t.sum(axis, keepdims), x64.sum(axis, keepdims=keepdims)),
    ])


@pytest.mark.task("tensor_mean_var")
@SETTINGS
@given(**REDUCTION_INPUTS)
def test_tensor_mean_var_match_numpy(x, keepdims, data):
    _reductions_match_numpy(x, keepdims, data, lambda t, x, x64, axis, keepdims: [
        (t.mean(axis, keepdims), x64.mean(axis, keepdims=keepdims)),
        (t.var(axis, keepdims), x64.var(axis, keepdims=keepdims, ddof=1)),
    ])


@pytest.mark.task("tensor_max")
@SETTINGS
@given(**REDUCTION_INPUTS)
def test_tensor_max_matches_numpy(x, keepdims, data):
    _reductions_match_numpy(x, keepdims, data, lambda t, x, x64, axis, keepdims: [
        (t.max(axis, keepdims), x64.max(axis, keepdims=keepdims)),
        (t.min(axis, keepdims), x64.min(axis, keepdims=keepdims)),
        (t.argmax(axis, keepdims), x.argmax(axis, keepdims=keepdims)),
    ])


@pytest.mark.task("tensor_sum")
def test_tensor_sum_axis_errors():
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        tinyflo.zeros(2, 3).sum(axis=2)


@pytest.mark.task("tensor_max")
def test_tensor_max_of_nothing_is_an_error():
    with pytest.raises(ShapeError, match="empty"):
        tinyflo.zeros(0).max()


# ----- tasks tensor_views / tensor_indexing / tensor_cat_stack ----------------

def _all_equal(checks):
    for ours, theirs in checks:
        np.testing.assert_array_equal(ours.numpy(), theirs)


@pytest.mark.task("tensor_views")
def test_tensor_views_match_numpy(device):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(x, device=device)
    _all_equal([
        (t.reshape(4, 6), x.reshape(4, 6)),
        (t.reshape(-1, 4), x.reshape(-1, 4)),
        (t.permute(2, 0, 1), x.transpose(2, 0, 1)),
        (t.transpose(0, 2), x.swapaxes(0, 2)),
        (t.T, x.T),
        (t.flatten(), x.ravel()),
        (t.flatten(1), x.reshape(2, 12)),
        (t.unsqueeze(1), x[:, None]),
        (t[:, :1].squeeze(1), x[:, 0]),
        (t.expand(3, 2, 3, 4), np.broadcast_to(x, (3, 2, 3, 4))),
    ])


@pytest.mark.task("tensor_indexing")
def test_tensor_indexing_matches_numpy(device):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(x, device=device)
    _all_equal([
        (t[:1].expand(3, 3, 4), np.broadcast_to(x[:1], (3, 3, 4))),
        (t[1, ::2, -1], x[1, ::2, -1]),
        (t[..., [0, 0, 3]], x[..., [0, 0, 3]]),
        (t[t > 20], x[x > 20]),
    ])


@pytest.mark.task("tensor_cat_stack")
def test_tensor_cat_stack_match_numpy(device):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(x, device=device)
    _all_equal([
        (tinyflo.cat([t, t], axis=-1), np.concatenate([x, x], axis=-1)),
        (tinyflo.stack([t, t], axis=1), np.stack([x, x], axis=1)),
    ])


SHAPE_ERRORS = {
    "tensor_views": [
        (lambda t: t.reshape(5, 5), r"reshape: cannot reshape shape \(2, 3, 4\) \(24 elements\)"),
        (lambda t: t.permute(0, 1), r"permute: axes \(0, 1\)"),
        (lambda t: t.expand(3, 4), "expand"),
    ],
    "tensor_indexing": [(lambda t: t[5], "getitem")],
    "tensor_cat_stack": [
        (lambda t: tinyflo.cat([t, tinyflo.zeros(2, 2, 2)], axis=0), r"cat: shapes \[\(2, 3, 4\), \(2, 2, 2\)\]"),
        (lambda t: tinyflo.stack([t, t[0]]), "stack: all tensors need one shape"),
    ],
    "tensor_function": [(lambda t: t + tinyflo.zeros(5), r"add: inputs of shapes \(2, 3, 4\), \(5,\)")],
}


def _raises_shape_error(make, pattern):
    with pytest.raises(ShapeError, match=pattern):
        make(tinyflo.zeros(2, 3, 4))


@pytest.mark.task("tensor_views")
@pytest.mark.parametrize("make, pattern", SHAPE_ERRORS["tensor_views"])
def test_tensor_views_errors(make, pattern):
    _raises_shape_error(make, pattern)


@pytest.mark.task("tensor_indexing")
@pytest.mark.parametrize("make, pattern", SHAPE_ERRORS["tensor_indexing"])
def test_tensor_indexing_errors(make, pattern):
    _raises_shape_error(make, pattern)


@pytest.mark.task("tensor_cat_stack")
@pytest.mark.parametrize("make, pattern", SHAPE_ERRORS["tensor_cat_stack"])
def test_tensor_cat_stack_errors(make, pattern):
    _raises_shape_error(make, pattern)


@pytest.mark.task("tensor_function")
@pytest.mark.parametrize("make, pattern", SHAPE_ERRORS["tensor_function"])
def test_tensor_function_shape_errors_name_the_op(make, pattern):
    _raises_shape_error(make, pattern)


# ----- tasks tensor_where / tensor_clip -----------------------------------------

@pytest.mark.task("tensor_where")
def test_tensor_where_comparisons_and_where(device):
    a = Tensor([1.0, -2.0, 3.0], device=device)
    assert (a > 0).tolist() == [True, False, True] and (a == 3.0).tolist() == [False, False, True]
    assert (a <= Tensor([1.0, 0.0, 0.0], device=device)).tolist() == [True, True, False]
    assert tinyflo.where(a > 0, a, -1.0).tolist() == [1, -1, 3]
    assert (a > 0).requires_grad is False


@pytest.mark.task("tensor_clip")
def test_tensor_clip(device):
    a = Tensor([1.0, -2.0, 3.0], device=device)
    assert a.clip(-1, 2).tolist() == [1, -1, 2]
    assert a.clip(min=0.0).tolist() == [1, 0, 3] and a.clip(max=0.0).tolist() == [0, -2, 0]


# ----- devices ------------------------------------------------------------------

def test_virtual_cpu_devices_copy_and_mixing_is_an_error():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = a.to("cpu:1")
    assert b.device == tinyflo.device("cpu:1") and str(b.device) == "cpu:1"
    assert not np.shares_memory(a.data, b.data), "a virtual device is separate memory"
    with pytest.raises(DeviceError, match=r"cpu \(shape \(2,\)\) and cpu:1"):
        a + b
    with pytest.raises(DeviceError, match="different devices"):
        tinyflo.cat([a, b])
    (b * 3).sum().backward()
    assert a.grad.device == a.device and a.grad.tolist() == [3, 3], "the gradient comes back to the source device"


def test_devices_are_interned_values():
    assert tinyflo.device("cpu") is tinyflo.device("cpu:0") is tinyflo.device(None)
    assert repr(tinyflo.device("cpu:2")) == "cpu:2"
    assert tinyflo.cuda_is_available() == (tinyflo.cuda_device_count() > 0)


def test_to_and_conversions(device):
    t = Tensor([[1.5, 2.5]], device=device)
    assert t.to(dtype="float16").dtype == tinyflo.float16 and t.double().dtype == tinyflo.float64
    assert t.long().tolist() == [[1, 2]] and t.to(device) is t
    assert isinstance(t.numpy(), np.ndarray) and t.cpu().device == tinyflo.device("cpu")
    assert t.sum().item() == 4.0 and isinstance(t.sum().item(), float)
    assert float(t.sum()) == 4.0 and int(t.sum()) == 4
    assert "dtype=float32" in repr(t) and len(t) == 1 and t.numel() == 2


@pytest.mark.gpu
def test_gpu_round_trip():
    x = tinyflo.randn(3, 4)
    y = x.cuda()
    assert y.device.type == "cuda" and type(y.data).__module__.startswith("cupy")
    np.testing.assert_array_equal(y.cpu().numpy(), x.numpy())
    with pytest.raises(DeviceError, match="cuda:0"):
        x + y


def test_device_helpers_name_the_array_and_its_device():
    x = np.arange(3, dtype=np.float32)
    assert tinyflo.is_array(x) and not tinyflo.is_array(Tensor(x)) and not tinyflo.is_array([1, 2])
    assert not tinyflo.is_array(np.float32(1)), "a NumPy scalar is not an ndarray"
    assert tinyflo.device_of(x) is tinyflo.device("cpu") and tinyflo.device_of(np.float32(1)).xp is np
    assert tinyflo.to_host(x) is x and tinyflo.to_host(x, copy=True) is not x
    np.testing.assert_array_equal(tinyflo.to_host(x, copy=True), x)
    for helper in (tinyflo.device_of, tinyflo.to_host):
        with pytest.raises(TypeError, match=f"{helper.__name__}: expected a NumPy or CuPy array; got list"):
            helper([1.0])


@pytest.mark.gpu
def test_device_helpers_on_a_gpu():
    y = tinyflo.randn(3, device="cuda:0").data
    assert tinyflo.is_array(y) and tinyflo.device_of(y) is tinyflo.device("cuda:0")
    host = tinyflo.to_host(y)
    assert isinstance(host, np.ndarray) and host.shape == (3,)


def test_to_declares_its_output_device_and_is_free_when_nothing_changes():
    a = Tensor([1.0, 2.0], requires_grad=True)
    assert a.to("cpu") is a and a.to(dtype="float32") is a and a.to() is a
    b = a.to("cpu:1", dtype="float64")
    assert b.device is tinyflo.device("cpu:1") and b.dtype == tinyflo.float64
    assert b._ctx.out_device is b.device, "To states where its output lives; apply wraps it there"
    (b * b).sum().backward()
    assert a.grad.device is a.device and a.grad.dtype == tinyflo.float32 and a.grad.tolist() == [2, 4]
    c = a.to("cpu:1", dtype="int64")
    assert c.device is tinyflo.device("cpu:1") and c._ctx is None, "an integer copy has no gradient"


def test_set_moves_a_leaf_in_place():
    w = Tensor([1.0, 2.0], requires_grad=True)
    moved = w.detach().to("cpu:1")
    with pytest.raises(RuntimeError, match="no_grad"):
        w.set_(moved)
    with tinyflo.no_grad():
        assert w.set_(moved) is w
        with pytest.raises(TypeError, match="floating data; got int64"):
            w.set_(moved.long())
        with pytest.raises(TypeError, match="expected a Tensor; got ndarray"):
            w.set_(moved.data)
    assert w.device is tinyflo.device("cpu:1") and w.data is moved.data and w.requires_grad
    plain = Tensor([1, 2])
    assert plain.set_(Tensor([3.0])).tolist() == [3.0], "a tensor outside the graph takes any data"


def test_normalize_axis_counts_negatives_from_the_end():
    from tinyflo.core.tensor import normalize_axis

    assert normalize_axis(-1, 3, "op") == 2 and normalize_axis(np.int64(1), 3, "op") == 1
    with pytest.raises(ShapeError, match="softmax: axis 3 is out of range for a tensor with 3 axes"):
        normalize_axis(3, 3, "softmax")
    with pytest.raises(ShapeError, match="op: axis must be an integer; got True"):
        normalize_axis(True, 3, "op")


def test_rng_state_round_trips_through_json():
    import json

    tinyflo.manual_seed(5)
    np.random.seed(7)
    state = json.loads(json.dumps(tinyflo.get_rng_state(), default=np.ndarray.tolist))  # arrays as lists
    expected = (tinyflo.randn(4).tolist(), np.random.random(2).tolist(), tinyflo.default_generator().integers(99))
    tinyflo.manual_seed(0)
    np.random.seed(0)
    tinyflo.set_rng_state(state)
    assert (tinyflo.randn(4).tolist(), np.random.random(2).tolist(), tinyflo.default_generator().integers(99)) == expected


def test_set_rng_state_keeps_the_bit_generator_and_refuses_a_bad_state():
    mt = np.random.Generator(np.random.MT19937(3))
    state = tinyflo.get_rng_state()
    state["tinyflo"] = mt.bit_generator.state
    tinyflo.set_rng_state(state)
    assert type(tinyflo.default_generator().bit_generator).__name__ == "MT19937"
    assert np.array_equal(tinyflo.default_generator().random(3), mt.random(3))
    before = tinyflo.default_generator()
    with pytest.raises(ValueError, match="names bit generator 'Nope'; expected one of PCG64"):
        tinyflo.set_rng_state({**state, "tinyflo": {"bit_generator": "Nope"}})
    with pytest.raises(ValueError, match="set_rng_state: expected get_rng_state"):
        tinyflo.set_rng_state({"numpy": state["numpy"]})
    assert tinyflo.default_generator() is before, "a refused state changes nothing"
    tinyflo.manual_seed(0)


def test_manual_seed_refuses_what_is_not_a_seed():
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match=f"manual_seed: seed must be a non-negative integer; got {bad!r}"):
            tinyflo.manual_seed(bad)


def test_module_01_imports_no_later_module_and_installs_no_engine():
    """Course order is import order: module 01 reaches module 02's engine only through the slot 02 fills."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    core = Path(tinyflo.core.tensor.__file__).parent
    # tensor: only the test stand-in for CuPy (tinyflo.strict_gpu) and the environment's variables
    # (tinyflo.environment), which import nothing of tinyflo
    for name, allowed in (("tensor", {"tinyflo.strict_gpu", "tinyflo.environment"}), ("autograd", {"tinyflo.core.tensor"})):
        tree = ast.parse((core / f"{name}.py").read_text())
        imported = {f"{node.module}.{a.name}" if node.module == "tinyflo" else node.module
                    for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert {m for m in imported if m and m.startswith("tinyflo")} == allowed, name
    code = ("import tinyflo.core.tensor as t\n"
            "x = t.Tensor([1.0], requires_grad=True)\n"
            "try:\n    (x * 2).sum().backward()\nexcept RuntimeError as err:\n    print(err)\n"
            "import tinyflo.core.autograd\n(x * 2).sum().backward()\nprint(x.grad.tolist())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = result.stdout.splitlines()
    assert first.startswith("backward: no autograd engine is installed; import tinyflo.core.autograd")
    assert second == "[2.0]"


def test_setitem_refuses_tensors_in_the_graph():
    w = tinyflo.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 1.0
    with tinyflo.no_grad():
        w[0] = 1.0
    assert w.tolist() == [1, 0, 0]


# ----- task tensor_function -------------------------------------------------------

@pytest.mark.task("tensor_function")
def test_tensor_function_apply_records_a_node_only_when_a_gradient_is_wanted():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0])
    c = a * b
    assert type(c._ctx).__name__ == "Mul" and c._ctx.inputs == (a, b)
    assert c._ctx.needs_input_grad == (True, False) and c.requires_grad and not c.is_leaf
    assert (b * b)._ctx is None
    with tinyflo.no_grad():
        assert (a * b)._ctx is None
    assert repr(c).endswith("grad_fn=<Mul>)")
    with pytest.raises(DeviceError, match="mul: inputs are on different devices"):
        type(c._ctx).apply(a, b.to("cpu:1"))


# ----- edge cases a framework user hits ---------------------------------------

def test_iteration_unpacking_and_numpy_interop():
    rows = list(tinyflo.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4]]
    a, b = tinyflo.tensor([1.0, 2.0])
    assert (a.item(), b.item()) == (1.0, 2.0)
    assert np.asarray(tinyflo.ones(2)).dtype == np.float32
    assert tinyflo.tensor([tinyflo.tensor(1.0), tinyflo.tensor(2.0)]).tolist() == [1.0, 2.0]


def test_zero_dimensional_results_are_arrays():
    x = tinyflo.tensor(2.0, requires_grad=True)
    y = x * x
    assert isinstance(y.data, np.ndarray) and isinstance(tinyflo.randn(3).sum().data, np.ndarray)
    y.backward()
    assert isinstance(x.grad.data, np.ndarray) and x.grad.item() == 4.0
    x.grad.data[...] = 0  # writable in place, as optimizers will need


@pytest.mark.task("tensor_dtypes")
def test_tensor_dtypes_casts_to_integers_leave_the_graph():
    x = tinyflo.tensor([1.5, 2.5], requires_grad=True)
    assert not x.long().requires_grad and x.long().is_leaf
    assert x.double().requires_grad


@pytest.mark.task("tensor_dtypes")
def test_tensor_dtypes_numpy_operands_do_not_upcast():
    x = tinyflo.randn(3)
    assert (x * np.array(2.0)).dtype == tinyflo.float32
    assert (np.ones(3) * x).dtype == tinyflo.float32 and (x + np.ones(3)).dtype == tinyflo.float32
    assert (x + [1.0, 2.0, 3.0]).dtype == tinyflo.float32
    assert (tinyflo.arange(3) + np.ones(3)).dtype == tinyflo.float32


@pytest.mark.task("tensor_sum")
def test_tensor_sum_float16_reductions_accumulate_in_float32():
    assert tinyflo.ones(4097, dtype="float16").sum().dtype == tinyflo.float16
    assert (tinyflo.ones(2049, dtype="float16") * 3).mean().item() == 3.0
    assert float(tinyflo.ones(5000, dtype="float16").sum()) == 5000.0
    assert tinyflo.ones(10, dtype="float16").var().dtype == tinyflo.float16


@pytest.mark.task("tensor_views")
@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.permute(0, 3),
        lambda t: t.permute(2, 1),
        lambda t: t.unsqueeze(5),
        lambda t: t.unsqueeze(-4),
        lambda t: t.flatten(5),
        lambda t: t.squeeze(5),
        lambda t: t.transpose(0, 5),
        lambda t: t.argmax(5),
        lambda t: t.sum(axis=True),
        lambda t: t.sum(axis=1.0),
        lambda t: t[:, 0].expand(-1, 2),
    ],
)
def test_tensor_views_out_of_range_axes_are_errors(make):
    with pytest.raises(ShapeError, match="axis|axes|-1"):
        make(tinyflo.zeros(2, 3))


def test_mixed_devices_in_masks_indices_and_assignment():
    x = tinyflo.zeros(3)
    other = tinyflo.tensor([True, False, True], device="cpu:1")
    with pytest.raises(DeviceError, match="cpu:1"):
        tinyflo.where(other, x, 0.0)
    with pytest.raises(DeviceError, match="cpu:1"):
        x[other]
    with pytest.raises(DeviceError, match="cpu:1"):
        x[0] = tinyflo.tensor(1.0, device="cpu:1")


def test_errors_that_are_not_about_shapes_pass_through():
    with pytest.raises(ValueError, match="negative integer powers") as info:
        tinyflo.tensor([2]) ** -1
    assert not isinstance(info.value, ShapeError)
