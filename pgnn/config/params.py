"""Typed configuration built from ``params.yaml``.

``params.yaml`` names a *preset* (``pgnn/recipe/presets.py``) and, per section, keys that override it
(``null`` keeps the preset's value). :func:`load_params` validates the file (unknown keys are errors, a
``ParamsError`` naming the file and key); :func:`pgnn.recipe.resolved.resolve` turns it into the resolved
params, the typed sub-configs that each pgnn function takes (the ``params`` stage writes them to
``params.resolved.yaml``, which the other stages read through :class:`ResolvedReader`). Stages and flows pass
only the sub-config a function needs.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pgnn.config.types import MAX_FRAMES, MAX_SHARD_FRAMES, Flag, Int, Real, Seed, SplitName, Workers
from pgnn.core.bounded import MAX_YAML_BYTES, read_text
from pgnn.core.errors import DataError, ParamsError, params_error
from pgnn.core.yamlfile import parse_yaml, read_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """Where the frames come from and how they are sharded."""

    root: str = "data/synthetic"
    painted: Flag = False
    train_split: SplitName = "train"
    """``ImageSets/<train_split>.txt`` (a plain file name: it cannot leave ImageSets)."""
    val_split: SplitName = "val"
    frames_per_shard: Int = Field(8, ge=1, le=MAX_SHARD_FRAMES)
    workers: Workers = 2

    def split_name(self, which: str) -> str:
        """The ImageSets name of the logical split ``which`` ("train" or "val")."""
        names = {"train": self.train_split, "val": self.val_split}
        if which not in names:
            raise ValueError(f"expected split 'train' or 'val', got {which!r}")
        return names[which]


class SyntheticConfig(_Strict):
    """The built-in synthetic KITTI dataset."""

    frames: Int = Field(48, ge=2, le=MAX_FRAMES)
    seed: Seed = 0
    val_fraction: Real = Field(0.5, gt=0.0, lt=1.0)


class EvalConfig(_Strict):
    """Which classes the KITTI evaluation reports (None: the classes the preset's model detects)."""

    classes: tuple[Literal["Car", "Pedestrian", "Cyclist"], ...] | None = None


class PlotsConfig(_Strict):
    """The ``plots`` stage's pictures (PNG image plots under ``plots/images``)."""

    bev_frames: Int = Field(3, ge=0, le=24)
    """Bird's-eye views of this many val frames (the first, by id) with the labels and the detections."""
    view_frames: Int = Field(2, ge=0, le=24)
    """Interactive 3D pages (``view_<id>.html``, ``pgnn view``'s) of this many val frames, the first by id."""


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
    plots: PlotsConfig = PlotsConfig()


def _read_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a params file (:func:`pgnn.core.yamlfile.read_yaml`: safe, no key twice)."""
    raw = read_yaml(path)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DataError(path, f"expected a mapping of sections, got a {type(raw).__name__}")
    return raw


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate ``params.yaml``: a key or section written twice is an error naming its line, an
    unknown key names the closest known one."""
    path = Path(path)
    raw = _read_mapping(path)
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        raise params_error(path, e, model=Params) from e


def params_digest(path: str | Path = "params.yaml") -> str:
    """sha256 of the *values* of a params file (comments and layout do not count): what
    ``params.resolved.yaml`` records as its source."""
    return values_digest(_read_mapping(Path(path)))


def values_digest(values: Any) -> str:
    """sha256 of plain data (the values of a params file, or those plus a command line's overrides)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


class ParamsSource:
    """What the ``params`` stage reads: a params file with a command line's ``train`` overrides (None values
    are left out: ``pgnn train --max-steps``). :attr:`params` validates it when first asked (a stage that
    reads only ``params.resolved.yaml`` never does); :attr:`digest` is what ``params.resolved.yaml`` records
    as its source: the file's values, plus the overrides."""

    def __init__(self, path: str | Path = "params.yaml", **train: Any) -> None:
        self.path = Path(path).resolve()
        self.train = {k: v for k, v in train.items() if v is not None}

    @functools.cached_property
    def params(self) -> Params:
        params = load_params(self.path)
        if not self.train:
            return params
        return params.model_copy(update={"train": {**params.train, **self.train}})

    @property
    def digest(self) -> str:
        if not self.train:
            return params_digest(self.path)
        return values_digest({"file": params_digest(self.path), "train": self.train})


RESOLVED_SOURCE = "# source: params.yaml values sha256 "
"""The line of ``params.resolved.yaml``'s header that names the params it was resolved from."""

M = TypeVar("M", bound=BaseModel)


class ResolvedReader:
    """``params.resolved.yaml`` as a stage reads it: the typed sections it asks for, nothing else.

    The ``params`` stage writes the file (:mod:`pgnn.recipe.resolved`); every other stage declares, in
    ``dvc.yaml``, exactly the keys of it that its outputs depend on, and reads them through
    :meth:`section` / :meth:`whole`. ``on_load(key, obj)`` is told of every typed object handed out (the
    test that checks the declared params records what each stage reads through it).
    """

    def __init__(
        self,
        raw: dict[str, Any],
        path: str | Path = "params.resolved.yaml",
        on_load: Callable[[str, BaseModel], None] | None = None,
    ) -> None:
        self.raw, self.path, self.on_load = raw, Path(path), on_load

    @classmethod
    def load(
        cls, path: str | Path, params_path: str | Path | None = None, *, digest: str | None = None
    ) -> ResolvedReader:
        """Read ``path``; with ``params_path``, fail unless it was resolved from that file's values (or from
        the source ``digest`` given, :attr:`ParamsSource.digest`)."""
        path = Path(path)
        hint = "run `dvc repro params` (or `python stages/params.py`) first"
        if not path.is_file():
            raise DataError(path, f"missing: {hint}")
        text = read_text(path, "a YAML file", MAX_YAML_BYTES)
        if params_path is not None:
            digest = params_digest(params_path) if digest is None else digest
            if f"{RESOLVED_SOURCE}{digest}" not in text:
                raise DataError(path, f"was not resolved from the current {Path(params_path).name}: {hint}")
        return cls(parse_yaml(text, path) or {}, path)

    def _validate(self, key: str, model: type[M], raw: Any) -> M:
        try:
            obj = model.model_validate(raw)
        except ValidationError as e:
            raise params_error(self.path, e, key, model=model) from e
        if self.on_load is not None:
            self.on_load(key, obj)
        return obj

    def section(self, key: str, model: type[M]) -> M:
        """Section ``key`` as a ``model`` (an error naming the file and key if it is missing or bad)."""
        if key not in self.raw:
            raise ParamsError(self.path, "missing section (rerun the params stage)", key=key)
        return self._validate(key, model, self.raw[key])

    def whole(self, model: type[M]) -> M:
        """The whole file as a ``model`` (:class:`pgnn.recipe.resolved.Resolved`)."""
        return self._validate("", model, self.raw)


def overrides(section: dict[str, Any]) -> dict[str, Any]:
    """The keys of a params section that override the preset (``null`` = keep the preset's value)."""
    return {k: v for k, v in section.items() if v is not None}
