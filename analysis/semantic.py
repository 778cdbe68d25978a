"""The one traversal: parents, imports, calls by qualified name, nodes by type, assignments.

Rules never walk the tree themselves. The engine walks it once (iteratively, so deep nesting cannot
overflow the C stack here) and every rule queries the indexes built here.
"""
from __future__ import annotations

import ast
from collections import defaultdict, deque
from functools import partial
from itertools import repeat
from operator import attrgetter
from collections.abc import Iterable, Iterator  # (not `typing`: its import costs start-up)

# Canonical spellings: several public paths name the same object.
_CANONICAL_PREFIXES = (
    ("torch.distributed.distributed_c10d.", "torch.distributed."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.data_parallel.", "torch.nn.parallel."),
    ("torch.multiprocessing.spawn.", "torch.multiprocessing."),
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.nn.modules.batchnorm.", "torch.nn."),
    ("torch.cuda.random.", "torch.cuda."),
)

# the nodes that make code run conditionally or repeatedly; always indexed in ``by_type`` (the flow
# layer skips scopes without any)
BRANCHING = (ast.If, ast.IfExp, ast.While, ast.For, ast.AsyncFor)
# the statements that leave a block or a function early; always indexed in ``by_type`` too (the
# flow layer finds the statements that hold one), though not part of ``wanted``
EXITS = (ast.Return, ast.Break, ast.Continue, ast.Raise)
# ``try`` statements; always indexed in ``by_type`` too (an exception handler may skip the rest of
# a ``try`` body on one rank: flow.control)
TRIES = (ast.Try, ast.TryStar)
# the statements that bind names (``assignments``); always indexed in ``by_type`` as well
_BINDING_STMTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)
SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
# the same as sets of exact classes: a membership test is cheaper than isinstance with a tuple, and
# no tree from ast.parse holds instances of subclasses
_SCOPE_SET = frozenset(SCOPE_TYPES)
_FUNC_SET = frozenset(FUNC_TYPES)
_STMT_SET = frozenset(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.stmt))

# Fields that never hold child nodes worth visiting (expression contexts and operator singletons are
# shared objects in CPython's ast, so they must never get a parent pointer).
_SKIP_FIELDS = frozenset(
    {"ctx", "op", "ops", "id", "attr", "name", "arg", "module", "level", "kind", "type_comment",
     "conversion", "is_async", "type_ignores", "lineno", "tag", "kwd_attrs", "rest", "simple", "asname"}
)
# With those fields skipped, every remaining field holds a node, None, or a list of nodes and Nones
# (``Dict.keys``, ``arguments.kw_defaults``), except ``MatchSingleton.value`` (a constant): the
# traversal tests for None instead of calling isinstance on every child.
_FIELDS: dict[type, tuple[str, ...]] = {}
# Node types without child fields (see _child_fields): the traversal does not push them.
_LEAF_TYPES = frozenset({ast.Name, ast.Constant, ast.Global, ast.Nonlocal, ast.Pass, ast.Break, ast.Continue})


def _child_fields(t: type) -> tuple[str, ...]:
    fs = _FIELDS.get(t)
    if fs is None:
        if t is ast.Constant or t is ast.Global or t is ast.Nonlocal or t is ast.MatchSingleton:
            fs = ()
        else:
            fs = tuple(f for f in t._fields if f not in _SKIP_FIELDS)
        _FIELDS[t] = fs
    return fs


def subtree(root: ast.AST) -> list[ast.AST]:
    """Every node under ``root``, ``root`` included, in ``ast.walk``'s order (breadth first,
    children in field order) less the expression contexts and operators (shared singletons, never
    worth a query), as a list built without generators (``ast.walk`` costs two generators per node;
    on torch's tree it was a fifth of a cold check)."""
    out: list[ast.AST] = [root]
    add = out.append
    fields = _FIELDS
    i = 0
    while i < len(out):
        node = out[i]
        i += 1
        fs = fields.get(node.__class__)
        if fs is None:
            fs = _child_fields(node.__class__)
        for f in fs:
            v = getattr(node, f, None)
            if v is None:
                continue
            if v.__class__ is list:
                for c in v:
                    if c is not None:
                        add(c)
            else:
                add(v)
    return out


# What the traversal does with a node of each type, looked up once per node: (kind, whether
# ``by_type`` indexes it, its child fields). One table per set of indexed types.
_K_PLAIN, _K_CALL, _K_IMPORT, _K_FUNC, _K_WALRUS = 0, 1, 2, 3, 4
_KINDS = {ast.Call: _K_CALL, ast.Import: _K_IMPORT, ast.ImportFrom: _K_IMPORT, ast.FunctionDef: _K_FUNC,
          ast.AsyncFunctionDef: _K_FUNC, ast.NamedExpr: _K_WALRUS}
_WALK_TABLES: dict[frozenset, dict[type, tuple]] = {}


def _walk_table(wanted: frozenset) -> dict[type, tuple]:
    got = _WALK_TABLES.get(wanted)
    if got is None:
        if len(_WALK_TABLES) > 64:
            _WALK_TABLES.clear()
        got = _WALK_TABLES[wanted] = {}
    return got


def _walk_entry(table: dict, t: type, wanted: frozenset) -> tuple:
    """The table entry of node type ``t`` (made on its first node)."""
    got = table[t] = (_KINDS.get(t, _K_PLAIN), t in wanted, _child_fields(t))
    return got


_drain = partial(deque, maxlen=0)  # consumes an iterator in C
_DICT_OF = attrgetter("__dict__")
_CANON_CACHE: dict[str, str] = {}


def _canonical_cached(qn: str) -> str:
    got = _CANON_CACHE.get(qn)
    if got is None:
        if len(_CANON_CACHE) > 20000:  # a long-running server sees many files: stay bounded
            _CANON_CACHE.clear()
        got = _CANON_CACHE[qn] = canonical(qn)
    return got


def canonical(qn: str) -> str:
    for old, new in _CANONICAL_PREFIXES:
        if qn.startswith(old):
            return new + qn[len(old):]
    return qn


def parent(node: ast.AST) -> ast.AST | None:
    """The parent of ``node`` in the tree the engine traversed (None for the module, or for a node
    the traversal never reached). Rules use this instead of the private ``_p`` attribute."""
    return getattr(node, "_p", None)


class Semantic:
    """Indexes over one module's tree. Every node gets ``_p`` (its parent)."""

    def __init__(self, tree: ast.Module, wanted_types: Iterable[type] = (), owned: bool = False):
        """``owned``: nobody else holds ``tree`` (the engine parsed it for this check alone), so
        ``release`` may take it apart."""
        self.tree = tree
        self._owned = owned
        self.aliases: dict[str, str] = {}  # local name -> canonical qualified name
        self.imports: list[ast.stmt] = []
        self.calls: list[ast.Call] = []
        self.functions: dict[str, list[ast.AST]] = defaultdict(list)
        self.by_type: dict[type, list[ast.AST]] = defaultdict(list)
        self._calls_by_qn: dict[str, list[ast.Call]] | None = None
        self._calls_by_fn: dict[ast.AST | None, list[ast.Call]] | None = None  # function_calls
        self._callee_index: tuple | None = None
        self._assigns: dict[ast.AST, dict[str, list[ast.AST]]] | None = None
        self._nodes: list[ast.AST] | None = None
        self._order = self._order_types = None  # walk_order, of_types (built on the first question)
        self._walrus = False  # any NamedExpr in the tree (assignments() must then enter expressions)
        self.wanted = frozenset(wanted_types).union(BRANCHING)  # the types ``by_type`` indexes, completely
        self._walk(tree, self.wanted.union(EXITS, TRIES, _BINDING_STMTS))
        self._resolve_imports()
        self.value_aliases: frozenset[str] = frozenset()  # names in ``aliases`` bound by ``x = torch.a.b``
        self._resolve_value_aliases()

    # -- the traversal -----------------------------------------------------------------------
    def _walk(self, tree: ast.Module, wanted: frozenset) -> None:
        calls = self.calls
        imports = self.imports
        functions = self.functions
        by_type = self.by_type
        # one lookup per node: (kind, indexed in by_type, child fields), see _walk_table
        table = _walk_table(wanted)
        # every node that gets pushed (in an owned tree the nodes with children, in a shared one
        # all), so that ``release`` can break the cycles child -> parent -> child
        nodes = self._nodes = []
        add = nodes.append
        # the calls of each function (and of the module), as ``scope_calls`` gives them: a second
        # stack, parallel to the first, holds the innermost enclosing function of each pushed node
        # (a function's decorators belong to the scope around it, its defaults and annotations to
        # the function itself; lambdas and class bodies are no scope of their own here)
        by_scope: dict[ast.AST, list] = {}
        self._scope_calls = by_scope
        # leaves (no child fields) that no rule asked for are given their parent but never pushed;
        # in a shared tree every node is pushed, so that ``release`` finds each parent pointer
        leaf = _LEAF_TYPES - wanted if self._owned else frozenset()
        tree._p = None
        stack = [tree]
        scopes = [tree]
        pop = stack.pop
        push = stack.append
        spop = scopes.pop
        spush = scopes.append
        while stack:
            node = pop()
            scope = spop()
            add(node)
            t = node.__class__
            e = table.get(t)
            if e is None:
                e = _walk_entry(table, t, wanted)
            kind, indexed, fs = e
            if indexed:
                by_type[t].append(node)
            if kind:
                if kind == _K_CALL:
                    calls.append(node)
                    got = by_scope.get(scope)
                    if got is None:
                        by_scope[scope] = [node]
                    else:
                        got.append(node)
                elif kind == _K_IMPORT:
                    imports.append(node)
                elif kind == _K_FUNC:
                    functions[node.name].append(node)
                    for f in fs:
                        v = getattr(node, f, None)
                        if v is None:
                            continue
                        sc = scope if f == "decorator_list" else node
                        for c in (v if v.__class__ is list else (v,)):
                            if c is not None:
                                c._p = node
                                if c.__class__ not in leaf:
                                    push(c)
                                    spush(sc)
                    continue
                else:
                    self._walrus = True
            for f in fs:
                v = getattr(node, f, None)
                if v is None:
                    continue
                if v.__class__ is list:
                    for c in v:
                        if c is not None:
                            c._p = node
                            if c.__class__ not in leaf:
                                push(c)
                                spush(scope)
                else:
                    v._p = node
                    if v.__class__ not in leaf:
                        push(v)
                        spush(scope)
        # the stack visits in reverse; rules expect source order
        calls.reverse()
        for lst in by_type.values():
            lst.reverse()
        for lst in by_scope.values():
            lst.reverse()

    def scope_calls(self, scope: ast.AST) -> list[ast.Call]:
        """The calls directly in function ``scope`` (or the module), not in nested functions, in
        the order of ``calls``."""
        return self._scope_calls.get(scope, ())

    def function_calls(self, fn: ast.AST | None) -> list[ast.Call]:
        """The calls whose ``enclosing_function`` is ``fn`` (None: outside every function), in the
        order of ``calls``: unlike ``scope_calls``, a function's decorators count as its own and a
        nested function's as the nested function's. Grouped once per tree, on the first question
        (asking each call for its function per helper was quadratic)."""
        idx = self._calls_by_fn
        if idx is None:
            idx = self._calls_by_fn = {}
            ef = self.enclosing_function
            for c in self.calls:
                f = ef(c)
                got = idx.get(f)
                if got is None:
                    idx[f] = [c]
                else:
                    got.append(c)
        return idx.get(fn, ())

    def walk_order(self) -> list[ast.AST]:
        """``subtree(tree)`` once per tree: whole-module scans iterate it, never walk again."""
        if self._order is None:
            self._order = subtree(self.tree)
        return self._order

    def of_types(self, *types: type) -> list[ast.AST]:
        """The nodes of exactly these classes, in ``walk_order`` per class (grouped once)."""
        idx = self._order_types
        if idx is None:
            idx = self._order_types = defaultdict(list)
            for n in self.walk_order():
                idx[n.__class__].append(n)
        return [n for t in types for n in idx.get(t, ())]

    def release(self) -> None:
        """Drop the parent pointers (the cycles node -> parent -> node), so that the tree is freed
        by reference counting as soon as nobody holds it, instead of waiting for a full garbage
        collection. The engine calls this when the tree it parsed itself is no longer needed; the
        indexes must not be used afterwards.

        An owned tree is taken apart: every node with children is emptied (its fields and parent
        pointer at once, in C), and what it held goes with it. A shared tree (a project module that
        another check may still read) keeps its fields; only the parent pointers go."""
        nodes = self._nodes
        if nodes is None:
            return
        self._nodes = None
        self._order = self._order_types = None
        if self._owned:
            _drain(map(dict.clear, map(_DICT_OF, nodes)))
            return
        try:
            _drain(map(delattr, nodes, repeat("_p")))  # the loop runs in C
        except AttributeError:  # a node reached twice (a tree shared with another traversal)
            for n in nodes:
                try:
                    del n._p
                except AttributeError:
                    pass

    def _resolve_imports(self) -> None:
        aliases = self.aliases
        for node in sorted(self.imports, key=_POSITION):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = canonical(a.name)
                    else:
                        top = a.name.split(".", 1)[0]
                        aliases[top] = top
            else:
                if node.level or not node.module:
                    continue
                for a in node.names:
                    if a.name == "*":
                        continue
                    aliases[a.asname or a.name] = canonical(f"{node.module}.{a.name}")

    def _resolve_value_aliases(self) -> None:
        """``DDP = torch.nn.parallel.DistributedDataParallel`` (in the module or in one function),
        ``convert = nn.SyncBatchNorm.convert_sync_batchnorm``: a name bound once in the whole file,
        to a dotted attribute of ``torch`` (through an import, or through another such name),
        resolves as that attribute, like an import alias. Only a name the file calls (or calls an
        attribute of) is looked at; any other binding of it anywhere in the file (a parameter, a
        loop target, ``global``, an import, a ``def``), a binding in a class body, or a use outside
        the function that binds it, and it stays unresolved."""
        aliases = self.aliases
        cands = []
        roots = None
        for st in self.by_type.get(ast.Assign, ()):
            if len(st.targets) != 1 or st.targets[0].__class__ is not ast.Name \
                    or st.value.__class__ is not ast.Attribute or st.targets[0].id in aliases:
                continue
            if roots is None:
                roots = set()
                for c in self.calls:
                    f = c.func
                    while f.__class__ is ast.Attribute:
                        f = f.value
                    if f.__class__ is ast.Name:
                        roots.add(f.id)
            if st.targets[0].id in roots:
                cands.append(st)
        if not cands:
            return
        # only a value rooted in an import of torch, or in another candidate, can resolve to
        # ``torch.*``: the rest never needs the walk below
        targets = {st.targets[0].id for st in cands}
        keep = []
        for st in cands:
            f = st.value
            while f.__class__ is ast.Attribute:
                f = f.value
            if f.__class__ is not ast.Name:
                continue
            base = aliases.get(f.id)
            if f.id in targets or (base is not None and (base == "torch" or base.startswith("torch."))):
                keep.append(st)
        cands = keep
        if not cands:
            return
        binds: dict[str, int] = defaultdict(int)
        uses: dict[str, list[ast.Name]] = defaultdict(list)
        wanted = {st.targets[0].id for st in cands}
        for n in self.walk_order():
            t = n.__class__
            if t is ast.Name:
                if n.id in wanted:
                    if n.ctx.__class__ is ast.Load:
                        uses[n.id].append(n)
                    else:
                        binds[n.id] += 1
            elif t is ast.arg or t in _FUNC_SET or t is ast.ClassDef or t is ast.ExceptHandler:
                k = n.arg if t is ast.arg else n.name
                if k in wanted:
                    binds[k] += 1
            elif t is ast.Import or t is ast.ImportFrom:
                for a in n.names:
                    k = a.asname or a.name.split(".", 1)[0]
                    if k in wanted:
                        binds[k] += 2
            elif t is ast.Global or t is ast.Nonlocal:
                for k in n.names:
                    if k in wanted:
                        binds[k] += 2
            elif t is ast.MatchAs or t is ast.MatchStar or t is ast.MatchMapping:
                k = n.rest if t is ast.MatchMapping else n.name
                if k in wanted:
                    binds[k] += 1
        got = set()
        changed = True
        while changed:  # ``A = torch.nn`` then ``B = A.parallel.DistributedDataParallel``
            changed = False
            for st in cands:
                k = st.targets[0].id
                if k in got or binds[k] != 1:
                    continue
                qn = self.qualname(st.value)
                if qn is None or not qn.startswith("torch."):
                    continue
                scope = self.scope_of(st)
                if scope.__class__ is ast.ClassDef:
                    continue
                if scope.__class__ is not ast.Module and not all(
                        any(a is scope for a in self.ancestors(u)) for u in uses[k]):
                    continue  # the same name elsewhere is another object (a builtin, a star import)
                aliases[k] = qn
                got.add(k)
                changed = True
        if got:
            self.value_aliases = frozenset(got)

    # -- queries -----------------------------------------------------------------------------
    def qualname(self, expr: ast.AST) -> str | None:
        """Canonical qualified name of a Name/Attribute chain rooted in an import, else None."""
        parts: list[str] = []
        while expr.__class__ is ast.Attribute:
            parts.append(expr.attr)
            expr = expr.value
        if expr.__class__ is not ast.Name:
            return None
        base = self.aliases.get(expr.id)
        if base is None:
            return None
        if not parts:
            return base
        parts.reverse()
        return canonical(base + "." + ".".join(parts))

    def call_qualname(self, call: ast.Call) -> str | None:
        try:
            return call._qn
        except AttributeError:
            qn = call._qn = self.qualname(call.func)
            return qn

    @property
    def calls_by_qualname(self) -> dict[str, list[ast.Call]]:
        if self._calls_by_qn is None:
            self._index_calls()
        return self._calls_by_qn

    def callee_index(self) -> tuple[dict[str, list[int]], dict[str, list[int]], dict[str, list[int]], dict[str, list[int]]]:
        """The file's calls by callee: ``(names, attrs, recv, base)``, each a dict from a name to
        the positions in ``calls`` (ascending) of

        - ``names``: the calls of a plain name, ``f(...)`` (by ``f``);
        - ``attrs``: the calls of an attribute, ``x.f(...)``, ``a.b.f(...)`` (by ``f``);
        - ``recv``: the calls on an attribute, ``x.m.f(...)`` (by ``m``);
        - ``base``: the calls on a plain name, ``x.f(...)`` (by ``x``).

        Other callees (``fs[0](...)``, ``g()(...)``) are in ``names`` and ``attrs`` of none."""
        got = self._callee_index
        if got is None:
            self._index_calls()
            got = self._callee_index
        return got

    def _index_calls(self) -> None:
        """One pass over ``calls`` for both call indexes (every flow module and most rules ask for
        both): ``calls_by_qualname`` (which also sets ``_qn`` on every call, see
        ``call_qualname``) and ``callee_index``."""
        by_qn: dict[str, list[ast.Call]] = defaultdict(list)
        names: dict[str, list[int]] = {}
        attrs: dict[str, list[int]] = {}
        recv: dict[str, list[int]] = {}
        base_of: dict[str, list[int]] = {}
        aliases = self.aliases
        Attribute, Name = ast.Attribute, ast.Name
        for i, c in enumerate(self.calls):
            # the qualified name: calls whose root is not an import alias (most: ``x.to(...)``,
            # ``print(...)``) are rejected before any part is collected
            f = c.func
            t = f.__class__
            qn = None
            if t is Attribute:
                k = f.attr
                attrs.setdefault(k, []).append(i)
                v = f.value
                if v.__class__ is Name:  # ``mod.f(...)``, ``x.f(...)``: the usual case
                    base_of.setdefault(v.id, []).append(i)
                    base = aliases.get(v.id)
                    if base is not None:
                        qn = _canonical_cached(base + "." + k)
                else:
                    if v.__class__ is Attribute:
                        recv.setdefault(v.attr, []).append(i)
                    root = v
                    while root.__class__ is Attribute:
                        root = root.value
                    base = aliases.get(root.id) if root.__class__ is Name else None
                    if base is not None:
                        parts = []
                        while f.__class__ is Attribute:
                            parts.append(f.attr)
                            f = f.value
                        parts.reverse()
                        qn = _canonical_cached(base + "." + ".".join(parts))
            elif t is Name:  # ``f(...)``: the alias itself (already canonical)
                names.setdefault(f.id, []).append(i)
                qn = aliases.get(f.id)
            c._qn = qn
            if qn:
                by_qn[qn].append(c)
        self._calls_by_qn = by_qn
        self._callee_index = (names, attrs, recv, base_of)

    def calls_to(self, *qualnames: str) -> list[ast.Call]:
        idx = self.calls_by_qualname
        if len(qualnames) == 1:
            return idx.get(qualnames[0], [])
        out: list[ast.Call] = []
        for q in qualnames:
            out.extend(idx.get(q, ()))
        out.sort(key=_POSITION)
        return out

    def imports_module(self, prefix: str) -> bool:
        return any(v == prefix or v.startswith(prefix + ".") for v in self.aliases.values())

    def alias_for(self, qualname: str) -> str | None:
        """Local spelling for ``qualname`` using the file's own imports (``dist`` for
        torch.distributed), or None when the file binds nothing that reaches it."""
        best = None
        for local, target in self.aliases.items():
            if local in self.value_aliases:
                continue  # a binding of the file's code, maybe local to one function
            if qualname == target:
                return local
            if qualname.startswith(target + "."):
                cand = local + qualname[len(target):]
                if best is None or len(cand) < len(best):
                    best = cand
        return best

    # -- tree helpers ------------------------------------------------------------------------
    @staticmethod
    def parent(node: ast.AST) -> ast.AST | None:
        return getattr(node, "_p", None)

    @staticmethod
    def ancestors(node: ast.AST) -> Iterator[ast.AST]:
        p = getattr(node, "_p", None)
        while p is not None:
            yield p
            p = getattr(p, "_p", None)

    @staticmethod
    def scope_of(node: ast.AST) -> ast.AST:
        p = getattr(node, "_p", None)
        while p is not None:
            if p.__class__ in _SCOPE_SET:
                return p
            p = getattr(p, "_p", None)
        return node  # the module itself

    @staticmethod
    def enclosing_function(node: ast.AST) -> ast.AST | None:
        p = getattr(node, "_p", None)
        while p is not None:
            if p.__class__ in _FUNC_SET:
                return p
            p = getattr(p, "_p", None)
        return None

    @staticmethod
    def statement_of(node: ast.AST) -> ast.stmt:
        """The innermost statement containing ``node`` (node itself when it is one)."""
        n = node
        while n is not None and n.__class__ not in _STMT_SET:
            n = getattr(n, "_p", None)
        return n  # type: ignore[return-value]

    def assignments(self, scope: ast.AST) -> dict[str, list[ast.AST]]:
        """name -> assignment statements (Assign/AnnAssign/AugAssign/For/With/NamedExpr targets)
        directly in ``scope`` (not in nested functions), in source order."""
        if self._assigns is None:
            self._assigns = {} if self._walrus or self._nodes is None else self._assignment_index()
        key = scope  # nodes hash by identity (an ``id()`` key would allocate an int per query)
        got = self._assigns.get(key)
        if got is not None:
            return got
        if self._walrus or self._nodes is None or scope.__class__ not in _SCOPE_SET:
            got = _scope_assignments(iter_scope_nodes(scope) if self._walrus else _iter_scope_statements(scope))
        else:
            got = defaultdict(list)  # a scope without bindings
        self._assigns[key] = got
        return got

    def _assignment_index(self) -> dict[ast.AST, dict[str, list[ast.AST]]]:
        """``assignments`` of every scope at once, from the binding statements the traversal
        indexed (a file without a walrus: every binding is one of those statements). Sorted by
        position, statements come in the pre-order of ``iter_scope_nodes``: a statement starts
        before the statements it holds, and a statement's blocks follow its fields' order."""
        by_type = self.by_type
        stmts = []
        for t in _BINDING_STMTS:
            got = by_type.get(t)
            if got:
                stmts.extend(got)
        stmts.sort(key=_POSITION)
        index: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        owner = None
        Assign, AnnAssign, AugAssign, Name = ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Name
        no_names = _NO_NAMES
        for st in stmts:
            p = st._p
            while p.__class__ not in _SCOPE_SET:
                p = p._p
            if p is not owner:
                owner = p
                out = index.get(p)
                if out is None:
                    out = index[p] = defaultdict(list)
            # the common shapes inline (``x = ...``, ``self.x = ...``, ``x: T = ...``, ``x += ...``)
            t = st.__class__
            if t is Assign:
                targets = st.targets
                if len(targets) == 1:
                    tgt = targets[0]
                    if tgt.__class__ is Name:
                        out[tgt.id].append(st)
                        continue
                    if tgt.__class__ in no_names:
                        continue
            elif t is AnnAssign or t is AugAssign:
                tgt = st.target
                if tgt.__class__ is Name:
                    out[tgt.id].append(st)
                continue
            _add_bindings(out, st)
        return index

    def single_value(self, name: str, scope: ast.AST) -> ast.expr | None:
        """The value bound to ``name`` when ``scope`` assigns it exactly once by plain ``=``.
        Falls back to module level for names not bound in a function scope (and not params)."""
        assigns = self.assignments(scope).get(name)
        if assigns is None and not isinstance(scope, ast.Module):
            if getattr(scope, "args", None) is not None and has_param(scope, name):
                return None
            return self.single_value(name, self.tree)
        if assigns is None and scope is self.tree:
            assigns = self._global_stores().get(name)  # bound only in functions that declare it global
        if not assigns or len(assigns) != 1:
            return None
        st = assigns[0]
        if st.__class__ is ast.Assign and len(st.targets) == 1:
            return bound_value(st, name)
        if st.__class__ is ast.AnnAssign and st.value is not None:
            return st.value
        return None

    def global_stores(self, name: str) -> list[ast.AST]:
        """The assignments of the module-level ``name`` in functions that declare it ``global``."""
        return self._global_stores().get(name, [])

    def _global_stores(self) -> dict[str, list[ast.AST]]:
        """name -> the assignments of the module-level name made in functions that declare it
        ``global`` (``def main(): global CFG; CFG = {...}``), computed once."""
        got = self.__dict__.get("_globals")
        if got is None:
            got = self.__dict__["_globals"] = {}
            for fns in self.functions.values():
                for fn in fns:
                    declared = {n for st in _iter_scope_statements(fn) if st.__class__ is ast.Global
                                for n in st.names}
                    if declared:
                        for n, sts in self.assignments(fn).items():
                            if n in declared:
                                got.setdefault(n, []).extend(sts)
        return got


_POSITION = attrgetter("lineno", "col_offset")
_NO_NAMES = frozenset((ast.Attribute, ast.Subscript))  # assignment targets that bind no name


def _add_bindings(out: dict, stmt: ast.AST) -> None:
    t = stmt.__class__
    if t is ast.Assign:
        for tgt in stmt.targets:
            if tgt.__class__ is ast.Name:
                out[tgt.id].append(stmt)
            else:
                for name in _target_names(tgt):
                    out[name].append(stmt)
    elif t is ast.AnnAssign or t is ast.AugAssign:
        if stmt.target.__class__ is ast.Name:
            out[stmt.target.id].append(stmt)
    elif t is ast.For or t is ast.AsyncFor:
        for name in _target_names(stmt.target):
            out[name].append(stmt)
    elif t is ast.NamedExpr:
        out[stmt.target.id].append(stmt)
    elif t is ast.With or t is ast.AsyncWith:
        for item in stmt.items:
            if item.optional_vars is not None:
                for name in _target_names(item.optional_vars):
                    out[name].append(stmt)


def _scope_assignments(nodes: Iterable[ast.AST]) -> dict[str, list[ast.AST]]:
    out: dict[str, list[ast.AST]] = defaultdict(list)
    for n in nodes:
        _add_bindings(out, n)
    return out


def param_names(fn: ast.AST) -> tuple[str, ...]:
    """The parameter names of a function or lambda, in order (positional-only, positional,
    keyword-only, ``*args``, ``**kwargs``); computed once per node."""
    try:
        return fn._pn
    except AttributeError:
        pass
    a = getattr(fn, "args", None)
    if a is None:
        return ()
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    got = fn._pn = tuple(names)
    return got


def param_defaults(fn: ast.AST) -> dict[str, ast.expr]:
    """The parameters of ``fn`` that have a default, mapped to the default's expression
    (positional and keyword-only; a keyword-only parameter without a default is left out)."""
    a = getattr(fn, "args", None)
    if a is None:
        return {}
    pos = [*a.posonlyargs, *a.args]
    out = {x.arg: d for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults)}
    out.update({x.arg: d for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    return out


def has_param(fn: ast.AST, name: str) -> bool:
    """``name in param_names(fn)`` for a function or lambda (the names are computed once per node)."""
    return name in param_names(fn)


def terminal_name(func: ast.AST) -> str | None:
    """``f`` for ``f`` and for ``a.b.f``: the last component of a name or attribute chain."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _target_names(t: ast.AST) -> Iterator[str]:
    if t.__class__ is ast.Name:
        yield t.id
    elif t.__class__ in (ast.Tuple, ast.List):
        for e in t.elts:
            yield from _target_names(e)
    elif t.__class__ is ast.Starred:
        yield from _target_names(t.value)


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_REV_FIELDS: dict[type, tuple[str, ...]] = {}
_STMT_LIST_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_REV_STMT_FIELDS: dict[type, tuple[str, ...]] = {}


# Fields that hold identifiers, numbers or strings in every tree ast.parse builds (never a node or
# a list of nodes): iter_scope_nodes does not look into them. Context/operator fields stay.
_NEVER_NODES = frozenset({"id", "attr", "name", "asname", "module", "level", "arg", "kind", "conversion",
                          "is_async", "type_comment", "tag", "lineno", "rest", "kwd_attrs"})


def _rev_node_fields(t: type) -> tuple[str, ...]:
    if t is ast.Constant or t is ast.Global or t is ast.Nonlocal:
        return ()
    return tuple(f for f in reversed(t._fields) if f not in _NEVER_NODES)


def iter_scope_nodes(scope: ast.AST) -> tuple[ast.AST, ...]:
    """All nodes under ``scope`` that belong to it (nested function/class bodies excluded).

    Pre-order, children in ``ast.iter_child_nodes`` order (expression contexts and operators
    included): for any tree from ``ast.parse``, exactly what a walk with ``ast.iter_child_nodes``
    gives, without its per-node generators and without looking into identifier fields.

    Walked once per scope: the tuple is kept on the scope node (``_sn``), since the flow layer and
    the rules ask for the nodes of the same functions again and again (a class's methods for each
    ``self.<attr>``, a helper's returns for each call of it). It points only down the tree (no
    cycle); ``Semantic.release`` empties an owned tree's nodes, this attribute with them."""
    got = scope.__dict__.get("_sn")
    if got is None:
        got = scope._sn = tuple(_scope_walk(scope))
    return got


def _scope_walk(scope: ast.AST, rev_fields: dict = _REV_FIELDS, fields_of=_rev_node_fields) -> Iterator[ast.AST]:
    """The nodes that belong to ``scope``, pre-order, following the fields ``fields_of`` gives a
    node type (memoised in ``rev_fields``, last-first): every node field, or the statement lists."""
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    stack = list(reversed(body))
    pop = stack.pop
    push = stack.append
    AST = ast.AST
    nested = _NESTED_SCOPES
    while stack:
        n = pop()
        yield n
        if isinstance(n, nested):
            continue
        t = n.__class__
        fs = rev_fields.get(t)
        if fs is None:
            fs = rev_fields[t] = fields_of(t)
        # push the children last-first, so that the first child is popped first
        for f in fs:
            try:
                v = getattr(n, f)
            except AttributeError:
                continue
            if isinstance(v, AST):
                push(v)
            elif isinstance(v, list):
                for c in reversed(v):
                    if isinstance(c, AST):
                        push(c)


def _rev_stmt_fields(t: type) -> tuple[str, ...]:
    return tuple(f for f in reversed(t._fields) if f in _STMT_LIST_FIELDS)


def _iter_scope_statements(scope: ast.AST) -> Iterator[ast.AST]:
    """The statements (and except handlers / match cases) that belong to ``scope``, in the order
    ``iter_scope_nodes`` yields them; expressions are not entered."""
    return _scope_walk(scope, _REV_STMT_FIELDS, _rev_stmt_fields)


def bound_value(st: ast.Assign, name: str) -> ast.AST | None:
    """What ``st`` binds ``name`` to: its value, or the element at the name's place of a
    parallel tuple assignment (``net, data = self.net, self.data``)."""
    t = st.targets[0] if len(st.targets) == 1 else None
    if t is None or t.__class__ is ast.Name:
        return st.value
    v = st.value
    if t.__class__ is ast.Tuple and v.__class__ is ast.Tuple and len(t.elts) == len(v.elts) \
            and not any(e.__class__ is ast.Starred for e in (*t.elts, *v.elts)):
        for te, ve in zip(t.elts, v.elts):
            if te.__class__ is ast.Name and te.id == name:
                return ve
    return None


def get_arg(call: ast.Call, pos: int | None, kw: str) -> ast.expr | None:
    """Argument by keyword or position (None when absent or hidden behind *args)."""
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    if pos is not None and pos < len(call.args):
        for a in call.args[: pos + 1]:
            if isinstance(a, ast.Starred):
                return None
        return call.args[pos]
    return None


def has_kwarg(call: ast.Call, kw: str) -> bool:
    return any(k.arg == kw for k in call.keywords)


def has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
