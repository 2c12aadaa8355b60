"""A training step captured once as a CUDA graph and replayed: one launch a step instead of hundreds.

On a GPU a small model's step is paid on the host: a Python call and a kernel launch for every operation,
whatever the batch size. CUDA graphs record the launches of one step once and replay them with a single
launch. ``capture_step`` does that for a hand-written loop, and ``Trainer(capture=True)`` for the Trainer::

    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    step = tinyflo.capture_step(train_step, optimizer)
    for x, y in loader:
        loss = step(x, y)   # eager for the warm-up calls, then captured once, then replayed

What a replay does is what the step did while it was captured: the same kernels, on the same arrays, with
the same host values. So the step keeps to these rules, and a step that breaks one that can be seen is
refused in one line:

* its inputs keep their shapes, dtypes and device (each call copies them into the captured inputs);
* it reads nothing back to the host (``float(loss)``, ``.item()``, ``print``), uploads nothing and waits
  for nothing: CUDA refuses these inside a capture;
* it draws no random numbers (dropout): a replay would draw the same ones, so tinyflo's ``rand`` and
  ``randn`` refuse to draw inside a capture;
* it updates parameters and optimizer state in place (every tinyflo optimizer does), and every optimizer
  it steps is passed to ``capture_step``: the values the host changes between steps reach the kernels
  through device scalars set before each launch (each group's learning rate, which a schedule may change,
  and Adam's bias corrections); the optimizer is SGD, Adam or AdamW without flat groups;
* any other hyper-parameter, the parameters' arrays, which of them train and the optimizer's state are
  fixed when captured: a change is refused until ``reset()`` (the Trainer captures again by itself);
* what it returns is overwritten by the next launch: copy it to keep it.

The result is bit-identical to running the step eagerly (tests/test_graphs.py, on the strict stand-in
whose graphs replay recorded kernels as CUDA's do). The arrays a captured step allocates come from a
memory pool of its own, kept for as long as the graph lives, so nothing else is handed a block the graph
still writes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyflo.core.optim import SGD, Adam, Optimizer
from tinyflo.core.tensor import Tensor
from tinyflo.core.training import register_plugin

SUPPORTED = (SGD, Adam)  # AdamW is an Adam: their updates read only lr and (Adam) the step count per step


def _brief(x: Any) -> str:
    return f"a tensor of shape {x.shape} ({x.dtype}) on {x.device}" if isinstance(x, Tensor) else type(x).__name__


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# ----- the host values a replay needs ------------------------------------------------------------


class _Lent:
    """``holder[key]``, a host value the step's kernels read, lent to them as a 0-d device array while the
    step is captured, and set from the host before each launch when it changed. ``value(host)`` gives what
    the device holds for the host's value (by default the value itself)."""

    def __init__(self, holder: dict, key: str, xp: Any, dtype: Any, value: Callable[[], Any] | None = None) -> None:
        self.holder, self.key, self.value = holder, key, value or (lambda: holder[key])
        self.array = xp.full((), self.value(), dtype=dtype)
        self.set = self.value()

    def lend(self) -> None:
        self.before_launch()
        self.kept = self.holder.get(self.key, _ABSENT)
        self.holder[self.key] = self.array

    def take_back(self) -> None:
        if self.kept is _ABSENT:
            del self.holder[self.key]
        else:
            self.holder[self.key] = self.kept

    def before_launch(self) -> None:
        value = self.value()
        if value != self.set:
            self.array.fill(value)  # a fill kernel: no transfer, no wait
            self.set = value

    def after_launch(self) -> None:
        pass

    lend_eagerly, end_eagerly = lend, take_back  # the last warm-up step runs with the value lent too


_ABSENT = object()


class _Counted:
    """``holder[key]``, a host count the step adds 1 to (an optimizer's step count): the capture ran nothing,
    so the count is put back after it, and each launch adds the 1."""

    def __init__(self, holder: dict, key: str, param: Tensor) -> None:
        self.holder, self.key, self.param = holder, key, param

    def lend(self) -> None:
        self.kept = self.holder[self.key]

    def take_back(self) -> None:
        self.holder[self.key] = self.kept

    def before_launch(self) -> None:
        pass

    def after_launch(self) -> None:
        self.holder[self.key] += 1

    def lend_eagerly(self) -> None:  # an eager step adds its own 1
        pass

    end_eagerly = lend_eagerly


class _DeviceCount:
    """``holder.attr``, a host count the step reads in a kernel and adds 1 to (the Trainer's step, which its
    NaN guard records): a device counter while captured, added to inside the graph, kept equal to the host's."""

    def __init__(self, holder: Any, attr: str, xp: Any) -> None:
        self.holder, self.attr = holder, attr
        self.array = xp.full((), getattr(holder, attr), dtype=np.int64)
        self.set = getattr(holder, attr)

    def lend(self) -> None:
        self.before_launch()
        self.kept = getattr(self.holder, self.attr)
        setattr(self.holder, self.attr, self.array)

    def take_back(self) -> None:
        setattr(self.holder, self.attr, self.kept)

    def before_launch(self) -> None:
        if getattr(self.holder, self.attr) != self.set:  # an eager step in between
            self.set = getattr(self.holder, self.attr)
            self.array.fill(self.set)

    def after_launch(self) -> None:
        self.set += 1
        setattr(self.holder, self.attr, self.set)

    lend_eagerly = lend

    def end_eagerly(self) -> None:  # the eager step added its 1 on the device
        self.take_back()
        self.after_launch()


@dataclass
class _Carried:
    """``holder.attr``, a device array the step replaces with a new one (``x = f(x)``): a launch reads
    ``before`` and writes ``after``, then ``after`` is copied into ``before``, which ``holder.attr`` stays.
    None there means "start again from ``fresh``"."""

    holder: Any
    attr: str
    fresh: Any
    before: Any = None
    after: Any = None

    def ready(self, xp: Any) -> None:
        """Before the capture: ``holder.attr`` is an array the graph reads."""
        if getattr(self.holder, self.attr) is None:
            setattr(self.holder, self.attr, xp.full((), self.fresh, dtype=np.int64))
        self.before = getattr(self.holder, self.attr)

    def before_launch(self, xp: Any) -> None:
        current = getattr(self.holder, self.attr)
        if current is None:
            self.before.fill(self.fresh)
        elif current is not self.before:  # an eager step replaced it
            xp.copyto(self.before, current)
        setattr(self.holder, self.attr, self.before)

    def after_launch(self, xp: Any) -> None:
        xp.copyto(self.before, self.after)


# ----- the captured step -------------------------------------------------------------------------


class CapturedStep:
    """``step`` captured as a CUDA graph on its ``warmup + 1``-th call, replayed on every call after it.

    ``optimizers``: every optimizer the step steps. ``count``: ``(object, attribute)`` pairs of host counts
    the step reads in a kernel and adds 1 to. ``carry``: ``(object, attribute, fresh)`` for device arrays
    the step replaces with new ones (None there means "start from ``fresh``"). ``recapture``: capture again
    when something the graph keeps changed (``stale()``), instead of refusing the call.
    """

    def __init__(self, step: Callable[..., Any], optimizers: Optimizer | Sequence[Optimizer], warmup: int = 2,
                 count: Sequence[tuple[Any, str]] = (), carry: Sequence[tuple[Any, str, Any]] = (),
                 recapture: bool = False, name: str = "capture_step") -> None:
        if not callable(step):
            raise TypeError(f"{name}: step must be callable (the function of one training step); got {_brief(step)}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"{name}: warmup must be an int >= 1 (eager steps before the capture: they create the "
                             f"optimizer's state and fill the memory pool); got {warmup!r}")
        optimizers = [optimizers] if isinstance(optimizers, Optimizer) else list(optimizers)
        for opt in optimizers:
            _check_optimizer(opt, name)
        self.step, self.optimizers, self.warmup, self.name = step, optimizers, warmup, name
        self.count, self.carry, self.recapture = list(count), [_Carried(*c) for c in carry], recapture
        self.calls = 0  # the calls that ran a step: eager ones and launches
        self.launches = 0
        self.graph: Any = None
        self.kernels: int | None = None  # how many kernels a launch replays (on the stand-in; CuPy does not say)

    def __call__(self, *inputs: Any) -> Any:
        stale = self.graph is not None and self.stale()
        if stale and not self.recapture:
            raise RuntimeError(f"{self.name}: {stale} after the capture, and the graph keeps what it was captured "
                               "with; call reset() to capture the step again")
        if stale:
            self.reset()
        if self.graph is None and self.calls < self.warmup:
            last = 0 < self.calls == self.warmup - 1 and all(
                isinstance(x, Tensor) and x.device.type == "cuda" for x in inputs)
            result = self._lent_eagerly(inputs) if last else self.step(*inputs)
            self.calls += 1
            return result
        if self.graph is None:
            self._capture(inputs)
        else:
            self._put(inputs)
        self._launch()
        return self.outputs

    def matches(self, *inputs: Any) -> bool:
        """Whether ``inputs`` fit the captured ones (shape, dtype, device); True before the capture."""
        return self.graph is None or (len(inputs) == len(self.inputs) and all(
            isinstance(x, Tensor) and x.shape == s.shape and x.dtype == s.dtype and x.device is s.device
            for x, s in zip(inputs, self.inputs)))

    def reset(self) -> None:
        """Forget the graph: the next call captures the step again (after ``model.to(...)``, a new parameter
        group or a changed hyper-parameter)."""
        self.graph = None

    def _lent_eagerly(self, inputs: Sequence[Any]) -> Any:
        """The last warm-up step, eager, with the device scalars lent as the capture will lend them: CuPy builds
        the kernels that take them now, not inside the capture."""
        device = self._device(inputs)
        with device:
            lent = self._lent(device.xp)
            for value in lent:
                value.lend_eagerly()
            try:
                return self.step(*inputs)
            finally:
                for value in lent:
                    value.end_eagerly()

    # ----- what the graph was captured with ------------------------------------------------
    def _params(self) -> list[Tensor]:
        return [p for opt in self.optimizers for group in opt.param_groups for p in group["params"]]

    def _settings(self) -> list[dict[str, Any]]:
        """Every group's hyper-parameters but lr: what a launch keeps from the capture."""
        return [{k: v for k, v in group.items() if k not in ("params", "lr")} for opt in self.optimizers
                for group in opt.param_groups]

    def _fixed(self) -> dict[str, Any]:
        params = self._params()
        return {"params": [(p.data, p.requires_grad) for p in params], "settings": self._settings(),
                "state": [next((id(o.state[p]) for o in self.optimizers if p in o.state), None) for p in params]}

    def stale(self) -> str | None:
        """What changed since the capture that a launch would not see (None: nothing)."""
        now = self._fixed()
        old = self.fixed
        if len(now["params"]) != len(old["params"]) or len(now["settings"]) != len(old["settings"]):
            return "the optimizer's parameter groups changed"
        for i, ((data, trains), (was, trained)) in enumerate(zip(now["params"], old["params"])):
            if data is not was:
                return f"parameter {i}'s array was replaced (by load_state_dict, .to() or p.data = ...)"
            if trains != trained:
                return f"parameter {i}'s requires_grad changed from {trained} to {trains}"
        if now["state"] != old["state"]:
            return "the optimizer's state was replaced or cleared"
        for i, (group, was) in enumerate(zip(now["settings"], old["settings"])):
            for key in sorted(set(group) | set(was)):
                if group.get(key, _ABSENT) != was.get(key, _ABSENT):
                    return f"group {i}'s {key!r} changed from {was.get(key)!r} to {group.get(key)!r}"
        return None

    # ----- capture ------------------------------------------------------------------------
    def _capture(self, inputs: Sequence[Any]) -> None:
        device = self._device(inputs)
        xp = device.xp
        params = self._params()
        missing = [i for i, p in enumerate(params) if p.requires_grad and not any(p in o.state for o in self.optimizers)]
        if missing:
            raise ValueError(f"{self.name}: parameter {missing[0]} has no optimizer state after {self.calls} eager "
                             "step(s); it would be created inside the graph and reset by every launch (give it a "
                             "gradient in the warm-up steps, or raise warmup)")
        with device:
            self.inputs = [Tensor(xp.empty_like(x.data), requires_grad=x.requires_grad) for x in inputs]
            self._put(inputs)
            lent = self._lent(xp)
            for carried in self.carry:
                carried.ready(xp)
            fixed, graph, pool, stream = self._fixed(), None, xp.cuda.MemoryPool(), xp.cuda.Stream(non_blocking=True)
            stream.wait_event(xp.cuda.get_current_stream().record())
            for value in lent:
                value.lend()
            error: BaseException | None = None
            try:
                with xp.cuda.using_allocator(pool.malloc), stream:
                    stream.begin_capture()
                    try:
                        outputs = self.step(*self.inputs)
                    except Exception as err:  # the step's own error, not the invalidated capture it leaves
                        error = err
                    finally:
                        try:
                            graph = stream.end_capture()
                        except Exception as err:
                            error = error or err
            finally:
                for value in lent:
                    value.take_back()
                for carried in self.carry:
                    carried.after = getattr(carried.holder, carried.attr)
                    setattr(carried.holder, carried.attr, carried.before)
                for i, (p, (data, _)) in enumerate(zip(params, fixed["params"])):
                    replaced, p.data = p.data is not data, data
                    if replaced and error is None:
                        error = RuntimeError(f"the step replaced parameter {i}'s array (p.data = ...) instead of "
                                             "updating it in place; a launch would update the old one")
        if error is not None:
            raise RuntimeError(f"{self.name}: the step cannot be captured as a CUDA graph: {_first_line(error)} "
                               "(see the rules in tinyflo.graphs)") from error
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        if not all(o is None or isinstance(o, Tensor) for o in outs):
            raise TypeError(f"{self.name}: the step must return tensors (or None); got "
                            f"{', '.join(_brief(o) for o in outs)}")
        stepped = {id(p) for p in params if p.grad is not None}
        self.lent = [v for v in lent if not (isinstance(v, _Counted) and id(v.param) not in stepped)]
        self.graph, self.pool, self.stream, self.device, self.fixed = graph, pool, stream, device, fixed
        self.outputs, self.params = outputs, params
        self.grads = [p.grad for p in params]  # the graph's own gradients: what p.grad shows after a launch
        self.kernels = len(graph.kernels()) if hasattr(graph, "kernels") else None  # the stand-in's graph

    def _device(self, inputs: Sequence[Any]) -> Any:
        if not inputs:
            raise ValueError(f"{self.name}: the step needs its inputs as arguments (tensors on a CUDA device), so "
                             "a launch can copy each call's batch into them; got none")
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor) or x.device.type != "cuda":
                raise ValueError(f"{self.name}: input {i} must be a tensor on a CUDA device (a CUDA graph replays "
                                 f"GPU work only); got {_brief(x)}")
        if any(x.device is not inputs[0].device for x in inputs):
            raise ValueError(f"{self.name}: every input must be on one device; got "
                             f"{', '.join(str(x.device) for x in inputs)}")
        return inputs[0].device

    def _lent(self, xp: Any) -> list[Any]:
        """The host values the step's kernels read that change between steps, and the counts it adds to."""
        values: list[Any] = []
        for opt in self.optimizers:
            for group in opt.param_groups:  # Adam's kernel takes lr in float64; SGD multiplies in the params' dtype
                adam = isinstance(opt, Adam)
                values.append(_Lent(group, "lr", xp, np.float64 if adam else group["params"][0].dtype))
                states = [(p, opt.state[p]) for p in group["params"] if p in opt.state]
                values += [_Counted(state, "step", p) for p, state in states]
                if adam and states:
                    values += _bias_corrections(group, states, xp, self.name)
        return values + [_DeviceCount(holder, attr, xp) for holder, attr in self.count]

    # ----- launch -------------------------------------------------------------------------
    def _put(self, inputs: Sequence[Any]) -> None:
        if self.graph is not None and not self.matches(*inputs):
            got = ", ".join(_brief(x) for x in inputs)
            want = ", ".join(_brief(x) for x in self.inputs)
            raise ValueError(f"{self.name}: the captured step takes {want}; got {got} (a CUDA graph replays fixed "
                             "shapes: drop the short last batch, e.g. DataLoader(drop_last=True), or reset())")
        for x, s in zip(inputs, self.inputs):
            s.device.xp.copyto(s.data, x.data)

    def _launch(self) -> None:
        xp = self.device.xp
        for value in self.lent:
            value.before_launch()
        with self.device:
            for carried in self.carry:
                carried.before_launch(xp)
            self.graph.launch(xp.cuda.get_current_stream())
            for carried in self.carry:
                carried.after_launch(xp)
        for value in self.lent:
            value.after_launch()
        for p, g in zip(self.params, self.grads):
            p.grad = g
        self.calls += 1
        self.launches += 1


def _bias_corrections(group: dict, states: list, xp: Any, name: str) -> list[Any]:
    """Adam's bias corrections for the coming step, ``1 - beta1**t`` and ``sqrt(1 - beta2**t)``, computed on
    the host as the eager step does and lent to its kernel (``state["bias"]``, one pair for the group)."""
    counts = {state["step"] for _, state in states}
    if len(counts) != 1:
        raise ValueError(f"{name}: the parameters of an Adam group have taken different numbers of steps "
                         f"({sorted(counts)}); a captured step needs them in step (train them all in the warm-up)")
    first = states[0][1]
    beta1, beta2 = group["betas"]
    pair = {}
    one = _Lent(pair, "bias1", xp, np.float64, lambda: 1 - beta1 ** (first["step"] + 1))
    two = _Lent(pair, "bias2_sqrt", xp, np.float64, lambda: math.sqrt(1 - beta2 ** (first["step"] + 1)))
    return [one, two] + [_Shared(state, (one.array, two.array)) for _, state in states]


class _Shared:
    """``state["bias"]``: the group's two device scalars, given to each parameter's update while captured."""

    def __init__(self, state: dict, arrays: tuple) -> None:
        self.state, self.arrays = state, arrays

    def lend(self) -> None:
        self.state["bias"] = self.arrays

    def take_back(self) -> None:
        del self.state["bias"]

    def before_launch(self) -> None:
        pass

    def after_launch(self) -> None:
        pass

    lend_eagerly, end_eagerly = lend, take_back


def _check_optimizer(opt: Any, name: str) -> None:
    if not isinstance(opt, Optimizer):
        raise TypeError(f"{name}: optimizers must be tinyflo optimizers (module 06); got {type(opt).__name__}")
    if not isinstance(opt, SUPPORTED) or type(opt)._update not in (SGD._update, Adam._update):
        raise ValueError(f"{name}: {type(opt).__name__} cannot be captured: its update computes from host state "
                         "that changes every step; use SGD, Adam or AdamW (their changing values are kept on "
                         "the device)")
    if any(group.get("flat") for group in opt.param_groups):
        raise ValueError(f"{name}: {type(opt).__name__} has flat groups (flat=True), whose step runs on the host's "
                         "view of the buffer; build it with flat=False (a captured step launches every update in "
                         "one graph anyway)")


def capture_step(step: Callable[..., Any], optimizer: Optimizer | Sequence[Optimizer],
                 warmup: int = 2) -> CapturedStep:
    """``step`` as a captured CUDA graph; ``optimizer``: every optimizer it steps (``[]`` for none). The
    rules a step keeps are in this module's docstring."""
    return CapturedStep(step, optimizer, warmup)


# ----- the Trainer's plug-in ---------------------------------------------------------------------


@contextlib.contextmanager
def _replaced(holder: Any, attr: str, value: Any):
    """``holder.attr`` is ``value`` inside the block (an instance attribute), as it was after it."""
    had, kept = attr in vars(holder), vars(holder).get(attr)
    setattr(holder, attr, value)
    try:
        yield
    finally:
        if had:
            setattr(holder, attr, kept)
        else:
            delattr(holder, attr)


class CapturedTrainerStep:
    """``Trainer(capture=True)``: the Trainer's ``train_step`` captured and replayed, the schedule set on the
    host before each launch. A group of batches whose shapes differ from the captured ones (a short last
    batch) takes the eager step; ``eager_steps`` counts them. What the capture is refused for is one line."""

    def __init__(self, trainer: Any, warmup: int = 2) -> None:
        from tinyflo.core.layers import Dropout
        from tinyflo.core.training import Precision, Strategy

        why = None
        if trainer.device.type != "cuda":
            why = f"a CUDA device (the model is on {trainer.device})"
        elif type(trainer.precision) is not Precision:
            why = f"float32 without a precision plug-in (got {type(trainer.precision).__name__})"
        elif type(trainer.strategy) is not Strategy:
            why = f"one device without a group plug-in (got {type(trainer.strategy).__name__})"
        elif trainer.nan_check != "interval":
            why = "nan_check='interval' (the default on a GPU): nan_check='step' reads the loss every step"
        elif any(isinstance(m, Dropout) and m.p > 0 for m in trainer.model.modules()):
            why = "no dropout: a launch would draw the same mask every step"
        if why is not None:
            raise ValueError(f"Trainer: capture=True needs {why}")
        self.trainer, self.eager_steps, self.first = trainer, 0, 0
        self.captured = CapturedStep(self._step, trainer.strategy.optimizers, warmup, count=[(trainer, "step")],
                                     carry=[(trainer, "first_bad", -1)], recapture=True,  # after a checkpoint into
                                     name="Trainer(capture=True)")  # new arrays, a moved model, a new setting

    def _step(self, *tensors: Tensor) -> Tensor:
        """The Trainer's own step on the captured inputs, the schedule left out (set before each launch)."""
        t, captured = self.trainer, self.captured
        capturing = captured.graph is None and captured.calls >= captured.warmup  # not a warm-up step
        logged = _logged(t) if capturing else None
        with _replaced(t, "schedule", lambda: None):
            total = type(t).train_step(t, list(zip(tensors[::2], tensors[1::2])), self.first)
        if capturing and _logged(t) != logged:
            raise RuntimeError("Trainer.log() inside a captured step: its sums would not be updated by a launch; "
                               "log outside loss_fn, or train with capture=False")
        return Tensor(total)

    def __call__(self, batches: list[tuple[Tensor, Tensor]], first: int = 0) -> Any:
        t, captured = self.trainer, self.captured
        inputs = [a for pair in batches for a in pair]
        if not captured.matches(*inputs):
            self.eager_steps += 1
            return type(t).train_step(t, batches, first)
        self.first = first
        t.schedule()
        return captured(*inputs).data.copy()  # the next launch overwrites the graph's own output


def _logged(trainer: Any) -> dict[tuple[str, str], int]:
    """How many values ``Trainer.log()`` took so far, by phase and column."""
    return {(phase, name): meter.count for phase, meters in trainer.meters.items() for name, meter in meters.items()}


register_plugin("capture", CapturedTrainerStep)
