"""Typed configs (pydantic, ``extra="forbid"``, torch-free): params.yaml, the sections, the presets."""
