"""El Che: ranks of unequal speed take unequal numbers of local steps between sample-weighted averages.

The plan of a round (the graded task), the order and the clocks, the round on virtual cpu:N ranks
with one of them slowed down on purpose, the hand-computed average, accuracy against data parallel,
and the Trainer plug-in (checkpoints, clipping, mixed precision, rollback).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from distributed_support import make_batches, make_model
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyflo.core.distributed import (
    DataParallel,
    DataParallelStrategy,
    ElChe,
    LocalSGD,
    ProcessGroup,
    StepClock,
    el_che_order,
    el_che_plan,
    init_process_group,
)
from tinyflo.core.layers import Linear, Module, ReLU, Sequential
from tinyflo.core.losses import cross_entropy, mse_loss
from tinyflo.core.optim import SGD
from tinyflo.core.tensor import Tensor, as_device, manual_seed
from tinyflo.core.training import Trainer

CPU1 = as_device("cpu:1")
ACCURACY_TOLERANCE = 0.05  # El Che's test accuracy within 5 points of data parallel's (the module's prose says so)


class SlowOnRank1(Module):
    """Passes its input on; sleeps ``seconds`` first when it runs on cpu:1, and counts the calls per device."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.calls = seconds, {}

    def forward(self, x: Tensor) -> Tensor:
        self.calls[x.device] = self.calls.get(x.device, 0) + 1
        if x.device is CPU1:
            time.sleep(self.seconds)
        return x


def slowed_model(seconds: float, seed: int = 0) -> Sequential:
    manual_seed(seed)
    return Sequential(SlowOnRank1(seconds), Linear(5, 7), ReLU(), Linear(7, 3)).double()


def el_che_trainer(model, el_che, world: int = 2, **options) -> Trainer:
    options = {"verbosity": "quiet", "log_every": None, **options}
    opt = options.pop("optimizer", None) or SGD(model.parameters(), lr=0.05, momentum=0.9)
    return Trainer(model, opt, options.pop("loss_fn", mse_loss),
                   plugins=[DataParallelStrategy(init_process_group("local", world_size=world), local_sgd=el_che)],
                   **options)


def arrays(model) -> list[np.ndarray]:
    return [p.numpy().copy() for p in model.parameters()]


# ----- the plan of a round: the graded task ----------------------------------------------------
@pytest.mark.task("distributed_el_che")
@pytest.mark.parametrize(("times", "anchor", "max_steps", "plan"), [
    ([0.01, 0.03], 4, 64, [12, 4]),
    ([0.02, 0.02, 0.02], 3, 10, [3, 3, 3]),
    ([0.001, 0.1], 4, 64, [64, 4]),          # capped
    ([1.0, 0.6], 4, 64, [4, 7]),             # 6.67 rounds up
    ([1.0, 0.95], 4, 64, [4, 4]),            # 4.2 rounds down
    ([0.5], 6, 6, [6]),                      # one rank is the slowest
    ([0.3, 0.1, 0.2, 0.05], 2, 10, [2, 6, 3, 10]),
    (np.array([0.004, 0.002]), 5, 64, [5, 10]),
])
def test_distributed_el_che_plan_examples(times, anchor, max_steps, plan):
    got = el_che_plan(times, anchor, max_steps)
    assert got == plan and all(type(k) is int for k in got)


@pytest.mark.task("distributed_el_che")
@settings(max_examples=80, deadline=None)
@given(times=st.lists(st.floats(1e-4, 10.0), min_size=1, max_size=6), anchor=st.integers(1, 8),
       extra=st.integers(0, 60))
def test_distributed_el_che_plan_properties(times, anchor, extra):
    max_steps = anchor + extra
    plan = el_che_plan(times, anchor, max_steps)
    assert len(plan) == len(times) and all(anchor <= k <= max_steps for k in plan)
    assert plan[times.index(max(times))] == anchor, "the slowest rank takes the anchor"
    for (t1, k1), (t2, k2) in zip(sorted(zip(times, plan)), sorted(zip(times, plan))[1:]):
        assert k1 >= k2 or t1 == t2, "a faster rank never takes fewer steps"
    for t, k in zip(times, plan):
        assert k == max_steps or abs(k - anchor * max(times) / t) <= 0.5 + 1e-9, "the nearest whole number of steps"


@pytest.mark.parametrize(("args", "words"), [
    (([], 4, 64), "step_seconds=[]"),
    (([0.1, 0.0], 4, 64), "step_seconds[1]=0.0"),
    (([0.1, -1.0], 4, 64), "step_seconds[1]=-1.0"),
    (([0.1, math.inf], 4, 64), "step_seconds[1]=inf"),
    (([0.1, math.nan], 4, 64), "step_seconds[1]=nan"),
    (([0.1, True], 4, 64), "step_seconds[1]=True"),
    (([0.1, "1"], 4, 64), "step_seconds[1]='1'"),
    ((0.1, 4, 64), "step_seconds=0.1"),
    (("ab", 4, 64), "step_seconds='ab'"),
    ((np.ones((2, 2)), 4, 64), "one per rank"),
    (([0.1], 0, 64), "anchor=0; expected a positive integer"),
    (([0.1], 2.0, 64), "anchor=2.0"),
    (([0.1], 4, 0), "max_steps=0"),
    (([0.1], 4, 3), "max_steps=3; expected an integer >= anchor (4)"),
])
def test_el_che_plan_rejects_bad_arguments(args, words):
    with pytest.raises(ValueError, match="el_che_plan got") as err:
        el_che_plan(*args)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"anchor": 0}, "ElChe got anchor=0; expected a positive integer"),
    ({"anchor": True}, "ElChe got anchor=True"),
    ({"max_steps": -1}, "ElChe got max_steps=-1"),
    ({"anchor": 8, "max_steps": 4}, "ElChe got max_steps=4; expected an integer >= anchor (8)"),
    ({"smoothing": 1.5}, "ElChe got smoothing=1.5; expected a number in [0, 1]"),
    ({"smoothing": "high"}, "ElChe got smoothing='high'"),
])
def test_el_che_rejects_bad_settings(kwargs, words):
    with pytest.raises(ValueError) as err:
        ElChe(**kwargs)
    assert words in str(err.value)


def test_el_che_is_a_local_sgd_with_its_settings_in_its_repr():
    el_che = ElChe(anchor=3, max_steps=12, smoothing=0.25)
    assert isinstance(el_che, LocalSGD)
    assert repr(el_che) == "ElChe(anchor=3, max_steps=12, smoothing=0.25)"
    assert repr(ElChe()) == "ElChe(anchor=4, max_steps=64, smoothing=0.5)"


# ----- the order of a round and the clock -------------------------------------------------------
@pytest.mark.parametrize(("plan", "order"), [
    ([6, 2], [0, 0, 0, 1, 0, 0, 0, 1]),
    ([2, 2], [0, 1, 0, 1]),
    ([1, 3], [1, 1, 0, 1]),
    ([3], [0, 0, 0]),
])
def test_el_che_order_spreads_each_ranks_steps_over_the_round(plan, order):
    assert el_che_order(plan) == order


@settings(max_examples=50, deadline=None)
@given(plan=st.lists(st.integers(1, 20), min_size=1, max_size=5))
def test_el_che_order_gives_each_rank_its_steps_evenly(plan):
    order = el_che_order(plan)
    assert [order.count(r) for r in range(len(plan))] == plan
    for r, k in enumerate(plan):  # by any point of the round, rank r has taken about its share of the steps
        for i in range(1, len(order) + 1):
            assert abs(order[:i].count(r) - k * i / len(order)) <= len(plan)


def test_step_clock_on_the_cpu_adds_up_the_steps():
    clock = StepClock(as_device("cpu"))
    for _ in range(3):
        clock.start()
        time.sleep(0.002)
        clock.stop()
    clock.start()  # an unfinished step is replaced by the next start
    clock.start()
    clock.stop()
    seconds = clock.seconds()
    assert 0.006 <= seconds < 0.5 and clock.seconds() == 0.0, "seconds() reads and forgets"


class _FakeCuda:
    """CuPy's event API on a clock that ticks a millisecond per event: counts the waits."""

    def __init__(self) -> None:
        self.ticks, self.waits = 0, 0
        fake = self

        class Event:
            def record(self) -> None:
                fake.ticks += 1
                self.ms = float(fake.ticks)

            def synchronize(self) -> None:
                fake.waits += 1

        self.Event = Event

    def get_elapsed_time(self, start, end) -> float:
        return end.ms - start.ms


class _FakeGpu:
    type, index = "cuda", 0

    def __init__(self) -> None:
        self.xp = type("xp", (), {})()
        self.xp.cuda = _FakeCuda()
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc) -> None:
        pass


def test_step_clock_on_a_gpu_uses_events_and_waits_once_per_read():
    gpu = _FakeGpu()
    clock = StepClock(gpu)
    for _ in range(5):
        clock.start()
        clock.stop()
    assert gpu.xp.cuda.waits == 0, "no wait while the steps are queued"
    assert gpu.entered == 10, "every event is recorded on the rank's own device"
    assert clock.seconds() == pytest.approx(5 * 0.001) and gpu.xp.cuda.waits == 1, "one wait, for the last event"


# ----- a round on two virtual ranks ----------------------------------------------------------
def test_el_che_fast_rank_takes_more_steps_per_round():
    # a tiny model's step takes well under a millisecond; 25 ms of sleep makes rank 1 far slower, so even
    # on a loaded machine rank 0 must get at least twice its steps (the plan itself says about 16 to 2)
    model = slowed_model(0.025)
    el_che = ElChe(anchor=2, max_steps=16)
    trainer = el_che_trainer(model, el_che)
    layers = [replica[0] for replica in trainer.strategy.parallel.replicas]  # each counts its replica's forwards

    def calls() -> list[int]:
        return [sum(layer.calls.values()) for layer in layers]

    plans, done, last = [list(el_che.plan)], [], calls()
    rng = np.random.default_rng(0)
    for _ in range(60):
        trainer.train_epoch([(rng.standard_normal((8, 5)), rng.standard_normal((8, 3)))])
        if el_che.rounds == len(plans):  # a round ended: what each rank did, and the next round's plan
            now = calls()
            done.append([a - b for a, b in zip(now, last)])
            plans.append(list(el_che.plan))
            last = now
        if el_che.rounds == 4:
            break
    assert el_che.rounds == 4, f"4 rounds should fit into 60 batches; plans {plans}"
    assert done == plans[:4], "each rank took exactly its planned steps in every round"
    assert plans[0] == [2, 2], "the first round, with nothing measured, gives every rank the anchor"
    assert all(p[1] == 2 for p in plans), "the slow rank always takes the anchor"
    assert all(p[0] >= 2 * p[1] for p in plans[1:]), f"the fast rank must take at least twice the steps: {plans}"
    assert el_che.step_seconds[1] > 2 * el_che.step_seconds[0] and el_che.step_seconds[1] >= 0.02
    assert list(layers[0].calls) == [as_device("cpu")] and list(layers[1].calls) == [CPU1], "each replica on its rank"


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_el_che_round_average_is_the_sample_weighted_mean_of_each_replicas_own_steps(momentum):
    manual_seed(0)
    model = make_model()
    el_che = ElChe(anchor=2, max_steps=16)
    dp = DataParallel(model, init_process_group("local", world_size=2), SGD(model.parameters(), lr=0.1,
                      momentum=momentum), local_sgd=el_che)
    mirrors = [make_model(), make_model()]  # each replica's steps done by hand, with its own optimizer
    opts = [SGD(m.parameters(), lr=0.1, momentum=momentum) for m in mirrors]

    def by_hand(order, batches):
        seen = [0, 0]
        for r, (x, y) in zip(order, batches):
            opts[r].zero_grad()
            mse_loss(mirrors[r](x), y).backward()
            opts[r].step()
            seen[r] += x.shape[0]
        mean = [(seen[0] * a.numpy() + seen[1] * b.numpy()) / sum(seen)
                for a, b in zip(mirrors[0].parameters(), mirrors[1].parameters())]
        for m in mirrors:
            for p, value in zip(m.parameters(), mean):
                p.data[...] = value
        return mean

    def train_round(batches, rounds):
        """One round through El Che; then every replica holds the hand-computed average."""
        want = by_hand(el_che.order, batches)
        for x, y in batches:
            dp.train_step(x, y, mse_loss)
        assert el_che.rounds == rounds
        for replica in dp.replicas:
            for got, expected in zip(replica.parameters(), want):
                np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)

    # the clocks read fixed times: 2 steps in 4 ms on rank 0, in 12 ms on rank 1 -> round 2's plan is [6, 2]
    el_che.clocks[0].seconds, el_che.clocks[1].seconds = (lambda: 0.004), (lambda: 0.012)
    # round 1: nothing measured, plan [2, 2]; batches of 5, 3, 7, 2 samples: weights 12/17 and 5/17
    first = make_batches((5, 3, 7, 2), seed=1)
    assert el_che.plan == [2, 2] and el_che.order == [0, 1, 0, 1]
    train_round(first, rounds=1)
    # round 2: rank 0 takes 6 steps, rank 1 2, each replica on from the average with its own momentum
    assert el_che.step_seconds == [0.002, 0.006]
    assert el_che.plan == [6, 2] and el_che.order == [0, 0, 0, 1, 0, 0, 0, 1]
    second = make_batches((4, 6, 3, 5, 2, 6, 4, 3), seed=2)
    train_round(second, rounds=2)


def test_el_che_smooths_the_measured_times():
    model = make_model()
    el_che = ElChe(anchor=1, max_steps=8, smoothing=0.75)
    dp = DataParallel(model, init_process_group("local", world_size=2), SGD(model.parameters(), lr=0.1),
                      local_sgd=el_che)
    times = iter([0.004, 0.004, 0.002, 0.008])  # per round: rank 0's total, then rank 1's
    for clock in el_che.clocks:
        clock.seconds = lambda: next(times)
    x, y = make_batches((4,))[0]
    for _ in range(2):
        dp.train_step(x, y, mse_loss)
    assert el_che.step_seconds == [0.004, 0.004] and el_che.plan == [1, 1], "the first round's times as they are"
    for _ in range(2):
        dp.train_step(x, y, mse_loss)
    assert el_che.step_seconds == pytest.approx([0.0035, 0.005]), "0.75 of the old time, 0.25 of the new"
    assert el_che.plan == [1, 1]  # 0.005 / 0.0035 = 1.43 rounds to 1


def _blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [1.8, -1.0], [-1.8, -1.0]])
    y = rng.integers(0, 3, n)
    return centres[y] + rng.standard_normal((n, 2)) * 1.0, y


def test_el_che_accuracy_is_close_to_data_parallel():
    x_train, y_train = _blobs(600, seed=0)
    x_test, y_test = _blobs(600, seed=1)
    accuracy = {}
    for name, el_che in (("data parallel", None), ("el che", ElChe(anchor=2, max_steps=8))):
        manual_seed(0)
        model = Sequential(SlowOnRank1(0.002), Linear(2, 16), ReLU(), Linear(16, 3)).double()
        trainer = Trainer(model, SGD(model.parameters(), lr=0.1, momentum=0.9), cross_entropy, verbosity="quiet",
                          log_every=None, plugins=[DataParallelStrategy(init_process_group("local", world_size=2),
                                                                        local_sgd=el_che)])
        order = np.random.default_rng(2)
        for _ in range(4):
            perm = order.permutation(600)
            trainer.train_epoch([(x_train[perm[i:i + 30]], y_train[perm[i:i + 30]]) for i in range(0, 600, 30)])
        if el_che is not None:
            assert el_che.rounds >= 3 and el_che.plan[0] > el_che.plan[1]
            trainer.strategy.parallel.average()  # the last round is cut short: the replicas' mean so far
        logits = trainer.model(Tensor(x_test)).numpy()
        accuracy[name] = float((logits.argmax(axis=1) == y_test).mean())
    assert accuracy["data parallel"] > 0.8, accuracy
    assert abs(accuracy["el che"] - accuracy["data parallel"]) <= ACCURACY_TOLERANCE, accuracy


# ----- the Trainer plug-in ----------------------------------------------------------------------
def test_el_che_through_the_trainer_steps_one_rank_at_a_time():
    model = make_model()
    el_che = ElChe(anchor=2, max_steps=4)
    trainer = el_che_trainer(model, el_che, world=3)
    strategy = trainer.strategy
    stepped = []
    original = strategy.after_step

    def after_step():
        stepped.append((len(strategy.optimizers), strategy.parallel.stepping[0],
                        strategy.optimizers[0] is strategy.parallel.optimizers[strategy.parallel.stepping[0]],
                        strategy.param_lists[0][0] is strategy.all_params[strategy.parallel.stepping[0]][0]))
        original()

    strategy.after_step = after_step
    losses = [trainer.train_epoch(make_batches((6, 6, 6, 5))) for _ in range(3)]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert trainer.step == 12 and trainer.epoch == 3 and len(trainer.history["train_loss"]) == 3
    assert all(n == 1 and same_opt and same_params for n, _, same_opt, same_params in stepped), (
        "the Trainer schedules, clips and steps only the rank whose turn it is")
    assert [r for _, r, _, _ in stepped[:6]] == [0, 1, 2, 0, 1, 2], "round 1: the anchor for every rank, in turn"
    assert el_che.rounds >= 1
    loss, _ = trainer.evaluate(make_batches((6, 6)))
    assert math.isfinite(loss)


def test_el_che_trainer_clips_the_stepping_ranks_gradients():
    model = make_model()
    el_che = ElChe(anchor=50, max_steps=50)  # no average within this test
    trainer = el_che_trainer(model, el_che, optimizer=SGD(model.parameters(), lr=1.0), grad_clip_norm=1e-3)
    before = [arrays(r) for r in trainer.strategy.parallel.replicas]
    trainer.train_epoch(make_batches((8,)))  # rank 0's turn
    after = [arrays(r) for r in trainer.strategy.parallel.replicas]
    moved = math.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(after[0], before[0])))
    assert moved == pytest.approx(1e-3, rel=1e-5), "one SGD step of lr 1 on gradients clipped to norm 1e-3"
    assert all(np.array_equal(a, b) for a, b in zip(after[1], before[1])), "rank 1 did not step"
    trainer.train_epoch(make_batches((8,), seed=3))  # rank 1's turn
    moved = math.sqrt(sum(float(((a.numpy() - b) ** 2).sum())
                          for a, b in zip(trainer.strategy.parallel.replicas[1].parameters(), before[1])))
    assert moved == pytest.approx(1e-3, rel=1e-5)


def test_el_che_trainer_checkpoint_round_trip(tmp_path):
    trainer = el_che_trainer(make_model(), ElChe(anchor=3, max_steps=6))
    for _ in range(2):
        trainer.train_epoch(make_batches((6, 6, 6, 5, 4)))
    path = trainer.save_checkpoint(tmp_path / "el_che.safetensors")
    saved, saved_opt = arrays(trainer.model), trainer.optimizer.state_dict()

    resumed = el_che_trainer(make_model(seed=5), ElChe(anchor=3, max_steps=6))
    resumed.load_checkpoint(path)
    assert resumed.step == trainer.step == 10 and resumed.epoch == 2
    for replica in resumed.strategy.parallel.replicas:  # every replica is the saved replica 0
        assert all(np.array_equal(a.numpy(), b) for a, b in zip(replica.parameters(), saved))
    for opt in resumed.strategy.parallel.optimizers:  # and every optimizer has its saved momentum
        for key, state in opt.state_dict()["state"].items():
            np.testing.assert_array_equal(state["momentum_buffer"], saved_opt["state"][key]["momentum_buffer"])
    assert not resumed.strategy.parallel._seen.any(), "nothing seen since the replicas became one"
    loss = resumed.train_epoch(make_batches((6, 6, 6)))
    assert math.isfinite(loss) and resumed.step == 13


def test_el_che_trainer_with_float16_mixed_precision():
    pytest.importorskip("tinyflo.core.amp")
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32))
               for n in (16, 16, 16, 7)]
    el_che = ElChe(anchor=2, max_steps=4)
    trainer = el_che_trainer(make_model().float(), el_che, amp="float16", grad_clip_norm=1.0,
                             optimizer=None)
    losses = [trainer.train_epoch(batches) for _ in range(3)]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert trainer.scaler.get_scale() > 1 and el_che.rounds >= 2
    for replica in trainer.strategy.parallel.replicas:
        assert all(p.dtype == np.float32 and np.isfinite(p.numpy()).all() for p in replica.parameters())


def test_el_che_trainer_rolls_every_replica_back_after_a_bad_step():
    trainer = el_che_trainer(make_model(), ElChe(anchor=2, max_steps=4), nan_check="interval")
    trainer.train_epoch(make_batches((6, 6, 6)))  # mid-round: the replicas differ
    good = [arrays(r) for r in trainer.strategy.parallel.replicas]
    assert not all(np.array_equal(a, b) for a, b in zip(*good)), "mid-round, the replicas have drifted apart"
    bad = make_batches((6, 6, 6), seed=4)
    bad[1][0].data[0, 0] = np.nan
    with pytest.raises(FloatingPointError, match="rolled back"):
        trainer.train_epoch(bad)
    for replica, copies in zip(trainer.strategy.parallel.replicas, good):
        assert all(np.array_equal(a.numpy(), b) for a, b in zip(replica.parameters(), copies))
    assert trainer.step == 3


# ----- where El Che cannot run ----------------------------------------------------------------
class _OneRankPerProcess(ProcessGroup):
    """What an mpi/nccl group looks like to DataParallel: this process drives one rank of two."""

    backend = "mpi"

    def __init__(self) -> None:
        super().__init__(0, 2, [0], [as_device("cpu")])


def test_el_che_refuses_groups_with_one_rank_per_process():
    model = make_model()
    with pytest.raises(ValueError, match=r"El Che needs the local backend.*'mpi'.*LocalSGD\(period=k\)"):
        DataParallel(model, _OneRankPerProcess(), SGD(model.parameters(), lr=0.1), local_sgd=ElChe())
    with pytest.raises(ValueError, match="El Che needs the local backend"):
        Trainer(model, SGD(model.parameters(), lr=0.1), mse_loss, verbosity="quiet",
                plugins=[DataParallelStrategy(_OneRankPerProcess(), local_sgd=ElChe())])


def test_el_che_serves_one_data_parallel():
    el_che = ElChe()
    model = make_model()
    DataParallel(model, init_process_group("local", world_size=2), SGD(model.parameters(), lr=0.1), local_sgd=el_che)
    other = make_model()
    with pytest.raises(ValueError, match="give each its own ElChe"):
        DataParallel(other, init_process_group("local", world_size=2), SGD(other.parameters(), lr=0.1),
                     local_sgd=el_che)


@pytest.mark.gpu
def test_el_che_on_the_gpu_times_with_events():
    model = slowed_model(0.0).float()
    el_che = ElChe(anchor=2, max_steps=8)
    trainer = Trainer(model, SGD(model.parameters(), lr=0.05), mse_loss, verbosity="quiet",
                      plugins=[DataParallelStrategy(init_process_group("local", world_size=2,
                                                                       devices=["cuda:0", "cuda:0"]),
                                                    local_sgd=el_che)])
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32))
               for _ in range(12)]
    losses = [trainer.train_epoch(batches) for _ in range(2)]
    assert all(math.isfinite(v) for v in losses) and el_che.rounds >= 2
    assert all(t > 0 for t in el_che.step_seconds)
