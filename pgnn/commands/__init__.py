"""The ``pgnn`` sub-commands, one module each (see ``pgnn/cli.py``)."""
