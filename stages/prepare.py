"""DVC stage `prepare@<split>`: FOV-cropped points, features and labels of one split (parquet shards).

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.prepare.run.
"""

from _common import main

if __name__ == "__main__":
    main("prepare")
