"""``python -m flows``: the pgnn flows' command line (:mod:`flows.cli`)."""

from flows.cli import main

raise SystemExit(main())
