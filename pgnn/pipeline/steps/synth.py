"""Stage ``synth``: write the built-in synthetic KITTI root (deterministic per seed)."""

from __future__ import annotations

from pathlib import Path

from pgnn.config.params import ResolvedParams, SyntheticConfig
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.pipeline.stages import Layout


def synth_step(cfg: SyntheticConfig, out_dir: Path) -> None:
    """Write the synthetic KITTI root of ``cfg`` to ``out_dir``."""
    print(f"synth: {cfg.frames} frames (seed {cfg.seed}) -> {out_dir}")
    generate_dataset(out_dir, cfg.frames, cfg.seed, cfg.val_fraction)


def run(params: ResolvedParams, layout: Layout, item: str | None) -> None:
    synth_step(params.section("synthetic", SyntheticConfig), layout.path("synthetic"))
