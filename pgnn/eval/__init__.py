"""Evaluation: the official KITTI object-detection AP (2D, AOS, BEV, 3D; R40 and R11): ``pgnn.eval.kitti``
(protocol), ``pgnn.eval.matching`` (numba matching), ``pgnn.eval.report`` (tables, curves)."""
