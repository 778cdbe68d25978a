"""Filesystem effects: which calls download, extract, write, create or read a path, and which
functions of the project do so (followed through helpers, methods and other modules), on which
path.

- ``call_effects(vctx, call)``: the effects of one library call (the vocabulary below);
- ``function_effects(hub, view, fn)``: the effects every call of a project function makes on
  every rank that runs it (not under a main-rank test inside it), their paths bound to the
  function's parameters where they come from them; a call of it binds them to its arguments
  (``call_site_effects``);
- ``path_key`` / ``folder_key``: one canonical key per path expression (through names bound once,
  tuple assignments, ``os.path.join``, ``Path(...) / "x"``, ``args.x`` attributes), so that a write
  and a later read of the same path (or of a file in the folder made) are recognised as such.

An effect's ``path`` is an expression of the module in ``view``; ``cache`` names the shared folder
an API uses when no path is given (the torch hub cache, the NLTK data folder).

Not filesystem races: Hugging Face ``from_pretrained`` / ``hf_hub_download`` / ``snapshot_download``
and ``datasets.load_dataset`` take a file lock around their downloads (``huggingface_hub``'s
``WeakFileLock``, ``datasets``' ``FileLock`` on the builder's cache): they are not in the table.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..torch_api import constant_of
from .bindings import contains as _contains
from .calls import instance_names, may_resolve
from .helper_calls import bind_args
from .fs_guards import effect_guards, main_only_by_args, refuted
from .instances import is_super, super_method
from .records import function_name, own_method
from .viewctx import ViewCtx, view_ctx  # noqa: F401  (re-exported)

DOWNLOAD, EXTRACT, WRITE, MKDIR, READ, LIST = "download", "extract", "write", "mkdir", "read", "list"
TRACK = "track"  # opens a run of an experiment tracker (its folder, its remote run): DDP217
PRODUCES = frozenset({DOWNLOAD, EXTRACT, WRITE, MKDIR})  # kinds that create what a reader needs

_HUB = "the torch hub cache (~/.cache/torch/hub)"
# qualified name -> (kind, (position, keyword) of the destination or None, the shared cache used
# when no destination is given, a folder destination?)
_TABLE: dict[str, tuple] = {
    "torch.hub.load_state_dict_from_url": (DOWNLOAD, (1, "model_dir"), _HUB, True),
    "torch.utils.model_zoo.load_url": (DOWNLOAD, (1, "model_dir"), _HUB, True),
    "torch.hub.download_url_to_file": (DOWNLOAD, (1, "dst"), None, False),
    "torch.hub.load": (DOWNLOAD, None, _HUB, True),
    "torch.hub.list": (DOWNLOAD, None, _HUB, True),
    "torch.hub.help": (DOWNLOAD, None, _HUB, True),
    "urllib.request.urlretrieve": (DOWNLOAD, (1, "filename"), None, False),
    "nltk.download": (DOWNLOAD, (1, "download_dir"), "the NLTK data folder (~/nltk_data)", True),
    "wget.download": (DOWNLOAD, (1, "out"), None, False),
    "gdown.download": (DOWNLOAD, (1, "output"), None, False),
    "torchvision.datasets.utils.download_url": (DOWNLOAD, (1, "root"), None, True),
    "torchvision.datasets.utils.download_and_extract_archive": (DOWNLOAD, (1, "download_root"), None, True),
    "torchvision.datasets.utils.download_file_from_google_drive": (DOWNLOAD, (1, "root"), None, True),
    "torchvision.datasets.utils.extract_archive": (EXTRACT, (1, "to_path"), None, True),
    "shutil.unpack_archive": (EXTRACT, (1, "extract_dir"), None, True),
    # composer's ``get_file(path, destination)``: a URL, an object store's object or a local file
    # (symlinked) into ``destination``
    "composer.utils.get_file": (DOWNLOAD, (1, "destination"), None, False),
    "composer.utils.file_helpers.get_file": (DOWNLOAD, (1, "destination"), None, False),
    # writes and folders (DDP216)
    "torch.save": (WRITE, (1, "f"), None, False),
    "numpy.save": (WRITE, (0, "file"), None, False),
    "numpy.savez": (WRITE, (0, "file"), None, False),
    "numpy.savez_compressed": (WRITE, (0, "file"), None, False),
    "omegaconf.OmegaConf.save": (WRITE, (1, "f"), None, False),
    "os.replace": (WRITE, (1, "dst"), None, False),
    "os.rename": (WRITE, (1, "dst"), None, False),
    "shutil.move": (WRITE, (1, "dst"), None, False),
    "shutil.copy": (WRITE, (1, "dst"), None, False),
    "shutil.copy2": (WRITE, (1, "dst"), None, False),
    "shutil.copyfile": (WRITE, (1, "dst"), None, False),
    "shutil.copytree": (WRITE, (1, "dst"), None, True),
    "os.makedirs": (MKDIR, (0, "name"), None, True),
    "os.mkdir": (MKDIR, (0, "path"), None, True),
    # experiment trackers (DDP217): each call opens a new run (a remote run, an event file, a folder)
    "wandb.init": (TRACK, None, "a new Weights & Biases run", False),
    "comet_ml.Experiment": (TRACK, None, "a new Comet experiment", False),
    "comet_ml.OfflineExperiment": (TRACK, None, "a new Comet experiment", False),
    "comet_ml.start": (TRACK, None, "a new Comet experiment", False),
    "comet_ml.ExistingExperiment": (TRACK, None, "a Comet experiment session", False),
    "mlflow.start_run": (TRACK, None, "a new MLflow run", False),
    "neptune.init": (TRACK, None, "a new Neptune run", False),
    "neptune.init_run": (TRACK, None, "a new Neptune run", False),
    "neptune.new.init": (TRACK, None, "a new Neptune run", False),
    "neptune.new.init_run": (TRACK, None, "a new Neptune run", False),
    "swanlab.init": (TRACK, None, "a new SwanLab run", False),
    "clearml.Task.init": (TRACK, None, "a new ClearML task", False),
    "aim.Run": (TRACK, None, "a new Aim run", False),
    "torch.utils.tensorboard.SummaryWriter": (TRACK, (0, "log_dir"), "a new ./runs/<date>_<host> folder", True),
    "tensorboardX.SummaryWriter": (TRACK, (0, "logdir"), "a new ./runs/<date>_<host> folder", True),
    "torch.utils.tensorboard.writer.SummaryWriter": (TRACK, (0, "log_dir"), "a new ./runs/<date>_<host> folder", True),
    "tensorboardX.writer.SummaryWriter": (TRACK, (0, "logdir"), "a new ./runs/<date>_<host> folder", True),
    # reads
    "torch.load": (READ, (0, "f"), None, False),
    "numpy.load": (READ, (0, "file"), None, False),
    "os.listdir": (LIST, (0, "path"), None, True),
    "os.scandir": (LIST, (0, "path"), None, True),
    "glob.glob": (LIST, (0, "pathname"), None, True),
}
# what a file must spell to hold a tracker call (DDP217's text gate): the module, or the class
TRACK_TEXT = tuple(sorted({q.split(".")[0] if q.split(".")[0] != "torch" else q.rsplit(".", 1)[1]
                           for q, v in _TABLE.items() if v[0] == TRACK}))
# downloads that land atomically (a uniquely named ``.partial`` file moved into place, torch/hub.py):
# concurrent ranks download it N times but never leave a torn file (pytorch/pytorch#68320)
# composer's ``get_file`` of a URL does the same (``<dst>.<uuid>.tmp``, ``os.rename``); its object
# stores download to a temporary name too
ATOMIC_DOWNLOADS = frozenset({"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url",
                              "torch.hub.download_url_to_file", "composer.utils.get_file",
                              "composer.utils.file_helpers.get_file"})
# torchtext's pretrained word vectors: the constructor downloads the archive into ``cache`` with a
# plain ``urlretrieve`` (no lock, no temporary name), extracts it there and saves a ``.pt`` copy
_VECTOR_MODULES = frozenset({"torchtext.vocab", "torchtext.vocab.vectors"})
_VECTORS = frozenset({"GloVe", "FastText", "CharNGram"})
_VECTOR_CACHE = "the torchtext vector cache (./.vector_cache)"
_TAR_OPEN = frozenset({"tarfile.open", "tarfile.TarFile", "zipfile.ZipFile", "tarfile.TarFile.open"})
_PATH_CALLS = frozenset({"os.path.join", "os.path.expanduser", "os.path.abspath", "os.path.realpath",
                         "os.fspath", "str", "pathlib.Path", "os.path.normpath"})
_READ_METHODS = frozenset({"read_text", "read_bytes", "iterdir", "glob", "rglob"})
_MAX_DEPTH = 3


class FsEffect:
    """``kind`` of ``api`` at ``node`` (in ``view``'s module); ``path`` the destination (or source, for
    a read) expression, or None with ``cache`` the shared folder it uses; ``folder``: the path names
    a folder (a download root, an extraction target, a made directory); ``via``: the helpers."""

    __slots__ = ("kind", "api", "node", "path", "cache", "folder", "view", "via", "home", "key", "args",
                 "per_rank", "guards", "exist_ok")

    def __init__(self, kind, api, node, path, cache, folder, view=None, via=(), home=None):
        self.kind, self.api, self.node, self.path, self.cache, self.folder = kind, api, node, path, cache, folder
        self.view, self.via, self.home = view, tuple(via), home  # home: the module of ``node``
        self.key = None  # the path's key in the terms of the module that called (``call_site_effects``)
        self.args = ()  # the arguments of that call the path is made of
        self.per_rank = False  # the path depends on the rank inside the function (``rank_specific``)
        self.guards = ()  # (test, holds) of the ``if``s of the function around it (``call_site_effects``)
        # a folder creation that tolerates an existing folder (``exist_ok=True``): True, False (it
        # raises FileExistsError), None (cannot tell: ``exist_ok=flag``); None for other kinds
        self.exist_ok = None

    def path_key(self) -> str | None:
        """The key of the path in the terms of the outermost call (``path_key``)."""
        if self.key is None and self.path is not None and self.view is not None:
            self.key = path_key(view_ctx(self.view), self.path)
        return self.key


def _true(sem, e) -> bool:
    c = constant_of(sem, e)
    return c is not None and c.value is True


def call_effects(vctx, call: ast.Call) -> list[FsEffect]:
    """The filesystem effects of one call of a library API (nothing for a project function)."""
    qn = vctx.qn(call) or ""
    got = _TABLE.get(qn)
    if got is not None:
        kind, where, cache, folder = got
        path = get_arg(call, *where) if where else None
        if path is None and cache is None:
            return []
        if qn == "torch.load" and isinstance(path, ast.Call):
            return []  # torch.load(io.BytesIO(...)), torch.load(open(...)): not a path
        eff = FsEffect(kind, qn, call, path, cache if path is None else None, folder)
        if kind == MKDIR:
            eff.exist_ok = False if qn == "os.mkdir" else _exist_ok(vctx, call, 2)
        return [eff]
    if qn.startswith("torchvision.datasets.") and qn.count(".") == 2:
        # ``CIFAR10(root, download=True)``: downloads and extracts into ``root``
        root = get_arg(call, 0, "root")
        if root is not None:
            if _true(vctx.sem, get_arg(call, None, "download")):
                return [FsEffect(DOWNLOAD, qn, call, root, None, True)]
            return [FsEffect(READ, qn, call, root, None, True)]
        return []
    if qn in ("open", "io.open", "builtins.open") or (qn == "" and isinstance(call.func, ast.Name)
                                                      and call.func.id == "open"):
        path = get_arg(call, 0, "file")
        mode = constant_of(vctx.sem, get_arg(call, 1, "mode"))
        if path is None:
            return []
        if get_arg(call, 1, "mode") is None:
            return [FsEffect(READ, "open", call, path, None, False)]
        if mode is None or not isinstance(mode.value, str):
            return []
        kind = WRITE if set(mode.value) & set("wax+") else READ
        return [FsEffect(kind, "open", call, path, None, False)]
    f = call.func
    vectors = _vectors_class(vctx, call)
    if vectors is not None:
        # ``GloVe(name, dim, cache=...)``: downloads the archive into ``cache`` and extracts it there
        cache = get_arg(call, None, "cache")
        return [FsEffect(DOWNLOAD, vectors, call, cache, _VECTOR_CACHE if cache is None else None, True)]
    if f.__class__ is ast.Attribute:
        if f.attr == "extractall":
            if _tar_object(vctx, f.value, call):
                path = get_arg(call, 0, "path")
                if path is None:
                    return [FsEffect(EXTRACT, "extractall", call, None, "the current directory", True)]
                return [FsEffect(EXTRACT, "extractall", call, path, None, True)]
            return []
        if f.attr == "mkdir" and _is_path_obj(vctx, f.value):
            eff = FsEffect(MKDIR, "Path.mkdir", call, f.value, None, True)
            eff.exist_ok = _exist_ok(vctx, call, 2)
            return [eff]
        if f.attr in _READ_METHODS and _is_path_obj(vctx, f.value):
            return [FsEffect(LIST if f.attr in ("iterdir", "glob", "rglob") else READ, "Path." + f.attr, call,
                             f.value, None, f.attr in ("iterdir", "glob", "rglob"))]
        if f.attr in ("write_text", "write_bytes") and _is_path_obj(vctx, f.value):
            return [FsEffect(WRITE, "Path." + f.attr, call, f.value, None, False)]
    return []


def _vectors_class(vctx, call: ast.Call) -> str | None:
    """The qualified name of the torchtext pretrained-vectors class that ``call`` constructs, when it
    downloads (``_VECTORS``; ``Vectors`` itself only with a ``url``): called by name, as an entry of
    ``torchtext.vocab.pretrained_aliases`` (each one a ``partial`` of such a class), or as
    ``getattr(torchtext.vocab, name)`` where every value ``name`` can hold names one of them."""
    f = call.func
    if f.__class__ is ast.Subscript:
        qn = vctx.sem.qualname(f.value) or ""
        return qn if qn.rpartition(".")[0] in _VECTOR_MODULES and qn.endswith(".pretrained_aliases") else None
    if f.__class__ is ast.Call and isinstance(f.func, ast.Name) and f.func.id == "getattr" and len(f.args) >= 2:
        mod = vctx.sem.qualname(f.args[0]) or ""
        if mod not in _VECTOR_MODULES:
            return None
        names = _string_values(vctx.sem, f.args[1])
        if names and all(n in _VECTORS for n in names):
            return f"{mod}.{'/'.join(sorted(names))}"
        return None
    qn = vctx.qn(call) or ""
    mod, _, name = qn.rpartition(".")
    if mod not in _VECTOR_MODULES:
        return None
    if name in _VECTORS:
        return qn
    if name == "Vectors" and get_arg(call, 2, "url") is not None:
        return qn
    return None


def _string_values(sem, expr) -> frozenset[str]:
    """The strings ``expr`` can hold: a literal (``constant_of``), or an item of a dict literal bound
    once whose values are all strings (``MAPPING[key]``, also through a name bound once to it)."""
    c = constant_of(sem, expr)
    if c is not None:
        return frozenset({c.value}) if isinstance(c.value, str) else frozenset()
    scope = sem.scope_of(expr)
    if isinstance(expr, ast.Name):
        expr = sem.single_value(expr.id, scope)
    if not isinstance(expr, ast.Subscript) or not isinstance(expr.value, ast.Name):
        return frozenset()
    table = sem.single_value(expr.value.id, sem.scope_of(expr))
    if table is None:
        table = sem.single_value(expr.value.id, sem.tree)
    if not isinstance(table, ast.Dict) or not table.values:
        return frozenset()
    if not all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in table.values):
        return frozenset()
    return frozenset(v.value for v in table.values)


def _exist_ok(vctx, call: ast.Call, pos: int) -> bool | None:
    """``exist_ok`` of ``os.makedirs(p, mode, exist_ok)`` / ``Path.mkdir(mode, parents, exist_ok)``
    (its position ``pos``): True / False when known (absent: False), None when it is not a constant."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    a = get_arg(call, pos, "exist_ok")
    if a is None:
        return False
    c = constant_of(vctx.sem, a)
    return None if c is None else bool(c.value)


def is_path_obj(vctx, e) -> bool:
    """``e`` is a ``pathlib.Path`` (``_is_path_obj``)."""
    return _is_path_obj(vctx, e)


def _is_path_obj(vctx, e, depth: int = 0) -> bool:
    """``e`` is a ``pathlib.Path``: a ``Path(...)`` call, ``Path(...) / x``, a name bound to one, or
    a ``self`` attribute every binding of the class binds to one."""
    for _ in range(3):
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div):
            e = e.left
            continue
        if isinstance(e, ast.Call):
            return (vctx.qn(e) or "") in ("pathlib.Path", "pathlib.PosixPath")
        if isinstance(e, ast.Name):
            v = bound_value(vctx, e.id, e)
            if v is None:
                return False
            e = v
            continue
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self" and depth < 2:
            # ``self.cache`` where every binding of the class is one (``self.cache = Path(...)``)
            from .class_chains import self_bindings  # noqa: PLC0415  (class_chains reaches origins)

            fn = vctx.sem.enclosing_function(e)
            cls = parent(fn) if fn is not None else None
            got = self_bindings(cls, e.attr) if isinstance(cls, ast.ClassDef) else []
            return bool(got) and all(not p and _is_path_obj(vctx, v, depth + 1) for _m, v, p in got)
        return False
    return False


def _tar_object(vctx, e, at) -> bool:
    if isinstance(e, ast.Call):
        return (vctx.qn(e) or "") in _TAR_OPEN
    if isinstance(e, ast.Name):
        v = bound_value(vctx, e.id, at)
        if isinstance(v, ast.Call):
            return (vctx.qn(v) or "") in _TAR_OPEN
    return False


# -- values of names ---------------------------------------------------------------------------------

def bound_value(vctx, name: str, at: ast.AST):
    """The expression ``name`` holds at ``at``: the last binding before it in its scope (module level
    when the function does not bind it) when that is ``name = value``, an element of a tuple
    assignment ``a, b = x, y``, or ``with f(...) as name``; None otherwise (a parameter, a loop)."""
    sem = vctx.sem
    scope = sem.scope_of(at)
    if scope is at and not isinstance(at, ast.Module):
        return None  # a node outside this module's tree (a path rewritten in a caller's terms)
    binds = sem.assignments(scope).get(name)
    if not binds:
        if isinstance(scope, ast.Module) or name in param_names(scope):
            return None
        binds = sem.assignments(sem.tree).get(name)
        if not binds:
            return None
        before = binds
    else:
        before = [b for b in binds if b.lineno < at.lineno or (b.lineno == at.lineno and b is not at)]
        before = [b for b in before if isinstance(b, (ast.With, ast.AsyncWith)) or not _contains(b, at)]
    if not before:
        return None
    last = before[-1]
    if isinstance(last, ast.Assign) and len(last.targets) == 1:
        t, v = last.targets[0], last.value
        if isinstance(t, ast.Name):
            return v
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) \
                and len(t.elts) == len(v.elts) and not any(isinstance(x, ast.Starred) for x in (*t.elts, *v.elts)):
            for x, y in zip(t.elts, v.elts):
                if isinstance(x, ast.Name) and x.id == name:
                    return y
        return None
    if isinstance(last, ast.AnnAssign):
        return last.value
    if isinstance(last, (ast.With, ast.AsyncWith)):
        for it in last.items:
            if isinstance(it.optional_vars, ast.Name) and it.optional_vars.id == name:
                return it.context_expr
    return None


def path_key(vctx, expr: ast.AST, depth: int = 0, leaf=None) -> str | None:
    """One canonical key for a path expression: names are followed to the value they hold
    (``bound_value``), ``os.path.join``/``Path``/``/`` are normalised; a parameter keys as itself.
    None for what cannot be keyed (a call of something else, a loop variable), unless ``leaf``
    keys such a name (``fs_races.race_key``: the variable itself)."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, ast.Constant):
        return repr(expr.value) if isinstance(expr.value, str) else None
    if isinstance(expr, ast.Name):
        v = bound_value(vctx, expr.id, expr)
        if v is not None:
            got = path_key(vctx, v, depth + 1, leaf)
            return got if got is not None or leaf is None else leaf(expr)
        fn = vctx.sem.scope_of(expr)
        if isinstance(fn, FUNC_TYPES) and expr.id in param_names(fn):
            return "param:" + expr.id
        kind = _binding_kind(vctx, expr)
        if kind:
            return None if leaf is None else leaf(expr)
        return "name:" + expr.id
    if isinstance(expr, ast.Attribute):
        base = expr
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id != "self":
            inner = path_key(vctx, expr.value, depth + 1, leaf) if isinstance(expr.value, ast.Name) else None
            if inner is not None and inner.startswith(("param:", "name:")):
                return inner + "." + expr.attr
            return "attr:" + ast.unparse(expr)
        return "attr:" + ast.unparse(expr) if isinstance(base, ast.Name) else None
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and type(expr.slice.value) in (str, int):
        # ``cfg["root"]``: an entry under a literal key keys like an attribute
        inner = path_key(vctx, expr.value, depth + 1, leaf) if isinstance(expr.value, (ast.Name, ast.Attribute)) else None
        if isinstance(expr.value, ast.Name) and (inner is None or not inner.startswith(("param:", "name:"))):
            return None if expr.value.id == "self" else "attr:" + ast.unparse(expr)
        return None if inner is None else f"{inner}[{expr.slice.value!r}]"
    if isinstance(expr, ast.Call):
        qn = vctx.qn(expr) or ""
        if qn in _PATH_CALLS and expr.args and not expr.keywords:
            parts = [path_key(vctx, a, depth + 1, leaf) for a in expr.args]
            if any(p is None for p in parts):
                return None
            return parts[0] if len(parts) == 1 else "join(" + ",".join(parts) + ")"
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        a, b = path_key(vctx, expr.left, depth + 1, leaf), path_key(vctx, expr.right, depth + 1, leaf)
        return None if a is None or b is None else f"join({a},{b})"
    if isinstance(expr, (ast.JoinedStr, ast.BinOp)):
        parts = []
        for n in (expr.values if isinstance(expr, ast.JoinedStr) else (expr.left, expr.right)):
            if isinstance(expr, ast.BinOp) and not isinstance(expr.op, ast.Add):
                return None
            v = n.value if isinstance(n, ast.FormattedValue) else n
            k = path_key(vctx, v, depth + 1, leaf)
            if k is None:
                return None
            parts.append(k)
        return "cat(" + ",".join(parts) + ")"
    return None


def _binding_kind(vctx, expr: ast.Name) -> str | None:
    """"bound" when ``expr`` has bindings in its scope that ``bound_value`` could not read (a loop,
    a call result, several paths), else None (a free module-level or global name)."""
    sem = vctx.sem
    scope = sem.scope_of(expr)
    if sem.assignments(scope).get(expr.id) or sem.assignments(sem.tree).get(expr.id):
        return "bound"
    return None


def folder_key(vctx, expr: ast.AST) -> str | None:
    """The key of the folder a path is in: ``os.path.join(d, ...)``, ``Path(d) / "x"``,
    ``f"{d}/x"`` (through names bound once); None when the path does not show its folder."""
    return folder_of(path_key(vctx, expr))


def folder_of(k: str | None) -> str | None:
    """``folder_key`` of a path key."""
    if k is None:
        return None
    if k.startswith("join("):
        return _first_part(k[5:-1])
    if k.startswith("cat("):
        first, rest = _split_first(k[4:-1])
        if rest.startswith("'/") or rest.startswith("'\\\\"):
            return first
    return None


def _split_first(inner: str) -> tuple[str, str]:
    depth = 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            return inner[:i], inner[i + 1:]
    return inner, ""


def _first_part(inner: str) -> str:
    return _split_first(inner)[0]


# -- project functions -------------------------------------------------------------------------------

def function_effects(hub, view, fn: ast.AST, depth: int = 0) -> tuple[FsEffect, ...]:
    """The filesystem effects a call of ``fn`` makes on every rank that runs it: its own calls of the
    vocabulary and those of the project functions it calls (followed to a small depth, across
    files), leaving out those under a main-rank test inside ``fn`` (``rank.rank0_guarded``) and
    those on a rank-specific path. An effect whose path comes from a parameter of ``fn`` keeps the
    parameter (``path`` a ``Name`` of ``fn``): ``call_site_effects`` binds it at a call."""
    if not isinstance(fn, FUNC_TYPES) or depth > _MAX_DEPTH:
        return ()
    memo = view.memo.setdefault("fs.effects", {})
    key = (id(fn), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(key)
    if got is not None:
        return got
    memo[key] = ()  # recursion guard
    hub._view_stack.append(view)
    try:
        got = memo[key] = tuple(_function_effects(hub, view, fn, depth))
    finally:
        hub._view_stack.pop()
    return got


def _function_effects(hub, view, fn, depth):
    from .calls import scope_calls
    from .rank import rank0_guarded

    vctx = view_ctx(view)
    out = []
    for c in scope_calls(view, fn):
        effs = call_effects(vctx, c)
        if not effs and may_resolve_any(view, c):
            target = resolve(hub, view, c)
            if target is not None and target[1] is not fn:
                effs = call_site_effects(hub, view, c, target, depth + 1)
        if not effs:
            continue
        if _nested(c, fn) or rank0_guarded(vctx, c, callers=False) is True:
            continue
        guards = effect_guards(c, fn)
        for e in effs:
            if e.view is None:
                e.view = e.home = view
            e.guards = guards
            if e.path is not None and e.view is view and rank_specific(vctx, e.path, c):
                e.per_rank = True
            out.append(e)
            if len(out) >= 48:
                return out
    return out


def _nested(node, fn) -> bool:
    """``node`` sits in a function or class nested in ``fn``: not run by a call of ``fn``."""
    p = parent(node)
    while p is not None and p is not fn:
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return True
        p = parent(p)
    return False


def rank_specific(vctx, expr, at) -> bool:
    """The path depends on the rank (``f"out_{rank}.pt"``): each rank has its own. Of an
    if-expression on the number of processes (``unique_name() if world_size == 1 else shared``),
    only the branch a job of several processes takes."""
    from .rank_tests import is_rank_like, single_process_side

    if isinstance(expr, ast.IfExp):
        side = single_process_side(vctx, expr.test, vctx.sem.scope_of(expr))
        if side is not None:
            return rank_specific(vctx, expr.orelse if side == "body" else expr.body, at)
    for n in ast.walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and is_rank_like(n):
            return True
        if isinstance(n, ast.Call) and (vctx.qn(n) or "").startswith(("tempfile.", "uuid.", "io.")):
            return True
    if isinstance(expr, ast.Name):
        v = bound_value(vctx, expr.id, at)
        if v is not None and v is not expr:
            return rank_specific(vctx, v, at)
    return False


def resolve(hub, view, call: ast.Call):
    """``hub.resolve_call``, ``Cls(...).method(...)`` of a project class and ``super().method(...)``
    in a method of a project class (view, method)."""
    got = hub.resolve_call(view, call)
    if got is not None:
        return got
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and is_super(f.value):
        return super_method(hub, view, call, f.attr)
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call):
        ctor = f.value
        cls = None
        if isinstance(ctor.func, ast.Name) and ctor.func.id in view.classes:
            cls, cview = view.classes[ctor.func.id], view
        else:
            init = hub.resolve_call(view, ctor)
            if init is not None and isinstance(parent(init[1]), ast.ClassDef):
                cls, cview = parent(init[1]), init[0]
        if cls is not None:
            return own_method(cview, cls, f.attr)
    return None


def may_resolve_any(view, call: ast.Call) -> bool:
    f = call.func
    if f.__class__ is ast.Name and view.star_imports:
        return True  # ``from pkg.utils import *``: the hub looks the name up in those modules
    if may_resolve(view, call):
        return True
    if f.__class__ is ast.Attribute and f.value.__class__ is ast.Name:
        return f.value.id in instance_names(view)  # ``ckpt.save(...)`` on ``ckpt = Manager(...)``
    if f.__class__ is ast.Attribute and f.value.__class__ is ast.Attribute and f.value.value.__class__ is ast.Name:
        return f.value.value.id == "self"  # ``self.ckpt.save(...)``: ``self.ckpt``'s class (``self_attr_class``)
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) \
        and (may_resolve(view, f.value) or is_super(f.value))


_PARAM = re.compile(r"param:([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


def call_site_effects(hub, view, call: ast.Call, target, depth: int = 0, effs=None) -> list[FsEffect]:
    """The effects of ``call`` of the project function ``target`` (view, fn), their path keys
    rewritten in this call's terms: each parameter of ``fn`` the path is made of is replaced by the
    key of the argument given for it (``key``, ``args``); a path that is exactly one parameter (or
    an attribute of one) becomes the argument expression itself (``path``, ``view``). A path of
    another module made of anything else keeps no key (it cannot be compared with this one's).
    ``effs``: those of ``fn``'s effects instead (``fs_returns.main_only_effects``)."""
    tview, fn = target
    effs = function_effects(hub, tview, fn, depth) if effs is None else effs
    if not effs:
        return []
    args = bind_args(call, fn)
    name = function_name(fn)
    vctx = view_ctx(view)
    out = []
    for e in effs:
        if e.guards and (refuted(view.sem, e.guards, args) or main_only_by_args(vctx, e.guards, args, call)):
            continue
        path, pview = e.path, e.view
        k = e.path_key()
        key, used, ok = None, [], True
        if k is not None and "param:" in k:
            def sub(m):
                nonlocal ok
                a = args.get(m.group(1))
                ak = path_key(vctx, a) if a is not None else None
                if ak is None and m.group(2) and a.__class__ is ast.Name:
                    # ``cfg.out`` of an object built here: keyed as the attribute itself, as a path that
                    # is the whole parameter's attribute is (``os.makedirs(cfg.out)``); else that object's
                    x = a
                    for attr in m.group(2).split(".")[1:]:
                        x = ast.copy_location(ast.Attribute(value=x, attr=attr, ctx=ast.Load()), a)
                    if (xk := path_key(vctx, x)) is not None and xk.startswith("attr:"):
                        return used.append(a) or xk
                    ak = "obj:" + a.id  # (``_on_receiver``)
                if ak is None:
                    ok = False
                    return "?"
                used.append(a)
                if m.group(2):
                    if not ak.startswith(("param:", "name:", "attr:")):
                        ok = False
                    return ak + m.group(2)
                return ak
            key = _PARAM.sub(sub, k)
            if not ok:
                key = None
            full = _PARAM.fullmatch(k)
            if full and not used and args.get(full.group(1)) is not None:
                used.append(args[full.group(1)])  # an argument with no key is still the path
            if full and used:  # exactly one parameter: the argument is the path
                path, pview = used[0], view
                for a in full.group(2).split(".")[1:]:
                    path = ast.copy_location(ast.Attribute(value=path, attr=a, ctx=ast.Load()), path)
                    path.end_lineno, path.end_col_offset = path.value.end_lineno, path.value.end_col_offset
        elif k is not None and k.startswith("'"):
            key = k  # a literal path: the same in every module
        if k is not None and "attr:self." in k and (key is not None or "param:" not in k):
            # a method called on an instance (``ckpt.save(...)``): its ``self.<attr>`` paths are that
            # instance's (``ckpt.load_latest()`` reads what ``ckpt.save()`` wrote); on ``self`` they stay
            key = _on_receiver(vctx, call, key or k)
        f = FsEffect(e.kind, e.api, e.node, path, e.cache, e.folder, pview, (name, *e.via), e.home)
        f.key, f.args, f.per_rank, f.exist_ok = key, tuple(used) or e.args, e.per_rank, e.exist_ok
        out.append(f)
    return out


_SELF_ATTR = re.compile(r"attr:self\.")


def _on_receiver(vctx, call: ast.Call, key: str) -> str | None:
    """``key`` (of a method's effect) with its ``self.`` paths those of the instance the method was
    called on: ``obj:ckpt.root`` for ``ckpt.save(...)``; unchanged for ``self.m(...)`` and
    ``Cls(...).m(...)`` (a fresh instance: None, no other call shares it)."""
    f = call.func
    if f.__class__ is not ast.Attribute:
        return key
    recv = f.value
    if recv.__class__ is ast.Name:
        if recv.id == "self":
            return key
        rk = path_key(vctx, recv)
        base = rk if rk is not None and rk.startswith(("param:", "name:", "attr:")) else "obj:" + recv.id
        return _SELF_ATTR.sub(lambda m: base + ".", key)
    if recv.__class__ is ast.Attribute:
        rk = path_key(vctx, recv)
        if rk is not None and rk.startswith("attr:"):
            return _SELF_ATTR.sub(lambda m: rk + ".", key)
    return None


def effects_at(ctx, an, call: ast.Call, local: bool = True) -> list[FsEffect]:
    """The effects of ``call`` here: a library call of the vocabulary, or a call of a project
    function (of this file too when ``local``), bound to this call's arguments."""
    effs = call_effects(ctx, call)
    if effs:
        for e in effs:
            e.view = e.home = an.main
        return effs
    if may_resolve_any(an.main, call):
        target = resolve(an, an.main, call)
        if target is not None and (local or target[0] is not an.main):
            if target[1] is not an.main.sem.enclosing_function(call):
                return call_site_effects(an, an.main, call, target)
    return []

