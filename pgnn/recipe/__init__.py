"""Recipes: the presets (a named graph, network, loss, augmentation and schedule), a preset with params.yaml's
overrides applied (a recipe), params.yaml resolved (the recipe plus the sections no preset sets), and the
original's config pairs imported as one. Above nn: a recipe's facts come from below."""
