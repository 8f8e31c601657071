"""deepcopy, pickle, torch.save/load and state_dict round trips after torch.func use; the clone's checked runtime.

"Keeps the checked runtime working" means: the copy's first call is a full validation, later calls take the fast
path, and the copy's stores record is its own (a hookless edit of the copy is caught on the copy and does not
touch the original).
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest

pytest.importorskip("hndl.func")

import torch
from torch.func import functional_call, vmap

import hndl
import hndl.func as hf


def swap_with(model, kind: str, x: torch.Tensor) -> None:
    """Run one functional call with tensors of the given kind swapped in (leaving the model as it was)."""
    if kind == "vmap":
        stacked = {k: torch.randn(2, *v.shape) for k, v in model.named_parameters()}
        vmap(lambda p: hf.functional_call(model, p, (x,)))(stacked)
        vmap(lambda p: functional_call(model, p, (x,)))(stacked)
        return
    params = {}
    for name, value in model.named_parameters():
        if kind == "plain":
            params[name] = value.detach().clone()
        elif kind == "grad":
            params[name] = value.detach().clone().requires_grad_()
        else:  # non-leaf
            params[name] = value * 1.5
    out = hf.functional_call(model, params, (x,))
    if out.requires_grad:
        out.sum().backward()
    functional_call(model, params, (x,))


def assert_runtime_is_own(clone, original, x: torch.Tensor, *, fresh: bool = True) -> None:
    """``fresh``: ``clone`` is a new object whose first call must validate; else it was called before."""
    before = clone.validations
    expected = original(x)
    torch.testing.assert_close(clone(x), expected)
    assert clone.validations == before + fresh  # a copy's first call validates
    clone(x)
    assert clone.validations == before + fresh  # ... and the next one takes the fast path
    clone.nodes.n_hidden._parameters["bias"] = None  # hookless: only the stores record sees it
    with pytest.raises(hndl.HndlError) as info:
        clone(x)
    assert info.value.code == "E_RUNTIME"
    assert info.value.node == "hidden"
    torch.testing.assert_close(original(x), expected)  # the original's record is untouched


@pytest.mark.parametrize("kind", ["plain", "grad", "non-leaf", "vmap"])
def test_deepcopy_after_functional_call(mlp, x, kind):
    mlp(x)
    swap_with(mlp, kind, x)
    clone = copy.deepcopy(mlp)
    for (name, ours), (_, theirs) in zip(mlp.named_parameters(), clone.named_parameters()):
        assert torch.equal(ours, theirs), name
        assert ours is not theirs
        assert isinstance(theirs, torch.nn.Parameter)
    assert_runtime_is_own(clone, mlp, x)


def test_a_deepcopy_has_its_own_parameter_signature_record(mlp, x, monkeypatch):
    from hndl.func import _functional

    calls = []
    original = _functional._problems
    monkeypatch.setattr(_functional, "_problems", lambda *a, **k: calls.append(1) or original(*a, **k))
    params = {k: v.detach() for k, v in mlp.named_parameters()}
    hf.functional_call(mlp, params, (x,))
    clone = copy.deepcopy(mlp)
    hf.functional_call(clone, params, (x,))
    hf.functional_call(clone, params, (x,))
    assert len(calls) == 2


def test_pickle_round_trip(make_mlp, x):
    model = make_mlp(norm=True).eval()
    model(x)
    swap_with(model, "grad", x)
    clone = pickle.loads(pickle.dumps(model))
    assert clone.graph.name == "mlp"
    assert_runtime_is_own(clone, model, x)


def test_torch_save_and_load_with_weights_only_false(mlp, x):
    mlp(x)
    swap_with(mlp, "non-leaf", x)
    buffer = io.BytesIO()
    torch.save(mlp, buffer)
    buffer.seek(0)
    clone = torch.load(buffer, weights_only=False)
    assert isinstance(clone, hndl.GraphModule)
    assert_runtime_is_own(clone, mlp, x)


def test_state_dict_round_trip_strict(make_mlp, x):
    source, target = make_mlp(norm=True, seed=1).eval(), make_mlp(norm=True, seed=2).eval()
    target(x)
    swap_with(source, "plain", x)
    result = target.load_state_dict(source.state_dict())
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    # load_state_dict copies in place: not a change, so the loaded model stays on its fast path
    assert_runtime_is_own(target, source, x, fresh=False)


def test_state_dict_round_trip_not_strict(make_mlp, x):
    source, target = make_mlp(seed=1), make_mlp(seed=2)
    target(x)
    partial = {k: v for k, v in source.state_dict().items() if k.startswith("nodes.n_out.")}
    partial["extra.weight"] = torch.zeros(1)
    result = target.load_state_dict(partial, strict=False)
    assert result.missing_keys == ["nodes.n_hidden.weight", "nodes.n_hidden.bias"]
    assert result.unexpected_keys == ["extra.weight"]
    assert torch.equal(target.nodes.n_out.weight, source.nodes.n_out.weight)
    assert not torch.equal(target.nodes.n_hidden.weight, source.nodes.n_hidden.weight)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        target.load_state_dict(partial)
    # the checked runtime and the parameter check both still work
    target(x)
    with pytest.raises(hndl.HndlError, match="wrong shape"):
        hf.functional_call(target, {"nodes.n_out.bias": torch.zeros(3)}, (x,))


def test_deepcopy_to_meta_then_functional_call(mlp, twin_of, x):
    mlp(x)
    swap_with(mlp, "grad", x)
    meta = copy.deepcopy(mlp).to("meta")
    assert {p.device.type for p in meta.parameters()} == {"meta"}
    assert mlp.nodes.n_hidden.weight.device.type == "cpu"
    params = {k: v.detach() for k, v in mlp.named_parameters()}
    torch.testing.assert_close(hf.functional_call(meta, params, (x,), strict=True), mlp(x))
    torch.testing.assert_close(functional_call(meta, params, (x,)), twin_of(mlp)(x))
    with pytest.raises(hndl.HndlError, match="wrong shape"):
        hf.functional_call(meta, dict(params, **{"nodes.n_out.bias": torch.zeros(3)}), (x,))
