"""Training records built on the fly: ground-truth sampling and augmentation, then graph, features, targets.

The original Point-GNN rebuilt every training sample from the raw frame (``train.py``'s ``fetch_data``):
paste database objects (when its train config had ``crop_aug``), run the ``data_aug_configs`` ops, build the
training graph (random keypoints), pick the input features and assign the vertex targets. A precomputed
graph cache cannot do that, so :class:`AugmentedRecords` is a record source (``len``, ``[i]``) that does it
per sample, on the prepared frames of ``pgnn.data.prepare``. Its records have exactly the layout of
:func:`pgnn.graphs.records.graph_record`'s (the cached records), so :func:`pgnn.training.loop.train` takes
either.

Reproducibility. Sample ``i`` of epoch ``e`` draws every random number (pasting, each augmentation op, the
graph's keypoints and neighbour caps, in that order) from one generator seeded by ``(seed, e, frame id)``
(:func:`augment_rng`). Nothing else enters: not the worker that builds it, not the order of the requests,
not how often the process was restarted. A resumed run therefore sees the very samples an uninterrupted
run saw, with any number of DataLoader workers or DDP ranks. The training loop tells the source the epoch
through :meth:`AugmentedRecords.set_epoch` (``pgnn.training.loop`` calls it, in the process that builds the
record,
before each fetch). With nothing to augment (no steps, no sampling) the record is the cached one:
:func:`pgnn.graphs.records.graph_record`'s graph and targets, built from
:func:`pgnn.graphs.records.frame_rng` and so the
same every epoch.

Attributes stay with their points. The frame's points become a :class:`pgnn.data.points.PointSet` whose
attribute columns (intensity, r, g, b and, for painted frames, the four PointPainting scores) every op
drops, reorders and pastes with the coordinates; the input features are then read from those columns
(:func:`point_columns`), never from the frame's original arrays.

Workers. A source pickles as its paths, configs and frame index (about 2 KB; 70 KB for KITTI's 3712 train
frames); each process reads the prepared shards it needs, and the database, on first use and keeps them
(:class:`PreparedFrames`). Memory per process is about the prepared split's size (28 bytes a point, 44
painted: KITTI's 3712 train frames of ~19k points are about 2.0 GB, 3.1 GB painted) unless
``max_cached_shards`` bounds it (then a shard is read again when needed, for every frame it holds, which
with shuffled epochs and 8-frame shards can cost more than building the record).

Cost: ``benchmarks/augmented_records.py`` measures a record built with the original's augmentation, with
ground-truth sampling as well (``GtSampleConfig()``'s 22 crops a scene, each up to 100 tries: far
costlier), and a cached record read (one machine's figures: benchmarks/README.md, "Measurements
behind the code"). A training step of B frames taking T ms keeps up with W >= B x record ms / T loader
workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pgnn.config.augment import AugmentConfig
from pgnn.config.gt_sampling import GtSampleConfig
from pgnn.core.errors import DataError
from pgnn.data.augment import apply_augmentations
from pgnn.data.frames import Frame
from pgnn.data.gt_db import GtDatabase, read_gt_db
from pgnn.data.gt_paste import sample_and_paste
from pgnn.data.kitti import PAINTED_CLASSES
from pgnn.data.labels import labels_to_boxes
from pgnn.data.points import PointSet, point_set_from_frame
from pgnn.data.prepare import PreparedFrames
from pgnn.graphs.records import AUGMENT_STREAM, frame_rng, scene_record

__all__ = [
    "AugmentedRecords",
    "augment_rng",
    "augmented_record",
    "point_columns",
    "point_set_record",
]

_SCORE_NAMES = tuple(f"score_{c}" for c in PAINTED_CLASSES)


def augment_rng(seed: int, epoch: int, frame_id: str) -> np.random.Generator:
    """The generator of one training sample: :func:`pgnn.graphs.records.frame_rng` on the augmentation
    stream, a pure function of (seed, epoch, frame id)."""
    if epoch < 0:
        raise ValueError(f"epoch: expected >= 0, got {epoch}")
    return frame_rng(seed, frame_id, AUGMENT_STREAM, epoch)


# ----------------------------------------------------------------------------------------------------------
# One sample


def point_columns(points: PointSet) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The intensity, image colours and painted scores of a point set, read by its attribute names.

    Unnamed columns are taken in :func:`pgnn.data.points.point_set_from_frame`'s order (4 or 8 columns).

    Shapes:
        points: N points -> intensity (N,), rgb (N, 3), scores (N, 4) or None, float32
    """
    names = points.attr_names
    if not names:
        k = points.attrs.shape[1]
        if k not in (4, 8):
            raise ValueError(f"point attributes: expected 4 or 8 unnamed columns, got {k}")
        names = ("intensity", "r", "g", "b", *_SCORE_NAMES)[:k]
    col = {n: j for j, n in enumerate(names)}
    missing = [n for n in ("intensity", "r", "g", "b") if n not in col]
    if missing:
        raise ValueError(f"point attributes: expected columns intensity, r, g, b; missing {missing}")
    attrs = points.attrs
    intensity = attrs[:, col["intensity"]]  # (N,)
    rgb = attrs[:, [col["r"], col["g"], col["b"]]]  # (N, 3)
    scores = attrs[:, [col[n] for n in _SCORE_NAMES]] if all(n in col for n in _SCORE_NAMES) else None
    return intensity, rgb, scores


def point_set_record(
    frame_id: str,
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    graph_cfg: Any,
    targets_cfg: Any,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """:func:`pgnn.graphs.records.scene_record` of an (augmented) point set, its columns read by name.

    Shapes: points: N0 points; boxes: (M, 7); names: M -> the record layout of ``scene_record``.
    """
    intensity, rgb, scores = point_columns(points)
    return scene_record(
        frame_id, points.xyz, intensity, rgb, scores, boxes, names, graph_cfg, targets_cfg, rng
    )


def augmented_record(
    frame: Frame,
    graph_cfg: Any,
    targets_cfg: Any,
    augment: AugmentConfig,
    rng: np.random.Generator,
    *,
    gt_db: GtDatabase | None = None,
    gt_sampling: GtSampleConfig | None = None,
) -> dict[str, np.ndarray]:
    """One training sample of ``frame``: paste database objects (with ``gt_sampling``), run ``augment``'s
    steps, then :func:`point_set_record`; all randomness from ``rng``, in that order.

    Shapes: as :func:`pgnn.graphs.records.scene_record`.
    """
    points = point_set_from_frame(frame)
    boxes = labels_to_boxes(frame.labels).reshape(-1, 7)  # (M, 7)
    names = tuple(lab.type for lab in frame.labels)
    if gt_sampling is not None:
        if gt_db is None:
            raise ValueError("augmented_record: gt_sampling needs a ground-truth database (gt_db)")
        points, boxes, names = sample_and_paste(points, boxes, names, gt_db, gt_sampling, rng)
    points, boxes, names = apply_augmentations(points, boxes, names, augment, rng)
    return point_set_record(frame.frame_id, points, boxes, names, graph_cfg, targets_cfg, rng)


# ----------------------------------------------------------------------------------------------------------
# Sources


class AugmentedRecords:
    """A training record source over prepared frames that rebuilds every sample (see the module docstring).

    ``frames``: a prepared split folder (read lazily, :class:`PreparedFrames`) or frames in memory.
    ``resample``: with no augmentation either, still draw a fresh random graph every epoch (seeded by (seed,
    epoch, frame)) instead of the cached record's.
    ``gt_db``: the ground-truth database, or the path of its parquet file (read lazily); needed when
    ``gt_sampling`` is set. ``source[i]`` is frame i's record for the current epoch (:meth:`set_epoch`).
    """

    def __init__(
        self,
        frames: str | Path | Sequence[Frame],
        graph_cfg: Any,
        targets_cfg: Any,
        augment: AugmentConfig | None = None,
        *,
        seed: int = 0,
        gt_sampling: GtSampleConfig | None = None,
        gt_db: GtDatabase | str | Path | None = None,
        max_cached_shards: int | None = None,
        resample: bool = False,
    ) -> None:
        if isinstance(frames, str | Path):
            frames = PreparedFrames(frames, max_cached_shards)
        if gt_sampling is not None and gt_db is None:
            raise ValueError("AugmentedRecords: gt_sampling needs a ground-truth database (gt_db)")
        self.frames = frames
        self.graph_cfg = graph_cfg
        self.targets_cfg = targets_cfg
        self.augment = augment if augment is not None else AugmentConfig()
        self.seed = int(seed)
        self.gt_sampling = gt_sampling
        self._db_path = None if gt_db is None or isinstance(gt_db, GtDatabase) else Path(gt_db)
        self._db: GtDatabase | None = gt_db if isinstance(gt_db, GtDatabase) else None
        self.resample = bool(resample)
        self.epoch = 0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._db_path is not None:
            state["_db"] = None  # each process reads the database itself
        return state

    @property
    def augments(self) -> bool:
        """Whether samples differ between epochs (some augmentation step or ground-truth sampling)."""
        return bool(self.augment.steps) or self.gt_sampling is not None

    @property
    def rebuilds(self) -> bool:
        """Whether every epoch builds new records (augmentation, sampling, or a fresh random graph)."""
        return self.augments or self.resample

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next records belong to (the training loop calls this before each fetch)."""
        if epoch < 0:
            raise ValueError(f"epoch: expected >= 0, got {epoch}")
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.record(i, self.epoch)

    def record(self, i: int, epoch: int) -> dict[str, np.ndarray]:
        """Frame ``i``'s record in ``epoch`` (a pure function of the configs, seed, epoch and frame)."""
        if not 0 <= i < len(self.frames):
            raise IndexError(f"record {i} of {len(self.frames)}")
        frame = self.frames[i]
        if not self.rebuilds:
            rng = frame_rng(self.seed, frame.frame_id)  # the cached record: the same every epoch
            return augmented_record(frame, self.graph_cfg, self.targets_cfg, self.augment, rng)
        rng = augment_rng(self.seed, epoch, frame.frame_id)
        db = self.database(frame) if self.gt_sampling is not None else None
        return augmented_record(
            frame, self.graph_cfg, self.targets_cfg, self.augment, rng, gt_db=db, gt_sampling=self.gt_sampling
        )

    def database(self, frame: Frame | None = None) -> GtDatabase:
        """The ground-truth database (read on first use), checked against ``frame``'s attribute columns."""
        if self._db is None:
            if self._db_path is None:
                raise ValueError("AugmentedRecords: no ground-truth database given")
            self._db = read_gt_db(self._db_path)
        if frame is not None and self._db.attr_names:
            want = ("intensity", "r", "g", "b") + (_SCORE_NAMES if frame.scores is not None else ())
            if self._db.attr_names != want:
                raise DataError(
                    self._db_path or "<gt_db>",
                    f"expected crops with the training frames' attribute columns {want}, got "
                    f"{self._db.attr_names}: rebuild the database from this split (the gt_db stage)",
                )
        return self._db
