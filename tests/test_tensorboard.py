"""The TensorBoard logger: what a training run writes is read back from the event files, value for value."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyflo
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD
from tinyflo.core.training import Callback, Trainer
from tinyflo.tensorboard import TensorBoardLogger, read_scalars


def loader(seed: int = 0) -> DataLoader:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).astype(np.int64)), batch_size=8)


def trainer() -> Trainer:
    tinyflo.manual_seed(0)
    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 2))
    return Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="quiet")


def as_logged(values: list[float]) -> list[tuple[int, float]]:
    """A history column as the event file holds it: (epoch, float32 value), NaN left out."""
    return [(epoch, float(np.float32(v))) for epoch, v in enumerate(values, 1) if not math.isnan(v)]


class Record(Callback):
    """Records one more history column each epoch: ``value(epoch)``."""

    def __init__(self, column: str, value) -> None:
        self.column, self.value = column, value

    def on_epoch_end(self, trainer: Trainer) -> None:
        trainer.history.record(trainer.epoch, {self.column: self.value(trainer.epoch)})


def test_every_history_column_is_read_back_per_epoch(tmp_path):
    t = trainer()
    history = t.fit(loader(), loader(1), epochs=3, callbacks=[TensorBoardLogger(tmp_path)])
    scalars = read_scalars(tmp_path)
    assert set(scalars) == {"train_loss", "val_loss", "val_acc", "lr", "time"}
    for tag, points in scalars.items():
        assert [step for step, _ in points] == [1, 2, 3]
        assert points == as_logged(history[tag])


def test_a_column_added_by_a_callback_gets_its_own_tag_and_nan_is_left_out(tmp_path):
    """Without a val_loader, val_loss and val_acc are NaN: no tag; my_metric is NaN in epoch 2: no point."""
    t = trainer()
    metric = Record("my_metric", lambda epoch: math.nan if epoch == 2 else epoch / 4)
    t.fit(loader(), epochs=3, callbacks=[metric, TensorBoardLogger(tmp_path, prefix="mlp/")])
    scalars = read_scalars(tmp_path)
    assert set(scalars) == {"mlp/train_loss", "mlp/lr", "mlp/time", "mlp/my_metric"}
    assert scalars["mlp/my_metric"] == [(1, 0.25), (3, 0.75)]
    assert scalars["mlp/train_loss"] == as_logged(t.history["train_loss"])


def test_each_epoch_is_on_disk_when_the_epoch_ends(tmp_path):
    seen = []
    look = Callback()
    look.on_epoch_end = lambda trainer: seen.append([step for step, _ in read_scalars(tmp_path)["train_loss"]])
    trainer().fit(loader(), epochs=3, callbacks=[TensorBoardLogger(tmp_path), look])
    assert seen == [[1], [1, 2], [1, 2, 3]]


def test_close_twice_then_train_on_in_a_new_file(tmp_path):
    t, logger = trainer(), TensorBoardLogger(tmp_path)
    t.fit(loader(), epochs=2, callbacks=[logger])
    logger.close()
    logger.close()
    logger.log_scalar("note", 7, step=2)
    t.fit(loader(), epochs=2, callbacks=[logger])
    assert len(list(tmp_path.iterdir())) == 2
    scalars = read_scalars(tmp_path)
    assert scalars["train_loss"] == as_logged(t.history["train_loss"]) and len(scalars["train_loss"]) == 4
    assert scalars["note"] == [(2, 7.0)]


def test_log_dir_defaults_to_a_new_folder_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = TensorBoardLogger()
    assert logger.log_dir.parent == Path("runs") and not logger.log_dir.exists()  # made at the first write
    logger.log_scalar("x", 1.5, 3)
    logger.close()
    assert read_scalars(logger.log_dir) == {"x": [(3, 1.5)]}


def test_without_tensorboardx_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ModuleNotFoundError) as caught:
        TensorBoardLogger(tmp_path)
    assert str(caught.value) == 'TensorBoardLogger needs tensorboardX: pip install "tinyflo[tensorboard]"'
    with pytest.raises(ModuleNotFoundError, match="read_scalars needs tensorboardX"):
        read_scalars(tmp_path)


def test_only_creating_a_logger_imports_tensorboardx():
    code = ("import sys, tinyflo.core.training\n"
            "assert 'tinyflo.tensorboard' not in sys.modules\n"
            "import tinyflo.tensorboard\n"
            "assert 'tensorboardX' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_read_scalars_reads_tensorboardx_own_files(tmp_path):
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_scalar("loss", 0.5, 1)
        writer.add_scalar("loss", 0.25, 2)
    assert read_scalars(tmp_path) == {"loss": [(1, 0.5), (2, 0.25)]}


def test_read_scalars_checks_the_framing(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    for step in (1, 2):
        logger.log_scalar("x", step / 2, step)
    logger.close()
    (path,) = tmp_path.iterdir()
    whole = path.read_bytes()

    path.write_bytes(whole[:-3])  # the last record cut short, as while it is being written
    assert read_scalars(tmp_path) == {"x": [(1, 0.5)]}
    path.write_bytes(whole[:-5] + bytes([whole[-5] ^ 1]) + whole[-4:])  # one bit of the last record's data
    with pytest.raises(ValueError, match="damaged: the record at byte .* does not match its checksum"):
        read_scalars(tmp_path)
    path.write_bytes(whole[:2] + bytes([whole[2] ^ 1]) + whole[3:])  # one bit of the first record's length
    with pytest.raises(ValueError, match="damaged: the length of the record at byte 0"):
        read_scalars(tmp_path)
    with pytest.raises(FileNotFoundError, match="no folder"):
        read_scalars(tmp_path / "missing")


def test_logged_metrics_and_resources_reach_tensorboard(tmp_path):
    """What trainer.log() records and what a Monitor samples are history columns: each becomes a tag."""
    from tinyflo.core.training import Monitor

    tinyflo.manual_seed(0)
    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 2))

    def loss_fn(out, y):
        trainer_.log("top_logit", out.max(axis=1).mean())
        return cross_entropy(out, y)

    trainer_ = Trainer(model, SGD(model.parameters(), lr=0.1), loss_fn, verbosity="quiet")
    history = trainer_.fit(loader(), loader(1), epochs=2, callbacks=[Monitor(live=False), TensorBoardLogger(tmp_path)])
    scalars = read_scalars(tmp_path)
    assert scalars["top_logit"] == as_logged(history["top_logit"])
    assert scalars["val_top_logit"] == as_logged(history["val_top_logit"])
    assert scalars["proc_ram_gb"] == as_logged(history["proc_ram_gb"]) and "sys_ram_gb" in scalars


def test_each_log_interval_is_a_step_scalar(tmp_path):
    """Every log_every optimizer steps: the running loss and the learning rate, tagged step/<name>."""
    tinyflo.manual_seed(0)
    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 2))
    t = Trainer(model, SGD(model.parameters(), lr=0.1), cross_entropy, verbosity="quiet", log_every=2)
    t.fit(loader(), epochs=2, callbacks=[TensorBoardLogger(tmp_path)])
    scalars = read_scalars(tmp_path)
    assert [step for step, _ in scalars["step/loss"]] == [2, 4, 6, 8] and scalars["step/lr"][0] == (2, pytest.approx(0.1))
    assert [step for step, _ in scalars["train_loss"]] == [1, 2], "the epochs' columns keep the epoch as step"
    assert t.watchers == [], "the logger leaves the Trainer when training ends"
