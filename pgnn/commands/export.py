"""``pgnn export CKPT OUT``: the checkpoint's network as an ONNX model (``OUT.onnx``) or a ``torch.export``
program (``OUT.pt2``), the graph as input, with what ``pgnn predict`` needs from the checkpoint inside::

    pgnn export models/car_T1.pt models/car_T1.onnx
    pgnn predict --root ROOT --ids val --checkpoint models/car_T1.onnx --out DIR   # runs ONNX Runtime

See ``pgnn.nn.export`` (the inputs, outputs and metadata) and ``pgnn.inference.backends``.
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a pgnn checkpoint (.pt), e.g. written by import-weights or train")
    parser.add_argument(
        "out",
        action=OutputPath,
        help="the exported file: OUT.onnx (ONNX, opset 18) or OUT.pt2 (torch.export)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def is_export(path: Path) -> bool:
    """Whether ``path`` is a file ``pgnn export`` wrote (its metadata's ``format`` is ``pgnn.nn.export``'s
    ``EXPORT_FORMAT``: ``metadata_props`` of an ``.onnx``, the extra file ``pgnn.json`` of a ``.pt2``), which
    a rerun replaces without ``--force``."""
    from pgnn.nn.export import EXPORT_FORMAT, PT2_EXTRA_FILE

    try:
        if path.suffix == ".onnx":
            import onnx

            props = onnx.load(str(path), load_external_data=False).metadata_props
            return any(p.key == "format" and p.value == EXPORT_FORMAT for p in props)
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(f"/extra/{PT2_EXTRA_FILE}"))
            if archive.getinfo(name).file_size > 1 << 20:
                return False
            meta = json.loads(archive.read(name))
        return isinstance(meta, dict) and meta.get("format") == EXPORT_FORMAT
    except Exception:  # noqa: BLE001 (anything unreadable is not recognised: --force replaces it)
        return False


def run(args: argparse.Namespace) -> int:
    from pgnn.core.errors import DataError
    from pgnn.core.outputs import check_output_file
    from pgnn.inference.backends import load_detector
    from pgnn.nn.export import check_export_suffix, export_model_file
    from pgnn.nn.model import PointGNN

    check_output_file(args.out, force=args.force, inputs=[args.checkpoint], ours=is_export)  # before any work
    check_export_suffix(args.out)
    detector = load_detector(args.checkpoint)
    if not isinstance(detector.network, PointGNN):
        raise DataError(args.checkpoint, "expected a pgnn checkpoint (.pt) to export, got an exported model")
    export_model_file(detector.network, detector.card, detector.step, args.out)
    out = Path(args.out)
    print(json.dumps({"out": str(out), "format": out.suffix[1:], "bytes": out.stat().st_size}, indent=2))
    return 0
