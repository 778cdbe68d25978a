"""Configuration: the nearest ``.ddp-lint.toml`` / ``ddp-lint.toml`` (keys at top level) or
``pyproject.toml`` with a ``[tool.ddp-lint]`` table, plus overrides.

Discovery (``find_config``) follows Ruff's: in each folder from the checked path up,
``.ddp-lint.toml`` wins over ``ddp-lint.toml``, which wins over ``pyproject.toml`` (used only when it
has a ``[tool.ddp-lint]`` table); the first folder with one of them decides. The climb stops below a
folder that is world-writable and owned by another user (``/tmp``, a shared scratch space): a
configuration there could silence every rule, so it is ignored with a warning (git's
``safe.directory`` reasoning).

Keys (Ruff's spelling, kebab-case; snake_case accepted too):
  select, ignore, extend-select : list of codes or prefixes ("DDP1", "ALL")
  per-file-ignores              : {glob: [codes]}
  exclude, extend-exclude       : list of globs for folder walks
  respect-gitignore             : skip what .gitignore / .ignore / .git/info/exclude ignore (true)
"""
from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".hg", ".mypy_cache", ".nox", ".pants.d", ".pytype",
    ".ruff_cache", ".svn", ".tox", ".venv", "__pypackages__", "_build", "buck-out", "build", "dist",
    "node_modules", "venv", ".pytest_cache", "__pycache__", "site-packages", ".ddp-lint-cache",
)

_LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude")
_KNOWN = set(_LIST_KEYS) | {"per-file-ignores", "severity", "respect-gitignore", "output-format"}
OUTPUT_FORMAT_NAMES = ("concise", "full", "json", "sarif", "github", "junit", "text")
# the file names discovery looks for in each folder, highest precedence first (Ruff's order)
CONFIG_FILE_NAMES = (".ddp-lint.toml", "ddp-lint.toml", "pyproject.toml")


def is_config_file(name: str) -> bool:
    """A path (or URI) that names a configuration file discovery reads."""
    return name.replace("\\", "/").rsplit("/", 1)[-1] in CONFIG_FILE_NAMES


_SEVERITIES = ("error", "warning", "info", "hint")
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a larger pyproject.toml / --config file is refused, not read


class ConfigError(Exception):
    """A configuration value is invalid; the message names the key and the file."""


@dataclass
class Settings:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    severity: dict[str, str] = field(default_factory=dict)  # code -> error|warning|info|hint
    root: Path | None = None  # folder of the pyproject.toml, for per-file-ignores
    respect_gitignore: bool = True  # folder walks skip what git ignores (analysis/walk.py)
    # cross-file analysis may read the project's files from disk; False (not a configuration key: the
    # language server of an untrusted TCP client): only the open documents (flow.project.documents_only)
    read_project_files: bool = True
    output_format: str | None = None  # ``output-format``: the CLI's default format
    config_path: Path | None = None  # the file these settings came from (--show-settings)
    # discovery stopped below an unsafe folder, or similar: the CLI prints these, the server logs them
    warnings: list[str] = field(default_factory=list, compare=False)
    _codes_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def enabled_codes(self, filename: str | None = None) -> frozenset[str]:
        from .registry import matches, resolve_selection

        key = (tuple(self.select) if self.select is not None else None, tuple(self.ignore),
               tuple(self.extend_select))
        base = self._codes_cache.get(key)
        if base is None:
            base = self._codes_cache[key] = frozenset(
                resolve_selection(self.select, self.ignore, self.extend_select))
        if not filename or not self.per_file_ignores:
            return base
        rel = _relpath(filename, self.root)
        drop: list[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if _glob_match(rel, pattern):
                drop.extend(c.upper() for c in codes)
        if not drop:
            return base
        return frozenset(c for c in base if not matches(c, drop))

    def is_excluded(self, path: Path) -> bool:
        name = path.name
        rel = _relpath(str(path), self.root)
        for pat in self.exclude:
            if fnmatch.fnmatch(name, pat) or _glob_match(rel, pat):
                return True
        return False


def _relpath(filename: str, root: Path | None) -> str:
    try:
        p = Path(filename).resolve()
        if root is not None:
            return p.relative_to(root.resolve()).as_posix()
        return p.as_posix()
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
        return Path(filename).as_posix()


def _glob_match(rel: str, pattern: str) -> bool:
    if fnmatch.fnmatch(rel, pattern):
        return True
    # "tests/*" should match "tests/a/b.py"; a bare file name matches at any depth
    if "/" not in pattern and fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern):
        return True
    return fnmatch.fnmatch(rel, pattern.rstrip("/") + "/*")


def _read_toml(path: Path) -> dict:
    """Parse a TOML file; ConfigError (naming the file, and the line for a syntax error) when it
    cannot be read, is not a regular file (a FIFO or a device is never read) or is not valid TOML."""
    from .io import SourceError, read_regular_file

    try:
        raw, _ = read_regular_file(path, what="file", limit=MAX_CONFIG_BYTES)
    except IsADirectoryError:
        raise ConfigError(f"{path}: cannot read configuration: is a directory") from None
    except SourceError as e:
        why = str(e).removeprefix(f"{path}: ").removeprefix("not read: ")
        raise ConfigError(f"{path}: cannot read configuration: {why}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: invalid TOML: not valid UTF-8") from None
    if sys.version_info >= (3, 11):  # imported here: a run without a pyproject.toml never needs it
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends in "(at line L, column C)"; lead with file:line as compilers do
        import re

        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)\s*$", msg)
        if m:
            msg = msg[:m.start()].rstrip()
            raise ConfigError(f"{path}:{m.group(1)}:{m.group(2)}: invalid TOML: {msg}") from None
        m = re.search(r"\(at end of document\)\s*$", msg)
        if m:
            line = text.count("\n") + 1
            raise ConfigError(f"{path}:{line}: invalid TOML: {msg[:m.start()].rstrip()} (at end of file)") from None
        raise ConfigError(f"{path}: invalid TOML: {msg}") from None


def _tool_table(data: dict, path: Path) -> dict | None:
    """``[tool.ddp-lint]`` of a parsed pyproject.toml, None when absent; ConfigError when ``tool``
    or ``tool.ddp-lint`` is not a table (``tool = 5``, ``tool = "ddp-lint"``)."""
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table ([tool]), got {_kind(tool)}")
    table = tool.get("ddp-lint")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `tool.ddp-lint` must be a table ([tool.ddp-lint]), got {_kind(table)}")
    return table


def _kind(v) -> str:
    names = {str: "a string", int: "an integer", float: "a float", bool: "a boolean", list: "an array"}
    return names.get(type(v), type(v).__name__)


def unsafe_folder(folder: Path) -> bool:
    """True for a folder that is world-writable and owned by another user (``/tmp``): anyone can
    plant a configuration file there, so discovery never reads one from it."""
    if os.name != "posix":  # pragma: no cover - no POSIX ownership
        return False
    try:
        st = folder.stat()
    except OSError:
        return False
    return bool(st.st_mode & 0o002) and st.st_uid != os.geteuid()


def find_config(start: Path, warnings: list[str] | None = None) -> Path | None:
    """The nearest configuration file at or above ``start`` (see the module docstring).

    A pyproject.toml on the way that is not valid TOML, or whose ``tool`` is not a table, raises
    ConfigError naming the file (and line) instead of being skipped silently. The climb stops at a
    world-writable folder owned by another user; a configuration file found there is ignored and
    named in ``warnings``."""
    try:
        start = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError on 3.11): look from its folder
        start = Path(os.path.abspath(start)).parent
    d = start if start.is_dir() else start.parent
    for folder in (d, *d.parents):
        if unsafe_folder(folder):
            planted = [folder / n for n in CONFIG_FILE_NAMES if (folder / n).is_file()]
            if planted and warnings is not None:
                warnings.append(f"ignoring {planted[0]}: {folder} is world-writable and owned by another "
                                "user, so configuration discovery stops below it")
            return None
        for name in CONFIG_FILE_NAMES:
            cand = folder / name
            if not cand.is_file():
                continue
            if name != "pyproject.toml" or _tool_table(_read_toml(cand), cand) is not None:
                return cand
    return None


def find_pyproject(start: Path) -> Path | None:
    """Kept for callers of the older name: ``find_config``."""
    return find_config(start)


def load_settings(start: Path | str | None = None, config_file: Path | str | None = None) -> Settings:
    """Settings from ``config_file`` or the nearest pyproject.toml with a ``[tool.ddp-lint]``
    table at or above ``start``; defaults when there is none. Every problem is a ConfigError that
    names the file."""
    warns: list[str] = []
    if config_file is not None:
        path = Path(config_file)
    else:
        path = find_config(Path(start or os.getcwd()), warns)
        if path is None:
            s = Settings()
            s.warnings = warns
            return s
    data = _read_toml(path)
    standalone = path.name != "pyproject.toml"
    table = None if standalone and "tool" not in data else _tool_table(data, path)
    if table is None:
        # a ddp-lint.toml (discovered or --config) holds the keys at top level
        table = data if (standalone or config_file is not None) and "tool" not in data else {}
        where = str(path)
    else:
        where = f"{path} [tool.ddp-lint]"
    s = settings_from_mapping(table, source=where)
    s.root = path.parent.resolve()
    s.config_path = path
    s.warnings = warns
    return s


def settings_from_mapping(table, source: str = "settings", base: Settings | None = None) -> Settings:
    """Validate a mapping (pyproject table or editor settings) into Settings; ConfigError names
    the offending key."""
    from .registry import rule_index

    if not isinstance(table, dict):
        raise ConfigError(f"{source}: expected a table of settings, got {type(table).__name__}")
    s = Settings() if base is None else Settings(**{k: v for k, v in vars(base).items() if k != "_codes_cache"})
    codes = set(rule_index())  # every code, without importing the rules

    def check_codes(key, values):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ConfigError(f"{source}: `{key}` must be a list of rule codes, got {values!r}")
        for v in values:
            u = v.upper()
            if u != "ALL" and not any(c.startswith(u) for c in codes):
                raise ConfigError(f"{source}: `{key}` has unknown rule code or prefix {v!r}")
        return [v.upper() for v in values]

    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        if key not in _KNOWN:
            raise ConfigError(f"{source}: unknown key `{raw_key}` (known: {', '.join(sorted(_KNOWN))})")
        if key == "select":
            s.select = check_codes(key, value)
        elif key == "ignore":
            s.ignore = check_codes(key, value)
        elif key == "extend-select":
            s.extend_select = check_codes(key, value)
        elif key in ("exclude", "extend-exclude"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{source}: `{raw_key}` must be a list of glob patterns")
            s.exclude = list(value) if key == "exclude" else s.exclude + list(value)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: `{raw_key}` must be a table of glob = [codes]")
            s.per_file_ignores = {str(k): check_codes(f"{raw_key}.{k}", v) for k, v in value.items()}
        elif key == "output-format":
            if value not in OUTPUT_FORMAT_NAMES:
                raise ConfigError(f"{source}: `{raw_key}` must be one of {', '.join(OUTPUT_FORMAT_NAMES)}, "
                                  f"got {value!r}")
            s.output_format = value
        elif key == "respect-gitignore":
            if not isinstance(value, bool):
                raise ConfigError(f"{source}: `{raw_key}` must be true or false, got {value!r}")
            s.respect_gitignore = value
        elif key == "severity":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: `severity` must be a table of CODE = level")
            out = {}
            for k, v in value.items():
                if k.upper() not in codes:
                    raise ConfigError(f"{source}: `severity` has unknown rule code {k!r}")
                if v not in _SEVERITIES:
                    raise ConfigError(f"{source}: `severity.{k}` must be one of {', '.join(_SEVERITIES)}, got {v!r}")
                out[k.upper()] = v
            s.severity = out
    s._codes_cache = {}
    return s
