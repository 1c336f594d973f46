"""Profile of the default run's CPU training step (torch.profiler), and ms a step by thread setting.

    .venv/bin/python benchmarks/profile_train.py profile [--steps 10] [--rows 15] [--threads 1]
    .venv/bin/python benchmarks/profile_train.py threads [--steps 20] [--rounds 3] [--busy 1]
    .venv/bin/python benchmarks/profile_train.py numerics [--steps 20] [--rounds 3]

The step is the default run's: params.yaml's preset ``small_painted_car`` (the ``small`` network on painted
``is`` inputs, batch 2, Adam), on synthetic painted frames (``pgnn.data.synthetic``, seed 0) through the
pipeline's ``graph_record`` (the cached graphs it trains on: ``resample_graph`` is off), one call of
``pgnn.training.step.train_step`` per step (forward, loss, backward, gradient norm, the TF1 Adam update): see
``step_batches.py``.

``profile``: a per-op table, the top ``--rows`` ops by self CPU time over ``--steps`` steps after 3 warm-up
steps (``torch.profiler.profile(activities=[CPU])``), with the products on ``--threads`` threads.

``threads``: ms a step (median over ``--steps`` steps after 3 warm-up steps) for each of ``SETTINGS``: torch's
kernels on one or two threads (OpenMP: its default busy-wait, ``OMP_WAIT_POLICY=PASSIVE``, a bounded spin
count) and the products (:mod:`pgnn.nn.gemm`) on one or two, the pipeline's own setting named ``default``.
Each runs in its own process (OpenMP reads its environment at start), ``--rounds`` times interleaved, each
row with ``/proc/loadavg`` at its start (the machine may be shared: compare rows of the same round) and the
sha256 (first 16 hex digits) of the weights after the warm-up and measured steps: rows with the same sha
trained the same weights. ``--busy N`` runs N busy-looping processes meanwhile: a loaded machine, on purpose.

``numerics``: the same, for the cost of the pinned CPU numerics (:mod:`pgnn.core.cpu`) at 1 and 2 threads:
pinned (what every pgnn process runs), each library's own choice for this CPU (the pin undone before torch
and numpy load), and ATen's ``default`` kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# (name, torch's threads, threads of the products (pgnn.nn.gemm), environment). libgomp (torch's OpenMP)
# spins GOMP_SPINCOUNT times before sleeping (its own default 300000; PASSIVE: 0)
SETTINGS = (
    ("1 thread", 1, 1, {}),
    ("default: products on 2 threads, kernels on 1", 1, 2, {}),
    ("products and kernels on 2, default spin", 2, 2, {"GOMP_SPINCOUNT": "300000"}),
    ("products and kernels on 2, PASSIVE", 2, 2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("products and kernels on 2, GOMP_SPINCOUNT=100000", 2, 2, {"GOMP_SPINCOUNT": "100000"}),
)
NUMERICS = (
    ("pinned (default), 1 thread", 1, 1, {}),
    ("native kernels, 1 thread", 1, 1, {"unpin": "1"}),
    ("ATen default kernels, 1 thread", 1, 1, {"unpin": "1", "ATEN_CPU_CAPABILITY": "default"}),
    ("pinned (default), 2 threads", 1, 2, {}),
    ("native kernels, 2 threads", 1, 2, {"unpin": "1"}),
)
FRAMES = 8
PRESET = "small_painted_car"
WARMUP = 3


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _setup(threads: int, products: int, unpin: bool = False):  # noqa: ANN202
    import pgnn  # noqa: F401  (pins the numerics: undone below for a native row, before torch loads)
    from pgnn.core.cpu import PINNED

    for key in PINNED if unpin else ():
        os.environ.pop(key, None)
    if os.environ.get("PGNN_BENCH_ATEN"):
        os.environ["ATEN_CPU_CAPABILITY"] = os.environ["PGNN_BENCH_ATEN"]
    import torch
    from step_batches import batches, frame_ids, make_model, make_step, recipe_of, records, synthetic_root

    from pgnn.nn.gemm import set_product_threads

    torch.set_num_threads(threads)
    set_product_threads(products)
    recipe = recipe_of(PRESET)
    root = synthetic_root(FRAMES)
    data = batches(records(root.name, recipe, frame_ids(root.name)), recipe.train.batch_size)
    root.cleanup()
    model = make_model(recipe, torch.device("cpu"))
    step = make_step(recipe, model, torch.device("cpu"))
    return data, step, model


def time_steps(threads: int, products: int, steps: int, unpin: bool = False) -> dict:
    """Median ms a step (and the CPU ms) of ``steps`` steps after the warm-up, in this process."""
    from pgnn.pipeline.trajectory import weights_sha256

    data, step, model = _setup(threads, products, unpin)
    wall, cpu = [], []
    for k in range(WARMUP + steps):
        t, c = time.perf_counter(), time.process_time()
        step(data[k % len(data)], k)
        if k >= WARMUP:
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
    sha = weights_sha256(model.state_dict())[:16]
    return {"ms": statistics.median(wall), "cpu_ms": statistics.median(cpu), "min_ms": min(wall), "sha": sha}


def profile(products: int, steps: int, rows: int) -> str:
    """The per-op table (top ``rows`` by self CPU time) of ``steps`` steps."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    data, step, _ = _setup(1, products)
    for k in range(WARMUP):
        step(data[k % len(data)], k)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for k in range(WARMUP, WARMUP + steps):
            step(data[k % len(data)], k)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["profile", "threads", "numerics"])
    parser.add_argument("--steps", type=int, default=None, help="steps measured (profile 10, threads 20)")
    parser.add_argument("--rows", type=int, default=15, help="profile: ops in the table")
    parser.add_argument("--threads", type=int, default=1, help="profile: the products' threads")
    parser.add_argument("--rounds", type=int, default=3, help="threads: interleaved rounds of the settings")
    parser.add_argument("--busy", type=int, default=0, help="threads: busy-looping processes meanwhile")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: time one setting
    args = parser.parse_args()
    if args.one is not None:
        job = json.loads(args.one)
        print(json.dumps(time_steps(job["threads"], job["products"], job["steps"], job.get("unpin", False))))
        return 0
    if args.mode == "profile":
        print(f"{PRESET} training step, {args.threads} thread(s), loadavg {loadavg()}")
        print(profile(args.threads, args.steps or 10, args.rows))
        return 0
    steps = args.steps or 20
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        print(f"{PRESET} training step, median of {steps} steps: ms a step (CPU ms) [loadavg at start]")
        print(f"with {args.busy} busy-looping process(es)")
        time_settings(NUMERICS if args.mode == "numerics" else SETTINGS, steps, args.rounds)
    finally:
        for p in busy:
            p.kill()
    return 0


def time_settings(settings: tuple, steps: int, rounds: int) -> None:
    """Print a row per (round, setting): ms a step, CPU ms, loadavg at its start, the weights' sha prefix."""
    for r in range(rounds):
        for name, threads, products, setting in settings:
            load = loadavg()
            env = {k: v for k, v in setting.items() if k not in ("unpin", "ATEN_CPU_CAPABILITY")}
            child_env = {**os.environ, "OMP_NUM_THREADS": str(threads), **env}
            child_env.pop("PGNN_BENCH_ATEN", None)
            if "ATEN_CPU_CAPABILITY" in setting:
                child_env["PGNN_BENCH_ATEN"] = setting["ATEN_CPU_CAPABILITY"]
            if "OMP_WAIT_POLICY" not in env:
                child_env.pop("OMP_WAIT_POLICY", None)
            job = {"threads": threads, "products": products, "steps": steps, "unpin": "unpin" in setting}
            proc = subprocess.run(
                [sys.executable, __file__, "threads", "--one", json.dumps(job)],
                capture_output=True,
                text=True,
                env=child_env,
                check=True,
            )
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            row = f"round {r + 1}  {name:<50} {res['ms']:7.1f} ({res['cpu_ms']:6.1f})  [{load}]  {res['sha']}"
            print(row, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
