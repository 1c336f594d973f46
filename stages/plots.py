"""DVC stage `plots`: PNG charts and BEV pictures of val detections (offline image plots).

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.plots.run.
"""

from _common import main

if __name__ == "__main__":
    main("plots")
