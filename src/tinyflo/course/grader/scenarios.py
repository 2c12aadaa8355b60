"""Grade cells as scenarios: code that drives a module's API, and verdicts kept apart from it.

A grade cell is written as plain asserts, which a student runs in Jupyter as they work. For
grading, each cell is turned into two programs and a list of checks:

* the **student scenario** runs in the sandbox against the student's code. Every `assert` becomes
  a call that hands the values the student's code produced (the *actual* operands) to the
  runner as plain data; every `raise AssertionError(...)` becomes a call that records that it
  was reached. The expected side of each check, the comparison, its tolerance and its message
  are not in it, and neither is any assignment that only feeds an expected side;
* the **reference scenario** is the same program with the expected operands recorded as well.
  It runs, in its own sandbox, against the reference solution with the same inputs;
* each **check** says, for the trusted grader (tinyflo.course.grader.verdicts), how to compare the
  student's actual values with the reference's expected ones.

Which operand of a check is the student's: the first operand of `==` and of a comparison
helper (`np.allclose(actual, expected, ...)`, `_close(actual, expected)`, `math.isclose`), the
object of `isinstance` and `.startswith`; every operand of `<`, `<=`, `!=`, `in` that is not
a literal. A literal is an expression of constants, the standard numerical modules and
names bound only to such expressions.

Any other condition (`or`, `all(... for ...)` over the student's objects, `np.isfinite(...)`,
two of the student's values compared) is evaluated by the grader itself: the scenario records
only the parts that need the student's objects, as values (one row per item of a
comprehension), and the grader runs the condition's own expression over them (`_Split`).
Identity and membership (`is`, `in` between two of the student's values) are asked in the
scenario and recorded as truth values; so is a call of the module's own code. The course's
gradcheck, which runs there, is paired with the gradients it checks, compared with the
reference's. Names the course's cells bound are read as those cells left them, not from the
notebook's namespace (`_CourseNames`), and the builtins that need the object itself (`str`,
`isinstance`, `id`, `np.shares_memory`, ...) are the runner's own copies (`_pristine`).

This file needs only the standard library.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
from dataclasses import dataclass, field, replace

from tinyflo.course.checks import BEGIN, END, split_hidden
from tinyflo.course.grader.runner import CHECK, PARAMETERS, PRISTINE, REACHED, RNG, top_level_names

TRUSTED_MODULES = frozenset({"np", "numpy", "math"})
TRUSTED_BUILTINS = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "dict",
        "float",
        "int",
        "len",
        "list",
        "max",
        "min",
        "range",
        "repr",
        "round",
        "set",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
        "frozenset",
        "isinstance",
        "zip",
        "enumerate",
        "reversed",
        "bytes",
        "complex",
        "divmod",
        "pow",
        "hasattr",
        "id",
    }
)
# Comparison functions the trusted grader evaluates itself: (actual, expected, *options).
COMPARATORS = {
    "np.allclose": "allclose",
    "numpy.allclose": "allclose",
    "np.array_equal": "array_equal",
    "numpy.array_equal": "array_equal",
    "np.array_equiv": "array_equiv",
    "numpy.array_equiv": "array_equiv",
    "math.isclose": "isclose",
}
GRADCHECK = "gradcheck"  # module 02's, as later modules import it
# Calls that seed a generator: a check after one may compare random draws with the reference's.
SEEDERS = frozenset({"manual_seed", "set_rng_state", "Rng", "fork", "seed"})
COMPARATOR_PREFIX = "_close"  # a helper `_close(actual, expected)`: like np.allclose
VALUE, TYPE, CLASSES, TRUTH, DISCARD = "value", "type", "classes", "truth", "discard"
TEXT = "text"  # a value shown only when it is a str (an error's text read by `in`); else None


@dataclass(frozen=True)
class Operand:
    """One value a check looks at: whose run supplies it, and how it crosses as data."""

    mode: str  # VALUE, TYPE (an object's classes), CLASSES (a class or tuple of them), TRUTH
    student: bool  # recorded from the student's run (else only the reference's is used)
    evaluated: bool  # evaluated in the student's run at all (an expected side with side effects)
    text: str = ""  # a visible check's student operand as written (shown beside a wrong value); "" else
    literal: bool = False  # constants only (see _Names.is_literal): the same in every run


@dataclass(frozen=True)
class Check:
    """One assert (or `raise AssertionError`) of a grade cell, as the trusted grader sees it."""

    id: str
    task: str
    hidden: bool
    number: int  # among the task's visible or hidden checks, from 1
    message: str  # for the student
    kind: str  # "assert" or "reached"
    condition: tuple = ()  # see `_condition`: ("and", [...]) | ("not", c) | ("atom", op, [i...], extra)
    operands: tuple[Operand, ...] = ()
    after_seed: bool = False  # the cell seeds a generator before it: random draws are compared
    must_raise: bool = False  # a `raise AssertionError` ending a `try` body: the call before it had to raise


@dataclass
class TaskScenario:
    """A grade cell turned into scenarios: what runs where, and the checks."""

    task: str
    student_code: str
    reference_code: str
    checks: list[Check] = field(default_factory=list)
    binds: frozenset[str] = frozenset()  # names the cell binds at its top level (the runner records them)
    draws: bool = False  # its hidden checks draw this submission's own inputs (from check_rng)


def _dotted(node: ast.AST) -> str | None:
    """`np.testing.x` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Names:
    """Which names of a cell are literals (bound only to literal expressions)."""

    def __init__(self, tree: ast.AST):
        bound: dict[str, list[ast.AST | None]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            simple = isinstance(target, ast.Name)
                            bound.setdefault(name.id, []).append(node.value if simple else None)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)):
                target = node.target
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(None)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    for name in ast.walk(item.optional_vars or ast.Pass()):
                        if isinstance(name, ast.Name):
                            bound.setdefault(name.id, []).append(None)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                bound.setdefault(node.name, []).append(None)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.setdefault(node.name, []).append(None)
            elif isinstance(node, ast.NamedExpr):
                bound.setdefault(node.target.id, []).append(None)
        self.bound = frozenset(bound)
        changing = _changed_after_binding(tree, bound)
        self.literal: set[str] = set()
        changed = True
        while changed:  # a literal may be built from other literals
            changed = False
            for name, values in bound.items():
                if name in self.literal or name in changing or None in values:
                    continue
                if all(self.is_literal(value) for value in values):
                    self.literal.add(name)
                    changed = True

    def is_literal(self, node: ast.AST) -> bool:
        """Constants, trusted modules and builtins, and names bound only to literals."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name):
                if (
                    inner.id not in TRUSTED_MODULES | TRUSTED_BUILTINS
                    and inner.id not in self.literal
                ):
                    return False
            elif isinstance(inner, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield)):
                return False
        return True


def _changed_after_binding(tree: ast.AST, bound: dict[str, list[ast.AST | None]]) -> set[str]:
    """Names whose value may change after they are bound (`seen = []` then `seen.append(...)`):
    such a name holds what the code put in it, not what its binding says, so it is no literal.

    A name bound to something mutable (a list, dict or set display, a comprehension, a call's
    result) changes where it receives a method call, has an item or attribute stored or deleted,
    or is handed to a call or stored in an object (whose code may change it); and every name
    bound to it, or to a value built from it, changes with it (an alias)."""
    def names_in(node: ast.AST | None) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()

    reads = {name: set().union(*map(names_in, values)) for name, values in bound.items()}  # what each is built from
    mutable = {name for name, values in bound.items() if any(v is not None and _may_be_mutable(v) for v in values)}
    grown = True
    while grown:  # `kept = seen`: an alias of a mutable value is mutable too
        grown = False
        for name in bound:
            if name not in mutable and reads[name] & mutable:
                mutable.add(name)
                grown = True
    changing: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign):  # `seen += [x]` extends the list in place
            changing |= names_in(node.target)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr not in _READS_ONLY and not is_pure(node):
                changing |= names_in(node.func.value)  # x.append(...): the receiver
            if not is_pure(node):  # the code called may change what it is handed
                for argument in [*node.args, *(k.value for k in node.keywords)]:
                    changing |= names_in(argument)
            elif (_dotted(node.func) or "").rsplit(".", 1)[-1] in _WRITES_ITS_FIRST and node.args:
                changing |= names_in(node.args[0])  # np.copyto(seen, ...)
            for keyword in node.keywords:
                if keyword.arg == "out":  # np.add(a, b, out=seen)
                    changing |= names_in(keyword.value)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            changing |= names_in(node.value)
        elif isinstance(node, ast.Assign) and not all(isinstance(t, ast.Name) for t in node.targets):
            changing |= names_in(node.value)  # stored in an object: `box.held = x`
    changing &= mutable
    aliases = True
    while aliases:  # `kept = seen`: a change to either is a change to both
        aliases = False
        for name in bound:
            sources = reads[name] & mutable
            if name in changing and not sources <= changing:
                changing |= sources
                aliases = True
            if sources & changing and name not in changing and name in mutable:
                changing.add(name)
                aliases = True
    return changing


# Methods of arrays, lists and dicts that change nothing in their receiver.
_READS_ONLY = frozenset({
    "copy", "sum", "mean", "std", "var", "max", "min", "argmax", "argmin", "prod", "cumsum", "all", "any",
    "reshape", "ravel", "flatten", "transpose", "squeeze", "astype", "tolist", "item", "round", "clip", "dot",
    "nonzero", "count", "index", "keys", "values", "items", "get", "startswith", "endswith", "split", "join",
    "format", "lower", "upper", "strip",
})
# NumPy's functions that write into their first argument.
_WRITES_ITS_FIRST = frozenset({"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis", "shuffle"})


def _may_be_mutable(node: ast.AST) -> bool:
    """Whether a binding's value may be an object that can change: anything but constants,
    names, and tuples and operators of those."""
    return any(
        isinstance(inner, (ast.List, ast.Dict, ast.Set, ast.Call, ast.ListComp, ast.DictComp, ast.SetComp,
                           ast.Subscript, ast.Attribute))
        for inner in ast.walk(node)
    )


def is_pure(node: ast.AST) -> bool:
    """No call but to the standard numerical modules and builtins, no comprehension: an
    expression whose evaluation has no side effect worth keeping."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            name = _dotted(inner.func)
            if name is None:
                return False
            root = name.split(".")[0]
            if root not in TRUSTED_MODULES and name not in TRUSTED_BUILTINS:
                return False
        elif isinstance(
            inner,
            (
                ast.Lambda,
                ast.NamedExpr,
                ast.Await,
                ast.Yield,
                ast.ListComp,
                ast.SetComp,
                ast.DictComp,
                ast.GeneratorExp,
            ),
        ):
            return False
    return True


SHOWN_CHARS = 160  # of a visible check's own line, quoted when it has no message


def _message(node: ast.AST | None, visible: ast.Assert | None = None) -> str:
    """The student's text of an assert message or AssertionError argument; for a visible assert
    without one, the assert itself (the student's notebook shows it), never a hidden one's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(p.value if isinstance(p, ast.Constant) else "…" for p in node.values)
    if visible is not None:
        shown = f"assert {ast.unparse(visible.test)}"
        return "this does not hold: " + (shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…")
    return "the expected result was not produced"


class _Builder:
    """Collects the operands of one check while its condition is decomposed."""

    def __init__(self, names: _Names, helpers: frozenset[str], course: frozenset[str]):
        self.names = names
        self.helpers = helpers
        self.course = course  # the course's own names (see `_CourseNames`)
        self.exprs: list[ast.expr] = []
        self.operands: list[Operand] = []

    def add(self, expr: ast.expr, mode: str, student: bool) -> int:
        if student:
            evaluated = True
        else:
            evaluated = not is_pure(expr)  # its side effects still happen in the student's run
        self.exprs.append(expr)
        self.operands.append(Operand(mode, student, evaluated, ast.unparse(expr) if student else "",
                                     self.names.is_literal(expr)))
        return len(self.exprs) - 1

    def truth(self, node: ast.expr) -> tuple:
        """Any other condition: the grader evaluates it itself over the values it needs (see
        `_Split`); where the whole condition needs the objects, its truth is recorded."""
        split = _Split(self.names, self.helpers)
        skeleton = split.convert(node)
        if len(split.leaves) == 1 and isinstance(skeleton, ast.Name) and not split.rows:
            return ("atom", "truth", [self.add(split.leaves[0][0], TRUTH, True)], {})
        indices = [self.add(expr, VALUE, student) for expr, student in split.leaves]
        rows = [indices[position] for position in split.rows]
        return ("expr", ast.unparse(skeleton), indices, rows)

    def condition(self, node: ast.expr) -> tuple:
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            return ("and", [self.condition(value) for value in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self.condition(node.operand))
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        return self.truth(node)

    def compare(self, node: ast.Compare) -> tuple:
        ops = node.ops
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in ops):
            return self._identity(node) or self.truth(node)
        items = [node.left, *node.comparators]
        literal = [self.names.is_literal(item) for item in items]
        for position, op in enumerate(ops):
            if not isinstance(op, ast.Eq) and not literal[position] and not literal[position + 1]:
                # Two of the student's values against each other (`frozen not in opt.state`,
                # `first < second`): decided where the objects are, as a truth value.
                return self._membership(node) or self.truth(node)
        if len(ops) == 1 and isinstance(ops[0], ast.Eq) and literal[0] and not literal[1]:
            items.reverse()  # `3 == len(x)`: the student's value is the second
            literal.reverse()
        # Which run supplies each operand: an `==` compares the student's left side with the
        # reference's right side; other comparisons look at the student's values of every
        # operand that is not a literal.
        student_side = [False] * len(items)
        for position, op in enumerate(ops):
            left, right = position, position + 1
            if isinstance(op, ast.Eq):
                student_side[left] = True
            else:
                student_side[left] |= not literal[left]
                student_side[right] |= not literal[right]
        indices = [self.add(item, VALUE, side) for item, side in zip(items, student_side)]
        links = []
        for position, op in enumerate(ops):
            name = type(op).__name__
            links.append(("atom", name, [indices[position], indices[position + 1]], {}))
        return links[0] if len(links) == 1 else ("and", links)

    def _identity(self, node: ast.Compare) -> tuple | None:
        """`x is None` (or `is not`, or True/False): `x` shown (`your code gave True`); None for
        any other identity check (see `_truth_showing`)."""
        if len(node.ops) != 1:
            return None
        sides = [node.left, node.comparators[0]]
        singletons = [isinstance(side, ast.Constant) and side.value in (None, True, False) for side in sides]
        if singletons.count(True) != 1:
            return None
        return self._truth_showing(node, sides[singletons.index(False)], VALUE)

    def _membership(self, node: ast.Compare) -> tuple | None:
        """`part in said`: `said` shown when it is a str (an error's text that lacks a word the
        rule asks for); None for any other comparison (see `_truth_showing`)."""
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.In, ast.NotIn)):
            return None
        return self._truth_showing(node, node.comparators[0], TEXT)

    def _truth_showing(self, node: ast.Compare, shown: ast.expr, mode: str) -> tuple | None:
        """`node` decided as a truth value where the objects are, with `shown` (a name or its
        attribute) also recorded in `mode`, for the message; None where `shown` is no plain
        reference (evaluating it again could run a call of the submission's twice) or the
        condition is not one truth value."""
        if not _plain_reference(shown):
            return None
        truth = self.truth(node)
        if truth[:2] != ("atom", "truth"):
            return None
        return ("atom", "truth", truth[2], {"shown": self.add(shown, mode, True)})

    def call(self, node: ast.Call) -> tuple:
        name = _dotted(node.func)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            return self.truth(node)
        if name == GRADCHECK and name in self.course and node.args and not node.keywords:
            # The course's gradcheck runs in the student's process; the gradients it checks
            # are also recorded, along one fixed direction, and must match the reference's.
            gradients = ast.Call(
                ast.Subscript(ast.Name(PRISTINE, ast.Load()), ast.Constant("gradients"), ast.Load()),
                copy.deepcopy(node.args),
                [],
            )
            index = self.add(gradients, VALUE, True)
            return ("and", [("atom", "same_gradients", [index], {}), self.truth(node)])
        if name == "isinstance" and len(node.args) == 2 and not node.keywords:
            actual = self.add(node.args[0], TYPE, True)
            classes = self.add(node.args[1], CLASSES, False)
            return ("atom", "isinstance", [actual, classes], {})
        comparator = COMPARATORS.get(name or "") or (
            name if name in self.helpers and name.startswith(COMPARATOR_PREFIX) else None
        )
        if comparator and len(node.args) >= 2:
            args = list(node.args)
            if self.names.is_literal(args[0]) and not self.names.is_literal(args[1]):
                args[0], args[1] = args[1], args[0]
            indices = [self.add(args[0], VALUE, True)]
            indices += [self.add(arg, VALUE, False) for arg in args[1:]]
            keywords = {k.arg: self.add(k.value, VALUE, False) for k in node.keywords}
            return ("atom", "call:" + comparator, indices, keywords)
        # np.all(a == b) and (a == b).all(): every element equal
        inner = None
        if name in ("np.all", "numpy.all") and len(node.args) == 1 and not node.keywords:
            inner = node.args[0]
        elif (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "all"
            and not node.args
            and not node.keywords
        ):
            inner = node.func.value
        if (
            isinstance(inner, ast.Compare)
            and len(inner.ops) == 1
            and isinstance(inner.ops[0], ast.Eq)
        ):
            left, right = inner.left, inner.comparators[0]
            if self.names.is_literal(left) and not self.names.is_literal(right):
                left, right = right, left
            return (
                "atom",
                "all_equal",
                [self.add(left, VALUE, True), self.add(right, VALUE, False)],
                {},
            )
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and len(node.args) == 1
            and not node.keywords
            and not self.names.is_literal(node.func.value)
        ):
            receiver = self.add(node.func.value, VALUE, True)
            argument = self.add(node.args[0], VALUE, False)
            return ("atom", node.func.attr, [receiver, argument], {})
        return self.truth(node)


def _plain_reference(node: ast.expr) -> bool:
    """A name, or a name's attributes (`said`, `d._ctx`): an operand read a second time to be
    shown, with no call or index to run again (an attribute the submission made a property runs
    twice, which can change only what that submission's own checks see)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


# Calls that need the object itself (its identity, type, attributes, text or memory), not a
# copy of its data: made in the scenario, through the runner's own copies (`PRISTINE`), so a
# submission that rebinds the name or patches the module changes nothing.
OBJECT_CALLS = frozenset(
    {"id", "isinstance", "type", "hasattr", "callable", "str", "repr", "np.shares_memory",
     "numpy.shares_memory", "np.may_share_memory", "numpy.may_share_memory"}
)
_COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)
_STRUCTURE = (
    ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.List, ast.Set,
    ast.Dict, ast.JoinedStr, ast.FormattedValue, ast.Slice,
)


def _targets(target: ast.expr) -> list[str] | None:
    """The names a comprehension's target binds; None for targets other than names."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names: list[str] = []
        for item in target.elts:
            inner = _targets(item)
            if inner is None:
                return None
            names += inner
        return names
    return None


class _Split:
    """A condition cut in two: what the grader evaluates itself, on data, and the *leaves*, the
    parts that need the student's objects, which the scenario records as values.

    `convert` returns the condition with each leaf replaced by a placeholder name
    (`_tf_v<k>`, the k-th of `leaves`). Constants, numpy, math, builtins and the module's pure
    helpers, and the operators and comprehensions over them, stay with the grader: every
    comparison, `all`, `np.allclose` or `np.isfinite` is made there, where no patched module
    or object that is equal to anything can reach it. A leaf is recorded from the student's
    run, or, when it is a literal, from the reference's. A comprehension over the student's
    objects is recorded as rows, one tuple of its leaves per item (`rows`); the grader loops
    over them and requires as many rows as the reference's run gave, so a submission cannot
    empty an `all(...)`. An identity test of two objects (`a is b`) and OBJECT_CALLS are
    leaves of their own, made in the scenario with the runner's own functions.
    """

    def __init__(self, names: _Names, helpers: frozenset[str]):
        self.names = names
        self.trusted = (TRUSTED_MODULES | TRUSTED_BUILTINS | helpers) - names.bound
        self.leaves: list[tuple[ast.expr, bool]] = []  # (expression, from the student's run)
        self.rows: list[int] = []  # positions in `leaves` that are comprehension rows

    # -- what the grader can evaluate -----------------------------------------------------

    def grader_side(self, node: ast.AST, local: frozenset[str] = frozenset()) -> bool:
        """Whether the grader can evaluate `node` itself (`local`: comprehension names it binds)."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.trusted or node.id in local
        if isinstance(node, ast.Call):
            if _dotted(node.func) in OBJECT_CALLS:
                return False
            parts = [node.func, *node.args, *(k.value for k in node.keywords)]
            return all(self.grader_side(part, local) for part in parts)
        if isinstance(node, ast.Compare) and not self._plain_identity(node):
            return False
        if isinstance(node, _COMPREHENSIONS):
            inner = set(local)
            for generator in node.generators:
                names = _targets(generator.target)
                if names is None or not self.grader_side(generator.iter, frozenset(inner)):
                    return False
                inner.update(names)
                if not all(self.grader_side(c, frozenset(inner)) for c in generator.ifs):
                    return False
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            return all(self.grader_side(part, frozenset(inner)) for part in parts)
        if isinstance(node, (*_STRUCTURE, ast.Attribute, ast.Subscript, ast.Starred)):
            return all(self.grader_side(c, local) for c in ast.iter_child_nodes(node)
                       if isinstance(c, ast.expr))
        return False

    @staticmethod
    def _plain_identity(node: ast.Compare) -> bool:
        """No `is`, `is not`, `in` or `not in`: identity and membership are questions for the
        objects themselves (a dict keyed by objects, a parameter in an optimizer's state), so
        they are asked in the scenario; `is` no object can answer falsely, and a container's
        answer about itself is the student's value like any other."""
        return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops)

    # -- cutting ----------------------------------------------------------------------------

    def leaf(self, node: ast.expr, student: bool, into: list | None = None) -> ast.Name:
        target = self.leaves if into is None else into
        target.append((node, student))
        prefix = "_tf_v" if into is None else "_tf_i"
        return ast.Name(f"{prefix}{len(target) - 1}", ast.Load())

    def convert(self, node: ast.expr, row: list | None = None, local: frozenset[str] = frozenset()):
        """`node` with its leaves cut out. Inside a comprehension's rows (`row`), leaves that
        read the comprehension's names (`local`) go to the row; pure ones that do not are
        recorded once."""
        if self.grader_side(node):
            return copy.deepcopy(node)
        reads_local = any(isinstance(n, ast.Name) and n.id in local for n in ast.walk(node))
        if not reads_local and is_pure(node) and self.names.is_literal(node):
            return self.leaf(node, False)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node.value, (*_STRUCTURE, *_COMPREHENSIONS)):
                new = copy.copy(node)
                new.value = self.convert(node.value, row, local)
                if isinstance(node, ast.Subscript):
                    new.slice = self.convert(node.slice, row, local)
                return new
            if isinstance(node, ast.Subscript) and self.grader_side(node.value, local):
                new = copy.copy(node)
                new.slice = self.convert(node.slice, row, local)
                return new
            return self._cut(node, row, reads_local)
        if isinstance(node, ast.Call):
            func = node.func
            if _dotted(func) in OBJECT_CALLS or any(
                isinstance(a, ast.Starred) for a in node.args
            ):
                return self._cut(node, row, reads_local)
            if self.grader_side(func):
                new = copy.copy(node)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, _STRUCTURE):
                new = copy.copy(node)
                new.func = copy.copy(func)
                new.func.value = self.convert(func.value, row, local)
            else:
                return self._cut(node, row, reads_local)
            new.args = [self.convert(a, row, local) for a in node.args]
            new.keywords = [
                ast.keyword(k.arg, self.convert(k.value, row, local)) for k in node.keywords
            ]
            return new
        if isinstance(node, ast.Compare) and not self._plain_identity(node):
            return self._cut(node, row, reads_local)
        if isinstance(node, _COMPREHENSIONS):
            if row is not None:  # a comprehension inside a row: one leaf
                return self._cut(node, row, reads_local)
            return self._rows(node)
        if isinstance(node, _STRUCTURE):
            new = copy.copy(node)
            for name, value in ast.iter_fields(node):
                if isinstance(value, ast.expr):
                    setattr(new, name, self.convert(value, row, local))
                elif isinstance(value, list):
                    setattr(new, name, [
                        self.convert(v, row, local) if isinstance(v, ast.expr) else v
                        for v in value
                    ])
            return new
        return self._cut(node, row, reads_local)

    def _cut(self, node: ast.expr, row: list | None, reads_local: bool) -> ast.Name:
        if row is not None and (reads_local or not is_pure(node)):
            return self.leaf(node, True, into=row)
        return self.leaf(node, True)

    def _rows(self, node: ast.expr) -> ast.expr:
        """A comprehension over the student's objects: the scenario records one row of leaves
        per item; the grader runs the same comprehension over the rows."""
        local: set[str] = set()
        for generator in node.generators:
            names = _targets(generator.target)
            if names is None:
                return self.leaf(node, True)
            local.update(names)
        row: list[tuple[ast.expr, bool]] = []
        new = copy.copy(node)
        parts = ("key", "value") if isinstance(node, ast.DictComp) else ("elt",)
        for part in parts:
            setattr(new, part, self.convert(getattr(node, part), row, frozenset(local)))
        recorded = ast.ListComp(
            elt=ast.Tuple([expr for expr, _ in row], ast.Load()),
            generators=copy.deepcopy(node.generators),
        )
        self.leaves.append((recorded, True))
        self.rows.append(len(self.leaves) - 1)
        target = ast.Tuple([ast.Name(f"_tf_i{k}", ast.Store()) for k in range(len(row))], ast.Store())
        source = ast.Name(f"_tf_v{len(self.leaves) - 1}", ast.Load())
        new.generators = [ast.comprehension(target, source, [], 0)]
        return self._renumber(new, len(self.leaves) - 1)

    @staticmethod
    def _renumber(node: ast.expr, rows: int) -> ast.expr:
        """A row's names made unique to it (`_tf_i<k>` -> `_tf_r<rows>_<k>`)."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id.startswith("_tf_i"):
                inner.id = f"_tf_r{rows}_{inner.id[5:]}"
        return node


def _pristine(node: ast.expr, bound: frozenset[str]) -> ast.expr:
    """`node` with OBJECT_CALLS (and numpy or math in their arguments) taken from the runner's
    own copies instead of the notebook's names; lambdas, which the submission's code may be
    handed, are left as they are."""
    node = copy.deepcopy(node)

    def pristine(key: str) -> ast.expr:
        return ast.Subscript(ast.Name(PRISTINE, ast.Load()), ast.Constant(key), ast.Load())

    class Swap(ast.NodeTransformer):
        inside = 0

        def visit_Lambda(self, lambda_node):
            return lambda_node

        def visit_Call(self, call):
            name = _dotted(call.func)
            if name in OBJECT_CALLS and name.split(".")[0] not in bound:
                call.func = pristine(name.replace("numpy.", "np."))
                self.inside += 1
                call.args = [self.visit(a) for a in call.args]
                call.keywords = [self.visit(k) for k in call.keywords]
                self.inside -= 1
                return call
            return self.generic_visit(call)

        def visit_Name(self, name):
            if self.inside and name.id in TRUSTED_MODULES and name.id not in bound:
                return ast.copy_location(pristine("math" if name.id == "math" else "np"), name)
            return name

    return ast.fix_missing_locations(Swap().visit(node))


def _is_assertion_error(node: ast.Raise) -> ast.expr | None | bool:
    """The message node of `raise AssertionError(msg)`, None without one; False otherwise."""
    exc = node.exc
    if isinstance(exc, ast.Name) and exc.id == "AssertionError":
        return None
    if (
        isinstance(exc, ast.Call)
        and isinstance(exc.func, ast.Name)
        and exc.func.id == "AssertionError"
    ):
        return exc.args[0] if exc.args else None
    return False


def _key(node: ast.AST) -> tuple:
    """A statement's place in the cell: the same in every parse of the same code."""
    return (type(node).__name__, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _call(name: str, args: list[ast.expr]) -> ast.Expr:
    return ast.Expr(ast.Call(ast.Name(name, ast.Load()), args, []))


@dataclass
class _Found:
    check: Check
    exprs: list[ast.expr]


class _Rewrite(ast.NodeTransformer):
    """Replaces each check statement by the runner's call, for one of the two runs."""

    def __init__(
        self, found: dict[tuple, _Found], reference: bool, dropped: set[tuple], bound: frozenset
    ):
        self.found = found
        self.reference = reference
        self.dropped = dropped  # ids of assignment statements left out of the student's run
        self.bound = bound  # names the cell binds

    def _replace(self, node: ast.stmt) -> ast.stmt:
        entry = self.found[_key(node)]
        check = entry.check
        if check.kind == "reached":
            call = _call(REACHED, [ast.Constant(check.id)])
        else:
            args: list[ast.expr] = [ast.Constant(check.id)]
            for operand, expr in zip(check.operands, entry.exprs):
                if self.reference or operand.evaluated:
                    args.append(_pristine(expr, self.bound))
            call = _call(CHECK, args)
        return ast.copy_location(call, node)

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        return self._replace(node)

    def visit_Raise(self, node: ast.Raise) -> ast.stmt:
        if _key(node) in self.found:
            return self._replace(node)
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.stmt | None:
        if not self.reference and _key(node) in self.dropped:
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)


def _cell_code(source: str) -> tuple[str, set[int]]:
    """The cell with its hidden markers removed, and the lines (from 1) of the hidden region."""
    parts = split_hidden(source)
    if parts is None:
        return source, set()
    before, region, after = parts
    start = before.count("\n") + (2 if before else 1)  # the region's first line
    code = "\n".join([before, region, after]) if before else "\n".join([region, after])
    hidden = set(range(start, start + region.count("\n") + 1))
    return code, hidden


def visible_source(source: str) -> str:
    """A grade cell as its release shows it: the hidden region left out."""
    parts = split_hidden(source)
    if parts is None:
        return source
    before, _, after = parts
    return "\n".join(part for part in (before, after) if part)


def build_task(
    task: str,
    source: str,
    hidden: bool = True,
    helpers: frozenset[str] = frozenset(),
    used_elsewhere: frozenset[str] = frozenset(),
    course: frozenset[str] = frozenset(),
) -> TaskScenario:
    """Turn one grade cell into its scenarios and checks.

    `hidden=False` leaves the hidden region out (what `tinyflo module test` runs). `helpers`
    are the module's own comparison functions the grader evaluates (see `pure_helpers`);
    `used_elsewhere`, names read by other cells, which no assignment here may drop; `course`,
    names the course's cells (and grade cells) before this one bind, which the scenario
    reads as those cells left them (see `_CourseNames`).
    """
    if hidden:
        code, hidden_lines = _cell_code(source)
    else:
        code, hidden_lines = visible_source(source), set()
    for marker in (BEGIN, END):
        if marker in code:
            raise ValueError(f"task {task}: `{marker}` must stand alone on its line")
    tree = ast.parse(code)
    names = _Names(tree)
    kept = course - names.bound - set(PARAMETERS)
    found: dict[tuple, _Found] = {}
    counts = {True: 0, False: 0}
    order: list[ast.stmt] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        or (isinstance(node, ast.Raise) and _is_assertion_error(node) is not False)
    ]
    order.sort(key=lambda node: (node.lineno, node.col_offset))
    ends_of_try = {_key(node.body[-1]) for node in ast.walk(tree)
                   if isinstance(node, ast.Try) and node.handlers and isinstance(node.body[-1], ast.Raise)}
    seeded = min(
        (node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
         and (_dotted(node.func) or "").split(".")[-1] in SEEDERS),
        default=None,
    )
    for number, node in enumerate(order, start=1):
        in_hidden = node.lineno in hidden_lines
        counts[in_hidden] += 1
        check_id = f"{task}/{number}"
        if isinstance(node, ast.Assert):
            builder = _Builder(names, helpers, kept)
            condition = builder.condition(node.test)
            check = Check(
                check_id,
                task,
                in_hidden,
                counts[in_hidden],
                _message(node.msg, None if in_hidden else node),
                "assert",
                condition,
                # a hidden check's code stays with the grader: its operands carry no text
                tuple(replace(op, text="") for op in builder.operands) if in_hidden else tuple(builder.operands),
                seeded is not None and seeded < node.lineno,
            )
            found[_key(node)] = _Found(check, builder.exprs)
        else:
            message = _is_assertion_error(node)
            check = Check(
                check_id, task, in_hidden, counts[in_hidden], _message(message), "reached",
                must_raise=_key(node) in ends_of_try,
            )
            found[_key(node)] = _Found(check, [])
    dropped = _droppable(tree, found, used_elsewhere)
    student = _Rewrite(found, False, dropped, names.bound).visit(ast.parse(code))
    reference = _Rewrite(found, True, set(), names.bound).visit(ast.parse(code))
    student = ast.fix_missing_locations(_CourseNames(kept).visit(student))
    reference = ast.fix_missing_locations(_CourseNames(kept).visit(reference))
    _reporters_stay_at_top_level(task, reference)
    checks = [
        entry.check
        for entry in sorted(found.values(), key=lambda e: int(e.check.id.split("/")[-1]))
    ]
    binds = frozenset(top_level_names(tree) - set(PARAMETERS))
    parts = split_hidden(source) if hidden else None
    return TaskScenario(task, ast.unparse(student), ast.unparse(reference), checks, binds,
                        parts is not None and draws_inputs(parts[1]))


def draws_inputs(region: str) -> bool:
    """Whether a hidden region draws its inputs from `check_rng` (seeded per submission)."""
    return any(isinstance(node, ast.Name) and node.id == RNG for node in ast.walk(ast.parse(region)))


# Scopes a scenario may leave behind in the notebook's namespace (a function, a lambda, a class),
# where the submission's code can read what they hold: `f.__closure__[0].cell_contents`. A
# comprehension's scope ends with it, unreachable.
_LASTING_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _reporters_stay_at_top_level(task: str, scenario: ast.Module) -> None:
    """ValueError when a check sits inside a function, lambda or class of a grade cell.

    A scenario's reporters are parameters of the function the runner makes of it; a check in a
    nested scope would make that scope hold them in its closure, and a function the cell
    defines stays in the notebook's namespace, where the submission's code could take them
    (and through them the runner's key and state). So no grade cell may: its checks stand at
    the cell's top level, where nothing keeps them (a helper returns a value; the cell asserts
    on it)."""
    for scope in ast.walk(scenario):
        if not isinstance(scope, _LASTING_SCOPES):
            continue
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id in PARAMETERS:
                name = getattr(scope, "name", "lambda")
                what = {CHECK: "an assert", REACHED: "a raise AssertionError", RNG: "check_rng"}.get(node.id, "a check")
                raise ValueError(
                    f"task {task}: line {node.lineno}: {what} inside {name!r} would leave the grader's "
                    "reporters where the submission's code can reach them; check at the cell's top level "
                    "(let the helper return a value and assert on it there)"
                )


class _CourseNames(ast.NodeTransformer):
    """Reads of the course's own names (its imports, helpers and data, and what earlier grade
    cells bound) taken from the runner's record of what the course's cells bound, not from
    the notebook's namespace, where the submission's code may have rebound them
    (`gradcheck = lambda *a: True`). Functions and lambdas the scenario defines keep plain
    names: they may be handed to the submission's code, which could read what they hold."""

    def __init__(self, names: frozenset[str] | set[str]):
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            key = ast.Constant("course:" + node.id)
            return ast.copy_location(
                ast.Subscript(ast.Name(PRISTINE, ast.Load()), key, ast.Load()), node
            )
        return node

    def _keep(self, node: ast.AST) -> ast.AST:
        return node

    visit_Lambda = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _keep


def _droppable(tree: ast.AST, found: dict[tuple, _Found], elsewhere: frozenset[str]) -> set[tuple]:
    """Assignments that only feed expected sides: the student's run leaves them out, so no
    expected value is ever computed in the student's process."""
    skipped_exprs = [
        expr
        for entry in found.values()
        for operand, expr in zip(entry.check.operands, entry.exprs)
        if not operand.evaluated
    ]
    skipped_nodes = {id(inner) for expr in skipped_exprs for inner in ast.walk(expr)}
    reads: dict[str, int] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and id(node) not in skipped_nodes
        ):
            reads[node.id] = reads.get(node.id, 0) + 1
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads[node.target.id] = reads.get(node.target.id, 0) + 1  # `kept += [x]` reads kept
    dropped: set[tuple] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and all(isinstance(target, ast.Name) for target in node.targets)
            and is_pure(node.value)
        ):
            names = {target.id for target in node.targets}
            if not (names & set(reads)) and not (names & elsewhere):
                dropped.add(_key(node))
    return dropped


def pure_helpers(cells_source: list[str]) -> dict[str, str]:
    """The module's helpers the trusted grader may evaluate itself: private functions defined
    in course cells whose bodies use only their arguments, numpy, math and builtins. Those
    named `_close...` compare a student's value with the reference's, like `np.allclose`;
    the others are evaluated on the student's values alone. {name: source of the def}."""
    found: dict[str, str] = {}
    for source in cells_source:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("_"):
                continue
            if node.decorator_list:
                continue
            arguments = {a.arg for a in node.args.args + node.args.kwonlyargs}
            inside = {
                n.id
                for c in ast.walk(node)
                if isinstance(c, ast.comprehension)
                for n in ast.walk(c.target)
                if isinstance(n, ast.Name)
            }
            loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            allowed = arguments | inside | TRUSTED_MODULES | set(dir(builtins))
            calls = [_dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
            trusted_calls = all(
                name is not None and name.split(".")[0] in TRUSTED_MODULES | set(dir(builtins))
                for name in calls
            )  # no method of an argument: those may be the student's objects
            if loads <= allowed and trusted_calls and all(
                not isinstance(n, (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom))
                for n in ast.walk(node)
            ):
                found[node.name] = ast.unparse(node)
    return found


@functools.lru_cache(maxsize=4096)
def bound_names(source: str) -> frozenset[str]:
    """Names a course cell binds at its top level: what the runner records after it runs
    (worked out here, once per cell, not in every run)."""
    try:
        return frozenset(top_level_names(ast.parse(source)) - set(PARAMETERS))
    except SyntaxError:
        return frozenset()


def names_read(source: str) -> set[str]:
    """Every name a cell's code reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
