"""Network layer (torch + PyG): the Point-GNN model, its loss, checkpoints, the authors' weights."""
