"""Per-point input features (the original's ``input_features`` option), plus ``is`` for painted points.

| name   | columns                                   | width |
|--------|-------------------------------------------|-------|
| irgb   | reflectance, r, g, b                      | 4     |
| rgb    | r, g, b                                   | 3     |
| 0rgb   | 0, r, g, b                                | 4     |
| 0000   | 0, 0, 0, 0                                | 4     |
| i000   | reflectance, 0, 0, 0                      | 4     |
| i      | reflectance (every published config)      | 1     |
| 0      | 0                                         | 1     |
| is     | reflectance + 4 PointPainting scores      | 5     |

r, g, b are image_2's colour under the point in [0, 1]; the scores are a painted frame's (N, 4) class scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pgnn.core.errors import DataError

OptArray = np.ndarray | None
FeatureFn = Callable[..., np.ndarray]  # (intensity, rgb, scores, source="frame") -> (N, F) float32


def _intensity(intensity: np.ndarray) -> np.ndarray:
    col = np.asarray(intensity, dtype=np.float32)
    if col.ndim != 1:
        raise ValueError(f"intensity: expected shape (N,), got {col.shape}")
    return col[:, None]  # (N, 1)


def _rgb(rgb: np.ndarray | None, n: int, name: str, source: str) -> np.ndarray:
    if rgb is None:
        raise DataError(source, f"input features {name!r} need the points' image colours (rgb), got none")
    arr = np.asarray(rgb, dtype=np.float32)
    if arr.shape != (n, 3):
        raise DataError(source, f"rgb: expected shape ({n}, 3), got {arr.shape}")
    return arr


def irgb(intensity: np.ndarray, rgb: OptArray, scores: OptArray = None, source: str = "frame") -> np.ndarray:
    """[reflectance, r, g, b]. Shapes: intensity (N,), rgb (N, 3) -> (N, 4) float32."""
    i = _intensity(intensity)
    return np.hstack([i, _rgb(rgb, i.shape[0], "irgb", source)])


def rgb_only(
    intensity: np.ndarray, rgb: OptArray, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[r, g, b]. Shapes: intensity (N,), rgb (N, 3) -> (N, 3) float32."""
    return _rgb(rgb, _intensity(intensity).shape[0], "rgb", source).copy()


def zero_rgb(
    intensity: np.ndarray, rgb: OptArray, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[0, r, g, b]. Shapes: intensity (N,), rgb (N, 3) -> (N, 4) float32."""
    n = _intensity(intensity).shape[0]
    return np.hstack([np.zeros((n, 1), np.float32), _rgb(rgb, n, "0rgb", source)])


def zeros4(
    intensity: np.ndarray, rgb: OptArray = None, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[0, 0, 0, 0]. Shapes: intensity (N,) -> (N, 4) float32."""
    return np.zeros((_intensity(intensity).shape[0], 4), np.float32)


def i000(
    intensity: np.ndarray, rgb: OptArray = None, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[reflectance, 0, 0, 0]. Shapes: intensity (N,) -> (N, 4) float32."""
    i = _intensity(intensity)
    return np.hstack([i, np.zeros((i.shape[0], 3), np.float32)])


def i_only(
    intensity: np.ndarray, rgb: OptArray = None, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[reflectance]. Shapes: intensity (N,) -> (N, 1) float32."""
    return _intensity(intensity).copy()


def zero1(
    intensity: np.ndarray, rgb: OptArray = None, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[0]. Shapes: intensity (N,) -> (N, 1) float32."""
    return np.zeros((_intensity(intensity).shape[0], 1), np.float32)


def i_scores(
    intensity: np.ndarray, rgb: OptArray = None, scores: OptArray = None, source: str = "frame"
) -> np.ndarray:
    """[reflectance, 4 PointPainting scores]. Shapes: intensity (N,), scores (N, 4) -> (N, 5) float32."""
    i = _intensity(intensity)
    if scores is None:
        raise DataError(
            source,
            "input features 'is' need painted points (reflectance + 4 PointPainting scores), but this frame "
            "is not painted: load it from painted_lidar/ (load_frame(..., painted=True))",
        )
    s = np.asarray(scores, dtype=np.float32)
    if s.shape != (i.shape[0], 4):
        raise DataError(source, f"scores: expected shape ({i.shape[0]}, 4), got {s.shape}")
    return np.hstack([i, s])


# name (the original's ``input_features``) -> function
FEATURES: dict[str, FeatureFn] = {
    "irgb": irgb,
    "rgb": rgb_only,
    "0rgb": zero_rgb,
    "0000": zeros4,
    "i000": i000,
    "i": i_only,
    "0": zero1,
    "is": i_scores,
}

# name -> number of columns
FEATURE_WIDTHS: dict[str, int] = {
    "irgb": 4,
    "rgb": 3,
    "0rgb": 4,
    "0000": 4,
    "i000": 4,
    "i": 1,
    "0": 1,
    "is": 5,
}


def input_features(
    name: str,
    intensity: np.ndarray,
    rgb: np.ndarray | None = None,
    scores: np.ndarray | None = None,
    source: str = "frame",
) -> np.ndarray:
    """The feature matrix ``name`` of a frame; missing inputs are a DataError naming ``source``.

    Shapes: intensity (N,), rgb (N, 3) or None, scores (N, 4) or None -> (N, FEATURE_WIDTHS[name]) float32.
    """
    if name not in FEATURES:
        raise ValueError(f"unknown input features {name!r}; expected one of {sorted(FEATURES)}")
    return FEATURES[name](intensity, rgb, scores, source=source)
