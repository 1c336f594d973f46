"""Model checkpoints: one ``torch.save``d dict, always read back with ``weights_only=True``.

A checkpoint is a plain dict::

    {
      "format": "pgnn-checkpoint/1",
      "model_config": ModelConfig.model_dump(mode="json"),   # plain dict
      "model": state_dict,                                    # PointGNN parameters
      "input_frame": "rect" | "cam2",   # the frame the weights expect the points in: "rect" = KITTI's label
                                        # frame (our own models), "cam2" = camera 2's rectified frame (the
                                        # authors' released weights)
      "graph_preset": str, "encoding": str, "label_method": str, "input_features": str,
      "step": int,
      # a model's card (pgnn.nn.card: the exported model of a run, imported weights): "runtime_graph",
      # "postprocess", "train_config" (the card's other entries are the ones above);
      # optional, added by the training loop: "optimizer", "scheduler", "rng", "train_config",
      # "live_history" (the run's dvclive curves up to this step: {path: TSV text});
      # added by weight import: "source", "original_config"
    }

Only tensors, dicts, lists, tuples, strings, numbers, booleans and None may appear, so that loading never runs
pickled code. File names of a run's checkpoints carry the step: ``ckpt-00001000.pt``.

Loading verifies the file first: ``torch.save`` writes a zip archive whose every record carries a CRC-32,
which ``torch.load`` does not check (flipped bytes inside a tensor load silently); :func:`load_checkpoint`
checks them all (:func:`pgnn.core.io.verify_zip`) and a corrupted file is a ``DataError`` naming it.
:func:`latest_good_checkpoint` is what a resumed run starts from: the newest checkpoint (at or before the
step the run is asked to reach) that loads, the corrupted newer ones moved aside with a warning.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pgnn.config.network import ModelConfig
from pgnn.core.errors import DataError
from pgnn.core.io import verify_zip, write_bytes_atomic
from pgnn.nn.card import TRAINING_FACTS, ModelCard, card_of
from pgnn.nn.model import PointGNN

CHECKPOINT_FORMAT = "pgnn-checkpoint/1"
INPUT_FRAMES = ("rect", "cam2")
_STRING_FIELDS = tuple(k for k in TRAINING_FACTS if k != "input_frame")
_CARD_ONLY = ("runtime_graph", "postprocess")  # present: the checkpoint holds a whole card, validated
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint at ``step``: ``ckpt-00001000.pt``."""
    return f"ckpt-{step:08d}.pt"


def make_checkpoint(
    model: PointGNN, *, step: int, card: ModelCard | None = None, **extra: Any
) -> dict[str, Any]:
    """A checkpoint dict for ``model``: its ``card``'s entries, or (a training run's checkpoints) the
    :data:`pgnn.nn.card.TRAINING_FACTS` in ``extra``; ``extra`` adds optional entries (optimizer,
    scheduler, rng, ...)."""
    if card is not None and card.network != model.cfg:
        raise ValueError("the card's model_config is not the model's")
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        **(card.entries() if card is not None else {}),
        "model_config": model.cfg.model_dump(mode="json"),
        "model": model.state_dict(),
        "step": int(step),
        **extra,
    }
    validate_checkpoint(ckpt)
    return ckpt


def validate_checkpoint(ckpt: Any, source: str | Path = "<checkpoint>") -> ModelConfig:
    """Check the checkpoint's fields and that its weights are finite; return its ``ModelConfig``.
    ``DataError`` on anything malformed (every reader, predict, export and resume, goes through here)."""
    if not isinstance(ckpt, dict):
        raise DataError(source, f"expected a checkpoint dict, got {type(ckpt).__name__}")
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise DataError(source, f"expected format {CHECKPOINT_FORMAT!r}, got {ckpt.get('format')!r}")
    if ckpt.get("input_frame") not in INPUT_FRAMES:
        raise DataError(source, f"expected input_frame in {INPUT_FRAMES}, got {ckpt.get('input_frame')!r}")
    for key in _STRING_FIELDS:
        if not isinstance(ckpt.get(key), str):
            raise DataError(source, f"expected a string {key!r}, got {ckpt.get(key)!r}")
    step = ckpt.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise DataError(source, f"expected a non-negative int 'step', got {step!r}")
    state = ckpt.get("model")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DataError(source, "expected 'model' to be a state dict of tensors")
    for name, tensor in state.items():  # NaN weights predict nothing (every score NaN) without a word
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            nan, count = int(torch.isnan(tensor).sum()), int((~torch.isfinite(tensor)).sum())
            raise DataError(
                source,
                f"expected finite weights, got {count} non-finite values ({nan} NaN) of {tensor.numel()} "
                f"in {name!r}",
            )
    try:
        cfg = ModelConfig.model_validate(ckpt.get("model_config"))
    except ValueError as e:  # pydantic.ValidationError is a ValueError
        raise DataError(source, f"expected a valid 'model_config', got {e}") from e
    if any(key in ckpt for key in _CARD_ONLY):
        card_of(ckpt, source)
    return cfg


def save_checkpoint(path: str | Path, ckpt: dict[str, Any]) -> None:
    """Validate ``ckpt`` and write it to ``path`` atomically, with bytes that depend on its content only.

    ``torch.save`` to a path names the archive's root folder after the (here temporary, random) file name;
    saved to memory first, the root is always ``archive``, so equal checkpoints are equal files.
    """
    validate_checkpoint(ckpt, path)
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    write_bytes_atomic(path, buf.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint (``weights_only=True``: no pickled code runs), after checking the CRC-32 of every
    record of its zip archive, and validate it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "expected a checkpoint file, got no such file")
    if not zipfile.is_zipfile(path):  # every pgnn checkpoint is a torch zip archive
        raise DataError(
            path,
            f"expected a pgnn checkpoint (a torch zip archive, read with weights_only=True), got "
            f"{_what_file(path)}",
        )
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if names and all(n.endswith(".npy") for n in names):
        raise DataError(
            path,
            "expected a pgnn checkpoint, got an npz of arrays (the authors' released weights?): convert it "
            "with `pgnn import-weights` first",
        )
    verify_zip(path, what="checkpoint (torch zip archive)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:  # weights_only refused a pickle naming something else: never run
        raise DataError(
            path,
            "expected a pgnn checkpoint of tensors and plain values, got a pickle naming other objects "
            "(refused: loading it could run code)",
        ) from e
    except Exception as e:  # torch raises RuntimeError, EOFError ... for foreign archives
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(
            path, f"expected a pgnn checkpoint, got a zip archive torch cannot read ({first})"
        ) from e
    validate_checkpoint(ckpt, path)
    return ckpt


def _what_file(path: Path) -> str:
    """A few words on what a file that is not a zip archive looks like (text, YAML, empty, ...)."""
    with path.open("rb") as f:
        head = f.read(4096)
    if not head:
        return "an empty file"
    if head.startswith(b"\x80"):
        return "a bare pickle (refused: loading it could run code)"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "a file that is not one"
    return "a text file (params or a config? a model file is binary)"


def load_model(
    path: str | Path, device: str | torch.device = "cpu", **model_kwargs: Any
) -> tuple[PointGNN, dict[str, Any]]:
    """The checkpoint's model on ``device`` in eval mode, and the checkpoint dict.

    ``model_kwargs`` go to ``PointGNN`` (``max_edges_per_chunk``, ``checkpoint_chunks``).
    """
    ckpt = load_checkpoint(path, map_location=device)
    cfg = validate_checkpoint(ckpt, path)
    model = PointGNN(cfg, **model_kwargs)
    try:
        model.load_state_dict(ckpt["model"], strict=True)
    except RuntimeError as e:
        raise DataError(path, f"expected parameters matching its model_config, got {e}") from e
    return model.to(device).eval(), ckpt


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The ``ckpt-<step>.pt`` file with the highest step in ``directory`` (None if there is none)."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_file() and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    return None if best is None else best[1]


def checkpoint_step(path: str | Path) -> int | None:
    """The step in a checkpoint's file name (``ckpt-00001000.pt`` -> 1000), or None for another name."""
    m = _NAME.match(Path(path).name)
    return int(m.group(1)) if m else None


def checkpoints_newest_first(directory: str | Path, max_step: int | None = None) -> list[Path]:
    """The ``ckpt-<step>.pt`` files of ``directory`` (with a step <= ``max_step`` when given), highest step
    first ([] if there is no such folder)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(s, p) for p in directory.iterdir() if (s := checkpoint_step(p)) is not None and p.is_file()]
    return [p for s, p in sorted(found, reverse=True) if max_step is None or s <= max_step]


def latest_good_checkpoint(
    directory: str | Path,
    warn: Callable[[str], None] | None = None,
    quarantine: bool = True,
    max_step: int | None = None,
) -> Path | None:
    """The newest ``ckpt-<step>.pt`` of ``directory`` (at or before ``max_step`` when given) that loads
    (:func:`load_checkpoint`), or None.

    Each newer one that fails to load (corrupted, truncated, foreign) is reported through ``warn`` (one line
    naming it) and, with ``quarantine``, renamed to ``<name>.corrupt``, so that neither a later resume nor the
    pruning of old checkpoints (which keeps the highest steps) takes it for a good one.
    """
    for path in checkpoints_newest_first(directory, max_step):
        try:
            load_checkpoint(path)
            return path
        except DataError as e:
            moved = ""
            if quarantine:
                aside = path.with_name(path.name + ".corrupt")
                path.replace(aside)
                moved = f"; moved it to {aside.name}"
            if warn is not None:
                warn(f"skipping a bad checkpoint: {e}{moved}; falling back to the previous one")
    return None


TRAINING_STATE_KEYS = (
    "optimizer",
    "scheduler",
    "rng",
    "epoch",
    "position",
    "num_records",
    "world_size",
    "live_history",
)


def export_model(src: str | Path, dest: str | Path, card: ModelCard | None = None) -> None:
    """Write ``src``'s model without its training state (optimizer, RNG, position ...) to ``dest``, with
    ``card`` (the model's facts: the run's runtime graph, post-processing and train settings; None: the
    entries ``src`` has).

    The exported file depends only on the weights and the recipe, so a resumed run and an uninterrupted one
    export the same bytes (their RNG states differ: the data loader draws from the global generator).
    The card's ``train_config`` replaces the checkpoint's: the run that exports states its own settings (a
    checkpoint at step N saved by a longer run of the same key records that run's ``max_steps``).
    """
    ckpt = {k: v for k, v in load_checkpoint(src).items() if k not in TRAINING_STATE_KEYS}
    if card is None:
        save_checkpoint(dest, ckpt)
        return
    entries = card.entries()
    changed = [k for k in ("model_config", *TRAINING_FACTS) if ckpt.get(k) != entries[k]]
    if changed:
        raise ValueError(f"{src} states other {changed} than the card")
    save_checkpoint(dest, {**ckpt, **entries})
