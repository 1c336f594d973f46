"""Tests of pgnn.viz.render (bird's-eye views) and the render command."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Polygon
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.data.frames import Frame
from pgnn.data.kitti import Calib
from pgnn.data.labels import Label
from pgnn.viz.render import CLASS_COLORS, bev_figure, write_bev_png


def _calib() -> Calib:
    k = np.array([[700.0, 0.0, 600.0, 0.0], [0.0, 700.0, 180.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    tr = np.array([[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    return Calib(P0=k, P1=k, P2=k, P3=k, R0_rect=np.eye(3), Tr_velo_to_cam=tr)


def _label(kind: str, x: float, z: float, ry: float, l: float = 4.0, w: float = 2.0) -> Label:
    return Label(
        type=kind,
        truncated=0.0,
        occluded=0,
        alpha=0.0,
        bbox=(500.0, 150.0, 560.0, 200.0),
        h=1.5,
        w=w,
        l=l,
        x=x,
        y=1.7,
        z=z,
        ry=ry,
    )


def _frame(labels: list[Label], scores: bool = False) -> Frame:
    rng = np.random.default_rng(0)
    n = 500
    points = np.stack([rng.uniform(-20, 20, n), rng.uniform(-1, 2, n), rng.uniform(1, 60, n)], axis=1)
    score = rng.dirichlet(np.ones(4), size=n).astype(np.float32) if scores else None
    return Frame(
        frame_id="000042",
        points_rect=points.astype(np.float32),
        intensity=rng.uniform(0, 1, n).astype(np.float32),
        rgb=np.zeros((n, 3), np.float32),
        scores=score,
        labels=labels,
        calib=_calib(),
        image_size=(1200, 370),
    )


def _box_patches(fig: Figure) -> list[Polygon]:
    ax = fig.axes[0]
    return [p for p in ax.patches if isinstance(p, Polygon) and not p.get_fill()]


def test_box_footprint_and_heading_tick() -> None:
    car = _label("Car", x=2.0, z=10.0, ry=0.0)  # heading +x
    ahead = _label("Van", x=-5.0, z=30.0, ry=-math.pi / 2)  # heading +z (away from the camera)
    fig = bev_figure(_frame([car, ahead]))
    patches = _box_patches(fig)
    assert len(patches) == 2
    xy = patches[0].get_xy()[:4]  # (4, 2) in (x, z)
    assert np.allclose(sorted(map(tuple, np.round(xy, 6))), [(0, 9), (0, 11), (4, 9), (4, 11)])
    assert patches[0].get_edgecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb(CLASS_COLORS["Car"]))
    xy = patches[1].get_xy()[:4]
    # l along the heading (+z), w across it
    assert xy[:, 0].min() == pytest.approx(-6.0) and xy[:, 1].max() == pytest.approx(32.0)
    ticks = [line.get_xydata() for line in fig.axes[0].lines if len(line.get_xydata()) == 2]
    centres = {(2.0, 10.0), (-5.0, 30.0)}
    tick_ends = {tuple(np.round(t[1], 6)) for t in ticks if tuple(np.round(t[0], 6)) in centres}
    assert tick_ends == {(4.0, 10.0), (-5.0, 32.0)}


def test_dontcare_is_dashed_and_view_limits() -> None:
    dontcare_box = _label("DontCare", x=10.0, z=20.0, ry=0.3)
    dontcare_2d = Label(
        type="DontCare",
        truncated=-1.0,
        occluded=-1,
        alpha=-10.0,
        bbox=(300.0, 160.0, 400.0, 190.0),
        h=-1.0,
        w=-1.0,
        l=-1.0,
        x=-1000.0,
        y=-1000.0,
        z=-1000.0,
        ry=-10.0,
    )
    fig = bev_figure(_frame([dontcare_box, dontcare_2d]), x_range=(-30, 30), z_range=(0, 50))
    ax = fig.axes[0]
    assert ax.get_xlim() == (-30, 30) and ax.get_ylim() == (0, 50)
    outlines = _box_patches(fig)
    assert len(outlines) == 2  # the 3D DontCare box, and the box-less one as a wedge of image columns
    assert all(p.get_linestyle() not in ("-", "solid") for p in outlines)
    wedge = outlines[1].get_xy()[:4]
    # image columns 300..400 with cx 600, f 700 lie left of the optical axis: x/z in [-3/7, -2/7]
    assert np.allclose(wedge[:, 0] / wedge[:, 1], [-3 / 7, -3 / 7, -2 / 7, -2 / 7])
    title = ax.get_title(loc="left")
    assert "000042" in title and "500 points" in title and "2 DontCare" in title


def test_colour_modes() -> None:
    labels = [_label("Pedestrian", x=1.0, z=8.0, ry=0.0, l=0.8, w=0.6)]
    for color_by in ("height", "intensity"):
        fig = bev_figure(_frame(labels), color_by=color_by)
        assert len(fig.axes) == 2  # the view and its colour bar
    fig = bev_figure(_frame(labels, scores=True), color_by="painted")
    assert len(fig.axes) == 1  # categorical colours: a legend, no colour bar
    assert "point: car" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    with pytest.raises(ValueError, match="painted=True"):
        bev_figure(_frame(labels), color_by="painted")
    with pytest.raises(ValueError, match="color_by"):
        bev_figure(_frame(labels), color_by="rainbow")


def test_bev_figure_leaves_no_pyplot_state() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    bev_figure(_frame([]))
    assert plt.get_fignums() == before


def test_write_png_of_real_frame(kitti_frame: Callable[..., Frame], tmp_path: Path) -> None:
    frame = kitti_frame("000114")
    out = tmp_path / "bev.png"
    write_bev_png(frame, out, dpi=60)
    with Image.open(out) as image:
        assert image.format == "PNG" and 700 < image.size[0] < 900
    fig = bev_figure(frame)
    car_outlines = [
        p
        for p in _box_patches(fig)
        if p.get_edgecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb(CLASS_COLORS["Car"]))
    ]
    assert len(car_outlines) == 8
    assert "8 Car" in fig.axes[0].get_title(loc="left")


def test_render_command(kitti_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "painted.png"
    assert cli_main(["render", str(kitti_sample), "000000", str(out), "--painted", "--dpi", "50"]) == 0
    with Image.open(out) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.std() > 5  # not a blank picture


def test_bev_png_is_large_and_the_same_bytes_twice(tmp_path: Path) -> None:
    frame = _frame([_label("Car", 0.0, 20.0, 0.3)])
    det = dataclasses.replace(_label("Car", 0.4, 20.3, 0.35), score=0.87)
    write_bev_png(frame, tmp_path / "a.png", detections=[det])
    write_bev_png(frame, tmp_path / "b.png", detections=[det])
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    with Image.open(tmp_path / "a.png") as image:
        assert 1500 <= image.size[0] <= 1700  # was 643 px at the plots stage's old 72 dpi
        assert "Software" not in image.info
    texts = [t for t in bev_figure(frame, detections=[det]).axes[0].texts if t.get_text() == "0.87"]
    assert len(texts) == 1 and texts[0].get_fontsize() >= 9
