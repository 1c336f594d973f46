"""``pgnn import-weights REFERENCE.npz OUT.pt [--config CONFIG.json]``: convert the authors' weights."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("weights", help="npz of the TF checkpoint's variables (e.g. car_auto_T1_train.npz)")
    parser.add_argument("out", help="checkpoint file to write (.pt)")
    parser.add_argument(
        "--config",
        default=None,
        help="the original model config (JSON); default: <stem>_config.json beside the npz",
    )
    parser.add_argument(
        "--graph-preset",
        default=None,
        help="graph preset name to record (default: from the config's label_method, e.g. car_runtime)",
    )


def run(args: argparse.Namespace) -> int:
    from pgnn.config.network import ModelConfig
    from pgnn.nn.checkpoint import save_checkpoint
    from pgnn.nn.model import PointGNN, count_parameters
    from pgnn.nn.weights import checkpoint_from_released_weights

    ckpt = checkpoint_from_released_weights(args.weights, args.config, graph_preset=args.graph_preset)
    save_checkpoint(args.out, ckpt)
    model = PointGNN(ModelConfig.model_validate(ckpt["model_config"]))
    print(
        json.dumps(
            {
                "out": str(args.out),
                "parameters": count_parameters(model),
                "step": ckpt["step"],
                "input_frame": ckpt["input_frame"],
                "graph_preset": ckpt["graph_preset"],
                "encoding": ckpt["encoding"],
                "input_features": ckpt["input_features"],
            },
            indent=2,
        )
    )
    return 0
