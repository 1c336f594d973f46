"""DVC stage `evaluate`: official KITTI AP of data/predictions/val -> metrics/eval.json, plots/pr/*.csv."""

from _common import ROOT, params

from pgnn.steps import evaluate_step

if __name__ == "__main__":
    evaluate_step(
        params().eval,
        ROOT / "data" / "prepared" / "val",
        ROOT / "data" / "predictions" / "val",
        ROOT / "metrics" / "eval.json",
        ROOT / "plots" / "pr",
    )
