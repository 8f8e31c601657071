"""hndl-func: torch.func for hndl GraphModules.

Installed by the ``hndl-func`` distribution as a portion of the ``hndl`` package.
"""

from __future__ import annotations

__all__: list[str] = []
