"""hndl.from_module on torchvision's classification models and transformers' GPT-2, BERT and LLaMA (small
configs, random init, no download). Reference-only: skips unless torchvision/transformers import (`nox -s
reference`).

For every torchvision model: the imported graph checks, round-trips through dumps/loads, counts the model's
parameters, and with the model's weights gives the same eval outputs (``torch.equal``). ``MODELS`` says which
layers each model imports as ``module`` nodes today, and which op each waits on; the strict xfail of
``test_imports_with_built_in_ops_only`` turns into a failure the day a row for that op lands, so the table is
updated with it. ``REQUIRED`` (issue 24's list) must all be built-in only.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
import torch
from parity import randomise_batchnorm, require
from torch.export import Dim

import hndl

#: model -> {layer class kept as a module node: the op it waits on}; empty: built-in ops only.
MODELS: dict[str, dict[str, str]] = {
    "resnet18": {},
    "resnet50": {},
    "resnext50_32x4d": {},
    "wide_resnet50_2": {},
    "mobilenet_v2": {},
    "mobilenet_v3_small": {},
    "efficientnet_b0": {},
    "regnet_y_400mf": {},
    "convnext_tiny": {},
    "densenet121": {},
    "shufflenet_v2_x1_0": {},
    "squeezenet1_0": {},
    "mnasnet0_5": {},
    "vgg11_bn": {},
    "vit_b_16": {},
    "alexnet": {},
    "googlenet": {},
    "inception_v3": {},
    "regnet_x_400mf": {},
    "resnet34": {},
    "squeezenet1_1": {},
    "shufflenet_v2_x0_5": {},
}

#: Constructor arguments: the auxiliary heads run only in training mode (their weights would be unused).
KWARGS: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}


def torchvision_model(name: str) -> torch.nn.Module:
    torchvision = require("torchvision")
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)(**KWARGS.get(name, {})).eval()
    randomise_batchnorm(net)
    return net


def example(name: str, batch: int = 2) -> torch.Tensor:
    size = 299 if name == "inception_v3" else 224
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torchvision_model_imports_and_gives_equal_outputs(name: str) -> None:
    net = torchvision_model(name)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error", hndl.importer.ModeWarning)
        graph = hndl.from_module(net, example(name), dynamic_shapes=({0: Dim("B")},))
    seconds = time.perf_counter() - started
    assert {f.cls.rsplit(".", 1)[-1] for f in graph.fallbacks} == set(MODELS[name])
    text = hndl.dumps(graph)
    again = hndl.loads(text, allow_imports=True)
    assert hndl.dumps(again) == text
    assert hndl.summary(again, B=1).trainable_params == sum(p.numel() for p in net.parameters())
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    x = example(name, batch=3)
    with torch.no_grad():
        assert torch.equal(model(x), net(x))
    print(f"{name}: imported in {seconds:.1f} s, {len(graph.nodes)} nodes, {len(graph.fallbacks)} module nodes")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.xfail(strict=True, reason="waits on " + ", ".join(sorted(set(waits.values())))),
        )
        if waits
        else name
        for name, waits in sorted(MODELS.items())
    ],
)
def test_imports_with_built_in_ops_only(name: str) -> None:
    graph = hndl.from_module(torchvision_model(name), example(name))
    assert graph.fallbacks == []


#: The models issue 24 names: each must import with built-in ops only and give torch.equal outputs.
REQUIRED = (
    "resnet18",
    "resnet50",
    "resnext50_32x4d",
    "wide_resnet50_2",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "regnet_y_400mf",
    "convnext_tiny",
    "densenet121",
    "shufflenet_v2_x1_0",
    "squeezenet1_0",
    "mnasnet0_5",
    "vgg11_bn",
    "vit_b_16",
)


def test_required_list_and_count() -> None:
    # Every named model is held to built-in ops only (an empty MODELS entry, so the two tests above require no
    # module node and equal outputs of it), not only some 15 of them.
    assert [name for name in REQUIRED if MODELS.get(name) != {}] == []
    assert sum(1 for waits in MODELS.values() if not waits) >= 15


def test_stochastic_depth_is_drop_path_with_the_same_random_numbers() -> None:
    torchvision = require("torchvision")
    assert "torchvision.ops.stochastic_depth.StochasticDepth" in hndl.importer.MODULES
    for mode in ("row", "batch"):
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torchvision.ops.StochasticDepth(0.5, mode)).eval()
        graph = hndl.from_module(net, torch.randn(3, 4), dynamic_shapes=({0: Dim("B")},))
        assert [(n.op, n.params) for n in graph.nodes.values()] == [
            ("linear", {"out_features": 4}),
            ("drop_path", {"p": 0.5} | ({"mode": "batch"} if mode == "batch" else {})),
        ]
        model = hndl.build(graph)
        model.load_state_dict(graph.convert(net.state_dict()))
        x = torch.randn(64, 4)
        with torch.no_grad():
            assert torch.equal(model.eval()(x), net(x))
        net.train()
        model.train()
        for seed in range(3):
            torch.manual_seed(seed)
            expected = net(x)
            torch.manual_seed(seed)
            assert torch.equal(model(x), expected)


# --- transformers ---------------------------------------------------------------------------------------------

#: The small transformers models: each imports with built-in ops only and gives torch.equal eval outputs. Their
#: attention masks (and BERT's position and token type ids, LLaMA's rotary cos/sin) depend on no input's values
#: and, at these fixed sizes, on no input's size either: the import computes them once (hndl.importer._fold)
#: and writes them out as buffer nodes.
TRANSFORMERS = ("bert", "gpt2", "llama")


def transformers_model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    transformers = require("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=4,
            vocab_size=100,
            n_positions=64,
            use_cache=False,
            bos_token_id=0,
            eos_token_id=0,
        )
        net = transformers.GPT2LMHeadModel(config)
    elif name == "bert":
        config = transformers.BertConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            vocab_size=100,
            max_position_embeddings=64,
        )
        net = transformers.BertModel(config)
    else:
        config = transformers.LlamaConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=100,
            use_cache=False,
        )
        net = transformers.LlamaForCausalLM(config)
    return net.eval(), torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_transformers_model_imports_with_equal_outputs(name: str) -> None:
    net, ids = transformers_model(name)
    with warnings.catch_warnings():
        # Their forwards read self.training (dropout); the graph is eval mode, and says so in its notes.
        warnings.simplefilter("ignore", hndl.importer.ModeWarning)
        graph = hndl.from_module(net, ids)
    assert graph.fallbacks == []
    assert not {n.op for n in graph.nodes.values()} & {"module"}
    text = hndl.dumps(graph)
    again = hndl.loads(text)  # no allow_imports: nothing in it runs code
    assert hndl.dumps(again) == text
    assert hndl.summary(again).trainable_params == sum(p.numel() for p in net.parameters())
    model = hndl.build(again)  # from the spec alone: the folded masks and ids are in it
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    with torch.no_grad():
        out = net(ids)
        got = model(ids)
    if name == "bert":
        assert torch.equal(got[0], out.last_hidden_state)
        assert torch.equal(got[1], out.pooler_output)
    else:
        assert torch.equal(got, out.logits)
    print(f"{name}: {len(graph.nodes)} nodes, {sum(p.numel() for p in net.parameters())} parameters")


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_transformers_model_imports_with_a_dynamic_batch(name: str) -> None:
    # With the batch dynamic the masks depend on B, so they do not fold: GPT-2's and LLaMA's compute on the
    # position ids expanded to [B, T] (diff, cumsum) and index by arange(B), as BERT's does. Those operations
    # import as ops that run on every call (issue 37; this test said what they waited on before), so the graph
    # keeps a symbolic batch and equals the module at batch sizes it was not traced at.
    net, ids = transformers_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hndl.importer.ModeWarning)
        graph = hndl.from_module(net, ids, dynamic_shapes=({0: Dim("B")},))
    assert not {n.op for n in graph.nodes.values()} & {"module"}
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    for batch in (3, 5):
        more = torch.randint(0, 100, (batch, ids.shape[1]), generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            out, got = net(more), model(more)
        if name == "bert":
            assert torch.equal(got[0], out.last_hidden_state)
            assert torch.equal(got[1], out.pooler_output)
        else:
            assert torch.equal(got, out.logits)
