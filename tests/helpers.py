"""Plain helpers shared by the tests; the shared fixtures are in ``conftest.py`` beside this file.

Test modules import it as ``helpers``: pytest puts ``tests/`` on ``sys.path`` because it holds the root
``conftest.py`` (the default ``prepend`` import mode), as it puts a test module's own folder there (so
``tests/training`` imports ``test_loop``). Torch and the network are imported only by the functions that need
them, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from pgnn.config.network import GNNLayerConfig, ModelConfig

# A tiny network for fast tests: one GNN iteration, 8 wide (the defaults for classes and inputs: 4 and 1).
# ModelConfig is frozen: share it freely, derive variants with ``model_copy(update=...)``.
TINY_MODEL = ModelConfig(
    point_mlp=(8,),
    set_mlp=(8,),
    gnn_layers=(GNNLayerConfig(offset_mlp=(4, 3), edge_mlp=(8,), update_mlp=(8,)),),
    cls_hidden=(4,),
    loc_hidden=(4,),
)

# The training facts of the tests' randomly initialised checkpoints (graph_preset is given per use).
TINY_CARD = {
    "input_frame": "rect",
    "encoding": "classaware_all_class_box_encoding",
    "label_method": "Car",
    "input_features": "i",
}

# The 7 frames of ``pointgnn_reference`` (the original TF model's inputs and outputs); the ``t1_predictions``
# fixture reads BIN_FRAME through ``pgnn predict --bin``, the others through ``--root``.
REFERENCE_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
BIN_FRAME = "000114"


def cli(argv: list[str]) -> tuple[int, str]:
    """Run ``pgnn ARGV`` in this process: (exit code, what it printed on stdout)."""
    from pgnn.cli import main as cli_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli_main(argv)
    return rc, out.getvalue()


def random_checkpoint(
    cfg: ModelConfig = TINY_MODEL, *, graph_preset: str, step: int = 0, seed: int = 0, **card: Any
) -> dict[str, Any]:
    """The checkpoint dict of a ``cfg`` network initialised from ``seed``, with :data:`TINY_CARD`'s facts
    (``card`` overrides or adds entries) and ``graph_preset``."""
    import torch

    from pgnn.nn.checkpoint import make_checkpoint
    from pgnn.nn.model import PointGNN

    model = PointGNN(cfg, generator=torch.Generator().manual_seed(seed))
    return make_checkpoint(model, step=step, **{**TINY_CARD, "graph_preset": graph_preset, **card})


def save_random_checkpoint(path: Path, cfg: ModelConfig = TINY_MODEL, **kwargs: Any) -> dict[str, Any]:
    """:func:`random_checkpoint` written to ``path`` with ``save_checkpoint``; returns the dict."""
    from pgnn.nn.checkpoint import save_checkpoint

    ckpt = random_checkpoint(cfg, **kwargs)
    save_checkpoint(path, ckpt)
    return ckpt


def torch_threads(n: int | None = None) -> int:
    """torch's intra-op thread count, before setting it to ``n`` when given."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    return before
