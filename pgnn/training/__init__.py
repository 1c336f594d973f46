"""Training layer: the loop (resume, DDP, logging), record sources, vertex metrics."""
