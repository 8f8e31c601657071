"""The decoder examples (``examples/qwen2.yaml``, ``gemma.yaml``, ``phi.yaml``) against transformers.

Each spec is built from a small configuration, transformers' model from the same configuration with random weights
(nothing is downloaded), its ``state_dict`` loaded into hndl's model through ``hndl.load_state_dict`` rules from
transformers' keys (``model.layers.{i}.self_attn.q_proj.weight``, ...), and the logits compared with
``torch.equal`` against transformers' "sdpa" attention (hndl runs the same ``scaled_dot_product_attention`` with
the same masks): at two (batch, length) sizes, and with a right-padded attention mask at the real positions. The
parameter count at a published size (Qwen2-0.5B, Gemma-2B, Phi-2) is ``hndl.summary`` of the spec on the meta
device, equal to transformers' model built on the meta device. transformers does not import beside the default
sessions' torch, so these run in ``nox -s reference`` and skip elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import parameter_count, require  # noqa: E402

import hndl  # noqa: E402
from hndl.cli import main  # noqa: E402
from hndl.weights import Rule, rule  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: transformers' initialiser's standard deviation: ten times its default (0.02), so activations are large enough
#: that a near miss shows (torch's tanh GELU and gelu_new's formula differ by ~1e-7 at most; both are checked).
INIT = 0.2


def _llama_style_rules(*, attention_out: str = "o_proj") -> tuple[Rule, ...]:
    """transformers' ``*ForCausalLM`` keys to the examples' (whose module paths are transformers' module names):
    ``attention_out`` is transformers' name for the output
    projection (Phi's ``dense``), which is hndl's ``o_proj``."""
    # The examples' module paths are transformers' (SPEC 6.7): every key is its own but Phi's output projection.
    ref = "model.layers.{i}.self_attn"
    return (
        rule(f"{ref}.{attention_out}.{{t}}", f"{ref}.o_proj.{{t}}"),
        rule("model.{path*}", "model.{path*}"),
        rule("lm_head.{t}", "lm_head.{t}"),
    )


#: The config fields every decoder example names its parameters after, passed to transformers as they are.
_SHARED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "attention_dropout",
)


def _config(config_class: Any, p: dict[str, Any], own: tuple[str, ...] = (), **fixed: Any) -> Any:
    """``config_class`` for the spec's parameters ``p``: the shared fields, the model's ``own`` fields, rope from
    ``rope_theta`` (and ``partial_rotary_factor`` where the spec has one), and ``fixed`` settings."""
    rope = {"rope_type": "default", "rope_theta": p["rope_theta"]}
    if "partial_rotary_factor" in p:
        rope["partial_rotary_factor"] = p["partial_rotary_factor"]
    fields = {name: p[name] for name in (*_SHARED, *own)}
    return config_class(**fields, rope_parameters=rope, initializer_range=INIT, attn_implementation="sdpa", **fixed)


def _qwen2(tf: Any, p: dict[str, Any]) -> Any:
    return tf.Qwen2ForCausalLM(_config(tf.Qwen2Config, p, ("rms_norm_eps",), tie_word_embeddings=True))


def _gemma(tf: Any, p: dict[str, Any]) -> Any:
    config = _config(
        tf.GemmaConfig,
        p,
        ("head_dim", "rms_norm_eps", "attention_bias"),
        hidden_act="gelu_pytorch_tanh",
        tie_word_embeddings=True,
    )
    return tf.GemmaForCausalLM(config)


def _phi(tf: Any, p: dict[str, Any]) -> Any:
    config = _config(
        tf.PhiConfig,
        p,
        ("layer_norm_eps", "resid_pdrop", "embd_pdrop"),
        hidden_act="gelu_new",
        tie_word_embeddings=False,
    )
    return tf.PhiForCausalLM(config)


@dataclass(frozen=True)
class Case:
    """One example and its transformers reference: the reference for the spec's parameters, the key map, the
    published size (its transformers config fields, which the spec's parameters share) and its count."""

    reference: Callable[[Any, dict[str, Any]], Any]
    rules: tuple[Rule, ...]
    published: dict[str, Any]
    count: int


CASES = {
    "qwen2": Case(
        _qwen2,
        _llama_style_rules(),
        # Qwen2-0.5B
        {
            "vocab_size": 151936,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
        },
        494_032_768,
    ),
    "gemma": Case(
        _gemma,
        _llama_style_rules(),
        # Gemma-2B
        {
            "vocab_size": 256000,
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
        },
        2_506_172_416,
    ),
    "phi": Case(
        _phi,
        _llama_style_rules(attention_out="dense"),
        # Phi-2
        {
            "vocab_size": 51200,
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "partial_rotary_factor": 0.4,
            "rope_theta": 10000.0,
            "layer_norm_eps": 1e-5,
        },
        2_779_683_840,
    ),
}
NAMES = list(CASES)


def _params(graph: hndl.Graph) -> dict[str, Any]:
    """The spec's top-level parameters as written (a computed ``head_dim`` stays its formula: transformers computes
    its own from the same fields, and only Gemma's, a plain value, is passed on)."""
    return dict(graph.params)


def _pair(name: str, **overrides: Any) -> tuple[hndl.GraphModule, Any]:
    """The example built and transformers' model from the same configuration, its weights loaded into ours."""
    tf = require("transformers")
    graph = hndl.load(EXAMPLES / f"{name}.yaml", params=overrides or None)
    torch.manual_seed(0)
    reference = CASES[name].reference(tf, _params(graph)).eval()
    _randomise_norms(reference)
    model = hndl.build(graph).eval()
    hndl.load_state_dict(model, reference.state_dict(), CASES[name].rules)
    return model, reference


def _randomise_norms(reference: Any) -> None:
    """Norm weights start at 1 (0 for Gemma's offset ones) and biases at 0: random values make them matter."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for key, tensor in reference.named_parameters():
            if "norm" in key or key.endswith("bias"):
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=gen) + (1.0 if "layernorm" in key else 0.0))


def _inputs(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 256, (batch, length), generator=gen),
        "attention_mask": torch.ones(batch, length, dtype=torch.bool),
    }


def _logits(reference: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return reference(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"].long()).logits


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("batch", "length"), [(1, 5), (3, 17)])
def test_example_logits_equal_transformers(name: str, batch: int, length: int) -> None:
    model, reference = _pair(name)
    inputs = _inputs(batch, length, seed=batch * 100 + length)
    with torch.no_grad():
        ours, theirs = model(**inputs), _logits(reference, inputs)
    assert ours.shape == theirs.shape == (batch, length, _params(model.graph)["vocab_size"])
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


@pytest.mark.parametrize("name", NAMES)
def test_example_logits_equal_transformers_with_a_padded_batch(name: str) -> None:
    model, reference = _pair(name)
    inputs = _inputs(3, 9, seed=5)
    lengths = torch.tensor([9, 6, 2])
    inputs["attention_mask"] = torch.arange(9)[None, :] < lengths[:, None]
    with torch.no_grad():
        ours, theirs = model(**inputs), _logits(reference, inputs)
    real = inputs["attention_mask"]
    assert torch.equal(ours[real], theirs[real]), (ours[real] - theirs[real]).abs().max()


@pytest.mark.parametrize("name", NAMES)
def test_example_counts_equal_transformers_at_a_published_size(name: str) -> None:
    tf = require("transformers")
    case = CASES[name]
    graph = hndl.load(EXAMPLES / f"{name}.yaml", params=case.published)
    ours = hndl.summary(graph).total_params
    with torch.device("meta"):
        theirs = parameter_count(case.reference(tf, _params(graph)))
    assert ours == theirs == case.count


@pytest.mark.parametrize("name", NAMES)
def test_example_checks_with_no_warnings(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(EXAMPLES / f"{name}.yaml")])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    assert hndl.check(hndl.load(EXAMPLES / f"{name}.yaml")).warnings == []
    assert captured.out.startswith(f"{EXAMPLES / f'{name}.yaml'}: OK (")
    assert captured.out.count("\n") == 1  # no warning lines


def test_gemma_embedding_scale_is_rounded_to_the_hidden_dtype_as_transformers_rounds_it() -> None:
    # sqrt(72) is not a float32 number: transformers multiplies by hidden_size ** 0.5 cast to float32, `scale`
    # by the float64 factor in float32 arithmetic; the two agree bit for bit (at 64 the factor, 8, is exact).
    model, reference = _pair("gemma", hidden_size=72, intermediate_size=144, head_dim=18)
    inputs = _inputs(2, 11, seed=6)
    with torch.no_grad():
        ours, theirs = model(**inputs), _logits(reference, inputs)
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()
