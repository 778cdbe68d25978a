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
     ``by_scope`` (id of the innermost function, or of the module -> list of its calls), ``nodes``
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

static PyObject *str_p, *str_name, *str_decorator_list;

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

/* ``node._p = parent``, straight into the instance dict when there is one (no descriptor can
   stand in the way: ``_p`` is no attribute of any ast class) */
static int set_parent(PyObject *node, PyObject *parent) {
    PyObject **dp = _PyObject_GetDictPtr(node);
    if (dp != NULL && *dp != NULL && PyDict_CheckExact(*dp))
        return PyDict_SetItem(*dp, str_p, parent);
    return PyObject_SetAttr(node, str_p, parent);
}

/* give ``child`` its parent and push it unless it is a leaf (None children are skipped) */
static int visit_child(Stack *s, PyObject *child, PyObject *parent, PyObject *scope, PyObject *leaf) {
    if (child == Py_None)
        return 0;
    if (set_parent(child, parent) < 0)
        return -1;
    int is_leaf = PySet_Contains(leaf, (PyObject *)Py_TYPE(child));
    if (is_leaf < 0)
        return -1;
    if (!is_leaf)
        return stack_push(s, child, scope);
    return 0;
}

static int visit_field(Stack *s, PyObject *value, PyObject *parent, PyObject *scope, PyObject *leaf) {
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
        PyObject *e = PyDict_GetItemWithError(table, t);   /* borrowed */
        PyObject *made = NULL;
        if (e == NULL) {
            if (PyErr_Occurred())
                goto next;
            made = PyObject_CallOneArg(entry, t);
            if (made == NULL)
                goto next;
            e = made;
        }
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(e, 2))) {
            PyErr_SetString(PyExc_TypeError, "walk(): bad table entry");
            goto next;
        }
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
        if (kind == -1 && PyErr_Occurred())
            goto next;
        int indexed = PyObject_IsTrue(PyTuple_GET_ITEM(e, 1));
        if (indexed < 0)
            goto next;
        PyObject *fields = PyTuple_GET_ITEM(e, 2);
        if (PyList_Append(nodes, node) < 0)
            goto next;
        if (indexed && append_to(by_type, t, node) < 0)
            goto next;
        if (kind == K_CALL) {
            if (PyList_Append(calls, node) < 0)
                goto next;
            PyObject *key = PyLong_FromVoidPtr(scope);   /* id(scope) */
            if (key == NULL)
                goto next;
            int rc = append_to(by_scope, key, node);
            Py_DECREF(key);
            if (rc < 0)
                goto next;
        } else if (kind == K_IMPORT) {
            if (PyList_Append(imports, node) < 0)
                goto next;
        } else if (kind == K_FUNC) {
            PyObject *name = get_field(node, str_name);
            if (name == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_AttributeError, "a function node without a name");
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
                rc = visit_field(&s, v, node, is_dec ? scope : node, leaf);
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
            int rc = visit_field(&s, v, node, scope, leaf);
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
    return result;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(tree, table, entry, leaf, calls, imports, functions, by_type, by_scope, nodes) -> walrus"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The traversal of semantic.Semantic in C (optional).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    str_p = PyUnicode_InternFromString("_p");
    str_name = PyUnicode_InternFromString("name");
    str_decorator_list = PyUnicode_InternFromString("decorator_list");
    if (str_p == NULL || str_name == NULL || str_decorator_list == NULL)
        return NULL;
    return PyModule_Create(&module);
}
