from __future__ import annotations

import ast

from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import parent
from ..flow.exclusive import never_follows
from ..flow.rank import rank0_guarded
from ._flow import scopes, scopes_with


class WriteBeforeFolderMade(Rule):
    """
    ## What it does
    Checks for a file that the main rank writes into a folder (`if rank == 0:` ...
    `open(os.path.join(run_dir, "config.json"), "w")`, `torch.save(cfg, run_dir / "args.pt")`,
    `OmegaConf.save(cfg, f=...)`) before the same function creates that folder
    (`os.makedirs(run_dir, exist_ok=True)`, `Path(run_dir).mkdir(...)`, or a project helper that does,
    in this module or another: `prepare_run_dir(cfg.run_dir)`), with no creation of the folder
    before the write.

    The writes and folder creations are those of `flow.fs_effects`, followed into project helpers,
    methods and other modules, with their paths rewritten in the caller's terms, so the same folder
    is recognised through names, tuple assignments, `args.x` / `cfg.x` attributes, `os.path.join`
    and `Path / x`. Not flagged: a write whose helper makes its folder first (`os.makedirs(dirname(p),
    exist_ok=True)` inside it), a write and a creation in the same loop (a later round finds the
    folder) or in the two branches of one `if` (the creation does not follow the write), a write
    whose way on leaves the function before the creation (`if mode == "merge": ... write ...;
    return` and the creation after that `if`: no run makes the folder after that write), a write
    on every rank (not the set-up step this rule is about), a write into a folder that a
    parameter names when every call of the function in its module comes after the caller made
    that folder itself (`Path(args.out).mkdir(...)` in the `__main__` block, then `main(args)`; a
    helper's creation does not count: it may come after a write of the helper's own), or into the
    folder of a command-line option (`args.output_dir` of `add_argument("--output_dir")`) when every
    shell script of the project that launches the file makes the folder it passes first (`mkdir -p
    $OUT`, then `torchrun main.py --output_dir $OUT`; at least one such launch, and none without).

    ## Why is this bad?
    The creation after the write says the folder may not exist when the function starts (a new run
    directory). Then the main rank's write fails with
    ```
    FileNotFoundError: [Errno 2] No such file or directory: 'runs/exp1/config.json'
    ```
    on every fresh run, while the other ranks go on into the collectives and wait for a rank that
    has died (a hang until the timeout, not a clear error). It never shows when the folder is left
    over from an earlier run, which is how it survives testing.

    ## Example
    ```python
    def main(cfg):
        if dist.get_rank() == 0:
            with open(os.path.join(cfg.run_dir, "config.json"), "w") as fh:
                json.dump(vars(cfg), fh)
        os.makedirs(cfg.run_dir, exist_ok=True)
    ```

    ## Use instead
    ```python
    def main(cfg):
        os.makedirs(cfg.run_dir, exist_ok=True)
        if dist.get_rank() == 0:
            with open(os.path.join(cfg.run_dir, "config.json"), "w") as fh:
                json.dump(vars(cfg), fh)
    ```

    ## Fix safety
    There is no fix: moving the creation up may move other work it does (a probe file, a check
    that fails) before code that must run first.
    """

    code = "DDP015"
    name = "write-before-folder-made"
    severity = Severity.WARNING
    # a main-rank test (``rank_tests.polarity``): the vocabulary DDP216's gate spells
    requires_text = (NoCase("rank"), NoCase("master"), NoCase("main"), NoCase("global"), NoCase("process"),
                     NoCase("local"), NoCase("chief"), NoCase("lead"), NoCase("primary"), NoCase("root"),
                     NoCase("world"), "should_save", "should_log", "logging_process", "process_index")

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.fs_effects import MKDIR, WRITE, effects_at, folder_of
        from ..flow.fs_index import scope_may_have
        from ..flow.fs_races import effect_key

        an = None
        tested = scopes_with(ctx, _TESTS)
        for scope in scopes(ctx):
            calls = sorted(ctx.sem.scope_calls(scope), key=lambda c: (c.lineno, c.col_offset))
            if len(calls) < 2:
                continue
            if not getattr(scope, "decorator_list", None) and scope not in tested:
                continue  # no test and no decorator: no write of this scope runs on the main rank alone
            if an is None:
                an = for_context(ctx)
            if not scope_may_have(ctx, an, scope, calls, _BOTH):
                continue  # no call here may write or make a folder (before binding their effects)
            writes, made = [], []  # (call, effect, folder key) / (call, effect, folder keys it makes)
            unknown = None  # the first call that makes a folder this cannot key (``dirname(p)``)
            found = [(c, e) for c in calls for e in effects_at(ctx, an, c) if e.kind in (MKDIR, WRITE)]
            if not any(e.kind == MKDIR for _c, e in found) or not any(e.kind == WRITE for _c, e in found):
                continue
            for c, e in found:
                k = effect_key(ctx, an, e)
                if e.kind == MKDIR and k is None and unknown is None:
                    unknown = (c.lineno, c.col_offset)
                if k is None:
                    continue
                if e.kind == WRITE and not e.folder and folder_of(k) is not None:
                    writes.append((c, e, folder_of(k)))
                elif e.kind == MKDIR:
                    made.append((c, e, _made_keys(k, folder_of)))
            if not writes or not made:
                continue
            reported = set()  # one finding a call (a helper may write several files there)
            for c, e, k in writes:
                if id(c) in reported or rank0_guarded(ctx, c, callers=False) is not True:
                    continue
                at = (c.lineno, c.col_offset)
                if unknown is not None and unknown <= at:
                    continue  # a folder made before (or by the writing call) may be this one
                if any(k in keys and (m.lineno, m.col_offset) <= at for m, _e, keys in made):
                    continue  # made before (or by the writing call itself)
                if _made_by_callers(ctx, an, scope, k):
                    continue  # every call of this function comes after the caller made the folder
                if _made_by_launchers(ctx, an, k):
                    continue  # every shell launcher makes the folder it passes for the option
                later = [(m, me) for m, me, keys in made if k in keys and (m.lineno, m.col_offset) > at
                         and not _same_loop(c, m, scope) and not never_follows(c, m, scope)]
                if later:
                    reported.add(id(c))
                    self._report(ctx, c, e, *later[0])

    def _report(self, ctx, c, e, m, me) -> None:
        what = f"`{ctx.text(c.func)}(...)`"
        if e.via:
            what += f" (through `{' -> '.join(e.via)}`: `{e.api}`)"
        how = f"`{ctx.text(m.func)}(...)`"
        if me.via:
            how += f" (through `{' -> '.join(me.via)}`: `{me.api}`)"
        ctx.report(
            c,
            f"the main rank writes into a folder with {what} before {how} on line {m.lineno} creates that "
            f"folder: on a fresh run the folder does not exist yet, the write raises FileNotFoundError on "
            f"the main rank and the other ranks wait for it; create the folder first",
            related=[(m, "the folder is created here")],
        )


# what ``rank0_guarded`` reads in a function's own body (with an early exit's ``if`` and a decorator)
_TESTS = (ast.If, ast.IfExp, ast.While)
_BOTH = frozenset({"mkdir", "write"})  # fs_effects.MKDIR, WRITE


def _made_by_callers(ctx, an, fn, k: str) -> bool:
    """The folder ``k`` is a parameter of the module-level function ``fn`` (or an attribute of
    one: ``param:args.output_dir``), and every call of ``fn`` in this module comes after a creation
    of the folder its argument names, in the caller's own scope (``Path(args.output_dir).mkdir(...)``
    in the ``__main__`` block, then ``main(args)``)."""
    from ..flow.fs_effects import _PARAM, MKDIR, effects_at, folder_of, path_key
    from ..flow.fs_races import effect_key
    from ..flow.helper_calls import bind_args, calls_named

    m = _PARAM.fullmatch(k)
    if m is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(parent(fn), ast.Module):
        return False
    sites = [c for c in calls_named(ctx, fn.name) if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    if not sites:
        return False
    for c in sites:
        caller = ctx.sem.scope_of(c)
        arg = bind_args(c, fn).get(m.group(1))
        if arg is None or caller is fn:
            return False
        for a in m.group(2).split(".")[1:]:
            arg = ast.copy_location(ast.Attribute(value=arg, attr=a, ctx=ast.Load()), arg)
        ck = path_key(ctx, arg)
        if ck is None:
            return False
        at = (c.lineno, c.col_offset)
        # the caller's own creation (a helper's may follow a write of its own, on the main rank)
        if not any(e.kind == MKDIR and not e.via and ck in _made_keys(effect_key(ctx, an, e) or "", folder_of)
                   for d in ctx.sem.scope_calls(caller) if (d.lineno, d.col_offset) < at
                   for e in effects_at(ctx, an, d)):
            return False
    return True


def _made_by_launchers(ctx, an, k: str) -> bool:
    """The folder ``k`` is a command-line option of this module (``args.output_dir`` of
    ``add_argument("--output_dir")``), and every shell script of the project that launches this
    file makes the folder it passes for the option first (``mkdir -p $OUT`` then ``torchrun
    main.py --output_dir $OUT``: ``flow.launchers``)."""
    import re

    from ..flow.cli_options import argparse_options, option_dest, option_strings
    from ..flow.launchers import launches_make_option_folder

    m = re.fullmatch(r"(?:attr|param):[A-Za-z_]\w*(?:\.\w+)*\.(\w+)", k)
    if m is None:
        return False
    opts = [o for c in argparse_options(ctx.sem) if option_dest(c, ctx.sem) == m.group(1)
            for o in option_strings(c) if o.startswith("-")]
    return bool(opts) and launches_make_option_folder(ctx.filename, tuple(opts), an)


def _made_keys(k: str, folder_of) -> frozenset:
    """The folders a creation of ``k`` makes: ``k`` and the folders above it in its key
    (``os.makedirs(join(run, "ckpt"))`` makes ``run`` too)."""
    out = {k}
    for _ in range(4):
        k = folder_of(k)
        if k is None:
            break
        out.add(k)
    return frozenset(out)


def _same_loop(a, b, scope) -> bool:
    """``a`` and ``b`` sit in one loop of ``scope``: a later round finds the folder made."""
    p = parent(a)
    while p is not None and p is not scope:
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While)):
            q = parent(b)
            while q is not None and q is not scope:
                if q is p:
                    return True
                q = parent(q)
        p = parent(p)
    return False
