"""Module 05's data pipeline: Rng streams, datasets, splits, collating and the DataLoader."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyflo
from tinyflo import ShapeError, Tensor
from tinyflo.core.data import (
    DataLoader,
    Dataset,
    Rng,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def labels_of(loader) -> list[list[int]]:
    """The label batches of one epoch, as lists."""
    return [batch[-1].tolist() for batch in loader]


def numbered(n: int) -> TensorDataset:
    """n samples: x[i] = (i, -i) in float32, y[i] = i."""
    x = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)
    return TensorDataset(x, np.arange(n))


# ----- task data_rng --------------------------------------------------------

@pytest.mark.task("data_rng")
def test_data_rng_same_seed_same_draws():
    a, b = Rng(42), Rng(42)
    assert a.permutation(100).tolist() == b.permutation(100).tolist()
    assert a.normal((3, 4)).tolist() == b.normal((3, 4)).tolist()
    assert a.integers(0, 1000, 10).tolist() == b.integers(0, 1000, 10).tolist()
    assert Rng(42).permutation(100).tolist() != Rng(43).permutation(100).tolist()


@pytest.mark.task("data_rng")
def test_data_rng_dtypes_never_float64():
    r = Rng(0)
    assert r.permutation(5).dtype == np.int64 and r.integers(10, size=3).dtype == np.int64
    assert r.normal(3).dtype == np.float32 and r.normal().dtype == np.float32
    assert r.normal(3, mean=1.0, std=2.0).dtype == np.float32
    assert r.uniform((2, 2), low=-1.0, high=1.0).dtype == np.float32
    assert r.bernoulli(0.3, 5).dtype == bool and r.bernoulli(np.full((2, 3), 0.5)).shape == (2, 3)


@pytest.mark.task("data_rng")
def test_data_rng_statistics():
    r = Rng(1)
    u = r.uniform(50000, low=-2.0, high=3.0)
    assert u.min() >= -2 and u.max() <= 3 and abs(u.mean() - 0.5) < 0.05
    n = r.normal(50000, mean=-1.0, std=0.5)
    assert abs(n.mean() + 1) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert abs(r.bernoulli(0.25, 50000).mean() - 0.25) < 0.01
    with pytest.raises(ValueError, match="p must lie in"):
        r.bernoulli(1.5)


@pytest.mark.task("data_rng")
def test_data_rng_shuffle_in_place():
    values = np.arange(20)
    Rng(0).shuffle(values)
    assert sorted(values.tolist()) == list(range(20)) and values.tolist() != list(range(20))


@pytest.mark.task("data_rng")
def test_data_rng_fork_is_independent_and_reproducible():
    parent = Rng(5)
    children = [parent.fork() for _ in range(3)]
    draws = [c.permutation(64).tolist() for c in children]
    assert len({tuple(d) for d in draws}) == 3, "sibling forks differ"
    again = Rng(5)
    assert [again.fork().permutation(64).tolist() for _ in range(3)] == draws, "forks are deterministic"
    assert Rng(5).permutation(64).tolist() not in draws, "a fork is not its parent"
    untouched = Rng(5)
    assert parent.permutation(64).tolist() == untouched.permutation(64).tolist(), "forking leaves the parent's stream"
    assert children[0].fork().permutation(64).tolist() != draws[0], "forks fork too"


@pytest.mark.task("data_rng")
@given(seed=st.integers(0, 2**63 - 1), before=st.integers(0, 5), forks=st.integers(0, 3))
@settings(max_examples=25, deadline=None)
def test_data_rng_state_round_trip(seed, before, forks):
    r = Rng(seed)
    for _ in range(before):
        r.normal(3)
    for _ in range(forks):
        r.fork()
    state = json.loads(json.dumps(r.state_dict()))
    copy = Rng(0)
    copy.load_state_dict(state)
    assert copy.permutation(30).tolist() == r.permutation(30).tolist()
    assert copy.fork().uniform(5).tolist() == r.fork().uniform(5).tolist()
    assert copy.seed == r.seed == seed


@pytest.mark.task("data_rng")
def test_data_rng_unseeded_follows_manual_seed():
    tinyflo.manual_seed(7)
    first = Rng().permutation(50).tolist()
    tinyflo.manual_seed(7)
    assert Rng().permutation(50).tolist() == first
    assert Rng().permutation(50).tolist() != first, "two unseeded Rngs in a row differ"


@pytest.mark.task("data_rng")
@pytest.mark.parametrize("seed", [-1, 1.5, "1", True])
def test_data_rng_bad_seed(seed):
    with pytest.raises(ValueError, match=re.escape(f"Rng got seed={seed!r}; expected an integer >= 0")):
        Rng(seed)


@pytest.mark.task("data_rng")
def test_data_rng_incomplete_state_names_the_key():
    state = Rng(0).state_dict()
    del state["forks"]
    with pytest.raises(ValueError, match="'forks'"):
        Rng(1).load_state_dict(state)


# ----- task data_datasets ---------------------------------------------------

@pytest.mark.task("data_datasets")
def test_data_datasets_tensor_dataset_indexes_every_array(device):
    x = tinyflo.randn(5, 3, device=device)
    y = np.arange(5)
    ds = TensorDataset(x, y)
    assert len(ds) == 5 and ds.arrays[0] is x.data, "a tensor's array is kept without a copy"
    row, label = ds[3]
    assert np.allclose(tinyflo.tensor(row).numpy(), x.numpy()[3]) and label == 3
    assert "5 samples" in repr(ds)


@pytest.mark.task("data_datasets")
def test_data_datasets_python_lists_follow_tinyflo_dtypes():
    ds = TensorDataset([[0.5, 1.0], [2.0, 3.0]], [1, 0], [True, False])
    assert [a.dtype for a in ds.arrays] == [np.float32, np.int64, np.bool_]


@pytest.mark.task("data_datasets")
def test_data_datasets_mismatched_lengths_name_every_shape():
    with pytest.raises(ShapeError) as info:
        TensorDataset(np.zeros((100, 3)), np.zeros(99), np.zeros((100, 2)))
    message = str(info.value)
    assert "(100, 3)" in message and "(99,)" in message and "argument 1" in message
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ShapeError, match="argument 0 is 0-d"):
        TensorDataset(np.float32(1))


@pytest.mark.task("data_datasets")
def test_data_datasets_base_class_says_what_is_missing():
    with pytest.raises(NotImplementedError, match="Dataset.__len__"):
        len(Dataset())


# ----- task data_subset -----------------------------------------------------

@pytest.mark.task("data_subset")
def test_data_subset_views_without_copy():
    ds = numbered(10)
    sub = Subset(ds, np.array([9, -2, 0]))
    assert sub.indices.tolist() == [9, 8, 0] and sub.indices.dtype == np.int64
    assert [int(sub[i][1]) for i in range(len(sub))] == [9, 8, 0]
    assert sub.dataset is ds and sub.dataset.arrays[0] is ds.arrays[0]
    with pytest.raises(IndexError, match="index 10 is out of range for a dataset of 10"):
        Subset(ds, [0, 10])
    with pytest.raises(IndexError, match="-11"):
        Subset(ds, [-11])
    with pytest.raises(TypeError, match="integers"):
        Subset(ds, [1.0])
    with pytest.raises(ShapeError, match="1-D"):
        Subset(ds, [[1]])


# ----- task data_random_split -----------------------------------------------

@pytest.mark.task("data_random_split")
@given(n=st.integers(1, 60), parts=st.integers(1, 4), seed=st.integers(0, 100))
@SETTINGS
def test_data_random_split_partitions_the_samples(n, parts, seed):
    cuts = np.sort(Rng(seed).integers(0, n + 1, parts - 1))
    counts = np.diff(np.concatenate([[0], cuts, [n]])).tolist()
    subsets = random_split(numbered(n), counts, seed=seed)
    assert [len(s) for s in subsets] == counts
    seen = np.concatenate([s.indices for s in subsets])
    assert sorted(seen.tolist()) == list(range(n))


@pytest.mark.task("data_random_split")
@pytest.mark.parametrize(
    "n, fractions, counts",
    [(10, [0.8, 0.2], [8, 2]), (5, [0.5, 0.5], [3, 2]), (10, [1 / 3] * 3, [4, 3, 3]), (7, [1.0], [7])],
)
def test_data_random_split_fractions_round_like_pytorch(n, fractions, counts):
    assert [len(s) for s in random_split(numbered(n), fractions, seed=0)] == counts


@pytest.mark.task("data_random_split")
def test_data_random_split_is_seeded():
    ds = numbered(50)
    a = random_split(ds, [40, 10], seed=3)
    b = random_split(ds, [40, 10], rng=Rng(3))
    assert a[1].indices.tolist() == b[1].indices.tolist()
    assert a[1].indices.tolist() != random_split(ds, [40, 10], seed=4)[1].indices.tolist()
    tinyflo.manual_seed(1)
    c = random_split(ds, [0.5, 0.5])
    tinyflo.manual_seed(1)
    assert c[0].indices.tolist() == random_split(ds, [0.5, 0.5])[0].indices.tolist()


@pytest.mark.task("data_random_split")
@pytest.mark.parametrize(
    "lengths, error, words",
    [
        ([7, 2], ValueError, "add up to 9, but the dataset has 10"),
        ([0.5, 0.6], ValueError, "add up to 1.1"),
        ([11, -1], ValueError, "negative"),
        ([5, 0.5], ValueError, "all counts"),
        ([], ValueError, "empty"),
        (["5", "5"], TypeError, "numbers"),
    ],
)
def test_data_random_split_errors(lengths, error, words):
    with pytest.raises(error, match=words):
        random_split(numbered(10), lengths, seed=0)


@pytest.mark.task("data_random_split")
def test_data_random_split_rng_arguments():
    with pytest.raises(ValueError, match="not both"):
        random_split(numbered(4), [2, 2], rng=Rng(0), seed=0)
    with pytest.raises(TypeError, match="use seed="):
        random_split(numbered(4), [2, 2], rng=3)


# ----- task data_collate ----------------------------------------------------

@pytest.mark.task("data_collate")
def test_data_collate_stacks_field_by_field():
    samples = [(np.full((2, 3), i, np.float32), i, {"w": float(i)}) for i in range(4)]
    x, y, extra = default_collate(samples)
    assert x.shape == (4, 2, 3) and x.dtype == np.float32 and x[:, 0, 0].tolist() == [0, 1, 2, 3]
    assert y.dtype == np.int64 and y.tolist() == [0, 1, 2, 3]
    assert extra["w"].dtype == np.float32 and extra["w"].tolist() == [0, 1, 2, 3]


@pytest.mark.task("data_collate")
def test_data_collate_keeps_array_dtypes_and_devices(device):
    rows = [tinyflo.ones(3, dtype="float16", device=device) for _ in range(2)]
    stacked = default_collate(rows)
    assert stacked.shape == (2, 3) and stacked.dtype == np.float16
    assert type(stacked) is type(rows[0].data), "collating does not move data between devices"
    assert default_collate([np.uint8(1), np.uint8(2)]).dtype == np.uint8


@pytest.mark.task("data_collate")
def test_data_collate_errors_name_the_samples():
    with pytest.raises(ShapeError, match=r"sample 0 has shape \(2,\) but sample 2 has shape \(3,\)"):
        default_collate([np.zeros(2), np.zeros(2), np.zeros(3)])
    with pytest.raises(ShapeError, match="sample 1 has 1"):
        default_collate([(1, 2), (3,)])
    with pytest.raises(ValueError, match="no samples"):
        default_collate([])


# ----- task data_loader -----------------------------------------------------

@pytest.mark.task("data_loader")
@given(
    n=st.integers(1, 40), batch_size=st.integers(1, 12), shuffle=st.booleans(), drop_last=st.booleans(),
    seed=st.integers(0, 1000),
)
@SETTINGS
def test_data_loader_every_sample_once_per_epoch(n, batch_size, shuffle, drop_last, seed):
    if drop_last and n < batch_size:
        with pytest.raises(ValueError, match="leaves no batch"):
            DataLoader(numbered(n), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
        return
    loader = DataLoader(numbered(n), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
    expected_len = n // batch_size if drop_last else -(-n // batch_size)
    assert len(loader) == expected_len
    for _ in range(2):
        batches = labels_of(loader)
        assert len(batches) == expected_len
        assert all(len(b) == batch_size for b in batches[:-1])
        assert len(batches[-1]) == (batch_size if drop_last else n - batch_size * (expected_len - 1))
        seen = [v for b in batches for v in b]
        assert len(set(seen)) == len(seen), "no sample twice in an epoch"
        if not drop_last:
            assert sorted(seen) == list(range(n)), "every sample once per epoch"
        if not shuffle:
            assert seen == list(range(len(seen)))


@pytest.mark.task("data_loader")
def test_data_loader_batches_are_tensors_with_dataset_dtypes():
    x, y = next(iter(DataLoader(numbered(10), batch_size=4)))
    assert isinstance(x, Tensor) and isinstance(y, Tensor)
    assert x.shape == (4, 2) and x.dtype == tinyflo.float32 and y.dtype == tinyflo.int64
    assert x.tolist() == [[0, 0], [1, -1], [2, -2], [3, -3]]
    assert not x.requires_grad and x.device == tinyflo.device("cpu")


@pytest.mark.task("data_loader")
def test_data_loader_shuffle_reproducible_and_new_every_epoch():
    ds = numbered(30)
    a = DataLoader(ds, batch_size=7, shuffle=True, seed=11)
    b = DataLoader(ds, batch_size=7, shuffle=True, rng=Rng(11))
    epochs_a = [labels_of(a) for _ in range(3)]
    assert epochs_a == [labels_of(b) for _ in range(3)]
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]
    assert epochs_a[0] != labels_of(DataLoader(ds, batch_size=7, shuffle=True, seed=12))
    tinyflo.manual_seed(3)
    c = labels_of(DataLoader(ds, batch_size=7, shuffle=True))
    tinyflo.manual_seed(3)
    assert c == labels_of(DataLoader(ds, batch_size=7, shuffle=True))


@pytest.mark.task("data_loader")
def test_data_loader_device_placement(device):
    for target in (device, "cpu:1"):
        x, y = next(iter(DataLoader(numbered(6), batch_size=4, device=target)))
        assert x.device == y.device == tinyflo.device(target)
        assert x.tolist()[1] == [1, -1]
    on_device = TensorDataset(tinyflo.arange(6, device=device), tinyflo.arange(6, device=device) * 2)
    (x, y), _ = list(DataLoader(on_device, batch_size=4, shuffle=True, seed=0))
    assert x.device == tinyflo.device(device), "device=None keeps a batch where its data is"
    assert (y.numpy() == 2 * x.numpy()).all()


@pytest.mark.task("data_loader")
def test_data_loader_fast_path_matches_sample_by_sample():
    ds = numbered(23)
    sub = Subset(Subset(ds, np.arange(22, 2, -1)), np.arange(0, 20, 2))
    for data in (ds, sub):
        fast = DataLoader(data, batch_size=4, shuffle=True, seed=5)
        slow = DataLoader(data, batch_size=4, shuffle=True, seed=5, collate_fn=default_collate)
        for _ in range(2):
            assert [(x.tolist(), y.tolist()) for x, y in fast] == [(x.tolist(), y.tolist()) for x, y in slow]


@pytest.mark.task("data_loader")
def test_data_loader_respects_an_overridden_getitem():
    class Augmented(TensorDataset):
        def __getitem__(self, index):
            x, y = super().__getitem__(index)
            return x + 100, y

    x, _ = next(iter(DataLoader(Augmented(*numbered(4).arrays), batch_size=2)))
    assert x.tolist() == [[100, 100], [101, 99]]


@pytest.mark.task("data_loader")
def test_data_loader_custom_collate_and_plain_datasets():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.array([i, i * i], np.float32), "name": f"s{i}"}

    def collate(samples):
        return default_collate([s["x"] for s in samples]), [s["name"] for s in samples]

    batches = list(DataLoader(Squares(), batch_size=2, collate_fn=collate))
    assert len(batches) == 3
    x, names = batches[1]
    assert isinstance(x, Tensor) and x.tolist() == [[2, 4], [3, 9]] and names == ["s2", "s3"]
    plain = list(DataLoader(Squares(), batch_size=5, collate_fn=lambda s: Tensor([v["x"][1] for v in s])))
    assert plain[0].tolist() == [0, 1, 4, 9, 16]


@pytest.mark.task("data_loader")
@pytest.mark.parametrize("stop_after", [0, 1, 3, 4, 5])
def test_data_loader_state_round_trip_resumes_exactly(stop_after):
    ds = numbered(17)
    reference = DataLoader(ds, batch_size=4, shuffle=True, seed=2)
    expected = [labels_of(reference) for _ in range(3)]

    run = DataLoader(ds, batch_size=4, shuffle=True, seed=2)
    first = labels_of(run)
    it = iter(run)
    partial = [next(it)[1].tolist() for _ in range(stop_after)]
    state = json.loads(json.dumps(run.state_dict()))

    resumed = DataLoader(ds, batch_size=4, shuffle=True, seed=999)
    resumed.load_state_dict(state)
    rest = labels_of(resumed) if stop_after < len(run) else []  # all seen: the next loop is epoch 3
    assert [first, partial + rest, labels_of(resumed)] == expected
    assert resumed.epoch == 3


@pytest.mark.task("data_loader")
def test_data_loader_state_between_epochs():
    ds = numbered(9)
    run = DataLoader(ds, batch_size=3, shuffle=True, seed=8)
    assert run.state_dict()["epoch"] == 0 and run.state_dict()["batch"] == 0
    labels_of(run)
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 0
    nxt = labels_of(run)
    other = DataLoader(ds, batch_size=3, shuffle=True, seed=0)
    other.load_state_dict(state)
    assert labels_of(other) == nxt


@pytest.mark.task("data_loader")
def test_data_loader_state_after_the_last_batch_counts_the_epoch_done():
    run = DataLoader(numbered(6), batch_size=3, shuffle=True, seed=1)
    it = iter(run)
    next(it), next(it)  # every batch handed out, the loop not yet closed
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 0
    other = DataLoader(numbered(6), batch_size=3, shuffle=True, seed=5)
    other.load_state_dict(state)
    list(it)
    expected = labels_of(run)
    assert labels_of(other) == expected


@pytest.mark.task("data_loader")
def test_data_loader_refuses_a_state_that_does_not_fit():
    state = DataLoader(numbered(10), batch_size=2).state_dict()
    with pytest.raises(ValueError, match="batch_size=2.*batch_size=3"):
        DataLoader(numbered(10), batch_size=3).load_state_dict(state)
    with pytest.raises(ValueError, match="samples=10.*samples=11"):
        DataLoader(numbered(11), batch_size=2).load_state_dict(state)


@pytest.mark.task("data_loader")
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(batch_size=0), ValueError, "DataLoader got batch_size=0; expected a positive integer"),
        (dict(batch_size=2.5), ValueError, "DataLoader got batch_size=2.5; expected a positive integer"),
        (dict(batch_size=True), ValueError, "DataLoader got batch_size=True; expected a positive integer"),
        (dict(shuffle="yes"), ValueError, "DataLoader got shuffle='yes'; expected True or False"),
        (dict(drop_last=1), ValueError, "DataLoader got drop_last=1; expected True or False"),
        (dict(collate_fn=3), TypeError, "collate_fn must be callable"),
        (dict(batch_size=8, drop_last=True), ValueError, "drop_last=True with batch_size=8 and a dataset of 5"),
        (dict(rng=Rng(0), seed=0), ValueError, "not both"),
        (dict(device="tpu"), ValueError, "device"),
    ],
)
def test_data_loader_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        DataLoader(numbered(5), **kwargs)


@pytest.mark.task("data_loader")
def test_data_loader_errors_about_the_dataset():
    with pytest.raises(ValueError, match="empty"):
        DataLoader(TensorDataset(np.zeros((0, 3))))
    with pytest.raises(TypeError, match="__len__ and __getitem__"):
        DataLoader(42)


@pytest.mark.task("data_loader")
def test_data_loader_refuses_unsupported_dtypes():
    loader = DataLoader(TensorDataset(np.zeros((4, 2), np.complex64)), batch_size=2)
    with pytest.raises(TypeError, match="complex64"):
        next(iter(loader))
