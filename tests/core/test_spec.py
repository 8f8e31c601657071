"""hndl.load and hndl.dumps: the spec format, its locations, every structural error, and round trips."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import hndl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MLP = """\
hndl: 1
name: mlp
inputs:
  x: {shape: [B, 784]}
nodes:
  hidden: {op: linear, in: x, out_features: 512}
  act:    {op: relu, in: hidden}
  out:    {op: linear, in: act, out_features: 10}
outputs: [out]
"""


def spec_error(text: str, **kwargs: object) -> hndl.HndlError:
    """The HndlError that loading ``text`` raises."""
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(text, **kwargs)  # type: ignore[arg-type]
    return info.value


def build_error(text: str) -> hndl.HndlError:
    """The HndlError that building the (structurally valid) spec ``text`` raises."""
    graph = hndl.loads(text)
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(graph)
    return info.value


def where(problem: hndl.Problem) -> str:
    """``line:col`` of a problem's location."""
    assert problem.location is not None
    return ":".join(problem.location.rsplit(":", 2)[-2:])


def summary(error: hndl.HndlError) -> list[tuple[str, str | None, str]]:
    return [(p.code, p.node, where(p)) for p in error.problems]


# --- reading a valid spec --------------------------------------------------------------------------------------


def test_load_builds_the_graph_as_written() -> None:
    g = hndl.loads(MLP)
    assert g.name == "mlp"
    assert list(g.inputs) == ["x"]
    assert g.inputs["x"].contract.shape.to_spec() == ["B", 784]
    assert g.inputs["x"].contract.dtype == "float"
    assert [(n.name, n.op, n.inputs, n.params) for n in g.nodes.values()] == [
        ("hidden", "linear", ["x"], {"out_features": 512}),
        ("act", "relu", ["hidden"], {}),
        ("out", "linear", ["act"], {"out_features": 10}),
    ]
    assert g.outputs == ["out"]
    assert g.source == "<string>"
    assert g.allow_imports is False


def test_every_entry_carries_its_location() -> None:
    g = hndl.loads(MLP)
    assert g.location == "<string>:1:1"
    assert g.inputs["x"].location == "<string>:4:3"
    hidden = g.nodes["hidden"]
    assert hidden.location == "<string>:6:3"
    assert hidden.key_locations == {
        "op": "<string>:6:12",
        "in": "<string>:6:24",
        "out_features": "<string>:6:31",
    }
    assert g.output_locations == ["<string>:9:11"]


def test_loaded_spec_builds_and_runs() -> None:
    import torch

    model = hndl.build(hndl.loads(MLP))
    assert model(torch.randn(3, 784)).shape == (3, 10)
    assert model.nodes["n_hidden"].in_features == 784


def test_load_from_a_path_uses_the_path_in_locations(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(MLP)
    for source in (path, str(path)):
        g = hndl.load(source)
        assert g.source == str(path)
        assert g.nodes["act"].location == f"{path}:7:3"


def test_a_str_is_a_path_when_it_names_a_file_without_a_spec_suffix(tmp_path: Path) -> None:
    path = tmp_path / "model.spec"
    path.write_text(MLP)
    assert hndl.load(str(path)).source == str(path)


def path_error(path: object) -> hndl.HndlError:
    """The HndlError that ``hndl.load(path)`` raises."""
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(path)  # type: ignore[arg-type]
    return info.value


def test_a_missing_yaml_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    error = path_error(missing)
    assert error.code == "E_SPEC"
    assert str(error) == f"E_SPEC: no such file: {missing!r}"


def test_load_of_a_path_without_suffix_says_no_such_file_not_mapping() -> None:
    # Regression: load("models/mlp") used to read the path as YAML text and say "a spec must be a mapping".
    error = path_error("models/mlp")
    assert str(error) == "E_SPEC: no such file: 'models/mlp'"


def test_a_missing_path_suggests_the_file_with_a_spec_suffix(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    error = path_error(str(tmp_path / "mlp"))
    assert error.problems[0].hint == f"did you mean {str(tmp_path / 'mlp.yaml')!r}?"


def test_an_unreadable_path_is_a_clear_error() -> None:
    error = path_error("bad\x00name.yaml")
    assert str(error) == "E_SPEC: cannot read spec file 'bad\\x00name.yaml': embedded null byte"
    error = path_error("x" * 5000 + ".yaml")
    assert error.code == "E_SPEC"
    # The message echoes a short excerpt of the path, not all 5000 characters.
    assert error.problems[0].message.startswith("cannot read spec file 'xxx")
    assert len(error.problems[0].message) < 300


def test_a_directory_is_not_a_spec(tmp_path: Path) -> None:
    assert "is a directory" in str(path_error(tmp_path))


@pytest.mark.parametrize("text", [MLP, "hndl: 1", "{hndl: 1}", '  {"hndl": 1}', "a\rb", MLP.encode()])
def test_load_refuses_spec_text_and_points_to_loads(text: object) -> None:
    error = path_error(text)
    assert error.code == "E_SPEC"
    assert error.problems[0].hint == "hndl.load takes a path; pass spec text to hndl.loads"


def test_load_never_reads_a_file_named_by_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Text that happens to name a file is still text: a service passing untrusted text reads no local file.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hndl: 1").write_text(MLP)
    error = path_error("hndl: 1")
    assert error.problems[0].hint == "hndl.load takes a path; pass spec text to hndl.loads"
    assert spec_error("hndl: 1").problems[0].message.startswith("missing key")


def test_load_and_loads_reject_other_types() -> None:
    error = path_error(42)
    assert str(error) == "E_SPEC: hndl.load takes a path (str or os.PathLike), got int"
    with pytest.raises(hndl.HndlError, match="takes the spec text") as info:
        hndl.loads(Path("model.yaml"))  # type: ignore[arg-type]
    assert info.value.problems[0].hint == "pass a path to hndl.load"


def test_unnamed_spec_takes_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "tiny_net.yaml"
    path.write_text(MLP.replace("name: mlp\n", ""))
    assert hndl.load(path).name == "tiny_net"
    assert hndl.loads(MLP.replace("name: mlp\n", "")).name == "graph"


def test_json_is_the_same_structure(tmp_path: Path) -> None:
    spec = {
        "hndl": 1,
        "name": "mlp",
        "inputs": {"x": {"shape": ["B", 784]}},
        "nodes": {"h": {"op": "linear", "in": "x", "out_features": 16}, "d": {"op": "dropout", "in": "h", "p": 1e-1}},
        "outputs": ["d"],
    }
    path = tmp_path / "mlp.json"
    # Tab indentation is valid JSON (and not valid YAML): it must still load, with right columns.
    path.write_text(json.dumps(spec, indent="\t"))
    g = hndl.load(path)
    assert g.nodes["h"].params == {"out_features": 16}
    assert g.nodes["d"].params == {"p": 0.1}
    assert g.nodes["h"].location == f"{path}:13:3"
    flat = json.dumps(spec)
    column = flat.index('"h"') + 1
    assert hndl.loads(flat).nodes["h"].location == f"<string>:1:{column}"
    hndl.build(g)


def test_plain_scalars_follow_yaml_1_2() -> None:
    g = hndl.loads(
        MLP.replace(
            "act:    {op: relu, in: hidden}",
            "act:    {op: relu, in: hidden, a: yes, b: 1e-5, c: 0x10, d: '12', e: ~, f: .inf, g: 1:30, h: 010}",
        )
    )
    params = g.nodes["act"].params
    assert params == {"a": "yes", "b": 1e-5, "c": 16, "d": "12", "e": None, "f": float("inf"), "g": "1:30", "h": 10}


def test_subgraphs_load_with_their_own_locations() -> None:
    g = hndl.loads((EXAMPLES / "transformer_block.yaml").read_text())
    block = g.graphs["block"]
    assert block.name == "block"
    assert block.source == "<string>"
    assert block.location == "<string>:12:3"
    assert block.inputs["h"].location == "<string>:14:7"
    assert block.nodes["attn"].params == {"num_heads": 4, "causal": True}
    assert block.nodes["attn"].location == "<string>:17:7"
    assert g.nodes["blocks"].params == {"graph": "block", "repeat": 4}


def test_input_dtype_and_device() -> None:
    g = hndl.loads(
        "hndl: 1\ninputs:\n  ids: {shape: [B, T], dtype: int64, device: cpu}\n"
        "nodes:\n  emb: {op: embedding, in: ids, num_embeddings: 100, embedding_dim: 8}\noutputs: [emb]\n"
    )
    contract = g.inputs["ids"].contract
    assert (contract.dtype, contract.device) == ("int64", "cpu")
    assert hndl.check(g).output_types[0].shape[-1] == 8


def test_a_param_may_be_called_name() -> None:
    g = hndl.loads("hndl: 1\ninputs: {x: {shape: [B]}}\nnodes: {a: {op: relu, in: x, name: foo}}\noutputs: [a]\n")
    assert g.nodes["a"].params == {"name": "foo"}


def test_in_and_outputs_accept_a_single_reference_or_a_list() -> None:
    g = hndl.loads("hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {s: {op: add, in: [x, x]}}\noutputs: s\n")
    assert g.nodes["s"].inputs == ["x", "x"]
    assert g.outputs == ["s"]


# --- structural errors (E_SPEC, E_NAME) --------------------------------------------------------------------


def test_yaml_syntax_error_is_located() -> None:
    error = spec_error("hndl: 1\ninputs:\n  x: {shape: [B, 784}\n")
    assert error.code == "E_SPEC"
    assert where(error.problems[0]) == "3:21"
    assert error.problems[0].message.startswith("YAML syntax error: ")
    assert str(error).startswith("1 problem in spec '<string>':\n<string>:3:21: E_SPEC: YAML syntax error")


def test_bad_indentation_is_a_syntax_error() -> None:
    error = spec_error("hndl: 1\ninputs:\n  x: {shape: [B]}\n    nodes: {}\n")
    assert error.code == "E_SPEC"
    assert error.location is not None
    assert error.location.startswith("<string>:4:")


def test_empty_spec() -> None:
    error = spec_error("# nothing here\n")
    assert str(error) == (
        "1 problem in spec '<string>':\n<string>:1:1: E_SPEC: the spec is empty\n"
        "    hint:     start with 'hndl: 1', then inputs, nodes, outputs"
    )


def test_top_level_must_be_a_mapping() -> None:
    error = spec_error("- hndl: 1\n")
    assert error.problems[0].message == (
        "a spec must be a mapping with keys hndl, name, inputs, nodes, outputs; got a list"
    )


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("2", "unsupported format version 2"),
        ("'1'", "the format version must be the integer 1, got string '1'"),
        ("true", "the format version must be the integer 1, got boolean true"),
        ("1.0", "the format version must be the integer 1, got number 1.0"),
    ],
)
def test_format_version(version: str, message: str) -> None:
    error = spec_error(MLP.replace("hndl: 1", f"hndl: {version}"))
    (problem,) = error.problems
    assert (problem.code, problem.message, where(problem), problem.hint) == (
        "E_SPEC",
        message,
        "1:7",
        "this hndl reads 'hndl: 1'",
    )


def test_missing_version() -> None:
    error = spec_error(MLP.replace("hndl: 1\n", ""))
    (problem,) = error.problems
    assert problem.message == "missing key 'hndl' in the spec"
    assert problem.hint == "start the file with 'hndl: 1' (the format version)"


def test_missing_sections_are_all_reported() -> None:
    error = spec_error("hndl: 1\nname: m\n")
    assert [p.message for p in error.problems] == [
        "missing key 'inputs' in the spec",
        "missing key 'nodes' in the spec",
        "missing key 'outputs' in the spec",
    ]


def test_unknown_top_level_key_suggests_the_right_one() -> None:
    error = spec_error(MLP.replace("outputs:", "otputs:"))
    assert [(p.message, p.hint, where(p)) for p in error.problems] == [
        ("unknown key 'otputs' in the spec", "did you mean 'outputs'?", "9:1"),
        ("missing key 'outputs' in the spec", "add outputs: [name of the node that makes the result]", "1:1"),
    ]


def test_unknown_key_without_a_close_match_lists_the_keys() -> None:
    error = spec_error(MLP + "zzz: 1\n")
    assert error.problems[0].hint == "the spec takes: hndl, name, kind, params, inputs, nodes, outputs, graphs"


def test_all_structural_problems_come_together() -> None:
    text = textwrap.dedent(
        """\
        hndl: 1
        name: many
        inputs:
          x: {shape: B}
          y: {shap: [B, 4]}
        nodes:
          a: linear
          b: {in: x}
          c: {op: 3, in: x}
          d: {op: relu, in: {x: 1}}
          9e: {op: relu, in: x}
        outputs: [a, 7]
        """
    )
    error = spec_error(text)
    assert error.problems[0].code == "E_SPEC"
    assert [(p.code, p.node, p.op, where(p), p.message) for p in error.problems] == [
        ("E_SPEC", "x", "input", "4:14", "'shape' must be a list such as [B, 784], got string 'B'"),
        ("E_SPEC", "y", "input", "5:7", "unknown key 'shap'"),
        ("E_SPEC", "y", "input", "5:3", "missing key 'shape'"),
        ("E_SPEC", "a", None, "7:6", "a node must be a mapping such as {op: linear, in: x}, got string 'linear'"),
        ("E_SPEC", "b", None, "8:3", "missing key 'op'"),
        ("E_SPEC", "c", None, "9:11", "'op' must be an op name, got integer 3"),
        (
            "E_SPEC",
            "d",
            "relu",
            "10:21",
            "'in' must be a reference (an input or node name, or node.port) or a list of them, got a mapping",
        ),
        ("E_NAME", None, None, "11:3", "node name '9e' is not valid"),
        (
            "E_SPEC",
            None,
            None,
            "12:14",
            "output 1 of the spec must be a reference (an input or node name, or node.port), got integer 7",
        ),
    ]
    assert str(error).startswith("9 problems in spec '<string>':\n<string>:4:14: E_SPEC input 'x': 'shape' must")
    assert error.problems[1].hint == "did you mean 'shape'?"
    assert error.problems[3].hint == "write a: {op: linear, in: ...}"


def test_inputs_must_be_a_mapping_of_mappings() -> None:
    error = spec_error("hndl: 1\ninputs: [x]\nnodes: {}\noutputs: []\n")
    assert error.problems[0].message == (
        "'inputs' of the spec must be a mapping of input name to {shape: [...]}, got a list"
    )
    error = spec_error("hndl: 1\ninputs: {x: [B, 4]}\nnodes: {}\noutputs: [x]\n")
    assert error.problems[0].message == "an input must be a mapping such as {shape: [B, 784]}, got a list"
    assert error.problems[0].hint == "write x: {shape: [B, 4]}"


def test_bad_shape_entry_and_dtype_point_at_their_keys() -> None:
    error = spec_error(
        "hndl: 1\ninputs:\n  x: {shape: [B, 1.5]}\n  y: {shape: [B], dtype: float17}\nnodes: {}\noutputs: [x]\n"
    )
    assert [(p.code, p.node, where(p)) for p in error.problems] == [
        ("E_SPEC", "x", "3:14"),
        ("E_SPEC", "y", "4:26"),
    ]
    assert error.problems[0].message == "bad shape entry 1.5: a dimension must be an int or a symbol, not float 1.5"
    assert error.problems[1].message.startswith("unknown dtype 'float17'; use one of float, int, any")


def test_each_bad_contract_key_is_reported_at_that_key() -> None:
    # Located by which key was checked, not by reading the message: shape, dtype and device each get their own.
    error = spec_error("hndl: 1\ninputs:\n  x: {shape: [B, 1.5], dtype: float17, device: 3}\nnodes: {}\noutputs: [x]\n")
    assert [(p.code, p.node, p.op, where(p)) for p in error.problems] == [
        ("E_SPEC", "x", "input", "3:14"),
        ("E_SPEC", "x", "input", "3:31"),
        ("E_SPEC", "x", "input", "3:48"),
    ]
    assert error.problems[2].message == "device must be a string such as 'cpu' or 'cuda', not 3"


def test_a_key_written_twice_inside_a_parameter_value_names_the_node() -> None:
    error = spec_error(MLP.replace("act:    {op: relu, in: hidden}", "act:    {op: relu, in: hidden, o: {a: 1, a: 2}}"))
    (problem,) = error.problems
    assert (problem.code, problem.node, problem.message) == ("E_SPEC", "act", "duplicate key 'a' (first on line 7)")


def test_nodes_must_be_a_mapping() -> None:
    error = spec_error("hndl: 1\ninputs: {x: {shape: [B]}}\nnodes: [a, b]\noutputs: [x]\n")
    (problem,) = error.problems
    assert problem.message == "'nodes' of the spec must be a mapping of node name to {op: ..., in: ...}, got a list"
    assert where(problem) == "3:8"


def test_outputs_must_be_references() -> None:
    error = spec_error("hndl: 1\ninputs: {x: {shape: [B]}}\nnodes: {}\noutputs: 3\n")
    assert error.problems[0].message == (
        "'outputs' of the spec must be a list of references, or a mapping of output name to a reference or "
        "{from: ..., shape: [...]}, got integer 3"
    )


def test_a_named_output_must_be_a_reference_or_a_contract() -> None:
    error = spec_error("hndl: 1\ninputs: {x: {shape: [B]}}\nnodes: {}\noutputs: {y: 1}\n")
    (problem,) = error.problems
    assert (problem.code, problem.node, problem.op, where(problem)) == ("E_SPEC", "y", "output", "4:14")
    assert (
        problem.message
        == "an output must be a reference or a mapping such as {from: out, shape: [B, 10]}, got integer 1"
    )


def test_duplicate_keys_are_caught() -> None:
    error = spec_error(MLP.replace("out_features: 10}", "out_features: 10, out_features: 20}"))
    (problem,) = error.problems
    assert (problem.code, problem.node, where(problem), problem.message) == (
        "E_SPEC",
        "out",
        "8:51",
        "duplicate key 'out_features' (first on line 8)",
    )
    assert problem.hint == "each key may appear once in a mapping; YAML would silently keep only the last one"
    error = spec_error(MLP + "hndl: 1\n")
    assert (error.code, where(error.problems[0])) == ("E_SPEC", "10:1")


def test_duplicate_names_are_e_name() -> None:
    text = MLP.replace("  out:    {op: linear", "  act:    {op: linear").replace("[out]", "[act]")
    error = spec_error(text)
    (problem,) = error.problems
    assert (problem.code, problem.node, where(problem), problem.message) == (
        "E_NAME",
        "act",
        "8:3",
        "node name 'act' is used twice (first on line 7)",
    )
    error = spec_error(MLP.replace("  x: {shape: [B, 784]}\n", "  x: {shape: [B, 784]}\n  x: {shape: [B, 784]}\n"))
    assert (error.code, error.node, error.problems[0].op) == ("E_NAME", "x", "input")


def test_input_and_node_share_one_namespace() -> None:
    error = spec_error(MLP.replace("  act:    {op: relu", "  x:    {op: relu"))
    problem = error.problems[0]
    assert (problem.code, problem.node, where(problem)) == ("E_NAME", "x", "7:3")
    assert problem.message == "node name 'x' is already taken by an input"


def test_invalid_names() -> None:
    error = spec_error(MLP.replace("name: mlp", "name: my model").replace("  x: {", "  2x: {"))
    assert [(p.code, p.message) for p in error.problems] == [
        ("E_NAME", "graph name 'my model' is not valid"),
        ("E_NAME", "input name '2x' is not valid"),
    ]
    assert error.problems[0].hint == "use letters, digits and underscores, not starting with a digit"


def test_non_string_keys() -> None:
    error = spec_error(MLP.replace("  act:    {op: relu, in: hidden}", "  act:    {op: relu, in: hidden, 3: 4}"))
    (problem,) = error.problems
    assert (problem.code, problem.message, where(problem)) == (
        "E_SPEC",
        "a node key must be a name, got integer 3",
        "7:34",
    )
    error = spec_error(MLP + "[a]: 1\n")
    assert error.problems[0].message == "a mapping key must be a plain value such as a name, not a list or mapping"


def test_subgraph_structure_errors() -> None:
    text = MLP + textwrap.dedent(
        """\
        graphs:
          blk:
            inputs: {h: {shape: [B, D]}}
            nodez: {}
            outputs: [h]
          other: [1]
          bad-name: {inputs: {}, nodes: {}, outputs: []}
        """
    )
    error = spec_error(text)
    assert [(p.code, where(p), p.message, p.hint) for p in error.problems] == [
        ("E_SPEC", "13:5", "unknown key 'nodez' in graph 'blk'", "did you mean 'nodes'?"),
        ("E_SPEC", "11:3", "missing key 'nodes' in graph 'blk'", "add nodes: {name: {op: ..., in: ...}}"),
        ("E_SPEC", "15:10", "graph 'other' must be a mapping with keys inputs, nodes, outputs; got a list", None),
        (
            "E_NAME",
            "16:3",
            "graph name 'bad-name' is not valid",
            "use letters, digits and underscores, not starting with a digit",
        ),
    ]


def test_graphs_must_be_a_mapping() -> None:
    error = spec_error(MLP + "graphs: [a]\n")
    assert (
        error.problems[0].message == "'graphs' must be a mapping of graph name to {inputs, nodes, outputs}, got a list"
    )


# --- safety ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "!!python/name:os.system",
        "!!python/object/new:subprocess.Popen [['true']]",
    ],
)
def test_python_tags_are_refused(payload: str) -> None:
    error = spec_error(MLP.replace("out_features: 10}", f"out_features: 10, evil: {payload} }}"))
    (problem,) = error.problems
    assert problem.code == "E_SPEC"
    assert problem.message.startswith("tag !!python/")
    assert problem.message.endswith("is not allowed")
    assert problem.hint == "a spec holds plain data only: mappings, lists, strings, numbers, true/false and null"
    assert where(problem) == "8:57"


@pytest.mark.parametrize("value", ["!!binary aGk=", "!!set {a, b}", "!!timestamp 2001-12-14", "!custom 3", "!!int abc"])
def test_other_tags_are_refused(value: str) -> None:
    error = spec_error(MLP.replace("out_features: 10}", f"out_features: 10, extra: {value}}}"))
    assert error.code == "E_SPEC"
    assert where(error.problems[0]) == "8:58"


def test_merge_keys_are_not_special() -> None:
    # `<<` is an ordinary (unknown) key: no YAML 1.1 merge magic happens behind the user's back.
    g = hndl.loads(MLP.replace("  act:    {op: relu, in: hidden}", "  act:    {op: relu, in: hidden, <<: {p: 1}}"))
    assert g.nodes["act"].params == {"<<": {"p": 1}}


def test_aliases_work_and_recursive_ones_are_refused() -> None:
    g = hndl.loads(MLP.replace("  x: {shape: [B, 784]}", "  x: {shape: &s [B, 784]}\n  y: {shape: *s}"))
    assert g.inputs["y"].contract.shape.to_spec() == ["B", 784]
    error = spec_error(MLP.replace("out_features: 10}", "out_features: 10, loop: &a [*a]}"))
    assert error.problems[0].message == "an alias refers to a value that contains it"


def test_alias_bombs_are_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    error = spec_error("\n".join(lines) + "\n")
    assert any("expands to more than" in p.message for p in error.problems)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    error = spec_error("hndl: 1\nx: " + "[" * 200 + "]" * 200 + "\n")
    assert error.code == "E_SPEC"
    error = spec_error("[" * 50_000 + "]" * 50_000)
    assert error.code == "E_SPEC"


def test_bytes_must_be_utf8() -> None:
    assert hndl.loads(MLP.encode()).name == "mlp"
    error = spec_error(b"hndl: 1\nname: \xff\n")  # type: ignore[arg-type]
    assert str(error) == "1 problem in spec '<string>':\nE_SPEC: the spec is not UTF-8 text: byte 0xff at offset 14"


def test_control_characters_are_located() -> None:
    error = spec_error("hndl: 1\nname: a\x00b\n")
    (problem,) = error.problems
    assert (problem.message, where(problem)) == (
        "unreadable spec text: character '\\x00' is not allowed in YAML",
        "2:8",
    )


def test_loading_never_imports(tmp_path: Path) -> None:
    text = "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {m: {op: module, in: x, target: 'hndl_no_such_mod:Cls'}}\noutputs: [m]\n"
    g = hndl.loads(text, allow_imports=True)
    assert "hndl_no_such_mod" not in sys.modules
    assert g.nodes["m"].params == {"target": "hndl_no_such_mod:Cls"}


def test_module_op_is_refused_without_allow_imports() -> None:
    text = MLP.replace(
        "  act:    {op: relu, in: hidden}", "  act:    {op: module, in: hidden, target: 'torch.nn:Tanh'}"
    )
    error = build_error(text)
    (problem,) = error.problems
    assert (problem.code, problem.node, problem.op, where(problem)) == ("E_PARAM", "act", "module", "7:36")
    assert problem.message == "importing 'torch.nn:Tanh' is refused: this spec was loaded without allow_imports"
    assert problem.hint == "pass allow_imports=True to hndl.load (or hndl.load_model) if you trust this file"
    model = hndl.build(hndl.loads(text, allow_imports=True))
    assert type(model.nodes["n_act"]).__name__ == "Tanh"


def test_allow_imports_reaches_subgraphs() -> None:
    g = hndl.load(EXAMPLES / "transformer_block.yaml", allow_imports=True)
    assert g.allow_imports is True
    assert g.graphs["block"].allow_imports is True
    assert hndl.load(EXAMPLES / "transformer_block.yaml").graphs["block"].allow_imports is False


# --- problems the checker finds, at spec locations ------------------------------------------------------------


def test_unknown_op_is_located_with_a_suggestion() -> None:
    error = build_error(MLP.replace("op: relu", "op: reluu"))
    (problem,) = error.problems
    assert str(problem) == "<string>:7:12: E_OP node 'act': unknown op 'reluu'\n    hint:     did you mean 'relu'?"


def test_dangling_reference_is_located() -> None:
    error = build_error(MLP.replace("in: act,", "in: acts,"))
    (problem,) = error.problems
    assert (problem.code, problem.node, where(problem), problem.hint) == ("E_REF", "out", "8:24", "did you mean 'act'?")


def test_dangling_output_is_located() -> None:
    error = build_error(MLP.replace("outputs: [out]", "outputs: [act, ot]"))
    (problem,) = error.problems
    assert (problem.code, where(problem)) == ("E_REF", "9:16")


def test_bad_param_is_located_at_its_key() -> None:
    error = build_error(MLP.replace("out_features: 512", "out_features: -5"))
    (problem,) = error.problems
    assert str(problem) == (
        "<string>:6:31: E_PARAM linear 'hidden': parameter 'out_features' must be >= 1, got -5\n"
        "    hint:     out_features: size of each output sample"
    )


def test_shape_mismatch_is_located() -> None:
    text = MLP.replace("  x: {shape: [B, 784]}", "  x: {shape: [B, 784]}\n  y: {shape: [B, 100]}").replace(
        "  act:    {op: relu, in: hidden}", "  act:    {op: add, in: [hidden, y]}"
    )
    error = build_error(text)
    (problem,) = error.problems
    assert (problem.code, problem.node, problem.port, where(problem)) == ("E_SHAPE", "act", "b", "8:21")


def test_cycle_is_located() -> None:
    error = build_error(MLP.replace("in: hidden}", "in: out}"))
    assert error.code == "E_CYCLE"
    assert error.location is not None
    assert error.location.startswith("<string>:")


def test_checker_problems_inside_subgraphs_point_into_the_graphs_section() -> None:
    text = (EXAMPLES / "transformer_block.yaml").read_text().replace("op: gelu", "op: gelux")
    error = build_error(text)
    (problem,) = error.problems
    assert (problem.code, problem.node, where(problem)) == ("E_OP", "blocks.0.gelu", "21:14")


def test_many_checker_problems_come_together() -> None:
    error = build_error((EXAMPLES / "broken.yaml").read_text())
    assert summary(error) == [
        ("E_OP", "act", "10:12"),
        ("E_SHAPE", "gate", "11:21"),
        ("E_REF", "out", "12:24"),
        ("E_PARAM", "drop", "13:37"),
    ]


# --- dumps ------------------------------------------------------------------------------------------------


def test_dumps_writes_the_documented_format() -> None:
    assert hndl.dumps(hndl.loads(MLP)) == textwrap.dedent(
        """\
        hndl: 1
        name: mlp
        inputs:
          x: {shape: [B, 784]}
        nodes:
          hidden: {op: linear, in: x, out_features: 512}
          act: {op: relu, in: hidden}
          out: {op: linear, in: act, out_features: 10}
        outputs: [out]
        """
    )


def test_dumps_of_a_python_graph_writes_params_as_given() -> None:
    g = hndl.Graph("net")
    x = g.input("x", ("*batch", "D"), dtype="float32")
    ids = g.input("ids", ("B", "T"), dtype="int64", device="cpu")
    a, b = g.add("split", x, name="parts", sections=2)
    s = g.add("add", a, b, name="sum")
    g.add("embedding", ids, name="emb", num_embeddings=10, embedding_dim=4)
    g.add("reshape", s, name="r", shape=(-1,), start_dim=0)
    g.output(s)
    assert hndl.dumps(g) == textwrap.dedent(
        """\
        hndl: 1
        name: net
        inputs:
          x: {shape: ['*batch', D], dtype: float32}
          ids: {shape: [B, T], dtype: int64, device: cpu}
        nodes:
          parts: {op: split, in: x, sections: 2}
          sum: {op: add, in: [parts.0, parts.1]}
          emb: {op: embedding, in: ids, num_embeddings: 10, embedding_dim: 4}
          r: {op: reshape, in: sum, shape: [-1], start_dim: 0}
        outputs: [sum]
        """
    )


def test_dumps_quotes_strings_that_would_read_back_as_something_else() -> None:
    g = hndl.Graph("q")
    x = g.input("x", ("B", "C*H"))
    g.output(
        g.add(
            "relu",
            x,
            name="r",
            a="yes",
            b="1e5",
            c="null",
            d="line\nbreak",
            e="12",
            f="",
            g=float("inf"),
            h=1e-5,
            i={"k": [1, "x y"]},
            j=True,
            k="on",
        )
    )
    text = hndl.dumps(g)
    params = hndl.loads(text).nodes["r"].params
    assert params == g.nodes["r"].params
    assert 'd: "line\\nbreak"' in text
    import yaml

    # YAML 1.1 readers (yaml.safe_load) read the same values.
    assert yaml.safe_load(text)["nodes"]["r"] == {"op": "relu", "in": "x", **g.nodes["r"].params}


def test_dumps_is_deterministic() -> None:
    g = hndl.load(EXAMPLES / "transformer_block.yaml")
    assert hndl.dumps(g) == hndl.dumps(hndl.loads(hndl.dumps(g)))


def test_dumps_refuses_values_that_are_not_plain_data() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B",))
    g.output(g.add("relu", x, name="r", fn=print, ok=(1, 2)))
    with pytest.raises(hndl.HndlError) as info:
        hndl.dumps(g)
    (problem,) = info.value.problems
    assert (problem.code, problem.node, problem.op) == ("E_SPEC", "r", "relu")
    assert problem.message.startswith("parameter 'fn' cannot be written to a spec: builtin_function_or_method")


def _model_signature(model: object) -> tuple[list[tuple[str, str]], dict[str, tuple[int, ...]]]:
    modules = [(name, type(m).__name__) for name, m in model.named_modules()]  # type: ignore[attr-defined]
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    return modules, shapes


def _python_graphs() -> list[hndl.Graph]:
    mlp = hndl.Graph("mlp")
    x = mlp.input("x", ("B", 32))
    mlp.output(mlp.add("linear", mlp.add("relu", mlp.add("linear", x, out_features=16)), out_features=4))

    # A block with two inputs and two outputs, repeated; a split with both ports used.
    block = hndl.Graph("block")
    a = block.input("a", ("B", "D"))
    b = block.input("b", ("B", "D"))
    h = block.add("linear", a, name="mix", out_features=24)
    left, right = block.add("split", h, name="halves", sections=2)
    block.output([block.add("add", left, b, name="l"), block.add("mul", right, a, name="r")])
    top = hndl.Graph("pair")
    u = top.input("u", ("B", 12))
    v = top.input("v", ("B", 12))
    pair = top.add("graph", u, v, name="stack", graph=block, repeat=3)
    top.output([top.add("linear", pair[0], name="head", out_features=3), pair[1]])
    return [mlp, top]


@pytest.mark.parametrize("index", [0, 1])
def test_load_dumps_builds_the_same_model_for_python_graphs(index: int) -> None:
    g = _python_graphs()[index]
    again = hndl.loads(hndl.dumps(g))
    assert _model_signature(hndl.build(again)) == _model_signature(hndl.build(g))


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "broken.yaml"))
def test_load_dumps_builds_the_same_model_for_the_examples(name: str) -> None:
    g = hndl.load(EXAMPLES / name)
    text = hndl.dumps(g)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    assert _model_signature(hndl.build(again)) == _model_signature(hndl.build(g))


def test_round_trip_keeps_the_outputs_of_a_multi_output_graph() -> None:
    import torch

    g = _python_graphs()[1]
    model = hndl.build(hndl.loads(hndl.dumps(g)))
    head, right = model(torch.randn(2, 12), torch.randn(2, 12))
    assert (head.shape, right.shape) == ((2, 3), (2, 12))


def test_quickstart_example_runs() -> None:
    import subprocess

    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "torch.Size([32, 10])" in out
    assert "<string>:9:21: E_SHAPE add 'merge' port 'b'" in out
    assert "code: E_SHAPE | node: merge | at: <string>:9:21" in out
    assert "E_INPUT input 'x'" in out
