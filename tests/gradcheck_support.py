"""What the table-driven gradcheck tests share: the ops a core module defines."""

import inspect
from types import ModuleType

from tinyflo.core.tensor import Function


def functions_defined_in(module: ModuleType) -> set[str]:
    """Names of the Function subclasses a module defines itself (not the ones it imports)."""
    return {
        name for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, Function) and obj is not Function
        and obj.__module__ == module.__name__
    }
