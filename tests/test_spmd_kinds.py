"""flow/spmd_kinds.py: the kind of a gradient-norm value across ranks (gradient, local shard,
partial sum), through helpers, containers, appends and tuple returns; reductions and clips."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.flow import Analysis
from ddp_lint.analysis.flow.spmd_kinds import GRAD, LOCAL, PARTIAL, local_norms
from ddp_lint.analysis.semantic import Semantic

SRC = textwrap.dedent("""
    import torch
    import torch.distributed as dist

    def piece(t):
        return t.to_local() if hasattr(t, "to_local") else t

    def pair(model):
        shards = [piece(p.grad) for p in model.parameters() if p.grad is not None]
        return sum(s.norm() ** 2 for s in shards), shards

    def chosen(model):
        return [p.grad.to_local() for p in model.parameters() if is_split(p.grad)]

    def f(model, limit):
        part, shards = pair(model)
        grads = [p.grad for p in model.parameters()]
        buckets = {}
        for g in grads:
            buckets.setdefault(g.dtype, []).append(g._local_tensor)
        acc = torch.zeros(())
        for b in buckets.values():
            acc += torch.stack(torch._foreach_norm(b)).pow(2).sum()
        dist.all_reduce(acc, group=None)
        coef = limit / (part.sqrt() + 1e-6)
        torch._foreach_mul_(shards, coef)
        picked = chosen(model)
        full = [p.grad.full_tensor() for p in model.parameters()]
        return acc
""")


def _facts():
    tree = ast.parse(SRC)
    an = Analysis("<mem>", Semantic(tree), SRC)
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    return local_norms(an, an.main, fns["f"])


def test_kinds_through_helpers_containers_and_tuples():
    facts = _facts()
    env = facts.env
    assert env["part"].kind == PARTIAL and env["shards"].kind == LOCAL
    assert env["grads"].kind == GRAD and env["buckets"].kind == LOCAL
    assert env["acc"].kind == PARTIAL and env["coef"].kind == PARTIAL
    assert env["picked"].kind == LOCAL and env["picked"].filtered  # chosen by a test of the gradient
    assert not env["shards"].filtered  # ``is not None`` keeps every gradient
    assert "full" not in env  # a full tensor is no local shard


def test_reductions_and_clips():
    facts = _facts()
    assert set(facts.reduced) == {"acc"}
    assert [ast.unparse(arg) for _c, arg, _k in facts.clips] == ["coef"]
    assert facts.returns is None  # the reduced name is the same on every rank
