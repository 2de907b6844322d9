"""``python -m energyformer ...``: the ``energyformer`` command."""

from .cli import main

raise SystemExit(main())
