"""``python -m specdsl``: the same as the ``specdsl`` command.

``specdsl/__init__.py`` has already taken the working folder off ``sys.path``
(see :mod:`specdsl.working_folder`), before importing anything.
"""

import sys

from .cli import main

sys.exit(main())
