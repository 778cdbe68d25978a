"""The DDP wrap moved into a helper of another module (issue 25's "move into a helper of another
module", found by a metamorphic run of stop 61): every bad fixture that builds its wrapper with
``DistributedDataParallel(...)`` / ``DDP(...)`` is rewritten to call ``wrap_ddp(...)`` from a
project module ``wrapping.py`` (``def wrap_ddp(*args, **kwargs): return DistributedDataParallel(
*args, **kwargs)``; the fixture's sibling project files copied beside it).

- The text gate is a necessary condition: the gated findings equal the ungated ones on every such
  rewrite (DDP204, DDP205 and DDP207 once skipped a file whose wrapper came from an imported helper).
- The rules whose premise is "a DDP script" or "the wrapper" keep every finding through the helper,
  and so do the rules that read the constructor's arguments through ``flow.wrap_sites`` (the module,
  ``device_ids``, ``broadcast_buffers``) or judge a wrap at the helper's call (``wrapped.Origin``).
- No good fixture gains a finding from the move (stop 62: DDP210 judged the flag and the branch at
  the constructor in the helper's module; DDP208 took two wrappers one helper builds for one)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CALL = re.compile(r"(?:torch\.)?(?:nn\.)?(?:parallel\.)?\bDistributedDataParallel\(|\bDDP\(")
IMPORT = re.compile(r"^[ \t]*from\s+torch\.nn\.parallel(?:\.distributed)?\s+import\s+DistributedDataParallel"
                    r"(?:\s+as\s+DDP)?[ \t]*$", re.M)
HELPER = ("from torch.nn.parallel import DistributedDataParallel\n\n\n"
          "def wrap_ddp(*args, **kwargs):\n    return DistributedDataParallel(*args, **kwargs)\n")
# every finding of these rules' bad fixtures survives the move
KEEP_ALL = ("DDP003", "DDP104", "DDP107", "DDP110", "DDP201", "DDP204", "DDP205", "DDP206", "DDP207",
            "DDP208", "DDP209", "DDP210", "DDP221", "DDP222", "DDP225", "DDP303")
# good fixtures that still gain a finding, each with the reason (an open gap, not a pass)
GAINS = {
    # DDP's buffer broadcast in the forward is read off the constructor: a
    # ``broadcast_buffers=False`` the helper's call forwards through ``**kwargs`` is not seen
    "DDP104/good_scorer_object_forward.py",
}


def _cases(kind="bad"):
    for p in sorted(FIXTURES.glob(f"DDP*/{kind}_*.py")):
        text = p.read_text()
        if not CALL.search(text):
            continue
        moved = CALL.sub("wrap_ddp(", IMPORT.sub("from wrapping import wrap_ddp", text))
        if "DistributedDataParallel" in moved or re.search(r"\bDDP\b", moved):
            continue  # the name is used otherwise too (``isinstance(m, DDP)``): not a pure move
        yield pytest.param(p, moved, id=f"{p.parent.name}/{p.name}")


def _checked_name(path: Path) -> str:
    """A ``x.ipynb.py`` fixture is the module of the notebook ``x.ipynb`` (tests/test_fixtures.py)."""
    return str(path)[:-3] if path.name.endswith(".ipynb.py") else str(path)


def _project(tmp_path, path: Path, moved: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "wrapping.py").write_text(HELPER)
    for q in path.parent.iterdir():
        if q.is_file() and q.suffix == ".py" and not q.name.startswith(("bad_", "good_", "fix_")):
            shutil.copy(q, tmp_path / q.name)
    if "from wrapping import wrap_ddp" not in moved:
        moved = "from wrapping import wrap_ddp\n" + moved
    main = tmp_path / path.name  # (its name kept: a sibling project file may import it)
    main.write_text(moved)
    return main


@pytest.mark.parametrize("path,moved", list(_cases()))
def test_the_gate_holds_when_the_wrap_is_in_a_helper_module(tmp_path, path, moved):
    code = path.parent.name
    main = _project(tmp_path, path, moved)
    settings = Settings(select=[code], root=str(tmp_path))
    text = main.read_text()
    gated = [(f.code, f.range) for f in check_source(text, _checked_name(main), settings).findings]
    ungated = [(f.code, f.range) for f in check_source(text, _checked_name(main), settings, gate=False).findings]
    assert gated == ungated
    if code in KEEP_ALL:
        before = check_source(path.read_text(), _checked_name(path), Settings(select=[code])).findings
        assert len(gated) == len(before), (code, [f.message for f in before])


@pytest.mark.parametrize("path,moved", list(_cases("good")))
def test_a_good_fixture_stays_clean_when_the_wrap_is_in_a_helper_module(tmp_path, path, moved):
    code = path.parent.name
    main = _project(tmp_path, path, moved)
    settings = Settings(select=[code], root=str(tmp_path))
    got = check_source(main.read_text(), _checked_name(main), settings, gate=False).findings
    if f"{code}/{path.name}" in GAINS:
        assert got, "the gap is closed: take the fixture off GAINS"
        return
    assert not got, [f.message for f in got]
