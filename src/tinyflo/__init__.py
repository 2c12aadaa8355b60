"""tinyflo: a deep-learning framework built one notebook module at a time.

The code under ``tinyflo.core`` is generated from the course modules
(``modules/NN_name/name.py``) by ``tinyflo export``; this file only gathers
the public names, the way ``torch`` does, so user code reads
``tinyflo.randn(...)`` and ``tinyflo.no_grad()``.
"""

from tinyflo.core.autograd import (
    GradcheckError,
    backward,
    enable_grad,
    gradcheck,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from tinyflo.core.tensor import (
    Device,
    DeviceError,
    Function,
    ShapeError,
    Tensor,
    arange,
    as_device,
    as_dtype,
    bfloat16,
    bool_,
    cat,
    cuda_device_count,
    cuda_is_available,
    float16,
    float32,
    float64,
    from_numpy,
    full,
    full_like,
    int32,
    int64,
    manual_seed,
    ones,
    ones_like,
    promote_types,
    rand,
    rand_like,
    randn,
    randn_like,
    stack,
    tensor,
    uint8,
    where,
    zeros,
    zeros_like,
)

device = as_device
__version__ = "0.1.0"

__all__ = [
    "Device", "DeviceError", "Function", "GradcheckError", "ShapeError", "Tensor",
    "arange", "as_device", "as_dtype", "backward", "bfloat16", "bool_", "cat",
    "cuda_device_count", "cuda_is_available", "device", "enable_grad", "float16",
    "float32", "float64", "from_numpy", "full", "full_like", "gradcheck", "int32",
    "int64", "is_grad_enabled", "manual_seed", "no_grad", "ones", "ones_like",
    "promote_types", "rand", "rand_like", "randn", "randn_like", "set_grad_enabled",
    "stack", "tensor", "uint8", "where", "zeros", "zeros_like",
]
