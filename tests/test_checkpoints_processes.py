"""Module 09 across processes: SIGKILL in the middle of saves, and exact resume in fresh interpreters."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tinyflo.core.checkpoints import STATE_KEY, TEMP_MARK, CheckpointManager, load_file, save_file

KILLS = 30
STATE_NUMBERS = 1_000_000  # 4 MB of float32 plus a small int64 tensor: a save takes a few ms


def _save_forever(path: str) -> None:
    """The child: save checkpoints n = 1, 2, 3, ... over the same path until killed."""
    weights = np.zeros(STATE_NUMBERS, np.float32)
    counter = 0
    while True:
        counter += 1
        weights[:] = counter
        save_file(path, {"w": weights, "step": np.full(100, counter, np.int64)}, {"counter": str(counter)})


def _check(path: Path) -> int:
    """The checkpoint at ``path`` loads, verifies and is whole: every value is the same save's."""
    tensors, meta = load_file(path)
    counter = int(meta["counter"])
    assert (tensors["w"] == counter).all() and (tensors["step"] == counter).all(), "a mix of two saves"
    return counter


@pytest.mark.task("checkpoints_atomic")
@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork() and SIGKILL")
def test_checkpoints_atomic_sigkill_at_random_moments_never_breaks_the_checkpoint(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_file(path, {"w": np.zeros(STATE_NUMBERS, np.float32), "step": np.zeros(100, np.int64)}, {"counter": "0"})
    context = multiprocessing.get_context("fork")
    rng = random.Random(0)
    counters, left_behind = [], 0
    for _ in range(KILLS):
        child = context.Process(target=_save_forever, args=(str(path),), daemon=True)
        child.start()
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        counters.append(_check(path))  # old or new, never half
    left_behind = len(list(tmp_path.glob(f".*{TEMP_MARK}*")))  # nobody removes them: one per kill mid-save
    print(f"{KILLS} kills; saves completed per child: {counters}; temporary files left by kills: {left_behind}")
    assert max(counters) > 0, "the children did save"
    assert len(set(counters)) > 1, "the kills landed at different moments"
    assert left_behind > 0, "no kill landed in the middle of a save: the test proved nothing"
    CheckpointManager(tmp_path, keep_last=1)
    assert len(list(tmp_path.glob(f".*{TEMP_MARK}*"))) == left_behind, "a manager leaves other processes' files alone"
    _check(path)


RUN = textwrap.dedent("""
    import sys
    from pathlib import Path

    import numpy as np

    import tinyflo
    from tinyflo.core.data import DataLoader, TensorDataset
    from tinyflo.core.layers import Dropout, Linear, ReLU, Sequential
    from tinyflo.core.losses import cross_entropy
    from tinyflo.core.optim import Adam
    from tinyflo.core.schedulers import CosineAnnealing, ReduceLROnPlateau, Warmup
    from tinyflo.core.training import Trainer
    from training_support import SavesAt  # tests/: the loader that checkpoints a trainer mid-run

    mode, out, flat, plateau = sys.argv[1], Path(sys.argv[2]), "flat" in sys.argv[3], "plateau" in sys.argv[3]
    ACC = 2 if plateau else 1  # the plateau case: accumulation, and a schedule fed by the epoch's mean loss
    data = np.random.default_rng(0)
    X, Y = data.standard_normal((60, 6)).astype(np.float32), data.integers(0, 3, 60)
    N, M, STOP = 2, 2, 11  # epochs before and after the stop; the step of the mid-epoch stop (8 per epoch)


    def build(seed):
        tinyflo.manual_seed(seed)
        model = Sequential(Linear(6, 32), ReLU(), Dropout(0.2), Linear(32, 3))
        opt = Adam(model.parameters(), lr=0.3 if plateau else 1e-2, flat=flat)  # 0.3: the plateau cuts it
        loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, seed=seed + 1)
        if plateau:
            schedule, interval = ReduceLROnPlateau(patience=0, factor=0.5, threshold=0.0), "epoch"
        else:
            schedule, interval = Warmup(CosineAnnealing(40), warmup_steps=5), "step"
        return Trainer(model, opt, cross_entropy, scheduler=schedule, scheduler_interval=interval,
                       verbosity="quiet"), loader


    if mode == "straight":
        trainer, loader = build(0)
        trainer.fit(loader, epochs=N + M, accumulation_steps=ACC)
        trainer.save_checkpoint(out / "straight.safetensors")
    elif mode == "first":
        trainer, loader = build(0)
        trainer.fit(loader, epochs=N, accumulation_steps=ACC)
        trainer.save_checkpoint(out / "first.safetensors")
    elif mode == "resume":
        np.random.seed(7)
        trainer, loader = build(99)  # other weights, other shuffling: the checkpoint must override them all
        trainer.load_checkpoint(out / "first.safetensors")
        trainer.fit(loader, epochs=M, accumulation_steps=ACC)
        trainer.save_checkpoint(out / "resumed.safetensors")
    elif mode == "interrupted":
        trainer, loader = build(0)
        # saves and dies when the trainer reaches step STOP (between two batches)
        trainer.fit(SavesAt(loader, trainer, STOP, out / "mid_epoch.safetensors", then=SystemExit),
                    epochs=N + M, accumulation_steps=ACC)
    elif mode == "resume_mid_epoch":
        trainer, loader = build(42)
        trainer.load_checkpoint(out / "mid_epoch.safetensors", train_loader=loader)
        trainer.fit(loader, epochs=N + M - trainer.epoch, accumulation_steps=ACC)
        trainer.save_checkpoint(out / "resumed_mid_epoch.safetensors")
""")


def _run(mode: str, out: Path, variant: str) -> None:
    result = subprocess.run([sys.executable, "-c", RUN, mode, str(out), variant],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 0, result.stderr


def _model_and_optimizer(path: Path) -> dict[str, np.ndarray]:
    tensors, _ = load_file(path)
    return {k: v for k, v in tensors.items() if not k.startswith(("rng.", "loader."))}


def _history(path: Path) -> dict[str, list]:
    _, meta = load_file(path)
    history = json.loads(meta[STATE_KEY])["trainer"]["history"]
    return {k: v for k, v in history.items() if k != "time"}


@pytest.mark.task("checkpoints_resume")
@pytest.mark.parametrize("variant", ["loop", "flat", "loop-plateau"],
                         ids=["per-parameter", "flat", "plateau-on-train-loss-with-accumulation"])
def test_checkpoints_resume_in_fresh_processes_is_bit_for_bit(tmp_path, variant):
    for mode in ("straight", "first", "resume", "interrupted", "resume_mid_epoch"):
        _run(mode, tmp_path, variant)
    straight = _model_and_optimizer(tmp_path / "straight.safetensors")
    assert any(k.startswith("optimizer.state.") for k in straight)
    for resumed in ("resumed.safetensors", "resumed_mid_epoch.safetensors"):
        other = _model_and_optimizer(tmp_path / resumed)
        assert set(other) == set(straight)
        for key, value in straight.items():
            assert other[key].dtype == value.dtype and np.array_equal(other[key], value), f"{resumed}: {key}"
        assert _history(tmp_path / resumed) == _history(tmp_path / "straight.safetensors"), f"{resumed}: history"
    if "plateau" in variant:
        assert len(set(_history(tmp_path / "straight.safetensors")["lr"])) > 1, "the plateau did cut the rate"
