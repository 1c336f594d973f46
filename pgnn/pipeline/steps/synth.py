"""Stage ``synth``: write the built-in synthetic KITTI root (deterministic per seed)."""

from __future__ import annotations

from pathlib import Path

from pgnn.config.params import DataConfig, ResolvedReader, SyntheticConfig
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.pipeline.stages import Layout


def synth_step(cfg: SyntheticConfig, out_dir: Path, workers: int = 1) -> None:
    """Write the synthetic KITTI root of ``cfg`` to ``out_dir`` with ``workers`` processes (the bytes do not
    depend on it)."""
    print(f"synth: {cfg.frames} frames (seed {cfg.seed}) -> {out_dir}")
    generate_dataset(out_dir, cfg.frames, cfg.seed, cfg.val_fraction, workers=workers)


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    workers = params.section("data", DataConfig).workers  # like prepare and graphs: not in the output
    synth_step(params.section("synthetic", SyntheticConfig), layout.path("synthetic"), workers)
