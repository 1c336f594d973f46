"""Prefect 3 flows of the pgnn pipeline (``flows/pipeline.py``), running the stages through the same
:func:`pgnn.pipeline.runner.run_item` as the DVC stages (``stages/``); ``python -m flows`` runs them
(``flows/cli.py``).

Importing this package first applies pgnn's offline Prefect settings
(:func:`flows.prefect_env.configure_prefect`: no telemetry, the result store in
``.prefect-results/``, a patient ephemeral server, and a project-local ``.prefect/`` home only when you have
no Prefect home, API URL or profile with an API URL of your own), which must happen before ``prefect`` is
imported. Variables you set yourself, and your active profile's settings, win. Nothing here imports prefect.
"""

from pathlib import Path

from flows.prefect_env import configure_prefect
from pgnn.pipeline.stages import STAGES as _STAGE_TABLE
from pgnn.pipeline.stages import flow_stages

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PREFECT_ENV = configure_prefect(PROJECT_ROOT)

PREPROCESS_STAGES: tuple[str, ...] = flow_stages("preprocess")
"""The stages of the preprocessing flow (the CPU work pool's deployment): the stage table says."""
SHARD_STAGES: tuple[str, ...] = tuple(s.name for s in _STAGE_TABLE if s.sharded)
"""The stages whose shards are fanned out on the chosen task runner."""
TRAIN_EVALUATE_STAGES: tuple[str, ...] = flow_stages("train-evaluate")
"""The stages of the train-evaluate flow (the GPU work pool's deployment)."""
STAGES: tuple[str, ...] = flow_stages("full")
"""The stages the full flow runs: the whole stage table, in its order (``dvc.yaml``'s)."""
RUNNER_KINDS: tuple[str, ...] = ("threads", "processes", "dask")
"""Task runners of the shard builds (:func:`flows.runners.make_task_runner`)."""
