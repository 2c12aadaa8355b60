"""The runner's reporters stay out of the submission's reach, whatever a grade cell defines.

A scenario's reporters (`__tf_check`, `__tf_reached`, the runner's own copies `__tf_pristine`,
`check_rng`) are parameters of the function the runner makes of it. A function, lambda or class
the cell defines stays in the notebook's namespace, and a nested scope that used a reporter
would hold it in its closure: from there a submission reached the runner's `send`, its key and
its state (module 09's `_load_error` and module 10's `col2im` trap once did). So no grade cell
may put a check in such a scope: `build_task` refuses it, and every grade cell of every module
is compiled here as the runner compiles it and searched for a lasting scope that captures one.
What each cell defines is also made with a real runner's reporters and walked from the namespace
as a submission would walk it: none of the runner's objects is reached.
"""

from __future__ import annotations

import ast
import builtins
import os
import types

import numpy as np
import pytest
from course_support import REPO

from tinyflo.course.grader import runner
from tinyflo.course.grader.grading import module_scenarios
from tinyflo.course.grader.runner import PARAMETERS, compile_cells
from tinyflo.course.grader.scenarios import build_task
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


# --- a walk from the notebook's namespace, with the runner's own objects ---------------------------

# The attribute reads a submission can make from an object it holds (frames and `gc` are refused
# by the runner's audit hook, so they are not followed).
_LINKS = (
    "__closure__", "__globals__", "__defaults__", "__kwdefaults__", "__self__", "__func__",
    "__wrapped__", "__dict__", "cell_contents", "__code__",
)


def _walk(start) -> dict[int, object]:
    """Every object reachable from `start` by those reads and by the items of containers."""
    seen: dict[int, object] = {}
    todo = list(start)
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, types.ModuleType):
            continue
        seen[id(item)] = item
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        for name in _LINKS:
            try:
                todo.append(object.__getattribute__(item, name))
            except Exception:
                pass
    return seen


def _runner_objects():
    """A runner built as the sandbox builds it (nothing run), and what its code holds, by name:
    `send`, `key`, `state`, `hook`, `check`, `reached`, `pristine`, ..."""
    job = {"cells": [], "modes": {}, "seeds": {}, "key": "ab" * 32}
    out = os.open(os.devnull, os.O_WRONLY)
    run = runner.build(job, out, np)
    held: dict[str, object] = {}
    todo = [run]
    while todo:
        function = todo.pop()
        for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
            value = cell.cell_contents
            if name not in held:
                held[name] = value
                if isinstance(value, types.FunctionType) and value.__code__.co_filename == runner.__file__:
                    todo.append(value)
    return run, out, held


class _AnyAttribute(type):
    def __getattr__(cls, name):
        return cls


class _Stub(metaclass=_AnyAttribute):
    """Whatever a course name is when a grade cell's definitions run alone: a base class, a
    decorator, a default value. It keeps what it is handed, so a lambda passed to it stays
    reachable."""

    def __init__(self, *args, **kwargs):
        self.handed = (args, kwargs)

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) else _Stub(*args, **kwargs)

    def __getattr__(self, name):
        return _Stub()


class _Namespace(dict):
    """The notebook's namespace with every name the definitions read but nobody bound."""

    def __missing__(self, name):
        return getattr(builtins, name, _Stub)


def _definitions(source: str) -> str:
    """What of a scenario lasts in the namespace or may be handed to the submission's code: the
    functions and classes it defines, and each lambda outside them (bound to a name of its own
    here: the cell may hand it to the submission's code, which may keep it)."""
    tree = ast.parse(source)
    kept: list[ast.stmt] = []

    class Lambdas(ast.NodeVisitor):
        def visit_Lambda(self, node):
            kept.append(ast.Assign([ast.Name(f"_tf_lambda{len(kept)}", ast.Store())], node, lineno=0))

        def visit_FunctionDef(self, node):
            kept.append(node)

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    Lambdas().visit(tree)
    return ast.unparse(ast.fix_missing_locations(ast.Module(kept, type_ignores=[])))


def _reached_from_namespace(source: str, held: dict) -> set[str]:
    """Runs `source` as the runner runs a scenario (its function, the real reporters) and
    names the runner's objects a walk from the namespace reaches."""
    (code,) = compile_cells([{"kind": "task", "source": source}])
    namespace = _Namespace(__builtins__=builtins)
    scenario = types.FunctionType(code, namespace)
    scenario(held["check"], held["reached"], np.random.default_rng(0), held["pristine"])
    reached = _walk(list(namespace.values()))
    secret = {name: held[name] for name in ("send", "key", "state", "hook", "check", "reached", "pristine", "lock")}
    return {name for name, value in secret.items() if id(value) in reached}


@pytest.fixture(scope="module")
def held():
    run, out, held = _runner_objects()
    yield held
    os.close(out)


def test_the_walk_reaches_the_key_and_state_from_a_helper_that_checks(held):
    """What a helper holding a reporter gave away (module 09's `_load_error` once did): the walk
    the test below relies on finds it. The scenario is compiled as the runner compiles it,
    bypassing build_task, which now refuses the cell."""
    source = "def _load_error(x):\n    __tf_check('t/1', x)\n    return x\n"
    assert {"send", "key", "state", "check"} <= _reached_from_namespace(source, held)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.slug)
def test_no_definition_of_a_grade_cell_leads_to_the_runner(module, held):
    """Every function, lambda and class each grade cell's student scenario leaves in the
    namespace, made with the runner's real reporters: nothing reachable from them by attribute
    reads is the runner's `send`, key, state, audit hook, reporters or pristine copies."""
    for task, scenario in module_scenarios(module).tasks.items():
        source = _definitions(scenario.student_code)
        assert _reached_from_namespace(source, held) == set(), (task, source)
