"""What a week-long run can trust: the class filter is the original's split rule, the run key holds only what
changes the weights (post-processing and eval params resume, they do not restart), a second run never touches
the first one's files, gradient clipping, and validation AP while training, end to end for a 3-class model on
the synthetic data."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_loop import LOSS, META, TINY_MODEL, tiny_records, tiny_train_config

from pgnn.config.params import Params
from pgnn.data.prepare import frames_with_classes
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.nn.checkpoint import load_checkpoint
from pgnn.pipeline.runner import run_in_order, upstream
from pgnn.pipeline.stages import STAGE_BY_NAME, Layout
from pgnn.pipeline.standalone import train_project
from pgnn.pipeline.steps.train import train_meta
from pgnn.recipe.presets import apply_preset
from pgnn.training.loop import train
from pgnn.training.source import train_run_key


def label_types(tar_path: Path) -> dict[str, frozenset[str]]:
    """Object types per frame of the 7,481 KITTI training label files (read from the tarball in memory)."""
    out = {}
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".txt"):
                text = tar.extractfile(member).read().decode()
                out[Path(member.name).stem] = frozenset(line.split()[0] for line in text.splitlines() if line)
    return out


def test_class_filter_gives_exactly_the_original_class_splits(shared_data: Path) -> None:
    types = label_types(shared_data / "kitti_labels" / "training_label_2.tar.gz")
    assert len(types) == 7481
    splits = shared_data / "kitti_splits"
    train = (splits / "ImageSets" / "train.txt").read_text().split()
    in_train = {fid: types[fid] for fid in train}
    for classes, name in (
        (["Car"], "train_car.txt"),
        (["Pedestrian", "Cyclist"], "train_pedestrian_cyclist.txt"),
    ):
        want = (splits / "point_gnn_splits" / name).read_text().split()
        assert frames_with_classes(in_train, classes) == want, name
    assert len(frames_with_classes(in_train, ["Car"])) == 3260


def test_run_key_holds_only_what_changes_the_weights(tmp_path: Path) -> None:
    base = apply_preset(Params())
    meta = train_meta(base)
    key = train_run_key(base, tmp_path, meta)
    same = [
        Params(postprocess={"score_threshold": 0.5}),
        Params(eval={"classes": ["Car", "Pedestrian"]}),
        Params(train={"max_steps": 5000, "keep_last": 9}),
        Params(train={"num_workers": 1, "device": "cpu"}),
    ]
    for p in same:
        r = apply_preset(p)
        assert train_run_key(r, tmp_path, train_meta(r)) == key, p
    for p in (
        Params(train={"seed": 1}),
        Params(train={"clip_grad_norm": 10.0}),
        Params(train={"log_every": 3}),  # the logged curves are results too
        Params(loss={"huber_delta": 2.0}),
    ):
        r = apply_preset(p)
        assert train_run_key(r, tmp_path, train_meta(r)) != key, p
    # DVC reruns train for postprocess (the model card it exports), which resumes at the same key and step
    assert "eval" not in STAGE_BY_NAME["train"].params and "postprocess" in STAGE_BY_NAME["train"].params


def small_project(tmp_path: Path, kitti_sample: Path, **sections: object) -> Path:
    from test_train_command import VELODYNE, kitti_root  # noqa: PLC0415 (a helper of the pipeline tests)

    if not (tmp_path / "kitti").exists():
        kitti_root(tmp_path / "kitti", kitti_sample, VELODYNE)
    params = {"preset": "small", "data": {"root": "kitti", "workers": 1}, **sections}
    params.setdefault("train", {})
    params["train"] = {"batch_size": 1, "checkpoint_every": 1, **params["train"]}
    path = tmp_path / "P.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.fixture
def pipeline_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "pipeline"))


def test_postprocess_and_eval_changes_resume_and_a_second_run_leaves_the_first_alone(
    tmp_path: Path, kitti_sample: Path, pipeline_helpers: None
) -> None:
    first = small_project(tmp_path, kitti_sample)
    train_project(first, max_steps=2)
    ckpts = tmp_path / "models" / "checkpoints"
    (run,) = list(ckpts.iterdir())
    small_project(tmp_path, kitti_sample, postprocess={"score_threshold": 0.6}, eval={"classes": ["Car"]})
    train_project(first, max_steps=3)  # resumes the same run at step 2
    assert list(ckpts.iterdir()) == [run] and load_checkpoint(tmp_path / "models" / "model.pt")["step"] == 3
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    small_project(tmp_path, kitti_sample, train={"seed": 7})
    train_project(first, max_steps=2)  # another run: its own folder
    assert len(list(ckpts.iterdir())) == 2
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_gradient_clipping_bounds_the_update(tmp_path: Path) -> None:
    cfg = tiny_train_config(optimizer="sgd", initial_lr=1.0, max_steps=1, clip_grad_norm=1e-3)
    out = train(tiny_records(4), TINY_MODEL, cfg, LOSS, tmp_path / "clip", meta=META)
    free = train(
        tiny_records(4),
        TINY_MODEL,
        tiny_train_config(optimizer="sgd", initial_lr=1.0, max_steps=1),
        LOSS,
        tmp_path / "free",
        meta=META,
    )
    from pgnn.nn.model import PointGNN

    init = PointGNN(TINY_MODEL, generator=torch.Generator().manual_seed(0)).state_dict()

    def step_norm(path: Path) -> float:
        model = load_checkpoint(path)["model"]
        return float(torch.sqrt(sum(((model[k] - init[k]) ** 2).sum() for k in init)))

    assert step_norm(out) <= 1e-3 * (1 + 1e-4)  # SGD at lr 1 moves by the clipped gradient
    assert step_norm(free) > 10 * step_norm(out)


def test_three_class_model_end_to_end_with_validation_ap_while_training(tmp_path: Path) -> None:
    """One model for Car, Pedestrian and Cyclist (``small_3class``) trains, predicts and evaluates on the
    synthetic data, and the official AP on val frames is logged to dvclive during training."""
    generate_dataset(tmp_path / "synth", 6, 0, 0.5)
    params = Params(
        preset="small_3class",
        data={"root": "synth", "frames_per_shard": 3, "workers": 1},
        train={"max_steps": 4, "batch_size": 1, "eval_every": 2, "eval_frames": 2, "class_filter": False},
    )
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params.model_dump(mode="json", exclude_unset=True)))
    layout = Layout(tmp_path)
    recipe = apply_preset(params)
    assert recipe.model.num_classes == 8 and recipe.postprocess.class_names[3] == "Pedestrian"
    run_in_order(layout, upstream(["evaluate"], params.data.root))
    live = layout.path("live")
    curve = live / "plots" / "metrics" / "val" / "Car" / "3d" / "moderate.tsv"
    steps = [int(r.split("\t")[0]) for r in curve.read_text().splitlines()[1:]]
    assert steps == [2, 4]
    for cls in ("Pedestrian", "Cyclist"):
        assert (live / "plots" / "metrics" / "val" / cls / "bev" / "moderate.tsv").is_file()
    results = json.loads(layout.path("eval_metrics").read_text())
    for cls in ("Car", "Pedestrian", "Cyclist"):
        assert all(np.isfinite(results[f"{cls}/{m}/moderate/R40"]) for m in ("bbox", "bev", "3d", "aos"))
    assert json.loads(layout.path("ap").read_text())
