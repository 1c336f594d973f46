"""The other side of "pgnn writes only what it made": a rerun replaces pgnn's own earlier outputs without
``--force`` (a synth root by its marker, an eval JSON and a dvc.yaml by their content),
and ``--force`` replaces a lone file pgnn cannot recognise. Synthetic data only."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgnn.cli import main as cli_main
from pgnn.core.outputs import made_by


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
