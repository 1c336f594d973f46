"""Tests of pgnn.viz.html (the interactive 3D page) and ``pgnn view``, the page drawn in headless Chromium.

The Chromium tests need the ``chromium`` command (Debian's package; ``make test`` installs it): they fail,
never skip, without it. It runs Chromium with no network (``unshare -n`` where allowed, and every host name
resolved to nothing) and a net log, then asserts the screenshot is not blank and that the page requested
nothing over the network. The real-frame test reads ../shared/data/kitti_sample: KITTI data, CC BY-NC-SA 3.0
(non-commercial; Geiger et al., CVPR 2012).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.core.boxes import BOX_EDGES, boxes_to_corners
from pgnn.viz.html import (
    Boxes,
    box_lines,
    subsample,
    to_display,
    view_figure,
    write_frame_html,
)

BACKGROUND = (16, 19, 23)  # pgnn.viz.html's page colour, #101317


def _scene(n: int = 30_000, seed: int = 0) -> dict[str, object]:
    """A synthetic street: a ground plane, two walls, three cars' worth of points, labels and detections."""
    rng = np.random.default_rng(seed)
    ground = np.stack([rng.uniform(-20, 20, n), rng.normal(1.7, 0.03, n), rng.uniform(3, 60, n)], axis=1)
    walls = np.stack(
        [np.repeat([-12.0, 12.0], n // 4) + rng.normal(0, 0.1, n // 2), rng.uniform(-2, 1.7, n // 2),
         rng.uniform(3, 60, n // 2)],
        axis=1,
    )  # fmt: skip
    gt = np.array([[0.0, 1.7, 12.0, 4.0, 1.5, 1.8, 0.2], [-5.0, 1.7, 25.0, 4.2, 1.6, 1.8, -1.4],
                   [6.0, 1.7, 35.0, 4.0, 1.5, 1.7, 1.5]])  # fmt: skip
    det = gt[:2] + np.array([0.2, 0.0, 0.3, 0.1, 0.0, 0.0, 0.05])
    points = np.concatenate([ground, walls]).astype(np.float32)
    return {
        "points": points,
        "intensity": rng.uniform(0, 1, len(points)).astype(np.float32),
        "labels": Boxes(gt, ("Car", "Car", "Van")),
        "detections": Boxes(det, ("Car", "Car"), np.array([0.93, 0.41])),
    }


def _figure(**overrides: object):  # noqa: ANN202
    scene = _scene()
    return view_figure(
        "000042",
        scene["points"],
        intensity=scene["intensity"],
        labels=scene["labels"],
        detections=scene["detections"],
        **overrides,
    )


def test_to_display_is_a_rotation_with_height_up() -> None:
    xyz = np.array([[1.0, 2.0, 3.0]])  # right 1, down 2, forward 3
    np.testing.assert_array_equal(to_display(xyz), [[1.0, 3.0, -2.0]])
    basis = to_display(np.eye(3))  # rows: images of the camera axes
    assert np.linalg.det(basis) == pytest.approx(1.0)  # proper: nothing mirrored


def test_box_lines_draw_every_edge_of_the_core_convention() -> None:
    boxes = np.array([[1.0, 1.7, 10.0, 4.0, 1.5, 2.0, 0.7], [-3.0, 1.0, 20.0, 1.0, 1.8, 0.6, -2.0]])
    lines = box_lines(boxes)  # (40, 3)
    assert lines.shape == (40, 3)
    corners = to_display(boxes_to_corners(boxes))  # (2, 8, 3)
    for m in range(2):
        path = lines[20 * m : 20 * m + 16]  # the 16 path vertices; then gap, heading tick, gap
        drawn = set()
        for a, b in zip(path[:-1], path[1:], strict=True):
            ia = int(np.argmin(np.abs(corners[m] - a).sum(1)))
            ib = int(np.argmin(np.abs(corners[m] - b).sum(1)))
            np.testing.assert_allclose(corners[m][[ia, ib]], [a, b])
            drawn.add(frozenset((ia, ib)))
        assert drawn == {frozenset(e) for e in BOX_EDGES.tolist()}
        assert np.isnan(lines[20 * m + 16]).all() and np.isnan(lines[20 * m + 19]).all()
        np.testing.assert_allclose(
            lines[20 * m + 17], to_display(boxes[m, :3])
        )  # tick from the bottom centre
    bottom_up = -boxes[:, 1]  # display height of the bottom face
    np.testing.assert_allclose(lines[[0, 20], 2], bottom_up)


def test_subsample_caps_with_a_fixed_seed() -> None:
    a = subsample(100_000, 60_000, seed=3)
    assert len(a) == 60_000 and len(np.unique(a)) == 60_000 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, subsample(100_000, 60_000, seed=3))
    assert not np.array_equal(a, subsample(100_000, 60_000, seed=4))
    np.testing.assert_array_equal(subsample(5, 10), np.arange(5))


def test_page_is_the_same_bytes_twice_and_loads_nothing_from_outside(tmp_path: Path) -> None:
    a = write_frame_html(_figure(), tmp_path / "a.html", div_id="pgnn-view-000042")
    b = write_frame_html(_figure(), tmp_path / "b.html", div_id="pgnn-view-000042")
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert 'id="pgnn-view-000042"' in text
    assert "plotly.js v" in text.lower() or "plotly.js" in text  # the library is inside the page
    tags = re.findall(r"<(?:script|link|img|iframe|source|video|audio)\b[^>]*>", text, flags=re.IGNORECASE)
    loading = [t for t in tags if re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", t, re.IGNORECASE)]
    assert tags and not loading
    assert a.stat().st_size < 8_000_000


def test_points_are_capped_and_labelled_in_the_title() -> None:
    fig = _figure(max_points=1_000, color_by="intensity")
    points = fig.data[0]
    assert len(points.x) == 1_000 and points.marker.colorscale is not None
    assert "1,000 of 45,000 points" in fig.layout.title.text
    names = [t.name for t in fig.data]
    assert "label: Car (2)" in names and "label: Van (1)" in names and "detection: Car (2)" in names
    scores = next(t for t in fig.data if t.name == "scores")
    assert list(scores.text) == ["Car 0.93", "Car 0.41"]
    hover = next(t for t in fig.data if t.name == "detection: Car (2)").text
    assert "<b>Car 0.930</b> (detection)" in hover[0] and "<b>Car 0.410</b>" in hover[20]


def test_painted_colours_need_scores() -> None:
    scene = _scene(n=400)
    with pytest.raises(ValueError, match="painted"):
        view_figure("1", scene["points"], color_by="painted")
    scores = np.random.default_rng(0).dirichlet(np.ones(4), size=len(scene["points"])).astype(np.float32)
    fig = view_figure("1", scene["points"], color_by="painted", painted_scores=scores)
    np.testing.assert_array_equal(np.asarray(fig.data[0].marker.color), np.argmax(scores, axis=1))


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium not found: `make test` installs it (apt-get install chromium)")
    return exe


def _page_requests(net_log: Path) -> list[str]:
    """URLs of the network requests the page (a file:// document) made, from Chromium's net log; Chromium's
    own background requests (component updates; their initiator is no origin) are not the page's."""
    log = json.loads(net_log.read_text())
    urls = []
    for event in log["events"]:
        params = event.get("params", {})
        url = params.get("url", "")
        if (
            url
            and not url.startswith(("file:", "data:", "blob:"))
            and "file://" in params.get("network_isolation_key", "")
        ):
            urls.append(url)
    return urls


def _screenshot(page: Path, out: Path) -> tuple[np.ndarray, list[str]]:
    """Chromium's screenshot of ``page`` (1400 x 1000) with no network, and the URLs the page requested."""
    net_log = out.with_suffix(".netlog.json")
    cmd = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader",
        "--disable-background-networking", "--no-first-run", "--window-size=1400,1000",
        "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={net_log}", "--virtual-time-budget=8000",
        f"--screenshot={out}", page.resolve().as_uri(),
    ]  # fmt: skip
    if os.geteuid() == 0 and shutil.which("unshare"):
        cmd = ["unshare", "-n", *cmd]  # no network namespace at all
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert out.is_file(), f"chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-2000:]}"
    return np.asarray(Image.open(out).convert("RGB")), _page_requests(net_log)


def test_page_draws_in_headless_chromium_offline(tmp_path: Path) -> None:
    page = write_frame_html(_figure(), tmp_path / "000042.html")
    image, requests = _screenshot(page, tmp_path / "shot.png")
    assert requests == []
    assert image.shape == (1000, 1400, 3)
    colours = len(np.unique(image.reshape(-1, 3), axis=0))
    drawn = (np.abs(image.astype(int) - BACKGROUND).sum(axis=2) > 40).mean()  # not the page background
    red = ((image[..., 0] > 200) & (image[..., 1] < 90) & (image[..., 2] < 90)).sum()  # Car wireframes
    assert colours > 500, f"{colours} distinct colours: the page looks blank"
    assert drawn > 0.03, f"{drawn:.3f} of the pixels differ from the background"
    assert red > 500, f"{red} red pixels: no Car boxes drawn"


def test_the_network_check_sees_a_page_that_loads_from_outside(tmp_path: Path) -> None:
    page = tmp_path / "outside.html"
    page.write_text('<html><body><img src="https://example.com/x.png"><p>x</p></body></html>')
    _, requests = _screenshot(page, tmp_path / "outside.png")
    assert requests == ["https://example.com/x.png"]


def test_view_command_writes_one_page_per_frame(kitti_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "pages"
    split = tmp_path / "split.txt"
    split.write_text("000008\n000001\n000114\n")
    argv = ["view", "--root", str(kitti_sample), "1", "--split", str(split), "--limit", "2"]
    rc = cli_main([*argv, "--max-points", "5000", "--out", str(out)])
    assert rc == 0
    assert sorted(p.name for p in out.glob("*.html")) == ["000001.html", "000008.html"]
    text = (out / "000008.html").read_text()
    assert 'id="pgnn-view-000008"' in text and "5,000 of " in text and "label: Car (" in text


def test_view_command_errors_in_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = cli_main(["view", "--root", str(tmp_path), "1", "--graph", "--out", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "pgnn view: error: --graph/--clusters: expected --checkpoint (the graph and clusters are the model's)"
    )


def test_view_command_draws_a_models_detections_graph_and_clusters(
    kitti_sample: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "pages"
    argv = ["view", "--root", str(kitti_sample), "8", "--checkpoint", str(tiny_checkpoint)]
    rc = cli_main([*argv, "--graph", "--clusters", "--max-edges", "300", "--out", str(out)])
    assert rc == 0
    text = (out / "000008.html").read_text()
    assert re.search(r"graph edges \(300 of [\d,]+\)", text)
    assert re.search(r"detection: Car \(\d+\)", text) and re.search(
        r"merge clusters \([\d,]+ candidates\)", text
    )
