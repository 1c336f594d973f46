"""PointPainting scores of the points image_2 sees: a Dirichlet draw around the class of the object hit."""

from __future__ import annotations

import numpy as np

from pgnn.data.kitti import PAINTED_CLASSES

# PointPainting column of each class (PAINTED_CLASSES order: background, bicycle_or_rider, car, pedestrian).
_PAINT_INDEX: dict[str, int] = {
    "Car": PAINTED_CLASSES.index("car"),
    "Van": PAINTED_CLASSES.index("car"),
    "Pedestrian": PAINTED_CLASSES.index("pedestrian"),
    "Cyclist": PAINTED_CLASSES.index("bicycle_or_rider"),
}


def paint_points(
    points: np.ndarray,
    owner: np.ndarray,
    kinds: tuple[str, ...],
    concentration: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """PointPainting rows: scores drawn from Dirichlet(0.5 + concentration * one-hot(class of the hit)).

    Shapes:
        points: (M, 4) float32, owner: (M,) object row or -1 -> (M, 8) float64, score rows summing to 1.
    """
    paint_of_object = np.array([_PAINT_INDEX[k] for k in kinds] + [0], dtype=np.int64)  # owner -1 -> last
    cls = paint_of_object[owner]  # (M,)
    alpha = np.full((points.shape[0], len(PAINTED_CLASSES)), 0.5)
    alpha[np.arange(points.shape[0]), cls] += concentration
    draws = rng.gamma(alpha)  # (M, 4)
    scores = draws / draws.sum(axis=1, keepdims=True)
    return np.concatenate([points.astype(np.float64), scores], axis=1)
