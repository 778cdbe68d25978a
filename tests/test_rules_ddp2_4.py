"""DDP2xx-DDP4xx: the issue's table (severity, default, fix applicability) and behaviour that the
golden fixtures cannot express (fix applicability per finding, guards through helpers, ranges)."""
from __future__ import annotations

import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.model import Applicability, Severity
from ddp_lint.analysis.registry import all_rules

# code -> (name, default on, fix applicability or None)
TABLE = {
    "DDP201": ("ddp-module-not-on-device", True, Applicability.UNSAFE),
    "DDP202": ("save-on-every-rank", True, None),
    "DDP203": ("load-without-map-location", True, Applicability.UNSAFE),
    "DDP204": ("ddp-wrapper-state-dict", True, Applicability.SAFE),
    "DDP205": ("accumulation-without-no-sync", True, None),  # on since round 2 (docs/false-positives.md)
    "DDP206": ("batchnorm-without-syncbn", False, None),
    "DDP301": ("sampler-without-set-epoch", True, Applicability.SAFE),
    "DDP302": ("shuffle-with-sampler", True, Applicability.SAFE),
    "DDP303": ("no-distributed-sampler", True, Applicability.UNSAFE),
    "DDP401": ("spawn-args-not-tuple", True, Applicability.SAFE),
    "DDP402": ("spawn-signature", True, None),
    "DDP403": ("spawn-without-main-guard", True, None),
}

TYPICAL = textwrap.dedent('''\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import models


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = models.resnet18()
        model = DDP(model, device_ids=[local_rank])
        ds = list(range(10))
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=2, sampler=sampler, shuffle=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            for i, x in enumerate(loader):
                model(x).sum().backward()
                if (i + 1) % 4 == 0:
                    opt.step()
            torch.save(model.state_dict(), "ckpt.pt")
        state = torch.load("ckpt.pt")
        model.module.load_state_dict(state)


    if __name__ == "__main__":
        main()
''')

SPAWNED = textwrap.dedent('''\
    import torch.multiprocessing as mp


    def worker(world_size, rank):
        pass


    mp.spawn(worker, args=(4), nprocs=4)
''')


def _check(text, codes):
    return check_source(text, "t.py", Settings(select=codes)).findings


def test_table_matches_issue():
    rules = all_rules()
    for code, (name, on, fix) in TABLE.items():
        r = rules[code]
        assert r.name == name
        assert r.default_enabled is on, code
        if not on:
            assert r.severity is Severity.INFO, code
        assert (r.fix_availability == "never") is (fix is None), code


def test_typical_script_findings_and_applicability():
    found = {}
    for f in _check(TYPICAL, list(TABLE)) + _check(SPAWNED, list(TABLE)):
        found.setdefault(f.code, []).append(f)
    assert set(found) == set(TABLE) - {"DDP303"}, sorted(found)  # it has a sampler: DDP303 stays silent
    for code, fs in found.items():
        want = TABLE[code][2]
        for f in fs:
            if want is None:
                assert f.fix is None, code
            else:
                assert f.fix is not None and f.fix.applicability is want, code


def test_default_selection_excludes_info_rules():
    codes = {f.code for t in (TYPICAL, SPAWNED) for f in check_source(t, "t.py").findings}
    assert "DDP206" not in codes  # DDP205 is on by default (info), DDP206 stays off
    assert {"DDP201", "DDP202", "DDP301", "DDP401", "DDP402", "DDP403"} <= codes


def test_set_epoch_reported_on_loop_header_only():
    (f,) = [f for f in _check(TYPICAL, ["DDP301"])]
    assert f.range.start.line == f.range.end.line == TYPICAL.splitlines().index("    for epoch in range(10):")
    assert f.related and "DistributedSampler" in f.related[0].message


def test_guard_through_helper_defined_later():
    text = textwrap.dedent('''\
        import torch
        import torch.distributed as dist

        def main():
            dist.init_process_group("nccl")
            if is_master():
                torch.save({}, "x.pt")

        def is_master():
            return not dist.is_initialized() or dist.get_rank() == 0

        main()
    ''')
    assert not _check(text, ["DDP202"])
    assert len(_check(text.replace("if is_master():", "if True:"), ["DDP202"])) == 1


@pytest.mark.parametrize("guard", [
    "if rank == 0:", "if 0 == rank:", "if args.rank % ngpus == 0:", "if args.local_rank in [-1, 0]:",
    "if not dist.is_initialized() or dist.get_rank() == 0:", "if rank == 0 and epoch % 5 == 0:",
    "if accelerator.is_main_process:", "if utils.is_main_process():", "if master_process:",
])
def test_rank0_guards(guard):
    text = textwrap.dedent(f'''\
        import torch
        import torch.distributed as dist

        def main(args, rank, ngpus, epoch, accelerator, utils, master_process):
            dist.init_process_group("nccl")
            {guard}
                torch.save({{}}, "x.pt")

        main(*[None] * 7)
    ''')
    assert not _check(text, ["DDP202"])


@pytest.mark.parametrize("guard", ["if rank != 0:", "if rank:", "if not is_main:", "if dist.get_rank() > 0:"])
def test_negated_guards_do_not_protect(guard):
    text = textwrap.dedent(f'''\
        import torch
        import torch.distributed as dist

        def main(rank, is_main):
            dist.init_process_group("nccl")
            {guard}
                torch.save({{}}, "x.pt")

        main(0, True)
    ''')
    assert len(_check(text, ["DDP202"])) == 1


def test_rules_never_crash_on_partial_code():
    # mid-typing shapes that parse: missing args, starred, odd targets
    text = textwrap.dedent('''\
        import torch, torch.multiprocessing as mp
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler
        mp.spawn()
        mp.spawn(*a)
        mp.spawn(f, args=())
        DDP()
        DDP(*m, device_ids=[])
        torch.save()
        torch.load()
        DataLoader(shuffle=True)
        DataLoader(**kw, shuffle=True, sampler=DistributedSampler())
        for (a, b) in DataLoader(x, sampler=DistributedSampler(x)):
            pass
        x.sampler = DistributedSampler(y)
        (lambda: torch.save(1, "p"))()
    ''')
    res = check_source(text, "t.py", Settings(select=list(TABLE)))
    assert not res.errors, res.errors


def _fix_fixtures():
    from pathlib import Path

    root = Path(__file__).resolve().parent / "fixtures"
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}")
            for code in TABLE for p in sorted((root / code).glob("fix_*.py"))]


@pytest.mark.parametrize("path", _fix_fixtures())
@pytest.mark.parametrize("variant", ["crlf", "bom-non-ascii"])
def test_fixes_keep_line_endings_and_columns(path, variant):
    from ddp_lint.analysis.fixes import fix_all

    code = path.parent.name
    conv = {
        "crlf": lambda s: s.replace("\n", "\r\n"),
        "bom-non-ascii": lambda s: "\ufeff# \u00e9t\u00e9 \u4e2d\n" + s.replace("dataset", "d\u00e4taset"),
    }[variant]
    text = conv(path.read_text(encoding="utf-8"))
    expected = conv(path.with_name(path.name + ".fixed").read_text(encoding="utf-8"))

    def check(t):
        return [f for f in check_source(t, str(path), Settings(select=[code])).findings if f.code == code]

    fixed, applied = fix_all(text, check, unsafe=True)
    assert applied and fixed == expected
