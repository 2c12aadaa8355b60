"""A loader that checkpoints a trainer mid-run, for the tests of exact resumes."""

from __future__ import annotations


class SavesAt:
    """Wraps a loader: when the trainer reaches ``step``, before the next batch is drawn (the
    loader's position is then the trainer's), it saves the trainer's checkpoint to ``path``, and
    raises ``then`` if given (training stops there, as if the process had been killed)."""

    def __init__(self, loader, trainer, step, path, then: type[BaseException] | None = None):
        self.loader, self.trainer, self.step, self.path, self.then = loader, trainer, step, path, then

    def __len__(self):
        return len(self.loader)

    def state_dict(self):
        return self.loader.state_dict()

    def __iter__(self):
        batches = iter(self.loader)
        for _ in range(len(self.loader)):
            if self.trainer.step == self.step:
                self.trainer.save_checkpoint(self.path)
                if self.then is not None:
                    raise self.then
            yield next(batches)
