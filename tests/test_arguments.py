"""Bad arguments of modules 03-05 (and of the settings of modules 10's Conv2d) are refused in one line
naming the owner, the argument and the value;
losses of empty input follow PyTorch (mean NaN, sum 0, none empty) without NumPy warnings."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

import tinyflo
from tinyflo import Tensor
from tinyflo.core import data
from tinyflo.core import layers as nn
from tinyflo.core import losses as L
from tinyflo.core.conv import BatchNorm2d, Conv2d


def _x() -> Tensor:
    return Tensor(np.ones((2, 3), np.float32))


def _t() -> Tensor:
    return tinyflo.zeros(4, 3)


def _ce(**kw):
    return L.cross_entropy(_x(), [0, 1], **kw)


def _pair(f, **kw):
    return f(_x(), _x(), **kw)


def _loader(**kw):
    return data.DataLoader(data.TensorDataset(np.arange(5)), **kw)


# (call, owner, argument, value, expected)
BAD = [
    # module 03: layers
    (lambda: nn.Linear(-1, 3), "Linear", "in_features", -1, "a positive integer"),
    (lambda: nn.Linear(3, True), "Linear", "out_features", True, "a positive integer"),
    (lambda: nn.Linear(3, 2.0), "Linear", "out_features", 2.0, "a positive integer"),
    (lambda: nn.Linear(3, 2, bias="yes"), "Linear", "bias", "yes", "True or False"),
    (lambda: nn.Embedding(0, 3), "Embedding", "num_embeddings", 0, "a positive integer"),
    (lambda: nn.Embedding(3, 2.5), "Embedding", "embedding_dim", 2.5, "a positive integer"),
    (lambda: nn.Dropout("0.5"), "Dropout", "p", "0.5", "a number in [0, 1]"),
    (lambda: nn.Dropout(1.5), "Dropout", "p", 1.5, "a number in [0, 1]"),
    (lambda: nn.Dropout(math.nan), "Dropout", "p", math.nan, "a number in [0, 1]"),
    (lambda: nn.LeakyReLU("0.1"), "LeakyReLU", "negative_slope", "0.1", "a number"),
    (lambda: nn.ELU(None), "ELU", "alpha", None, "a number"),
    (lambda: nn.GELU("fast"), "GELU", "approximate", "fast", "'none' or 'tanh'"),
    (lambda: nn.Softplus(beta=0), "Softplus", "beta", 0, "a number > 0"),
    (lambda: nn.Softplus(threshold="20"), "Softplus", "threshold", "20", "a number"),
    (lambda: nn.Softmax(axis=1.0), "Softmax", "axis", 1.0, "an integer"),
    (lambda: nn.LogSoftmax(axis=None), "LogSoftmax", "axis", None, "an integer"),
    (lambda: nn.Flatten(start_axis="1"), "Flatten", "start_axis", "1", "an integer"),
    (lambda: nn.PReLU(num_parameters=0), "PReLU", "num_parameters", 0, "a positive integer"),
    (lambda: nn.PReLU(init="a"), "PReLU", "init", "a", "a number"),
    (lambda: nn.LayerNorm(0), "LayerNorm", "normalized_shape", 0, "a positive integer or a tuple of them"),
    (lambda: nn.LayerNorm(True), "LayerNorm", "normalized_shape", True, "a positive integer or a tuple of them"),
    (lambda: nn.LayerNorm((4, -1)), "LayerNorm", "normalized_shape", (4, -1), "a positive integer or a tuple of them"),
    (lambda: nn.LayerNorm(4, eps=-1e-5), "LayerNorm", "eps", -1e-5, "a number >= 0"),
    (lambda: nn.LayerNorm(4, elementwise_affine=None), "LayerNorm", "elementwise_affine", None, "True or False"),
    (lambda: nn.BatchNorm1d(0), "BatchNorm1d", "num_features", 0, "a positive integer"),
    (lambda: nn.BatchNorm1d(4, eps="1e-5"), "BatchNorm1d", "eps", "1e-5", "a number >= 0"),
    (lambda: nn.BatchNorm1d(4, momentum=1.5), "BatchNorm1d", "momentum", 1.5, "a number in [0, 1] or None"),
    (lambda: nn.BatchNorm1d(4, affine=1), "BatchNorm1d", "affine", 1, "True or False"),
    (lambda: BatchNorm2d(-3), "BatchNorm2d", "num_features", -3, "a positive integer"),
    (lambda: nn.dropout(_x(), p=-0.1), "dropout", "p", -0.1, "a number in [0, 1]"),
    (lambda: nn.dropout(_x(), training="no"), "dropout", "training", "no", "True or False"),
    (lambda: nn.elu(_x(), alpha="1"), "elu", "alpha", "1", "a number"),
    (lambda: nn.softplus(_x(), beta=-1.0), "softplus", "beta", -1.0, "a number > 0"),
    (lambda: nn.gelu(_x(), approximate="fast"), "gelu", "approximate", "fast", "'none' or 'tanh'"),
    (lambda: nn.leaky_relu(_x(), None), "leaky_relu", "negative_slope", None, "a number"),
    (lambda: nn.normal_(_t(), std=-1.0), "normal_", "std", -1.0, "a number >= 0"),
    (lambda: nn.uniform_(_t(), a="0"), "uniform_", "a", "0", "a number"),
    (lambda: nn.constant_(_t(), "x"), "constant_", "value", "x", "a number"),
    (lambda: nn.trunc_normal_(_t(), std=-1.0), "trunc_normal_", "std", -1.0, "a number >= 0"),
    (lambda: nn.kaiming_uniform_(_t(), a="5"), "kaiming_uniform_", "a", "5", "a number"),
    (lambda: nn.kaiming_normal_(_t(), mode="fan"), "init", "mode", "fan", "'fan_in' or 'fan_out'"),
    (lambda: nn.xavier_uniform_(_t(), gain=None), "xavier_uniform_", "gain", None, "a number"),
    (lambda: nn.orthogonal_(_t(), gain="1"), "orthogonal_", "gain", "1", "a number"),
    (lambda: nn.fan_in_uniform_(_t(), fan_in=-1), "fan_in_uniform_", "fan_in", -1, "an integer >= 0"),
    (lambda: nn.calculate_gain("leaky_relu", "x"), "calculate_gain", "param", "x", "a number"),
    (lambda: nn.layer_norm(_x(), 0), "layer_norm", "normalized_shape", 0, "a positive integer or a tuple of them"),
    (lambda: nn.layer_norm(_x(), 3, eps=-1.0), "layer_norm", "eps", -1.0, "a number >= 0"),
    (lambda: nn.scaled_dot_product_attention(_x(), _x(), _x(), scale="0.1"), "scaled_dot_product_attention", "scale",
     "0.1", "a number"),
    (lambda: Conv2d(1, 2, 3, bias="yes"), "Conv2d", "bias", "yes", "True or False"),
    (lambda: nn.Linear(2, 1).train("yes"), "Linear.train", "mode", "yes", "True or False"),
    (lambda: nn.Linear(2, 1).load_state_dict({}, strict="no"), "Linear.load_state_dict", "strict", "no",
     "True or False"),
    (lambda: nn.Linear(2, 1).register_buffer("b", None, persistent="no"), "register_buffer", "persistent", "no",
     "True or False"),
    # module 04: losses, as modules and as functions
    (lambda: L.MSELoss(reduction="avg"), "MSELoss", "reduction", "avg", "one of 'mean', 'sum', 'none'"),
    (lambda: L.KLDivLoss(reduction="batch"), "KLDivLoss", "reduction", "batch",
     "one of 'mean', 'sum', 'none', 'batchmean'"),
    (lambda: L.SmoothL1Loss(beta=-1), "SmoothL1Loss", "beta", -1, "a number >= 0"),
    (lambda: L.HuberLoss(delta=0), "HuberLoss", "delta", 0, "a number > 0"),
    (lambda: L.CrossEntropyLoss(label_smoothing=1.5), "CrossEntropyLoss", "label_smoothing", 1.5,
     "a number in [0, 1]"),
    (lambda: L.CrossEntropyLoss(ignore_index=1.0), "CrossEntropyLoss", "ignore_index", 1.0, "an integer"),
    (lambda: L.NLLLoss(ignore_index="pad"), "NLLLoss", "ignore_index", "pad", "an integer"),
    (lambda: L.TripletMarginLoss(p=0), "TripletMarginLoss", "p", 0, "a number > 0"),
    (lambda: L.TripletMarginLoss(swap=1), "TripletMarginLoss", "swap", 1, "True or False"),
    (lambda: L.CosineEmbeddingLoss(margin="0"), "CosineEmbeddingLoss", "margin", "0", "a number"),
    (lambda: L.HingeEmbeddingLoss(margin=None), "HingeEmbeddingLoss", "margin", None, "a number"),
    (lambda: L.MarginRankingLoss(margin=math.nan), "MarginRankingLoss", "margin", math.nan, "a number"),
    (lambda: L.PoissonNLLLoss(log_input=1), "PoissonNLLLoss", "log_input", 1, "True or False"),
    (lambda: L.PoissonNLLLoss(eps=-1e-8), "PoissonNLLLoss", "eps", -1e-8, "a number >= 0"),
    (lambda: L.KLDivLoss(log_target="no"), "KLDivLoss", "log_target", "no", "True or False"),
    (lambda: L.CTCLoss(blank=-1), "CTCLoss", "blank", -1, "an integer >= 0"),
    (lambda: L.CTCLoss(zero_infinity=0), "CTCLoss", "zero_infinity", 0, "True or False"),
    (lambda: _ce(label_smoothing=-0.1), "cross_entropy", "label_smoothing", -0.1, "a number in [0, 1]"),
    (lambda: _ce(ignore_index=1.5), "cross_entropy", "ignore_index", 1.5, "an integer"),
    (lambda: _ce(reduction="avg"), "cross_entropy", "reduction", "avg", "one of 'mean', 'sum', 'none'"),
    (lambda: L.nll_loss(_x(), [0, 1], ignore_index=None), "nll_loss", "ignore_index", None, "an integer"),
    (lambda: _pair(L.mse_loss, reduction="avg"), "mse_loss", "reduction", "avg", "one of 'mean', 'sum', 'none'"),
    (lambda: _pair(L.smooth_l1_loss, beta=-1.0), "smooth_l1_loss", "beta", -1.0, "a number >= 0"),
    (lambda: _pair(L.huber_loss, delta=0.0), "huber_loss", "delta", 0.0, "a number > 0"),
    (lambda: _pair(L.sigmoid_focal_loss, gamma=-1), "sigmoid_focal_loss", "gamma", -1, "a number >= 0"),
    (lambda: _pair(L.sigmoid_focal_loss, alpha="x"), "sigmoid_focal_loss", "alpha", "x", "a number"),
    (lambda: _pair(L.kl_div, log_target=1), "kl_div", "log_target", 1, "True or False"),
    (lambda: _pair(L.poisson_nll_loss, full="yes"), "poisson_nll_loss", "full", "yes", "True or False"),
    (lambda: L.triplet_margin_loss(_x(), _x(), _x(), p=0), "triplet_margin_loss", "p", 0, "a number > 0"),
    (lambda: L.triplet_margin_loss(_x(), _x(), _x(), margin="1"), "triplet_margin_loss", "margin", "1", "a number"),
    (lambda: L.cosine_embedding_loss(_x(), _x(), [1, -1], margin="a"), "cosine_embedding_loss", "margin", "a",
     "a number"),
    (lambda: L.hinge_embedding_loss(_x(), _x(), margin=None), "hinge_embedding_loss", "margin", None, "a number"),
    (lambda: L.margin_ranking_loss(_x(), _x(), _x(), margin="a"), "margin_ranking_loss", "margin", "a", "a number"),
    (lambda: L.ctc_loss(Tensor(np.zeros((3, 1, 3))), [[1]], [3], [1], blank=1.0), "ctc_loss", "blank", 1.0,
     "an integer >= 0"),
    # module 05: data
    (lambda: data.Rng(-1), "Rng", "seed", -1, "an integer >= 0"),
    (lambda: data.Rng(True), "Rng", "seed", True, "an integer >= 0"),
    (lambda: data.Rng(0).permutation(-1), "Rng.permutation", "n", -1, "an integer >= 0"),
    (lambda: data.Rng(0).normal(3, std=-1.0), "Rng.normal", "std", -1.0, "a number >= 0"),
    (lambda: data.Rng(0).uniform(3, low="0"), "Rng.uniform", "low", "0", "a number"),
    (lambda: data.Rng(0).integers("10"), "Rng.integers", "low", "10", "an integer"),
    (lambda: data.Rng(0).integers(0, 2.5), "Rng.integers", "high", 2.5, "an integer"),
    (lambda: data.Rng(0).normal(-1), "Rng.normal", "size", -1, "None, an integer >= 0 or a tuple of them"),
    (lambda: data.Rng(0).bernoulli(0.5, size=(2, 0.5)), "Rng.bernoulli", "size", (2, 0.5),
     "None, an integer >= 0 or a tuple of them"),
    (lambda: data.random_split([1, 2], [1, 1], seed=-1), "random_split", "seed", -1, "an integer >= 0"),
    (lambda: _loader(batch_size=0), "DataLoader", "batch_size", 0, "a positive integer"),
    (lambda: _loader(batch_size=True), "DataLoader", "batch_size", True, "a positive integer"),
    (lambda: _loader(shuffle="yes"), "DataLoader", "shuffle", "yes", "True or False"),
    (lambda: _loader(drop_last=None), "DataLoader", "drop_last", None, "True or False"),
    (lambda: _loader(seed=1.5), "DataLoader", "seed", 1.5, "an integer >= 0"),
]


@pytest.mark.parametrize("call, owner, name, value, expected", BAD, ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_argument_is_named_with_its_value_and_what_was_expected(call, owner, name, value, expected):
    message = f"{owner} got {name}={value!r}; expected {expected}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


def test_good_arguments_of_numpy_types_and_edges_are_accepted():
    assert nn.Linear(np.int64(3), 2, bias=np.bool_(False)).weight.shape == (2, 3)
    assert nn.Dropout(np.float32(0.5)).p == 0.5 and nn.Dropout(1).p == 1 and nn.Dropout(0).p == 0
    assert nn.LayerNorm([2, 2]).normalized_shape == (2, 2) and nn.LayerNorm(np.int64(4)).normalized_shape == (4,)
    assert nn.BatchNorm1d(4, momentum=None, eps=0).momentum is None
    assert nn.Softplus(threshold=math.inf).threshold == math.inf
    assert L.CrossEntropyLoss(ignore_index=np.int64(-1), label_smoothing=0).ignore_index == -1
    assert L.KLDivLoss(reduction="batchmean").reduction == "batchmean"
    assert len(data.DataLoader(data.TensorDataset(np.arange(5)), batch_size=np.int32(2), shuffle=np.True_)) == 3


# Every loss of module 04 on a batch of 0 rows: (input shape, call of input and reduction).
EMPTY = {
    "mse_loss": ((0, 3), lambda x, r: L.mse_loss(x, np.zeros((0, 3), np.float32), reduction=r)),
    "l1_loss": ((0, 3), lambda x, r: L.l1_loss(x, np.zeros((0, 3), np.float32), reduction=r)),
    "smooth_l1_loss": ((0, 3), lambda x, r: L.smooth_l1_loss(x, np.zeros((0, 3), np.float32), reduction=r)),
    "huber_loss": ((0, 3), lambda x, r: L.huber_loss(x, np.zeros((0, 3), np.float32), reduction=r)),
    "nll_loss": ((0, 3), lambda x, r: L.nll_loss(x, np.zeros(0, np.int64), reduction=r)),
    "nll_loss_weighted": ((0, 3), lambda x, r: L.nll_loss(x, np.zeros(0, np.int64), [1.0, 2.0, 3.0], reduction=r)),
    "cross_entropy": ((0, 3), lambda x, r: L.cross_entropy(x, np.zeros(0, np.int64), reduction=r)),
    "cross_entropy_smoothed_weighted": ((0, 3), lambda x, r: L.cross_entropy(
        x, np.zeros(0, np.int64), [1.0, 2.0, 3.0], reduction=r, label_smoothing=0.1)),
    "cross_entropy_images": ((0, 3, 2, 2), lambda x, r: L.cross_entropy(x, np.zeros((0, 2, 2), np.int64), reduction=r)),
    "cross_entropy_soft": ((0, 3), lambda x, r: L.cross_entropy(x, np.zeros((0, 3), np.float32), reduction=r)),
    "cross_entropy_composed": ((0, 3), lambda x, r: L._composed_cross_entropy(x, np.zeros(0, np.int64), reduction=r)),
    "binary_cross_entropy": ((0, 3), lambda x, r: L.binary_cross_entropy(x, np.zeros((0, 3), np.float32), reduction=r)),
    "binary_cross_entropy_with_logits": ((0, 3), lambda x, r: L.binary_cross_entropy_with_logits(
        x, np.zeros((0, 3), np.float32), reduction=r, pos_weight=[1.0, 2.0, 3.0])),
    "sigmoid_focal_loss": ((0, 3), lambda x, r: L.sigmoid_focal_loss(x, np.zeros((0, 3), np.float32), reduction=r)),
    "kl_div": ((0, 3), lambda x, r: L.kl_div(x, np.zeros((0, 3), np.float32), reduction=r)),
    "poisson_nll_loss": ((0, 3), lambda x, r: L.poisson_nll_loss(x, np.zeros((0, 3), np.float32), full=True,
                                                                 reduction=r)),
    "triplet_margin_loss": ((0, 3), lambda x, r: L.triplet_margin_loss(x, x, x, reduction=r)),
    "cosine_embedding_loss": ((0, 3), lambda x, r: L.cosine_embedding_loss(x, x, np.zeros(0, np.float32),
                                                                           reduction=r)),
    "hinge_embedding_loss": ((0,), lambda x, r: L.hinge_embedding_loss(x, np.zeros(0, np.float32), reduction=r)),
    "margin_ranking_loss": ((0,), lambda x, r: L.margin_ranking_loss(x, x, np.zeros(0, np.float32), reduction=r)),
    "ctc_loss": ((5, 0, 4), lambda x, r: L.ctc_loss(x, np.zeros((0, 2), np.int64), np.zeros(0, np.int64),
                                                     np.zeros(0, np.int64), reduction=r)),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(EMPTY))
def test_a_loss_of_no_rows_is_nan_mean_zero_sum_empty_none_without_warnings(name, reduction):
    shape, loss = EMPTY[name]
    x = Tensor(np.zeros(shape, np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = loss(x, reduction)
        if reduction == "none":
            assert out.numel() == 0
            out.sum().backward()
        else:
            assert out.shape == () and out.dtype == np.float32
            value = out.item()
            assert math.isnan(value) if reduction == "mean" else value == 0.0
            out.backward()
    assert x.grad is not None and x.grad.shape == shape


def test_kl_div_batchmean_of_no_rows_is_nan_and_an_all_ignored_batch_still_gives_zero():
    x = Tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = L.kl_div(x, np.zeros((0, 3), np.float32), reduction="batchmean")
        out.backward()
        assert math.isnan(out.item()) and x.grad.shape == (0, 3)
        ignored = L.cross_entropy(Tensor(np.ones((2, 3), np.float32)), [-100, -100])
        assert ignored.item() == 0.0, "rows that are all ignored are not rows of nothing: the mean stays 0"
        assert math.isnan(L.CrossEntropyLoss()(Tensor(np.zeros((0, 3), np.float32)), np.zeros(0, np.int64)).item())
