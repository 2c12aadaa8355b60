"""Data sets for tinyflo: bundled, verified, or generated — never fetched behind your back.

Every loader follows the same rules:

* **What comes back.** Labelled data comes back as a ``TensorDataset(x, y)``
  (module 05), or as the NumPy arrays ``(x, y)`` with ``as_arrays=True``.
  ``x`` is float32 — pixels scaled to [0, 1]; images shaped ``(N, 1, H, W)``
  (channels first, what ``Conv2d`` wants) or ``(N, H*W)`` with
  ``flatten=True`` — and ``y`` holds int64 class labels. Text comes back as a
  :class:`TextCorpus`.
* **Bundled.** :func:`digits` ships inside the package (46 KB), so it works
  offline and in every test.
* **Verified files.** :func:`mnist`, :func:`fashion_mnist` and
  :func:`tiny_shakespeare` read the original files from ``root`` (default:
  ``$TINYFLO_DATA/<name>`` when that variable is set, else
  ``~/.cache/tinyflo/<name>``). Each file's SHA-256 is checked against the
  hash written below before a single byte is used; a truncated or altered
  file is a :class:`ChecksumError` naming the file and both hashes.
* **Downloads are opt-in.** Only ``download=True`` (or :func:`download`, which
  ``tinyflo download NAME`` runs) fetches a missing file,
  from the canonical mirrors, into a temporary file that is verified before
  it is renamed into place — an interrupted or corrupted download never
  leaves a file that looks complete.
* **Synthetic sets** (:func:`blobs`, :func:`xor`, :func:`spirals`,
  :func:`moons`) are generated from a seed: same seed, same points. Points
  come class by class (0 first); a ``DataLoader(shuffle=True)`` mixes them.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import tempfile
import urllib.request
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from tinyflo import environment

__all__ = [
    "ChecksumError", "CharVocab", "DOWNLOADS", "FASHION_MNIST_CLASSES", "TextCorpus", "blobs", "data_root",
    "digits", "download", "fashion_mnist", "mnist", "moons", "read_idx", "spirals", "tiny_shakespeare", "xor",
]


class ChecksumError(ValueError):
    """A data file whose SHA-256 is not the one it must have: truncated, altered or a different file."""


# ----- where files live, and how they are checked ---------------------------

def data_root(name: str, root: str | os.PathLike | None = None) -> Path:
    """The folder a data set's files are read from: ``root``, or ``$TINYFLO_DATA/name``, or ``~/.cache/tinyflo/name``."""
    if not isinstance(name, str):
        raise TypeError(f"data_root: name must be a data set's name (a str); got {_shown(name)}")
    _check_path("data_root", "root", root)
    if root is not None:
        return Path(root).expanduser()
    if (folder := environment.read("TINYFLO_DATA")) is not None:
        return folder / name
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tinyflo" / name


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check(data: bytes, expected: str, path: Path | str) -> bytes:
    """``data`` itself when its SHA-256 is ``expected``; a ChecksumError otherwise."""
    actual = _sha256(data)
    if actual != expected:
        raise ChecksumError(
            f"{path}: SHA-256 is {actual} but the original file's is {expected} "
            f"({len(data):,} bytes read): the file is truncated, altered or not the original. "
            "Delete it and fetch it again (download=True)."
        )
    return data


def _download(urls: list[str], path: Path, sha256: str) -> None:
    """Fetch ``path`` from the first mirror that serves the right bytes; write it atomically. A
    folder made for it is removed again when no mirror served it (offline: nothing left behind)."""
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]  # deepest first
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _fetch_from_mirrors(urls, path, sha256)
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # it holds something: kept, and every folder above it
                break
        raise


def _fetch_from_mirrors(urls: list[str], path: Path, sha256: str) -> None:
    """Try each mirror in turn; a RuntimeError in one line naming every mirror's failure."""
    failures = []
    for url in urls:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != sha256:
                raise ChecksumError(f"served SHA-256 {digest.hexdigest()}, expected {sha256}")
            os.replace(temp, path)  # atomic: the file appears complete and verified, or not at all
            return
        except Exception as err:  # try the next mirror; report all at the end
            failures.append(f"{url}: {err}")
        finally:
            if os.path.exists(temp):
                os.remove(temp)
    raise RuntimeError(f"could not download {path.name} from any mirror: " + "; ".join(failures))


def _fetch(name: str, filename: str, sha256: str, mirrors: list[str], root: Any, download: bool) -> bytes:
    """The verified bytes of one data file, downloading it first only when asked to."""
    path = data_root(name, root) / filename
    if not path.is_file():
        if not download:
            raise FileNotFoundError(
                f"{name}: {filename} is not in {path.parent}. Pass download=True to fetch it from "
                f"{mirrors[0]}, or put the original file there (or point root= or $TINYFLO_DATA at "
                "a folder that has it)."
            )
        _download([base + filename for base in mirrors], path, sha256)
    return _check(path.read_bytes(), sha256, path)


# ----- the IDX format (MNIST's container) -----------------------------------

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(data: bytes, name: str = "IDX data") -> np.ndarray:
    """Parse an IDX file (gzip'd or not): magic ``0 0 type ndim``, big-endian dimensions, then the values.

    The array shares the buffer of ``data`` where no conversion is needed, and is then read-only.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"read_idx: data must be the file's bytes (Path(...).read_bytes()); got {type(data).__name__}")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as err:
            raise ValueError(f"{name}: not a complete gzip file ({err})") from None
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_DTYPES or data[3] == 0:
        raise ValueError(f"{name}: not an IDX file (magic bytes {data[:4].hex()}; expected 0000 <type> <ndim>)")
    ndim, dtype = data[3], np.dtype(_IDX_DTYPES[data[2]])
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name}: IDX header cut short ({len(data)} bytes)")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(
            f"{name}: IDX header says shape {shape} ({expected:,} bytes of data) but {len(data) - header:,} follow"
        )
    return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="), copy=False)


def _resize_matrix(old: int, new: int) -> np.ndarray:
    """(new, old) weights of linear interpolation with PyTorch's align_corners=False rule."""
    centre = (np.arange(new, dtype=np.float64) + 0.5) * (old / new) - 0.5
    centre = np.clip(centre, 0, old - 1)
    left = np.floor(centre).astype(np.int64)
    right = np.minimum(left + 1, old - 1)
    frac = centre - left
    weights = np.zeros((new, old))
    np.add.at(weights, (np.arange(new), left), 1 - frac)
    np.add.at(weights, (np.arange(new), right), frac)
    return weights.astype(np.float32)


def resize(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of (..., H, W) float images to (..., size, size), as F.interpolate(align_corners=False).

    Interpolation is separable, so it is two small matrix products: rows, then columns.
    """
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ValueError(f"resize: size must be a positive integer; got {_shown(size)}")
    rows = _resize_matrix(images.shape[-2], int(size))
    cols = _resize_matrix(images.shape[-1], int(size))
    return (rows @ images @ cols.T).astype(images.dtype, copy=False)


def _labelled(images: np.ndarray, labels: np.ndarray, scale: float, flatten: bool, as_arrays: bool,
              size: int | None = None):
    """float32 pixels in [0, 1] shaped (N, 1, H, W) or (N, H*W), int64 labels; a TensorDataset unless as_arrays."""
    x = images.astype(np.float32) / np.float32(scale)
    if size is not None and size != x.shape[-1]:
        x = resize(x, size)
    x = x.reshape(len(x), -1) if flatten else x.reshape(len(x), 1, *x.shape[1:])
    return _result(x, labels.astype(np.int64), as_arrays)


def _result(x: np.ndarray, y: np.ndarray, as_arrays: bool):
    if as_arrays:
        return x, y
    # Imported here, not at the top: module 05's notebook hides tinyflo.core.data and uses as_arrays=True.
    from tinyflo.core.data import TensorDataset

    return TensorDataset(x, y)


# ----- the 8x8 digits, bundled ----------------------------------------------

DIGITS_FILE = "digits-idx2-ubyte.gz"
DIGITS_SHA256 = "2c49d37be7263a6b252f3d210b3caf4576632af9e0e5308052ef666fdf76c0a4"
DIGITS_TRAIN = 1438  # the file holds the training rows first, then the 359 test rows


def digits(train: bool = True, flatten: bool = False, as_arrays: bool = False, path: Any = None,
           size: int | None = None):
    """The 8x8 handwritten digits (UCI optdigits test set, as scikit-learn bundles it), shipped with tinyflo.

    1,797 images of 10 classes, split once (``scripts/make_digits.py``) into
    1,438 training and 359 test images, stratified 80/20 with a fixed seed.
    Pixels are the raw 0..16 counts divided by 16 (float32), labels int64.
    ``path`` reads another copy of the file instead of the bundled one; its
    SHA-256 must still be the bundled file's. ``size`` resizes the images
    bilinearly (``size=32`` gives LeNet-5 the input size of the 1998 paper).
    """
    _check_options("digits", train=train, flatten=flatten, as_arrays=as_arrays, size=size)
    _check_path("digits", "path", path)
    if path is None:
        data = (resources.files("tinyflo") / "data" / DIGITS_FILE).read_bytes()
        where: Any = f"tinyflo/data/{DIGITS_FILE}"
    else:
        where = Path(path)
        if not where.is_file():
            raise FileNotFoundError(
                f"digits: no file at {where}; leave path=None to use the copy bundled with tinyflo"
            )
        data = where.read_bytes()
    table = read_idx(_check(data, DIGITS_SHA256, where), str(where))
    rows = table[:DIGITS_TRAIN] if train else table[DIGITS_TRAIN:]
    return _labelled(rows[:, :64].reshape(-1, 8, 8), rows[:, 64], 16.0, flatten, as_arrays, size)


# ----- MNIST and Fashion-MNIST, from the original IDX files -----------------

MNIST_MIRRORS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
]
MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
FASHION_MNIST_MIRRORS = [
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
]
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
}
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)


def _idx_pair(name: str, hashes: dict, mirrors: list[str], root: Any, train: bool, download: bool):
    """Images (N, 28, 28) and labels (N,) of one MNIST-format split, checked file by file."""
    part, count = ("train", 60000) if train else ("t10k", 10000)
    arrays = {}
    for kind, shape in (("images", (count, 28, 28)), ("labels", (count,))):
        filename = f"{part}-{kind}-idx{len(shape)}-ubyte.gz"
        array = read_idx(_fetch(name, filename, hashes[filename], mirrors, root, download), filename)
        if array.shape != shape or array.dtype != np.uint8:
            raise ValueError(f"{name}: {filename} holds {array.dtype} of shape {array.shape}; expected uint8 {shape}")
        arrays[kind] = array
    if arrays["labels"].max() > 9:
        raise ValueError(f"{name}: {part} labels go up to {arrays['labels'].max()}; expected 0..9")
    return arrays["images"], arrays["labels"]


def mnist(root: Any = None, train: bool = True, download: bool = False, flatten: bool = False,
          as_arrays: bool = False, size: int | None = None):
    """MNIST handwritten digits: 60,000 training or 10,000 test 28x28 images, 10 classes."""
    _check_options("mnist", train=train, download=download, flatten=flatten, as_arrays=as_arrays, size=size)
    _check_path("mnist", "root", root)
    images, labels = _idx_pair("mnist", MNIST_SHA256, MNIST_MIRRORS, root, train, download)
    return _labelled(images, labels, 255.0, flatten, as_arrays, size)


def fashion_mnist(root: Any = None, train: bool = True, download: bool = False, flatten: bool = False,
                  as_arrays: bool = False, size: int | None = None):
    """Fashion-MNIST (Zalando): 60,000 / 10,000 28x28 article images, 10 classes (FASHION_MNIST_CLASSES)."""
    _check_options("fashion_mnist", train=train, download=download, flatten=flatten, as_arrays=as_arrays, size=size)
    _check_path("fashion_mnist", "root", root)
    images, labels = _idx_pair("fashion-mnist", FASHION_MNIST_SHA256, FASHION_MNIST_MIRRORS, root, train, download)
    return _labelled(images, labels, 255.0, flatten, as_arrays, size)


# ----- Tiny Shakespeare, and character vocabularies -------------------------

SHAKESPEARE_MIRRORS = ["https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/"]
SHAKESPEARE_SHA256 = {"input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"}


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


@dataclass(frozen=True)
class CharVocab:
    """Characters ↔ ids: id ``i`` is the i-th of the sorted distinct characters."""

    chars: str
    _points: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.chars, str):
            raise TypeError(f"CharVocab: chars must be a str of sorted distinct characters (or use "
                            f"CharVocab.from_text(text)); got {type(self.chars).__name__}")
        points = _code_points(self.chars)
        if len(points) and np.any(np.diff(points.astype(np.int64)) <= 0):
            raise ValueError("CharVocab: chars must be sorted and distinct; use CharVocab.from_text(text)")
        object.__setattr__(self, "_points", points)

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        """The vocabulary of every character that occurs in ``text``."""
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """The ids of ``text``'s characters (int64); a character outside the vocabulary is a ValueError."""
        points = _code_points(text)
        ids = np.searchsorted(self._points, points)
        unknown = (ids >= len(self._points)) | (self._points[np.minimum(ids, len(self._points) - 1)] != points)
        if unknown.any():
            position = int(np.argmax(unknown))
            raise ValueError(f"CharVocab.encode: character {text[position]!r} at position {position} is not in the vocabulary")
        return ids.astype(np.int64)

    def decode(self, ids: Any) -> str:
        """The text of a sequence of ids (a list, an array or a tensor)."""
        ids = np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids).astype(np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError(f"CharVocab.decode: ids must lie in 0..{len(self) - 1}; got {ids.min()}..{ids.max()}")
        return self._points[ids].astype("<u4").tobytes().decode("utf-32-le")


@dataclass(frozen=True)
class TextCorpus:
    """A text, its character vocabulary, and the text encoded as int64 ids."""

    text: str
    vocab: CharVocab
    ids: np.ndarray = field(repr=False)

    def split(self, fraction: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """The first ``fraction`` of the ids (training) and the rest (validation), as in nanoGPT."""
        if not 0 < fraction < 1:
            raise ValueError(f"TextCorpus.split: fraction must lie strictly between 0 and 1; got {fraction}")
        cut = int(len(self.ids) * fraction)
        return self.ids[:cut], self.ids[cut:]


def tiny_shakespeare(root: Any = None, download: bool = False) -> TextCorpus:
    """Karpathy's Tiny Shakespeare (1,115,394 characters, 65 distinct) with its character vocabulary."""
    _check_options("tiny_shakespeare", download=download)
    _check_path("tiny_shakespeare", "root", root)
    data = _fetch("tinyshakespeare", "input.txt", SHAKESPEARE_SHA256["input.txt"], SHAKESPEARE_MIRRORS,
                  root, download)
    text = data.decode("utf-8")
    vocab = CharVocab.from_text(text)
    return TextCorpus(text, vocab, vocab.encode(text))


# ----- fetching a whole data set (`tinyflo download NAME`) -------------------

DOWNLOADS = {  # data set -> (its files and their SHA-256, the mirrors that serve them)
    "mnist": (MNIST_SHA256, MNIST_MIRRORS),
    "fashion-mnist": (FASHION_MNIST_SHA256, FASHION_MNIST_MIRRORS),
    "tinyshakespeare": (SHAKESPEARE_SHA256, SHAKESPEARE_MIRRORS),
}


def download(name: str, root: str | os.PathLike | None = None) -> Path:
    """Fetch every file of data set ``name`` that is missing, check every file's SHA-256; return their folder."""
    if not isinstance(name, str) or name not in DOWNLOADS:
        raise ValueError(f"download: expected one of {', '.join(DOWNLOADS)}; got {name!r}")
    hashes, mirrors = DOWNLOADS[name]
    for filename, sha256 in hashes.items():
        _fetch(name, filename, sha256, mirrors, root, download=True)
    return data_root(name, root)


# ----- synthetic, seeded ----------------------------------------------------

def _check_counts(owner: str, points_per_class: int, classes: int = 2, seed: int = 0, noise: float = 0.0,
                  as_arrays: bool = False) -> None:
    """The settings every synthetic data set shares, checked before a number is drawn."""
    for name, value, least in (("points_per_class", points_per_class, 1), ("classes", classes, 2),
                               ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
            raise ValueError(f"{owner}: {name} must be an integer of at least {least}; got {_shown(value)}")
    if isinstance(noise, bool) or not isinstance(noise, int | float | np.integer | np.floating) or not noise >= 0:
        raise ValueError(f"{owner}: noise must be a number >= 0 (the std of the Gaussian noise); got {_shown(noise)}")
    _check_options(owner, as_arrays=as_arrays)


def _check_options(owner: str, size: Any = None, **flags: Any) -> None:
    """A loader's True/False flags and its image size (a positive integer or None), before any file is read."""
    for name, value in flags.items():
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{owner}: {name} must be True or False; got {_shown(value)}")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1):
        raise ValueError(f"{owner}: size must be a positive integer (the images' new side) or None; got {_shown(size)}")


def _shown(value: Any) -> str:
    """``value``'s repr on one line of at most 60 characters, for an error message."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _check_path(owner: str, name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bytes) or not isinstance(value, str | os.PathLike)):
        raise TypeError(f"{owner}: {name} must be a folder's or file's path (a str or os.PathLike) or None; "
                        f"got {type(value).__name__}")


def _pack(parts: list[np.ndarray], as_arrays: bool):
    x = np.concatenate(parts).astype(np.float32)
    y = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])
    return _result(x, y, as_arrays)


def blobs(points_per_class: int = 100, classes: int = 2, features: int = 2, seed: int = 0,
          as_arrays: bool = False):
    """Round clusters, one per class, that never overlap: every pair is split by a straight line.

    The centres sit on a circle of radius 2 (in the first two features); each
    class fills a ball of radius 0.4 × the distance between neighbouring
    centres, so the perpendicular bisector of two centres separates their
    classes with a margin. Linearly separable — the perceptron's data.
    """
    _check_counts("blobs", points_per_class, classes, seed, as_arrays=as_arrays)
    if isinstance(features, bool) or not isinstance(features, int) or features < 2:
        raise ValueError(f"blobs: features must be an integer of at least 2; got {features!r}")
    rng = np.random.default_rng(seed)
    radius = 0.4 * 2 * 2.0 * np.sin(np.pi / classes)
    parts = []
    for k in range(classes):
        centre = np.zeros(features)
        centre[:2] = 2.0 * np.cos(2 * np.pi * k / classes), 2.0 * np.sin(2 * np.pi * k / classes)
        direction = rng.standard_normal((points_per_class, features))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        distance = radius * rng.random((points_per_class, 1)) ** (1 / features)  # uniform in the ball
        parts.append(centre + direction * distance)
    return _pack(parts, as_arrays)


def xor(points_per_class: int = 100, seed: int = 0, as_arrays: bool = False):
    """XOR: class 1 where exactly one coordinate is negative. No line separates it (Minsky & Papert, 1969).

    Each coordinate's size is uniform in [0.1, 1], so the classes keep a gap
    around the axes; each class is split evenly between its two quadrants.
    """
    _check_counts("xor", points_per_class, seed=seed, as_arrays=as_arrays)
    rng = np.random.default_rng(seed)
    parts = []
    for quadrants in (((1, 1), (-1, -1)), ((1, -1), (-1, 1))):
        sizes = (points_per_class - points_per_class // 2, points_per_class // 2)
        signs = np.concatenate([np.tile(q, (n, 1)) for q, n in zip(quadrants, sizes)])
        parts.append(signs * rng.uniform(0.1, 1.0, (points_per_class, 2)))
    return _pack(parts, as_arrays)


def spirals(points_per_class: int = 200, classes: int = 3, noise: float = 0.2, seed: int = 0,
            as_arrays: bool = False):
    """Interleaved 2-D spirals, one arm per class (radius 0.05..1): not separable by a line."""
    _check_counts("spirals", points_per_class, classes, seed, noise, as_arrays)
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(classes):
        radius = np.linspace(0.05, 1.0, points_per_class)
        angle = np.linspace(k * 4.0, (k + 1) * 4.0, points_per_class) + rng.normal(0, noise, points_per_class)
        parts.append(np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1))
    return _pack(parts, as_arrays)


def moons(points_per_class: int = 100, noise: float = 0.1, seed: int = 0, as_arrays: bool = False):
    """Two interleaving half circles (class 0 on top), with Gaussian noise of std ``noise``."""
    _check_counts("moons", points_per_class, seed=seed, noise=noise, as_arrays=as_arrays)
    rng = np.random.default_rng(seed)
    t = np.linspace(0, np.pi, points_per_class)
    upper = np.stack([np.cos(t), np.sin(t)], axis=1)
    lower = np.stack([1 - np.cos(t), 0.5 - np.sin(t)], axis=1)
    return _pack([part + rng.normal(0, noise, part.shape) for part in (upper, lower)], as_arrays)
