"""DVC stage `graphs@<split>`: graphs, input features and vertex targets of one split (npz shards).

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.graphs.run.
"""

from _common import main

if __name__ == "__main__":
    main("graphs")
