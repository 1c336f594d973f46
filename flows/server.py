"""One Prefect API server for every process of a local run: ``prefect server start`` in the background.

Without ``PREFECT_API_URL``, Prefect runs a flow against an ephemeral server of its own process. Process-pool
and Dask workers cannot see it: each would start (and migrate) one of its own, and so would threads that
Prefect starts without the run's settings context (the process pool's log and event forwarder, which reads
the settings prefect read from the environment at import). So ``python -m flows`` starts
``prefect server start`` (loopback, no UI, no background services) and runs the flow in a child process
whose environment names it as ``PREFECT_API_URL``, as a deployment's worker does. Nothing here imports
prefect.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """``prefect server start`` on a free port of 127.0.0.1 with this process's environment (its Prefect
    home and database), output in a temporary log file. Stopped by :meth:`stop`, or when this process
    exits: after Prefect has sent its queued logs and events (it drains them at threading shutdown, which
    comes before ``atexit``)."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/api"
        fd, self.log_path = tempfile.mkstemp(prefix="pgnn-prefect-server-", suffix=".log")
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        env = {**os.environ, "PREFECT_SERVER_UI_ENABLED": "false"}
        env.pop("PREFECT_API_URL", None)
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(
                [*cmd, "--no-services"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        atexit.register(self.stop)

    def healthy(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
        try:
            with opener.open(f"{self.url}/health", timeout=5) as r:
                return r.status == 200 and json.loads(r.read() or b"null") is True
        except (OSError, ValueError):
            return False

    def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Wait until ``/health`` answers (``timeout_s`` default:
        ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, else 180 s); raise a RuntimeError with the
        tail of the server's log if it exits or does not come up in time."""
        limit = timeout_s or float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", 180))
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit and self.proc.poll() is None:
            if self.healthy():
                return
            time.sleep(0.25)
        tail = Path(self.log_path).read_text(errors="replace")[-2000:]
        code = self.proc.poll()
        self.stop()
        state = f"exited with status {code}" if code is not None else f"was not healthy after {limit:.0f} s"
        raise RuntimeError(f"prefect server start {state}: {tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


def start_shared_server() -> LocalServer:
    """Start a :class:`LocalServer` and export its URL as ``PREFECT_API_URL`` for the child processes
    started after this (wait for it with :meth:`LocalServer.wait_healthy` before running a flow)."""
    server = LocalServer()
    os.environ["PREFECT_API_URL"] = server.url
    return server
