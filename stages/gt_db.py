"""DVC stage `gt_db`: object point crops of the train split (ground-truth sampling database).

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.gt_db.run.
"""

from _common import main

if __name__ == "__main__":
    main("gt_db")
