"""The semantic layer every flow-aware rule queries: what is uniform across ranks, which calls run
collectives (through helpers in this and other files of the project), and which collectives run on
only some ranks.

- ``project``: finding, reading and caching the project's own modules;
- ``bindings``: which bindings of a name reach a use;
- ``uniformity``: uniform / rank-varying / unknown;
- ``summaries``: collective sites and per-function summaries (``unconditional``: does a statement
  run on every call of its function);
- ``control``: control dependence (conditions, early exits, loops);
- ``findings``: the words and the one builder of a finding about a divergent site.
- ``shapes`` (with ``shape_facts``, ``extents``): is a tensor's shape, a sequence's length, a loop's
  trip count the same on every rank (parameters symbolic, bound at calls);
- ``helper_calls``: calls of project functions, arguments bound to parameters; ``calls``: a
  module's calls by scope and name, names that may hold a DDP model, project-class instances;
  ``context``: a helper as one call runs it; ``instances``: which project class a value (or each
  element of a container) is an instance of; ``buffers``: does a module have buffers; ``sinks``: which
  parameters of a helper reach a collective's argument; ``imports``: what importing a module runs.

Per-file facts the older rules query, one concept a module, on the same vocabulary:
- ``rank_tests``: is an expression the rank, does a condition select some ranks or the main one;
- ``rank``: which ranks run a node (the rank guards around it);
- ``assignments``: the plain assignment that gives a name its value at a use;
- ``wrappers``: the file's own functions that wrap a call (``setup()`` around the init);
- ``models``: the DDP model of a file (is it distributed, which name holds the wrapper);
- ``devices``: where a module or tensor lives, which device variable is in scope;
- ``tensors``: tensor constructors; ``testing``: test files and expected failures.

``for_context(ctx)`` gives the one ``Analysis`` of a check (built on first use).
"""
from __future__ import annotations

import ast
import os
from operator import attrgetter

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names, parent
from ..torch_api import SPAWNS
from . import project
from .assignments import _is_param
from .calls import instance_names
from .instances import ctor_class, instance_class, method_class, self_attr_class
from .elements import element_targets, one_target
from .metric_sync import metric_state
from .summaries import Summaries
from .records import inherited_method, method_of, own_method
from .records import _NOT_PROJECT  # noqa: F401  (top-level modules never part of the user's project)
from .uniformity import X, Evaluator, Value, join
from .values import Cuts

_MAX_MODULES = 64


class Analysis(Summaries):
    def __init__(self, filename: str, sem, text: str):
        path = os.path.abspath(filename) if filename and not filename.startswith("<") else None
        self.main = project.ModuleView(path, sem.tree, sem, "", text)  # its own digest is not needed
        self._evaluators: dict[int, Evaluator] = {}
        self.cut_state = Cuts()  # the cuts of this check's questions (``values.keep``)
        self._in_progress: set = set()
        self._provisional: dict = {}
        self._cycle = False
        self._view_stack: list = []
        self._deps: dict[str, str | None] = {}  # path -> content hash; None: probed and absent
        self._validated: set[int] = set()
        self._loaded = 0
        self._truncated = False  # a module was refused for the budget (``_MAX_MODULES``)
        self._views_used: list = []  # the project's views this check loaded
        self.contexts: dict = {}  # call-site contexts (see ``context``), by callee and bindings
        self.ctor_views: dict[int, object] = {}  # id(DDP(...) call bound in a context) -> its view
        self._resolved: dict = {}  # (view, call) -> resolve_call's answer, once per check
        self._modules: dict = {}  # (importing path, module, level) -> view or None, once per check
        self._collected: dict = {}  # ``class_chains.collect_binding``'s answers, once per check

    # -- plumbing ---------------------------------------------------------------------------
    def evaluator(self, view, ctx=None) -> Evaluator:
        if ctx is not None:
            ev = ctx.memo.get("evaluator")
            if ev is None:
                ev = ctx.memo["evaluator"] = Evaluator(self, view, ctx)
            return ev
        ev = self._evaluators.get(id(view))
        if ev is None:
            ev = self._evaluators[id(view)] = Evaluator(self, view)
        return ev

    @property
    def truncated(self) -> bool:
        """A module was refused for the budget (``_MAX_MODULES``) during this check: an answer
        that needs every module of a program may be incomplete."""
        return self._truncated

    def release(self) -> None:
        """Drop what this check computed (the engine calls it when the check is over): the
        evaluators, contexts and caches that point back at this object, and the checked file's
        own memo. The project's other modules keep theirs (they are shared across checks)."""
        self.main.memo.clear()
        self.main.life.alive = False  # a shared view whose memo holds the checked file's nodes is stale
        if self._truncated:
            # memos made while a module was refused may be partial (a helper left unresolved):
            # computed again by the next check that needs them, within its own budget
            for v in self._views_used:
                if v is not self.main:
                    v.memo.clear()
                    v.dep_hashes.clear()
        deps = self._deps
        self.__dict__.clear()
        self._deps = deps

    def dependencies(self) -> tuple[tuple[str, str | None], ...]:
        """(path, content hash) of every project file this analysis read, and (path, None) of every
        file an import probed and found absent (a module created there later changes the result)."""
        return tuple(sorted(self._deps.items()))

    def depend_on_listing(self, folder: str, digest: str | None) -> None:
        """This check read ``folder``'s listing (``digest``: ``cache.listing_digest``; None: it
        could not be listed, then a folder appearing there changes the result)."""
        self._deps.setdefault(folder, digest)

    def depend_on_files(self, deps: dict) -> None:
        """This check's answer rests on these files' text too ({path: content hash, None for one
        looked for and absent}: a ``reach`` no that let a rule skip a question)."""
        for p, h in deps.items():
            self._deps.setdefault(p, h)

    def _load(self, path: str, direct: bool = False):
        if path == self.main.path:
            self._depend(self.main)
            return self.main
        if self._loaded >= _MAX_MODULES and path not in self._deps and not direct:
            # (a module the checked file imports itself is always read: which rules ran first,
            # and how far they explored the project, must not decide what the file's own
            # imports resolve to)
            # the answers computed from now on may miss this module: the other modules' memos of
            # this check are dropped when it ends (``release``), not kept for the next check
            self._truncated = True
            return None
        v = project.load(path)
        if v is None:  # unparseable (or unreadable): the result depends on its content all the same
            h = project.current_hash(path)
            if h is not None:  # (None would mean "absent": a file that cannot be read is not)
                self._deps.setdefault(path, h)
            return None
        self._loaded += 1
        self._views_used.append(v)
        if id(v) not in self._validated:
            self._validated.add(id(v))
            if v.stale():
                v.forget()
            for p, h in list(v.dep_hashes.items()):
                if not project.still_absent(p) if h is None else project.current_hash(p) != h:
                    v.forget()
                    break
        self._deps[path] = v.digest
        for dep in v.dep_hashes.items():
            self._deps.setdefault(*dep)
        self._depend(v)
        return v

    def _depend(self, v) -> None:
        """The views being analysed (``_view_stack``) now depend on ``v``: on its content, and on
        its nodes staying alive (their memos may keep what was computed from them)."""
        for outer in self._view_stack:
            if outer is not v and outer is not self.main:
                if v is not self.main:
                    outer.dep_hashes[v.path] = v.digest
                outer.depends_on(v)

    def summary_context(self, view, fn, binds: dict, call: ast.Call):
        """A context of ``fn`` binding what one call of it passes (``nones.caller_context``), as deep
        as contexts go: what ``fn`` calls is read from the plain summaries."""
        from .context import MAX_DEPTH, Ctx  # lazy: context sits above uniformity

        return Ctx(view, fn, binds, {}, call, view.path, MAX_DEPTH)

    def view_of(self, path: str, direct: bool = False):
        """The view of the project file at ``path`` (a dependency of this check), or None. ``direct``:
        read it even past the number of modules a check explores (a query that always reads it)."""
        return self._load(os.path.abspath(path), direct=direct) if path and not path.startswith("<") else None

    def module_view(self, view, module: str, level: int):
        if view.path is None:
            return None
        key = (view.path, module, level)
        if key in self._modules:
            got = self._modules[key]
            if got is not None:
                self._depend(got)  # resolved earlier in this check, for another view perhaps
            return got
        absent: list[str] = []
        path = project.resolve(view.path, module, level, absent)
        for p in absent:  # negative dependencies: a module appearing there changes the answer
            self._deps.setdefault(p, None)
            for outer in (view, *self._view_stack):
                if outer is not self.main:
                    outer.dep_hashes.setdefault(p, None)
        direct = view is self.main and (module, level) in self._own_imports()
        got = self._modules[key] = self._load(path, direct=direct) if path else None
        return got

    def _own_imports(self) -> frozenset:
        """(module, level) of every import statement of the checked file (``from a.b import c``:
        ``a.b`` and ``a.b.c``; ``import a.b``: ``a`` and ``a.b``)."""
        got = self.__dict__.get("_imports")
        if got is None:
            out = set()
            for n in self.main.sem.imports:  # every import statement, collected by its one traversal
                if isinstance(n, ast.Import):
                    for a in n.names:
                        parts = a.name.split(".")
                        out.update((".".join(parts[:i]), 0) for i in range(1, len(parts) + 1))
                elif isinstance(n, ast.ImportFrom):
                    base = n.module or ""
                    out.add((base, n.level))
                    out.update((f"{base}.{a.name}" if base else a.name, n.level) for a in n.names)
            got = self.__dict__["_imports"] = frozenset(out)
        return got

    # -- call resolution -----------------------------------------------------------------------
    def resolve_call(self, view, call: ast.Call):
        """(view, function node) for a call of a function of this project, else None. Class
        constructors resolve to ``__init__``."""
        key = (view, call)  # both hash by identity (``id()`` keys would allocate two ints)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        got = self._resolved[key] = self._resolve_call(view, call)
        return got

    def resolve_targets(self, view, call: ast.Call) -> list:
        """Every (view, function) ``call`` may run: the methods of each class whose instances the
        container it reads an element of may hold (``for cb in self.callbacks: cb.m(self)``),
        else ``resolve_call``'s one answer; empty when unknown."""
        got = element_targets(self, view, call, _NOT_PROJECT)
        if got is None:
            one = self.resolve_call(view, call)
            return [one] if one is not None else []
        return got

    def _resolve_call(self, view, call: ast.Call):
        f = call.func
        if isinstance(f, ast.Name):
            got = self._resolve_name(view, f.id, call)
            if got is None and f.id not in view.defs and f.id not in view.imports:
                got = one_target(element_targets(self, view, call, _NOT_PROJECT))  # ``for h in hooks: h(x)``
            return got
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Subscript):
            return one_target(element_targets(self, view, call, _NOT_PROJECT))  # ``self.cbs[0].m()``
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and isinstance(f.value.func, (ast.Name, ast.Call)):
            got = ctor_class(self, view, f.value, _NOT_PROJECT)  # ``Cls(...).m(...)``, ``make(...)(...).m(...)``
            return own_method(*got, f.attr) if got is not None else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            base = f.value.id
            if base == "self":
                # its own method, or one it inherits: the first class of its method resolution
                # order that defines it, a project base class in another module included
                cls = method_class(view, call)
                return method_of(self, view, cls, f.attr, _NOT_PROJECT) if cls is not None else None
            imp = view.imports.get(base)
            if imp is not None and imp[0] not in _NOT_PROJECT and _local_binding(view, base, call) is False:
                mod, level, attr = imp
                full = f"{mod}.{attr}" if (attr and mod) else (attr or mod)
                v2 = self.module_view(view, full, level)
                if v2 is not None:
                    return _lookup(v2, f.attr)
            if base in instance_names(view):
                got = self._instance_class(view, f.value, call)
                got = own_method(*got, f.attr) if got is not None else None
                if got is not None:
                    return got
            # an element of a container of instances: ``for cb in self.callbacks: cb.m(self)``
            return one_target(element_targets(self, view, call, _NOT_PROJECT))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and isinstance(f.value.value, ast.Name) \
                and f.value.value.id == "self":
            # ``self.ckpt.load(...)`` where every binding of ``self.ckpt`` in the class (and its
            # project base classes) constructs one project class: its method ``load``
            got = self_attr_class(self, view, f.value, _NOT_PROJECT)
            if got is not None:
                return own_method(*got, f.attr)
        return None

    def _instance_class(self, view, name: ast.Name, at: ast.AST):
        """(view, class) when ``name`` holds an instance of one class of the project at ``at``
        (``instances.instance_class``)."""
        return instance_class(self, view, name, at, _NOT_PROJECT)

    def _resolve_name(self, view, name: str, at: ast.AST, depth: int = 0):
        loc = _local_import(view, name, at)
        if loc is not None:  # ``from pkg.mod import f`` inside the calling function
            mod, level, attr = loc
            if (not level and mod.split(".", 1)[0] in _NOT_PROJECT) or depth > 3:
                return None
            return self._resolve_in(view, mod, level, attr, depth)
        if name not in view.defs and name not in view.classes:
            imp = view.imports.get(name)
            if imp is None:
                if view.star_imports and depth <= 3 and not _local_binding(view, name, at):
                    return self._resolve_star(view, name, depth)
                return None
            if imp[0].split(".", 1)[0] in _NOT_PROJECT:
                return None
        if _local_binding(view, name, at):
            return None
        if name in view.defs:
            return view, view.defs[name]
        if name in view.classes:
            return _ctor(view, view.classes[name])
        imp = view.imports.get(name)
        if imp is None or depth > 3:
            return None
        mod, level, attr = imp
        if attr is None:
            return None
        return self._resolve_in(view, mod, level, attr, depth)

    def _resolve_in(self, view, mod: str, level: int, attr: str, depth: int):
        """``_resolve_name`` of ``attr`` in the project module ``mod`` that ``view`` imports."""
        v2 = self.module_view(view, mod, level)
        if v2 is None:
            return None
        got = _lookup(v2, attr)
        if got is None and (attr in v2.imports or v2.star_imports):
            # re-exported: imported by name there (a package's __init__), or star-imported from
            # another project module (``from pkg.mesh import *`` in ``pkg/groups.py``)
            return self._resolve_name(v2, attr, v2.tree, depth + 1)
        return got

    def resolve_class(self, view, expr, depth: int = 0):
        """(view, ClassDef) of the project class ``expr`` names (a base class, a name or
        ``mod.Cls``): defined in the module, imported from a project module, or re-exported by a
        package's ``__init__``; else None."""
        if depth > 3:
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            imp = view.imports.get(expr.value.id)
            if imp is None or imp[0].split(".", 1)[0] in _NOT_PROJECT:
                return None
            mod, level, attr = imp
            v2 = self.module_view(view, f"{mod}.{attr}" if (attr and mod) else (attr or mod), level)
            return None if v2 is None else self.resolve_class(v2, ast.Name(id=expr.attr, ctx=ast.Load()), depth + 1)
        if not isinstance(expr, ast.Name):
            return None
        if expr.id in view.classes:
            return view, view.classes[expr.id]
        imp = view.imports.get(expr.id)
        if imp is None or imp[2] is None or (not imp[1] and imp[0].split(".", 1)[0] in _NOT_PROJECT):
            return None
        mod, level, attr = imp
        v2 = self.module_view(view, mod, level)
        if v2 is None and not mod and level:  # ``from . import Cls``: the package's __init__
            return None
        if v2 is None:
            return None
        return self.resolve_class(v2, ast.Name(id=attr, ctx=ast.Load()), depth + 1)

    def _resolve_star(self, view, name: str, depth: int):
        """``name`` from one of the project modules that ``view`` star-imports (``from timm.utils
        import *``), the last such import winning as at run time; a name bound at the module's top
        level, or private (``_x``, which ``*`` does not export), is not one of them."""
        if name.startswith("_") or name in view.sem.assignments(view.tree):
            return None
        for mod, level in reversed(view.star_imports):
            if not level and mod.split(".", 1)[0] in _NOT_PROJECT:
                continue
            v2 = self.module_view(view, mod, level)
            if v2 is None or v2 is view:
                continue
            got = _lookup(v2, name)
            if got is None and (name in v2.imports or v2.star_imports):
                got = self._resolve_name(v2, name, v2.tree, depth + 1)
            if got is not None:
                return got
        return None

    def is_spawn_target(self, view, fn: ast.AST) -> bool:
        if not isinstance(parent(fn), ast.Module):
            return False
        for c in view.sem.calls_to(*SPAWNS):
            a = c.args[0] if c.args else next((k.value for k in c.keywords if k.arg == "fn"), None)
            if isinstance(a, ast.Name) and a.id == fn.name:
                return True
        return False

    # -- self attributes -------------------------------------------------------------------------
    def self_attr_bindings(self, view, attr: ast.Attribute, nested: bool = False) -> list[ast.AST]:
        """What the methods of the class of ``self.<attr>`` bind to it. ``nested``: also read from
        a function nested in a method whose ``self`` it closes over (``def step(): self.model``)."""
        fn = view.sem.enclosing_function(attr)
        while nested and fn is not None and not isinstance(parent(fn), ast.ClassDef) \
                and "self" not in param_names(fn):
            fn = view.sem.enclosing_function(fn)
        cls = parent(fn) if fn is not None else None
        if not isinstance(cls, ast.ClassDef):
            return []
        return self.class_attr_bindings(view, cls, attr.attr)

    def class_attr_bindings(self, view, cls: ast.ClassDef, name: str) -> list[ast.AST]:
        """What the methods of ``cls`` bind to ``self.<name>``: the value of a plain binding, the
        statement of any other (an unpacking assignment, an augmented one)."""
        memo = view.memo.setdefault("self_attrs", {})
        idx = memo.get(id(cls))
        if idx is None:
            idx = memo[id(cls)] = {}
            for m in cls.body:
                if not isinstance(m, FUNC_TYPES):
                    continue
                for n in iter_scope_nodes(m):
                    if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        tgts = n.targets if isinstance(n, ast.Assign) else [n.target]
                        for t in tgts:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                idx.setdefault(t.attr, []).append(n.value if n.value is not None else n)
                                if not isinstance(n, ast.Assign):
                                    idx[t.attr].append(n)  # not a plain binding: keeps it unknown
                            elif not isinstance(t, ast.Name):
                                for sub in ast.walk(t):
                                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                                            and sub.value.id == "self":
                                        idx.setdefault(sub.attr, []).append(n)
        return idx.get(name, [])

    def rank_group(self, view, call: ast.Call) -> str | None:
        """The part of the world a rank call counts in: a mesh dimension's name, ``values.GROUP``
        for a process group's rank, None for the global rank (``mesh_ranks``)."""
        from .mesh_ranks import rank_group  # lazy: it follows the mesh through origins

        return rank_group(self, view, call)

    def sharded_loader(self, view, name: ast.Name) -> bool:
        from .origins import sharded_loader  # lazy: origins follows helpers' returns

        return sharded_loader(self, view, name)

    def synced_metric(self, view, recv: ast.AST, at: ast.AST) -> bool:
        """``recv`` holds a torchmetrics metric whose ``compute()`` gathers across ranks
        (``metric_sync.synced_metric``; asked by the evaluator through the hub)."""
        from .metric_sync import synced_metric  # lazy: it reads origins

        return synced_metric(self, view, recv, at)

    def dict_has_key(self, view, x: ast.AST, key: str) -> bool:
        """Whether ``x`` holds a dict that always has ``key`` (``dict_keys``; asked by the
        evaluator for ``"key" in x``, through the hub: dict_keys reads origins)."""
        from .dict_keys import has_key  # lazy: it follows helpers, forwards and origins

        return has_key(self, view, x, key)

    def drawn_shape(self, view, e: ast.AST):
        """The uniformity of the shape of ``e``, whose values are random or this rank's own, as the
        shape analysis sees it (``torch.zeros(random.randint(1, 9))`` varies, ``rng.choice(n,
        k).reshape(-1, g)`` does not, its values do); unknown where it cannot tell. Asked by the
        evaluator through the hub: the shape analysis builds on the evaluator."""
        from .shapes import shapes_of  # lazy: shapes imports the evaluator

        sh = shapes_of(self, view).shape(e)
        return Value("V", sh.src) if sh.kind == "V" and sh.src is not None else X

    def field_value(self, view, e: ast.Attribute, d: int, ctx=None):
        """A property or record field of a project class of this module (``args.should_save`` of
        ``args = Args(process_index=dist.get_rank())``, the property returning
        ``self.process_index == 0``): its rank-varying value when one of its origins is; or the
        state a method call on the same object stores rank-varying (``stopper.step(val_loss)`` then
        ``stopper.stop``: ``instance_state``, under the evaluator's context ``ctx``); else None
        (asked by the evaluator, through the hub: ``origins.field_origins``)."""
        from .instance_state import state_value  # lazy: it asks the evaluator back
        from .origins import field_origins  # lazy: origins follows helpers' returns

        for leaf in field_origins(self, view, e) or ():
            v = self.evaluator(leaf[0]).value(leaf[1], d + 1)
            if v.varying:
                return Value("V", v.src.step(f"read as `{ast.unparse(e)}`"))
        return state_value(self, view, e, d + 1, ctx) if isinstance(e.ctx, ast.Load) else None

    def module_class(self, view, expr, at):
        """(view, class) of the project class ``expr`` holds at ``at`` (``instances.module_instance_class``)."""
        from .instances import module_instance_class

        return module_instance_class(self, view, expr, at)

    def module_method(self, view, recv, call: ast.Call):
        """(view, method) that ``recv.<name>(...)`` runs where ``recv`` holds an instance of one
        project module class (``Model(cfg).to(dev)`` given on through parameters and helpers'
        returns, each helper's call followed in context); else None."""
        from .instances import _SELF_RETURNING, module_instance_class
        from .origins import origins  # lazy: origins follows helpers' returns

        got = module_instance_class(self, view, recv, call)
        if got is None:
            for v, e, *_ in origins(self, view, recv, call, frames=()):
                while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _SELF_RETURNING:
                    e = e.func.value
                c = ctor_class(self, v, e, _NOT_PROJECT)
                if c is None or (got is not None and c[1] is not got[1]):
                    return None
                got = c
        return inherited_method(self, got[0], got[1], call.func.attr) if got is not None else None

    def self_attr_value(self, view, attr: ast.Attribute, d: int, ctx=None):
        """The uniformity of ``self.<attr>``: what the class's methods bind to it. Under the context
        of a construction (``ctx.fn`` the ``__init__`` of the class, ``Jitter(seed=rank)``), another
        method reads a binding made in ``__init__`` with what that call passes: a method asked about
        the object that call builds (``flow.object_state``)."""
        vals = self.self_attr_bindings(view, attr)
        if (got := metric_state(view, attr)) is not None:
            return got  # a torchmetrics metric's own, unsynced state (``flow.metric_sync``)
        if not vals or len(vals) > 8:
            return X
        ev = self.evaluator(view)
        here = view.sem.enclosing_function(attr)
        init = ctx.fn if ctx is not None and getattr(ctx.fn, "name", None) == "__init__" and here is not ctx.fn \
            and parent(ctx.fn) is parent(here) else None
        cev = self.evaluator(view, ctx) if init is not None else None
        out = []
        for v in vals:
            if isinstance(v, ast.stmt):
                out.append(X)
            else:
                out.append((cev if cev is not None and view.sem.enclosing_function(v) is init else ev).value(v, d + 1))
        return join(out)


def _local_binding(view, name: str, at: ast.AST) -> bool:
    """``name`` is bound in the function holding ``at`` (so it is not the module-level one)."""
    fn = view.sem.enclosing_function(at)
    while fn is not None:
        if name in view.sem.assignments(fn):
            return True
        if _is_param(fn, name):
            return True
        fn = view.sem.enclosing_function(fn)
    return False


_POSITION = attrgetter("lineno", "col_offset")
_FUNCS = frozenset((ast.FunctionDef, ast.AsyncFunctionDef))


def _local_import(view, name: str, at: ast.AST):
    """(module, level, attribute) of a ``from module import attribute [as name]`` in a function
    holding ``at`` (the innermost first), else None."""
    fn = view.sem.enclosing_function(at)
    if fn is None:
        return None
    memo = view.memo.get("local_imports")
    if memo is None:  # {id(function): {name: (module, level, attribute)}}, from the file's imports
        memo = view.memo["local_imports"] = {}
        scope_of = view.sem.scope_of
        for n in sorted(view.sem.imports, key=_POSITION):  # the later binding wins
            if n.__class__ is not ast.ImportFrom:
                continue
            s = scope_of(n)
            if s.__class__ not in _FUNCS:
                continue
            got = memo.setdefault(id(s), {})
            for a in n.names:
                if a.name != "*":
                    got[a.asname or a.name] = (n.module or "", n.level, a.name)
    while fn is not None:
        got = memo.get(id(fn))
        if got is not None and name in got:
            return got[name]
        fn = view.sem.enclosing_function(fn)
    return None


def _ctor(view, cls: ast.ClassDef):
    for st in cls.body:
        if isinstance(st, FUNC_TYPES) and st.name == "__init__":
            return view, st
    return None


def _lookup(view, name: str):
    if name in view.defs:
        return view, view.defs[name]
    if name in view.classes:
        return _ctor(view, view.classes[name])
    return None


def for_context(ctx) -> Analysis:
    return ctx.memo("flow.analysis", lambda: _new(ctx))


def _new(ctx) -> Analysis:
    an = Analysis(ctx.filename, ctx.sem, ctx.src.text)
    # the project's other modules' calls of the checked file's functions and classes: what a
    # parameter holds when its own module never calls it (``instances.element_classes``); the
    # rules' project scan (``rules._common.other_call_sites``) installs itself here
    if CALLERS_HOOK is not None:
        an.other_callers = CALLERS_HOOK(ctx, an)
        # and of any module's functions and methods in the others (asked only where a value is
        # known by what every caller passes: ``origins.zero_call``)
        an.module_callers = CALLERS_HOOK(ctx, an, methods=True, modules=True)
    return an


CALLERS_HOOK = None
