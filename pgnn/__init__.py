"""pgnn: Point-GNN 3D object detection, rebuilt on PyTorch + PyTorch Geometric as a reproducible pipeline.

The library holds all logic; ``stages/`` (DVC) and ``flows/`` (Prefect) are thin callers of it.
"""

__version__ = "0.1.0"
