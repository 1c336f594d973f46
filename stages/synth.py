"""DVC stage `synth`: the built-in synthetic KITTI root.

The stage table (pgnn/pipeline/stages.py) holds its paths and params; it runs
pgnn.pipeline.steps.synth.run.
"""

from _common import main

if __name__ == "__main__":
    main("synth")
