"""DVC stage `evaluate`: official KITTI AP of the val predictions, PR curves.

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.evaluate.run.
"""

from _common import main

if __name__ == "__main__":
    main("evaluate")
