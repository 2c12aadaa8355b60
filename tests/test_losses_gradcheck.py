"""Every loss of module 04 against float64 central differences, on generated shapes.

One row per loss and configuration: adding a loss means adding a row, and
``test_losses_gradcheck_covers_every_loss`` fails until someone does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from gradcheck_support import functions_defined_in
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyflo import Tensor, gradcheck
from tinyflo.core import losses as L
from tinyflo.core.layers import log_softmax

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
REDUCTION = st.sampled_from(["mean", "sum", "none"])


@dataclass(frozen=True)
class Case:
    """A loss configuration: which names it covers, and how to draw its inputs and call it."""

    name: str
    covers: tuple[str, ...]  # loss functions and Function classes this row exercises
    build: Callable  # (draw, rng) -> (float64 arrays that get requires_grad, fn of those tensors)


def batch(draw, min_dims=1, max_dims=3):
    return tuple(draw(st.lists(st.integers(1, 4), min_size=min_dims, max_size=max_dims)))


def away_from_zero(rng, shape, low=0.2, high=2.0):
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def regression(loss, **kw):
    def build(draw, rng):
        shape, reduction = batch(draw, 0), draw(REDUCTION)
        x = rng.standard_normal(shape)
        y = x + away_from_zero(rng, shape, 0.05, 3.0)  # |d| away from 0 (the kink of |d|)
        return [x, y], lambda a, b: getattr(L, loss)(a, b, reduction=reduction, **kw)
    return build


def classes(draw, rng):
    """(N, C, d...) logits, integer targets with some ignored, per-class weights."""
    n, c = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    spatial = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    shape = (n, c) + spatial
    target = rng.integers(0, c, (n,) + spatial)
    target[rng.uniform(size=target.shape) < 0.2] = -100
    target.flat[0] = 0  # at least one element counts
    return shape, target, rng.uniform(0.2, 2.0, c), draw(REDUCTION)


def cross_entropy_indices(draw, rng, loss=L.cross_entropy):
    shape, target, w, reduction = classes(draw, rng)
    eps = draw(st.sampled_from([0.0, 0.15]))
    weight = draw(st.sampled_from([None, w]))
    return [rng.standard_normal(shape) * 2], lambda x: loss(
        x, target, weight=weight, reduction=reduction, label_smoothing=eps)


def cross_entropy_soft(draw, rng):
    shape, _, w, reduction = classes(draw, rng)
    probs = np.moveaxis(rng.dirichlet(np.ones(shape[1]), (shape[0],) + shape[2:]), -1, 1)
    eps = draw(st.sampled_from([0.0, 0.3]))
    return [rng.standard_normal(shape), probs], lambda x, p: L.cross_entropy(
        x, p, weight=w, reduction=reduction, label_smoothing=eps)


def nll(draw, rng):
    shape, target, w, reduction = classes(draw, rng)
    return [rng.standard_normal(shape)], lambda x: L.nll_loss(x, target, weight=w, reduction=reduction)


def bce(draw, rng):
    shape, reduction = batch(draw, 0), draw(REDUCTION)
    p, t = rng.uniform(0.05, 0.95, shape), rng.uniform(0, 1, shape)
    w = rng.uniform(0.5, 2, shape)
    return [p, t], lambda a, b: L.binary_cross_entropy(a, b, weight=w, reduction=reduction)


def bce_logits(draw, rng):
    shape, reduction = batch(draw, 1), draw(REDUCTION)
    pos_weight = draw(st.sampled_from([None, rng.uniform(0.5, 3, shape[-1:])]))
    weight = rng.uniform(0.5, 2, shape)
    return [rng.standard_normal(shape) * 3, rng.uniform(0, 1, shape)], lambda x, t: (
        L.binary_cross_entropy_with_logits(x, t, weight=weight, reduction=reduction, pos_weight=pos_weight))


def focal(draw, rng):
    shape, reduction = batch(draw, 0), draw(REDUCTION)
    alpha, gamma = draw(st.sampled_from([0.25, -1.0])), draw(st.sampled_from([0.0, 1.5, 2.0]))
    t = (rng.uniform(size=shape) > 0.5).astype(float)
    return [rng.standard_normal(shape) * 2], lambda x: L.sigmoid_focal_loss(x, t, alpha, gamma, reduction)


def kl(draw, rng):
    shape = batch(draw, 2, 3)
    reduction = draw(st.sampled_from(["mean", "sum", "none", "batchmean"]))
    log_target = draw(st.booleans())
    target = rng.standard_normal(shape) if log_target else rng.uniform(0.05, 1, shape)
    return [rng.standard_normal(shape), target], lambda x, t: L.kl_div(
        log_softmax(x, axis=-1), t, reduction=reduction, log_target=log_target)


def poisson(draw, rng):
    shape, reduction = batch(draw, 0), draw(REDUCTION)
    log_input, full = draw(st.booleans()), draw(st.booleans())
    counts = rng.poisson(2.0, shape).astype(float)
    x = rng.standard_normal(shape) if log_input else rng.uniform(0.2, 3, shape)
    return [x], lambda a: L.poisson_nll_loss(a, counts, log_input, full, reduction=reduction)


def triplet(draw, rng):
    shape, reduction = batch(draw, 1, 2), draw(REDUCTION)
    p, swap = draw(st.sampled_from([1, 2, 3])), draw(st.booleans())
    margin = 10.0  # large enough that the hinge is active: the gradient is not identically 0
    return [rng.standard_normal(shape) for _ in range(3)], lambda a, q, n: L.triplet_margin_loss(
        a, q, n, margin=margin, p=p, swap=swap, reduction=reduction)


def cosine(draw, rng):
    shape, reduction = batch(draw, 1, 2), draw(REDUCTION)
    target = rng.choice([-1, 1], shape[:-1])
    return [rng.standard_normal(shape), rng.standard_normal(shape)], lambda a, b: L.cosine_embedding_loss(
        a, b, target, margin=-2.0, reduction=reduction)


def hinge(draw, rng):
    shape, reduction = batch(draw, 0), draw(REDUCTION)
    target = rng.choice([-1.0, 1.0], shape)
    return [rng.uniform(0.1, 0.9, shape)], lambda x: L.hinge_embedding_loss(x, target, margin=1.0, reduction=reduction)


def ranking(draw, rng):
    shape, reduction = batch(draw, 0, 1), draw(REDUCTION)
    target = rng.choice([-1.0, 1.0], shape)
    return [rng.standard_normal(shape), rng.standard_normal(shape)], lambda a, b: L.margin_ranking_loss(
        a, b, target, margin=10.0, reduction=reduction)


def ctc(draw, rng, normalised=True):
    n, c = draw(st.integers(1, 3)), draw(st.integers(2, 5))
    blank = draw(st.integers(0, c - 1))
    labels = [k for k in range(c) if k != blank]
    target_lengths = np.array([draw(st.integers(0, 3)) for _ in range(n)])
    input_lengths = np.array([2 * s + 1 + draw(st.integers(0, 2)) for s in target_lengths])  # always feasible
    steps = int(input_lengths.max())
    padded = rng.choice(labels, (n, max(int(target_lengths.max()), 1)))
    concatenated = draw(st.booleans())
    targets = np.concatenate([padded[i, :s] for i, s in enumerate(target_lengths)]) if concatenated else padded
    reduction, zero_infinity = draw(REDUCTION), draw(st.booleans())
    x = rng.standard_normal((steps, n, c))

    def fn(a):
        lp = log_softmax(a, axis=2) if normalised else a
        return L.ctc_loss(lp, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    return [x], fn


CASES = [
    Case("mse", ("mse_loss",), regression("mse_loss")),
    Case("l1", ("l1_loss",), regression("l1_loss")),
    Case("smooth-l1", ("smooth_l1_loss",), regression("smooth_l1_loss", beta=0.7)),
    Case("smooth-l1-beta0", ("smooth_l1_loss",), regression("smooth_l1_loss", beta=0.0)),
    Case("huber", ("huber_loss",), regression("huber_loss", delta=0.6)),
    Case("cross-entropy", ("cross_entropy", "CrossEntropyFn"), cross_entropy_indices),
    Case("cross-entropy-composed", ("cross_entropy",),  # the graded composition the fused node replaces
         lambda draw, rng: cross_entropy_indices(draw, rng, L._composed_cross_entropy)),
    Case("cross-entropy-soft", ("cross_entropy",), cross_entropy_soft),
    Case("nll", ("nll_loss",), nll),
    Case("bce", ("binary_cross_entropy", "BinaryCrossEntropyFn"), bce),
    Case("bce-with-logits", ("binary_cross_entropy_with_logits",), bce_logits),
    Case("focal", ("sigmoid_focal_loss",), focal),
    Case("kl-div", ("kl_div",), kl),
    Case("poisson", ("poisson_nll_loss",), poisson),
    Case("triplet", ("triplet_margin_loss",), triplet),
    Case("cosine-embedding", ("cosine_embedding_loss",), cosine),
    Case("hinge-embedding", ("hinge_embedding_loss",), hinge),
    Case("margin-ranking", ("margin_ranking_loss",), ranking),
    Case("ctc", ("ctc_loss", "CTCLossFn"), ctc),
    Case("ctc-unnormalised", ("ctc_loss", "CTCLossFn"), lambda draw, rng: ctc(draw, rng, normalised=False)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_losses_gradcheck_every_loss(case: Case, data, seed, device):
    arrays, fn = case.build(data.draw, np.random.default_rng(seed))
    inputs = [Tensor(a, device=device, requires_grad=True) for a in arrays]
    assert gradcheck(fn, *inputs)


def test_losses_gradcheck_covers_every_loss():
    """Each public loss function and each Function subclass of core.losses has a row above."""
    losses = {
        name for name, obj in vars(L).items()
        if inspect.isfunction(obj) and obj.__module__ == L.__name__ and not name.startswith("_")
    }
    names = losses | functions_defined_in(L)
    covered = {name for case in CASES for name in case.covers}
    assert names - covered == set(), f"losses without a gradcheck row: {sorted(names - covered)}"
