"""``examples/gpt_neox.yaml`` and ``examples/deit.yaml`` against the models they are written from, with the same
weights: transformers' ``GPTNeoXForCausalLM`` and timm's ``deit_tiny_distilled_patch16_224``.

Each reference is built from a configuration with random weights (nothing is downloaded; norms and biases moved
off their initial 1 and 0 so a misplaced one shows), its ``state_dict`` loaded into the spec's model with
:func:`hndl.load_state_dict` and rules from the reference's keys (GPT-NeoX's fused, head-by-head
``query_key_value`` with the ``per_head`` layout), and the outputs compared with ``torch.equal`` at two sizes.
The parameter counts are compared at a published size (Pythia-160M; deit_tiny_distilled), ``hndl check`` gives no
warning, and ``hndl.generate`` on the GPT-NeoX example (its cached variant derived from the hand-written graph)
gives transformers' greedy tokens. Run in the reference session; each test skips where its library does not
import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import parameter_count, require  # noqa: E402

import hndl  # noqa: E402
from hndl.cli import main  # noqa: E402
from hndl.weights import Rule, rule  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NEOX = EXAMPLES / "gpt_neox.yaml"
DEIT = EXAMPLES / "deit.yaml"
PAD, NEW = 0, 12


def _checks_clean(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(path)])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    assert captured.out.startswith(f"{path}: OK (")
    assert captured.out.count("\n") == 1  # no warning lines
    assert hndl.check(hndl.load(path)).warnings == []


def _no_module_node(path: Path) -> None:
    graph = hndl.load(path)
    ops = {node.op for g in (graph, *graph.graphs.values()) for node in g.nodes.values()}
    assert "module" not in ops


# --- GPT-NeoX: transformers' GPTNeoXForCausalLM -----------------------------------------------------------------


def neox_rules(heads: int) -> list[Rule]:
    """transformers' keys to the example's (whose module paths are transformers'): the fused projection, head by
    head ``[H, 3, head_dim, hidden]``, into q/k/v; ``dense`` into ``o_proj``; every other key as it is."""
    attention = "gpt_neox.layers.{i}.attention"
    parts = (f"per_head({i}, 3, heads={heads})" for i in range(3))
    return [
        rule(
            f"{attention}.query_key_value.{{t}}",
            *((f"{attention}.{p}_proj.{{t}}", layout) for p, layout in zip("qkv", parts, strict=True)),
        ),
        rule(f"{attention}.dense.{{t}}", f"{attention}.o_proj.{{t}}"),
        rule("gpt_neox.{path*}", "gpt_neox.{path*}"),
        rule("lm_head.{t}", "lm_head.{t}"),
    ]


#: Pythia-160M's GPTNeoXConfig fields, which the spec's parameters are named after.
PYTHIA_160M = dict(
    vocab_size=50304,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    rotary_pct=0.25,
    rotary_emb_base=10000.0,
    layer_norm_eps=1e-5,
)


def _neox_config(tf: Any, p: dict[str, Any], **fixed: Any) -> Any:
    fields = {name: p[name] for name in PYTHIA_160M}
    return tf.GPTNeoXConfig(
        **fields,
        attention_bias=p["attention_bias"],
        attention_dropout=p["attention_dropout"],
        hidden_dropout=p["hidden_dropout"],
        use_parallel_residual=p["use_parallel_residual"],
        tie_word_embeddings=False,
        **fixed,
    )


def _neox_pair(init: float = 0.2, **overrides: Any) -> tuple[hndl.GraphModule, Any]:
    tf = require("transformers")
    graph = hndl.load(NEOX, params=overrides or None)
    p = dict(graph.params)
    torch.manual_seed(0)
    config = _neox_config(
        tf, p, initializer_range=init, attn_implementation="sdpa", pad_token_id=PAD, bos_token_id=1, eos_token_id=2
    )
    reference = tf.GPTNeoXForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for key, tensor in reference.named_parameters():
            if "norm" in key or key.endswith("bias"):
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=gen) + (1.0 if "norm.weight" in key else 0.0))
    model = hndl.build(graph).eval()
    hndl.load_state_dict(model, reference.state_dict(), neox_rules(p["num_attention_heads"]))
    return model, reference


def _ids(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 256, (batch, length), generator=gen),
        "attention_mask": torch.ones(batch, length, dtype=torch.bool),
    }


def _neox_logits(reference: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return reference(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"].long()).logits


@pytest.mark.parametrize(
    ("overrides", "batch", "length"),
    [
        ({}, 1, 5),
        ({}, 3, 17),
        ({"hidden_size": 96, "num_attention_heads": 3, "rotary_pct": 0.5}, 2, 11),
        ({"use_parallel_residual": False}, 1, 5),
        ({"use_parallel_residual": False, "hidden_size": 96, "num_attention_heads": 3}, 3, 17),
    ],
    ids=["default-1x5", "default-3x17", "wider-2x11", "sequential-1x5", "sequential-wider-3x17"],
)
def test_gpt_neox_example_logits_equal_transformers(overrides: dict[str, Any], batch: int, length: int) -> None:
    model, reference = _neox_pair(**overrides)
    inputs = _ids(batch, length, seed=batch * 100 + length)
    with torch.no_grad():
        ours, theirs = model(**inputs), _neox_logits(reference, inputs)
    assert ours.shape == theirs.shape == (batch, length, 256)
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


def test_gpt_neox_example_logits_equal_transformers_with_a_padded_batch() -> None:
    model, reference = _neox_pair()
    inputs = _ids(3, 9, seed=5)
    inputs["attention_mask"] = torch.arange(9)[None, :] < torch.tensor([9, 6, 2])[:, None]
    with torch.no_grad():
        ours, theirs = model(**inputs), _neox_logits(reference, inputs)
    real = inputs["attention_mask"]
    assert torch.equal(ours[real], theirs[real]), (ours[real] - theirs[real]).abs().max()


def test_gpt_neox_example_switches_the_residual_with_use_parallel_residual() -> None:
    # The same weights give other logits in sequence than in parallel (so the `when: "$not ..."` switch takes
    # effect), and the sequential variant reads the MLP's LayerNorm of attn + x, as transformers' layer does.
    parallel, _ = _neox_pair()
    sequential, reference = _neox_pair(use_parallel_residual=False)
    assert not reference.config.use_parallel_residual
    inputs = _ids(2, 7, seed=3)
    with torch.no_grad():
        ours, theirs = sequential(**inputs), _neox_logits(reference, inputs)
        other = parallel(**inputs)
    assert torch.equal(ours, theirs)
    assert not torch.allclose(ours, other)
    written = hndl.load(NEOX, params={"use_parallel_residual": False}).graphs["layer"].nodes
    assert written["attn_residual"].when == "$not use_parallel_residual"


def test_gpt_neox_example_rotates_the_fraction_of_each_head_that_rotary_pct_says() -> None:
    # rotary_pct is computed into the attention's rope dims as transformers computes it: int(head_dim * pct).
    tf = require("transformers")
    params = {"hidden_size": 96, "num_attention_heads": 3, "rotary_pct": 0.375}
    graph = hndl.load(NEOX, params=params)
    reference = tf.GPTNeoXForCausalLM(_neox_config(tf, dict(graph.params)))
    rotary = hndl.build(graph).layer("layers.0.attention").rotary
    assert rotary.dims == reference.gpt_neox.layers[0].attention.rotary_ndims == 12


def test_gpt_neox_example_has_pythia_160ms_parameter_count() -> None:
    tf = require("transformers")
    graph = hndl.load(NEOX, params=PYTHIA_160M)
    ours = hndl.summary(graph).total_params
    with torch.device("meta"):
        theirs = parameter_count(tf.GPTNeoXForCausalLM(_neox_config(tf, dict(graph.params))))
    assert ours == theirs == 162_322_944


def test_gpt_neox_example_checks_with_no_warnings_and_no_module_node(capsys: pytest.CaptureFixture[str]) -> None:
    _checks_clean(NEOX, capsys)
    _no_module_node(NEOX)


def _reference_greedy(reference: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return reference.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=PAD,
        )


@pytest.mark.parametrize(
    ("kv_cache", "parallel", "init"),
    [("static", True, 0.02), ("grow", True, 0.02), ("static", False, 0.1)],
    ids=["static", "grow", "sequential"],
)
def test_gpt_neox_example_generates_transformers_greedy_tokens(kv_cache: str, parallel: bool, init: float) -> None:
    # Initialiser scales at which greedy decoding does not settle on one token at once: transformers' default
    # in parallel; the sequential residual, at that scale, repeats one token from the first step.
    model, reference = _neox_pair(init=init, use_parallel_residual=parallel)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 256, (3, 8), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, :5] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    ours = hndl.generate(model, ids, NEW, attention_mask=mask, pad_token_id=PAD, kv_cache=kv_cache)
    theirs = _reference_greedy(reference, ids, mask)
    assert torch.equal(ours, theirs)
    assert len(set(ours[0, 8:].tolist())) > 1  # a continuation that varies, so equality says something
    one = ids[:1]
    assert torch.equal(hndl.generate(model, one, NEW, kv_cache=kv_cache), _reference_greedy(reference, one, mask[:1]))


# --- DeiT: timm's deit_tiny_distilled_patch16_224 ---------------------------------------------------------------


#: timm's parameter keys that are no layer's (``cls_token``), to the example's parameter nodes; every other key
#: is the example's module path.
DEIT_RULES = [
    rule("{token}_token", "nodes.n_{token}_token.weight"),
    rule("pos_embed", "nodes.n_pos_embed.weight"),
    rule("{path*}", "{path*}"),
]
#: A DeiT smaller than tiny (timm's keyword arguments are the spec's parameter names).
DEIT_SMALLER = dict(embed_dim=48, depth=2, num_heads=4, num_classes=10)


def _deit_pair(**overrides: Any) -> tuple[hndl.GraphModule, Any]:
    timm = require("timm")
    torch.manual_seed(0)
    reference = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, **overrides).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every parameter moved, so a zero token or a LayerNorm at ones still tells apart
        for p in reference.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    model = hndl.build(hndl.load(DEIT, params=overrides or None)).eval()
    hndl.load_state_dict(model, reference.state_dict(), DEIT_RULES)
    return model, reference


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("overrides", [{}, DEIT_SMALLER], ids=["tiny", "smaller"])
def test_deit_example_equals_timms_distilled_deit(overrides: dict[str, Any], batch: int) -> None:
    model, reference = _deit_pair(**overrides)
    image = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        ours, theirs = model(image), reference(image)
    assert ours.shape == theirs.shape == (batch, overrides.get("num_classes", 1000))
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


def test_deit_example_averages_the_class_and_distillation_heads() -> None:
    # Each head alone differs from the output: both tokens and both heads are wired, and averaged.
    model, reference = _deit_pair(**DEIT_SMALLER)
    image = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        features = reference.forward_features(image)
        cls, dist = reference.head(features[:, 0]), reference.head_dist(features[:, 1])
        ours = model(image)
    assert torch.equal(ours, (cls + dist) / 2)
    assert not torch.allclose(ours, cls)
    assert not torch.allclose(ours, dist)


def test_deit_example_has_deit_tiny_distilleds_parameter_count() -> None:
    timm = require("timm")
    with torch.device("meta"):
        reference = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False)
    ours = hndl.summary(hndl.load(DEIT)).total_params
    assert ours == parameter_count(reference) == 5_910_800


def test_deit_example_refuses_another_resolution_than_its_position_table() -> None:
    model = hndl.build(hndl.load(DEIT, params=DEIT_SMALLER))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 192, 192))
    assert info.value.problems[0].code == "E_INPUT"
    assert "224" in str(info.value)
    assert "192" in str(info.value)


def test_deit_example_checks_with_no_warnings_and_no_module_node(capsys: pytest.CaptureFixture[str]) -> None:
    _checks_clean(DEIT, capsys)
    _no_module_node(DEIT)
