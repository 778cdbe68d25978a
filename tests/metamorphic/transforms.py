"""Semantics-preserving transformations of a fixture (issue 25, point 3).

Each transformation takes the fixture's text and returns ``Variant``s: the new text of the fixture
and any new files (relative path -> text), or nothing when it does not apply. Expected lines travel
with their text: every ``# expect: CODE`` marker is tagged (``[m3]``) before transforming, and a line
that is copied (a statement extracted into a helper) keeps the tag, so a finding on any line that
carries the tag counts. Comments never decide a finding (tests/test_no_raw_text.py), so the markers do
not disturb what is measured.

The transformations work on lines, guided by the AST; none knows any rule.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field

MARK_RE = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+?)\s*(\[m\d+\])?\s*$")


@dataclass
class Variant:
    name: str
    text: str
    files: dict = field(default_factory=dict)  # relative path -> text (new modules)
    main_path: str | None = None  # where the fixture goes, relative (default: its own name)


def tag_markers(text: str) -> str:
    out, k = [], 0
    for line in text.split("\n"):
        m = MARK_RE.search(line)
        if m and not m.group(2):
            line = line[: m.end(1)] + f" [m{k}]"
            k += 1
        out.append(line)
    return "\n".join(out)


def _lines(text):
    return text.split("\n")


def _indent(s: str) -> str:
    return s[: len(s) - len(s.lstrip())]


def _multiline_strings(tree) -> set[int]:
    """Lines inside a multi-line string (re-indenting them would change the string)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(n, "value", ""), (str, list)) \
                and n.end_lineno > n.lineno:
            out.update(range(n.lineno + 1, n.end_lineno + 1))
    return out


def _shift(lines, first, last, by="    ", skip=frozenset()):
    for i in range(first - 1, last):
        if lines[i].strip() and (i + 1) not in skip:
            lines[i] = by + lines[i]


def _top_code(tree):
    """Module-level statements that are neither imports, definitions, docstrings nor the main guard."""
    out = []
    for i, st in enumerate(tree.body):
        if isinstance(st, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue
        out.append(st)
    return out


def _is_main_guard(st) -> bool:
    return isinstance(st, ast.If) and isinstance(st.test, ast.Compare) and isinstance(st.test.left, ast.Name) \
        and st.test.left.id == "__name__"


def _stored_names(stmts) -> set[str]:
    out = set()
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in n.names)
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                out.add(n.name)
    return out


# -- 1. comments and strings that mention the fix ---------------------------------------------------
_FIX_WORDS = ("torch.cuda.set_device(local_rank); dist.destroy_process_group(); sampler.set_epoch(epoch); "
              "SyncBatchNorm.convert_sync_batchnorm; DistributedSampler; 'module.'; model.no_sync(); dist.barrier(); "
              "torch.load(map_location=...); requires_grad; _set_static_graph; if dist.get_rank() == 0")


def t_comments(text, tree):
    lines = _lines(text)
    out = []
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith((" ", "\t", ")", "]", "}")) and (i + 1) not in _multiline_strings(tree) \
                and not line.lstrip().startswith(("@", "else", "elif", "except", "finally")):
            out.append(f"# TODO {_FIX_WORDS}")
        out.append(line)
    return [Variant("comments", "\n".join(out))]


def t_strings(text, tree):
    lines = _lines(text)
    ins = _insert_point(tree)
    note = [f"_NOTE = {_FIX_WORDS!r}", f"print({_FIX_WORDS!r}) if False else None"]
    lines[ins:ins] = note
    body = "\n".join(lines)
    return [Variant("strings", f'"""{_FIX_WORDS}"""\n' + body if not body.startswith(("#!", "# -*-", "from __future__")) else body)]


def _insert_point(tree) -> int:
    """Index (0-based line) after the leading imports (and docstring)."""
    last = 0
    for i, st in enumerate(tree.body):
        if isinstance(st, (ast.Import, ast.ImportFrom)) or (i == 0 and isinstance(st, ast.Expr)
                                                             and isinstance(st.value, ast.Constant)):
            last = st.end_lineno
        else:
            break
    return last


# -- 2. move the top-level code under main() / the main guard / an epoch loop -----------------------
def _wrap_top(text, tree, header, name, footer=(), global_names=False):
    code = _top_code(tree)
    code = [st for st in code if not _is_main_guard(st)] if name != "main_guard" else code
    if not code:
        return []
    if any(_is_main_guard(st) for st in code) and name == "main_guard":
        return []
    first, last = code[0].lineno, code[-1].end_lineno
    # only a contiguous block of top-level code (definitions in between would be moved too)
    between = [st for st in tree.body if first <= st.lineno <= last and st not in code]
    if between:
        return []
    if any(isinstance(n, (ast.Return, ast.Yield)) for st in code for n in ast.walk(st)):
        return []
    lines = _lines(text)
    first = min([first] + [d.lineno for st in code for d in getattr(st, "decorator_list", [])])
    _shift(lines, first, last, skip=_multiline_strings(tree))
    head = list(header)
    if global_names:
        names = sorted(_stored_names(code))
        if names:
            head.append("    global " + ", ".join(names))
    lines[first - 1:first - 1] = head
    end = last + len(head)
    lines[end:end] = list(footer)
    return [Variant(name, "\n".join(lines))]


def t_main_function(text, tree):
    return _wrap_top(text, tree, ["def _mm_main():"], "main_function",
                     footer=["", "", "_mm_main()"], global_names=True)


def t_main_guard(text, tree):
    return _wrap_top(text, tree, ['if __name__ == "__main__":'], "main_guard")


def t_epoch_loop(text, tree):
    """The body of the main guard (or of every top-level ``main``) runs inside a one-trip loop."""
    for st in tree.body:
        if _is_main_guard(st) and not any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(st)):
            lines = _lines(text)
            first, last = st.body[0].lineno, st.body[-1].end_lineno
            _shift(lines, first, last, skip=_multiline_strings(tree))
            lines[first - 1:first - 1] = [_indent(lines[first - 1])[4:] + "for _mm_epoch in range(1):"]
            return [Variant("epoch_loop", "\n".join(lines))]
    return []


# -- 3. wrap a function in a class and a method -----------------------------------------------------
def t_class_method(text, tree):
    out = []
    lines = _lines(text)
    for st in tree.body:
        if isinstance(st, ast.FunctionDef) and not st.decorator_list and not any(
                isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(st)):
            # the function becomes a method of an instance; its name stays bound to the bound method
            new = list(lines)
            first, last = st.lineno, st.end_lineno
            _shift(new, first, last, skip=_multiline_strings(tree))
            a = st.args
            sig = new[first - 1]
            if a.posonlyargs:
                continue
            new[first - 1] = re.sub(r"def\s+" + st.name + r"\s*\(", f"def {st.name}(self, " if (a.args or a.vararg or a.kwonlyargs or a.kwarg) else f"def {st.name}(self", sig, count=1)
            if new[first - 1] == sig:
                continue
            cls = f"_MM{st.name.title().replace('_', '')}"
            # every other use of the name goes through an instance: ``Cls().name``
            uses = sorted(((n.lineno, n.col_offset, n.end_col_offset) for n in ast.walk(tree)
                           if isinstance(n, ast.Name) and n.id == st.name and isinstance(n.ctx, ast.Load)),
                          reverse=True)
            if any(first <= ln <= last for ln, _, _ in uses):
                continue  # recursive
            for ln, c0, c1 in uses:
                s = new[ln - 1]
                if ln > first:
                    c0, c1 = c0 + (4 if ln <= last else 0), c1 + (4 if ln <= last else 0)
                new[ln - 1] = s[:c0] + f"{cls}().{st.name}" + s[c1:]
            new[first - 1:first - 1] = [f"class {cls}:"]
            out.append(Variant("class_method", "\n".join(new)))
            break  # the first function only (one variant)
    return out


# -- 4. rename the script's own variables -----------------------------------------------------------
_KEEP = {"self", "cls", "args", "kwargs", "_", "__name__", "__file__"}


def t_rename(text, tree):
    """Every variable the file assigns (not parameters, attributes, functions, classes, imports,
    class attributes, names other files might import) gets an opaque name."""
    assigned, params, defs, in_fstring, class_level, nonlocal_ = set(), set(), set(), set(), set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            assigned.add(n.id)
        elif isinstance(n, ast.arg):
            params.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.add(n.name)
            if isinstance(n, ast.ClassDef):
                for s in n.body:
                    class_level |= _stored_names([s]) if isinstance(s, (ast.Assign, ast.AnnAssign)) else set()
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            defs.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.JoinedStr):
            for m in ast.walk(n):
                if isinstance(m, ast.Name):
                    in_fstring.add(m.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            nonlocal_.update(n.names)
        elif isinstance(n, ast.keyword) and n.arg:
            params.add(n.arg)  # ``f(x=...)`` may name a variable too: keep both
    names = sorted(assigned - params - defs - in_fstring - class_level - _KEEP - nonlocal_)
    names = [n for n in names if not n.isupper() and not n.startswith("__")]
    if not names:
        return []
    mapping = {n: f"v{i}_" for i, n in enumerate(names)}
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = _lines(text)
    edits = []
    for i, tk in enumerate(toks):
        if tk.type != tokenize.NAME or tk.string not in mapping:
            continue
        prev = toks[i - 1].string if i else ""
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        if prev == ".":
            continue
        if nxt == "=" and prev in ("(", ","):
            # maybe a keyword argument: only when inside brackets; a tuple target at line start is not
            # (``rank, size = ...``: every token before it on the line is a name or a comma)
            line = tk.line
            if not re.fullmatch(r"[\w\s,]*", line[: tk.start[1]]):
                continue
        edits.append((tk.start, tk.end, mapping[tk.string]))
    for (r, c0), (_, c1), new in reversed(edits):
        s = lines[r - 1]
        lines[r - 1] = s[:c0] + new + s[c1:]
    return [Variant("rename", "\n".join(lines))]


# -- 5. tuple assignments split, and simple assignments joined ---------------------------------------
def t_tuple(text, tree):
    lines = _lines(text)
    changed = False
    marked = _marked_lines(lines)
    # ``a, b = x, y`` -> two assignments (when no value reads a target)
    for n in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) \
                and isinstance(n.value, ast.Tuple) and len(n.targets[0].elts) == len(n.value.elts) \
                and all(isinstance(t, ast.Name) for t in n.targets[0].elts) and n.lineno == n.end_lineno \
                and n.lineno not in marked:
            tg = {t.id for t in n.targets[0].elts}
            if any(isinstance(m, ast.Name) and m.id in tg for v in n.value.elts for m in ast.walk(v)):
                continue
            ind = _indent(lines[n.lineno - 1])
            new = [f"{ind}{t.id} = {ast.unparse(v)}" for t, v in zip(n.targets[0].elts, n.value.elts)]
            lines[n.lineno - 1:n.lineno] = new
            changed = True
    if not changed:
        # two consecutive simple assignments to names -> one tuple assignment
        tree2 = tree
        for body in _bodies(tree2):
            for a, b in zip(body, body[1:]):
                if all(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                       and s.lineno == s.end_lineno and s.lineno not in marked for s in (a, b)) \
                        and b.lineno == a.lineno + 1 and a.targets[0].id != b.targets[0].id \
                        and not any(isinstance(m, ast.Name) and m.id == a.targets[0].id for m in ast.walk(b.value)) \
                        and "#" not in lines[a.lineno - 1] + lines[b.lineno - 1]:
                    ind = _indent(lines[a.lineno - 1])
                    lines[a.lineno - 1] = (f"{ind}{a.targets[0].id}, {b.targets[0].id} = "
                                           f"{ast.unparse(a.value)}, {ast.unparse(b.value)}")
                    lines[b.lineno - 1] = f"{ind}pass"
                    return [Variant("tuple_assign", "\n".join(lines))]
        return []
    return [Variant("tuple_assign", "\n".join(lines))]


def _bodies(tree):
    for n in ast.walk(tree):
        for f in ("body", "orelse", "finalbody"):
            b = getattr(n, f, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                yield b


def _marked_lines(lines):
    return {i + 1 for i, s in enumerate(lines) if MARK_RE.search(s)}


# -- 6. if/else statement <-> conditional expression -------------------------------------------------
def t_ifexp(text, tree):
    lines = _lines(text)
    marked = _marked_lines(lines)
    for n in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
        # ``x = A if c else B`` -> an if/else statement
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.IfExp) \
                and n.lineno == n.end_lineno and "#" not in lines[n.lineno - 1]:
            ind = _indent(lines[n.lineno - 1])
            t = ast.unparse(n.targets[0])
            tag = "  " + lines[n.lineno - 1][lines[n.lineno - 1].index("#"):] if n.lineno in marked else ""
            lines[n.lineno - 1:n.lineno] = [f"{ind}if {ast.unparse(n.value.test)}:", f"{ind}    {t} = {ast.unparse(n.value.body)}{tag}",
                                            f"{ind}else:", f"{ind}    {t} = {ast.unparse(n.value.orelse)}{tag}"]
            return [Variant("ifexp_to_if", "\n".join(lines))]
    for n in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
        # an if/else that assigns one name in each branch -> a conditional expression
        if isinstance(n, ast.If) and len(n.body) == 1 and len(n.orelse) == 1 and all(
                isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and s.lineno == s.end_lineno for s in (n.body[0], n.orelse[0])) \
                and n.body[0].targets[0].id == n.orelse[0].targets[0].id and lines[n.lineno - 1].lstrip().startswith("if ") \
                and not any(i in marked for i in range(n.lineno, n.end_lineno + 1)) \
                and "#" not in "".join(lines[n.lineno - 1:n.end_lineno]):
            ind = _indent(lines[n.lineno - 1])
            a, b = n.body[0], n.orelse[0]
            lines[n.lineno - 1:n.end_lineno] = [
                f"{ind}{a.targets[0].id} = {ast.unparse(a.value)} if {ast.unparse(n.test)} else {ast.unparse(b.value)}"]
            return [Variant("if_to_ifexp", "\n".join(lines))]
    return []


# -- 7. values through argparse defaults, attribute stores and config dicts -------------------------
def _literal_kwargs(tree):
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in ("print", "dict")):
            for k in n.keywords:
                if k.arg and isinstance(k.value, ast.Constant) and isinstance(k.value.value, (str, int, bool)) \
                        and k.value.lineno == k.value.end_lineno:
                    out.append(k)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "init_process_group" \
                and n.args and isinstance(n.args[0], ast.Constant):
            out.append(("backend", n.args[0]))
    return out


def _via(text, tree, name, define, use):
    kws = _literal_kwargs(tree)
    if not kws:
        return []
    lines = _lines(text)
    values = {}
    edits = []
    for k in kws:
        arg, v = (k.arg, k.value) if isinstance(k, ast.keyword) else k
        key = f"{arg}_{len(values)}"
        values[key] = v.value
        edits.append((v.lineno, v.col_offset, v.end_col_offset, use(key)))
    for ln, c0, c1, new in sorted(edits, reverse=True):
        s = lines[ln - 1]
        lines[ln - 1] = s[:c0] + new + s[c1:]
    ins = _insert_point(tree)
    lines[ins:ins] = define(values)
    return [Variant(name, "\n".join(lines))]


def t_argparse(text, tree):
    return _via(text, tree, "argparse_default",
                lambda vals: ["import argparse as _mm_argparse", "_mm_parser = _mm_argparse.ArgumentParser()",
                              *[f"_mm_parser.add_argument('--{k}', default={v!r})" for k, v in vals.items()],
                              "_mm_args = _mm_parser.parse_args([])"],
                lambda k: f"_mm_args.{k}")


def t_attribute(text, tree):
    return _via(text, tree, "attribute_store",
                lambda vals: ["import types as _mm_types", "_mm_cfg = _mm_types.SimpleNamespace()",
                              *[f"_mm_cfg.{k} = {v!r}" for k, v in vals.items()]],
                lambda k: f"_mm_cfg.{k}")


def t_config_dict(text, tree):
    return _via(text, tree, "config_dict",
                lambda vals: ["_MM_CONFIG = {" + ", ".join(f"{k!r}: {v!r}" for k, v in vals.items()) + "}"],
                lambda k: f"_MM_CONFIG[{k!r}]")


# -- 8. reorder independent statements ---------------------------------------------------------------
def t_reorder(text, tree):
    """Reverse the leading imports (each a one-line statement); imports of different names commute."""
    imps = []
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)) and st.lineno == st.end_lineno:
            if isinstance(st, ast.ImportFrom) and st.module == "__future__":
                continue
            imps.append(st)
        elif imps:
            break
    if len(imps) < 2 or imps[-1].lineno - imps[0].lineno != len(imps) - 1:
        return []
    names = [(a.asname or a.name).split(".")[0] for st in imps for a in st.names]
    if len(names) != len(set(names)):
        return []
    lines = _lines(text)
    block = lines[imps[0].lineno - 1:imps[-1].lineno]
    lines[imps[0].lineno - 1:imps[-1].lineno] = list(reversed(block))
    return [Variant("reorder_imports", "\n".join(lines))]


# -- 9. annotations and decorators --------------------------------------------------------------------
def t_annotate(text, tree):
    lines = _lines(text)
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not fns:
        return []
    for fn in sorted(fns, key=lambda f: -f.lineno):
        # decorators go above the ``def`` (and above existing decorators)
        top = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        if fn.returns is None:
            # ``-> object`` before the colon that ends the signature
            body_line = fn.body[0].lineno
            for ln in range(body_line - 1 if fn.body[0].lineno > fn.lineno else fn.lineno, fn.lineno - 1, -1):
                s = lines[ln - 1]
                m = re.search(r"\)\s*:", s)
                if m:
                    lines[ln - 1] = s[:m.start()] + ") -> object:" + s[m.end():]
                    break
        lines[top - 1:top - 1] = [_indent(lines[top - 1]) + "@_mm_identity"]
    ins = _insert_point(tree)
    lines[ins:ins] = ["def _mm_identity(f):", "    return f"]
    return [Variant("annotate_decorate", "\n".join(lines))]


# -- 10. extract a statement into a helper; move the helper into a module; inline a helper ----------
def _local_names(fn):
    out = set(a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs))
    if fn.args.vararg:
        out.add(fn.args.vararg.arg)
    if fn.args.kwarg:
        out.add(fn.args.kwarg.arg)
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def _extractable(tree, lines):
    """Statements directly in a top-level function's body: an expression-statement call, or a
    one-name assignment of a call, on one line; marked ones first."""
    marked = _marked_lines(lines)
    found = []
    for fn in tree.body:
        if not isinstance(fn, (ast.FunctionDef,)):
            continue
        local = _local_names(fn)
        for st in fn.body:
            if st.lineno != st.end_lineno:
                continue
            call = st.value if isinstance(st, (ast.Expr, ast.Assign)) else None
            if not isinstance(call, ast.Call):
                continue
            if isinstance(st, ast.Assign) and not (len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                continue
            if any(isinstance(n, (ast.Yield, ast.Await, ast.NamedExpr, ast.Lambda)) for n in ast.walk(call)):
                continue
            free = sorted({n.id for n in ast.walk(call) if isinstance(n, ast.Name) and n.id in local})
            found.append((st.lineno in marked, fn, st, call, free))
    found.sort(key=lambda x: not x[0])
    return found


def _extract(text, tree, index=0):
    lines = _lines(text)
    cands = _extractable(tree, lines)
    if len(cands) <= index:
        return None
    _, fn, st, call, free = cands[index]
    src = lines[st.lineno - 1]
    ind = _indent(src)
    comment = src[src.index("#"):] if MARK_RE.search(src) else ""
    name = f"_mm_helper_{st.lineno}"
    params = ", ".join(free)
    helper = [f"def {name}({params}):", f"    return {ast.unparse(call)}" + (f"  {comment}" if comment else "")]
    target = f"{st.targets[0].id} = " if isinstance(st, ast.Assign) else ""
    lines[st.lineno - 1] = f"{ind}{target}{name}({params})" + (f"  {comment}" if comment else "")
    return lines, helper, fn, name


def t_extract(text, tree):
    got = _extract(text, tree)
    if got is None:
        return []
    lines, helper, fn, _ = got
    top = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    lines[top - 1:top - 1] = helper + ["", ""]
    return [Variant("extract_helper", "\n".join(lines))]


def _imports_of(tree, lines):
    out = []
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)) and not (isinstance(st, ast.ImportFrom) and st.level):
            out.extend(lines[st.lineno - 1:st.end_lineno])
    return out


def _module_globals(tree, helper_src):
    """Top-level names the helper reads that are neither imports nor builtins: moving it would lose them."""
    h = ast.parse("\n".join(helper_src))
    used = {n.id for n in ast.walk(h) if isinstance(n, ast.Name)}
    defined = set()
    for st in tree.body:
        if not isinstance(st, (ast.Import, ast.ImportFrom)):
            defined |= _stored_names([st])
    return used & defined


def t_move_module(text, tree):
    got = _extract(text, tree)
    if got is None:
        return []
    lines, helper, fn, name = got
    if _module_globals(tree, helper):
        return []
    mod = "\n".join(_imports_of(tree, _lines(text)) + ["", ""] + helper) + "\n"
    out = []
    # absolute import: mm_helpers/extracted.py beside the script
    a = list(lines)
    ins = _insert_point(tree)
    a[ins:ins] = [f"from mm_helpers.extracted import {name}"]
    out.append(Variant("move_module_absolute", "\n".join(a),
                       files={"mm_helpers/__init__.py": "", "mm_helpers/extracted.py": mod}))
    # relative import: the script and the helper module in one package
    r = list(lines)
    r[ins:ins] = [f"from .extracted import {name}"]
    out.append(Variant("move_module_relative", "\n".join(r),
                       files={"mm_pkg/__init__.py": "", "mm_pkg/extracted.py": mod}, main_path="mm_pkg/{name}"))
    return out


def t_scripts_folder(text, tree):
    """The script moves into ``tools/``, its helper into a package at the top, and the script puts
    the folder above it on ``sys.path`` (``tools/train.py`` of mmdet-style repositories)."""
    got = _extract(text, tree)
    if got is None:
        return []
    lines, helper, fn, name = got
    if _module_globals(tree, helper):
        return []
    mod = "\n".join(_imports_of(tree, _lines(text)) + ["", ""] + helper) + "\n"
    a = list(lines)
    ins = _insert_point(tree)
    a[ins:ins] = ["import os as _mm_os", "import sys as _mm_sys",
                  "_mm_sys.path.insert(0, _mm_os.path.dirname(_mm_os.path.dirname(_mm_os.path.abspath(__file__))))",
                  f"from mm_tools_helpers.extracted import {name}"]
    return [Variant("scripts_folder", "\n".join(a),
                    files={"mm_tools_helpers/__init__.py": "", "mm_tools_helpers/extracted.py": mod},
                    main_path="tools/{name}")]


def t_inline(text, tree):
    """A top-level function without parameters, returns or ``global``, called exactly once as a
    statement from another function's body (or the main guard): its body replaces the call."""
    lines = _lines(text)
    defs = {st.name: st for st in tree.body if isinstance(st, ast.FunctionDef) and not st.decorator_list
            and not (st.args.args or st.args.posonlyargs or st.args.kwonlyargs or st.args.vararg or st.args.kwarg)
            and not any(isinstance(n, (ast.Return, ast.Yield, ast.Global, ast.Nonlocal, ast.FunctionDef, ast.ClassDef,
                                       ast.AsyncFunctionDef, ast.Lambda))
                        for b in st.body for n in ast.walk(b))}
    calls = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in defs and not (isinstance(n.ctx, ast.Store)):
            calls.setdefault(n.id, []).append(n)
    for nm, fn in defs.items():
        uses = calls.get(nm, [])
        if len(uses) != 1:
            continue
        use = uses[0]
        stmt = next((s for s in ast.walk(tree) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                     and s.value.func is use and not s.value.args and not s.value.keywords), None)
        if stmt is None or stmt.lineno != stmt.end_lineno or fn.lineno <= stmt.lineno <= fn.end_lineno:
            continue
        if _multiline_strings(tree) & set(range(fn.lineno, fn.end_lineno + 1)):
            continue
        body = lines[fn.body[0].lineno - 1:fn.end_lineno]
        if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant):
            body = lines[fn.body[0].end_lineno:fn.end_lineno] if len(fn.body) > 1 else ["pass"]
        base = min(len(_indent(s)) for s in body if s.strip())
        ind = _indent(lines[stmt.lineno - 1])
        new_body = [ind + s[base:] if s.strip() else s for s in body]
        new = list(lines)
        if stmt.lineno > fn.end_lineno:
            new[stmt.lineno - 1:stmt.lineno] = new_body
            top = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
            del new[top - 1:fn.end_lineno]
        else:
            top = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
            del new[top - 1:fn.end_lineno]
            new[stmt.lineno - 1:stmt.lineno] = new_body
        return [Variant("inline_helper", "\n".join(new))]
    return []


TRANSFORMS = [t_comments, t_strings, t_main_function, t_main_guard, t_epoch_loop, t_class_method, t_rename,
              t_tuple, t_ifexp, t_argparse, t_attribute, t_config_dict, t_reorder, t_annotate, t_extract,
              t_move_module, t_scripts_folder, t_inline]


def variants(text: str):
    """Every variant of ``text`` (already tagged) that still parses."""
    tree = ast.parse(text)
    for t in TRANSFORMS:
        try:
            got = t(text, tree)
        except (SyntaxError, ValueError, IndexError, tokenize.TokenError):
            got = []
        for v in got:
            try:
                ast.parse(v.text)
                for f, s in v.files.items():
                    ast.parse(s)
            except SyntaxError:
                continue
            yield v
