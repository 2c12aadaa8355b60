"""A training step captured as a CUDA graph (tinyflo.graphs): bit-identical to the eager step, and refused
in one line when it breaks a rule a replay depends on.

On a machine without a GPU these run on the strict stand-in (TINYFLO_FAKE_GPU=strict), whose graphs replay
the recorded kernels on the recorded arrays with the recorded host values, as CUDA's do; on a GPU, on CuPy.
"""

import numpy as np
import pytest

import tinyflo
from tinyflo import graphs, nn, strict_gpu
from tinyflo.nn import functional as F

pytestmark = pytest.mark.gpu
CUDA = "cuda:0"
STAND_IN = strict_gpu.active()


def _model(seed: int = 0, dropout: float = 0.0):
    tinyflo.manual_seed(seed)
    layers = [nn.Linear(8, 16), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(16, 3)]
    return nn.Sequential(*layers).to(CUDA)


def _optimizer(name: str, model):
    if name == "sgd":
        return tinyflo.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    if name == "adamw, two groups":
        first, *rest = model.parameters()
        return tinyflo.optim.AdamW([{"params": [first]}, {"params": rest, "weight_decay": 0.0}], lr=1e-2)
    return tinyflo.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)


def _batches(n: int = 6, rows: int = 4):
    rng = np.random.default_rng(1)
    return [(tinyflo.tensor(rng.standard_normal((rows, 8)).astype(np.float32)).to(CUDA),
             tinyflo.tensor(rng.integers(0, 3, rows)).to(CUDA)) for _ in range(n)]


def _step(model, opt):
    """The training step a user writes: zero_grad, forward, cross-entropy, backward, step."""

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _train(name: str, captured: bool, batches=None):
    """Losses and final parameters of six steps, the learning rate changed before each."""
    model = _model()
    opt = _optimizer(name, model)
    step = _step(model, opt)
    run = graphs.capture_step(step, optimizer=opt) if captured else step
    losses = []
    for i, (x, y) in enumerate(batches or _batches()):
        for group in opt.param_groups:
            group["lr"] = 0.05 / (i + 1)
        losses.append(run(x, y).data.get().item())
    run.grads_seen = [p.grad.data.get() for p in model.parameters()]  # after a launch: the graph's own
    return losses, [p.data.get() for p in model.parameters()], opt, run


@pytest.mark.parametrize("name", ["sgd", "adamw, two groups", "adam amsgrad"])
def test_a_captured_step_is_bit_identical_to_the_eager_one(name):
    eager_losses, eager_params, eager_opt, eager = _train(name, captured=False)
    losses, params, opt, run = _train(name, captured=True)
    assert all(np.array_equal(a, b) for a, b in zip(run.grads_seen, eager.grads_seen))
    assert run.launches == 4 and run.graph is not None  # 2 warm-up steps, then 4 launches
    assert losses == eager_losses
    for a, b in zip(params, eager_params):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    steps = [s["step"] for s in opt.state.values()]  # the host's step counts went on with the launches
    assert steps == [s["step"] for s in eager_opt.state.values()] == [6] * len(steps)


@pytest.mark.skipif(not STAND_IN, reason="breaks the capture on purpose: the stand-in shows it without a GPU")
def test_a_learning_rate_left_on_the_host_would_be_replayed_stale(monkeypatch):
    """What the device scalars are for: without them, each launch reuses the lr the capture saw."""
    eager_losses, _, _, _ = _train("sgd", captured=False)
    monkeypatch.setattr(graphs._Lent, "lend", lambda self: None)
    monkeypatch.setattr(graphs._Lent, "take_back", lambda self: None)
    losses, _, _, _ = _train("sgd", captured=True)
    assert losses[:3] == eager_losses[:3] and losses[3:] != eager_losses[3:]


def test_the_stand_ins_capture_runs_nothing_and_each_launch_replays_it():
    if not STAND_IN:
        pytest.skip("the stand-in's own graph")
    cp = strict_gpu.install()
    w, x = cp.ones(3), cp.arange(3.0)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        total = (w * x).sum()
        w -= 0.5 * x
        second = w[1]  # a 0-d view, as CuPy's
        graph = stream.end_capture()
    assert w.get().tolist() == [1, 1, 1]  # nothing ran
    graph.launch()
    assert (w.get().tolist(), total.get().item(), second.get().item()) == ([1, 0.5, 0], 3.0, 0.5)
    graph.launch()
    assert (w.get().tolist(), total.get().item(), second.get().item()) == ([1, 0, -1], 0.5, 0.0)
    assert graph.kernels() == ["multiply", "sum", "multiply", "subtract"]


def _step_and_opt(**kwargs):
    model = _model(**kwargs)
    opt = tinyflo.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, _step(model, opt)


def _capture_error(step, opt, batches, error=RuntimeError):
    run = graphs.capture_step(step, optimizer=opt)
    with pytest.raises(error) as caught:
        for x, y in batches:
            run(x, y)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_step_that_reads_back_is_refused_in_one_line():
    model, opt, step = _step_and_opt()

    def reading(x, y):
        loss = step(x, y)
        print(float(loss.data))
        return loss

    message = _capture_error(reading, opt, _batches(3))
    assert message.startswith("capture_step: the step cannot be captured as a CUDA graph: ")
    assert message.endswith(" (see the rules in tinyflo.graphs)")
    if STAND_IN:  # CUDA's own words on a GPU
        assert "operation not permitted when stream is capturing (a device-to-host read (float))" in message


def test_a_step_that_draws_random_numbers_is_refused():
    """A launch would draw the same numbers again (CUDA replays cuRAND's kernel as captured): tinyflo refuses."""
    model, opt, step = _step_and_opt(dropout=0.5)
    assert ": rand: no random draw inside a captured CUDA graph: every launch would draw the same numbers" in \
        _capture_error(step, opt, _batches(3))


def test_a_new_input_shape_after_the_capture_is_refused():
    model, opt, step = _step_and_opt()
    batches = _batches(3) + _batches(1, rows=5)
    message = _capture_error(step, opt, batches, ValueError)
    assert "shape (4, 8)" in message and "shape (5, 8)" in message and "drop_last=True" in message


def test_a_step_that_replaces_a_parameter_is_refused():
    model, opt, step = _step_and_opt()
    first = next(iter(model.parameters()))

    def replacing(x, y):
        loss = step(x, y)
        first.data = first.data * 1.0
        return loss

    assert "replaced parameter 0" in _capture_error(replacing, opt, _batches(3))


def test_a_hyper_parameter_other_than_lr_is_fixed_at_the_capture():
    model, opt, step = _step_and_opt()
    run = graphs.capture_step(step, optimizer=opt)
    batches = _batches(4)
    for x, y in batches[:3]:
        run(x, y)
    opt.param_groups[0]["momentum"] = 0.5
    with pytest.raises(RuntimeError, match=r"^capture_step: group 0's 'momentum' changed from 0.9 to 0.5 after the "
                                           r"capture, and the graph keeps what it was captured with; call reset\(\)"):
        run(*batches[3])
    first = next(iter(model.parameters()))
    opt.param_groups[0]["momentum"] = 0.9
    first.requires_grad_(False)
    with pytest.raises(RuntimeError, match="parameter 0's requires_grad changed from True to False"):
        run(*batches[3])
    first.requires_grad_(True)
    opt.state.clear()
    with pytest.raises(RuntimeError, match="the optimizer's state was replaced or cleared"):
        run(*batches[3])


def test_what_a_capture_cannot_take_is_refused_before_it_runs():
    model, opt, step = _step_and_opt()
    with pytest.raises(ValueError, match="RMSprop cannot be captured"):
        graphs.capture_step(step, optimizer=tinyflo.optim.RMSprop(model.parameters()))
    with pytest.raises(ValueError, match="flat groups"):
        graphs.capture_step(step, optimizer=tinyflo.optim.Adam(model.parameters(), flat=True))
    with pytest.raises(ValueError, match="warmup must be an int >= 1"):
        graphs.capture_step(step, optimizer=opt, warmup=0)
    run = graphs.capture_step(lambda x, y: step(x.to(CUDA), y.to(CUDA)), optimizer=opt, warmup=1)
    x, y = (t.to("cpu") for t in _batches(1)[0])
    run(x, y)  # the warm-up step is eager: any device
    with pytest.raises(ValueError, match=r"^capture_step: input 0 must be a tensor on a CUDA device \(a CUDA "
                                         r"graph replays GPU work only\); got a tensor of shape \(4, 8\) \(float32\) on cpu$"):
        run(x, y)


def _trainer(capture: bool, **kwargs):
    model = _model()
    opt = tinyflo.optim.AdamW(model.parameters(), lr=1e-2)
    schedule = tinyflo.optim.lr_scheduler.CosineAnnealing(16)
    return tinyflo.Trainer(model, opt, F.cross_entropy, scheduler=schedule, scheduler_interval="step",
                           grad_clip_norm=1.0, log_every=3, verbosity=0, capture=capture, **kwargs)


def test_the_trainer_captures_its_step_and_trains_as_it_does_eagerly():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((30, 8)).astype(np.float32)
    y = rng.integers(0, 3, 30)
    results = []
    for capture in (False, True):
        trainer = _trainer(capture)
        loader = tinyflo.DataLoader(tinyflo.TensorDataset(tinyflo.tensor(x), tinyflo.tensor(y)), batch_size=4)
        losses = [trainer.train_epoch(loader) for _ in range(2)]  # 8 steps an epoch, the last of 2 rows
        results.append((losses, [p.data.get() for p in trainer.model.parameters()], trainer.step,
                        trainer.optimizer.param_groups[0]["lr"]))
    (eager_losses, eager_params, eager_steps, eager_lr), (losses, params, steps, lr) = results
    assert losses == eager_losses and steps == eager_steps == 16 and lr == eager_lr
    assert all(np.array_equal(a, b) for a, b in zip(params, eager_params))
    assert trainer.train_step.captured.launches == 12 and trainer.train_step.eager_steps == 2


def test_the_trainer_says_what_a_capture_needs():
    with pytest.raises(ValueError, match=r"^Trainer: capture=True needs nan_check='interval'"):
        _trainer(True, nan_check="step")
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"^Trainer: capture=True needs a CUDA device \(the model is on cpu\)$"):
        tinyflo.Trainer(model, tinyflo.optim.SGD(model.parameters(), lr=0.1), F.mse_loss, capture=True)
    with pytest.raises(ValueError, match="capture must be True or False"):
        _trainer("yes")


@pytest.mark.skipif(not STAND_IN, reason="counted on the stand-in")
def test_a_launch_is_one_kernel_launch_for_the_whole_step():
    _, _, _, run = _train("adamw, two groups", captured=True, batches=_batches(3))
    x, y = _batches(1)[0]
    with strict_gpu.counting():
        run(x, y)
        counts = dict(strict_gpu.LAUNCHES)
    # the batch into the captured inputs, each group's two bias corrections for the coming step, and the graph
    assert counts == {"copyto": 2, "fill": 4, "graph": 1}, counts
    assert run.kernels > 30  # what the one launch replays


def test_milestone_6s_gpt_step_captured_is_bit_identical():
    """The GPT's step: embeddings, attention, layer norm, clipping, AdamW with two groups, a schedule."""
    from dataclasses import replace

    from benchmarks import bench_transformer as t

    config = replace(t.milestone_model()["GPTConfig"](), block_size=8, batch_size=2, n_layer=1, n_head=2, n_embd=16)
    ids = np.random.default_rng(0).integers(0, t.VOCAB, 2000)
    results = []
    for captured in (False, True):
        run = t.Trainers(None, config, ids, 64, CUDA, None)
        stepped = graphs.capture_step(run.train_on, optimizer=run.optimizer) if captured else run.train_on
        losses = []
        for it in range(5):
            index = run.batches[it]
            run.schedule.apply(run.optimizer, it)
            losses.append(stepped(run.data[index], run.data[index + 1]).data.get().item())
        results.append((losses, [p.data.get() for p in run.model.parameters()]))
    (eager_losses, eager_params), (losses, params) = results
    assert losses == eager_losses
    assert all(np.array_equal(a, b) for a, b in zip(params, eager_params))


def test_a_parameter_replaced_after_the_capture_is_refused_until_reset():
    eager_losses, eager_params, _, _ = _train("sgd", captured=False)
    model = _model()
    opt = _optimizer("sgd", model)
    run = graphs.capture_step(_step(model, opt), optimizer=opt)
    losses = []
    for i, (x, y) in enumerate(_batches()):
        for group in opt.param_groups:
            group["lr"] = 0.05 / (i + 1)
        if i == 4:
            first = next(iter(model.parameters()))
            first.data = first.data.copy()  # as a model moved to another device and back would have it
            with pytest.raises(RuntimeError, match=r"parameter 0's array was replaced \(by load_state_dict, "
                                                   r"\.to\(\) or p\.data = \.\.\.\) after the capture.* reset\(\)"):
                run(x, y)
            run.reset()
        losses.append(run(x, y).data.get().item())
        grads = [p.grad.data.get() for p in model.parameters()]  # the graph's gradients, after each launch
        assert all(np.isfinite(g).all() for g in grads)
    assert losses == eager_losses and run.launches == 4
    assert all(np.array_equal(p.data.get(), e) for p, e in zip(model.parameters(), eager_params))


def _loader(sizes, nan_at=None, seed=3):
    """Batches of the given sizes (a list: any iterable of batches is a loader); inputs of batch ``nan_at`` nan."""
    rng = np.random.default_rng(seed)
    batches = []
    for i, n in enumerate(sizes):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        if i == nan_at:
            x[0, 0] = np.nan
        batches.append((tinyflo.tensor(x), tinyflo.tensor(rng.integers(0, 3, n))))
    return batches


@pytest.mark.parametrize("sizes", [[4] * 9, [4, 4, 4, 5, 4, 4, 4, 4, 4]], ids=["replayed", "after an eager step"])
def test_the_nan_guard_sees_a_launch_as_it_sees_an_eager_step(sizes):
    messages = []
    for capture in (False, True):
        trainer = _trainer(capture)
        with pytest.raises(FloatingPointError) as caught:
            trainer.train_epoch(_loader(sizes, nan_at=6))
        messages.append((str(caught.value), trainer.step, [p.data.get() for p in trainer.model.parameters()]))
    (eager, eager_step, eager_params), (captured, step, params) = messages
    assert captured == eager and "step 6" in captured and step == eager_step  # rolled back to the same snapshot
    assert all(np.array_equal(a, b) for a, b in zip(params, eager_params))


def test_the_trainer_captures_again_when_the_model_changed():
    trainer = _trainer(True)
    trainer.train_epoch(_loader([4] * 4))
    first = next(iter(trainer.model.parameters()))
    first.data = first.data.copy()
    trainer.train_epoch(_loader([4] * 4))  # the first step finds the array replaced: captured again, no error
    assert trainer.train_step.captured.launches == 2 + 4 and trainer.step == 8


def test_trainer_log_inside_a_captured_step_is_refused():
    def logging_loss(out, y):
        loss = F.cross_entropy(out, y)
        trainer.log("my_loss", loss)
        return loss

    model = _model()
    trainer = tinyflo.Trainer(model, tinyflo.optim.SGD(model.parameters(), lr=0.1), logging_loss, verbosity=0,
                              capture=True)
    with pytest.raises(RuntimeError, match=r"^Trainer\(capture=True\): the step cannot be captured as a CUDA graph: "
                                           r"Trainer.log\(\) inside a captured step"):
        trainer.train_epoch(_loader([4] * 4))
