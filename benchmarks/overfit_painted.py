"""Overfit the painted recipe on a few real painted KITTI frames until it finds their labelled cars.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overfit_painted.py \
        [--frames 000002,000003,000004] [--iterations 1] [--steps 400] [--eval-every 50] [--log-every 25] \
        [--optimizer adam] [--lr 0.001] [--batch-size 1] [--copies 41] [--work DIR] [--json OUT.json]

Not a test and never run by CI (its run time: benchmarks/README.md, "Overfitting real painted frames"): a
check that the whole pipeline learns real data (issue 11, item 8). It runs pgnn's own step functions end to
end, as the DVC stages do:

1. a KITTI root in ``--work``: symlinks to the shared ``kitti_sample`` (``training/{calib,image_2,label_2,
   painted_lidar,velodyne}``, read-only) plus its own ``ImageSets/train.txt`` listing ``--frames``;
2. ``prepare_step`` with ``data.painted: true`` (PointPainting rows ``[x, y, z, r, 4 scores]``);
3. ``graphs_step`` twice on the same prepared frames: the training graph (``train``) and the runtime graph
   (``val``, what ``predict`` runs on);
4. ``train_and_export`` of the ``painted_car_T3`` preset (``is`` inputs: reflectance + 4 painted scores) with
   the params overrides below, a checkpoint every ``--eval-every`` steps;
5. every checkpoint, then the exported model: ``predict_step`` on the runtime graphs, and the official KITTI
   Car AP of the same frames (``evaluate_step`` for the final model; ``pgnn.eval.kitti``). Because the
   protocol cannot score few cars (:func:`car_ap`), each is also scored on the frames repeated ``--copies``
   times.

The overrides (params.yaml sections, applied by ``pgnn.recipe.presets.apply_preset``):

* ``model.gnn_layers``: ``--iterations`` Point-GNN iterations of the preset's layer (T1 by default: a step of
  the T3 model takes seconds on this CPU);
* ``augment.enabled: false``: no augmentation (the preset has the original's flip/rotate/shift);
* ``train``: ``--optimizer`` / ``--lr`` (Adam 1e-3 by default instead of the seed's SGD 0.125), constant LR,
  ``--batch-size``, ``--steps`` (and ``max_epoch`` / ``save_every_epoch`` set out of the way: ``null`` would
  keep the preset's 150 and 20); ``resample_graph`` stays on (a fresh random 0.8 m keypoint graph per frame
  and epoch, as the original's data provider does), data loaded in this process (``num_workers: 0``).

It prints the curve (step, training wall time, losses, vertex recall/precision of the Car yaw class, Car AP
per checkpoint) and the final evaluation tables; ``--json`` writes them. ``--work`` keeps the folder (a rerun
with more ``--steps`` resumes the training there); without it a temporary folder is used and removed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PGNN_SHARED", REPO.parent / "shared"))
KITTI_SAMPLE = SHARED / "data" / "kitti_sample"
# The painted frames (000000-000005) whose labels hold a Car of the KITTI evaluation (2D box >= 25 px tall):
# 000002 (34 m, moderate), 000003 (13 m, easy), 000004 (38 m moderate; its 51 m car is 21 px: ignored).
# 000001's only Car is 22 px tall (ignored by every difficulty); 000000 and 000005 have no Car.
FRAMES = ("000002", "000003", "000004")
LINKED = ("calib", "image_2", "label_2", "painted_lidar", "velodyne")


def make_root(sample: Path, root: Path, frames: tuple[str, ...]) -> Path:
    """A KITTI root of symlinks to ``sample``'s files with ``ImageSets/train.txt`` listing ``frames``."""
    for sub in LINKED:
        src = sample / "training" / sub
        if src.is_dir():
            (root / "training").mkdir(parents=True, exist_ok=True)
            (root / "training" / sub).symlink_to(src, target_is_directory=True)
    (root / "ImageSets").mkdir(parents=True, exist_ok=True)
    (root / "ImageSets" / "train.txt").write_text("".join(f"{f}\n" for f in frames))
    return root


def make_params(args: argparse.Namespace, root: Path) -> Any:
    from pgnn.config.network import MODEL_PRESETS
    from pgnn.config.params import DataConfig, Params

    layer = MODEL_PRESETS["painted_car_T3"].gnn_layers[0].model_dump(mode="json")
    return Params(
        preset="painted_car_T3",
        data=DataConfig(root=str(root), painted=True, train_split="train", val_split="train", workers=1),
        model={"gnn_layers": [layer] * args.iterations},
        train={
            "optimizer": args.optimizer,
            "initial_lr": args.lr,
            "decay_step": 10**9,  # constant LR
            "batch_size": args.batch_size,
            "max_steps": args.steps,
            "max_epoch": 10**6,  # None would keep the preset's 150 epochs (null = keep); --steps decides
            "checkpoint_every": args.eval_every,
            "save_every_epoch": 10**6,  # (null keeps the preset's 20)
            "keep_last": args.steps // args.eval_every + 1,  # every checkpoint, evaluated after training
            "log_every": args.log_every,
            "num_workers": 0,
            "seed": args.seed,
        },
        augment={"enabled": False},
    )


def read_live(live_dir: Path) -> dict[int, dict[str, float]]:
    """dvclive's per-metric tsv files -> {step: {metric: value}}, plus ``wall_s``: the training wall time up
    to that step (the sum of the log intervals' ``time/sec_per_step`` x steps; an interval's time includes
    the validation and checkpoint run at its start)."""
    rows: dict[int, dict[str, float]] = {}
    base = live_dir / "plots" / "metrics"
    for tsv in sorted(base.rglob("*.tsv")):
        name = str(tsv.relative_to(base).with_suffix(""))
        with open(tsv, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                rows.setdefault(int(row["step"]), {})[name] = float(row[tsv.stem])
    wall, last = 0.0, 0
    for step in sorted(rows):
        if "time/sec_per_step" in rows[step]:
            wall += rows[step]["time/sec_per_step"] * (step - last)
            last = step
        rows[step]["wall_s"] = wall
    return dict(sorted(rows.items()))


def frame_labels(prepared: Path, pred_dir: Path) -> tuple[list[Any], list[Any]]:
    """Ground truth and detections of the prepared frames (``evaluate_step``'s reading)."""
    from pgnn.data.kitti import read_labels
    from pgnn.data.prepare import read_prepared_dir

    frames = read_prepared_dir(prepared)
    gt = [f.labels for f in frames]
    dt = []
    for f in frames:
        path = pred_dir / f"{f.frame_id}.txt"
        dt.append(read_labels(path, allow_score=True) if path.exists() else [])
    return gt, dt


def car_ap(prepared: Path, pred_dir: Path, copies: int = 1) -> dict[str, float]:
    """Official KITTI Car AP (``pgnn.eval.kitti``) of the predictions, the frames listed ``copies`` times.

    The protocol samples its 41 recall points from the true-positive scores, one per ground-truth box at
    most, so with n < 41 boxes even perfect detections score R40 = (n - 1) / 40 (and R11 = n / 11 for
    n <= 10): 3 frames with 3 moderate cars can report at most 5.0. Repeating the same frames and
    detections ``copies`` times (>= 41 boxes per difficulty) keeps every precision/recall point and lets
    the sampling see them: the AP these detections would get among enough objects.
    """
    from pgnn.eval.kitti import ap_from_curves, pr_curves

    gt, dt = frame_labels(prepared, pred_dir)
    return ap_from_curves(pr_curves(gt * copies, dt * copies, ("Car",)))


def eval_checkpoint(
    recipe: Any, ckpt: Path, out: Path, prepared: Path, graphs_runtime: Path, copies: int
) -> dict[str, float]:
    """``predict_step`` of one training checkpoint on the runtime graphs; its Car AP, official (``x1``) and
    on the repeated frames (``xN``)."""
    from pgnn.nn.checkpoint import export_model
    from pgnn.pipeline.steps.predict import predict_step
    from pgnn.pipeline.steps.train import model_card

    out.mkdir(parents=True, exist_ok=True)
    export_model(ckpt, out / "model.pt", model_card(recipe))
    predict_step(out / "model.pt", graphs_runtime, prepared, out / "predictions", out / "predict.json")
    values = {}
    repeated = car_ap(prepared, out / "predictions", copies)
    for label, ap in (("x1", car_ap(prepared, out / "predictions")), ("xN", repeated)):
        for metric in ("bbox", "aos", "bev", "3d"):
            for diff in ("easy", "moderate", "hard"):
                values[f"{label}/{metric}/{diff}"] = ap[f"Car/{metric}/{diff}/R40"]
    return values


CURVE_COLUMNS = (
    ("loss/total", "loss"),
    ("loss/cls", "cls"),
    ("loss/loc", "loc"),
    ("Car_v/recall", "rec_v"),
    ("Car_v/precision", "prec_v"),
    ("Car_v/pr_auc", "prauc_v"),
    ("ap/x1/bev/moderate", "BEVmod1"),
    ("ap/xN/bbox/moderate", "2D_mod"),
    ("ap/xN/bev/easy", "BEVeasy"),
    ("ap/xN/bev/moderate", "BEV_mod"),
    ("ap/xN/3d/moderate", "3D_mod"),
    ("ap/xN/aos/moderate", "AOS_mod"),
)


def curve_table(rows: dict[int, dict[str, float]]) -> str:
    header = f"{'step':>6} {'min':>6} " + " ".join(f"{short:>8}" for _, short in CURVE_COLUMNS)
    lines = [header]
    for step, values in rows.items():
        cells = []
        for key, _ in CURVE_COLUMNS:
            v = values.get(key)
            cells.append(f"{'-':>8}" if v is None else f"{v:8.3f}" if abs(v) < 10 else f"{v:8.1f}")
        minutes = values["wall_s"] / 60
        lines.append(f"{step:6d} {minutes:6.1f} " + " ".join(cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pgnn.eval.report import format_table
    from pgnn.nn.checkpoint import checkpoint_name
    from pgnn.pipeline.steps.evaluate import evaluate_step
    from pgnn.pipeline.steps.graphs import graphs_step
    from pgnn.pipeline.steps.predict import predict_step
    from pgnn.pipeline.steps.prepare import prepare_step
    from pgnn.pipeline.steps.train import train_and_export
    from pgnn.recipe.presets import apply_preset

    torch.set_num_threads(1)
    work = Path(args.work)
    root = work / "kitti"
    if not root.exists():
        make_root(Path(args.sample), root, tuple(args.frames))
    params = make_params(args, root)
    recipe = apply_preset(params)
    print(
        f"recipe: painted_car_T3, T{recipe.model.num_iterations}, input_dim {recipe.model.input_dim}, "
        f"features {recipe.targets.input_features}, augment {recipe.augment.steps or 'off'}, "
        f"train {recipe.train.optimizer} lr {recipe.train.initial_lr} batch {recipe.train.batch_size} "
        f"steps {recipe.train.max_steps}, resample_graph {recipe.train.resample_graph}",
        flush=True,
    )
    times: dict[str, float] = {}
    t = time.perf_counter()
    prepared = work / "prepared"
    prepare_step(params.data, "train", prepared)
    times["prepare_s"] = time.perf_counter() - t
    t = time.perf_counter()
    graphs_train, graphs_runtime = work / "graphs" / "train", work / "graphs" / "runtime"
    graphs_step(recipe, "train", prepared, graphs_train, params.data.frames_per_shard, 1)
    graphs_step(recipe, "val", prepared, graphs_runtime, params.data.frames_per_shard, 1)
    times["graphs_s"] = time.perf_counter() - t
    print(f"prepare {times['prepare_s']:.1f} s, graphs {times['graphs_s']:.1f} s", flush=True)

    live_dir = work / "live"
    t = time.perf_counter()
    model_path = train_and_export(
        recipe,
        graphs_train,
        work / "checkpoints",
        work / "model.pt",
        live_dir,
        work / "train_metrics.json",
        prepared_dir=prepared,
    )
    times["train_s"] = time.perf_counter() - t
    rows = read_live(live_dir)

    # The AP curve: each checkpoint (one per --eval-every steps) through predict on the runtime graphs.
    t = time.perf_counter()
    ckpt_dir = next((work / "checkpoints").iterdir())
    for step in range(args.eval_every, args.steps + 1, args.eval_every):
        ckpt = ckpt_dir / checkpoint_name(step)
        if step in rows and ckpt.is_file():
            values = eval_checkpoint(
                recipe, ckpt, work / "eval" / str(step), prepared, graphs_runtime, args.copies
            )
            rows[step].update({f"ap/{k}": v for k, v in values.items()})
            print(
                f"step {step}: Car BEV moderate {values['x1/bev/moderate']:.1f} official, "
                f"{values['xN/bev/moderate']:.1f} on the frames x{args.copies}",
                flush=True,
            )
    times["checkpoint_eval_s"] = time.perf_counter() - t

    t = time.perf_counter()
    timings = predict_step(model_path, graphs_runtime, prepared, work / "predictions", work / "predict.json")
    times["predict_s"] = time.perf_counter() - t
    t = time.perf_counter()
    print("\nfinal model, official KITTI evaluation of the frames (capped by their few cars):")
    results = evaluate_step(
        params.eval,
        prepared,
        work / "predictions",
        work / "eval.json",
        work / "curves",
        default_classes=("Car",),
    )
    times["evaluate_s"] = time.perf_counter() - t
    repeated = car_ap(prepared, work / "predictions", args.copies)
    print(f"\nfinal model, the same detections on the frames repeated x{args.copies}:")
    print(format_table(repeated))

    print(
        "\ncurve (min: training wall minutes; rec/prec/prauc_v: vertex recall, precision, PR-AUC of Car_v, "
        "the along-the-road yaw class, over the log interval; AP: KITTI R40 Car of the checkpoint on the "
        f"frames' runtime graphs, BEVmod1 official, the others on the frames x{args.copies})"
    )
    print(curve_table(rows))
    print("times: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    out = {
        "frames": list(args.frames),
        "copies": args.copies,
        "recipe": recipe.model_dump(mode="json"),
        "times": times,
        "predict": timings,
        "curve": {str(k): v for k, v in rows.items()},
        "eval": results,
        "eval_repeated": repeated,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


def run_benchmark(
    frames: tuple[str, ...] = FRAMES,
    sample: str = str(KITTI_SAMPLE),
    iterations: int = 1,
    steps: int = 400,
    eval_every: int = 50,
    log_every: int = 25,
    optimizer: str = "adam",
    lr: float = 1e-3,
    batch_size: int = 1,
    seed: int = 0,
    copies: int = 41,
    work: str | None = None,
    json_path: str | None = None,
) -> dict[str, Any]:
    """The overfit run (``pgnn bench``'s entry point): the curve, the final evaluation and the stage times."""
    args = argparse.Namespace(
        frames=list(frames),
        sample=sample,
        iterations=iterations,
        steps=steps,
        eval_every=eval_every,
        log_every=log_every,
        optimizer=optimizer,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        copies=copies,
        work=work,
        json=json_path,
    )
    if work is not None:
        Path(work).mkdir(parents=True, exist_ok=True)
        return run(args)
    with tempfile.TemporaryDirectory(prefix="pgnn-overfit-") as tmp:
        args.work = tmp
        return run(args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--frames", default=",".join(FRAMES), help="comma-separated frame ids")
    p.add_argument("--sample", default=str(KITTI_SAMPLE), help="the shared kitti_sample folder")
    p.add_argument("--iterations", type=int, default=1, help="Point-GNN iterations T (the preset: 3)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--optimizer", default="adam", choices=["sgd", "momentum", "rmsprop", "adam"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--copies", type=int, default=41, help="the frames' repeats in the second AP (see car_ap)")
    p.add_argument(
        "--work",
        default=None,
        help="working folder, kept (a rerun resumes training there); default: a temporary one, removed",
    )
    p.add_argument("--json", default=None, help="write the curve and results here")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    run_benchmark(
        frames=tuple(a.frames.split(",")),
        sample=a.sample,
        iterations=a.iterations,
        steps=a.steps,
        eval_every=a.eval_every,
        log_every=a.log_every,
        optimizer=a.optimizer,
        lr=a.lr,
        batch_size=a.batch_size,
        seed=a.seed,
        copies=a.copies,
        work=a.work,
        json_path=a.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
