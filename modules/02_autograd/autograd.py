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
# | task | points | what |
# |---|---|---|
# | `autograd_unbroadcast` | 2 | sum a gradient back down to the shape of an input that was broadcast |
# | `autograd_toposort` | 2 | order the graph so each node comes after everything it feeds |
# | `autograd_accumulate` | 1 | add a leaf's gradient into its `.grad`, never sharing an array with another leaf |
# | `autograd_backward` | 3 | walk that order, call each node's `backward`, sum the gradients, free the graph |
# | `autograd_grad_mode` | 2 | `no_grad()` / `enable_grad()`: switch recording off and on |
# | `autograd_gradcheck` | 3 | compare any op's `backward` with float64 central differences |
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
# A gradient whose shape cannot come from broadcasting an input of `shape`
# (a gradient of shape (2, 3) for an input of shape (4,)) means an op's
# `backward` went wrong: raise a `ShapeError` naming both shapes rather than
# hand back an array of the wrong shape.
#
# ### Task `autograd_unbroadcast` (2 points): sum a gradient back to its input's shape
#
# **Checked when graded** (besides the tests below), on a gradient of your own
# shape (m, n, k) or (m, k), with sizes and values drawn for you:
#
# * a scalar input (shape `()`) gets the sum of every element
# * the axes where the input had size 1 are summed and kept as size 1: (1, n, 1) from (m, n, k)
# * only the axes where the input had size 1 are summed: (m, 1, k) from (m, n, k) sums the middle axis alone
# * the gradient keeps its dtype (float32 stays float32)
# * (1, k) from (m, k): the m rows added
# * (m, 1) from (m, k): each row's k values added
# * (k,) from (m, k): the leading axis summed away
# * a gradient whose shape does not fit the input's shape must raise `ShapeError`: (m, k) cannot belong to an input of shape (k + 1,)

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
# This student's own gradients: three different sizes from 2 to 5 (so an axis taken for another
# shows in the shape) and whole numbers from 1 to 9 (so every sum is exact and none is 0).
_m, _n, _k = (int(size) for size in check_rng.permutation([2, 3, 4, 5])[:3])
_g3 = check_rng.integers(1, 10, (_m, _n, _k)).astype(np.float32)
assert np.array_equal(unbroadcast(_g3, ()), _g3.sum()), "a scalar input (shape ()) gets the sum of every element"
assert np.array_equal(unbroadcast(_g3, (1, _n, 1)), _g3.sum(axis=(0, 2), keepdims=True)), (
    "the axes where the input had size 1 are summed and kept as size 1: (1, n, 1) from (m, n, k)"
)
assert np.array_equal(unbroadcast(_g3, (_m, 1, _k)), _g3.sum(axis=1, keepdims=True)), (
    "only the axes where the input had size 1 are summed: (m, 1, k) from (m, n, k) sums the middle axis alone"
)
assert unbroadcast(_g3, (1, 1)).dtype == np.float32, "the gradient keeps its dtype (float32 stays float32)"
_g2 = check_rng.integers(1, 10, (_m, _k)).astype(np.float64)
assert np.array_equal(unbroadcast(_g2, (1, _k)), _g2.sum(axis=0, keepdims=True)), "(1, k) from (m, k): the m rows added"
assert np.array_equal(unbroadcast(_g2, (_m, 1)), _g2.sum(axis=1, keepdims=True)), (
    "(m, 1) from (m, k): each row's k values added"
)
assert np.array_equal(unbroadcast(_g2, (_k,)), _g2.sum(axis=0)), "(k,) from (m, k): the leading axis summed away"
try:
    _verdict = unbroadcast(_g2, (_k + 1,)).shape  # what came back instead of the error
except ShapeError as err:
    _verdict = type(err).__name__
assert _verdict == "ShapeError", (
    "a gradient whose shape does not fit the input's shape must raise ShapeError: "
    "(m, k) cannot belong to an input of shape (k + 1,)"
)
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
# walking through it is an error (see the backward task): raise the
# `RuntimeError` that the given `_freed_graph_error(t)` makes, which suggests
# `retain_graph`.
#
# ### Task `autograd_toposort` (2 points): order the graph with an explicit stack
#
# **Checked when graded** (besides the tests below), on graphs of your own,
# with sizes and values drawn for you:
#
# * every input comes before the node it feeds, and the root comes last
# * a tensor reached along two paths is listed once
# * constants (no `requires_grad`) are not part of the graph
# * only tensors that require grad are listed: a leaf times a constant d times, then summed, gives d + 2 tensors
# * a leaf on its own is its whole graph
# * a chain of 3,000 to 6,000 ops must work: use an explicit stack, not recursion
# * walking through a freed node (`fn.inputs is None`) must raise the freed-graph `RuntimeError`
# * the freed-graph error must suggest `retain_graph`

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
assert len(order) == 5 and position.get(id(e)) == 4, "five tensors in the order, the root e last (at position 4)"
assert position[id(a)] < position[id(c)] < position[id(d)] < position[id(e)]
### BEGIN HIDDEN TESTS
# This student's own graph: how many leaves and nodes, and which tensors each node combines, drawn
# per student. Every node uses one earlier tensor twice: directly and through a product.
_leaves = [Tensor(check_rng.standard_normal(3), requires_grad=True) for _ in range(int(check_rng.integers(2, 5)))]
_nodes = list(_leaves)
for _ in range(int(check_rng.integers(3, 7))):
    _i, _j = (int(pick) for pick in check_rng.integers(0, len(_nodes), 2))
    _nodes.append(_nodes[_i] * _nodes[_j] + _nodes[_i])
_root = _nodes[-1].sum()
_order = topological_order(_root)
_at = {id(t): n for n, t in enumerate(_order)}
assert _at[id(_root)] == len(_order) - 1 and all(
    _at[id(x)] < _at[id(t)] for t in _order if t._ctx is not None for x in t._ctx.inputs if x.requires_grad
), "every input comes before the node it feeds, and the root comes last"
assert len({id(t) for t in _order}) == len(_order), "a tensor reached along two paths is listed once"
_constant = Tensor(check_rng.standard_normal(3))
_times = int(check_rng.integers(1, 5))
_scaled = _leaves[0]
for _ in range(_times):
    _scaled = _scaled * _constant
_scaled_order = topological_order(_scaled.sum())
assert all(t is not _constant for t in _scaled_order), "constants (no requires_grad) are not part of the graph"
assert len(_scaled_order) == _times + 2, (
    f"only tensors that require grad are listed: a leaf times a constant d times, then summed, gives d + 2 tensors; got {len(_scaled_order)}"
)
_alone = topological_order(_leaves[-1])
assert len(_alone) == 1 and _alone[0] is _leaves[-1], "a leaf on its own is its whole graph"
_length = int(check_rng.integers(3000, 6001))
_chain = Tensor(check_rng.standard_normal(1), requires_grad=True)
for _ in range(_length):
    _chain = _chain * 1.0
assert len(topological_order(_chain)) == _length + 1, (
    "a chain of 3,000 to 6,000 ops must work: use an explicit stack, not recursion"
)
_freed_inner = _leaves[0] * _leaves[-1]
_freed_root = _freed_inner.sum()
_freed_inner._ctx.inputs = None  # what an earlier backward() leaves behind
_freed_message = ""
try:
    _verdict = len(topological_order(_freed_root))  # how many tensors came back instead of the error
except RuntimeError as err:
    _verdict = type(err).__name__
    _freed_message = str(err)
assert _verdict == "RuntimeError", "walking through a freed node (fn.inputs is None) must raise the freed-graph RuntimeError"
assert "retain_graph" in _freed_message, f"the freed-graph error must suggest retain_graph; got: {_freed_message}"
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
#
# **Checked when graded** (besides the tests below), with gradients whose
# values are drawn for you:
#
# * the same array given to two leaves in one backward pass must be copied for the second
# * adding into one leaf's `.grad` must not change another leaf's
# * a view of another array (`g.base is not None`) must be copied before it is stored
# * a NumPy scalar gradient must be stored as a 0-d array
# * a second NumPy scalar accumulated into a 0-d `.grad` gives the sum of the two
# * a later gradient is added into the stored array in place
# * `.grad` lives on the leaf's device and needs no gradient itself

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
# This student's own gradients: values drawn per student (the scalars from 0.5 to 4, never 0).
_shared = check_rng.standard_normal(3).astype(np.float32)
_kept = _shared.copy()
_u = Tensor(np.zeros(3, np.float32), requires_grad=True)
_v = Tensor(np.zeros(3, np.float32), requires_grad=True)
_pair = set()
_accumulate(_u, _shared, _pair)
_accumulate(_v, _shared, _pair)
assert _u.grad.data is not _v.grad.data, "the same array given to two leaves in one backward pass must be copied for the second"
_u.grad.data += 1
assert np.array_equal(_v.grad.data, _kept), "adding into one leaf's .grad must not change another leaf's"
_whole = check_rng.standard_normal((2, 3)).astype(np.float32)
_row = _whole[0].copy()
_viewed = Tensor(np.zeros(3, np.float32), requires_grad=True)
_accumulate(_viewed, _whole[0], set())
_whole += 1
assert np.array_equal(_viewed.grad.data, _row), "a view of another array (g.base is not None) must be copied before it is stored"
_s1, _s2, _s3 = (np.float32(s) for s in check_rng.uniform(0.5, 4.0, 3))
_point = Tensor(np.float32(0.0), requires_grad=True)
_accumulate(_point, _s1, set())
assert type(_point.grad.data).__name__ == "ndarray", "a NumPy scalar gradient must be stored as a 0-d array"
_accumulate(_point, _s2, set())
assert np.isclose(_point.grad.item(), _s1 + _s2), (
    f"a second NumPy scalar accumulated into a 0-d .grad gives the sum of the two, got {_point.grad.item()}"
)
_held = _point.grad.data
_accumulate(_point, _s3, set())
assert _point.grad.data is _held and np.isclose(_point.grad.item(), _s1 + _s2 + _s3), (
    "a later gradient is added into the stored array in place"
)
assert _point.grad.device is _point.device and not _point.grad.requires_grad, ".grad lives on the leaf's device and needs no gradient itself"
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
#
# **Checked when graded** (besides the tests below), on tensors whose sizes
# and values are drawn for you:
#
# * backward(retain_graph=True) keeps the graph for a second pass
# * without retain_graph the graph is freed: a second backward through it raises the freed-graph `RuntimeError`
# * s + s: both paths into s are summed (d/ds = 2)
# * an input that was broadcast gets its gradient summed back to its shape: `b` in `a * b` gets the column sums of `a`
# * two leaves must not share one gradient array
# * backward of a non-scalar root without grad= must raise ShapeError
# * backward of a tensor that does not require grad must raise RuntimeError
# * a chain of 8,000 to 12,000 ops must work
# * a gradient that came back as a read-only view is stored as an array of its own
# * a 0-d gradient is stored as an array
# * each input's gradient is cast to the input's dtype: float32 expected
# * the gradient of Σ t²/2 is t itself, for any t

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
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(2, 6))
_px = check_rng.standard_normal(_n).astype(np.float32)
_p = Tensor(_px, requires_grad=True)
_q = (_p * _p).sum()
backward(_q, retain_graph=True)
backward(_q)
assert np.allclose(_p.grad.data, 4 * _px), "backward(retain_graph=True) keeps the graph for a second pass"
_once = (Tensor(check_rng.standard_normal(_n), requires_grad=True) * 3.0).sum()
backward(_once)
try:
    _verdict = backward(_once)  # None: it ran again through a graph that should be gone
except RuntimeError as err:
    _verdict = type(err).__name__
assert _verdict == "RuntimeError", (
    "without retain_graph the graph is freed: a second backward through it raises the freed-graph RuntimeError"
)
_s = Tensor(check_rng.standard_normal(_n).astype(np.float32), requires_grad=True)
_sg = check_rng.uniform(0.5, 2.0, _n).astype(np.float32)  # never 0: one path alone shows
backward(_s + _s, grad=_sg)
assert np.allclose(_s.grad.data, 2 * _sg), "s + s: both paths into s are summed (d/ds = 2)"
_ax = check_rng.standard_normal((_n + 1, _n)).astype(np.float32)
_bias = Tensor(check_rng.standard_normal(_n).astype(np.float32), requires_grad=True)
backward((Tensor(_ax) * _bias).sum())
assert _bias.grad.shape == (_n,) and np.allclose(_bias.grad.data, _ax.sum(axis=0)), (
    "an input that was broadcast gets its gradient summed back to its shape: b in a * b gets the column sums of a"
)
_u = Tensor(check_rng.standard_normal(_n).astype(np.float32), requires_grad=True)
_v = Tensor(check_rng.standard_normal(_n).astype(np.float32), requires_grad=True)
backward((_u + _v).sum())
_u.grad.data += 100
assert np.allclose(_v.grad.data, np.ones(_n)), "two leaves must not share one gradient array"
try:
    _verdict = backward(Tensor(check_rng.standard_normal(_n), requires_grad=True) * 2)
except ShapeError as err:
    _verdict = type(err).__name__
assert _verdict == "ShapeError", "backward of a non-scalar root without grad= must raise ShapeError"
try:
    _verdict = backward(Tensor(check_rng.standard_normal(_n)))
except RuntimeError as err:
    _verdict = type(err).__name__
assert _verdict == "RuntimeError", "backward of a tensor that does not require grad must raise RuntimeError"
_length = int(check_rng.integers(8000, 12001))
_chain = Tensor(check_rng.standard_normal(1).astype(np.float32), requires_grad=True)
_out = _chain
for _ in range(_length):
    _out = _out * 1.0
backward(_out.sum())
assert np.allclose(_chain.grad.data, 1.0), "a chain of 8,000 to 12,000 ops must work"
_rows, _cols = (int(size) for size in check_rng.integers(2, 5, 2))
_m = Tensor(check_rng.standard_normal((_rows, _cols)).astype(np.float32), requires_grad=True)
backward(_m.sum(axis=0).max())
assert _m.grad.shape == (_rows, _cols) and _m.grad.data.flags.writeable, (
    "a gradient that came back as a read-only view is stored as an array of its own"
)
_x0 = np.float32(check_rng.uniform(0.5, 3.0))
_scalar = Tensor(_x0, requires_grad=True)
backward(_scalar * _scalar)
assert isinstance(_scalar.grad.data, np.ndarray) and np.isclose(_scalar.grad.item(), 2 * _x0), (
    "a 0-d gradient is stored as an array"
)


class Sloppy(Function):  # an op whose backward hands back float64 for a float32 input
    def forward(self, a):
        return a * 2

    def backward(self, grad):
        return grad.astype(np.float64) * 2


_weights = check_rng.standard_normal(_n).astype(np.float32)
_p32 = Tensor(check_rng.standard_normal(_n).astype(np.float32), requires_grad=True)
backward((Sloppy.apply(_p32 * 1.0) * Tensor(_weights)).sum())
assert _p32.grad.dtype == np.float32 and np.allclose(_p32.grad.data, 2 * _weights), (
    f"each input's gradient is cast to the input's dtype: float32 expected, got {_p32.grad.dtype}"
)
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
#
# **Checked when graded** (besides the tests below), with a depth of
# recursion and a nesting of modes drawn for you:
#
# * inside a function decorated with `@no_grad()` recording is off
# * a decorated function that calls itself restores the mode when it returns
# * nested `set_grad_enabled(mode)` blocks: inside each one its own mode holds, and leaving it restores the mode around it
# * leaving an inner `no_grad()` keeps the outer one in force
# * `enable_grad()` inside `no_grad()` switches recording on
# * leaving `enable_grad()` returns to the `no_grad()` around it
# * an exception inside `no_grad()` restores the mode
# * `set_grad_enabled(False)` switches recording off
# * `with set_grad_enabled(...) as m` gives the context manager itself

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
# This student's own depth of recursion and nesting of modes, drawn per student.
_depth = int(check_rng.integers(2, 7))
_inside = []


@no_grad()
def _count_down(n):
    _inside.append(is_grad_enabled())
    return 0 if n == 0 else 1 + _count_down(n - 1)


assert _count_down(_depth) == _depth and not any(_inside), "inside a function decorated with @no_grad() recording is off"
assert {"recording": is_grad_enabled()} == {"recording": True}, (
    "a decorated function that calls itself restores the mode when it returns"
)
_modes = [bool(mode) for mode in check_rng.integers(0, 2, int(check_rng.integers(3, 7)))]
_seen = []


def _nest(level):
    if level < len(_modes):
        with set_grad_enabled(_modes[level]):
            _seen.append(is_grad_enabled())
            _nest(level + 1)
            _seen.append(is_grad_enabled())
        _seen.append(is_grad_enabled())


def _should_see(level, outer):  # what _nest(level) must record, with the mode `outer` around it
    if level == len(_modes):
        return []
    return [_modes[level], *_should_see(level + 1, _modes[level]), _modes[level], outer]


_nest(0)
assert _seen == _should_see(0, True), (
    "nested set_grad_enabled(mode) blocks: inside each one its own mode holds, and leaving it restores the mode around it"
)
with no_grad():
    with no_grad():
        pass
    assert {"recording": is_grad_enabled()} == {"recording": False}, "leaving an inner no_grad() keeps the outer one in force"
with no_grad():
    with enable_grad():
        assert {"recording": is_grad_enabled()} == {"recording": True}, "enable_grad() inside no_grad() switches recording on"
    assert {"recording": is_grad_enabled()} == {"recording": False}, "leaving enable_grad() returns to the no_grad() around it"


def _fail_inside_no_grad():
    with no_grad():
        raise KeyError("an error inside the block")


try:
    _fail_inside_no_grad()
except KeyError:
    pass
assert {"recording": is_grad_enabled()} == {"recording": True}, "an exception inside no_grad() restores the mode"
with set_grad_enabled(False) as mode:
    assert {"requires_grad": (w * 3).requires_grad} == {"requires_grad": False}, "set_grad_enabled(False) switches recording off"
assert type(mode).__name__ == "set_grad_enabled", "`with set_grad_enabled(...) as m` gives the context manager itself"
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
# L = Σ out · v for a fixed random v, drawn from
# `np.random.default_rng(seed).standard_normal(out.shape)` (one backward
# pass covers every output element at once — a random direction catches a
# wrong entry with probability 1). Perturb each input element in place,
# recompute, restore. Raise a `GradcheckError` that names the input, the
# element, and both values; return True when everything agrees.
#
# ### Task `autograd_gradcheck` (3 points): compare `backward` with central differences
#
# **Checked when graded** (besides the tests below), on inputs whose shapes
# (never square) and values are drawn for you:
#
# * a float32 input that requires grad must be refused with a `TypeError`
# * the `TypeError` should say that float64 is needed
# * a correct op with a broadcast input must pass
# * a correct op through transpose, reshape and indexing must pass
# * a correct op on a non-square input must pass
# * gradcheck must leave every input as it found it (restore each element)
# * a backward that mixes up the output elements must be caught: weight the outputs by a random v
# * inputs that do not require grad are used but not checked

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
# This student's own inputs: two different sizes from 2 to 4 and values drawn per student.
_m, _k = (int(size) for size in check_rng.permutation([2, 3, 4])[:2])
_dtype_message = ""
try:
    _verdict = gradcheck(lambda a: a * 2, Tensor(check_rng.standard_normal(_k).astype(np.float32), requires_grad=True))
except TypeError as err:
    _verdict = type(err).__name__
    _dtype_message = str(err)
assert _verdict == "TypeError", "a float32 input that requires grad must be refused with a TypeError"
assert "float64" in _dtype_message, f"the TypeError should say that float64 is needed; got: {_dtype_message}"
_x = Tensor(check_rng.standard_normal((_m, _k)), requires_grad=True)
_b = Tensor(check_rng.standard_normal(_k), requires_grad=True)
assert gradcheck(lambda a, c: (a + c).sum(axis=0), _x, _b), "a correct op with a broadcast input must pass"
_row = int(check_rng.integers(0, _m))
assert gradcheck(lambda a: a.T.reshape(_m, _k)[_row], _x), "a correct op through transpose, reshape and indexing must pass"
_nc = Tensor(check_rng.uniform(-1.0, 1.0, (_k, _m)), requires_grad=True)
_before = _nc.numpy().copy()
assert gradcheck(lambda a: (a * a).exp(), _nc), "a correct op on a non-square input must pass"
assert np.array_equal(_nc.numpy(), _before), "gradcheck must leave every input as it found it (restore each element)"


class Swapped(Function):  # right in total, wrong per element: hands each output's gradient to the mirrored input
    def forward(self, a):
        return a * 2

    def backward(self, grad):
        return grad[::-1] * 2


try:
    _verdict = gradcheck(lambda a: Swapped.apply(a), Tensor(check_rng.standard_normal(int(check_rng.integers(3, 8))), requires_grad=True))
except GradcheckError as err:
    _verdict = type(err).__name__
assert _verdict == "GradcheckError", (
    "a backward that mixes up the output elements must be caught: weight the outputs by a random v"
)
_constant = Tensor(check_rng.standard_normal((_m, _k)))
assert gradcheck(lambda a, c: a * c, _x, _constant), "inputs that do not require grad are used but not checked"
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
