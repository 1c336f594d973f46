"""No model file runs code (issue 28.1): every loader reads only data or refuses with one line naming it.

Each payload would create a marker file if it ran (``open(marker, "w")`` on unpickling); the tests assert the
marker is never created and that ``pgnn predict --checkpoint FILE`` ends with one error line naming FILE.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.cli import main as cli_main
from pgnn.core.errors import DataError
from pgnn.inference.backends import load_detector
from pgnn.nn.weights import load_released_variables


class Payload:
    """Unpickled, it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (open, (str(self.marker), "w"))


def _predict_error(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of ``pgnn predict --checkpoint path`` (which must fail)."""
    argv = ["predict", "--checkpoint", str(path), "--out", str(tmp_path / "out"), "--root", str(tmp_path)]
    assert cli_main([*argv, "--ids", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0]
    return err[0]


def _torch_pickle(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("suffix", [".pt", ".ckpt"])
def test_a_checkpoint_with_a_pickle_payload_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    marker = tmp_path / "ran"
    archive = tmp_path / f"evil{suffix}"
    archive.write_bytes(_torch_pickle({"format": "pgnn-checkpoint/1", "x": Payload(marker)}))
    bare = tmp_path / f"bare{suffix}"
    bare.write_bytes(pickle.dumps({"x": Payload(marker)}))
    for path in (archive, bare):
        line = _predict_error(path, tmp_path, capsys)
        assert "could run code" in line and "weights_only=False" not in line
    assert not marker.exists()


def test_a_pt2_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``torch.export.load`` unpickles weights, constants and legacy members without weights_only and
    sympifies the graph's shape expressions: pgnn does not load ``.pt2`` files at all."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("archive/archive_format", "pt2")
        z.writestr("archive/data/weights/model.pt", _torch_pickle(Payload(marker)))
    line = _predict_error(evil, tmp_path, capsys)
    assert "does not load .pt2" in line
    assert not marker.exists()


def test_an_npz_with_a_pickled_array_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "weights.npz"
    np.savez(evil, w=np.array([Payload(marker)], dtype=object))
    with pytest.raises(DataError, match="weights.npz") as err:
        load_released_variables(evil)  # pgnn import-weights
    assert "\n" not in str(err.value)
    line = _predict_error(evil, tmp_path, capsys)  # the authors' npz given to --checkpoint
    assert "pgnn import-weights" in line
    assert not marker.exists()


def test_a_released_npz_given_as_checkpoint_names_import_weights(tmp_path: Path) -> None:
    plain = tmp_path / "weights.bin"  # an npz under another name: recognised by its members
    with open(plain, "wb") as f:
        np.savez(f, w=np.zeros(3, np.float32))
    with pytest.raises(DataError, match="pgnn import-weights"):
        load_detector(plain)


def test_a_yaml_given_as_checkpoint_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("preset: small\n")
    line = _predict_error(params, tmp_path, capsys)
    assert "text file" in line and "weights_only=False" not in line


def test_onnx_metadata_is_validated_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An ONNX model is data to ONNX Runtime; its card is JSON validated by pydantic (a pickle in it is just
    a string that fails validation)."""
    import onnx

    marker = tmp_path / "ran"
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)], ir_version=10)
    payload = pickle.dumps(Payload(marker)).decode("latin-1")
    for key, value in {"format": "pgnn-export/2", "card": payload, "step": "0"}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    evil = tmp_path / "evil.onnx"
    onnx.save(model, str(evil))
    line = _predict_error(evil, tmp_path, capsys)
    assert "model card" in line
    assert not marker.exists()
