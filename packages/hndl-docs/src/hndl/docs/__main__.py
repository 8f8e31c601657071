"""``python -m hndl.docs [--check]``: regenerate the reference docs, or check that they are current."""

import sys

from . import main

sys.exit(main())
