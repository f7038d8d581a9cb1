"""``python -m tensoropt_py``: the same as the ``tensoropt-py`` command."""

import sys

from .cli import main

sys.exit(main())
