"""pgnn: Point-GNN 3D object detection, rebuilt on PyTorch + PyTorch Geometric as a reproducible pipeline.

The library holds all logic; ``stages/`` (DVC) and ``flows/`` (Prefect) are thin callers of it. Importing it
pins the CPU numerics of torch, MKL and numpy (:mod:`pgnn.core.cpu`) before they load, so the same params give
the same bytes on any x86-64 CPU with AVX2: import pgnn before torch or numpy.
"""

from pgnn.core import cpu as _cpu

_cpu.pin()

__version__ = "0.1.0"
