"""``python -m hndl``: the same as the ``hndl`` command."""

import sys

from .cli import main

sys.exit(main())
