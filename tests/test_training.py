"""Module 08's training loop: clipping, trends, the Trainer's epoch / evaluate / fit, callbacks, progress, Monitor."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training_support import SavesAt

import tinyflo
from tinyflo import ShapeError, Tensor
from tinyflo.core import schedulers as training_schedulers
from tinyflo.core import training
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.core.layers import Dropout, Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy, mse_loss
from tinyflo.core.optim import SGD, AdamW
from tinyflo.core.schedulers import CosineAnnealing, CosineSchedule, Scheduler, StepLR, Warmup
from tinyflo.core.training import (
    BestModel,
    Callback,
    CheckpointEvery,
    EarlyStopping,
    History,
    Monitor,
    Trainer,
    Trend,
    clip_grad_norm,
    clip_grad_value,
    epoch_line,
    resolve_verbosity,
)

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def tiny(seed: int = 0, dtype: str = "float64", device: str = "cpu"):
    tinyflo.manual_seed(seed)
    return Sequential(Linear(4, 8), ReLU(), Linear(8, 3)).to(device=device, dtype=dtype)


def data(n: int = 30, seed: int = 1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)).astype(dtype), rng.integers(0, 3, n)


def params_of(model) -> list[np.ndarray]:
    return [p.numpy().copy() for p in model.parameters()]


def quiet(model, lr: float = 0.1, **kwargs) -> Trainer:
    return Trainer(model, SGD(model.parameters(), lr=lr), cross_entropy, verbosity="quiet", **kwargs)


def with_grads(*grads, device="cpu", dtype=np.float32):
    params = []
    for g in grads:
        g = np.asarray(g, dtype)
        p = Tensor(np.zeros_like(g), device=device, requires_grad=True)
        p.grad = Tensor(g, device=device)
        params.append(p)
    return params


def test_training_has_no_differentiable_ops():
    """Every Function needs a gradcheck row; this module adds none (it drives the graph, it builds no op)."""
    from tinyflo.core.tensor import Function

    assert not [v for v in vars(training).values() if isinstance(v, type) and issubclass(v, Function)]


# ----- task training_clip ------------------------------------------------------------

@pytest.mark.task("training_clip")
@SETTINGS
@given(
    shapes=st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4),
    max_norm=st.floats(0.01, 10.0),
    norm_type=st.sampled_from([1.0, 2.0, 3.0, math.inf]),
    seed=st.integers(0, 2**16),
)
def test_training_clip_matches_torch(shapes, max_norm, norm_type, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(s) * rng.uniform(0.1, 5) for s in shapes]
    ours = with_grads(*grads, dtype=np.float64)
    theirs = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for t, g in zip(theirs, grads):
        t.grad = torch.tensor(g)
    norm = clip_grad_norm(ours, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(norm, Tensor) and norm.shape == () and norm.dtype == tinyflo.float64
    np.testing.assert_allclose(norm.item(), expected.item(), rtol=1e-12)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.task("training_clip")
def test_training_clip_keeps_dtype_device_and_small_gradients(device):
    p, q = with_grads([3.0, 0.0], [[4.0]], device=device)
    norm = clip_grad_norm([p, q], 1.0)
    assert norm.device == tinyflo.device(device) and norm.dtype == tinyflo.float32
    assert abs(norm.item() - 5) < 1e-5 and p.grad.dtype == tinyflo.float32
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.0], atol=1e-6)
    small = with_grads([0.3, 0.4], device=device)
    clip_grad_norm(small, 1.0)
    assert np.array_equal(small[0].grad.numpy(), np.float32([0.3, 0.4]))
    value = with_grads([-3.0, 0.5, 2.0], device=device)
    clip_grad_value(value, 1.0)
    np.testing.assert_array_equal(value[0].grad.numpy(), np.float32([-1, 0.5, 1]))


@pytest.mark.task("training_clip")
def test_training_clip_does_not_read_the_norm(monkeypatch):
    """No host sync: the norm is neither read nor converted unless error_if_nonfinite asks to raise."""
    reads = []
    for name in ("item", "numpy", "tolist", "__float__", "__bool__"):
        original = getattr(Tensor, name)
        monkeypatch.setattr(Tensor, name, lambda self, *a, _o=original, _n=name, **k: reads.append(_n) or _o(self, *a, **k))
    clip_grad_norm(with_grads([1.0, 2.0], [3.0]), 0.5)
    assert reads == []


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.task("training_clip")
def test_training_clip_errors():
    bad = with_grads([np.nan, 1.0])
    with pytest.raises(RuntimeError, match="nan"):
        clip_grad_norm(bad, 1.0, error_if_nonfinite=True)
    assert clip_grad_norm(with_grads([np.inf]), 1.0).item() == math.inf  # without the flag it only reports
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(with_grads([1.0]), 0.0)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm(with_grads([1.0]), 1.0, norm_type=-1)
    with pytest.raises(ValueError, match="clip_value"):
        clip_grad_value(with_grads([1.0]), -1)
    with pytest.raises(TypeError, match="item 1"):
        clip_grad_norm([Tensor([1.0]), "w"], 1.0)
    assert clip_grad_norm([Tensor([1.0], requires_grad=True)], 1.0).item() == 0.0


# ----- task training_trend -----------------------------------------------------------

@pytest.mark.task("training_trend")
@SETTINGS
@given(values=st.lists(st.floats(-100, 100), min_size=2, max_size=20), n=st.integers(2, 25))
def test_training_trend_slope_is_least_squares(values, n):
    last = values[-n:]
    expected = np.polyfit(np.arange(len(last)), last, 1)[0] if len(last) >= 2 else 0.0
    t = Trend(values)
    assert t.slope(n) == pytest.approx(expected, abs=1e-8 * (1 + np.abs(last).max()))
    assert t.mean(n) == pytest.approx(np.mean(last))
    assert t.improving(n) == (t.slope(n) < 0)
    assert Trend(values, mode="max").improving(n) == (t.slope(n) > 0)


@pytest.mark.task("training_trend")
def test_training_trend_stalled_and_converged():
    assert Trend([1.0, 0.5, 0.6, 0.55]).stalled(2)
    assert not Trend([1.0, 0.5, 0.6, 0.4]).stalled(2)
    assert Trend([1.0, 0.5, 0.499]).stalled(1, tol=0.01)
    assert not Trend([1.0]).stalled(1)
    assert Trend([0.5, 0.3, 0.3001, 0.2999]).converged(3, tol=1e-2)
    assert not Trend([0.3, 0.3]).converged(3)
    assert math.isnan(Trend([]).latest) and Trend([1.0, math.nan]).latest == 1.0
    with pytest.raises(ValueError, match="mode"):
        Trend([1.0], mode="up")
    with pytest.raises(ValueError, match="n must be"):
        Trend([1.0]).mean(0)


@pytest.mark.task("training_trend")
def test_training_trend_from_history():
    h = History()
    for loss, acc in ((1.0, 0.5), (0.5, 0.7), (0.25, 0.9)):
        h.append({"train_loss": loss, "val_loss": math.nan, "val_acc": acc, "lr": 0.1, "time": 0.0})
    assert h.trend("train_loss").improving(3) and h.trend("val_acc").mode == "max" and h.trend("val_acc").improving(3)
    assert len(h) == 3 and h.rows()[0]["epoch"] == 1
    with pytest.raises(KeyError, match="no metric 'loss'"):
        h.trend("loss")


# ----- task training_epoch -----------------------------------------------------------

@pytest.mark.task("training_epoch")
@SETTINGS
@given(n=st.integers(1, 40), batch=st.integers(1, 12), k=st.integers(1, 5), seed=st.integers(0, 1000))
def test_training_epoch_accumulation_equals_big_batches(n, batch, k, seed):
    """k micro-batches (the last ones possibly smaller) give the update of one batch of their samples."""
    X, Y = data(n, seed)
    accumulated, reference = tiny(seed), tiny(seed)
    trainer = quiet(accumulated)
    loss = trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=batch), accumulation_steps=k)
    opt = SGD(reference.parameters(), lr=0.1)
    group = batch * k
    losses = []
    for lo in range(0, n, group):
        opt.zero_grad()
        step_loss = cross_entropy(reference(Tensor(X[lo:lo + group])), Tensor(Y[lo:lo + group]))
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item() * len(Y[lo:lo + group]))
    assert trainer.step == -(-n // group)
    for a, b in zip(params_of(accumulated), params_of(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert loss == pytest.approx(sum(losses) / n, rel=1e-12)


class SyncCounter:
    """Counts every Tensor method that reads a value to the host."""

    NAMES = ("item", "numpy", "tolist", "__float__", "__int__", "__bool__")

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in self.NAMES:
            original = getattr(Tensor, name)
            monkeypatch.setattr(Tensor, name, self._counting(original))

    def _counting(self, original):
        def wrapper(t, *args, **kwargs):
            self.calls += 1
            return original(t, *args, **kwargs)
        return wrapper


@pytest.mark.task("training_epoch")
@pytest.mark.parametrize("nan_check", ["step", "interval"])
def test_training_epoch_reads_once_per_epoch_not_per_batch(monkeypatch, nan_check):
    counter = SyncCounter(monkeypatch)
    counts = {}
    for n in (20, 200):
        X, Y = data(n)
        trainer = quiet(tiny(), nan_check=nan_check, log_every=None, grad_clip_norm=1.0)
        before = counter.calls
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=5), accumulation_steps=2)
        trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=5))
        counts[n] = counter.calls - before
    assert counts[20] == counts[200] <= 4, counts


@pytest.mark.task("training_epoch")
def test_training_epoch_reads_once_per_log_interval(monkeypatch):
    counter = SyncCounter(monkeypatch)
    X, Y = data(200)
    model = tiny()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="verbose", log_every=10)
    before = counter.calls
    trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=5))  # 40 steps: 4 log intervals
    assert counter.calls - before == 4 + 1


class ReadCountingArray(np.ndarray):
    """A NumPy array that counts the reads of its values to Python; the results of ops on it inherit it."""

    NAMES = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist")
    reads = 0


def _counting_read(name):
    original = getattr(np.ndarray, name)

    def read(self, *args):
        ReadCountingArray.reads += 1
        return original(self, *args)
    return read


for _name in ReadCountingArray.NAMES:
    setattr(ReadCountingArray, _name, _counting_read(_name))


@pytest.mark.task("training_epoch")
def test_training_epoch_reads_no_target_per_batch_where_reads_wait(request):
    """On a GPU the class-target check is kept on the device: the reads per epoch do not grow with the batches.

    On the CPU (the control) the same check reads at every batch, which shows the counter sees it.
    """
    def reads(n):
        X, Y = data(n)
        loader = DataLoader(TensorDataset(X.view(ReadCountingArray), Y.view(ReadCountingArray)), batch_size=5)
        trainer = quiet(tiny(), nan_check="interval", log_every=None)
        ReadCountingArray.reads = 0
        trainer.train_epoch(loader)
        return ReadCountingArray.reads

    cpu = reads(20), reads(40)
    assert cpu[1] - cpu[0] in (4, 8), cpu  # the control: the range check's one or two reads per batch
    request.getfixturevalue("reads_wait")
    gpu = reads(20), reads(40)
    assert gpu[0] == gpu[1] <= 2, gpu


@pytest.mark.task("training_epoch")
def test_training_epoch_target_out_of_range_without_a_read_rolls_back(request):
    request.getfixturevalue("reads_wait")
    X, Y = data(60)
    Y[45] = 3  # three classes
    model = tiny()
    trainer = quiet(model, log_every=2)
    assert trainer.nan_check == "interval", "where reads wait, the NaN check reads once per interval"
    with pytest.raises(FloatingPointError, match=r"step 4 .*rolled back.*index out of range"):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert all(np.isfinite(p).all() for p in params_of(model))


@pytest.mark.task("training_evaluate")
def test_training_evaluate_target_out_of_range_without_a_read_is_an_error(request):
    X, Y = data(20)
    Y[13] = 7
    trainer = quiet(tiny())
    with pytest.raises(IndexError, match="not a class index"):
        trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=5))
    request.getfixturevalue("reads_wait")
    with pytest.raises(FloatingPointError, match="evaluate: the loss is not finite.*index out of range"):
        trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=5))
    Y[13] = 2
    loss, _ = trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=5))
    assert math.isfinite(loss)


@pytest.mark.task("training_epoch")
def test_training_epoch_schedule_before_each_step():
    class Recorder(Scheduler):
        def __init__(self):
            self.seen = []

        def lr(self, t, base_lr):
            self.seen.append(t)
            return base_lr / (t + 1)

    X, Y = data(30)
    per_step = Recorder()
    model = tiny()
    opt = SGD(model.parameters(), lr=5.0)
    trainer = Trainer(model, opt, cross_entropy, scheduler=per_step, scheduler_interval="step", verbosity="quiet")
    trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert per_step.seen == [0, 1, 2, 3, 4, 5] and opt.param_groups[0]["lr"] == 5.0 / 6
    per_epoch = Recorder()
    other = tiny()
    t2 = Trainer(other, SGD(other.parameters(), lr=5.0), cross_entropy, scheduler=per_epoch, verbosity="quiet")
    t2.fit(DataLoader(TensorDataset(X, Y), batch_size=15), epochs=3)
    assert per_epoch.seen == [0, 0, 1, 1, 2, 2]


@pytest.mark.task("training_epoch")
def test_training_epoch_nan_raises_before_the_step():
    X, Y = data(30)
    X[17] = np.nan
    model = tiny()
    trainer = quiet(model)
    with pytest.raises(FloatingPointError, match=r"step 1 \(epoch 1, batch 1\).*lower learning rate.*grad_clip_norm"):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert trainer.step == 1 and all(np.isfinite(p).all() for p in params_of(model))
    reference = tiny()
    opt = SGD(reference.parameters(), lr=0.1)
    cross_entropy(reference(Tensor(X[:10])), Tensor(Y[:10])).backward()
    opt.step()
    for a, b in zip(params_of(model), params_of(reference)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.task("training_epoch")
def test_a_nan_with_clipping_on_advises_a_lower_rate_not_clipping():
    X, Y = data(30)
    X[17] = np.nan
    model = tiny()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, grad_clip_norm=0.5, verbosity="quiet")
    with pytest.raises(FloatingPointError, match=r"lower learning rate \(the gradients are already clipped to "
                                                 r"norm 0.5\)") as info:
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert "Trainer(..., grad_clip_norm" not in str(info.value)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.task("training_epoch")
def test_training_epoch_nan_interval_rolls_back():
    X, Y = data(60)
    X[45] = np.inf
    model = tiny()
    trainer = quiet(model, nan_check="interval", log_every=2)
    with pytest.raises(FloatingPointError, match=r"step 4 .*rolled back.*optimizer"):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    reference = tiny()
    opt = SGD(reference.parameters(), lr=0.1)
    for lo in range(0, 40, 10):  # the check after step 4 (steps 0-3) found them finite
        opt.zero_grad()
        cross_entropy(reference(Tensor(X[lo:lo + 10])), Tensor(Y[lo:lo + 10])).backward()
        opt.step()
    for a, b in zip(params_of(model), params_of(reference)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.task("training_epoch")
def test_training_epoch_bad_input():
    X, Y = data(10)
    trainer = quiet(tiny())
    with pytest.raises(ValueError, match="no batches"):
        trainer.train_epoch([])
    with pytest.raises(ShapeError, match=r"batch 1 has inputs of shape \(5, 4\) and targets of shape \(4,\)"):
        trainer.train_epoch([(X[:5], Y[:5]), (X[:5], Y[:4])])
    with pytest.raises(ShapeError, match=r"batch 0 \(inputs \(5, 3\), targets \(5,\)\)"):
        trainer.train_epoch([(X[:5, :3], Y[:5])])
    with pytest.raises(TypeError, match="pair"):
        trainer.train_epoch([(X, Y, Y)])
    with pytest.raises(ValueError, match="accumulation_steps"):
        trainer.train_epoch([(X, Y)], accumulation_steps=0)
    with pytest.raises(ValueError, match="scheduler_interval"):
        Trainer(tiny(), SGD(tiny().parameters()), cross_entropy, scheduler_interval="batch")


@pytest.mark.task("training_epoch")
def test_training_epoch_float32_stays_float32(device):
    X, Y = data(20, dtype=np.float32)
    model = tiny(dtype="float32", device=device)
    trainer = Trainer(model, AdamW(model.parameters(), lr=1e-2), cross_entropy, grad_clip_norm=1.0,
                      verbosity="quiet", device=device)
    loss = trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=8, device=device))
    assert isinstance(loss, float) and all(p.dtype == tinyflo.float32 for p in model.parameters())


# ----- task training_evaluate --------------------------------------------------------

@pytest.mark.task("training_evaluate")
def test_training_evaluate_loss_and_accuracy():
    X, Y = data(30)
    model = tiny()
    trainer = quiet(model)
    loss, accuracy = trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=7))
    with tinyflo.no_grad():
        logits = model(Tensor(X))
    assert loss == pytest.approx(cross_entropy(logits, Tensor(Y)).item(), rel=1e-12)
    assert accuracy == pytest.approx(float((logits.numpy().argmax(1) == Y).mean()))
    assert model.training and all(p.grad is None for p in model.parameters())


@pytest.mark.task("training_evaluate")
def test_training_evaluate_eval_mode_and_regression():
    X, Y = data(30)
    dropped = Sequential(Linear(4, 8), Dropout(0.9), Linear(8, 3)).to(dtype="float64")
    t = quiet(dropped)
    loader = DataLoader(TensorDataset(X, Y), batch_size=10)
    assert t.evaluate(loader) == t.evaluate(loader)
    dropped.eval()
    t.evaluate(loader)
    assert not dropped.training
    reg = Sequential(Linear(4, 1)).to(dtype="float64")
    loss, accuracy = Trainer(reg, SGD(reg.parameters()), mse_loss, verbosity="quiet").evaluate(
        DataLoader(TensorDataset(X, X[:, :1]), batch_size=8))
    assert loss > 0 and math.isnan(accuracy)
    with pytest.raises(ValueError, match="no batches"):
        t.evaluate([])


# ----- task training_fit -------------------------------------------------------------

def loaders(n: int = 30):
    X, Y = data(n)
    return (DataLoader(TensorDataset(X, Y), batch_size=10, shuffle=True, seed=0),
            DataLoader(TensorDataset(X, Y), batch_size=15))


@pytest.mark.task("training_fit")
def test_training_fit_history_and_counters():
    train, val = loaders()
    trainer = quiet(tiny())
    calls = []
    history = trainer.fit(train, val, epochs=4, callbacks=[CheckpointEvery(2, lambda t: calls.append(t.epoch))])
    assert history is trainer.history and (trainer.epoch, trainer.step) == (4, 12) and calls == [2, 4]
    assert all(len(history[k]) == 4 for k in History.KEYS)
    assert history["val_loss"][-1] < history["val_loss"][0] and history["lr"] == [0.1] * 4
    state = trainer.state_dict()
    other = quiet(tiny())
    other.load_state_dict(state)
    assert (other.step, other.epoch, other.history) == (12, 4, history)


@pytest.mark.task("training_fit")
def test_training_fit_callbacks():
    train, val = loaders()
    stopper = EarlyStopping(patience=2)
    t = quiet(tiny(), lr=0.0)
    t.fit(train, val, epochs=10, callbacks=[stopper])
    assert t.epoch == 3 and stopper.stopped_epoch == 3
    trainer = quiet(tiny())
    best = BestModel()
    trainer.fit(train, val, epochs=3, callbacks=[best])
    assert best.best == min(trainer.history["val_loss"]) and best.best_epoch == 1 + int(np.argmin(trainer.history["val_loss"]))
    saved = {k: v.numpy().copy() for k, v in best.state.items()}
    trainer.fit(train, val, epochs=1)
    assert all(np.array_equal(best.state[k].numpy(), v) for k, v in saved.items())
    restored = best.restore(tiny(seed=9))
    assert all(np.array_equal(restored.state_dict()[k].numpy(), v) for k, v in saved.items())
    with pytest.raises(RuntimeError, match="no epoch"):
        BestModel().restore(tiny())
    with pytest.raises(KeyError, match=r"BestModel: the history has no 'val_los'; recorded: .*val_loss"):
        quiet(tiny()).fit(train, val, epochs=1, callbacks=[BestModel(monitor="val_los")])


@pytest.mark.task("training_fit")
def test_training_fit_observe_and_callback_order():
    class Plateau(Scheduler):
        def __init__(self):
            self.observed = []

        def lr(self, t, base_lr):
            return 0.05

        def observe(self, metric):
            self.observed.append(metric)

    events = []

    class Spy(Callback):
        def on_train_begin(self, trainer):
            events.append("begin")

        def on_epoch_end(self, trainer):
            events.append(trainer.epoch)

        def on_train_end(self, trainer):
            events.append("end")

    train, val = loaders()
    plateau = Plateau()
    model = tiny()
    t = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, scheduler=plateau, verbosity="quiet")
    h = t.fit(train, val, epochs=2, callbacks=[Spy()])
    assert plateau.observed == h["val_loss"][:1] and events == ["begin", 1, 2, "end"]  # epoch 2's: at epoch 3


@pytest.mark.task("training_fit")
def test_training_fit_digits_reaches_97_percent():
    """The proof: the digits MLP through the Trainer with AdamW, warm-up + cosine per step, clipping."""
    from tinyflo import datasets

    tinyflo.manual_seed(0)
    train_loader = DataLoader(datasets.digits(train=True, flatten=True), batch_size=32, shuffle=True, seed=0)
    test_loader = DataLoader(datasets.digits(train=False, flatten=True), batch_size=512)
    model = Sequential(Linear(64, 128), ReLU(), Linear(128, 10))
    epochs, per_epoch = 20, len(train_loader)
    schedule = Warmup(CosineAnnealing((epochs - 1) * per_epoch), warmup_steps=per_epoch)
    trainer = Trainer(model, AdamW(model.parameters(), lr=1e-2, weight_decay=0.05),
                      lambda out, y: cross_entropy(out, y, label_smoothing=0.1),
                      scheduler=schedule, scheduler_interval="step", grad_clip_norm=1.0, verbosity="quiet")
    history = trainer.fit(train_loader, test_loader, epochs=epochs)
    assert history["val_acc"][-1] >= 0.97, history["val_acc"]
    assert history.trend("train_loss").improving(epochs)


# ----- given pieces: verbosity, the epoch log, progress, Monitor -----------------------

@pytest.mark.task("training_fit")
def test_training_fit_prints_one_line_per_epoch(capsys):
    train, val = loaders()
    model = tiny()
    Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="normal").fit(train, val, epochs=2)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"epoch 2/2  loss=\d\.\d{4}  val_loss=\d\.\d{4}  val_acc=\d\.\d{3}  lr=1\.0e-01  \[\d+(\.\ds|ms)  ETA 0ms\]", lines[1])
    assert capsys.readouterr().err == ""  # no progress bar where nobody watches
    quiet(tiny()).fit(train, val, epochs=1)
    assert capsys.readouterr().out == ""


def test_epoch_line_format():
    row = {"train_loss": 0.41234, "val_loss": math.nan, "val_acc": 0.9123, "lr": 1e-3, "time": 1.2}
    assert epoch_line(3, 20, row, 20.4) == "epoch 3/20  loss=0.4123  val_acc=0.912  lr=1.0e-03  [1.2s  ETA 20.4s]"
    # a time's unit follows its rounded value: no 0.0s for a fast epoch, no 60.0s beside 1m00s
    assert [training._duration(s) for s in (0.012, 0.9996, 4.24, 59.97, 65, 7380)] == [
        "12ms", "1.0s", "4.2s", "1m00s", "1m05s", "2h03m"]
    # logged metrics: four significant digits, trailing zeros kept, so two columns line up
    assert [training._number(v) for v in (5.72, 5.234, 1234.5, 0.0001234, 0.0)] == [
        "5.720", "5.234", "1234", "1.234e-04", "0"]


def test_verbosity_from_argument_and_environment(monkeypatch):
    monkeypatch.delenv("TINYFLO_VERBOSITY", raising=False)
    assert resolve_verbosity() == 1 and resolve_verbosity("debug") == 3 and resolve_verbosity(0) == 0
    monkeypatch.setenv("TINYFLO_VERBOSITY", "quiet")
    assert resolve_verbosity() == 0 and resolve_verbosity("verbose") == 2
    monkeypatch.setenv("TINYFLO_VERBOSITY", "loud")
    with pytest.raises(ValueError, match="TINYFLO_VERBOSITY.*loud"):
        resolve_verbosity()
    with pytest.raises(ValueError, match="verbosity"):
        resolve_verbosity(7)


def test_progress_bar_only_when_watched(monkeypatch):
    monkeypatch.setattr(training, "_someone_watching", lambda: True)
    bar = training.progress_bar(10, "epoch 1", enabled=True)
    assert type(bar).__name__ != "_NoBar"
    bar.close()
    assert isinstance(training.progress_bar(10, "epoch 1", enabled=False), training._NoBar)
    monkeypatch.setattr(training, "_someone_watching", lambda: False)
    assert isinstance(training.progress_bar(10, "epoch 1", enabled=True), training._NoBar)


def test_monitor_writes_report_csv_and_png(tmp_path):
    train, val = loaders()
    monitor = Monitor(out_dir=tmp_path, live=False)
    trainer = quiet(tiny())
    trainer.fit(train, val, epochs=3, callbacks=[monitor])
    assert len(monitor.samples) == 3
    sample = monitor.samples[-1]
    cpu = [s["sys_cpu_pct"] for s in monitor.samples]  # nan for an epoch shorter than one tick of the CPU clocks
    assert all(math.isnan(c) or 0 <= c <= 100 for c in cpu) and sample["proc_ram_gb"] > 0
    assert 0 < sample["proc_ram_gb"] < sample["sys_ram_total_gb"] and 0 < sample["sys_ram_gb"] <= sample["sys_ram_total_gb"]
    assert "gpu_util_pct" not in sample, "no GPU columns for a run on the CPU"
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html and "<table>" in html and "src='http" not in html
    assert "<th title='sys_cpu_pct'>machine (CPU %)</th>" in html, "the report's table has the resources"
    assert "<th title='proc_ram_gb'>this process (RAM GB)</th>" in html, "named for a reader"
    context = re.search(r"<dl class='context'>(.*?)</dl>", html).group(1)
    for field in ("<dt>model</dt><dd>Sequential, ", "<dt>command</dt>", "<dt>started</dt>",
                  f"<dt>tinyflo</dt><dd>{tinyflo.__version__}</dd>"):
        assert field in context, f"the report says what ran: {field}"
    panels = monitor.panels()
    assert "memory (GB)" in panels, "and its curves"
    assert panels.get("CPU, the whole machine (%)") == ["sys_cpu_pct"] or all(math.isnan(c) for c in cpu)
    assert not any({"sys_cpu_pct", "proc_cpu_pct"} <= set(keys) for keys in panels.values()), (
        "the machine's CPU % and the process's per-core % are different scales: never one axis")
    figure = monitor.figure()
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        assert ax.get_xlabel() == "epoch" and all(float(t).is_integer() for t in ax.get_xticks()), (ax.get_title(), list(ax.get_xticks()))
        legend = ax.get_legend()
        labels = [t.get_text() for t in legend.get_texts()] if legend else []
        assert not [label for label in labels if "_" in label], f"raw column names in a legend: {labels}"
        if ax.get_title() in Monitor.WHOLE_SHARES:
            assert ax.get_ylim() == (0, 100), "a share of the machine: 0 to 100, nothing above"
        if ax.get_title() == "validation accuracy (%)":
            assert [y for y in ax.lines[0].get_ydata()] == pytest.approx([100 * a for a in trainer.history["val_acc"]])
    logged = {"train_loss": [1.0], "val_loss": [0.9], "lr": [0.1], "top_logit": [2.0], "val_top_logit": [2.5]}
    assert monitor.panels(logged)["top_logit"] == ["top_logit", "val_top_logit"], "a metric beside its validation"
    assert "val_top_logit" not in monitor.panels(logged)
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert len(rows) == 3 and {"epoch", "train_loss", "val_acc", "lr", "sys_cpu_pct", "proc_ram_gb"} <= set(rows[0])
    assert float(rows[2]["train_loss"]) == pytest.approx(trainer.history["train_loss"][2])
    log = (tmp_path / "training.log").read_text().splitlines()
    assert len(log) == 3 and log[2].startswith("epoch 3  loss=") and all(" ram " in line for line in log)
    assert not list(tmp_path.glob(".*.partial")), "written atomically"


def _tiny_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return DataLoader(TensorDataset(x, y), batch_size=8)


@pytest.mark.task("training_fit")
def test_training_fit_val_metrics_without_a_val_loader_are_an_error():
    model = Linear(4, 2)
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="quiet")
    never = "EarlyStopping: 'val_loss' was never measured in this fit(), which has no val_loader; pass a val_loader"
    with pytest.raises(ValueError, match=re.escape(never)):
        trainer.fit(_tiny_problem(), None, epochs=3, callbacks=[training.EarlyStopping(patience=1)])
    assert trainer.epoch == 1 and "val_loss" not in trainer.history
    trainer.fit(_tiny_problem(), _tiny_problem(), epochs=1)  # validated once: the column exists from here
    with pytest.raises(ValueError, match=re.escape(never)):  # not the stale value of the earlier fit
        trainer.fit(_tiny_problem(), epochs=3, callbacks=[training.EarlyStopping(patience=1)])
    assert trainer.epoch == 3 and math.isnan(trainer.history["val_loss"][-1])


@pytest.mark.task("training_fit")
def test_training_fit_plateau_watches_the_named_metric():
    from tinyflo.core.schedulers import ReduceLROnPlateau

    model = Linear(4, 2)
    schedule = ReduceLROnPlateau(mode="max", patience=0, monitor="val_acc")
    seen = []
    schedule.observe = lambda metric, _observe=schedule.observe: (seen.append(metric), _observe(metric))[1]
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, scheduler=schedule,
                      verbosity="quiet")
    loader = _tiny_problem()
    trainer.fit(loader, loader, epochs=3)
    # each epoch's metric is shown when the next epoch's rate is set: the third one at the fourth epoch's start
    assert seen == trainer.history["val_acc"][:2]
    trainer.train_epoch(loader)
    assert seen == trainer.history["val_acc"][:3] and trainer.observed == 3


@pytest.mark.task("training_fit")
def test_training_fit_device_move_refused_for_a_flat_optimizer():
    model = Linear(4, 2)
    with pytest.raises(ValueError, match="move the model first"):
        Trainer(model, SGD(model.parameters(), lr=0.1, flat=True), cross_entropy, device="cpu:1")


# ----- the loop as TinyTorch teaches it, learning rates per group, the guard's claims ----------


@pytest.mark.task("training_epoch")
def test_training_epoch_by_hand_as_tinytorch_teaches_it():
    """TinyTorch's module 08 loop: train_epoch and evaluate by hand, a cosine schedule from 0.1 to 0.01."""
    X, Y = data(40)
    loader = DataLoader(TensorDataset(X, Y), batch_size=10)
    model = tiny()
    schedule = CosineSchedule(max_lr=0.1, min_lr=0.01, total_epochs=5)
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, scheduler=schedule, verbosity="quiet")
    for epoch in range(5):
        train_loss = trainer.train_epoch(loader)
        val_loss, accuracy = trainer.evaluate(loader)
        assert trainer.epoch == epoch + 1, "train_epoch counts the epoch"
        assert trainer.history["train_loss"][-1] == train_loss and len(trainer.history["train_loss"]) == epoch + 1
        assert trainer.history["val_loss"][-1] == val_loss and trainer.history["val_acc"][-1] == accuracy
        assert trainer.history["lr"][-1] == pytest.approx(schedule.get_lr(epoch)), "the epoch ran at get_lr(epoch)"
    assert trainer.history["lr"][0] == pytest.approx(0.1) and trainer.history["lr"][-1] < 0.03
    trainer.train_epoch(loader)
    assert trainer.lr == pytest.approx(schedule.get_lr(5))


@pytest.mark.task("training_epoch")
@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_training_epoch_keeps_each_groups_learning_rate(interval):
    """Groups at [0.1, 0.001] under StepLR(gamma=0.5) halve together: [0.05, 0.0005], not [0.05, 0.05]."""
    X, Y = data(30)
    model = tiny()
    first, second = model[0], model[2]
    opt = SGD([{"params": first.parameters(), "lr": 0.1}, {"params": second.parameters(), "lr": 0.001}], lr=0.1)
    step_size = 1 if interval == "epoch" else 3
    trainer = Trainer(model, opt, cross_entropy, scheduler=StepLR(step_size=step_size, gamma=0.5),
                      scheduler_interval=interval, verbosity="quiet")
    for _ in range(3):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert trainer.history["lr"] == pytest.approx([0.1, 0.05, 0.025])
    assert trainer.history["lr_1"] == pytest.approx([0.001, 0.0005, 0.00025])
    assert trainer.lrs == pytest.approx([0.025, 0.00025])
    assert "lr=2.5e-02,2.5e-04" in training.epoch_line(3, 3, trainer.history.rows()[-1], None)


@pytest.mark.task("training_evaluate")
def test_training_evaluate_one_hot_targets_and_records_its_metrics():
    X, Y = data(30)
    model = tiny()
    trainer = quiet(model)
    indices = trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=7))
    one_hot = trainer.evaluate(DataLoader(TensorDataset(X, np.eye(3, dtype=np.float32)[Y]), batch_size=7))
    assert one_hot[1] == pytest.approx(indices[1]) and not math.isnan(one_hot[1])
    assert len(trainer.history) == 0, "before the first epoch there is no row to record into"
    trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    loss, accuracy = trainer.evaluate(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert trainer.history["val_loss"] == [loss] and trainer.history["val_acc"] == [accuracy]


def _sqrt_model():
    from tinyflo.core.layers import Module

    class ZeroResidualSqrt(Module):
        """A finite output whose gradient is NaN: d sqrt(r) / dr at r = 0 times d r / dw = 0."""

        def __init__(self):
            super().__init__()
            self.inner = Linear(4, 1).to(dtype="float64")

        def forward(self, x):
            r = self.inner(x) - self.inner(x)
            return (r * r).sum(axis=1, keepdims=True) ** 0.5

    return ZeroResidualSqrt()


@pytest.mark.task("training_guard")
@pytest.mark.parametrize("nan_check", ["step", "interval"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_training_guard_a_finite_loss_with_nan_gradients_never_reaches_the_weights(nan_check):
    X, _ = data(20)
    model = _sqrt_model()
    before = [p.numpy().copy() for p in model.parameters()]
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1, momentum=0.9), mse_loss, verbosity="quiet",
                      nan_check=nan_check, log_every=None)
    with pytest.raises(FloatingPointError, match="not finite") as info:
        trainer.train_epoch(DataLoader(TensorDataset(X, X[:, :1]), batch_size=10))
    message = str(info.value)
    # each claim of the message, checked
    for p, b in zip(model.parameters(), before):
        assert np.array_equal(p.numpy(), b), "the parameters are as before the bad step"
    assert trainer.step == 0 and trainer.epoch == 0
    if nan_check == "step":
        assert "the step was not taken" in message and "step 0 (epoch 1, batch 0)" in message
        assert trainer.optimizer.state == {} or all(
            not np.any(s.get("momentum_buffer", 0)) for s in trainer.optimizer.state.values()
        ), "the optimizer did not take the step"
    else:
        assert "rolled back" in message and "step count (0)" in message and "optimizer's state" in message


@pytest.mark.task("training_rollback")
def test_training_rollback_restores_steps_and_schedule():
    X, Y = data(40)
    X[35] = np.nan  # the last batch of the epoch
    model = tiny()
    opt = SGD(model.parameters(), lr=1.0)
    trainer = Trainer(model, opt, cross_entropy, scheduler=StepLR(step_size=1, gamma=0.5), scheduler_interval="step",
                      nan_check="interval", log_every=2, verbosity="quiet")
    with pytest.raises(FloatingPointError, match=r"at step 3 .*step count \(2\).*rolled back"):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert trainer.step == 2, "rolled back to the check after step 2"
    assert opt.param_groups[0]["lr"] == 0.5, "and the rate set for step 1, the last one before that check"
    assert all(np.isfinite(p.numpy()).all() for p in model.parameters())


@pytest.mark.task("training_epoch")
def test_training_epoch_empty_batch_is_an_error_and_no_step():
    model = tiny()
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    trainer = Trainer(model, opt, cross_entropy, scheduler=StepLR(step_size=1), scheduler_interval="step",
                      verbosity="quiet")
    before = [p.numpy().copy() for p in model.parameters()]
    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match=r"train_epoch: batch 0 has no samples"):
        trainer.train_epoch([empty])
    assert trainer.step == 0 and opt.param_groups[0]["lr"] == 0.1
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))


@pytest.mark.task("training_fit")
def test_training_fit_plugins_are_named_and_checked():
    model = tiny()
    names = Trainer.__init__.__code__.co_varnames[:Trainer.__init__.__code__.co_argcount]
    assert "scaler" not in names and "local_sgd" not in names and "plugins" in names  # those are plug-ins now
    with pytest.raises(TypeError, match="plugins must be Precision, Strategy or CheckpointIO"):
        Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, plugins=[object()])
    with pytest.raises(ValueError, match="register_plugin: name must be one of"):
        training.register_plugin("mystery", object)
    with pytest.raises(TypeError, match="needs apply"):
        Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, scheduler=object())
    with pytest.raises(ValueError, match="ReduceLROnPlateau got monitor=3; expected a history key"):
        training_schedulers.ReduceLROnPlateau(monitor=3)
    with pytest.raises(ValueError, match="Trainer got grad_clip_norm='1'"):
        Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, grad_clip_norm="1")


@pytest.mark.task("training_running")
def test_training_running_loss_reads_once():
    running = training.RunningLoss()
    for value, n in ((2.0, 4), (1.0, 4), (3.0, 2)):
        running.add(np.asarray(value * n, np.float32), n)
    assert running.samples == 10 and running.batches == 3
    assert running.mean(quiet(tiny())) == pytest.approx(1.8)
    assert training.RunningLoss(running.state_dict()).mean(quiet(tiny())) == pytest.approx(1.8)


@pytest.mark.task("training_step")
def test_training_step_accumulates_and_steps_once():
    X, Y = data(24)
    big, small = tiny(), tiny()
    quiet(big).train_step([(Tensor(X), Tensor(Y))])
    trainer = quiet(small)
    total = trainer.train_step([(Tensor(X[i:i + 8]), Tensor(Y[i:i + 8])) for i in (0, 8, 16)])
    assert trainer.step == 1 and getattr(total, "shape", None) == ()
    for a, b in zip(big.parameters(), small.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.task("training_callbacks")
def test_training_callbacks_best_model_keeps_a_copy():
    X, Y = data(30)
    loader = DataLoader(TensorDataset(X, Y), batch_size=10)
    trainer = quiet(tiny())
    best = training.BestModel(monitor="train_loss")
    trainer.fit(loader, epochs=3, callbacks=[best])
    assert best.best == min(trainer.history["train_loss"])
    name = next(iter(best.state))
    kept = best.state[name].numpy().copy()
    trainer.fit(loader, epochs=1)
    assert np.array_equal(best.state[name].numpy(), kept)


@pytest.mark.task("training_guard")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_training_guard_with_a_grad_scaler_leaves_nothing_half_done():
    """Step mode under float16 + GradScaler: a refused step forgets its unscale, so training goes on."""
    X, Y = data(30, dtype=np.float32)
    bad = X.copy()
    bad[3] = np.nan
    model = tiny(dtype="float32")
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, amp="float16", nan_check="step",
                      verbosity="quiet")
    trainer.train_step([(Tensor(X[:10]), Tensor(Y[:10]))])
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(FloatingPointError, match="the step was not taken"):
        trainer.train_step([(Tensor(bad[:10]), Tensor(Y[:10]))], 1)
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))
    trainer.train_step([(Tensor(X[10:20]), Tensor(Y[10:20]))], 2)  # no "unscale_() has already been called"
    assert trainer.step == 2


@pytest.mark.task("training_rollback")
def test_training_rollback_restores_buffers_too():
    from tinyflo.core.layers import BatchNorm1d

    X, Y = data(40)
    X[25] = np.nan
    tinyflo.manual_seed(0)
    model = Sequential(Linear(4, 8), BatchNorm1d(8), ReLU(), Linear(8, 3)).to(dtype="float64")
    trainer = quiet(model, nan_check="interval", log_every=1)
    with pytest.raises(FloatingPointError, match="buffers"):
        trainer.train_epoch(DataLoader(TensorDataset(X, Y), batch_size=10))
    assert all(np.isfinite(b.numpy()).all() for b in model.buffers()), "the running statistics are rolled back"
    assert trainer.step == 2


@pytest.mark.task("training_guard")
def test_training_guard_float16_gradients_past_256_are_finite():
    """The guard's squared norm is summed in float32: a float16 gradient norm of 300 is no false alarm."""
    model = Linear(4, 1).to(dtype="float16")
    x = np.ones((1, 4), np.float16)  # one sample: the loss (22,500) fits float16, its gradient's square does not
    y = np.full((1, 1), 150.0, np.float16)
    trainer = Trainer(model, SGD(model.parameters(), lr=0.0), mse_loss, verbosity="quiet")
    trainer.train_step([(Tensor(x), Tensor(y))])
    assert trainer.step == 1


@pytest.mark.task("training_fit")
def test_training_plugins_serve_one_trainer_and_a_scaler_needs_a_precision_plugin():
    from tinyflo.core.amp import MixedPrecision
    from tinyflo.distributed import DataParallelStrategy, init_process_group

    with pytest.raises(ValueError, match="float32 training scales no loss"):
        quiet(tiny()).scaler = object()
    strategy = DataParallelStrategy(init_process_group("local", world_size=2))
    quiet(tiny(), plugins=[strategy])
    with pytest.raises(ValueError, match="already trains another model"):
        quiet(tiny(), plugins=[strategy])
    precision = MixedPrecision("float16")
    quiet(tiny(dtype="float32"), plugins=[precision])
    with pytest.raises(ValueError, match="already serves another Trainer"):
        quiet(tiny(dtype="float32"), plugins=[precision])


# ----- reads counted on the strict stand-in (TINYFLO_FAKE_GPU=strict) ---------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("options, per_step", [
    ({}, 0), ({"grad_clip_norm": 1.0}, 0),
    ({"scheduler": StepLR(step_size=2, gamma=0.5), "scheduler_interval": "step"}, 0),
    # float16's loss scaler decides on the host whether to skip a step: one flag read per step, as
    # PyTorch's GradScaler does with an optimizer that cannot skip on the device
    ({"amp": "float16"}, 1),
], ids=["plain", "clipped", "scheduled", "float16-scaler"])
def test_trainer_reads_per_epoch_do_not_grow_with_the_batches(strict_reads, options, per_step):
    """On cuda:0 every read back to the host is counted: an epoch of 12 batches reads what one of 4 does."""
    def reads(n_batches: int) -> int:
        X, Y = data(5 * n_batches, dtype=np.float32)
        train = DataLoader(TensorDataset(X, Y), batch_size=5)
        val = DataLoader(TensorDataset(X, Y), batch_size=10)
        trainer = quiet(tiny(dtype="float32", device="cuda:0"), device="cuda:0", **options)
        strict_reads.reset_reads()
        trainer.fit(train, val, epochs=2)
        return strict_reads.reads()

    few, many = reads(4), reads(12)
    assert many - few == per_step * 2 * 8, f"{few} reads for 2 epochs of 4 batches, {many} for 2 epochs of 12"
    assert few - per_step * 2 * 4 <= 8, f"{few} reads for 2 epochs: a few per epoch (the epoch losses, the guard)"


@pytest.mark.gpu
def test_trainer_step_reads_nothing_back_on_the_gpu(strict_reads):
    X, Y = data(10, dtype=np.float32)
    trainer = quiet(tiny(dtype="float32", device="cuda:0"), device="cuda:0", grad_clip_norm=1.0)
    assert trainer.nan_check == "interval"
    strict_reads.reset_reads()  # the model's four parameters went over as the Trainer was built
    batches = [trainer.batch((X[:5], Y[:5]), 0), trainer.batch((X[5:], Y[5:]), 1)]
    assert strict_reads.uploads() == 4, "each batch's inputs and targets go over once"
    strict_reads.reset_reads()
    with strict_reads.no_reads():  # the step and its guard stay on the device; only check_guard reads
        for _ in range(3):
            trainer.train_step(batches)
    assert strict_reads.uploads() == 0, f"a step sends nothing more to the device: {dict(strict_reads.UPLOADS)}"
    trainer.check_guard()
    assert strict_reads.reads() == 1, dict(strict_reads.READS)


@pytest.mark.gpu
@pytest.mark.gpu_hardware
def test_monitor_reads_cupys_memory_pool_on_a_real_gpu():
    held = Tensor(np.ones((1024, 1024), np.float32), device="cuda:0")  # 4 MiB from CuPy's pool
    resources = training.Resources("cuda:0")
    sample = resources.sample()
    assert sample["gpu_pool_gb"] >= 4 * 2**20 / training.GB and held.shape == (1024, 1024)
    if resources.nvml is not None:  # nvidia-ml-py installed (the gpu extras bring it)
        assert 0 < sample["gpu_mem_gb"] <= sample["gpu_mem_total_gb"] and 0 <= sample["gpu_util_pct"] <= 100
        assert 0 < sample["gpu_temp_c"] < 120


# ----- logged metrics, resources in the epoch line, floDl's trend questions ------------------------------

def test_trainer_log_records_epoch_means_of_training_and_validation_and_shows_them(capsys):
    model = tiny()
    logged = []

    def loss_fn(out, y):
        loss = cross_entropy(out, y)
        trainer.log("scaled", loss * 2)  # a tensor: summed on the device
        trainer.log("hidden_count", 1.0, show=False)  # a number, kept out of the epoch line
        logged.append((trainer.phase, 2 * loss.item()))
        return loss

    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), loss_fn, verbosity="normal")
    train, val = loaders()
    history = trainer.fit(train, val, epochs=2)
    per_epoch = len(train) + len(val)
    for epoch in range(2):
        seen = logged[epoch * per_epoch:(epoch + 1) * per_epoch]
        assert history["scaled"][epoch] == pytest.approx(np.mean([v for p, v in seen if p == "train"]))
        assert history["val_scaled"][epoch] == pytest.approx(np.mean([v for p, v in seen if p == "val"]))
    assert history["hidden_count"] == [1.0, 1.0] and history["val_hidden_count"] == [1.0, 1.0]
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"scaled={history['scaled'][1]:.4g}" in line and "val_scaled=" in line and "hidden_count" not in line
    trainer.log("after", 3)  # between passes: straight into the last row
    assert math.isnan(history["after"][0]) and history["after"][1] == 3.0


def test_trainer_log_refuses_what_is_not_a_metric():
    trainer = quiet(tiny())
    with pytest.raises(ValueError, match=r"Trainer\.log: name must be a word like 'grad_norm'.*got 'my metric'"):
        trainer.log("my metric", 1.0)
    with pytest.raises(ValueError, match=r"Trainer\.log\(name='val_loss'\): 'val_loss' is a column the Trainer records"):
        trainer.log("val_loss", 1.0)
    with pytest.raises(ValueError, match=r"Trainer\.log\(name='loss'\): 'val_loss' is a column .* \(the name, logged "
                                         r"while evaluating\)"):
        trainer.log("loss", 1.0)  # refused at once, not at the first evaluation
    with pytest.raises(TypeError, match=r"Trainer\.log\('x'\): expected a number or a one-element tensor; got 'a'"):
        trainer.log("x", "a")
    with pytest.raises(ShapeError, match=r"Trainer\.log\('x'\): .*got a tensor of shape \(2,\)"):
        trainer.log("x", Tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"Trainer\.log\('x'\): no epoch has run yet"):
        trainer.log("x", 1.0)


def test_resources_reach_the_epoch_line_and_the_history_on_the_digits(capsys):
    from tinyflo import datasets

    tinyflo.manual_seed(0)
    model = Sequential(Linear(64, 32), ReLU(), Linear(32, 10))
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="normal", resources=True)
    # batches of 8: an epoch long enough (tens of ms) for the CPU clocks, which tick every 10 ms
    history = trainer.fit(DataLoader(datasets.digits(train=True, flatten=True), batch_size=8), epochs=2)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.search(r"\]  cpu \d+% \(this process \d+%\)  ram \d+\.\d/\d+\.\d GB$", line), line
    assert all(0 <= v <= 100 for v in history["sys_cpu_pct"]) and all(v > 0 for v in history["proc_ram_gb"])
    row = {"train_loss": 0.5, "time": 1.0, "gpu_util_pct": 87.0, "gpu_mem_gb": 5.24, "gpu_mem_total_gb": 80.0,
           "gpu_temp_c": 61.0}
    assert epoch_line(1, 2, row, None).endswith("[1.0s]  gpu 87% 5.2/80.0 GB 61°C")


def test_trend_answers_flodls_questions_in_flodls_meanings():
    t = Trend([5.0, 4.0, 3.0, 3.01, 2.99, 3.0])
    assert t.mean() == pytest.approx(3.5) and t.mean(2) == pytest.approx(2.995), "mean(): all values; mean(n): the last n"
    assert t.min() == 2.99 and t.max() == 5.0 and math.isnan(Trend([]).min()) and math.isnan(Trend([]).mean())
    assert t.stalled_by_slope(4, threshold=0.01) and not t.stalled_by_slope(6, threshold=0.01), "|slope| < threshold"
    assert Trend([0.1, 0.9, 0.9, 0.9], mode="max").stalled_by_slope(3, 1e-9), "a high plateau is stalled too"
    assert t.converged_by_variance(4, tol=1e-3) and not t.converged_by_variance(6, tol=1e-3), "variance < tol"
    assert not Trend([1.0, 1.0]).converged_by_variance(3, tol=1.0), "fewer than n values"
    assert Trend([100.0, 100.5]).converged(2, tol=0.01) and not Trend([100.0, 100.5]).converged_by_variance(2, 0.01), (
        "converged is relative to the mean, converged_by_variance absolute")


@pytest.mark.gpu
def test_logged_tensor_metrics_are_read_once_per_epoch_on_the_gpu(strict_reads):
    """Logging a device tensor every batch adds one read per epoch, whatever the number of batches."""
    def reads(n_batches: int) -> int:
        X, Y = data(5 * n_batches, dtype=np.float32)

        def loss_fn(out, y):
            loss = cross_entropy(out, y)
            trainer.log("scaled", loss * 2)
            return loss

        model = tiny(dtype="float32", device="cuda:0")
        trainer = Trainer(model, SGD(model.parameters(), lr=0.1), loss_fn, device="cuda:0", verbosity="quiet")
        strict_reads.reset_reads()
        trainer.fit(DataLoader(TensorDataset(X, Y), batch_size=5), epochs=2)
        return strict_reads.reads()

    assert reads(12) == reads(4)


def test_monitor_live_draws_once_then_updates_in_place(monkeypatch):
    """live=True (the default in Jupyter): one image shown after the first epoch, replaced after each next one."""
    import IPython.display

    shown = []

    class Handle:
        def update(self, image):
            shown.append(("update", image.data[:8]))

    def display(image, display_id=False):
        shown.append(("display", image.data[:8], display_id))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    train, val = loaders()
    quiet(tiny()).fit(train, val, epochs=3, callbacks=[Monitor(live=True)])
    png = b"\x89PNG\r\n\x1a\n"
    assert shown == [("display", png, True), ("update", png), ("update", png)]


@pytest.mark.gpu
def test_trainer_on_the_second_gpu_runs_its_loop_there():
    """On cuda:1 the loop's own array arithmetic (loss sums, targets checks) must run with cuda:1 current."""
    from tinyflo.core.tensor import cuda_device_count

    if cuda_device_count() < 2:
        pytest.skip("needs two GPUs")
    X, Y = data(20, dtype=np.float32)
    model = tiny(dtype="float32", device="cuda:1")
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, device="cuda:1", verbosity="quiet")
    loader = DataLoader(TensorDataset(X, Y), batch_size=5)
    history = trainer.fit(loader, loader, epochs=2)
    assert len(history["val_loss"]) == 2 and all(math.isfinite(v) for v in history["val_loss"])


def test_trainer_log_forgets_an_interrupted_epoch_and_sums_float16_in_float32():
    model = tiny()
    values = iter([100.0] * 3 + [1.0] * 100)

    def loss_fn(out, y):
        trainer.log("m", next(values))
        if trainer.step == 2 and trainer.epoch == 0 and not hasattr(loss_fn, "raised"):
            loss_fn.raised = True
            raise KeyboardInterrupt  # the user stops the epoch after three batches
        trainer.log("half", Tensor(np.float16(0.3)))
        return cross_entropy(out, y)

    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), loss_fn, verbosity="quiet")
    X, Y = data(40)
    loader = DataLoader(TensorDataset(X, Y), batch_size=1)
    with pytest.raises(KeyboardInterrupt):
        trainer.train_epoch(loader)
    trainer.train_epoch(loader)
    assert trainer.history["m"] == [1.0], "the interrupted epoch's values are not in the next epoch's mean"
    assert trainer.history["half"][0] == pytest.approx(0.3, rel=1e-3), "summed in float32: a float16 sum stalls"


def test_resources_keep_one_cpu_clock_per_caller():
    """Sampling every log interval must not shorten the epoch's CPU measurement."""
    import time as clock

    resources = training.Resources()
    end = clock.perf_counter() + 0.3
    while clock.perf_counter() < end:  # busy for 0.3 s
        pass
    busy = resources.sample("interval")["proc_cpu_pct"]
    clock.sleep(0.2)
    idle = resources.sample("interval")["proc_cpu_pct"]  # the interval clock: only the idle 0.2 s
    whole = resources.sample("epoch")["proc_cpu_pct"]  # the epoch clock: the busy 0.3 s and the idle 0.2 s
    assert idle < whole < busy and whole > idle + 10, (busy, idle, whole)


# ----- resuming: the epochs go on from the trainer's, and say so -------------------------------------


def _cosine_run(seed: int, interval: str, verbosity: str = "quiet"):
    """Dropout, shuffling, AdamW and a warm-up + cosine sized for 9 epochs (of steps, or of epochs)."""
    tinyflo.manual_seed(seed)
    model = Sequential(Linear(4, 16), ReLU(), Dropout(0.2), Linear(16, 3))
    X, Y = data(40, dtype=np.float32)
    loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, seed=seed + 1)
    total = 9 * len(loader) if interval == "step" else 9
    schedule = Warmup(CosineAnnealing(total - 2), warmup_steps=2)
    trainer = Trainer(model, AdamW(model.parameters(), lr=1e-2), cross_entropy, scheduler=schedule,
                      scheduler_interval=interval, verbosity=verbosity)
    return trainer, loader


@pytest.mark.task("training_fit")
@pytest.mark.parametrize("interval, mid_epoch", [("step", False), ("epoch", False), ("step", True)],
                         ids=["step-schedule", "epoch-schedule", "step-schedule-mid-epoch"])
def test_training_fit_resumed_goes_on_to_the_same_end_bit_for_bit_and_says_so(tmp_path, capsys, interval, mid_epoch):
    """9 epochs straight == 3 (or 3 and 2 batches), a checkpoint, a fresh trainer and fit(epochs=6): the same
    weights, history and schedule, bit for bit; the lines say epoch 4/9 ... 9/9 after one saying so."""
    straight, loader = _cosine_run(0, interval)
    straight.fit(loader, epochs=9)
    first, first_loader = _cosine_run(0, interval)
    path = tmp_path / "run.safetensors"
    if mid_epoch:  # 3 epochs of 5 steps, then 2 steps into the fourth
        first.fit(SavesAt(first_loader, first, 17, path), epochs=4)
    else:
        first.fit(first_loader, epochs=3)
        first.save_checkpoint(path)
    resumed, resumed_loader = _cosine_run(7, interval, verbosity="normal")  # other weights, other shuffling
    resumed.load_checkpoint(path, train_loader=resumed_loader)
    capsys.readouterr()
    resumed.fit(resumed_loader, epochs=6)
    lines = capsys.readouterr().out.splitlines()
    where, which = (("in epoch 4, 2 batches into it (step 17)", "the rest of 4, then 5 to 9") if mid_epoch else
                    ("after epoch 3 (step 15)", "4 to 9"))
    assert lines[0] == (f"fit: resuming a run restored from a checkpoint {where}: training 6 more epochs, {which}; "
                        "epochs counts this call's epochs (to end at epoch N, pass epochs=N - trainer.epoch)")
    assert [line.split("  ")[0] for line in lines[1:]] == [f"epoch {e}/9" for e in range(4, 10)]
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(straight.model.parameters(),
                                                                    resumed.model.parameters()))
    assert (resumed.epoch, resumed.step) == (straight.epoch, straight.step) == (9, 45)
    drop_time = lambda h: {k: v for k, v in h.items() if k != "time"}  # noqa: E731
    assert drop_time(resumed.history) == drop_time(straight.history), "history and rates: the cosine went on"
    rates = straight.history["lr"]
    assert all(a > b for a, b in zip(rates[3:], rates[4:])), "epochs 4-9 run down the cosine, not up a new one"
    resumed.fit(resumed_loader, epochs=1)
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "fit: continuing after epoch 9 (step 45): training 1 more epoch, 10; "), "the next fit says it goes on"


@pytest.mark.task("training_fit")
def test_training_fit_without_validation_keeps_no_validation_columns(tmp_path):
    """No val_loader, no val_loss / val_acc: not in the history, its CSV, the report, the curves or the line."""
    from tinyflo.tensorboard import TensorBoardLogger, read_scalars

    assert dict(History()) == {}, "a column appears when first recorded"
    trainer = quiet(tiny())
    monitor = Monitor(out_dir=tmp_path / "run", live=False)
    train, val = loaders()
    history = trainer.fit(train, epochs=2, callbacks=[monitor, TensorBoardLogger(tmp_path / "tb")])
    assert not [k for k in history if k.startswith("val_")] and len(history["train_loss"]) == 2
    assert "val_" not in (tmp_path / "run" / "history.csv").read_text().splitlines()[0]
    assert "<th title='val_" not in (tmp_path / "run" / "report.html").read_text(), "nor in the report's table"
    assert not [k for k in read_scalars(tmp_path / "tb") if k.startswith("val_")]
    assert monitor.panels()["loss"] == ["train_loss"] and "validation accuracy (%)" not in monitor.panels()
    assert "val_" not in epoch_line(2, 2, history.rows()[-1], None)
    state = trainer.state_dict()
    assert not [k for k in state["history"] if k.startswith("val_")], "nor in a checkpoint"
    trainer.fit(train, val, epochs=1)  # validation from epoch 3 on: nan where it was not measured
    assert [math.isnan(v) for v in trainer.history["val_loss"]] == [True, True, False]


# ----- misuse: one line naming the owner, the argument, what it must be and what came ----------------


def _generator():
    yield from loaders()[0]


def _monitor_in(tmp_path, **options):
    (tmp_path / "a_file").write_text("not a folder")
    return Monitor(**options)


BATCHES = "an iterable of (inputs, targets) batches, such as a DataLoader"
# (call of a trainer, a loader and tmp_path; exception; the whole message)
MISUSE = {
    "fit-None": (lambda t, L, p: t.fit(None), TypeError, f"fit: train_loader must be {BATCHES}; got None"),
    "fit-int": (lambda t, L, p: t.fit(5), TypeError, f"fit: train_loader must be {BATCHES}; got 5"),
    "fit-str": (lambda t, L, p: t.fit("digits"), TypeError, f"fit: train_loader must be {BATCHES}; got 'digits'"),
    "fit-arrays": (lambda t, L, p: t.fit(data()), TypeError,
                   f"fit: train_loader must be {BATCHES}; got a tuple of arrays (for arrays x, y pass "
                   "DataLoader(TensorDataset(x, y), batch_size=32))"),
    "fit-empty": (lambda t, L, p: t.fit([]), ValueError, "fit: train_loader must yield at least one batch; got an empty list"),
    "fit-generator": (lambda t, L, p: t.fit(_generator(), epochs=2), TypeError,
                      "fit: train_loader is an iterator (generator), used up after one epoch; for epochs=2 pass one "
                      "that can be gone through again, such as a DataLoader or a list"),
    "fit-epochs-0": (lambda t, L, p: t.fit(L, epochs=0), ValueError, "fit: epochs must be a positive integer; got 0"),
    "fit-epochs--1": (lambda t, L, p: t.fit(L, epochs=-1), ValueError, "fit: epochs must be a positive integer; got -1"),
    "fit-epochs-2.5": (lambda t, L, p: t.fit(L, epochs=2.5), ValueError,
                       "fit: epochs must be a positive integer; got 2.5"),
    "fit-epochs-str": (lambda t, L, p: t.fit(L, epochs="3"), ValueError,
                       "fit: epochs must be a positive integer; got '3'"),
    "fit-val-int": (lambda t, L, p: t.fit(L, 5), TypeError,
                    f"fit: val_loader must be {BATCHES}; got 5 (to set the number of epochs, pass epochs=5)"),
    "fit-val-dict": (lambda t, L, p: t.fit(L, {"x": 1}), TypeError, f"fit: val_loader must be {BATCHES}; got dict"),
    "fit-val-empty": (lambda t, L, p: t.fit(L, []), ValueError,
                      "fit: val_loader must yield at least one batch; got an empty list"),
    "fit-accumulation": (lambda t, L, p: t.fit(L, accumulation_steps=0), ValueError,
                         "fit: accumulation_steps must be a positive integer; got 0"),
    "fit-callbacks-one": (lambda t, L, p: t.fit(L, callbacks=EarlyStopping()), TypeError,
                          "fit: callbacks must be a list of Callback objects; got EarlyStopping "
                          "(put it in a list: callbacks=[...])"),
    "fit-callbacks-None": (lambda t, L, p: t.fit(L, callbacks=None), TypeError,
                           "fit: callbacks must be a list of Callback objects; got None"),
    "fit-callbacks-function": (lambda t, L, p: t.fit(L, callbacks=[Callback(), print]), TypeError,
                               "fit: callbacks[1] must be a Callback (with on_train_begin, on_epoch_end, "
                               "on_train_end); got builtin_function_or_method"),
    "train_epoch-None": (lambda t, L, p: t.train_epoch(None), TypeError,
                         f"train_epoch: loader must be {BATCHES}; got None"),
    "evaluate-int": (lambda t, L, p: t.evaluate(3), TypeError, f"evaluate: loader must be {BATCHES}; got 3"),
    "Trainer-model-None": (lambda t, L, p: Trainer(None, t.optimizer, cross_entropy), TypeError,
                           "Trainer: model must be a Module (callable, with parameters()); got None"),
    "Trainer-optimizer-of-another-model": (
        lambda t, L, p: Trainer(tiny(), t.optimizer, cross_entropy), ValueError,
        "Trainer: the optimizer holds none of the model's parameters, so training would change nothing (was the "
        "model built again after the optimizer?); build the optimizer from this model, e.g. "
        "SGD(model.parameters(), lr=0.1)"),
    "Trainer-resources": (lambda t, L, p: Trainer(t.model, t.optimizer, cross_entropy, resources="yes"), ValueError,
                          "Trainer: resources must be True or False; got 'yes'"),
    "Trainer-plugins-one": (lambda t, L, p: Trainer(t.model, t.optimizer, cross_entropy, plugins=training.Precision()),
                            TypeError, "Trainer: plugins must be a list of plug-in objects (Precision, Strategy, "
                            "CheckpointIO); got Precision (put it in a list: plugins=[...])"),
    "Trainer-plugins-None": (lambda t, L, p: Trainer(t.model, t.optimizer, cross_entropy, plugins=None), TypeError,
                             "Trainer: plugins must be a list of plug-in objects (Precision, Strategy, "
                             "CheckpointIO); got None"),
    "Trainer-device": (lambda t, L, p: Trainer(t.model, t.optimizer, cross_entropy, device="gpu"), ValueError,
                       "Trainer: device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got 'gpu'"),
    "Trainer.load_state_dict-None": (lambda t, L, p: t.load_state_dict(None), TypeError,
                                     "Trainer.load_state_dict: state must be a dict from Trainer.state_dict() "
                                     "(with 'step', 'epoch' and 'history'); got None"),
    "Trainer.load_state_dict-partial": (lambda t, L, p: t.load_state_dict({"step": 3}), ValueError,
                                        "Trainer.load_state_dict: state must be a dict from Trainer.state_dict() "
                                        "(with 'step', 'epoch' and 'history'); got one without epoch, history"),
    "Trainer.load_state_dict-epoch": (lambda t, L, p: t.load_state_dict({"step": 3, "epoch": -1, "history": {}}),
                                      ValueError, "Trainer.load_state_dict: epoch must be an integer >= 0; got -1"),
    "Monitor-out_dir-file": (lambda t, L, p: _monitor_in(p, out_dir=p / "a_file"), ValueError,
                             "Monitor: out_dir must be a folder (made if missing); got '{p}/a_file', but it is a file"),
    "Monitor-out_dir-under-a-file": (lambda t, L, p: _monitor_in(p, out_dir=p / "a_file" / "run"), ValueError,
                                     "Monitor: out_dir must be a folder (made if missing); got '{p}/a_file/run', "
                                     "but '{p}/a_file' is a file"),
    "Monitor-out_dir-int": (lambda t, L, p: Monitor(out_dir=3), TypeError,
                            "Monitor: out_dir must be a folder's path (a str or os.PathLike) or None; got 3"),
    "Monitor-live": (lambda t, L, p: Monitor(live="yes"), ValueError,
                     "Monitor: live must be True, False or None; got 'yes'"),
    "Monitor-dashboard": (lambda t, L, p: Monitor(dashboard=1), ValueError,
                          "Monitor: dashboard must be True or False; got 1"),
    "Monitor-port": (lambda t, L, p: Monitor(port=70000), ValueError,
                     "Monitor: port must be an integer in 0..65535 (0: any free port); got 70000"),
    "Monitor.save_png-folder": (lambda t, L, p: Monitor().save_png(p), ValueError,
                                "Monitor.save_png: path must be a file's path; got '{p}', which is a folder"),
    "Monitor.save_csv-None": (lambda t, L, p: Monitor().save_csv(None), TypeError,
                              "Monitor.save_csv: path must be a file's path (a str or os.PathLike); got None"),
    "EarlyStopping-monitor": (lambda t, L, p: EarlyStopping(monitor=None), ValueError,
                              "EarlyStopping: monitor must be the name of a history column, such as 'val_loss'; "
                              "got None"),
    "EarlyStopping-min_delta-negative": (lambda t, L, p: EarlyStopping(min_delta=-0.1), ValueError,
                                         "EarlyStopping: min_delta must be a number >= 0; got -0.1"),
    "EarlyStopping-min_delta-str": (lambda t, L, p: EarlyStopping(min_delta="0.1"), ValueError,
                                    "EarlyStopping: min_delta must be a number >= 0; got '0.1'"),
    "BestModel-monitor": (lambda t, L, p: BestModel(monitor=3), ValueError,
                          "BestModel: monitor must be the name of a history column, such as 'val_loss'; got 3"),
    "BestModel.restore-None": (lambda t, L, p: BestModel().restore(None), TypeError,
                               "BestModel.restore: model must be a Module (it has load_state_dict()); got None"),
    "CheckpointEvery-k": (lambda t, L, p: CheckpointEvery(2.0, print), ValueError,
                          "CheckpointEvery: k must be a positive integer; got 2.0"),
    "clip_grad_norm-params-None": (lambda t, L, p: clip_grad_norm(None, 1.0), TypeError,
                                   "clip_grad_norm: params must be a tensor or an iterable of tensors "
                                   "(model.parameters()); got None"),
    "clip_grad_norm-max_norm-str": (lambda t, L, p: clip_grad_norm([], "1"), ValueError,
                                    "clip_grad_norm: max_norm must be a number > 0 (inf: measure the norm only); "
                                    "got '1'"),
    "clip_grad_norm-max_norm-None": (lambda t, L, p: clip_grad_norm([], None), ValueError,
                                     "clip_grad_norm: max_norm must be a number > 0 (inf: measure the norm only); "
                                     "got None"),
    "clip_grad_norm-norm_type": (lambda t, L, p: clip_grad_norm([], 1.0, norm_type="fro"), ValueError,
                                 "clip_grad_norm: norm_type must be a number > 0 (inf: the largest absolute "
                                 "entry); got 'fro'"),
    "clip_grad_norm-error_if_nonfinite": (lambda t, L, p: clip_grad_norm([], 1.0, error_if_nonfinite="yes"),
                                          ValueError,
                                          "clip_grad_norm: error_if_nonfinite must be True or False; got 'yes'"),
    "clip_grad_value-None": (lambda t, L, p: clip_grad_value([], None), ValueError,
                             "clip_grad_value: clip_value must be a number > 0; got None"),
    "clip_grad_value-params": (lambda t, L, p: clip_grad_value(3, 1.0), TypeError,
                               "clip_grad_value: params must be a tensor or an iterable of tensors "
                               "(model.parameters()); got 3"),
    "History-column": (lambda t, L, p: History({"train_loss": 0.5}), TypeError,
                       "History: column 'train_loss' must be a list of numbers, one per epoch; got 0.5"),
    "History.record-None": (lambda t, L, p: History().record(1, None), TypeError,
                            "History.record: values must be a dict of column name -> number; got None"),
    "History.record-str": (lambda t, L, p: History().record(1, {"lr": "0.1"}), TypeError,
                           "History.record: the value of 'lr' must be a number; got '0.1'"),
    "Trend-None": (lambda t, L, p: Trend(None), TypeError,
                   "Trend: values must be an iterable of numbers (a history column); got None"),
    "Trend-str-item": (lambda t, L, p: Trend([1.0, "2"]), TypeError, "Trend: values must be numbers; item 1 is '2'"),
    "Trend.stalled-tol": (lambda t, L, p: Trend([1.0, 2.0]).stalled(1, tol=None), ValueError,
                          "Trend.stalled: tol must be a number >= 0; got None"),
    "Trend.converged-tol": (lambda t, L, p: Trend([1.0, 2.0]).converged(1, tol=-1), ValueError,
                            "Trend.converged: tol must be a number >= 0; got -1"),
}


@pytest.mark.parametrize("name", list(MISUSE))
def test_misuse_of_module_08_is_one_line_naming_the_argument_and_what_came(name, tmp_path):
    call, error, message = MISUSE[name]
    trainer = quiet(tiny())
    with pytest.raises(error) as info:
        call(trainer, loaders()[0], tmp_path)
    assert str(info.value) == message.replace("{p}", str(tmp_path)) and "\n" not in str(info.value)
    assert trainer.epoch == trainer.step == 0, "refused before any training"


def test_good_arguments_of_numpy_types_and_edges_are_accepted(tmp_path):
    trainer = quiet(tiny(), resources=np.bool_(False), plugins=(training.Precision(),))
    train, _ = loaders()
    trainer.fit(train, epochs=np.int64(1), accumulation_steps=np.int32(2), callbacks=(Callback(),))
    trainer.fit(list(train), epochs=2)  # a list is gone through again
    trainer.fit(iter(list(train)), epochs=1)  # an iterator, for one epoch
    assert trainer.epoch == 4 and clip_grad_norm(tiny().parameters(), math.inf).item() == 0.0
    assert EarlyStopping(min_delta=np.float32(0.5)).min_delta == 0.5 and Monitor(port=np.int64(0), live=None).port == 0
    assert Monitor(out_dir=tmp_path / "not" / "yet").out_dir == tmp_path / "not" / "yet"
    assert not (tmp_path / "not").exists(), "the Monitor makes its folder when it first writes, not before"
    frozen = tiny()
    for p in frozen.parameters():
        p.freeze()
    Trainer(frozen, SGD(tiny().parameters(), lr=0.1), cross_entropy)  # nothing to train: nothing to compare


def test_monitor_writes_whole_files_or_none_and_escapes_the_title(tmp_path, monkeypatch):
    monitor = Monitor()
    monitor.history.record(1, {"train_loss": 0.5})
    real_replace = training.os.replace

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(training.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        monitor.save_csv(tmp_path / "history.csv")
    assert list(tmp_path.iterdir()) == [], "no half file left beside where the CSV goes"
    monkeypatch.setattr(training.os, "replace", real_replace)
    page = monitor.save_html(tmp_path / "report.html", title="<script>alert(1)</script>").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_monitors_curves_after_one_epoch_tick_that_epoch_alone(tmp_path):
    from tinyflo import milestones

    train, _ = loaders()
    monitor = Monitor(out_dir=tmp_path, live=False)
    quiet(tiny()).fit(train, epochs=1, callbacks=[monitor])
    figure = monitor.figure()
    assert milestones.figure_problems(figure) == []  # it draws the figure, as the report saves it
    assert len(figure.axes) == len(monitor.panels()), "a panel per axes: the grid's spare places are gone"
    for ax in figure.axes:
        low, high = ax.get_xlim()
        assert [t for t in ax.get_xticks() if low <= t <= high] == [1], (ax.get_title(), ax.get_xticks())
