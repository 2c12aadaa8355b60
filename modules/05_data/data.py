# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 05 — Data
#
# A model learns from examples, and how the examples reach it matters more
# than it looks: in which order (a fixed order lets the network learn the
# order), in which groups (a batch is what one optimizer step sees), on which
# device, and — because experiments must be repeatable — drawn from which
# random numbers.
#
# This module builds the data pipeline every later module trains with. Its
# names are PyTorch's, so the skills transfer:
#
# | task | points | what |
# |---|---|---|
# | `data_rng` | 3 | `Rng`: a seeded generator with independent child streams and a saveable state |
# | `data_datasets` | 1 | `Dataset`, `TensorDataset`: arrays that share a first dimension |
# | `data_subset` | 1 | `Subset`: some of a dataset's samples, by index |
# | `data_random_split` | 2 | `random_split`: train / validation subsets by counts or fractions |
# | `data_collate` | 2 | `default_collate`: a list of samples becomes one batch of stacked arrays |
# | `data_loader` | 4 | `DataLoader`: shuffling, batching, `drop_last`, one transfer per batch, resume |
#
# The data sets themselves — the 8×8 digits bundled with tinyflo, MNIST,
# Fashion-MNIST, Tiny Shakespeare and a few synthetic ones — live in the
# hand-written `tinyflo.datasets`; they hand back NumPy arrays or a
# `TensorDataset`, so everything here works on them.

# %%
#| default_exp core.data

# %%
#| export
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tinyflo.core.layers import check_arg  # module 03's argument check: "DataLoader got batch_size=0; ..."
from tinyflo.core.tensor import (
    ShapeError,
    Tensor,
    as_device,
    as_dtype,
    brief,
    default_generator,
    described,
    device_of,
    is_array,
)

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import sys

# This notebook *is* tinyflo.core.data: hide the package's copy of it,
# so that nothing here uses it by accident. (Grading needs no such help:
# there, that copy is empty.)
sys.modules["tinyflo.core.data"] = None


# Random inputs of the hidden checks: grading seeds check_rng per student and task.
check_rng = np.random.default_rng(0)


def _same(mine, again):
    """Whether two results of your own code are equal: where a check runs your code twice (the
    same seed, a fork of the same state, a resumed loader), it compares your runs with each
    other, never your random numbers with ours."""
    return mine == again


# %% [markdown]
# ## Random numbers you can replay
#
# Shuffling, splitting and augmenting data all draw random numbers. Two
# demands pull in different directions:
#
# * **Reproducible.** The same seed must give the same data order, today and
#   after a crash: a checkpoint (module 09) stores the generator's *state*,
#   so a resumed run draws exactly the numbers the uninterrupted run would
#   have drawn.
# * **Independent.** The loader's shuffling, a random split and a dropout
#   mask should not share one stream: adding a random augmentation must not
#   change the order of the data.
#
# `Rng` wraps NumPy's `Generator` (the PCG64 algorithm). Its seed goes
# through a `SeedSequence`, which can `spawn` children: `fork()` gives a new
# `Rng` whose stream is independent of its parent's, yet fully determined
# by the parent's seed and by how many children the parent has forked before.
# Forking does not advance the parent's own stream.
#
# Without a seed, an `Rng` takes one from tinyflo's global generator
# (`default_generator()`), so `tinyflo.manual_seed(0)` at the top of a script
# makes the data order reproducible too.
#
# Every draw keeps tinyflo's dtypes: `normal`, `uniform` give float32 (never
# float64), `integers` and `permutation` int64, `bernoulli` bool.
#
# `state_dict()` returns plain JSON data — the seed sequence (`entropy`,
# `spawn_key`, `forks`: the number of children spawned so far) and the bit
# generator's state — and `load_state_dict()` puts all of it back, so that
# both the next draws *and* the next `fork()` match. A dict that lacks a key
# is a `ValueError` that names the key.
#
# **Two draws have one right form**, because the data order built on them is
# compared with ours (the tests below, the loader's shuffling, `random_split`):
#
# * `permutation(n)` is the generator's own `self._generator.permutation(n)`,
#   as int64;
# * `fork()` starts the child `Rng` (with `_start`) from the parent's next
#   child seed sequence, `self._sequence.spawn(1)[0]`.
#
# The other draws are yours to shape: `normal` may draw `standard_normal` in
# float32 and scale it, or call `Generator.normal(mean, std, size)` and
# convert to float32. Grading never compares their numbers with ours, only
# with your own code's second run from the same seed, and checks what every
# valid draw shows: its dtype, its range, its average and spread.
#
# ### Task `data_rng` (3 points): `Rng`
#
# **Checked when graded** (besides the tests below), with seeds, sizes,
# bounds, means, spreads and probabilities drawn for you:
#
# * after `load_state_dict`, the next `fork()` draws what the next `fork()` of the saved `Rng` draws
# * `fork()` must not advance the parent's stream
# * a fork draws other numbers than its parent
# * two forks of the same state draw the same numbers
# * `permutation(n)` holds every index below n exactly once
# * the same seed gives the same draws, from `integers`, `normal`, `uniform` and `bernoulli` alike
# * `normal()` and `uniform()` give float32 even for a single draw
# * `uniform(size, low=a, high=b)` stays within [a, b] (b itself only by float32 rounding)
# * `uniform(size, low=a, high=b)` averages about (a + b) / 2 (within 5% of b − a, over 10,000 draws)
# * `normal(size, mean=m, std=s)` has a mean about m and a spread about s (each within 5% of s, over 20,000 draws)
# * `bernoulli` with p = 0 is always False, with p = 1 always True
# * `bernoulli(p, size)` is True about a share p of the time (within 0.02, over 20,000 draws)
# * `integers(low, high)` draws from [low, high), and `integers(high)` from [0, high)
# * an unseeded `Rng` follows `manual_seed`
# * `load_state_dict` with a missing key must be refused with a ValueError
# * the error must name the missing key
# * a negative, fractional or non-integer seed must be refused with a ValueError

# %% nbgrader={"grade": false, "grade_id": "data_rng_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _check_draw(owner: str, size: Any, low: Any = None, high: Any = None) -> None:
    """The arguments every draw of an Rng shares: ``size`` None, a count or a shape; integer bounds low < high."""
    sizes = size if isinstance(size, tuple | list) else (size,)
    if size is not None and not all(isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 0
                                    for n in sizes):
        raise ValueError(f"{owner} got size={brief(size)}; expected None, an integer >= 0 or a tuple of them")
    if owner == "Rng.integers":
        check_arg(owner, "low", low, "an integer")
        if high is not None:
            check_arg(owner, "high", high, "an integer")
        if (0 if high is None else low) >= (low if high is None else high):
            raise ValueError(f"{owner}: needs low < high (or 0 < low without high); got low={low}, high={high}")


class Rng:
    """A seeded random generator for data order, splits and augmentation (NumPy's PCG64)."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            seed = int(default_generator().integers(2**63))  # follows tinyflo.manual_seed
        check_arg("Rng", "seed", seed, "an integer >= 0")
        self._start(np.random.SeedSequence(int(seed)))

    def _start(self, sequence: np.random.SeedSequence) -> None:
        self._sequence = sequence
        self._generator = np.random.Generator(np.random.PCG64(sequence))

    @property
    def seed(self) -> int:
        """The seed this stream (or its first ancestor) was made from."""
        return int(self._sequence.entropy)

    def __repr__(self) -> str:
        return f"Rng(seed={self.seed}, spawn_key={tuple(self._sequence.spawn_key)})"

    def permutation(self, n: int) -> np.ndarray:
        """A random order of ``0 .. n-1`` (int64)."""
        check_arg("Rng.permutation", "n", n, "an integer >= 0")
        ### BEGIN SOLUTION
        return self._generator.permutation(int(n)).astype(np.int64, copy=False)
        ### END SOLUTION

    def shuffle(self, x: Any) -> None:
        """Shuffle an array (along its first axis) or a list in place."""
        if not isinstance(x, list) and not is_array(x):
            raise TypeError(f"Rng.shuffle: x must be a list or an array (shuffled in place); got {described(x)}")
        self._generator.shuffle(x)

    def integers(self, low: int, high: int | None = None, size: Any = None) -> Any:
        """Random int64 in ``[low, high)`` (``[0, low)`` when high is left out)."""
        _check_draw("Rng.integers", size, low=low, high=high)
        ### BEGIN SOLUTION
        return self._generator.integers(low, high, size, dtype=np.int64)
        ### END SOLUTION

    def normal(self, size: Any = None, mean: float = 0.0, std: float = 1.0) -> Any:
        """Normal samples in float32."""
        _check_draw("Rng.normal", size)
        check_arg("Rng.normal", "mean", mean, "a number")
        check_arg("Rng.normal", "std", std, "a number >= 0")
        ### BEGIN SOLUTION
        draw = self._generator.standard_normal(size, dtype=np.float32)
        return (draw * np.float32(std) + np.float32(mean)).astype(np.float32, copy=False)
        ### END SOLUTION

    def uniform(self, size: Any = None, low: float = 0.0, high: float = 1.0) -> Any:
        """Uniform samples in ``[low, high)``, float32."""
        _check_draw("Rng.uniform", size)
        check_arg("Rng.uniform", "low", low, "a number")
        check_arg("Rng.uniform", "high", high, "a number")
        ### BEGIN SOLUTION
        draw = self._generator.random(size, dtype=np.float32)
        return (draw * np.float32(high - low) + np.float32(low)).astype(np.float32, copy=False)
        ### END SOLUTION

    def bernoulli(self, p: Any, size: Any = None) -> Any:
        """True with probability ``p`` (a number or an array of them), as bool."""
        _check_draw("Rng.bernoulli", size)
        if not isinstance(p, int | float | np.number | list | tuple) and not is_array(p) or isinstance(p, bool):
            raise TypeError(f"Rng.bernoulli: p must be a number in [0, 1] or an array of them; got {described(p)}")
        ### BEGIN SOLUTION
        p = np.asarray(p, dtype=np.float32)
        if p.size and (p.min() < 0 or p.max() > 1):
            raise ValueError(f"Rng.bernoulli: p must lie in [0, 1]; got values from {p.min()} to {p.max()}")
        shape = p.shape if size is None else size
        return self._generator.random(shape, dtype=np.float32) < p
        ### END SOLUTION

    def fork(self) -> Rng:
        """An independent child stream, determined by this one's seed and how many forks came before."""
        ### BEGIN SOLUTION
        child = object.__new__(Rng)
        child._start(self._sequence.spawn(1)[0])
        return child
        ### END SOLUTION

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to replay this stream and its forks (plain JSON data)."""
        ### BEGIN SOLUTION
        return {
            "entropy": int(self._sequence.entropy),
            "spawn_key": [int(k) for k in self._sequence.spawn_key],
            "forks": int(self._sequence.n_children_spawned),
            "bit_generator": self._generator.bit_generator.state,
        }
        ### END SOLUTION

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the stream that wrote ``state`` was."""
        if not isinstance(state, dict):
            raise TypeError(f"Rng.load_state_dict: state must be the dict Rng.state_dict() gave; got {described(state)}")
        ### BEGIN SOLUTION
        for key in ("entropy", "spawn_key", "forks", "bit_generator"):
            if key not in state:
                raise ValueError(f"Rng.load_state_dict: missing key {key!r}; expected a dict from Rng.state_dict()")
        sequence = np.random.SeedSequence(
            state["entropy"], spawn_key=tuple(state["spawn_key"]), n_children_spawned=state["forks"]
        )
        self._start(sequence)
        self._generator.bit_generator.state = state["bit_generator"]
        ### END SOLUTION


# %%
rng = Rng(0)
print(rng.permutation(10), rng.normal(3), rng.bernoulli(0.5, 4), rng.fork())

# %% nbgrader={"grade": true, "grade_id": "data_rng", "locked": true, "points": 3, "schema_version": 3, "solution": false}
import json

assert Rng(7).permutation(10).tolist() == Rng(7).permutation(10).tolist(), "the same seed, the same order"
assert sorted(Rng(7).permutation(10).tolist()) == list(range(10)), "a permutation holds every index once"
assert Rng(7).permutation(50).tolist() != Rng(8).permutation(50).tolist(), "another seed, another order"
assert Rng(0).normal((2, 3)).dtype == np.float32 and Rng(0).uniform(4).dtype == np.float32, "draws are float32"
assert Rng(0).integers(0, 10, 5).dtype == np.int64 and Rng(0).bernoulli(0.5, 3).dtype == bool, (
    "integers are int64, bernoulli draws bool"
)
parent = Rng(3)
first, second = parent.fork(), parent.fork()
assert first.permutation(50).tolist() != second.permutation(50).tolist(), "two forks are independent"
assert Rng(3).fork().permutation(50).tolist() == Rng(3).fork().permutation(50).tolist(), "forks are reproducible"
r = Rng(5)
r.permutation(10)
saved = json.loads(json.dumps(r.state_dict()))
expected = r.permutation(10).tolist()
restored = Rng(99)
restored.load_state_dict(saved)
assert restored.permutation(10).tolist() == expected, "load_state_dict continues the stream"
### BEGIN HIDDEN TESTS
from tinyflo.core.tensor import manual_seed

# This student's own inputs: check_rng is seeded from the course, the student and the task.
_seed, _other_seed = (int(v) for v in check_rng.integers(0, 2**31, 2))
_m = int(check_rng.integers(20, 60))
_saved = Rng(_seed)
for _ in range(int(check_rng.integers(1, 4))):
    _saved.fork()
_loaded = Rng(_other_seed)
_loaded.load_state_dict(json.loads(json.dumps(_saved.state_dict())))
assert _same(_loaded.fork().permutation(_m).tolist(), _saved.fork().permutation(_m).tolist()), (
    "after load_state_dict, the next fork() draws what the next fork() of the saved Rng draws"
)
_forked, _fresh = Rng(_seed), Rng(_seed)
_forked.fork()
# uniform first: it uses every number of the stream, while a permutation rejects some and can fall back in step
_after_fork = [_forked.uniform(_m).tolist(), _forked.permutation(_m).tolist()]
_no_fork = [_fresh.uniform(_m).tolist(), _fresh.permutation(_m).tolist()]
assert _same(_after_fork, _no_fork), (
    "fork() must not advance the parent's stream"
)
assert Rng(_seed).fork().permutation(_m).tolist() != Rng(_seed).permutation(_m).tolist(), (
    "a fork draws other numbers than its parent"
)
assert _same(Rng(_seed).fork().permutation(_m).tolist(), Rng(_seed).fork().permutation(_m).tolist()), (
    "two forks of the same state draw the same numbers"
)
assert sorted(Rng(_seed).permutation(_m).tolist()) == list(range(_m)), (
    "permutation(n) holds every index below n exactly once"
)
_k = int(check_rng.integers(5, 20))
_mean, _std = round(float(check_rng.uniform(-5, 5)), 2), round(float(check_rng.uniform(0.5, 3)), 2)
_low = float(check_rng.integers(2, 9)) / 2  # 1 to 4 in halves: exact in float32, and above 0
_high = _low + float(check_rng.integers(1, 7)) / 2
_share = round(float(check_rng.uniform(0.1, 0.35)), 2)
_lo = int(check_rng.integers(-10, 10))
_hi = _lo + int(check_rng.integers(2, 7))
_first = [Rng(_seed).integers(_lo, _hi, _k).tolist(), Rng(_seed).normal(_k, mean=_mean, std=_std).tolist(),
          Rng(_seed).uniform(_k, low=_low, high=_high).tolist(), Rng(_seed).bernoulli(_share, _k).tolist()]
_again = [Rng(_seed).integers(_lo, _hi, _k).tolist(), Rng(_seed).normal(_k, mean=_mean, std=_std).tolist(),
          Rng(_seed).uniform(_k, low=_low, high=_high).tolist(), Rng(_seed).bernoulli(_share, _k).tolist()]
assert _same(_first, _again), "the same seed gives the same draws, from integers, normal, uniform and bernoulli alike"
assert Rng(_seed).normal(mean=_mean, std=_std).dtype == np.float32 \
    and Rng(_seed).uniform(low=_low, high=_high).dtype == np.float32, (
        "normal() and uniform() give float32 even for a single draw"
    )
_u = Rng(_seed).uniform(10000, low=_low, high=_high)
assert float(_u.min()) >= _low and float(_u.max()) <= _high, "uniform(size, low=a, high=b) stays within [a, b]"
assert abs(float(_u.mean()) - (_low + _high) / 2) < 0.05 * (_high - _low), (
    "uniform(size, low=a, high=b) averages about (a + b) / 2"
)
_n = Rng(_seed).normal(20000, mean=_mean, std=_std)
assert abs(float(_n.mean()) - _mean) < 0.05 * _std and abs(float(_n.std()) - _std) < 0.05 * _std, (
    "normal(size, mean=m, std=s) has a mean about m and a spread about s"
)
_bits = check_rng.integers(0, 2, int(check_rng.integers(6, 20))).astype(np.float64)
assert Rng(_seed).bernoulli(_bits).tolist() == (_bits == 1).tolist(), (
    "bernoulli with p = 0 is always False, with p = 1 always True"
)
assert abs(float(Rng(_seed).bernoulli(_share, 20000).mean()) - _share) < 0.02, (
    "bernoulli(p, size) is True about a share p of the time"
)
_ints = Rng(_seed).integers(_lo, _hi, 1000)
_top = int(check_rng.integers(2, 7))
_below = Rng(_seed).integers(_top, size=1000)
assert int(_ints.min()) == _lo and int(_ints.max()) == _hi - 1 \
    and int(_below.min()) == 0 and int(_below.max()) == _top - 1, (
        "integers(low, high) draws from [low, high), and integers(high) from [0, high)"
    )
_global_seed = int(check_rng.integers(0, 2**31))
manual_seed(_global_seed)
_unseeded = Rng().permutation(_m).tolist()
manual_seed(_global_seed)
assert _same(Rng().permutation(_m).tolist(), _unseeded), "an unseeded Rng follows manual_seed"
_gone = ("entropy", "spawn_key", "forks", "bit_generator")[int(check_rng.integers(0, 4))]
_partial = {key: value for key, value in Rng(_seed).state_dict().items() if key != _gone}
try:
    Rng(_other_seed).load_state_dict(_partial)
    raise AssertionError("load_state_dict with a missing key must be refused with a ValueError")
except ValueError as err:
    assert _gone in str(err), f"the error must name the missing key; got: {err}"
_bad_seeds = (-int(check_rng.integers(1, 1000)), float(check_rng.integers(0, 1000)) + 0.5,
              str(check_rng.integers(0, 1000)))
for _bad in _bad_seeds:
    try:
        Rng(_bad)
        raise AssertionError("a negative, fractional or non-integer seed must be refused with a ValueError")
    except ValueError:
        pass
### END HIDDEN TESTS

# %% [markdown]
# ## Datasets: `len(ds)` and `ds[i]`
#
# A `Dataset` is anything with a length and an index: `ds[i]` returns
# sample `i`, usually a tuple such as `(image, label)`. Where the samples
# come from — arrays in memory, files on disk, a generator — is the
# dataset's business; the loader only asks for `len` and `[i]`.
#
# The most common case is data already in memory as arrays whose first axis
# counts the samples: images of shape `(N, 1, 28, 28)` and labels of shape
# `(N,)`. `TensorDataset(images, labels)` holds such arrays, and
# `ds[i]` is the tuple `(images[i], labels[i])`.
#
# * It accepts NumPy arrays, CuPy arrays and tinyflo `Tensor`s (it keeps the
#   tensor's array, on its device, without a copy), and Python lists, which
#   take tinyflo's dtype rules (floats become float32, ints int64):
#   `_as_array` below does exactly this for one argument.
# * It keeps them, in order, in `self.arrays`.
# * Arrays must agree on their first dimension. When they do not, raise a
#   `ShapeError` that lists the shape of every argument — a mismatch is
#   nearly always a forgotten transpose or a filter applied to the images but
#   not to the labels. No arguments at all is a `ValueError`, and a 0-d
#   argument (a single number has no samples) a `ShapeError`.
#
# ### Task `data_datasets` (1 point): `TensorDataset`
#
# **Checked when graded** (besides the tests below), with sizes, shapes,
# values and the number of arrays drawn for you:
#
# * Python floats become float32, not float64
# * a tensor's array is kept as it is, not copied
# * with one array, a sample is still a tuple (of one field)
# * any number of arrays is kept, in order
# * a middle argument with another first dimension must be refused with a `ShapeError`
# * the error must list the odd argument's shape
# * `TensorDataset()` with no arrays must be refused with a ValueError
# * a 0-d argument (no samples to count) must be refused with a `ShapeError`

# %% nbgrader={"grade": false, "grade_id": "data_datasets_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Dataset:
    """Anything with ``len(ds)`` samples and ``ds[i]``, the i-th sample (often a tuple ``(x, y)``)."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.__getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.__len__")


def _as_array(data: Any, owner: str = "TensorDataset") -> Any:
    """The array behind a tensor or array (no copy); Python data by tinyflo's dtype rules."""
    if isinstance(data, Tensor):
        return data.data
    if is_array(data):
        return data
    try:
        return Tensor(data).data
    except TypeError:
        raise TypeError(f"{owner}: expected tensors, arrays or (nested) lists of numbers; "
                        f"got {described(data)}") from None


def _check_dataset(owner: str, dataset: Any) -> None:
    """A dataset is anything with ``len()`` and ``[i]``: a Dataset, a list, an array."""
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or isinstance(dataset, str):
        raise TypeError(f"{owner}: dataset must have __len__ and __getitem__ (a Dataset, a list or an array); "
                        f"got {described(dataset)}")


class TensorDataset(Dataset):
    """Arrays (or tensors) that share their first dimension; sample ``i`` is ``(a[i], b[i], ...)``."""

    def __init__(self, *arrays: Any) -> None:
        ### BEGIN SOLUTION
        if not arrays:
            raise ValueError("TensorDataset: give at least one array or tensor")
        arrays = tuple(_as_array(a) for a in arrays)
        for i, a in enumerate(arrays):
            if a.ndim == 0:
                raise ShapeError(
                    f"TensorDataset: argument {i} is 0-d; every argument needs a first dimension "
                    "that counts the samples"
                )
        if len({a.shape[0] for a in arrays}) > 1:
            shapes = ", ".join(f"argument {i} has shape {a.shape}" for i, a in enumerate(arrays))
            raise ShapeError(
                f"TensorDataset: every argument needs the same first dimension (the number of samples); {shapes}"
            )
        self.arrays = arrays
        ### END SOLUTION

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __getitem__(self, index: int) -> tuple:
        return tuple(a[index] for a in self.arrays)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.shape} {a.dtype}" for a in self.arrays)
        return f"TensorDataset({len(self)} samples: {shapes})"


# %% nbgrader={"grade": true, "grade_id": "data_datasets", "locked": true, "points": 1, "schema_version": 3, "solution": false}
images = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
labels = np.arange(6)
ds = TensorDataset(images, labels)
assert len(ds) == 6
x, y = ds[2]
assert np.array_equal(x, images[2]) and y == 2
assert ds.arrays[0] is images, "no copy"
assert TensorDataset(Tensor([[1.0], [2.0]]), [0, 1]).arrays[1].dtype == np.int64
try:
    TensorDataset(images, np.arange(5))
    raise AssertionError("different first dimensions must be refused")
except ShapeError as err:
    assert "(6, 2, 2)" in str(err) and "(5,)" in str(err), f"the error must list every argument's shape; got: {err}"
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(3, 9))
_floats = [round(float(v), 3) for v in check_rng.uniform(-5, 5, _n)]
assert TensorDataset(_floats).arrays[0].dtype == np.float32, "Python floats become float32, not float64"
_t = Tensor(check_rng.standard_normal((_n, int(check_rng.integers(1, 4)))).astype(np.float32))
assert TensorDataset(_t).arrays[0] is _t.data, "a tensor's array is kept as it is, not copied"
_one = TensorDataset(check_rng.standard_normal((_n, 2)).astype(np.float32))
_row = int(check_rng.integers(0, _n))
assert isinstance(_one[_row], tuple) and len(_one[_row]) == 1, "with one array, a sample is still a tuple (of one field)"
_arrays = [check_rng.integers(0, 100, (_n, int(check_rng.integers(1, 4)))) for _ in range(int(check_rng.integers(3, 6)))]
assert [a.tolist() for a in TensorDataset(*_arrays).arrays] == [a.tolist() for a in _arrays], (
    "any number of arrays is kept, in order"
)
_odd = int(check_rng.integers(1, len(_arrays) - 1))  # neither the first argument nor the last
_arrays[_odd] = np.zeros((_n + int(check_rng.choice([-2, -1, 1, 2])), 2), np.float32)
try:
    TensorDataset(*_arrays)
    raise AssertionError("a middle argument with another first dimension must be refused with a ShapeError")
except ShapeError as err:
    assert str(_arrays[_odd].shape) in str(err), f"the error must list the odd argument's shape; got: {err}"
try:
    TensorDataset()
    raise AssertionError("TensorDataset() with no arrays must be refused with a ValueError")
except ValueError:
    pass
try:
    TensorDataset(np.float32(check_rng.standard_normal()), np.arange(_n))
    raise AssertionError("a 0-d argument (no samples to count) must be refused with a ShapeError")
except ShapeError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# `Subset(dataset, indices)` is a view of some of a dataset's samples:
# `subset[j]` is `dataset[indices[j]]`. It keeps its indices as an int64
# array (`self.indices`), with negative indices counted from the end, and
# refuses — with an `IndexError` naming the index and the dataset's length —
# an index that is out of range, and with a `TypeError` indices that are not
# integers. An empty list of indices is allowed (an empty subset), even
# though `np.asarray([])` is a float array. It never copies the data.
#
# ### Task `data_subset` (1 point): `Subset`
#
# **Checked when graded** (besides the test below), with a dataset's size
# and indices drawn for you:
#
# * `Subset` keeps its indices as int64
# * a negative index i counts from the end: it stands for len(dataset) + i
# * a `Subset` keeps the dataset itself, not a copy
# * an index equal to len(dataset) is past the end and must be refused with an IndexError
# * an index below -len(dataset) must be refused with an IndexError
# * the error must name the index
# * non-integer indices must be refused with a TypeError
# * an empty list of indices gives an empty subset
# * a subset of a subset picks from the subset's samples

# %% nbgrader={"grade": false, "grade_id": "data_subset_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class Subset(Dataset):
    """Some of a dataset's samples, by index: ``subset[j]`` is ``dataset[indices[j]]``."""

    def __init__(self, dataset: Any, indices: Any) -> None:
        _check_dataset("Subset", dataset)
        ### BEGIN SOLUTION
        raw = np.asarray(indices)
        if raw.size and raw.dtype.kind not in "iu":
            raise TypeError(f"Subset: indices must be integers; got dtype {raw.dtype}")
        if raw.ndim != 1:
            raise ShapeError(f"Subset: indices must be 1-D; got shape {raw.shape}")
        n = len(dataset)
        raw = raw.astype(np.int64)
        bad = raw[(raw < -n) | (raw >= n)]
        if bad.size:
            raise IndexError(f"Subset: index {int(bad[0])} is out of range for a dataset of {n} samples")
        self.dataset = dataset
        self.indices = np.where(raw < 0, raw + n, raw)
        ### END SOLUTION

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[int(self.indices[index])]

    def __repr__(self) -> str:
        return f"Subset({len(self)} of {len(self.dataset)} samples)"


# %% nbgrader={"grade": true, "grade_id": "data_subset", "locked": true, "points": 1, "schema_version": 3, "solution": false}
ds = [(f"image {i}", i) for i in range(6)]  # any dataset: a list of 6 samples has len() and [i] too
sub = Subset(ds, [4, 0, -1])
assert len(sub) == 3 and sub[0][1] == 4 and sub[1][1] == 0 and sub[2][1] == 5
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_n = int(check_rng.integers(5, 12))
_ds = [(f"image {i}", i) for i in range(_n)]
_idx = check_rng.integers(-_n, _n, int(check_rng.integers(3, 7)))
_idx[int(check_rng.integers(0, len(_idx)))] = -int(check_rng.integers(1, _n + 1))  # at least one negative
_sub = Subset(_ds, _idx.tolist())
_rows = [int(i) % _n for i in _idx]
assert _sub.indices.dtype == np.int64, "Subset keeps its indices as int64"
assert _sub.indices.tolist() == _rows and [_sub[j][1] for j in range(len(_rows))] == _rows, (
    "a negative index i counts from the end: it stands for len(dataset) + i"
)
assert _sub.dataset is _ds, "a Subset keeps the dataset itself, not a copy"
_past = check_rng.permutation([*check_rng.integers(0, _n, 2), _n]).tolist()
try:
    Subset(_ds, _past)
    raise AssertionError("an index equal to len(dataset) is past the end and must be refused with an IndexError")
except IndexError:
    pass
_before = -_n - int(check_rng.integers(1, 5))
try:
    Subset(_ds, [int(check_rng.integers(0, _n)), _before])
    raise AssertionError("an index below -len(dataset) must be refused with an IndexError")
except IndexError as err:
    assert str(_before) in str(err), f"the error must name the index; got: {err}"
try:
    Subset(_ds, [float(i) + 0.5 for i in check_rng.integers(0, _n - 1, 2)])
    raise AssertionError("non-integer indices must be refused with a TypeError")
except TypeError:
    pass
assert len(Subset(_ds, [])) == 0, "an empty list of indices gives an empty subset"
_pick = int(check_rng.integers(0, len(_rows)))
assert Subset(_sub, [_pick])[0][1] == _rows[_pick], "a subset of a subset picks from the subset's samples"
### END HIDDEN TESTS

# %% [markdown]
# ## Splitting: `random_split`
#
# Holding data out for validation is how we find out whether a model learns
# or memorises. `random_split(dataset, lengths)` shuffles the indices once
# and cuts them into consecutive `Subset`s:
#
# * `lengths` holds counts that add up to `len(dataset)`, or fractions that
#   add up to 1 (within rounding: `[0.7, 0.2, 0.1]` sums to
#   0.9999999999999999 in floating point, so compare with a tolerance such
#   as 1e-6). Fractions are turned into counts by rounding down, and the
#   samples left over are handed out one at a time to the first subsets
#   (so `[0.5, 0.5]` of 5 samples gives 3 and 2) — PyTorch's rule.
# * Counts that do not add up, negative lengths, or a mix of counts and
#   fractions, are a `ValueError` that says what came and what the dataset
#   holds.
# * The order comes from an `Rng`: pass `rng=` (an `Rng`) or `seed=` (an
#   int), not both; with neither, a new `Rng()` follows `manual_seed`.
#   `_make_rng` below does this for everyone who takes a generator
#   (`seed=s` is `rng=Rng(s)`).
# * The order is one `permutation(len(dataset))` of that `Rng`, cut in
#   order: the first subset takes its first `counts[0]` indices, the second
#   the next `counts[1]`, and so on.
#
# ### Task `data_random_split` (2 points): `random_split`
#
# **Checked when graded** (besides the tests below), with sizes, counts,
# fractions and seeds drawn for you:
#
# * fractions are rounded down, then the samples left over go one each to the first subsets
# * the left-over samples go to the first subsets even when a later fraction has the larger remainder
# * fractions that add up to 1 only within rounding (such as [0.7, 0.2, 0.1]) must be accepted
# * subset i holds the next counts[i] indices of one `Rng(seed).permutation(len(dataset))`
# * the split is shuffled: not the samples in order
# * another seed, another split
# * `seed=s` splits like `rng=Rng(s)`
# * fractions that add up to more than 1 must be refused with a ValueError
# * a negative length must be refused with a ValueError
# * counts mixed with fractions must be refused with a ValueError
# * rng and seed together must be refused with a ValueError

# %% nbgrader={"grade": false, "grade_id": "data_random_split_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def _make_rng(rng: Rng | None, seed: int | None, owner: str) -> Rng:
    """The Rng a function was given, or a new one from ``seed`` (or from tinyflo's global seed)."""
    if rng is not None and seed is not None:
        raise ValueError(f"{owner}: give rng or seed, not both")
    if rng is None:
        return Rng(seed if seed is None else check_arg(owner, "seed", seed, "an integer >= 0"))
    if not isinstance(rng, Rng):
        raise TypeError(f"{owner}: rng must be a tinyflo Rng; got {type(rng).__name__} (use seed= for an int)")
    return rng


def random_split(
    dataset: Any, lengths: Sequence[int | float], rng: Rng | None = None, seed: int | None = None
) -> list[Subset]:
    """Shuffle the samples once and cut them into subsets of the given counts or fractions."""
    _check_dataset("random_split", dataset)
    if not isinstance(lengths, Sequence | np.ndarray) or isinstance(lengths, str):
        raise TypeError(f"random_split: lengths must be a list of counts or fractions, such as [0.8, 0.2]; "
                        f"got {described(lengths)}")
    ### BEGIN SOLUTION
    n = len(dataset)
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: lengths is empty; give counts or fractions such as [0.8, 0.2]")
    if any(isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) for v in lengths):
        raise TypeError(f"random_split: lengths must be numbers; got {lengths!r}")
    if any(v < 0 for v in lengths):
        raise ValueError(f"random_split: lengths must not be negative; got {lengths!r}")
    if all(isinstance(v, int | np.integer) for v in lengths):
        counts = [int(v) for v in lengths]
        if sum(counts) != n:
            raise ValueError(f"random_split: lengths {counts} add up to {sum(counts)}, but the dataset has {n} samples")
    elif all(isinstance(v, float | np.floating) for v in lengths):
        if abs(sum(lengths) - 1) > 1e-6:
            raise ValueError(f"random_split: fractions {lengths} add up to {sum(lengths):g}; expected 1")
        counts = [int(np.floor(f * n)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    else:
        raise ValueError(f"random_split: lengths must be all counts (ints) or all fractions (floats); got {lengths!r}")
    order = _make_rng(rng, seed, "random_split").permutation(n)
    ends = np.cumsum(counts)
    return [Subset(dataset, order[end - count:end]) for count, end in zip(counts, ends)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "data_random_split", "locked": true, "points": 2, "schema_version": 3, "solution": false}
ds = [(i,) for i in range(10)]  # a list of samples is a dataset too: len() and [i]
train, val = random_split(ds, [7, 3], seed=0)
assert len(train) == 7 and len(val) == 3
seen = [int(train[i][0]) for i in range(7)] + [int(val[i][0]) for i in range(3)]
assert sorted(seen) == list(range(10)), "every sample in exactly one subset"
assert [len(s) for s in random_split(ds, [0.5, 0.5], seed=0)] == [5, 5]
again, _ = random_split(ds, [7, 3], seed=0)
assert again.indices.tolist() == train.indices.tolist(), "the same seed, the same split"
try:
    random_split(ds, [7, 2], seed=0)
    raise AssertionError("counts that do not add up must be refused")
except ValueError as err:
    assert "10" in str(err) and "9" in str(err)
### BEGIN HIDDEN TESTS
import itertools

# This student's own inputs: check_rng is seeded from the course, the student and the task.
_k = int(check_rng.choice([2, 4]))  # 1/2 and 1/4 are exact in floating point
_n = _k * int(check_rng.integers(3, 9)) + int(check_rng.integers(1, _k))  # never a multiple of _k
_sizes = [len(s) for s in random_split([(i,) for i in range(_n)], [1 / _k] * _k, seed=int(check_rng.integers(0, 1000)))]
assert _sizes == [_n // _k + (i < _n % _k) for i in range(_k)], (
    "fractions are rounded down, then the samples left over go one each to the first subsets"
)
# Counts c plus remainders adding up to 1, the largest (above one half) on the last fraction:
# rounded down, one sample is left over, and it goes to the first subset.
_c = [int(v) for v in check_rng.integers(2, 11, int(check_rng.integers(3, 5)))]
_rest = [float(v) for v in check_rng.uniform(0.05, 0.15, len(_c) - 1)]
_n = sum(_c) + 1
_fractions = [(c + r) / _n for c, r in zip(_c, [*_rest, 1 - sum(_rest)])]
_sizes = [len(s) for s in random_split([(i,) for i in range(_n)], _fractions, seed=int(check_rng.integers(0, 1000)))]
assert _sizes == [_c[0] + 1, *_c[1:]], (
    "the left-over samples go to the first subsets even when a later fraction has the larger remainder"
)
_inexact = [t for k in (3, 4) for t in itertools.product(range(1, 9), repeat=k)
            if sum(t) == 10 and sum(v / 10 for v in t) != 1]
_tenths = _inexact[int(check_rng.integers(0, len(_inexact)))]
_n = int(check_rng.choice([11, 13, 17, 19, 21, 23, 27, 29, 31, 33]))  # t * n / 10 is never a whole number
_want = [t * _n // 10 for t in _tenths]
for _i in range(_n - sum(_want)):
    _want[_i % len(_want)] += 1
_sizes = [len(s) for s in random_split([(i,) for i in range(_n)], [t / 10 for t in _tenths],
                                        seed=int(check_rng.integers(0, 1000)))]
assert _sizes == _want, "fractions that add up to 1 only within rounding (such as [0.7, 0.2, 0.1]) must be accepted"
_n = int(check_rng.integers(20, 40))
_ds = [(i,) for i in range(_n)]
_a = int(check_rng.integers(5, _n - 5))
_counts = [_a, int(check_rng.integers(1, _n - _a))]
_counts.append(_n - sum(_counts))
_seed, _other_seed = (int(v) for v in check_rng.choice(2**31, 2, replace=False))
_split = random_split(_ds, _counts, seed=_seed)
_order = Rng(_seed).permutation(_n).tolist()
_cuts = np.cumsum([0, *_counts]).tolist()
_parts = [_order[_cuts[i]:_cuts[i + 1]] for i in range(len(_counts))]
_got = [s.indices.tolist() for s in _split]
assert _same(_got, _parts), (
    "subset i holds the next counts[i] indices of one Rng(seed).permutation(len(dataset))"
)
assert _split[0].indices.tolist() != list(range(_a)), "the split is shuffled: not the samples in order"
assert random_split(_ds, _counts, seed=_other_seed)[0].indices.tolist() != _split[0].indices.tolist(), (
    "another seed, another split"
)
assert _same(random_split(_ds, _counts, seed=_other_seed)[0].indices.tolist(),
             random_split(_ds, _counts, rng=Rng(_other_seed))[0].indices.tolist()), "seed=s splits like rng=Rng(s)"
_f = round(float(check_rng.uniform(0.3, 0.7)), 2)
try:
    random_split(_ds, [_f, round(1 - _f + float(check_rng.uniform(0.05, 0.3)), 2)], seed=0)
    raise AssertionError("fractions that add up to more than 1 must be refused with a ValueError")
except ValueError:
    pass
_j = int(check_rng.integers(1, 5))
try:
    random_split(_ds, [_n + _j, -_j], seed=0)
    raise AssertionError("a negative length must be refused with a ValueError")
except ValueError:
    pass
try:
    random_split(_ds, [_a, _f], seed=0)
    raise AssertionError("counts mixed with fractions must be refused with a ValueError")
except ValueError:
    pass
try:
    random_split(_ds, _counts, rng=Rng(_seed), seed=_seed)
    raise AssertionError("rng and seed together must be refused with a ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## From samples to a batch: `default_collate`
#
# A batch of 32 images is not 32 arrays but one array of shape
# `(32, 1, 28, 28)`: one matmul over the batch is what makes training fast.
# *Collating* turns a list of samples into that:
#
# * samples that are tuples (or lists) are collated field by field into a
#   tuple — `[(x0, y0), (x1, y1)]` becomes `(stack([x0, x1]), stack([y0, y1]))`;
#   dicts key by key; tuples of different lengths are a `ShapeError`;
# * arrays and tensors are stacked along a new first axis, keeping their
#   dtype (NumPy arrays stay NumPy, CuPy arrays stay CuPy: collating never
#   moves data between devices — the loader does that once per batch);
# * Python numbers follow tinyflo's dtype rules (float → float32, int →
#   int64, bool → bool); NumPy scalars keep their dtype;
# * samples of different shapes cannot be stacked: raise a `ShapeError`
#   naming the two sample positions and their shapes (variable-length data
#   needs its own `collate_fn`, which pads); an empty list is a `ValueError`.
#
# ### Task `data_collate` (2 points): `default_collate`
#
# **Checked when graded** (besides the tests below), with the number of
# samples, their shapes, fields and values drawn for you:
#
# * dict samples are collated key by key into a dict
# * tensors are stacked like arrays
# * NumPy scalars keep their dtype
# * Python bools become bool
# * list samples are collated field by field into a tuple
# * nested tuples are collated all the way down
# * an empty list of samples must be refused with a ValueError
# * a sample with fewer fields than the first must be refused with a `ShapeError`
# * the samples' arrays stacked in order, for any samples
# * the samples' labels in order, for any samples

# %% nbgrader={"grade": false, "grade_id": "data_collate_code", "locked": false, "schema_version": 3, "solution": true}
#| export
def default_collate(samples: Sequence[Any]) -> Any:
    """Stack a list of samples into one batch: tuples field by field, arrays along a new first axis."""
    if not isinstance(samples, Sequence) or isinstance(samples, str):
        raise TypeError(f"default_collate: samples must be a list of samples; got {described(samples)}")
    ### BEGIN SOLUTION
    if len(samples) == 0:
        raise ValueError("default_collate: got no samples; a batch needs at least one")
    first = samples[0]
    if isinstance(first, tuple | list):
        for i, sample in enumerate(samples):
            if len(sample) != len(first):
                raise ShapeError(
                    f"default_collate: sample 0 has {len(first)} fields but sample {i} has {len(sample)}"
                )
        return tuple(default_collate([s[field] for s in samples]) for field in range(len(first)))
    if isinstance(first, dict):
        return {key: default_collate([s[key] for s in samples]) for key in first}
    arrays = [_as_array(s, "default_collate") for s in samples]
    for i, a in enumerate(arrays):
        if a.shape != arrays[0].shape:
            raise ShapeError(
                f"default_collate: sample 0 has shape {arrays[0].shape} but sample {i} has shape {a.shape}; "
                "samples of different shapes need a collate_fn that pads them"
            )
    return device_of(arrays[0]).xp.stack(arrays)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "data_collate", "locked": true, "points": 2, "schema_version": 3, "solution": false}
samples = [(np.full((2, 2), i, np.float32), i) for i in range(3)]
xb, yb = default_collate(samples)
assert xb.shape == (3, 2, 2) and xb.dtype == np.float32 and np.array_equal(xb[:, 0, 0], [0, 1, 2])
assert yb.dtype == np.int64 and yb.tolist() == [0, 1, 2]
assert default_collate([1.0, 2.0]).dtype == np.float32, "Python floats become float32, not float64"
try:
    default_collate([np.zeros(3), np.zeros(4)])
    raise AssertionError("samples of different shapes must be refused")
except ShapeError as err:
    assert "(3,)" in str(err) and "(4,)" in str(err)
### BEGIN HIDDEN TESTS
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_n = int(check_rng.integers(2, 7))
_rs_x = check_rng.standard_normal((_rs_n, 3, 2)).astype(np.float32)
_rs_y = check_rng.integers(0, 10, size=_rs_n)
_batch = default_collate([{"x": _rs_x[i], "y": int(_rs_y[i])} for i in range(_rs_n)])
assert isinstance(_batch, dict) and _batch["x"].tolist() == _rs_x.tolist() and _batch["y"].tolist() == _rs_y.tolist(), (
    "dict samples are collated key by key into a dict"
)
_rows = check_rng.standard_normal((_rs_n, int(check_rng.integers(1, 5)))).astype(np.float32)
assert default_collate([Tensor(row) for row in _rows]).tolist() == _rows.tolist(), "tensors are stacked like arrays"
_scalars = [np.float64(v) for v in check_rng.standard_normal(_rs_n)]
assert default_collate(_scalars).dtype == np.float64, "NumPy scalars keep their dtype"
_flags = [bool(v) for v in check_rng.integers(0, 2, _rs_n)]
assert default_collate(_flags).dtype == bool, "Python bools become bool"
_pairs = [[int(a), int(b)] for a, b in check_rng.integers(0, 100, (_rs_n, 2))]
assert isinstance(default_collate(_pairs), tuple), "list samples are collated field by field into a tuple"
_inner = [(int(a), round(float(b), 3)) for a, b in zip(_rs_y, check_rng.standard_normal(_rs_n))]
_nested = default_collate([(_rs_x[i], _inner[i]) for i in range(_rs_n)])
assert _nested[1][0].tolist() == [a for a, _ in _inner] and _nested[1][1].dtype == np.float32, (
    "nested tuples are collated all the way down"
)
try:
    default_collate([])
    raise AssertionError("an empty list of samples must be refused with a ValueError")
except ValueError:
    pass
_fields = int(check_rng.integers(2, 5))
_ragged = [tuple(range(_fields)) for _ in range(_rs_n)]
_ragged[int(check_rng.integers(1, _rs_n))] = tuple(range(int(check_rng.integers(1, _fields))))
try:
    default_collate(_ragged)
    raise AssertionError("a sample with fewer fields than the first must be refused with a ShapeError")
except ShapeError:
    pass
_rs_xb, _rs_yb = default_collate([(_rs_x[i], int(_rs_y[i])) for i in range(_rs_n)])
assert np.array_equal(_rs_xb, _rs_x), "the samples' arrays stacked in order, for any samples"
assert np.array_equal(_rs_yb, _rs_y), "the samples' labels in order, for any samples"
### END HIDDEN TESTS

# %% [markdown]
# ## The DataLoader
#
# `DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False,
# collate_fn=None, device=None, rng=None, seed=None)` turns a dataset into
# batches, one epoch per `for` loop:
#
# * **Order.** Without shuffling, samples come in order. With `shuffle=True`
#   each epoch draws a fresh permutation from the loader's own `Rng` (from
#   `rng=` or `seed=`, else following `manual_seed`): different every epoch,
#   identical from run to run. Every sample appears exactly once per epoch.
#   The order is ours to the bit, so it has one right form: as the epoch
#   starts, one call `self.rng.permutation(len(self.dataset))`, and nothing
#   else drawn from `self.rng`.
# * **Batches.** Consecutive slices of `batch_size` indices. The last batch
#   may be smaller; `drop_last=True` drops it (useful when a smaller batch
#   would upset batch statistics or timing). `len(loader)` is the number of
#   batches: `ceil(n / batch_size)`, or `floor` with `drop_last`.
# * **Collating.** `collate_fn(list_of_samples)`, `default_collate` unless
#   given. **Fast path:** when no `collate_fn` is given and the dataset is a
#   `TensorDataset` (or a `Subset` of one, however nested), indexing each
#   array once with the batch's indices — `images[idx]` — gives the same
#   batch as fetching and stacking `batch_size` samples, but in one
#   vectorised copy instead of `batch_size` Python calls and small arrays.
#   `_fast_path` below finds the arrays and composes the subsets' indices.
#   A subclass of `TensorDataset` that overrides `__getitem__` (to augment,
#   say) must take the slow path, or its `__getitem__` would be skipped.
# * **Device.** Each array of the collated batch becomes a `Tensor` on
#   `device` — one transfer per array per batch, never one per sample. With
#   `device=None` a batch stays where its data is (NumPy → `cpu`, CuPy →
#   its GPU). Tuples, lists and dicts keep their kind; tensors a custom `collate_fn`
#   returns are moved with `.to(device)`; anything else passes unchanged.
#   `_to_device` is given; your `__iter__` calls it.
# * **Resume.** `state_dict()` records the epoch, how many batches of the
#   current epoch were handed out, and the `Rng` state *from before* that
#   epoch's permutation was drawn. `load_state_dict()` restores them; the
#   next `for` loop redraws the same permutation and skips the batches
#   already seen. So a run stopped after batch 3 of epoch 2 and resumed
#   continues with batch 4 of the very same epoch-2 order. Between epochs
#   (or before the first), the state says `batch == 0` and holds the
#   generator as it is; once every batch of an epoch has been handed out,
#   that epoch counts as done. `loader.epoch` counts completed epochs. The
#   state also records `batch_size` and the number of samples: loading it
#   into a loader where either differs is a `ValueError` naming the field,
#   because the batches would not line up.
# * **Errors.** `batch_size` must be a positive int (not a bool, not a
#   float) and `shuffle` and `drop_last` bools (module 03's `check_arg`
#   says so in the given first lines); `collate_fn` callable; the
#   dataset must have `len` and `[]` and hold at least one sample; and
#   `drop_last=True` with fewer samples than `batch_size` leaves no batch at
#   all — a silent zero-step epoch, so it is a `ValueError` that says so.

# %%
#| export
def _to_device(batch: Any, device: Any) -> Any:
    """Arrays become tensors on ``device`` (None: where they are); tuples, lists and dicts are walked."""
    if isinstance(batch, tuple):
        return tuple(_to_device(item, device) for item in batch)
    if isinstance(batch, list):
        return [_to_device(item, device) for item in batch]
    if isinstance(batch, dict):
        return {key: _to_device(item, device) for key, item in batch.items()}
    if isinstance(batch, Tensor):
        return batch if device is None else batch.to(device)
    if is_array(batch):
        as_dtype(batch.dtype, "DataLoader: a batch array's dtype")
        t = Tensor._wrap(batch, device_of(batch))
        return t if device is None else t.to(device)  # the one host-to-device copy of this array
    return batch


def _fast_path(dataset: Any) -> tuple[tuple, np.ndarray | None] | None:
    """(the TensorDataset's arrays, the row of each sample or None) when batches can be gathered directly."""
    rows = None
    while isinstance(dataset, Subset):
        rows = dataset.indices if rows is None else dataset.indices[rows]
        dataset = dataset.dataset
    if isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__:
        return dataset.arrays, rows
    return None


# %% [markdown]
# ### Task `data_loader` (4 points): `DataLoader`
#
# **Checked when graded** (besides the tests below), with dataset sizes,
# batch sizes, seeds and how far a run goes before it is saved drawn for you
# (the size is never a multiple of the batch size):
#
# * a given `collate_fn` makes the batches
# * `len(loader)` is ceil(n / batch_size), or floor(n / batch_size) with `drop_last=True`
# * with `drop_last=True` the smaller last batch is dropped; without it, it comes last
# * each epoch's order is one `Rng.permutation(len(dataset))` of the loader's Rng, drawn as the epoch starts
# * every sample exactly once per epoch
# * a new order every epoch
# * the fast path gives the same batches as collating sample by sample
# * a `Subset` of a `Subset` of a `TensorDataset` gives the rows its indices compose to
# * a `TensorDataset` subclass that overrides `__getitem__` takes the slow path: its `__getitem__` is not skipped
# * a resumed loader continues the same epoch after the batches seen
# * after a resume, the epochs that follow match too
# * `state_dict()` after k batches of an epoch says batch k, and a resumed loader counts its epochs on from the saved one
# * a state saved between epochs says batch 0 and gives the next epoch's order
# * once every batch of an epoch is handed out, that epoch counts as done: the state says the next epoch, batch 0
# * a state saved with another batch_size must be refused with a ValueError
# * the error must name batch_size
# * a state saved with another number of samples must be refused with a ValueError
# * the error must name samples
# * a batch_size that is a float, a bool or below 1 must be refused with a ValueError
# * `drop_last=True` with fewer samples than batch_size must be refused with a ValueError
# * an empty dataset must be refused with a ValueError
# * the error must say the dataset is empty
# * an unseeded loader follows `manual_seed`

# %% nbgrader={"grade": false, "grade_id": "data_loader_code", "locked": false, "schema_version": 3, "solution": true}
#| export
class DataLoader:
    """Batches of a dataset, shuffled by its own seeded Rng, as tensors on one device."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        collate_fn: Callable[[list], Any] | None = None,
        device: Any = None,
        rng: Rng | None = None,
        seed: int | None = None,
    ) -> None:
        _check_dataset("DataLoader", dataset)
        if is_array(batch_size) or isinstance(batch_size, Tensor):  # DataLoader(x, y, ...), as with sklearn
            raise TypeError("DataLoader: batch_size got an array; to load inputs and targets together, pass one "
                            "dataset: DataLoader(TensorDataset(x, y), batch_size=...)")
        check_arg("DataLoader", "batch_size", batch_size, "a positive integer")
        check_arg("DataLoader", "shuffle", shuffle, "True or False")
        check_arg("DataLoader", "drop_last", drop_last, "True or False")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable; got {type(collate_fn).__name__}")
        n = len(dataset)
        if n == 0:
            raise ValueError("DataLoader: the dataset is empty; there is nothing to load")
        if drop_last and n < batch_size:
            raise ValueError(
                f"DataLoader: drop_last=True with batch_size={batch_size} and a dataset of {n} samples "
                "leaves no batch at all; lower batch_size or set drop_last=False"
            )
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self._fast = collate_fn is None
        self.device = None if device is None else as_device(device)
        self.rng = _make_rng(rng, seed, "DataLoader")
        self.epoch = 0  # epochs completed
        self._batch = 0  # batches handed out in the current epoch
        self._epoch_state: dict | None = None  # the Rng before this epoch's permutation; None between epochs
        self._skip = 0  # batches to skip at the next epoch's start (after load_state_dict)

    def __len__(self) -> int:
        """The number of batches per epoch."""
        ### BEGIN SOLUTION
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        ### END SOLUTION

    def _fetch(self, indices: np.ndarray, fast: tuple | None) -> Any:
        """The collated batch of these samples (``fast``: ``_fast_path``'s answer), not yet on the device."""
        ### BEGIN SOLUTION
        if fast is not None:
            arrays, rows = fast
            picked = indices if rows is None else rows[indices]
            return tuple(a[device_of(a).xp.asarray(picked)] for a in arrays)
        return self.collate_fn([self.dataset[int(i)] for i in indices])
        ### END SOLUTION

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches."""
        ### BEGIN SOLUTION
        n = len(self.dataset)
        self._epoch_state = self.rng.state_dict()
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        start, self._skip = self._skip, 0
        self._batch = start
        fast = _fast_path(self.dataset) if self._fast else None  # once per epoch: nested subsets compose in O(n)
        for b in range(start, len(self)):
            batch = _to_device(self._fetch(order[b * self.batch_size:(b + 1) * self.batch_size], fast), self.device)
            self._batch = b + 1
            yield batch
        self.epoch += 1
        self._batch, self._epoch_state = 0, None
        ### END SOLUTION

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: epoch, batches handed out, the Rng to redraw this epoch's order (JSON data)."""
        ### BEGIN SOLUTION
        state = {"batch_size": self.batch_size, "samples": len(self.dataset)}
        if self._epoch_state is not None and self._batch < len(self):
            return {**state, "epoch": self.epoch, "batch": self._batch, "rng": self._epoch_state}
        finished = self._epoch_state is not None  # every batch handed out, the loop not yet closed
        return {**state, "epoch": self.epoch + finished, "batch": 0, "rng": self.rng.state_dict()}
        ### END SOLUTION

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state_dict(): the next loop resumes the same epoch at the next batch."""
        if not isinstance(state, dict):
            raise TypeError(f"DataLoader.load_state_dict: state must be the dict DataLoader.state_dict() gave; "
                            f"got {described(state)}")
        ### BEGIN SOLUTION
        for key, mine in (("batch_size", self.batch_size), ("samples", len(self.dataset))):
            if state.get(key) != mine:
                raise ValueError(
                    f"DataLoader.load_state_dict: the state was saved with {key}={state.get(key)!r}, "
                    f"but this loader has {key}={mine}; the batches would not line up"
                )
        self.rng.load_state_dict(state["rng"])
        self.epoch, self._skip = int(state["epoch"]), int(state["batch"])
        self._batch, self._epoch_state = 0, None
        ### END SOLUTION

    def __repr__(self) -> str:
        return (
            f"DataLoader({len(self.dataset)} samples, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"drop_last={self.drop_last}, device={self.device})"
        )


# %%
loader = DataLoader(TensorDataset(np.arange(10, dtype=np.float32), np.arange(10)), batch_size=4, shuffle=True, seed=0)
for epoch in range(2):
    print(f"epoch {epoch}:", [yb.tolist() for _, yb in loader])

# %% nbgrader={"grade": true, "grade_id": "data_loader", "locked": true, "points": 4, "schema_version": 3, "solution": false}
ds = TensorDataset(np.arange(10, dtype=np.float32).reshape(10, 1), np.arange(10))
loader = DataLoader(ds, batch_size=4)
assert len(loader) == 3 and len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
batches = list(loader)
assert [len(yb) for _, yb in batches] == [4, 4, 2]
xb, yb = batches[0]
assert isinstance(xb, Tensor) and xb.shape == (4, 1) and xb.dtype == np.float32 and yb.tolist() == [0, 1, 2, 3], (
    "the first batch of 4: Tensors, in order, float32 images of shape (4, 1)"
)
shuffled = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
epoch1 = [v for _, yb in shuffled for v in yb.tolist()]
epoch2 = [v for _, yb in shuffled for v in yb.tolist()]
assert sorted(epoch1) == sorted(epoch2) == list(range(10)), "every sample exactly once per epoch"
assert epoch1 != epoch2, "a new order every epoch"
assert epoch1 == [v for _, yb in DataLoader(ds, batch_size=3, shuffle=True, seed=0) for v in yb.tolist()]
assert list(DataLoader(ds, batch_size=4, drop_last=True))[-1][1].tolist() == [4, 5, 6, 7]
assert next(iter(DataLoader(ds, batch_size=2, device="cpu:1")))[0].device == as_device("cpu:1")
try:
    DataLoader(ds, batch_size=0)
    raise AssertionError("batch_size 0 must be refused")
except ValueError as err:
    assert "batch_size" in str(err)
### BEGIN HIDDEN TESTS
from tinyflo.core.tensor import manual_seed

# This student's own inputs: check_rng is seeded from the course, the student and the task.
_b = int(check_rng.integers(2, 6))
_n = _b * int(check_rng.integers(5, 10)) + int(check_rng.integers(1, _b))  # a smaller last batch
_x = check_rng.standard_normal((_n, int(check_rng.integers(1, 4)))).astype(np.float32)
_y = check_rng.permutation(_n) + int(check_rng.integers(0, 100))
_ds = TensorDataset(_x, _y)
_seed, _other_seed = (int(v) for v in check_rng.choice(2**31, 2, replace=False))
_in_order = [_y[i:i + _b].tolist() for i in range(0, _n, _b)]
_custom = DataLoader(_ds, batch_size=_b, collate_fn=lambda samples: np.array([int(y) for _, y in samples]))
assert [batch.tolist() for batch in _custom] == _in_order, "a given collate_fn makes the batches"
assert len(DataLoader(_ds, batch_size=_b)) == -(-_n // _b) and len(DataLoader(_ds, batch_size=_b, drop_last=True)) == _n // _b, (
    "len(loader) is ceil(n / batch_size), or floor(n / batch_size) with drop_last=True"
)
assert [y.tolist() for _, y in DataLoader(_ds, batch_size=_b, drop_last=True)] == _in_order[:-1] \
    and [y.tolist() for _, y in DataLoader(_ds, batch_size=_b)] == _in_order, (
        "with drop_last=True the smaller last batch is dropped; without it, it comes last"
    )
_shuffled = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed)
_epoch1 = [v for _, y in _shuffled for v in y.tolist()]
_epoch2 = [v for _, y in _shuffled for v in y.tolist()]
assert _same(_epoch1, _y[Rng(_seed).permutation(_n)].tolist()), (
    "each epoch's order is one Rng.permutation(len(dataset)) of the loader's Rng, drawn as the epoch starts"
)
assert sorted(_epoch1) == sorted(_y.tolist()) and sorted(_epoch2) == sorted(_y.tolist()), (
    "every sample exactly once per epoch"
)
assert _epoch1 != _epoch2, "a new order every epoch"
_slow = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed, collate_fn=default_collate)
_fast = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed)
_slow_batches = [(x.tolist(), y.tolist()) for x, y in _slow]
_fast_batches = [(x.tolist(), y.tolist()) for x, y in _fast]
assert _same(_slow_batches, _fast_batches), (
    "the fast path gives the same batches as collating sample by sample"
)
_outer = (check_rng.permutation(_n - 1)[:_n // 2] + 1).tolist()  # never row 0
_inner = check_rng.permutation(len(_outer))[:int(check_rng.integers(2, len(_outer)))].tolist()
assert [v for _, y in DataLoader(Subset(Subset(_ds, _outer), _inner), batch_size=_b) for v in y.tolist()] \
    == [int(_y[_outer[i]]) for i in _inner], "a Subset of a Subset of a TensorDataset gives the rows its indices compose to"


class Doubled(TensorDataset):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return x * 2, y


assert next(iter(DataLoader(Doubled(*_ds.arrays), batch_size=_b)))[0].tolist() == (_x[:_b] * 2).tolist(), (
    "a TensorDataset subclass that overrides __getitem__ takes the slow path: its __getitem__ is not skipped"
)
_epochs = int(check_rng.integers(0, 3))  # full epochs before the one that is saved
_seen = int(check_rng.integers(1, 4))  # batches of that epoch handed out before the save
_run = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed)
for _ in range(_epochs):
    list(_run)
_it = iter(_run)
for _ in range(_seen):
    next(_it)
_state = json.loads(json.dumps(_run.state_dict()))
_rest = [y.tolist() for _, y in _it]
_after = [y.tolist() for _, y in _run]
_resumed = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_other_seed)
_resumed.load_state_dict(_state)
_resumed_rest = [y.tolist() for _, y in _resumed]
_resumed_after = [y.tolist() for _, y in _resumed]
assert _same(_resumed_rest, _rest), "a resumed loader continues the same epoch after the batches seen"
assert _same(_resumed_after, _after), "after a resume, the epochs that follow match too"
assert _state["batch"] == _seen and _run.epoch == _epochs + 2 and _resumed.epoch == _epochs + 2, (
    "state_dict() after k batches of an epoch says batch k, and a resumed loader counts its epochs on from the saved one"
)
_between = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed)
for _ in range(_epochs + 1):
    list(_between)
_s2 = _between.state_dict()
_next_epoch = [y.tolist() for _, y in _between]
_other = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_other_seed)
_other.load_state_dict(_s2)
_other_epoch = [y.tolist() for _, y in _other]
assert _same(_other_epoch, _next_epoch) and _s2["batch"] == 0, (
    "a state saved between epochs says batch 0 and gives the next epoch's order"
)
_done = DataLoader(_ds, batch_size=_b, shuffle=True, seed=_seed)
for _ in range(_epochs):
    list(_done)
_done_it = iter(_done)
for _ in range(len(_done)):
    next(_done_it)
_s3 = _done.state_dict()
assert _s3["epoch"] == _epochs + 1 and _s3["batch"] == 0, (
    "once every batch of an epoch is handed out, that epoch counts as done: the state says the next epoch, batch 0"
)
try:
    DataLoader(_ds, batch_size=_b + int(check_rng.integers(1, 4))).load_state_dict(_s2)
    raise AssertionError("a state saved with another batch_size must be refused with a ValueError")
except ValueError as err:
    assert "batch_size" in str(err), f"the error must name batch_size; got: {err}"
try:
    DataLoader(Subset(_ds, range(_n - int(check_rng.integers(1, _b)))), batch_size=_b).load_state_dict(_s2)
    raise AssertionError("a state saved with another number of samples must be refused with a ValueError")
except ValueError as err:
    assert "samples" in str(err), f"the error must name samples; got: {err}"
for _bad in (float(_b), True, -int(check_rng.integers(0, 5))):
    try:
        DataLoader(_ds, batch_size=_bad)
        raise AssertionError("a batch_size that is a float, a bool or below 1 must be refused with a ValueError")
    except ValueError:
        pass
try:
    DataLoader(_ds, batch_size=_n + int(check_rng.integers(1, 10)), drop_last=True)
    raise AssertionError("drop_last=True with fewer samples than batch_size must be refused with a ValueError")
except ValueError:
    pass
try:
    DataLoader(TensorDataset(np.zeros((0, int(check_rng.integers(1, 4))))), batch_size=_b)
    raise AssertionError("an empty dataset must be refused with a ValueError")
except ValueError as err:
    assert "empty" in str(err), f"the error must say the dataset is empty; got: {err}"
_global_seed = int(check_rng.integers(0, 2**31))
manual_seed(_global_seed)
_unseeded = [y.tolist() for _, y in DataLoader(_ds, batch_size=_b, shuffle=True)]
manual_seed(_global_seed)
_unseeded_again = [y.tolist() for _, y in DataLoader(_ds, batch_size=_b, shuffle=True)]
assert _same(_unseeded_again, _unseeded), (
    "an unseeded loader follows manual_seed"
)
### END HIDDEN TESTS

# %% [markdown]
# ## Put it together: the digits
#
# tinyflo ships the 8×8 handwritten digits (1,797 images, 10 classes) inside
# the package, with a fixed train/test split. `tinyflo.datasets` hands them
# back as arrays (or as a `TensorDataset`); your loader does the rest.

# %%
from tinyflo import datasets

images, labels = datasets.digits(train=True, as_arrays=True)
digits_loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True, seed=0)
xb, yb = next(iter(digits_loader))
print(f"{len(images)} training images of shape {images.shape[1:]}, {len(digits_loader)} batches per epoch")
print("first batch:", xb.shape, xb.dtype, yb.shape, yb.dtype, "labels", yb.tolist()[:10])

# %% [markdown]
# ## Systems corner
#
# * **Why the fast path is fast.** The slow path calls `dataset[i]` once per
#   sample — a Python call, a tuple and one small array view per field —
#   then `stack` copies the rows into the batch. The fast path is one
#   fancy-indexing call per array: NumPy gathers the rows in C. Both make
#   exactly one copy of the batch's data; the difference is `batch_size`
#   Python round trips. Measured below on MNIST-sized rows.
# * **Memory.** A shuffled batch is always a copy (its rows are scattered in
#   memory), `batch_size × row size` bytes: 64 MNIST images in float32 are
#   200 KB. The dataset itself is not copied by `TensorDataset`, `Subset` or
#   `random_split` — they hold the arrays and index arrays. Keep data in
#   float32 (or uint8, scaled on the fly): MNIST in float64 is 376 MB for
#   nothing.
# * **Host → device.** Each batch crosses the PCIe bus once per array, not
#   once per sample: one large copy runs near the bus's bandwidth (tens of
#   GB/s) while thousands of tiny ones are dominated by their ~10 µs fixed
#   cost. Better still, when the data fits in GPU memory (MNIST is 188 MB in
#   float32), make the `TensorDataset` from tensors already on the GPU: then
#   the fast path gathers the batch *on* the GPU and nothing crosses the bus
#   during training. Frameworks that stream from disk add page-locked
#   ("pinned") host buffers, so the copy can run while the GPU computes.
# * **Randomness is state.** The loader's `Rng` is part of the training
#   state, like the weights. Module 09 writes `loader.state_dict()` into
#   every checkpoint so that a resumed run sees the same batches as one that
#   never stopped.

# %%
import time

rows = np.random.default_rng(0).standard_normal((10000, 784)).astype(np.float32)
table = TensorDataset(rows, np.arange(10000))
for label, collate in (("fast path (gather)", None), ("sample by sample", default_collate)):
    timed = DataLoader(table, batch_size=64, shuffle=True, seed=0, collate_fn=collate)
    start = time.perf_counter()
    for _ in timed:
        pass
    print(f"{label:20s} {(time.perf_counter() - start) * 1e3:7.1f} ms per epoch of {len(table)} samples")
