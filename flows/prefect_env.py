"""Offline, quiet Prefect settings, applied *before* ``import prefect``, that leave the user's Prefect alone.

Prefect 3 reads its settings from the environment once, when it is imported, so :func:`configure_prefect` must
run first (``flows/__init__.py`` calls it, so importing ``flows`` applies it). Every value is a default: a
variable the user set, or a setting of the user's active Prefect profile, wins. Nothing here imports prefect,
and nothing needs a network:

- no telemetry (``DO_NOT_TRACK``, server analytics off) and no UI for ``prefect server start``;
- ``pgnn`` loggers (training progress) in the flow runs' logs (``PREFECT_LOGGING_EXTRA_LOGGERS``);
- the result store (where Prefect keeps the task cache records) inside the project, git-ignored;
- ``PREFECT_HOME`` (profiles, the ephemeral server's SQLite database) inside the project *only* when the
  user has no Prefect of their own: no ``PREFECT_HOME``, no ``PREFECT_API_URL`` and no active profile with an
  API URL (:func:`user_api_url`). Otherwise their home, profiles and server are used as they are;
- a 180 s start-up timeout for the ephemeral API server: on a fresh database its migrations can outlast
  Prefect's default of 20 s (measured: benchmarks/README.md, "Measurements behind the code").
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

#: Settings that do not depend on where the project lives.
OFFLINE_SETTINGS: dict[str, str] = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "pgnn",
}


def prefect_settings(project_root: str | Path) -> dict[str, str]:
    """The Prefect environment pgnn uses for the project at ``project_root`` when the user has no Prefect
    settings of their own (pure; sets nothing)."""
    root = Path(project_root).resolve()
    return {
        **OFFLINE_SETTINGS,
        "PREFECT_HOME": str(root / ".prefect"),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(root / ".prefect-results"),
    }


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent or unreadable: Prefect ignores it too
        return {}


def _default_profiles_path() -> Path | None:
    """The profiles template shipped with prefect (found without importing prefect)."""
    import importlib.util

    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "settings" / "profiles.toml"


def active_profile(
    environ: Mapping[str, str] | None = None, profiles_path: str | Path | None = None
) -> dict[str, Any]:
    """The settings of the Prefect profile that is active for ``environ`` (default ``os.environ``), read as
    Prefect reads them: prefect's default profiles, updated by the user's ``profiles.toml``
    (``PREFECT_PROFILES_PATH``, else ``$PREFECT_HOME/profiles.toml``, else ``~/.prefect/profiles.toml``),
    the active one named by ``PREFECT_PROFILE`` or the file's ``active`` key. ``{}`` when there is none."""
    env = os.environ if environ is None else environ
    if profiles_path is None:
        home = Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()
        profiles_path = env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml"
    default_path = _default_profiles_path()
    defaults = _read_toml(default_path) if default_path else {}
    user = _read_toml(Path(profiles_path).expanduser())
    profiles: dict[str, dict[str, Any]] = {
        name: dict(values) for name, values in defaults.get("profiles", {}).items()
    }
    for name, values in user.get("profiles", {}).items():
        profiles.setdefault(name, {}).update(values)
    name = env.get("PREFECT_PROFILE") or user.get("active") or defaults.get("active")
    return profiles.get(name, {}) if name else {}


def user_api_url(
    environ: Mapping[str, str] | None = None, profiles_path: str | Path | None = None
) -> str | None:
    """The Prefect API the user chose: ``PREFECT_API_URL``, else the active profile's; None when neither."""
    env = os.environ if environ is None else environ
    return env.get("PREFECT_API_URL") or active_profile(env, profiles_path).get("PREFECT_API_URL") or None


def configure_prefect(
    project_root: str | Path,
    environ: MutableMapping[str, str] | None = None,
    profiles_path: str | Path | None = None,
) -> dict[str, str]:
    """Put :func:`prefect_settings` into ``environ`` (default ``os.environ``) where the user did not choose.

    A variable already set, or set by the active Prefect profile (:func:`active_profile`; ``profiles_path``
    overrides where its file is looked for), is left to the user. ``PREFECT_HOME`` is set only when there is
    no ``PREFECT_HOME`` and no API URL (:func:`user_api_url`): a user with a server or a home of their own
    keeps their profiles and database. Returns the value now in ``environ`` of each variable of
    :func:`prefect_settings` that has one. Call it before the first ``import prefect`` of the process;
    later calls change nothing Prefect has already read.
    """
    env = os.environ if environ is None else environ
    profile = active_profile(env, profiles_path)
    wanted = prefect_settings(project_root)
    if "PREFECT_HOME" in env or user_api_url(env, profiles_path):
        del wanted["PREFECT_HOME"]
    for name, value in wanted.items():
        if name not in env and name not in profile:
            env[name] = value
    return {name: env[name] for name in prefect_settings(project_root) if name in env}


def project_root() -> Path:
    """The repository that holds these flows or, failing that, the cwd.

    The repository is recognised by its ``params.yaml`` next to the ``flows/`` folder.
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
    """``export NAME=value`` lines for a shell (``eval "$(...)"``): what :func:`configure_prefect` would put
    in this environment, plus the values of those variables already set here."""
    import shlex

    effective = configure_prefect(project_root, dict(os.environ))
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in effective.items())


# eval "$(python -m flows.prefect_env)": the same settings for the prefect CLI
if __name__ == "__main__":
    print(shell_exports(project_root()))
