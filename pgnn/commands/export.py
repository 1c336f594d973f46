"""``pgnn export CKPT OUT``: the checkpoint's network as an ONNX model (``OUT.onnx``) or a ``torch.export``
program (``OUT.pt2``), the graph as input, with what ``pgnn predict`` needs from the checkpoint inside::

    pgnn export models/car_T1.pt models/car_T1.onnx
    pgnn predict --root ROOT --ids val --checkpoint models/car_T1.onnx --out DIR   # runs ONNX Runtime

See ``pgnn.nn.export`` (the inputs, outputs and metadata) and ``pgnn.inference.backends``.
"""

from __future__ import annotations

import argparse
import json

from pgnn.core.outputs import FORCE_HELP, OutputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a pgnn checkpoint (.pt), e.g. written by import-weights or train")
    parser.add_argument(
        "out",
        action=OutputPath,
        help="the exported file: OUT.onnx (ONNX, opset 18) or OUT.pt2 (torch.export)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pgnn.core.outputs import check_output_file
    from pgnn.nn.export import export_checkpoint

    check_output_file(args.out, force=args.force, inputs=[args.checkpoint])  # before any work
    export_checkpoint(args.checkpoint, args.out)
    out = Path(args.out)
    print(json.dumps({"out": str(out), "format": out.suffix[1:], "bytes": out.stat().st_size}, indent=2))
    return 0
