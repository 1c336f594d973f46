"""Offline, quiet, project-local Prefect settings, applied *before* ``import prefect``.

Prefect 3 reads its settings from the environment once, when it is imported, so :func:`configure_prefect`
must run first (``flows/__init__.py`` calls it). Every value is a default: a variable the user already set
wins. Nothing here imports prefect, and nothing needs a network:

- no telemetry (``DO_NOT_TRACK``, server analytics off) and no UI for ``prefect server start``;
- ``PREFECT_HOME`` (profiles, the ephemeral server's SQLite database) and the result store (where Prefect
  keeps task cache records) inside the project, both git-ignored;
- a 180 s start-up timeout for the ephemeral API server: on a fresh database its migrations took 21-72 s
  on the 2-core machines this was built on (Prefect's default of 20 s timed out).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

#: Settings that do not depend on where the project lives.
OFFLINE_SETTINGS: dict[str, str] = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
}


def prefect_settings(project_root: str | Path) -> dict[str, str]:
    """The Prefect environment pgnn uses for the project at ``project_root`` (pure; sets nothing)."""
    root = Path(project_root).resolve()
    return {
        **OFFLINE_SETTINGS,
        "PREFECT_HOME": str(root / ".prefect"),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(root / ".prefect-results"),
    }


def configure_prefect(
    project_root: str | Path, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Put :func:`prefect_settings` into ``environ`` (default ``os.environ``) where not already set.

    Returns the effective value of each of those variables (the user's where they set one). Call it before
    the first ``import prefect`` of the process; later calls change nothing Prefect has already read.
    """
    env = os.environ if environ is None else environ
    effective = {}
    for name, value in prefect_settings(project_root).items():
        effective[name] = env.setdefault(name, value)
    return effective


def project_root() -> Path:
    """The repository that holds this ``pgnn`` package (an editable install) or, failing that, the cwd.

    The repository is recognised by its ``params.yaml`` next to the ``pgnn/`` package folder.
    """
    here = Path(__file__).resolve().parents[1]
    return here if (here / "params.yaml").exists() else Path.cwd().resolve()


def project_root_step() -> dict[str, str]:
    """A ``prefect.yaml`` build step: ``{"directory": <repo root>}`` for the pull step's working directory.

    ``prefect deploy`` runs it once and bakes the path into the deployment, so a worker started anywhere
    runs the flow in the repository (see ``prefect.yaml``).
    """
    return {"directory": str(project_root())}


def shell_exports(project_root: str | Path) -> str:
    """``export NAME=value`` lines of :func:`prefect_settings` for a shell (``eval "$(...)"``), keeping
    values already set in this environment."""
    import shlex

    lines = []
    for name, value in prefect_settings(project_root).items():
        lines.append(f"export {name}={shlex.quote(os.environ.get(name, value))}")
    return "\n".join(lines)


# eval "$(python -m pgnn.pipeline.prefect_env)": the same settings for the prefect CLI
if __name__ == "__main__":
    print(shell_exports(project_root()))
