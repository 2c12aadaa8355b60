"""The grading runner: runs a notebook's code and its scenarios in a plain Python process.

It runs inside the grading sandbox as `python -I runner.py PACKAGE_DIR` and takes a job as JSON
on its standard input: the notebook's code cells in order (the course's cells and the
submission's solutions) and, in place of each grade cell, its scenario (see
tinyflo.course.scenarios). It writes what happened, one JSON object a line, to file
descriptor 3:

    {"t": "start", "i": 4}                 cell 4 starts
    {"t": "obs", "c": "task/3", "v": [...]} a check's values, as plain data
    {"t": "reached", "c": "task/5"}        a `raise AssertionError` was reached
    {"t": "raised", "i": 4, "type": ..., "mro": [...], "at": [cell, line]}
    {"t": "skipped", "i": 7, "at": [cell, line]}   called code that looped before
    {"t": "timeout", "i": 4, "at": [cell, line]}   its cell ran out of time
    {"t": "end", "i": 4}                   cell 4 ended

Everything else the code prints goes nowhere. No verdict is made here: this process holds
no expected value and no comparison, only the student's values (or, in the reference run,
the reference's). It needs only the standard library and NumPy, and imports nothing of
tinyflo itself (the code it runs may).
"""

import base64
import codeop
import io
import json
import os
import sys
import threading
import time
import types

OUT_FD = 3
CHECK, REACHED, RNG = "__tf_check", "__tf_reached", "check_rng"
MAX_STRING = 100_000  # characters of one string value
MAX_ARRAY = 32 * 2**20  # bytes of one array value
MAX_ITEMS = 10_000  # elements of one list, tuple or dict value
MAX_DEPTH = 20


class CheckReached(BaseException):
    """Raised by `raise AssertionError(...)` in a scenario: the task stops there, as it would."""


def _qualname(cls) -> str:
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', '?')}"


class Encoder:
    """Values to plain data; NumPy arrays as .npy bytes (no pickle, no object arrays)."""

    def __init__(self, np):
        self.np = np

    def array(self, value):
        np = self.np
        if value.dtype.hasobject or value.nbytes > MAX_ARRAY:
            return {"object": _qualname(type(value)), "repr": f"array of {value.dtype}"}
        buffer = io.BytesIO()
        np.save(
            buffer, value if value.flags.c_contiguous else value.copy(order="C"), allow_pickle=False
        )
        return {"npy": base64.b64encode(buffer.getvalue()).decode()}

    def value(self, value, depth=0):
        np = self.np
        kind = type(value)
        if value is None or kind is bool or kind is int:
            return value if kind is not int or abs(value) < 2**63 else {"big": str(value)}
        if kind is float:
            return (
                value if value == value and abs(value) != float("inf") else {"float": repr(value)}
            )
        if kind is str:
            return value[:MAX_STRING] if len(value) <= MAX_STRING else {"long": value[:MAX_STRING]}
        if kind is complex:
            return {"complex": [repr(value.real), repr(value.imag)]}
        if depth > MAX_DEPTH:
            return {"object": "too deep", "repr": ""}
        if isinstance(value, (list, tuple)):  # named tuples and the like as their items
            items = [self.value(item, depth + 1) for item in list(value)[:MAX_ITEMS]]
            return {"list" if isinstance(value, list) else "tuple": items}
        if isinstance(value, (set, frozenset)):
            return {"set": [self.value(item, depth + 1) for item in list(value)[:MAX_ITEMS]]}
        if isinstance(value, dict):
            pairs = list(value.items())[:MAX_ITEMS]
            return {
                "dict": [[self.value(k, depth + 1), self.value(v, depth + 1)] for k, v in pairs]
            }
        if isinstance(value, str):
            return self.value(str(value[:]), depth + 1)
        if kind is np.ndarray:
            return self.array(value)
        if isinstance(value, np.generic) and kind.__module__ == "numpy":
            encoded = self.array(np.asarray(value))
            return {"generic": encoded["npy"]} if "npy" in encoded else encoded
        if kind is np.dtype or isinstance(value, np.dtype):
            return {"dtype": value.name}
        if isinstance(value, type):
            if issubclass(value, np.generic) or value in (bool, int, float, complex):
                return {"dtype": np.dtype(value).name}
            return {"class": [_qualname(c) for c in value.__mro__]}
        try:
            converted = np.asarray(value)
        except Exception:
            converted = None
        if converted is not None and not converted.dtype.hasobject:
            return self.array(converted)
        try:
            text = repr(value)[:500]
        except Exception:
            text = "?"
        return {"object": _qualname(kind), "repr": text}

    def encode(self, value, mode):
        if mode == "truth":
            return bool(value)
        if mode == "type":
            return {"mro": [_qualname(c) for c in type(value).__mro__]}
        if mode == "classes":
            classes = value if isinstance(value, tuple) else (value,)
            return {"classes": [_qualname(c) for c in classes if isinstance(c, type)]}
        return self.value(value)


class Runner:
    def __init__(self, job, out):
        self.job = job
        self.out = out
        self.lock = threading.Lock()
        self.cells = job["cells"]
        self.files = {f"<cell {i}>": i for i in range(len(self.cells))}
        self.student = {f"<cell {i}>" for i, c in enumerate(self.cells) if c.get("student")}
        self.current = None  # (index, deadline)
        self.main = threading.get_ident()
        self.tripwires = {tuple(t) for t in job.get("tripwires", [])}

    def send(self, wait=True, **event):
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        taken = self.lock.acquire(timeout=-1 if wait else 1.0)
        try:
            while data:
                data = data[os.write(self.out, data) :]
        finally:
            if taken:
                self.lock.release()

    def where(self, frame):
        """The innermost student frame at or below `frame`: [cell, line], or None."""
        found = None
        while frame is not None:
            if frame.f_code.co_filename in self.student:
                found = [
                    self.files[frame.f_code.co_filename],
                    frame.f_lineno,
                    frame.f_code.co_firstlineno,
                ]
                break
            frame = frame.f_back
        return found

    def innermost(self, tb):
        found = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename in self.student:
                found = [
                    self.files[tb.tb_frame.f_code.co_filename],
                    tb.tb_lineno,
                    tb.tb_frame.f_code.co_firstlineno,
                ]
            tb = tb.tb_next
        return found

    def watchdog(self):
        while True:
            time.sleep(0.05)
            current = self.current
            if current is None or time.monotonic() < current[1]:
                continue
            frame = sys._current_frames().get(self.main)
            self.send(wait=False, t="timeout", i=current[0], at=self.where(frame))
            os._exit(3)

    def trace(self, frame, event, arg):
        # Called for every new frame only while some code looped before: code that looped
        # in an earlier cell fails at once here instead of looping again.
        code = frame.f_code
        if (code.co_filename, code.co_firstlineno) in self.tripwires:
            raise LoopedBefore(
                [self.files.get(code.co_filename), frame.f_lineno, code.co_firstlineno]
            )
        return None

    def run(self):
        import numpy as np

        encoder = Encoder(np)
        modes = self.job["modes"]
        namespace = types.ModuleType("__main__")
        namespace.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = namespace
        compiler = (
            codeop.Compile()
        )  # carries `from __future__` imports to later cells, as IPython does

        def check(check_id, *values):
            wanted = modes.get(check_id, [])
            encoded = [
                encoder.encode(value, mode)
                for value, mode in zip(values, wanted)
                if mode != "discard"
            ]
            self.send(t="obs", c=check_id, v=encoded)

        def reached(check_id):
            self.send(t="reached", c=check_id)
            raise CheckReached(check_id)

        threading.Thread(target=self.watchdog, daemon=True).start()
        if self.tripwires:
            sys.settrace(self.trace)
            threading.settrace(self.trace)
        start = self.job.get("start", 0)
        for index, cell in enumerate(self.cells):
            try:
                code = compiler(cell["source"], f"<cell {index}>", "exec")
            except (SyntaxError, ValueError, OverflowError) as error:
                code = error if isinstance(error, SyntaxError) else SyntaxError(str(error))
            if index < start and cell["kind"] == "task":
                continue  # graded before the run was restarted
            self.send(t="start", i=index)
            if isinstance(code, SyntaxError):
                self.send(
                    t="raised",
                    i=index,
                    type="SyntaxError",
                    mro=["builtins.SyntaxError"],
                    at=[index, code.lineno or 0, 0] if cell.get("student") else None,
                )
                self.send(t="end", i=index)
                continue
            if cell["kind"] == "task":
                namespace.__dict__[CHECK] = check
                namespace.__dict__[REACHED] = reached
                namespace.__dict__[RNG] = np.random.default_rng(
                    self.job["seeds"].get(cell["task"], 0)
                )
            self.current = (index, time.monotonic() + cell["timeout"])
            try:
                exec(code, namespace.__dict__)
            except CheckReached:
                pass
            except LoopedBefore as looped:
                self.send(t="skipped", i=index, at=looped.args[0])
            except BaseException as error:  # the cell failed: say what and where, not the message
                self.send(
                    t="raised",
                    i=index,
                    type=type(error).__name__,
                    mro=[_qualname(c) for c in type(error).__mro__],
                    at=self.innermost(error.__traceback__),
                )
            finally:
                self.current = None
            self.send(t="end", i=index)
        self.send(t="done")


class LoopedBefore(BaseException):
    """Code that ran out of time in an earlier cell was called again."""


class _TempNames:
    """tempfile's names drawn from a seeded generator: the reference's run and the student's
    make the same temporary paths, so values holding them compare."""

    characters = "abcdefghijklmnopqrstuvwxyz0123456789_"

    def __init__(self):
        import random

        self.rng = random.Random(0)

    def __iter__(self):
        return self

    def __next__(self):
        return "".join(self.rng.choice(self.characters) for _ in range(8))


def _same_start():
    """Both runs start from the same state: seeded generators, the same temporary names."""
    import random
    import tempfile

    import numpy

    random.seed(0)
    numpy.random.seed(0)
    tempfile._name_sequence = _TempNames()
    tempfile.tempdir = "/tmp"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]
    package = sys.argv[1] if len(sys.argv) > 1 else None
    if package:
        sys.path.insert(0, package)
    job = json.loads(sys.stdin.buffer.read())
    out = os.dup(OUT_FD)
    os.close(OUT_FD)
    # What the code prints goes nowhere; the grader never reads it.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _same_start()
    Runner(job, out).run()
    os._exit(0)


if __name__ == "__main__":
    main()
