"""DVC stage `prepare@<split>`: FOV-cropped points, features and labels -> data/prepared/<split>."""

import sys

from _common import ROOT, params

from pgnn.pipeline.steps import prepare_step

if __name__ == "__main__":
    prepare_step(params().data, sys.argv[1], ROOT / "data" / "prepared" / sys.argv[1], root_dir=ROOT)
