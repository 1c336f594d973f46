"""Stage ``plots``: the run's pictures as PNG files in ``plots/images`` (DVC image plots, readable offline)
and interactive 3D pages in ``plots/views``.

- ``train_loss.png``: the training losses (total, cls, loc, reg) against the step;
- ``val_ap.png``: the val AP logged during training (``train.eval_every``) against the step;
- ``pr_<class>_<metric>.png``: the KITTI PR curves, easy / moderate / hard in one chart per class and metric;
- ``bev_<frame>.png``: bird's-eye views of the first ``plots.bev_frames`` val frames, labels and detections.
- ``plots/views/view_<frame>.html``: interactive 3D pages (``pgnn view``'s, self-contained) of the first
  ``plots.view_frames`` val frames: points, label and detection boxes (class and score on hover). A folder
  of their own: DVC's plots accept images and tables, not pages.

``dvc plots show`` puts the PNGs in its HTML page as ``<img>`` files, which need no network.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pgnn.config.params import PlotsConfig, ResolvedReader
from pgnn.data.frames import Frame
from pgnn.data.labels import Label, read_labels
from pgnn.data.prepare import PreparedFrames
from pgnn.pipeline.stages import Layout
from pgnn.viz.charts import (
    METRIC_TITLES,
    loss_chart,
    pr_chart,
    read_pr_csv,
    read_tsv_series,
    val_ap_chart,
)
from pgnn.viz.html import Boxes, view_figure, write_frame_html
from pgnn.viz.render import write_bev_png

LOSSES = ("total", "cls", "loc", "reg")


def plots_step(
    cfg: PlotsConfig,
    live_plots_dir: Path,
    curves_dir: Path,
    pred_dir: Path,
    prepared_dir: Path,
    out_dir: Path,
    views_dir: Path,
) -> list[Path]:
    """Write the charts and BEV pictures of a run into ``out_dir`` and its 3D pages into ``views_dir`` (both
    emptied first); returns the files."""
    for folder in (out_dir, views_dir):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    written = []
    loss_dir = live_plots_dir / "loss"
    losses = {n: read_tsv_series(loss_dir / f"{n}.tsv") for n in LOSSES if (loss_dir / f"{n}.tsv").exists()}
    written.append(loss_chart(losses, out_dir / "train_loss.png"))
    val_dir = live_plots_dir / "val"
    val = {}
    if val_dir.is_dir():
        for tsv in sorted(val_dir.rglob("*.tsv")):
            val[tsv.relative_to(val_dir).with_suffix("").as_posix()] = read_tsv_series(tsv)
    written.append(val_ap_chart(val, out_dir / "val_ap.png"))
    for csv_path in sorted(curves_dir.glob("*.csv")):
        cls, _, metric = csv_path.stem.partition("_")
        recall, precision = read_pr_csv(csv_path)
        title = f"{cls} {METRIC_TITLES.get(metric, metric)}: PR curves (val)"
        written.append(pr_chart(recall, precision, title, out_dir / f"pr_{cls}_{metric}.png"))
    if cfg.bev_frames or cfg.view_frames:
        frames = PreparedFrames(prepared_dir, max_cached_shards=1)
        for i in range(min(max(cfg.bev_frames, cfg.view_frames), len(frames))):
            frame = frames[i]
            pred = pred_dir / f"{frame.frame_id}.txt"
            dets = read_labels(pred, allow_score=True) if pred.exists() else []
            if i < cfg.bev_frames:
                path = out_dir / f"bev_{frame.frame_id}.png"
                write_bev_png(frame, path, detections=dets)
                written.append(path)
            if i < cfg.view_frames:
                written.append(_write_view(frame, dets, views_dir / f"view_{frame.frame_id}.html"))
    pages = sum(p.suffix == ".html" for p in written)
    print(f"plots: {len(written) - pages} PNG files in {out_dir}, {pages} HTML pages in {views_dir}")
    return written


def _write_view(frame: Frame, detections: list[Label], path: Path) -> Path:
    fig = view_figure(
        frame.frame_id,
        frame.points_rect,
        intensity=frame.intensity,
        labels=Boxes.from_labels(frame.labels),
        detections=Boxes.from_labels(detections),
    )
    return write_frame_html(fig, path, div_id=f"pgnn-view-{frame.frame_id}")


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    plots_step(
        params.section("plots", PlotsConfig),
        layout.path("live_plots"),
        layout.path("curves"),
        layout.path("predictions", "val"),
        layout.path("prepared", "val"),
        layout.path("images"),
        layout.path("views"),
    )
