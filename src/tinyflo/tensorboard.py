"""Training curves in TensorBoard: a Trainer callback that writes event files, and a reader for them.

    from tinyflo.tensorboard import TensorBoardLogger

    trainer.fit(train, val, epochs=10, callbacks=[TensorBoardLogger("runs/mlp")])
    # then, in a shell: tensorboard --logdir runs

Writing and reading need tensorboardX (``pip install "tinyflo[tensorboard]"``), imported only when a
logger is created or a folder is read. Viewing needs the ``tensorboard`` program, which tinyflo does not.
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from tinyflo.core.training import Callback, Trainer

__all__ = ["TensorBoardLogger", "read_scalars"]

_files = itertools.count()  # numbers this process's event files, so two opened in one second get two names


def _require_tensorboardx(who: str) -> None:
    """Import tensorboardX, or say how to install it."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError as err:
        raise ModuleNotFoundError(f'{who} needs tensorboardX: pip install "tinyflo[tensorboard]"',
                                  name="tensorboardX") from err


class TensorBoardLogger(Callback):
    """Writes every numeric column of the Trainer's history to TensorBoard at the end of each epoch,
    and every ``log_every`` steps the running loss, learning rates and resources as ``step/<name>``.

    Each column becomes one scalar tag, named as in ``trainer.history`` with ``prefix`` in front:
    ``train_loss``, ``val_loss``, ``val_acc``, ``lr`` (and ``lr_1``, ... for more parameter groups),
    ``time``, and any column a callback records — put the logger after such callbacks. The step is the
    epoch (1 = the first). NaN, a column not measured that epoch (``val_loss`` in an epoch without
    validation after epochs with it), is left out. The file is flushed each epoch and closed when training ends; writing after ``close()``
    opens a new file in the same folder, so a second ``fit()`` goes on where the first stopped.

    ``log_dir``: the run's folder (TensorBoard shows each folder under ``--logdir`` as one run);
    None makes ``runs/<date>_<host>``, as PyTorch's SummaryWriter does. ``prefix``: put in front of
    every tag, e.g. ``"mlp/"`` to group this run's curves in one section.
    """

    def __init__(self, log_dir: str | os.PathLike | None = None, prefix: str = "") -> None:
        _require_tensorboardx("TensorBoardLogger")
        if log_dir is None:
            log_dir = Path("runs") / f"{datetime.now():%b%d_%H-%M-%S}_{socket.gethostname()}"
        self.log_dir = Path(log_dir)
        self.prefix = prefix
        self._events: Any = None  # tensorboardX's EventsWriter while a file is open

    def log_scalar(self, name: str, value: float, step: int) -> None:
        """Write one scalar, tagged ``prefix + name``; it reaches the disk at the epoch's end or at ``close()``."""
        self._write(int(step), {self.prefix + name: float(value)})

    def on_train_begin(self, trainer: Trainer) -> None:
        if self not in trainer.watchers:  # every log_every steps: the running loss, rates and resources
            trainer.watchers.append(self)

    def on_log(self, trainer: Trainer, row: dict[str, float]) -> None:
        """Each log interval's values as ``step/<name>`` tags, the step being the optimizer step."""
        self._write(int(row["step"]), {f"{self.prefix}step/{key}": float(value) for key, value in row.items()
                                       if key not in ("step", "epoch") and not math.isnan(value)})

    def on_epoch_end(self, trainer: Trainer) -> None:
        row = trainer.epoch - 1
        scalars = {}
        for column, values in trainer.history.items():
            value = values[row] if row < len(values) else math.nan
            if isinstance(value, numbers.Real) and not math.isnan(value):
                scalars[self.prefix + column] = float(value)
        self._write(trainer.epoch, scalars)
        self._events.flush()

    def on_train_end(self, trainer: Trainer) -> None:
        if self in trainer.watchers:
            trainer.watchers.remove(self)
        self.close()

    def close(self) -> None:
        """Flush and close the event file; closing again does nothing."""
        if self._events is not None:
            self._events.close()
            self._events = None

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        """One event holding ``scalars`` at ``step`` (the file is opened first if none is open)."""
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        if self._events is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._events = EventsWriter(str(self.log_dir / "events"), f".{os.getpid()}.{next(_files)}")
        values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        self._events.write_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """The scalars in a run's event files: ``{tag: [(step, value), ...]}``, oldest file first.

    Reads the files named ``*tfevents*`` directly in ``log_dir`` (not its subfolders, which TensorBoard
    shows as other runs), written by this logger, tensorboardX or PyTorch's SummaryWriter, and checks
    every record's checksums. Needs tensorboardX (for its protobuf classes), not tensorboard.
    """
    _require_tensorboardx("read_scalars")
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c

    folder = Path(log_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"read_scalars: no folder {folder}")
    files = [[Event.FromString(data) for data in _records(path, masked_crc32c)] for path in folder.glob("*tfevents*")]
    scalars: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(files, key=lambda events: events[0].wall_time if events else 0.0):
        for event in events:
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def _records(path: Path, masked_crc: Callable[[bytes], int]) -> Iterator[bytes]:
    """The records of a TFRecord file, each framed as: length (uint64), its masked CRC-32C, data, the data's."""
    buffer = path.read_bytes()
    at = 0
    while at + 12 <= len(buffer):
        length, length_crc = struct.unpack_from("<QI", buffer, at)
        if length_crc != masked_crc(buffer[at:at + 8]):
            raise ValueError(f"read_scalars: {path} is damaged: the length of the record at byte {at} "
                             "does not match its checksum")
        end = at + 12 + length + 4
        if end > len(buffer):
            return  # the last record is still being written
        data = buffer[at + 12:end - 4]
        if struct.unpack_from("<I", buffer, end - 4)[0] != masked_crc(data):
            raise ValueError(f"read_scalars: {path} is damaged: the record at byte {at} does not match its checksum")
        yield data
        at = end
