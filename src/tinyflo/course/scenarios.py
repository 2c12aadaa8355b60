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
* each **check** says, for the trusted grader (tinyflo.course.verdicts), how to compare the
  student's actual values with the reference's expected ones.

Which operand of a check is the student's: the first operand of `==` and of a comparison
helper (`np.allclose(actual, expected, ...)`, `_close(actual, expected)`, `math.isclose`), the
object of `isinstance` and `.startswith`; every operand of `<`, `<=`, `!=`, `in` that is not
a literal. A literal is an expression of constants, the standard numerical modules and
names bound only to such expressions. Identity (`is`), `or`, `all(... for ...)` and any other
expression are evaluated in the scenario and recorded as a truth value.

This file needs only the standard library.
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass, field

from tinyflo.course.checks import BEGIN, END, split_hidden

CHECK = "__tf_check"  # the runner's names, bound in the scenario's namespace
REACHED = "__tf_reached"
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
VALUE, TYPE, CLASSES, TRUTH, DISCARD = "value", "type", "classes", "truth", "discard"


@dataclass(frozen=True)
class Operand:
    """One value a check looks at: whose run supplies it, and how it crosses as data."""

    mode: str  # VALUE, TYPE (an object's classes), CLASSES (a class or tuple of them), TRUTH
    student: bool  # recorded from the student's run (else only the reference's is used)
    evaluated: bool  # evaluated in the student's run at all (an expected side with side effects)


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


@dataclass
class TaskScenario:
    """A grade cell turned into scenarios: what runs where, and the checks."""

    task: str
    student_code: str
    reference_code: str
    checks: list[Check] = field(default_factory=list)


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
        self.literal: set[str] = set()
        changed = True
        while changed:  # a literal may be built from other literals
            changed = False
            for name, values in bound.items():
                if name in self.literal or None in values:
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


def _message(node: ast.AST | None) -> str:
    """The student's text of an assert message or AssertionError argument."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(p.value if isinstance(p, ast.Constant) else "…" for p in node.values)
    return "the expected result was not produced"


class _Builder:
    """Collects the operands of one check while its condition is decomposed."""

    def __init__(self, names: _Names, helpers: frozenset[str]):
        self.names = names
        self.helpers = helpers
        self.exprs: list[ast.expr] = []
        self.operands: list[Operand] = []

    def add(self, expr: ast.expr, mode: str, student: bool) -> int:
        if student:
            evaluated = True
        else:
            evaluated = not is_pure(expr)  # its side effects still happen in the student's run
        self.exprs.append(expr)
        self.operands.append(Operand(mode, student, evaluated))
        return len(self.exprs) - 1

    def truth(self, node: ast.expr) -> tuple:
        return ("atom", "truth", [self.add(node, TRUTH, True)], {})

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
            return self.truth(node)
        items = [node.left, *node.comparators]
        literal = [self.names.is_literal(item) for item in items]
        for position, op in enumerate(ops):
            if not isinstance(op, ast.Eq) and not literal[position] and not literal[position + 1]:
                # Two of the student's values against each other (`frozen not in opt.state`,
                # `first < second`): decided where the objects are, as a truth value.
                return self.truth(node)
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

    def call(self, node: ast.Call) -> tuple:
        name = _dotted(node.func)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            return self.truth(node)
        if name == "isinstance" and len(node.args) == 2 and not node.keywords:
            actual = self.add(node.args[0], TYPE, True)
            classes = self.add(node.args[1], CLASSES, False)
            return ("atom", "isinstance", [actual, classes], {})
        comparator = COMPARATORS.get(name or "") or (name if name in self.helpers else None)
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

    def __init__(self, found: dict[tuple, _Found], reference: bool, dropped: set[tuple]):
        self.found = found
        self.reference = reference
        self.dropped = dropped  # ids of assignment statements left out of the student's run

    def _replace(self, node: ast.stmt) -> ast.stmt:
        entry = self.found[_key(node)]
        check = entry.check
        if check.kind == "reached":
            call = _call(REACHED, [ast.Constant(check.id)])
        else:
            args: list[ast.expr] = [ast.Constant(check.id)]
            for operand, expr in zip(check.operands, entry.exprs):
                if self.reference or operand.evaluated:
                    args.append(copy.deepcopy(expr))
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
) -> TaskScenario:
    """Turn one grade cell into its scenarios and checks.

    `hidden=False` leaves the hidden region out (what `tinyflo module test` runs). `helpers`
    are the module's own comparison functions the grader evaluates (see `pure_helpers`);
    `used_elsewhere`, names read by other cells, which no assignment here may drop.
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
    found: dict[tuple, _Found] = {}
    counts = {True: 0, False: 0}
    order: list[ast.stmt] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        or (isinstance(node, ast.Raise) and _is_assertion_error(node) is not False)
    ]
    order.sort(key=lambda node: (node.lineno, node.col_offset))
    for number, node in enumerate(order, start=1):
        in_hidden = node.lineno in hidden_lines
        counts[in_hidden] += 1
        check_id = f"{task}/{number}"
        if isinstance(node, ast.Assert):
            builder = _Builder(names, helpers)
            condition = builder.condition(node.test)
            check = Check(
                check_id,
                task,
                in_hidden,
                counts[in_hidden],
                _message(node.msg),
                "assert",
                condition,
                tuple(builder.operands),
            )
            found[_key(node)] = _Found(check, builder.exprs)
        else:
            message = _is_assertion_error(node)
            check = Check(
                check_id, task, in_hidden, counts[in_hidden], _message(message), "reached"
            )
            found[_key(node)] = _Found(check, [])
    dropped = _droppable(tree, found, used_elsewhere)
    student = ast.fix_missing_locations(_Rewrite(found, False, dropped).visit(ast.parse(code)))
    reference = ast.fix_missing_locations(_Rewrite(found, True, set()).visit(ast.parse(code)))
    checks = [
        entry.check
        for entry in sorted(found.values(), key=lambda e: int(e.check.id.split("/")[-1]))
    ]
    return TaskScenario(task, ast.unparse(student), ast.unparse(reference), checks)


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
    """The module's comparison helpers the trusted grader may evaluate itself: functions
    named `_close`-like, defined in course cells, whose bodies use only numpy, math and
    builtins. {name: source of the def}."""
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
            loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            allowed = arguments | TRUSTED_MODULES | set(dir(builtins))
            if loads <= allowed and all(
                not isinstance(n, (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom))
                for n in ast.walk(node)
            ):
                found[node.name] = ast.unparse(node)
    return found


def names_read(source: str) -> set[str]:
    """Every name a cell's code reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
