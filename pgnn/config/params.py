"""Typed configuration built from ``params.yaml``.

``params.yaml`` names a *preset* (``pgnn/config/presets.py``) and, per section, keys that override it
(``null`` keeps the preset's value). :func:`load_params` validates the file (unknown keys are errors, a
``ParamsError`` naming the file and key); :func:`pgnn.config.presets.resolve` turns it into the typed
sub-configs that each pgnn function takes. Stages and flows pass only the sub-config a function needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pgnn.core.errors import DataError, params_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """Where the frames come from and how they are sharded."""

    root: str = "data/synthetic"
    painted: bool = False
    train_split: str = "train"
    val_split: str = "val"
    frames_per_shard: int = Field(8, ge=1)
    workers: int = Field(2, ge=1)

    def split_name(self, which: str) -> str:
        """The ImageSets name of the logical split ``which`` ("train" or "val")."""
        names = {"train": self.train_split, "val": self.val_split}
        if which not in names:
            raise ValueError(f"expected split 'train' or 'val', got {which!r}")
        return names[which]


class SyntheticConfig(_Strict):
    """The built-in synthetic KITTI dataset."""

    frames: int = Field(48, ge=2)
    seed: int = 0
    val_fraction: float = Field(0.5, gt=0.0, lt=1.0)


class EvalConfig(_Strict):
    """Which classes the KITTI evaluation reports (None: the classes the preset's model detects)."""

    classes: tuple[Literal["Car", "Pedestrian", "Cyclist"], ...] | None = None


class Params(_Strict):
    """The whole of ``params.yaml``."""

    preset: str = "small"
    data: DataConfig = DataConfig()
    synthetic: SyntheticConfig = SyntheticConfig()
    graph: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    model: dict[str, Any] = {}
    train: dict[str, Any] = {}
    loss: dict[str, Any] = {}
    postprocess: dict[str, Any] = {}
    augment: dict[str, Any] = {}
    gt_sampling: dict[str, Any] = {}
    eval: EvalConfig = EvalConfig()


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate ``params.yaml`` (``yaml.safe_load``)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise DataError(path, f"cannot read params: {e}") from e
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise DataError(path, f"expected valid YAML: {e}", line=None if line is None else line + 1) from e
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        raise params_error(path, e) from e


def overrides(section: dict[str, Any]) -> dict[str, Any]:
    """The keys of a params section that override the preset (``null`` = keep the preset's value)."""
    return {k: v for k, v in section.items() if v is not None}
