"""Every torch internal the hndl runtime reads, pinned: a torch release that changes one fails here, loudly.

The runtime (hndl/torch/_guards.py, _hooks.py, _state.py, _module.py) reads ``nn.Module``'s store dicts and
hook dicts directly and calls a layer's ``forward`` without ``__call__`` when no hook is registered. Those are
private torch details; if an upgrade changed one, detection would silently weaken (a hook skipped, a removed
parameter unseen). Each test here states one fact the runtime relies on, in terms of torch alone, and names
the hndl code that relies on it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
import torch.nn.modules.module as torch_module
from torch import nn

from hndl.torch import _guards

PER_MODULE_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
GLOBAL_HOOK_DICT_NAMES = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


# --- the store dicts (_guards.take_record, _state.BuildState, _state.walk_modules) ---------------------------


def test_store_dicts_are_dicts_in_the_instance_dict():
    # Plain dicts since torch 2.5, OrderedDicts before: the record needs only a dict (dict.values, iteration in
    # insertion order, identity), which both are.
    layer = nn.Linear(2, 3)
    for name in ("_parameters", "_buffers", "_modules"):
        assert isinstance(layer.__dict__[name], dict), name
    assert list(layer._parameters) == ["weight", "bias"]


def test_registering_writes_into_the_store_dicts_in_place():
    root = nn.Module()
    stores = (root._parameters, root._buffers, root._modules)
    root.weight = nn.Parameter(torch.zeros(2))
    root.register_buffer("running", torch.zeros(2))
    root.child = nn.Linear(1, 1)
    assert stores == (root._parameters, root._buffers, root._modules)
    assert all(a is b for a, b in zip(stores, (root._parameters, root._buffers, root._modules)))
    assert root._parameters["weight"] is root.weight
    assert root._buffers["running"] is root.running
    assert root._modules["child"] is root.child


def test_setting_a_parameter_to_none_stores_none_and_del_removes_the_entry():
    layer = nn.Linear(2, 3)
    layer.bias = None
    assert "bias" in layer._parameters
    assert layer._parameters["bias"] is None
    del layer.weight
    assert "weight" not in layer._parameters


def test_a_submodule_set_to_none_stays_in_modules_as_none():
    root = nn.Sequential(nn.Linear(1, 1))
    root[0] = None  # type: ignore[assignment]
    assert "0" in root._modules
    assert root._modules["0"] is None


# --- registration hooks (_hooks._install, _on_registration) -------------------------------------------------


def test_global_registration_hooks_see_parameters_buffers_and_modules_but_not_a_none_parameter():
    seen: list[tuple[str, str]] = []
    handles = [
        torch_module.register_module_parameter_registration_hook(lambda m, n, v: seen.append(("parameter", n))),
        torch_module.register_module_buffer_registration_hook(lambda m, n, v: seen.append(("buffer", n))),
        torch_module.register_module_module_registration_hook(lambda m, n, v: seen.append(("module", n))),
    ]
    try:
        root = nn.Module()
        root.w = nn.Parameter(torch.zeros(1))
        root.register_buffer("b", torch.zeros(1))
        root.child = nn.Identity()
        root.w = None  # no hook for a None parameter: the stores record must catch it (SPEC 11.2)
        root.register_buffer("b", None)  # a None buffer does run the hook (a bump: harmless)
    finally:
        for handle in handles:
            handle.remove()
    assert seen == [("parameter", "w"), ("buffer", "b"), ("module", "child"), ("buffer", "b")]


# --- hook dicts (_guards.hook_dicts, GLOBAL_HOOK_DICTS) -----------------------------------------------------


@pytest.mark.parametrize(
    ("register", "attr"),
    [
        (lambda m: m.register_forward_hook(lambda *a: None), "_forward_hooks"),
        (lambda m: m.register_forward_pre_hook(lambda *a: None), "_forward_pre_hooks"),
        (lambda m: m.register_full_backward_hook(lambda *a: None), "_backward_hooks"),
        (lambda m: m.register_full_backward_pre_hook(lambda *a: None), "_backward_pre_hooks"),
    ],
)
def test_a_module_hook_is_added_to_and_removed_from_the_same_dict_in_place(register, attr):
    layer = nn.Linear(1, 1)
    before = getattr(layer, attr)
    assert type(before) is dict or isinstance(before, dict)
    handle = register(layer)
    assert getattr(layer, attr) is before
    assert len(before) == 1
    handle.remove()
    assert getattr(layer, attr) is before
    assert len(before) == 0


def test_hndl_watches_exactly_the_per_module_hook_dicts():
    layer = nn.Linear(1, 1)
    assert all(a is b for a, b in zip(_guards.hook_dicts(layer), (getattr(layer, n) for n in PER_MODULE_HOOK_DICTS)))


@pytest.mark.parametrize(
    ("register", "name"),
    [
        (lambda: torch_module.register_module_forward_hook(lambda *a: None), "_global_forward_hooks"),
        (lambda: torch_module.register_module_forward_pre_hook(lambda *a: None), "_global_forward_pre_hooks"),
        (lambda: torch_module.register_module_full_backward_hook(lambda *a: None), "_global_backward_hooks"),
        (
            lambda: torch_module.register_module_full_backward_pre_hook(lambda *a: None),
            "_global_backward_pre_hooks",
        ),
    ],
)
def test_a_global_hook_mutates_the_module_level_dict_hndl_holds(register, name):
    watched = dict(zip(GLOBAL_HOOK_DICT_NAMES, _guards.GLOBAL_HOOK_DICTS))[name]
    assert getattr(torch_module, name) is watched  # hndl holds the very object torch consults
    handle = register()
    try:
        assert len(watched) == 1
        assert getattr(torch_module, name) is watched
        assert _guards.global_hooks_active()
    finally:
        handle.remove()
    assert len(watched) == 0
    assert not _guards.global_hooks_active()


# --- how _call_impl skips hooks (the fast path calls forward directly: _module._install) ---------------------


def _fast_exit_condition() -> ast.expr:
    """The condition of ``nn.Module._call_impl``'s first ``if``: the one that returns ``forward(...)`` directly."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(nn.Module._call_impl)))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Return) for s in node.body):
            return node.test
    raise AssertionError("nn.Module._call_impl no longer has an early return: hndl's fast path must be re-derived")


def test_call_impl_skips_to_forward_exactly_when_the_dicts_hndl_watches_are_empty():
    test = _fast_exit_condition()
    assert isinstance(test, ast.UnaryOp)
    assert isinstance(test.op, ast.Not)
    assert isinstance(test.operand, ast.BoolOp)
    assert isinstance(test.operand.op, ast.Or)
    own, global_ = set(), set()
    for value in test.operand.values:
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            own.add(value.attr)
        elif isinstance(value, ast.Name):
            global_.add(value.id)
        else:
            raise AssertionError(f"_call_impl's hook test reads something new: {ast.unparse(value)}")
    assert own == set(PER_MODULE_HOOK_DICTS)
    assert global_ == set(GLOBAL_HOOK_DICT_NAMES)


def test_call_impl_uses_slow_forward_only_under_jit_tracing():
    # With no hook, __call__ is forward (or _slow_forward under torch.jit.trace, which records scopes only).
    source = inspect.getsource(nn.Module._call_impl)
    assert "self._slow_forward if torch._C._get_tracing_state() else self.forward" in " ".join(source.split())


def test_without_hooks_call_and_forward_agree_and_with_one_the_hook_runs():
    layer = nn.Linear(2, 2)
    x = torch.randn(1, 2)
    assert torch.equal(layer(x), layer.forward(x))
    ran: list[bool] = []
    layer.register_forward_hook(lambda *a: ran.append(True))
    layer(x)
    layer.forward(x)
    assert ran == [True]


# --- conversions, copying, compile (GraphModule._apply, __getstate__/__setstate__, forward) ------------------


def test_conversions_go_through_apply_on_the_root():
    calls: list[str] = []

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(1, 1)

        def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
            calls.append("apply")
            return super()._apply(fn, recurse)

    root = Root()
    root.double()
    root.half()
    root.to(torch.float32)
    root.float()
    root.cpu()
    assert calls == ["apply"] * 5


def test_module_getstate_returns_a_copy_of_the_instance_dict():
    layer = nn.Linear(1, 1)
    state = layer.__getstate__()
    assert state is not layer.__dict__
    assert state["_parameters"] is layer._parameters


def test_an_instance_dict_entry_is_read_without_module_getattr():
    # GraphModule keeps its runtime state in __dict__ (VERSION_ATTR and friends), read by attribute access.
    layer = nn.Linear(1, 1)
    layer.__dict__[_guards.VERSION_ATTR] = 7
    assert getattr(layer, _guards.VERSION_ATTR) == 7


def test_the_public_apis_hndl_calls_exist():
    assert callable(torch.compiler.is_compiling)
    assert torch.compiler.is_compiling() is False
    assert callable(torch.func.functional_call)
    assert callable(torch.func.stack_module_state)
    assert torch.is_autocast_enabled("cpu") is False  # the device_type form (torch >= 2.4)
    assert issubclass(nn.RMSNorm, nn.Module)  # torch >= 2.4
