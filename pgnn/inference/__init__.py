"""Inference layer: prediction on frames or cached graphs, box merging and NMS, KITTI result files."""
