"""``pgnn import-config CONFIG.json TRAIN.json [--out params.yaml]``: an original config pair as params.yaml
sections over a preset (``pgnn.recipe.original.params_overrides``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_file, starts_with

HEADER = "# pgnn import-config "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", help="the original model config (JSON, e.g. configs/car_auto_T3_train_config)"
    )
    parser.add_argument("train_config", help="the original train config (JSON, e.g. ..._train_train_config)")
    parser.add_argument("--preset", default=None, help="preset to build on (default: by label method)")
    parser.add_argument(
        "--out", default=None, action=OutputPath, help="write the YAML here instead of printing it"
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def run(args: argparse.Namespace) -> int:
    import yaml

    from pgnn.core.io import write_text_atomic
    from pgnn.recipe.original import params_overrides

    if args.out is not None:  # an earlier import-config output (its header) may be replaced
        inputs = [args.config, args.train_config]
        check_output_file(args.out, force=args.force, inputs=inputs, ours=starts_with(HEADER))
    params = params_overrides(args.config, args.train_config, preset=args.preset)
    names = f"{Path(args.config).name} {Path(args.train_config).name}"
    text = (
        f"{HEADER}{names}: the original pair as params.yaml sections over the preset\n"
        "# (the data, synthetic and eval sections are not part of it)\n"
        + yaml.safe_dump(params, sort_keys=False)
    )
    if args.out is None:
        print(text, end="")
    else:
        inputs = [args.config, args.train_config]  # again: after every read
        check_output_file(args.out, force=args.force, inputs=inputs, ours=starts_with(HEADER))
        write_text_atomic(args.out, text)
    return 0
