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
# # Module 02 — Autograd
#
# In module 01 every op became a `Function` with its `forward` and its
# `backward` side by side, and every result that needs a gradient remembers
# the node that made it (`out._ctx`, with the node's `inputs`). A loss
# computed from parameters is therefore the tip of a graph, and its gradient
# with respect to every parameter is the chain rule applied along that graph.
#
# This module builds the engine that applies it — the part of a framework
# that is the same for every op:
#
# | task | what |
# |---|---|
# | `autograd_unbroadcast` | sum a gradient back down to the shape of an input that was broadcast |
# | `autograd_toposort` | order the graph so each node comes after everything it feeds |
# | `autograd_accumulate` | add a leaf's gradient into its `.grad`, never sharing an array with another leaf |
# | `autograd_backward` | walk that order, call each node's `backward`, sum the gradients, free the graph |
# | `autograd_grad_mode` | `no_grad()` / `enable_grad()`: switch recording off and on |
# | `autograd_gradcheck` | compare any op's `backward` with float64 central differences |
#
# Module 01 cannot import this module (a module imports only the ones before
# it), so it keeps a slot for the engine: `Tensor.backward()` runs whatever
# `set_backward_engine` put there. This module puts the `backward` you write
# here into that slot when it is imported; no method is added to `Tensor`.

# %%
#| default_exp core.autograd

# %%
#| export
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tinyflo.core.tensor import (
    GradMode,
    ShapeError,
    Tensor,
    check_tensor,
    described,
    float64,
    is_array,
    is_floating,
    set_backward_engine,
)

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.autograd: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.autograd"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)

# %% [markdown]
# ## Broadcast gradients go back to their input's shape
#
# `b` of shape (3,) added to `a` of shape (2, 3) is used twice — once per
# row. Its gradient is the sum of both rows' gradients. In general, when an
# input of shape `shape` was broadcast to the output's shape, its gradient is
# the output gradient summed over
#
# 1. the leading axes the input did not have, and
# 2. the axes where the input had size 1 (keeping them, as size 1).
#
# The engine does this once for every op, which is why no `backward` in
# module 01 had to.
#
# ### Task `autograd_unbroadcast` (2 points): sum a gradient back to its input's shape

# %% nbgrader={"grade": false, "grade_id": "autograd_unbroadcast_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def unbroadcast(grad: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``grad`` over the axes along which an input of ``shape`` was broadcast."""
    ### BEGIN SOLUTION
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    if lead > 0:
        grad = grad.sum(axis=tuple(range(lead)))
        if grad.shape == shape:  # only leading axes were added (a bias): done
            return grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(axis=stretched, keepdims=True)
    if grad.shape != shape:
        raise ShapeError(f"unbroadcast: a gradient of shape {grad.shape} cannot belong to an input of shape {shape}")
    return grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "autograd_unbroadcast", "locked": true, "points": 2, "schema_version": 3, "solution": false}
g = np.ones((4, 2, 3), np.float32)
assert unbroadcast(g, (4, 2, 3)) is g
assert unbroadcast(g, (3,)).shape == (3,) and np.all(unbroadcast(g, (3,)) == 8)
assert unbroadcast(g, (2, 1)).shape == (2, 1) and np.all(unbroadcast(g, (2, 1)) == 12)
### BEGIN HIDDEN TESTS
assert unbroadcast(g, ()).shape == () and unbroadcast(g, ()) == 24, "a scalar input gets the sum of every element"
assert unbroadcast(g, (1, 2, 1)).shape == (1, 2, 1) and np.all(unbroadcast(g, (1, 2, 1)) == 12), (
    "shape (1, 2, 1) from (4, 2, 3): sum axes 0 and 2, keeping them as size 1"
)
assert unbroadcast(g, (4, 1, 3)).shape == (4, 1, 3) and np.all(unbroadcast(g, (4, 1, 3)) == 2), (
    "shape (4, 1, 3) from (4, 2, 3): sum the middle axis only, keeping it as size 1"
)
assert unbroadcast(g, (1, 1)).dtype == np.float32, "the gradient keeps its dtype (float32 stays float32)"
ramp = np.arange(6, dtype=np.float64).reshape(2, 3)
assert np.allclose(unbroadcast(ramp, (1, 3)), [[3, 5, 7]]), "shape (1, 3) from (2, 3): the two rows added"
assert np.allclose(unbroadcast(ramp, (2, 1)), [[3], [12]]), "shape (2, 1) from (2, 3): each row's three values added"
assert np.allclose(unbroadcast(ramp, (3,)), [3, 5, 7]), "shape (3,) from (2, 3): the leading axis summed away"
try:
    unbroadcast(ramp, (4,))
    raise AssertionError("a gradient of shape (2, 3) cannot belong to an input of shape (4,): raise ShapeError")
except ShapeError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## Topological order
#
# A node's `backward` needs the *complete* gradient of its output — the sum
# over every path from the loss — before it runs. So the nodes must be
# visited in reverse topological order: a tensor only after every tensor
# computed from it.
#
# The classic recursive depth-first search hits Python's recursion limit
# (1000 frames) on a long chain such as an unrolled RNN. Write it with an
# explicit stack instead. Only tensors that require a gradient are part of
# the graph: constants are not visited.
#
# A node whose graph was freed by an earlier backward has `fn.inputs is None`;
# walking through it is an error (see the next task).
#
# ### Task `autograd_toposort` (2 points): order the graph with an explicit stack

# %% nbgrader={"grade": false, "grade_id": "autograd_toposort_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _freed_graph_error(t: Tensor) -> RuntimeError:
    return RuntimeError(
        f"backward: the graph through {t._ctx!r} (output shape {t.shape}) was already freed by an "
        "earlier backward(); call backward(retain_graph=True) the first time to go through it twice"
    )


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor ``root`` depends on (that requires grad), inputs before the outputs they feed."""
    ### BEGIN SOLUTION
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        t, children_done = stack.pop()
        if children_done:
            order.append(t)
            continue
        if id(t) in visited:
            continue
        visited.add(id(t))
        ctx = t._ctx
        if ctx is None:  # a leaf has no inputs to wait for: it is done at once
            order.append(t)
            continue
        if ctx.inputs is None:
            raise _freed_graph_error(t)
        stack.append((t, True))
        for x in ctx.inputs:  # an input visited already is skipped when it comes off the stack
            if x.requires_grad:
                stack.append((x, False))
    return order
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "autograd_toposort", "locked": true, "points": 2, "schema_version": 3, "solution": false}
a = Tensor([1.0, 2.0], requires_grad=True)
b = Tensor([3.0, 4.0], requires_grad=True)
c = a * b
d = c + a          # a feeds d directly and through c
e = d.sum()
order = topological_order(e)
position = {id(t): i for i, t in enumerate(order)}
assert len(order) == 5 and order[-1] is e
assert position[id(a)] < position[id(c)] < position[id(d)] < position[id(e)]
### BEGIN HIDDEN TESTS
assert position[id(b)] < position[id(c)], "every input comes before the node it feeds (b before c = a * b)"
assert len({id(t) for t in order}) == len(order), "a tensor reached along two paths is listed once"
constant = Tensor([5.0, 6.0])
f = (a * constant).sum()
assert all(t is not constant for t in topological_order(f)), "constants (no requires_grad) are not part of the graph"
assert len(topological_order(f)) == 3, f"(a * constant).sum() has 3 tensors that require grad, got {len(topological_order(f))}"
alone = topological_order(a)
assert len(alone) == 1 and alone[0] is a, "a leaf on its own is its whole graph"
x = Tensor([1.0], requires_grad=True)
y = x
for _ in range(5000):
    y = y * 1.0
assert len(topological_order(y)) == 5001, "a chain of 5,000 ops must work: use an explicit stack, not recursion"
freed_inner = a * b
freed_root = freed_inner.sum()
freed_inner._ctx.inputs = None  # what an earlier backward() leaves behind
try:
    topological_order(freed_root)
    raise AssertionError("walking through a freed node (fn.inputs is None) must raise the freed-graph RuntimeError")
except RuntimeError as err:
    assert "retain_graph" in str(err), f"the freed-graph error must suggest retain_graph; got: {err}"
### END HIDDEN TESTS

# %% [markdown]
# ## Gradients end in `.grad`
#
# The backward pass (next task) ends at the leaves: the tensors you made
# with `requires_grad=True`, such as a model's weights. Each gets its
# gradient **accumulated** into `.grad`: the first one stored, every later
# one added to it — a second backward adds to the first (that is what makes
# gradient accumulation over micro-batches work), until someone sets
# `.grad = None`.
#
# `_accumulate(leaf, g, stored)` does this for one leaf. Since later
# gradients are added into the stored array *in place*, the first array
# stored into a leaf must be one nobody else holds:
#
# * an op such as `Add` hands the *same* array to both its inputs: each array
#   stored during one backward pass goes into `stored` (a set of `id`s the
#   backward pass makes once and hands to every call), and one found there
#   already is copied;
# * `Expand` or `Reshape` hand back *views* of another array (`g.base` is not
#   None): copied too;
# * NumPy returns a *scalar*, not an array, for arithmetic on 0-d arrays, and
#   a scalar cannot be added into: make it a 0-d array (`xp.array(g)` copies
#   and does that).
#
# Store the array wrapped as a tensor on the leaf's device,
# `Tensor._wrap(g, leaf.device)`.
#
# ### Task `autograd_accumulate` (1 point): add a gradient into a leaf's `.grad`

# %% nbgrader={"grade": false, "grade_id": "autograd_accumulate_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _accumulate(leaf: Tensor, g: Any, stored: set[int]) -> None:
    """Add ``g`` into ``leaf.grad``, copying it first when someone else may hold it."""
    ### BEGIN SOLUTION
    if leaf.grad is None:
        xp = leaf.device.xp
        if g.base is not None or id(g) in stored or not isinstance(g, xp.ndarray):
            with leaf.device:
                g = xp.array(g)  # our own copy; a NumPy scalar becomes a 0-d array
        stored.add(id(g))
        leaf.grad = Tensor._wrap(g, leaf.device)
    else:
        leaf.grad.data += g
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "autograd_accumulate", "locked": true, "points": 1, "schema_version": 3, "solution": false}
stored = set()
leaf = Tensor([1.0, 2.0], requires_grad=True)
first = np.array([0.5, 0.5], np.float32)
_accumulate(leaf, first, stored)
assert isinstance(leaf.grad, Tensor) and np.allclose(leaf.grad.data, [0.5, 0.5])
_accumulate(leaf, np.array([1.0, 2.0], np.float32), stored)
assert np.allclose(leaf.grad.data, [1.5, 2.5]), "a second gradient is added to the first"
other = Tensor([3.0, 4.0], requires_grad=True)
_accumulate(other, first, stored)  # the array stored into leaf, handed on again (as Add does)
other.grad.data += 100
assert np.allclose(leaf.grad.data, [1.5, 2.5]), "two leaves must not share one gradient array"
### BEGIN HIDDEN TESTS
shared = np.array([1.0, 1.0], np.float32)
u, v = Tensor([0.0, 0.0], requires_grad=True), Tensor([0.0, 0.0], requires_grad=True)
pair = set()
_accumulate(u, shared, pair)
_accumulate(v, shared, pair)
assert u.grad.data is not v.grad.data, "the same array given to two leaves in one backward pass must be copied for the second"
u.grad.data += 1
assert np.allclose(v.grad.data, [1, 1]), "adding into one leaf's .grad must not change another leaf's"
whole = np.ones((2, 2), np.float32)
viewed = Tensor([0.0, 0.0], requires_grad=True)
_accumulate(viewed, whole[0], set())
whole[...] = 7
assert np.allclose(viewed.grad.data, [1, 1]), "a view of another array (g.base is not None) must be copied before it is stored"
point = Tensor(2.0, requires_grad=True)
_accumulate(point, np.float32(3.0), set())
assert isinstance(point.grad.data, np.ndarray), f"a NumPy scalar gradient must be stored as a 0-d array, got {type(point.grad.data).__name__}"
_accumulate(point, np.float32(1.0), set())
assert point.grad.item() == 4.0, f"3 + 1 accumulated into a 0-d .grad must give 4, got {point.grad.item()}"
held = point.grad.data
_accumulate(point, np.float32(1.0), set())
assert point.grad.data is held and point.grad.item() == 5.0, "a later gradient is added into the stored array in place"
assert point.grad.device is point.device and not point.grad.requires_grad, ".grad lives on the leaf's device and needs no gradient itself"
### END HIDDEN TESTS

# %% [markdown]
# ## The backward pass
#
# `backward(root, grad=None, retain_graph=False)`:
#
# 1. the gradient of `root` with respect to itself is `grad`, or 1 when
#    `root` holds one number (a loss) — anything else needs an explicit
#    `grad` of root's shape (the given `_initial_grad` checks and builds it);
# 2. walk the topological order backwards, keeping a dict from tensor id to
#    the gradient summed so far; a node's gradient is complete when it is
#    reached, so pop it;
# 3. for a node with a `_ctx`, call `_ctx.backward(grad)`; its result is one
#    gradient per input (a bare array for a one-input op, None for an input
#    that needs none); `unbroadcast` each to its input's shape, cast it to
#    the input's dtype, and add it to that input's running sum;
# 4. a leaf (no `_ctx`) that requires a gradient gets it accumulated into
#    `.grad` by `_accumulate`, with one `stored` set for the whole pass;
# 5. unless `retain_graph`, free each node after use — drop its saved arrays
#    and inputs (`fn.saved, fn.inputs = None, None`) — so the activations it
#    held can go; a second backward through the same graph is then the clear
#    error `topological_order` raises.
#
# A root that does not require a gradient has no graph to walk: that is a
# `RuntimeError` saying so.
#
# ### Task `autograd_backward` (3 points): walk the graph and apply the chain rule

# %% nbgrader={"grade": false, "grade_id": "autograd_backward_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _initial_grad(root: Tensor, grad: Any) -> Any:
    """The gradient backward() starts from, checked against root's shape and device."""
    xp = root.device.xp
    if grad is None:
        if root.data.size != 1:
            raise ShapeError(
                f"backward: grad can be left out only for a one-element tensor (a loss); "
                f"got shape {root.shape}: pass grad= of that shape"
            )
        with root.device:
            return xp.ones(root.data.shape, root.dtype)
    if not isinstance(grad, Tensor | int | float | np.generic | list | tuple) and not is_array(grad):
        raise TypeError(f"backward: grad must be a Tensor, a number or an array of the tensor's shape; "
                        f"got {described(grad)}")
    if isinstance(grad, Tensor):
        if grad.device is not root.device:
            raise ValueError(f"backward: grad is on {grad.device} but the tensor is on {root.device}")
        grad = grad.data
    with root.device:
        grad = xp.array(grad, dtype=root.dtype)  # a copy: the caller's array is never written to
    if grad.shape != root.data.shape:
        raise ShapeError(f"backward: grad has shape {grad.shape} but the tensor has shape {root.shape}")
    return grad


def backward(root: Tensor, grad: Any = None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
    check_tensor("backward", "root", root)
    ### BEGIN SOLUTION
    if not root.requires_grad:
        raise RuntimeError(
            "backward: this tensor does not require grad and has no graph; "
            "did an input have requires_grad=True, and was it computed outside no_grad()?"
        )
    grads = {id(root): _initial_grad(root, grad)}
    stored: set[int] = set()
    for t in reversed(topological_order(root)):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        fn = t._ctx
        if fn is None:
            _accumulate(t, g, stored)
            continue
        input_grads = fn.backward(g)
        if not isinstance(input_grads, tuple):
            input_grads = (input_grads,)
        for x, gx in zip(fn.inputs, input_grads):
            if gx is None or not x.requires_grad:
                continue
            if gx.shape != x.data.shape:
                gx = unbroadcast(gx, x.data.shape)
            if gx.dtype != x.data.dtype:
                gx = gx.astype(x.data.dtype)
            key = id(x)
            grads[key] = gx if key not in grads else grads[key] + gx
        if not retain_graph:
            fn.saved, fn.inputs = None, None
    ### END SOLUTION


# %% [markdown]
# Try it on a tiny network: one linear layer and a squared error. Compare
# with the derivative by hand: for L = Σ (x·w − y)², ∂L/∂w = 2 xᵀ(x·w − y).

# %%
x = Tensor([[1.0, 2.0], [3.0, 4.0]])
w = Tensor([[0.5], [-0.5]], requires_grad=True)
y = Tensor([[1.0], [0.0]])
loss = ((x @ w - y) ** 2).sum()
backward(loss)
print("autograd :", w.grad.data.ravel())
print("by hand  :", (2 * x.data.T @ (x.data @ w.data - y.data)).ravel())

# %% nbgrader={"grade": true, "grade_id": "autograd_backward", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from tinyflo.core.tensor import Function

a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
b = Tensor([10.0, 20.0], requires_grad=True)
backward((a * b + a).sum())
assert np.allclose(a.grad.data, [[11, 21], [11, 21]]) and np.allclose(b.grad.data, [4, 6])
assert b.grad.shape == (2,) and b.grad.dtype == np.float32, "broadcast gradient reduced to (2,), dtype kept"
backward((a * 2).sum())
assert np.allclose(a.grad.data, [[13, 23], [13, 23]]), "a second backward accumulates into .grad"
loss = (a * a).sum()
backward(loss)
try:
    backward(loss)
    raise AssertionError("a second backward through a freed graph must raise")
except RuntimeError as err:
    assert "retain_graph" in str(err), f"the error should suggest retain_graph; got: {err}"
### BEGIN HIDDEN TESTS
p = Tensor([2.0, 3.0], requires_grad=True)
q = (p * p).sum()
backward(q, retain_graph=True)
backward(q)
assert np.allclose(p.grad.data, [8, 12]), "backward(retain_graph=True) keeps the graph for a second pass"
s = Tensor([1.0, 2.0], requires_grad=True)
t = s + s
backward(t, grad=np.array([1.0, 1.0], np.float32))
assert np.allclose(s.grad.data, [2, 2]), "s + s: both paths into s are summed (d/ds = 2)"
u = Tensor([1.0, 2.0], requires_grad=True)
v = Tensor([3.0, 4.0], requires_grad=True)
backward((u + v).sum())
u.grad.data += 100
assert np.allclose(v.grad.data, [1, 1]), "two leaves must not share one gradient array"
try:
    backward(Tensor([1.0, 2.0], requires_grad=True) * 2)
    raise AssertionError("backward of a non-scalar root without grad= must raise ShapeError")
except ShapeError:
    pass
try:
    backward(Tensor([1.0]))
    raise AssertionError("backward of a tensor that does not require grad must raise RuntimeError")
except RuntimeError:
    pass
chain = Tensor([1.0], requires_grad=True)
out = chain
for _ in range(10000):
    out = out * 1.0
backward(out.sum())
assert np.allclose(chain.grad.data, 1.0), "a chain of 10,000 ops must work"
m = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
backward(m.sum(axis=0).max())
assert m.grad.shape == (2, 3) and m.grad.data.flags.writeable, "a gradient that came back as a read-only view is stored as an array of its own"
scalar = Tensor(2.0, requires_grad=True)
backward(scalar * scalar)
assert isinstance(scalar.grad.data, np.ndarray) and scalar.grad.item() == 4.0, "a 0-d gradient is stored as an array"


class Sloppy(Function):  # an op whose backward hands back float64 for a float32 input
    def forward(self, a):
        return a * 2

    def backward(self, grad):
        return grad.astype(np.float64) * 2


p32 = Tensor([1.0, 2.0], requires_grad=True)
backward(Sloppy.apply(p32 * 1.0).sum())
assert p32.grad.dtype == np.float32 and np.allclose(p32.grad.data, [2, 2]), (
    f"each input's gradient is cast to the input's dtype: float32 expected, got {p32.grad.dtype}"
)
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_x = check_rng.standard_normal((3, 4))
_rs_t = Tensor(_rs_x, requires_grad=True)
backward((_rs_t * _rs_t * 0.5).sum())
assert np.allclose(_rs_t.grad.data, _rs_x), "the gradient of Σ t²/2 is t itself, for any t"
### END HIDDEN TESTS

# %% [markdown]
# Now the engine goes into module 01's slot, and `loss.backward()` runs it.

# %%
#| export
set_backward_engine(backward)

# %%
w = Tensor([[0.5], [-0.5]], requires_grad=True)
((Tensor([[1.0, 2.0], [3.0, 4.0]]) @ w - Tensor([[1.0], [0.0]])) ** 2).sum().backward()
print("loss.backward():", w.grad.data.ravel())

# %% [markdown]
# ## Switching recording off: `no_grad()`
#
# Evaluating a model or updating parameters needs no graph, and recording
# one costs memory (every node keeps its saved arrays). `no_grad()` turns
# recording off for a block or a function; `enable_grad()` turns it back on
# inside one. Both must restore the previous mode on the way out — also when
# the block raises, and also when they are nested or the decorated function
# calls itself.
#
# ### Task `autograd_grad_mode` (2 points): `no_grad()` and `enable_grad()`

# %% nbgrader={"grade": false, "grade_id": "autograd_grad_mode_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class set_grad_enabled(contextlib.ContextDecorator):
    """Record the graph or not inside a ``with`` block or a decorated function."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool | np.bool_):
            raise TypeError(f"set_grad_enabled: mode must be True or False; got {described(mode)}")
        self.mode = bool(mode)
        self._previous: list[bool] = []

    def __enter__(self) -> set_grad_enabled:
        ### BEGIN SOLUTION
        self._previous.append(GradMode.enabled)
        GradMode.enabled = self.mode
        return self
        ### END SOLUTION

    def __exit__(self, *exc: Any) -> None:
        ### BEGIN SOLUTION
        GradMode.enabled = self._previous.pop()
        ### END SOLUTION


class no_grad(set_grad_enabled):
    """Do not record the graph (evaluation, parameter updates)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Record the graph again, inside a no_grad() block."""

    def __init__(self) -> None:
        super().__init__(True)


def is_grad_enabled() -> bool:
    """Whether ops record the graph right now."""
    return GradMode.enabled


# %% nbgrader={"grade": true, "grade_id": "autograd_grad_mode", "locked": true, "points": 2, "schema_version": 3, "solution": false}
w = Tensor([1.0, 2.0], requires_grad=True)
with no_grad():
    assert not is_grad_enabled()
    y = w * 2
    with enable_grad():
        z = w * 2
assert is_grad_enabled()
assert not y.requires_grad and y._ctx is None and z.requires_grad
### BEGIN HIDDEN TESTS
inside = []


@no_grad()
def depth(n):
    inside.append(is_grad_enabled())
    return 0 if n == 0 else 1 + depth(n - 1)


assert depth(3) == 3 and not any(inside), "inside a function decorated with @no_grad() recording is off"
assert is_grad_enabled(), "a decorated function that calls itself restores the mode when it returns"
with no_grad():
    with no_grad():
        pass
    assert not is_grad_enabled(), "leaving an inner no_grad() keeps the outer one in force"
with no_grad():
    with enable_grad():
        assert is_grad_enabled(), "enable_grad() inside no_grad() switches recording on"
    assert not is_grad_enabled(), "leaving enable_grad() returns to the no_grad() around it"
try:
    with no_grad():
        raise KeyError("boom")
except KeyError:
    pass
assert is_grad_enabled(), "an exception inside no_grad() restores the mode"
with set_grad_enabled(False) as mode:
    assert not (w * 3).requires_grad, "set_grad_enabled(False) switches recording off"
assert isinstance(mode, set_grad_enabled), "`with set_grad_enabled(...) as m` gives the context manager itself"
### END HIDDEN TESTS

# %% [markdown]
# ## Trust, but verify: gradcheck
#
# Every `backward` in module 01 is a claim. The derivative's definition
# checks it: for a small ε,
#
# ∂L/∂xᵢ ≈ (L(x + ε eᵢ) − L(x − ε eᵢ)) / 2ε,
#
# with an error of order ε². In float32 the two losses differ in only a few
# significant digits, so gradcheck insists on **float64** inputs: an input
# that requires grad in any other dtype is a `TypeError` naming the dtype.
#
# For an op with a non-scalar output we check the gradient of
# L = Σ out · v for a fixed random v (one backward pass covers every
# output element at once — a random direction catches a wrong entry with
# probability 1). Perturb each input element in place, recompute, restore.
# Raise a `GradcheckError` that names the input, the element, and both
# values; return True when everything agrees.
#
# ### Task `autograd_gradcheck` (3 points): compare `backward` with central differences

# %% nbgrader={"grade": false, "grade_id": "autograd_gradcheck_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class GradcheckError(AssertionError):
    """An analytic gradient that disagrees with central differences."""


def gradcheck(
    fn: Callable[..., Tensor],
    *inputs: Tensor,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
) -> bool:
    """Check fn's gradients for every input that requires grad against float64 central differences."""
    if not callable(fn):
        raise TypeError(f"gradcheck: fn must be a function of the inputs; got {described(fn)}")
    ### BEGIN SOLUTION
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad; pass tensors made with requires_grad=True")
    for i in checked:
        if inputs[i].dtype != float64:
            raise TypeError(f"gradcheck: input {i} is {inputs[i].dtype}; central differences need float64")
    out = fn(*inputs)
    if not isinstance(out, Tensor) or not is_floating(out.dtype):
        raise TypeError(f"gradcheck: fn must return a floating Tensor; got {type(out).__name__}")
    xp = out.device.xp
    with out.device:
        v = xp.asarray(np.random.default_rng(seed).standard_normal(out.shape))

    def projected(result: Tensor) -> float:
        return float((result.data * v).sum())

    for i in checked:
        inputs[i].grad = None
    backward((out * Tensor._wrap(v, out.device)).sum())
    for i in checked:
        x = inputs[i]
        analytic = np.zeros(x.shape) if x.grad is None else np.asarray(x.grad.numpy(), dtype=np.float64)
        numeric = np.zeros(x.shape)
        with no_grad():
            for idx in np.ndindex(*x.shape):
                original = x.data[idx].item()
                x.data[idx] = original + eps
                plus = projected(fn(*inputs))
                x.data[idx] = original - eps
                minus = projected(fn(*inputs))
                x.data[idx] = original
                numeric[idx] = (plus - minus) / (2 * eps)
        bad = ~np.isclose(analytic, numeric, atol=atol, rtol=rtol)
        if bad.any():
            worst = np.unravel_index(np.argmax(np.where(bad, np.abs(analytic - numeric), -1)), x.shape)
            raise GradcheckError(
                f"gradcheck: input {i} (shape {x.shape}) disagrees with central differences at "
                f"{tuple(int(j) for j in worst)}: backward gives {analytic[worst]:.6g}, "
                f"finite differences give {numeric[worst]:.6g} ({int(bad.sum())} of {bad.size} elements off)"
            )
    return True
    ### END SOLUTION


# %% [markdown]
# Now every op of module 01 can be checked — composite ones (`mean`, `var`,
# `min`) included. The package's test suite runs this over a table of every
# op on randomly generated shapes; here a few by hand.

# %%
x = Tensor(np.random.default_rng(1).standard_normal((3, 4)), requires_grad=True)
for name, f in [("tanh", lambda t: t.tanh()), ("var", lambda t: t.var(axis=0)),
                ("softmax-ish", lambda t: t.exp() / t.exp().sum(axis=1, keepdims=True))]:
    print(name, gradcheck(f, x))

# %% nbgrader={"grade": true, "grade_id": "autograd_gradcheck", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from tinyflo.core.tensor import Function

rng = np.random.default_rng(0)
x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
w = Tensor(rng.standard_normal((4, 2)), requires_grad=True)
assert gradcheck(lambda a, b: (a @ b).tanh(), x, w)
assert gradcheck(lambda a: a.sigmoid() * a, x)


class WrongSquare(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return a * a

    def backward(self, grad):
        (a,) = self.saved
        return grad * a  # the factor 2 is missing


try:
    gradcheck(lambda a: WrongSquare.apply(a), x)
    raise AssertionError("gradcheck must catch a wrong backward")
except GradcheckError as err:
    assert "input 0" in str(err), f"the error should name the input that is off; got: {err}"
### BEGIN HIDDEN TESTS
try:
    gradcheck(lambda a: a * 2, Tensor([1.0, 2.0], requires_grad=True))
    raise AssertionError("a float32 input that requires grad must be refused with a TypeError")
except TypeError as err:
    assert "float64" in str(err), f"the TypeError should say that float64 is needed; got: {err}"
b = Tensor(rng.standard_normal(4), requires_grad=True)
assert gradcheck(lambda a, c: (a + c).sum(axis=0), x, b), "a correct op with a broadcast input must pass"
assert gradcheck(lambda a: a.T.reshape(2, 6)[1], x), "a correct op through transpose, reshape and indexing must pass"
nc = Tensor(rng.standard_normal((4, 3)), requires_grad=True)
before = nc.numpy().copy()
assert gradcheck(lambda a: (a * a).exp(), nc), "a correct op on a non-square input must pass"
assert np.array_equal(nc.numpy(), before), "gradcheck must leave every input as it found it (restore each element)"


class Swapped(Function):  # right in total, wrong per element: hands each output's gradient to the mirrored input
    def forward(self, a):
        return a * 2

    def backward(self, grad):
        return grad[::-1] * 2


try:
    gradcheck(lambda a: Swapped.apply(a), Tensor(rng.standard_normal(5), requires_grad=True))
    raise AssertionError("a backward that mixes up the output elements must be caught: weight the outputs by a random v")
except GradcheckError:
    pass
constant = Tensor(rng.standard_normal((3, 4)))
assert gradcheck(lambda a, c: a * c, x, constant), "inputs that do not require grad are used but not checked"
### END HIDDEN TESTS

# %% [markdown]
# ## Systems corner
#
# * **Memory over time.** During the forward pass the saved arrays of every
#   node pile up; the backward pass releases them node by node, latest first.
#   Peak memory of training is therefore at the start of backward. Freeing
#   (`fn.saved = None`) is what lets the activations go.
# * **Cost.** Backward costs about twice the forward: a matmul's backward is
#   two matmuls. The engine's own overhead — the sort and the dict — is
#   per node, not per element, so it matters only for tiny tensors. Module
#   08's benchmarks measure it in µs per op.
# * **In-place changes.** A node keeps references to its inputs' arrays, not
#   copies. Writing into an input after the forward pass (`x.data[0] = 100`)
#   silently changes the gradient backward computes. That is why
#   `Tensor.__setitem__` refuses tensors that require grad outside
#   `no_grad()`; PyTorch goes further and counts versions of every tensor.
# * **Why accumulate?** Summing into `.grad` rather than overwriting it is
#   what lets a parameter used twice (weight tying) get both contributions,
#   and lets a Trainer accumulate gradients over several micro-batches
#   before one optimizer step. The price: something must reset `.grad`
#   between steps — the optimizer's `zero_grad()`.
