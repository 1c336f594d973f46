"""Prefect 3 flows of the pgnn pipeline (``flows/pipeline.py``), composing the same ``pgnn`` functions as
the DVC stages (``stages/``).

Importing this package first applies pgnn's offline Prefect settings
(:func:`pgnn.pipeline.prefect_env.configure_prefect`: no telemetry, project-local ``.prefect/`` and
``.prefect-results/``, a patient ephemeral server), which must happen before ``prefect`` is imported.
Variables you set yourself win.
"""

from pathlib import Path

from pgnn.pipeline.prefect_env import configure_prefect

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PREFECT_ENV = configure_prefect(PROJECT_ROOT)
