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

    step = tinyflo.capture_step(train_step, optimizer=optimizer)
    for x, y in loader:
        loss = step(x, y)   # eager for the warm-up calls, then captured once, then replayed

What a replay does is what the step did while it was captured: the same kernels, on the same arrays, with
the same host values. So the step must keep to these rules, and ``capture_step`` refuses, in one line, a
step that breaks one it can see:

* its inputs keep their shapes, dtypes and device (each call copies them into the captured inputs);
* it reads nothing back to the host (``float(loss)``, ``.item()``, ``print``), uploads nothing, draws no
  random numbers (dropout) and waits for nothing: CUDA refuses these inside a capture;
* it updates parameters and optimizer state in place (every tinyflo optimizer does);
* values the host changes between steps reach the kernels through device scalars: the learning rate of
  every group (a schedule may change it) and Adam's step count are kept on the device while captured;
  any other hyper-parameter is fixed when captured (changing it is refused);
* the optimizer is SGD, Adam or AdamW without flat groups (their host-side state is known);
* what it returns is overwritten by the next replay: copy it to keep it.

The result is bit-identical to running the step eagerly (tests/test_graphs.py, on the strict stand-in
whose graphs replay recorded kernels just as CUDA's do). The arrays a captured step allocates come from a
memory pool of its own, kept for as long as the graph lives, so nothing else can be handed a block the
graph still writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from tinyflo.core.optim import SGD, Adam, Optimizer
from tinyflo.core.tensor import Tensor
from tinyflo.core.training import register_plugin

SUPPORTED = (SGD, Adam)  # AdamW is an Adam; their updates read only lr and (Adam) the step count per step


def _brief(x: Any) -> str:
    return f"a tensor of shape {x.shape} ({x.dtype}) on {x.device}" if isinstance(x, Tensor) else type(x).__name__


class _Scalar:
    """A host value a captured kernel reads (``holder[key]``): on the device while captured, then kept there
    in step with the host. A ``counter`` is one the step itself adds 1 to (on the device, inside the graph)."""

    def __init__(self, holder: Any, key: Any, counter: bool, xp: Any, dtype: Any) -> None:
        self.holder, self.key, self.counter = holder, key, counter
        self.host = self._get()
        self.array = xp.full((), self.host, dtype=dtype)

    def _get(self) -> Any:
        return getattr(self.holder, self.key) if isinstance(self.key, str) and not isinstance(self.holder, dict) \
            else self.holder[self.key]

    def _set(self, value: Any) -> None:
        if isinstance(self.key, str) and not isinstance(self.holder, dict):
            setattr(self.holder, self.key, value)
        else:
            self.holder[self.key] = value

    def lend(self) -> None:
        """Before the capture: the kernels will read the device copy."""
        self.array.fill(self._get())
        self.host = self._get()
        self._set(self.array)

    def take_back(self) -> None:
        """After the capture: the host holds its value again (the capture ran nothing)."""
        self._set(self.host)

    def before_launch(self) -> None:
        """The host's value into the device copy, when it changed (a schedule's lr; a step taken eagerly)."""
        value = self._get()
        if value != self.host:
            self.array.fill(value)  # a fill kernel: no transfer, no wait
            self.host = value

    def after_launch(self) -> None:
        if self.counter:
            self.host += 1
            self._set(self.host)


class _Counter:
    """A host counter the step adds 1 to on the host (SGD's step count): the capture ran nothing, so it is
    put back, and each launch adds the 1."""

    def __init__(self, holder: dict, key: str) -> None:
        self.holder, self.key = holder, key

    def lend(self) -> None:
        self.value = self.holder[self.key]

    def take_back(self) -> None:
        self.holder[self.key] = self.value

    def before_launch(self) -> None:
        pass

    def after_launch(self) -> None:
        self.holder[self.key] += 1


class CapturedStep:
    """``step`` captured as a CUDA graph on its ``warmup + 1``-th call, replayed on every call after it.

    ``optimizers``: those the step steps (their learning rates and step counts are kept on the device).
    ``hold``: further ``(object, attribute)`` pairs of host numbers the step reads and adds 1 to.
    ``carry``: ``(object, attribute)`` pairs of device arrays the step replaces with new ones (``x = f(x)``):
    a launch writes the new array back into the one the graph reads.
    """

    def __init__(self, step: Callable[..., Any], optimizers: Sequence[Optimizer] = (), warmup: int = 2,
                 hold: Sequence[tuple[Any, str]] = (), carry: Sequence[tuple[Any, str]] = (),
                 name: str = "capture_step") -> None:
        if not callable(step):
            raise TypeError(f"{name}: step must be callable (the function of one training step); got {_brief(step)}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"{name}: warmup must be an int >= 1 (eager steps before the capture: they create the "
                             f"optimizer's state and fill the memory pool); got {warmup!r}")
        optimizers = [optimizers] if isinstance(optimizers, Optimizer) else list(optimizers)
        for opt in optimizers:
            _check_optimizer(opt, name)
        self.step, self.optimizers, self.warmup, self.name = step, optimizers, warmup, name
        self.hold, self.carry = list(hold), list(carry)
        self.calls = 0  # every call: eager ones and launches
        self.launches = 0
        self.graph: Any = None
        self.kernels: int | None = None  # what the stand-in recorded (None on a GPU: CuPy does not say)

    # ----- the calls ----------------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        if self.graph is None and self.calls < self.warmup:
            self.calls += 1
            return self.step(*inputs)
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

    # ----- capture ------------------------------------------------------------------------
    def _capture(self, inputs: Sequence[Any]) -> None:
        name = self.name
        if not inputs:
            raise ValueError(f"{name}: the step needs its inputs as arguments (tensors on a CUDA device), so a "
                             "replay can copy each call's batch into them; got none")
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor) or x.device.type != "cuda":
                raise ValueError(f"{name}: input {i} must be a tensor on a CUDA device (a CUDA graph replays GPU "
                                 f"work only); got {_brief(x)}")
        device = inputs[0].device
        if any(x.device is not device for x in inputs):
            raise ValueError(f"{name}: every input must be on one device; got "
                             f"{', '.join(str(x.device) for x in inputs)}")
        xp = device.xp
        params = [p for opt in self.optimizers for group in opt.param_groups for p in group["params"]]
        missing = [i for i, p in enumerate(params) if p.requires_grad and not any(p in o.state for o in self.optimizers)]
        if missing:
            raise ValueError(f"{name}: parameter {missing[0]} has no optimizer state after {self.calls} eager "
                             "step(s); it would be created inside the graph and reset by every replay (give it a "
                             "gradient in the warm-up steps, or raise warmup)")
        with device:
            self.inputs = [Tensor(xp.empty_like(x.data), requires_grad=x.requires_grad) for x in inputs]
            self._put(inputs)
            scalars = self._scalars(xp)
            carried = [(holder, attr, getattr(holder, attr)) for holder, attr in self.carry]
            arrays = [p.data for p in params]
            fixed = [{k: v for k, v in g.items() if k not in ("params", "lr")} for opt in self.optimizers
                     for g in opt.param_groups]
            stream, pool = xp.cuda.Stream(non_blocking=True), xp.cuda.MemoryPool()
            stream.wait_event(xp.cuda.get_current_stream().record())
            for s in scalars:
                s.lend()
            outputs: Any = None
            try:
                with xp.cuda.using_allocator(pool.malloc), stream:
                    stream.begin_capture()
                    try:
                        outputs = self.step(*self.inputs)
                    finally:
                        graph = stream.end_capture()
            except Exception as err:
                raise RuntimeError(f"{name}: the step cannot be captured as a CUDA graph: {_first_line(err)} "
                                   f"({_RULES})") from err
            finally:
                for s in scalars:
                    s.take_back()
        for i, (p, a) in enumerate(zip(params, arrays)):
            if p.data is not a:
                raise RuntimeError(f"{name}: the step replaced parameter {i}'s array (p.data = ...) instead of "
                                   "updating it in place; a replay would update the old array")
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        if not all(o is None or isinstance(o, Tensor) for o in outs):
            raise TypeError(f"{name}: the step must return tensors (or None); got "
                            f"{', '.join(_brief(o) for o in outs)}")
        self.graph, self.pool, self.stream, self.device = graph, pool, stream, device
        self.scalars, self.fixed, self.outputs = scalars, fixed, outputs
        self.params, self.arrays = params, arrays
        self.grads = [p.grad for p in params]  # the graph's own gradient arrays: what p.grad shows after a launch
        self.carried = [(holder, attr, before, getattr(holder, attr)) for holder, attr, before in carried]
        for holder, attr, before, _ in self.carried:
            setattr(holder, attr, before)
        self.kernels = len(graph.kernels()) if hasattr(graph, "kernels") else None

    def _scalars(self, xp: Any) -> list:
        """The host values the step's kernels read that change between steps."""
        import numpy as np

        scalars: list[Any] = []
        for opt in self.optimizers:
            for group in opt.param_groups:  # Adam's kernel reads lr as float64; SGD multiplies it in the params' dtype
                dtype = np.float64 if isinstance(opt, Adam) else group["params"][0].dtype
                scalars.append(_Scalar(group, "lr", False, xp, dtype))
                for p in group["params"]:
                    state = opt.state.get(p)
                    if state is not None and isinstance(opt, Adam):
                        scalars.append(_Scalar(state, "step", True, xp, np.int64))
                    elif state is not None:
                        scalars.append(_Counter(state, "step"))
        scalars += [_Scalar(holder, attr, True, xp, np.int64) for holder, attr in self.hold]
        return scalars

    # ----- replay -------------------------------------------------------------------------
    def _put(self, inputs: Sequence[Any]) -> None:
        if self.graph is not None and not self.matches(*inputs):
            got = ", ".join(_brief(x) for x in inputs)
            want = ", ".join(_brief(x) for x in self.inputs)
            raise ValueError(f"{self.name}: the captured step takes {want}; got {got} (a CUDA graph replays fixed "
                             "shapes: drop the short last batch, e.g. DataLoader(drop_last=True), or capture again)")
        for x, s in zip(inputs, self.inputs):
            s.device.xp.copyto(s.data, x.data)

    def reset(self) -> None:
        """Forget the graph: the next call captures the step again (after ``model.load_state_dict`` or
        ``model.to(...)`` replaced the parameters' arrays, say)."""
        self.graph = None

    def _launch(self) -> None:
        moved = next((i for i, (p, a) in enumerate(zip(self.params, self.arrays)) if p.data is not a), None)
        if moved is not None:
            raise RuntimeError(f"{self.name}: parameter {moved}'s array was replaced after the capture (by "
                               "load_state_dict, .to() or p.data = ...), and the graph updates the old one; call "
                               "reset() to capture the step again")
        fixed = [{k: v for k, v in g.items() if k not in ("params", "lr")} for opt in self.optimizers
                 for g in opt.param_groups]
        if fixed != self.fixed:
            changed = next(k for a, b in zip(fixed, self.fixed) for k in a if a[k] != b.get(k))
            raise ValueError(f"{self.name}: the optimizer's {changed!r} changed after the capture; the graph keeps "
                             "the value it was captured with (only lr may change: it is read from the device)")
        for s in self.scalars:
            s.before_launch()
        with self.device:
            self.graph.launch(self.device.xp.cuda.get_current_stream())
            for *_, before, after in self.carried:
                self.device.xp.copyto(before, after)
        for s in self.scalars:
            s.after_launch()
        for p, g in zip(self.params, self.grads):
            p.grad = g
        self.calls += 1
        self.launches += 1


_RULES = ("a captured step reads nothing back, uploads nothing, draws no random numbers and waits for nothing; "
          "see tinyflo.graphs")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _check_optimizer(opt: Any, name: str) -> None:
    if not isinstance(opt, Optimizer):
        raise TypeError(f"{name}: optimizers must be tinyflo optimizers (module 06); got {type(opt).__name__}")
    if not isinstance(opt, SUPPORTED) or type(opt)._update not in (SGD._update, Adam._update):
        raise ValueError(f"{name}: {type(opt).__name__} cannot be captured: its update computes from host state "
                         "that changes every step; use SGD, Adam or AdamW (their step count and lr are kept on "
                         "the device)")
    if opt._flat:
        raise ValueError(f"{name}: {type(opt).__name__} has flat groups (flat=True), whose step count lives on the "
                         "host; build it with flat=False (a captured step launches every update in one graph)")


def capture_step(step: Callable[..., Any], optimizer: Optimizer | Sequence[Optimizer] = (),
                 warmup: int = 2) -> CapturedStep:
    """``step`` as a captured CUDA graph: see this module's docstring for the rules a step keeps."""
    return CapturedStep(step, optimizer, warmup)


@contextlib.contextmanager
def _skipped(holder: Any, attr: str):
    """``holder.attr()`` does nothing inside the block (host work a captured step does apart, e.g. the schedule)."""
    setattr(holder, attr, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        delattr(holder, attr)


class CapturedTrainerStep:
    """``Trainer(capture=True)``: the Trainer's ``train_step`` captured and replayed, the schedule set on the
    host before each launch. A group of batches whose shapes differ from the captured ones (a short last
    batch) takes the eager step; ``eager_steps`` counts them."""

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
            why = "no dropout: a replay would draw the same mask every step"
        if why is not None:
            raise ValueError(f"Trainer: capture=True needs {why}")
        self.trainer, self.eager_steps = trainer, 0
        self.captured = CapturedStep(self._body, trainer.strategy.optimizers, warmup, hold=[(trainer, "step")],
                                     carry=[(trainer, "first_bad")], name="Trainer(capture=True)")

    def _body(self, *tensors: Tensor) -> Tensor:
        t = self.trainer
        batches = list(zip(tensors[::2], tensors[1::2]))
        with _skipped(t, "schedule"):  # set on the host before the call: a replay reads lr from the device
            total = type(t).train_step(t, batches, self.first)
        return Tensor(total)

    def __call__(self, batches: list[tuple[Tensor, Tensor]], first: int = 0) -> Any:
        t, captured = self.trainer, self.captured
        inputs = [a for pair in batches for a in pair]
        if not captured.matches(*inputs):
            self.eager_steps += 1
            return type(t).train_step(t, batches, first)
        self.first = first
        if captured.graph is not None and any(p.data is not a for p, a in zip(captured.params, captured.arrays)):
            captured.reset()  # a checkpoint loaded, or the model moved: capture the step again
        t.schedule()
        if captured.graph is None and captured.calls == captured.warmup and t.first_bad is None:
            t.first_bad = t.device.xp.full((), -1, dtype="int64")  # the guard's flag, carried from launch to launch
        elif captured.graph is not None and t.first_bad is None:  # a new interval: the flag starts again
            before = captured.carried[0][2]
            before.fill(-1)
            t.first_bad = before
        return captured(*inputs).data.copy()  # the next launch overwrites the graph's own output


register_plugin("capture", CapturedTrainerStep)
