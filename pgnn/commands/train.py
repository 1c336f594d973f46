"""``pgnn train``: train on a cached training-graph split with the recipe of a params.yaml.

The same function as the DVC ``train`` stage (``pgnn.pipeline.steps.train.train_step``), with paths as
arguments. A
rerun
with the same params resumes the newest checkpoint of that run; under ``torchrun`` it trains with DDP.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="params.yaml to resolve")
    parser.add_argument("--graphs", type=Path, default=Path("data/graphs/train"), help="cached graph split")
    parser.add_argument("--out", type=Path, default=Path("models"), help="checkpoints/ and model.pt go here")
    parser.add_argument("--live", type=Path, default=Path("dvclive/train"), help="dvclive folder")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/train.json"), help="summary JSON")
    parser.add_argument("--max-steps", type=int, default=None, help="override train.max_steps")


def run(args: argparse.Namespace) -> int:
    from pgnn.config.params import load_params
    from pgnn.config.presets import resolve
    from pgnn.pipeline.steps.train import train_step

    params = load_params(args.params)
    if args.max_steps is not None:
        params = params.model_copy(update={"train": {**params.train, "max_steps": args.max_steps}})
    path = train_step(
        resolve(params), args.graphs, args.out / "checkpoints", args.out / "model.pt", args.live, args.metrics
    )
    print(f"model: {path}")
    return 0
