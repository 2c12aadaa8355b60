"""The grading runner: runs a notebook's code and its scenarios in a plain Python process.

It runs inside the grading sandbox as `python -s runner.py PACKAGE_DIR` and takes a job as JSON
on its standard input: the notebook's code cells in order (the course's cells and the
submission's solutions) and, in place of each grade cell, its scenario (see
tinyflo.course.grader.scenarios). It writes what happened, one JSON object a line, each line signed
with the job's key, to file descriptor 3:

    {"t": "start", "i": 4}                 cell 4 starts
    {"t": "obs", "c": "task/3", "v": [...]} a check's values, as plain data
    {"t": "reached", "c": "task/5"}        a `raise AssertionError` was reached
    {"t": "raised", "i": 4, "type": ..., "mro": [...], "at": [cell, line]}
    {"t": "skipped", "i": 7, "at": [cell, line]}   called code that looped before
    {"t": "timeout", "i": 4, "at": [cell, line]}   its cell ran out of time
    {"t": "end", "i": 4}                   cell 4 ended

Everything else the code prints goes nowhere. No verdict is made here: this process holds
no expected value and no comparison, only the student's values (or, in the reference run,
the reference's).

The submission's code runs in this process, so the part that reports is built to be out of
its reach (tinyflo.course.grader.grading's threat model):

* every cell is compiled before any of them runs, and each scenario is a function whose
  reporters are its parameters: no name in the notebook's namespace leads to them;
* the reporting code uses only what it took when it started (builtins, C functions of the
  standard library and NumPy, `_json`'s encoder, `_hashlib`'s HMAC), never a name looked up
  later, so patching `builtins`, `json` or `numpy` changes nothing it does;
* the cells run in a thread of their own, so the code cannot install a signal handler (only
  the main thread may, and handlers are handed frames);
* an audit hook, added before the first cell and never removable, refuses what would reach
  its objects: frames (`sys._getframe`, tracebacks' and generators' frames, tracers,
  `sys._current_frames`), `gc`'s object lists, `ctypes` (never loaded), `marshal.loads`
  and new code objects, changing a function's code (or the defaults of its own functions),
  new processes (a child would run without the hook), and more audit hooks;
* each line it writes is numbered and carries an HMAC with a key that arrives on standard
  input, so a line that the code writes to the pipe itself, or one it holds back, repeats
  or moves, is refused by the grader.

It needs only the standard library and NumPy, and imports nothing of tinyflo itself (the code
it runs may).
"""

import _thread
import ast
import binascii
import codeop
import importlib
import json
import math
import os
import sys
import time
import types

OUT_FD = 3
RNG = "check_rng"
SCENARIO = "__tf_scenario"
# A scenario's parameters: its reporters, its random inputs, and the runner's own copies of
# what its checks call on objects (tinyflo.course.grader.scenarios.OBJECT_CALLS).
CHECK, REACHED, PRISTINE = "__tf_check", "__tf_reached", "__tf_pristine"
PARAMETERS = (CHECK, REACHED, RNG, PRISTINE)
# What a run may send, all in one place. The course's largest honest values (every module's
# reference run, hidden checks included): an array of 0.9 MiB, a string of 467 characters, a
# line of 4.1 MiB and 6.1 MiB in a whole run. A value past its cap is sent as a short
# description (the check fails); a line past MAX_LINE or a run past Limits.results (its
# budget, in tinyflo.course.grader.sandbox) is refused by the grader, which holds at most one line.
# An array at MAX_ARRAY fits in a line as base64 (4/3 of its bytes).
MAX_STRING = 100_000  # characters of one string value
MAX_ARRAY = 4 * 2**20  # bytes of one array value
MAX_ITEMS = 10_000  # elements of one list, tuple or dict value
MAX_DEPTH = 20
MAX_LINE = 16 * 2**20  # bytes of one event line, enforced by the grader (engine._Reader)

# Audit events refused once the notebook's code runs. `sys._getframe` gets ValueError (what
# it raises past the top of the stack, which namedtuple and typing expect); others
# RuntimeError.
REFUSED_EVENTS = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "marshal.loads",
        "marshal.load",
        "code.__new__",
        # No new process: a child runs without this hook and could read the runner's memory.
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
    }
)
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
CODE_ATTRIBUTES = frozenset({"__code__", "gi_code", "cr_code", "ag_code"})
SHOWN_MESSAGE = 300  # characters of an exception's own message sent to the grader
DEFAULTS = frozenset({"__defaults__", "__kwdefaults__"})  # namedtuple sets them: refused for ours
# Extension modules that reach memory or processes (loading one raises an audit event;
# ctypes is kept from loading at all, see main()).
REFUSED_MODULES = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_posixsubprocess",
        "_testcapi",
        "_testinternalcapi",
        "_testbuffer",
        "_testmultiphase",
        "_xxsubinterpreters",
        "_xxinterpchannels",
        "_cffi_backend",  # cffi's: C calls and raw memory, with no audit event (installed with the course's tools)
        "cffi",
    }
)


def native_places() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Where an extension module may be loaded from once the notebook's code runs: the Python
    installation and its environment, which nobody grading can write. A native module the code
    wrote itself (in /tmp, say) would run with no audit event at all."""
    import importlib.machinery

    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    places |= {os.path.realpath(place) for place in places}
    return tuple(place.rstrip("/") + "/" for place in places), tuple(importlib.machinery.EXTENSION_SUFFIXES)


class CheckReached(BaseException):
    """Raised by `raise AssertionError(...)` in a scenario: the task stops there, as it would."""


class LoopedBefore(BaseException):
    """Code that ran out of time in an earlier cell was called again."""


def scenario_function(source: str) -> ast.Module:
    """A scenario's code as the body of a function whose parameters are its reporters.

    Names the scenario binds at its top level stay the notebook's globals, as in a cell.
    """
    tree = ast.parse(source)
    names = sorted(top_level_names(tree) - set(PARAMETERS))
    body: list[ast.stmt] = [ast.Global(names=names)] if names else []
    body += tree.body or [ast.Pass()]
    function = ast.FunctionDef(
        name=SCENARIO,
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=name) for name in PARAMETERS],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
        lineno=1,
        col_offset=0,
    )
    module = ast.Module(body=[function], type_ignores=[])
    return ast.fix_missing_locations(module)


def top_level_names(tree: ast.Module) -> set[str]:
    """Names bound in the module's own scope (not in the functions or classes it defines)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(child.name)
                for part in (*child.decorator_list, *getattr(child, "bases", [])):
                    visit(part)
                continue
            if isinstance(
                child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
            ):
                continue  # scopes of their own
            if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
                names.add(child.id)
            elif isinstance(child, ast.alias):
                names.add((child.asname or child.name).split(".")[0])
            elif isinstance(child, ast.ExceptHandler) and child.name:
                names.add(child.name)
            elif isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                names.add(child.target.id)
            visit(child)

    visit(tree)
    return names


def compile_cells(cells: list) -> list:
    """Every cell compiled before any runs: code cells as they are, scenarios as functions.

    Each entry is a code object, or a SyntaxError for a cell that does not compile.
    """
    compiler = codeop.Compile()  # carries `from __future__` imports to later cells, as IPython
    compiled = []
    for index, cell in enumerate(cells):
        name = f"<cell {index}>"
        try:
            if cell["kind"] == "task":
                module = compiler(cell["source"], name, "exec")  # future flags, syntax
                del module
                code = compile(scenario_function(cell["source"]), name, "exec")
                code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
            else:
                code = compiler(cell["source"], name, "exec")
        except (SyntaxError, ValueError, OverflowError) as error:
            code = error if isinstance(error, SyntaxError) else SyntaxError(str(error))
        compiled.append(code)
    return compiled


def build(job: dict, out: int, np) -> "types.FunctionType":
    """The runner for `job`, writing signed events to `out`: a function that runs it.

    Everything the returned function and its helpers use after the notebook's code starts is
    bound here, as local names of this call: nothing is looked up in a module or in builtins
    later (tests/course check the bytecode for global lookups).
    """
    import _hashlib
    import _json

    cells = job["cells"]
    modes = job["modes"]
    seeds = job["seeds"]
    start = job.get("start", 0)
    key = binascii.unhexlify(job["key"])
    tripwires = frozenset(map(tuple, job.get("tripwires", [])))
    files = {f"<cell {i}>": i for i in range(len(cells))}
    student = frozenset(f"<cell {i}>" for i, c in enumerate(cells) if c.get("student"))
    # The scenarios' code: the notebook's code may call what they hand it (a lambda, a
    # callback, a class), never read their code.
    scenarios = frozenset(f"<cell {i}>" for i, c in enumerate(cells) if c["kind"] == "task")
    compiled = compile_cells(cells)
    # The names each course cell and scenario binds (the job says): recorded after it runs, and
    # read from there by later scenarios (tinyflo.course.grader.scenarios._CourseNames).
    binds = [cell.get("binds", []) for cell in cells]
    _missing = object()

    # What the reporting code calls, taken now.
    _type, _isinstance, _issubclass, _len, _repr = type, isinstance, issubclass, len, repr
    _bool, _int, _float, _str, _list, _tuple = bool, int, float, str, list, tuple
    _dict, _frozenset, _slice, _zip, _abs, _min = dict, frozenset, slice, zip, abs, min
    _none, _bytes, _complex, _set = type(None), bytes, complex, set
    _str_copy, _list_copy, _tuple_get = str.__str__, list.copy, tuple.__getitem__
    _dict_items, _join, _exec, _memoryview = dict.items, "".join, exec, memoryview
    _write, _exit, _monotonic, _sleep = os.write, os._exit, time.monotonic, time.sleep
    _get_ident, _new_thread, _lock = _thread.get_ident, _thread.start_new_thread, _thread.allocate_lock
    _stack_size = _thread.stack_size
    _hexlify, _b64 = binascii.hexlify, binascii.b2a_base64
    _hmac = _hashlib.hmac_digest
    _function, _namespace = types.FunctionType, types.SimpleNamespace
    _id, _hasattr, _callable, _vars, _math = id, hasattr, callable, vars, math
    _getattr = getattr
    _current_frames, _settrace = sys._current_frames, sys.settrace
    _ndarray, _generic, _dtype, _asarray = np.ndarray, np.generic, np.dtype, np.asarray
    _tobytes, _ascontiguous, _bool_ = np.ndarray.tobytes, np.ascontiguousarray, np.bool_
    _rng = np.random.default_rng
    _shares_memory, _may_share_memory = np.shares_memory, np.may_share_memory
    _exact_truths = (bool, int, float, str, list, tuple, dict, type(None))
    _syntax_error, _enumerate, _builtins = SyntaxError, enumerate, __builtins__
    _runtime_error, _value_error, _type_error = RuntimeError, ValueError, TypeError
    _base_exception = BaseException
    _module_type, _modules, _add_audit_hook = types.ModuleType, sys.modules, sys.addaudithook
    _traceback_type, _traceback_of = types.TracebackType, BaseException.__traceback__.__get__
    _refused, _frame_attributes = REFUSED_EVENTS, FRAME_ATTRIBUTES
    _native_places, _native_suffixes = native_places()
    _defaults, _refused_modules = DEFAULTS, REFUSED_MODULES
    _code_attributes, _code_type, _shown_message = CODE_ATTRIBUTES, types.CodeType, SHOWN_MESSAGE
    _args_of = BaseException.args.__get__
    _check_reached, _looped_before = CheckReached, LoopedBefore
    _max_string, _max_array, _max_items, _max_depth = MAX_STRING, MAX_ARRAY, MAX_ITEMS, MAX_DEPTH

    def _no_default(value):
        raise _type_error("not an event value")

    _encode_json = _json.make_encoder(
        None, _no_default, _json.encode_basestring_ascii, None, ":", ",", False, False, False
    )
    lock = _lock()
    state = {"current": None, "trusted": False, "main": None, "watchdog": None, "sent": 0,
             "reading": None}

    def send(event, wait=True):
        if not lock.acquire(True, -1 if wait else 1.0):
            # Another line is still being written (a large value to a busy grader): a line
            # of ours written into it would garble both, and the grader would take the result
            # for a forgery. The watchdog's line is left out; the grader keeps its own time.
            return
        event["n"] = state["sent"]  # numbered: a line left out, repeated or moved is seen
        state["sent"] += 1
        data = _join(_encode_json(event, 0)).encode("ascii")
        line = _memoryview(data + b" " + _hexlify(_hmac(key, data, "sha256")) + b"\n")
        try:
            while line:  # a view: what is left of a large line is not copied for each write
                line = line[_write(out, line) :]
        finally:
            lock.release()

    def qualname(cls):
        module = getattr_str(cls, "__module__")
        name = getattr_str(cls, "__qualname__")
        return module + "." + name

    def getattr_str(obj, name):
        try:
            value = _type.__getattribute__(obj, name) if _isinstance(obj, _type) else "?"
        except _base_exception:
            return "?"
        return _str_copy(value)[:200] if _isinstance(value, _str) else "?"

    def message(error):
        # What the exception says: its arguments that are exactly strings (NumPy's and
        # Python's own errors, and the student's), joined; nothing of the student's code runs.
        try:
            parts = _args_of(error)
        except _base_exception:
            return ""
        if _type(parts) is not _tuple:
            return ""
        text = "; ".join([_str_copy(part) for part in parts[:4] if _type(part) is _str])
        return text[: _shown_message + 1]  # one more: the grader then knows it was cut

    def mro(cls):
        try:
            classes = _type.__getattribute__(cls, "__mro__")
        except _base_exception:
            return ["?"]
        if _type(classes) is not _tuple:
            return ["?"]
        return [qualname(c) for c in classes[:50]]

    def array(value):
        # `value` is exactly an ndarray: its dtype, shape and bytes are NumPy's own (C) code.
        dtype = value.dtype
        if dtype.hasobject or dtype.names is not None or dtype.subdtype is not None:
            return {"object": "numpy.ndarray", "repr": "array of " + _str_copy(dtype.str)}
        if value.nbytes > _max_array:
            return {"object": "numpy.ndarray", "repr": "array too large"}
        shape = value.shape
        header = "{'descr': '" + dtype.str + "', 'fortran_order': False, 'shape': ("
        header += _join([_int.__repr__(n) + ", " for n in shape]) + "), }"
        header += " " * (63 - (10 + _len(header)) % 64) + "\n"
        raw = b"\x93NUMPY\x01\x00" + _len(header).to_bytes(2, "little") + header.encode("ascii")
        raw += _tobytes(_ascontiguous(value), "C")
        return {"npy": _b64(raw, newline=False).decode("ascii")}

    def value_of(value, depth=0):
        kind = _type(value)
        if kind is _none or kind is _bool:
            return value
        if kind is _int:
            return value if _abs(value) < 2**63 else {"big": _int.__repr__(value)}
        if kind is _float:
            finite = value == value and _abs(value) != _float("inf")
            return value if finite else {"float": _float.__repr__(value)}
        if kind is _str:
            return value if _len(value) <= _max_string else {"long": value[:_max_string]}
        if kind is _complex:
            return {"complex": [_float.__repr__(value.real), _float.__repr__(value.imag)]}
        if depth > _max_depth:
            return {"object": "too deep", "repr": ""}
        if _isinstance(value, _list):
            return {"list": [value_of(v, depth + 1) for v in _list_copy(value)[:_max_items]]}
        if _isinstance(value, _tuple):
            items = _tuple_get(value, _slice(None, _max_items))
            return {"tuple": [value_of(v, depth + 1) for v in items]}
        if _isinstance(value, (_set, _frozenset)):
            return {"set": [value_of(v, depth + 1) for v in _list(_frozenset(value))[:_max_items]]}
        if _isinstance(value, _dict):
            pairs = _list(_dict_items(value))[:_max_items]
            return {"dict": [[value_of(k, depth + 1), value_of(v, depth + 1)] for k, v in pairs]}
        if _isinstance(value, _str):
            return value_of(_str_copy(value), depth + 1)
        if kind is _ndarray:
            return array(value)
        if _isinstance(value, _dtype):
            return {"dtype": _str_copy(value.name)}
        if _isinstance(value, _type):
            if _issubclass(value, _generic) or one_of(value, (_bool, _int, _float, _complex)):
                return {"dtype": _str_copy(_dtype(value).name)}
            return {"class": mro(value)}
        try:
            converted = _asarray(value)  # NumPy scalars, and objects that define __array__
        except _base_exception:
            converted = None
        if _type(converted) is _ndarray and not converted.dtype.hasobject:
            encoded = array(converted)
            if _isinstance(value, _generic) and "npy" in encoded:
                return {"generic": encoded["npy"]}
            return encoded
        try:
            text = _repr(value)
            text = _str_copy(text)[:500] if _isinstance(text, _str) else "?"
        except _base_exception:
            text = "?"
        return {"object": qualname(kind), "repr": text}

    def one_of(value, choices):
        # By identity: `in` would call a submission's own __eq__ and __hash__.
        for choice in choices:
            if value is choice:
                return True
        return False

    def truth(value):
        # Only values whose truth no submission defines: an object's own __bool__ is not taken.
        kind = _type(value)
        if kind is _bool_:
            return value is _bool_(True)
        if one_of(kind, _exact_truths):
            return _bool(value)
        return {"object": qualname(kind), "repr": "not a truth value"}

    def encode(value, mode):
        if mode == "truth":
            return truth(value)
        if mode == "type":
            return {"mro": mro(_type(value))}
        if mode == "classes":
            classes = value if _type(value) is _tuple else (value,)
            return {"classes": [qualname(c) for c in classes if _isinstance(c, _type)]}
        if mode == "text":
            return value_of(value) if _type(value) is _str else None
        return value_of(value)

    def check(check_id, *values):
        wanted = modes.get(check_id, [])
        encoded = [encode(v, m) for v, m in _zip(values, wanted) if m != "discard"]
        send({"t": "obs", "c": check_id, "v": encoded})

    def reached(check_id):
        send({"t": "reached", "c": check_id})
        raise _check_reached(check_id)

    def frames(frame):
        """The innermost student frame at or below `frame`: [cell, line, first line]."""
        while frame is not None:
            code = frame.f_code
            if _type(code.co_filename) is _str and code.co_filename in student:
                return [files[code.co_filename], frame.f_lineno, code.co_firstlineno]
            frame = frame.f_back
        return None

    def innermost(tb):
        state["trusted"] = True
        try:
            found = None
            while _type(tb) is _traceback_type:
                code = tb.tb_frame.f_code
                if _type(code.co_filename) is _str and code.co_filename in student:
                    found = [files[code.co_filename], tb.tb_lineno, code.co_firstlineno]
                tb = tb.tb_next
            return found
        finally:
            state["trusted"] = False

    def hook(event, args):
        if event in _refused:
            if event == "sys._current_frames" and _get_ident() == state["watchdog"]:
                return
            if event == "sys._getframe":
                raise _value_error("grading: the call stack cannot be read")
            raise _runtime_error("grading does not allow " + event)
        if event == "object.__getattr__" and args[1] in _frame_attributes:
            if state["trusted"] and _get_ident() == state["main"]:
                return
            raise _runtime_error("grading does not allow reading frames")
        if event == "object.__getattr__" and args[1] in _code_attributes:
            reader = _get_ident()
            if state["reading"] == reader:
                return  # the line below, reading it for this check
            state["reading"] = reader
            try:
                code = _getattr(args[0], args[1], None)
            finally:
                state["reading"] = None
            if _type(code) is _code_type and _type(code.co_filename) is _str and code.co_filename in scenarios:
                raise _runtime_error("grading does not allow reading the checks' code")
        if event in ("object.__setattr__", "object.__delattr__") and _isinstance(args[0], _function):
            if args[1] == "__code__" or (args[1] in _defaults and one_of(args[0], ours)):
                raise _runtime_error("grading does not allow changing a function's code")
        if event == "import":
            name = _str_copy(args[0]) if _isinstance(args[0], _str) else ""
            if name in _refused_modules or name.split(".")[0] in _refused_modules:
                raise _runtime_error("grading does not allow importing " + name)
            where = _str_copy(args[1]) if _isinstance(args[1], _str) else ""
            if where.endswith(_native_suffixes) and (
                not where.startswith(_native_places) or "/../" in where or "/./" in where
            ):
                raise _runtime_error("grading does not allow loading native code from " + where)
        if event.startswith("ctypes."):
            raise _runtime_error("grading does not allow ctypes")

    def watchdog():
        state["watchdog"] = _get_ident()
        while True:
            _sleep(0.05)
            current = state["current"]
            if current is None or _monotonic() < current[1]:
                continue
            frame = _current_frames().get(state["main"])
            send({"t": "timeout", "i": current[0], "at": frames(frame)}, wait=False)
            _exit(3)

    def trace(frame, event, arg):
        # Called for every new frame only while some code looped before: code that looped
        # in an earlier cell fails at once here instead of looping again.
        code = frame.f_code
        if _type(code.co_filename) is _str and (code.co_filename, code.co_firstlineno) in tripwires:
            raise _looped_before([files.get(code.co_filename), frame.f_lineno, code.co_firstlineno])
        return None

    # What a scenario's checks call on the objects themselves (tinyflo.course.grader.scenarios'
    # OBJECT_CALLS), as they were before the notebook's code ran: a submission that rebinds the
    # names or patches the modules changes none of them.
    def exact_isinstance(obj, classes):
        return _issubclass(_type(obj), classes)  # the object's real class, not its __class__

    def shares_memory(a, b, *options):  # arrays only: no __array_function__ answers for them
        return _type(a) is _ndarray and _type(b) is _ndarray and _shares_memory(a, b, *options)

    def may_share_memory(a, b, *options):
        return _type(a) is _ndarray and _type(b) is _ndarray and _may_share_memory(a, b, *options)

    def gradients(fn, *inputs):
        # What gradcheck checks, as data: fn's gradients at its inputs along one fixed
        # direction, for the grader to compare with the reference's (a forward and backward
        # of the code under test; nothing is compared here).
        out = fn(*inputs)
        direction = _rng(0).standard_normal(out.shape)
        wanted = [x for x in inputs if _getattr(x, "requires_grad", False) is True]
        for x in wanted:
            x.grad = None
        (out * direction).sum().backward()
        return [None if x.grad is None else x.grad.numpy() for x in wanted]

    pristine = {
        "gradients": gradients,
        "id": _id,
        "isinstance": exact_isinstance,
        "type": _type,
        "hasattr": _hasattr,
        "callable": _callable,
        "str": _str,
        "repr": _repr,
        "np.shares_memory": shares_memory,
        "np.may_share_memory": may_share_memory,
        "np": _namespace(**_dict(_vars(np))),
        "math": _namespace(**_dict(_vars(_math))),
    }

    ours = (send, value_of, encode, check, reached, truth, hook, watchdog, trace)

    def run():
        """Run the job in a thread of its own and wait: the notebook's code never runs in the
        main thread, so it cannot install signal handlers (which are handed frames)."""
        done = _lock()
        done.acquire()
        _stack_size(256 * 2**20)
        _new_thread(grade_cells, (done,))
        while True:
            try:
                if done.acquire(True, 1.0):
                    return
            except _base_exception:  # _thread.interrupt_main() and the like: keep waiting
                continue

    def grade_cells(done):
        try:
            run_cells()
        finally:
            done.release()

    def run_cells():
        state["main"] = _get_ident()
        namespace = _module_type("__main__")
        namespace.__dict__["__builtins__"] = _builtins
        _modules["__main__"] = namespace
        _new_thread(watchdog, ())
        while state["watchdog"] is None:
            _sleep(0.001)
        if tripwires:
            _settrace(trace)
        _add_audit_hook(hook)
        globals_ = namespace.__dict__
        for index, cell in _enumerate(cells):
            code = compiled[index]
            if index < start and cell["kind"] == "task":
                continue  # graded before the run was restarted
            send({"t": "start", "i": index})
            if _isinstance(code, _syntax_error):
                at = [index, code.lineno or 0, 0] if cell.get("student") else None
                raised = {"type": "SyntaxError", "mro": ["builtins.SyntaxError"], "at": at}
                send({"t": "raised", "i": index} | raised)
                send({"t": "end", "i": index})
                continue
            state["current"] = (index, _monotonic() + cell["timeout"])
            try:
                if cell["kind"] == "task":
                    scenario = _function(code, globals_)
                    scenario(check, reached, _rng(seeds.get(cell["task"], 0)), pristine)
                else:
                    _exec(code, globals_)
            except _check_reached:
                pass
            except _looped_before as looped:
                send({"t": "skipped", "i": index, "at": looped.args[0]})
            except _base_exception as error:  # the cell failed: say what and where, not the message
                kind = _type(error)
                send(
                    {
                        "t": "raised",
                        "i": index,
                        "type": getattr_str(kind, "__name__")[:100],
                        "mro": mro(kind),
                        "message": message(error),
                        "at": innermost(_traceback_of(error)),
                    }
                )
            finally:
                state["current"] = None
            for name in binds[index]:
                value = globals_.get(name, _missing)
                if value is not _missing:
                    pristine["course:" + name] = value
            send({"t": "end", "i": index})
        send({"t": "done"})

    return run


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


# What the course's package imports from the standard library and beside NumPy, loaded from
# the installation's bytecode before the notebook's code runs: once the code runs, a module is
# compiled from its source (below, in main), which for these took three times as long, on every
# run graded. The notebook's code may import each of them anyway.
PRELOADED = (
    "base64", "calendar", "copy", "csv", "dataclasses", "difflib", "email.message", "email.utils", "hashlib",
    "heapq", "hmac", "importlib.metadata", "importlib.resources", "importlib.util", "ipaddress", "locale",
    "pathlib", "queue", "secrets", "selectors", "socket", "string", "urllib.parse", "zipfile", "ml_dtypes",
)


def preload(package):
    """Import the grading tree's modules that it holds as bytecode only (the reference of the
    modules before the graded one): now, before the notebook's code runs, since reading
    bytecode needs marshal.loads, which the notebook's code may not call. Importing them
    later finds them here, as the notebook's own import would have made them."""

    core = os.path.join(package or "", "tinyflo", "core")
    if not package or not os.path.isdir(core):
        return
    for name in sorted(os.listdir(core)):
        stem, extension = os.path.splitext(name)
        if extension == ".pyc" and not os.path.exists(os.path.join(core, stem + ".py")):
            importlib.import_module("tinyflo.core." + stem)


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
    # ctypes reads and writes any memory and raises no audit event doing it: it must never
    # load. NumPy takes it as missing; once the hook is in, loading _ctypes is refused.
    sys.modules["ctypes"] = None
    import numpy as np

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:  # ml_dtypes is optional
            pass
    preload(package)
    _same_start()
    del sys.modules["ctypes"]
    # Modules imported from here on are compiled from source: no .pyc is read (reading one
    # needs marshal.loads, which the notebook's code may not call).
    sys.pycache_prefix = os.path.join(os.sep, "nonexistent-pycache")
    sys.dont_write_bytecode = True
    run = build(job, out, np)
    del job
    run()
    os._exit(0)


if __name__ == "__main__":
    main()
