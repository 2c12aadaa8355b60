"""tinyflo.datasets: the bundled digits, verified MNIST-format and text files, synthetic sets.

MNIST, Fashion-MNIST and Tiny Shakespeare are read where the package looks for them
(``milestones.find_data``: ``$TINYFLO_DATA``, else ``~/.cache/tinyflo``, then ``../shared/data``;
skipped otherwise). Nothing is ever downloaded: every test
runs with the network downloader replaced by one that fails.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from tinyflo import datasets
from tinyflo.core.data import DataLoader, TensorDataset
from tinyflo.datasets import ChecksumError
from tinyflo.milestones import find_data

# looked up once, before the fixture below points $TINYFLO_DATA at an empty folder
DATA = {name: find_data(name, next(iter(hashes))) for name, (hashes, _) in datasets.DOWNLOADS.items()}
REAL_DOWNLOAD = datasets._download


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch, tmp_path):
    """Fail any download, and point the default cache at an empty folder."""

    def refuse(urls, path, sha256):
        raise AssertionError(f"a test tried to download {path.name} from {urls}")

    monkeypatch.setattr(datasets, "_download", refuse)
    monkeypatch.setenv("TINYFLO_DATA", str(tmp_path / "cache"))


def shared(name: str) -> Path:
    """The folder of data set ``name`` on this machine (the test skips without it)."""
    if DATA[name] is None:
        pytest.skip(f"no {name} here (tinyflo download {name}, or set TINYFLO_DATA)")
    return DATA[name]


def copy_of(folder: Path, tmp_path: Path, *names: str) -> Path:
    """A writable copy of some of a data folder's files."""
    target = tmp_path / folder.name
    target.mkdir(parents=True)
    for name in names:
        shutil.copyfile(folder / name, target / name)
    return target


# ----- the bundled digits ---------------------------------------------------

def test_digits_shapes_dtypes_and_split():
    train, test = datasets.digits(), datasets.digits(train=False)
    assert isinstance(train, TensorDataset) and len(train) == 1438 and len(test) == 359
    x, y = train.arrays
    assert x.shape == (1438, 1, 8, 8) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() == 0 and x.max() == 1 and np.all((x * 16) == np.round(x * 16)), "raw 0..16 divided by 16"
    xt, yt = datasets.digits(train=False, flatten=True, as_arrays=True)
    assert xt.shape == (359, 64) and set(yt.tolist()) == set(range(10))
    counts = np.bincount(np.concatenate([y, yt]))
    assert counts.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180], "scikit-learn's digits"
    share = np.bincount(yt) / counts
    assert np.all(np.abs(share - 0.2) < 0.01), "stratified 80/20"
    assert float((x * 16).sum() + (xt * 16).sum()) == 561718.0, "the pixels of sklearn's digits.csv"


def test_digits_is_deterministic_and_trains_through_a_loader():
    a, b = datasets.digits(as_arrays=True), datasets.digits(as_arrays=True)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    xb, yb = next(iter(DataLoader(datasets.digits(), batch_size=32, shuffle=True, seed=0)))
    assert xb.shape == (32, 1, 8, 8) and yb.shape == (32,)


def test_digits_file_is_in_the_package_with_its_hash():
    data = (Path(datasets.__file__).parent / "data" / datasets.DIGITS_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == datasets.DIGITS_SHA256
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"data/*.gz"' in pyproject, "the bundled files must be package data"


def test_digits_refuses_a_tampered_copy(tmp_path):
    original = Path(datasets.__file__).parent / "data" / datasets.DIGITS_FILE
    good = tmp_path / "good.gz"
    shutil.copyfile(original, good)
    assert datasets.digits(path=good, as_arrays=True)[0].shape == (1438, 1, 8, 8)
    raw = bytearray(gzip.decompress(original.read_bytes()))
    raw[100] ^= 1  # one pixel changed, recompressed: still a valid gzip and IDX file
    tampered = tmp_path / "tampered.gz"
    tampered.write_bytes(gzip.compress(bytes(raw), mtime=0))
    with pytest.raises(ChecksumError) as info:
        datasets.digits(path=tampered)
    message = str(info.value)
    assert "tampered.gz" in message and datasets.DIGITS_SHA256 in message
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in message


# ----- MNIST and Fashion-MNIST ----------------------------------------------

@pytest.mark.parametrize(
    "loader, folder, first_labels, pixel_sums",
    [
        (datasets.mnist, "mnist", [5, 0, 4, 1, 9, 2, 1, 3, 1, 4], (1567298545, 264923200)),
        (datasets.fashion_mnist, "fashion-mnist", [9, 0, 0, 3, 0, 2, 7, 2, 5, 5], (3431114169, 573469082)),
    ],
)
def test_mnist_format_files_parse(loader, folder, first_labels, pixel_sums):
    root = shared(folder)
    for train, count, pixel_sum in ((True, 60000, pixel_sums[0]), (False, 10000, pixel_sums[1])):
        x, y = loader(root, train=train, as_arrays=True)
        assert x.shape == (count, 1, 28, 28) and x.dtype == np.float32
        assert y.shape == (count,) and y.dtype == np.int64 and y.min() == 0 and y.max() == 9
        assert x.min() == 0 and x.max() == 1
        assert x.sum(dtype=np.float64) * 255 == pytest.approx(pixel_sum, rel=1e-7), "the raw pixels' known sum"
        if train:
            assert y[:10].tolist() == first_labels
    flat = loader(root, train=False, flatten=True)
    assert isinstance(flat, TensorDataset) and flat.arrays[0].shape == (10000, 784)


def test_mnist_label_counts():
    y = datasets.mnist(shared("mnist"), train=False, as_arrays=True)[1]
    assert np.bincount(y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_mnist_default_root_and_environment(tmp_path, monkeypatch):
    folder = shared("mnist")
    cache = tmp_path / "data"
    copy_of(folder, cache, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    monkeypatch.setenv("TINYFLO_DATA", str(cache))
    assert datasets.data_root("mnist") == cache / "mnist"
    assert len(datasets.mnist(train=False)) == 10000
    monkeypatch.delenv("TINYFLO_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datasets.data_root("mnist") == tmp_path / "xdg" / "tinyflo" / "mnist"


def test_mnist_missing_file_says_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        datasets.mnist(tmp_path / "nowhere")
    message = str(info.value)
    assert "train-images-idx3-ubyte.gz" in message and str(tmp_path / "nowhere") in message
    assert "download=True" in message


@pytest.mark.parametrize("damage", ["truncated", "one byte altered"])
def test_mnist_refuses_damaged_files(tmp_path, damage):
    folder = shared("mnist")
    name = "t10k-labels-idx1-ubyte.gz"
    root = copy_of(folder, tmp_path, "t10k-images-idx3-ubyte.gz", name)
    data = bytearray((root / name).read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    (root / name).write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as info:
        datasets.mnist(root, train=False)
    message = str(info.value)
    assert name in message and datasets.MNIST_SHA256[name] in message
    assert hashlib.sha256(bytes(data)).hexdigest() in message


def test_mnist_download_is_only_attempted_when_asked(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(datasets, "_download", lambda urls, path, sha256: calls.append(path))
    with pytest.raises(FileNotFoundError):
        datasets.mnist(tmp_path, train=False)
    assert calls == []
    with pytest.raises(FileNotFoundError):  # the fake downloader writes nothing
        datasets.mnist(tmp_path, train=False, download=True)
    assert calls == [tmp_path / "t10k-images-idx3-ubyte.gz"]


def test_download_writes_atomically_and_verifies(tmp_path, monkeypatch):
    """The real downloader against local file:// mirrors: no network is involved."""
    folder = shared("mnist")
    name = "t10k-labels-idx1-ubyte.gz"
    good = tmp_path / "good"
    bad = tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    shutil.copyfile(folder / name, good / name)
    (bad / name).write_bytes((folder / name).read_bytes()[:-10])
    target = tmp_path / "cache" / name
    with pytest.raises(RuntimeError) as info:
        REAL_DOWNLOAD([bad.as_uri() + "/" + name], target, datasets.MNIST_SHA256[name])
    assert "SHA-256" in str(info.value) and not target.exists()
    assert not target.parent.exists(), "no partial file is left behind, nor the folder made for it"
    REAL_DOWNLOAD([bad.as_uri() + "/" + name, good.as_uri() + "/" + name], target, datasets.MNIST_SHA256[name])
    assert target.read_bytes() == (folder / name).read_bytes()
    assert list(target.parent.iterdir()) == [target]


def test_read_idx_checks_magic_and_dimensions():
    header = bytes([0, 0, 0x08, 2]) + (3).to_bytes(4, "big") + (2).to_bytes(4, "big")
    assert datasets.read_idx(header + bytes(range(6))).tolist() == [[0, 1], [2, 3], [4, 5]]
    assert datasets.read_idx(gzip.compress(header + bytes(6))).shape == (3, 2)
    big = bytes([0, 0, 0x0C, 1]) + (2).to_bytes(4, "big") + np.array([1, -2], ">i4").tobytes()
    assert datasets.read_idx(big).tolist() == [1, -2]
    with pytest.raises(ValueError, match=r"shape \(3, 2\).*5 follow"):
        datasets.read_idx(header + bytes(5), "x.idx")
    with pytest.raises(ValueError, match="not an IDX file"):
        datasets.read_idx(b"\x89PNG....")
    with pytest.raises(ValueError, match="not a complete gzip file"):
        datasets.read_idx(gzip.compress(header + bytes(6))[:-8])


# ----- Tiny Shakespeare -----------------------------------------------------

def test_tiny_shakespeare_text_and_vocabulary():
    corpus = datasets.tiny_shakespeare(shared("tinyshakespeare"))
    assert len(corpus.text) == 1115394 and corpus.text.startswith("First Citizen:\nBefore we proceed")
    assert len(corpus.vocab) == 65 and corpus.vocab.chars[:3] == "\n !"
    assert corpus.ids.shape == (1115394,) and corpus.ids.dtype == np.int64
    assert corpus.vocab.decode(corpus.ids[:14]) == "First Citizen:"
    train, val = corpus.split()
    assert len(train) == 1003854 and len(val) == 111540


def test_tiny_shakespeare_refuses_an_altered_copy(tmp_path):
    root = copy_of(shared("tinyshakespeare"), tmp_path, "input.txt")
    text = (root / "input.txt").read_bytes()
    (root / "input.txt").write_bytes(text.replace(b"First Citizen", b"First Citizem", 1))
    with pytest.raises(ChecksumError, match="input.txt"):
        datasets.tiny_shakespeare(root)


def test_char_vocab_round_trip_and_errors():
    vocab = datasets.CharVocab.from_text("hello, wörld ✓")
    text = "wörld, hello ✓"
    ids = vocab.encode(text)
    assert ids.dtype == np.int64 and vocab.decode(ids) == text and vocab.decode(ids.tolist()) == text
    with pytest.raises(ValueError, match=r"'z' at position 2"):
        vocab.encode("hez")
    with pytest.raises(ValueError, match="0..10"):
        vocab.decode([11])
    with pytest.raises(ValueError, match="sorted and distinct"):
        datasets.CharVocab("ba")


# ----- synthetic sets -------------------------------------------------------

@pytest.mark.parametrize(
    "make, classes",
    [(datasets.blobs, 2), (datasets.xor, 2), (datasets.spirals, 3), (datasets.moons, 2)],
)
def test_synthetic_sets_are_seeded_and_shaped(make, classes):
    x, y = make(points_per_class=50, seed=1, as_arrays=True)
    assert x.shape == (50 * classes, 2) and x.dtype == np.float32 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [50] * classes and np.all(np.diff(y) >= 0)
    again = make(points_per_class=50, seed=1, as_arrays=True)
    assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
    assert not np.array_equal(x, make(points_per_class=50, seed=2, as_arrays=True)[0])
    assert isinstance(make(points_per_class=5), TensorDataset)
    with pytest.raises(ValueError, match="points_per_class"):
        make(points_per_class=0)


@pytest.mark.parametrize("classes, features", [(2, 2), (3, 2), (5, 4)])
def test_blobs_every_pair_split_by_the_bisector(classes, features):
    x, y = datasets.blobs(200, classes=classes, features=features, seed=3, as_arrays=True)
    assert x.shape == (200 * classes, features)
    centres = np.stack([x[y == k].mean(axis=0) for k in range(classes)])
    for a in range(classes):
        for b in range(a + 1, classes):
            normal = centres[b] - centres[a]
            middle = (centres[a] + centres[b]) / 2
            assert np.all((x[y == a] - middle) @ normal < 0) and np.all((x[y == b] - middle) @ normal > 0)


def test_xor_is_xor():
    x, y = datasets.xor(101, seed=0, as_arrays=True)
    assert np.array_equal(y, ((x[:, 0] < 0) ^ (x[:, 1] < 0)).astype(np.int64))
    assert np.abs(x).min() >= 0.1


def test_spirals_match_the_demo_data():
    x, y = datasets.spirals(seed=0, as_arrays=True)
    assert x.shape == (600, 2) and np.abs(x).max() <= 1.0 + 1e-6
    rng = np.random.default_rng(0)  # the generator the demo used
    radius = np.linspace(0.05, 1.0, 200)
    angle = np.linspace(0.0, 4.0, 200) + rng.normal(0, 0.2, 200)
    assert np.allclose(x[:200], np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1))


# ----- resizing, for LeNet's 32x32 input ------------------------------------

def test_resize_follows_the_half_pixel_rule():
    # F.interpolate(mode="bilinear", align_corners=False) of [0, 1] to 4 pixels gives these.
    row = np.array([[0.0, 1.0]], np.float32)
    out = datasets.resize(np.broadcast_to(row, (2, 2)).copy(), 4)
    np.testing.assert_allclose(out[0], [0.0, 0.25, 0.75, 1.0])
    assert out.shape == (4, 4) and out.dtype == np.float32
    flat = np.full((3, 1, 8, 8), 0.5, np.float32)
    np.testing.assert_allclose(datasets.resize(flat, 13), 0.5, rtol=1e-6)
    images = np.random.default_rng(0).random((2, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(datasets.resize(images, 8), images)
    with pytest.raises(ValueError, match="size must be a positive integer; got 0"):
        datasets.resize(images, 0)


def test_digits_at_lenet_size():
    x, y = datasets.digits(train=False, as_arrays=True, size=32)
    x8, y8 = datasets.digits(train=False, as_arrays=True)
    assert x.shape == (359, 1, 32, 32) and x.dtype == np.float32
    np.testing.assert_array_equal(y, y8)
    assert 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_allclose(x.mean(), x8.mean(), rtol=0.05)  # interpolation keeps the ink
