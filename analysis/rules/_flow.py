"""Glue between the rules and the semantic layer (``analysis.flow``): the scopes of a file, all
their divergences, and (from ``flow.findings``) the words that name a divergence in messages."""
from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.control import context_divergences, divergences
# the words of a flow finding live with the semantic layer; the rules take them from here
from ..flow.findings import (  # noqa: F401
    call_words,
    effect_related,
    effect_words,
    main_effect,
    node_related,
    report_divergence,
    source_related,
    source_words,
    text,
    vtext,
    where,
)
from ..registry import NoCase
from ..semantic import _NESTED_SCOPES as _NESTED, parent

# the flow rules need a collective site: a torch.distributed import ("distributed"), a DDP/FSDP
# wrapper ("...Parallel"), a ZeroRedundancyOptimizer, or a project helper module ("dist", "comm")
FLOW_TEXT = (NoCase("dist"), "comm", "Parallel", "ZeroRedundancy",
             "full_tensor", "summon_full_params", "full_optim_state_dict",  # hidden collectives (flow/hidden.py)
             "ccelerat")  # Accelerate's collectives (``accelerator.gather``/``backward``..., flow/hidden.py)


def scopes(ctx) -> list[ast.AST]:
    def build():
        out = [ctx.sem.tree]
        for defs in ctx.sem.functions.values():
            out.extend(defs)
        out.sort(key=lambda n: getattr(n, "lineno", 0))
        return out
    return ctx.memo("flow.scopes", build)


def scopes_with(ctx, types: tuple) -> frozenset:
    """The scopes (the module, functions, lambdas, classes) whose own nodes, as
    ``semantic.iter_scope_nodes`` gives them, hold a node of ``types`` (each always indexed in
    ``sem.by_type``: ``semantic.BRANCHING``, ``EXITS``...), found from those nodes up, once per module,
    instead of walking every scope."""
    def build():
        out = set()
        sem = ctx.sem
        for t in types:
            for n in sem.by_type.get(t, ()):
                child, p = n, parent(n)
                while p is not None and not isinstance(p, _NESTED):
                    child, p = p, parent(p)
                if p is None:
                    out.add(sem.tree)
                elif child is p.body or (isinstance(p.body, list) and child in p.body):
                    out.add(p)  # in its body (not in a decorator, a default or an annotation)
        return frozenset(out)
    return ctx.memo(("flow.scopes_with", types), build)


def all_divergences(ctx):
    """The divergences of this file's scopes, then those inside the project functions it calls,
    as its calls run them (``d.ctx`` set; ``d.view`` the callee's module, maybe another file)."""
    def build():
        an = for_context(ctx)
        out = []
        for s in scopes(ctx):
            out.extend(divergences(an, an.main, s))
        out.extend(context_divergences(an, an.main, scopes(ctx)))
        return out
    return ctx.memo("flow.divergences", build)


def elsewhere(ctx, d) -> bool:
    """The divergence lies in another file (reported at the call that leads there)."""
    return d.view is not None and d.view is not for_context(ctx).main
