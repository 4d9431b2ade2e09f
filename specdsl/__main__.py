"""``python -m specdsl``: the same as the ``specdsl`` command."""

import sys

from .cli import main

sys.exit(main())
