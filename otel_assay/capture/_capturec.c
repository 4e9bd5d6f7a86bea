/* Capture's two hot loops in C, each a Python function written out step for step, with the
 * Python function kept as the path where this is not built:
 * - clean_plain: _spans.clean, which every adapter's span attributes go through, for the
 *   attributes every span has (None, str, int, bool, float, lists of str), and sdk_plain,
 *   the same in the form the SDK stores them (_spans.start_span puts them in the span);
 * - history_json: the LangChain adapter's message-history join
 *   (langchain.AssayCallbackHandler._messages_json).
 *
 * A chat call's input is the whole conversation so far, so the adapter keeps each message's
 * JSON in a cache and joins the cached texts; what is left per call is a loop over the
 * history that reads two attributes and looks one id up per message. In Python that loop
 * cost about as much as the rest of a step's capture; here it is a few hundred machine
 * instructions per message. Anything the loop cannot answer by itself (a message not in
 * the cache, a message type not seen before) is handed back to the same Python functions
 * the Python loop calls, so both give the same text and the same errors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

static PyObject *S_content, *S_tool_calls, *S_extra, *S_get, *S_sep, *S_open, *S_close;

/* getattr(o, name, None) (a new reference), or NULL with an error other than AttributeError */
static PyObject *attr_or_none(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v)
        return v;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* whether a message type declares tool_calls, as read from `declares` in this call: a
 * history holds a few types, and a lookup by a (type, name) tuple costs a tuple per message.
 * `declares` (langchain._DECLARES) only ever gains entries, each True or False, written once
 * by _optional; what was read is forgotten when its size changes all the same (code that
 * edits it meanwhile). The types are held here, so that a freed type's address, taken by
 * another type, cannot be mistaken for it */
#define TYPES_SEEN 8
typedef struct {
    PyTypeObject *type[TYPES_SEEN];
    int declared[TYPES_SEEN];
    int n;
    Py_ssize_t size; /* len(declares) when read: another size, and what was read may be stale */
} Seen;

static void forget(Seen *seen) {
    for (int i = 0; i < seen->n; i++)
        Py_DECREF(seen->type[i]);
    seen->n = 0;
}

/* langchain._optional(m, "tool_calls") (a new reference): `declares` is its cache,
 * (type, name) -> whether the type declares the name; a type not in it goes to `optional`
 * itself, which fills it */
static PyObject *tool_calls_of(PyObject *m, PyObject *declares, PyObject *optional, Seen *seen) {
    int yes = -1;
    if (PyDict_GET_SIZE(declares) != seen->size)
        forget(seen);
    for (int i = 0; i < seen->n; i++)
        if (seen->type[i] == Py_TYPE(m))
            yes = seen->declared[i];
    if (yes < 0) {
        PyObject *key = PyTuple_Pack(2, (PyObject *)Py_TYPE(m), S_tool_calls);
        if (!key)
            return NULL;
        PyObject *declared = PyDict_GetItemWithError(declares, key); /* borrowed */
        Py_DECREF(key);
        if (!declared) {
            if (PyErr_Occurred())
                return NULL;
            return PyObject_CallFunctionObjArgs(optional, m, S_tool_calls, NULL);
        }
        if (declared == Py_None) /* as _optional reads it: not asked yet */
            return PyObject_CallFunctionObjArgs(optional, m, S_tool_calls, NULL);
        yes = PyObject_IsTrue(declared);
        if (yes < 0)
            return NULL;
        if (seen->n < TYPES_SEEN) {
            seen->type[seen->n] = (PyTypeObject *)Py_NewRef(Py_TYPE(m));
            seen->declared[seen->n++] = yes;
            seen->size = PyDict_GET_SIZE(declares);
        }
    }
    if (yes)
        return attr_or_none(m, S_tool_calls);
    PyObject *extra = attr_or_none(m, S_extra);
    if (!extra)
        return NULL;
    int some = PyObject_IsTrue(extra);
    PyObject *calls = NULL;
    if (some > 0)
        calls = PyObject_CallMethodOneArg(extra, S_get, S_tool_calls);
    else if (some == 0)
        calls = Py_NewRef(Py_None);
    Py_DECREF(extra);
    return calls;
}

/* the cached text of m (a new reference), or what new_json(m, content, calls, make) makes */
static PyObject *text_of(PyObject *m, PyObject *cache, PyObject *declares, PyObject *optional, PyObject *new_json,
                         PyObject *make, Seen *seen) {
    PyObject *content = attr_or_none(m, S_content);
    if (!content)
        return NULL;
    PyObject *text = NULL, *calls = tool_calls_of(m, declares, optional, seen), *id = NULL;
    if (!calls)
        goto done;
    id = PyLong_FromVoidPtr(m);
    if (!id)
        goto done;
    PyObject *hit = PyDict_GetItemWithError(cache, id); /* borrowed */
    if (!hit && PyErr_Occurred())
        goto done;
    if (hit && PyTuple_CheckExact(hit) && PyTuple_GET_SIZE(hit) == 4) {
        /* what new_json stores: (message, content, tool_calls, text) */
        if (PyTuple_GET_ITEM(hit, 0) == m && PyTuple_GET_ITEM(hit, 1) == content && PyTuple_GET_ITEM(hit, 2) == calls)
            text = Py_NewRef(PyTuple_GET_ITEM(hit, 3));
    } else if (hit && hit != Py_None) {
        /* anything else, read as the Python loop reads it: hit[0] is m and hit[1] is ... */
        Py_INCREF(hit); /* indexing runs Python code, which may drop the entry */
        int same = 1;
        for (int i = 0; same == 1 && i <= 3; i++) {
            PyObject *index = PyLong_FromLong(i), *item = index ? PyObject_GetItem(hit, index) : NULL;
            Py_XDECREF(index);
            if (!item)
                same = -1;
            else if (i < 3)
                same = item == (i == 0 ? m : i == 1 ? content : calls);
            else
                text = Py_NewRef(item);
            Py_XDECREF(item);
        }
        Py_DECREF(hit);
        if (same < 0)
            goto done;
    }
    if (!text) {
        PyObject *args[4] = {m, content, calls, make};
        text = PyObject_Vectorcall(new_json, args, 4, NULL);
    }
done:
    Py_DECREF(content);
    Py_XDECREF(calls);
    Py_XDECREF(id);
    return text;
}

PyDoc_STRVAR(history_json_doc,
             "history_json(messages, cache, declares, optional, new_json, make) -> str\n\n"
             "'[' + ', '.join(texts) + ']' where each message m's text is cache[id(m)][3] when that\n"
             "entry was made from m with its current content and tool_calls (the same objects),\n"
             "else new_json(m, content, tool_calls, make). tool_calls is read as optional(m,\n"
             "'tool_calls') reads it, through its cache declares. NotImplemented when cache or\n"
             "declares is not a dict (a subclass): the caller runs its own loop.");

static PyObject *history_json(PyObject *self, PyObject *args) {
    PyObject *messages, *cache, *declares, *optional, *new_json, *make;
    if (!PyArg_ParseTuple(args, "OOOOOO:history_json", &messages, &cache, &declares, &optional, &new_json, &make))
        return NULL;
    if (!PyDict_CheckExact(cache) || !PyDict_CheckExact(declares)) /* their methods may be overridden */
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *it = PyObject_GetIter(messages);
    if (!it)
        return NULL;
    PyObject *texts = PyList_New(0), *m, *joined = NULL, *out = NULL;
    Seen seen = {.n = 0, .size = -1};
    if (!texts)
        goto done;
    while ((m = PyIter_Next(it))) {
        PyObject *text = text_of(m, cache, declares, optional, new_json, make, &seen);
        Py_DECREF(m);
        if (!text)
            goto done;
        int rc = PyList_Append(texts, text);
        Py_DECREF(text);
        if (rc < 0)
            goto done;
    }
    if (PyErr_Occurred())
        goto done;
    joined = PyUnicode_Join(S_sep, texts);
    if (!joined)
        goto done;
    PyObject *opened = PyUnicode_Concat(S_open, joined);
    if (opened) {
        out = PyUnicode_Concat(opened, S_close);
        Py_DECREF(opened);
    }
done:
    forget(&seen);
    Py_DECREF(it);
    Py_XDECREF(texts);
    Py_XDECREF(joined);
    return out;
}

PyDoc_STRVAR(clean_plain_doc,
             "clean_plain(attrs) -> dict | None\n\n"
             "_spans.clean(attrs) when attrs is a dict with str keys whose values are all None, str,\n"
             "int, bool, float or lists or tuples of str (those exact types): None values dropped, a\n"
             "float that is not finite as its repr, a tuple as a list. None for any other attrs: the\n"
             "caller cleans them.");

PyDoc_STRVAR(sdk_plain_doc,
             "sdk_plain(attrs) -> dict | None\n\n"
             "clean_plain(attrs) as the SDK's span attributes store it (BoundedAttributes with no\n"
             "length limit): a list or tuple of str as a tuple. None also for an empty key, which the\n"
             "SDK drops with a warning: the caller then hands attrs to the SDK.");

/* clean_plain, or with `sdk` sdk_plain */
static PyObject *plain(PyObject *attrs, int sdk) {
    if (!PyDict_CheckExact(attrs))
        Py_RETURN_NONE;
    PyObject *out = PyDict_New(), *k, *v;
    Py_ssize_t pos = 0;
    if (!out)
        return NULL;
    while (PyDict_Next(attrs, &pos, &k, &v)) {
        PyObject *keep = NULL;
        if (!PyUnicode_CheckExact(k)) /* its hash or == could run Python code that changes attrs */
            goto other;
        if (sdk && PyUnicode_GET_LENGTH(k) == 0)
            goto other;
        if (v == Py_None)
            continue;
        if (PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyBool_Check(v)) {
            keep = Py_NewRef(v);
        } else if (PyFloat_CheckExact(v)) {
            keep = isfinite(PyFloat_AS_DOUBLE(v)) ? Py_NewRef(v) : PyObject_Repr(v);
        } else if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
            for (Py_ssize_t i = 0; i < n; i++)
                if (!PyUnicode_CheckExact(PySequence_Fast_GET_ITEM(v, i)))
                    goto other;
            keep = sdk ? PySequence_Tuple(v) : PySequence_List(v);
        } else {
            goto other;
        }
        if (!keep || PyDict_SetItem(out, k, keep) < 0) {
            Py_XDECREF(keep);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(keep);
    }
    return out;
other:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *clean_plain(PyObject *self, PyObject *attrs) {
    return plain(attrs, 0);
}

static PyObject *sdk_plain(PyObject *self, PyObject *attrs) {
    return plain(attrs, 1);
}

static PyMethodDef methods[] = {
    {"clean_plain", clean_plain, METH_O, clean_plain_doc},
    {"sdk_plain", sdk_plain, METH_O, sdk_plain_doc},
    {"history_json", history_json, METH_VARARGS, history_json_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_capturec",
    "Capture's compiled helpers: attribute cleaning and the LangChain adapter's history join.", -1, methods,
};

PyMODINIT_FUNC PyInit__capturec(void) {
    if (!(S_content = PyUnicode_InternFromString("content")) ||
        !(S_tool_calls = PyUnicode_InternFromString("tool_calls")) ||
        !(S_extra = PyUnicode_InternFromString("__pydantic_extra__")) || !(S_get = PyUnicode_InternFromString("get")) ||
        !(S_sep = PyUnicode_InternFromString(", ")) || !(S_open = PyUnicode_InternFromString("[")) ||
        !(S_close = PyUnicode_InternFromString("]")))
        return NULL;
    return PyModule_Create(&module);
}
