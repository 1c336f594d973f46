"""The Prefect flows (flows/) on a tiny synthetic project: fan-out, resume after a failure, verified caching,
threads and Dask runners, artifacts and run logs, the command line (argument checks, nothing-to-do runs
without a server); plus the shard helpers (pgnn/core/shards.py) and the Prefect settings
(flows/prefect_env.py).

Prefect runs against ``prefect_test_harness`` (a temporary SQLite API server, started once per session:
its migrations take 20-70 s on a loaded 2-core machine). Its home and result store live in a temporary
folder, set before ``prefect`` is first imported (hence the imports below the environment set-up).
"""

# ruff: noqa: E402

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

_PREFECT_TMP = Path(tempfile.mkdtemp(prefix="pgnn-test-prefect-"))
atexit.register(shutil.rmtree, _PREFECT_TMP, ignore_errors=True)
os.environ["PREFECT_HOME"] = str(_PREFECT_TMP / "home")
os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = str(_PREFECT_TMP / "results")

# isort: split
import pytest
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
from prefect.testing.utilities import prefect_test_harness

import pgnn.graphs.records
from flows import PREPROCESS_STAGES
from flows.pipeline import ShardBuildError, check_stages, full_flow, preprocess_flow
from flows.prefect_env import configure_prefect, prefect_settings, user_api_url
from flows.runners import make_task_runner
from flows.tasks import AP_TABLE_KEY, METRICS_REPORT_KEY, ap_table, build_shard, verified_cache_key
from pgnn.core.io import sha256_file
from pgnn.core.shards import (
    ShardPlan,
    ShardTask,
    finalize_plan,
    is_current,
    pending_tasks,
    read_manifest,
    record_shard,
    run_plan,
)
from pgnn.pipeline.runner import driver_session, run_in_order
from pgnn.pipeline.stages import Layout

REPO = Path(__file__).resolve().parents[2]

PARAMS = """\
preset: small
data: {root: data/synthetic, frames_per_shard: 1, workers: 2}
synthetic: {frames: 4, seed: 0, val_fraction: 0.5}
"""
DATA_STAGES = ("prepare", "gt_db", "graphs")


def folder_digest(folder: Path) -> dict[str, str]:
    """``{path relative to folder: sha256}`` of every file under ``folder``."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


# ------------------------------------------------------------------------------------ fixtures, helpers


@pytest.fixture(scope="session")
def prefect_api():
    """A temporary Prefect API server (and result store) for the whole session."""
    with (
        prefect_test_harness(server_startup_timeout=None),
        temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: _PREFECT_TMP / "results"}),
    ):
        yield


def new_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(PARAMS)
    return folder


def run_preprocess(root: Path, stages=DATA_STAGES, **kwargs):
    return preprocess_flow(params_path=str(root / "params.yaml"), stages=stages, **kwargs)


def stamps(root: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every output file: a file rewritten in place or replaced changes it."""
    out = {}
    for p in sorted((root / "data").rglob("*")):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_ino, st.st_mtime_ns)
    return out


def copy_inputs(reference: Path, folder: Path) -> Path:
    """A new project holding only the reference's synthetic dataset."""
    root = new_project(folder)
    shutil.copytree(reference / "data" / "synthetic", root / "data" / "synthetic")
    return root


@pytest.fixture(scope="module")
def reference(prefect_api, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A clean run of the whole preprocessing flow, and the sha256 of every file it wrote."""
    root = new_project(tmp_path_factory.mktemp("reference"))
    summary = run_preprocess(root, stages=PREPROCESS_STAGES)
    assert summary["synth"] == summary["gt_db"] == summary["params"] == "ran"
    assert (root / "data" / "gt_db" / "gt_db.parquet").is_file()
    for name in ("prepare@train", "prepare@val", "graphs@train", "graphs@val"):
        assert summary[name]["shards"] == 2 and len(summary[name]["built"]) == 2, summary
    return root, folder_digest(root / "data")


# -------------------------------------------------------------------------------- no server needed


def test_configure_prefect_sets_offline_defaults_and_keeps_user_values(tmp_path):
    env = {"PREFECT_LOGGING_LEVEL": "DEBUG"}
    effective = configure_prefect(tmp_path, env, profiles_path=tmp_path / "no-profiles.toml")
    assert env["DO_NOT_TRACK"] == "1"
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert env["PREFECT_SERVER_UI_ENABLED"] == "false"
    assert env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "180"
    assert env["PREFECT_LOGGING_EXTRA_LOGGERS"] == "pgnn"  # pgnn's loggers reach the runs' logs
    assert env["PREFECT_HOME"] == str(tmp_path.resolve() / ".prefect")  # no Prefect of the user's: local
    assert env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] == str(tmp_path.resolve() / ".prefect-results")
    assert env["PREFECT_LOGGING_LEVEL"] == "DEBUG"  # the user's value wins
    assert effective == env and set(effective) == set(prefect_settings(tmp_path))


def test_configure_prefect_leaves_the_users_prefect_home_server_and_profile_alone(tmp_path):
    root, none = tmp_path / "project", tmp_path / "no-profiles.toml"
    env = {"PREFECT_HOME": "/home/me/.prefect"}
    configure_prefect(root, env, profiles_path=none)
    assert env["PREFECT_HOME"] == "/home/me/.prefect"
    assert env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] == str(root.resolve() / ".prefect-results")

    env = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}  # a server of theirs: their home and profiles
    configure_prefect(root, env, profiles_path=none)
    assert "PREFECT_HOME" not in env and env["DO_NOT_TRACK"] == "1"

    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        'active = "remote"\n[profiles.remote]\nPREFECT_API_URL = "http://10.0.0.5:4200/api"\n'
        'PREFECT_LOGGING_LEVEL = "WARNING"\n'
    )
    env = {}
    configure_prefect(root, env, profiles_path=profiles)
    assert user_api_url(env, profiles) == "http://10.0.0.5:4200/api"
    assert "PREFECT_HOME" not in env and "PREFECT_LOGGING_LEVEL" not in env  # the profile's values hold

    env = {"PREFECT_PROFILE": "local"}  # prefect's own "local" profile names a server too
    configure_prefect(root, env, profiles_path=none)
    assert "PREFECT_HOME" not in env
    env = {"PREFECT_PROFILE": "ephemeral"}
    configure_prefect(root, env, profiles_path=none)
    assert env["PREFECT_HOME"] == str(root.resolve() / ".prefect")


def _python(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    run_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=run_env, capture_output=True, text=True, timeout=timeout
    )


def test_importing_flows_keeps_the_users_prefect_home(tmp_path):
    home = str(tmp_path / "my-prefect-home")
    code = "import os, flows; from prefect.settings import PREFECT_HOME; print(os.environ['PREFECT_HOME'])"
    out = _python("-c", code + "; print(PREFECT_HOME.value())", env={"PREFECT_HOME": home})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [home, home]


def test_cli_rejects_bad_arguments_and_params_in_one_line_before_prefect_starts(tmp_path):
    t0 = time.perf_counter()
    out = _python("-m", "flows", "--stages", "nosuch")
    elapsed = time.perf_counter() - t0
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "python -m flows: error: argument --stages: invalid choice: 'nosuch' (choose from "
        "'params', 'synth', 'prepare', 'gt_db', 'graphs', 'train', 'predict', 'evaluate', 'plots')"
    ]
    assert elapsed < 2.0, f"took {elapsed:.1f} s"

    out = _python("-m", "flows", "--flow", "preprocess", "--stages", "graphs", "train")
    assert (
        out.returncode == 2
        and len(out.stderr.splitlines()) == 1
        and "train not in the preprocess" in out.stderr
    )

    params = tmp_path / "params.yaml"
    params.write_text("preset: small\ngraph: {radius: -1.0}\n")  # loads, but the recipe rejects it
    out = _python("-m", "flows", "--params", str(params))
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("python -m flows: error: params.yaml: graph.radius: "), line


def test_the_old_entry_runs_python_m_flows_with_a_note():
    """``python -m flows.pipeline`` (the entry documented before ``python -m flows``) once imported the flows
    and exited 0 having run nothing; now it is ``python -m flows`` with a note first."""
    out = _python("-m", "flows.pipeline", "--stages", "nosuch")
    assert out.returncode == 2 and out.stdout == ""
    note, error = out.stderr.splitlines()
    assert note.startswith("python -m flows.pipeline: note: this entry is now `python -m flows`")
    assert error.startswith("python -m flows: error: argument --stages: invalid choice: 'nosuch'")


def test_ap_table_rows():
    results = {"Car/3d/moderate/R40": 12.345, "Car/bev/easy/R11": 50.0, "Pedestrian/3d/hard/R40": 1.0}
    rows = ap_table(results)
    assert [(r["class"], r["metric"]) for r in rows] == [("Car", "bev"), ("Car", "3d"), ("Pedestrian", "3d")]
    assert rows[1]["moderate R40"] == 12.35 and rows[1]["easy R40"] is None and rows[0]["easy R11"] == 50.0


def test_flows_use_public_prefect_apis_only():
    internal = ("SubprocessASGIServer", "APILogWorker", "EventsWorker", "prefect._internal", "prefect.server")
    sources = sorted((REPO / "flows").glob("*.py"))
    found = [f"{p.name}: {name}" for p in sources for name in internal if name in p.read_text()]
    assert not found


def _write_frames(task: ShardTask, path: Path, *, tag: str) -> None:
    path.write_text(f"{tag}:{','.join(task.frames)}\n")


def toy_plan(out: Path, tag: str = "v1") -> ShardPlan:
    tasks = tuple(
        ShardTask(f"shard-{i:04d}.txt", (f"{2 * i:06d}", f"{2 * i + 1:06d}"), f"{tag}-{i}") for i in range(3)
    )
    return ShardPlan(out, tasks, partial(_write_frames, tag=tag), "toy", {"tag": tag}, "code")


def test_shard_helpers_record_resume_and_finalize(tmp_path):
    plan = toy_plan(tmp_path)
    assert pending_tasks(plan) == list(plan.tasks)
    first = plan.tasks[0]
    plan.build(first, tmp_path / first.file)
    assert not is_current(plan, first)  # written but not recorded: not trusted
    manifest = record_shard(plan, first)
    assert [e["file"] for e in manifest["shards"]] == [first.file]
    assert is_current(plan, first) and pending_tasks(plan) == list(plan.tasks[1:])
    with pytest.raises(RuntimeError, match="not built yet"):
        finalize_plan(plan)

    (tmp_path / first.file).write_text("foreign bytes\n")  # same name, other content
    assert not is_current(plan, first)
    (tmp_path / ".tmp-shard-0001.txt-abc").write_text("left by a killed writer")
    final = run_plan(plan, log=None)  # the DVC path: builds what is pending, then finalizes
    assert [e["file"] for e in final["shards"]] == [t.file for t in plan.tasks]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"] + [t.file for t in plan.tasks]
    assert (tmp_path / first.file).read_text() == "v1:000000,000001\n"

    before = (tmp_path / "manifest.json").stat()
    assert finalize_plan(plan) == final
    after = (tmp_path / "manifest.json").stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)  # untouched if unchanged

    changed = toy_plan(tmp_path, tag="v2")  # new params: every key changes, every shard is pending
    assert pending_tasks(changed) == list(changed.tasks)


def test_build_shard_task_fn_builds_and_returns_the_manifest_entry(tmp_path):
    plan = toy_plan(tmp_path / "out")
    shard = plan.tasks[1]
    entry = build_shard.fn(plan, shard, "toy@test")
    assert entry["file"] == shard.file and entry["key"] == shard.key
    assert entry["frames"] == ["000002", "000003"]
    assert entry["sha256"] == folder_digest(tmp_path / "out")[shard.file]


class FakeStore:
    def __init__(self, records):
        self.records = records

    def exists(self, key):
        return key in self.records

    def read(self, key):
        value = self.records[key]
        if isinstance(value, Exception):
            raise value
        return type("Record", (), {"result": value})()


def test_verified_cache_key_only_offers_records_the_disk_still_matches():
    store = FakeStore({"good": {"sha256": "a"}, "stale": {"sha256": "b"}, "broken": ValueError("bad record")})
    on_disk = "a"

    def valid(entry):
        return entry["sha256"] == on_disk

    assert verified_cache_key(store, "new", valid) == "new"  # no record: build and persist under the key
    assert verified_cache_key(store, "good", valid) == "good"  # record matches the bytes on disk: a hit
    assert verified_cache_key(store, "stale", valid) is None  # bytes changed: build, never report cached
    assert verified_cache_key(store, "broken", valid) is None


def test_make_task_runner_kinds():
    assert isinstance(make_task_runner("threads", 2), ThreadPoolTaskRunner)
    processes = make_task_runner("processes", 2)
    assert isinstance(processes, ProcessPoolTaskRunner) and processes._max_workers == 2
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner("dask", 2, "tcp://127.0.0.1:8786"), DaskTaskRunner)
    with pytest.raises(ValueError, match="task_runner"):
        make_task_runner("gpu", 2)
    with pytest.raises(ValueError, match="max_workers"):
        make_task_runner("threads", 0)


def test_stage_names_and_project_layout_are_checked(tmp_path):
    assert check_stages(["prepare"], DATA_STAGES) == ("prepare",)
    with pytest.raises(ValueError, match="unknown stages"):
        check_stages(["prepare", "predcit"], DATA_STAGES)
    root = new_project(tmp_path / "p")
    with driver_session(root / "params.yaml", None, "test") as session:
        layout, path, recorded = session.layout, session.source.path, session.recorded
    assert layout.root == root.resolve() and path == root.resolve() / "params.yaml"
    assert not recorded  # not a DVC project: a flow runs what it is asked for, records nothing


# ------------------------------------------------------------------------------ flows on the harness


def test_rerun_of_a_current_project_touches_nothing(reference):
    root, digest = reference
    before = stamps(root)
    summary = run_preprocess(root, stages=DATA_STAGES)
    for name, s in summary.items():
        if name not in ("params", "gt_db"):
            assert (s["current"], s["built"], s["cached"]) == (2, [], []), (name, s)
    changed = {k for k, v in stamps(root).items() if before.get(k) != v}
    assert changed == {"data/gt_db/gt_db.parquet"}  # rebuilt (no DVC record to skip it): same bytes
    assert folder_digest(root / "data") == digest


def test_rerun_after_failure_rebuilds_only_the_failed_and_damaged_shards(
    reference, tmp_path, monkeypatch, caplog
):
    ref_root, ref_digest = reference
    root = copy_inputs(ref_root, tmp_path / "work")
    run_preprocess(root)
    assert folder_digest(root / "data") == ref_digest  # same bytes from another folder: content-addressed

    graphs, prepared = root / "data" / "graphs", root / "data" / "prepared"
    (graphs / "val" / "shard-0001.npz").unlink()  # missing
    with open(graphs / "train" / "shard-0000.npz", "ab") as f:  # damaged in place
        f.write(b"\0junk")
    (prepared / "val" / "shard-0000.parquet").unlink()  # missing upstream; its rebuild has the same bytes
    failing_frame = read_manifest(ref_root / "data" / "graphs" / "val")["shards"][1]["frames"][0]
    attempts = []
    real_graph_record = pgnn.graphs.records.graph_record

    def flaky_graph_record(frame, *args, **kwargs):
        if frame.frame_id == failing_frame:
            attempts.append(frame.frame_id)
            raise OSError(f"injected failure on frame {frame.frame_id}")
        return real_graph_record(frame, *args, **kwargs)

    monkeypatch.setattr(pgnn.graphs.records, "graph_record", flaky_graph_record)
    caplog.set_level(logging.INFO, logger="prefect")
    before = stamps(root)
    caplog.clear()
    state = run_preprocess(root, return_state=True)
    assert state.is_failed()
    with pytest.raises(ShardBuildError, match=r"graphs@val:shard-0001\.npz"):
        state.result()
    assert len(attempts) == 3  # the first try and retries=2
    after_failure = stamps(root)
    changed = {k for k in before.keys() | after_failure.keys() if before.get(k) != after_failure.get(k)}
    assert changed == {
        "data/prepared/val/shard-0000.parquet",
        "data/prepared/val/manifest.json",
        "data/gt_db/gt_db.parquet",  # not a shard stage: rewritten (same bytes) when it runs
        "data/graphs/train/shard-0000.npz",
        "data/graphs/train/manifest.json",
    }  # graphs@val/shard-0000 is current: untouched; its failed sibling is not recorded
    assert not (graphs / "val" / "shard-0001.npz").exists()
    log = [r.getMessage() for r in caplog.records]
    assert "graphs@val: 1 of 2 shards current, building 1: shard-0001.npz" in log
    assert any(
        m.startswith("graphs@val: shard-0001.npz failed after retries") and "injected" in m for m in log
    )

    monkeypatch.setattr(pgnn.graphs.records, "graph_record", real_graph_record)
    caplog.clear()
    summary = run_preprocess(root)
    log = [r.getMessage() for r in caplog.records]
    assert "graphs@val: 1 of 2 shards current, building 1: shard-0001.npz" in log
    assert "prepare@val: 2 of 2 shards current, building 0" in log
    assert summary["graphs@val"] == {
        "shards": 2,
        "current": 1,
        "built": ["shard-0001.npz"],
        "cached": [],
        "failed": [],
    }
    for name in ("prepare@train", "prepare@val", "graphs@train"):
        assert (summary[name]["current"], summary[name]["built"]) == (2, []), (name, summary[name])
    after_rerun = stamps(root)
    changed = {
        k for k in after_failure.keys() | after_rerun.keys() if after_failure.get(k) != after_rerun.get(k)
    }
    assert changed == {
        "data/gt_db/gt_db.parquet",
        "data/graphs/val/shard-0001.npz",
        "data/graphs/val/manifest.json",
    }
    assert folder_digest(root / "data") == ref_digest  # byte-identical to the clean run, manifests included


def test_cache_hits_are_verified_against_the_bytes_on_disk(reference, tmp_path):
    ref_root, ref_digest = reference
    root = copy_inputs(ref_root, tmp_path / "work")
    run_preprocess(root)  # builds every shard here: Prefect cache records for this folder's files
    train = root / "data" / "graphs" / "train"
    (train / "manifest.json").unlink()  # the manifest is lost: every graphs@train shard is pending
    with open(train / "shard-0001.npz", "ab") as f:  # and one file no longer holds what was recorded
        f.write(b"\0junk")
    kept = stamps(root)["data/graphs/train/shard-0000.npz"]

    summary = run_preprocess(root, stages=("graphs",))
    assert summary["graphs@train"] == {
        "shards": 2,
        "current": 0,
        "built": ["shard-0001.npz"],
        "cached": ["shard-0000.npz"],
        "failed": [],
    }
    assert stamps(root)["data/graphs/train/shard-0000.npz"] == kept  # the verified hit was not rebuilt
    assert folder_digest(root / "data") == ref_digest


def test_dask_runner_on_a_local_cluster(reference, tmp_path):
    from distributed import LocalCluster

    ref_root, ref_digest = reference
    root = copy_inputs(ref_root, tmp_path / "work")
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
    ) as cluster:
        summary = run_preprocess(root, task_runner="dask", dask_address=cluster.scheduler_address)
    for label in ("prepare@train", "prepare@val", "graphs@train", "graphs@val"):
        stage, split = label.split("@")
        folder = ref_root / "data" / ("prepared" if stage == "prepare" else stage) / split
        assert summary[label]["built"] == sorted(p.name for p in folder.glob("shard-*")), summary[label]
    assert folder_digest(root / "data") == ref_digest


def test_flow_outputs_are_the_bytes_of_the_stage_items_run_in_order(reference, tmp_path):
    """Without Prefect, the stage items run in order through the same wiring give the same files."""
    ref_root, ref_digest = reference
    root = copy_inputs(ref_root, tmp_path / "dvc")
    run_in_order(Layout(root), ("params", *DATA_STAGES))
    assert folder_digest(root / "data") == ref_digest


def test_full_pipeline_trains_predicts_evaluates_and_publishes_the_ap(reference, tmp_path, caplog):
    from prefect.artifacts import Artifact

    caplog.set_level(logging.INFO, logger="prefect")
    ref_root, _ = reference
    root = tmp_path / "full"
    shutil.copytree(ref_root / "data", root / "data")
    (root / "params.yaml").write_text(PARAMS + "train: {max_steps: 2, batch_size: 1, checkpoint_every: 1}\n")
    stages = ("graphs", "train", "predict", "evaluate")  # no DVC record: the flow runs what it is asked for
    summary = full_flow(params_path=str(root / "params.yaml"), stages=stages)
    assert (summary["graphs@train"]["current"], summary["graphs@val"]["current"]) == (2, 2)
    assert summary["train"] == summary["predict"] == summary["evaluate"] == "ran"
    assert "synth" not in summary and "prepare@train" not in summary
    assert (root / "models" / "model.pt").is_file() and (root / "metrics" / "train.json").is_file()
    predictions = sorted(p.name for p in (root / "data" / "predictions" / "val").glob("*.txt"))  # + marker
    val_frames = [f for e in read_manifest(root / "data" / "graphs" / "val")["shards"] for f in e["frames"]]
    assert predictions == sorted(f"{f}.txt" for f in val_frames)
    assert summary["ap"] == json.loads((root / "metrics" / "ap.json").read_text())

    metrics = json.loads((root / "metrics" / "eval.json").read_text())
    table = Artifact.get(AP_TABLE_KEY)  # read back from the API: the AP table of this run
    assert table is not None and table.type == "table"
    assert json.loads(table.data) == ap_table(metrics)
    report = Artifact.get(METRICS_REPORT_KEY)
    assert report is not None and report.type == "markdown" and "R40 moderate" in report.data
    prints = [r.getMessage() for r in caplog.records if r.name == "prefect.task_runs"]
    assert any("R40 moderate" in m for m in prints)  # the evaluate step's print is in the run's logs
