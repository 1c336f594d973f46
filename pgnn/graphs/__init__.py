"""Graphs layer: voxel levels, radius edges, input features, vertex targets, box encodings, the cache."""
