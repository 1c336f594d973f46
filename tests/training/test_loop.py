"""The training loop on tiny random graphs: schedule, sharding, learning, logging, batching invariances.

The helpers here (``tiny_records``, ``TINY_MODEL``, ``write_records``, ``CHILD_SCRIPT``) are shared with
``test_resume.py`` and ``test_ddp.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from pgnn.config.network import GNNLayerConfig, LossConfig, ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import DataError
from pgnn.training.batches import collate_records
from pgnn.training.loop import train
from pgnn.training.schedule import (
    epoch_permutation,
    learning_rate,
    micro_batch_plan,
    rank_micro_batches,
    steps_per_epoch,
    total_steps,
)

TINY_MODEL = ModelConfig(
    num_classes=4,
    input_dim=1,
    point_mlp=(8, 16),
    set_mlp=(16,),
    gnn_layers=(GNNLayerConfig(offset_mlp=(8, 3), edge_mlp=(16,), update_mlp=(16,)),),
    cls_hidden=(16,),
    loc_hidden=(8,),
)
META = {"graph_preset": "tiny", "encoding": "classaware", "label_method": "Car", "input_features": "i"}
LOSS = LossConfig(cls_loss_weight=1.0, loc_loss_weight=1.0)


def tiny_frame(rng: np.random.Generator, n_points: int = 300, n_keypoints: int = 40) -> dict[str, np.ndarray]:
    """A 3-level graph in the reference layout, with targets the network can learn.

    The reflectance is a smooth field over x-z, so a keypoint's neighbourhood tells its own value; the class
    follows it (< 0.4: 0, < 0.7: 1, else 2) and so does the box target; classes 1 and 2 have boxes.
    """
    xyz = rng.uniform([0.0, 0.0, 0.0], [8.0, 2.0, 8.0], size=(n_points, 3)).astype(np.float32)  # (N0, 3)
    phase = rng.uniform(0.0, 2 * np.pi, size=2)
    field = 0.5 + 0.5 * np.sin(0.6 * xyz[:, 0] + phase[0]) * np.cos(0.6 * xyz[:, 2] + phase[1])
    refl = field[:, None].astype(np.float32)  # (N0, 1)
    kp = np.sort(rng.choice(n_points, n_keypoints, replace=False))  # (N1,)
    kxyz = xyz[kp]
    sets = cKDTree(xyz).query_ball_point(kxyz, r=1.0)
    edges0 = np.array([(j, i) for i, js in enumerate(sets) for j in sorted(js)], dtype=np.int32)  # (E0, 2)
    pairs = cKDTree(kxyz).query_pairs(2.5, output_type="ndarray")
    loops = np.repeat(np.arange(n_keypoints)[:, None], 2, axis=1)
    edges1 = np.concatenate([pairs, pairs[:, ::-1], loops]).astype(np.int32)
    edges1 = edges1[np.lexsort((edges1[:, 0], edges1[:, 1]))]  # (E1, 2) sorted by destination
    r = refl[kp, 0]
    cls_labels = np.digitize(r, [0.4, 0.7]).astype(np.int64)  # (N1,)
    box_targets = ((r[:, None] - 0.5) * np.linspace(0.5, 2.0, 7)[None, :]).astype(np.float32)  # (N1, 7)
    return {
        "features": refl,
        "vertex_coord_0": xyz,
        "vertex_coord_1": kxyz,
        "vertex_coord_2": kxyz.copy(),
        "keypoint_indices_0": kp.astype(np.int32),
        "keypoint_indices_1": np.arange(n_keypoints, dtype=np.int32),
        "edges_0": edges0,
        "edges_1": edges1,
        "cls_labels": cls_labels,
        "box_targets": box_targets,
        "valid_box": cls_labels > 0,
    }


def tiny_records(n_frames: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n_frames`` tiny frames (a list is a record source: ``len`` and ``[i]``)."""
    rng = np.random.default_rng(seed)
    return [{**tiny_frame(rng), "frame_id": np.array([i])} for i in range(n_frames)]


def write_records(records: list[dict[str, np.ndarray]], directory: Path) -> Path:
    """Save the records as npz files for a child process (``CHILD_SCRIPT`` reads them back)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        np.savez(directory / f"{i:04d}.npz", **r)
    return directory


# A child process: python -c CHILD_SCRIPT <records dir> <job json>. The job json holds model/train/loss
# configs, out_dir, live_dir, meta and torch's thread count.
CHILD_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np
import torch
from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.training.loop import train

records = [dict(np.load(p)) for p in sorted(Path(sys.argv[1]).glob("*.npz"))]
job = json.loads(Path(sys.argv[2]).read_text())
torch.set_num_threads(job["threads"])
train(records, ModelConfig.model_validate(job["model"]), TrainConfig.model_validate(job["train"]),
      LossConfig.model_validate(job["loss"]), job["out_dir"], live_dir=job["live_dir"], meta=job["meta"])
"""


def write_job(path: Path, train_cfg: TrainConfig, out_dir: Path, live_dir: Path | None = None) -> Path:
    job = {
        "model": TINY_MODEL.model_dump(mode="json"),
        "train": train_cfg.model_dump(mode="json"),
        "loss": LOSS.model_dump(mode="json"),
        "out_dir": str(out_dir),
        "live_dir": None if live_dir is None else str(live_dir),
        "meta": META,
        "threads": torch.get_num_threads(),
    }
    path.write_text(json.dumps(job))
    return path


def final_state(ckpt_path: Path) -> dict:
    return torch.load(ckpt_path, weights_only=True)


def tiny_train_config(**overrides) -> TrainConfig:
    base = {
        "optimizer": "adam",
        "initial_lr": 0.01,
        "decay_step": 1000,
        "batch_size": 2,
        "max_steps": 6,
        "max_epoch": None,
        "checkpoint_every": 1000,
        "log_every": 1000,
        "device": "cpu",
    }
    return TrainConfig(**{**base, **overrides})


# ----------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: on this shared 2-core machine, 2 busy-waiting threads slow tiny ops 5-10x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_config_needs_a_stopping_rule_and_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=None, max_epoch=None)
    with pytest.raises(ValueError):
        TrainConfig(pseudo_batch_factor=2)


def test_learning_rate_is_tf_exponential_decay() -> None:
    cfg = TrainConfig(initial_lr=0.125, decay_step=400_000, decay_factor=0.1, staircase=True)
    assert learning_rate(0, cfg) == 0.125
    assert learning_rate(399_999, cfg) == 0.125
    assert learning_rate(400_000, cfg) == pytest.approx(0.0125)
    assert learning_rate(1_300_000, cfg) == pytest.approx(0.125e-3)
    smooth = cfg.model_copy(update={"staircase": False})
    assert learning_rate(200_000, smooth) == pytest.approx(0.125 * math.sqrt(0.1))


def test_steps_and_sharding_cover_each_global_batch_once() -> None:
    cfg = TrainConfig(batch_size=4, accumulation_steps=2, max_steps=None, max_epoch=3)
    assert steps_per_epoch(21, cfg) == 2 and total_steps(21, cfg) == 6  # remainder dropped
    assert total_steps(21, cfg.model_copy(update={"max_steps": 5})) == 5
    perm = epoch_permutation(7, 1, 21)
    np.testing.assert_array_equal(perm, epoch_permutation(7, 1, 21))
    assert not np.array_equal(perm, epoch_permutation(7, 2, 21))
    single = rank_micro_batches(perm, 0, 2, cfg, rank=0, world_size=1)
    ranks = [rank_micro_batches(perm, 0, 2, cfg, rank=r, world_size=2) for r in range(2)]
    assert len(single) == 4 and all(len(b) == 4 for b in single)
    for m in range(4):  # each micro-batch of the single process = the ranks' halves, in rank order
        assert single[m] == ranks[0][m] + ranks[1][m]
    assert sorted(i for b in single for i in b) == sorted(perm[:16].tolist())
    # resuming at step 1 of the epoch continues with the same micro-batches
    assert rank_micro_batches(perm, 1, 2, cfg, rank=0, world_size=1) == single[2:]
    # the whole run's plan crosses epochs; resumed at (step 3 = epoch 1, position 1) it is the same tail
    whole = list(micro_batch_plan(21, cfg, 0, 1, step=0, epoch=0, position=0, last_step=5))
    assert len(whole) == 5 * 2 and whole[:4] == rank_micro_batches(
        epoch_permutation(0, 0, 21), 0, 2, cfg, 0, 1
    )
    assert list(micro_batch_plan(21, cfg, 0, 1, step=3, epoch=1, position=1, last_step=5)) == whole[6:]


def test_collate_records_offsets_and_target_checks() -> None:
    recs = tiny_records(2)
    batch = collate_records([(0, recs[0]), (1, recs[1])])
    n0, n1 = (len(r["cls_labels"]) for r in recs)
    assert batch.cls_labels.shape == (n0 + n1,) and batch.box_targets.shape == (n0 + n1, 7)
    assert batch.graph.batch.tolist() == [0] * n0 + [1] * n1
    assert batch.indices == (0, 1)
    assert int(batch.graph.edges[0][:, 1].max()) == n0 + n1 - 1
    bad = dict(recs[0], cls_labels=recs[0]["cls_labels"][:-1])
    with pytest.raises(DataError, match="training record 5 .frame"):
        collate_records([(5, bad)])
    with pytest.raises(DataError, match="valid_box"):
        collate_records([(0, {k: v for k, v in recs[0].items() if k != "valid_box"})])


def test_loss_falls_and_dvclive_and_checkpoints_appear(tmp_path: Path) -> None:
    records = tiny_records(8)
    cfg = tiny_train_config(max_steps=40, log_every=5, checkpoint_every=10, keep_last=2)
    final = train(records, TINY_MODEL, cfg, LOSS, tmp_path / "ckpt", live_dir=tmp_path / "live", meta=META)

    assert final == tmp_path / "ckpt" / "ckpt-00000040.pt"
    kept = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert kept == [".pgnn-output", "ckpt-00000030.pt", "ckpt-00000040.pt"]  # + the run folder's marker
    ckpt = final_state(final)
    assert (ckpt["step"], ckpt["epoch"], ckpt["position"]) == (40, 10, 0)  # 4 steps per epoch
    assert ckpt["train_config"]["max_steps"] == 40 and ckpt["graph_preset"] == "tiny"

    metrics = json.loads((tmp_path / "live" / "metrics.json").read_text())
    assert metrics["step"] == 40
    assert set(metrics["Car_h"]) >= {"recall", "precision", "pr_auc", "loc_loss", "loc_x", "loc_ry"}
    tsv = tmp_path / "live" / "plots" / "metrics" / "loss" / "total.tsv"
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    assert rows[0] == ["step", "total"]
    steps = [int(r[0]) for r in rows[1:]]
    losses = [float(r[1]) for r in rows[1:]]
    assert steps == [5, 10, 15, 20, 25, 30, 35, 40]
    assert losses[-1] < 0.5 * losses[0], losses
    assert (tmp_path / "live" / "plots" / "metrics" / "lr.tsv").exists()
    assert metrics["Background"]["recall"] > 0.5


def test_accumulation_equals_a_bigger_batch(tmp_path: Path) -> None:
    records = tiny_records(8)
    big = train(
        records, TINY_MODEL, tiny_train_config(batch_size=4, max_steps=3), LOSS, tmp_path / "a", meta=META
    )
    acc = train(
        records,
        TINY_MODEL,
        tiny_train_config(batch_size=2, accumulation_steps=2, max_steps=3),
        LOSS,
        tmp_path / "b",
        meta=META,
    )
    a, b = final_state(big)["model"], final_state(acc)["model"]
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(a[n], TINY_MODEL_INIT[n]) for n in a)  # it did train


def test_batches_do_not_depend_on_num_workers(tmp_path: Path) -> None:
    records = tiny_records(8)
    base = tiny_train_config(max_steps=4)
    p0 = train(records, TINY_MODEL, base, LOSS, tmp_path / "w0", meta=META)
    p2 = train(
        records, TINY_MODEL, base.model_copy(update={"num_workers": 2}), LOSS, tmp_path / "w2", meta=META
    )
    a, b = final_state(p0), final_state(p2)
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


def test_meta_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="graph_preset"):
        train(tiny_records(2), TINY_MODEL, tiny_train_config(), LOSS, tmp_path, meta={})


def _init_state() -> dict[str, torch.Tensor]:
    from pgnn.nn.model import PointGNN

    return PointGNN(TINY_MODEL, generator=torch.Generator().manual_seed(0)).state_dict()


TINY_MODEL_INIT = _init_state()


def test_divergence_stops_before_a_bad_update(tmp_path: Path) -> None:
    cfg = tiny_train_config(optimizer="sgd", initial_lr=1e12, max_steps=50, checkpoint_every=1)
    with pytest.raises(FloatingPointError, match="non-finite (loss|gradient) in step"):
        train(tiny_records(8), TINY_MODEL, cfg, LOSS, tmp_path, meta=META)
    saved = sorted(tmp_path.glob("ckpt-*.pt"))
    assert saved, "expected the steps before the divergence to be checkpointed"
    for path in saved:
        assert all(torch.isfinite(v).all() for v in final_state(path)["model"].values()), path


def test_save_every_epoch_also_checkpoints_at_those_epoch_ends(tmp_path: Path) -> None:
    # 8 records at batch 2: 4 steps an epoch; 3 epochs; every 2nd epoch (step 8) and the end (step 12)
    cfg = tiny_train_config(max_steps=None, max_epoch=3, save_every_epoch=2, keep_last=10)
    train(tiny_records(8), TINY_MODEL, cfg, LOSS, tmp_path / "ckpt", meta=META)
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("ckpt-*.pt"))
    assert saved == ["ckpt-00000008.pt", "ckpt-00000012.pt"]
