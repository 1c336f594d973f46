"""DVC stage `predict`: the trained model on the cached runtime graphs of the val split -> KITTI result files
in data/predictions/val, mean per-stage timings in metrics/predict.json."""

from _common import ROOT, params

from pgnn.config.presets import resolve
from pgnn.pipeline.steps import predict_step

if __name__ == "__main__":
    predict_step(
        resolve(params()),
        ROOT / "models" / "model.pt",
        ROOT / "data" / "graphs" / "val",
        ROOT / "data" / "prepared" / "val",
        ROOT / "data" / "predictions" / "val",
        ROOT / "metrics" / "predict.json",
    )
