"""Where the shard builds of a flow run: threads, local processes, or a Dask cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    temporary_settings,
)
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from pgnn.core.shards import one_thread_per_process

RunnerKind = Literal["threads", "processes", "dask"]
RUNNER_KINDS: tuple[str, ...] = ("threads", "processes", "dask")


def make_task_runner(kind: str, max_workers: int, dask_address: str | None = None) -> TaskRunner:
    """A fresh, not yet started task runner (enter it with ``with``).

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
def shared_api_server() -> Iterator[str]:
    """Make sure every process of a run talks to one API server; yield its URL.

    With ``PREFECT_API_URL`` set, that server. Without it, Prefect starts an ephemeral server in the flow's
    process, which process-pool and Dask workers cannot see: each would start (and migrate) its own. So
    start the ephemeral server here, once, and point the settings (which the runners pass on) at it.
    """
    if has_api_url():
        yield str(PREFECT_API_URL.value())
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
            _drain_api_workers()
    finally:
        server.stop()


def _drain_api_workers() -> None:
    """Send the logs and events still queued to the server (as prefect_test_harness does before it stops
    its server); otherwise they retry against a stopped server at exit for a minute."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        try:
            pending = APILogWorker.instance().drain()
            if inspect.isawaitable(pending):
                await pending
        except RuntimeError:  # the log worker never started
            pass
        pending = EventsWorker.drain_all()
        if inspect.isawaitable(pending):
            await pending

    run_coro_as_sync(drain())
