"""The stage table (pgnn/pipeline/stages.py) is the one source of the pipeline's facts: dvc.yaml is generated
from it, each stage's code deps are exactly its import closure, preprocessing imports no torch, and the
committed dvc.lock matches the committed code and params."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pgnn.core.imports import closure_files, third_party
from pgnn.pipeline import dvcyaml
from pgnn.pipeline.stages import PATHS, RUNNER_MODULE, STAGES, Layout, artifact_path, code_deps, stage

REPO = Path(__file__).resolve().parents[2]
PREPROCESSING = ("params", "synth", "prepare", "gt_db", "graphs")
ENV = {
    **os.environ,
    "DVC_NO_ANALYTICS": "1",
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
}


def dvc_stages() -> dict[str, dict]:
    out = {}
    for name, body in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        out[name] = body["do"] if "foreach" in body else body
    return out


def test_committed_dvc_yaml_is_the_stage_table() -> None:
    assert (REPO / "dvc.yaml").read_text() == dvcyaml.render(), "run `pgnn dvc-yaml` and commit dvc.yaml"


def test_metrics_are_results_only_ap_first() -> None:
    """DVC metrics: the headline AP, then the training losses (top-level `metrics`, in that order: the
    columns of `dvc exp show`); the full AP table is a plain output; wall-clock timings and the checkpoints
    are no outputs at all (git ignores them), and no output is a vega plot (blank offline)."""
    doc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    assert doc["metrics"] == ["metrics/ap.json", "metrics/train.json"]
    outs = [o for body in dvc_stages().values() for o in body.get("outs", [])]
    paths = {next(iter(o)) if isinstance(o, dict) else o for o in outs}
    assert "metrics/eval.json" in paths
    assert not {"timings/predict.json", "timings/train.json", "models/checkpoints"} & paths
    assert not any("metrics" in body for body in dvc_stages().values())
    assert set(doc.get("plots", [])) <= {"plots/images"}  # image plots only: they draw offline
    ignored = (REPO / ".gitignore").read_text().split()
    assert {"/models/checkpoints/", "/timings/"} <= set(ignored)


def test_code_deps_are_exactly_the_import_closure() -> None:
    """No missing and no extra code deps: the pgnn files in each stage's deps are the static closure (lazy
    imports included) of the stage runner and the stage's entry module."""
    stages = dvc_stages()
    assert list(stages) == [s.name for s in STAGES]
    for s in STAGES:
        deps = stages[s.name]["deps"]
        listed = sorted(d for d in deps if d.startswith("pgnn/"))
        assert listed == sorted(closure_files([RUNNER_MODULE, s.entry])), s.name
        assert f"stages/{s.name}.py" in deps and "stages/_common.py" in deps
        artifacts = {PATHS[name].format(item=item) for name in PATHS for item in ("train", "val", "${item}")}
        for d in deps:  # every other dep is an artifact of the table or a params-templated path
            assert (REPO / d).is_file() or d in artifacts or d.startswith("${"), (s.name, d)


@pytest.mark.parametrize("name", [s.name for s in STAGES])
def test_a_stage_imports_nothing_outside_its_deps(name: str) -> None:
    """Run-time check of the static closure: the pgnn modules that importing the stage's runner and entry
    loads are all listed in its deps."""
    s = stage(name)
    code = (
        "import sys, importlib; importlib.import_module('pgnn.pipeline.runner'); "
        f"importlib.import_module('{s.entry}'); "
        "print('\\n'.join(sorted(m for m in sys.modules if m == 'pgnn' or m.startswith('pgnn.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = set(out.stdout.split())
    listed = {p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in code_deps(s)}
    assert loaded <= listed, loaded - listed


@pytest.mark.parametrize("name", PREPROCESSING)
def test_preprocessing_stages_import_no_torch(name: str) -> None:
    s = stage(name)
    assert not {"torch", "torch_geometric", "dvclive"} & third_party([RUNNER_MODULE, s.entry])
    code = f"import sys, importlib; importlib.import_module('{s.entry}'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_layout_paths_come_from_the_table(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.path("prepared", "val") == tmp_path / "data/prepared/val"
    assert layout.path("model") == tmp_path / PATHS["model"]
    assert artifact_path("graphs:{item}", "train") == "data/graphs/train"
    assert artifact_path("${data.root}", "train") == "${data.root}"
    assert artifact_path("predictions:val", None) == "data/predictions/val"
    with pytest.raises(ValueError, match="per split"):
        artifact_path("predictions", None)  # the bug that once wrote data/predictions/None into dvc.yaml
    with pytest.raises(ValueError, match="per split"):
        layout.path("prepared")
    with pytest.raises(ValueError, match="unknown stage"):
        stage("nosuch")


def test_stage_scripts_are_thin() -> None:
    for s in STAGES:
        text = (REPO / s.script).read_text()
        assert f'main("{s.name}")' in text and len(text.splitlines()) <= 12, s.script


def dvc_status(cwd: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"], capture_output=True, text=True, cwd=cwd, env=ENV
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout or "{}")


def changed_deps(status: dict) -> dict[str, set[str]]:
    """Stage -> deps and params DVC calls changed. Deleted ones are ignored: in a fresh clone the outputs of
    other stages (and the synthetic root) are not there yet; code files always are."""
    out: dict[str, set[str]] = {}
    for name, entries in status.items():
        for entry in entries:
            if isinstance(entry, dict):
                for key in ("changed deps", "changed params"):
                    changed = entry.get(key, {})
                    out.setdefault(name, set()).update(k for k, v in changed.items() if v != "deleted")
    return {k: v for k, v in out.items() if v}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the committed repository (HEAD), as CI checks out."""
    dest = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True)
    return dest


def test_fresh_clone_dvc_status_has_no_changed_deps_or_params(clone: Path) -> None:
    """The committed baseline is true: dvc.lock was written by the committed code and params."""
    assert changed_deps(dvc_status(clone)) == {}


@pytest.mark.parametrize("module", ["pgnn/graphs/encoding.py", "pgnn/data/kitti.py", "pgnn/eval/kitti.py"])
def test_editing_a_module_reruns_exactly_the_stages_that_import_it(clone: Path, module: str) -> None:
    path = clone / module
    original = path.read_text()
    try:
        path.write_text(original + "\n# edited\n")
        changed = {
            name.split("@")[0] for name, deps in changed_deps(dvc_status(clone)).items() if module in deps
        }
    finally:
        path.write_text(original)
    expected = {s.name for s in STAGES if module in code_deps(s)}
    assert changed == expected and expected
