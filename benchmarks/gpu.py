"""One prepared device check: training fidelity, step speed, data loading and GPU inference, in one command.

    PYTHONPATH=. .venv/bin/python benchmarks/gpu.py --device cuda --json gpu.json     # on one GPU (untimed)
    PYTHONPATH=. .venv/bin/python benchmarks/gpu.py --device cpu --tiny --json out.json  # CI: the same, tiny

It prints one table (section, case, figure, value, unit, bound, ok) and writes the same rows, with the
details of each section, as JSON. Sections, in order:

golden     ``pgnn check train-step --device DEVICE`` on the reference cases
           (``pointgnn_reference/train_step``: case_a, case_b with forced_only, case_b_T3 step 0), with the
           bounds of tests/training/test_train_step_reference.py (as on CPU). ``--tiny``: case_a, one step.
agree      DEVICE vs CPU after a few training steps of the same model from the same weights on the same
           batches (``small_painted_car``, synthetic painted frames): relative L2 of the weights, the largest
           relative loss difference (bound 1e-3; on CPU itself the two runs must agree bit for bit: bound 0).
step       ms a training step (median, after warm-up; forward, loss, backward, TF1 optimiser: the loop's
           ``train_step``) of car_T3 (batch 4) and painted_car_T3 (batch 2) on real KITTI frames, in fp32,
           tf32 and fp16 (CUDA only), bf16 and fp32 compiled (``train.compile``), with the peak memory
           (CUDA: ``max_memory_allocated``; CPU: the process's peak RSS). ``--tiny``: ``small`` on synthetic
           frames, fp32 and bf16 (compile is left out: it takes minutes on CPU, see benchmarks/README.md).
painted    the seed's painted recipe as it trains: ``AugmentedRecords`` (augmentation and a fresh random graph
           per epoch) through the loop's ``batch_loader`` with data workers, steps a second and the share of
           the wall time spent waiting for data; ``projection``: its 245k steps at that rate, in hours.
infer      T1 inference (the authors' weights, ``pgnn import-weights`` + ``pgnn predict``, runtime graph) ms a
           frame by stage on the KITTI sample (frames 2.. after the warm-up frame). ``--tiny``: a seeded
           untrained ``small`` model on one synthetic frame with the ``car`` (training) graph.

Data: ``--shared`` (default ``$PGNN_SHARED`` or ``../shared``) holds ``data/kitti_sample`` (KITTI, CC BY-NC-SA
3.0: non-commercial use only) and ``data/pointgnn_reference``. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from step_batches import batches, frame_ids, make_model, make_step, recipe_of, records, synthetic_root

from pgnn.core.io import write_json_atomic
from pgnn.training.precision import compile_model, matmul_precision, step_precision

REPO = Path(__file__).resolve().parents[1]
SEED_STEPS = 245_000  # the seed's painted recipe (presets.painted_car_T3)
PAINTED_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005")  # with painted_lidar
# tests/training/test_train_step_reference.py's bounds: (case, check_train_step kwargs, {figure: bound})
GOLDEN = (
    (
        "case_a",
        {},
        {"loss_rel": 1e-4, "grad_rel": 1e-3, "weights_rel": 1e-4, "forced_rel": 1e-4, "steps_loss_rel": 1e-4},
    ),
    (
        "case_b",
        {"forced": False, "forced_only": ["layer1/extract_vertex_features/fully_connected/biases"]},
        {"loss_rel": 1e-4, "grad_rel": 1e-3, "weights_rel": 5e-4, "forced_only_rel": 1e-5},
    ),
    (
        "case_b_T3",
        {"inputs": "case_b.npz", "max_steps": 1},
        {"loss_rel": 1e-4, "grad_rel": 1e-3, "grad_stats_rel": 1e-3},
    ),
)
AGREE_BOUND = {"weights_rel": 1e-3, "loss_rel": 1e-3}  # a few steps: float32 reduction order only


class Report:
    """The rows of the table and the details of each section."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.sections: dict[str, Any] = {}

    def add(
        self,
        section: str,
        case: str,
        figure: str,
        value: float | None,
        unit: str = "",
        bound: float | None = None,
    ) -> None:
        ok = None if bound is None or value is None else bool(value <= bound)
        self.rows.append(
            {
                "section": section,
                "case": case,
                "figure": figure,
                "value": value,
                "unit": unit,
                "bound": bound,
                "ok": ok,
            }
        )
        print(_format_row(self.rows[-1]), flush=True)


def _format_row(r: dict[str, Any]) -> str:
    v = r["value"]
    value = (
        "-"
        if v is None
        else f"{v:.3g}"
        if isinstance(v, float) and (abs(v) < 0.01 or abs(v) >= 1e4)
        else f"{v:.2f}"
    )
    bound = "" if r["bound"] is None else f"<= {r['bound']:.0e}"
    ok = "" if r["ok"] is None else ("ok" if r["ok"] else "FAIL")
    return f"{r['section']:<8} {r['case']:<24} {r['figure']:<18} {value:>10} {r['unit']:<6} {bound:<9} {ok}"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------------------------------------


def golden(report: Report, device: torch.device, reference: Path, tiny: bool) -> None:
    from pgnn.training.check_step import check_train_step

    d = reference / "train_step"
    out = {}
    for case, kwargs, bounds in GOLDEN[:1] if tiny else GOLDEN:
        kwargs = dict(kwargs)
        if tiny:
            kwargs.update(max_steps=1, forced=False)
            bounds = {k: b for k, b in bounds.items() if k in ("loss_rel", "grad_rel")}
        if "inputs" in kwargs:
            kwargs["inputs_path"] = d / kwargs.pop("inputs")
        res = check_train_step(
            d / f"{case}.npz",
            d / f"{case}_config.json",
            d / f"{case}_train_config.json",
            device=device,
            **kwargs,
        )
        out[case] = {k: res[k] for k in (*bounds, "steps", "seconds")}
        for figure, bound in bounds.items():
            report.add("golden", case, figure, res[figure], "", bound)
    report.sections["golden"] = out


def agreement(report: Report, device: torch.device, synth: Path, tiny: bool) -> None:
    recipe = recipe_of("small_painted_car")
    steps = 3 if tiny else 5
    data = batches(records(synth, recipe, frame_ids(synth)), recipe.train.batch_size)
    runs = []
    for where in (torch.device("cpu"), device):
        model = make_model(recipe, where)
        step = make_step(recipe, model, where)
        losses = [float(sum(step(data[k % len(data)], k).data_terms)) for k in range(steps)]
        runs.append((losses, torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])))
    (cpu_l, cpu_w), (dev_l, dev_w) = runs
    weights_rel = float((dev_w - cpu_w).norm() / cpu_w.norm())
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(dev_l, cpu_l, strict=True))
    case = f"small_painted_car {steps} st"
    exact = device.type == "cpu"
    report.add("agree", case, "weights_rel", weights_rel, "", 0.0 if exact else AGREE_BOUND["weights_rel"])
    report.add("agree", case, "loss_rel", loss_rel, "", 0.0 if exact else AGREE_BOUND["loss_rel"])
    report.sections["agree"] = {
        "steps": steps,
        "weights_rel": weights_rel,
        "loss_rel": loss_rel,
        "cpu": cpu_l,
        "device": dev_l,
    }


def _step_case(
    recipe_name: str, data: list, device: torch.device, variant: str, repeats: int
) -> dict[str, Any]:
    recipe = recipe_of(recipe_name)
    precision = "fp32" if variant == "compiled" else variant
    model = make_model(recipe, device)
    model_call = compile_model(model, variant == "compiled")
    step = make_step(recipe, model_call, device, step_precision(precision, device))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    warmup = 3 if variant == "compiled" else 1
    started = time.perf_counter()
    with matmul_precision(precision, device):
        for k in range(warmup + repeats):
            batch = data[k % len(data)].to(device)
            sync(device)
            t = time.perf_counter()
            step(batch, k)
            sync(device)
            if k >= warmup:
                times.append((time.perf_counter() - t) * 1000)
    return {
        "preset": recipe_name,
        "variant": variant,
        "batch_size": recipe.train.batch_size,
        "ms": statistics.median(times),
        "ms_each": times,
        "warmup_s": time.perf_counter() - started - sum(times) / 1000,
        "compiled": bool(getattr(model_call, "compiled", False)),
        "peak_mb": peak_mb(device),
    }


def step_times(report: Report, device: torch.device, kitti: Path, synth: Path, tiny: bool) -> None:
    variants = ["fp32", "bf16"] if tiny else ["fp32", "bf16", "compiled"]
    if device.type == "cuda" and not tiny:
        variants[1:1] = ["tf32", "fp16"]
    presets = ["small"] if tiny else ["car_T3", "painted_car_T3"]
    out = []
    for name in presets:
        recipe = recipe_of(name)
        where = synth if tiny else kitti
        ids = frame_ids(synth)[:2] if tiny else list(PAINTED_FRAMES[:4])
        data = batches(records(where, recipe, ids), recipe.train.batch_size)
        for variant in variants:
            res = _step_case(name, data, device, variant, 2 if tiny else 10)
            out.append(res)
            case = f"{name} B{res['batch_size']} {variant}"
            report.add("step", case, "ms/step", res["ms"], "ms")
            report.add("step", case, "peak memory", res["peak_mb"], "MiB")
            if variant == "compiled":  # compiling happens in the warm-up steps; 0: it fell back to eager
                report.add("step", case, "warm-up (compile)", res["warmup_s"], "s")
                report.add("step", case, "compiled", float(res["compiled"]), "")
    report.sections["step"] = out


def painted(report: Report, device: torch.device, kitti: Path, synth: Path, tiny: bool, workers: int) -> None:
    """The seed's painted recipe with fresh graphs and augmentation every epoch, through data workers."""
    from pgnn.data.frames import load_frame
    from pgnn.training.batches import RecordDataset, batch_loader
    from pgnn.training.dataset import AugmentedRecords
    from pgnn.training.schedule import micro_batch_plan

    name = "small_painted_car" if tiny else "painted_car_T3"
    recipe = recipe_of(name, resample_graph=True)
    where = synth if tiny else kitti
    ids = frame_ids(synth)[:2] if tiny else list(PAINTED_FRAMES)
    frames = [load_frame(where, i, painted=True) for i in ids]
    augment = recipe_of("painted_car_T3").augment
    source = AugmentedRecords(frames, recipe.graph, recipe.targets, augment, seed=0, resample=True)
    # warm-up: every worker has delivered its prefetched batches (numba compiles in each worker first)
    warmup = 1 if tiny else 2 * workers + 5
    steps = warmup + (3 if tiny else 60)
    cfg = recipe.train.model_copy(update={"max_steps": steps, "max_epoch": None})
    plan = micro_batch_plan(len(source), cfg, 0, 1, 0, 0, 0, steps, with_epoch=True)
    loader = batch_loader(RecordDataset(source), plan, workers)
    model = make_model(recipe, device)
    step = make_step(recipe, model, device)
    wait = compute = 0.0
    started = None
    for k in range(steps):
        if k == warmup:
            started, wait, compute = time.perf_counter(), 0.0, 0.0
        t0 = time.perf_counter()
        batch = next(loader).to(device)
        t1 = time.perf_counter()
        step(batch, k)
        sync(device)
        wait, compute = wait + t1 - t0, compute + time.perf_counter() - t1
    wall = time.perf_counter() - started
    measured = steps - warmup
    rate = measured / wall
    hours = SEED_STEPS / rate / 3600
    case = f"{name} B{cfg.batch_size} w{workers}"
    report.add("painted", case, "steps/s", rate, "1/s")
    report.add("painted", case, "data wait share", wait / wall, "")
    report.add("painted", case, "compute ms/step", 1000 * compute / measured, "ms")
    report.add("painted", f"{SEED_STEPS} steps at that rate", "projection", hours, "h")
    report.sections["painted"] = {
        "preset": name,
        "workers": workers,
        "steps": measured,
        "steps_per_s": rate,
        "data_wait_share": wait / wall,
        "compute_ms": 1000 * compute / measured,
    }
    report.sections["projection"] = {"steps": SEED_STEPS, "hours": hours, "from": "painted steps_per_s"}


def inference(
    report: Report, device: torch.device, kitti: Path, reference: Path, synth: Path, tiny: bool
) -> None:
    from pgnn.cli import main as cli
    from pgnn.nn.checkpoint import make_checkpoint, save_checkpoint
    from pgnn.pipeline.steps.train import train_meta

    quiet = contextlib.redirect_stdout(io.StringIO())  # the commands' own tables: the figures go in ours
    with tempfile.TemporaryDirectory(prefix="pgnn-gpu-infer-") as tmp, quiet:
        ckpt, timings = Path(tmp) / "model.pt", Path(tmp) / "timings.json"
        if tiny:
            recipe = recipe_of("small")
            model = make_model(recipe, torch.device("cpu"))
            save_checkpoint(ckpt, make_checkpoint(model, **train_meta(recipe), step=0))
            args = ["--root", str(synth), "--ids", frame_ids(synth)[0], "--graph-preset", "car"]
        else:
            if cli(["import-weights", str(reference / "car_auto_T1_train.npz"), str(ckpt)]) != 0:
                raise RuntimeError("pgnn import-weights failed")
            args = ["--root", str(kitti), "--ids", "000000,000001,000002,000003,000004,000005,000114"]
        args += ["--out", str(Path(tmp) / "pred"), "--device", device.type, "--quiet"]
        if cli(["predict", "--checkpoint", str(ckpt), *args, "--timings-json", str(timings)]) != 0:
            raise RuntimeError("pgnn predict failed")
        summary = json.loads(timings.read_text())
    mean = summary["mean_ms_after_first"] or summary["mean_ms"]
    model_name = "small (untrained)" if tiny else "T1"
    case = f"{model_name} {summary['frames']} fr"
    for stage, ms in mean.items():
        report.add("infer", case, stage, ms, "ms")
    report.sections["infer"] = {
        "frames": summary["frames"],
        "mean_ms": mean,
        "detections": summary["detections"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny case of every section (CI, on CPU)")
    parser.add_argument("--json", default=None, help="write the rows and the sections' details here")
    default_shared = os.environ.get("PGNN_SHARED", str(REPO.parent / "shared"))
    parser.add_argument("--shared", default=default_shared, help="the shared/ folder (data/kitti_sample ...)")
    parser.add_argument(
        "--workers", type=int, default=None, help="painted: data workers (default min(8, cores-1))"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu.py: error: --device cuda: no CUDA device here (use --device cpu)", file=sys.stderr)
        return 1
    shared = Path(args.shared) / "data"
    kitti, reference = shared / "kitti_sample", shared / "pointgnn_reference"
    workers = (
        args.workers
        if args.workers is not None
        else (1 if args.tiny else max(1, min(8, (os.cpu_count() or 2) - 1)))
    )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    threads = torch.get_num_threads()
    print(f"pgnn device check: torch {torch.__version__}, {name}, {threads} CPU threads, tiny={args.tiny}")
    print(f"{'section':<8} {'case':<24} {'figure':<18} {'value':>10} {'unit':<6} {'bound':<9} ok")
    started = time.perf_counter()
    report = Report()
    synth_dir = synthetic_root(2 if args.tiny else 10)
    synth = Path(synth_dir.name)
    golden(report, device, reference, args.tiny)
    agreement(report, device, synth, args.tiny)
    step_times(report, device, kitti, synth, args.tiny)
    painted(report, device, kitti, synth, args.tiny, workers)
    inference(report, device, kitti, reference, synth, args.tiny)
    synth_dir.cleanup()
    seconds = time.perf_counter() - started
    failed = [r for r in report.rows if r["ok"] is False]
    print(f"{len(report.rows)} figures in {seconds:.0f} s; {len(failed)} over their bound")
    if args.json:
        result = {
            "device": str(device),
            "device_name": name,
            "torch": torch.__version__,
            "tiny": args.tiny,
            "seconds": seconds,
            "rows": report.rows,
            **report.sections,
        }
        write_json_atomic(args.json, result)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
