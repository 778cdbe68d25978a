"""The kind of a rank value (flow/rank_kinds.py, issue 25 "kinds of rank are not tracked"): global
or local, read from where the value comes from, never from its name."""
from __future__ import annotations

import ast

import pytest

from ddp_lint.analysis.flow import Analysis
from ddp_lint.analysis.flow.rank_kinds import (
    GLOBAL, LOCAL, local_rank_env_reads, option_dest, rank_kind_of,
)
from ddp_lint.analysis.semantic import Semantic

PRELUDE = "import argparse, os\nimport torch\nimport torch.distributed as dist\n"


def _kind(body: str):
    """The kind of the last line's expression ``probe(<expr>)``."""
    src = PRELUDE + body
    tree = ast.parse(src)
    sem = Semantic(tree)
    an = Analysis("<test>", sem, src)
    probe = [c for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id == "probe"][-1]
    return rank_kind_of(an, an.main, probe.args[0], probe)[0]


@pytest.mark.parametrize("body,kind", [
    ('probe(int(os.environ["LOCAL_RANK"]))', LOCAL),
    ('r = os.environ.get("SLURM_LOCALID", 0)\nprobe(int(r))', LOCAL),
    ('probe(dist.get_node_local_rank())', LOCAL),
    ('probe(dist.get_rank())', GLOBAL),
    ('a, b = int(os.environ["RANK"]), 1\nprobe(a)', GLOBAL),
    # a constant fallback is neutral; a name says nothing
    ('rank = 0\nif dist.is_initialized():\n    rank = int(os.environ["LOCAL_RANK"])\nprobe(rank)', LOCAL),
    ('global_rank = int(os.environ["LOCAL_RANK"])\nprobe(global_rank)', LOCAL),
    ('local_rank = 3\nprobe(local_rank)', None),
    # mixed or computed values have no kind
    ('r = int(os.environ["RANK"]) if x else int(os.environ["LOCAL_RANK"])\nprobe(r)', None),
    ('r = node * 8 + int(os.environ["LOCAL_RANK"])\nprobe(r)', None),
    # through a helper's return, a parameter, a namespace attribute and an argparse option
    ('def lr():\n    return int(os.environ["LOCAL_RANK"])\nprobe(lr())', LOCAL),
    ('def f(gpu):\n    probe(gpu)\nf(dist.get_rank())', GLOBAL),
    ('p = argparse.ArgumentParser()\np.add_argument("--local-rank", dest="gpu", type=int)\n'
     'args = p.parse_args()\nprobe(args.gpu)', LOCAL),
    ('p = argparse.ArgumentParser()\np.add_argument("--rank", type=int, default=int(os.environ["RANK"]))\n'
     'args = p.parse_args()\nprobe(args.rank)', GLOBAL),
    ('args = object()\nargs.rank = int(os.environ["LOCAL_RANK"])\nprobe(args.rank)', LOCAL),
])
def test_rank_kind(body, kind):
    assert _kind(body) == kind


def _reads(body: str) -> int:
    src = PRELUDE + body
    tree = ast.parse(src)
    sem = Semantic(tree)
    return len(local_rank_env_reads(Analysis("<test>", sem, src).main))


def test_local_rank_env_reads_by_value():
    assert _reads('x = os.environ["LOCAL_RANK"]') == 1
    assert _reads('for v in ("LOCAL_RANK", "SLURM_LOCALID"):\n    x = os.environ.get(v)') == 1
    assert _reads('k = "LOCAL_RANK"\nx = os.environ[k]') == 1
    assert _reads('x = os.environ[some_key()]') == 1  # unknown key: in doubt, a read
    # other keys, a membership test, a comment or a string are not reads
    assert _reads('x = os.environ["RANK"]\ny = "LOCAL_RANK" in os.environ  # os.environ["LOCAL_RANK"]') == 0
    assert _reads('for v in ("WORLD_SIZE", "RANK"):\n    x = os.environ[v]\ns = "os.environ[\'LOCAL_RANK\']"') == 0


def test_option_dest():
    call = ast.parse('p.add_argument("--local-rank", "--local_rank", type=int)').body[0].value
    assert option_dest(call) == "local_rank"
    call = ast.parse('p.add_argument("--local_rank", dest="gpu")').body[0].value
    assert option_dest(call) == "gpu"
