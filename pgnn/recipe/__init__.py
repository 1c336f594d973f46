"""Recipes: the presets (a named graph, network, loss, augmentation and schedule), params.yaml resolved
into one, and the original's config pairs imported as one. Above nn: a recipe's facts come from below."""
