"""The reference trajectory: does this machine train the same bytes as the machine that made the baseline?

The default recipe (``params.yaml``'s preset ``small_painted_car``) trains :data:`STEPS` steps on a small
synthetic project (:data:`FRAMES` frames; no validation) through
:func:`pgnn.pipeline.standalone.train_project`, the stages every driver runs. The loss logged every
``train.log_every`` steps (full precision, dvclive's curve) and the sha256 of the weights at every checkpoint
are the trajectory; ``reference_trajectory.json`` beside this file is the one the pinned numerics
(:mod:`pgnn.core.cpu`) made when it was committed, and ``pgnn check cpu``
(``tests/pipeline/test_trajectory.py`` on CI) compares a fresh run with it, equal to the last bit.
"""

from __future__ import annotations

import csv
import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from pgnn.nn.checkpoint import checkpoint_step, load_checkpoint
from pgnn.pipeline.stages import Layout
from pgnn.pipeline.standalone import train_project

REFERENCE_PATH = Path(__file__).with_name("reference_trajectory.json")
PRESET = "small_painted_car"
FRAMES = 8
STEPS = 200


@dataclass(frozen=True)
class Trajectory:
    """The logged losses (step -> loss) and the weights' sha256 at each checkpoint (step -> hex digest)."""

    preset: str
    frames: int
    losses: dict[int, float]
    weights_sha256: dict[int, str]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        raw = json.loads(text)
        return cls(
            preset=raw["preset"],
            frames=int(raw["frames"]),
            losses={int(k): float(v) for k, v in raw["losses"].items()},
            weights_sha256={int(k): str(v) for k, v in raw["weights_sha256"].items()},
        )


def weights_sha256(state: dict[str, torch.Tensor]) -> str:
    """sha256 of a state dict's tensors, in key order, as raw bytes (names and shapes included)."""
    h = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        h.update(tensor.numpy().tobytes())
    return h.hexdigest()


def project_params(steps: int, frames: int = FRAMES, threads: int | None = None) -> dict:
    """params.yaml of the reference project: the default preset on ``frames`` synthetic frames, no
    validation."""
    train: dict = {"max_steps": steps, "eval_every": None, "checkpoint_every": 100, "keep_last": 100}
    if threads is not None:
        train["threads"] = threads
    return {
        "preset": PRESET,
        "data": {"root": "data/synthetic", "painted": True, "workers": 1},
        "synthetic": {"frames": frames, "seed": 0, "val_fraction": 0.2},
        "train": train,
    }


def run_trajectory(steps: int = STEPS, frames: int = FRAMES, workdir: Path | None = None) -> Trajectory:
    """Train the reference project for ``steps`` steps in ``workdir`` (default: a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="pgnn-trajectory-") as tmp:
        root = Path(workdir or tmp)
        params = root / "params.yaml"
        params.write_text(yaml.safe_dump(project_params(steps, frames), sort_keys=False))
        train_project(params)
        layout = Layout(root)
        with (layout.path("live_plots") / "loss" / "total.tsv").open(newline="") as f:
            losses = {int(row["step"]): float(row["total"]) for row in csv.DictReader(f, delimiter="\t")}
        digests = {
            checkpoint_step(path): weights_sha256(load_checkpoint(path)["model"])
            for path in sorted(layout.path("checkpoints").glob("*/*.pt"))
            if checkpoint_step(path) is not None
        }
    return Trajectory(PRESET, frames, losses, dict(sorted(digests.items())))


def differences(run: Trajectory, reference: Trajectory) -> list[str]:
    """Where ``run`` differs from ``reference`` over the steps both have (empty: equal to the last bit)."""
    lines = []
    if (run.preset, run.frames) != (reference.preset, reference.frames):
        lines.append(
            f"other project: {run.preset}/{run.frames} frames vs {reference.preset}/{reference.frames}"
        )
    for step in sorted(set(run.losses) & set(reference.losses)):
        if run.losses[step] != reference.losses[step]:
            lines.append(f"loss at step {step}: {run.losses[step]!r} vs reference {reference.losses[step]!r}")
    for step in sorted(set(run.weights_sha256) & set(reference.weights_sha256)):
        if run.weights_sha256[step] != reference.weights_sha256[step]:
            lines.append(
                f"weights at step {step}: sha256 {run.weights_sha256[step][:16]}... vs reference "
                f"{reference.weights_sha256[step][:16]}..."
            )
    return lines


def load_reference(path: Path = REFERENCE_PATH) -> Trajectory:
    return Trajectory.from_json(path.read_text())
