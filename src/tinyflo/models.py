"""Ready-made models built from ``tinyflo.nn`` layers: ``tinyflo.models.LeNet5()``.

Each model is written in its course module, where students build it from their own layers
(LeNet-5 closes module 10, convolutions); this file only gathers them.
"""

from tinyflo.core.conv import LeNet5

__all__ = ["LeNet5"]
