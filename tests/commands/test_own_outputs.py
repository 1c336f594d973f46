"""The other side of "pgnn writes only what it made": a rerun replaces pgnn's own earlier outputs without
``--force`` (a synth root by its marker; an eval JSON, a dvc.yaml by their content; a checkpoint of
``pgnn import-weights`` and the files of ``pgnn export`` by their metadata), and ``--force`` replaces a lone
file pgnn cannot recognise. Synthetic data and the authors' T0 weights (../shared/data/pointgnn_reference)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pgnn.cli import main as cli_main
from pgnn.core.outputs import made_by
from pgnn.nn.checkpoint import save_checkpoint


def test_reruns_replace_pgnn_s_own_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "synthetic"
    assert cli_main(["synth", str(root), "--frames", "2", "--seed", "0"]) == 0
    scan0 = root / "training" / "velodyne" / "000000.bin"
    first = scan0.read_bytes()
    assert cli_main(["synth", str(root), "--frames", "2", "--seed", "1"]) == 0  # its own root: replaced whole
    assert made_by(root) == "pgnn synth" and scan0.read_bytes() != first

    labels = root / "training" / "label_2"
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in labels.glob("*.txt"):  # perfect detections: the labels with a score
        (pred / f.name).write_text("".join(line + " 0.9\n" for line in f.read_text().splitlines()))
    out = tmp_path / "ap.json"
    for _ in range(2):  # the second run recognises its own results
        assert cli_main(["eval", str(labels), str(pred), "--json", str(out), "--classes", "Car"]) == 0

    dvc_yaml = tmp_path / "dvc.yaml"
    for _ in range(2):
        assert cli_main(["dvc-yaml", "--out", str(dvc_yaml)]) == 0

    scan = tmp_path / "fov.bin"
    assert cli_main(["crop", str(root), "0", str(scan)]) == 0
    assert cli_main(["crop", str(root), "0", str(scan)]) == 1  # a .bin pgnn cannot tell from a user's
    assert cli_main(["crop", str(root), "0", str(scan), "--force"]) == 0
    err = capsys.readouterr().err
    assert f"pgnn crop: error: {scan}: expected a new file (it exists and pgnn cannot tell" in err


def test_import_weights_rerun_replaces_its_own_checkpoint_only(
    tmp_path: Path, pointgnn_reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = pointgnn_reference / "car_auto_T0_train.npz"
    out = tmp_path / "car_T0.pt"
    for _ in range(2):  # the second run recognises the checkpoint it wrote (source, original_config)
        assert cli_main(["import-weights", str(weights), str(out)]) == 0
    trained = tmp_path / "trained.pt"
    ckpt = {
        k: v for k, v in torch.load(out, weights_only=True).items() if k not in ("source", "original_config")
    }
    save_checkpoint(trained, ckpt)  # a pgnn checkpoint, but not one weight import wrote: someone's model
    before = trained.read_bytes()
    assert cli_main(["import-weights", str(weights), str(trained)]) == 1
    assert trained.read_bytes() == before
    assert "pgnn cannot tell it wrote it" in capsys.readouterr().err


def test_export_recognises_the_files_it_writes(tmp_path: Path) -> None:
    import json

    import onnx
    from onnx import TensorProto, helper

    from pgnn.commands.export import is_export
    from pgnn.config.params import Params
    from pgnn.nn.export import PT2_EXTRA_FILE, export_metadata
    from pgnn.pipeline.steps.train import model_card
    from pgnn.recipe.presets import apply_preset

    meta = export_metadata(model_card(apply_preset(Params())), 3)
    program = torch.export.export(torch.nn.Linear(2, 1), (torch.zeros(1, 2),))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(program, pt2, extra_files={PT2_EXTRA_FILE: json.dumps(meta)})  # as export_pt2_bytes
    node = helper.make_node("Identity", ["x"], ["y"])
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "xy")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]))
    helper.set_model_props(model, meta)  # as export_onnx_bytes: metadata_props
    onnx_path = tmp_path / "m.onnx"
    onnx.save(model, onnx_path)
    assert is_export(pt2) and is_export(onnx_path)
    torch.export.save(program, tmp_path / "other.pt2")  # someone's program, someone's ONNX model
    helper.set_model_props(model, {"format": "theirs/1"})
    onnx.save(model, tmp_path / "other.onnx")
    (tmp_path / "notes.onnx").write_text("mine\n")
    assert not any(is_export(tmp_path / n) for n in ("other.pt2", "other.onnx", "notes.onnx"))


def test_printed_paths_are_final_and_a_scan_is_drawn_in_its_own_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from pgnn.viz.sensor_view import sensor_bev_figure

    root = tmp_path / "synthetic"
    assert cli_main(["synth", str(root), "--frames", "1"]) == 0
    pages = tmp_path / "pages"
    assert cli_main(["view", "--root", str(root), "0", "--max-points", "100", "--out", str(pages)]) == 0
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"{pages / '000000.html'}: ") and (pages / "000000.html").is_file()

    box = np.array([[20.0, 5.0, -1.0, 4.0, 2.0, 1.5, np.pi / 2]])  # 20 m ahead, 5 m left, heading left
    points = np.array([[20.0, 5.0, -1.0], [-30.0, 0.0, 0.0]])  # one ahead (in the box), one behind
    fig = sensor_bev_figure(points, box, ["Car"], np.array([0.9]), "000114.pcd: 2 points in view")
    ax = fig.axes[0]
    assert ax.get_title(loc="left") == "000114.pcd: 2 points in view"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("y, left (m)", "x, forward (m)")
    assert ax.get_xlim()[0] > ax.get_xlim()[1]  # left is left: y grows to the left
    corners = ax.patches[0].get_xy()[:4]  # (page x = y, page y = x) of the footprint
    np.testing.assert_allclose(sorted(corners[:, 0]), [3.0, 3.0, 7.0, 7.0], atol=1e-9)  # 4 m long along y
    np.testing.assert_allclose(sorted(corners[:, 1]), [19.0, 19.0, 21.0, 21.0], atol=1e-9)  # 2 m wide along x
    np.testing.assert_allclose(ax.collections[0].get_offsets(), [[5.0, 20.0], [0.0, -30.0]])  # by height
