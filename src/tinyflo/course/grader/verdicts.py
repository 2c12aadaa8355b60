"""The trusted side of grading: what a run sent, read as plain data, and each check decided.

Nothing here runs code from a submission or from a scenario: only the course's own check
expressions and comparison helpers, over the values a run sent. Values arrive as JSON (and
.npy bytes read with `allow_pickle=False`), are checked against the shapes the runner may
send, and are compared with the expected values of the reference's run, with each check's
own comparison and tolerance (tinyflo.course.grader.scenarios says which is which).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinyflo.course.grader.scenarios import CLASSES, TEXT, TRUTH, TYPE, Check

try:  # bfloat16 and friends, when the course uses them
    import ml_dtypes  # noqa: F401
except ImportError:
    pass


class BadValue(ValueError):
    """A value that is not one the runner sends."""


@dataclass(frozen=True)
class TypeInfo:
    """An object's classes (isinstance's first argument), as qualified names."""

    mro: tuple[str, ...]


@dataclass(frozen=True)
class ClassRef:
    """A class (or a tuple of them) named by qualified names."""

    names: tuple[str, ...]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClassRef) and self.names[:1] == other.names[:1]

    def __hash__(self) -> int:
        return hash(self.names[:1])


@dataclass(frozen=True)
class Opaque:
    """An object that is not data: equal only to the same kind of object with the same repr."""

    kind: str
    text: str


def _array(text: Any) -> np.ndarray:
    if not isinstance(text, str):
        raise BadValue("an array must be base64 text")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except (binascii.Error, ValueError, OSError, UnicodeError) as error:
        raise BadValue(f"unreadable array ({type(error).__name__})") from None
    if not isinstance(array, np.ndarray) or array.dtype.hasobject:
        raise BadValue("an array must be numeric")
    return array


def decode(value: Any, depth: int = 0) -> Any:
    """A value the runner sent, as a Python or NumPy value; BadValue for anything else."""
    if depth > 40:
        raise BadValue("too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if not isinstance(value, dict) or len(value) not in (1, 2):
        raise BadValue(f"unexpected {type(value).__name__}")
    (key, item), *rest = value.items()
    if key == "npy":
        return _array(item)
    if key == "generic":
        return _array(item)[()]
    if key in ("list", "tuple") and isinstance(item, list):
        items = [decode(v, depth + 1) for v in item]
        return items if key == "list" else tuple(items)
    if key == "set" and isinstance(item, list):
        return frozenset(_hashable(decode(v, depth + 1)) for v in item)
    if key == "dict" and isinstance(item, list):
        pairs = {}
        for pair in item:
            if not isinstance(pair, list) or len(pair) != 2:
                raise BadValue("a dict entry must be a pair")
            k = _hashable(decode(pair[0], depth + 1))
            pairs[k] = decode(pair[1], depth + 1)
        return pairs
    if key == "dtype" and isinstance(item, str):
        try:
            return np.dtype(item)
        except TypeError:
            return Opaque("dtype", item)
    if key in ("float", "big") and isinstance(item, str):
        try:
            return float(item) if key == "float" else int(item)
        except ValueError:
            raise BadValue(f"not a number: {item[:20]!r}") from None
    if key == "long" and isinstance(item, str):
        return item
    if key == "complex" and isinstance(item, list) and len(item) == 2:
        return complex(float(item[0]), float(item[1]))
    if key == "class" and isinstance(item, list) and all(isinstance(n, str) for n in item):
        return ClassRef(tuple(item))
    if key == "mro" and isinstance(item, list) and all(isinstance(n, str) for n in item):
        return TypeInfo(tuple(item))
    if key == "classes" and isinstance(item, list) and all(isinstance(n, str) for n in item):
        return ClassRef(tuple(item))
    if key == "object" and isinstance(item, str):
        text = rest[0][1] if rest and rest[0][0] == "repr" else ""
        return Opaque(item, text if isinstance(text, str) else "")
    raise BadValue(f"unexpected value of kind {key!r}")


def _hashable(key: Any) -> Any:
    """A dict key as it came: arrays and lists (objects keyed by themselves) as plain bytes."""
    if isinstance(key, np.ndarray):
        return ("array", key.dtype.str, key.shape, key.tobytes())
    if isinstance(key, list):
        return ("list", *map(_hashable, key))
    if isinstance(key, tuple):
        return tuple(map(_hashable, key))
    if isinstance(key, dict):
        return ("dict", *sorted(map(repr, key.items())))
    return key


def _truth(value: Any) -> bool:
    return bool(value)


def _equal(a: Any, b: Any) -> bool:
    """`a == b` as Python reads it, where lists, tuples and dicts holding arrays compare item by
    item (an array item: same shape and elements); an array against anything else holds only as
    a one-element array would."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[key], b[key]) for key in a)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b))
    result = a == b
    if isinstance(result, np.ndarray):
        return bool(result) if result.size == 1 else False
    return bool(result)


_ORDER = {
    "Lt": operator.lt,
    "LtE": operator.le,
    "Gt": operator.gt,
    "GtE": operator.ge,
    "NotEq": operator.ne,
}


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(
        np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, equal_nan=equal_nan)
    )


def _array_equal(a, b, equal_nan=False) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=equal_nan))


def _isclose(a, b, rel_tol=1e-09, abs_tol=0.0) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)


def _same_gradients(mine: Any, ours: Any, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """Two lists of gradients (None where an input got none) equal to gradcheck's tolerance."""
    if not isinstance(mine, list) or not isinstance(ours, list) or len(mine) != len(ours):
        return False
    for a, b in zip(mine, ours):
        if (a is None) != (b is None):
            return False
        if b is not None and not (
            isinstance(a, np.ndarray)
            and a.shape == np.shape(b)
            and _allclose(a, b, rtol=rtol, atol=atol)
        ):
            return False
    return True


BUILT_IN = {
    "allclose": _allclose,
    "array_equal": _array_equal,
    "array_equiv": lambda a, b: bool(np.array_equiv(np.asarray(a), np.asarray(b))),
    "isclose": _isclose,
}


@dataclass
class Helpers:
    """The module's own comparison helpers (course code using only numpy, math, builtins),
    compiled here from their source, apart from anything a submission sent."""

    sources: dict[str, str] = field(default_factory=dict)
    _compiled: dict[str, Any] = field(default_factory=dict)
    _expressions: dict[str, Any] = field(default_factory=dict)
    _namespace: dict[str, Any] | None = None

    def get(self, name: str):
        if name in BUILT_IN:
            return BUILT_IN[name]
        if name not in self._compiled:
            namespace: dict[str, Any] = {"np": np, "numpy": np, "math": math}
            exec(compile(self.sources[name], f"<course helper {name}>", "exec"), namespace)
            self._compiled[name] = namespace[name]
        return self._compiled[name]

    def evaluate(self, source: str, values: list[Any]) -> Any:
        """A condition's own expression (course code, see tinyflo.course.grader.scenarios._Split)
        evaluated here over the values recorded for its placeholders `_tf_v0`, `_tf_v1`, ..."""
        code = self._expressions.get(source)
        if code is None:
            code = self._expressions[source] = compile(source, "<check>", "eval")
        if self._namespace is None:  # numpy, math and the helpers, made once
            self._namespace = {"np": np, "numpy": np, "math": math}
            self._namespace.update({name: self.get(name) for name in self.sources})
        placeholders = {f"_tf_v{k}": value for k, value in enumerate(values)}
        return eval(code, self._namespace | placeholders)


def _atom(kind: str, args: list[Any], keywords: dict[str, Any], helpers: Helpers) -> bool:
    if kind == "truth":
        return _truth(args[0])
    if kind == "Eq":
        return _equal(args[0], args[1])
    if kind in _ORDER:
        return bool(_ORDER[kind](args[0], args[1]))
    if kind in ("In", "NotIn"):
        inside = args[0] in args[1]
        return bool(inside) if kind == "In" else not inside
    if kind == "isinstance":
        mro, classes = args
        if not isinstance(mro, TypeInfo) or not isinstance(classes, ClassRef):
            return False
        return any(name in mro.mro for name in classes.names)
    if kind == "all_equal":
        return bool(np.all(np.asarray(args[0]) == np.asarray(args[1])))
    if kind in ("startswith", "endswith"):
        text, part = args
        return isinstance(text, str) and isinstance(part, str) and getattr(text, kind)(part)
    if kind.startswith("call:"):
        return bool(helpers.get(kind[5:])(*args, **keywords))
    raise ValueError(f"unknown check kind {kind!r}")


def decide(
    condition: tuple,
    check: Check,
    student: list[Any],
    reference: list[Any],
    helpers: Helpers,
) -> bool:
    """Whether one record of a check holds: each operand from the student's run where the
    check looks at the student's value, else from the reference's run."""

    def value(index: int) -> Any:
        return student[index] if check.operands[index].student else reference[index]

    kind = condition[0]
    if kind == "expr":
        _, source, indices, rows = condition
        for index in rows:  # a comprehension gives as many rows as the reference's did
            ours = reference[index]
            if ours is not None and (
                not isinstance(student[index], list) or len(student[index]) != len(ours)
            ):
                return False
        try:
            return bool(helpers.evaluate(source, [value(i) for i in indices]))
        except Exception:  # a condition that cannot be evaluated does not hold
            return False
    if kind == "and":
        return all(decide(part, check, student, reference, helpers) for part in condition[1])
    if kind == "not":
        return not decide(condition[1], check, student, reference, helpers)
    _, atom, indices, keywords = condition
    if atom == "same_gradients":  # the student's gradients against the reference's own
        ours = reference[indices[0]]
        return ours is None or _same_gradients(student[indices[0]], ours)
    try:
        return _atom(
            atom,
            [value(i) for i in indices],
            {name: value(i) for name, i in keywords.items()},
            helpers,
        )
    except Exception:  # a comparison that cannot be made does not hold
        return False


def student_values(check: Check, raw: list[Any]) -> list[Any]:
    """One record of the student's run, spread over the check's operands (None where the
    student's run does not supply it); BadValue when it does not fit the check."""
    wanted = [i for i, operand in enumerate(check.operands) if operand.student]
    if not isinstance(raw, list) or len(raw) != len(wanted):
        raise BadValue(
            f"expected {len(wanted)} values, got {len(raw) if isinstance(raw, list) else raw!r}"
        )
    values: list[Any] = [None] * len(check.operands)
    for index, item in zip(wanted, raw):
        decoded = decode(item)
        mode = check.operands[index].mode
        if mode == TRUTH and not isinstance(decoded, bool):
            raise BadValue("a truth value must be true or false")
        if mode == TYPE and not isinstance(decoded, TypeInfo):
            raise BadValue("a type must be a list of class names")
        if mode == TEXT and not (decoded is None or isinstance(decoded, str)):
            raise BadValue("a text must be a str or nothing")
        values[index] = decoded
    return values


def reference_values(check: Check, raw: list[Any]) -> list[Any]:
    """One record of the reference's run: every operand."""
    if not isinstance(raw, list) or len(raw) != len(check.operands):
        raise BadValue("the reference's record does not fit its check")
    values = [decode(item) for item in raw]
    for value, operand in zip(values, check.operands):
        if operand.mode == CLASSES and not isinstance(value, ClassRef):
            raise BadValue("isinstance's second argument must be a class")
    return values
