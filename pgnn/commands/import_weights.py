"""``pgnn import-weights WEIGHTS OUT.pt [--config CONFIG.json]``: convert the authors' weights.

``WEIGHTS`` is an npz of the TF variables or a TF checkpoint prefix (``.../model-1400000``, read directly).
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "weights",
        help="npz of the TF checkpoint's variables (e.g. car_auto_T1_train.npz), or the TF checkpoint prefix "
        "itself (e.g. checkpoints/car_auto_T1_train/model-1400000, with its .index and .data-* files)",
    )
    parser.add_argument("out", action=OutputPath, help="checkpoint file to write (.pt)")
    parser.add_argument(
        "--config",
        default=None,
        help="the original model config (JSON); default: <stem>_config.json beside the npz, or the file "
        "'config' beside the checkpoint",
    )
    parser.add_argument(
        "--graph-preset",
        default=None,
        help="graph preset name to record (default: from the config's label_method, e.g. car_runtime)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def is_imported(path: Path) -> bool:
    """Whether ``path`` is a checkpoint ``pgnn import-weights`` wrote (``pgnn.nn.checkpoint``'s format with
    the ``source`` and ``original_config`` entries weight import adds), which a rerun replaces without
    ``--force``. Read with ``weights_only=True`` and memory-mapped (no tensor is loaded)."""
    import torch

    from pgnn.nn.checkpoint import CHECKPOINT_FORMAT

    if not zipfile.is_zipfile(path):
        return False
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 (anything unreadable is not recognised: --force replaces it)
        return False
    return (
        isinstance(ckpt, dict)
        and ckpt.get("format") == CHECKPOINT_FORMAT
        and isinstance(ckpt.get("source"), dict)
        and "original_config" in ckpt
    )


def run(args: argparse.Namespace) -> int:
    from pgnn.config.network import ModelConfig
    from pgnn.nn.checkpoint import save_checkpoint
    from pgnn.nn.model import PointGNN, count_parameters
    from pgnn.nn.weights import checkpoint_from_released_weights

    inputs = [args.weights, f"{args.weights}.index", *([args.config] if args.config else [])]
    check_output_file(args.out, force=args.force, inputs=inputs, ours=is_imported)
    ckpt = checkpoint_from_released_weights(args.weights, args.config, graph_preset=args.graph_preset)
    check_output_file(args.out, force=args.force, inputs=inputs, ours=is_imported)  # again: after every read
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
