"""Regression tests of issue 29 ("Security and reliability, round 3"): R1, R5, R7, R8, R11.

Each test failed on the code before its fix (see the issue's breaks)."""
from __future__ import annotations

import ast
import json
import os
import stat

import pytest

from tests.conftest import ROOT


# -- R1: every write goes through the one atomic writer --------------------------------------------
def _run_result():
    from ddp_lint.analysis.runtime.api import RunResult

    res = RunResult()
    res.script = "train.py"
    return res


def test_run_report_is_0600_and_never_written_through_a_planted_temp_link(tmp_path):
    """R1: the report used to go to ``PATH.tmp<pid>`` (a predictable name, opened with a plain
    ``open(..., "w")``, so a link planted there redirected the write) and was created 0644."""
    from ddp_lint.analysis.runtime.merge import write_report

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    report = tmp_path / "out" / "node.json"
    report.parent.mkdir()
    os.symlink(victim, f"{report}.tmp{os.getpid()}")
    old_umask = os.umask(0o022)
    try:
        assert write_report(str(report), _run_result()) == str(report)
    finally:
        os.umask(old_umask)
    assert victim.read_text() == "precious\n"
    assert not report.is_symlink()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert json.loads(report.read_text())["ddp_lint_report"] == 1
    leftovers = [p.name for p in report.parent.iterdir() if p.name.endswith(".ddp-lint.tmp")]
    assert leftovers == []


def test_run_report_refuses_a_final_path_that_is_a_symlink(tmp_path):
    """R1: a symbolic link at PATH is refused (it used to be replaced silently by the report)."""
    from ddp_lint.analysis.io import SymlinkRefused
    from ddp_lint.analysis.runtime.merge import write_report

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "node.json"
    os.symlink(victim, link)
    with pytest.raises(OSError) as e:  # SymlinkRefused
        write_report(str(link), _run_result())
    assert isinstance(e.value, SymlinkRefused) and "symbolic link" in e.value.strerror
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] and all(
        not p.name.endswith(".ddp-lint.tmp") for p in tmp_path.iterdir())


_ALLOWED_WRITERS = {
    # the one writer (mkstemp + os.replace)
    "analysis/io.py",
    # moves files written by io.write_temp into place (os.replace / os.link of its own temp files)
    "analysis/cache.py",
}
_SHIM = "analysis/runtime/shim"  # runs in the user's interpreter, never imports ddp-lint: O_NOFOLLOW
_WRITE_ATTRS = {"write_text", "write_bytes", "replace", "rename", "renames", "link", "symlink", "copy", "copy2",
                "copyfile", "copytree", "move"}


def _write_mode(node: ast.Call) -> bool:
    """``open``/``Path.open``/``io.open`` called with a mode that writes (w, a, x or +)."""
    cands = [kw.value for kw in node.keywords if kw.arg == "mode"] + list(node.args[:2])
    for c in cands:
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value and set(c.value) <= set("rwxabt+U"):
            if set(c.value) & set("wax+"):
                return True
        elif c in [kw.value for kw in node.keywords if kw.arg == "mode"]:
            return True  # a computed mode
    return False


def _writes_in(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if node.args and ast.unparse(node.args[0]) == "os.devnull":
            continue
        if isinstance(fn, ast.Name) and fn.id == "open" or isinstance(fn, ast.Attribute) and fn.attr == "open" \
                and ast.unparse(fn.value) != "os":
            if _write_mode(node):
                found.append(f"line {node.lineno}: {ast.unparse(fn)}(... writing)")
        elif isinstance(fn, ast.Attribute) and fn.attr in _WRITE_ATTRS:
            base = ast.unparse(fn.value)
            if fn.attr in ("write_text", "write_bytes") or base in ("os", "shutil"):
                found.append(f"line {node.lineno}: {base}.{fn.attr}(...)")
        elif isinstance(fn, ast.Attribute) and fn.attr == "open" and ast.unparse(fn.value) == "os":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            if "O_WRONLY" in flags or "O_RDWR" in flags or "O_CREAT" in flags:
                found.append(f"line {node.lineno}: os.open(..., {flags})")
    return found


def test_every_file_write_goes_through_the_atomic_writer():
    """R1's audit: outside analysis/io.py (and the cache, which moves io.write_temp's files), the
    product opens no file for writing and renames nothing itself; the rank shim (which cannot import
    ddp-lint) writes only in the run's private 0700 folder, never through a link."""
    offenders = []
    for pkg in ("analysis", "lsp_server", "ddp_lint"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in _ALLOWED_WRITERS:
                continue
            writes = _writes_in(ast.parse(path.read_text(encoding="utf-8")))
            if rel.startswith(_SHIM):
                writes = [w for w in writes if w.startswith("line") and "os.open" in w and "NOFOLLOW" not in w]
            offenders += [f"{rel} {w}" for w in writes]
    assert offenders == []


# -- R5: control characters in human output ---------------------------------------------------------
_HOSTILE_NAME = "evil\n::error file=x.py,line=1::forged\x1b]0;pwned\x07\x9b2J.py"
_BAD = [chr(c) for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))]


def _main(*argv):
    from ddp_lint.cli import main

    return main(list(argv))


def _hostile_tree(tmp_path):
    src = ROOT / "examples" / "seed_problem1_hang.py"
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / _HOSTILE_NAME).write_bytes(src.read_bytes())
    return folder


@pytest.mark.parametrize("fmt", ["concise", "full", "github", "junit"])
def test_control_characters_in_file_names_are_escaped_in_human_formats(tmp_path, capsys, fmt):
    """R5: a newline in a file name forged output lines (``::error`` commands that GitHub Actions
    runs) and ESC/OSC/BEL/C1 reached the terminal; junit was ill-formed XML."""
    folder = _hostile_tree(tmp_path)
    assert _main("check", str(folder), "--no-cache", "--output-format", fmt) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in _BAD), [c for c in _BAD if c in out]
    assert "evil\\n::error" in out
    lines = out.splitlines()
    if fmt == "github":
        assert lines and all(line.startswith("::") for line in lines)
        assert sum("forged" in line for line in lines) == len(lines)  # never a line of its own
    elif fmt == "concise":
        assert all(line.startswith(str(folder)) for line in lines[:-2]), lines
    elif fmt == "junit":
        import xml.etree.ElementTree as ET

        root = ET.fromstring(out)
        assert root.tag == "testsuites"


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_json_and_sarif_keep_file_names_exact(tmp_path, capsys, fmt):
    folder = _hostile_tree(tmp_path)
    _main("check", str(folder), "--no-cache", "--output-format", fmt)
    data = json.loads(capsys.readouterr().out)
    names = ({f["filename"] for f in data} if fmt == "json" else
             {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in data["runs"][0]["results"]})
    assert names == {str(folder / _HOSTILE_NAME)}


def test_full_format_escapes_source_lines_and_keeps_the_caret_under_the_finding():
    from ddp_lint.analysis.model import Finding, Position, Range, Severity
    from ddp_lint.analysis.output import format_full

    text = 'x = "\x1b[2J"; dist.barrier()\n'
    col = text.index("dist")
    f = Finding(code="DDP999", name="x", message="m", severity=Severity.ERROR,
                range=Range(Position(0, col), Position(0, col + 4)), filename="f.py")
    out = format_full(f, text)
    assert "\x1b" not in out
    src, caret = [line for line in out.splitlines() if " | " in line][0:2]
    assert src[caret.index("^"):].startswith("dist")


def _report(tmp_path, name, message, filename="train.py"):
    finding = {"code": "DDP901", "message": message, "filename": filename, "location": {"row": 1, "column": 1},
               "end_location": {"row": 1, "column": 2}, "severity": "error", "ranks": [0]}
    p = tmp_path / name
    p.write_text(json.dumps([finding]))
    return p


def test_merge_text_output_escapes_messages_and_file_names(tmp_path, capsys):
    """R5: messages merged from reports reached the terminal raw."""
    p = _report(tmp_path, "a.json", "boom\n::error::forged\x1b]8;;http://x\x07", filename="t\x1b[31m.py")
    assert _main("merge", str(p)) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in _BAD)
    assert "boom\\n::error::forged\\x1b]8;;http://x\\x07" in out
    assert not any(line.startswith("::") for line in out.splitlines())


def test_run_text_output_escapes_the_script_name_and_rank_texts():
    from ddp_lint.analysis.runtime.api import RankSummary
    from ddp_lint.analysis.runtime.cli import format_text

    res = _run_result()
    res.script = "/tmp/a\nAll ranks finished cleanly.\x1b[2K.py"
    res.ranks = [RankSummary(rank=0, status="failed", text="rank 0: \x07boom\nfake")]
    out = format_text(res)
    assert not any(c in out for c in _BAD)
    assert out.count("\n") == 3  # head, one rank, the summary


# -- R8: SLURM node lists --------------------------------------------------------------------------
def _peak_bytes(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_nodelist_cap_is_checked_while_expanding():
    """R8: ``n[0-999][0-999]`` built its million hosts before the 100,000 cap was looked at (and
    ``n[0-99999][0-99999]`` ten billion, gigabytes); the size of a product is now checked first."""
    from ddp_lint.analysis.runtime.nodes import NodeError, expand_nodelist

    def over(nodelist):
        with pytest.raises(NodeError):
            expand_nodelist(nodelist)

    assert _peak_bytes(lambda: over("n[0-999][0-999]")) < 16 * 1024 * 1024
    assert _peak_bytes(lambda: over("n[0-99999][0-99999]")) < 16 * 1024 * 1024
    over(",".join(f"a{i}-[0-60000]" for i in range(2)))  # the cap is on the whole list
    over("n[0-70000,0-70000]")
    with pytest.raises(NodeError):
        expand_nodelist("n[" + "9" * 5000 + "]")  # never int()'s ValueError on 5,000 digits
    assert len(expand_nodelist("n[0-99999]")) == 100_000
    assert expand_nodelist("gpu[01-02]-ib[0-1],x") == ["gpu01-ib0", "gpu01-ib1", "gpu02-ib0", "gpu02-ib1", "x"]


# -- R11: a folder walk's --fix never leaves the folder through a symlink ----------------------------
def test_fix_of_a_folder_does_not_rewrite_a_symlinked_file_outside_it(tmp_path, capsys):
    """R11: ``check --fix repo`` rewrote ``outside/victim.py`` through ``repo/link.py``."""
    fixable = (ROOT / "examples" / "seed_problem2_invalid_usage.py").read_text()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.py"
    victim.write_text(fixable)
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    os.symlink(victim, repo / "link.py")
    inner = repo / "pkg" / "real.txt"  # not walked itself: only through the link
    inner.write_text(fixable)
    os.symlink(inner, repo / "inner_link.py")  # a link that stays in the tree is still fixed

    code = _main("check", "--fix", "--no-cache", str(repo))
    captured = capsys.readouterr()
    assert victim.read_text() == fixable  # untouched
    assert (repo / "link.py").is_symlink()
    assert inner.read_text() != fixable and (repo / "inner_link.py").is_symlink()
    assert "link.py: not fixed: it is a symbolic link to" in captured.err and "outside" in captured.err
    assert code == 1  # its findings remain, and are shown
    assert str(repo / "link.py") in captured.out
    # named on the command line, the link is followed, as documented (SECURITY.md)
    assert _main("check", "--fix", "--no-cache", str(repo / "link.py")) in (0, 1)
    assert victim.read_text() != fixable


# -- R7: merge validates its reports -----------------------------------------------------------------
def _merge_cli(capsys, *paths):
    code = _main("merge", *map(str, paths))
    out = capsys.readouterr()
    return code, out.out, out.err


def _raw_report(world_size):
    start = {"kind": "start", "world_size": world_size, "t": 1.0}
    return {"ddp_lint_report": 1, "script": "t.py", "raw": {"roots": [], "lib_dirs": [],
                                                            "ranks": {"0": {"events": [start]}}}}


def test_merge_refuses_a_huge_world_size_without_growing_memory(tmp_path, capsys):
    """R7: a 200-byte report with world_size 1e11 made merge build a placeholder per rank (without
    bound). Here 200,001 (hundreds of MB), 10**7 (gigabytes), then 1e11 as a string and a number."""
    for ws in (200_001, 10**7, "100000000000", 1e11, 50_000):
        p = tmp_path / "node.json"
        p.write_text(json.dumps(_raw_report(ws)))
        assert len(p.read_bytes()) < 200
        peak = _peak_bytes(lambda: _merge_cli(capsys, p))
        code, out, err = _merge_cli(capsys, p)
        assert code == 2 and ("world_size" in err or "ranks but hold the records of 1" in err), err
        assert err.startswith("ddp-lint: error: ") and err.count("\n") == 1, err
        assert peak < 32 * 1024 * 1024


@pytest.mark.parametrize("data", [
    {"ddp_lint_report": 1, "raw": {"ranks": {"x": {}}}},
    {"ddp_lint_report": 1, "raw": {"ranks": {"0": {"events": "nope"}}}},
    {"ddp_lint_report": 1, "raw": {"ranks": {"0": {"events": [{"kind": "start"}], "raised": {"1": 5}}}}},
    {"ddp_lint_report": 1, "raw": {"ranks": {"0": {"events": [], "last_t": "soon"}}}},
    {"ddp_lint_report": 1, "raw": {"ranks": {"0": []}}},
    {"ddp_lint_report": 1, "raw": 7},
    {"ddp_lint_report": 1, "timeout": "long", "findings": []},
    {"ddp_lint_report": 1, "findings": [{"code": "DDP901", "location": {"row": "a", "column": 1}}]},
    {"ddp_lint_report": 1, "findings": [{"code": 5, "location": {"row": 1, "column": 1}}]},
    {"ddp_lint_report": 1, "findings": [], "ranks": [{"rank": "0", "status": "ok"}]},
    {"ddp_lint_report": 1, "findings": [], "ranks": [{"rank": 0, "bogus": 1}], "notes": [3]},
    {"ddp_lint_report": 99},
    {"ddp_lint_report": "1"},
    [{"code": "DDP901", "location": {"row": 1, "column": 1}, "ranks": [-1]}],
    [{"code": "DDP901", "location": {"row": 1, "column": 1}, "related": [{"location": None}]}],
    [[1, 2]],
])
def test_a_malformed_report_is_one_clear_error_never_a_traceback(tmp_path, capsys, data):
    """R7: these gave a traceback (ValueError, TypeError, AttributeError...) or were used as they were."""
    p = tmp_path / "node.json"
    p.write_text(json.dumps(data))
    code, out, err = _merge_cli(capsys, p)
    assert code == 2, (out, err)
    assert err.startswith(f"ddp-lint: error: {p}") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_a_fifo_report_is_skipped_with_a_message_and_never_blocks(tmp_path, capsys):
    """R7: ``ddp-lint merge fifo`` blocked forever in open()."""
    import threading

    fifo = tmp_path / "node1.json"
    os.mkfifo(fifo)
    good = _report(tmp_path, "node0.json", "boom")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=_merge_cli(capsys, good, fifo)), daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():  # unblock the open() of the old code so the test run can go on
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail("merge blocked on a FIFO")
    code, out, err = result["r"]
    assert code == 1 and "boom" in out
    assert f"{fifo}: not a regular file" in out + err and "skipped" in out + err
    code, out, err = _merge_cli(capsys, fifo)
    assert code == 2 and "no report left to merge" in err


def test_an_oversized_report_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    from ddp_lint.analysis.runtime import merge

    monkeypatch.setattr(merge, "MAX_REPORT_BYTES", 1000)
    p = _report(tmp_path, "node0.json", "x" * 2000)
    code, out, err = _merge_cli(capsys, p)
    assert code == 2 and "larger than" in err


def test_run_report_on_a_symlink_is_one_error_line_exit_2(tmp_path, capsys, monkeypatch):
    """R1 through the CLI: ``ddp-lint run x.py --report LINK`` says why, and the link is kept."""
    from ddp_lint.analysis.runtime import cli as run_cli

    monkeypatch.setattr(run_cli, "run_script", lambda *a, **k: _run_result())
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "report.json"
    os.symlink(victim, link)
    assert _main("run", str(script), "--report", str(link)) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddp-lint: error: cannot write the report") and "symbolic link" in err
    assert link.is_symlink() and victim.read_text() == "precious\n"
