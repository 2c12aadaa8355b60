"""Activations, losses, convolution and pooling as functions, as in ``torch.nn.functional``."""

from tinyflo.core.conv import adaptive_avg_pool2d, avg_pool2d, conv2d, max_pool2d
from tinyflo.core.layers import (
    dropout,
    elu,
    gelu,
    hardswish,
    layer_norm,
    leaky_relu,
    log_softmax,
    mish,
    prelu,
    relu,
    scaled_dot_product_attention,
    selu,
    sigmoid,
    silu,
    softmax,
    softplus,
    tanh,
)
from tinyflo.core.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cross_entropy,
    ctc_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    nll_loss,
    poisson_nll_loss,
    sigmoid_focal_loss,
    smooth_l1_loss,
    triplet_margin_loss,
)

__all__ = [
    "adaptive_avg_pool2d", "avg_pool2d", "conv2d", "max_pool2d",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
    "cross_entropy", "ctc_loss", "dropout", "elu", "gelu", "hardswish",
    "hinge_embedding_loss", "huber_loss", "kl_div", "l1_loss", "layer_norm", "leaky_relu", "log_softmax",
    "margin_ranking_loss", "mish", "mse_loss", "nll_loss", "poisson_nll_loss", "prelu", "relu",
    "scaled_dot_product_attention", "selu", "sigmoid", "sigmoid_focal_loss", "silu", "smooth_l1_loss", "softmax", "softplus",
    "tanh", "triplet_margin_loss",
]
