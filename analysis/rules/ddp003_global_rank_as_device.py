from __future__ import annotations

import ast
import os

from ..model import Applicability, Severity
from ..registry import NoCase, Rule
from ..source import SourceText
from ..semantic import Semantic, get_arg, iter_scope_nodes, parent
from ..flow.assignments import dominates, name_binding_kind
from ..flow.rank_tests import bound_global_rank, global_rank_source, is_local_rank_expr
from ..flow.calls import call_args
from ..flow.wrap_sites import helper_device_args
from ..flow.rank_kinds import GLOBAL, device_index_sites, device_param_sinks, rank_kind_of
from ..flow.testing import one_node_test
from ..flow.vocab import env_key
from ..flow.wrappers import _by_callee
from ._common import DEVICE_SETTERS, D, _helper_context, device_call_index, resolve_helper


_MESSAGE = ("the global rank ({how}) is used as a CUDA device index; it exceeds the GPU count "
            "on every node but the first: `invalid device ordinal`. Use the local rank")
_OTHER = ("the global rank ({how}) is used as {dev} device index; it exceeds the device count "
          "on every node but the first. Use the local rank")


def _message(qn: str | None, how: str) -> str:
    """The finding's words, naming the accelerator of a setter other than CUDA's (``qn``)."""
    kind = (qn or "").rsplit(".", 2)[-2] if (qn or "") in DEVICE_SETTERS and not qn.startswith("torch.cuda.") else None
    dev = "an accelerator" if kind == "accelerator" else f"a{'n' * (kind != 'musa')} {(kind or '').upper()}"
    return _MESSAGE.format(how=how) if kind is None else _OTHER.format(how=how, dev=dev)


class GlobalRankAsDevice(Rule):
    """
    ## What it does
    Checks for the *global* rank (`dist.get_rank()` or `os.environ["RANK"]`, directly or through a
    variable assigned once) used as a CUDA device index: `torch.cuda.set_device(rank)`,
    `torch.device("cuda", rank)`, `torch.device(f"cuda:{rank}")`, `.to(rank)`, `.cuda(rank)`,
    `with torch.cuda.device(rank)`, `DistributedDataParallel(..., device_ids=[rank])` /
    `output_device=rank`, `FullyShardedDataParallel(..., device_id=rank)`. The rank is also followed through helpers: a function of this file, a
    method of the class, or a function of another file of the project (`from utils.env import
    get_rank_from_env`, `import utils.dist as du; du.get_rank()`) whose every `return` is the
    global rank (`int(os.environ["RANK"])`, `dist.get_rank()`, another such helper) or the
    single-process fallback `0`; an element of a tuple such a helper returns
    (`rank, world = init_dist()`, `rank, _ = get_dist_info()`); a variable set to the global rank
    on one path and to the fallback `0` on another (`rank = 0` / `if dist.is_initialized(): rank =
    dist.get_rank()`); a parameter that every call site fills with the global rank; and
    `self.rank` assigned once from it.

    The value given to `init_process_group(rank=...)` is the global rank by definition, so the same
    variable or attribute used as a device in that function is flagged too (`args.rank` from
    `parse_args()`, `args.rank = args.node_rank * ngpus + gpu`, `rank = node * gpus + local`), when
    nothing rebinds it in between. A parameter as it stands (the index `mp.spawn` passes on one
    node), a namespace of unknown origin (a parameter whose attribute the function does not set),
    the local rank, a constant or `x % n` is not.

    A namespace attribute is followed too: `args.rank = int(os.environ["RANK"])` earlier in the
    function (unconditionally); a helper of this file or of the project that the function calls
    with `args` first (`init_distributed_mode(args)`) and that sets `args.rank` only to the global
    rank (`RANK` on one branch, `SLURM_PROCID` on another) or to the single-process `0`; or, when
    the function does not set it and `args` comes from
    `parse_args()`, the `default=` of the one `add_argument("--rank", ...)` that defines it
    (`default=int(os.environ.get("RANK", 0))`).

    A helper of another module of the project whose parameter is used, as it stands, as the device
    (`def pin(local_rank): torch.cuda.set_device(local_rank)`, also a few helpers deep) is flagged at
    the call that passes it the global rank (`pin(dist.get_rank())`, `build(self.rank)` with
    `self.rank = int(os.environ["RANK"])`): the argument's kind and the parameter's use are value
    flow (`flow/rank_kinds.py`), whatever the parameter is called. The device setters of the other
    accelerators whose index counts one node's devices (`torch.xpu.set_device`,
    `torch.npu.set_device`, Ascend's `torch_npu.npu.set_device`, `torch.mlu` / `torch_mlu`,
    `torch.musa`, the backend-generic `torch.accelerator.set_device_index`; one table,
    `torch_api.DEVICE_SETTERS`) count like CUDA's, with the same value flow.

    A record of the launch environment is followed too: a `@dataclass` or `NamedTuple` field
    filled with the global rank by its constructor (`Env(rank=int(os.environ["RANK"]), ...)`) and
    used as the index (`torch.device("cuda", self.rank)` in a `@property device`, `set_device(env.rank)`),
    and the device such a property returns where it is used (`torch.cuda.set_device(env.device)`).

    The same mix-up is checked where a program starts the processes of its node itself (a script
    that re-launches itself, a hand-written launcher): a loop that starts one process per local
    index, storing the loop variable under the environment's `LOCAL_RANK` (`env["LOCAL_RANK"] =
    str(i)`, `{**os.environ, "LOCAL_RANK": f"{i}"}`) and starting it with `subprocess.Popen` /
    `run` / `call` / `check_call` / `check_output`, must run in the first process of *each* node.
    A test of the global rank against 0 that decides whether the loop runs (`assert
    self.global_rank == 0` before it, an enclosing `if rank == 0:`, `if rank != 0: return`, in the
    loop's function or around a call of that function in its module) is reported at the test. The
    value is the global rank by value flow (`flow/node_launch.py`): `RANK`, `dist.get_rank()`,
    `node_rank * n + local_rank` with the node's rank from `NODE_RANK` / `GROUP_RANK` /
    `SLURM_NODEID`, a property of the class or of a project base class in another module, or an
    accessor of `self` (`self.cluster.global_rank()`) that the class chain also passes to
    `init_process_group(rank=...)`. A loop that also gives each child its index as `RANK`, and a
    module whose rendezvous is on the loopback address, make a world of one node: not flagged.

    `rank % torch.cuda.device_count()`, `LOCAL_RANK`, and the index parameter `mp.spawn` passes to
    its target are not flagged. The project's test suite is skipped: test files (`test_*.py`,
    `*_test.py`, `conftest.py`), programs under a `tests` / `test` folder beside or below test modules
    (`tests/functional/run_cp_check.py` next to `test_cp.py`) or run there by a shell script beside
    them with a one-node `torchrun` (`--nnodes` absent or 1, `--standalone`). Multi-process tests run on one node, where the global rank is the local
    rank; the rule takes that premise for the whole suite, so a test that would break on a second
    node (`torch.cuda.set_device(dist.get_rank())` in a test module) is not reported either.

    ## Why is this bad?
    The global rank counts processes across all nodes; a node only has `torch.cuda.device_count()`
    GPUs. The script works on one node and fails on the second one (rank 8 on an 8-GPU node):

    ```
    RuntimeError: CUDA error: invalid device ordinal
    ```

    A node launcher picked by the global rank runs on the first node only: no process of the
    other nodes has global rank 0, so the `assert` fails there (or the `if` skips the launch) and
    their workers are never started; the ranks that did start wait in the rendezvous until it
    times out.

    ## Example
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = DDP(model.to(rank), device_ids=[rank])
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety
    The fix replaces the rank at the device use with the script's own `local_rank` variable when it
    has one (assigned from `LOCAL_RANK`, or a `local_rank` parameter), else with
    `int(os.environ["LOCAL_RANK"])`, adding `import os` if needed. It is **unsafe**: it assumes the
    script is launched by torchrun (or another launcher that sets `LOCAL_RANK`). A rank found
    through `init_process_group(rank=...)` in a script that starts its ranks with `mp.spawn` gets no
    fix: there is no `LOCAL_RANK`; the spawn index is the device.
    """

    code = "DDP003"
    name = "global-rank-as-device"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # any spelling of "rank" (`get_rank`, `RANK`, `args.rank`, `get_rank_from_env`), SLURM's id,
    # or an init whose `rank=` may be the device
    requires_text = (NoCase("rank"), "SLURM_PROCID", "init_process_group")

    def finish(self, ctx) -> None:
        from ..flow.modern import hub

        if one_node_test(ctx.filename, hub(ctx)[0]):
            return  # multi-process tests (and scripts beside them) run on one node: rank == local rank there
        sem = ctx.sem
        remotes = ctx.memo("ddp003.remote", dict)  # filled by _global_rank: read after each call
        rank_inits = _rank_inits(ctx)  # id(function) -> its init_process_group calls with a rank=
        # (the calls of the file that may take a device, found once per check for the device
        # rules; the rest of the file's calls hold no device argument read here)
        # (and the calls of project helpers that hand this file's ``device_ids`` to DDP: wrap_sites)
        uses = [(c, s) for c in device_call_index(ctx).device if (s := device_index_sites(sem, c))]
        for call, sites in [*uses, *helper_device_args(ctx)]:
            scope = sem.scope_of(call)
            for site in sites:
                src = _global_rank(ctx, site, scope, 0)
                remote = remotes.get(id(src)) if src is not None else None
                if remote is not None:
                    path, rng, how, helper = remote
                    rel = os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.filename))) \
                        if ctx.filename and not ctx.filename.startswith("<") else path
                    how = f"{how} through `{helper}()`, {rel}:{rng.start.line + 1}"
                    ctx.report(
                        call,
                        _message(ctx.qn(call), how),
                        related=[(src, "this helper gives the global rank"),
                                 ("file", path, rng, "the global rank comes from here")],
                        fix=_make_fix(ctx, site),
                    )
                    break
                if src is not None:
                    how = _how(ctx, src)
                else:
                    src = _init_rank(ctx, site, scope, rank_inits) if rank_inits else None
                    if src is None:
                        if _carried_rank(ctx, call, site):
                            break
                        continue
                    how = f"`{ctx.text(src)}`, the `rank=` given to `init_process_group`"
                    if _local_rank_name(ctx, site) is None and ctx.calls_to(
                            "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"):
                        # ranks started by mp.spawn have no LOCAL_RANK: the spawn index is the device
                        ctx.report(call, _message(ctx.qn(call), how), related=[(src, "the global rank comes from here")])
                        break
                ctx.report(
                    call,
                    _message(ctx.qn(call), how),
                    related=[(src, "the global rank comes from here")] if src is not site else [],
                    fix=_make_fix(ctx, site),
                )
                break
        _helper_device_params(ctx)
        _node_launcher_guards(ctx)


def _node_launcher_guards(ctx) -> None:
    """A loop that starts this node's other processes (``flow.node_launch``), run only where the
    *global* rank is 0: on every other node nothing starts them. Reported at the test."""
    from ..flow.modern import hub
    from ..flow.node_launch import global_rank_value, launch_guards, node_launch_loops
    from ..flow.rank_kinds import loopback_rendezvous

    an, view = hub(ctx)
    loops = node_launch_loops(view)
    if not loops or loopback_rendezvous([view]) is not None:
        return  # a rendezvous on this machine: one node
    seen = set()
    for fn, loop, start in loops:
        for value, test in launch_guards(view, fn, loop):
            if id(test) in seen:
                continue
            seen.add(id(test))
            w = global_rank_value(an, view, value, test)
            if w is None:
                continue
            wv, wnode = w
            if wv is view:
                related = [(wnode, "the global rank comes from here")] if wnode is not value else []
            else:
                related = [("file", wv.path, SourceText(wv.text).node_range(wnode), "the global rank comes from here")]
            related.append((start, "the node's other processes are started here"))
            ctx.report(
                test,
                f"the global rank (`{ctx.text(value)}`) picks the process that starts the other processes of its "
                f"node (line {start.lineno}): on every node but the first no process has global rank 0, so the "
                f"test fails there and that node's workers are never started (an error, or a hang at the "
                f"rendezvous). Test the local rank",
                related=related,
            )


def _carried_rank(ctx, call, site) -> bool:
    """The global rank carried to ``site`` by value flow (``rank_kinds.device_index_kind``): a
    ``torch.device("cuda", rank)`` a helper returns, kept on ``self.device``, used as it is
    (``set_device(self.device)``) or by its ``.index`` (``device_ids=[self.device.index]``), with
    the CPU / single-process fallbacks neutral. Reported at the call, no fix (the device may be the
    CPU on another path: the index belongs in the helper)."""
    from ..flow.modern import hub
    from ..flow.origins import origins
    from ..flow.device_kinds import device_index_kind

    an, view = hub(ctx)
    kind, w = device_index_kind(an, view, site, call)
    if kind != GLOBAL or w is None:
        return False
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda") and any(
            isinstance(e, ast.Call) and v.sem.call_qualname(e) == "torch.device" for v, e in origins(an, view, site, call)):
        return False  # a tensor moved to a device object: the device's construction is the finding
    wv, wnode = w
    how = "`RANK`" if env_key(wv, wnode) is not None else "`dist.get_rank()`"
    if wv is view:
        related = [(wnode, "the global rank comes from here")]
    else:
        here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
            else None
        rel = os.path.relpath(wv.path, here) if here and wv.path else wv.path
        how = f"{how}, {rel}:{wnode.lineno}"
        related = [("file", wv.path, SourceText(wv.text).node_range(wnode), "the global rank comes from here")]
    ctx.report(call, _message(ctx.qn(call), f"{how} carried by `{ctx.text(site)}`"), related=related)
    return True


# arguments ``rank_kinds.rank_kind_of`` never finds ``GLOBAL`` in, whatever the module: ``origins``
# keeps them as their own leaf and its ``_leaf_kind`` gives them no global kind (a display, a
# comprehension, an operator, a literal); a call with only these needs no resolving
_NOT_GLOBAL = (ast.Constant, ast.JoinedStr, ast.Lambda, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp,
               ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Compare, ast.BinOp, ast.BoolOp, ast.UnaryOp)


def _helper_device_params(ctx) -> None:
    """The global rank passed to a helper of another module whose parameter is used there, as it
    stands, as a CUDA device index (``def pin(local_rank): torch.cuda.set_device(local_rank)``,
    ``pin(dist.get_rank())``): reported at the call. The argument's kind comes from
    ``rank_kinds.rank_kind_of`` (its origins), the parameter's use from
    ``rank_kinds.device_param_sinks`` (a few helpers deep)."""
    from ..flow.modern import hub

    an, view = hub(ctx)
    for c in ctx.sem.calls:
        if all(isinstance(a, _NOT_GLOBAL) for a in (*c.args, *(k.value for k in c.keywords))):
            continue  # (no argument, or none that may be the global rank: the call need not be resolved)
        target = an.resolve_call(view, c)
        if target is None or target[0] is view:
            continue  # a helper of this file: its own device use follows the parameter back here
        tv, tfn = target
        sinks = device_param_sinks(an, tv, tfn)
        if not sinks:
            continue
        for pname, a in call_args(c, tfn):
            if pname not in sinks:
                continue
            kind, w = rank_kind_of(an, view, a, c)
            if kind != GLOBAL:
                continue
            sv, snode, _what = sinks[pname]
            here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
                else None
            rel = os.path.relpath(sv.path, here) if here and sv.path else sv.path
            how = (f"`{ctx.text(a)}`, passed to `{tfn.name}()` as `{pname}`, which uses it as the device at "
                   f"{rel}:{snode.lineno}")
            related = [("file", sv.path, SourceText(sv.text).node_range(snode), "the parameter is the device here")]
            wv, wnode = w
            if wv is view and wnode is not a:
                related.insert(0, (wnode, "the global rank comes from here"))
            qn = sv.sem.call_qualname(snode) if isinstance(snode, ast.Call) else None
            ctx.report(c, _message(qn, how), related=related, fix=_make_fix(ctx, a))
            break


def _global_rank(ctx, site, scope, depth: int):
    """``global_rank_source``, also through the file's own helpers: a function whose every
    ``return`` is the global rank (``def get_rank(): return int(os.environ["RANK"])``), a name bound
    once to a call of one, a parameter that every call site in the file fills with the global rank,
    and ``self.<attr>`` assigned once in the class from the global rank."""
    if site.__class__ is ast.Name:
        # a name's answer depends on the name and its scope only: ``x.to(device)``,
        # ``y.to(device)``... in one function ask once per check
        memo = ctx.memo("ddp003.name_rank", dict)
        key = (site.id, id(scope), depth)
        try:
            return memo[key]
        except KeyError:
            got = memo[key] = _global_rank_of(ctx, site, scope, depth)
            return got
    return _global_rank_of(ctx, site, scope, depth)


def _global_rank_of(ctx, site, scope, depth: int):
    binding = None
    if site.__class__ is ast.Name:
        # what ``global_rank_source`` does for a name, keeping its binding for the reads below
        binding = name_binding_kind(ctx, site.id, scope)
        src = bound_global_rank(ctx, *binding)
    else:
        src = global_rank_source(ctx, site, scope)
    if src is not None or depth > 3:
        return src
    sem = ctx.sem
    e = site
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ast.Call):
        return _helper_rank(ctx, e, depth)
    if isinstance(e, ast.Name):
        kind, val = binding if binding is not None else name_binding_kind(ctx, e.id, scope)
        if kind == "single" and (isinstance(val, ast.Call) or isinstance(val, ast.Attribute) and _ref_path(val)):
            return _global_rank(ctx, val, sem.scope_of(val), depth + 1)  # `gpu = args.rank`
        if kind == "single" and val is None:
            return _unpacked_rank(ctx, e.id, scope, depth)  # `rank, world = init_dist()`
        if kind == "multi" and val:
            return _fallback_rank(ctx, e.id, scope, val, depth)
        if kind == "param" and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                isinstance(parent(scope), ast.Module):
            return _param_filled_with_rank(ctx, scope, e.id, depth)
        return None
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        cls = next((a for a in sem.ancestors(e) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        vals = ctx.memo(("ddp003.self_assigns", id(cls)), lambda: _self_assigns(cls)).get(e.attr, [])
        if len(vals) == 1 and isinstance(vals[0], ast.Assign) and len(vals[0].targets) == 1:
            return _global_rank(ctx, vals[0].value, sem.scope_of(vals[0]), depth + 1)
        return _record_field_rank(ctx, e) if not vals else None
    if isinstance(e, ast.Attribute) and _ref_path(e) and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        got = _namespace_rank(ctx, e, scope, depth)
        if got is None:
            got = _record_field_rank(ctx, e)  # ``env.rank`` of ``env = Env(rank=...)``
        return got
    return None


def _record_field_rank(ctx, e):
    """``self.rank`` never assigned in its class's methods: a field of a dataclass / NamedTuple (or
    a property) whose every construction in the module binds the global rank
    (``Env(rank=int(os.environ["RANK"]))``), by value flow (``rank_kinds.rank_kind_of``). The
    witness when it is in this file, else None."""
    from ..flow.modern import hub
    from ..flow.origins import record_attr

    an, view = hub(ctx)
    if not isinstance(e.value, ast.Name) or e.value.id != "self":
        if not record_attr(an, view, e, e):
            return None  # only a field or property of a project record: ``args.rank`` is read above
    kind, w = rank_kind_of(an, view, e, e)
    if kind != GLOBAL or w is None or w[0] is not view:
        return None
    return w[1]


def _is_zero(e) -> bool:
    return isinstance(e, ast.Constant) and type(e.value) is int and e.value == 0


def _helper_rank(ctx, call, depth: int, index: int | None = None):
    """``call`` (no arguments) of a helper whose every return is the global rank (element
    ``index`` of a returned tuple when given): a function of this file, a method of the class, or
    a function of another file of the project."""
    if call.args or call.keywords or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return None
    if isinstance(call.func, ast.Name):
        fns = ctx.sem.functions.get(call.func.id, [])
        if len(fns) == 1 and isinstance(parent(fns[0]), ast.Module):
            return _returns_global_rank(ctx, fns[0], depth, index)
    return _project_helper_rank(ctx, call, depth, index)


def _unpacked_rank(ctx, name: str, scope, depth: int):
    """``name`` bound once by ``rank, world = helper()``: element of the helper's returned tuple."""
    binds = ctx.sem.assignments(scope).get(name) or ctx.sem.assignments(ctx.sem.tree).get(name) or []
    if len(binds) != 1:
        return None
    st = binds[0]
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], (ast.Tuple, ast.List))
            and isinstance(st.value, ast.Call)):
        return None
    elts = st.targets[0].elts
    if any(isinstance(t, ast.Starred) for t in elts):
        return None
    idx = next((i for i, t in enumerate(elts) if isinstance(t, ast.Name) and t.id == name), None)
    if idx is None:
        return None
    return _helper_rank(ctx, st.value, depth + 1, idx)


def _fallback_rank(ctx, name: str, scope, vals, depth: int):
    """``name`` bound several times, each to the global rank or to the single-process fallback
    ``0`` (``rank = 0`` / ``if dist.is_initialized(): rank = dist.get_rank()``), with no ``0``
    binding that always runs after a global one (it would override it)."""
    binds = ctx.sem.assignments(scope).get(name) or []
    if len(binds) != len(vals) or len(vals) > 4:
        return None
    found, zeros, globals_ = None, [], []
    for b, v in zip(binds, vals):
        if _is_zero(v):
            zeros.append(b)
            continue
        src = _global_rank(ctx, v, ctx.sem.scope_of(v), depth + 1)
        if src is None:
            return None
        found = found or src
        globals_.append(b)
    if found is None or any(dominates(g, z) for g in globals_ for z in zeros):
        return None
    return found


def _returns_global_rank(ctx, fn, depth: int, index: int | None = None):
    """The global-rank source of ``fn`` when every ``return`` of it gives the global rank (element
    ``index`` of a returned tuple when given), or a constant ``0`` (the single-process fallback of
    ``get_rank()`` helpers) with at least one real global rank; else None."""
    if depth > 4:
        return None
    rets = [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)]
    if not rets or any(r.value is None for r in rets) or \
            any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in iter_scope_nodes(fn)):
        return None
    found = None
    for r in rets:
        v = r.value
        if index is not None:
            if not isinstance(v, (ast.Tuple, ast.List)) or len(v.elts) <= index \
                    or any(isinstance(x, ast.Starred) for x in v.elts):
                return None
            v = v.elts[index]
        if _is_zero(v):
            continue
        src = _global_rank(ctx, v, fn, depth + 1)
        if src is None:
            return None
        found = found or src
    return found


def _project_helper_rank(ctx, call, depth: int, index: int | None = None):
    """``call`` (no arguments) runs a function of another file of the project (or a method of this
    class) whose every return is the global rank: the call itself, with the helper's source noted
    for the finding (``ddp003.remote``)."""
    if depth > 3:
        return None
    got = resolve_helper(ctx, call)  # loads the project only for device uses that are helper calls
    if got is None:
        return None
    main, ana, view, view2, fn = got
    if view2 is view:
        if view2 is ana.main and isinstance(parent(fn), ast.Module):
            return None  # this file's own functions are read above
        return _returns_global_rank(ctx, fn, depth + 1, index)
    ctx2 = _helper_context(main, view2)
    src = _returns_global_rank(ctx2, fn, depth + 1, index)
    if src is None:
        return None
    remote = main.memo("ddp003.remote", dict)
    inner = remote.get(id(src))
    remote[id(call)] = inner if inner is not None else (
        view2.path, ctx2.src.node_range(src), _how(ctx2, src), fn.name)
    return call


def _how(ctx, src) -> str:
    return "`dist.get_rank()`" if isinstance(src, ast.Call) and not _is_env(ctx, src) else "`RANK`"


def _namespace_rank(ctx, e, scope, depth: int):
    """``args.rank`` (an attribute of a namespace, not ``self``): the value of its last store in the
    function before the use (``args.rank = int(os.environ["RANK"])``), or, with no store there, the
    ``default=`` of the one ``add_argument`` that defines it when ``args`` comes from
    ``parse_args()`` (``parser.add_argument("--rank", default=int(os.environ.get("RANK", 0)))``)."""
    stores = [(n, plain) for n, plain in _stores(ctx, scope, e) if n.lineno < e.lineno]
    if stores:
        n, plain = max(stores, key=lambda p: p[0].lineno)
        if not plain or not isinstance(n, ast.Assign) or len(n.targets) != 1 or _under_branch(n, scope):
            return None
        return _global_rank(ctx, n.value, scope, depth + 1)
    if _stores(ctx, scope, e) or not isinstance(e.value, ast.Name):
        return None
    via = _set_by_helper(ctx, e, scope, depth)
    if via is not None:
        return via
    base = _stores(ctx, scope, e.value)
    if len(base) != 1 or not isinstance(base[0][0], ast.Assign) or not _from_parse_args(ctx, base[0][0].value):
        return None
    default = _argument_default(ctx, e.attr)
    if default is None:
        return None
    return global_rank_source(ctx, default, ctx.sem.scope_of(default))


def _set_by_helper(ctx, e, scope, depth: int):
    """``init_distributed_mode(args)`` earlier in the function, unconditionally, where the helper (a
    module-level function of this file or of another project file) sets ``<param>.rank`` only to the
    global rank (``args.rank = int(os.environ["RANK"])``, ``int(os.environ["SLURM_PROCID"])`` on
    another branch) or to the single-process ``0``: the attribute holds the global rank after it."""
    if depth > 2 or getattr(ctx, "_helper_view", None) is not None:
        return None
    name = e.value.id
    calls = [c for c in _calls_by_function(ctx).get(id(scope), ()) if c.lineno < e.lineno
             and not _under_branch(c, scope) and isinstance(c.func, (ast.Name, ast.Attribute))
             and not (ctx.qn(c) or "").startswith(("torch.", "os.", "argparse."))
             and any(isinstance(a, ast.Name) and a.id == name for a in (*c.args, *(k.value for k in c.keywords)))]
    if not calls:
        return None
    call = max(calls, key=lambda c: (c.lineno, c.col_offset))
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    from ..flow import for_context  # lazy: only namespace ranks handed to a helper get here

    ana = for_context(ctx)
    got = ana.resolve_call(ana.main, call)
    if got is None or not isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)) \
            or not isinstance(parent(got[1]), ast.Module):
        return None
    view, fn = got
    pos = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    param = next((k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == name), None)
    if param is None:
        idx = next(i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id == name) \
            if any(isinstance(a, ast.Name) and a.id == name for a in call.args) else None
        param = pos[idx] if idx is not None and idx < len(pos) else None
    if param is None or view.sem.assignments(fn).get(param):
        return None
    hctx = ctx if view is ana.main else _helper_context(ctx, view)
    values = _attr_stores(fn, param, e.attr)
    if not values or any(v is None for v in values):
        return None
    found = None
    for v in values:
        if _is_zero(v):
            continue
        src = _global_rank(hctx, v, fn, depth + 1)
        if src is None:
            return None
        found = found or src
    if found is None:
        return None
    if view is ana.main:
        return found
    ctx.memo("ddp003.remote", dict)[id(call)] = (view.path, hctx.src.node_range(found), _how(hctx, found), fn.name)
    return call


def _calls_by_function(ctx) -> dict[int, list[ast.Call]]:
    """id(function) -> the calls whose enclosing function it is, in ``sem.calls`` order (once per
    check: asked for each ``args.rank`` device site)."""
    def build():
        sem = ctx.sem
        out: dict[int, list[ast.Call]] = {}
        for c in sem.calls:
            fn = sem.enclosing_function(c)
            if fn is not None:
                out.setdefault(id(fn), []).append(c)
        return out
    return ctx.memo("ddp003.calls_by_function", build)


def _attr_stores(fn, param: str, attr: str) -> list:
    """The values ``fn`` stores into ``<param>.<attr>`` (an element of a tuple assigned from a tuple
    literal counts), None for a store whose value is unknown (augmented, unpacked from a call,
    ``setattr``)."""
    out = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                if _is_param_attr(t, param, attr):
                    out.append(n.value if isinstance(n, ast.Assign) else None)
                elif isinstance(t, (ast.Tuple, ast.List)):
                    for i, x in enumerate(t.elts):
                        if _is_param_attr(x, param, attr):
                            v = n.value
                            ok = isinstance(n, ast.Assign) and isinstance(v, (ast.Tuple, ast.List)) \
                                and len(v.elts) == len(t.elts) and not any(isinstance(y, ast.Starred) for y in t.elts)
                            out.append(v.elts[i] if ok else None)
        elif isinstance(n, ast.Constant) and n.value == attr:
            out.append(None)  # ``setattr(args, "rank", ...)`` / ``vars(args)["rank"] = ...``
    return out


def _is_param_attr(t, param: str, attr: str) -> bool:
    return isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) and t.value.id == param


def _under_branch(n, scope) -> bool:
    """``n`` sits under a condition, loop or ``try`` of ``scope`` (it may not have run)."""
    for a in Semantic.ancestors(n):
        if a is scope:
            return False
        if isinstance(a, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith)):
            return True
    return True


def _argument_default(ctx, dest: str):
    """The ``default=`` of the single ``add_argument`` of the file whose destination is ``dest``
    (``dest=`` or the first long option, dashes as underscores); None when there are none or several,
    or when the file also sets defaults some other way (``set_defaults``)."""
    def build():
        out: dict[str, list] = {}
        for c in ctx.sem.calls:
            f = c.func
            if not isinstance(f, ast.Attribute):
                continue
            if f.attr == "set_defaults":
                out.setdefault("__set_defaults__", []).append(c)
            if f.attr != "add_argument":
                continue
            d = get_arg(c, None, "dest")
            name = d.value if isinstance(d, ast.Constant) and isinstance(d.value, str) else None
            if name is None:
                opts = [a.value for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                longs = [o for o in opts if o.startswith("--")]
                pick = longs[0] if longs else (opts[0] if opts and not opts[0].startswith("-") else None)
                name = pick.lstrip("-").replace("-", "_") if pick else None
            if name:
                out.setdefault(name, []).append(c)
        return out
    idx = ctx.memo("ddp003.add_argument", build)
    if "__set_defaults__" in idx:
        return None
    calls = idx.get(dest, [])
    if len(calls) != 1:
        return None
    return get_arg(calls[0], None, "default")


def _init_rank(ctx, site, scope, rank_inits):
    """The ``rank=`` expression of an ``init_process_group`` call in the same function when ``site``
    is that same variable or attribute (``args.rank``, ``rank``) with no store to it between the
    two: the process group's rank is by definition the global one. Not when the value is a
    parameter as it stands (the index ``mp.spawn`` passes, one node), the local rank, a constant,
    or ``... % n``; an attribute of a namespace counts only when it comes from ``parse_args()``
    (or a helper returning it) or is stored in the function from such a value."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    inits = rank_inits.get(id(scope))
    if not inits:
        return None
    e = _unwrap_int(site)
    if not _ref_path(e):
        return None
    key = ast.dump(e)
    for init, r in inits:
        if ast.dump(r) != key:
            continue
        lo, hi = sorted((init.lineno, site.lineno))
        if _stored_between(ctx, scope, e, lo, hi):
            return None
        if _global_looking(ctx, e, scope, min(init.lineno, site.lineno)):
            return r
    return None


def _rank_inits(ctx) -> dict[int, list]:
    """id(function) -> [(its ``init_process_group`` call, the ``rank=`` expression, unwrapped)]."""
    out: dict[int, list] = {}
    for init in ctx.calls_to(D + "init_process_group"):
        r = get_arg(init, 4, "rank")
        if r is not None:
            out.setdefault(id(ctx.sem.scope_of(init)), []).append((init, _unwrap_int(r)))
    return out


def _unwrap_int(e):
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1:
        e = e.args[0]
    return e


def _ref_path(e) -> bool:
    """A name or a chain of attributes on a name (``args.rank``, ``self.cfg.rank``)."""
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name)


def _stores(ctx, scope, e):
    """Assignments in ``scope`` whose target is ``e`` (same name / attribute path): ``[(statement,
    plain)]``, ``plain`` when ``e`` is a whole target of an assignment."""
    key = ast.dump(e, annotate_fields=False).replace("Store()", "Load()")
    # one walk of the scope per check gives every target's stores (asked for each device site)
    return ctx.memo(("ddp003.stores", id(scope)), lambda: _store_index(scope)).get(key, [])


def _store_index(scope) -> dict[str, list]:
    """target (its ``ast.dump`` in load context) -> ``_stores`` of it, for every target in ``scope``."""
    out: dict[str, list] = {}
    for n in _bfs(scope):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            tgts = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in tgts:
                for x in _bfs(t):
                    if isinstance(x, (ast.Name, ast.Attribute)) and isinstance(x.ctx, ast.Store):
                        k = ast.dump(x, annotate_fields=False).replace("Store()", "Load()")
                        out.setdefault(k, []).append((n, x is t))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.NamedExpr, ast.With, ast.AsyncWith)):
            tgts = [i.optional_vars for i in n.items if i.optional_vars is not None] \
                if isinstance(n, (ast.With, ast.AsyncWith)) else [n.target]
            for x in (y for t in tgts for y in _bfs(t)):
                if isinstance(x, (ast.Name, ast.Attribute)) and isinstance(x.ctx, ast.Store):
                    k = ast.dump(x, annotate_fields=False).replace("Store()", "Load()")
                    out.setdefault(k, []).append((n, False))
    return out


def _bfs(node) -> list:
    """The nodes of ``ast.walk(node)``, in its order (a plain loop over the fields: a whole
    function is walked)."""
    out = [node]
    AST = ast.AST
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        for f in n._fields:
            v = getattr(n, f, None)
            if isinstance(v, AST):
                out.append(v)
            elif v.__class__ is list:
                for x in v:
                    if isinstance(x, AST):
                        out.append(x)
    return out


def _stored_between(ctx, scope, e, lo: int, hi: int) -> bool:
    return any(lo < n.lineno < hi for n, _ in _stores(ctx, scope, e))


def _global_looking(ctx, e, scope, before: int) -> bool:
    """``e`` holds a value that is neither the spawn index nor the local rank (see ``_init_rank``)."""
    if is_local_rank_expr(ctx, e, scope):
        return False
    stores = [(n, plain) for n, plain in _stores(ctx, scope, e) if n.lineno <= before]
    if stores:
        n, plain = max(stores, key=lambda p: p[0].lineno)
        if not plain or not isinstance(n, ast.Assign):
            return False
        return _computed_rank(ctx, n.value, scope)
    if isinstance(e, ast.Name):
        return False  # a parameter (or a global): the spawn index, as far as this function knows
    base = e
    while isinstance(base, ast.Attribute):
        base = base.value
    if len(_stores(ctx, scope, base)) != 1 or not isinstance(_stores(ctx, scope, base)[0][0], ast.Assign):
        return False
    return _from_parse_args(ctx, _stores(ctx, scope, base)[0][0].value)


def _computed_rank(ctx, v, scope) -> bool:
    """A rank value that is not a bare parameter, constant, local rank or ``x % n``: an arithmetic
    combination (``node_rank * gpus + gpu``) or a parsed argument."""
    v = _unwrap_int(v)
    if isinstance(v, ast.BinOp):
        return not isinstance(v.op, ast.Mod) and not is_local_rank_expr(ctx, v, scope)
    if isinstance(v, ast.Attribute) and _ref_path(v):
        return not is_local_rank_expr(ctx, v, scope) and _global_looking(ctx, v, scope, v.lineno)
    return False


def _from_parse_args(ctx, v, depth: int = 0) -> bool:
    """``parser.parse_args()`` / ``parse_known_args()[0]``, or a call of a module-level function of
    this file whose every return is one."""
    if depth > 2:
        return False
    if isinstance(v, ast.Subscript):
        v = v.value
    if not isinstance(v, ast.Call):
        return False
    if isinstance(v.func, ast.Attribute) and v.func.attr in ("parse_args", "parse_known_args"):
        return True
    if isinstance(v.func, ast.Name):
        fns = ctx.sem.functions.get(v.func.id, [])
        if len(fns) == 1 and isinstance(parent(fns[0]), ast.Module):
            rets = [n for n in ast.walk(fns[0]) if isinstance(n, ast.Return)]
            return bool(rets) and all(r.value is not None and _from_parse_args(ctx, r.value, depth + 1)
                                      for r in rets)
    return False


def _self_assigns(cls: ast.ClassDef) -> dict[str, list[ast.AST]]:
    """``self.<attr>`` -> the assignments to it anywhere in the class (one walk per class)."""
    out: dict[str, list[ast.AST]] = {}
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.setdefault(t.attr, []).append(n)
    return out


def _param_filled_with_rank(ctx, fn, param: str, depth: int):
    # the per-check index of ``f(...)`` / ``self.f(...)`` calls of the file's functions (``fn`` is
    # one of them), plain ``f(...)`` only; a function nobody calls here is answered first
    sites = _by_callee(ctx).get(fn.name)
    if sites:
        sites = [c for c in sites if c.func.__class__ is ast.Name]
    if not sites:
        return None
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param not in names:
        return None
    pos = names.index(param)
    first = None
    for c in sites:
        arg = get_arg(c, pos, param)
        if arg is None or any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords):
            return None
        src = _global_rank(ctx, arg, ctx.sem.scope_of(c), depth + 1)
        if src is None:
            return None
        first = first or src
    return first


def _is_env(ctx, node) -> bool:
    return isinstance(node, ast.Call) and ctx.qn(node) in ("os.environ.get", "os.getenv")


def _local_rank_name(ctx, site: ast.AST) -> str | None:
    """A ``local_rank`` variable the script already has (from ``LOCAL_RANK``), visible at ``site``."""
    sem = ctx.sem
    scope = sem.scope_of(site)
    for name in ("local_rank", "LOCAL_RANK", "local_gpu", "local_device_id"):
        kind, val = name_binding_kind(ctx, name, scope)
        if kind == "param" and name == "local_rank":
            return name
        if kind == "single" and val is not None and is_local_rank_expr(ctx, val, scope) \
                and (val.lineno, val.col_offset) < (site.lineno, site.col_offset):
            return name
    return None


def _make_fix(ctx, site: ast.AST):
    local = _local_rank_name(ctx, site)
    if local is not None:
        if ctx.text(site) == local:
            return None
        return ctx.fix(Applicability.UNSAFE, f"Use the local rank: `{local}`", [ctx.replace(site, local)])
    environ, imp = ctx.ref("os.environ")
    quote = '"'
    fs = parent(site)
    if isinstance(fs, ast.FormattedValue):
        js = parent(fs)
        text = ctx.text(js) if js is not None else ""
        body = text.lstrip("rRfFbB")
        if body.startswith(('"""', "'''")):
            return None
        quote = "'" if body.startswith('"') else '"'
    new = f"int({environ}[{quote}LOCAL_RANK{quote}])"
    if ctx.text(site) == new:
        return None
    return ctx.fix(Applicability.UNSAFE, f"Use the local rank: `{new}`", [ctx.replace(site, new), *imp])
