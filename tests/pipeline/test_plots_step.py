"""The ``plots`` stage's step: large PNG charts and pictures, and ``view_<id>.html`` pages, the same bytes
on a rerun. Reads two frames of ../shared/data/kitti_sample: KITTI data, CC BY-NC-SA 3.0 (non-commercial;
Geiger et al., CVPR 2012)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from pgnn.config.params import PlotsConfig
from pgnn.core.shards import run_plan
from pgnn.data.prepare import prepare_plan
from pgnn.pipeline.steps.plots import plots_step

FRAMES = ("000001", "000008")


def test_plots_step_writes_large_pngs_and_pages_the_same_twice(kitti_sample: Path, tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    run_plan(prepare_plan(kitti_sample, list(FRAMES), prepared, frames_per_shard=2), workers=1, log=None)
    pred = tmp_path / "pred"
    pred.mkdir()
    (pred / "000001.txt").write_text(
        "Car -1 -1 -1.58 587.0 173.3 614.1 200.1 1.65 1.67 3.64 -0.65 1.71 46.7 -1.59 0.913\n"
    )
    curves = tmp_path / "curves"
    curves.mkdir()
    (curves / "Car_3d.csv").write_text("recall,easy,moderate,hard\n0.0,1.0,1.0,1.0\n1.0,0.5,0.4,0.3\n")
    cfg = PlotsConfig(bev_frames=1, view_frames=2)
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        written = plots_step(
            cfg, tmp_path / "no-live", curves, pred, prepared, out, tmp_path / f"{name}-views"
        )
        runs.append({p.name: p.read_bytes() for p in written})
    assert sorted(runs[0]) == [
        "bev_000001.png",
        "pr_Car_3d.png",
        "train_loss.png",
        "val_ap.png",
        "view_000001.html",
        "view_000008.html",
    ]
    assert runs[0] == runs[1]  # byte-identical pages and pictures on a rerun
    for name in ("bev_000001.png", "train_loss.png", "pr_Car_3d.png"):
        with Image.open(tmp_path / "a" / name) as image:
            assert image.size[0] >= 1100, (name, image.size)
    page = runs[0]["view_000001.html"].decode()
    assert 'id="pgnn-view-000001"' in page and "detection: Car (1)" in page and "Car 0.913" in page
