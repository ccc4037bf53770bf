"""``python -m trajview``: the ``trajview`` command (``train``, ``evaluate``, ``export``, ``report``)."""

import sys

from .train.cli import main

sys.exit(main())
