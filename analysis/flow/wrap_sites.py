"""The wraps of the checked file (``wrap_views`` for any module of the project): the rules' entry.

``wrap_sites(ctx)`` lists every DDP wrap of the file, a project helper's call included; the
machinery (``WrapSite``, reading a constructor's arguments through a helper's parameters, the
origins of a wrapper given the helper's call) is in ``wrap_views``, which the flow layer imports.
"""
from __future__ import annotations

import ast

from .wrap_views import (Origin, WrapSite, as_ctor, bound_at, leaf_arg, view_wrap_sites,  # noqa: F401  (re-exported)
                         with_calls)


def wrap_sites(ctx) -> list[WrapSite]:
    """Every wrap of this file, in its order (memoised per check)."""
    from .modern import hub
    from .reach import WRAP_TEXT, reaches

    # (a helper's wrap only where a module the file imports, transitively, spells the constructor)
    return ctx.memo("wrap_sites", lambda: view_wrap_sites(
        *hub(ctx), helpers=reaches(ctx.filename, ctx.src.text, WRAP_TEXT)[0]))


def ddp_like_calls(ctx) -> list[ast.Call]:
    """The calls of this file that read as ``DistributedDataParallel(...)`` calls: the constructor's
    own, and those of a project helper that forwards all it is given (``WrapSite.forwarder``)."""
    return [s.call for s in wrap_sites(ctx) if s.direct or s.forwarder]


def helper_device_args(ctx):
    """(the helper's call, [expressions]) for each wrap of a project helper that hands this file's
    ``device_ids=[...]`` elements / ``output_device`` to the DDP constructor
    (``wrap_ddp(model, device_ids=[rank])``): the device indexes the call uses."""
    from .modern import hub

    view = None
    for site in wrap_sites(ctx):
        if site.direct:
            continue  # a device call of the file itself
        view = view or hub(ctx)[1]
        got = []
        ids, iv, _ = site.arg_at(view, 1, "device_ids")
        if iv is view and isinstance(ids, (ast.List, ast.Tuple)):
            got.extend(ids.elts)
        od, ov, _ = site.arg_at(view, 2, "output_device")
        if ov is view:
            got.append(od)
        if got:
            yield site.call, got
