"""Tests of pgnn.graphs.features: columns and shapes of every input feature option, and clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pgnn.core.errors import DataError
from pgnn.data.frames import load_frame
from pgnn.graphs.features import FEATURE_WIDTHS, FEATURES, input_features

N = 6
INTENSITY = np.linspace(0.0, 0.5, N)
RGB = np.arange(N * 3, dtype=np.float64).reshape(N, 3) / 20.0
SCORES = np.arange(N * 4, dtype=np.float64).reshape(N, 4) / 30.0


def test_every_option_has_a_width() -> None:
    assert set(FEATURES) == set(FEATURE_WIDTHS) == {"irgb", "rgb", "0rgb", "0000", "i000", "i", "0", "is"}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_shapes_and_dtype(name: str) -> None:
    out = input_features(name, INTENSITY, RGB, SCORES)
    assert out.shape == (N, FEATURE_WIDTHS[name])
    assert out.dtype == np.float32


def test_columns() -> None:
    i = INTENSITY.astype(np.float32)[:, None]
    rgb = RGB.astype(np.float32)
    zeros = np.zeros((N, 1), np.float32)
    np.testing.assert_array_equal(input_features("irgb", INTENSITY, RGB), np.hstack([i, rgb]))
    np.testing.assert_array_equal(input_features("rgb", INTENSITY, RGB), rgb)
    np.testing.assert_array_equal(input_features("0rgb", INTENSITY, RGB), np.hstack([zeros, rgb]))
    np.testing.assert_array_equal(input_features("0000", INTENSITY), np.zeros((N, 4)))
    np.testing.assert_array_equal(input_features("i000", INTENSITY), np.hstack([i, zeros, zeros, zeros]))
    np.testing.assert_array_equal(input_features("i", INTENSITY), i)
    np.testing.assert_array_equal(input_features("0", INTENSITY), zeros)
    np.testing.assert_array_equal(
        input_features("is", INTENSITY, None, SCORES), np.hstack([i, SCORES.astype(np.float32)])
    )


def test_missing_inputs_are_clear_errors() -> None:
    with pytest.raises(DataError, match="velodyne/000001.bin: input features 'is' need painted points"):
        input_features("is", INTENSITY, RGB, None, source="velodyne/000001.bin")
    with pytest.raises(DataError, match="need the points' image colours"):
        input_features("irgb", INTENSITY, None)
    with pytest.raises(DataError, match=r"scores: expected shape \(6, 4\)"):
        input_features("is", INTENSITY, None, SCORES[:, :3])
    with pytest.raises(DataError, match="frame: input features 'is' need painted points"):
        FEATURES["is"](INTENSITY, RGB, None)  # the table's functions raise the same error
    with pytest.raises(ValueError, match="unknown input features"):
        input_features("xyz", INTENSITY)


def test_features_of_real_frames(kitti_sample: Path) -> None:
    plain = load_frame(kitti_sample, "000001")
    painted = load_frame(kitti_sample, "000001", painted=True)
    irgb = input_features("irgb", plain.intensity, plain.rgb, plain.scores)
    assert irgb.shape == (len(plain.points_rect), 4)
    assert 0.0 <= irgb.min() and irgb.max() <= 1.0
    scores = input_features("is", painted.intensity, painted.rgb, painted.scores)
    assert scores.shape == (len(painted.points_rect), 5)
    with pytest.raises(DataError, match="not painted"):
        input_features("is", plain.intensity, plain.rgb, plain.scores)
