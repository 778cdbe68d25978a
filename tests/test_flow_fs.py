"""flow.fs_effects (paths and filesystem effects), flow.lifecycle (init/destroy with path
conditions) and flow.sync: the queries DDP113, DDP115, DDP215 and DDP216 are built on."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.flow import Analysis
from ddp_lint.analysis.flow.fs_effects import (DOWNLOAD, EXTRACT, MKDIR, READ, WRITE, call_effects, folder_key,
                                               path_key, view_ctx)
from ddp_lint.analysis.flow.lifecycle import events
from ddp_lint.analysis.flow.sync import synchronised_between
from ddp_lint.analysis.semantic import Semantic


def _analysis(src: str) -> Analysis:
    src = textwrap.dedent(src)
    sem = Semantic(ast.parse(src))
    return Analysis("<test>", sem, src)


def _calls(an, name):
    return [c for c in an.main.sem.calls if ast.unparse(c.func).endswith(name)]


def test_path_keys_follow_names_tuples_and_joins():
    an = _analysis("""
        import os
        def f(args):
            root, other = args.out, "x"
            p = os.path.join(root, "vocab.json")
            open(p, "w")
            open(os.path.join(args.out, "vocab.json"))
            open(f"{root}/vocab.json")
    """)
    v = view_ctx(an.main)
    w, r1, r2 = _calls(an, "open")
    k = path_key(v, w.args[0])
    assert k == path_key(v, r1.args[0]) == "join(param:args.out,'vocab.json')"
    assert folder_key(v, w.args[0]) == "param:args.out" == folder_key(v, r2.args[0])


def test_call_effects_vocabulary():
    an = _analysis("""
        import tarfile, torch, torchvision, os
        from torch.hub import load_state_dict_from_url
        def f(root, a):
            torchvision.datasets.CIFAR10(root, download=True)
            torchvision.datasets.CIFAR10(root, download=False)
            with tarfile.open(a) as t:
                t.extractall(root)
            os.makedirs(root, exist_ok=True)
            torch.save({}, a)
            load_state_dict_from_url("u")
            x = {}
            x.extractall(root)
    """)
    v = view_ctx(an.main)
    kinds = [[e.kind for e in call_effects(v, c)] for c in an.main.sem.calls]
    flat = [k for ks in kinds for k in ks]
    assert flat == [DOWNLOAD, READ, EXTRACT, MKDIR, WRITE, DOWNLOAD]


def test_lifecycle_conditions_and_helpers():
    an = _analysis("""
        import os
        import torch.distributed as dist
        def setup():
            if "RANK" not in os.environ:
                return
            dist.init_process_group("nccl")
        def main(args):
            if args.distributed:
                dist.init_process_group("nccl")
            setup()
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.destroy_process_group()
    """)
    main = an.main.defs["main"]
    evs = events(an, an.main, main)
    assert [(e.kind, e.sure, len(e.conds)) for e in evs] == [("init", "must", 1), ("init", "may", 0),
                                                            ("destroy", "must", 0)]


def test_sync_between():
    an = _analysis("""
        import torch.distributed as dist
        def f(rank, t, p):
            if rank == 0:
                open(p, "w")
            dist.all_reduce(t)
            open(p)
            open(p)
    """)
    fn = an.main.defs["f"]
    guard = fn.body[0]
    first, second = _calls(an, "open")[1:]
    assert synchronised_between(an, an.main, fn, guard, first) is not None
    assert synchronised_between(an, an.main, fn, first, second) is None


def test_bound_value_of_a_node_outside_the_tree_is_unknown():
    # a path expression rewritten in a caller's terms has no parent in the module: no binding is
    # known for it (a crash in DDP215 on Megatron-LM's tests before)
    from types import SimpleNamespace

    from ddp_lint.analysis.flow.fs_effects import bound_value

    sem = Semantic(ast.parse("root = '/data'\ndef f():\n    return root\n"))
    detached = ast.Name(id="root", ctx=ast.Load(), lineno=3, col_offset=11)
    assert bound_value(SimpleNamespace(sem=sem), "root", detached) is None


def test_parameter_polarity_in_a_project_module_context():
    # a project module's context (``view_ctx``) has no ``src``: the polarity of a parameter test
    # lists the function's call sites from the view's text (it crashed rules on diffusers)
    from ddp_lint.analysis.flow.calls import call_sites_here
    from ddp_lint.analysis.flow.rank_tests import polarity

    an = _analysis("""
        import torch
        import torch.distributed as dist
        def save(state, main):
            if main:
                torch.save(state, "ckpt.pt")
        def train(state):
            save(state, dist.get_rank() == 0)
    """)
    v = view_ctx(an.main)
    fn = v.sem.functions["save"][0]
    assert len(call_sites_here(v, fn)) == 1
    test = fn.body[0].test
    assert polarity(v, test, fn) is True


def test_kept_main_rank_flags_in_a_project_module_context():
    # ``rank_flags.main_flag``: a flag narrowed to the main rank where the group is created, and an
    # options entry cleared on the other ranks by the constructor, read as main-rank tests; a flag
    # cleared on the main rank is not one
    from ddp_lint.analysis.flow.rank_tests import polarity

    an = _analysis("""
        import torch.distributed as dist
        def run(multi):
            say = True
            if multi:
                dist.init_process_group("nccl")
                say = dist.get_rank() == 0
            if say:
                pass
        def wrong(multi):
            say = True
            if multi:
                dist.init_process_group("nccl")
                if dist.get_rank() == 0:
                    say = False
            if say:
                pass
        class T:
            def __init__(self, opts):
                self.opts = opts
                if dist.get_rank() != 0:
                    self.opts.out = None
            def save(self):
                if self.opts.out is not None:
                    pass
    """)
    v = view_ctx(an.main)
    run, wrong = v.sem.functions["run"][0], v.sem.functions["wrong"][0]
    assert polarity(v, run.body[-1].test, run) is True
    assert polarity(v, wrong.body[-1].test, wrong) is None
    save = next(n for n in ast.walk(v.sem.tree) if isinstance(n, ast.FunctionDef) and n.name == "save")
    assert polarity(v, save.body[0].test, save) is True
