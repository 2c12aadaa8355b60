"""Parameter initializers (in place, seeded by ``tinyflo.manual_seed``), as in ``torch.nn.init``."""

from tinyflo.core.layers import (
    calculate_fan_in_and_fan_out,
    calculate_gain,
    constant_,
    fan_in_uniform_,
    kaiming_normal_,
    kaiming_uniform_,
    normal_,
    ones_,
    orthogonal_,
    trunc_normal_,
    uniform_,
    xavier_normal_,
    xavier_uniform_,
    zeros_,
)

__all__ = [
    "calculate_fan_in_and_fan_out", "calculate_gain", "constant_", "fan_in_uniform_",
    "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_", "orthogonal_", "trunc_normal_",
    "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_",
]
