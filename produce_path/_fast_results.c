/* vpq.produce_path._fast_results: the results of a produce answer as JSON, in one call.

   results_json(partitions, offsets, virtual_partitions)
     three sequences of ints (lists or tuples) of the same length, each int within a
     signed 64-bit integer; answers the bytes that ``ProduceResults.json`` builds:
       {"results":[{"id":"P-O","partition":P,"offset":O,"virtual_partition":V},...]}
     with every int in decimal, as Python's ``%d`` writes it.
     TypeError for another container or an item that is not an int (a bool counts as
     an int, as for ``%d``), ValueError when the lengths differ, OverflowError for an
     int past 64 bits. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* the most one result takes: the fixed text and five 20-character ints */
#define ITEM_MAX (sizeof("{\"id\":\"-\",\"partition\":,\"offset\":,\"virtual_partition\":},") + 5 * 20)

static char *put_int(char *p, long long v) {
    char digits[20];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0) *p++ = '-';
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n) *p++ = digits[--n];
    return p;
}

static char *put_text(char *p, const char *text, size_t len) {
    memcpy(p, text, len);
    return p + len;
}

#define PUT(p, literal) put_text((p), (literal), sizeof(literal) - 1)

static int int_at(PyObject *seq, Py_ssize_t i, long long *out) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "results_json: an int expected, got %.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLong(item);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *results_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "results_json(partitions, offsets, virtual_partitions)");
        return NULL;
    }
    PyObject *cols[3] = {NULL, NULL, NULL};
    PyObject *out = NULL;
    for (int c = 0; c < 3; c++) {
        if (!PyList_Check(args[c]) && !PyTuple_Check(args[c])) {
            PyErr_SetString(PyExc_TypeError, "results_json: three lists or tuples of ints expected");
            goto done;
        }
        cols[c] = PySequence_Fast(args[c], "results_json: a sequence expected");
        if (cols[c] == NULL) goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(cols[0]);
    if (PySequence_Fast_GET_SIZE(cols[1]) != n || PySequence_Fast_GET_SIZE(cols[2]) != n) {
        PyErr_SetString(PyExc_ValueError, "results_json: every column needs one entry per message");
        goto done;
    }
    if (n > (PY_SSIZE_T_MAX - 32) / (Py_ssize_t)ITEM_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 32 + n * (Py_ssize_t)ITEM_MAX);
    if (out == NULL) goto done;
    char *start = PyBytes_AS_STRING(out), *p = start;
    p = PUT(p, "{\"results\":[");
    for (Py_ssize_t i = 0; i < n; i++) {
        long long pp, offset, vp;
        if (int_at(cols[0], i, &pp) < 0 || int_at(cols[1], i, &offset) < 0 || int_at(cols[2], i, &vp) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        if (i) *p++ = ',';
        p = PUT(p, "{\"id\":\"");
        p = put_int(p, pp);
        *p++ = '-';
        p = put_int(p, offset);
        p = PUT(p, "\",\"partition\":");
        p = put_int(p, pp);
        p = PUT(p, ",\"offset\":");
        p = put_int(p, offset);
        p = PUT(p, ",\"virtual_partition\":");
        p = put_int(p, vp);
        *p++ = '}';
    }
    p = PUT(p, "]}");
    if (_PyBytes_Resize(&out, p - start) < 0) out = NULL;
done:
    for (int c = 0; c < 3; c++) Py_XDECREF(cols[c]);
    return out;
}

static PyMethodDef methods[] = {
    {"results_json", (PyCFunction)(void (*)(void))results_json, METH_FASTCALL,
     "results_json(partitions, offsets, virtual_partitions) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_results", "A produce answer's results as JSON, in one call (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__fast_results(void) { return PyModule_Create(&module); }
