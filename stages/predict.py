"""DVC stage `predict`: KITTI result files of the val split from the cached runtime graphs.

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.predict.run.
"""

from _common import main

if __name__ == "__main__":
    main("predict")
