"""End to end through a real Prefect server: ``prefect server start`` -> work pool -> ``prefect deploy``
(the repository's prefect.yaml) -> ``prefect worker start`` -> ``prefect deployment run --watch`` of the
preprocessing deployment on a tiny synthetic project. Loopback only; everything (server database, Prefect
home, result store, data) lives in a temporary folder; every process started here is killed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PARAMS = """\
preset: small
data: {root: data/synthetic, frames_per_shard: 1, workers: 2}
synthetic: {frames: 2, seed: 1, val_fraction: 0.5}
"""
SERVER_TIMEOUT_S = 150  # a fresh database's migrations took 20-70 s on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(url: str, body: dict | None = None) -> object:
    """GET (or POST ``body`` as JSON) to the local API, bypassing any proxy settings."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


class Processes:
    """Background processes, each in its own process group, with their output in log files."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env, self.procs = logs, env, []

    def start(self, name: str, *args: str, cwd: Path) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")  # closed in stop_all
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect", *args],
            cwd=cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        return proc

    def run(self, *args: str, cwd: Path, timeout: float) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "prefect", *args],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, f"prefect {' '.join(args)} failed ({out.returncode}):\n{text[-3000:]}"
        return text

    def stop_all(self) -> None:
        for proc, _ in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, log in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            log.close()

    def tail(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@pytest.fixture
def prefect_env(tmp_path) -> Iterator[tuple[Processes, str]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "prefect-results"),
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "DO_NOT_TRACK": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "OMP_NUM_THREADS": "1",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs, env)
    try:
        yield procs, env["PREFECT_API_URL"]
    finally:
        procs.stop_all()


def wait_healthy(procs: Processes, api_url: str, server: subprocess.Popen) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < SERVER_TIMEOUT_S:
        assert server.poll() is None, f"prefect server exited:\n{procs.tail('server')}"
        try:
            if api(f"{api_url}/health") is True:
                return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(1.0)
    pytest.fail(f"server not healthy after {SERVER_TIMEOUT_S} s:\n{procs.tail('server')}")


def test_preprocess_deployment_runs_end_to_end_on_a_process_worker(prefect_env, tmp_path):
    procs, api_url = prefect_env
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text(PARAMS)
    port = api_url.split(":")[-1].split("/")[0]
    t0 = time.perf_counter()

    server = procs.start("server", "server", "start", "--host", "127.0.0.1", "--port", port, cwd=tmp_path)
    healthy_after = wait_healthy(procs, api_url, server)
    procs.run("work-pool", "create", "pgnn-cpu", "--type", "process", cwd=tmp_path, timeout=60)
    worker = procs.start("worker", "worker", "start", "--pool", "pgnn-cpu", "--limit", "1", cwd=tmp_path)
    deployed = procs.run("--no-prompt", "deploy", "--name", "pgnn-preprocess", cwd=REPO, timeout=120)
    assert "pgnn-preprocess" in deployed
    run = procs.run(
        "deployment",
        "run",
        "pgnn-preprocess/pgnn-preprocess",
        "--param",
        f"params_path={project / 'params.yaml'}",
        "--param",
        f"project_root={project}",
        "--watch",
        "--watch-timeout",
        "240",
        cwd=tmp_path,
        timeout=300,
    )
    elapsed = time.perf_counter() - t0
    assert worker.poll() is None, procs.tail("worker")

    runs = api(f"{api_url}/flow_runs/filter", {})
    assert {r["state"]["type"] for r in runs} == {"COMPLETED"}, (run[-2000:], procs.tail("worker"))
    (top,) = [r for r in runs if r["deployment_id"]]  # the deployment's run; a pgnn-shards sub-flow run for
    assert len(runs) == 3 and top["parameters"]["project_root"] == str(project)  # prepare, one for graphs
    assert top["parameters"]["task_runner"] == "processes"  # prefect.yaml's default: a process pool
    for stage, split in [(s, p) for s in ("prepared", "graphs") for p in ("train", "val")]:
        manifest = json.loads((project / "data" / stage / split / "manifest.json").read_text())
        assert (
            len(manifest["shards"]) == 1
            and (project / "data" / stage / split / "shard-0000")
            .with_suffix(".parquet" if stage == "prepared" else ".npz")
            .is_file()
        )
    assert (project / "data" / "synthetic" / "ImageSets" / "train.txt").is_file()
    assert (project / "data" / "gt_db" / "gt_db.parquet").is_file()
    print(
        f"\nserver healthy after {healthy_after:.0f} s; deploy + worker + flow run done after {elapsed:.0f} s"
    )
