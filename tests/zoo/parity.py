"""What "an entry matches its reference" means, checked the same way for every entry.

1. The parameter count of the built entry equals the reference's (tied weights counted once, as
   ``model.parameters()`` does) and the entry's recorded count.
2. With the reference's weights loaded through ``hndl.zoo.load_reference_state_dict`` (random initialisation,
   BatchNorm statistics and affine parameters randomised so they matter), both in eval mode give the same
   output: ``torch.equal`` where the arithmetic is the same op for op, else ``allclose(atol=1e-5)``.
3. One training step (train mode, dropout off, the same input, loss = a fixed random projection of the
   output) gives the same gradient for every parameter, carried to hndl's names through the entry's key map
   (``hndl.weights.convert_state_dict``), and the same BatchNorm running statistics afterwards.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

import hndl
import hndl.weights
import hndl.zoo


def require(module: str) -> Any:
    """Import ``module`` or skip: the references do not import beside the default sessions' torch 2.13 (PyPI's
    torchvision fails with a RuntimeError there, not an ImportError), so any failure to import skips."""
    try:
        return importlib.import_module(module)
    except Exception as exc:
        pytest.skip(f"{module} does not import here ({type(exc).__name__}); run `nox -s reference`")


def randomise_batchnorm(model: torch.nn.Module, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) * 1.5 + 0.5)
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_count(name: str, reference: torch.nn.Module, **overrides: Any) -> None:
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get(name, **overrides))
    assert parameter_count(model) == parameter_count(reference)
    if not overrides:
        assert parameter_count(model) == hndl.zoo.entry(name).parameters


def check_outputs(
    name: str,
    reference: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    exact: bool,
    output: Callable[[Any], torch.Tensor] = lambda out: out,
    **overrides: Any,
) -> hndl.GraphModule:
    randomise_batchnorm(reference)
    model = hndl.build(hndl.zoo.get(name, **overrides))
    hndl.zoo.load_reference_state_dict(model, name, reference.state_dict())
    model.eval()
    reference.eval()
    with torch.no_grad():
        ours, theirs = model(*inputs), output(reference(*inputs))
    assert ours.shape == theirs.shape
    if exact:
        assert torch.equal(ours, theirs), (ours - theirs).abs().max()
    else:
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    return model


def check_gradients(
    name: str,
    reference: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    output: Callable[[Any], torch.Tensor] = lambda out: out,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int | None = None,
    **overrides: Any,
) -> None:
    """Train-mode gradients (and moved BatchNorm statistics) equal the reference's. ``seed``: reseed torch's
    generator before each side's forward, so random layers (dropout, stochastic depth) draw the same numbers."""
    randomise_batchnorm(reference)
    model = hndl.build(hndl.zoo.get(name, **overrides))
    hndl.zoo.load_reference_state_dict(model, name, reference.state_dict())
    model.train()
    reference.train()
    if seed is not None:
        torch.manual_seed(seed)
    ours = model(*inputs)
    if seed is not None:
        torch.manual_seed(seed)
    theirs = output(reference(*inputs))
    projection = torch.randn(ours.shape, generator=torch.Generator().manual_seed(2))
    (ours * projection).sum().backward()
    (theirs * projection).sum().backward()
    rules = hndl.zoo.entry(name).rules
    own = dict(model.named_parameters(remove_duplicate=False))
    grads = {k: p.grad for k, p in reference.named_parameters(remove_duplicate=False)}
    # strict=False: gradients are parameters only, the model's buffers have none; every parameter must get one.
    expected = hndl.weights.convert_state_dict(model, grads, rules, strict=False)
    assert set(expected) == set(own)
    for key, grad in expected.items():
        # Gradients sum over the batch, positions and classes, so their size varies by orders of magnitude
        # between tensors (GPT-2's tied embedding collects the head's gradient over 50,257 classes): the absolute
        # tolerance scales with the tensor's largest entry.
        scale = max(1.0, float(grad.abs().max()))
        torch.testing.assert_close(
            own[key].grad, grad, atol=atol * scale, rtol=rtol, msg=lambda m, k=key, s=scale: f"{k} (scale {s:g}): {m}"
        )
    # Training-mode BatchNorm moved its running statistics identically.
    buffers = {k: b for k, b in reference.state_dict().items() if "running" in k}
    if buffers:
        moved = hndl.weights.convert_state_dict(model, buffers, rules, strict=False)
        assert set(moved) == {k for k in model.state_dict() if "running" in k}
        state = model.state_dict()
        for key, value in moved.items():
            torch.testing.assert_close(state[key], value, atol=atol, rtol=rtol)


def llama_reference(tf: Any, p: dict[str, Any], attn: str) -> Any:
    """transformers' LLaMA for zoo:llama's parameters ``p`` (its ``.params``), random weights, ``attn`` its
    attention implementation ("eager", "sdpa")."""
    rope = {"rope_type": "default", "rope_theta": p["rope_theta"], **(p["rope_scaling"] or {})}
    config = tf.LlamaConfig(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["num_hidden_layers"],
        num_attention_heads=p["num_attention_heads"],
        num_key_value_heads=p["num_key_value_heads"],
        head_dim=p["head_dim"],
        rope_parameters=rope,
        rms_norm_eps=p["rms_norm_eps"],
        attention_bias=p["attention_bias"],
        mlp_bias=p["mlp_bias"],
        attention_dropout=p["attention_dropout"],
        max_position_embeddings=max(2048, (p["rope_scaling"] or {}).get("original_max_position_embeddings", 0) * 2),
        attn_implementation=attn,
    )
    return tf.LlamaForCausalLM(config)


def mistral_reference(tf: Any, p: dict[str, Any], attn: str) -> Any:
    """transformers' Mistral for zoo:mistral's parameters ``p``, as :func:`llama_reference`."""
    config = tf.MistralConfig(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["num_hidden_layers"],
        num_attention_heads=p["num_attention_heads"],
        num_key_value_heads=p["num_key_value_heads"],
        head_dim=p["head_dim"],
        rope_parameters={"rope_type": "default", "rope_theta": p["rope_theta"]},
        sliding_window=p["sliding_window"],
        rms_norm_eps=p["rms_norm_eps"],
        attention_dropout=p["attention_dropout"],
        attn_implementation=attn,
    )
    return tf.MistralForCausalLM(config)
