"""The old home of pgnn's Prefect settings, now ``flows/prefect_env.py``.

``python -m pgnn.pipeline.prefect_env`` (documented until this release) prints a note and runs ``python -m
flows.prefect_env``. Nothing imports this module; it goes in the next release."""

import runpy
import sys

OLD_ENTRY_NOTE = (
    "python -m pgnn.pipeline.prefect_env: note: this entry is now `python -m flows.prefect_env`; the old "
    "name stays for one release"
)

if __name__ == "__main__":
    print(OLD_ENTRY_NOTE, file=sys.stderr)
    runpy.run_module("flows.prefect_env", run_name="__main__", alter_sys=True)
