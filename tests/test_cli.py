"""The CLI as a user runs it: real subprocesses, exit codes, formats, fixes, config."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

P1 = "seed_problem1_hang.py"
P2 = "seed_problem2_invalid_usage.py"


def run(*args, cwd=None, input=None):
    return subprocess.run([sys.executable, "-m", "ddp_lint", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, input=input, env=_env())


def _env():
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def work(tmp_path):
    for n in (P1, P2):
        shutil.copy(EXAMPLES / n, tmp_path / n)
    return tmp_path


def test_check_examples_text(work):
    r = run("check", ".", cwd=work)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.startswith(f"{P1}:27:5: DDP001 [*] ") for l in lines), r.stdout
    assert any(l.startswith(f"{P2}:28:5: DDP001 [*] ") for l in lines)
    assert any(l.startswith(f"{P2}:32:14: DDP101 [*] ") for l in lines)
    assert "fixable with the `--fix` option" in r.stdout


def test_json_schema(work):
    r = run("check", "--output-format", "json", "--select", "DDP001,DDP101", P2, cwd=work)
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert {d["code"] for d in data} == {"DDP001", "DDP101"}
    for d in data:
        assert set(d) >= {"code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row"}
        assert set(d["location"]) == {"row", "column"} and d["location"]["row"] >= 1 and d["location"]["column"] >= 1
        assert d["fix"]["applicability"] in ("safe", "unsafe", "display-only")
        for e in d["fix"]["edits"]:
            assert set(e) == {"content", "location", "end_location"}
        assert d["url"].endswith(f"{d['code']}.md")
    ddp101 = [d for d in data if d["code"] == "DDP101"][0]
    assert ddp101["location"] == {"row": 32, "column": 14} and ddp101["noqa_row"] == 32
    assert ddp101["fix"]["edits"][0]["content"] == "[None for _ in range(dist.get_world_size())]"


def test_sarif(work):
    r = run("check", "--output-format", "sarif", "--select", "DDP001,DDP101", P2, cwd=work)
    doc = json.loads(r.stdout)
    assert doc["version"] == "2.1.0"
    res = doc["runs"][0]["results"]
    assert {x["ruleId"] for x in res} == {"DDP001", "DDP101"}
    assert res[0]["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1


def test_fix_writes_clean_files(work):
    r = run("check", "--fix", ".", cwd=work)
    # what remains has no fix (DDP103: a 3-element list indexed by the rank)
    assert r.returncode == 1 and "[*]" not in r.stdout, r.stdout + r.stderr
    assert "Fixed 2 files." in r.stdout
    assert run("check", "--select", "DDP001,DDP101", ".", cwd=work).returncode == 0
    assert "torch.cuda.set_device(device_id)" in (work / P1).read_text()


def test_diff_writes_nothing(work):
    before = (work / P2).read_text()
    r = run("check", "--diff", P2, cwd=work)
    assert r.returncode == 1
    assert "+    torch.cuda.set_device(device_id)" in r.stdout
    assert "+    output = [None for _ in range(dist.get_world_size())]" in r.stdout
    assert (work / P2).read_text() == before


def test_unsafe_fixes_only_on_request(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                 "out = [None, None]\ndist.all_gather_object(out, 1)\n")
    r = run("check", "--fix", str(f))
    assert r.returncode == 1 and "hidden fix" in r.stdout
    assert "set_device" not in f.read_text()
    r = run("check", "--fix", "--unsafe-fixes", str(f))
    assert r.returncode == 0, r.stdout
    assert 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))' in f.read_text()


def test_stdin():
    text = (EXAMPLES / P2).read_text()
    r = run("check", "-", "--stdin-filename", "demo.py", input=text)
    assert r.returncode == 1
    assert "demo.py:28:5: DDP001" in r.stdout
    r = run("check", "--fix", "-", "--stdin-filename", "demo.py", input=text)
    assert "torch.cuda.set_device(device_id)" in r.stdout


def test_select_ignore_and_exit_codes(work):
    assert run("check", "--select", "DDP101", P1, cwd=work).returncode == 0
    assert run("check", "--ignore", "DDP0,DDP1", P2, cwd=work).returncode == 0
    r = run("check", "--select", "XYZ9", P2, cwd=work)
    assert r.returncode == 2 and "unknown rule code" in r.stderr and "Traceback" not in r.stderr


def test_missing_and_unreadable_input(tmp_path):
    r = run("check", str(tmp_path / "nope.py"))
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"import torch\nx = '\xff\xfe'\n")
    r = run("check", str(bad))
    assert r.returncode == 2 and "not valid utf-8" in r.stderr and "Traceback" not in r.stderr
    assert "All checks passed" not in r.stdout


def test_syntax_error_is_a_finding(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import torch.distributed as dist\ndist.init_process_group()\ndef f(:\n")
    r = run("check", str(f))
    assert r.returncode == 1 and "DDP000 syntax error" in r.stdout


def test_excludes_venv(tmp_path):
    (tmp_path / ".venv").mkdir()
    shutil.copy(EXAMPLES / P2, tmp_path / ".venv" / "x.py")
    (tmp_path / "build").mkdir()
    shutil.copy(EXAMPLES / P2, tmp_path / "build" / "x.py")
    r = run("check", str(tmp_path))
    assert r.returncode == 0, r.stdout


def test_pyproject_config(work):
    (work / "pyproject.toml").write_text(
        '[tool.ddp-lint]\nselect = ["DDP0", "DDP101"]\nignore = ["DDP101", "DDP004"]\n[tool.ddp-lint.per-file-ignores]\n"seed_problem1*" = ["DDP001"]\n')
    r = run("check", "--output-format", "json", ".", cwd=work)
    got = {(d["filename"].split("/")[-1], d["code"]) for d in json.loads(r.stdout)}
    assert got == {(P2, "DDP001")}


@pytest.mark.parametrize("table,needle", [
    ('select = ["DDP999"]', "`select` has unknown rule code"),
    ('colour = "red"', "unknown key `colour`"),
    ('ignore = "DDP001"', "`ignore` must be a list"),
])
def test_invalid_config_names_the_key(work, table, needle):
    (work / "pyproject.toml").write_text(f"[tool.ddp-lint]\n{table}\n")
    r = run("check", ".", cwd=work)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_rule_docs():
    r = run("rule", "DDP001")
    assert r.returncode == 0
    for h in ("# nccl-without-set-device (DDP001)", "## What it does", "## Why is this bad?", "## Example",
              "## Use instead", "## Fix safety"):
        assert h in r.stdout
    r = run("rule", "--all")
    assert "DDP001" in r.stdout and "DDP101" in r.stdout and "default" in r.stdout
    r = run("rule", "NOPE1")
    assert r.returncode == 2 and "unknown rule code" in r.stderr


def test_run_passes_everything_after_dashdash_to_the_script(monkeypatch):
    import ddp_lint.analysis.runtime.cli as rcli
    from ddp_lint.cli import main

    seen = {}

    def fake_cmd_run(args):
        seen["script"] = args.script
        seen["args"] = rcli._split_args(args)
        seen["timeout"] = args.timeout
        return 0

    monkeypatch.setattr(rcli, "cmd_run", fake_cmd_run)
    assert main(["run", "train.py", "--timeout", "7", "--", "nccl", "--lr", "0.1", "--", "x y"]) == 0
    assert seen == {"script": "train.py", "args": ["nccl", "--lr", "0.1", "--", "x y"], "timeout": 7.0}


# -- issue 17.7: command-line selection wins; --isolated; --config -----------------------------------
RANK_GUARD = ("import torch.distributed as dist\n"
              "dist.init_process_group('gloo')\n"
              "if dist.get_rank() == 0:\n"
              "    dist.barrier()\n"
              "dist.destroy_process_group()\n")


def _codes(r):
    return sorted({d["code"] for d in json.loads(r.stdout)})


def test_command_line_selection_wins_over_configuration(tmp_path):
    (tmp_path / "g.py").write_text(RANK_GUARD)
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["DDP104"]\n')
    assert _codes(run("check", "--output-format", "json", "g.py", cwd=tmp_path)) == []
    r = run("check", "--output-format", "json", "--select", "DDP104", "g.py", cwd=tmp_path)
    assert _codes(r) == ["DDP104"], r.stderr
    r = run("check", "--output-format", "json", "--extend-select", "DDP104", "g.py", cwd=tmp_path)
    assert _codes(r) == ["DDP104"], r.stderr
    # and the other way round: the configuration selects it, the command line drops it
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nselect = ["DDP104"]\n')
    assert _codes(run("check", "--output-format", "json", "--ignore", "DDP1", "g.py", cwd=tmp_path)) == []
    # per-file-ignores from the configuration still apply under --select
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint.per-file-ignores]\n"g.py" = ["DDP104"]\n')
    assert _codes(run("check", "--output-format", "json", "--select", "DDP104", "g.py", cwd=tmp_path)) == []


def test_isolated_and_config_path(tmp_path):
    (tmp_path / "g.py").write_text(RANK_GUARD)
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["DDP104"]\n')
    r = run("check", "--output-format", "json", "--isolated", "g.py", cwd=tmp_path)
    assert _codes(r) == ["DDP104"], r.stderr
    # --isolated ignores even a broken configuration
    (tmp_path / "pyproject.toml").write_text("tool = 5\n")
    assert _codes(run("check", "--output-format", "json", "--isolated", "g.py", cwd=tmp_path)) == ["DDP104"]
    other = tmp_path / "elsewhere.toml"
    other.write_text('ignore = ["DDP104"]\n')  # a standalone file: keys at top level
    assert _codes(run("check", "--output-format", "json", "--config", str(other), "g.py", cwd=tmp_path)) == []
    r = run("check", "--config", str(tmp_path / "missing.toml"), "g.py", cwd=tmp_path)
    assert r.returncode == 2 and "missing.toml: cannot read configuration" in r.stderr, r.stderr
    r = run("check", "--config", str(other), "--isolated", "g.py", cwd=tmp_path)
    assert r.returncode == 2 and "cannot be used together" in r.stderr


def test_force_exclude_applies_to_files_named_on_the_command_line(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "vendored").mkdir()
    for p in ("build/x.py", "vendored/y.py", "z.py"):
        (tmp_path / p).write_text(RANK_GUARD)
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nextend-exclude = ["vendored"]\n')
    files = ("build/x.py", "vendored/y.py", "z.py")
    r = run("check", "--output-format", "json", *files, cwd=tmp_path)
    assert len(json.loads(r.stdout)) == 3  # named files are checked...
    r = run("check", "--output-format", "json", "--force-exclude", *files, cwd=tmp_path)
    assert {d["filename"] for d in json.loads(r.stdout)} == {"z.py"}, r.stdout  # ...unless forced
    r = run("check", "--force-exclude", "build/x.py", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


# -- issue 17.8: SARIF against the 2.1.0 schema --------------------------------------------------------
def test_sarif_validates_against_the_schema_and_describes_rules(work):
    import jsonschema

    schema = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
    r = run("check", "--output-format", "sarif", ".", cwd=work)
    doc = json.loads(r.stdout)
    jsonschema.Draft4Validator(schema).validate(doc)
    rules = {x["id"]: x for x in doc["runs"][0]["tool"]["driver"]["rules"]}
    for code, rule in rules.items():
        short = rule["shortDescription"]["text"]
        assert "\n" not in short and short != rule["name"] and len(short) <= 170, (code, short)
        full = rule["fullDescription"]["text"]
        assert not full.startswith("#") and not full.rstrip().endswith(":"), (code, full)
        assert rule["help"]["markdown"].startswith("## What it does"), code
        assert "## Why is this bad?" in rule["help"]["markdown"], code
    assert rules["DDP001"]["fullDescription"]["text"].startswith("Checks for an NCCL process group")
    assert "exempt" not in rules["DDP001"]["fullDescription"]["text"].lower()


# -- issue 17.9: full, github, junit -------------------------------------------------------------------
def test_full_format_shows_source_caret_fix_and_related(work):
    r = run("check", "--output-format", "full", "--select", "DDP001,DDP101", P2, cwd=work)
    assert r.returncode == 1, r.stderr
    out = r.stdout
    assert f"{P2}:28:5: DDP001 [*]" in out
    assert '28 |     dist.init_process_group("nccl")' in out
    assert "   |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ DDP001" in out
    assert "= help: Insert `torch.cuda.set_device(device_id)`" in out and "Safe fix" in out
    assert "+     torch.cuda.set_device(device_id)" in out
    assert f"= note: {P2}:33:5:" in out  # the related call, named in the output
    assert "-     output = [None for _ in gather_objects]" in out
    assert "Found 2 errors." in out


def test_github_and_junit_formats(work):
    r = run("check", "--output-format", "github", "--select", "DDP001,DDP101", P2, cwd=work)
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and len(lines) == 2, r.stdout
    assert lines[0].startswith(f"::error title=ddp-lint (DDP001),file={P2},line=28,col=5,endLine=28,endColumn=36::"
                               f"{P2}:28:5: DDP001 "), lines[0]
    import xml.etree.ElementTree as ET

    r = run("check", "--output-format", "junit", "--select", "DDP001,DDP101", P2, cwd=work)
    root = ET.fromstring(r.stdout)
    assert root.tag == "testsuites" and root.get("failures") == "2"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["org.ddp-lint.DDP001", "org.ddp-lint.DDP101"]
    assert cases[0].get("line") == "28" and cases[0].find("failure") is not None
    clean = run("check", "--output-format", "junit", "--select", "DDP205", P2, cwd=work)
    assert clean.returncode == 0 and ET.fromstring(clean.stdout).get("failures") == "0"
    # concise stays the default, and `text` is its alias
    assert run("check", P2, cwd=work).stdout == run("check", "--output-format", "text", P2, cwd=work).stdout
    assert run("check", P2, cwd=work).stdout == run("check", "--output-format", "concise", P2, cwd=work).stdout


# -- issue 17.10: small things -----------------------------------------------------------------------
def test_rule_by_name():
    by_name = run("rule", "nccl-without-set-device")
    assert by_name.returncode == 0 and by_name.stdout == run("rule", "DDP001").stdout


def test_check_help_documents_formats_precedence_and_exit_codes():
    out = run("check", "--help").stdout
    for needle in ("concise", "full", "json", "sarif", "github", "junit", "exit status",
                   "0  no findings", "1  findings remain", "2  an error", "--isolated", "--config",
                   "--force-exclude", "precedence"):
        assert needle in out, needle


def test_diff_with_nothing_to_fix_says_so(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\nx = 1\n")
    r = run("check", "--diff", "ok.py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "" and "No fixes to apply." in r.stderr


def test_syntax_of_a_newer_python_names_the_version(tmp_path):
    # the comment passes the text gate (a file no rule could fire on is not parsed: no DDP000)
    (tmp_path / "new.py").write_text("import torch  # torch.distributed init_process_group\nclass Box[T]:\n    item: T\n")
    r = run("check", "new.py", cwd=tmp_path)
    if sys.version_info >= (3, 12):
        assert r.returncode == 0, r.stdout
    else:
        assert r.returncode == 1 and "DDP000" in r.stdout and "Python 3.12" in r.stdout, r.stdout


def test_pre_commit_hook_definition(work):
    """Issue 17.4: `.pre-commit-hooks.yaml` (Ruff's conventions) runs an entry the CLI accepts."""
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    try:
        import yaml
    except ImportError:  # a tiny reader for this flat file: "- id: x" then "  key: value"
        hooks, cur = [], None
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("- "):
                cur = {}
                hooks.append(cur)
                line = "  " + line[2:]
            k, _, v = line.strip().partition(":")
            v = v.strip().strip('"')
            cur[k] = ([x.strip() for x in v[1:-1].split(",") if x.strip()] if v.startswith("[")
                      else {"false": False, "true": True}.get(v, v))
    else:
        hooks = yaml.safe_load(text)
    (hook,) = hooks
    assert hook["id"] == "ddp-lint" and hook["language"] == "python"
    assert hook["entry"] == "ddp-lint check --force-exclude"
    assert hook["types_or"] == ["python", "pyi"] and hook["require_serial"] is False
    # the entry, as pre-commit runs it: file names appended, excluded ones skipped
    (work / "build").mkdir()
    shutil.copy(EXAMPLES / P1, work / "build" / "gen.py")
    r = run(*hook["entry"].split()[1:], "build/gen.py", P2, cwd=work)
    assert r.returncode == 1 and "DDP001" in r.stdout and "build/gen.py" not in r.stdout + r.stderr, r.stderr


def test_readme_leads_with_the_two_commands_and_ci_runs_the_test_one():
    """Issue 17.1: the README's commands work in a brand-new venv, and .ci/run runs the same test
    command in a fresh virtual environment (so a missing dependency fails CI)."""
    import re

    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n\s*(.+?)\n\s*```", readme)
    assert blocks[:2] == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && ddp-lint check examples/",
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest",
    ]
    assert readme.index("## Two commands for a fresh machine") < readme.index("## ", readme.index("# ddp-lint") + 2) + 1
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and '. "$VENV/bin/activate"' in ci
    assert "pip install -e '.[test]' && python -m pytest" in ci
    extra = (ROOT / "pyproject.toml").read_text()
    test_extra = extra[extra.index("test = ["):extra.index("]", extra.index("test = ["))]
    for dep in ('"numpy"', '"jsonschema', '"build', '"torch==2.13.0"'):
        assert dep in test_extra, dep
    deps = extra[extra.index("dependencies = ["):extra.index("]", extra.index("dependencies = ["))]
    assert "libcst" not in deps


def test_summary_plurals():
    """Issue 17.10: "1 errors", "1 files", "1 hidden fixes" never appear."""
    import io

    from ddp_lint.analysis.model import Applicability, Edit, Finding, Fix, Range, Severity
    from ddp_lint.analysis.output import print_findings

    def finding(app):
        fix = Fix(app, "m", (Edit(Range.of(0, 0, 0, 0), "x"),))
        return Finding("DDP001", "n", "msg", Severity.ERROR, Range.of(0, 0, 0, 1), "a.py", fix=fix)

    out = io.StringIO()
    print_findings([finding(Applicability.SAFE), finding(Applicability.UNSAFE)], "concise", fixed_files=1, out=out)
    text = out.getvalue()
    assert "Fixed 1 file." in text and "Found 2 errors." in text and "(1 hidden fix can" in text, text
    out = io.StringIO()
    print_findings([finding(Applicability.UNSAFE)], "full", out=out)
    assert "Found 1 error." in out.getvalue() and "1 hidden fix can" in out.getvalue()
