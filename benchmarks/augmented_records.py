"""Can on-the-fly augmentation keep the model fed? Per-record cost of ``pgnn.training.dataset`` vs a training
step.

Per real KITTI frame (the shared kitti_sample's velodyne frames, Car training graph ``car``), single thread,
milliseconds of:

============== =================================================================================
cache read     one record from the npz graph cache (``pgnn.graphs.cache.GraphCache``; what training reads
               when augmentation is off)
graph+targets  ``pgnn.graphs.records.graph_record``: graph, features, vertex targets (what the cache holds)
augment        the original's Car augmentation alone (``ORIGINAL_CAR_AUGMENT``: rotation, flip,
               per-object shift)
gt paste       ground-truth sampling alone (``GtSampleConfig()``: 2 cars, 10 pedestrians, 10 cyclists,
               from a database of these frames' objects)
record aug     ``AugmentedRecords``: augment + graph + features + targets
record aug+gt  the same with ground-truth sampling first
============== =================================================================================

and one optimiser step (forward, backward, Adam; dummy loss) of the ``small`` preset's model on a batch of
``--batch`` of these frames' training graphs. Times are medians over ``--repeat`` runs (each with another
epoch, so another sample) of process CPU time, which other load on a shared machine inflates less than wall
time; a table row is the mean over frames.

    .venv/bin/python benchmarks/augmented_records.py [--repeat 5] [--batch 2]

Reading the result: a step of B frames needs B records; W loader workers build W records at a time, so they
keep up when ``W >= B * record_ms / step_ms``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KITTI = Path(os.environ.get("PGNN_SHARED", REPO.parent / "shared")) / "data" / "kitti_sample"
FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
GPU_STEP_MS = 70.0  # a car_T3 training step at batch 4 on a GPU (the figure this is compared with)


def cpu_ms(fn: Callable[[int], object], repeat: int) -> float:
    """Median process CPU milliseconds of ``fn(r)`` for r = 0..repeat-1 (after one warm-up call)."""
    fn(repeat)  # numba compilation, caches
    times = []
    for r in range(repeat):
        t = time.process_time()
        fn(r)
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="a gt_db parquet to paste from (default: these frames' own objects, which hold only a few "
        "pedestrians and cyclists, so fewer than the 22 crops a scene asks for get tried)",
    )
    args = parser.parse_args()

    import torch

    from pgnn.config.augment import ORIGINAL_CAR_AUGMENT
    from pgnn.config.gt_sampling import GtSampleConfig
    from pgnn.config.network import MODEL_PRESETS
    from pgnn.data.augment import apply_augmentations
    from pgnn.data.frames import load_frame
    from pgnn.data.gt_db import GtDatabase, build_gt_db, read_gt_db
    from pgnn.data.gt_paste import sample_and_paste
    from pgnn.data.labels import labels_to_boxes
    from pgnn.data.points import point_set_from_frame
    from pgnn.graphs.cache import GraphCache, write_graph_shard
    from pgnn.graphs.records import graph_record
    from pgnn.nn.graph_input import collate_graphs, graph_input_from_arrays
    from pgnn.nn.model import PointGNN
    from pgnn.recipe.presets import PRESETS
    from pgnn.training.dataset import AugmentedRecords, augment_rng

    torch.set_num_threads(1)
    recipe = PRESETS["small"]
    graph_cfg, targets = recipe.graph, recipe.targets
    frames = [load_frame(KITTI, fid) for fid in FRAMES]
    db = read_gt_db(args.db) if args.db else GtDatabase.from_table(build_gt_db(frames))
    print(f"# database: {len(db)} crops, " + ", ".join(f"{c} {len(db.indices(c))}" for c in db.classes))
    paste = GtSampleConfig()
    aug = AugmentedRecords(frames, graph_cfg, targets, ORIGINAL_CAR_AUGMENT, seed=0)
    aug_gt = AugmentedRecords(
        frames, graph_cfg, targets, ORIGINAL_CAR_AUGMENT, seed=0, gt_sampling=paste, gt_db=db
    )
    records = [graph_record(f, graph_cfg, targets, 0) for f in frames]
    with tempfile.TemporaryDirectory() as tmp:
        from pgnn.core.io import write_json_atomic
        from pgnn.core.shards import MANIFEST

        write_graph_shard(Path(tmp) / "shard-0000.npz", records)
        manifest = {"shards": [{"file": "shard-0000.npz", "frames": list(FRAMES)}]}
        write_json_atomic(Path(tmp) / MANIFEST, manifest)
        cache = GraphCache(tmp)
        rows: dict[str, list[float]] = {}
        for i, frame in enumerate(frames):
            points = point_set_from_frame(frame)
            boxes = labels_to_boxes(frame.labels).reshape(-1, 7)
            names = [lb.type for lb in frame.labels]
            cases: dict[str, Callable[[int], object]] = {
                "cache read": lambda r, i=i: cache[i],
                "graph+targets": lambda r, f=frame: graph_record(f, graph_cfg, targets, r),
                "augment": lambda r, p=points, b=boxes, n=names, f=frame: apply_augmentations(
                    p, b, n, ORIGINAL_CAR_AUGMENT, augment_rng(0, r, f.frame_id)
                ),
                "gt paste": lambda r, p=points, b=boxes, n=names, f=frame: sample_and_paste(
                    p, b, n, db, paste, augment_rng(0, r, f.frame_id)
                ),
                "record aug": lambda r, i=i: aug.record(i, r),
                "record aug+gt": lambda r, i=i: aug_gt.record(i, r),
            }
            for name, fn in cases.items():
                rows.setdefault(name, []).append(cpu_ms(fn, args.repeat))

    model = PointGNN(MODEL_PRESETS["small"], generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    step_ms = []
    for start in range(0, len(records) - args.batch + 1, args.batch):
        batch = [graph_input_from_arrays(r, "cpu") for r in records[start : start + args.batch]]
        graph = collate_graphs(batch)

        def step(_r: int, graph: object = graph) -> None:
            logits, boxes = model(graph)
            (logits.sum() + boxes.sum()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step_ms.append(cpu_ms(step, max(2, args.repeat // 2)))
    small_step = float(np.mean(step_ms))

    print(
        f"# per record, CPU ms, 1 thread; mean over {len(frames)} real KITTI frames of the median of "
        f"{args.repeat} samples"
    )
    print(f"{'stage':<16} {'ms':>8} {'min':>8} {'max':>8}")
    for name, values in rows.items():
        print(f"{name:<16} {np.mean(values):8.1f} {np.min(values):8.1f} {np.max(values):8.1f}")
    print(f"\n# small preset, step of batch {args.batch} (forward, backward, Adam): {small_step:.0f} CPU ms")
    for name in ("record aug", "record aug+gt"):
        rec = float(np.mean(rows[name]))
        cpu_workers = args.batch * rec / small_step
        gpu_workers = 4 * rec / GPU_STEP_MS
        print(
            f"{name:<14} {rec:6.1f} ms/record: CPU small step needs {cpu_workers:4.2f} workers; "
            f"a {GPU_STEP_MS:.0f} ms GPU step at batch 4 needs {gpu_workers:4.1f} workers"
        )


if __name__ == "__main__":
    main()
