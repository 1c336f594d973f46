"""``python -m flows``: check the arguments and params.yaml, skip if nothing is to do, run a flow.

In that order, and each step only when the one before passed:

1. the arguments (one line on stderr and status 2 for a bad one, in about a second: prefect is not imported);
2. params.yaml, loaded and its preset applied (``pgnn.recipe.presets.apply_preset``): a bad value is one line
   ``python -m flows: error: params.yaml: <key>: <what was expected>`` (pgnn.core.errors), status 1;
3. whether anything is to do (:meth:`pgnn.pipeline.runner.Session.pending`: ``dvc status`` of the asked-for
   stages and those upstream of them, as the flow decides it; a flow other than ``full`` first runs the
   params stage and refuses the other flow's stale stages, :meth:`pgnn.pipeline.runner.Session.check`). If
   nothing is, say so and exit: no flow run, no Prefect server (``--always-run`` runs the flow anyway);
4. the flow, against ``PREFECT_API_URL`` (yours, or your profile's) or else Prefect's ephemeral server; with
   ``--runner processes`` or ``dask`` and no API URL, one ``prefect server start`` that every process of
   the run shares (``flows/server.py``; the flow then runs in a child process whose environment names it).

A failed flow run ends with one line naming what failed (``--debug`` or ``PGNN_DEBUG=1``: the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from flows import PREPROCESS_STAGES, RUNNER_KINDS, SHARD_STAGES, STAGES, TRAIN_EVALUATE_STAGES
from flows.prefect_env import user_api_url
from pgnn.core.errors import debug_enabled, report, user_errors

PROG = "python -m flows"
FLOW_STAGES: dict[str, tuple[str, ...]] = {
    "full": STAGES,
    "preprocess": PREPROCESS_STAGES,
    "train-evaluate": TRAIN_EVALUATE_STAGES,
}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``<prog>: error: <message>`` (status 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Run the pgnn pipeline as Prefect flows (flows/pipeline.py).")
    p.add_argument("--flow", choices=sorted(FLOW_STAGES), default="full")
    p.add_argument("--params", default="params.yaml", help="params.yaml path")
    p.add_argument("--root", default=None, help="project root (default: the params file's folder)")
    p.add_argument(
        "--stages", nargs="+", choices=STAGES, default=None, metavar="STAGE", help=" ".join(STAGES)
    )
    p.add_argument("--runner", choices=RUNNER_KINDS, default="threads", help="runner of shard builds")
    p.add_argument("--dask-address", default=None, help="Dask scheduler address (with --runner dask)")
    p.add_argument("--max-workers", type=int, default=None, help="parallel shard builds")
    p.add_argument(
        "--always-run",
        action="store_true",
        help="run the flow even when every output is current (default: say so and start no Prefect server)",
    )
    p.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The checked arguments (a bad one exits with one line, status 2)."""
    p = parser()
    args = p.parse_args(argv)
    allowed = FLOW_STAGES[args.flow]
    if args.stages is None:
        args.stages = list(allowed)
    else:
        stray = [s for s in args.stages if s not in allowed]
        if stray:
            p.error(f"argument --stages: {' '.join(stray)} not in the {args.flow} flow ({' '.join(allowed)})")
        args.stages = [s for s in STAGES if s in args.stages]  # diagram order, once each
    if args.max_workers is not None and args.max_workers < 1:
        p.error(f"argument --max-workers: expected >= 1, got {args.max_workers}")
    if args.dask_address and args.runner != "dask":
        p.error("argument --dask-address: only with --runner dask")
    return args


def check_params(params_path: str | Path) -> None:
    """Load params.yaml and resolve its recipe; raises the pgnn error of the first bad value."""
    from pgnn.config.params import load_params
    from pgnn.recipe.presets import apply_preset

    apply_preset(load_params(Path(params_path)))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    with user_errors(PROG, args.debug) as outcome:
        return run(args, argv)
    return outcome.exit_code


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    t0 = time.perf_counter()
    check_params(args.params)
    stages = tuple(args.stages)
    own_api = user_api_url() is not None
    from pgnn.pipeline.runner import driver_session

    with driver_session(args.params, args.root, f"{PROG} (checks before the {args.flow} flow)") as session:
        if args.flow != "full":  # another flow's stale stages: one line here, before Prefect starts
            session.check(stages, FLOW_STAGES[args.flow])
        stale = None if args.always_run else session.pending(stages)
    if stale == []:
        print(
            f"{args.flow} flow: nothing to do, every stage item of {' '.join(stages)} (and upstream) is "
            f"current in dvc.lock (checked in {time.perf_counter() - t0:.1f} s; no flow run, no Prefect "
            "server)"
        )
        return 0
    if args.runner != "threads" and any(s in SHARD_STAGES for s in stages) and not own_api:
        return run_with_shared_server(argv)
    summary = run_flow(args, stages)
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(f"{args.flow} flow finished in {time.perf_counter() - t0:.1f} s")
    return 0


def run_with_shared_server(argv: Sequence[str]) -> int:
    """Start ``prefect server start`` and run this command again (``--always-run``) in a child process whose
    environment names it as ``PREFECT_API_URL``: like a deployment's flow run on a worker, every thread and
    process of the run then talks to that one server (``flows/server.py`` says why this process cannot:
    prefect is imported here already). Returns the child's exit status."""
    from flows.server import start_shared_server

    server = start_shared_server()
    try:
        server.wait_healthy()
        cmd = [sys.executable, "-m", "flows", *argv, "--always-run"]
        return subprocess.run(cmd, env=dict(os.environ), check=False).returncode
    finally:
        server.stop()  # the child has sent its logs and events before it exited


def run_flow(args: argparse.Namespace, stages: tuple[str, ...]) -> dict[str, Any]:
    """Run the chosen flow and return its summary. A failed run raises its exception (a user error becomes
    one line in :func:`main`, a bug keeps its traceback) or, when shards failed, exits with one line."""
    from flows.pipeline import FLOWS, ShardBuildError

    kwargs: dict[str, Any] = {"params_path": args.params, "project_root": args.root, "stages": stages}
    if args.flow != "train-evaluate":
        kwargs |= {"task_runner": args.runner, "dask_address": args.dask_address}
        kwargs["max_workers"] = args.max_workers
    state = FLOWS[args.flow](**kwargs, return_state=True)
    try:
        return state.result()  # a failed run raises its exception
    except ShardBuildError as e:  # expected after retries: it names the shards; the run's logs say why
        if debug_enabled(args.debug):
            raise
        report(PROG, e)
        raise SystemExit(1) from None
