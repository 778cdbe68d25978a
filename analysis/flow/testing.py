"""Test harness facts: is this a test file, and does this code expect its failure on purpose?

Multi-process tests run on one node with a world size fixed by their harness
(``MultiProcessTestCase``, a pytest fixture), and a test that makes a failure on purpose wraps it
in ``assertRaises`` / ``pytest.raises``: rules about the global rank or about failures stay silent
there.
"""
from __future__ import annotations

import ast
import os
import time

from ..semantic import FUNC_TYPES, get_arg, parent, terminal_name
from .. import snapshot

_RAISES = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "raises", "assertWarns",
                     "assertWarnsRegex", "warns"})


_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)


def expects_error(node: ast.AST) -> bool:
    """``node`` sits in ``with self.assertRaises(...)`` / ``with pytest.raises(...)``, or in the body
    of a test function marked to fail (``@unittest.expectedFailure``, ``@pytest.mark.xfail`` with
    no condition): a test that makes the failure on purpose. A helper the test calls is not
    covered: only what the marked test runs itself."""
    p = parent(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for item in p.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and terminal_name(e.func) in _RAISES:
                    return True
        p = parent(p)
    return isinstance(p, FUNC_TYPES) and any(_expected_failure(d) for d in p.decorator_list)


def _dotted(e) -> str:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if isinstance(e, ast.Name):
        parts.append(e.id)
    return ".".join(reversed(parts))


def _expected_failure(dec) -> bool:
    """``@unittest.expectedFailure`` / ``@expectedFailure``, ``@pytest.mark.xfail`` /
    ``@pytest.mark.xfail(reason=..., raises=...)``: not one whose failure depends on a condition
    (``xfail(sys.platform == "win32")``, ``condition=``), where the test must pass elsewhere."""
    if isinstance(dec, ast.Call):
        cond = dec.args[0] if dec.args else next((k.value for k in dec.keywords if k.arg == "condition"), None)
        if cond is not None and not (isinstance(cond, ast.Constant) and cond.value is True):
            return False
        dec = dec.func
        if _dotted(dec).split(".")[-2:] != ["mark", "xfail"]:
            return False  # ``expectedFailure`` takes no arguments
    name = _dotted(dec)
    return name in ("expectedFailure", "unittest.expectedFailure") or name.split(".")[-2:] == ["mark", "xfail"]


def is_test_file(filename: str) -> bool:
    """``test_*.py`` / ``*_test.py`` / ``conftest.py``: multi-process tests run on one node with a
    world size fixed by their harness (``MultiProcessTestCase``, a pytest fixture)."""
    base = os.path.basename(filename or "")
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"


def in_test_suite(filename: str, an=None) -> bool:
    """A program of a project's test suite: under a ``tests`` / ``test`` folder, beside test modules
    or below a folder that holds some, up to that ``tests`` folder
    (``tests/distributed/two_gpu_check.py`` next to ``test_groups.py``,
    ``test/quant/nf4/ddp/ddp_check.py`` below ``test/quant/nf4/test_nf4.py``), or run by a shell
    script beside it whose every ``torchrun`` line naming it starts one node (``--nnodes`` absent or
    1, ``--standalone``). Such programs run on one node like the ``test_*.py`` files they sit with.
    The answer reads the folders' listings and that script: they become dependencies of the check's
    analysis ``an`` (a file added or removed there, or the script changed, is a miss of the result
    cache)."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.normpath(os.path.abspath(filename))
    folder = os.path.dirname(path)
    parts = folder.split(os.sep)
    top = max((i for i, p in enumerate(parts) if p in ("tests", "test")), default=None)
    if top is None:
        return False
    base = os.path.basename(path)
    for i in range(len(parts), top, -1):
        where = os.sep.join(parts[:i]) or os.sep
        got = _listing(where)
        if an is not None:
            an.depend_on_listing(where, got[2])
        if got[1] is not None and any(n != base for n in got[1]):
            return True
        if got[5] or len(parts) - i >= 4:
            return False  # the root of a project of its own: the ``tests`` folder above is not its suite
    return _one_node_script(folder, base, _listing(folder)[4], an)


def _one_node_script(folder: str, base: str, scripts, an) -> bool:
    """A shell script of ``folder`` starts ``base`` with ``torchrun``, every such line on one node."""
    from ..launch_scripts import one_node_launch, torchrun_lines
    from .project import read

    seen = False
    for name in scripts or ():
        p = os.path.join(folder, name)
        got = read(p)  # a regular file only, the editor's text when open, hashed as the cache validates it
        if got is None:
            continue
        text, digest = got
        if an is not None:
            an.depend_on_files({p: digest})
        for words in torchrun_lines(text):
            if any(os.path.basename(w) == base for w in words[1:]):
                if not one_node_launch(words):
                    return False
                seen = True
    return seen


def one_node_test(filename: str, an=None) -> bool:
    """A file of the project's test suite, which its harness runs on one node (where the global rank
    is the local rank): a test module by name (``is_test_file``), or a program under a ``tests`` /
    ``test`` folder beside or below test modules, or launched by a one-node script beside it
    (``in_test_suite``: ``tests/functional/run_cp_check.py`` next to ``test_cp.py``, a torchrun
    harness that CI launches with ``--nnodes=1``)."""
    return is_test_file(filename) or in_test_suite(filename, an)


_LISTING_TTL = 2.0
# the project markers that are files (``project._PROJECT_MARKERS`` less ``.git``)
_FILE_MARKERS = frozenset(("pyproject.toml", "setup.py", "setup.cfg"))
_listings: dict[str, tuple] = {}  # folder -> (when, its test modules or None, its listing's digest, run, its
#                                   shell scripts, whether it holds a project marker)


def _listing(folder: str) -> tuple:
    """``(when, test modules, digest, run, shell scripts, marker)`` of ``folder``: the names of its test modules
    (None when it cannot be listed), ``cache.listing_digest`` of all its names (None likewise) and
    the names of its ``*.sh`` files, and whether it holds a project's ``setup.cfg`` / ``setup.py`` /
    ``pyproject.toml``. Listed once a
    batch run (the disk is one snapshot) and at most every ``_LISTING_TTL`` seconds in the
    language server."""
    now, run = time.monotonic(), snapshot.current()
    got = _listings.get(folder)
    if got is None or got[3] != run or run is None and now - got[0] >= _LISTING_TTL:
        from ..cache import listing_digest  # lazy: only a script under a tests folder needs it

        try:
            names = os.listdir(folder)
        except OSError:
            got = (now, None, None, run, (), False)
        else:
            tests = tuple(n for n in names if is_test_file(n) and n.endswith(".py"))
            got = (now, tests, listing_digest(names), run, tuple(n for n in names if n.endswith(".sh")),
                   any(n in _FILE_MARKERS for n in names))
        if len(_listings) > 4096:
            _listings.clear()
        _listings[folder] = got
    return got


_MOCK_PATCH = frozenset({"unittest.mock.patch", "mock.patch"})
_MOCK_PATCH_OBJECT = frozenset({"unittest.mock.patch.object", "mock.patch.object"})


def _patches(sem, node: ast.AST):
    """(target, object) of each mock patch active where ``node`` runs: ``@patch("pkg.mod.Name")`` /
    ``@patch.object(obj, "Name")`` on the enclosing functions and classes, and ``with patch(...)``
    blocks around ``node``; ``target`` is the dotted string of ``patch`` (``object`` None) or the
    attribute name of ``patch.object`` (``object`` its first argument). ``unittest.mock`` (or the
    ``mock`` package) only, read from the imports."""
    def target(call):
        if not isinstance(call, ast.Call):
            return None
        qn = sem.call_qualname(call) or ""
        if qn in _MOCK_PATCH:
            a = get_arg(call, 0, "target")
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value:
                return a.value, None
        elif qn in _MOCK_PATCH_OBJECT:
            a = get_arg(call, 1, "attribute")
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                return a.value, get_arg(call, 0, "target")
        return None

    p = parent(node)
    while p is not None:
        if isinstance(p, (*FUNC_TYPES, ast.ClassDef)):
            exprs = p.decorator_list
        elif isinstance(p, (ast.With, ast.AsyncWith)):
            exprs = [item.context_expr for item in p.items]
        else:
            exprs = ()
        for e in exprs:
            got = target(e)
            if got is not None:
                yield got
        p = parent(p)


def patched_names(sem, node: ast.AST) -> frozenset[str]:
    """The names a test replaces with mocks where ``node`` runs (``_patches``), each as the last
    part of the patched target (``Name``)."""
    return frozenset(t.rsplit(".", 1)[-1] if obj is None else t for t, obj in _patches(sem, node))


def patched_globals(hub, view, node: ast.AST) -> frozenset:
    """(module view, name) of each module-level name that a mock patch active where ``node`` runs
    replaces in that module's namespace: ``patch("pkg.mod.name")`` (``pkg.mod`` a project module,
    resolved as an absolute import from ``view``), ``patch.object(mod, "name")`` of an imported
    project module or of ``sys.modules[__name__]``. A call of that name in that module runs the
    mock, not the function (``lifecycle.init_sites_at``)."""
    sem = view.sem
    if not sem.calls_to(*_MOCK_PATCH, *_MOCK_PATCH_OBJECT):
        return frozenset()
    out = set()
    for t, obj in _patches(sem, node):
        mv = None
        if obj is None and "." in t:
            mod, t = t.rsplit(".", 1)
            mv = hub.module_view(view, mod, 0)
        elif isinstance(obj, ast.Subscript) and isinstance(obj.slice, ast.Name) and obj.slice.id == "__name__" \
                and sem.qualname(obj.value) == "sys.modules":
            mv = view
        elif isinstance(obj, ast.Name) and sem.qualname(obj):
            mv = hub.module_view(view, sem.qualname(obj), 0)
        if mv is not None:
            out.add((mv, t))
    return frozenset(out)


_PARAMETRIZE = "pytest.mark.parametrize"


def parametrized_cases(sem, fn, name: str) -> list | None:
    """The values pytest passes for the parameter ``name`` of the test function ``fn``, one per case
    of the ``@pytest.mark.parametrize(argnames, argvalues)`` that names it: pytest is the caller, and
    each element of ``argvalues`` (a list or tuple display, or a module-level name bound once to one)
    is one call; its ``i``-th item when ``argnames`` names several (``"fn, n"``), the values of a
    ``pytest.param(...)`` unwrapped. None when no such decorator names the parameter, or a case is
    not written out (a starred element, a case of another length)."""
    for dec in getattr(fn, "decorator_list", ()):
        if not (isinstance(dec, ast.Call) and sem.qualname(dec.func) == _PARAMETRIZE):
            continue
        names, values = get_arg(dec, 0, "argnames"), get_arg(dec, 1, "argvalues")
        if isinstance(names, ast.Constant) and isinstance(names.value, str):
            ns = [n.strip() for n in names.value.split(",") if n.strip()]
        elif isinstance(names, (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names.elts):
            ns = [e.value for e in names.elts]
        else:
            continue
        if name not in ns:
            continue
        if isinstance(values, ast.Name):
            values = sem.single_value(values.id, sem.tree)
        if not isinstance(values, (ast.List, ast.Tuple)):
            return None
        i, out = ns.index(name), []
        for case in values.elts:
            if isinstance(case, ast.Call) and sem.qualname(case.func) == "pytest.param":
                items = case.args
            elif len(ns) == 1:
                items = [case]
            else:
                items = case.elts if isinstance(case, (ast.Tuple, ast.List)) else []
            if len(items) != len(ns) or any(isinstance(x, ast.Starred) for x in items):
                return None
            out.append(items[i])
        return out
    return None


# torch's multi-process test bases that destroy the default group for the test: after each test
# (``MultiProcessTestCase.run_test`` while ``destroy_pg_upon_exit`` is True, its default;
# ``MultiThreadedTestCase``'s per-thread run), or when the worker's loop of tests ends
# (``MultiProcContinuousTest``); their subclasses in torch inherit it
_TI = "torch.testing._internal."
GROUP_TEARDOWN_BASES = frozenset({
    _TI + "common_distributed.MultiProcessTestCase", _TI + "common_distributed.DistributedTestBase",
    _TI + "common_distributed.DynamoDistributedMultiProcTestCase",
    _TI + "common_distributed.MultiThreadedTestCase", _TI + "common_distributed.MultiProcContinuousTest",
    _TI + "common_fsdp.FSDPTest", _TI + "common_fsdp.FSDPTestContinuous",
    _TI + "distributed._tensor.common_dtensor.DTensorTestBase",
    _TI + "distributed._tensor.common_dtensor.DTensorOpTestBase",
    _TI + "distributed._shard.sharded_tensor.ShardedTensorTestBase",
    _TI + "distributed.distributed_test.TestDistBackend",
})
_TEARDOWN_SWITCH = "destroy_pg_upon_exit"


def harness_class(hub, view, node: ast.AST):
    """The class of the method ``node`` runs in (also from a function nested in it), when torch's
    test harness destroys the default group for its tests: its method resolution order
    (``records.method_order``, project bases in other modules included) reaches one of
    ``GROUP_TEARDOWN_BASES``, and no project class on the way turns the switch off (a class that
    defines ``destroy_pg_upon_exit`` other than as a property returning the literal True). A group
    that a test method of such a class creates, directly or through a helper, is the harness's to
    destroy. None otherwise."""
    from .records import method_order

    sem = view.sem
    fn = sem.enclosing_function(node)
    while fn is not None and not isinstance(parent(fn), ast.ClassDef):
        fn = sem.enclosing_function(fn)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return None
    order = method_order(hub, view, cls)
    if not order:
        return None
    for v, c in order:
        if v is None:
            if c in GROUP_TEARDOWN_BASES:
                return cls
            continue
        if any(_sets_switch(m) for m in c.body):
            return None
    return None


def _sets_switch(st: ast.AST) -> bool:
    """A class-body statement that overrides ``destroy_pg_upon_exit`` with anything but a method
    returning the literal True."""
    if isinstance(st, FUNC_TYPES) and st.name == _TEARDOWN_SWITCH:
        rets = [s for s in st.body if isinstance(s, ast.Return)]
        return not (len(st.body) - (1 if _docstring(st) else 0) == 1 and len(rets) == 1
                    and isinstance(rets[0].value, ast.Constant) and rets[0].value.value is True)
    targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == _TEARDOWN_SWITCH for t in targets)


def _docstring(fn) -> bool:
    return bool(fn.body) and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) \
        and isinstance(fn.body[0].value.value, str)
