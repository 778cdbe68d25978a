from __future__ import annotations

import ast
import os

from ..model import Applicability, Severity
from ..registry import Rule
from ..flow.models import distributed_program
from ..flow.process_entries import starts_group_processes
from ..semantic import get_arg
from ..flow.modern import hub
from ..flow.namespaces import live_option_uses, parser_roots, passed_option_use, stored_option_uses
from ..flow.rank_kinds import (
    local_rank_env_reads, local_rank_options, option_dest, option_strings, program_views,
    self_launched,
)
from ..flow.testing import is_test_file
from ._rank_callers import importer_views


class LocalRankOnlyFromArgv(Rule):
    """
    ## What it does
    Checks for a script whose local rank comes only from a `--local_rank` / `--local-rank`
    command-line option (any `dest` spelling) whose default is not read from the environment, when
    nothing in the program reads the `LOCAL_RANK` environment variable (`os.environ["LOCAL_RANK"]`,
    `os.getenv("LOCAL_RANK")`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`,
    `dist.get_node_local_rank()`), and the option's value is used: as a device (`set_device`,
    `torch.device`, `.to` / `.cuda`, DDP's `device_ids`), in `init_process_group`, or in a rank
    test (`args.local_rank == 0`, `!= -1`).

    The program is the file and the project modules it imports, transitively: an environment read
    in any of them (an `args.local_rank = int(os.environ["LOCAL_RANK"])` in a setup helper of
    another module) clears the option; a read of the option's value in any of them counts as a
    use. A module that imports this one counts only when no module of the program uses the option:
    then the modules of the project that call the function declaring it (`args = parse_args()` in
    `initialize.py`, the options added by a helper of `arguments.py`) are where it is used, and a
    `LOCAL_RANK` read in the program one of them runs (its own imports) clears the option. From
    there the parsed namespace is followed by value (`flow/namespaces.py`): passed to a project
    function (`main(get_parser().parse_args())`, whose `main(args)` calls `init_distributed(args)`
    of a third module), as an argument bound to a parameter, a few calls deep, into constructors and
    methods (`self.cfg = cfg`); a read of the option there counts as a use. The value also flows
    through an object's attribute: `config.GPU = args.local_rank` in a helper of a configuration
    module stores it into the object the helper is given, and a read `cfg.GPU` of that same object
    (by value: the construction both come from, through the helper that returns it, a tuple return
    `return args, config`, and the parameters it is passed in) counts as a use. A module that only
    declares the option need not import torch; some module of the program must. Reads are found by value (the `os.environ`
    expressions of the code), never by a word in a comment or a string. A program that starts its own processes (`mp.spawn`, or a `multiprocessing.Process(target=f)`
    whose `f` creates the process group) is not flagged: no
    launcher is involved. A program that imports `deepspeed` is not flagged either: the DeepSpeed
    launcher passes `--local_rank=N` itself. Nor a program that stores a rank read from the
    environment into the option's attribute (`args.local_rank = int(os.getenv("RANK", 0))` in a
    setup helper, through names and tuple assignments): the parsed value is replaced, and a
    global rank used as a device is DDP003's finding. A read that the option's value no longer
    reaches is no use: one that a store to the attribute before it replaces on every path
    (`args.local_rank = torch.device(f"cuda:{args.gpu}")`, also in a helper, of this or another
    module, that the namespace is passed to and that makes the store on every call), unless the
    new value is computed from the old one (`torch.device("cuda", args.local_rank)`); a store in
    one branch only leaves the other path's default. A use found only in another module counts
    when this file's program is distributed (`flow.models.distributed_program`: it creates a
    group, wraps a model or spawns ranks, itself or through the project's functions): a
    single-process server that only shares a helper module with the training script is not
    flagged. Test files are skipped.

    ## Why is this bad?
    `torchrun` (and `torch.distributed.run`, SLURM, mpirun) never pass `--local-rank`: they set
    `LOCAL_RANK` in the environment. A required option makes argparse exit at once; otherwise
    every process keeps the option's default, so with `0` every
    rank pins GPU 0 (all ranks on one GPU: out of memory, or NCCL's "Duplicate GPU detected"), and
    with `-1` / `None` the script silently trains without `DistributedDataParallel` on each rank.
    The deprecated `torch.distributed.launch` passes the option, but since torch 2.0 it spells it
    `--local-rank`, which a parser that declares only `--local_rank` rejects:

    ```
    error: unrecognized arguments: --local-rank=0
    ```

    ## Example
    ```python
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    ```

    ## Use instead
    ```python
    parser.add_argument("--local_rank", "--local-rank", type=int,
                        default=int(os.environ.get("LOCAL_RANK", 0)))
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    ```

    ## Fix safety
    The fix makes the default `int(os.environ.get("LOCAL_RANK", <old default>))` (for a `None`
    default: `LOCAL_RANK` when it is set, else `None`), adding `import os` if needed, and adds the
    other spelling (`--local-rank` or `--local_rank`) as a second option string when it is
    missing; a `required=True` option becomes optional (argparse ignores the default of a required
    option). It is **unsafe**: under a launcher the script now uses the launcher's local rank
    where it used the default, so a script that ran non-distributed with `-1` now joins the process
    group (which is the intent, but changes what runs). Adding the second spelling alone would be
    safe; it is part of the same edit.
    """

    code = "DDP006"
    name = "local-rank-only-from-argv"
    severity = Severity.ERROR
    fix_availability = "always"
    requires_text = ("--local_rank", "--local-rank")
    # a configuration module that only declares the option need not spell "torch"; the finding
    # then needs a program that imports it (``_imports_torch``)
    base_text = ("torch", "add_argument", "dataclass")

    def finish(self, ctx) -> None:
        if is_test_file(ctx.filename):
            return
        _field_options(self, ctx)
        opts = local_rank_options(ctx.sem)
        if not opts:
            return
        an, view = hub(ctx)
        program = program_views(an, view)
        if _cleared(program, hub=an):
            return
        here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
            else None
        for c in opts:
            dest = option_dest(c, ctx.sem)
            if not dest:
                continue
            use, runs = _first_use(an, program, dest) or _stored_use(an, program, program, dest), program
            if use is None:
                # the modules that call the function declaring the option (``parse_args()`` in
                # ``initialize.py``) read what it parses; the programs they run (their own
                # imports) clear it as this one does
                importers = importer_views(ctx, an, c)
                mods = [m for m in (an.view_of(v.path) for v in importers) if m is not None]
                runs = [*program, *{id(x): x for m in mods for x in program_views(an, m)}.values()]
                # the importers' own reads count in doubt (a key it cannot tell); in the modules
                # their programs run, only a read of a known local-rank key does (a YAML loader's
                # `os.environ.get(name)` for `${NAME}` placeholders is no local-rank read)
                if any(local_rank_env_reads(v) for v in importers) or _cleared(runs[len(program):], known=True, hub=an):
                    continue
                use = _first_use(an, importers, dest) or _stored_use(an, runs, importers, dest)
                if use is None and mods:
                    # the namespace they parse, passed on to a helper of a third module
                    # (``main(get_parser().parse_args())`` -> ``init_distributed(args)``)
                    roots = parser_roots(an, view, c)
                    use = next((u for m in mods if (u := passed_option_use(an, m, dest, roots))), None)
            if use is None or not _imports_torch(runs) or _env_overwritten(an, runs, dest):
                continue
            uv, node, how = use
            if uv is not view and runs is program and not distributed_program(ctx, an):
                continue  # a use borrowed from another module, in a program that makes no group
            spell = next(o for o in option_strings(c) if o in ("--local_rank", "--local-rank"))
            default = get_arg(c, None, "default")
            dtext = ctx.text(default) if default is not None else "None"
            where = f"line {node.lineno}" if uv is view else \
                f"{os.path.relpath(uv.path, here) if here and uv.path else uv.path}:{node.lineno}"
            related = [(node, "the option's value is used here")] if uv is view else \
                [("file", uv.path, _range(uv, node), "the option's value is used here")]
            launch = "" if "--local-rank" in option_strings(c) else (
                "; and since torch 2.0 `torch.distributed.launch` passes `--local-rank`, which this parser rejects")
            keeps = f"argparse exits, the option being required (its value is used as {how}, {where})" \
                if _required(c) is not None else f"every process keeps `{dtext}` (used as {how}, {where})"
            ctx.report(
                c,
                f"the local rank comes only from `{spell}` (default `{dtext}`) and nothing reads `LOCAL_RANK`: "
                f"torchrun never passes `--local-rank`, so {keeps}"
                f"{launch}. Default it to the environment's `LOCAL_RANK`",
                related=related,
                fix=_make_fix(ctx, c, default),
            )


def _field_options(rule, ctx) -> None:
    """A configuration dataclass field that declares the option (a `--local_rank` string in its
    `field(metadata=...)`, which the project's dataclass-to-argparse code turns into the option)
    with a constant default, which a torchrun setup of a module naming the class leaves at that
    default while the program pins it as the device (``flow/config_devices.device_default_gaps``:
    the setup's path only; another launcher's `SLURM_LOCALID` does not clear it)."""
    import ast

    from ..flow.config_devices import device_default_gaps, set_in
    from ..flow.rank_kinds import LOCAL_RANK_OPTIONS
    from ..flow.records import fields, is_record, record_field
    from ._common import project_files_naming

    an, view = hub(ctx)
    decls = {}
    for cls in view.classes.values():
        if not is_record(view, cls, bases=True):
            continue
        for s in fields(cls):
            got = record_field(view, cls, s.target.id, bases=True)
            if got is None or got[2] is None or not (isinstance(got[1], ast.Constant) and type(got[1].value) is int):
                continue
            spelled = [v.value for v in got[2].values if isinstance(v, ast.Constant) and v.value in LOCAL_RANK_OPTIONS]
            if spelled:
                decls[s] = (cls, spelled[0], got[1])
    if not decls:
        return
    files = project_files_naming(ctx, sorted({c.name for c, _s, _d in decls.values()})) or []
    done = set()
    for _c, v in files:
        if v is view:
            continue
        for (sv, fn, _p, _cls, _st, read), attr, (cv, decl), (uv, use) in device_default_gaps(an, program_views(an, v)):
            if cv is not view or decl not in decls or decl in done:
                continue
            # any module of the project that may set the field (a caller storing `LOCAL_RANK`)
            if set_in(an, [w for _c, w in (project_files_naming(ctx, [attr]) or [])], view, decls[decl][0], attr):
                continue
            done.add(decl)
            _cls, spell, default = decls[decl]
            here = os.path.dirname(os.path.abspath(ctx.filename))
            rel = os.path.relpath(sv.path, here) if sv.path else sv.path
            ctx.report(
                decl,
                f"the local rank comes only from `{spell}` (field `{attr}`, default `{ctx.text(default)}`): the "
                f"torchrun setup `{fn.name}` ({rel}:{read.lineno}) never sets it and torchrun never passes "
                f"`--local-rank`, so every process keeps `{ctx.text(default)}` as its CUDA device. Default it to the "
                f"environment's `LOCAL_RANK`",
                related=[("file", sv.path, _range(sv, read), "the torchrun setup"),
                         ("file", uv.path, _range(uv, use), "the field pinned as the device")],
            )


def _cleared(program, known: bool = False, hub=None) -> bool:
    """The program reads ``LOCAL_RANK`` (``known``: with a key it can tell), starts its own
    processes, or imports ``deepspeed`` (whose launcher passes ``--local_rank=N``)."""
    program = list(program)
    return any(local_rank_env_reads(v, known) for v in program) or self_launched(program) is not None or (
        hub is not None and starts_group_processes(hub, program) is not None) or any(
        m.split(".", 1)[0] == "deepspeed" for v in program for m, _lvl, _a in v.imports.values())


def _env_overwritten(an, views, dest: str) -> bool:
    """A module of the program stores a rank read from the environment into the option's attribute
    (``args.local_rank = int(os.getenv("RANK", 0))``, through names bound to it): the parsed value is
    replaced, so processes do not all keep the default (a global rank used as a device is DDP003's)."""
    from ..flow.rank_kinds import GLOBAL_RANK_ENV, LOCAL_RANK_ENV, env_keys_of

    for v in views:
        for st in v.sem.by_type.get(ast.Assign, ()):
            for t in st.targets:
                pairs = [(t, st.value)]
                if isinstance(t, ast.Tuple) and isinstance(st.value, ast.Tuple) and len(t.elts) == len(st.value.elts):
                    pairs = list(zip(t.elts, st.value.elts))  # ``args.local_rank, args.world = rank, world``
                for target, value in pairs:
                    if isinstance(target, ast.Attribute) and target.attr == dest:
                        keys = env_keys_of(an, v, value, st)
                        if keys and keys <= (GLOBAL_RANK_ENV | LOCAL_RANK_ENV):
                            return True
    return False


def _imports_torch(views) -> bool:
    """A module of the program imports torch, anywhere in it (the option's module need not)."""
    return any(v.sem.imports_module("torch") for v in views)


def _first_use(an, views, dest: str):
    """(view, read, how) of the first use of the option's value in the first of ``views`` that has
    one (a read that a reassignment of the attribute before it on every path does not replace)."""
    for v in views:
        got = live_option_uses(an, v, dest)
        if got:
            n, how = min(got, key=lambda u: (u[0].lineno, u[0].col_offset))
            return v, n, how
    return None


def _stored_use(an, stores_in, reads_in, dest: str):
    """(view, read, how) of the first use of an attribute that an object holds the option in
    (``config.GPU = args.local_rank`` in a helper, ``config.GPU`` read by its caller;
    ``flow/namespaces.stored_option_uses``), in the first of ``reads_in`` that has one."""
    got = stored_option_uses(an, list(stores_in), list(reads_in), dest)
    for v in reads_in:
        mine = [(n, how) for w, n, how in got if w is v]
        if mine:
            n, how = min(mine, key=lambda u: (u[0].lineno, u[0].col_offset))
            return v, n, how
    return None


def _range(view, node):
    from ..source import SourceText

    return SourceText(view.text).node_range(node)


def _make_fix(ctx, call: ast.Call, default):
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return None  # ``**kwargs`` / ``*opts`` may hold a default or the other spelling already
    environ, imp = ctx.ref("os.environ")
    if default is None or (isinstance(default, ast.Constant) and default.value is None):
        new = f'int({environ}["LOCAL_RANK"]) if "LOCAL_RANK" in {environ} else None'
    else:
        new = f'int({environ}.get("LOCAL_RANK", {ctx.text(default)}))'
    edits = []
    req = _required(call)
    if req is not None:
        # ``required=True`` ignores any default: the option must become optional
        edits.append(ctx.replace(req, f"default={new}" if default is None else "required=False"))
        if default is not None:
            edits.append(ctx.replace(default, new))
    elif default is not None:
        edits.append(ctx.replace(default, new))
    else:
        last = call.keywords[-1] if call.keywords else call.args[-1]
        edits.append(_insert_after_node(ctx, last, f", default={new}"))
    opts = option_strings(call)
    strs = [a for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if "--local-rank" not in opts:
        edits.append(_insert_after_node(ctx, strs[-1], ', "--local-rank"'))
    elif "--local_rank" not in opts:
        edits.append(_insert_after_node(ctx, strs[-1], ', "--local_rank"'))
    return ctx.fix(Applicability.UNSAFE, "Default the local rank to the environment's `LOCAL_RANK` "
                   "and accept both spellings of the option", [*edits, *imp])


def _required(call: ast.Call):
    """The ``required=True`` keyword of an ``add_argument`` call, else None."""
    return next((k for k in call.keywords if k.arg == "required" and isinstance(k.value, ast.Constant)
                 and k.value.value is True), None)


def _insert_after_node(ctx, node, text: str):
    from ..model import Edit, Range

    end = ctx.src.node_range(node).end
    return Edit(Range(end, end), text)
