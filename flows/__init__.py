"""Prefect 3 flows of the pgnn pipeline (``flows/pipeline.py``), composing the same ``pgnn`` functions as
the DVC stages (``stages/``); ``python -m flows.pipeline`` runs them (``flows/cli.py``).

Importing this package first applies pgnn's offline Prefect settings
(:func:`pgnn.pipeline.prefect_env.configure_prefect`: no telemetry, the result store in
``.prefect-results/``, a patient ephemeral server, and a project-local ``.prefect/`` home only when you have
no Prefect home, API URL or profile with an API URL of your own), which must happen before ``prefect`` is
imported. Variables you set yourself, and your active profile's settings, win. Nothing here imports prefect.
"""

from pathlib import Path

from pgnn.pipeline.prefect_env import configure_prefect
from pgnn.pipeline.stages import STAGES as _STAGE_TABLE

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PREFECT_ENV = configure_prefect(PROJECT_ROOT)

PREPROCESS_STAGES: tuple[str, ...] = ("synth", "prepare", "gt_db", "graphs")
"""The stages of the preprocessing flow."""
SHARD_STAGES: tuple[str, ...] = ("prepare", "gt_db", "graphs")
"""Its stages that run on the chosen task runner (shards fanned out; gt_db beside graphs)."""
TRAIN_EVALUATE_STAGES: tuple[str, ...] = ("train", "predict", "evaluate")
"""The stages of the train-evaluate flow."""
STAGES: tuple[str, ...] = tuple(
    s.name for s in _STAGE_TABLE if s.name in PREPROCESS_STAGES + TRAIN_EVALUATE_STAGES
)
"""The stages the flows run, in the stage table's order. Of the table's others, ``params`` is what the flows'
command line does before anything starts (validate and resolve params.yaml) and ``plots`` is DVC's alone."""
RUNNER_KINDS: tuple[str, ...] = ("threads", "processes", "dask")
"""Task runners of the shard builds (:func:`flows.runners.make_task_runner`)."""
