"""No decision from raw text (issue 25, point 2): comments, docstrings and message strings never
change a finding.

Every fixture is checked with every rule twice: as it is, and with a tail appended that names every
usual fix and API in a comment, a bare string statement, a function's docstring and its ``print`` /
logging / exception messages. Appending at the end moves no line, so the findings must be identical.
(The gated vs ungated comparison lives in tests/test_gate.py.)
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ALL = Settings(select=["ALL"])

_WORDS = ("torch.cuda.set_device(local_rank) dist.destroy_process_group() sampler.set_epoch(epoch) "
          "nn.SyncBatchNorm.convert_sync_batchnorm DistributedSampler 'module.' \"module.\" model.no_sync() "
          "require_backward_grad_sync dist.barrier() torch.load(map_location='cpu') requires_grad "
          "_set_static_graph cuda CUDA_VISIBLE_DEVICES set_default_device consume_prefix_in_state_dict_if_present "
          "shard num_replicas accelerate prepare( device_mesh device_id seed cleanup teardown")

_LIT = repr(_WORDS)
TAIL = f'''

# NOTE: {_WORDS}
{_LIT}


def _ddp_lint_note_only():
    {_LIT}
    print({_LIT})
    print({_LIT} % ())
    raise NotImplementedError({_LIT})
'''
compile(TAIL, "<tail>", "exec")


def _cases():
    for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for f in sorted(d.glob("*.py")):
            if f.name.startswith(("bad_", "good_", "fix_")):
                yield pytest.param(f, id=f"{d.name}/{f.name}")


def _key(f):
    return (f.code, f.range.start.line, f.range.start.column, f.message)


@pytest.mark.parametrize("path", list(_cases()))
def test_comments_and_strings_change_nothing(path):
    text = path.read_text(encoding="utf-8")
    plain = sorted(map(_key, check_source(text, str(path), ALL).findings))
    noisy = sorted(map(_key, check_source(text.rstrip("\n") + "\n" + TAIL, str(path), ALL).findings))
    assert plain == noisy, f"{path}: a comment or string changed the findings:\n  lost {sorted(set(plain) - set(noisy))}\n  gained {sorted(set(noisy) - set(plain))}"


def test_the_tail_would_be_seen_by_a_text_search():
    # the probe is only meaningful if the words are really in the text a raw search would read
    for w in ("destroy_process_group", "SyncBatchNorm", "set_epoch", "require_backward_grad_sync", '"module.'):
        assert w in TAIL
