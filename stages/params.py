"""DVC stage `params`: validate params.yaml as a whole, resolve its preset, write the effective params.

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.params.run.
"""

from _common import main

if __name__ == "__main__":
    main("params")
