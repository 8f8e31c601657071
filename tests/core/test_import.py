"""hndl.from_module: an existing nn.Module imported as a checked graph (hand-written modules; the torchvision and
transformers models are in tests/zoo/test_import_zoo.py, which needs the reference venv)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import import_models as M
import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

import hndl
from hndl.importer import FUNCTIONS, MIN_TORCH, MODULES, PENDING, ImportedGraph, ModeWarning

# The importer refuses torch older than it is tested with (tests/core/test_import_torch_version.py).
pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)

SUPPORT = Path(__file__).resolve().parents[1] / "support"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def imported(net: nn.Module, *args: torch.Tensor, dynamic_shapes: Any = None) -> tuple[ImportedGraph, Any]:
    """The graph of ``net`` and its model built with ``net``'s weights, both in eval mode."""
    net.eval()
    graph = hndl.from_module(net, *args, dynamic_shapes=dynamic_shapes)
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    return graph, model.eval()


def assert_same_outputs(net: nn.Module, model: Any, *args: torch.Tensor) -> None:
    expected, actual = net(*args), model(*args)
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual, strict=True):
            assert torch.equal(e, a)
    else:
        assert torch.equal(expected, actual)


def randomise_batchnorm(net: nn.Module) -> None:
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)


# --- what a model becomes -----------------------------------------------------------------------------------


def test_a_resnet_imports_as_built_in_ops_named_after_its_layers() -> None:
    net = M.SmallResNet()
    randomise_batchnorm(net)
    graph, model = imported(net, torch.randn(2, 3, 16, 16), dynamic_shapes=({0: Dim("B")},))
    assert [(n.name, n.op) for n in graph.nodes.values()] == [
        ("stem", "conv2d"),
        ("layer1_0_conv1", "conv2d"),
        ("layer1_0_bn1", "batchnorm2d"),
        ("layer1_0_relu", "relu"),
        ("layer1_0_conv2", "conv2d"),
        ("layer1_0_bn2", "batchnorm2d"),
        ("layer1_0_add", "add"),
        ("layer1_0_relu_1", "relu"),
        ("layer1_1_conv1", "conv2d"),
        ("layer1_1_bn1", "batchnorm2d"),
        ("layer1_1_relu", "relu"),
        ("layer1_1_conv2", "conv2d"),
        ("layer1_1_bn2", "batchnorm2d"),
        ("layer1_1_add", "add"),
        ("layer1_1_relu_1", "relu"),
        ("pool", "adaptive_avgpool2d"),
        ("flatten", "flatten"),
        ("fc", "linear"),
    ]
    assert str(graph.inputs["x"].contract.shape) == "[B, 3, 16, 16]"
    assert graph.fallbacks == []
    assert graph.notes == []
    for batch in (2, 5):  # B is symbolic: another batch size runs on the same graph
        x = torch.randn(batch, 3, 16, 16)
        assert_same_outputs(net, model, x)


def test_parameters_take_only_what_differs_from_the_ops_defaults() -> None:
    graph, _ = imported(M.SmallResNet(), torch.randn(1, 3, 16, 16))
    assert graph.nodes["layer1_0_conv1"].params == {"out_channels": 8, "kernel_size": 3, "padding": 1, "bias": False}
    assert graph.nodes["layer1_0_bn1"].params == {"num_features": 8}
    assert graph.nodes["stem"].params == {"out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1}


def test_every_weight_is_renamed_and_the_renames_cover_the_state_dict() -> None:
    net = M.SmallResNet()
    graph, model = imported(net, torch.randn(1, 3, 16, 16))
    assert list(graph.renames) == list(net.state_dict())
    assert graph.renames["layer1.0.conv1.weight"] == "nodes.n_layer1_0_conv1.weight"
    assert graph.renames["layer1.1.bn2.num_batches_tracked"] == "nodes.n_layer1_1_bn2.num_batches_tracked"
    assert set(graph.renames.values()) == set(model.state_dict())
    assert graph.rules[0] == ("stem.weight", "nodes.n_stem.weight")


def test_the_imported_spec_round_trips_checks_and_counts_the_parameters() -> None:
    net = M.SmallResNet()
    graph, _ = imported(net, torch.randn(2, 3, 16, 16), dynamic_shapes=({0: Dim("B")},))
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    hndl.check(again)
    table = hndl.summary(again, B=4)
    assert table.trainable_params == sum(p.numel() for p in net.parameters())
    rebuilt = hndl.build(again)
    rebuilt.load_state_dict(graph.convert(net.state_dict()))
    x = torch.randn(4, 3, 16, 16)
    assert torch.equal(rebuilt.eval()(x), net.eval()(x))


def test_a_vision_transformer_imports_parameters_read_as_data_and_self_attention() -> None:
    net = M.TinyViT()
    graph, model = imported(net, torch.randn(2, 3, 16, 16), dynamic_shapes=({0: Dim("B")},))
    ops = {n.name: n.op for n in graph.nodes.values()}
    assert ops["class_token"] == ops["pos_embedding"] == "parameter"
    assert ops["attn"] == "attention"
    assert ops["expand"] == "expand"
    assert ops["select"] == "select"
    assert graph.nodes["expand"].params == {"shape": ["B", -1, -1]}
    assert graph.renames["attn.in_proj_weight"] == "nodes.n_attn.qkv.weight"
    assert graph.renames["class_token"] == "nodes.n_class_token.weight"
    # A layer called twice is two nodes sharing one set of weights.
    assert graph.nodes["norm_1"].tie == {"weight": "norm.weight", "bias": "norm.bias"}
    # nn.MultiheadAttention under no_grad takes a fused inference kernel that differs from its own autograd path
    # by an ulp; the attention op computes exactly the latter.
    assert_same_outputs(net, model, torch.randn(3, 3, 16, 16))


def test_the_shape_vocabulary_imports_op_for_op() -> None:
    net = M.Shapes()
    graph, model = imported(net, torch.randn(2, 5, 12), dynamic_shapes=({0: Dim("B")},))
    ops = [n.op for n in graph.nodes.values()]
    for op in ("reshape", "transpose", "chunk", "matmul", "softmax", "concat", "mean", "select", "slice", "scale"):
        assert op in ops
    assert graph.nodes["reshape"].params == {"shape": [3, 4], "start_dim": 2}
    assert graph.nodes["matmul"].inputs == ["chunk.0", "transpose_1"]
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(7, 5, 12))


def test_tied_weights_stay_tied_and_both_keys_load() -> None:
    net = M.TiedLM()
    graph, model = imported(net, torch.randint(0, 20, (2, 7)), dynamic_shapes=({0: Dim("B"), 1: Dim("T")},))
    assert graph.nodes["lm_head"].tie == {"weight": "wte.weight"}
    assert graph.renames["lm_head.weight"] == graph.renames["wte.weight"] == "nodes.n_wte.weight"
    assert model.nodes.n_lm_head.weight is model.nodes.n_wte.weight
    assert hndl.summary(graph).trainable_params == sum(p.numel() for p in net.parameters())
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randint(0, 20, (3, 4)))


def test_an_lstm_whose_sequence_alone_is_used_becomes_the_lstm_op() -> None:
    net = M.Tagger()
    ids = torch.randint(0, 20, (2, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.export's own note on nn.LSTM's _flat_weights
        graph, model = imported(net, ids, dynamic_shapes=({0: Dim("B")},))
    assert graph.nodes["lstm"].params == {"hidden_size": 16, "num_layers": 2, "bidirectional": True}
    assert graph.renames["lstm.weight_hh_l1_reverse"] == "nodes.n_lstm.weight_hh_l1_reverse"
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randint(0, 20, (3, 5)))


def test_several_inputs_keep_their_names_and_integer_dtypes() -> None:
    net = M.TwoInputs()
    ids, feats = torch.randint(0, 10, (2, 3)), torch.randn(2, 3, 6)
    graph, model = imported(net, ids, feats)
    assert list(graph.inputs) == ["ids", "feats"]
    assert graph.inputs["ids"].contract.dtype == "int64"
    with torch.no_grad():
        assert_same_outputs(net, model, ids, feats)


def test_tensors_the_forward_never_reads_map_to_none_and_are_not_built() -> None:
    net = M.WithUnused()
    graph, model = imported(net, torch.randn(3, 4))
    assert graph.renames["unused.weight"] is None
    assert "nodes.n_unused.weight" not in model.state_dict()
    assert set(graph.convert(net.state_dict())) == set(model.state_dict())


# --- module nodes -------------------------------------------------------------------------------------------


def test_a_layer_without_an_op_becomes_a_module_node_that_rebuilds_it() -> None:
    net = M.Shrunk()
    graph, model = imported(net, torch.randn(3, 4))
    assert graph.nodes["act"].params == {"target": "torch.nn:Hardshrink", "kwargs": {"lambd": 0.25}}
    assert graph.nodes["out"].params == {"target": "torch.nn:Softshrink"}
    assert [(f.node, f.path, f.cls) for f in graph.fallbacks] == [
        ("act", "act", "torch.nn.modules.activation.Hardshrink"),
        ("out", "out", "torch.nn.modules.activation.Softshrink"),
    ]
    assert graph.fallbacks[0].reason == "hndl has no op for aten.hardshrink.default"
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(3, 4) * 10)
    # A spec with module nodes loads only when imports are allowed.
    text = hndl.dumps(graph)
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(text))
    assert err.value.code == "E_PARAM"
    hndl.check(hndl.loads(text, allow_imports=True))


def test_a_layer_that_is_the_identity_in_eval_mode_is_kept_for_training() -> None:
    # Traced in eval mode, DropPath would leave no node and training the graph would never drop a path.
    net = M.Residual()
    graph, model = imported(net, torch.randn(3, 4), dynamic_shapes=({0: Dim("B")},))
    assert graph.nodes["drop"].params == {"target": "import_models:DropPath", "kwargs": {"p": 0.5}}
    assert graph.fallbacks[0].reason == "its training-mode behaviour is not in an eval-mode trace"
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(3, 4))
    net.train()
    model.train()
    torch.manual_seed(0)
    expected = net(torch.ones(64, 4))
    torch.manual_seed(0)
    assert torch.equal(model(torch.ones(64, 4)), expected)


def test_a_layer_that_cannot_be_rebuilt_is_an_error_naming_it_and_the_line() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.UsesOpaque().eval(), torch.randn(3, 4))
    assert err.value.code == "E_IMPORT"
    assert err.value.node == "opaque"
    (problem,) = err.value.problems
    assert problem.location == f"{SUPPORT / 'import_models.py'}:160"
    assert problem.headline().endswith(
        "E_IMPORT Opaque 'opaque': hndl has no op for aten.cumprod.default (waits on a cumprod op) (at `return "
        "torch.cumprod(x, -1) * self.factor`); and no layer around it can be a module node: opaque (Opaque): "
        "constructor "
        "argument(s) scale cannot be read back from the layer"
    )


# --- what cannot be imported ------------------------------------------------------------------------------------


def test_data_dependent_control_flow_names_the_module_and_line() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.Outer().eval(), torch.randn(3, 4))
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.op) == ("E_IMPORT", "inner", "DataDependent")
    assert problem.location == f"{SUPPORT / 'import_models.py'}:182"
    assert "GuardOnDataDependentSymNode" in problem.message
    assert "(at `if y.sum() > 0:`)" in problem.message
    assert problem.hint is not None
    assert problem.hint.startswith("the forward branches on")
    assert err.value.__cause__ is not None  # torch's exception is chained, not lost


def test_an_in_place_write_into_an_input_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.WritesInput().eval(), torch.randn(3, 4))
    assert str(err.value) == (
        f"{SUPPORT / 'import_models.py'}:200: E_IMPORT WritesInput '<root>': aten.mul_.Tensor writes into the "
        "input 'x' in place (at `x.mul_(2)`)\n"
        "    hint:     a graph never changes its inputs: write x = x + 1 instead of x += 1"
    )


def test_reading_a_tensor_an_in_place_write_changed_through_a_view_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.ViewThenWrite().eval(), torch.randn(2, 4))
    problem = err.value.problems[0]
    assert problem.message == (
        "aten.add.Tensor: reads 'linear' after an in-place operation changed it through another view (at `return y + y`)"
    )
    assert problem.hint is None


def test_a_dynamic_dim_the_model_fixes_says_what_torch_suggests() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.FixesBatch(), torch.randn(2, 4), dynamic_shapes=({0: Dim("B")},))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert "Constraints violated (B)" in problem.message
    assert problem.hint is not None
    assert problem.hint.endswith("torch suggests: B = 2")


def test_a_dynamic_dim_needs_an_example_size_of_two_or_more() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.SmallResNet(), torch.randn(1, 3, 16, 16), dynamic_shapes={"x": {0: Dim("B")}})
    assert str(err.value) == (
        "E_IMPORT: input 'x' is traced at size 1 in dim 0, which is marked dynamic (B)\n"
        "    hint:     torch.export fixes dims of size 0 or 1; give an example of size 2 or more in that dim"
    )


def test_from_module_takes_modules_only() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(lambda x: x, torch.randn(2))
    assert str(err.value) == "E_IMPORT: from_module takes a torch.nn.Module, not function"


# --- training mode ---------------------------------------------------------------------------------------------


def test_a_forward_that_computes_otherwise_in_training_mode_is_said() -> None:
    net = M.TrainOnlyScale()
    with pytest.warns(ModeWarning, match=r"TrainOnlyScale \(<root>\) computes something else in training mode"):
        graph, model = imported(net, torch.randn(2, 4))
    assert graph.notes == [
        "TrainOnlyScale (<root>) computes something else in training mode; the graph is its eval mode"
    ]
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(2, 4))


def test_a_forward_that_reads_training_but_computes_the_same_is_not_flagged() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModeWarning)
        graph, _ = imported(M.DropsOnlyIfAsked(), torch.randn(2, 4))
    assert graph.notes == []


def test_the_module_keeps_its_own_mode() -> None:
    net = M.SmallResNet().train()
    net.layer1[0].eval()
    hndl.from_module(net, torch.randn(1, 3, 16, 16))
    assert net.training
    assert not net.layer1[0].training
    assert net.layer1[1].training


# --- weights ---------------------------------------------------------------------------------------------------


def test_convert_names_unknown_and_missing_keys() -> None:
    net = M.WithUnused()
    graph, _ = imported(net, torch.randn(3, 4))
    state = dict(net.state_dict())
    state["body.weigth"] = state.pop("body.weight")
    with pytest.raises(hndl.HndlError) as err:
        graph.convert(state)
    assert str(err.value) == (
        "2 problems in weights for imported graph 'WithUnused':\n"
        "E_PARAMS: key 'body.weigth' is not a tensor of the imported module\n"
        "    hint:     did you mean 'body.weight'?\n"
        "E_PARAMS: key 'body.weight' is missing (the built model's 'nodes.n_body.weight')"
    )
    assert graph.convert(state, strict=False) == {"nodes.n_body.bias": state["body.bias"]}


# --- summary, draw, the command ------------------------------------------------------------------------------


def test_summary_and_draw_take_a_module_with_input_sizes() -> None:
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    table = hndl.summary(net, input_size=("B", 4), B=8)
    assert table.trainable_params == 58
    assert table.macs == 8 * 48
    assert [r.name for r in table.rows] == ["_0", "_1", "_2"]
    assert hndl.summary(net, input_size=(3, 4)).macs == 3 * 48
    assert hndl.summary(net, input_data=torch.randn(5, 4)).inputs == {"input": "[5, 4]"}
    picture = hndl.draw(net, input_size=[(2, 4)], format="mermaid")
    assert isinstance(picture, str)
    assert '"_0: linear 8<br/>[2, 8]<br/>40 params"' in picture  # its settings and parameter count


def test_summary_of_a_module_without_inputs_says_what_to_give() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(nn.Linear(2, 2))
    assert str(err.value) == (
        "E_INPUT: a Linear is imported to be summarised or drawn, which needs example inputs\n"
        "    hint:     pass input_size=(1, 3, 224, 224) (symbols such as 'B' make a dim dynamic) or input_data=x"
    )
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(nn.Linear(2, 2), input_size=[(2, 2.5)])
    assert err.value.code == "E_INPUT"
    assert "is not one input's sizes" in str(err.value)
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(nn.Linear(2, 2), input_size=((2, 2), "float99"))
    assert str(err.value).startswith("E_INPUT: 'float99' is not a torch dtype")


def test_input_sizes_take_a_dtype_and_several_inputs() -> None:
    table = hndl.summary(M.TwoInputs(), input_size=[(("B", 3), "int64"), ("B", 3, 6)])
    assert table.inputs == {"ids": "[B, 3]", "feats": "[B, 3, 6]"}


def run_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "hndl", *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )


def test_hndl_import_writes_the_spec_the_renames_and_the_weights(tmp_path: Path) -> None:
    factory = tmp_path / "factory.py"
    factory.write_text("import import_models\n\ndef make(classes=10):\n    return import_models.SmallResNet(classes)\n")
    result = run_cli(
        tmp_path,
        "import",
        f"{factory}:make",
        "--input",
        "B,3,16,16",
        "--kwargs",
        '{"classes": 3}',
        "-o",
        "net.yaml",
        "--renames",
        "renames.json",
        "--weights",
        "net.safetensors",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "wrote net.yaml",
        "wrote renames.json",
        "wrote net.safetensors",
        "SmallResNet: 18 nodes (0 module nodes), 2,619 parameters",
    ]
    graph = hndl.load(tmp_path / "net.yaml")
    assert graph.nodes["fc"].params == {"out_features": 3}
    model = hndl.load_model(tmp_path / "net.safetensors")
    assert hndl.dumps(model.graph) == (tmp_path / "net.yaml").read_text()


def test_hndl_import_to_standard_output_writes_comments_after_the_spec(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "import", "import_models:Shrunk", "--input", "2,4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "hndl: 1"
    assert "  act: {op: module, in: fc, target: 'torch.nn:Hardshrink', kwargs: {lambd: 0.25}}" in lines
    assert lines[-3:] == [
        "# Shrunk: 3 nodes (2 module nodes), 20 parameters",
        "# module node act (torch.nn.modules.activation.Hardshrink): hndl has no op for aten.hardshrink.default",
        "# module node out (torch.nn.modules.activation.Softshrink): hndl has no op for aten.softshrink.default",
    ]
    hndl.check(hndl.loads(result.stdout, allow_imports=True))


def test_hndl_summary_and_draw_take_a_python_reference_with_input(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "summary", "import_models:SmallResNet", "--input", "B,3,16,16", "--dims", "B=2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "SmallResNet (import_models:SmallResNet)"
    assert "params:      2,682 (trainable 2,682, non-trainable 0)" in result.stdout
    result = run_cli(
        tmp_path, "draw", "import_models:TwoInputs", "--input", "B,3:int64", "--input", "B,3,6", "-o", "m.mmd"
    )
    assert result.returncode == 0, result.stderr
    assert "emb: embedding" in (tmp_path / "m.mmd").read_text()


def test_hndl_import_reports_what_it_cannot_import(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "import", "no_such_module:make", "--input", "2,4")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "no_such_module:make: E_IMPORT: cannot import 'no_such_module:make': ModuleNotFoundError: No module named "
        "'no_such_module'",
        "Found 1 problem in 1 file.",
    ]
    result = run_cli(tmp_path, "import", "import_models:WritesInput", "--input", "2,4")
    assert result.returncode == 1
    assert "E_IMPORT WritesInput '<root>': aten.mul_.Tensor writes into the input 'x' in place" in result.stdout
    result = run_cli(tmp_path, "import", "import_models:Block", "--input", "2,4", "--kwargs", "[1]")
    assert result.returncode == 2
    assert "--kwargs must be a JSON object" in result.stderr


def test_importing_hndl_importer_does_not_import_torch() -> None:
    code = "import sys, hndl, hndl.importer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the tables ------------------------------------------------------------------------------------------------


def test_every_row_names_a_real_aten_operation_or_torch_nn_layer() -> None:
    import importlib

    for target in [*FUNCTIONS, *PENDING]:
        namespace, name, overload = target.split(".")
        assert namespace == "aten", target
        assert hasattr(getattr(torch.ops.aten, name), overload), target
    assert not set(FUNCTIONS) & set(PENDING)
    for path in MODULES:
        module, _, cls = path.rpartition(".")
        if not module.startswith("torch."):
            continue  # torchvision's rows: tests/zoo/test_import_zoo.py, where torchvision imports
        assert isinstance(getattr(importlib.import_module(module), cls), type), path


# --- the rows for the ops of issues 21 and 22 ------------------------------------------------------------------


class Fn(nn.Module):
    """``fn(x, y)`` as a module; ``x`` and ``y`` are ``[B, 2, 3, 4]``."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        return self.fn(x, y)


def _positive(x: torch.Tensor) -> torch.Tensor:
    return x.abs() + 0.5


#: name -> (x, y -> the traced computation, the hndl ops it must become, each op's parameters where they matter).
ROWS: dict[str, tuple[Any, dict[str, dict[str, Any] | None]]] = {
    "relu6": (lambda x, y: F.relu6(x * 4), {"relu6": {}}),
    "relu6 in place": (lambda x, y: nn.ReLU6(inplace=True)(x * 4), {"relu6": {}}),
    "hardtanh": (lambda x, y: F.hardtanh(x, -0.5, 0.25), {"hardtanh": {"min_val": -0.5, "max_val": 0.25}}),
    "hardswish": (lambda x, y: nn.Hardswish(inplace=True)(x * 4), {"hardswish": {}}),
    "hardsigmoid": (lambda x, y: F.hardsigmoid(x * 4), {"hardsigmoid": {}}),
    "leaky_relu": (lambda x, y: F.leaky_relu(x, 0.2), {"leaky_relu": {"negative_slope": 0.2}}),
    "elu": (lambda x, y: F.elu(x, alpha=0.5), {"elu": {"alpha": 0.5}}),
    "selu, celu": (lambda x, y: F.selu(x) + F.celu(x, 2.0), {"selu": {}, "celu": {"alpha": 2.0}}),
    "softplus, mish": (lambda x, y: F.softplus(x, beta=2.0) * F.mish(x), {"softplus": {"beta": 2.0}, "mish": {}}),
    "glu, logsigmoid": (lambda x, y: F.glu(F.logsigmoid(x), dim=1), {"glu": {"dim": 1}, "logsigmoid": {}}),
    "sub": (lambda x, y: x - y, {"sub": {}}),
    "sub a number": (lambda x, y: x - 3, {"sub": {"b": 3}}),
    "rsub": (lambda x, y: 1 - x, {"sub": {"a": 1}}),
    "add a number": (lambda x, y: x + 0.5, {"add": {"b": 0.5}}),
    "div": (lambda x, y: x / _positive(y), {"div": {}}),
    "div by a number": (lambda x, y: x / 3, {"div": {"b": 3}}),
    "pow": (lambda x, y: x**2 + 2**x + _positive(x) ** y, {"pow": None}),
    "rsqrt, sqrt": (lambda x, y: torch.rsqrt(_positive(x)) + _positive(y).sqrt(), {"rsqrt": {}, "sqrt": {}}),
    "exp, log": (lambda x, y: torch.exp(x) * torch.log(_positive(y)), {"exp": {}, "log": {}}),
    "cos, sin": (lambda x, y: torch.cos(x) + torch.sin(y), {"cos": {}, "sin": {}}),
    "neg, abs": (lambda x, y: -x.abs(), {"neg": {}, "abs": {}}),
    "reciprocal, erf": (lambda x, y: torch.erf(x) * torch.reciprocal(_positive(y)), {"reciprocal": {}, "erf": {}}),
    "minimum, maximum": (lambda x, y: torch.minimum(x, y) + torch.maximum(x, y), {"minimum": {}, "maximum": {}}),
    "clamp": (lambda x, y: x.clamp(min=-0.5) + x.clamp(max=1) + x.clamp(-1.0, 1.0), {"clamp": None}),
    "comparisons": (
        lambda x, y: (x > y) | ~(x <= 0.5),
        {"gt": {}, "le": {"b": 0.5}, "logical_or": {}, "logical_not": {}},
    ),
    "masks": (lambda x, y: ((x > y) & (x < 1)) ^ (y >= 0), {"logical_and": {}, "logical_xor": {}, "ge": {"b": 0}}),
    "eq, ne": (lambda x, y: torch.logical_and(x == y, x != 0), {"eq": {}, "ne": {"b": 0}, "logical_and": {}}),
    "where": (lambda x, y: torch.where(x > 0, x, y) + torch.where(x > y, 0.0, y), {"where": None}),
    "cast": (lambda x, y: (x > 0).float() + (x * 10).to(torch.int64).double(), {"cast": None}),
    "cast to an integer": (lambda x, y: (x * 10).to(torch.int64) - 1, {"cast": {"dtype": "int64"}, "sub": {"b": 1}}),
    "tril, triu, roll": (
        lambda x, y: torch.tril(x) + torch.triu(y, 1) + torch.roll(x, 1, 2),
        {"tril": {}, "triu": {"diagonal": 1}, "roll": {"shifts": [1], "dims": [2]}},
    ),
    "sdpa": (lambda x, y: F.scaled_dot_product_attention(x, y, y), {"sdpa": {}}),
    "sdpa causal, scaled": (
        lambda x, y: F.scaled_dot_product_attention(x, y, y, is_causal=True, scale=0.25),
        {"sdpa": {"causal": True, "scale": 0.25}},
    ),
    "sdpa grouped": (
        lambda x, y: F.scaled_dot_product_attention(x, y[:, :1], y[:, 1:], enable_gqa=True),
        {"sdpa": {}},
    ),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_ops_of_issues_21_and_22_import_op_for_op_with_equal_outputs(name: str) -> None:
    fn, expected = ROWS[name]
    net = Fn(fn)
    x, y = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    graph, model = imported(net, x, y, dynamic_shapes=({0: Dim("B")}, {0: Dim("B")}))
    ops = {n.op: n.params for n in graph.nodes.values()}
    assert "module" not in ops
    assert graph.fallbacks == []
    for op_name, params in expected.items():
        assert op_name in ops, (op_name, ops)
        if params is not None:
            assert ops[op_name] == params, op_name
    gen = torch.Generator().manual_seed(2)
    for batch in (2, 3):
        x, y = torch.randn(batch, 2, 3, 4, generator=gen) * 2, torch.randn(batch, 2, 3, 4, generator=gen)
        y[:, :, 0] = x[:, :, 0]  # some equal elements for the comparisons
        expected_out, actual = net(x, y), model(x, y)
        assert expected_out.dtype == actual.dtype
        assert torch.equal(expected_out, actual)


def test_a_row_that_gets_the_dtype_wrong_is_the_importers_mistake(monkeypatch: pytest.MonkeyPatch) -> None:
    from hndl.importer._table import unary

    monkeypatch.setitem(FUNCTIONS, "aten.gt.Scalar", unary("relu"))  # a wrong row: same shape, float not bool
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Fn(lambda x, y: x > 0), torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4))
    (problem,) = err.value.problems
    assert (problem.code, problem.node, problem.op) == ("E_IMPORT", "relu", "relu")
    assert problem.message == "hndl infers another dtype than torch traced (a mistake of the importer)"
    assert (problem.expected, problem.actual) == ("bool", "float")


def test_relu6_and_hardswish_layers_are_their_ops() -> None:
    net = M.Clipped()
    graph, model = imported(net, torch.randn(3, 4))
    assert [(n.name, n.op) for n in graph.nodes.values()] == [("fc", "linear"), ("act", "relu6"), ("out", "hardswish")]
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(3, 4) * 10)


def test_stochastic_depth_is_drop_path_in_both_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchvision's StochasticDepth has this row; the support module's copy of its class takes the same row here,
    # where torchvision does not import (tests/zoo/test_import_zoo.py runs the real one).
    row = MODULES["torchvision.ops.stochastic_depth.StochasticDepth"]
    monkeypatch.setitem(MODULES, "import_models.StochasticDepth", row)
    net = M.DeepResidual()
    graph, model = imported(net, torch.randn(3, 4), dynamic_shapes=({0: Dim("B")},))
    assert [(n.name, n.op, n.params) for n in graph.nodes.values() if n.op == "drop_path"] == [
        ("row", "drop_path", {"p": 0.5}),
        ("batch", "drop_path", {"p": 0.25, "mode": "batch"}),
    ]
    assert graph.fallbacks == []
    assert graph.notes == []
    with torch.no_grad():
        assert_same_outputs(net, model, torch.randn(5, 4))
    net.train()
    model.train()
    for seed in range(3):
        torch.manual_seed(seed)
        expected = net(torch.ones(64, 4))
        torch.manual_seed(seed)
        assert torch.equal(model(torch.ones(64, 4)), expected)


def test_the_import_page_lists_every_row() -> None:
    page = (DOCS / "import.md").read_text()
    for target in FUNCTIONS:
        assert f"`{target}`" in page, target
    for path in MODULES:
        assert path.rsplit(".", 1)[-1] in page, path
