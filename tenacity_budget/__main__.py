"""``python -m tenacity_budget``: the same command line as ``tenacity-budget``."""

from .cli import main

raise SystemExit(main())
