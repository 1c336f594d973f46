"""Foundations every layer uses: errors, atomic IO, the box convention, content-keyed shards, imports."""
