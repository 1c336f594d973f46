"""DVC stage `train`: train (resumable checkpoints) and export the model.

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.train.run.
"""

from _common import main

if __name__ == "__main__":
    main("train")
