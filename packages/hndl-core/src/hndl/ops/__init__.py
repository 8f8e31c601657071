"""Built-in ops. Importing this package registers them; each module holds one family.

Every op is declared with :func:`hndl.op` exactly as a user op would be, so the docs generator documents
built-in and plugin ops the same way. Builders import torch themselves: the registry, the checker and the
docs must work without it.
"""

from . import (  # noqa: F401  (registration)
    _activation,
    _attention,
    _composite,
    _constant,
    _conv,
    _creation,
    _dense,
    _einsum,
    _elementwise,
    _flip_repeat_stack,
    _gather,
    _index,
    _matmul,
    _norm,
    _positions,
    _recurrent,
    _reduce,
    _resample,
    _shape,
    _tensor,
    _token_pool,
    _tril_triu_roll,
)
