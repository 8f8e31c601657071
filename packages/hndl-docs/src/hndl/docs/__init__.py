"""hndl-docs: the reference-docs generator (``python -m hndl.docs``).

Installed by the ``hndl-docs`` distribution as a portion of the ``hndl`` package.
"""

from __future__ import annotations

__all__: list[str] = []
