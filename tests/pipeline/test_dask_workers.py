"""The preprocessing flow on a real Dask cluster started from the command line, as on several machines:
``dask scheduler`` and two ``dask worker`` processes (one thread each, no nanny), then
``python -m flows --flow preprocess --runner dask --dask-address tcp://...``. One worker is SIGKILLed
while it builds a shard; Dask reruns its tasks on the other worker (a shard that had landed just before the
kill is then a verified Prefect cache hit) and the flow still completes, with shards byte-identical (sha256,
manifests and gt_db included) to a single-process run of the same step functions.

Loopback only; the Prefect home, result store and ephemeral API server (the flow command starts one) live in
a temporary folder; every process started here is stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.pipeline.runner import run_in_order
from pgnn.pipeline.stages import Layout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FRAMES = 6  # 3 train + 3 val, one frame a shard: 6 prepare and 6 graphs shards
PARAMS = f"""\
preset: small
data: {{root: data/synthetic, frames_per_shard: 1, workers: 2}}
synthetic: {{frames: {FRAMES}, seed: 3, val_fraction: 0.5}}
"""
OUTPUTS = ("prepared", "graphs", "gt_db")


def digest(root: Path) -> dict[str, str]:
    from pgnn.core.io import sha256_file

    data = root / "data"
    return {
        p.relative_to(data).as_posix(): sha256_file(p)
        for name in OUTPUTS
        for p in sorted((data / name).rglob("*"))
        if p.is_file()
    }


def new_project(folder: Path, synthetic: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_text(PARAMS)
    shutil.copytree(synthetic, folder / "data" / "synthetic")
    return folder


class Processes:
    """Background processes, each in its own session, with their output in log files."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str, cwd: Path) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                args, cwd=cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = proc
        return proc

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def tails(self) -> str:
        return "\n".join(f"----- {name} -----\n{self.tail(name)}" for name in self.procs)

    def stop_all(self) -> None:
        """SIGTERM to each process group (also what a finished flow left behind), SIGKILL after 5 s: a Dask
        worker that ran Prefect tasks keeps retrying to send its last logs to the flow's stopped API server
        for a minute when it exits."""
        for proc in reversed(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs.values()):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DASK_"))}
    env |= {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "prefect-results"),
        "NO_PROXY": "127.0.0.1,localhost",
        "OMP_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs, env)
    try:
        yield procs
    finally:
        procs.stop_all()


def wait_for(what: str, ready, procs: Processes, timeout: float, watch: list[str]) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for name in watch:
            exited = procs.procs[name].poll() is not None
            assert not exited, f"{name} exited while waiting for {what}\n{procs.tails()}"
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout} s\n{procs.tails()}")
        time.sleep(0.05)


def reference_run(root: Path) -> None:
    """The reference: the stage items run in order through the one wiring (``dvc repro``'s), no Prefect."""
    run_in_order(Layout(root), ["params", "prepare", "gt_db", "graphs"])


class Killer(threading.Thread):
    """Once the first shard has landed, SIGKILL a worker that Dask has given a task (and remember which)."""

    def __init__(self, client, pids: dict[str, int], project: Path, flow: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.client, self.pids, self.project, self.flow = client, pids, project, flow
        self.victim: str | None = None
        self.landed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05) and self.flow.poll() is None:
            if not any((self.project / "data" / "prepared").rglob("shard-*")):
                continue
            busy = sorted(w for w, keys in self.client.processing().items() if keys)
            if busy:
                os.kill(self.pids[busy[0]], signal.SIGKILL)
                self.victim = busy[0]
                data = self.project / "data"
                self.landed = sorted(p.relative_to(data).as_posix() for p in data.rglob("shard-*"))
                return


def test_preprocess_flow_on_dask_workers_survives_a_killed_worker(processes, tmp_path):
    from distributed import Client

    # the cluster: a scheduler and two single-threaded workers, as `dask` commands (they start meanwhile)
    sched_file = tmp_path / "scheduler.json"
    dask = str(Path(sys.executable).parent / "dask")
    processes.start(
        "scheduler", dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
        "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file), cwd=tmp_path,
    )  # fmt: skip
    synthetic = tmp_path / "synthetic"
    generate_dataset(synthetic, FRAMES, seed=3, val_fraction=0.5)
    wait_for("scheduler file", sched_file.is_file, processes, 60, ["scheduler"])
    for name in ("worker-a", "worker-b"):
        processes.start(
            name, dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1", "--no-nanny",
            "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0", "--name", name, cwd=tmp_path,
        )  # fmt: skip
    address = json.loads(sched_file.read_text())["address"]
    assert address.startswith("tcp://127.0.0.1:")
    project = new_project(tmp_path / "project", synthetic)
    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=90)
        pids = client.run(os.getpid)  # {worker address: pid}
        flow = processes.start(
            "flow", sys.executable, "-m", "flows", "--flow", "preprocess",
            "--params", str(project / "params.yaml"), "--stages", "prepare", "gt_db", "graphs",
            "--runner", "dask", "--dask-address", address, cwd=REPO,
        )  # fmt: skip
        killer = Killer(client, pids, project, flow)
        killer.start()
        # while the flow starts its API server and runs: the reference, in this process
        ref = new_project(tmp_path / "reference", synthetic)
        reference_run(ref)
        expected = digest(ref)
        try:
            flow.wait(timeout=150)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the flow did not finish in 150 s\n{processes.tails()}")
        finally:
            killer.stop.set()
            killer.join()
        assert flow.returncode == 0, f"flow failed ({flow.returncode})\n{processes.tails()}"
        survivors = list(client.scheduler_info()["workers"])

    assert killer.victim is not None, f"no worker was killed\n{processes.tails()}"
    assert survivors == [w for w in pids if w != killer.victim], (survivors, killer.victim)
    assert len(killer.landed) < 2 * FRAMES, f"every shard had landed before the kill: {killer.landed}"
    out = processes.tail("flow", 100_000)
    summary = json.loads(out[out.rindex("\n{\n") : out.rindex("\n}\n") + 2])
    done = [
        f for s in ("prepare", "graphs") for p in ("train", "val") for k in ("built", "cached")
        for f in summary[f"{s}@{p}"][k]
    ]  # fmt: skip
    assert len(done) == 2 * FRAMES, summary  # "cached": a shard that landed just before its worker died
    assert len([f for f in expected if "shard-" in f]) == 2 * FRAMES
    assert digest(project) == expected
