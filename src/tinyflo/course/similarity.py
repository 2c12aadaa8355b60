"""Submissions that look copied: each student's own code in one module, compared pair by pair.

Each student's code is compared by its structure (`structure`): every helper function is put where
it is called, every name becomes one name, docstrings, comments and strings' contents go, and the
definitions are put in one order; so renaming, reordering, new comments, and splitting a function
into helpers or merging helpers back do not hide a copy. The comparison of those texts is copydetect's
(Stanford MOSS's winnowing): each is reduced to fingerprints of its k-grams of tokens, and two
submissions are alike by the share of their code whose fingerprints they have in common. Only the
code a student wrote counts: the cells nbgrader marks as solutions and the cells the student added.
The course's given code is not in them, and the stubs of the released solution cells (signatures,
docstrings, ``raise NotImplementedError``) are boilerplate that matches nothing. A pair's page shows
that code too, and only that, as the students wrote it: a row per task, the two students side by
side, the lines that match marked."""

from __future__ import annotations

import ast
import copy
import functools
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyflo.core.checkpoints import atomic_write
from tinyflo.course.nbgrader_run import course_command
from tinyflo.course.notebooks import require
from tinyflo.course.source import NOTEBOOK_LIMIT, SIMILAR, CourseError, read_regular

# A page shows code as text with its own inline style: no script runs, nothing loads, no form is sent.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_HEAD = f"<!doctype html><html><head><meta http-equiv='Content-Security-Policy' content=\"{PAGE_POLICY}\"><meta charset='utf-8'>"

NOISE = 25  # copydetect's default: shorter matches than this (in filtered characters) are noise
GUARANTEE = 25  # every match at least this long is found (one fingerprint per k-gram)
ADDED = "cells of their own"  # what labels the code cells a student added


@dataclass(frozen=True)
class Pair:
    """Two students and how much of each one's code the other has too (0 to 1)."""

    first: str
    second: str
    first_share: float
    second_share: float

    @property
    def similarity(self) -> float:
        """The larger share: a short submission copied whole into a long one is still a copy."""
        return max(self.first_share, self.second_share)


@dataclass(frozen=True)
class Part:
    """One piece of a student's own code: a task's solution cell (labelled by the task) or a cell
    they added (labelled ADDED), and where it starts in their code as compared (joined)."""

    label: str
    source: str
    start: int


def _code_cells(notebook: dict) -> list[dict]:
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    return [cell for cell in (cells if isinstance(cells, list) else [])
            if isinstance(cell, dict) and cell.get("cell_type") == "code"]


def _marks(cell: dict) -> dict | None:
    """A cell's nbgrader metadata: a dict, {} when it is not one, None when there is none."""
    metadata = cell.get("metadata")
    marks = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return marks if marks is None or isinstance(marks, dict) else {}


def _source(cell: dict) -> str | None:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    return source if isinstance(source, str) else None  # anything else is not a notebook's code


def given_cells(release: dict) -> list[dict]:
    """The code cells of the release that are not solution cells: the course's given code."""
    return [cell for cell in _code_cells(release) if not (_marks(cell) or {}).get("solution")]


def own_parts(notebook: dict, release: dict | None = None) -> list[Part]:
    """The code a student wrote, in order: each solution cell, labelled by its task (its grade id
    without ``_code``), and each code cell they added, labelled ADDED. A cell of the ``release``
    (the same cell id, or the same text) is the course's, edited or not: grading puts it back."""
    given = given_cells(release or {})
    given_ids = [cell["id"] for cell in given if isinstance(cell.get("id"), str)]  # a list: an id may be anything
    given_sources = {_source(cell) for cell in given}
    parts, start = [], 0
    for cell in _code_cells(notebook):
        marks, source = _marks(cell), _source(cell)
        if source is None:
            continue
        if marks and marks.get("solution"):
            label = str(marks.get("grade_id", "")).removesuffix("_code") or "a solution cell"
        elif marks is None and not (cell.get("id") in given_ids or source in given_sources):
            label = ADDED
        else:
            continue
        parts.append(Part(label, source, start))
        start += len(source) + 2  # as joined
    return parts


def joined(parts: list[Part]) -> str:
    """The parts as one text, the way they are compared: each Part's start is its place in it."""
    return "\n\n".join(part.source for part in parts) + "\n"


def own_code(notebook: dict, release: dict | None = None) -> str:
    """The code a student wrote (own_parts), as one text."""
    return joined(own_parts(notebook, release))


# What is compared. A copier's cheapest disguises are new names, new comments, another order, and a
# function split into helpers or helpers merged into one: each student's code is compared after all of
# them are undone, so that a disguised copy reads as the code it was copied from.

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
    return _structure(code)[0]


def _structure(code: str) -> tuple[str, ast.Module | None, list[tuple[int, int]]]:
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


def _origins(tree: ast.Module, text: str) -> list[list[tuple[int, int]]]:
    """For each line of ``text`` (``tree`` unparsed), the lines of the code it stands for (first and last
    of each run): a statement's lines, or a compound statement's first, and the lines of the helpers
    whose expressions it holds; none for a line such as ``else:``, or for any line where the text
    does not parse back into the statements of ``tree``."""
    origins: list[list[tuple[int, int]]] = [[] for _ in range(text.count("\n") + 1)]
    try:
        read = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.stmt)]
    except (MemoryError, RecursionError, SyntaxError, ValueError):  # as `_structure`'s
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


def _fingerprint(name: str, code: str, boilerplate: list):
    window = GUARANTEE - NOISE + 1
    return require("copydetect").CodeFingerprint(f"{name}.py", NOISE, window, boilerplate=boilerplate,
                                                 fp=io.StringIO(code), language="python")


class Compared:
    """A student's code as it is compared (`structure`) and fingerprinted, and for each line of that
    text the lines of their code it stands for, so that `lines` can say where a match is."""

    def __init__(self, code: str, boilerplate: list):
        self.code = code
        self.text, tree, broken = _structure(code)
        self.fingerprint = _fingerprint("code", self.text, boilerplate)
        text = self.text.split("\n")
        unparsed = len(text) - sum(last - first + 1 for first, last in broken)
        self.origins = ([[(n, n)] for n in range(1, len(text) + 1)] if tree is None else
                        _origins(tree, "\n".join(text[:unparsed])) +
                        [[(n, n)] for first, last in broken for n in range(first, last + 1)])

    def lines(self, slices: tuple) -> list[tuple[int, int]]:
        """Where a match is in the student's code: ``slices`` (copydetect's starts and ends in the text
        compared) as the lines of their code that stand for a line of that text at least half matched,
        each from its indent to its end."""
        code, found = _spans(self.code), set()
        for (first, last), spans in zip(_spans(self.text), self.origins):
            matched = sum(max(0, min(last, end) - max(first, start)) for start, end in zip(*slices))
            if last > first and 2 * matched >= last - first:
                found.update(n for start, end in spans for n in range(start, min(end, len(code)) + 1))
        return [code[n - 1] for n in sorted(found) if code[n - 1][0] < code[n - 1][1]]


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each line of ``text`` is, from its indent to its last character that is not a space."""
    spans, at = [], 0
    for line in text.split("\n"):
        spans.append((at + len(line) - len(line.lstrip()), max(at + len(line) - len(line.lstrip()), at + len(line.rstrip()))))
        at += len(line) + 1
    return spans


@functools.lru_cache(maxsize=64)
def _stub_prints(boilerplate: str) -> list:
    """The fingerprints of what everyone was given, which count for nothing."""
    return (np.unique(np.array(list(_fingerprint("boilerplate", structure(boilerplate), []).hashes)))
            if boilerplate.strip() else [])


def rank_pairs(codes: dict[str, str], boilerplate: str = "") -> list[Pair]:
    """Every pair of students, the most alike first."""
    compare_files = require("copydetect").compare_files
    stubs = _stub_prints(boilerplate)
    prints = {student: _fingerprint(student, structure(code), stubs) for student, code in sorted(codes.items())}
    students = list(prints)
    pairs = []
    for i, first in enumerate(students):
        for second in students[i + 1:]:
            _, (share_1, share_2), _ = compare_files(prints[first], prints[second])
            pairs.append(Pair(first, second, float(share_1), float(share_2)))
    return sorted(pairs, key=lambda p: (-p.similarity, p.first, p.second))


def shared_lines(mine: str, theirs: str, boilerplate: str = "") -> tuple[list, list]:
    """The lines of ``mine`` that ``theirs`` has too, and of ``theirs`` that ``mine`` has (start and end
    of each, from its indent), as compared (`structure`), ``boilerplate`` counting for nothing."""
    one, two = _compared(mine, boilerplate), _compared(theirs, boilerplate)
    _, _, (slices_1, slices_2) = require("copydetect").compare_files(one.fingerprint, two.fingerprint)
    return one.lines(slices_1), two.lines(slices_2)


@functools.lru_cache(maxsize=256)  # some 600 KB each for 200 lines; pages of 200 students: each row made once
def _compared(code: str, boilerplate: str) -> Compared:
    """A row of a pair page as compared, kept for the next page that shows the same student's row."""
    return Compared(code, _stub_prints(boilerplate))


def _read(path: Path) -> dict:
    try:
        return json.loads(read_regular(path, NOTEBOOK_LIMIT).decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CourseError(f"cannot read {path}: {error}") from None


def _marked(code: str, ranges: list[tuple[int, int]]) -> str:
    """``code`` as HTML text, each of ``ranges`` (start, end) in a <mark>."""
    out, at = [], 0
    for start, end in ranges:
        out += [html.escape(code[at:start]), "<mark>", html.escape(code[start:end]), "</mark>"]
        at = end
    return "".join(out) + html.escape(code[at:])


def _by_label(parts: list[Part]) -> dict[str, str]:
    """A student's code under each label, a label's cells (the cells they added) joined."""
    cells: dict[str, list[str]] = {}
    for part in parts:
        cells.setdefault(part.label, []).append(part.source)
    return {label: joined([Part(label, source, 0) for source in sources]).removesuffix("\n")
            for label, sources in cells.items()}


PAGE_STYLE = ("body{font-family:sans-serif;margin:1em}.row{display:grid;grid-template-columns:1fr 1fr;gap:1em}"
              "h2,summary{font-size:105%;margin:1em 0 .3em}summary{color:#555;cursor:pointer}"
              "pre{background:#f6f6f6;padding:.5em;font-size:85%;white-space:pre-wrap;overflow-wrap:anywhere;"
              "margin:0 0 .5em}mark{background:#ffd54f}.none{color:#888;font-style:italic}"
              ".names{position:sticky;top:0;background:white;padding:.3em 0;border-bottom:1px solid #ccc}")


def pair_page(pair: Pair, parts: dict[str, list[Part]], module: str, stubs: dict[str, str] | None = None,
              given: int = 0) -> str:
    """A self-contained HTML page: the two students' own code side by side, a row per task (and a last
    one for the cells they added), the code they share marked; a row that shares none is folded.

    Each row is compared on its own, with the task's released stub (``stubs``, by label) as what
    both were given, so a mark is code of that task; ``given``: how many cells of given code the
    module has, which the page leaves out."""
    title = f"{module}: {pair.first} and {pair.second}, {pair.similarity:.0%} alike"
    first, second = _by_label(parts[pair.first]), _by_label(parts[pair.second])
    labels = [label for label in dict.fromkeys([*first, *second]) if label != ADDED]
    labels += [ADDED] if ADDED in first or ADDED in second else []  # they line up with nothing
    rows, shared = [], 0
    for label in labels:
        mine, theirs = first.get(label, ""), second.get(label, "")
        marks: tuple[list, list] = ([], [])
        if mine.strip() and theirs.strip():
            marks = shared_lines(mine, theirs, (stubs or {}).get(label, ""))
        columns = "".join(f"<div><pre>{_marked(code, ranges)}</pre></div>" if code else
                          "<div><p class='none'>no such cell</p></div>" for code, ranges in zip((mine, theirs), marks))
        name = html.escape(label if label == ADDED else f"task {label}")
        if marks[0] or marks[1]:
            shared += 1
            rows.append(f"<h2>{name}</h2><div class='row'>{columns}</div>")
        else:
            rows.append(f"<details><summary>{name}: nothing in common</summary><div class='row'>{columns}</div>"
                        "</details>")
    left_out = (f"The course's given code ({given} cell{'' if given == 1 else 's'}, the same in every submission) "
                "is left out. " if given else "")
    names = "".join(f"<div><b>{html.escape(student)}</b>: {share:.0%} of this code is in the other</div>"
                    for student, share in ((pair.first, pair.first_share), (pair.second, pair.second_share)))
    return (f"{_HEAD}<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>"
            "<p>What each student wrote: their solution cell of each task, and any cells they added. "
            f"{left_out}Marked: the lines of a task that the other has in the same task, compared by structure "
            "(helper functions put where they are called, names replaced, comments, docstrings and strings removed, "
            "definitions in one order), so a marked helper may stand for lines the other wrote in place; the "
            f"released stubs are not counted. {shared} of {len(labels)} rows share code; the others are folded.</p>"
            f"<div class='row names'>{names}</div>" + "".join(rows) + "</body></html>\n")


FEW_PAIRS = 10  # below this many pairs a class has no spread to stand out from: SIMILAR flags


@dataclass(frozen=True)
class Flag:
    """Which pairs get a page: those at least `threshold` alike; `how` says where it comes from."""

    threshold: float
    how: str


def class_flag(scores: list[float]) -> Flag:
    """The class's own outliers: pairs above Tukey's upper fence (the third quartile plus 1.5 times
    the spread between the quartiles) of every pair's score, where honest pairs gather; with fewer
    than FEW_PAIRS pairs, a fixed SIMILAR."""
    if len(scores) < FEW_PAIRS:
        return Flag(SIMILAR, f"at least {SIMILAR:.0%} alike (a fixed share: {len(scores)} pairs are too few to "
                             "stand out from)")
    first, third = np.percentile(scores, [25, 75])
    fence = float(third + 1.5 * (third - first))
    above = float(np.nextafter(fence, np.inf))  # above the fence, not on it
    return Flag(above, f"more than {fence:.0%} alike (the class's outliers: above the third quartile of "
                       f"every pair's score, {third:.0%}, by 1.5 times the spread between the quartiles)")


def similarity(course_dir: Path, module_slug: str, notebook_name: str, students: list[str], out: Path,
               threshold: float | None = None) -> tuple[list[Pair], Flag]:
    """Rank the pairs of ``students``' submissions of one module; write a page per pair the flag marks
    (``threshold`` alike or more, or by default the class's outliers: `class_flag`), and an index,
    into the folder ``out``."""
    release = course_dir / "release" / module_slug / f"{notebook_name}.ipynb"
    if not release.is_file():
        raise CourseError(f"{module_slug} is not released yet ({release} is missing): its stubs are what "
                          f"every submission shares; run `{course_command(f'release {module_slug}', course_dir)}` first")
    if len(students) < 2:
        raise CourseError(f"{module_slug}: {len(students)} readable submission(s); comparing needs two")
    given = _read(release)
    parts = {s: own_parts(_read(course_dir / "submitted" / s / module_slug / f"{notebook_name}.ipynb"), given)
             for s in students}
    pairs = rank_pairs({student: joined(own) for student, own in parts.items()}, own_code(given, given))
    stubs = _by_label(own_parts(given, given))
    flag = (class_flag([p.similarity for p in pairs]) if threshold is None
            else Flag(threshold, f"at least {threshold:.0%} alike (--threshold)"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pair in pairs:
        page = None
        if pair.similarity >= flag.threshold:
            page = f"{pair.first}--{pair.second}.html"
            text = pair_page(pair, parts, module_slug, stubs, len(given_cells(given)))
            atomic_write(out / page, lambda handle, text=text: handle.write(text.encode("utf-8")))
        link = f"<a href='{html.escape(page)}'>side by side</a>" if page else ""
        rows.append(f"<tr><td>{html.escape(pair.first)}</td><td>{html.escape(pair.second)}</td>"
                    f"<td>{pair.similarity:.0%}</td><td>{link}</td></tr>")
    module = html.escape(module_slug)
    index = (f"{_HEAD}<title>{module}: similar submissions"
             f"</title></head><body><h1>{module}: pairs of submissions, the most alike first</h1>"
             f"<p>{len(students)} submissions, {len(pairs)} pairs. How alike two are: the larger share of either "
             "one's own code (their solution cells and the cells they added) that the other has too, compared by "
             "structure: helper functions put where they are called, names replaced, comments, docstrings and "
             f"strings removed, definitions in one order. Each pair {html.escape(flag.how)} has a page, its code "
             "side by side. A high score is a reason to look, not a verdict: short tasks with one natural "
             "solution are alike in honest submissions too.</p><table><tr><th>student</th><th>student</th><th>alike</th><th></th></tr>"
             + "".join(rows) + "</table></body></html>\n")
    atomic_write(out / "index.html", lambda handle: handle.write(index.encode("utf-8")))
    return pairs, flag
