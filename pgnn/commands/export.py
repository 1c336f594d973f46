"""``pgnn export CKPT OUT``: the checkpoint's network as an ONNX model (``OUT.onnx``) or a ``torch.export``
program (``OUT.pt2``), the graph as input, with what ``pgnn predict`` needs from the checkpoint inside::

    pgnn export models/car_T1.pt models/car_T1.onnx
    pgnn predict --root ROOT --ids val --checkpoint models/car_T1.onnx --out DIR   # runs ONNX Runtime

See ``pgnn.nn.export`` (the inputs, outputs and metadata) and ``pgnn.inference.backends``.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a pgnn checkpoint (.pt), e.g. written by import-weights or train")
    parser.add_argument("out", help="the exported file: OUT.onnx (ONNX, opset 18) or OUT.pt2 (torch.export)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pgnn.nn.export import export_checkpoint

    export_checkpoint(args.checkpoint, args.out)
    out = Path(args.out)
    print(json.dumps({"out": str(out), "format": out.suffix[1:], "bytes": out.stat().st_size}, indent=2))
    return 0
