"""Layers, activation modules and loss modules: ``tinyflo.nn.Linear``, ``tinyflo.nn.Conv2d``, ...

Everything here is exported from the course modules (03 layers, 04 losses, 10 convolutions);
``tinyflo.nn.functional`` has the same operations as functions and
``tinyflo.nn.init`` the initializers, as in ``torch.nn``.
"""

from tinyflo.core.conv import AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, MaxPool2d
from tinyflo.core.layers import (
    ELU,
    GELU,
    SELU,
    BatchNorm1d,
    Dropout,
    Embedding,
    Flatten,
    Hardswish,
    Identity,
    IncompatibleKeys,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    Mish,
    Module,
    ModuleList,
    Parameter,
    PReLU,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from tinyflo.core.losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    TripletMarginLoss,
)
from tinyflo.nn import functional, init

__all__ = [
    "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm2d", "Conv2d", "MaxPool2d",
    "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "CTCLoss", "CosineEmbeddingLoss",
    "CrossEntropyLoss", "Dropout", "ELU", "Embedding", "Flatten", "GELU", "Hardswish",
    "HingeEmbeddingLoss", "HuberLoss", "Identity", "IncompatibleKeys", "KLDivLoss", "L1Loss",
    "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "MarginRankingLoss", "Mish",
    "Module", "ModuleList", "NLLLoss", "PReLU", "Parameter", "PoissonNLLLoss", "ReLU", "SELU",
    "Sequential", "SiLU", "Sigmoid", "SmoothL1Loss", "Softmax", "Softplus", "Tanh",
    "TripletMarginLoss", "functional", "init",
]
