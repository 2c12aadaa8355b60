"""The row fast path of the gradient of an integer lookup: the same bits as NumPy's add.at."""

import numpy as np
import pytest

from tinyflo.core.tensor import _scatter_add


@pytest.mark.parametrize("shape, index_shape, negative", [
    ((65, 128), (12, 64), False), ((10, 3, 4), (7,), True), ((5,), (9,), False), ((6, 2), (3, 4), True),
    ((4, 3), (), False),
])
def test_rows_add_up_as_add_at_does(shape, index_shape, negative):
    rng = np.random.default_rng(0)
    index = rng.integers(-shape[0] if negative else 0, shape[0], index_shape)
    values = rng.standard_normal(index_shape + shape[1:]).astype(np.float32)
    start = rng.standard_normal(shape).astype(np.float32)
    expected, got = start.copy(), start.copy()
    np.add.at(expected, index, values)
    _scatter_add(got, index, values)
    assert np.array_equal(got.view(np.int32), expected.view(np.int32))


def test_a_broadcast_value_and_a_strided_target_still_add_up():
    index = np.array([0, 2, 0])
    expected, got = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    np.add.at(expected, index, np.float32(1.5))
    _scatter_add(got, index, np.float32(1.5))
    assert np.array_equal(got, expected)
    strided = np.zeros((4, 6), np.float32)[:, ::2]
    _scatter_add(strided, index, np.ones((3, 3), np.float32))
    assert strided[0].tolist() == [2, 2, 2] and strided[2].tolist() == [1, 1, 1]
