"""Hostile text: generated code takes none unescaped, op names are identifiers, messages escape every field.

Each test is named after what it guards (issue 10).
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import hndl
from hndl._registry import registry

HOSTILE_TEXTS = ["a\nb", "a\rb", "x = 1", "'", '"', "#", "a b", "1a", "", "é\u202e", "\x1b[2J", "self.nodes"]


@pytest.fixture
def echo_op() -> Iterator[str]:
    """An op taking a free-text parameter, whose layer ignores it."""

    @hndl.op("hardening_echo", params=[hndl.Param("text", "str", default="")], replace=True)
    def build(p: hndl.Params, inputs: Any) -> torch.nn.Module:
        return torch.nn.Identity()

    yield "hardening_echo"
    registry.unregister("hardening_echo")


@pytest.mark.parametrize("name", HOSTILE_TEXTS, ids=repr)
def test_op_names_that_are_not_identifiers_are_refused_at_registration(name: str) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.op(name)(lambda p, i: torch.nn.Identity())
    assert info.value.code == "E_NAME"
    assert info.value.problems[0].message == f"op name {name!r} is not valid"
    assert len(str(info.value).split("\n")) == 2  # headline and hint: the name starts no line of its own
    assert "\r" not in str(info.value)
    assert "\x1b" not in str(info.value)
    with pytest.raises(hndl.HndlError):
        registry.register(hndl.OpDef(name=name, build=lambda p, i: torch.nn.Identity()))
    assert name not in registry


def test_a_plugin_op_with_a_bad_name_is_not_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    class EntryPoint:
        name, value = "evil", "evil:ops"

        def load(self) -> hndl.OpDef:
            return hndl.OpDef(name="evil\nprint('pwned')", build=lambda p, i: torch.nn.Identity())

    fresh = type(registry)()
    monkeypatch.setattr("hndl._registry._entry_points", lambda: [EntryPoint()])
    with pytest.warns(RuntimeWarning, match="failed to load"):
        fresh.load_plugins()
    assert fresh.names() == []


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=repr)
def test_node_input_and_graph_names_that_are_not_identifiers_are_refused(text: str) -> None:
    with pytest.raises(hndl.HndlError):
        hndl.Graph(text)
    g = hndl.Graph("g")
    with pytest.raises(hndl.HndlError):
        g.input(text, ("B", 4))
    x = g.input("x", ("B", 4))
    with pytest.raises(hndl.HndlError):
        g.add("relu", x, name=text)
    assert list(g.nodes) == []
    assert list(g.inputs) == ["x"]


def hostile_graph(echo_op: str) -> hndl.Graph:
    """Names that are identifiers but also Python's and the generated code's own names, and free text in
    parameters, through a subgraph."""
    block = hndl.Graph("exec")
    h = block.input("kwargs", ("B", 4))
    block.output(block.add(echo_op, h, name="__import__", text="\nimport os\nos.system('touch pwned')  # '\"\\"))
    g = hndl.Graph("os")
    a = g.input("args", ("B", 4))
    b = g.input("nodes", ("B", 4))
    s = g.add("add", a, b, name="m0")
    r = g.add("graph", s, graph=block, repeat=2, name="sig")
    g.output(g.add(echo_op, r, name="v0", text="'''\"\"\"\r\n#"))
    return g


def test_generated_code_parses_to_exactly_the_expected_statements(echo_op: str) -> None:
    model = hndl.build(hostile_graph(echo_op))
    source = model.code
    tree = ast.parse(source)
    assert [type(node).__name__ for node in tree.body] == ["FunctionDef", "FunctionDef"]
    unchecked = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "unchecked")
    assert [ast.unparse(statement) for statement in unchecked.body] == [
        "v0 = self.nodes.n_m0(a0, a1)",
        "del a0, a1",
        "v1 = self.nodes.n_sig[0].n___import__(v0)",
        "del v0",
        "v2 = self.nodes.n_sig[1].n___import__(v1)",
        "del v1",
        "v3 = self.nodes.n_v0(v2)",
        "del v2",
        "return v3",
    ]
    # The only imports, calls and names of the checked call are the generated ones: no parameter text got in.
    execute = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "execute")
    assert not [n for n in ast.walk(execute) if isinstance(n, (ast.Import, ast.ImportFrom))]
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    # Node keys, and the store attributes and container keys the inlined stores record reads (repr-escaped).
    generated = {"_parameters", "_buffers", "_modules", "nodes", "0", "1"}
    assert strings <= {"n_m0", "n_sig", "n___import__", "n_v0"} | generated
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    comments = [c for c in comments if c != "# a store dict or attribute that is gone: a change"]  # hndl's own
    assert comments == ["# add 'm0'", "# hardening_echo 'sig.0.__import__'", "# hardening_echo 'sig.1.__import__'",
                        "# hardening_echo 'v0'"]  # fmt: skip
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(model(x, y), x + y)
    torch.testing.assert_close(model(args=x, nodes=y), x + y)


def test_an_input_named_self_is_refused_at_declaration() -> None:
    # model(self=x) collides with Module.__call__'s own parameter: a TypeError from torch on every keyword call.
    g = hndl.Graph("g")
    with pytest.raises(hndl.HndlError) as info:
        g.input("self", ("B", 4))
    assert (info.value.code, info.value.node) == ("E_NAME", "self")
    assert g.inputs == {}
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads("hndl: 1\ninputs: {self: {shape: [B, 4]}}\nnodes: {n: {op: relu, in: self}}\noutputs: [n]\n")
    assert (info.value.code, info.value.location) == ("E_NAME", "<string>:2:10")


@pytest.mark.parametrize(
    "name", ["args", "kwargs", "nodes", "sig", "bind", "validate", "fail", "a0", "v0", "m0", "input", "exec"]
)
def test_inputs_named_like_generated_locals_bind_by_keyword(name: str) -> None:
    g = hndl.Graph("g")
    x = g.input(name, ("B", 4))
    g.output(g.add("relu", x))
    model = hndl.build(g)
    t = torch.randn(2, 4)
    torch.testing.assert_close(model(**{name: t}), t.relu())
    torch.testing.assert_close(model(t), t.relu())


def test_str_of_an_error_escapes_control_characters_in_every_field() -> None:
    evil = "\x1b[2J\nother.yaml: OK\r"
    problem = hndl.Problem(
        "E_REF",
        f"message {evil}",
        node=f"node{evil}",
        op=f"op{evil}",
        port=f"port{evil}",
        expected=f"expected{evil}",
        actual=[f"actual{evil}"],
        location=f"file{evil}:1:2",
        bindings={f"B{evil}": f"v{evil}"},
        hint=f"hint{evil}",
    )
    text = str(hndl.HndlError([problem, problem], title=f"graph {evil}"))
    assert "\x1b" not in text
    assert "\r" not in text
    lines = text.split("\n")
    assert len(lines) == 1 + 2 * 5  # title, then per problem: headline, expected, actual, bound, hint
    assert not any(line.startswith("other.yaml") for line in lines)
    assert lines[1].startswith("file\\x1b[2J\\nother.yaml: OK\\r:1:2: E_REF op\\x1b")


def test_unknown_references_and_ops_echo_a_short_excerpt() -> None:
    long = "x" * 5000
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.add(long[:-1] + "\n", x, name="a")
    g.add("relu", long, name="b")
    g.output("b")
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    for problem in info.value.problems:
        assert len(problem.message) < 120, problem.message
    assert len(str(info.value)) < 600


@pytest.mark.parametrize("key", ["self", "op"])
def test_a_parameter_named_like_graph_adds_own_arguments_is_an_hndl_error(key: str) -> None:
    # Graph.add(op, ..., self=1) used to raise TypeError ("got multiple values for argument 'self'").
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.output(g.add("relu", x, name="r", **{key: 1}))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert (info.value.code, info.value.problems[0].message) == ("E_PARAM", f"unknown parameter {key!r}")
