"""The op registry: user ops registered like built-ins, schemas validated, plugins loaded from entry points."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

import hndl
from hndl._registry import Registry


@pytest.fixture
def scale_op():
    @hndl.op(
        "test_scale",
        params=[hndl.Param("factor", "float", default=2.0, min=0, doc="the multiplier")],
        inputs=[hndl.Port("x", ["*shape"])],
        outputs=[hndl.Port("y", ["*shape"], dtype="same:x")],
        module="Scale",
        example={"op": "test_scale", "factor": 3.0},
    )
    def build(p, inputs):
        """Multiply by a constant factor."""

        class Scale(torch.nn.Module):
            def __init__(self, factor: float) -> None:
                super().__init__()
                self.factor = factor

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * self.factor

        return Scale(p.factor)

    yield hndl.registry.find("test_scale")
    hndl.registry.unregister("test_scale")


def test_a_user_op_builds_and_runs_like_a_builtin(scale_op):
    assert scale_op.summary == "Multiply by a constant factor."
    g = hndl.Graph()
    x = g.input("x", ("B", 3))
    g.output(g.add("test_scale", x, name="s", factor=0.5))
    model = hndl.build(g)
    out = model(torch.ones(2, 3))
    assert torch.equal(out, torch.full((2, 3), 0.5))
    assert str(hndl.check(g).output_types[0]) == "[B, 3] float"


def test_user_op_params_are_validated_from_the_schema(scale_op):
    g = hndl.Graph()
    g.output(g.add("test_scale", g.input("x", ("B", 3)), name="s", factor=-1))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_PARAM"
    assert info.value.problems[0].message == "parameter 'factor' must be >= 0, got -1"


def test_registering_a_name_twice_needs_replace(scale_op):
    with pytest.raises(ValueError, match="already registered"):
        hndl.op("test_scale")(lambda p, i: None)


def test_bad_schemas_are_refused_at_registration():
    with pytest.raises(ValueError, match="unknown parameter type"):
        hndl.Param("n", "integer")
    with pytest.raises(ValueError, match="only the last input port may be variadic"):
        hndl.op("test_bad_ports", inputs=[hndl.Port("a", variadic=True), hndl.Port("b")])(lambda p, i: None)
    with pytest.raises(ValueError, match="unknown dtype"):
        hndl.op("test_bad_dtype", inputs=[hndl.Port("a", dtype="float33")])(lambda p, i: None)
    assert hndl.registry.find("test_bad_ports") is None
    with pytest.raises(ValueError, match="cannot be named 'name'"):
        hndl.op("test_reserved", params=[hndl.Param("name", "str")])(lambda p, i: None)


def test_a_builder_that_raises_becomes_e_param():
    @hndl.op("test_explodes")
    def build(p, inputs):
        """Always fails."""
        raise RuntimeError("kaboom")

    try:
        g = hndl.Graph()
        g.output(g.add("test_explodes", g.input("x", ("B", 3)), name="e"))
        with pytest.raises(hndl.HndlError) as info:
            hndl.build(g)
        assert info.value.code == "E_PARAM"
        assert info.value.problems[0].message == "building the layer failed: RuntimeError: kaboom"
    finally:
        hndl.registry.unregister("test_explodes")


def test_a_builder_must_return_a_module():
    @hndl.op("test_not_module")
    def build(p, inputs):
        """Returns the wrong thing."""
        return 42

    try:
        g = hndl.Graph()
        g.output(g.add("test_not_module", g.input("x", ("B", 3)), name="e"))
        with pytest.raises(hndl.HndlError, match=r"returned int, not a torch\.nn\.Module"):
            hndl.build(g)
    finally:
        hndl.registry.unregister("test_not_module")


def _install_plugin(tmp_path, monkeypatch, body: str) -> Registry:
    """A fake installed distribution whose `hndl.ops` entry point is `myplugin:register`."""
    (tmp_path / "myplugin.py").write_text(textwrap.dedent(body))
    dist = tmp_path / "myplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[hndl.ops]\nmyplugin = myplugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myplugin", raising=False)
    return Registry()


def test_plugins_register_ops_from_the_entry_point_group(tmp_path, monkeypatch):
    reg = _install_plugin(
        tmp_path,
        monkeypatch,
        """
        import hndl

        def register():
            def build(p, inputs):
                '''Plugin op.'''
                import torch
                return torch.nn.Identity()
            return [hndl.OpDef(name="plugin_identity", build=build, doc="Plugin op.",
                               inputs=(hndl.Port("x"),), outputs=(hndl.Port("y", None, dtype="same:x"),))]
        """,
    )
    assert reg.find("plugin_identity") is not None
    assert "plugin_identity" in reg.names()


def test_a_broken_plugin_warns_and_does_not_break_the_registry(tmp_path, monkeypatch):
    reg = _install_plugin(tmp_path, monkeypatch, "def register():\n    raise RuntimeError('broken plugin')\n")
    with pytest.warns(RuntimeWarning, match="plugin 'myplugin'"):
        assert reg.find("anything") is None
    assert "broken plugin" in reg.plugin_errors[0]


def test_regression_params_deepcopy_recursed_forever():
    """copy.deepcopy of a GraphModule hit RecursionError: Params.__getattr__ read _values before it existed."""
    import copy
    import pickle

    p = hndl.Params({"out_features": 3})
    assert copy.deepcopy(p).out_features == 3
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError, match="no parameter 'missing'"):
        p.missing  # noqa: B018


def test_a_user_op_that_imports_code_is_refused_in_specs_loaded_without_allow_imports():
    @hndl.op("test_runs_code", imports_code=True)
    def build(p, inputs):
        """Would import something."""
        return torch.nn.Identity()

    spec = "hndl: 1\nname: s\ninputs:\n  x: {shape: [B, 4]}\nnodes:\n  n: {op: test_runs_code, in: x}\noutputs: [n]\n"
    try:
        with pytest.raises(hndl.HndlError) as info:
            hndl.check(hndl.loads(spec))
        (p,) = info.value.problems
        assert (p.code, p.node) == ("E_PARAM", "n")
        assert (
            p.message == "importing code for op 'test_runs_code' is refused: this spec was loaded without allow_imports"
        )
        assert hndl.check(hndl.loads(spec, allow_imports=True)).nodes[0].op == "test_runs_code"
    finally:
        hndl.registry.unregister("test_runs_code")


def test_an_op_that_runs_a_subgraph_must_declare_graph_and_repeat():
    with pytest.raises(ValueError, match="must declare parameters 'graph' and 'repeat'"):
        hndl.op("test_subgraph_op", runs_subgraph=True, params=[hndl.Param("graph", "graph")])(lambda p, i: None)
    assert hndl.registry.find("test_subgraph_op") is None


class _FakeEntryPoint:
    """Stands in for an installed `hndl.ops` entry point; `load` runs the given function."""

    def __init__(self, name, load):
        self.name, self.value, self.load = name, f"{name}:register", load


def _identity_op(name: str) -> hndl.OpDef:
    return hndl.OpDef(name=name, build=lambda p, i: torch.nn.Identity(), inputs=(hndl.Port("x"),))


def test_regression_threads_saw_no_plugin_ops_while_another_thread_was_loading_them(monkeypatch):
    """load_plugins marked the registry loaded before importing the plugins, without a lock: a thread that
    looked an op up while another was still importing a slow plugin was told the op does not exist."""
    import threading
    import time

    import hndl._registry as registry_module

    loads = []

    def slow_load():
        loads.append(threading.current_thread().name)
        time.sleep(0.2)
        return [_identity_op("slow_plugin_op")]

    monkeypatch.setattr(registry_module, "_entry_points", lambda: [_FakeEntryPoint("slow", slow_load)])
    reg = Registry()
    start = threading.Barrier(8)
    found = []

    def look_up():
        start.wait()
        found.append(reg.find("slow_plugin_op"))

    threads = [threading.Thread(target=look_up) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8
    assert all(opdef is not None and opdef.name == "slow_plugin_op" for opdef in found)
    assert len(loads) == 1


def test_an_interrupted_plugin_load_is_tried_again_by_the_next_lookup(monkeypatch):
    import hndl._registry as registry_module

    attempts = []

    def load():
        attempts.append(1)
        if len(attempts) == 1:
            raise KeyboardInterrupt
        return _identity_op("retried_plugin_op")

    monkeypatch.setattr(registry_module, "_entry_points", lambda: [_FakeEntryPoint("flaky", load)])
    reg = Registry()
    with pytest.raises(KeyboardInterrupt):
        reg.find("retried_plugin_op")
    assert reg.find("retried_plugin_op") is not None
    assert len(attempts) == 2


def test_a_plugin_with_one_invalid_op_registers_none_of_them(monkeypatch):
    import hndl._registry as registry_module

    bad = hndl.OpDef(name="half_bad", build=lambda p, i: None, params=(hndl.Param("name", "str"),))
    entry = _FakeEntryPoint("half", lambda: [_identity_op("half_good"), bad])
    monkeypatch.setattr(registry_module, "_entry_points", lambda: [entry])
    reg = Registry()
    with pytest.warns(RuntimeWarning, match="plugin 'half'"):
        assert reg.find("half_good") is None
    assert "cannot be named 'name'" in reg.plugin_errors[0]
    assert reg.names() == []


def test_a_plugin_that_looks_up_ops_while_it_loads_does_not_deadlock(monkeypatch):
    import hndl._registry as registry_module

    reg = Registry()

    def load():
        assert reg.find("not_yet_there") is None  # same thread, while loading: no second load, no deadlock
        return _identity_op("reentrant_op")

    monkeypatch.setattr(registry_module, "_entry_points", lambda: [_FakeEntryPoint("reentrant", load)])
    assert reg.find("reentrant_op") is not None


def test_derive_names_let_an_op_without_infer_state_its_output_as_a_pattern():
    """`derive` turns pair-valued parameters into names a pattern can use; without an `infer`, the checker
    fills the output pattern with them."""

    @hndl.op(
        "test_stretch",
        params=[hndl.Param("factor", "int_or_pair", min=1, doc="height and width factors")],
        inputs=[hndl.Port("x", ["N", "C", "H", "W"])],
        outputs=[hndl.Port("y", ["N", "C", "H*factor_h", "W*factor_w"], dtype="same:x")],
        derive=lambda p: dict(
            zip(("factor_h", "factor_w"), p.factor if isinstance(p.factor, tuple) else (p.factor,) * 2)
        ),
    )
    def build(p, inputs):
        """Nearest-neighbour stretch by an integer factor per spatial dim."""
        return torch.nn.Upsample(scale_factor=p.factor)

    try:
        g = hndl.Graph()
        g.output(g.add("test_stretch", g.input("x", ("B", 3, "H", 5)), name="s", factor=[2, 3]))
        assert str(hndl.check(g).output_types[0]) == "[B, 3, 2*H, 15] float"
        assert hndl.build(g)(torch.zeros(1, 3, 4, 5)).shape == (1, 3, 8, 15)
    finally:
        hndl.registry.unregister("test_stretch")
