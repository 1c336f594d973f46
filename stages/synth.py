"""DVC stage `synth`: write the built-in synthetic KITTI dataset to data/synthetic."""

from _common import ROOT, params

from pgnn.pipeline.steps import synth_step

if __name__ == "__main__":
    synth_step(params().synthetic, ROOT / "data" / "synthetic")
