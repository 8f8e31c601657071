"""The ATen operations an op imports, declared on its OpDef (``imports``), and the layer class its builder makes,
resolved from its declared ``layer``: the importer's ``FUNCTIONS`` is read from the registry, plugin ops
included."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import hndl
import hndl._registry as registry_module
from hndl._registry import layer_of
from hndl.importer import FUNCTIONS, MIN_TORCH, PENDING, ROW_KINDS
from hndl.importer._table import _IMPORTER_ROWS

# Only the tests that import a model need a torch the importer is tested with; the declarations need none.
needs_importer = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


class CumProd(nn.Module):
    """The plugin's layer: running products along ``dim``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, self.dim)


class RunningProducts(nn.Module):
    """A model calling an operation no built-in op imports (``PENDING`` says it waits on a cumprod op)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(self.fc(x), 1)


def cumprod_op(name: str = "test_cumprod", imports: Any = None) -> hndl.OpDef:
    """A plugin's op, as its entry point would return it: built as ``hndl.op`` builds one, not registered."""

    def build(p: hndl.Params, inputs: Any) -> nn.Module:
        """Running products along ``dim`` (``torch.cumprod``)."""
        return CumProd(p.dim)

    return hndl.OpDef(
        name=name,
        build=build,
        doc=build.__doc__ or "",
        params=(
            hndl.Param("dim", "int", default=-1, doc="the dim"),
            hndl.Param("dtype", "str", default=None, nullable=True, doc="the result's dtype"),
        ),
        inputs=(hndl.Port("x", ["*shape"]),),
        outputs=(hndl.Port("y", ["*shape"], dtype="same:x"),),
        layer=f"{__name__}.CumProd",
        returns="new",
        saves="both",
        # the importer's row for sum and cumsum reads dim (and dtype), which is what cumprod takes too
        imports={"aten.cumprod.default": hndl.ImportRow("accumulating")} if imports is None else imports,
    )


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[hndl.OpDef]]:
    """An installed plugin that the registry has not loaded yet; its ops are unregistered afterwards."""

    class EntryPoint:
        name, value = "cumprod_plugin", "cumprod_plugin:ops"

        def load(self) -> Any:
            return lambda: list(ops)

    ops: list[hndl.OpDef] = [cumprod_op()]
    monkeypatch.setattr(registry_module, "_entry_points", lambda: [EntryPoint()])
    monkeypatch.setattr(hndl.registry, "_plugins_loaded", False)
    yield ops
    for o in ops:
        hndl.registry.unregister(o.name)


@needs_importer
def test_a_plugin_op_declares_the_aten_operation_it_imports(plugin: list[hndl.OpDef]) -> None:
    net = RunningProducts().eval()
    x = torch.randn(3, 4)
    # The first look-up loads the plugin: the importer's table is read from the registry, not written beside it.
    assert "aten.cumprod.default" in FUNCTIONS
    graph = hndl.from_module(net, x)
    assert [(n.name, n.op, n.params) for n in graph.nodes.values()] == [
        ("fc", "linear", {"out_features": 4}),
        ("test_cumprod", "test_cumprod", {"dim": 1}),
    ]
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    with torch.no_grad():
        for seed in (0, 1):
            y = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
            assert torch.equal(model.eval()(y), net(y))


@needs_importer
def test_without_the_op_the_operation_still_waits_on_what_pending_names(plugin: list[hndl.OpDef]) -> None:
    plugin.clear()  # the plugin registers nothing
    assert "aten.cumprod.default" not in FUNCTIONS
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(RunningProducts().eval(), torch.randn(3, 4))
    (problem,) = err.value.problems
    assert problem.code == "E_IMPORT"
    assert problem.message == (
        f"hndl has no op for aten.cumprod.default (waits on {PENDING['aten.cumprod.default']}) "
        "(at `return torch.cumprod(self.fc(x), 1)`)"
    )


def test_an_op_registered_later_and_removed_joins_and_leaves_the_table() -> None:
    hndl.registry.register(cumprod_op("test_cumprod_late"))
    try:
        assert "aten.cumprod.default" in FUNCTIONS
        assert len(FUNCTIONS) == len(set(FUNCTIONS))
    finally:
        hndl.registry.unregister("test_cumprod_late")
    assert "aten.cumprod.default" not in FUNCTIONS


@needs_importer
def test_a_row_kind_the_importer_lacks_fails_the_import_that_meets_it() -> None:
    hndl.registry.register(cumprod_op("test_cumprod_bad", imports={"aten.cumprod.default": "cumulative"}))
    try:
        with pytest.raises(hndl.HndlError) as err:
            hndl.from_module(RunningProducts().eval(), torch.randn(3, 4))
        (problem,) = err.value.problems
        assert problem.code == "E_OP"
        assert problem.message.startswith(
            "op 'test_cumprod_bad' declares the import of aten.cumprod.default with the row 'cumulative': the "
            "importer has no row kind 'cumulative' (it has unary, activation, "
        )
        assert problem.hint == "declare a kind of hndl.importer.ROW_KINDS with the options it takes"
        # Options a kind does not take are the same mistake.
        bad = cumprod_op("test_cumprod_bad", imports={"aten.cumprod.default": hndl.ImportRow("conv", {"size": 2})})
        hndl.registry.register(bad, replace=True)
        with pytest.raises(hndl.HndlError) as err:
            hndl.from_module(RunningProducts().eval(), torch.randn(3, 4))
        assert "with the row 'conv': " in err.value.problems[0].message
    finally:
        hndl.registry.unregister("test_cumprod_bad")


def test_two_ops_cannot_import_one_operation() -> None:
    with pytest.raises(ValueError, match="already imports") as err:
        hndl.registry.register(cumprod_op("test_mine", imports=("aten.relu.default",)))
    assert str(err.value) == "op 'test_mine' imports aten.relu.default, which op 'relu' already imports"
    assert hndl.registry.find("test_mine") is None


@pytest.mark.parametrize(
    ("imports", "message"),
    [
        (
            ("torch.relu",),
            "op 'test_bad': imports names a traced ATen operation as torch.export writes it, such as "
            "'aten.relu.default', not 'torch.relu'",
        ),
        ("aten.relu.default", "op 'test_bad': imports is a list of ATen names or a mapping, not the string "),
        (
            {"aten.erfinv.default": 3},
            "op 'test_bad': the row for 'aten.erfinv.default' must be an ImportRow or a row kind's name, not 3",
        ),
    ],
)
def test_a_malformed_declaration_is_refused_when_declared(imports: Any, message: str) -> None:
    with pytest.raises(ValueError, match="op 'test_bad': ") as err:
        cumprod_op("test_bad", imports=imports)
    assert str(err.value).startswith(message)


def test_a_plain_op_is_declared_by_its_aten_names() -> None:
    relu = hndl.registry.find("relu")
    assert relu is not None
    assert relu.imports == {"aten.relu.default": hndl.ImportRow(), "aten.relu_.default": hndl.ImportRow()}
    leaky = hndl.registry.find("leaky_relu")
    assert leaky is not None
    assert leaky.imports["aten.leaky_relu.default"] == hndl.ImportRow(
        "activation", {"negative_slope": "negative_slope"}
    )


def test_every_declared_row_is_made_and_none_is_hidden_by_the_importers_own() -> None:
    declared = {t: o.name for o in hndl.registry for t in o.imports}
    assert not set(declared) & set(_IMPORTER_ROWS), "a declaration the importer's own row would stand over"
    for target in declared:
        assert callable(FUNCTIONS[target]), target  # its kind exists and takes the declared options
    assert set(FUNCTIONS) == set(declared) | set(_IMPORTER_ROWS)
    # Every kind is one some op uses: the importer keeps no row nothing declares.
    used = {row.kind for o in hndl.registry for row in o.imports.values()}
    assert used == set(ROW_KINDS)


def test_a_stand_in_row_leaves_the_table_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = FUNCTIONS["aten.gt.Scalar"]
    monkeypatch.setitem(FUNCTIONS, "aten.gt.Scalar", lambda site: None)
    assert FUNCTIONS["aten.gt.Scalar"] is not declared
    monkeypatch.undo()
    assert FUNCTIONS["aten.gt.Scalar"] is declared
    assert "aten.gt.Scalar" not in _IMPORTER_ROWS


def test_a_builder_makes_the_class_its_declaration_names() -> None:
    from hndl.torch import layers

    assert layer_of("lstm") is layers.LSTM
    assert layer_of("sum") is layers.Unary
    with pytest.raises(ValueError, match="op 'add' declares 3 layer classes; layer_of needs exactly one"):
        layer_of("add")


def test_no_builder_imports_the_one_class_its_op_declares() -> None:
    """The class is named once, in ``layer=``; a builder that only makes it calls :func:`layer_of`."""
    for opdef in hndl.registry:
        if not opdef.build.__module__.startswith("hndl.ops.") or len(opdef.layer_paths) != 1:
            continue
        module, _, cls = opdef.layer_paths[0].rpartition(".")
        if module.startswith("hndl."):
            assert f"import {cls}\n" not in inspect.getsource(opdef.build), opdef.name
