"""Build tinyflo's bundled 8x8 digits file, ``src/tinyflo/data/digits-idx2-ubyte.gz``, once.

The source is the copy of the UCI "optdigits" test set (1,797 images of 8x8
pixels with values 0..16, ten classes) that scikit-learn bundles as
``sklearn/datasets/data/digits.csv.gz``: 64 pixel columns then the label. It is
read from an installed scikit-learn, or from a wheel, without importing it::

    pip download --no-deps scikit-learn -d /tmp/skl
    python scripts/make_digits.py --wheel /tmp/skl/scikit_learn-*.whl

The output is one IDX file (the MNIST container format, so one parser reads
both) holding a uint8 array of shape (1797, 65): 64 pixels, then the label.
Rows are in a fixed order that *is* the train/test split: first the training
rows, then the test rows, each part in scikit-learn's original order. The
split is stratified 80/20: in each class, ``round(0.2 * count)`` rows drawn
with ``numpy.random.default_rng(SPLIT_SEED)`` go to test (359 test rows,
1,438 training rows). It is computed here, once, so loading never depends on
NumPy's random streams. The gzip stream has no file name and mtime 0, so the
same input gives the same bytes. Paste the printed SHA-256 into
``tinyflo/datasets.py`` (``DIGITS_SHA256``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import struct
import zipfile
from pathlib import Path

import numpy as np

SPLIT_SEED = 0
TEST_FRACTION = 0.2
CSV_IN_WHEEL = "sklearn/datasets/data/digits.csv.gz"
OUT = Path(__file__).resolve().parents[1] / "src" / "tinyflo" / "data" / "digits-idx2-ubyte.gz"


def read_sklearn_csv(wheel: Path | None) -> np.ndarray:
    """The (1797, 65) table of scikit-learn's digits.csv.gz, from a wheel or an installed sklearn."""
    if wheel is not None:
        with zipfile.ZipFile(wheel) as archive:
            compressed = archive.read(CSV_IN_WHEEL)
    else:
        import sklearn  # only to find the file; nothing of sklearn runs

        compressed = (Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz").read_bytes()
    text = gzip.decompress(compressed).decode("ascii")
    table = np.loadtxt(io.StringIO(text), delimiter=",")
    if table.shape != (1797, 65) or table.min() < 0 or table[:, :64].max() > 16 or table[:, 64].max() > 9:
        raise SystemExit(f"unexpected digits table: shape {table.shape}, values {table.min()}..{table.max()}")
    return table.astype(np.uint8)


def split_order(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the training and the test part (stratified, seeded, each sorted)."""
    rng = np.random.default_rng(SPLIT_SEED)
    test = []
    for c in range(10):
        rows = np.flatnonzero(labels == c)
        test.extend(rows[rng.permutation(len(rows))[: round(TEST_FRACTION * len(rows))]])
    test = np.sort(np.array(test))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test


def idx_bytes(array: np.ndarray) -> bytes:
    """A uint8 array in the IDX format: magic (0, 0, 0x08, ndim), big-endian dims, the data."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a scikit-learn wheel to read digits.csv.gz from")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()
    table = read_sklearn_csv(args.wheel)
    train, test = split_order(table[:, 64])
    data = gzip.compress(idx_bytes(table[np.concatenate([train, test])]), compresslevel=9, mtime=0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data)} bytes): {len(train)} train + {len(test)} test rows")
    print(f"DIGITS_SHA256 = {hashlib.sha256(data).hexdigest()!r}")


if __name__ == "__main__":
    main()
