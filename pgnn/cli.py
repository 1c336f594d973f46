"""pgnn: Point-GNN 3D object detection (CVPR 2020) on PyTorch + PyG, run as a DVC / Prefect pipeline.

The first line above is ``pgnn --help``'s description and :data:`WORKFLOW` its epilog (plain text: no
reStructuredText markup in any ``--help``, tests/test_cli.py checks).

Each sub-command lives in ``pgnn/commands/<name>.py`` with two functions, ``add_arguments(parser)`` and
``run(args) -> int``. They are imported only when chosen, so ``pgnn --help`` stays fast (torch alone takes
seconds to import).

Every command runs under :func:`pgnn.core.outputs.command_inputs`: the paths its arguments name (all but its
outputs, the arguments declared ``action=OutputPath``) and every path it reads are inputs that no output of
it may be or hold (``docs/outputs.md``).

A user error (bad input data, a bad params value, a missing file, a full disk) ends the command with one line
on stderr, ``pgnn <command>: error: <file>[:<line>]: <what was expected>``, and exit status 1; ``--debug``
(before or after the command) or ``PGNN_DEBUG=1`` shows the traceback instead (see ``pgnn.core.errors``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from pgnn.core.errors import user_errors
from pgnn.core.outputs import argument_paths, command_inputs

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("pgnn.commands.synth", "write a synthetic KITTI dataset (training/ + ImageSets/)"),
    "inspect": ("pgnn.commands.inspect", "print a frame's point and object counts as JSON"),
    "crop": ("pgnn.commands.crop", "write a frame's camera field-of-view points as a velodyne_reduced .bin"),
    "render": ("pgnn.commands.render", "draw a bird's-eye view of a frame's points and label boxes"),
    "graph": ("pgnn.commands.graph", "print a frame's multi-level Point-GNN graph as JSON"),
    "eval": ("pgnn.commands.eval", "official KITTI AP (2D/AOS/BEV/3D, R11+R40) of a prediction folder"),
    "import-weights": ("pgnn.commands.import_weights", "convert the authors' weights to a pgnn model"),
    "export": ("pgnn.commands.export", "write the network as ONNX (.onnx) or torch.export (.pt2)"),
    "predict": ("pgnn.commands.predict", "detect objects and write KITTI result files"),
    "view": ("pgnn.commands.view", "interactive 3D pages of frames (points, boxes, graph): offline HTML"),
    "train": ("pgnn.commands.train", "train a Point-GNN model on a cached graph split (resumes by itself)"),
    "bench": ("pgnn.commands.bench", "run a benchmark (graph, synth, cache, eval): table or JSON"),
    "check": (
        "pgnn.commands.check",
        "compare with the original's golden training step (train-step); this CPU with the reference (cpu)",
    ),
    "import-config": ("pgnn.commands.import_config", "an original config pair as params.yaml sections"),
    "checkpoints": (
        "pgnn.commands.checkpoints",
        "list the training runs' checkpoints; --prune removes old runs",
    ),
    "dvc-yaml": ("pgnn.commands.dvc_yaml", "write dvc.yaml from the stage table (pgnn/pipeline/stages.py)"),
    "runs": ("pgnn.commands.runs", "compare the DVC experiments: AP, val AP, steps, the params that differ"),
    "detect": ("pgnn.commands.detect", "detect objects in .bin/.npy/.pcd/.ply scans, no calib (JSON)"),
    "convert": ("pgnn.commands.convert", "turn an own-format dataset into a KITTI-layout root"),
}


WORKFLOW = """\
workflow (README.md; docs/ has one page per topic):
  make pipeline                     the whole pipeline on synthetic KITTI (dvc repro; or python -m flows)
  dvc exp run -S train.max_steps=N  an experiment; pgnn runs compares them (--plot: one overlaid chart)
  pgnn train --params P.yaml        train any preset from a params file (builds the graphs it reads)
  pgnn predict --root R --ids val --checkpoint C --out D    KITTI result files
  pgnn eval GT_DIR PRED_DIR         the official KITTI AP of a result folder
  pgnn import-weights W.npz M.pt    the authors' released weights as a pgnn model
run 'pgnn COMMAND --help' for a command's options and defaults."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, ``(default: 0.5)``, unless its help already says it or there
    is none to show (``None``, a flag's ``False``, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))
        ):
            return action.help
        return f"{text} (default: {shown_default(default)})".lstrip()


def shown_default(value: object) -> str:
    """A default as one types it: lists and tuples space-separated, ``%`` escaped for argparse."""
    text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    return text.replace("%", "%%")


def _available() -> dict[str, tuple[str, str]]:
    return {n: v for n, v in COMMANDS.items() if importlib.util.find_spec(v[0]) is not None}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser; sub-command arguments are added by their modules."""
    parser = argparse.ArgumentParser(
        prog="pgnn",
        description=__doc__.splitlines()[0],
        epilog=WORKFLOW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_) in _available().items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


_DEBUG_HELP = "show the traceback of an error instead of one line (or set PGNN_DEBUG=1)"


def command_parser(name: str) -> tuple[ModuleType, argparse.ArgumentParser]:
    """The module of sub-command ``name`` and its parser (defaults shown in ``--help``)."""
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"pgnn {name}", description=COMMANDS[name][1], formatter_class=HelpFormatter
    )
    module.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    return module, parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(argv) and argv[0] == "--debug"
    argv = argv[1:] if debug else argv
    commands = _available()
    if not argv or argv[0] not in commands:
        build_parser().parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    module, parser = command_parser(name)
    args = parser.parse_args(argv[1:])
    inputs = argument_paths(parser, args)
    with user_errors(f"pgnn {name}", debug or args.debug) as outcome, command_inputs(inputs):
        return int(module.run(args) or 0)
    return outcome.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
