"""DVC stage `evaluate`: official KITTI AP of data/predictions/val -> metrics/eval.json, plots/pr/*.csv."""

from _common import ROOT, params

from pgnn.config.presets import resolve
from pgnn.graphs.targets import object_classes
from pgnn.pipeline.steps import evaluate_step

if __name__ == "__main__":
    p = params()
    evaluate_step(
        p.eval,
        ROOT / "data" / "prepared" / "val",
        ROOT / "data" / "predictions" / "val",
        ROOT / "metrics" / "eval.json",
        ROOT / "plots" / "pr",
        default_classes=object_classes(resolve(p).targets.label_method),
    )
