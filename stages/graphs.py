"""DVC stage `graphs@<split>`: graphs, input features and vertex targets -> data/graphs/<split>."""

import sys

from _common import ROOT, params

from pgnn.config.presets import resolve
from pgnn.pipeline.steps import graphs_step

if __name__ == "__main__":
    p = params()
    which = sys.argv[1]
    graphs_step(
        resolve(p),
        which,
        ROOT / "data" / "prepared" / which,
        ROOT / "data" / "graphs" / which,
        p.data.frames_per_shard,
        p.data.workers,
    )
