"""Editor settings for the language server.

They arrive as ``initializationOptions`` (at start), as the answer to ``workspace/configuration``
(section ``ddp-lint``) and with ``workspace/didChangeConfiguration``. The names follow the VS Code
extension's settings (``ddp-lint.enable``, ``ddp-lint.run.nproc``...); snake_case and kebab-case
spellings, a nested ``{"ddp-lint": {...}}`` or ``{"settings": {...}}`` wrapper and dotted keys
(``"run.nproc": 2``) are accepted too, since every client spells them a little differently.

An invalid value never stops the server: it is reported (``window/logMessage`` and one
``window/showMessage``) and the key keeps its default.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.config import ConfigError, Settings, load_settings, settings_from_mapping

log = logging.getLogger("ddp-lint.server")

SECTION = "ddp-lint"
LOG_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "warn": logging.WARNING,
              "info": logging.INFO, "debug": logging.DEBUG, "trace": logging.DEBUG, "off": logging.CRITICAL + 10}


@dataclass
class RunSettings:
    nproc: int | None = None
    timeout_seconds: float = 60.0
    emulate: str = "auto"  # auto | on | off
    backend: str = "auto"  # auto | nccl | gloo
    python: str | None = None
    args: list[str] = field(default_factory=list)


@dataclass
class ServerSettings:
    enable: bool = True
    select: list[str] | None = None
    ignore: list[str] | None = None
    extend_select: list[str] | None = None
    severity: dict[str, str] = field(default_factory=dict)
    debounce_ms: int = 150
    lint_on_change: bool = True
    log_level: str = "info"
    run: RunSettings = field(default_factory=RunSettings)
    code_lens: bool = False  # "Run with N ranks" / "Run with torchrun" lenses (lsp_server/lenses.py)

    @property
    def log_level_no(self) -> int:
        return LOG_LEVELS.get(self.log_level, logging.INFO)


def capped(text: str, limit: int) -> str:
    """``text``, cut to about ``limit`` characters with a note of its full length."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 24, 8)] + f"... ({len(text)} chars)"


def _norm(key: str) -> str:
    """camelCase / kebab-case / snake_case -> snake_case."""
    out = []
    for ch in str(key):
        if ch.isupper():
            out.append("_" + ch.lower())
        elif ch == "-":
            out.append("_")
        else:
            out.append(ch)
    return "".join(out).lstrip("_")


def unwrap(raw) -> dict:
    """Find our settings inside whatever a client sent."""
    if not isinstance(raw, dict):
        return {}
    for k in (SECTION, "ddp_lint", "ddpLint", "settings"):
        v = raw.get(k)
        if isinstance(v, dict):
            raw = v
            break
    # dotted keys ("run.nproc") -> nested
    out: dict = {}
    for k, v in raw.items():
        if isinstance(k, str) and "." in k:
            head, _, tail = k.partition(".")
            out.setdefault(head, {})
            if isinstance(out[head], dict):
                out[head][tail] = v
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k].update(v)
        else:
            out[k] = v
    return out


def merge(*layers: dict) -> dict:
    """Later layers win; nested ``run`` tables merge key by key."""
    out: dict = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = {**out[k], **v}
            else:
                out[k] = v
    return out


def parse(raw: dict) -> tuple[ServerSettings, list[str]]:
    """Validate a settings mapping. Returns the settings and a list of problems (each names the
    key); an invalid key keeps its default."""
    s = ServerSettings()
    problems: list[str] = []

    def bad(key, msg):
        # keys and values come from the client: a 100 KB key must not come back as a 100 KB popup
        problems.append(f"setting `{SECTION}.{capped(str(key), 80)}`: {capped(str(msg), 300)}")

    def codes(key, v):
        if v is None:
            return None
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            bad(key, f"expected a list of rule codes, got {v!r}")
            return None
        try:
            settings_from_mapping({"select": v}, source="editor settings")
        except ConfigError as e:
            bad(key, str(e).split(": ", 1)[-1])
            return None
        return [x.upper() for x in v]

    for key, v in raw.items():
        k = _norm(key)
        if v is None:
            continue
        if k == "enable":
            if isinstance(v, bool):
                s.enable = v
            else:
                bad(key, f"expected true or false, got {v!r}")
        elif k in ("select", "ignore", "extend_select"):
            got = codes(key, v)
            if got is not None:
                # an empty select means "not set" (the defaults, or pyproject's), as in VS Code's UI
                setattr(s, k, got if got or k != "select" else None)
        elif k == "severity":
            if not isinstance(v, dict):
                bad(key, f"expected a table of CODE: level, got {v!r}")
                continue
            try:
                s.severity = settings_from_mapping({"severity": dict(v)}, source="editor settings").severity
            except ConfigError as e:
                bad(key, str(e).split(": ", 1)[-1])
        elif k in ("debounce_ms", "debounce"):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 60_000:
                s.debounce_ms = int(v)
            else:
                bad(key, f"expected milliseconds between 0 and 60000, got {v!r}")
        elif k == "lint_on_change":
            if isinstance(v, bool):
                s.lint_on_change = v
            else:
                bad(key, f"expected true or false, got {v!r}")
        elif k in ("lint_on", "run_on"):  # alternative spelling: "change" | "save"
            if v in ("change", "onChange", "type", "onType"):
                s.lint_on_change = True
            elif v in ("save", "onSave"):
                s.lint_on_change = False
            else:
                bad(key, f"expected \"change\" or \"save\", got {v!r}")
        elif k in ("code_lens", "code_lenses"):
            if isinstance(v, bool):
                s.code_lens = v
            else:
                bad(key, f"expected true or false, got {v!r}")
        elif k == "log_level":
            if isinstance(v, str) and v.lower() in LOG_LEVELS:
                s.log_level = v.lower()
            else:
                bad(key, f"expected one of {', '.join(LOG_LEVELS)}, got {v!r}")
        elif k == "run":
            if not isinstance(v, dict):
                bad(key, f"expected a table, got {v!r}")
                continue
            _parse_run(v, s.run, bad)
        elif k in ("interpreter", "path", "import_strategy", "show_notifications", "trace", "server"):
            pass  # client-side settings (the VS Code extension uses them); not ours
        else:
            bad(key, "unknown setting (ignored)")
    return s, problems


def _parse_run(v: dict, run: RunSettings, bad) -> None:
    for key, val in v.items():
        k = _norm(key)
        name = f"run.{key}"
        if val is None:
            continue
        if k == "nproc":
            if isinstance(val, int) and not isinstance(val, bool) and 1 <= val <= 64:
                run.nproc = val
            elif val in ("auto", 0):
                run.nproc = None
            else:
                bad(name, f"expected a number of ranks between 1 and 64 (or \"auto\"), got {val!r}")
        elif k in ("timeout_seconds", "timeout"):
            if isinstance(val, (int, float)) and not isinstance(val, bool) and 0 < val <= 24 * 3600:
                run.timeout_seconds = float(val)
            else:
                bad(name, f"expected seconds (> 0), got {val!r}")
        elif k == "emulate":
            if isinstance(val, bool):
                run.emulate = "on" if val else "off"
            elif val in ("auto", "on", "off"):
                run.emulate = val
            else:
                bad(name, f"expected \"auto\", \"on\" or \"off\", got {val!r}")
        elif k == "backend":
            if val in ("auto", "nccl", "gloo"):
                run.backend = val
            else:
                bad(name, f"expected \"auto\", \"nccl\" or \"gloo\", got {val!r}")
        elif k in ("python", "interpreter"):
            if isinstance(val, str) and val.strip():
                run.python = val
            elif isinstance(val, list) and val and all(isinstance(x, str) for x in val):
                run.python = val[0]
            else:
                bad(name, f"expected a path to a Python interpreter, got {val!r}")
        elif k == "args":
            if isinstance(val, str):
                import shlex

                try:
                    run.args = shlex.split(val)
                except ValueError as e:
                    bad(name, f"cannot split {val!r}: {e}")
            elif isinstance(val, list) and all(isinstance(x, (str, int, float)) for x in val):
                run.args = [str(x) for x in val]
            else:
                bad(name, f"expected a list of strings, got {val!r}")
        else:
            bad(name, "unknown setting (ignored)")


class ProjectSettings:
    """The nearest .ddp-lint.toml / ddp-lint.toml / pyproject.toml ``[tool.ddp-lint]`` (the CLI's
    discovery, ``analysis.config.find_config``), cached per folder, overlaid with the
    editor's select/ignore/severity. A broken pyproject is reported once and defaults apply."""

    def __init__(self):
        self._cache: dict[str, tuple[Settings | None, str | None]] = {}

    def clear(self) -> None:
        self._cache.clear()

    def for_folder(self, folder: str | None, editor: ServerSettings) -> tuple[Settings, str | None]:
        key = folder or ""
        hit = self._cache.get(key)
        if hit is None:
            err = None
            try:
                base = load_settings(Path(folder)) if folder else Settings()
            except ConfigError as e:
                base, err = Settings(), str(e)
            except OSError as e:
                base, err = Settings(), f"{folder}: {e}"
            except RuntimeError as e:
                # pathlib's "Symlink loop from ..." (a folder named like a .py file that links to
                # itself): no pyproject.toml can be found there; lint with the defaults
                base = Settings()
                log.warning("%s: %s; no pyproject.toml looked up, using the default settings", folder, e)
            for w in base.warnings:  # e.g. discovery stopped below a world-writable folder
                log.warning("%s", w)
            hit = self._cache[key] = (base, err)
        base, err = hit
        return _overlay(base, editor), err

    def cached_keys(self):
        return list(self._cache)


_overlay_cache: dict = {}


def _overlay(base: Settings, editor: ServerSettings) -> Settings:
    """Editor settings on top of the project's: ``select`` replaces, ``ignore`` and
    ``extendSelect`` add, ``severity`` overrides per code."""
    key = (id(base), tuple(editor.select) if editor.select is not None else None,
           tuple(editor.ignore or ()), tuple(editor.extend_select or ()), tuple(sorted(editor.severity.items())))
    hit = _overlay_cache.get(key)
    if hit is not None and hit[0] is base:
        return hit[1]
    over: dict = {}
    if editor.select is not None:
        over["select"] = editor.select
    if editor.ignore:
        over["ignore"] = list(base.ignore) + editor.ignore
    if editor.extend_select:
        over["extend-select"] = list(base.extend_select) + editor.extend_select
    if editor.severity:
        over["severity"] = {**base.severity, **editor.severity}
    if not over:
        s = base
    else:
        s = settings_from_mapping(over, source="editor settings", base=base)
        s.root = base.root
    if len(_overlay_cache) > 256:
        _overlay_cache.clear()
    _overlay_cache[key] = (base, s)
    return s
