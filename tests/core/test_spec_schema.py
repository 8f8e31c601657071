"""hndl.spec_schema agrees with hndl.loads (structure) and with Param.validate (parameter values).

The JSON Schema is published for editors; the loader and the checker are what hndl runs. Both come from the
same declarations, and these tests hold them to the same verdict: over generated and mutated documents,
``hndl.loads`` accepts a document exactly when the schema does, and every parameter type accepts a value
exactly when its schema fragment does. What a schema cannot see (SPEC.md §4.9) is kept out of the generated
documents: references and shape expressions are the checker's, keys written twice do not survive parsing.

The validator is draft 2020-12 with two strictnesses a JSON validator written in Python lacks: an integer is a
Python ``int`` (JSON Schema counts ``2.0`` as one; hndl reads numbers as written), and ``$`` in a pattern
means the end of the text, as in ECMA 262 (Python's ``re`` also matches it before a final line break).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hndl

jsonschema = pytest.importorskip("jsonschema")
from jsonschema import Draft202012Validator, ValidationError, validators  # noqa: E402


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not re.search(re.sub(r"\$$", r"\\Z", pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_STRICT_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many(
    {
        "integer": lambda _, x: isinstance(x, int) and not isinstance(x, bool),
        "number": lambda _, x: isinstance(x, (int, float)) and not isinstance(x, bool),
    }
)
StrictValidator = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern}, type_checker=_STRICT_TYPES)

SCHEMA = hndl.spec_schema()
VALIDATOR = StrictValidator(SCHEMA)


def structural_schema() -> dict[str, Any]:
    """The spec schema without its op-specific parts: which ops exist and what they take is hndl.check's."""
    schema = hndl.spec_schema()
    for kind in ("node", "param_node"):
        node = schema["$defs"][kind]
        node["properties"] = {**node["properties"], "op": {"type": "string"}}
        del node["allOf"]
    return schema


STRUCTURE = StrictValidator(structural_schema())


def loads_accepts(text: str) -> bool:
    try:
        hndl.loads(text)
    except hndl.HndlError:
        return False
    return True


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert hndl.spec_schema() == SCHEMA  # a fresh dict each call, the same content
    assert hndl.spec_schema() is not hndl.spec_schema()


# --- regressions: the two documents on which the loader and the published schema disagreed ----------------


BASE = {"hndl": 1, "name": "m", "inputs": {"x": {"shape": ["B", 4]}}, "nodes": {"h": {"op": "relu", "in": "x"}}}


def test_bare_output_reference_is_accepted_by_loader_and_schema() -> None:
    # Regression: `outputs: h` was read as [h] by the loader and rejected by the schema (SPEC §4.1 allows it).
    doc = {**BASE, "outputs": "h"}
    assert loads_accepts(hndl.flow_yaml(doc))
    assert VALIDATOR.is_valid(doc)
    assert hndl.loads(hndl.flow_yaml(doc)).outputs == ["h"]


def test_regression_an_unknown_key_holding_a_mapping_with_an_integer_key_is_refused_by_both() -> None:
    # Found by the property test below: `shape: {1: null}` on a relu node passed the structural schema (a node's
    # other keys were unconstrained) while the loader refuses any non-text key inside a value.
    node = {"op": "relu", "in": "x", "shape": {1: None}}
    doc = {**BASE, "nodes": {"r": node}, "outputs": ["r"]}
    assert not STRUCTURE.is_valid(doc)
    assert not VALIDATOR.is_valid(doc)
    assert not loads_accepts(hndl.flow_yaml(doc))
    node["shape"] = {"1": None}  # text keys: both reach the op's own check, which refuses the unknown key
    assert STRUCTURE.is_valid(doc)
    assert not VALIDATOR.is_valid(doc)


def test_kwargs_with_a_non_string_key_is_rejected_by_checker_and_schema() -> None:
    # Regression: `kwargs: {1: 2}` passed the schema ("type: object") and failed the checker.
    node = {"op": "module", "in": "x", "target": "torch.nn:Identity", "kwargs": {1: 2}}
    doc = {**BASE, "nodes": {"h": node}, "outputs": ["h"]}
    assert not VALIDATOR.is_valid(doc)
    # In a spec the loader refuses it (a key inside a value must be text, issue 20); in a Python graph the checker.
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(hndl.flow_yaml(doc), allow_imports=True)
    problem = info.value.problems[0]
    assert (problem.code, problem.message) == ("E_SPEC", "'kwargs': a key inside a value must be text, got integer 1")
    g = hndl.Graph("g")
    g.output(g.add("module", g.input("x", ("B", 4)), name="h", target="torch.nn:Identity", kwargs={1: 2}))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    problem = info.value.problems[0]
    assert (problem.code, problem.message) == (
        "E_PARAM",
        "parameter 'kwargs' must be a mapping with string keys, got {1: 2}",
    )
    node["kwargs"] = {"dim": 1}
    assert VALIDATOR.is_valid(doc)


# --- structure: generated and mutated documents ---------------------------------------------------------------

# Names for inputs and nodes come from disjoint pools: an input and a node with one name is an error the
# schema cannot see (one namespace per graph).
INPUT_NAMES = ["x", "y", "tokens"]
NODE_NAMES = ["h", "act", "out"]
OUTPUT_NAMES = ["logits", "aux"]
DIMS = st.sampled_from(["B", "T", "C*H", 0, 4, 784])
# Values a mutation writes anywhere. Strings are valid shape entries and references, so that a mutated value
# never turns into a shape-expression or reference error, which the schema cannot see.
VALUES = st.sampled_from(
    [None, True, False, 0, 1, 2, -1, 2.5, 1.0, float("inf"), "B", "h", "float32", "cpu", [], {}]
).map(copy.deepcopy) | st.lists(DIMS, max_size=3)  # copies: a later mutation may write into a drawn list
# Keys a mutation adds: names no other entry uses (so no collision), section keys, and non-string keys.
NEW_KEYS = st.sampled_from(
    [
        *("shape", "dtype", "device", "op", "in", "hndl", "name", "inputs", "nodes", "outputs", "graphs", "2x", ""),
        *("params", "tie", "when", "from"),
    ]
) | st.sampled_from([1, True, None, 1.5])


@st.composite
def graph_body(draw: Any) -> dict[str, Any]:
    inputs = {}
    for name in draw(st.lists(st.sampled_from(INPUT_NAMES), min_size=1, max_size=2, unique=True)):
        contract: dict[str, Any] = {"shape": draw(st.lists(DIMS, max_size=3))}
        if draw(st.booleans()):
            contract["dtype"] = draw(st.sampled_from(["float32", "int64", "float", "any", "torch.float16"]))
        if draw(st.booleans()):
            contract["device"] = draw(st.sampled_from(["cpu", "cuda"]))
        inputs[name] = contract
    params = draw(st.none() | st.just({"width": 4, "on": True}))
    nodes: dict[str, Any] = {}
    available = list(inputs)
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), max_size=3, unique=True)):
        node: dict[str, Any] = {"op": draw(st.sampled_from(["relu", "linear", "add"]))}
        refs = draw(st.lists(st.sampled_from(available), min_size=1, max_size=2))
        node["in"] = refs[0] if len(refs) == 1 and draw(st.booleans()) else refs
        if node["op"] == "linear":
            node["out_features"] = draw(st.integers(1, 8)) if params is None else draw(st.sampled_from([4, "$width"]))
            if nodes and draw(st.booleans()):
                node["tie"] = {"weight": f"{next(iter(nodes))}.weight"}
        if draw(st.booleans()):
            node["when"] = draw(st.sampled_from([True, False] if params is None else [True, "$on"]))
        nodes[name] = node
        available.append(name)
    outputs = draw(st.lists(st.sampled_from(available), min_size=1, max_size=2))
    written: Any = outputs[0] if draw(st.booleans()) else outputs
    if draw(st.booleans()):  # named outputs, some with a contract
        written = {}
        for name, ref in zip(OUTPUT_NAMES, outputs):
            contract: dict[str, Any] = {"from": ref}
            if draw(st.booleans()):
                contract["shape"] = draw(st.lists(DIMS, max_size=3))
            if draw(st.booleans()):
                contract["dtype"] = draw(st.sampled_from(["float32", "int64", "float", "any", None]))
            written[name] = ref if draw(st.booleans()) else contract
    body = {"inputs": inputs, "nodes": nodes, "outputs": written}
    return body if params is None else {"params": params, **body}


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"hndl": 1}
    if draw(st.booleans()):
        doc["name"] = draw(st.sampled_from(["mlp", "net_2", "_x"]))
    doc.update(draw(graph_body()))
    if draw(st.booleans()):
        doc["graphs"] = {"block": draw(graph_body())}
    return doc


def _containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, (dict, list)):
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield from _containers(child, (*path, key))


@st.composite
def mutated_documents(draw: Any) -> dict[str, Any]:
    doc = copy.deepcopy(draw(documents()))
    for _ in range(draw(st.integers(1, 3))):
        places = list(_containers(doc))
        _, target = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if isinstance(target, dict):
            keys = list(target)
            if action == "add" or not keys:
                key = draw(NEW_KEYS)
                target[key] = draw(VALUES)
            elif action == "delete":
                del target[draw(st.sampled_from(keys))]
            else:
                target[draw(st.sampled_from(keys))] = draw(VALUES)
        elif target:
            index = draw(st.integers(0, len(target) - 1))
            if action == "delete":
                del target[index]
            else:
                target[index] = draw(VALUES)
        else:
            target.append(draw(VALUES))
    if draw(st.booleans()):
        doc = draw(VALUES) if draw(st.integers(0, 20)) == 0 else doc  # now and then not a mapping at all
    return doc


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents())
def test_generated_documents_are_accepted_by_loads_and_schema(doc: dict[str, Any]) -> None:
    assert STRUCTURE.is_valid(doc), next(STRUCTURE.iter_errors(doc)).message
    assert loads_accepts(hndl.flow_yaml(doc))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated_documents())
def test_loads_accepts_a_document_exactly_when_the_schema_does(doc: Any) -> None:
    text = hndl.flow_yaml(doc)
    schema_says = STRUCTURE.is_valid(doc)
    loads_says = loads_accepts(text)
    if schema_says != loads_says:
        if schema_says:
            with pytest.raises(hndl.HndlError) as info:
                hndl.loads(text)
            detail = str(info.value)
        else:
            detail = next(STRUCTURE.iter_errors(doc)).message
        raise AssertionError(f"schema {schema_says}, loads {loads_says} for:\n{text}\n{detail}")


# --- parameter values: each ParamType's check and its schema fragment -----------------------------------------

PARAM_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 12),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN or infinity: see SPEC §4.9
        st.sampled_from([1.0, 2.0, -1.0, 0.5]),
        st.sampled_from(["float32", "torch.float32", "torch.float", "int", "same:x", "none", "tanh", "block", ""]),
        st.text(max_size=5),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.integers(0, 2), inner, max_size=2)
    ),
    max_leaves=6,
)


def _params() -> list[hndl.Param]:
    """Every parameter of every registered op, and each type with bounds, choices and null."""
    params = [p for o in hndl.registry for p in o.params]
    for name in ("int", "float", "bool", "str", "ints", "numbers", "int_or_pair", "shape", "dtype", "mapping", "graph"):
        params.append(hndl.Param("v", name))
        params.append(hndl.Param("v", name, nullable=True))
        params.append(hndl.Param("v", name, min=0, max=4))
    params.append(hndl.Param("v", "int", choices=(1, 2, 3)))
    params.append(hndl.Param("v", "str", choices=("none", "tanh")))
    return params


@pytest.mark.parametrize("param", _params(), ids=lambda p: f"{p.name}:{p.type.name}")
@settings(max_examples=60, deadline=None)
@given(value=PARAM_VALUES)
def test_a_parameter_accepts_a_value_exactly_when_its_schema_does(param: hndl.Param, value: Any) -> None:
    fragment = {"$defs": SCHEMA["$defs"], **param.schema()}
    _, reason = param.validate(value)
    schema_accepts = StrictValidator(fragment).is_valid(value)
    if _has_size_expression(param, value):
        # The grammar of a size expression is the parser's (SPEC 4.9): the schema may let through a text the
        # parser refuses ("a*"), never the other way round.
        assert schema_accepts or reason, (value, reason)
    else:
        assert (not reason) == schema_accepts, (value, reason)


def _has_size_expression(param: hndl.Param, value: Any) -> bool:
    return (
        param.type.name in ("sizes", "reshape sizes")
        and isinstance(value, list)
        and any(isinstance(v, str) for v in value)
    )


@pytest.mark.parametrize("op", ["expand", "reshape", "new_zeros"])
@pytest.mark.parametrize("text", ["0", "12", "2*3", " 4 ", "(8)"])
def test_regression_a_number_written_as_text_in_sizes_is_refused_by_the_schema_too(op: str, text: str) -> None:
    param = next(p for o in hndl.registry if o.name == op for p in o.params if p.name == "shape")
    fragment = {"$defs": SCHEMA["$defs"], **param.schema()}
    assert param.validate([2, text])[1]
    assert not StrictValidator(fragment).is_valid([2, text])
    assert StrictValidator(fragment).is_valid([2, "8*h", "B", "(h-1)//2+1"])


def test_param_types_are_objects_named_by_strings() -> None:
    p = hndl.Param("k", "int_or_pair", min=1)
    assert isinstance(p.type, hndl.ParamType)
    assert (p.type.name, p.type.description) == ("int_or_pair", "integer, or a list of two integers")
    assert p.validate(3) == ((3, 3), "")
    assert p.schema()["anyOf"][0] == {"type": "integer", "minimum": 1}
    assert hndl.Param("k", p.type, min=1) == p
    with pytest.raises(ValueError, match="unknown parameter type 'integer'"):
        hndl.Param("k", "integer")


def test_a_shape_parameter_message_says_sizes_may_be_zero() -> None:
    # The check accepts 0 (an empty dim); the message used to say "positive".
    shape = hndl.Param("shape", "shape")
    assert shape.validate([0, -1]) == ((0, -1), "")
    assert shape.validate([2, -3]) == (None, "entries must be sizes (0 or more) or -1, got [2, -3]")


def test_parameter_messages_echo_a_short_excerpt_of_the_value() -> None:
    _, reason = hndl.Param("n", "int").validate("x" * 10_000)
    assert reason.startswith("must be integer, got string 'xxx")
    assert reason.endswith("...")
    assert len(reason) < 100
    _, reason = hndl.Param("n", "int").validate("\x1b[2J")
    assert reason == "must be integer, got string '\\x1b[2J'"


def test_regression_module_shape_schema_refused_a_symbol_starting_with_a_digit() -> None:
    # The schema's symbol pattern was unanchored at the start, so "0A" passed the schema and failed the loader.
    from jsonschema import Draft202012Validator

    fragment = next(p for p in _params() if p.type.name == "module_shape").type.schema({})
    assert not Draft202012Validator(fragment).is_valid(["0A"])
    assert Draft202012Validator(fragment).is_valid(["B", 64])


# --- graph parameter references inside lists (SPEC §1.6) ----------------------------------------------------


def _param_node_fragment(op: str, param: str) -> dict[str, Any]:
    """The schema a parameter of ``op`` gets in a graph that declares parameters (where '$name' is allowed)."""
    for branch in SCHEMA["$defs"]["param_node"]["allOf"]:
        if branch["if"]["properties"]["op"]["const"] == op:
            return {"$defs": SCHEMA["$defs"], **branch["then"]["properties"][param]}
    raise AssertionError(op)


LIST_PARAMS = [
    (o.name, p)
    for o in hndl.registry
    for p in o.params
    if "array" in repr(p.schema())  # a list type: ints, numbers, int_or_pair, shape, expand's sizes, graph params
]


@pytest.mark.parametrize(("op", "param"), LIST_PARAMS, ids=lambda x: x if isinstance(x, str) else x.name)
@settings(max_examples=40, deadline=None)
@given(value=PARAM_VALUES, picks=st.lists(st.booleans(), max_size=4))
def test_a_list_with_references_is_valid_to_the_schema_when_its_bound_value_is_to_the_checker(
    op: str, param: hndl.Param, value: Any, picks: list[bool]
) -> None:
    from hndl._graph import Node
    from hndl._param_binding import bind_node

    if not isinstance(value, list) or any(isinstance(item, str) and item.startswith("$") for item in value):
        return  # a string written with '$' is a reference by definition (§1.6), not a plain value
    bindings = {f"v{i}": item for i, item in enumerate(value) if i < len(picks) and picks[i]}
    written = [f"$v{i}" if f"v{i}" in bindings else item for i, item in enumerate(value)]
    bound, problems = bind_node(Node("n", op, [], {param.name: written}), bindings)
    assert problems == []
    assert bound.params[param.name] == value
    _, reason = param.validate(value)
    if not reason:
        assert StrictValidator(_param_node_fragment(op, param.name)).is_valid(written), written


def test_references_inside_lists_are_valid_where_the_graph_declares_parameters() -> None:
    doc = {
        "hndl": 1,
        "params": {"k": 3, "w": 4},
        "inputs": {"x": {"shape": ["B", 2, 8, 8]}},
        "nodes": {
            "conv": {"op": "conv2d", "in": "x", "out_channels": "$w", "kernel_size": ["$k", "$k"]},
            "token": {"op": "parameter", "shape": [1, "$w*2", 1]},
            "wide": {"op": "expand", "in": "token", "shape": ["$k", -1, "$w"]},
        },
        "outputs": ["conv", "wide"],
    }
    assert VALIDATOR.is_valid(doc), next(VALIDATOR.iter_errors(doc)).message
    hndl.check(hndl.loads(hndl.flow_yaml(doc)))
    bad = copy.deepcopy(doc)
    bad["nodes"]["conv"]["kernel_size"] = ["$k", "three"]  # neither an integer nor a reference
    # A bare name may be a size (a subgraph input's C, an integer graph parameter named in a shape: issue 39),
    # which only the checker can resolve: the schema admits it where the graph declares parameters, and the
    # checker refuses a name that is no size.
    assert VALIDATOR.is_valid(bad)
    with pytest.raises(hndl.HndlError):
        hndl.check(hndl.loads(hndl.flow_yaml(bad)))
    unparametrised = copy.deepcopy(doc)
    del unparametrised["params"]  # then there is nothing to refer to
    assert not VALIDATOR.is_valid(unparametrised)
    with pytest.raises(hndl.HndlError):
        hndl.check(hndl.loads(hndl.flow_yaml(unparametrised)))


def test_every_zoo_spec_is_valid_to_the_schema() -> None:
    # The zoo's transformer specs write references inside a parameter's mapping (rope: {theta: $rope_theta}),
    # which the schema once refused while the checker accepted them.
    import yaml

    import hndl.zoo

    for name in hndl.zoo.names():
        doc = yaml.safe_load(hndl.zoo.spec_text(name))
        errors = [e.message for e in StrictValidator(SCHEMA).iter_errors(doc)]
        assert errors == [], name
