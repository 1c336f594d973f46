"""Typed configs (pydantic, ``extra="forbid"``, torch-free): params.yaml and its sections, the original's
config format. The presets that fill them are one floor up, in pgnn/recipe."""
