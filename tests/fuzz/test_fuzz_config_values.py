"""Configuration values (issue 29): random values for every ``[tool.ddp-lint]`` key, unknown keys,
random TOML text, and the same tables as editor settings.

Invariants, whatever the values:
- ``load_settings`` returns Settings or raises ConfigError naming the file, never anything else;
- ``settings_from_mapping`` (the editor's settings) returns Settings or raises ConfigError;
- accepted settings answer ``enabled_codes`` and ``is_excluded`` for any file name, and only with
  known rule codes;
- ``ddp-lint check --config FILE`` exits 0, 1 or 2 without a traceback; exit 2 is an error line.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from ddp_lint.analysis.config import ConfigError, Settings, load_settings, settings_from_mapping
from ddp_lint.analysis.registry import all_rules
from tests.fuzz.support import examples

KEYS = ["select", "ignore", "extend-select", "exclude", "extend-exclude", "per-file-ignores", "severity",
        "respect-gitignore", "extend_select", "per_file_ignores", "Select", "unknown", ""]
CODES = sorted(all_rules())
code_like = st.one_of(st.sampled_from(CODES), st.sampled_from(["ALL", "all", "DDP", "DDP0", "DDP9", "D", "",
                                                               "DDP001 ", "ddp001", "E501", "*", "ALL,DDP001"]),
                      st.text(max_size=8))
globs = st.one_of(st.sampled_from(["*.py", "tests/*", "**/x.py", "[", "[!a]", "a/**", "/abs/*", "", ".", "..",
                                   "\\", "*" * 50, "a[b-]c"]), st.text(max_size=20))
scalars = st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), code_like)
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=10), kids, max_size=4)),
                      max_leaves=12)
key_values = {
    "select": st.lists(code_like, max_size=5), "ignore": st.lists(code_like, max_size=5),
    "extend-select": st.lists(code_like, max_size=5), "exclude": st.lists(globs, max_size=4),
    "extend-exclude": st.lists(globs, max_size=4),
    "per-file-ignores": st.dictionaries(globs, st.lists(code_like, max_size=3), max_size=3),
    "severity": st.dictionaries(code_like, st.one_of(st.sampled_from(["error", "warning", "info", "hint"]),
                                                     st.text(max_size=8)), max_size=3),
    "respect-gitignore": st.booleans(),
}
tables = st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=10),
    values, max_size=5) | st.fixed_dictionaries({}, optional={k: v | values for k, v in key_values.items()})


def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\' or not (0x20 <= ord(c) < 0x7f):
            out.append(f"\\U{ord(c):08x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(v), repr(v))
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _toml(table: dict) -> str:
    return "[tool.ddp-lint]\n" + "".join(f"{_toml_str(str(k))} = {_toml_value(v)}\n" for k, v in table.items())


def _check_settings(s: Settings, names) -> None:
    codes = set(CODES)
    for name in names:
        enabled = s.enabled_codes(name)
        assert enabled <= codes, enabled - codes
        s.is_excluded(Path(name))


names = st.lists(st.one_of(st.sampled_from(["a.py", "tests/t.py", "/abs/x.py", "sub/dir/mod.pyi", "-"]),
                           st.text(min_size=1, max_size=20).filter(lambda n: "\x00" not in n)), max_size=3)


@examples(80, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=tables, names=names)
def test_config_values_are_settings_or_one_config_error(tmp_path_factory, table, names):
    path = tmp_path_factory.mktemp("c") / "pyproject.toml"
    path.write_text(_toml(table), encoding="utf-8")
    try:
        s = load_settings(path.parent)
    except ConfigError as e:
        assert str(path) in str(e)
        return
    _check_settings(s, names)


@examples(80)
@given(table=tables, names=names)
def test_editor_settings_are_settings_or_one_config_error(table, names):
    try:
        s = settings_from_mapping(table, source="client")
    except ConfigError as e:
        assert str(e).startswith("client")
        return
    _check_settings(s, names)


@examples(60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=200), tables.map(_toml).flatmap(
    lambda t: st.integers(0, len(t)).map(lambda i: t[:i]))))
def test_random_toml_text_is_settings_or_one_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("t") / "pyproject.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_settings(path.parent)
    except ConfigError as e:
        assert str(path) in str(e)


@examples(25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=tables)
def test_check_with_any_config_exits_0_1_or_2(tmp_path_factory, capsys, table):
    from ddp_lint.cli import main

    folder = tmp_path_factory.mktemp("k")
    cfg = folder / "ddp-lint.toml"
    cfg.write_text(_toml(table).replace("[tool.ddp-lint]\n", ""), encoding="utf-8")
    src = folder / "train.py"
    src.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\ndist.barrier()\n")
    code = main(["check", "--no-cache", "--config", str(cfg), str(src)])
    out = capsys.readouterr()
    assert code in (0, 1, 2)
    if code == 2:
        assert out.err.startswith("ddp-lint: error: "), out.err
    assert "Traceback" not in out.err
