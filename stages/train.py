"""DVC stage `train`: train on data/graphs/train; checkpoints in models/checkpoints (resumable), the final
model in models/model.pt, dvclive logs in dvclive/train, the summary in metrics/train.json."""

from _common import ROOT, params

from pgnn.config.presets import resolve
from pgnn.pipeline.steps import train_step

if __name__ == "__main__":
    train_step(
        resolve(params()),
        ROOT / "data" / "graphs" / "train",
        ROOT / "models" / "checkpoints",
        ROOT / "models" / "model.pt",
        ROOT / "dvclive" / "train",
        ROOT / "metrics" / "train.json",
        prepared_dir=ROOT / "data" / "prepared" / "train",
        gt_db_path=ROOT / "data" / "gt_db" / "gt_db.parquet",
    )
