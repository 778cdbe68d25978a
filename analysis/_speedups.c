/* The one traversal of ``semantic.Semantic._walk``, in C.

   Optional: ``semantic.py`` uses it when the extension was built and falls back to the Python walk
   otherwise; both must give identical results (tests/test_walk.py compares them node by node).
   CPython's C API only, no dependency. Fields are read from (and parent pointers written to) a
   node's instance dict, where ``ast.parse`` keeps them, with plain attribute access as the
   fallback: a tree built by hand is walked the same way as by the Python code.

   walk(tree, table, entry, leaf, calls, imports, functions, by_type, by_scope, nodes) -> walrus

   - ``table``: dict type -> (kind, indexed, child field names), filled on demand by
     ``entry(type)`` (``semantic._walk_entry`` bound to the table and the wanted types);
   - ``leaf``: the node types that get a parent pointer but are never pushed;
   - the outputs are filled in traversal order (the caller reverses them into source order):
     ``calls``, ``imports`` (lists), ``functions`` (name -> list), ``by_type`` (type -> list),
     ``by_scope`` (the innermost function, or the module -> list of its calls), ``nodes``
     (every pushed node, for ``release``).
   Returns True when the tree holds a ``NamedExpr``. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { K_PLAIN = 0, K_CALL = 1, K_IMPORT = 2, K_FUNC = 3, K_WALRUS = 4 };

typedef struct {
    PyObject **node;
    PyObject **scope;
    Py_ssize_t len, cap;
} Stack;

static int stack_push(Stack *s, PyObject *node, PyObject *scope) {
    if (s->len == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 256;
        PyObject **n = PyMem_Realloc(s->node, cap * sizeof(PyObject *));
        if (n == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->node = n;
        PyObject **sc = PyMem_Realloc(s->scope, cap * sizeof(PyObject *));
        if (sc == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->scope = sc;
        s->cap = cap;
    }
    /* strong references: a node's parent pointer is set before it is visited, and nothing may
       free it meanwhile, but a hand-built tree could share nodes in odd ways */
    Py_INCREF(node);
    Py_INCREF(scope);
    s->node[s->len] = node;
    s->scope[s->len] = scope;
    s->len++;
    return 0;
}

static PyObject *str_p, *str_name, *str_decorator_list, *str_func, *str_attr, *str_value, *str_id, *str_qn,
    *str_dot;

/* append ``value`` to the list ``d[key]``, creating it */
static int append_to(PyObject *d, PyObject *key, PyObject *value) {
    PyObject *lst = PyDict_GetItemWithError(d, key);
    if (lst == NULL) {
        if (PyErr_Occurred())
            return -1;
        lst = PyList_New(0);
        if (lst == NULL)
            return -1;
        int rc = PyDict_SetItem(d, key, lst);
        Py_DECREF(lst);
        if (rc < 0)
            return -1;
    }
    return PyList_Append(lst, value);
}

/* ``node.<field>`` as a new reference, NULL with no exception when it is missing. A node from
   ``ast.parse`` holds every field in its instance dict: read there first (no type lookup). */
static PyObject *get_field(PyObject *node, PyObject *f) {
    PyObject **dp = _PyObject_GetDictPtr(node);
    if (dp != NULL && *dp != NULL && PyDict_CheckExact(*dp)) {
        PyObject *v = PyDict_GetItemWithError(*dp, f);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *v = PyObject_GetAttr(node, f);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return NULL;
    }
    return v;
}

/* ``node.<field>`` as a new reference; NULL with Python's AttributeError when it is missing (where
   the Python code reads the field unconditionally) */
static PyObject *need_field(PyObject *node, PyObject *f) {
    PyObject *v = get_field(node, f);
    if (v == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'", Py_TYPE(node)->tp_name, f);
    return v;
}

/* ``node.<name> = value`` for our own attributes (``_p``, ``_qn``), straight into the instance
   dict when there is one (no descriptor can stand in the way: they are no attribute of any ast
   class) */
static int set_own(PyObject *node, PyObject *name, PyObject *value) {
    PyObject **dp = _PyObject_GetDictPtr(node);
    if (dp != NULL && *dp != NULL && PyDict_CheckExact(*dp))
        return PyDict_SetItem(*dp, name, value);
    return PyObject_SetAttr(node, name, value);
}

static int set_parent(PyObject *node, PyObject *parent) { return set_own(node, str_p, parent); }

/* The leaf types of one walk, as an array of type pointers (a handful; the set when more). */
#define MAX_LEAVES 16
typedef struct {
    PyTypeObject *t[MAX_LEAVES];
    int n;
    PyObject *set;   /* borrowed; used when there are more than MAX_LEAVES */
} Leaves;

static int leaves_init(Leaves *l, PyObject *set) {
    l->n = 0;
    l->set = NULL;
    if (PySet_GET_SIZE(set) > MAX_LEAVES) {
        l->set = set;
        return 0;
    }
    PyObject *it = PyObject_GetIter(set), *x;
    if (it == NULL)
        return -1;
    while ((x = PyIter_Next(it)) != NULL) {
        l->t[l->n++] = (PyTypeObject *)x;   /* the set keeps the type alive */
        Py_DECREF(x);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

static int is_leaf(Leaves *l, PyObject *o) {
    if (l->set != NULL)
        return PySet_Contains(l->set, (PyObject *)Py_TYPE(o));
    PyTypeObject *t = Py_TYPE(o);
    for (int i = 0; i < l->n; i++)
        if (l->t[i] == t)
            return 1;
    return 0;
}

/* give ``child`` its parent and push it unless it is a leaf (None children are skipped) */
static int visit_child(Stack *s, PyObject *child, PyObject *parent, PyObject *scope, Leaves *leaf) {
    if (child == Py_None)
        return 0;
    if (set_parent(child, parent) < 0)
        return -1;
    int lf = is_leaf(leaf, child);
    if (lf < 0)
        return -1;
    if (!lf)
        return stack_push(s, child, scope);
    return 0;
}

/* The table entries met in one walk, by type pointer (open addressing; the table dict keeps each
   entry's field tuple alive) */
#define ENTRY_SLOTS 256
typedef struct {
    PyTypeObject *t;
    long kind;
    int indexed;
    PyObject *fields;   /* borrowed from the table */
} Entry;

static int visit_field(Stack *s, PyObject *value, PyObject *parent, PyObject *scope, Leaves *leaf) {
    if (value == Py_None)
        return 0;
    if (PyList_CheckExact(value)) {
        /* the list may not change under us (setting parent pointers does not touch it) */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            if (visit_child(s, PyList_GET_ITEM(value, i), parent, scope, leaf) < 0)
                return -1;
        }
        return 0;
    }
    return visit_child(s, value, parent, scope, leaf);
}

static PyObject *walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "walk() takes 10 arguments");
        return NULL;
    }
    PyObject *tree = args[0], *table = args[1], *entry = args[2], *leaf = args[3];
    PyObject *calls = args[4], *imports = args[5], *functions = args[6], *by_type = args[7];
    PyObject *by_scope = args[8], *nodes = args[9];
    if (!PyDict_CheckExact(table) || !PyAnySet_Check(leaf) || !PyList_CheckExact(calls) ||
        !PyList_CheckExact(imports) || !PyDict_Check(functions) || !PyDict_Check(by_type) ||
        !PyDict_CheckExact(by_scope) || !PyList_CheckExact(nodes)) {
        PyErr_SetString(PyExc_TypeError, "walk(): unexpected argument types");
        return NULL;
    }
    Stack s = {NULL, NULL, 0, 0};
    int walrus = 0;
    PyObject *result = NULL;
    Leaves leaves;
    Entry *cache = PyMem_Calloc(ENTRY_SLOTS, sizeof(Entry));
    if (cache == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (leaves_init(&leaves, leaf) < 0)
        goto done;
    if (set_parent(tree, Py_None) < 0)
        goto done;
    if (stack_push(&s, tree, tree) < 0)
        goto done;
    while (s.len > 0) {
        s.len--;
        PyObject *node = s.node[s.len];   /* owned references, released below */
        PyObject *scope = s.scope[s.len];
        int ok = -1;
        PyObject *t = (PyObject *)Py_TYPE(node);
        PyObject *made = NULL;
        size_t slot = ((size_t)t >> 4) & (ENTRY_SLOTS - 1);
        int probes = 0;
        while (cache[slot].t != NULL && cache[slot].t != (PyTypeObject *)t && ++probes < ENTRY_SLOTS)
            slot = (slot + 1) & (ENTRY_SLOTS - 1);
        Entry spare = {NULL, 0, 0, NULL};   /* more node types than slots: no caching */
        Entry *ce = probes < ENTRY_SLOTS ? &cache[slot] : &spare;
        if (ce->t != (PyTypeObject *)t) {
            /* first node of this type in the walk: its entry from the table (made by ``entry``) */
            PyObject *e = PyDict_GetItemWithError(table, t);   /* borrowed */
            if (e == NULL) {
                if (PyErr_Occurred())
                    goto next;
                made = PyObject_CallOneArg(entry, t);
                if (made == NULL || PyDict_SetItem(table, t, made) < 0)
                    goto next;
                e = made;   /* the table holds it now */
            }
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(e, 2))) {
                PyErr_SetString(PyExc_TypeError, "walk(): bad table entry");
                goto next;
            }
            long k = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
            if (k == -1 && PyErr_Occurred())
                goto next;
            int ix = PyObject_IsTrue(PyTuple_GET_ITEM(e, 1));
            if (ix < 0)
                goto next;
            if (!PyDict_CheckExact(table)) {   /* unreachable: checked above */
                PyErr_SetString(PyExc_TypeError, "walk(): table");
                goto next;
            }
            ce->t = (PyTypeObject *)t;
            ce->kind = k;
            ce->indexed = ix;
            ce->fields = PyTuple_GET_ITEM(e, 2);
        }
        long kind = ce->kind;
        int indexed = ce->indexed;
        PyObject *fields = ce->fields;
        if (PyList_Append(nodes, node) < 0)
            goto next;
        if (indexed && append_to(by_type, t, node) < 0)
            goto next;
        if (kind == K_CALL) {
            if (PyList_Append(calls, node) < 0)
                goto next;
            if (append_to(by_scope, scope, node) < 0)   /* keyed by the scope node itself */
                goto next;
        } else if (kind == K_IMPORT) {
            if (PyList_Append(imports, node) < 0)
                goto next;
        } else if (kind == K_FUNC) {
            PyObject *name = need_field(node, str_name);
            if (name == NULL) {
                goto next;
            }
            int rc = append_to(functions, name, node);
            Py_DECREF(name);
            if (rc < 0)
                goto next;
            /* a function's decorators belong to the scope around it, the rest to the function */
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
                PyObject *f = PyTuple_GET_ITEM(fields, i);
                PyObject *v = get_field(node, f);
                if (v == NULL) {
                    if (PyErr_Occurred())
                        goto next;
                    continue;
                }
                int is_dec = PyUnicode_Compare(f, str_decorator_list) == 0;
                rc = visit_field(&s, v, node, is_dec ? scope : node, &leaves);
                Py_DECREF(v);
                if (rc < 0)
                    goto next;
            }
            ok = 0;
            goto next;
        } else if (kind == K_WALRUS) {
            walrus = 1;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
            PyObject *v = get_field(node, PyTuple_GET_ITEM(fields, i));
            if (v == NULL) {
                if (PyErr_Occurred())
                    goto next;
                continue;
            }
            int rc = visit_field(&s, v, node, scope, &leaves);
            Py_DECREF(v);
            if (rc < 0)
                goto next;
        }
        ok = 0;
    next:
        Py_XDECREF(made);
        Py_DECREF(node);
        Py_DECREF(scope);
        if (ok < 0)
            goto done;
    }
    result = PyBool_FromLong(walrus);
done:
    while (s.len > 0) {
        s.len--;
        Py_DECREF(s.node[s.len]);
        Py_DECREF(s.scope[s.len]);
    }
    PyMem_Free(s.node);
    PyMem_Free(s.scope);
    PyMem_Free(cache);
    return result;
}

/* ``Semantic._index_calls`` in C (see there):
   index_calls(calls, aliases, canon, canonical_cached, Attribute, Name, by_qn, names, attrs, recv, base,
               pairs)
   fills the five indexes and sets ``_qn`` on every call; ``pairs`` caches (alias, attribute) ->
   qualified name across checks. */
static int append_pos(PyObject *d, PyObject *key, PyObject *pos) { return append_to(d, key, pos); }

static PyObject *qualified(PyObject *canon, PyObject *canonical_cached, PyObject *key) {
    PyObject *qn = PyDict_GetItemWithError(canon, key);
    if (qn != NULL) {
        Py_INCREF(qn);
        return qn;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(canonical_cached, key);
}

static PyObject *index_calls(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "index_calls() takes 12 arguments");
        return NULL;
    }
    PyObject *calls = args[0], *aliases = args[1], *canon = args[2], *canonical_cached = args[3];
    PyTypeObject *Attribute = (PyTypeObject *)args[4], *Name = (PyTypeObject *)args[5];
    PyObject *by_qn = args[6], *names = args[7], *attrs = args[8], *recv = args[9], *base_of = args[10];
    PyObject *pairs = args[11];
    if (!PyList_CheckExact(calls) || !PyDict_Check(aliases) || !PyDict_CheckExact(canon) || !PyType_Check(args[4]) ||
        !PyType_Check(args[5]) || !PyDict_Check(by_qn) || !PyDict_CheckExact(names) || !PyDict_CheckExact(attrs) ||
        !PyDict_CheckExact(recv) || !PyDict_CheckExact(base_of) || !PyDict_CheckExact(args[11])) {
        PyErr_SetString(PyExc_TypeError, "index_calls(): unexpected argument types");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        PyObject *c = PyList_GET_ITEM(calls, i);
        PyObject *pos = PyLong_FromSsize_t(i);
        PyObject *f = NULL, *qn = NULL, *k = NULL, *v = NULL, *vid = NULL;
        int ok = -1;
        if (pos == NULL)
            return NULL;
        f = need_field(c, str_func);
        if (f == NULL)
            goto next;
        if (Py_TYPE(f) == Attribute) {
            k = need_field(f, str_attr);
            v = k ? need_field(f, str_value) : NULL;
            if (k == NULL || v == NULL)
                goto next;
            if (append_pos(attrs, k, pos) < 0)
                goto next;
            if (Py_TYPE(v) == Name) {
                vid = need_field(v, str_id);
                if (vid == NULL) {
                    goto next;
                }
                if (append_pos(base_of, vid, pos) < 0)
                    goto next;
                PyObject *base = PyDict_GetItemWithError(aliases, vid);  /* borrowed */
                if (base == NULL) {
                    if (PyErr_Occurred())
                        goto next;
                } else {
                    /* (alias, attribute) -> qualified name, cached across checks like ``canon`` */
                    PyObject *pair = PyTuple_Pack(2, base, k);
                    if (pair == NULL)
                        goto next;
                    qn = PyDict_GetItemWithError(pairs, pair);
                    if (qn != NULL) {
                        Py_INCREF(qn);
                    } else if (!PyErr_Occurred()) {
                        PyObject *key = PyUnicode_FromFormat("%U.%U", base, k);
                        qn = key ? qualified(canon, canonical_cached, key) : NULL;
                        Py_XDECREF(key);
                        if (qn != NULL && PyDict_SetItem(pairs, pair, qn) < 0)
                            Py_CLEAR(qn);
                    }
                    Py_DECREF(pair);
                    if (qn == NULL)
                        goto next;
                }
            } else {
                if (Py_TYPE(v) == Attribute) {
                    PyObject *va = need_field(v, str_attr);
                    if (va == NULL) {
                        goto next;
                    }
                    int rc = append_pos(recv, va, pos);
                    Py_DECREF(va);
                    if (rc < 0)
                        goto next;
                }
                /* up the chain to its root: only a name bound by an import gives a qualified name */
                PyObject *parts = PyList_New(0);
                if (parts == NULL)
                    goto next;
                PyObject *cur = f;
                Py_INCREF(cur);
                int bad = 0;
                while (Py_TYPE(cur) == Attribute) {
                    PyObject *a = get_field(cur, str_attr), *nx = a ? get_field(cur, str_value) : NULL;
                    if (a == NULL || nx == NULL) {
                        Py_XDECREF(a);
                        bad = 1;
                        break;
                    }
                    int rc = PyList_Append(parts, a);
                    Py_DECREF(a);
                    Py_DECREF(cur);
                    cur = nx;
                    if (rc < 0) {
                        bad = 1;
                        break;
                    }
                }
                if (!bad && Py_TYPE(cur) == Name) {
                    PyObject *rid = get_field(cur, str_id);
                    PyObject *base = rid ? PyDict_GetItemWithError(aliases, rid) : NULL;
                    Py_XDECREF(rid);
                    if (base == NULL && PyErr_Occurred())
                        bad = 1;
                    else if (base != NULL && PyList_Reverse(parts) == 0) {
                        PyObject *tail = PyUnicode_Join(str_dot, parts);
                        PyObject *key = tail ? PyUnicode_FromFormat("%U.%U", base, tail) : NULL;
                        Py_XDECREF(tail);
                        qn = key ? qualified(canon, canonical_cached, key) : NULL;
                        Py_XDECREF(key);
                        if (qn == NULL)
                            bad = 1;
                    } else if (base != NULL) {
                        bad = 1;
                    }
                } else if (!bad && PyErr_Occurred()) {
                    bad = 1;
                }
                Py_DECREF(cur);
                Py_DECREF(parts);
                if (bad) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_AttributeError, "a malformed attribute chain");
                    goto next;
                }
            }
        } else if (Py_TYPE(f) == Name) {
            vid = need_field(f, str_id);
            if (vid == NULL) {
                goto next;
            }
            if (append_pos(names, vid, pos) < 0)
                goto next;
            qn = PyDict_GetItemWithError(aliases, vid);
            if (qn == NULL && PyErr_Occurred())
                goto next;
            Py_XINCREF(qn);
        }
        if (set_own(c, str_qn, qn ? qn : Py_None) < 0)
            goto next;
        if (qn != NULL) {
            int truth = PyObject_IsTrue(qn);
            if (truth < 0 || (truth && append_to(by_qn, qn, c) < 0))
                goto next;
        }
        ok = 0;
    next:
        Py_DECREF(pos);
        Py_XDECREF(f);
        Py_XDECREF(qn);
        Py_XDECREF(k);
        Py_XDECREF(v);
        Py_XDECREF(vid);
        if (ok < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* -- small queries of semantic.py, in C -------------------------------------------------------- */

/* first_in(types, include_self, default, node): the first of ``node`` (when ``include_self``) and
   its ancestors (``_p`` chain) whose exact class is in the set ``types``; ``default`` when none,
   ``node`` itself when ``default`` is ``...`` (``Semantic.scope_of``, ``enclosing_function``,
   ``statement_of``; the node comes last so that ``functools.partial`` can bind the rest). */
static PyObject *first_in(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyAnySet_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "first_in(types, include_self, default, node)");
        return NULL;
    }
    PyObject *types = args[0];
    int include_self = PyObject_IsTrue(args[1]);
    if (include_self < 0)
        return NULL;
    PyObject *n = args[3];
    Py_INCREF(n);
    if (!include_self) {
        PyObject *p = get_field(n, str_p);
        Py_DECREF(n);
        if (p == NULL && PyErr_Occurred())
            return NULL;
        n = p;
    }
    while (n != NULL && n != Py_None) {
        int hit = PySet_Contains(types, (PyObject *)Py_TYPE(n));
        if (hit < 0) {
            Py_DECREF(n);
            return NULL;
        }
        if (hit)
            return n;
        PyObject *p = get_field(n, str_p);
        Py_DECREF(n);
        if (p == NULL && PyErr_Occurred())
            return NULL;
        n = p;
    }
    Py_XDECREF(n);
    PyObject *d = args[2] == Py_Ellipsis ? args[3] : args[2];
    Py_INCREF(d);
    return d;
}

static PyObject *Starred = NULL;
static PyObject *str_keywords, *str_args, *str_arg;

/* configure(Starred): the classes the queries below need, from the ``ast`` module the caller uses */
static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "configure(Starred)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(Starred, args[0]);
    Py_RETURN_NONE;
}

/* get_arg(call, pos, kw): ``semantic.get_arg`` */
static PyObject *get_arg(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || Starred == NULL) {
        PyErr_SetString(PyExc_TypeError, "get_arg(call, pos, kw) (after configure())");
        return NULL;
    }
    PyObject *call = args[0], *pos = args[1], *kw = args[2];
    PyObject *kws = need_field(call, str_keywords);
    if (kws == NULL) {
        return NULL;
    } else {
        PyObject *seq = PySequence_Fast(kws, "keywords");
        Py_DECREF(kws);
        if (seq == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *k = PySequence_Fast_GET_ITEM(seq, i);
            PyObject *a = get_field(k, str_arg);
            if (a == NULL) {
                if (PyErr_Occurred()) {
                    Py_DECREF(seq);
                    return NULL;
                }
                continue;
            }
            int eq = PyObject_RichCompareBool(a, kw, Py_EQ);
            Py_DECREF(a);
            if (eq < 0) {
                Py_DECREF(seq);
                return NULL;
            }
            if (eq) {
                PyObject *v = get_field(k, str_value);
                Py_DECREF(seq);
                if (v == NULL && !PyErr_Occurred())
                    PyErr_SetString(PyExc_AttributeError, "a keyword without value");
                return v;
            }
        }
        Py_DECREF(seq);
    }
    if (pos == Py_None)
        Py_RETURN_NONE;
    Py_ssize_t p = PyNumber_AsSsize_t(pos, PyExc_OverflowError);
    if (p == -1 && PyErr_Occurred())
        return NULL;
    PyObject *al = need_field(call, str_args);
    if (al == NULL) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(al, "args");
    Py_DECREF(al);
    if (seq == NULL)
        return NULL;
    PyObject *out = Py_None;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
    if (p < size) {
        /* as Python does it, negative positions included: ``args[:pos + 1]`` has no Starred,
           then ``args[pos]`` */
        Py_ssize_t end = p + 1;
        if (end < 0)
            end = end + size < 0 ? 0 : end + size;
        Py_ssize_t idx = p < 0 ? p + size : p;
        if (idx < 0) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < end; i++) {
            int st = PyObject_IsInstance(PySequence_Fast_GET_ITEM(seq, i), Starred);
            if (st < 0) {
                Py_DECREF(seq);
                return NULL;
            }
            if (st) {
                Py_DECREF(seq);
                Py_RETURN_NONE;
            }
        }
        out = PySequence_Fast_GET_ITEM(seq, idx);
    }
    Py_INCREF(out);
    Py_DECREF(seq);
    return out;
}

/* assignment_index(stmts, scope_types, new_table, add_bindings, Assign, AnnAssign, AugAssign, Name,
   no_names) -> {scope: table}: ``Semantic._assignment_index``'s loop over the sorted binding
   statements (the common shapes here, the others through ``add_bindings(table, stmt)``). */
static PyObject *str_targets, *str_target;

static PyObject *assignment_index(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_CheckExact(args[0]) || !PyAnySet_Check(args[1]) || !PyAnySet_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError,
                        "assignment_index(stmts, scope_types, new_table, add_bindings, Assign, AnnAssign, "
                        "AugAssign, Name, no_names)");
        return NULL;
    }
    PyObject *stmts = args[0], *scope_types = args[1], *new_table = args[2], *add_bindings = args[3];
    PyObject *Assign = args[4], *AnnAssign = args[5], *AugAssign = args[6], *Name = args[7], *no_names = args[8];
    PyObject *index = PyDict_New();
    if (index == NULL)
        return NULL;
    PyObject *owner = NULL, *out = NULL;   /* borrowed: both live in ``index`` / the tree */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(stmts); i++) {
        PyObject *st = PyList_GET_ITEM(stmts, i);
        PyObject *p = get_field(st, str_p);
        while (p != NULL && p != Py_None) {
            int hit = PySet_Contains(scope_types, (PyObject *)Py_TYPE(p));
            if (hit < 0)
                goto fail_p;
            if (hit)
                break;
            PyObject *nx = get_field(p, str_p);
            Py_DECREF(p);
            p = nx;
        }
        if (p == NULL || p == Py_None) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "a binding statement outside any scope");
            goto fail_p;
        }
        if (p != owner) {
            owner = p;
            out = PyDict_GetItemWithError(index, p);   /* keyed by the scope node itself */
            if (out == NULL) {
                if (PyErr_Occurred())
                    goto fail_p;
                PyObject *made = PyObject_CallNoArgs(new_table);
                if (made == NULL || PyDict_SetItem(index, p, made) < 0) {
                    Py_XDECREF(made);
                    goto fail_p;
                }
                out = made;
                Py_DECREF(made);   /* ``index`` holds it */
            }
        }
        Py_DECREF(p);   /* the scope lives in the tree: ``owner`` may stay borrowed */
        PyObject *t = (PyObject *)Py_TYPE(st);
        PyObject *tgt = NULL;
        int done = 0;
        if (t == Assign) {
            PyObject *targets = get_field(st, str_targets);
            if (targets == NULL) {
                if (PyErr_Occurred())
                    goto fail;
            } else {
                if (PyList_CheckExact(targets) && PyList_GET_SIZE(targets) == 1) {
                    tgt = PyList_GET_ITEM(targets, 0);
                    Py_INCREF(tgt);
                }
                Py_DECREF(targets);
            }
            if (tgt != NULL) {
                int skip = PySet_Contains(no_names, (PyObject *)Py_TYPE(tgt));
                if (skip < 0) {
                    Py_DECREF(tgt);
                    goto fail;
                }
                if (skip) {
                    done = 1;   /* ``self.x = ...``, ``a[i] = ...``: no name */
                    Py_CLEAR(tgt);
                } else if ((PyObject *)Py_TYPE(tgt) != Name) {
                    Py_CLEAR(tgt);
                }
            }
        } else if (t == AnnAssign || t == AugAssign) {
            tgt = get_field(st, str_target);
            if (tgt == NULL && PyErr_Occurred())
                goto fail;
            if (tgt != NULL && (PyObject *)Py_TYPE(tgt) != Name)
                Py_CLEAR(tgt);
            done = 1;   /* a target that is no name binds no name */
        }
        if (tgt != NULL) {
            PyObject *name = need_field(tgt, str_id);
            Py_DECREF(tgt);
            if (name == NULL)
                goto fail;
            /* ``out[name].append(st)`` through the table's own __getitem__ (a defaultdict) */
            PyObject *lst = PyObject_GetItem(out, name);
            Py_DECREF(name);
            if (lst == NULL)
                goto fail;
            int rc = PyList_Append(lst, st);
            Py_DECREF(lst);
            if (rc < 0)
                goto fail;
            continue;
        }
        if (done)
            continue;
        PyObject *r = PyObject_CallFunctionObjArgs(add_bindings, out, st, NULL);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        continue;
    fail_p:
        Py_XDECREF(p);
    fail:
        Py_DECREF(index);
        return NULL;
    }
    return index;
}

/* take_apart(nodes): empty the instance dict of every node (``Semantic.release`` of an owned tree):
   fields and parent pointers go at once, and with them every cycle through the tree. */
static PyObject *take_apart(PyObject *self, PyObject *nodes) {
    if (!PyList_CheckExact(nodes)) {
        PyErr_SetString(PyExc_TypeError, "take_apart(list)");
        return NULL;
    }
    /* clearing a dict may free nodes of the list's later items only through the dict's values, and
       the list itself holds a reference to each of them: every item stays valid */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        PyObject **dp = _PyObject_GetDictPtr(n);
        if (dp != NULL && *dp != NULL && PyDict_CheckExact(*dp)) {
            PyDict_Clear(*dp);
        } else {
            PyObject *d = PyObject_GetAttrString(n, "__dict__");
            if (d == NULL)
                return NULL;
            if (PyDict_Check(d))
                PyDict_Clear(d);
            Py_DECREF(d);
        }
    }
    Py_RETURN_NONE;
}

/* -- bindings.reaching's event filter (``_reaching_events``), in C ------------------------------ */

static PyObject *str_lineno, *str_col_offset, *str_end_lineno, *str_end_col_offset, *str_body, *str_orelse,
    *str_finalbody;

typedef struct {
    long l, c, el, ec;
} Pos;

/* the four positions of ``n``; -1 with AttributeError when one is missing (as ``n.lineno`` would) */
static int get_pos(PyObject *n, Pos *p, int with_end) {
    PyObject *names[4] = {str_lineno, str_col_offset, str_end_lineno, str_end_col_offset};
    long *out[4] = {&p->l, &p->c, &p->el, &p->ec};
    for (int i = 0; i < (with_end ? 4 : 2); i++) {
        PyObject *v = need_field(n, names[i]);
        if (v == NULL) {
            return -1;
        }
        *out[i] = PyLong_AsLong(v);
        Py_DECREF(v);
        if (*out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static int pos_lt(long l1, long c1, long l2, long c2) { return l1 < l2 || (l1 == l2 && c1 < c2); }
static int pos_le(long l1, long c1, long l2, long c2) { return l1 < l2 || (l1 == l2 && c1 <= c2); }

/* ``_contains(outer, inner)`` */
static int contains(const Pos *o, const Pos *i) {
    return pos_le(o->l, o->c, i->l, i->c) && pos_le(i->el, i->ec, o->el, o->ec);
}

static int list_has(PyObject *lst, PyObject *x) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++)
        if (PyList_GET_ITEM(lst, i) == x)
            return 1;
    return 0;
}

/* ``x in lst`` for a list of ast nodes (identity, then ==, like ``list.__contains__``) */
static int list_contains(PyObject *lst, PyObject *x) { return PySequence_Contains(lst, x); }


static int up_push(PyObject ***ns, PyObject ***cs, Py_ssize_t *n, Py_ssize_t *cap, PyObject *node,
                   PyObject *child) {
    if (*n == *cap) {
        Py_ssize_t c = *cap ? *cap * 2 : 32;
        PyObject **a = PyMem_Realloc(*ns, c * sizeof(PyObject *));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *ns = a;
        PyObject **b = PyMem_Realloc(*cs, c * sizeof(PyObject *));
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *cs = b;
        *cap = c;
    }
    (*ns)[*n] = node;
    (*cs)[*n] = child;
    (*n)++;
    return 0;
}

/* reaching_events(at, scope, evs, stmt_class, loop_types, For, AsyncFor, With, AsyncWith)
   -> (candidates, later, dominated): the event filter of ``bindings._reaching_events`` (see there) */
static PyObject *reaching_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_CheckExact(args[2]) || !PyAnySet_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "reaching_events(at, scope, evs, stmt_class, loop_types, For, AsyncFor, With, AsyncWith)");
        return NULL;
    }
    PyObject *at = args[0], *scope = args[1], *evs = args[2], *stmt_class = args[3], *loops = args[4];
    PyTypeObject *For = (PyTypeObject *)args[5], *AsyncFor = (PyTypeObject *)args[6];
    PyTypeObject *With = (PyTypeObject *)args[7], *AsyncWith = (PyTypeObject *)args[8];
    Pos ap;
    if (get_pos(at, &ap, 1) < 0)
        return NULL;
    Py_ssize_t nev = PyList_GET_SIZE(evs);
    PyObject *before = PyList_New(0), *later = PyList_New(0), *result = NULL;
    Pos *bpos = NULL;
    PyObject **up_n = NULL, **up_child = NULL;   /* borrowed: ancestors of ``at`` live in the tree */
    Py_ssize_t nup = 0, cap = 0;
    if (before == NULL || later == NULL)
        goto done;
    bpos = PyMem_Malloc((nev ? nev : 1) * sizeof(Pos));
    if (bpos == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nev; i++) {
        PyObject *e = PyList_GET_ITEM(evs, i);
        Pos ep;
        if (get_pos(e, &ep, 1) < 0)
            goto done;
        if (!pos_lt(ep.l, ep.c, ap.l, ap.c))
            continue;
        if (pos_le(ap.el, ap.ec, ep.el, ep.ec)) {   /* e holds the use */
            PyTypeObject *t = Py_TYPE(e);
            int take = 0;
            if (t == For || t == AsyncFor) {
                PyObject *body = need_field(e, str_body);
                if (body == NULL) {
                    goto done;
                }
                PyObject *seq = PySequence_Fast(body, "body");
                Py_DECREF(body);
                if (seq == NULL)
                    goto done;
                for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq); j++) {
                    Pos sp;
                    if (get_pos(PySequence_Fast_GET_ITEM(seq, j), &sp, 1) < 0) {
                        Py_DECREF(seq);
                        goto done;
                    }
                    if (contains(&sp, &ap)) {
                        take = 1;
                        break;
                    }
                }
                Py_DECREF(seq);
            } else if (t == With || t == AsyncWith) {
                take = 1;
            }
            if (!take)
                continue;
        }
        /* stable insertion by position (``before.sort(key=_POS)``) */
        Py_ssize_t k = PyList_GET_SIZE(before);
        if (PyList_Append(before, e) < 0)
            goto done;
        while (k > 0 && pos_lt(ep.l, ep.c, bpos[k - 1].l, bpos[k - 1].c)) {
            PyList_SET_ITEM(before, k, PyList_GET_ITEM(before, k - 1));
            bpos[k] = bpos[k - 1];
            k--;
        }
        PyList_SET_ITEM(before, k, e);   /* the reference Append took moves with the item */
        bpos[k] = ep;
    }
    /* loop-carried bindings, and each ancestor's child towards ``at`` */
    {
        PyObject *child = at, *n = get_field(at, str_p);
        if (n == NULL && PyErr_Occurred())
            goto done;
        if (n == Py_None)
            Py_CLEAR(n);
        while (n != NULL && n != scope) {
            if (up_push(&up_n, &up_child, &nup, &cap, n, child) < 0) {
                Py_DECREF(n);
                goto done;
            }
            int is_loop = PySet_Contains(loops, (PyObject *)Py_TYPE(n));
            if (is_loop < 0) {
                Py_DECREF(n);
                goto done;
            }
            if (is_loop) {
                Pos np;
                if (get_pos(n, &np, 1) < 0) {
                    Py_DECREF(n);
                    goto done;
                }
                for (Py_ssize_t i = 0; i < nev; i++) {
                    PyObject *e = PyList_GET_ITEM(evs, i);
                    Pos ep;
                    if (get_pos(e, &ep, 1) < 0) {
                        Py_DECREF(n);
                        goto done;
                    }
                    if (pos_lt(ap.l, ap.c, ep.l, ep.c) && contains(&np, &ep) && !list_has(later, e) &&
                        PyList_Append(later, e) < 0) {
                        Py_DECREF(n);
                        goto done;
                    }
                }
            }
            child = n;   /* borrowed from here on: the tree holds it */
            PyObject *nx = get_field(n, str_p);
            Py_DECREF(n);
            if (nx == NULL && PyErr_Occurred())
                goto done;
            if (nx == Py_None)
                Py_CLEAR(nx);
            n = nx;
        }
        if (n != NULL) {   /* the scope: its child holding ``at`` */
            int rc = up_push(&up_n, &up_child, &nup, &cap, n, child);
            Py_DECREF(n);
            if (rc < 0)
                goto done;
        }
    }
    /* the last binding before the use that dominates it (``_dominates_up``) */
    Py_ssize_t dom = -1;
    for (Py_ssize_t i = PyList_GET_SIZE(before) - 1; i >= 0 && dom < 0; i--) {
        PyObject *st = PyList_GET_ITEM(before, i);
        Py_INCREF(st);
        while (st != NULL && st != Py_None) {
            int is_stmt = PyObject_IsInstance(st, stmt_class);
            if (is_stmt < 0) {
                Py_DECREF(st);
                goto done;
            }
            if (is_stmt)
                break;
            PyObject *nx = get_field(st, str_p);
            Py_DECREF(st);
            if (nx == NULL && PyErr_Occurred())
                goto done;
            st = nx;
        }
        if (st == NULL || st == Py_None) {
            Py_XDECREF(st);
            continue;
        }
        PyObject *owner = get_field(st, str_p);
        if (owner == NULL && PyErr_Occurred()) {
            Py_DECREF(st);
            goto done;
        }
        if (owner == Py_None)
            Py_CLEAR(owner);
        PyObject *nchild = NULL;
        if (owner != NULL)
            for (Py_ssize_t j = 0; j < nup; j++)
                if (up_n[j] == owner) {
                    nchild = up_child[j];
                    break;
                }
        int dominates = 0;
        if (nchild == NULL) {
            dominates = owner == scope;
        } else {
            PyObject *fields[3] = {str_body, str_orelse, str_finalbody};
            for (int f = 0; f < 3; f++) {
                PyObject *lst = get_field(owner, fields[f]);
                if (lst == NULL) {
                    if (PyErr_Occurred()) {
                        Py_DECREF(st);
                        Py_DECREF(owner);
                        goto done;
                    }
                    continue;
                }
                if (PyList_Check(lst)) {
                    int has = list_contains(lst, st);
                    if (has < 0) {
                        Py_DECREF(lst);
                        Py_DECREF(st);
                        Py_DECREF(owner);
                        goto done;
                    }
                    if (has) {
                        dominates = list_contains(lst, nchild);   /* same block */
                        Py_DECREF(lst);
                        if (dominates < 0) {
                            Py_DECREF(st);
                            Py_DECREF(owner);
                            goto done;
                        }
                        break;
                    }
                }
                Py_DECREF(lst);
            }
        }
        Py_DECREF(st);
        Py_XDECREF(owner);
        if (dominates)
            dom = i;
    }
    PyObject *cands = dom >= 0 ? PyList_GetSlice(before, dom, PyList_GET_SIZE(before)) : (Py_INCREF(before), before);
    if (cands == NULL)
        goto done;
    result = Py_BuildValue("(NOO)", cands, later, dom >= 0 ? Py_True : Py_False);
done:
    PyMem_Free(bpos);
    PyMem_Free(up_n);
    PyMem_Free(up_child);
    Py_XDECREF(before);
    Py_XDECREF(later);
    return result;
}

/* admitted(text, gates, NoCase) -> [code, ...]: ``engine._admitted`` (see there), the same needle
   memo included: a needle is searched at most once, and a group already decided by a found needle
   scans nothing. */
static PyObject *admitted(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "admitted(text, gates, NoCase)");
        return NULL;
    }
    PyObject *text = args[0], *gates = args[1], *nocase = args[2];
    PyObject *memo = PyDict_New(), *out = PyList_New(0), *lower = NULL;
    if (memo == NULL || out == NULL)
        goto fail;
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(gates); g++) {
        PyObject *gate = PyTuple_GET_ITEM(gates, g);
        if (!PyTuple_Check(gate) || PyTuple_GET_SIZE(gate) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(gate, 1))) {
            PyErr_SetString(PyExc_TypeError, "admitted(): a gate is (code, groups)");
            goto fail;
        }
        PyObject *groups = PyTuple_GET_ITEM(gate, 1);
        int ok = 1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(groups) && ok; i++) {
            PyObject *group = PySequence_Fast(PyTuple_GET_ITEM(groups, i), "a gate group");
            if (group == NULL)
                goto fail;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(group);
            int found = 0;
            for (Py_ssize_t j = 0; j < n && !found; j++) {
                PyObject *v = PyDict_GetItemWithError(memo, PySequence_Fast_GET_ITEM(group, j));
                if (v == NULL && PyErr_Occurred()) {
                    Py_DECREF(group);
                    goto fail;
                }
                found = v == Py_True;
            }
            for (Py_ssize_t j = 0; j < n && !found; j++) {
                PyObject *needle = PySequence_Fast_GET_ITEM(group, j);
                PyObject *v = PyDict_GetItemWithError(memo, needle);
                int hit;
                if (v != NULL) {
                    hit = v == Py_True;
                } else {
                    if (PyErr_Occurred()) {
                        Py_DECREF(group);
                        goto fail;
                    }
                    int nc = PyObject_IsInstance(needle, nocase);
                    if (nc < 0) {
                        Py_DECREF(group);
                        goto fail;
                    }
                    if (nc) {
                        if (lower == NULL && (lower = PyObject_CallMethod(text, "lower", NULL)) == NULL) {
                            Py_DECREF(group);
                            goto fail;
                        }
                        PyObject *nl = PyObject_CallMethod(needle, "lower", NULL);
                        hit = nl == NULL ? -1 : PyUnicode_Contains(lower, nl);
                        Py_XDECREF(nl);
                    } else {
                        hit = PyUnicode_Contains(text, needle);
                    }
                    if (hit < 0 || PyDict_SetItem(memo, needle, hit ? Py_True : Py_False) < 0) {
                        Py_DECREF(group);
                        goto fail;
                    }
                }
                found = hit;
            }
            Py_DECREF(group);
            if (!found)
                ok = 0;   /* no needle of this group: the rule cannot fire */
        }
        if (ok && PyList_Append(out, PyTuple_GET_ITEM(gate, 0)) < 0)
            goto fail;
    }
    Py_DECREF(memo);
    Py_XDECREF(lower);
    return out;
fail:
    Py_XDECREF(memo);
    Py_XDECREF(out);
    Py_XDECREF(lower);
    return NULL;
}

/* has_param(fn, name): ``semantic.has_param`` */
static PyObject *str_posonlyargs, *str_kwonlyargs, *str_vararg, *str_kwarg;

static PyObject *has_param(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "has_param(fn, name)");
        return NULL;
    }
    PyObject *a = need_field(args[0], str_args);
    if (a == NULL) {
        return NULL;
    }
    PyObject *lists[3] = {str_args, str_posonlyargs, str_kwonlyargs};
    for (int k = 0; k < 3; k++) {
        PyObject *lst = need_field(a, lists[k]);
        if (lst == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        PyObject *seq = PySequence_Fast(lst, "parameters");
        Py_DECREF(lst);
        if (seq == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *nm = need_field(PySequence_Fast_GET_ITEM(seq, i), str_arg);
            if (nm == NULL) {
                Py_DECREF(seq);
                Py_DECREF(a);
                return NULL;
            }
            int eq = PyObject_RichCompareBool(nm, args[1], Py_EQ);
            Py_DECREF(nm);
            if (eq != 0) {
                Py_DECREF(seq);
                Py_DECREF(a);
                return eq < 0 ? NULL : Py_NewRef(Py_True);
            }
        }
        Py_DECREF(seq);
    }
    PyObject *singles[2] = {str_vararg, str_kwarg};
    for (int k = 0; k < 2; k++) {
        PyObject *v = need_field(a, singles[k]);
        if (v == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        if (v != Py_None) {
            PyObject *nm = need_field(v, str_arg);
            Py_DECREF(v);
            if (nm == NULL) {
                Py_DECREF(a);
                return NULL;
            }
            int eq = PyObject_RichCompareBool(nm, args[1], Py_EQ);
            Py_DECREF(nm);
            if (eq != 0) {
                Py_DECREF(a);
                return eq < 0 ? NULL : Py_NewRef(Py_True);
            }
        } else {
            Py_DECREF(v);
        }
    }
    Py_DECREF(a);
    Py_RETURN_FALSE;
}

/* use_site(at, stmt_class, scope_types) -> (stmt, scope): the innermost statement holding ``at``
   (``at`` itself when it is one; None when the walk meets the scope first) and its scope (the first
   ancestor whose exact class is in ``scope_types``; ``at`` when none): the walk up at the start of
   ``bindings._reaching``. */
static PyObject *use_site(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyAnySet_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "use_site(at, stmt_class, scope_types)");
        return NULL;
    }
    PyObject *at = args[0], *stmt_class = args[1], *scopes = args[2];
    PyObject *stmt = NULL, *scope = at;
    int is = PyObject_IsInstance(at, stmt_class);
    if (is < 0)
        return NULL;
    if (is)
        stmt = at;
    PyObject *n = get_field(at, str_p);
    if (n == NULL && PyErr_Occurred())
        return NULL;
    PyObject *found_scope = NULL;   /* owned when set */
    PyObject *found_stmt = NULL;    /* owned when set */
    while (n != NULL && n != Py_None) {
        if (stmt == NULL && found_stmt == NULL) {
            int st = PyObject_IsInstance(n, stmt_class);
            if (st < 0)
                goto fail;
            if (st) {
                found_stmt = n;
                Py_INCREF(found_stmt);
            }
        }
        int sc = PySet_Contains(scopes, (PyObject *)Py_TYPE(n));
        if (sc < 0)
            goto fail;
        if (sc) {
            found_scope = n;   /* takes the reference */
            n = NULL;
            break;
        }
        PyObject *nx = get_field(n, str_p);
        Py_DECREF(n);
        n = nx;
        if (n == NULL && PyErr_Occurred())
            goto fail;
    }
    Py_XDECREF(n);
    PyObject *r = PyTuple_Pack(2, stmt ? stmt : (found_stmt ? found_stmt : Py_None),
                               found_scope ? found_scope : scope);
    Py_XDECREF(found_stmt);
    Py_XDECREF(found_scope);
    return r;
fail:
    Py_XDECREF(n);
    Py_XDECREF(found_stmt);
    Py_XDECREF(found_scope);
    return NULL;
}

/* parent(node): ``semantic.parent``, the parent pointer or None */
static PyObject *parent_of(PyObject *self, PyObject *node) {
    PyObject *p = get_field(node, str_p);
    if (p == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    return p;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(tree, table, entry, leaf, calls, imports, functions, by_type, by_scope, nodes) -> walrus"},
    {"index_calls", (PyCFunction)(void (*)(void))index_calls, METH_FASTCALL,
     "index_calls(calls, aliases, canon, canonical_cached, Attribute, Name, by_qn, names, attrs, recv, base, pairs)"},
    {"first_in", (PyCFunction)(void (*)(void))first_in, METH_FASTCALL,
     "first_in(types, include_self, default, node)"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, "configure(Starred)"},
    {"get_arg", (PyCFunction)(void (*)(void))get_arg, METH_FASTCALL, "get_arg(call, pos, kw)"},
    {"assignment_index", (PyCFunction)(void (*)(void))assignment_index, METH_FASTCALL,
     "assignment_index(stmts, scope_types, new_table, add_bindings, Assign, AnnAssign, AugAssign, Name, no_names)"},
    {"take_apart", (PyCFunction)take_apart, METH_O, "take_apart(nodes): empty every node's instance dict"},
    {"reaching_events", (PyCFunction)(void (*)(void))reaching_events, METH_FASTCALL,
     "reaching_events(at, scope, evs, stmt_class, loop_types, For, AsyncFor, With, AsyncWith)"},
    {"admitted", (PyCFunction)(void (*)(void))admitted, METH_FASTCALL, "admitted(text, gates, NoCase)"},
    {"has_param", (PyCFunction)(void (*)(void))has_param, METH_FASTCALL, "has_param(fn, name)"},
    {"use_site", (PyCFunction)(void (*)(void))use_site, METH_FASTCALL, "use_site(at, stmt_class, scope_types)"},
    {"parent", (PyCFunction)parent_of, METH_O, "parent(node): the parent pointer or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The traversal and the call indexes of semantic.Semantic in C (optional).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    str_p = PyUnicode_InternFromString("_p");
    str_name = PyUnicode_InternFromString("name");
    str_decorator_list = PyUnicode_InternFromString("decorator_list");
    str_func = PyUnicode_InternFromString("func");
    str_attr = PyUnicode_InternFromString("attr");
    str_value = PyUnicode_InternFromString("value");
    str_id = PyUnicode_InternFromString("id");
    str_qn = PyUnicode_InternFromString("_qn");
    str_dot = PyUnicode_InternFromString(".");
    str_keywords = PyUnicode_InternFromString("keywords");
    str_args = PyUnicode_InternFromString("args");
    str_arg = PyUnicode_InternFromString("arg");
    str_targets = PyUnicode_InternFromString("targets");
    str_target = PyUnicode_InternFromString("target");
    if (str_keywords == NULL || str_args == NULL || str_arg == NULL || str_targets == NULL || str_target == NULL)
        return NULL;
    str_lineno = PyUnicode_InternFromString("lineno");
    str_col_offset = PyUnicode_InternFromString("col_offset");
    str_end_lineno = PyUnicode_InternFromString("end_lineno");
    str_end_col_offset = PyUnicode_InternFromString("end_col_offset");
    str_body = PyUnicode_InternFromString("body");
    str_orelse = PyUnicode_InternFromString("orelse");
    str_finalbody = PyUnicode_InternFromString("finalbody");
    str_posonlyargs = PyUnicode_InternFromString("posonlyargs");
    str_kwonlyargs = PyUnicode_InternFromString("kwonlyargs");
    str_vararg = PyUnicode_InternFromString("vararg");
    str_kwarg = PyUnicode_InternFromString("kwarg");
    if (str_posonlyargs == NULL || str_kwonlyargs == NULL || str_vararg == NULL || str_kwarg == NULL)
        return NULL;
    if (str_lineno == NULL || str_col_offset == NULL || str_end_lineno == NULL || str_end_col_offset == NULL ||
        str_body == NULL || str_orelse == NULL || str_finalbody == NULL)
        return NULL;
    if (str_p == NULL || str_name == NULL || str_decorator_list == NULL || str_func == NULL || str_attr == NULL ||
        str_value == NULL || str_id == NULL || str_qn == NULL || str_dot == NULL)
        return NULL;
    return PyModule_Create(&module);
}
