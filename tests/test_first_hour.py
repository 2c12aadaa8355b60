"""The first hour's slips, each refused in one line that names what was given and how to do it:
a model called on a NumPy array, an operand that is not a number, a checkpoint's path that is a
folder, a missing folder, or the model passed where the path goes."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tinyflo
from tinyflo import nn

DIGITS = np.zeros((2, 8, 8), np.float32)
WRAP = "wrap it with tinyflo.tensor(x) (and .to(device) for a GPU)"


def _model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


# (what is done, the error's type, the whole message)
SLIPS = [
    (lambda: _model()(DIGITS), TypeError,
     f"Flatten: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 8, 8) and dtype float32: {WRAP}"),
    (lambda: nn.Linear(64, 10)(DIGITS.reshape(2, 64)), TypeError,
     f"Linear: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 64) and dtype float32: {WRAP}"),
    (lambda: nn.Conv2d(1, 2, 3)(DIGITS[:, None]), TypeError,
     f"Conv2d: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 1, 8, 8) and dtype float32: {WRAP}"),
    (lambda: tinyflo.zeros(2) + "a", TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got str 'a'"),
    (lambda: "a" * tinyflo.zeros(2), TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got str 'a'"),
    (lambda: tinyflo.zeros(2) < None, TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got NoneType None"),
    (lambda: tinyflo.zeros(2) @ [[1], [2, 3]], TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got list [[1], [2, 3]]"),
    (lambda: tinyflo.save_checkpoint(".", _model()), IsADirectoryError,
     "save_checkpoint: path '.' is a folder; expected a file's path, e.g. 'model.safetensors'"),
    (lambda: tinyflo.save_checkpoint("no-such-folder/m.safetensors", _model()), FileNotFoundError,
     "save_checkpoint: path 'no-such-folder/m.safetensors': its folder 'no-such-folder' does not exist; make it first"),
    (lambda: tinyflo.save_checkpoint(_model(), "m.safetensors"), TypeError,
     "save_checkpoint: path must be a file's path (a str or os.PathLike); got Sequential "
     "(the path comes first: save_checkpoint(path, model, ...))"),
    (lambda: tinyflo.save_checkpoint("m.safetensors", "model"), TypeError,
     "save_checkpoint: model must be a Module (it has state_dict()); got str"),
    (lambda: tinyflo.load_checkpoint(".", _model()), IsADirectoryError,
     "load_checkpoint: path '.' is a folder; expected a file's path, e.g. 'model.safetensors'"),
    (lambda: tinyflo.load_checkpoint("missing.safetensors", _model()), FileNotFoundError,
     "load_checkpoint: path 'missing.safetensors' does not exist"),
    (lambda: _model().load_state_dict(None), TypeError,
     "Sequential.load_state_dict: state must be a mapping of names to tensors (what state_dict() gives); got NoneType"),
    (lambda: _model().load_state_dict("model.safetensors"), TypeError,
     "Sequential.load_state_dict: state must be a mapping of names to tensors (what state_dict() gives); got str"),
]


@pytest.mark.parametrize("slip, kind, message", SLIPS, ids=[m.split(":")[0] + f"-{i}" for i, (_, _, m) in enumerate(SLIPS)])
def test_a_first_hour_slip_is_one_line_saying_what_came_and_what_to_do(slip, kind, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kind, match=f"^{re.escape(message)}$"):
        slip()
    assert not list(tmp_path.iterdir()), "a refused call wrote something"


def test_what_takes_arrays_still_takes_them():
    ids = np.array([[1, 2], [3, 4]])
    assert nn.Embedding(5, 3)(ids).shape == (2, 2, 3)
    assert nn.Sequential(nn.Embedding(5, 3), nn.Flatten())(ids).shape == (2, 6)
    assert (tinyflo.ones(2) + np.ones(2, np.float32)).tolist() == [2.0, 2.0]
