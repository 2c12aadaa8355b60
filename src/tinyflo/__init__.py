"""tinyflo: a deep-learning framework built one notebook module at a time.

The code under ``tinyflo.core`` is generated from the course modules
(``modules/NN_name/name.py``) by ``tinyflo export``; this file only gathers
the public names, the way ``torch`` does, so user code reads
``tinyflo.randn(...)``, ``tinyflo.no_grad()``, ``tinyflo.DataLoader(...)``,
``tinyflo.Trainer(...)``, ``tinyflo.save_checkpoint(...)``, ``tinyflo.autocast()`` and
``tinyflo.capture_step(...)``; layers and
losses live in ``tinyflo.nn``, optimizers and schedules in ``tinyflo.optim``,
data sets in ``tinyflo.datasets``, ready-made models in ``tinyflo.models``,
process groups and data parallelism in ``tinyflo.distributed``.
"""

import importlib
from typing import Any

# The names each generated module provides. They are loaded on first use, so
# `tinyflo export` (which lives in this package) still runs when a generated
# file is missing or broken: it is the command that repairs them.
_PUBLIC = {
    "tinyflo.core.tensor": (
        "Device", "DeviceError", "Function", "ShapeError", "Tensor", "arange", "as_device",
        "as_dtype", "bfloat16", "bool_", "cat", "cuda_device_count", "cuda_is_available",
        "default_generator", "device_of", "float16", "float32", "float64", "from_numpy", "full",
        "full_like", "get_num_threads", "get_rng_state", "int32", "int64", "is_array", "manual_seed", "ones",
        "ones_like", "promote_types", "rand", "rand_like", "randn", "randn_like", "set_num_threads", "set_rng_state",
        "stack", "tensor", "to_host", "uint8", "unbind", "where", "zeros", "zeros_like",
    ),
    "tinyflo.core.data": (
        "DataLoader", "Dataset", "Rng", "Subset", "TensorDataset", "default_collate", "random_split",
    ),
    "tinyflo.core.training": (
        "BestModel", "Callback", "CheckpointEvery", "CheckpointIO", "EarlyStopping", "History", "Monitor",
        "Precision", "RunningLoss", "Strategy", "Trainer", "Trend", "clip_grad_norm", "clip_grad_value",
        "register_plugin",
    ),
    "tinyflo.core.checkpoints": (
        "CheckpointError", "CheckpointManager", "LoadReport", "ModelCheckpoint", "load_checkpoint",
        "SafetensorsCheckpoints", "save_checkpoint", "structural_hash",
    ),
    "tinyflo.core.amp": ("GradScaler", "MixedPrecision", "autocast", "cast_parameters"),
    "tinyflo.graphs": ("CapturedStep", "capture_step"),
    "tinyflo.core.autograd": (
        "GradcheckError", "backward", "enable_grad", "gradcheck", "is_grad_enabled", "no_grad",
        "set_grad_enabled",
    ),
}
_SOURCE = {name: (module, name) for module, names in _PUBLIC.items() for name in names}
_SOURCE["device"] = ("tinyflo.core.tensor", "as_device")  # tinyflo.device("cuda:0"), as in torch
_SOURCE["backward"] = ("tinyflo.core.tensor", "run_backward")  # module 02's engine, each call a run of its own


_ENGINE = "tinyflo.core.autograd"  # module 02: installs its backward into module 01's Tensor.backward()

_SUBMODULES = ("nn", "optim", "datasets", "models", "distributed", "dashboard", "tensorboard")  # tinyflo.nn.Linear works without `import tinyflo.nn`


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tinyflo.{name}")
    if name not in _SOURCE:
        raise AttributeError(f"module 'tinyflo' has no attribute {name!r}")
    module, attribute = _SOURCE[name]
    importlib.import_module(_ENGINE)  # before any name: Tensor.backward() runs the engine it installs
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCE) | set(_SUBMODULES))


__version__ = "0.1.0"

__all__ = sorted(_SOURCE)
