"""Rule base class and the registry.

A rule is one class in one file under ``analysis/rules/``. Its docstring is its documentation, in
Ruff's shape (What it does / Why is this bad? / Example / Use instead / Fix safety). Rules never walk
the tree: they declare ``node_types`` and get ``visit(node, ctx)`` for each such node found by the
engine's single traversal, and/or implement ``finish(ctx)`` and query the semantic indexes.
"""
from __future__ import annotations

import ast

from .model import Severity
from .urls import RULE_DOCS_BASE_URL as DOCS_BASE_URL  # noqa: F401  # re-exported: the engine's DDP000 url
from .urls import rule_docs_url

TYPE_CHECKING = False  # no `typing` import at start-up: a gated-out file never needs it
if TYPE_CHECKING:  # pragma: no cover
    from typing import ClassVar

    from .context import Context


class NoCase(str):
    """A ``requires_text`` needle that matches in any letter case (``rank``, ``Rank``, ``RANK``)."""

    __slots__ = ()


# Every static rule is about torch: a file that never spells "torch" has no finding (a rule about
# a library that builds the torch wrapper for the file, Accelerate, widens it with ``base_text``).
BASE_TEXT = ("torch",)


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    default_enabled: ClassVar[bool] = True
    # "always", "sometimes" or "never": whether findings carry a fix (informational, for docs)
    fix_availability: ClassVar[str] = "never"
    node_types: ClassVar[tuple[type, ...]] = ()
    # The text gate (a contract, not a heuristic): the rule can only fire on a file whose text
    # contains "torch", one of ``requires_text`` (when given) and, for each group of
    # ``requires_text_all``, one member of that group. The engine never runs the rule on other text,
    # and does not even parse a file that no enabled rule's gate admits (see ``gate_of`` and
    # ``engine.passes_gate``). A ``NoCase`` needle matches in any letter case. Declare every
    # spelling the rule can see: an identifier it matches case-insensitively, an environment key,
    # the last component of every qualified name it resolves.
    requires_text: ClassVar[tuple[str, ...]] = ()
    # the first group, "torch" unless a rule names what else can build its torch object
    base_text: ClassVar[tuple[str, ...]] = BASE_TEXT
    requires_text_all: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # A second gate, for the rules that need a collective site (the flow rules): the file holds one
    # of ``flow.reach.REACH_TEXT``, or a project module it imports, transitively, does (decided on
    # the text of the files, through a text-level import graph: ``engine.admitted_for``).
    requires_reach: ClassVar[bool] = False
    # False for codes the engine emits itself (DDP000) and runtime findings (DDP9xx): they exist for
    # docs, selection and hover; the static rule loop never runs them.
    static: ClassVar[bool] = True

    @classmethod
    def gate_of(cls) -> tuple[tuple[str, ...], ...]:
        """The rule's text gate in conjunctive form: every group needs one of its needles."""
        # order: the shared context groups ("distributed", "DataLoader"...) reject most files and
        # are memoised across rules, so they are tried before the rule's own needles
        groups: list[tuple[str, ...]] = [tuple(cls.base_text)]
        groups.extend(tuple(g) for g in cls.requires_text_all)
        if cls.requires_text:
            groups.append(tuple(cls.requires_text))
        return tuple(groups)

    @classmethod
    def reach(cls, text: str, filename: str | None):
        """A rule's own second gate, on text alone, for a finding that needs another file of the
        project (a caller elsewhere): None (no such gate), or (may fire, {path: content hash} of the
        files read). Called only when the text gate admits ``text``."""
        return None

    def visit(self, node: ast.AST, ctx: "Context") -> None:  # pragma: no cover - overridden
        pass

    def finish(self, ctx: "Context") -> None:
        pass

    # -- docs --------------------------------------------------------------------------------
    @classmethod
    def docs(cls) -> str:
        import inspect  # lazy: docs are not on the check path (CLI start-up)
        import textwrap

        return textwrap.dedent(inspect.cleandoc(cls.__doc__ or "")).strip() + "\n"

    @classmethod
    def url(cls) -> str:
        return rule_docs_url(cls.code)

    @classmethod
    def render_docs(cls) -> str:
        head = f"# {cls.name} ({cls.code})\n\n"
        meta = (
            f"Default severity: {cls.severity.value}. "
            f"{'Enabled' if cls.default_enabled else 'Disabled'} by default. "
            f"Fix: {cls.fix_availability}.\n\n"
        )
        return head + meta + cls.docs()


_RULES: dict[str, type[Rule]] | None = None


def all_rules() -> dict[str, type[Rule]]:
    """code -> rule class, discovered once from ``analysis.rules`` (one module per rule)."""
    global _RULES
    if _RULES is None:
        import importlib
        import pkgutil

        from . import rules as pkg

        found: dict[str, type[Rule]] = {}
        for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if mod.name.startswith("_"):
                continue
            module = importlib.import_module(f"{pkg.__name__}.{mod.name}")
            for obj in vars(module).values():
                if (
                    isinstance(obj, type)
                    and issubclass(obj, Rule)
                    and obj is not Rule
                    and obj.__module__ == module.__name__
                ):
                    if obj.code in found:
                        raise RuntimeError(f"duplicate rule code {obj.code}")
                    found[obj.code] = obj
        _RULES = dict(sorted(found.items()))
    return _RULES


# -- the rule index: what the check path needs before any rule module is imported -----------------
# ``analysis/rules/_index.py`` holds, per code, the rule's module, whether it is on by default and
# static, its text gate and whether it has a reach gate; it is generated from the rule classes
# (``python -m ddp_lint.analysis.ruledocs``, with the docs) and tests/test_gate.py holds it equal to them. The
# engine gates a file with it and imports only the rules that the gate admits (CLI start-up).

def index_source() -> str:
    """The text of ``rules/_index.py`` for the rule classes as they are."""
    lines = ['"""Generated by `python -m ddp_lint.analysis.ruledocs` from the rule classes: do not edit.',
             "",
             "code: (module, default_enabled, static, gate groups (needle, any letter case), requires_reach,",
             'has its own reach gate)"""', "", "RULES = {"]
    for code, r in all_rules().items():
        groups = tuple(tuple((str(n), isinstance(n, NoCase)) for n in g) for g in r.gate_of()) if r.static else ()
        own = r.reach.__func__ is not Rule.reach.__func__
        lines.append(f"    {code!r}: ({r.__module__.rsplit('.', 1)[1]!r}, {r.default_enabled!r}, {r.static!r},")
        lines.append(f"                {groups!r},")
        lines.append(f"                {r.requires_reach!r}, {own!r}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


_INDEX: dict | None = None


def rule_index() -> dict:
    """code -> (module, default_enabled, static, gate groups with ``NoCase`` needles, requires_reach,
    has_reach), without importing any rule module."""
    global _INDEX
    if _INDEX is None:
        from .rules._index import RULES

        _INDEX = {c: (m, d, st, tuple(tuple(NoCase(n) if nc else n for n, nc in g) for g in groups), rr, own)
                  for c, (m, d, st, groups, rr, own) in RULES.items()}
    return _INDEX


def load_rule(code: str) -> type[Rule]:
    """The class of one rule, importing its module only."""
    if _RULES is not None:
        return _RULES[code]
    import importlib

    # the rules' project scan installs the flow layer's callers hook (``rules._common``): every
    # rule sees it, whichever rules were selected, so one rule's findings never depend on the others
    importlib.import_module(f"{__package__}.rules._common")
    module = importlib.import_module(f"{__package__}.rules.{rule_index()[code][0]}")
    for obj in vars(module).values():
        if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and getattr(obj, "code", None) == code:
            return obj
    raise KeyError(code)  # pragma: no cover - the index test keeps them equal


def get_rule(code: str) -> type[Rule] | None:
    return all_rules().get(code.upper())


def matches(code: str, selectors) -> bool:
    """``code`` is one of ``selectors`` (codes or prefixes); ``ALL`` matches every code, in
    ``select``, ``ignore``, ``extend-select`` and ``per-file-ignores`` alike (as in Ruff)."""
    return any(s == "ALL" or code.startswith(s) for s in selectors)


def resolve_selection(select=None, ignore=(), extend_select=()) -> list[str]:
    """Codes enabled for a selection, Ruff-style: ``select`` replaces the default set (prefixes
    allowed, ``ALL`` selects everything), ``extend-select`` adds, ``ignore`` removes."""
    rules = {c: e[1] for c, e in rule_index().items()}  # code -> on by default (no rule imported)
    if select is None:
        enabled = {c for c, on in rules.items() if on}
    else:
        sel = [s.upper() for s in select]
        enabled = {c for c in rules if matches(c, sel)}
    ext = [s.upper() for s in extend_select]
    enabled |= {c for c in rules if matches(c, ext)}
    ign = [s.upper() for s in ignore]
    enabled = {c for c in enabled if not matches(c, ign)}
    return sorted(enabled)

