"""The engine of module 02: order, accumulation, freeing, grad mode, and the deep chain."""

from __future__ import annotations

import numpy as np
import pytest

import tinyflo
from tinyflo import ShapeError, Tensor
from tinyflo.core.autograd import topological_order, unbroadcast
from tinyflo.core.tensor import Device, Function


@pytest.mark.task("autograd_unbroadcast")
@pytest.mark.parametrize(
    "shape", [(4, 2, 3), (2, 3), (3,), (1, 3), (2, 1), (), (1, 1, 1), (4, 1, 3)]
)
def test_autograd_unbroadcast_sums_what_broadcasting_copied(shape):
    grad = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    reduced = unbroadcast(grad, shape)
    assert reduced.shape == shape and reduced.dtype == np.float32
    # Summing the broadcast copies back is the adjoint of broadcasting: <g, B(x)> == <U(g), x>.
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose((grad * np.broadcast_to(x, grad.shape)).sum(), (reduced * x).sum(), rtol=1e-4)


@pytest.mark.task("autograd_unbroadcast")
def test_autograd_unbroadcast_rejects_a_foreign_shape():
    with pytest.raises(ShapeError, match=r"\(5,\)"):
        unbroadcast(np.ones((2, 3)), (5,))


@pytest.mark.task("autograd_toposort")
def test_autograd_toposort_puts_inputs_first():
    a = Tensor([1.0], requires_grad=True)
    b = a * 2
    c = a + b
    d = (c * b).sum()
    order = topological_order(d)
    where = {id(t): i for i, t in enumerate(order)}
    assert len(order) == 5 and order[-1] is d
    assert where[id(a)] < where[id(b)] < where[id(c)] < where[id(d)]


@pytest.mark.task("autograd_backward")
def test_autograd_backward_diamond_accumulates_both_paths(device):
    x = Tensor([2.0, 3.0], device=device, requires_grad=True)
    y = x * x + x * 3  # dy/dx = 2x + 3
    y.sum().backward()
    assert x.grad.tolist() == [7.0, 9.0]


def test_autograd_backward_runs_inside_the_roots_device(monkeypatch):
    """Backward ops allocate on the current GPU, so Tensor.backward makes it the root's (cuda:1 is not the default)."""
    current = []
    enter, exit_ = Device.__enter__, Device.__exit__
    monkeypatch.setattr(Device, "__enter__", lambda self: (current.append(self), enter(self))[1])
    monkeypatch.setattr(Device, "__exit__", lambda self, *err: (current.pop(), exit_(self, *err))[1])
    seen = []

    class Spy(Function):
        def forward(self, a):
            return a * 1

        def backward(self, grad):
            seen.append(list(current))
            return grad

    x = Tensor([1.0, 2.0], requires_grad=True)
    Spy.apply(x).sum().backward()
    assert seen == [[x.device]] and current == []


@pytest.mark.task("autograd_accumulate")
def test_autograd_accumulate_into_grad_until_reset():
    w = Tensor([1.0, 2.0], requires_grad=True)
    held = None
    for step in range(3):
        (w * 2).sum().backward()
        if held is None:
            held = w.grad
        assert w.grad.tolist() == [2.0 * (step + 1)] * 2
    assert held is w.grad, "accumulation is in place, so a reference to .grad sees it"
    w.grad = None
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]


@pytest.mark.task("autograd_accumulate")
def test_autograd_accumulate_leaves_never_share_a_gradient_array():
    a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    (a + b).sum().backward()
    assert not np.shares_memory(a.grad.data, b.grad.data)
    c = Tensor([[1.0, 2.0]], requires_grad=True)
    c.expand(3, 2).sum().backward()
    assert c.grad.data.flags.writeable and c.grad.tolist() == [[3.0, 3.0]]


@pytest.mark.task("autograd_accumulate")
def test_autograd_accumulate_a_scalar_gradient_is_stored_as_an_array():
    x = Tensor(2.0, requires_grad=True)
    (x * x).backward()
    (x * x).backward()
    assert isinstance(x.grad.data, np.ndarray) and x.grad.item() == 8.0


@pytest.mark.task("autograd_backward")
def test_autograd_backward_explicit_grad_is_not_written_to():
    x = Tensor([1.0, 2.0], requires_grad=True)
    upstream = np.array([1.0, 1.0], np.float32)
    x.backward(upstream)
    x.backward(upstream)
    assert upstream.tolist() == [1.0, 1.0] and x.grad.tolist() == [2.0, 2.0]


@pytest.mark.task("autograd_backward")
def test_autograd_backward_graph_is_freed_and_second_backward_is_a_clear_error():
    x = Tensor([1.0, 2.0], requires_grad=True)
    loss = (x.exp() * x).sum()
    node = loss._ctx
    loss.backward()
    assert node.saved is None and node.inputs is None, "saved arrays are released after use"
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()


@pytest.mark.task("autograd_backward")
def test_autograd_backward_retain_graph_allows_a_second_pass():
    x = Tensor([1.0, 2.0], requires_grad=True)
    loss = (x ** 3).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert x.grad.tolist() == [6.0, 24.0]


@pytest.mark.task("autograd_backward")
def test_autograd_backward_deep_chain_of_ten_thousand_ops():
    x = Tensor([1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001 + 0.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10_000], rtol=1e-3)


@pytest.mark.task("autograd_backward")
@pytest.mark.parametrize(
    "make, error, pattern",
    [
        (lambda: Tensor([1.0]).backward(), RuntimeError, "does not require grad"),
        (lambda: (Tensor([1.0, 2.0], requires_grad=True) * 2).backward(), ShapeError, r"shape \(2,\)"),
        (lambda: (Tensor([1.0, 2.0], requires_grad=True) * 2).backward(np.ones(3)), ShapeError, r"\(3,\)"),
    ],
)
def test_autograd_backward_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.task("autograd_backward")
def test_autograd_backward_only_leaves_get_grad_and_detach_cuts_the_graph():
    x = Tensor([3.0], requires_grad=True)
    hidden = x * 2
    (hidden.detach() * x).sum().backward()
    assert hidden.grad is None and x.grad.tolist() == [6.0], "the detached branch is a constant"


@pytest.mark.task("autograd_grad_mode")
def test_autograd_grad_mode_no_grad_and_enable_grad():
    w = Tensor([1.0], requires_grad=True)
    with tinyflo.no_grad():
        assert not (w * 2).requires_grad
        with tinyflo.enable_grad():
            assert (w * 2).requires_grad
        assert not tinyflo.is_grad_enabled()
        with tinyflo.no_grad():
            pass
        assert not tinyflo.is_grad_enabled(), "an inner no_grad() restores the outer mode"
    assert tinyflo.is_grad_enabled()

    @tinyflo.no_grad()
    def evaluate():
        return w * 2

    assert not evaluate().requires_grad and tinyflo.is_grad_enabled()


@pytest.mark.task("autograd_grad_mode")
def test_autograd_grad_mode_is_per_thread():
    """no_grad() in one thread leaves recording on in another (as in PyTorch)."""
    import threading

    w = Tensor([1.0], requires_grad=True)
    inside, outside = threading.Barrier(2), threading.Barrier(2)
    seen = {}

    def evaluating():
        with tinyflo.no_grad():
            inside.wait()  # the other thread records while this one is inside no_grad()
            seen["no_grad"] = (w * 2).requires_grad, tinyflo.is_grad_enabled()
            outside.wait()

    def training():
        inside.wait()
        seen["training"] = (w * 2).requires_grad, tinyflo.is_grad_enabled()
        outside.wait()

    threads = [threading.Thread(target=evaluating), threading.Thread(target=training)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert seen == {"no_grad": (False, False), "training": (True, True)}
    assert tinyflo.is_grad_enabled()
