"""What similarity compares: a student's code as its structure (`structure`), so that a copy's
cheapest disguises (new names, new comments, another order, a function split into helpers or
helpers merged into one) are undone and a disguised copy reads as the code it was copied from.
"""

from __future__ import annotations

import ast
import copy

BODIES = ("body", "orelse", "finalbody", "handlers", "cases")  # the fields of a statement that hold statements
VALUE = "v"  # the name every name becomes (`_one_name`): of a hoisted helper's value, too
INLINE_GROWTH = 4  # inlined helpers may add at most this many times a student's code; past it, calls stay calls
BROKEN_BLOCKS = 10  # past this many top-level blocks that do not parse, the code is compared as its text


def structure(code: str) -> str:
    """``code`` as it is compared: each helper put where it is called (`Inliner`), every name the code
    binds one name, docstrings, comments, strings' contents and type hints gone, ``x += y`` written
    ``x = x + y`` and a list appended to in a loop as a comprehension (`_Plain`), the definitions of
    the module and of each class in one order, the layout ``ast.unparse``'s. A top-level block that does not parse is kept as its text, after the rest; so
    is all the code where too much does not parse or it is nested too deep to walk."""
    return structured(code)[0]


def structured(code: str) -> tuple[str, ast.Module | None, list[tuple[int, int]]]:
    """`structure`'s text; the tree it unparses (None where the code is kept as its text); and the
    top-level blocks that did not parse (first and last line, from 1), which follow it as text."""
    lines = code.split("\n")
    try:
        tree, broken = _parse(lines)
        tree = Inliner(tree).module(_Plain().visit(tree))
        tree.body = _in_order(_one_name(tree).body)
        text = ast.unparse(tree)
    except (MemoryError, RecursionError, SyntaxError, ValueError):  # too broken; or too deep for ast's walks,
        return code, None, []  # or for its parser, which says so with a MemoryError ("parser stack overflow")
    return "\n".join([text, *("\n".join(lines[first - 1:last]) for first, last in broken)]), tree, broken


def _parse(lines: list[str]) -> tuple[ast.Module, list[tuple[int, int]]]:
    """The syntax tree of the code, each top-level block that does not parse blanked out (so the lines
    keep their numbers); and those blocks, first and last line."""
    lines, broken = list(lines), []
    while True:
        try:
            return ast.parse("\n".join(lines)), sorted(broken)
        except SyntaxError as error:
            tops = [i for i, line in enumerate(lines) if line[:1].strip() and line[:1] != "#"]  # a block starts at column 0
            at = min(max((error.lineno or 1) - 1, 0), len(lines) - 1)
            first = max((i for i in tops if i <= at), default=0)
            end = min((i for i in tops if i > at), default=len(lines))
            if len(broken) == BROKEN_BLOCKS or not any(line.strip() for line in lines[first:end]):
                raise
            broken.append((first + 1, end))
            lines[first:end] = [""] * (end - first)


class _Filled(ast.NodeTransformer):
    """A transformer after which a body it leaves empty holds ``pass``."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if isinstance(getattr(node, "body", None), list) and not node.body and not isinstance(node, ast.Module):
            node.body = [ast.copy_location(ast.Pass(), node)]
        return node


class _Plain(_Filled):
    """What a copier changes freely and a program hardly depends on, made the same everywhere: bare
    strings (docstrings) go, other strings lose their contents, type hints go, ``x += y`` becomes
    ``x = x + y``, a list built by a loop becomes a comprehension (`_comprehended`)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, _comprehended(getattr(node, field)))
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        return None if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) else self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant("s") if isinstance(node.value, (str, bytes)) else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.Constant("s")

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        return None if node.value is None else self.visit(ast.copy_location(ast.Assign([node.target], node.value), node))

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        read = copy.deepcopy(node.target)
        read.ctx = ast.Load()
        return self.visit(ast.copy_location(ast.Assign([node.target], ast.BinOp(read, node.op, node.value)), node))


def _comprehended(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``xs = []`` followed by ``for x in it: xs.append(e)`` (its body perhaps ``if c: xs.append(e)``)
    written ``xs = [e for x in it if c]``, where the loop does not read ``xs`` otherwise."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        start = out[-1] if out else None
        if (isinstance(stmt, ast.For) and not stmt.orelse and isinstance(start, ast.Assign) and len(start.targets) == 1
                and isinstance(start.targets[0], ast.Name) and isinstance(start.value, ast.List) and not start.value.elts):
            body, conditions = stmt.body, []
            if len(body) == 1 and isinstance(body[0], ast.If) and not body[0].orelse:
                body, conditions = body[0].body, [body[0].test]
            call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
            name = start.targets[0].id
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                    and getattr(call.func.value, "id", None) == name and len(call.args) == 1 and not call.keywords
                    and name not in {node.id for part in (stmt.target, stmt.iter, call.args[0], *conditions)
                                     for node in ast.walk(part) if isinstance(node, ast.Name)}):
                start.value = ast.ListComp(call.args[0], [ast.comprehension(stmt.target, stmt.iter, conditions, 0)])
                start.end_lineno = stmt.end_lineno  # it stands for the loop's lines too
                continue
        out.append(stmt)
    return out


def _helper(node: ast.AST) -> bool:
    """A function that can be put where it is called: neither recursive nor a generator."""
    return isinstance(node, ast.FunctionDef) and not any(
        isinstance(inner, (ast.Yield, ast.YieldFrom)) or getattr(inner, "id", getattr(inner, "attr", None)) == node.name
        for inner in ast.walk(node) if inner is not node)


class Inliner:
    """Puts each helper where it is called, its parameters bound to the call's arguments. A helper is
    a function the code defines (`_helper`); a method called on its class's first parameter
    (``self.f(..)``) is a helper of the class's methods. One whose body is one ``return`` becomes its
    expression; any other becomes its statements, where the call is a whole statement (``x = f(..)``,
    ``return f(..)``, ``f(..)``) in its place, its returns made what that statement does with the value,
    elsewhere before the statement, the value in a variable. A helper called nowhere else is then
    dropped: splitting a function into helpers and merging them back read the same."""

    def __init__(self, tree: ast.Module):
        self.room = INLINE_GROWTH * sum(1 for _ in ast.walk(tree))  # nodes the inlined copies may add
        self.inlined: set[str] = set()

    def module(self, tree: ast.Module) -> ast.Module:
        tree.body = self.body(tree.body, {}, frozenset())
        while True:  # drop each inlined helper nothing calls now; a dropped one may have been another's last caller
            called = {getattr(node, "id", getattr(node, "attr", None)) for node in ast.walk(tree)
                      if isinstance(node, (ast.Name, ast.Attribute))}
            dropped = self.inlined - called
            if not dropped:
                return tree
            self.inlined -= dropped
            _Drop(dropped).visit(tree)

    def body(self, stmts: list[ast.stmt], scope: dict, stack: frozenset, methods: dict | None = None) -> list[ast.stmt]:
        """``stmts`` with the helpers in ``scope`` and those they define inlined; ``stack``: the helpers
        being inlined, not to be inlined in themselves; ``methods``: a class body's methods."""
        if methods is None:
            scope = scope | {stmt.name: stmt for stmt in stmts if _helper(stmt)}
        out = []
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = (stmt.args.posonlyargs + stmt.args.args)[:1]
                own = {f"{first[0].arg}.{name}": method for name, method in (methods or {}).items()} if first else {}
                stmt.body = self.body(stmt.body, scope | own, stack | {id(stmt)})
            elif isinstance(stmt, ast.ClassDef):
                stmt.body = self.body(stmt.body, scope, stack, {s.name: s for s in stmt.body if _helper(s)})
            else:
                for field in ("body", "orelse", "finalbody"):
                    if getattr(stmt, field, None):
                        setattr(stmt, field, self.body(getattr(stmt, field), scope, stack))
                for clause in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
                    clause.body = self.body(clause.body, scope, stack)
            out += self.statement(stmt, scope, stack)
        return out

    def statement(self, stmt: ast.stmt, scope: dict, stack: frozenset) -> list[ast.stmt]:
        """``stmt``'s own expressions with their helper calls inlined, after the statements they need."""
        expressions = _Expressions(self, scope, stack, stmt)
        whole = isinstance(stmt, (ast.Expr, ast.Return)) or isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        found = self.callee(stmt.value, scope, stack) if whole else None
        if found and _expression(found[0]) is None:
            expressions.generic_visit(stmt.value)  # the call's arguments
            found = self.callee(stmt.value, scope, stack)
            if found and self.afford(found[0]):
                return expressions.hoisted + self.inline(stmt, *found, scope, stack)
        for field, value in ast.iter_fields(stmt):
            if field not in BODIES and isinstance(value, (ast.AST, list)):
                setattr(stmt, field, expressions.visit(value) if isinstance(value, ast.AST) else
                        [expressions.visit(item) if isinstance(item, ast.AST) else item for item in value])
        return expressions.hoisted + [stmt]

    def inline(self, at: ast.stmt, function: ast.FunctionDef, arguments: dict, scope: dict,
               stack: frozenset) -> list[ast.stmt]:
        """``function``'s body for its call in the statement ``at``: a parameter put in its place
        where its argument is a name, or a constant or attribute (``x.shape``) it never assigns, any
        other assigned first; its own helpers inlined; each return made what ``at`` does with the
        value (`_returned`)."""
        body = copy.deepcopy(function.body)
        stored = {node.id for node in ast.walk(ast.Module(body, []))
                  if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
        names = {name: value.id for name, value in arguments.items() if isinstance(value, ast.Name)}
        read = {name: value for name, value in arguments.items() if name not in names and name not in stored
                and all(isinstance(node, (ast.Constant, ast.Attribute, ast.Name, ast.Load)) for node in ast.walk(value))}
        first = [ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], value), at)
                 for name, value in arguments.items() if name not in names and name not in read]
        for node in ast.walk(ast.Module(body, [])):
            if isinstance(node, ast.Name) and node.id in names:
                node.id = names[node.id]
        body = [_Substituted(read).visit(stmt) for stmt in body]
        return first + _returned(self.body(body, scope, stack | {id(function)}), at)

    def callee(self, node: ast.AST | None, scope: dict, stack: frozenset) -> tuple[ast.FunctionDef, dict] | None:
        """The helper ``node`` calls and its parameters bound to the arguments the call passes; None
        where ``node`` is no call of a helper, of one in ``stack``, or passes what cannot be bound."""
        if not isinstance(node, ast.Call):
            return None
        func, receiver = node.func, []
        key = getattr(func, "id", None)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            key, receiver = f"{func.value.id}.{func.attr}", [func.value]
        function = scope.get(key)
        if function is None or id(function) in stack:
            return None
        spec = function.args
        params = [p.arg for p in spec.posonlyargs + spec.args]
        passed = receiver + node.args
        if (spec.vararg or spec.kwarg or len(passed) > len(params) or any(isinstance(a, ast.Starred) for a in passed)
                or any(k.arg is None or k.arg in params[:len(passed)] for k in node.keywords)):
            return None
        return function, dict(zip(params, passed)) | {k.arg: k.value for k in node.keywords}

    def afford(self, function: ast.FunctionDef) -> bool:
        """Whether there is room to inline ``function`` once more (then that room is taken)."""
        size = sum(1 for _ in ast.walk(function))
        if size > self.room:
            return False
        self.room -= size
        self.inlined.add(function.name)
        return True


def _expression(function: ast.FunctionDef) -> ast.expr | None:
    """What ``function`` returns if its body is one ``return`` that assigns none of its parameters
    (which are to be replaced by their arguments), else None."""
    body = function.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    params = {node.arg for node in ast.walk(function.args) if isinstance(node, ast.arg)}
    if any(isinstance(node, ast.Name) and node.id in params and not isinstance(node.ctx, ast.Load)
           for node in ast.walk(body[0])):
        return None
    return body[0].value


class _Expressions(ast.NodeTransformer):
    """A statement's own expressions, each helper call inlined: a helper of one ``return`` as its
    expression, the parameters replaced by the arguments; any other as its statements, put before the
    statement ``at`` (in ``hoisted``), the value in a variable, though not out of a lambda or a
    comprehension, whose names it may read."""

    def __init__(self, inliner: Inliner, scope: dict, stack: frozenset, at: ast.stmt):
        self.inliner, self.scope, self.stack, self.at = inliner, scope, stack, at
        self.hoisted: list[ast.stmt] = []
        self.enclosed = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        found = self.inliner.callee(node, self.scope, self.stack)
        if found is None:
            return node
        function, arguments = found
        value = _expression(function)
        if value is None and not self.enclosed and self.inliner.afford(function):
            into = ast.copy_location(ast.Assign([ast.Name(VALUE, ast.Store())], node), self.at)
            self.hoisted += self.inliner.inline(into, function, arguments, self.scope, self.stack)
            return ast.Name(VALUE, ast.Load())
        if value is None or not self.inliner.afford(function):
            return node
        returned = function.body[0]  # the statement stands for the helper's line too (`_origins`)
        self.at.helper_lines = [*getattr(self.at, "helper_lines", []), (returned.lineno, returned.end_lineno),
                                *getattr(returned, "helper_lines", [])]
        outer, self.stack = self.stack, self.stack | {id(function)}
        value = self.visit(_Substituted(arguments).visit(copy.deepcopy(value)))
        self.stack = outer
        return value

    def _enclosing(self, node: ast.AST) -> ast.AST:
        self.enclosed += 1
        self.generic_visit(node)
        self.enclosed -= 1
        return node

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _enclosing


class _Substituted(ast.NodeTransformer):
    """Code with each parameter it reads replaced by its argument."""

    def __init__(self, arguments: dict[str, ast.expr]):
        self.arguments = arguments

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.arguments[node.id]) if node.id in self.arguments and isinstance(node.ctx, ast.Load) else node


class _Drop(_Filled):
    """The tree without the functions of these names."""

    def __init__(self, names: set[str]):
        self.names = names

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST | None:
        return None if node.name in self.names else self.generic_visit(node)


def _returned(body: list[ast.stmt], at: ast.stmt) -> list[ast.stmt]:
    """An inlined helper's ``body`` with each ``return`` made what the statement of its call, ``at``,
    does with the value: ``return`` returns it, ``x = f(..)`` assigns it (unless it is x), ``f(..)``
    drops it. Functions and classes defined in the body keep their own returns."""
    if isinstance(at, ast.Return):
        return body
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Return):
            target = at.targets[0] if isinstance(at, ast.Assign) else None
            if target is not None and stmt.value is not None and ast.unparse(target) != ast.unparse(stmt.value):
                out.append(ast.copy_location(ast.Assign([copy.deepcopy(target)], stmt.value), stmt))
            continue
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                if getattr(stmt, field, None):
                    setattr(stmt, field, _returned(getattr(stmt, field), at) or [ast.copy_location(ast.Pass(), stmt)])
            for clause in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
                clause.body = _returned(clause.body, at) or [ast.copy_location(ast.Pass(), stmt)]
        out.append(stmt)
    return out


def _one_name(tree: ast.Module) -> ast.Module:
    """Every name the code binds (variables, parameters, functions, classes, imports) becomes VALUE."""
    bound = {name for node in ast.walk(tree) for name in (
        [node.id] if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else
        [node.arg] if isinstance(node, ast.arg) else
        [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)) else
        [(node.asname or node.name).split(".")[0]] if isinstance(node, ast.alias) else [])}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            node.id = VALUE
        elif isinstance(node, ast.arg):
            node.arg = VALUE
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
                isinstance(node, ast.ExceptHandler) and node.name):
            node.name = VALUE
    return tree


def _in_order(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """A module's or class's statements in the order of their text: the order they were written in
    does not count."""
    for stmt in stmts:
        if isinstance(stmt, ast.ClassDef):
            stmt.body = _in_order(stmt.body)
    return sorted(stmts, key=ast.unparse)


def origins(tree: ast.Module, text: str) -> list[list[tuple[int, int]]]:
    """For each line of ``text`` (``tree`` unparsed), the lines of the code it stands for (first and last
    of each run): a statement's lines, or a compound statement's first, and the lines of the helpers
    whose expressions it holds; none for a line such as ``else:``, or for any line where the text
    does not parse back into the statements of ``tree``."""
    origins: list[list[tuple[int, int]]] = [[] for _ in range(text.count("\n") + 1)]
    try:
        read = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.stmt)]
    except (MemoryError, RecursionError, SyntaxError, ValueError):  # as `structured`'s
        return origins
    made = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)]
    if len(read) != len(made):
        return origins  # no marks rather than wrong ones
    for new, old in zip(read, made):
        if not getattr(old, "end_lineno", None):  # a statement without a place stands for no line
            continue
        compound = isinstance(getattr(new, "body", None), list)
        spans = [(old.lineno, old.lineno if compound else old.end_lineno), *getattr(old, "helper_lines", [])]
        for line in range(new.lineno, (new.lineno if compound else new.end_lineno) + 1):
            origins[line - 1] = spans
    return origins
