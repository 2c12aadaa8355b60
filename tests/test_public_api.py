"""The public names resolve, and the CLI survives a broken generated package."""

import subprocess
import sys

import tinyflo


def test_every_public_name_resolves():
    for name in tinyflo.__all__:
        getattr(tinyflo, name)  # raises AttributeError when a name is missing
    assert "Tensor" in dir(tinyflo) and tinyflo.device("cpu:1") is tinyflo.Device("cpu", 1)


def test_nn_functional_and_init_names_resolve():
    import tinyflo.nn.functional
    import tinyflo.nn.init
    import tinyflo.optim.lr_scheduler

    modules = (tinyflo.nn, tinyflo.nn.functional, tinyflo.nn.init, tinyflo.optim, tinyflo.optim.lr_scheduler,
               tinyflo.models)
    for module in modules:
        for name in module.__all__:
            getattr(module, name)
    assert tinyflo.nn.Linear is tinyflo.nn.functional.relu.__globals__["Linear"]


def test_export_cli_imports_without_the_generated_core():
    """`tinyflo export` is how a broken core gets repaired, so it must not need the core."""
    code = (
        "import sys; sys.modules['tinyflo.core.tensor'] = None; sys.modules['tinyflo.core.autograd'] = None\n"
        "import tinyflo.cli, tinyflo.course.export\n"
        "print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
