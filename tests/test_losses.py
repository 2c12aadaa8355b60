"""Module 04's losses against PyTorch's values and gradients, stored by scripts/make_loss_fixtures.py.

No torch here: tests/fixtures/losses/<loss>.npz holds PyTorch's answers in float64 (see the
script for the format). Plus the properties PyTorch parity does not show: extreme logits,
dtypes, errors, devices.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinyflo import Tensor
from tinyflo.core import losses as L
from tinyflo.core.layers import log_softmax
from tinyflo.core.tensor import ShapeError

FIXTURES = Path(__file__).parent / "fixtures" / "losses"

TASKS = {
    "losses_regression": ("mse_loss", "l1_loss"),
    "losses_huber": ("smooth_l1_loss", "huber_loss"),
    "losses_nll": ("nll_loss",),
    "losses_cross_entropy": ("cross_entropy",),
    "losses_binary": ("binary_cross_entropy",),
    "losses_bce_logits": ("binary_cross_entropy_with_logits",),
    "losses_focal": ("sigmoid_focal_loss",),
    "losses_divergence": ("kl_div",),
    "losses_poisson": ("poisson_nll_loss",),
    "losses_triplet": ("triplet_margin_loss",),
    "losses_cosine": ("cosine_embedding_loss",),
    "losses_margin": ("hinge_embedding_loss", "margin_ranking_loss"),
    "losses_ctc": ("ctc_loss",),
}
LOSSES = [name for names in TASKS.values() for name in names]


def load_cases(loss: str) -> list[tuple[str, dict, dict]]:
    """(case name, its description, its arrays) for every stored case of one loss."""
    with np.load(FIXTURES / f"{loss}.npz") as f:
        arrays = {k: f[k] for k in f.files}
    cases = json.loads(str(arrays.pop("cases")))
    return [
        (case["name"], case, {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(case["name"] + "/")})
        for case in cases
    ]


def params(task: str) -> list:
    return [pytest.param(loss, name, case, arrays, id=f"{loss}-{name}")
            for loss in TASKS[task] for name, case, arrays in load_cases(loss)]


def replay(loss: str, case: dict, arrays: dict, device: str) -> None:
    """Call tinyflo's loss as PyTorch was called; compare the value and every stored gradient."""
    tensors = {
        k.split("/", 1)[1]: Tensor(a, device=device, requires_grad=k.split("/", 1)[1] in case["grad"])
        for k, a in arrays.items() if k.startswith("in/")
    }
    first = tensors["arg0"]
    if case["transform"]:
        first = log_softmax(first, axis=int(case["transform"].split(":")[1]))
    positional = [first] + [tensors[f"arg{i}"] for i in range(1, case["nargs"])]
    out = getattr(L, loss)(*positional, **case["kwargs"], **{k: tensors[k] for k in case["tensor_kwargs"]})
    assert out.shape == arrays["out"].shape
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), arrays["out"], rtol=1e-9, atol=1e-10)
    if not case["grad"]:
        return
    (out * Tensor(arrays["v"], device=device)).sum().backward()
    for name in case["grad"]:
        expected = arrays[f"grad/{name}"]
        finite = np.isfinite(expected)  # PyTorch's kl_div gives NaN for d/d target at target = 0
        got = tensors[name].grad.numpy()
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-7, atol=1e-9, err_msg=f"grad of {name}")


@pytest.mark.task("losses_regression")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_regression"))
def test_losses_regression_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_huber")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_huber"))
def test_losses_huber_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_nll")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_nll"))
def test_losses_nll_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_cross_entropy"))
def test_losses_cross_entropy_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_binary")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_binary"))
def test_losses_binary_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_bce_logits")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_bce_logits"))
def test_losses_bce_logits_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_focal")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_focal"))
def test_losses_focal_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_divergence")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_divergence"))
def test_losses_divergence_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_poisson")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_poisson"))
def test_losses_poisson_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_triplet")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_triplet"))
def test_losses_triplet_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_cosine")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_cosine"))
def test_losses_cosine_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_margin")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_margin"))
def test_losses_margin_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


@pytest.mark.task("losses_ctc")
@pytest.mark.parametrize("loss, name, case, arrays", params("losses_ctc"))
def test_losses_ctc_matches_pytorch(loss, name, case, arrays, device):
    replay(loss, case, arrays, device)


def test_every_loss_has_fixtures_and_a_task():
    """Each public loss of core.losses is in TASKS and has a fixture file with every reduction."""
    public = {name for name, obj in vars(L).items()
              if callable(obj) and not name.startswith("_") and not isinstance(obj, type)
              and getattr(obj, "__module__", "") == L.__name__}
    assert public == set(LOSSES), f"losses without a row in TASKS: {sorted(public - set(LOSSES))}"
    for loss in LOSSES:
        reductions = {case["kwargs"].get("reduction", "mean") for _, case, _ in load_cases(loss)}
        assert {"mean", "sum", "none"} <= reductions, f"{loss}: fixtures miss a reduction"


def test_fixtures_stay_small():
    assert sum(p.stat().st_size for p in FIXTURES.glob("*.npz")) < 1_000_000


# ----- what parity with PyTorch does not show ---------------------------------------------

EXTREME = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_losses_cross_entropy_extreme_logits_are_finite(dtype, device):
    x = Tensor(EXTREME, dtype=dtype, device=device, requires_grad=True)
    loss = L.cross_entropy(x, Tensor([1, 0], device=device), label_smoothing=0.1)
    loss.backward()
    assert np.isfinite(loss.item()) and np.all(np.isfinite(x.grad.numpy()))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("loss", [
    pytest.param("binary_cross_entropy_with_logits", marks=pytest.mark.task("losses_bce_logits")),
    pytest.param("sigmoid_focal_loss", marks=pytest.mark.task("losses_focal")),
])
def test_losses_bce_logits_and_focal_extreme_logits_are_finite(loss, dtype, device):
    x = Tensor(EXTREME, dtype=dtype, device=device, requires_grad=True)
    target = Tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 1.0]], device=device)
    out = getattr(L, loss)(x, target, reduction="sum")
    out.backward()
    assert np.isfinite(out.item()) and np.all(np.isfinite(x.grad.numpy()))


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("name, case, arrays", [pytest.param(*c, id=c[0]) for c in load_cases("cross_entropy")])
def test_losses_cross_entropy_composition_matches_pytorch_too(name, case, arrays, device):
    """The graded composition, which the fused CrossEntropyFn replaces for class indices, on the same cases."""
    replay("_composed_cross_entropy", case, arrays, device)


@pytest.mark.task("losses_cross_entropy")
def test_losses_cross_entropy_class_indices_are_one_graph_node_keeping_only_probabilities():
    z = Tensor(np.random.default_rng(0).standard_normal((32, 10)).astype(np.float32), requires_grad=True)
    target = np.arange(32) % 10
    for reduction in ("mean", "sum", "none"):
        fn = L.cross_entropy(z, target, reduction=reduction, label_smoothing=0.1)._ctx
        if reduction == "none":
            fn = fn.inputs[0]._ctx  # the loss of each row comes back through a free reshape
        assert type(fn).__name__ == "CrossEntropyFn" and len(fn.inputs) == 1 and fn.inputs[0] is z
        assert fn.saved[0].shape == (32, 10) and fn.saved[0].dtype == np.float32, "the probabilities"
        assert all(a is None or a.size <= 32 for a in fn.saved[1:]), "nothing else of size N × C is kept"
    soft = L.cross_entropy(z, np.full((32, 10), 0.1, dtype=np.float32))
    assert type(soft._ctx).__name__ != "CrossEntropyFn", "probability targets go through the composition"


@pytest.mark.task("losses_bce_logits")
def test_losses_bce_logits_keeps_learning_where_bce_of_sigmoid_saturates():
    x = Tensor([40.0], requires_grad=True)  # σ(40) is 1.0 in float32: bce(σ(x)) is stuck at its clamp
    L.binary_cross_entropy_with_logits(x, [0.0]).backward()
    assert x.grad.item() == pytest.approx(1.0)
    y = Tensor([40.0], requires_grad=True)
    L.binary_cross_entropy(y.sigmoid(), [0.0]).backward()
    assert y.grad.item() == 0.0


@pytest.mark.task("losses_divergence")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_losses_divergence_kl_of_log_softmax_of_extreme_logits_is_finite(dtype, device):
    x = Tensor(EXTREME, dtype=dtype, device=device, requires_grad=True)
    target = Tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=dtype, device=device)
    out = L.kl_div(log_softmax(x, axis=1), target, reduction="batchmean")
    out.backward()
    assert np.isfinite(out.item()) and np.all(np.isfinite(x.grad.numpy()))


def _float32_calls(device, leaves):
    rng = np.random.default_rng(0)

    def t(*shape, positive=False):
        values = rng.uniform(0.1, 0.9, shape) if positive else rng.standard_normal(shape)
        leaves.append(Tensor(values, dtype="float32", device=device, requires_grad=True))
        return leaves[-1]

    ints = lambda values: Tensor(values, device=device)
    return {
        "mse_loss": lambda: L.mse_loss(t(3), t(3)),
        "l1_loss": lambda: L.l1_loss(t(3), np.zeros(3)),  # a float64 array target does not widen
        "smooth_l1_loss": lambda: L.smooth_l1_loss(t(3), t(3)),
        "huber_loss": lambda: L.huber_loss(t(3), t(3)),
        "poisson_nll_loss": lambda: L.poisson_nll_loss(t(3), [1.0, 2.0, 0.0], full=True),
        "cross_entropy": lambda: L.cross_entropy(t(2, 3), ints([0, 2]), weight=np.ones(3), label_smoothing=0.1),
        "nll_loss": lambda: L.nll_loss(t(2, 3), ints([0, 2])),
        "binary_cross_entropy": lambda: L.binary_cross_entropy(t(3, positive=True), t(3, positive=True)),
        "binary_cross_entropy_with_logits": lambda: L.binary_cross_entropy_with_logits(t(3), t(3), pos_weight=[2.0]),
        "sigmoid_focal_loss": lambda: L.sigmoid_focal_loss(t(3), t(3, positive=True), reduction="mean"),
        "kl_div": lambda: L.kl_div(t(2, 3), t(2, 3, positive=True), reduction="batchmean"),
        "triplet_margin_loss": lambda: L.triplet_margin_loss(t(2, 3), t(2, 3), t(2, 3)),
        "cosine_embedding_loss": lambda: L.cosine_embedding_loss(t(2, 3), t(2, 3), ints([1, -1])),
        "hinge_embedding_loss": lambda: L.hinge_embedding_loss(t(3), [1.0, -1.0, 1.0]),
        "margin_ranking_loss": lambda: L.margin_ranking_loss(t(3), t(3), [1.0, -1.0, 1.0]),
        "ctc_loss": lambda: L.ctc_loss(t(5, 2, 4), ints([[1, 2], [3, 3]]), [5, 4], [2, 2]),
    }


@pytest.mark.parametrize("loss", LOSSES)
def test_float32_in_float32_out(loss, device):
    leaves = []
    out = _float32_calls(device, leaves)[loss]()
    assert out.dtype == np.float32 and out.device is Tensor([0.0], device=device).device
    out.backward()
    assert leaves and all(t.grad is None or t.grad.dtype == np.float32 for t in leaves)
    assert leaves[0].grad is not None


def _example_args(loss: str) -> tuple:
    """Small valid positional arguments for ``loss``."""
    return {
        "ctc_loss": (Tensor(np.log(np.full((3, 2, 3), 1 / 3))), [[1, 2], [2, 0]], [3, 2], [2, 1]),
        "cross_entropy": (Tensor([[0.5, 0.1, -1.0], [2.0, 0.0, 0.3]]), [0, 1]),
        "nll_loss": (Tensor(np.log([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])), [0, 1]),
        "kl_div": (Tensor(np.log([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])), [[0.2, 0.2, 0.6], [0.3, 0.3, 0.4]]),
        "triplet_margin_loss": (Tensor([[1.0, 2.0]]), Tensor([[0.0, 2.5]]), Tensor([[1.5, 1.5]])),
        "cosine_embedding_loss": (Tensor([[1.0, 2.0], [0.5, -1.0]]), Tensor([[0.0, 2.5], [1.0, 1.0]]), [1, -1]),
        "margin_ranking_loss": (Tensor([0.3, 0.7]), Tensor([0.5, -0.1]), [1.0, -1.0]),
    }.get(loss, (Tensor([0.3, 0.6]), [1.0, 0.0]))


@pytest.mark.parametrize("loss", LOSSES)
def test_a_bad_reduction_names_the_argument(loss):
    with pytest.raises(ValueError, match="reduction.*'avg'"):
        getattr(L, loss)(*_example_args(loss), reduction="avg")


@pytest.mark.task("losses_regression")
def test_losses_regression_shape_mismatch_is_an_error():
    with pytest.raises(ShapeError, match=r"\(4,\).*\(4, 1\)"):
        L.mse_loss(Tensor(np.ones((4, 1))), np.ones(4))


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("loss", ["cross_entropy", "composed", "nll_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_class_targets_checked_without_a_read(request, loss, reduction, device):
    """Where reads wait (a GPU), a target out of range makes its loss NaN instead of raising."""
    fn = {"cross_entropy": L.cross_entropy, "composed": L._composed_cross_entropy, "nll_loss": L.nll_loss}[loss]
    x = Tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), device=device)
    good, bad = [0, 2, -100, 1], [0, 3, -100, 1]
    eager = fn(x, good, reduction=reduction).numpy()
    request.getfixturevalue("reads_wait")
    out = fn(x, good, reduction=reduction)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), eager)
    poisoned = fn(x, bad, reduction=reduction).numpy()
    if reduction == "none":
        assert np.isnan(poisoned[1]) and np.array_equal(np.delete(poisoned, 1), np.delete(eager, 1))
    else:
        assert np.isnan(poisoned)


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("loss", ["cross_entropy", "composed"])
@pytest.mark.parametrize("options", [{"weight": [0.5, 2.0, 1.0]}, {"label_smoothing": 0.2},
                                     {"weight": [0.5, 2.0, 1.0], "label_smoothing": 0.1}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_losses_class_targets_without_a_read_weights_smoothing_gradients(request, loss, options, dtype):
    """(N, C, d) logits: valid targets give the eager values and gradients; one out of range, NaN in both."""
    fn = {"cross_entropy": L.cross_entropy, "composed": L._composed_cross_entropy}[loss]
    logits = np.random.default_rng(1).standard_normal((2, 3, 2)).astype(dtype)
    good, bad = np.array([[0, 2], [-100, 1]]), np.array([[0, 2], [-100, 5]])

    def run(target):
        x = Tensor(logits, requires_grad=True)
        out = fn(x, target, **options)
        out.backward()
        return out.numpy(), x.grad.numpy()

    eager = run(good)
    request.getfixturevalue("reads_wait")
    value, grad = run(good)
    assert value.dtype == grad.dtype == dtype
    np.testing.assert_array_equal(value, eager[0])
    np.testing.assert_array_equal(grad, eager[1])
    value, grad = run(bad)
    assert np.isnan(value) and np.isnan(grad).any()


@pytest.mark.task("losses_cross_entropy")
def test_losses_cross_entropy_errors_name_what_is_wrong():
    x = Tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError, match="not a class index in \\[0, 3\\)"):
        L.cross_entropy(x, [0, 3])
    with pytest.raises(ShapeError, match=r"target of shape \(2,\)"):
        L.cross_entropy(x, [0, 1, 2])
    with pytest.raises(ShapeError, match="weight must have shape"):
        L.nll_loss(x, [0, 1], weight=[1.0, 2.0])
    with pytest.raises(ValueError, match="label_smoothing"):
        L.cross_entropy(x, [0, 1], label_smoothing=1.5)
    with pytest.raises(TypeError, match="Tensor"):
        L.cross_entropy(np.zeros((2, 3)), [0, 1])


@pytest.mark.task("losses_cross_entropy")
def test_losses_cross_entropy_mean_ignores_ignored_elements():
    x = Tensor(np.random.default_rng(0).standard_normal((4, 3)))
    full = L.cross_entropy(x, [0, 1, 2, 1], reduction="none").numpy()
    assert L.cross_entropy(x, [0, -100, 2, -100]).item() == pytest.approx(full[[0, 2]].mean())


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("loss", [L.cross_entropy, L._composed_cross_entropy,
                                  lambda z, t, **kw: L.nll_loss(log_softmax(z, axis=1), t, **kw)])
def test_losses_cross_entropy_ignore_index_that_is_a_class(loss):
    """ignore_index=0 (a padding token) lies inside [0, C): those rows drop out of value and gradient."""
    rng = np.random.default_rng(1)
    z = Tensor(rng.standard_normal((5, 4)), requires_grad=True)
    target = [0, 3, 0, 1, 2]
    out = loss(z, target, ignore_index=0)
    out.backward()
    kept = Tensor(z.numpy()[[1, 3, 4]])
    assert out.item() == pytest.approx(L.cross_entropy(kept, [3, 1, 2]).item())
    assert np.all(z.grad.numpy()[[0, 2]] == 0) and np.all(z.grad.numpy()[[1, 3, 4]] != 0)


@pytest.mark.task("losses_ctc")
def test_losses_ctc_errors_name_what_is_wrong():
    lp = Tensor(np.zeros((4, 2, 3)))
    with pytest.raises(ShapeError, match=r"\(T, N, C\)"):
        L.ctc_loss(Tensor(np.zeros((4, 3))), [[1]], [4], [1])
    with pytest.raises(ValueError, match="input_lengths"):
        L.ctc_loss(lp, [[1], [2]], [5, 4], [1, 1])
    with pytest.raises(ValueError, match="other than blank=0"):
        L.ctc_loss(lp, [[0], [2]], [4, 4], [1, 1])
    with pytest.raises(ShapeError, match="sum to 3"):
        L.ctc_loss(lp, [1, 2], [4, 4], [1, 2])
    with pytest.raises(ValueError, match="blank"):
        L.ctc_loss(lp, [[1], [2]], [4, 4], [1, 1], blank=3)


@pytest.mark.task("losses_ctc_backward")
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-9), ("float32", 1e-2)])
def test_losses_ctc_backward_long_sequences_do_not_underflow(dtype, rtol):
    steps = 500  # (1/3)^500 is 1e-239: far below float32, and close to float64's end
    lp = Tensor(np.full((steps, 1, 3), np.log(1 / 3)), dtype=dtype, requires_grad=True)
    loss = L.ctc_loss(lp, [[1, 2, 1]], [steps], [3], reduction="sum")
    loss.backward()
    assert np.isfinite(loss.item()) and np.all(np.isfinite(lp.grad.numpy()))
    # every step's occupancy is a probability distribution over symbols: the gradient sums to -1
    # (in float32, log-probabilities near -550 keep only about three digits of exp(difference))
    np.testing.assert_allclose(lp.grad.numpy().sum(axis=2), -1.0, rtol=rtol)


MODULES = {
    "MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss",
    "PoissonNLLLoss": "poisson_nll_loss", "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss",
    "BCELoss": "binary_cross_entropy", "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "KLDivLoss": "kl_div", "TripletMarginLoss": "triplet_margin_loss", "CosineEmbeddingLoss": "cosine_embedding_loss",
    "HingeEmbeddingLoss": "hinge_embedding_loss", "MarginRankingLoss": "margin_ranking_loss", "CTCLoss": "ctc_loss",
}


def test_every_loss_has_a_module_that_calls_it():
    """Each Module wrapper, built with its defaults, gives its function's value with the same defaults."""
    from tinyflo.core.layers import Module

    wrappers = {name for name, obj in vars(L).items()
                if isinstance(obj, type) and issubclass(obj, Module) and obj.__module__ == L.__name__
                and not name.startswith("_")}
    assert wrappers == set(MODULES)
    assert set(MODULES.values()) == set(LOSSES) - {"sigmoid_focal_loss"}  # torchvision has no module for it
    for name, function in MODULES.items():
        args = _example_args(function)
        assert getattr(L, name)()(*args).item() == pytest.approx(getattr(L, function)(*args).item()), name


def test_loss_modules_keep_options_and_weights():
    x = Tensor(np.random.default_rng(0).standard_normal((4, 3)))
    y = [0, 2, -100, 1]
    weight = Tensor([0.5, 1.0, 2.0])
    criterion = L.CrossEntropyLoss(weight=weight, label_smoothing=0.1, reduction="sum")
    assert criterion(x, y).item() == pytest.approx(
        L.cross_entropy(x, y, weight=weight, label_smoothing=0.1, reduction="sum").item())
    assert "weight" in dict(criterion.named_buffers()) and "label_smoothing=0.1" in repr(criterion)
    assert L.KLDivLoss(reduction="batchmean")(x, x.exp()).shape == ()
    ctc = L.CTCLoss(blank=2, zero_infinity=True)
    lp = Tensor(np.log(np.full((3, 1, 3), 1 / 3)))
    assert ctc(lp, [[0, 1]], [3], [2]).item() == pytest.approx(L.ctc_loss(lp, [[0, 1]], [3], [2], blank=2).item())
    with pytest.raises(ValueError, match="MSELoss got reduction=.avg.; expected one of .mean., .sum., .none."):
        L.MSELoss(reduction="avg")


@pytest.mark.task("losses_cross_entropy")
def test_losses_cross_entropy_float_class_indices_are_explained():
    with pytest.raises(ShapeError, match="class indices must be integers"):
        L.cross_entropy(Tensor(np.zeros((2, 3))), [0.0, 1.0])


@pytest.mark.task("losses_cross_entropy")
@pytest.mark.parametrize("loss", [L.cross_entropy, L._composed_cross_entropy,
                                  lambda z, t: L.nll_loss(log_softmax(z, axis=1), t)])
def test_losses_cross_entropy_all_targets_ignored_gives_no_gradient(loss):
    """A batch of padding only must not poison the parameters with NaN."""
    z = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    with np.errstate(all="raise"):
        out = loss(z, [-100, -100, -100])
        out.backward()
    assert out.item() == 0.0 and np.all(z.grad.numpy() == 0)


@pytest.mark.task("losses_binary")
def test_losses_binary_float16_gradient_stays_finite_at_the_clamp():
    p = Tensor(np.array([0.0, 1.0], np.float16), requires_grad=True)
    L.binary_cross_entropy(p, [1.0, 0.0], reduction="sum").backward()
    assert p.grad.dtype == np.float16 and np.all(np.isfinite(p.grad.numpy()))


@pytest.mark.task("losses_cross_entropy")
def test_losses_cross_entropy_module_weights_are_buffers():
    criterion = L.CrossEntropyLoss(weight=[1.0, 2.0, 3.0])
    assert "weight" in criterion.state_dict() and criterion.weight.dtype == np.float32
