"""Process groups, the ring all-reduce, DataParallel and LocalSGD on the `local` backend.

The MPI runs (real processes through mpiexec) are in test_distributed_mpi.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from distributed_support import (
    OPTIMIZERS,
    make_batches,
    make_model,
    train_single_process,
    train_with_trainer,
)
from gradcheck_support import functions_defined_in
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyflo.core import distributed as dist
from tinyflo.core.distributed import (
    DataParallel,
    DataParallelStrategy,
    LocalSGD,
    ProcessGroup,
    all_reduce_gradients,
    average_parameters,
    init_process_group,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    shard_bounds,
)
from tinyflo.core.losses import mse_loss
from tinyflo.core.optim import SGD, Adam
from tinyflo.core.tensor import DeviceError, ShapeError, Tensor, as_device

TOLERANCE = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}


def _devices(n: int) -> list:
    return [as_device(f"cpu:{r}") for r in range(n)]


# ----- the ring all-reduce ------------------------------------------------------------------
def _chunks(size: int, n: int) -> list[slice]:
    return [slice(size * c // n, size * (c + 1) // n) for c in range(n)]


@pytest.mark.task("distributed_reduce_scatter")
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), size=st.integers(0, 23), seed=st.integers(0, 2**16))
def test_distributed_reduce_scatter_leaves_rank_r_the_sum_of_chunk_r_plus_1(n, size, seed):
    rng = np.random.default_rng(seed)
    buffers = [rng.uniform(-1, 1, size) for _ in range(n)]
    want = np.sum(buffers, axis=0)
    sent = ring_reduce_scatter(buffers, _devices(n))
    chunks = _chunks(size, n)
    for r, b in enumerate(buffers):
        finished = chunks[(r + 1) % n]
        np.testing.assert_allclose(b[finished], want[finished], rtol=1e-12, atol=1e-12)
        assert sent[r] == (size - len(want[finished])) * 8, "every chunk but the one this rank finishes"


@pytest.mark.task("distributed_ring_all_reduce")
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), size=st.integers(0, 23))
def test_distributed_ring_all_reduce_all_gather_spreads_the_finished_chunks(n, size):
    finished = np.arange(size, dtype=np.float64)
    chunks = _chunks(size, n)
    buffers = [np.full(size, -1.0) for _ in range(n)]
    for r, b in enumerate(buffers):
        b[chunks[(r + 1) % n]] = finished[chunks[(r + 1) % n]]  # what the reduce-scatter leaves
    sent = ring_all_gather(buffers, _devices(n))
    assert all(np.array_equal(b, finished) for b in buffers)
    assert sum(sent) == (n - 1) * finished.nbytes


@pytest.mark.task("distributed_ring_all_reduce")
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), size=st.integers(0, 23), dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_distributed_ring_all_reduce_sums_like_numpy(n, size, dtype, seed):
    rng = np.random.default_rng(seed)
    buffers = [rng.uniform(-1, 1, size).astype(dtype) for _ in range(n)]
    want = np.sum([b.astype(np.float64) for b in buffers], axis=0)
    sent = ring_all_reduce(buffers, _devices(n))
    for b in buffers:
        assert b.dtype == dtype and b.shape == (size,)
        np.testing.assert_allclose(b.astype(np.float64), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype] * n)
        assert np.array_equal(b, buffers[0]), "after the all-gather every rank holds the same bytes"
    assert sum(sent) == 2 * (n - 1) * buffers[0].nbytes
    assert all(s <= 2 * buffers[0].nbytes for s in sent)


@pytest.mark.task("distributed_ring_all_reduce")
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_distributed_ring_all_reduce_bytes_counter_is_2_n_minus_1_over_n(n):
    group = init_process_group("local", world_size=n)
    arrays = [np.full(n * 1000, float(r), np.float32) for r in range(n)]
    group.all_reduce(arrays)
    assert all(np.array_equal(a, np.full(n * 1000, n * (n - 1) / 2, np.float32)) for a in arrays)
    nbytes = arrays[0].nbytes
    assert group.bytes_sent == [2 * (n - 1) * nbytes // n] * n


@pytest.mark.task("distributed_ring_all_reduce")
def test_distributed_ring_all_reduce_is_deterministic():
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(101).astype(np.float32) for _ in range(5)]
    first, second = [d.copy() for d in data], [d.copy() for d in data]
    ring_all_reduce(first, _devices(5))
    ring_all_reduce(second, _devices(5))
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


# ----- the group's collectives ------------------------------------------------------------------
def test_all_reduce_avg_tensors_and_non_contiguous_arrays():
    group = init_process_group("local", world_size=3)
    tensors = [Tensor(np.full((2, 3), float(r), np.float32), device=d) for r, d in enumerate(group.devices)]
    group.all_reduce(tensors, op="avg")
    assert all(t.dtype == np.float32 and np.array_equal(t.numpy(), np.ones((2, 3))) for t in tensors)
    bases = [np.arange(12.0).reshape(3, 4) * (r + 1) for r in range(3)]
    views = [b[:, ::2] for b in bases]
    group.all_reduce(views)
    assert all(np.array_equal(b[:, ::2], np.arange(12.0).reshape(3, 4)[:, ::2] * 6) for b in bases)
    assert all(np.array_equal(b[:, 1::2], np.arange(12.0).reshape(3, 4)[:, 1::2] * (r + 1)) for r, b in enumerate(bases))


def test_all_reduce_sums_integers_and_zero_d_arrays():
    group = init_process_group("local", world_size=4)
    ints = [np.array([r, 10 * r], np.int64) for r in range(4)]
    group.all_reduce(ints)
    assert all(np.array_equal(a, [6, 60]) and a.dtype == np.int64 for a in ints)
    scalars = [np.array(float(r)) for r in range(4)]
    group.all_reduce(scalars, op="avg")
    assert all(s == 1.5 for s in scalars)


def test_broadcast_copies_root_to_every_rank():
    group = init_process_group("local", world_size=3)
    arrays = [np.full(5, float(r)) for r in range(3)]
    group.broadcast(arrays, root=2)
    assert all(np.array_equal(a, np.full(5, 2.0)) for a in arrays)
    assert group.bytes_sent == [0, 0, 2 * 40]
    group.barrier()


def test_one_rank_groups_accept_a_single_array():
    group = init_process_group("local", world_size=1)
    a = np.ones(3)
    group.all_reduce(a, op="avg")
    group.broadcast(a)
    assert np.array_equal(a, np.ones(3)) and group.local_ranks == [0] and group.is_main


def test_group_attributes():
    group = init_process_group("local", world_size=2)
    assert (group.rank, group.world_size, group.backend, group.local_ranks) == (0, 2, "local", [0, 1])
    assert group.devices == [as_device("cpu"), as_device("cpu:1")]
    assert "local" in repr(group)
    assert init_process_group("local", world_size=2, devices=["cpu:3", "cpu:5"]).devices == _devices(6)[3::2]


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda g: g.all_reduce([np.ones(2)] * 2, op="max"), ValueError, "op must be 'sum' or 'avg'"),
        (lambda g: g.all_reduce([np.ones(2)] * 3), ValueError, "one array per local rank"),
        (lambda g: g.all_reduce(np.ones(2)), ValueError, "pass a list of 2 arrays"),
        (lambda g: g.all_reduce([np.ones(2), np.ones(3)]), ShapeError, "same shape"),
        (lambda g: g.all_reduce([np.ones(2), np.ones(2, np.float32)]), TypeError, "same dtype"),
        (lambda g: g.all_reduce([np.ones(2, int), np.ones(2, int)], op="avg"), TypeError, "floating"),
        (lambda g: g.all_reduce([[1.0], [2.0]]), TypeError, "NumPy/CuPy array or a Tensor"),
        (lambda g: g.all_reduce([Tensor(np.ones(2)), Tensor(np.ones(2))]), DeviceError, "rank 1 is on cpu"),
        (lambda g: g.broadcast([np.ones(2)] * 2, root=2), ValueError, "root must be a rank in 0..1"),
    ],
)
def test_collectives_reject_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call(init_process_group("local", world_size=2))


def test_init_process_group_errors(monkeypatch):
    for name in ("TINYFLO_BACKEND", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="tinyflo launch"):
        init_process_group()
    with pytest.raises(ValueError, match="needs world_size"):
        init_process_group("local")
    with pytest.raises(ValueError, match="positive int"):
        init_process_group("local", world_size=0)
    with pytest.raises(ValueError, match="one device per rank"):
        init_process_group("local", world_size=2, devices=["cpu"])
    with pytest.raises(ValueError, match="'local', 'mpi' or 'nccl'"):
        init_process_group("gloo")
    with pytest.raises(ValueError, match="give device="):
        init_process_group("mpi", devices=["cpu"])
    with pytest.raises(ValueError, match="leave out rank=1"):
        init_process_group("local", world_size=2, rank=1)
    with pytest.raises(ValueError, match="positive int; got True"):
        init_process_group("local", world_size=True)
    monkeypatch.setenv("TINYFLO_BACKEND", "gloo")
    with pytest.raises(ValueError, match="got 'gloo' \\(from the environment variable TINYFLO_BACKEND\\)"):
        init_process_group()


@pytest.mark.skipif(not dist.cuda_is_available(), reason="reads the launcher's variables after finding CuPy")
def test_nccl_names_the_missing_variable(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(RuntimeError, match="RANK is not set.*pass rank="):
        init_process_group("nccl")


def test_init_process_group_reads_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("TINYFLO_BACKEND", "local")
    assert init_process_group(world_size=2).backend == "local"
    monkeypatch.delenv("TINYFLO_BACKEND")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "MPIGroup", lambda device: ("mpi", device))
    assert init_process_group() == ("mpi", None)


@pytest.mark.skipif(dist.cuda_is_available(), reason="checks the message given without a GPU")
def test_nccl_without_a_gpu_says_what_it_needs(monkeypatch):
    monkeypatch.setenv("TINYFLO_BACKEND", "nccl")
    with pytest.raises(RuntimeError, match="needs CuPy and a GPU"):
        init_process_group()


def test_no_differentiable_functions_to_gradcheck():
    # The meta-test of the other modules' gradcheck tables: this module adds no Function.
    assert functions_defined_in(dist) == set()


# ----- shards and the flat gradient all-reduce -----------------------------------------------
@pytest.mark.task("distributed_shard_bounds")
@given(n=st.integers(0, 50), world=st.integers(1, 8))
def test_distributed_shard_bounds_cover_the_batch_in_rank_order(n, world):
    bounds = shard_bounds(n, world)
    sizes = [b - a for a, b in bounds]
    assert len(bounds) == world and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(world - 1))
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.task("distributed_data_parallel")
def test_distributed_data_parallel_all_reduce_gradients_one_flat_buffer():
    group = init_process_group("local", world_size=3)
    lists = []
    for r, d in enumerate(group.devices):
        a = Tensor(np.zeros((2, 2), np.float32), device=d, requires_grad=True)
        b = Tensor(np.zeros(3, np.float32), device=d, requires_grad=True)
        frozen = Tensor(np.zeros(4, np.float32), device=d)
        if r != 2:  # rank 2 saw no samples: no gradients
            a.grad = Tensor(np.full((2, 2), r + 1.0, np.float32), device=d)
            b.grad = Tensor(np.full(3, -(r + 1.0), np.float32), device=d)
        lists.append([a, frozen, b])
    all_reduce_gradients(group, lists)
    for a, frozen, b in lists:
        assert a.grad.device is a.device and a.grad.dtype == np.float32
        assert np.array_equal(a.grad.numpy(), np.full((2, 2), 3.0)) and np.array_equal(b.grad.numpy(), np.full(3, -3.0))
        assert frozen.grad is None
    assert sum(group.bytes_sent) == 2 * 2 * 7 * 4, "one all-reduce of one buffer of 7 float32 numbers"


@pytest.mark.task("distributed_local_sgd")
def test_distributed_local_sgd_average_parameters_in_place_weighted():
    group = init_process_group("local", world_size=3)
    lists = [[Tensor(np.full(4, float(r)), device=d), Tensor(np.full((1, 2), 3.0 * r), device=d)]
             for r, d in enumerate(group.devices)]
    held = [[t.data for t in ts] for ts in lists]
    average_parameters(group, lists, [0.5, 0.25, 0.25])
    for ts, arrays in zip(lists, held):
        assert all(t.data is a for t, a in zip(ts, arrays))
        assert np.allclose(ts[0].numpy(), 0.75) and np.allclose(ts[1].numpy(), 2.25)
    assert all(np.array_equal(ts[0].numpy(), lists[0][0].numpy()) for ts in lists)


# ----- data parallel training equals one process on the full batch -----------------------------
def _assert_replicas_identical(dp: DataParallel) -> None:
    for replica in dp.replicas[1:]:
        for a, b in zip(dp.module.parameters(), replica.parameters()):
            assert np.array_equal(a.numpy(), b.numpy()), "replicas must stay bit-identical"


@pytest.mark.task("distributed_data_parallel")
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_distributed_data_parallel_equals_full_batch_training(world, optimizer):
    batches = make_batches()
    want = train_single_process(OPTIMIZERS[optimizer], batches)
    model = make_model()
    group = init_process_group("local", world_size=world)
    dp = DataParallel(model, group, OPTIMIZERS[optimizer](model.parameters()))
    for _ in range(2):
        for x, y in batches:
            assert dp.train_step(x, y, mse_loss).device is group.devices[0]
    for got, expected in zip(dp.module.parameters(), want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
    _assert_replicas_identical(dp)
    assert [p.device for p in dp.replicas[-1].parameters()] == [group.devices[-1]] * 4


@pytest.mark.task("distributed_data_parallel")
@pytest.mark.parametrize("local_sgd", [None, LocalSGD(period=1)], ids=["data-parallel", "local-sgd-1"])
def test_distributed_data_parallel_with_flat_optimizers(local_sgd):
    # flat=True: the optimizer's parameters are views of one buffer, which the replicas' clones must keep
    want = train_single_process(lambda params: SGD(params, lr=0.1), make_batches())
    model = make_model()
    optimizer = SGD(model.parameters(), lr=0.1, flat=True)
    dp = DataParallel(model, init_process_group("local", world_size=3), optimizer, local_sgd=local_sgd)
    for _ in range(2):
        for x, y in make_batches():
            dp.train_step(x, y, mse_loss)
    assert all(opt._flat for opt in dp.optimizers), "the clones must be flat too"
    for opt, replica in zip(dp.optimizers, dp.replicas):
        assert all(p.data.base is opt._flat[0].params for p in replica.parameters()), "stepped in the flat buffer"
    for got, expected in zip(dp.module.parameters(), want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
    _assert_replicas_identical(dp)


@pytest.mark.task("distributed_data_parallel")
def test_distributed_data_parallel_loss_is_the_full_batch_mean():
    (x, y), = make_batches(sizes=(10,))
    model = make_model()
    want = mse_loss(model(x), y).item()
    dp = DataParallel(model, init_process_group("local", world_size=4))
    assert abs(dp.step_loss(x, y, mse_loss).item() - want) < 1e-14


@pytest.mark.task("distributed_data_parallel")
def test_distributed_data_parallel_broadcasts_rank_0_weights():
    model = make_model()
    dp = DataParallel(model, init_process_group("local", world_size=3))
    assert dp.replicas[0] is model
    for replica in dp.replicas[1:]:
        assert all(p is not q for p, q in zip(model.parameters(), replica.parameters()))
    _assert_replicas_identical(dp)


@pytest.mark.task("distributed_data_parallel")
def test_distributed_data_parallel_batch_smaller_than_the_world():
    batches = make_batches(sizes=(3, 2))
    want = train_single_process(OPTIMIZERS["sgd-momentum"], batches, epochs=1)
    model = make_model()
    dp = DataParallel(model, init_process_group("local", world_size=4), OPTIMIZERS["sgd-momentum"](model.parameters()))
    for x, y in batches:
        dp.train_step(x, y, mse_loss)
    for got, expected in zip(dp.module.parameters(), want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
    _assert_replicas_identical(dp)


def test_data_parallel_rejects_bad_arguments():
    model = make_model()
    with pytest.raises(TypeError, match="must be a ProcessGroup"):
        DataParallel(model, "local")
    with pytest.raises(TypeError, match="LocalSGD"):
        DataParallel(model, init_process_group("local", world_size=2), local_sgd=4)
    with pytest.raises(ValueError, match="positive int"):
        LocalSGD(period=0)
    dp = DataParallel(model, init_process_group("local", world_size=2))
    with pytest.raises(ShapeError, match="non-zero number of samples"):
        dp.shard(Tensor(np.zeros((0, 5))), Tensor(np.zeros((0, 3))))
    with pytest.raises(ValueError, match="needs an optimizer"):
        dp.train_step(*make_batches(sizes=(4,))[0], mse_loss)
    other = make_model()
    with pytest.raises(ValueError, match="not the model's"):
        DataParallel(make_model(), init_process_group("local", world_size=2), SGD(other.parameters(), lr=0.1))


def test_data_parallel_clones_the_optimizer_settings_and_state():
    model = make_model()
    opt = Adam([{"params": list(model.parameters())[:2], "lr": 0.01},
                {"params": list(model.parameters())[2:], "lr": 0.02, "weight_decay": 0.1}], betas=(0.8, 0.9))
    dp = DataParallel(model, init_process_group("local", world_size=2), opt)
    clone = dp.optimizers[1]
    assert type(clone) is Adam and clone is not opt
    assert [g["lr"] for g in clone.param_groups] == [0.01, 0.02] and clone.param_groups[1]["weight_decay"] == 0.1
    assert clone.param_groups[0]["betas"] == (0.8, 0.9)
    assert all(p.device is as_device("cpu:1") for g in clone.param_groups for p in g["params"])
    dp.set_lr(0.5)
    assert all(g["lr"] == 0.5 for o in dp.optimizers for g in o.param_groups)


# ----- local SGD --------------------------------------------------------------------------------
@pytest.mark.task("distributed_local_sgd")
@pytest.mark.parametrize("world", [2, 4])
def test_distributed_local_sgd_period_1_equals_data_parallel(world):
    batches = make_batches()
    runs = []
    for local_sgd in (None, LocalSGD(period=1)):
        model = make_model()
        dp = DataParallel(model, init_process_group("local", world_size=world), SGD(model.parameters(), lr=0.1),
                          local_sgd=local_sgd)
        for _ in range(2):
            for x, y in batches:
                dp.train_step(x, y, mse_loss)
        _assert_replicas_identical(dp)
        runs.append([p.numpy() for p in dp.module.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.task("distributed_local_sgd")
def test_distributed_local_sgd_period_3_drifts_between_averages():
    batches = make_batches(sizes=(12,) * 6)
    model = make_model()
    plain = DataParallel(m := make_model(), init_process_group("local", world_size=3), SGD(m.parameters(), lr=0.1))
    dp = DataParallel(model, init_process_group("local", world_size=3), SGD(model.parameters(), lr=0.1),
                      local_sgd=LocalSGD(period=3))
    for step, (x, y) in enumerate(batches, start=1):
        dp.train_step(x, y, mse_loss)
        plain.train_step(x, y, mse_loss)
        same = all(np.array_equal(a.numpy(), b.numpy())
                   for r in dp.replicas[1:] for a, b in zip(dp.module.parameters(), r.parameters()))
        assert same == (step % 3 == 0), f"step {step}: replicas equal only right after an average"
    gap = max(np.abs(a.numpy() - b.numpy()).max() for a, b in zip(dp.module.parameters(), plain.module.parameters()))
    assert gap > 1e-6, "k > 1 is not data parallel"


def test_local_sgd_weights_replicas_by_samples_seen():
    # One sample: only rank 0 learns anything, so the average must be rank 0's model, not a quarter of its step.
    (x, y), = make_batches(sizes=(1,))
    want = train_single_process(lambda p: SGD(p, lr=0.1), [(x, y)], epochs=1)
    model = make_model()
    dp = DataParallel(model, init_process_group("local", world_size=4), SGD(model.parameters(), lr=0.1),
                      local_sgd=LocalSGD(period=1))
    dp.train_step(x, y, mse_loss)
    for got, expected in zip(dp.module.parameters(), want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


# ----- on a GPU (skipped here) ----------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("devices", [["cuda:0"], ["cuda:0", "cuda:0"]])
def test_local_backend_on_the_gpu(devices):
    import cupy

    group = init_process_group("local", world_size=len(devices), devices=devices)
    arrays = [cupy.full(1001, r + 1.0, dtype=cupy.float32) for r in range(len(devices))]
    group.all_reduce(arrays, op="avg")
    n = len(devices)
    assert all(float(abs(a - (n + 1) / 2).max()) == 0 for a in arrays)
    batches = make_batches()
    want = train_single_process(OPTIMIZERS["adam"], batches)
    model = make_model().to("cuda:0")
    dp = DataParallel(model, group, OPTIMIZERS["adam"](model.parameters()))
    for _ in range(2):
        for x, y in batches:
            dp.train_step(x.to("cuda:0"), y.to("cuda:0"), mse_loss)
    for got, expected in zip(dp.module.parameters(), want):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-9)


NCCL_SCRIPT = textwrap.dedent("""
    import cupy, numpy as np
    from tinyflo.core.distributed import init_process_group
    group = init_process_group()
    assert (group.backend, group.rank, group.world_size) == ("nccl", 0, 1), group
    a = cupy.arange(10, dtype=cupy.float32)
    group.all_reduce(a, op="sum")
    group.all_reduce(a, op="avg")
    group.broadcast(a, root=0)
    group.barrier()
    assert bool((a == cupy.arange(10, dtype=cupy.float32)).all())
    print("nccl ok")
""")


def _nccl_available() -> bool:
    """CuPy's NCCL binding found its library (a CuPy wheel does not bring one)."""
    try:
        from cupy.cuda import nccl
    except Exception:  # no CuPy, or one (or a stand-in) without the binding
        return False
    return bool(getattr(nccl, "available", False))


@pytest.mark.gpu
@pytest.mark.gpu_hardware
def test_nccl_backend_with_world_size_1(tmp_path):
    if not _nccl_available():
        pytest.skip("CuPy has no NCCL library (python -m cupyx.tools.install_library --library nccl)")
    script = tmp_path / "nccl_one.py"
    script.write_text(NCCL_SCRIPT)
    env = {**os.environ, "TINYFLO_BACKEND": "nccl", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "nccl ok" in done.stdout, done.stdout + done.stderr


def test_process_group_base_is_abstract():
    group = ProcessGroup(0, 1, [0], [as_device("cpu")])
    with pytest.raises(NotImplementedError):
        group.all_reduce(np.ones(2))


# ----- the Trainer with group= -------------------------------------------------------------------
@pytest.mark.task("distributed_data_parallel")
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_distributed_data_parallel_through_the_trainer_equals_one_process(world, accumulation_steps):
    single, want = train_with_trainer(accumulation_steps=accumulation_steps)
    trainer, got = train_with_trainer(init_process_group("local", world_size=world), accumulation_steps=accumulation_steps)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for a, b in zip(trainer.model.parameters(), single.model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    _assert_replicas_identical(trainer.strategy.parallel)
    assert trainer.step == single.step and trainer.lr == single.lr
    assert all(o.param_groups[0]["lr"] == single.lr for o in trainer.strategy.parallel.optimizers)
    assert trainer.evaluate(make_batches()) == pytest.approx(single.evaluate(make_batches()), rel=1e-12, nan_ok=True)


@pytest.mark.task("distributed_local_sgd")
def test_distributed_local_sgd_through_the_trainer():
    # plain SGD without clipping: averaging the parameters after each step is averaging the gradients
    dp, _ = train_with_trainer(init_process_group("local", world_size=3), momentum=0.0, grad_clip_norm=None)
    lsgd, _ = train_with_trainer(init_process_group("local", world_size=3), local_sgd=LocalSGD(period=1), momentum=0.0,
                           grad_clip_norm=None)
    for a, b in zip(dp.model.parameters(), lsgd.model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    assert lsgd.strategy.parallel.local_sgd.period == 1


def test_trainer_group_checkpoint_saves_replica_0_and_syncs_on_load(tmp_path):
    trainer, _ = train_with_trainer(init_process_group("local", world_size=2), epochs=1)
    path = trainer.save_checkpoint(tmp_path / "dp.safetensors")
    resumed, _ = train_with_trainer(init_process_group("local", world_size=2), epochs=0)
    resumed.load_checkpoint(path)
    for replica in resumed.strategy.parallel.replicas:
        for a, b in zip(replica.parameters(), trainer.model.parameters()):
            assert np.array_equal(a.numpy(), b.numpy())
    assert resumed.strategy.parallel.optimizers[1].state_dict()["state"].keys() == trainer.optimizer.state_dict()["state"].keys()
    for opt in resumed.strategy.parallel.optimizers:  # every replica's momentum is replica 0's saved one
        for p, q in zip(opt.param_groups[0]["params"], trainer.optimizer.param_groups[0]["params"]):
            assert np.array_equal(opt.state[p]["momentum_buffer"], trainer.optimizer.state[q]["momentum_buffer"])
    assert resumed.step == trainer.step


def test_trainer_group_argument_errors():
    from tinyflo.core.training import Trainer

    model = make_model()
    with pytest.raises(ValueError, match="group"):
        Trainer(model, SGD(model.parameters(), lr=0.1), mse_loss, device="cpu",
                group=init_process_group("local", world_size=2))
    with pytest.raises(TypeError, match="local_sgd="):
        DataParallelStrategy(init_process_group("local", world_size=2), local_sgd=2)
    with pytest.raises(TypeError, match="init_process_group"):
        Trainer(model, SGD(model.parameters(), lr=0.1), mse_loss, group="local")


def test_trainer_group_with_float16_mixed_precision_keeps_replicas_identical():
    pytest.importorskip("tinyflo.core.amp")
    from tinyflo.core.training import Trainer

    rng = np.random.default_rng(0)
    batches = [(Tensor(rng.standard_normal((n, 5)).astype(np.float32)),
                Tensor(rng.standard_normal((n, 3)).astype(np.float32))) for n in (16, 16, 7)]
    runs = []
    for group in (None, init_process_group("local", world_size=2)):
        model = make_model().float()
        trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse_loss, amp="float16", grad_clip_norm=1.0,
                          verbosity="quiet", group=group)
        runs.append(([trainer.train_epoch(batches) for _ in range(3)], trainer))
    (single_losses, single), (losses, trainer) = runs
    np.testing.assert_allclose(losses, single_losses, rtol=1e-3)
    assert trainer.scaler.get_scale() == single.scaler.get_scale()
    _assert_replicas_identical(trainer.strategy.parallel)
    for a, b in zip(trainer.model.parameters(), single.model.parameters()):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-3)


@pytest.mark.filterwarnings("error")  # NumPy's overflow/invalid RuntimeWarnings would fail the test
@pytest.mark.parametrize("world", [None, 2], ids=["one-process", "2-local-ranks"])
def test_trainer_float16_overflow_skips_the_step_without_a_warning(world):
    pytest.importorskip("tinyflo.core.amp")
    from tinyflo.core.amp import GradScaler, MixedPrecision
    from tinyflo.core.training import Trainer

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32))]
    model = make_model().float()
    before = [p.numpy().copy() for p in model.parameters()]
    group = None if world is None else init_process_group("local", world_size=world)
    # a scale of 2**40 overflows float16 in the backward pass on purpose: the scaler must skip the step
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), mse_loss, grad_clip_norm=1.0,
                      plugins=[MixedPrecision("float16", scaler=GradScaler(init_scale=2.0**40))], verbosity="quiet",
                      group=group)
    trainer.train_epoch(batches)
    assert trainer.scaler.skipped_steps == 1 and trainer.scaler.get_scale() == 2.0**39
    replicas = [trainer.model] if group is None else trainer.strategy.parallel.replicas
    for replica in replicas:
        for a, b in zip(before, replica.parameters()):
            assert np.array_equal(a, b.numpy()), "an overflowed step must leave the parameters alone"


def test_trainer_group_failed_save_raises_and_plain_trainer_is_untouched(tmp_path):
    trainer, _ = train_with_trainer(init_process_group("local", world_size=2), epochs=1)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        trainer.save_checkpoint(blocker / "dp.safetensors")
    plain, _ = train_with_trainer(epochs=1)
    assert not isinstance(plain.strategy, DataParallelStrategy)
    assert plain.save_checkpoint(tmp_path / "plain.safetensors").is_file()
