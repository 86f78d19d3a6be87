/* vpq.read_nodes._fast_decode: record_decode.decode_tailed of a columnar batch in one call.

   decode_columnar(buf, pos, size, count, base_offset, first_ts, pp, contexts,
                   record_type, lone_dedup, overhead)
   answers ``(records, sizes)`` as ``record_decode.decode_tailed`` does for the magic-2
   batch of ``count`` records at ``buf[pos:pos + size]`` (``size`` bytes, header
   included; codec.columnar gives the layout), or None where this code leaves the batch
   to the Python decoder. It decodes only the usual batch and answers None for every
   other:

   - ``buf`` is bytes and the columns describe exactly the record area, key lengths
     >= -1, value encodings 0 or 1 (a corrupt batch: the Python decoder says why);
   - every record has no header block, or one holding the dedup id alone (its bytes
     start with ``lone_dedup``, one-byte value length): such a record gets no headers,
     as ``BatchView.records(drop_dedup=True)`` gives it;
   - every context id is a key of ``contexts`` (else the Python decoder raises
     ``UnknownContexts``).

   ``record_type`` is ``messages.TailedRecord`` (a tuple type of 12 fields); a size is
   ``overhead`` plus the value's and the key's bytes (``record_size`` of a record
   without headers). Pure: no I/O, the arguments are not changed. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 43
#define FIXED_RECORD_BYTES 37
#define MAX_VALUE_ENCODING 1
#define N_FIELDS 12

static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline int64_t le64(const unsigned char *p) {
    return (int64_t)((uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32));
}

static PyObject *decode_columnar(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_columnar(buf, pos, size, count, base_offset, first_ts, pp, contexts, record_type, "
                        "lone_dedup, overhead)");
        return NULL;
    }
    PyObject *buf = args[0], *pp_obj = args[6], *contexts = args[7], *record_type = args[8], *lone = args[9];
    if (!PyDict_Check(contexts) || !PyType_Check(record_type) || !PyBytes_Check(lone)
        || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type) || !PyLong_Check(pp_obj)) {
        PyErr_SetString(PyExc_TypeError, "decode_columnar: contexts dict, a tuple type and lone_dedup bytes expected");
        return NULL;
    }
    if (!PyBytes_Check(buf)) Py_RETURN_NONE;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), size = PyLong_AsSsize_t(args[2]), n = PyLong_AsSsize_t(args[3]);
    long long base = PyLong_AsLongLong(args[4]), first_ts = PyLong_AsLongLong(args[5]);
    long long overhead = PyLong_AsLongLong(args[10]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t buf_len = PyBytes_GET_SIZE(buf);
    if (pos < 0 || size < HEADER_SIZE || n < 1 || pos > buf_len || size > buf_len - pos) Py_RETURN_NONE;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t start = pos + HEADER_SIZE, end = pos + size;
    if (n > (end - start) / FIXED_RECORD_BYTES) Py_RETURN_NONE;
    const unsigned char *qids = b + start, *vps = qids + 4 * n, *hashes = vps + 4 * n, *ctxs = hashes + 4 * n;
    const unsigned char *deltas = ctxs + 4 * n, *kls = deltas + 8 * n, *vls = kls + 4 * n, *hls = vls + 4 * n;
    const unsigned char *encs = hls + 4 * n;
    /* the areas add up exactly, and every header block is none or a lone dedup id */
    const unsigned char *lone_p = (const unsigned char *)PyBytes_AS_STRING(lone);
    Py_ssize_t lone_n = PyBytes_GET_SIZE(lone);
    uint64_t key_bytes = 0, value_bytes = 0, header_bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t kl = (int32_t)le32(kls + 4 * i);
        long long ts;
        if (kl < -1 || encs[i] > MAX_VALUE_ENCODING || __builtin_add_overflow(first_ts, le64(deltas + 8 * i), &ts))
            Py_RETURN_NONE;
        key_bytes += kl > 0 ? (uint64_t)kl : 0;
        value_bytes += le32(vls + 4 * i);
        header_bytes += le32(hls + 4 * i);
    }
    Py_ssize_t keys_at = start + FIXED_RECORD_BYTES * n;
    if ((uint64_t)(end - keys_at) != key_bytes + value_bytes + header_bytes) Py_RETURN_NONE;
    Py_ssize_t values_at = keys_at + (Py_ssize_t)key_bytes, headers_at = values_at + (Py_ssize_t)value_bytes;
    Py_ssize_t hp = headers_at;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t hl = le32(hls + 4 * i);
        if (hl == 0) continue;
        if ((Py_ssize_t)hl <= lone_n || (Py_ssize_t)hl > lone_n + 0x80 || memcmp(b + hp, lone_p, lone_n) != 0
            || (Py_ssize_t)b[hp + lone_n] != (Py_ssize_t)hl - lone_n - 1)
            Py_RETURN_NONE;
        hp += hl;
    }
    PyObject *ctx = NULL, *cid_obj = NULL; /* the context of the record before, and its id */
    PyObject *records = PyList_New(n), *sizes = PyList_New(n), *empty = PyTuple_New(0);
    if (records == NULL || sizes == NULL || empty == NULL) goto fail;
    PyTypeObject *type = (PyTypeObject *)record_type;
    uint32_t last_cid = 0;
    Py_ssize_t kp = keys_at, vp_at = values_at;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t cid = le32(ctxs + 4 * i);
        if (ctx == NULL || cid != last_cid) {
            Py_XDECREF(cid_obj);
            cid_obj = PyLong_FromUnsignedLong(cid);
            if (cid_obj == NULL) goto fail;
            ctx = PyDict_GetItemWithError(contexts, cid_obj); /* borrowed: contexts is not changed here */
            if (ctx == NULL) {
                if (PyErr_Occurred()) goto fail;
                Py_DECREF(cid_obj);
                Py_DECREF(records);
                Py_DECREF(sizes);
                Py_DECREF(empty);
                Py_RETURN_NONE; /* an unknown context: the Python decoder names it */
            }
            last_cid = cid;
        }
        int32_t kl = (int32_t)le32(kls + 4 * i);
        uint32_t vl = le32(vls + 4 * i);
        PyObject *key;
        if (kl < 0) {
            key = Py_None;
            Py_INCREF(key);
        } else {
            key = PyBytes_FromStringAndSize((const char *)b + kp, kl);
            kp += kl;
        }
        PyObject *value = PyBytes_FromStringAndSize((const char *)b + vp_at, vl);
        vp_at += vl;
        PyObject *rec = type->tp_alloc(type, N_FIELDS);
        PyObject *size_obj = PyLong_FromLongLong(overhead + (long long)vl + (kl > 0 ? kl : 0));
        PyObject *fields[N_FIELDS] = {
            pp_obj, ctx, PyLong_FromLongLong(base + i), key, value, empty,
            PyLong_FromLongLong(first_ts + le64(deltas + 8 * i)), PyLong_FromLong(encs[i]),
            PyLong_FromUnsignedLong(le32(qids + 4 * i)), cid_obj, PyLong_FromUnsignedLong(le32(hashes + 4 * i)),
            PyLong_FromUnsignedLong(le32(vps + 4 * i)),
        };
        Py_INCREF(pp_obj);
        Py_INCREF(ctx);
        Py_INCREF(empty);
        Py_INCREF(cid_obj);
        int bad = rec == NULL || size_obj == NULL;
        for (int f = 0; f < N_FIELDS; f++) bad |= fields[f] == NULL;
        if (bad) {
            for (int f = 0; f < N_FIELDS; f++) Py_XDECREF(fields[f]);
            Py_XDECREF(rec);
            Py_XDECREF(size_obj);
            goto fail;
        }
        for (int f = 0; f < N_FIELDS; f++) PyTuple_SET_ITEM(rec, f, fields[f]);
        PyList_SET_ITEM(records, i, rec);
        PyList_SET_ITEM(sizes, i, size_obj);
    }
    Py_XDECREF(cid_obj);
    Py_DECREF(empty);
    PyObject *out = PyTuple_Pack(2, records, sizes);
    Py_DECREF(records);
    Py_DECREF(sizes);
    return out;
fail:
    Py_XDECREF(cid_obj);
    Py_XDECREF(records);
    Py_XDECREF(sizes);
    Py_XDECREF(empty);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_columnar", (PyCFunction)(void (*)(void))decode_columnar, METH_FASTCALL,
     "decode_columnar(buf, pos, size, count, base_offset, first_ts, pp, contexts, record_type, lone_dedup, overhead)"
     " -> (records, sizes) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_decode", "record_decode.decode_tailed of a columnar batch (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__fast_decode(void) { return PyModule_Create(&module); }
