"""Learning-rate schedules: pure calculators ``lr(t)`` (module 07)."""

from tinyflo.core.schedulers import (
    CosineAnnealing,
    CosineSchedule,
    CyclicLR,
    ExponentialLR,
    MultiStepLR,
    OneCycle,
    ReduceLROnPlateau,
    Scheduler,
    StepLR,
    Warmup,
)

__all__ = [
    "CosineAnnealing", "CosineSchedule", "CyclicLR", "ExponentialLR", "MultiStepLR", "OneCycle",
    "ReduceLROnPlateau", "Scheduler", "StepLR", "Warmup",
]
