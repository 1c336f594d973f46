"""The pipeline's ``predict`` stage is all or nothing, like ``pgnn predict`` (one shared code path,
``pgnn.inference.results.predict_all_or_nothing``): a frame failing half-way leaves the previous output folder
(or none), never a partial one, and the error names the failing file and frame."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pgnn.config.params import Params
from pgnn.core.errors import DataError
from pgnn.core.shards import read_manifest
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.nn.checkpoint import make_checkpoint, save_checkpoint
from pgnn.nn.model import PointGNN
from pgnn.pipeline.stages import Layout
from pgnn.pipeline.steps.graphs import graphs_step
from pgnn.pipeline.steps.predict import predict_step
from pgnn.pipeline.steps.prepare import prepare_step
from pgnn.pipeline.steps.train import model_card
from pgnn.recipe.presets import apply_preset


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, Layout]:
    """Synthetic val frames, prepared and as runtime graphs one frame a shard, and an untrained model."""
    root = tmp_path_factory.mktemp("predict_stage")
    generate_dataset(root / "synth", 4, 0, 0.5)
    # the default preset (painted inputs, Car_heading: the circular yaw merge); every candidate kept, so that
    # an untrained model detects something
    params = Params(
        preset="small_painted_car",
        data={"root": "synth", "frames_per_shard": 1, "workers": 1, "painted": True},
        postprocess={"score_threshold": 0.0},
    )
    recipe = apply_preset(params)
    layout = Layout(root)
    prepare_step(params.data, "val", layout.path("prepared", "val"), root_dir=root)
    graphs_step(recipe, "val", layout.path("prepared", "val"), layout.path("graphs", "val"), 1, 1)
    model = PointGNN(recipe.model, generator=torch.Generator().manual_seed(0))
    save_checkpoint(layout.path("model"), make_checkpoint(model, step=0, card=model_card(recipe)))
    return root, recipe, layout


def _predict(recipe: object, layout: Layout, out: Path, timings: Path) -> dict[str, float]:
    return predict_step(
        layout.path("model"),
        layout.path("graphs", "val"),
        layout.path("prepared", "val"),
        out,
        timings,  # type: ignore[arg-type]
    )


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_predict_stage_leaves_no_partial_folder(project: tuple[Path, object, Layout], tmp_path: Path) -> None:
    _, recipe, layout = project
    shards = read_manifest(layout.path("graphs", "val"))["shards"]
    assert len(shards) >= 2, "the test needs a second frame in its own shard"
    second = shards[1]["frames"][0]
    out = tmp_path / "predictions" / "val"
    _predict(recipe, layout, out, tmp_path / "t.json")
    good = _listing(out)
    assert sorted(good) == sorted([".pgnn-output", *(f"{e['frames'][0]}.txt" for e in shards)])

    again = tmp_path / "again"  # success path: the same bytes as before
    _predict(recipe, layout, again, tmp_path / "t2.json")
    assert _listing(again) == good

    # corrupt the second frame's graph shard in the middle: frame 1 succeeds, frame 2 fails
    bad = layout.path("graphs", "val") / shards[1]["file"]
    original = bad.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    try:
        (out / "stale.txt").write_text("previous run\n")
        before = _listing(out)
        with pytest.raises(DataError) as err:
            _predict(recipe, layout, out, tmp_path / "t3.json")
        assert err.value.path == str(bad)
        assert "corrupted" in err.value.message
        assert f"(frame {second} of {len(shards)}; nothing written, {out} left unchanged)" in str(err.value)
        assert _listing(out) == before  # frame 1's file of this run did not land
        assert sorted(p.name for p in out.parent.iterdir()) == ["val"]  # no temporary folder left

        absent = tmp_path / "absent" / "val"
        with pytest.raises(DataError):
            _predict(recipe, layout, absent, tmp_path / "t4.json")
        assert not absent.exists() and list(absent.parent.iterdir()) == []
    finally:
        bad.write_bytes(original)


def test_pgnn_predict_writes_the_predict_stages_files(
    project: tuple[Path, object, Layout], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model, two paths: ``pgnn predict`` on the val frames with the pipeline's model writes the predict
    stage's files byte for byte (the same card: runtime graph, post-processing with its yaw merge), with its
    products on 2 threads, cut in 2 row blocks, against the stage's one thread."""
    from pgnn.cli import main as cli_main
    from pgnn.nn import gemm

    root, recipe, layout = project
    assert recipe.postprocess.yaw_merge == "circular"  # type: ignore[attr-defined]
    stage = tmp_path / "stage"
    _predict(recipe, layout, stage, tmp_path / "timings.json")
    argv = ["predict", "--root", str(root / "synth"), "--ids", "val", "--painted", "--threads", "2"]
    argv += ["--checkpoint", str(layout.path("model")), "--out", str(tmp_path / "cli"), "--quiet"]
    monkeypatch.setattr(gemm, "MIN_BLOCK_FLOPS", 1)  # every product of over 64 rows in 2 blocks
    threads = torch.get_num_threads()
    try:
        assert cli_main(argv) == 0
        assert gemm.product_threads() == 2 and torch.get_num_threads() == 1
    finally:
        gemm.set_product_threads(1)
        torch.set_num_threads(threads)
    files = {p.name: p.read_bytes() for p in stage.glob("*.txt")}
    assert len(files) >= 2 and any(files.values()), "the test needs detections in two frames at least"
    assert {p.name: p.read_bytes() for p in (tmp_path / "cli").glob("*.txt")} == files
