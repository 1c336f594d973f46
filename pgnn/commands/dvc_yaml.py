"""``pgnn dvc-yaml``: write ``dvc.yaml`` from the stage table (``pgnn/pipeline/stages.py``).

``--check`` writes nothing and exits 1 when the file differs from the table (what CI's test checks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_file, starts_with


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        action=OutputPath,
        default=Path("dvc.yaml"),
        help="file to write (default: %(default)s)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs; write nothing")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def run(args: argparse.Namespace) -> int:
    from pgnn.pipeline import dvcyaml

    if args.check:
        same = args.out.exists() and args.out.read_text() == dvcyaml.render()
        print(f"{args.out}: {'up to date' if same else 'differs from the stage table (run pgnn dvc-yaml)'}")
        return 0 if same else 1
    first_line = dvcyaml.HEADER.splitlines()[0]  # an earlier generated dvc.yaml may be replaced
    check_output_file(args.out, force=args.force, ours=starts_with(first_line))
    changed = dvcyaml.write(args.out)
    print(f"{args.out}: {'written' if changed else 'already up to date'}")
    return 0
