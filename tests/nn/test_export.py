"""``pgnn export``: ONNX Runtime and the torch.export program give eager PyTorch's outputs and detections.

On the 7 reference frames (``pointgnn_reference``: the graphs the original TF model was fed, and the authors'
released T1 weights imported with ``pgnn import-weights``; the frames are KITTI's, CC BY-NC-SA 3.0, for
non-commercial use), the ``.onnx`` model (run by ONNX Runtime) and the ``.pt2`` program give logits and box
encodings close to the eager ``PointGNN`` (``|x - eager| <= 2e-5 + 1e-5 |eager|``, numpy's
``assert_allclose(rtol=1e-5, atol=2e-5)``: ONNX Runtime's matrix products round differently from PyTorch's,
up to 1.24e-5 absolute on logits as large as 15 on one machine, and 1.14e-5 on a logit of 0.005 on another
(frame 000004), so the issue's 1e-5 is not met on every CPU) and, through ``predict_graph``, the same
detections. Both files are exported once per module by the ``pgnn export`` command (``exported``) from the
session's ``t1_checkpoint`` (tests/conftest.py). Small random models cover what T1 does not: another
activation (the max of post-activations), no auto-offset, no GNN iteration, and keypoints with no edge (their
max is 0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from helpers import cli, save_random_checkpoint
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.config.network import GNNLayerConfig, ModelConfig
from pgnn.core.errors import DataError
from pgnn.data.kitti import read_calib
from pgnn.inference.backends import Detector, ProgramNetwork, load_detector
from pgnn.inference.postprocess import Detections
from pgnn.inference.predict import predict_graph
from pgnn.nn.card import card_of
from pgnn.nn.checkpoint import load_model
from pgnn.nn.export import PT2_EXTRA_FILE, export_model_file, metadata_from_strings
from pgnn.nn.graph_input import GraphInput, graph_input_from_arrays

FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
TOL = 1e-5  # relative
ATOL = 2e-5  # absolute: see the module docstring
BACKENDS = ("onnx", "pt2")


pytestmark = pytest.mark.usefixtures("one_torch_thread_per_module")  # fastest on the shared 2-core machines


@pytest.fixture(scope="module")
def exported(t1_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """T1 imported (``t1_checkpoint``) and exported by ``pgnn export`` (``t1.onnx``, ``t1.pt2``); all three
    loaded."""
    out = tmp_path_factory.mktemp("export")
    files = {"pt": t1_checkpoint}
    for suffix in BACKENDS:
        files[suffix] = out / f"t1.{suffix}"
        assert cli(["export", str(t1_checkpoint), str(files[suffix])])[0] == 0
    networks = {name: load_network(path, "cpu", threads=1) for name, path in files.items()}
    return {"files": files, "networks": networks}


def load_network(path: Path, device: str = "cpu", threads: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The network and card entries (with the step) of a file: ``load_detector``, or for a ``.pt2`` this
    test wrote itself (pgnn does not load them: ``torch.export.load`` can run code) ``torch.export.load``."""
    if path.suffix != ".pt2":
        d = load_detector(path, device, threads=threads)
    else:
        extra = {PT2_EXTRA_FILE: ""}
        program = torch.export.load(str(path), extra_files=extra)
        card, step = metadata_from_strings(json.loads(extra[PT2_EXTRA_FILE]), path)
        d = Detector(ProgramNetwork(program, card, device), card, step)
    return d.network, {**d.card.entries(), "step": d.step, "card": d.card}


class Recording:
    """A network that keeps its last outputs (so one forward pass gives both outputs and detections)."""

    def __init__(self, network: Any) -> None:
        self.network = network
        self.outputs: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, g: GraphInput) -> tuple[torch.Tensor, torch.Tensor]:
        self.outputs = self.network(g)
        return self.outputs


def _detect(network: Any, meta: dict[str, Any], graph: dict[str, np.ndarray], kitti_sample: Path, frame: str):  # noqa: ANN202
    calib = read_calib(kitti_sample / "training" / "calib" / f"{frame}.txt")
    with Image.open(kitti_sample / "training" / "image_2" / f"{frame}.png") as image:
        size = image.size  # (width, height)
    recording = Recording(network)
    detections = predict_graph(
        recording, meta["card"], graph, calib.P2, size, meta["card"].postprocess, "cpu", graph_frame="cam2"
    ).detections
    return recording.outputs, detections


def _same_detections(ours: Detections, eager: Detections) -> None:
    assert ours.names == eager.names
    np.testing.assert_allclose(ours.scores, eager.scores, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.boxes, eager.boxes, rtol=0, atol=1e-4)
    np.testing.assert_allclose(ours.boxes_2d, eager.boxes_2d, rtol=0, atol=1e-2)


@pytest.mark.parametrize("frame", FRAMES)
def test_exported_t1_matches_eager_on_reference_frames(
    exported: dict[str, Any], pointgnn_reference: Path, kitti_sample: Path, frame: str
) -> None:
    with np.load(pointgnn_reference / "T1" / f"{frame}.npz") as npz:
        graph = {k: npz[k] for k in npz.files}
    eager, meta = exported["networks"]["pt"]
    (logits, boxes), detections = _detect(eager, meta, graph, kitti_sample, frame)
    for name in BACKENDS:
        network, exported_meta = exported["networks"][name]
        (x_logits, x_boxes), x_detections = _detect(network, exported_meta, graph, kitti_sample, frame)
        dl = float((x_logits - logits).abs().max())
        db = float((x_boxes - boxes).abs().max())
        print(f"\n{frame} {name}: max |logits - eager| {dl:.2e}, |box encodings - eager| {db:.2e}")
        np.testing.assert_allclose(x_logits.numpy(), logits.numpy(), rtol=TOL, atol=ATOL, err_msg=name)
        np.testing.assert_allclose(x_boxes.numpy(), boxes.numpy(), rtol=TOL, atol=ATOL, err_msg=name)
        _same_detections(x_detections, detections)


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of ``graph`` and of its subgraphs (a ``Loop``'s body), and of the functions they call."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)


def test_exported_files_carry_the_checkpoint_entries(exported: dict[str, Any]) -> None:
    _, ckpt = exported["networks"]["pt"]
    for name in BACKENDS:
        _, meta = exported["networks"][name]
        assert meta["card"] == ckpt["card"], name
        assert meta["step"] == ckpt["step"] == 1_400_000
        assert meta["input_frame"] == "cam2" and meta["graph_preset"] == "car_runtime"
    proto = onnx.load(str(exported["files"]["onnx"]))
    props = json.loads({p.key: p.value for p in proto.metadata_props}["card"])
    assert props["label_method"] == "Car" and props["input_features"] == "i"
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 17
    nodes = list(_all_nodes(proto.graph))
    assert sum(n.op_type == "Loop" for n in nodes) == 2  # point-set pooling and the one GNN iteration
    scatters = [n for n in nodes if n.op_type in ("ScatterND", "ScatterElements")]
    assert len(scatters) == 2
    assert all(onnx.helper.get_node_attr_value(n, "reduction") == b"max" for n in scatters)
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in proto.graph.input
    }
    assert isinstance(dims["edges_0"][0], str) and isinstance(dims["edges_1"][0], str)  # dynamic edge counts
    assert isinstance(dims["features"][0], str) and isinstance(dims["vertex_coord_1"][0], str)


# ----------------------------------------------------------------------------------------------------------
# Small random models on a synthetic graph
# ----------------------------------------------------------------------------------------------------------

_SMALL = {
    "point_mlp": (8, 16),
    "set_mlp": (16,),
    "cls_hidden": (8,),
    "loc_hidden": (8,),
    "num_classes": 3,
}
SMALL_CONFIGS = {
    # two iterations, the second without auto-offset; ELU does not commute with max (post-activation max)
    "elu": ModelConfig(
        **_SMALL,
        input_dim=4,
        activation="elu",
        gnn_layers=(
            GNNLayerConfig(offset_mlp=(8, 3), edge_mlp=(16, 16), update_mlp=(16,)),
            GNNLayerConfig(auto_offset=False, edge_mlp=(16,), update_mlp=(16,)),
        ),
    ),
    "no-iteration": ModelConfig(**_SMALL, gnn_layers=()),
}


def _synthetic_graph(input_dim: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """300 points, 30 keypoints; keypoint 29 has no level-0 edge and keypoint 28 no level-1 edge."""
    n0, n1 = 300, 30
    coord0 = rng.uniform(-5, 5, (n0, 3)).astype(np.float32)
    keypoints = rng.choice(n0, n1, replace=False)
    dst0 = rng.integers(0, n1 - 1, 2000)
    dst1 = rng.integers(0, n1 - 2, 400)
    return {
        "input_features": rng.uniform(0, 1, (n0, input_dim)).astype(np.float32),
        "vertex_coord_0": coord0,
        "vertex_coord_1": coord0[keypoints],
        "vertex_coord_2": coord0[keypoints],  # as the runtime graphs: level 2 = level 1
        "keypoint_indices_0": keypoints,
        "keypoint_indices_1": np.arange(n1),
        "edges_0": np.stack([rng.integers(0, n0, dst0.size), np.sort(dst0)], axis=1),
        "edges_1": np.stack([rng.integers(0, n1, dst1.size), np.sort(dst1)], axis=1),
    }


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_small_models_export_exactly(name: str, tmp_path: Path) -> None:
    cfg = SMALL_CONFIGS[name]
    ckpt = tmp_path / "small.pt"
    features = "i" if cfg.input_dim == 1 else "irgb"
    save_random_checkpoint(ckpt, cfg, graph_preset="car", step=7, seed=3, input_features=features)
    graph = graph_input_from_arrays(_synthetic_graph(cfg.input_dim, np.random.default_rng(1)))
    eager, entries = load_model(ckpt)
    with torch.inference_mode():
        logits, boxes = eager(graph)
    for suffix in BACKENDS:
        export_model_file(eager, card_of(entries), entries["step"], tmp_path / f"small.{suffix}")
        network, meta = load_network(tmp_path / f"small.{suffix}", threads=1)
        assert meta["step"] == 7 and meta["model_config"] == cfg.model_dump(mode="json")
        x_logits, x_boxes = network(graph)
        torch.testing.assert_close(x_logits, logits, rtol=TOL, atol=TOL)
        torch.testing.assert_close(x_boxes, boxes, rtol=TOL, atol=TOL)


def test_export_and_load_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["export", str(tmp_path / "missing.pt"), str(tmp_path / "m.onnx")]) == 1
    assert cli_main(["export", str(tmp_path / "missing.pt"), str(tmp_path / "m.zip")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[1].startswith("pgnn export: error: ")
    assert "expected an output ending in .onnx or .pt2" in err[1]
    for suffix in BACKENDS:
        junk = tmp_path / f"junk.{suffix}"
        junk.write_bytes(b"not a model")
        with pytest.raises(DataError, match=str(junk)):
            load_detector(junk)
    plain = tmp_path / "plain.onnx"  # a valid ONNX model without pgnn's metadata
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(plain))
    with pytest.raises(DataError, match="expected pgnn export metadata"):
        load_detector(plain)
