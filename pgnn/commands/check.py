"""``pgnn check train-step CASE.npz --config CONFIG.json --train-config TRAIN.json [--json]``: compare pgnn's
training step with the original TF training graph's golden reference (``pgnn.training.check_step``).

``pgnn check cpu [--steps N] [--json]``: train the reference trajectory (``pgnn.pipeline.trajectory``)
on this machine and compare it with the committed one, to the last bit: whether this CPU makes the bytes the
committed ``dvc.lock`` names."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from typing import Any

# figures printed by the table, in order
_HEADLINE = (
    "loss_rel",
    "grad_rel",
    "weights_rel",
    "replay_rel",
    "forced_rel",
    "forced_only_rel",
    "lr_rel",
    "update_rel",
    "grad_stats_rel",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="check", metavar="CHECK", required=True)
    step = sub.add_parser(
        "train-step",
        help="pgnn's training step vs a train_step reference case (loss, gradients, weights after K steps)",
    )
    step.add_argument("case", help="a reference case npz, e.g. pointgnn_reference/train_step/case_a.npz")
    step.add_argument("--config", required=True, help="the original model config (JSON, load_config format)")
    step.add_argument(
        "--train-config", required=True, help="the original train config (JSON, load_train_config format)"
    )
    step.add_argument(
        "--inputs", default=None, help="an npz with the input/* arrays when the case has none (case_b.npz)"
    )
    step.add_argument("--steps", type=int, default=None, help="run at most this many of the case's steps")
    step.add_argument(
        "--no-forced",
        action="store_true",
        help="skip the extra run that starts from the reference gradient of step 0 (forced_rel)",
    )
    step.add_argument(
        "--forced-only",
        action="append",
        default=[],
        metavar="VAR",
        help="also report forced_only_rel: the run where only VAR (a TF variable name; repeatable) takes "
        "the reference step-0 gradient",
    )
    step.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    step.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda: where the model runs (the same comparisons)"
    )
    step.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    cpu = sub.add_parser(
        "cpu",
        help="train the default recipe's reference trajectory here and compare it with the committed one "
        "(the same losses and weights to the last bit: this CPU reproduces the baseline)",
    )
    cpu.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to train (default: the reference's 200)",
    )
    cpu.add_argument(
        "--json",
        action="store_true",
        help="print the trajectory as JSON (the reference's format)",
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) and math.isfinite(value) else str(value)


def run(args: argparse.Namespace) -> int:
    if args.check == "cpu":
        return run_cpu(args)
    import torch

    from pgnn.training.check_step import check_train_step

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    result = check_train_step(
        args.case,
        args.config,
        args.train_config,
        inputs_path=args.inputs,
        max_steps=args.steps,
        forced=not args.no_forced,
        forced_only=args.forced_only,
        device=args.device,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{result['case']}: {result['steps']} steps of {result['optimizer']}, lr {result['lr']}, "
        f"on {result['device']}"
    )
    for key in _HEADLINE:
        print(f"  {key:15s} {_fmt(result[key])}")
    print("  compared: " + "; ".join(result["compared"]))
    return 0


def run_cpu(args: argparse.Namespace) -> int:
    from pgnn.core.cpu import pinned_state
    from pgnn.pipeline.trajectory import STEPS, differences, load_reference, run_trajectory

    reference = load_reference()
    with contextlib.redirect_stdout(sys.stderr):  # the stages' progress: stdout is the result
        run = run_trajectory(args.steps or STEPS, reference.frames)
    if args.json:
        print(run.to_json(), end="")
        return 0 if not differences(run, reference) else 1
    for problem in pinned_state():
        print(f"not pinned: {problem}")
    for step, loss in run.losses.items():
        ref = reference.losses.get(step)
        mark = "-" if ref is None else ("equal" if ref == loss else f"differs (reference {ref!r})")
        print(f"  step {step:4d} loss {loss!r:22s} {mark}")
    for step, digest in run.weights_sha256.items():
        ref = reference.weights_sha256.get(step)
        mark = "-" if ref is None else ("equal" if ref == digest else f"differs (reference {ref[:16]})")
        print(f"  step {step:4d} weights sha256 {digest[:16]} {mark}")
    diffs = differences(run, reference)
    print("this machine reproduces the reference trajectory" if not diffs else "differs from the reference")
    return 1 if diffs else 0
