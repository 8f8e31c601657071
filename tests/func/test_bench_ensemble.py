"""Benchmark: hndl.func's ensembles, hypernetwork and MAML recipes against the same recipes in plain torch.func.

Every row runs the same GraphModule on both sides, so it measures what hndl.func adds:

* ``ensemble_call`` against torch.func's recipe, ``vmap(functional_call)`` over the ``meta`` base with the
  stacked tensors (what ``torch.func.stack_module_state`` returns; ``hndl.func.stack`` returns the same), for an
  MLP 64-128-10 at batch 32 with 8 and 64 members in eval mode (under ``no_grad``), and the same MLP with a
  BatchNorm after the hidden layer in train mode (grad enabled; each call updates the stacked running
  statistics on both sides);
* one training step of the hypernetwork recipe of docs/func.md (generated weights through
  ``hndl.func.functional_call(..., strict=True)``, then backward and an optimizer step) against
  ``torch.func.functional_call``;
* one outer step of the MAML recipe of docs/func.md (three inner ``grad`` steps, then the outer backward) with
  ``hndl.func.functional_call`` against ``torch.func.functional_call``.

Timing interleaves single calls (ours, theirs, theirs, ours, ...), as the functional_call benchmark does, and
compares the fastest round's median per side (DESIGN.md, "How performance is measured"); the result is a
:class:`harness.Comparison`. One torch thread, as in benchmarks/. The target for ensemble_call is 1.05x; the
assertion (1.1x) is a gross-regression check, because a shared machine moves a ratio by a few percent.

Measured on the shared 2-core development machine (torch 2.13 CPU, other sessions running, load average 3-4),
two runs, before -> after the stack-signature record: 8 members eval 1.10x -> 1.03x / 1.03x, 64 eval 1.04x ->
1.00x / 1.01x, 8 train 1.07x -> 1.02x / 1.02x, 64 train 1.09x -> 1.01x (see ALLOCATOR_BOUND); hypernetwork
1.01-1.02x, MAML 1.01x. An A/A comparison (torch.func against itself) spreads ~1% on that machine.

Issue 27 (a recent known stack recognised by PyTorch's C++ tensor guard before any signature is built): what
ensemble_call does before ``vmap`` went from 6.5-8.6 us to 2.5-2.7 us (timeit of that part alone, 8 members,
machine loaded by other sessions); cProfile now shows 12 Python-level calls per call beyond the recipe's
(ensemble_call, the guard lookup, the state version, the closure). Whole-call ratios for 8 members in eval read
1.02-1.05x in thread CPU time under a load average of 8-12, which is noise at that load: provisional, to be
measured on a quiet machine.

Run with ``python -m pytest -q -s -p no:cacheprovider -m benchmark tests/func``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("hndl.func")

import torch
from torch.func import functional_call, grad, vmap

import hndl
import hndl.func as hf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness import Comparison, fmt_us

pytestmark = pytest.mark.benchmark

#: ensemble_call's target against torch.func's recipe.
TARGET = 1.05
#: What the test asserts: a gross-regression bound (a shared machine moves a ratio by a few percent).
TOLERANCE = 1.1
#: The bound for 64 members in train mode. Its ~2 MB of activations and autograd buffers per call sit at glibc's
#: dynamic mmap/trim thresholds, so whether a side's allocations page-fault depends on the heap layout of the
#: process: its ratio swung from 0.92x to 1.40x between processes with call-for-call identical Python work, and
#: stays at 1.005-1.018x with ``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296`` set. As for
#: conv_stack in benchmarks/, the wide bound is a gross-regression check; run with those variables for the figure.
ALLOCATOR_BOUND = 2.0


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def interleaved(
    ours: Callable[[], object], theirs: Callable[[], object], rounds: int = 15, calls: int = 40
) -> Comparison:
    """Per-call seconds of each side: the fastest round's median, calls interleaved one by one.

    Within a round the sides alternate call by call, and which goes first alternates too, so both see the same
    machine load; a percent is otherwise lost in the noise of a shared machine.
    """
    sides = (ours, theirs)
    for fn in sides:  # warm up both (validation, first signatures, allocator)
        for _ in range(5):
            fn()
    best = [float("inf"), float("inf")]
    clock = time.perf_counter
    for _ in range(rounds):
        samples: tuple[list[float], list[float]] = ([], [])
        for call in range(calls):
            for side in (0, 1) if call % 2 else (1, 0):
                fn = sides[side]
                start = clock()
                fn()
                samples[side].append(clock() - start)
        for side in (0, 1):
            best[side] = min(best[side], statistics.median(samples[side]))
    return Comparison(hndl=best[0], twin=best[1])


def mlp_graph(batchnorm: bool) -> hndl.Graph:
    g = hndl.Graph("mlp")
    h = g.add("linear", g.input("x", ("B", 64)), name="hidden", out_features=128)
    h = g.add("relu", h, name="act")
    if batchnorm:
        h = g.add("module", h, name="norm", target="torch.nn:BatchNorm1d", kwargs={"num_features": 128})
    g.output(g.add("linear", h, name="out", out_features=10))
    return g


@dataclass
class Row:
    case: str
    comparison: Comparison
    bound: float


def ensemble_row(members: int, train: bool) -> Row:
    torch.manual_seed(0)
    models = [hndl.build(mlp_graph(batchnorm=train)).train(train) for _ in range(members)]
    params, buffers, base = hf.stack(models)
    x = torch.randn(32, 64)

    def member(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    def ours() -> torch.Tensor:
        with torch.set_grad_enabled(train):
            return hf.ensemble_call(base, params, buffers, x)

    def theirs() -> torch.Tensor:
        with torch.set_grad_enabled(train):
            return vmap(member, in_dims=(0, 0, None), randomness="different")(params, buffers, x)

    assert torch.equal(ours(), theirs())
    mode = "train, BatchNorm" if train else "eval"
    bound = ALLOCATOR_BOUND if train and members == 64 else TOLERANCE
    return Row(f"ensemble_call, {members} x MLP 64-128-10, batch 32, {mode}", interleaved(ours, theirs), bound)


def docs_model() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The model and data of docs/func.md: MLP 16-32-3, batch 32."""
    g = hndl.Graph("mlp")
    h = g.add("linear", g.input("x", ("B", 16)), name="hidden", out_features=32)
    g.output(g.add("linear", g.add("relu", h, name="act"), name="out", out_features=3))
    torch.manual_seed(0)
    return hndl.build(g), torch.randn(32, 16), torch.randint(0, 3, (32,))


def hypernetwork_row() -> Row:
    model, data, targets = docs_model()
    shapes = hf.param_shapes(model)
    sizes = [s.numel() for s in shapes.values()]
    hyper = torch.nn.Linear(4, sum(sizes))
    optimizer = torch.optim.SGD(hyper.parameters(), lr=0.05)
    task = torch.randn(4)

    def step(call: Callable[..., torch.Tensor]) -> Callable[[], float]:
        def run() -> float:
            chunks = (hyper(task) * 0.1).split(sizes)
            generated = {name: chunk.view(shape) for (name, shape), chunk in zip(shapes.items(), chunks)}
            loss = torch.nn.functional.cross_entropy(call(model, generated, (data,), strict=True), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss.item()

        return run

    case = "hypernetwork step (docs/func.md), MLP 16-32-3, batch 32"
    return Row(case, interleaved(step(hf.functional_call), step(functional_call)), TOLERANCE)


def maml_row() -> Row:
    model, data, targets = docs_model()
    params = {k: v.detach() for k, v in model.named_parameters()}
    meta = {k: v.clone().requires_grad_() for k, v in params.items()}
    outer_data, outer_targets = torch.randn(32, 16), torch.randint(0, 3, (32,))

    def step(call: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def inner_loss(p: dict[str, torch.Tensor], data: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(call(model, p, (data,)), targets)

        def run() -> None:
            adapted = meta
            for _ in range(3):
                grads = grad(inner_loss)(adapted, data, targets)
                adapted = {k: adapted[k] - 0.1 * grads[k] for k in adapted}
            inner_loss(adapted, outer_data, outer_targets).backward()

        return run

    case = "MAML outer step, 3 inner grad steps (docs/func.md)"
    return Row(case, interleaved(step(hf.functional_call), step(functional_call)), TOLERANCE)


def test_ensembles_and_recipes_cost_about_what_torch_func_costs():
    rows = [ensemble_row(members, train) for train in (False, True) for members in (8, 64)]
    rows += [hypernetwork_row(), maml_row()]
    width = max(len(row.case) for row in rows)
    print(f"\n{'case':<{width}}  {'hndl.func':>12}  {'torch.func':>12}  ratio (ensemble_call target {TARGET}x)")
    for row in rows:
        c = row.comparison
        print(f"{row.case:<{width}}  {fmt_us(c.hndl):>12}  {fmt_us(c.twin):>12}  {c.ratio:.3f}x")
    slow = [
        f"{row.case}: {row.comparison.ratio:.2f}x >= {row.bound}x" for row in rows if row.comparison.ratio >= row.bound
    ]
    assert slow == [], f"slower than the bound against torch.func: {slow}"
