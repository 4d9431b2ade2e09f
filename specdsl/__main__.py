"""``python -m specdsl``: the same as the ``specdsl`` command.

``specdsl/__init__.py`` has already taken the working folder off ``sys.path``
(see :mod:`specdsl._cli.working_folder`), before importing anything.
"""

import sys

from ._cli.main import main

sys.exit(main())
