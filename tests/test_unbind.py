"""Module 01's unbind: the slices along an axis as graph nodes whose backward fills one gradient array."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinyflo
from tinyflo import ShapeError, Tensor, autocast, gradcheck
from tinyflo.core.autograd import topological_order
from tinyflo.core.tensor import GetItem, Unbind, UnbindPart

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FLOATS = [tinyflo.float16, tinyflo.float32, tinyflo.float64]


def _tensor(shape, dtype=np.float32, device="cpu", seed=0, transposed=False) -> Tensor:
    """A random leaf that requires grad; ``transposed``: the same values in a non-contiguous layout."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if transposed:
        values = np.ascontiguousarray(values.T).T
    return Tensor(values, device=device, requires_grad=True)


def _index(axis: int, i: int) -> tuple:
    return (slice(None),) * axis + (i,)


def _weighted_sum(parts, uses, seed=1):
    """Σ (part * a random array) over the parts, part i taken uses[i] times (0: left out)."""
    rng = np.random.default_rng(seed)
    total = None
    for part, n in zip(parts, uses):
        for _ in range(n):
            w = Tensor(rng.standard_normal(part.shape).astype(part.dtype), device=part.device)
            term = (part * w).sum()
            total = term if total is None else total + term
    return total


# ----- values and gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis", [((3,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), -2),
                                         ((2, 1, 3), 1)])
@pytest.mark.parametrize("uses", ["all", "some", "twice"])
def test_unbind_gradcheck(shape, axis, uses, device):
    x = _tensor(shape, np.float64, device)
    n = shape[axis]
    counts = {"all": [1] * n, "some": [int(i % 2 == 0) for i in range(n)], "twice": [2] + [1] * (n - 1)}[uses]
    assert gradcheck(lambda t: _weighted_sum(t.unbind(axis), counts), x)


def test_unbind_values_are_views_of_the_slices(device):
    x = _tensor((2, 3, 4), device=device, transposed=True)
    for axis in (0, 1, 2, -1):
        parts = x.unbind(axis)
        assert len(parts) == x.shape[axis]
        for i, part in enumerate(parts):
            assert part.shape == x.shape[:axis % 3] + x.shape[axis % 3 + 1:]
            np.testing.assert_array_equal(part.numpy(), x.numpy()[_index(axis % 3, i)])
    assert isinstance(x.unbind(), tuple) and tinyflo.unbind(x, 1)[2].shape == (2, 4)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS), transposed=st.booleans())
def test_unbind_gradients_equal_the_getitem_form_bitwise(data, dtype, transposed):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    uses = data.draw(st.lists(st.integers(0, 2), min_size=shape[axis], max_size=shape[axis]).filter(any))

    def grads(split):
        x = _tensor(shape, dtype, transposed=transposed)
        parts = split(x)
        _weighted_sum(parts, uses).backward()
        return [p.numpy() for p in parts], x.grad

    a_values, a_grad = grads(lambda x: x.unbind(axis))
    b_values, b_grad = grads(lambda x: [x[_index(axis % len(shape), i)] for i in range(shape[axis])])
    for a, b in zip(a_values, b_values):
        np.testing.assert_array_equal(a, b)
    assert a_grad.dtype == b_grad.dtype == dtype, "unbind keeps the input's dtype, gradient included"
    np.testing.assert_array_equal(a_grad.numpy(), b_grad.numpy())


@pytest.mark.parametrize("shape, axis", [((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((3, 12, 4, 5), 0)])
@pytest.mark.parametrize("uses", [(1, 1, 1), (0, 2, 0), (1, 0, 1)])
def test_unbind_matches_torch(shape, axis, uses):
    torch = pytest.importorskip("torch")
    x = _tensor(shape)
    ours = x.unbind(axis)
    counts = [uses[i % 3] for i in range(shape[axis])]
    _weighted_sum(ours, counts, seed=2).backward()

    xt = torch.tensor(x.numpy(), requires_grad=True)
    theirs = torch.unbind(xt, axis)
    rng, total = np.random.default_rng(2), 0
    for part, n in zip(theirs, counts):
        for _ in range(n):
            total = total + (part * torch.from_numpy(rng.standard_normal(part.shape).astype(np.float32))).sum()
    total.backward()
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_unbind_the_gpt_split(device):
    """q, k, v out of the GPT's packed projection: a permuted, non-contiguous view."""
    rows = _tensor((2 * 8, 3 * 16), device=device)
    qkv = rows.reshape(2, 8, 3, 4, 4).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    assert q.shape == k.shape == v.shape == (2, 4, 8, 4)
    _weighted_sum((q, k, v), (1, 1, 1)).backward()
    unbound = rows.grad.numpy()
    rows.grad = None
    qkv = rows.reshape(2, 8, 3, 4, 4).permute(2, 0, 3, 1, 4)
    _weighted_sum((qkv[0], qkv[1], qkv[2]), (1, 1, 1)).backward()
    np.testing.assert_array_equal(unbound, rows.grad.numpy())


# ----- one gradient array -----------------------------------------------------------------------

def test_unbind_backward_fills_one_array_that_reaches_the_input(monkeypatch):
    """The fusion itself: the first part makes the array, the others return None, and the input gets it as is."""
    returned = []
    backward = UnbindPart.backward

    def recording(self, grad):
        returned.append(backward(self, grad))
        return returned[-1]

    monkeypatch.setattr(UnbindPart, "backward", recording)
    x = _tensor((3, 4, 5))
    q, k, v = x.unbind(0)
    assert all(isinstance(p._ctx, UnbindPart) for p in (q, k, v))
    packed = q._ctx.inputs[0]
    assert all(p._ctx.inputs[0] is packed for p in (k, v)) and isinstance(packed._ctx, Unbind)
    assert packed.data is x.data, "the private tensor holds the input's array: no copy"
    nodes = [t._ctx for t in topological_order((q + k + v).sum()) if t._ctx is not None]
    assert not any(isinstance(n, GetItem) for n in nodes)
    assert sum(isinstance(n, Unbind) for n in nodes) == 1 and sum(isinstance(n, UnbindPart) for n in nodes) == 3

    _weighted_sum((q, k, v), (1, 1, 1)).backward()
    assert len(returned) == 3 and returned[0].shape == x.shape and returned[1] is None and returned[2] is None
    assert x.grad.data is returned[0], "the one array reaches the input with no sum and no copy"


def test_unbind_retain_graph_twice_and_separate_backwards_accumulate(device):
    x = _tensor((3, 4), device=device)
    parts = x.unbind(0)
    loss = _weighted_sum(parts, (1, 0, 2))
    loss.backward(retain_graph=True)
    once = x.grad.numpy().copy()
    assert np.all(once[1] == 0), "a part that is not used gets a zero gradient"
    loss.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 2 * once, rtol=1e-6)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * once, rtol=1e-6)

    x.grad = None
    (x.unbind(-1)[0] * 2.0).sum().backward()
    (x.unbind(-1)[2] * 3.0).sum().backward()
    expected = np.zeros((3, 4), np.float32)
    expected[:, 0], expected[:, 2] = 2.0, 3.0
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_unbind_recovers_from_a_pass_that_broke_off():
    """A retained graph whose last backward raised half-way: the next pass must not reuse that pass's array."""
    x = _tensor((3, 4))
    parts = x.unbind(0)
    loss = _weighted_sum(parts, (1, 1, 1))
    loss.backward(retain_graph=True)
    expected = x.grad.numpy().copy()
    order = [t for t in reversed(topological_order(loss)) if any(t is p for p in parts)]
    order[0]._ctx.backward(np.full((4,), 100.0, np.float32))  # what the broken pass did: its first part, then
    x.grad = None
    loss.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_unbind_records_nothing_without_grad():
    x = _tensor((3, 4))
    with tinyflo.no_grad():
        parts = x.unbind(1)
    plain = Tensor(np.ones((3, 4), np.float32)).unbind(0)
    for part in (*parts, *plain):
        assert part._ctx is None and not part.requires_grad
    assert np.shares_memory(parts[0].data, x.data), "without a graph the parts are views of the input"


@pytest.mark.parametrize("dtype", FLOATS)
def test_unbind_keeps_the_dtype(dtype, device):
    x = _tensor((2, 3), dtype, device)
    parts = x.unbind(1)
    assert all(p.dtype == dtype for p in parts)
    _weighted_sum(parts, (1, 1, 0)).backward()
    assert x.grad.dtype == dtype


# ----- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [2, -3, 5])
def test_unbind_axis_out_of_range_names_the_axis_and_the_shape(axis):
    with pytest.raises(ShapeError) as err:
        _tensor((3, 4)).unbind(axis)
    assert str(err.value) == f"unbind: axis {axis} is out of range for shape (3, 4); expected -2 <= axis < 2"


def test_unbind_refuses_a_0d_tensor_and_an_axis_that_is_not_an_integer():
    with pytest.raises(ShapeError, match=r"unbind: expected a tensor with at least one axis .*got a 0-d tensor"):
        tinyflo.unbind(Tensor(1.0, requires_grad=True))
    with pytest.raises(ShapeError, match=r"unbind: axis must be an integer; got 0.5"):
        _tensor((3, 4)).unbind(0.5)


# ----- under autocast ---------------------------------------------------------------------------

def test_unbind_under_autocast(device):
    """The parts of a float16 product stay float16; the gradient reaches the float32 weight as float32."""
    tinyflo.manual_seed(0)
    x = _tensor((6, 4), device=device, seed=3)
    w = _tensor((4, 3 * 4), device=device, seed=4)
    with autocast("float16"):
        q, k, v = (x @ w).reshape(6, 3, 4).permute(1, 0, 2).unbind(0)
        loss = (q * k + v).sum()
    assert q.dtype == k.dtype == v.dtype == tinyflo.float16 and isinstance(q._ctx, UnbindPart)
    loss.backward()
    assert w.grad.dtype == tinyflo.float32 and w.grad.shape == (4, 12)
    q32, k32, v32 = (x @ w).reshape(6, 3, 4).permute(1, 0, 2).detach().unbind(0)
    xs, q32, k32 = x.numpy(), q32.numpy(), k32.numpy()
    expected = np.concatenate([xs.T @ k32, xs.T @ q32, xs.T @ np.ones_like(k32)], axis=1)
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=2e-2, atol=5e-2)


class _Between(tinyflo.Function):
    """The identity whose backward first runs `between()`: another backward, in a custom function's backward."""

    def forward(self, a, between):
        self.between = between
        return a

    def backward(self, grad):
        self.between()
        return grad


def _three_parts_weighted(x, between):
    """x's three parts weighted 1, 2 and 3, `between()` run in the backward of one of them in the middle."""
    p0, p1, p2 = x.unbind(0)
    return (p0 * 1.0).sum() + (_Between.apply(p1, between=between) * 2.0).sum() + (p2 * 3.0).sum()


def test_unbind_keeps_every_slice_when_a_backward_runs_inside_a_backward():
    """A custom function's backward that runs a backward of its own: the outer pass still fills one array."""
    x = Tensor(np.zeros((3, 2), np.float32), requires_grad=True)
    inner = Tensor(np.ones(2, np.float32), requires_grad=True)
    _three_parts_weighted(x, lambda: (inner * 5.0).sum().backward()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(inner.grad.numpy(), [5, 5])


def test_unbind_keeps_every_slice_when_another_thread_runs_a_backward_meanwhile():
    """Two threads, each with its own model: a pass of the other thread's between two parts of this one's."""
    import threading

    x = Tensor(np.zeros((3, 2), np.float32), requires_grad=True)
    other = Tensor(np.zeros((3, 2), np.float32), requires_grad=True)

    def other_thread():
        worker = threading.Thread(target=lambda: _three_parts_weighted(other, lambda: None).backward())
        worker.start()
        worker.join()

    _three_parts_weighted(x, other_thread).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(other.grad.numpy(), [[1, 1], [2, 2], [3, 3]])


def test_unbind_after_a_pass_that_raised_gives_the_next_root_its_gradient():
    """`tinyflo.backward(root)` after a pass that stopped on an exception, with a root that reaches only
    some of the parts: the input gets their gradient."""
    x = Tensor(np.zeros((3, 2), np.float32), requires_grad=True)
    p0, p1, p2 = x.unbind(0)

    def fail():
        raise RuntimeError("stopped")

    broken = (p0 * 1.0).sum() + (_Between.apply(p1, between=fail) * 2.0).sum() + (p2 * 3.0).sum()
    with pytest.raises(RuntimeError, match="stopped"):
        tinyflo.backward(broken, retain_graph=True)
    x.grad = None
    tinyflo.backward((p1 * 4.0).sum() + (p2 * 5.0).sum())
    assert x.grad is not None, "the input got no gradient"
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0], [4, 4], [5, 5]])
