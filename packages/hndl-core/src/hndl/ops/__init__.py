"""Built-in ops. Importing this package registers them; each module holds one family.

Every op is declared with :func:`hndl.op` exactly as a user op would be, so the docs generator documents
built-in and plugin ops the same way.
"""

from . import _composite, _dense  # noqa: F401  (registration happens on import)
