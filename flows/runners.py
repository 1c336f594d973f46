"""Where the shard builds of a flow run: threads, local processes, or a Dask cluster."""

from __future__ import annotations

from typing import Literal

from prefect.settings import PREFECT_API_URL
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
    """Whether ``PREFECT_API_URL`` names a server (else each worker process of a process pool or Dask cluster
    would start its own ephemeral one; ``python -m flows`` starts one they share, see
    ``flows/server.py``)."""
    return bool(PREFECT_API_URL.value())
