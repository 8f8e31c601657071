"""Small ``torch.nn.Module`` classes for the built-in ops torch has no module for: the public namespace the ops
name their layers by (``hndl.torch.layers.Unary``).

Each holds only its configuration, fixed at construction (the op's parameters, already validated by the
checker), and its ``forward`` runs tensor operations only: no Python state is read or written per call
beyond plain attributes, so the layers trace, compile and vmap like hand-written code.

The classes live in modules of one kind each and are re-exported here:

- :mod:`~hndl.torch._function_layers`: one torch function or operator (``Unary``, ``Binary``, ``Add``, ``Where``,
  ``Cast``, ``MatMul``, ...), and :func:`function`, which resolves a function's dotted name;
- :mod:`~hndl.torch._shape_layers`: rearranging, cutting, joining and padding (``Reshape``, ``Split``, ``Pad``, ...);
- :mod:`~hndl.torch._tensor_layers`: picking and making tensors (``Gather``, ``Einsum``, ``Arange``,
  ``LearnedTensor``, ``FixedTensor``, ``Positions``, ...);
- :mod:`~hndl.torch._nn_variant_layers`: variants of ``torch.nn`` layers (``LinearInOut``, ``LayerNorm2d``,
  ``DropPath``, ``LSTM``, ``GRU``, ...);
- :mod:`~hndl.torch._attention_layers`, :mod:`~hndl.torch._fused_attention_layers`,
  :mod:`~hndl.torch._sdpa_cache_layer`: the attention vocabulary;
- :mod:`~hndl.torch._extra_layers`: layers that reproduce one library's own arithmetic bit for bit.
"""

from __future__ import annotations

from ._attention_layers import SDPA, Attention, AttentionMask
from ._extra_layers import GELUTanhFormula, GlobalResponseNorm, OffsetRMSNorm, PoolAtToken, QuickGELU  # noqa: F401
from ._function_layers import (
    Add,
    Binary,
    Cast,
    MatMul,
    Mean,
    Mul,
    ScalarTensor,
    Scale,
    TensorScalar,
    TypeAs,
    Unary,
    Where,
    function,  # noqa: F401
)
from ._fused_attention_layers import CrossAttention, SelfAttention
from ._nn_variant_layers import GRU, LSTM, AlwaysDropout, DropPath, LayerNorm2d, LinearInOut
from ._position_layers import RelativePositionBias, Rotary
from ._sdpa_cache_layer import CachedSDPA  # noqa: F401
from ._shape_layers import (
    Concat,
    Expand,
    FillRegion,
    Pad,
    Permute,
    Reshape,
    Select,
    Slice,
    Split,
    Stack,
    Transpose,
)
from ._tensor_layers import (  # noqa: F401
    Arange,
    Einsum,
    FixedTensor,
    FullLike,
    Gather,
    Index,
    LearnedTensor,
    NewFull,
    Positions,
    Unbind,
)

__all__ = [
    "Add",
    "AlwaysDropout",
    "Attention",
    "AttentionMask",
    "Binary",
    "Cast",
    "Concat",
    "CrossAttention",
    "DropPath",
    "FixedTensor",
    "GRU",
    "LSTM",
    "Expand",
    "LayerNorm2d",
    "LearnedTensor",
    "LinearInOut",
    "MatMul",
    "Mean",
    "Mul",
    "FillRegion",
    "Pad",
    "Permute",
    "Positions",
    "RelativePositionBias",
    "Reshape",
    "Rotary",
    "SDPA",
    "Scale",
    "ScalarTensor",
    "Select",
    "SelfAttention",
    "Slice",
    "Split",
    "Stack",
    "TensorScalar",
    "Transpose",
    "TypeAs",
    "Unary",
    "Where",
]
