"""The first hour's slips, each refused in one line that names who refused, the argument, what was
expected and what came (and, for data that should have been a Tensor, how to make one): a model or a
function of tinyflo.nn.functional called on a NumPy array, a list or None, an operand that is not a
number, a checkpoint's path that is a folder, empty, unwritable or not a checkpoint, the model where
an optimizer wants its parameters, and the wrong kind of value for every public name of modules
01-07 and 09-12 and of tinyflo.datasets."""

from __future__ import annotations

import operator
import re
from pathlib import Path

import numpy as np
import pytest

import tinyflo
import tinyflo.datasets as ds
import tinyflo.distributed as dist
import tinyflo.nn.functional as F
from tinyflo import nn, optim
from tinyflo.core import checkpoints
from tinyflo.core.tensor import DeviceError, ShapeError
from tinyflo.optim import lr_scheduler

DIGITS = np.zeros((2, 8, 8), np.float32)
X = np.zeros((2, 4), np.float32)
WRAP = "wrap it with tinyflo.tensor(x) (and .to(device) for a GPU)"
ARRAY = "a numpy.ndarray of shape (2, 4) and dtype float32"


def _model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def _ones():
    return tinyflo.ones(2, 4)


def _small():
    return nn.Sequential(nn.Linear(4, 2))


def _set(t, index, value):
    t[index] = value


# (what is done, the error's type, the whole message)
SLIPS = [
    # a model or a layer called on data that is not a Tensor
    (lambda: _model()(DIGITS), TypeError,
     f"Flatten: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 8, 8) and dtype float32: {WRAP}"),
    (lambda: nn.Linear(64, 10)(DIGITS.reshape(2, 64)), TypeError,
     f"Linear: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 64) and dtype float32: {WRAP}"),
    (lambda: nn.Conv2d(1, 2, 3)(DIGITS[:, None]), TypeError,
     f"Conv2d: input must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 1, 8, 8) and dtype float32: {WRAP}"),
    (lambda: nn.Linear(2, 1)([[1.0, 2.0]]), TypeError,
     f"Linear: input must be a tinyflo Tensor; got list [[1.0, 2.0]]: {WRAP}"),
    (lambda: nn.Sequential(nn.Linear(2, 1))(3.0), TypeError,
     f"Linear: input must be a tinyflo Tensor; got float 3.0: {WRAP}"),
    (lambda: nn.ReLU()(None), TypeError, "ReLU: input must be a tinyflo Tensor; got None"),
    (lambda: nn.Flatten()("digit.png"), TypeError, "Flatten: input must be a tinyflo Tensor; got str 'digit.png'"),
    (lambda: nn.MSELoss()([1.0], [1.0]), TypeError, f"MSELoss: input must be a tinyflo Tensor; got list [1.0]: {WRAP}"),
    # the same line from tinyflo.nn.functional, naming the function and its argument
    (lambda: F.relu(X), TypeError, f"relu: x must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: F.softmax([1.0, 2.0]), TypeError, f"softmax: x must be a tinyflo Tensor; got list [1.0, 2.0]: {WRAP}"),
    (lambda: F.dropout(X), TypeError, f"dropout: x must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: F.layer_norm(X, 4), TypeError, f"layer_norm: input must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: F.scaled_dot_product_attention(_ones(), X, _ones()), TypeError,
     f"scaled_dot_product_attention: key must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: F.conv2d(tinyflo.zeros(1, 1, 4, 4), np.zeros((2, 1, 3, 3), np.float32)), TypeError,
     f"conv2d: weight must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 1, 3, 3) and dtype float32: {WRAP}"),
    (lambda: F.max_pool2d(DIGITS[:, None], 2), TypeError,
     f"max_pool2d: x must be a tinyflo Tensor; got a numpy.ndarray of shape (2, 1, 8, 8) and dtype float32: {WRAP}"),
    (lambda: F.mse_loss(X, X), TypeError, f"mse_loss: input must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: F.mse_loss(_ones(), None), TypeError,
     "mse_loss: target must be a Tensor, an array or a (nested) list of numbers; got None"),
    (lambda: F.cross_entropy(_ones(), "cat"), TypeError,
     "cross_entropy: target must be a Tensor, an array or a (nested) list of numbers; got str 'cat'"),
    (lambda: nn.CrossEntropyLoss(weight="balanced"), TypeError,
     "CrossEntropyLoss: weight must be a Tensor, an array or a list of numbers (one per class) or None; "
     "got str 'balanced'"),
    (lambda: nn.init.zeros_(X), TypeError, f"zeros_: tensor must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: nn.init.calculate_gain(["relu"]), TypeError,
     "calculate_gain: nonlinearity must be a str such as 'relu'; got list ['relu']"),
    # an operand that is not a number (every operator says it the same way: see the test below)
    (lambda: tinyflo.zeros(2) + "a", TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got str 'a'"),
    (lambda: "a" * tinyflo.zeros(2), TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got str 'a'"),
    (lambda: tinyflo.zeros(2) < None, TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got None"),
    (lambda: tinyflo.zeros(2) @ [[1], [2, 3]], TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got list [[1], [2, 3]]"),
    (lambda: tinyflo.zeros(2) + np.array(["a", "b"]), TypeError,
     "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; "
     "got a numpy.ndarray of shape (2,) and dtype <U1"),
    # module 01: making, shaping and writing tensors
    (lambda: tinyflo.zeros_like([1, 2]), TypeError, f"zeros_like: t must be a tinyflo Tensor; got list [1, 2]: {WRAP}"),
    (lambda: tinyflo.full((2,), "a"), TypeError, "full: fill_value must be a number; got str 'a'"),
    (lambda: tinyflo.full(None, 1.0), ShapeError, "full: shape must be a sequence of integers >= 0; got (None,)"),
    (lambda: tinyflo.arange(None), TypeError, "arange: stop must be a number; got None"),
    (lambda: tinyflo.arange(0, 5, 0), ValueError, "arange: step must not be 0"),
    (lambda: tinyflo.tensor([1.0], requires_grad="yes"), TypeError,
     "requires_grad: expected True or False; got str 'yes'"),
    (lambda: tinyflo.cat(X), TypeError, f"cat: tensors must be a list or tuple of tensors; got {ARRAY}"),
    (lambda: tinyflo.cat([_ones(), _ones()], axis=None), ShapeError, "cat: axis must be an integer; got None"),
    (lambda: tinyflo.stack([_ones(), "a"]), TypeError, "stack: tensors[1] must be a Tensor; got str 'a'"),
    (lambda: tinyflo.unbind(X), TypeError, f"unbind: t must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: _ones().min(axis="1"), ShapeError, "min: axis must be an integer; got '1'"),
    (lambda: _ones().clip(min="0"), TypeError, "clip: min must be a number or None; got str '0'"),
    (lambda: _ones().reshape(np.zeros((2, 2), np.int64)), ShapeError,
     "reshape: shape must be a sequence of integers >= -1; got (array([[0, 0], [0, 0]]),)"),
    (lambda: _set(_ones(), 0, "a"), TypeError,
     "setitem: value must be a Tensor, a number, a list of numbers or an array; got str 'a'"),
    (lambda: _set(_ones(), 5, 1.0), ShapeError,
     "setitem: cannot put 1.0 at index 5 of a tensor of shape (2, 4): index 5 is out of bounds for axis 0 with size 2"),
    (lambda: _ones().to(np.zeros(2)), DeviceError,
     "device: expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'; got numpy.ndarray of shape (2,) and dtype float64"),
    (lambda: tinyflo.Device("cpu", 0.5), DeviceError,
     "Device: expected a type 'cpu' or 'cuda' and an index >= 0; got 'cpu', 0.5"),
    # module 02: the graph
    (lambda: tinyflo.backward(X), TypeError, f"backward: root must be a tinyflo Tensor; got {ARRAY}: {WRAP}"),
    (lambda: (tinyflo.ones(2, requires_grad=True) * 2).backward("a"), TypeError,
     "backward: grad must be a Tensor, a number or an array of the tensor's shape; got str 'a'"),
    (lambda: tinyflo.set_grad_enabled("no"), TypeError, "set_grad_enabled: mode must be True or False; got str 'no'"),
    (lambda: tinyflo.gradcheck("f", _ones()), TypeError, "gradcheck: fn must be a function of the inputs; got str 'f'"),
    # module 03: what a model is made of
    (lambda: _small().apply("init"), TypeError, "Sequential.apply: fn must be a function of a module; got str 'init'"),
    (lambda: _small()["0"], TypeError, "Sequential: index must be an integer or a slice; got str '0'"),
    (lambda: _small()[5], IndexError, "Sequential: index 5 is out of range for 1 modules"),
    (lambda: _small().append("relu"), TypeError, "Sequential: module 1 must be a Module; got str 'relu'"),
    (lambda: nn.ModuleList(None), TypeError, "ModuleList: modules must be a list of Modules; got None"),
    (lambda: nn.ModuleList().append(3), TypeError, "ModuleList: module 0 must be a Module; got int 3"),
    (lambda: _small().register_buffer(3, _ones()), TypeError, "register_buffer: name must be a str; got int 3"),
    (lambda: _model().load_state_dict(None), TypeError,
     "Sequential.load_state_dict: state must be a mapping of names to tensors (what state_dict() gives); got NoneType"),
    (lambda: _model().load_state_dict("model.safetensors"), TypeError,
     "Sequential.load_state_dict: state must be a mapping of names to tensors (what state_dict() gives); got str"),
    # module 05: data
    (lambda: tinyflo.DataLoader(X, np.zeros(2)), TypeError,
     "DataLoader: batch_size got an array; to load inputs and targets together, pass one dataset: "
     "DataLoader(TensorDataset(x, y), batch_size=...)"),
    (lambda: tinyflo.DataLoader(None), TypeError,
     "DataLoader: dataset must have __len__ and __getitem__ (a Dataset, a list or an array); got None"),
    (lambda: tinyflo.TensorDataset(X, None), TypeError,
     "TensorDataset: expected tensors, arrays or (nested) lists of numbers; got None"),
    (lambda: tinyflo.Subset(None, [0]), TypeError,
     "Subset: dataset must have __len__ and __getitem__ (a Dataset, a list or an array); got None"),
    (lambda: tinyflo.random_split(tinyflo.TensorDataset(X), 0.5), TypeError,
     "random_split: lengths must be a list of counts or fractions, such as [0.8, 0.2]; got float 0.5"),
    (lambda: tinyflo.default_collate(None), TypeError, "default_collate: samples must be a list of samples; got None"),
    (lambda: tinyflo.Rng(0).shuffle(None), TypeError,
     "Rng.shuffle: x must be a list or an array (shuffled in place); got None"),
    (lambda: tinyflo.Rng(0).integers(5, 5), ValueError,
     "Rng.integers: needs low < high (or 0 < low without high); got low=5, high=5"),
    (lambda: tinyflo.Rng(0).bernoulli("half"), TypeError,
     "Rng.bernoulli: p must be a number in [0, 1] or an array of them; got str 'half'"),
    (lambda: tinyflo.Rng(0).load_state_dict(None), TypeError,
     "Rng.load_state_dict: state must be the dict Rng.state_dict() gave; got None"),
    (lambda: tinyflo.DataLoader(tinyflo.TensorDataset(X)).load_state_dict([]), TypeError,
     "DataLoader.load_state_dict: state must be the dict DataLoader.state_dict() gave; got list []"),
    # modules 06-07: the model where an optimizer wants its parameters; an array where a number goes
    (lambda: optim.SGD(_small(), lr=0.1), TypeError,
     "SGD: params must be the model's parameters, SGD(model.parameters(), ...); got the Sequential itself"),
    (lambda: optim.Adam(_small().parameters), TypeError,
     "Adam: params must be model.parameters(), called (with the brackets); got the function Module.parameters itself"),
    (lambda: optim.Adam(None), TypeError,
     "Adam: params must be an iterable of Parameters (model.parameters()) or a list of groups; got None"),
    (lambda: optim.SGD({"params": _small().parameters()}, lr=0.1), TypeError,
     "SGD: params must be an iterable of Parameters (model.parameters()) or a list of groups; got a dict: "
     "a group goes in a list, [{'params': ..., 'lr': ...}]"),
    (lambda: optim.SGD(_small().parameters(), lr=np.float32([0.1, 0.2])), ValueError,
     "SGD got lr=numpy.ndarray of shape (2,) and dtype float32; expected a number >= 0"),
    (lambda: lr_scheduler.StepLR(np.array([10, 20])), ValueError,
     "StepLR got step_size=numpy.ndarray of shape (2,) and dtype int64; expected an integer >= 1"),
    # module 09: checkpoints (path first, then the model)
    (lambda: tinyflo.save_checkpoint(".", _model()), IsADirectoryError,
     "save_checkpoint: path '.' is a folder; expected a file's path, e.g. 'model.safetensors'"),
    (lambda: tinyflo.save_checkpoint("no-such-folder/m.safetensors", _model()), FileNotFoundError,
     "save_checkpoint: path 'no-such-folder/m.safetensors': its folder 'no-such-folder' does not exist; make it first"),
    (lambda: tinyflo.save_checkpoint(_model(), "m.safetensors"), TypeError,
     "save_checkpoint: path must be a file's path (a str or os.PathLike); got Sequential "
     "(the path comes first: save_checkpoint(path, model, ...))"),
    (lambda: tinyflo.save_checkpoint("m.safetensors", "model"), TypeError,
     "save_checkpoint: model must be a Module (it has state_dict()); got str"),
    (lambda: tinyflo.save_checkpoint("", _model()), ValueError,
     "save_checkpoint: path is empty; expected a file's path, e.g. 'model.safetensors'"),
    (lambda: tinyflo.save_checkpoint("m.safetensors", _model(), extra="run 1"), TypeError,
     "save_checkpoint: extra must be a dict of names to values; got str 'run 1'"),
    (lambda: tinyflo.save_checkpoint("m.safetensors", _model(), rng="yes"), TypeError,
     "save_checkpoint: rng must be True, False or None (saved with a trainer); got str 'yes'"),
    (lambda: tinyflo.load_checkpoint(".", _model()), IsADirectoryError,
     "load_checkpoint: path '.' is a folder; expected a file's path, e.g. 'model.safetensors'"),
    (lambda: tinyflo.load_checkpoint("missing.safetensors", _model()), FileNotFoundError,
     "load_checkpoint: path 'missing.safetensors' does not exist"),
    (lambda: tinyflo.load_checkpoint("notes.txt", _model()), checkpoints.CheckpointError,
     "load_checkpoint: path 'notes.txt': the file has 5 bytes; a safetensors file starts with an 8-byte header "
     "length (the file is truncated, or not safetensors)"),
    (lambda: tinyflo.load_checkpoint("missing.safetensors", _model(), strict="no"), TypeError,
     "load_checkpoint: strict must be True or False; got str 'no'"),
    (lambda: tinyflo.CheckpointManager("notes.txt"), NotADirectoryError,
     "CheckpointManager: directory 'notes.txt' is a file; expected a folder (made if missing)"),
    (lambda: tinyflo.CheckpointManager(None), TypeError,
     "CheckpointManager: directory must be a folder's path (a str or os.PathLike); got None"),
    (lambda: tinyflo.structural_hash("model"), TypeError, "structural_hash: model must be a Module; got str 'model'"),
    # modules 11-12: mixed precision, process groups
    (lambda: tinyflo.GradScaler(init_scale="65536"), ValueError, "GradScaler: init_scale must be a number; got '65536'"),
    (lambda: tinyflo.GradScaler(enabled="yes"), ValueError, "GradScaler: enabled must be True or False; got 'yes'"),
    (lambda: tinyflo.GradScaler().step(_small()), TypeError,
     "GradScaler.step: optimizer must be an optimizer (tinyflo.optim); got a Sequential"),
    (lambda: tinyflo.GradScaler().load_state_dict(None), TypeError,
     "GradScaler.load_state_dict: state must be the dict GradScaler.state_dict() gave; got None"),
    (lambda: tinyflo.GradScaler().load_state_dict({"scale": 2.0}), ValueError,
     "GradScaler.load_state_dict: the state lacks growth_factor, backoff_factor, growth_interval, _growth_tracker; "
     "expected the dict GradScaler.state_dict() gave"),
    (lambda: tinyflo.cast_parameters(None, "float16"), TypeError, "cast_parameters: model must be a Module; got None"),
    (lambda: tinyflo.autocast(enabled="no"), ValueError, "autocast: enabled must be True or False; got 'no'"),
    (lambda: dist.init_process_group(np.array(["local"])), ValueError,
     "init_process_group: backend must be 'local', 'mpi' or 'nccl'; got numpy.ndarray of shape (1,) and dtype <U5"),
    # tinyflo.datasets: checked before a file is read or a number drawn
    (lambda: ds.blobs(seed=-1), ValueError, "blobs: seed must be an integer of at least 0; got -1"),
    (lambda: ds.moons(noise=-0.1), ValueError,
     "moons: noise must be a number >= 0 (the std of the Gaussian noise); got -0.1"),
    (lambda: ds.spirals(points_per_class=10.5), ValueError,
     "spirals: points_per_class must be an integer of at least 1; got 10.5"),
    (lambda: ds.digits(size="32"), ValueError,
     "digits: size must be a positive integer (the images' new side) or None; got '32'"),
    (lambda: ds.digits(flatten="yes"), ValueError, "digits: flatten must be True or False; got 'yes'"),
    (lambda: ds.mnist(root=3), TypeError,
     "mnist: root must be a folder's or file's path (a str or os.PathLike) or None; got int"),
    (lambda: ds.tiny_shakespeare(download="yes"), ValueError, "tiny_shakespeare: download must be True or False; got 'yes'"),
    (lambda: ds.CharVocab(None), TypeError,
     "CharVocab: chars must be a str of sorted distinct characters (or use CharVocab.from_text(text)); got NoneType"),
    (lambda: ds.read_idx("train.gz"), TypeError, "read_idx: data must be the file's bytes (Path(...).read_bytes()); got str"),
    (lambda: ds.data_root(None), TypeError, "data_root: name must be a data set's name (a str); got None"),
    (lambda: ds.download(["mnist"]), ValueError,
     "download: expected one of mnist, fashion-mnist, tinyshakespeare; got ['mnist']"),
]


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A fresh current folder holding a text file that is no checkpoint (``notes.txt``); its entries."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    return tmp_path


def entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("slip, kind, message", SLIPS, ids=[m.split(":")[0].split(" ")[0] + f"-{i}"
                                                            for i, (_, _, m) in enumerate(SLIPS)])
def test_a_first_hour_slip_is_one_line_saying_what_came_and_what_to_do(slip, kind, message, place):
    before = entries(place)
    with pytest.raises(kind, match=f"^{re.escape(message)}$"):
        slip()
    assert entries(place) == before, "a refused call wrote something"


OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.matmul,
             operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@pytest.mark.parametrize("op", OPERATORS, ids=lambda op: op.__name__)
def test_every_operator_names_an_operand_that_is_not_a_number_both_ways_round(op):
    message = "operand: expected a Tensor, a number, a (nested) list of numbers or a numeric array; got str 'a'"
    for call in (lambda: op(tinyflo.ones(2, 2), "a"), lambda: op("a", tinyflo.ones(2, 2))):
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            call()


def test_a_checkpoint_that_cannot_be_written_says_so_naming_its_path(place, monkeypatch):
    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(checkpoints, "_temp_file", denied)
    with pytest.raises(PermissionError, match=r"^save_checkpoint: path 'm\.safetensors' cannot be written: "
                                              r"Permission denied$"):
        tinyflo.save_checkpoint("m.safetensors", _model())
    assert entries(place) == ["notes.txt"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be made")
def test_a_checkpoint_in_a_folder_the_system_keeps_says_why_in_one_line():
    with pytest.raises(OSError, match=r"^save_checkpoint: path '/proc/tinyflo\.safetensors' cannot be written: "
                                      r"[^\n]+$"):
        tinyflo.save_checkpoint("/proc/tinyflo.safetensors", _model())


def test_what_takes_arrays_still_takes_them():
    ids = np.array([[1, 2], [3, 4]])
    assert nn.Embedding(5, 3)(ids).shape == (2, 2, 3)
    assert nn.Sequential(nn.Embedding(5, 3), nn.Flatten())(ids).shape == (2, 6)
    assert nn.Identity()(ids) is ids and nn.Identity()(None) is None
    assert (tinyflo.ones(2) + np.ones(2, np.float32)).tolist() == [2.0, 2.0]
    assert tinyflo.cat([np.ones(2, np.float32), [2.0]]).tolist() == [1.0, 1.0, 2.0]
    assert nn.MSELoss()(tinyflo.ones(2), [1.0, 1.0]).item() == 0.0


def test_a_model_of_its_own_kind_of_input_is_called_with_it():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 1)

        def forward(self, batch):
            return self.linear(batch["x"]) + self.linear(batch["y"])

    x = tinyflo.ones(3, 2)
    assert Pair()({"x": x, "y": x}).shape == (3, 1), "a dict (or a tuple of tensors) is a model's own input"
    with pytest.raises(TypeError, match=r"^Pair: input must be a tinyflo Tensor; got a numpy\.ndarray"):
        Pair()(np.ones((3, 2), np.float32))
