"""Where the shard builds of a flow run: threads, local processes, or a Dask cluster."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    get_current_settings,
    temporary_settings,
)
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from flows import RUNNER_KINDS
from pgnn.core.shards import one_thread_per_process

RunnerKind = Literal["threads", "processes", "dask"]


def make_task_runner(kind: str, max_workers: int, dask_address: str | None = None) -> TaskRunner:
    """A fresh task runner for ``flow.with_options(task_runner=...)`` (Prefect starts and stops it with the
    flow run).

    - ``threads``: a thread pool in the flow's process (lowest overhead; numba and numpy release the GIL
      for the heavy parts).
    - ``processes``: ``max_workers`` spawned processes, one BLAS/numba thread each.
    - ``dask``: the Dask scheduler at ``dask_address`` (``tcp://host:8786``), or without an address a
      temporary ``LocalCluster`` of ``max_workers`` single-threaded worker processes. With a cluster of
      your own, the scheduler *and* the workers need this repository importable (``PYTHONPATH=<repo>``:
      the scheduler unpickles the task graph, which names ``flows.tasks``), the same pgnn environment, and
      the project's ``data/`` at the same path (a shared file system).
    """
    if max_workers < 1:
        raise ValueError(f"expected max_workers >= 1, got {max_workers}")
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=max_workers)
    if kind == "processes":
        return ProcessPoolTaskRunner(max_workers=max_workers, initializer=one_thread_per_process)
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        if dask_address:
            return DaskTaskRunner(address=dask_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": max_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": "127.0.0.1:0",
            }
        )
    raise ValueError(f"expected task_runner in {RUNNER_KINDS}, got {kind!r}")


def has_api_url() -> bool:
    """Whether ``PREFECT_API_URL`` names a server (else each process would start its own ephemeral one)."""
    return bool(PREFECT_API_URL.value())


@contextlib.contextmanager
def shared_api_server(needed: bool = True) -> Iterator[str | None]:
    """Make sure every process of a run talks to one API server; yield its URL (None: Prefect's own
    ephemeral mode is enough).

    With ``PREFECT_API_URL`` set (the environment or the active profile), that server. Without it, and
    ``needed`` (a process pool or a Dask cluster runs tasks: in ephemeral mode each of their processes would
    start and migrate a server of its own), start ``prefect server start`` on a free loopback port (no UI,
    no background services), point the settings the runners pass on at it, and stop it when this process
    exits: after Prefect has sent its queued logs and events (it drains them at threading shutdown, which
    comes before ``atexit``). Without ``needed`` (threads), Prefect's ephemeral mode runs the flow.
    """
    if has_api_url():
        yield str(PREFECT_API_URL.value())
        return
    if not needed:
        yield None
        return
    url = start_prefect_server()
    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prefect_server(timeout_s: float | None = None) -> str:
    """``prefect server start`` on 127.0.0.1 (this process's Prefect settings: its home and database), in
    the background until this process exits; return its API URL once ``/health`` answers. Its output goes to
    a temporary log file, whose tail is in the error when it does not come up within ``timeout_s`` (default
    ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``)."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    fd, log_path = tempfile.mkstemp(prefix="pgnn-prefect-server-", suffix=".log")
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--no-services"]
    env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True)}
    env["PREFECT_SERVER_UI_ENABLED"] = "false"
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    atexit.register(_stop_server, proc, log_path)
    limit = timeout_s or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
    t0 = time.monotonic()
    with httpx.Client(trust_env=False, timeout=5) as client:
        while time.monotonic() - t0 < limit:
            if proc.poll() is not None:
                break
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    tail = Path(log_path).read_text(errors="replace")[-2000:]
    _stop_server(proc, log_path)
    state = (
        f"exited with status {proc.returncode}" if proc.poll() is not None else f"not healthy after {limit} s"
    )
    raise RuntimeError(f"prefect server start {state}: {tail}")


def _stop_server(proc: subprocess.Popen, log_path: str) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with contextlib.suppress(OSError):
        os.unlink(log_path)
