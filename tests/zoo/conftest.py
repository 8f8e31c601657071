"""tests/zoo: the zoo's API, and each entry against its reference implementation.

The hand-written references (``references.py``) and the parity checks (``parity.py``) live beside the tests;
with ``--import-mode=importlib`` a test directory is not on ``sys.path``, so this puts it there.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
