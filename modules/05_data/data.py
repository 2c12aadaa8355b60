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
# ### Task `data_rng` (3 points): `Rng`

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
p = Rng(11)
p.fork()
state = json.loads(json.dumps(p.state_dict()))
copy = Rng(0)
copy.load_state_dict(state)
assert copy.fork().normal(8).tolist() == p.fork().normal(8).tolist(), "after load_state_dict, the next fork() matches too"
forked = Rng(3)
forked.fork()
assert forked.permutation(20).tolist() == Rng(3).permutation(20).tolist(), "fork() must not advance the parent's stream"
assert Rng(3).fork().permutation(50).tolist() != Rng(3).permutation(50).tolist(), "a fork draws other numbers than its parent"
assert Rng(0).normal().dtype == np.float32 and Rng(0).uniform(low=-1.0, high=1.0).dtype == np.float32, (
    "normal() and uniform() give float32 even for a single draw"
)
u = Rng(1).uniform(10000, low=2.0, high=3.0)
assert u.min() >= 2.0 and u.max() <= 3.0, f"uniform(low=2, high=3) must stay in [2, 3); got {u.min()} to {u.max()}"
assert u.mean() > 2.4 and u.mean() < 2.6, f"uniform(low=2, high=3) must average about 2.5; got {u.mean():.3f}"
n = Rng(1).normal(20000, mean=5.0, std=2.0)
assert abs(float(n.mean()) - 5) < 0.1 and abs(float(n.std()) - 2) < 0.1, (
    f"normal(mean=5, std=2) gave mean {float(n.mean()):.3f} and std {float(n.std()):.3f}"
)
b = Rng(2).bernoulli(np.array([0.0, 1.0, 0.0, 1.0]))
assert b.tolist() == [False, True, False, True], "bernoulli with p = 0 is always False, with p = 1 always True"
share = float(Rng(2).bernoulli(0.3, 20000).mean())
assert abs(share - 0.3) < 0.02, f"bernoulli(0.3) must be True about 30% of the time; got {share:.1%}"
ints = Rng(4).integers(3, 6, 1000)
assert ints.min() == 3 and ints.max() == 5 and Rng(4).integers(5, size=100).max() < 5, (
    "integers(low, high) draws from [low, high), and integers(high) from [0, high)"
)
from tinyflo.core.tensor import manual_seed
manual_seed(12)
a1 = Rng().permutation(30).tolist()
manual_seed(12)
assert Rng().permutation(30).tolist() == a1, "an unseeded Rng follows manual_seed"
try:
    Rng(0).load_state_dict({"entropy": 1})
    raise AssertionError("load_state_dict with missing keys must be refused with a ValueError")
except ValueError as err:
    assert "spawn_key" in str(err) or "forks" in str(err) or "bit_generator" in str(err), (
        f"the error must name the missing key; got: {err}"
    )
for bad in (-1, 1.5, "x"):
    try:
        Rng(bad)
        raise AssertionError(f"Rng({bad!r}) must be refused with a ValueError")
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
assert TensorDataset([0.5, 1.5]).arrays[0].dtype == np.float32, "Python floats become float32, not float64"
t = Tensor(np.ones((3, 2), np.float32))
assert TensorDataset(t).arrays[0] is t.data, "a tensor's array is kept as it is, not copied"
one = TensorDataset(images)
assert isinstance(one[0], tuple) and len(one[0]) == 1, "with one array, a sample is still a tuple (of one field)"
assert len(TensorDataset(images, labels, labels * 2).arrays) == 3, "any number of arrays is kept, in order"
try:
    TensorDataset(images, np.arange(5), labels)
    raise AssertionError("a middle argument with another first dimension must be refused too")
except ShapeError as err:
    assert "(5,)" in str(err), f"the error must list the odd argument's shape; got: {err}"
try:
    TensorDataset()
    raise AssertionError("TensorDataset() with no arrays must be refused with a ValueError")
except ValueError:
    pass
try:
    TensorDataset(np.float32(1.0), labels)
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
assert sub.indices.dtype == np.int64, f"indices are kept as int64; got {sub.indices.dtype}"
assert sub.indices.tolist() == [4, 0, 5], f"a negative index is counted from the end: expected [4, 0, 5]; got {sub.indices.tolist()}"
assert sub.dataset is ds, "a Subset keeps the dataset itself, not a copy"
try:
    Subset(ds, [0, 6])
    raise AssertionError("an index past the end (6 of 6 samples) must be refused with an IndexError")
except IndexError as err:
    assert "6" in str(err), f"the error must name the index; got: {err}"
try:
    Subset(ds, [-7])
    raise AssertionError("an index before the start (-7 of 6 samples) must be refused with an IndexError")
except IndexError:
    pass
try:
    Subset(ds, [0.5])
    raise AssertionError("non-integer indices must be refused with a TypeError")
except TypeError:
    pass
assert len(Subset(ds, [])) == 0, "an empty list of indices gives an empty subset"
nested = Subset(sub, [2])
assert nested[0][1] == 5, "a subset of a subset picks from the subset's samples"
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
#   `_make_rng` below does this for everyone who takes a generator.
#
# ### Task `data_random_split` (2 points): `random_split`

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
sizes = [len(s) for s in random_split([(i,) for i in range(5)], [0.5, 0.5], seed=1)]
assert sizes == [3, 2], f"[0.5, 0.5] of 5 samples: the left-over sample goes to the first subset; got {sizes}"
sizes = [len(s) for s in random_split([(i,) for i in range(10)], [0.34, 0.33, 0.33], seed=1)]
assert sizes == [4, 3, 3], f"[0.34, 0.33, 0.33] of 10 samples must give [4, 3, 3]; got {sizes}"
sizes = [len(s) for s in random_split([(i,) for i in range(6)], [0.25] * 4, seed=1)]
assert sizes == [2, 2, 1, 1], f"[0.25] * 4 of 6 samples: round down, then one each to the first; got {sizes}"
sizes = [len(s) for s in random_split(ds, [0.7, 0.2, 0.1], seed=1)]
assert sizes == [7, 2, 1], f"[0.7, 0.2, 0.1] adds up to 1 within rounding and must be accepted; got {sizes}"
assert random_split(ds, [7, 3], seed=1)[0].indices.tolist() != train.indices.tolist(), "another seed, another split"
g = Rng(5)
assert random_split(ds, [5, 5], rng=g)[0].indices.tolist() == random_split(ds, [5, 5], rng=Rng(5))[0].indices.tolist(), (
    "rng=Rng(5) splits like another Rng(5)"
)
assert train.indices.tolist() != list(range(7)), "the split is shuffled"
for bad in ([0.5, 0.6], [11, -1], [5, 0.5]):
    try:
        random_split(ds, bad, seed=0)
        raise AssertionError(f"lengths {bad} must be refused with a ValueError")
    except ValueError:
        pass
try:
    random_split(ds, [5, 5], rng=Rng(0), seed=0)
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
batch = default_collate([{"x": np.ones(2, np.float32), "y": 1}, {"x": np.zeros(2, np.float32), "y": 0}])
assert isinstance(batch, dict) and batch["x"].shape == (2, 2) and batch["y"].tolist() == [1, 0], (
    "dict samples are collated key by key into a dict"
)
assert default_collate([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])]).shape == (2, 2), "tensors are stacked like arrays"
assert default_collate([np.float64(1.0), np.float64(2.0)]).dtype == np.float64, "NumPy scalars keep their dtype"
assert default_collate([True, False]).dtype == bool, "Python bools become bool"
assert isinstance(default_collate([[1, 2], [3, 4]]), tuple), "list samples are collated field by field into a tuple"
nested = default_collate([(np.zeros(2), (1, 2.0)), (np.ones(2), (3, 4.0))])
assert nested[1][0].tolist() == [1, 3] and nested[1][1].dtype == np.float32, "nested tuples are collated all the way down"
try:
    default_collate([])
    raise AssertionError("an empty list of samples must be refused with a ValueError")
except ValueError:
    pass
try:
    default_collate([(1, 2), (1,)])
    raise AssertionError("tuples of different lengths must be refused with a ShapeError")
except ShapeError:
    pass
# This student's own inputs: check_rng is seeded from the course, the student and the task.
_rs_n = int(check_rng.integers(2, 7))
_rs_x = check_rng.standard_normal((_rs_n, 3, 2)).astype(np.float32)
_rs_y = check_rng.integers(0, 10, size=_rs_n)
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
custom = DataLoader(ds, batch_size=5, collate_fn=lambda samples: np.array([int(y) for _, y in samples]))
assert [b.tolist() for b in custom] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], "a given collate_fn makes the batches"
slow = DataLoader(ds, batch_size=3, shuffle=True, seed=4, collate_fn=default_collate)
fast = DataLoader(ds, batch_size=3, shuffle=True, seed=4)
assert [(x.tolist(), y.tolist()) for x, y in slow] == [(x.tolist(), y.tolist()) for x, y in fast], (
    "the fast path gives the same batches as collating sample by sample"
)
sub = Subset(Subset(ds, [9, 8, 7, 6, 5]), [4, 0])
assert [y.tolist() for _, y in DataLoader(sub, batch_size=2)] == [[5, 9]], "subsets of subsets take the right rows"


class Doubled(TensorDataset):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return x * 2, y


assert next(iter(DataLoader(Doubled(*ds.arrays), batch_size=2)))[0].tolist() == [[0.0], [2.0]], \
    "an overridden __getitem__ is not skipped"
run = DataLoader(ds, batch_size=3, shuffle=True, seed=1)
list(run)
it = iter(run)
seen = [next(it)[1].tolist() for _ in range(2)]
state = json.loads(json.dumps(run.state_dict()))
rest = [y.tolist() for _, y in it]
after = [y.tolist() for _, y in run]
resumed = DataLoader(ds, batch_size=3, shuffle=True, seed=99)
resumed.load_state_dict(state)
assert [y.tolist() for _, y in resumed] == rest, "a resumed loader continues the same epoch after the batches seen"
assert [y.tolist() for _, y in resumed] == after, "after a resume, the epochs that follow match too"
assert state["batch"] == 2 and run.epoch == 3 and resumed.epoch == 3, (
    f"state_dict() after 2 batches of epoch 2 must say batch 2, and both loaders end at epoch 3; "
    f"got batch {state['batch']}, epochs {run.epoch} and {resumed.epoch}"
)
between = DataLoader(ds, batch_size=3, shuffle=True, seed=2)
list(between)
s2 = between.state_dict()
expected = [y.tolist() for _, y in between]
other = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
other.load_state_dict(s2)
assert [y.tolist() for _, y in other] == expected and s2["batch"] == 0, (
    "a state saved between epochs says batch 0 and gives the next epoch's order"
)
done = DataLoader(ds, batch_size=5, shuffle=True, seed=3)
done_it = iter(done)
next(done_it), next(done_it)
s3 = done.state_dict()
assert s3["epoch"] == 1 and s3["batch"] == 0, (
    f"once every batch of an epoch is handed out, that epoch counts as done; got epoch {s3['epoch']}, batch {s3['batch']}"
)
try:
    DataLoader(ds, batch_size=4).load_state_dict(s2)
    raise AssertionError("a state saved with another batch_size must be refused with a ValueError")
except ValueError as err:
    assert "batch_size" in str(err), f"the error must name batch_size; got: {err}"
for bad in (dict(batch_size=2.0), dict(batch_size=True), dict(batch_size=-1),
            dict(batch_size=11, drop_last=True)):
    try:
        DataLoader(ds, **bad)
        raise AssertionError(f"DataLoader(ds, **{bad}) must be refused with a ValueError")
    except ValueError:
        pass
try:
    DataLoader(TensorDataset(np.zeros((0, 2))), batch_size=2)
    raise AssertionError("an empty dataset must be refused with a ValueError")
except ValueError as err:
    assert "empty" in str(err), f"the error must say the dataset is empty; got: {err}"
from tinyflo.core.tensor import manual_seed
manual_seed(3)
order_a = [y.tolist() for _, y in DataLoader(ds, batch_size=10, shuffle=True)]
manual_seed(3)
assert order_a == [y.tolist() for _, y in DataLoader(ds, batch_size=10, shuffle=True)], "follows manual_seed"
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
