"""Dataset readers: KITTI files (``pgnn.data.kitti``, ``labels``), frames (``pgnn.data.frames``), the
synthetic KITTI generator.

The velodyne frame exists only inside these readers; everything they return to the rest of pgnn is in KITTI's
rectified camera frame (x right, y down, z forward, metres).
"""
