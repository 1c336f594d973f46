"""Pipeline layer: the stage table (``stages.py``), a step module per stage, dvc.yaml generation, runs."""
