"""The runner's reporters stay out of the submission's reach, whatever a grade cell defines.

A scenario's reporters (`__tf_check`, `__tf_reached`, the runner's own copies `__tf_pristine`,
`check_rng`) are parameters of the function the runner makes of it. A function, lambda or class
the cell defines stays in the notebook's namespace, and a nested scope that used a reporter
would hold it in its closure: from there a submission reached the runner's `send`, its key and
its state (module 09's `_load_error` and module 10's `col2im` trap once did). So no grade cell
may put a check in such a scope: `build_task` refuses it, and every grade cell of every module
is compiled here as the runner compiles it and searched for a lasting scope that captures one.
"""

from __future__ import annotations

import types

import pytest
from course_support import REPO

from tinyflo.course.grading import module_scenarios
from tinyflo.course.runner import PARAMETERS, compile_cells
from tinyflo.course.scenarios import build_task
from tinyflo.course.source import discover_modules

MODULES = discover_modules(REPO / "modules")
COMPREHENSIONS = {"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"}  # their scope ends with them


def _capturing(code: types.CodeType, where: str = ""):
    """Every code object nested in `code` that is not a comprehension and holds a reporter in its
    closure: (where, names)."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            held = set(const.co_freevars) & set(PARAMETERS)
            if held and const.co_name not in COMPREHENSIONS:
                yield f"{where}/{const.co_name}", held
            yield from _capturing(const, f"{where}/{const.co_name}")


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.slug)
def test_no_grade_cell_leaves_a_reporter_in_a_lasting_scope(module):
    for hidden in (True, False):
        for task, scenario in module_scenarios(module, hidden).tasks.items():
            for source in (scenario.student_code, scenario.reference_code):
                (code,) = compile_cells([{"kind": "task", "source": source}])
                assert not isinstance(code, SyntaxError), (task, code)
                assert not list(_capturing(code, task)), list(_capturing(code, task))


def test_the_search_finds_a_reporter_captured_the_way_grade_cells_once_did():
    """What module 09 held before: an assert inside a helper, compiled as the runner compiles a
    scenario (build_task is bypassed here, since it now refuses the cell)."""
    source = "def _load_error(x):\n    __tf_check('t/1', x)\n    return x\n_load_error(1)\n"
    (code,) = compile_cells([{"kind": "task", "source": source}])
    assert list(_capturing(code, "t")) == [("t/_load_error", {"__tf_check"})]


@pytest.mark.parametrize("cell, said", [
    ("def _load_error(x):\n    assert x == 1, 'one'\n    return x\n", "line 2: an assert inside '_load_error'"),
    ("def col2im(*a):\n    raise AssertionError('never called')\n", "line 2: a raise AssertionError inside 'col2im'"),
    ("class Probe:\n    def m(self):\n        assert self\n", "line 3: an assert inside 'Probe'"),
    ("f = lambda: gradcheck(lambda x: x, 1)\nassert f()\n", None),  # the check is at the top level
    ("make = lambda n: check_rng.standard_normal(n)\n", "line 1: check_rng inside 'lambda'"),
    ("assert all(np.isfinite(v) for v in values)\n", None),  # a comprehension's scope ends with it
])
def test_a_check_in_a_function_lambda_or_class_is_refused_naming_its_line(cell, said):
    if said is None:
        build_task("t", cell, course=frozenset({"gradcheck", "values"}))
        return
    with pytest.raises(ValueError) as refused:
        build_task("t", cell)
    message = str(refused.value)
    assert message.startswith(f"task t: {said}") and "check at the cell's top level" in message, message
