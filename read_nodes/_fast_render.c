/* vpq.read_nodes._fast_render: MessageRenderer.render of many records in one call.

   render_many(queue_json, keys, key_json, contexts, context_json, check, reserved_prefix,
               records, vps, counts)
   answers a list as long as ``records``: for each record either the bytes
   ``MessageRenderer.render(record, vps[i], counts[i])`` answers, or None where this
   code leaves the record to the Python renderer. It renders only the common case and
   answers None for every other:

   - ``record`` is a TailedRecord (a tuple of 12 fields, see messages.py);
   - its key is None, or bytes whose JSON string is in ``keys`` or answered by
     ``key_json(key)`` (bytes; None for a key that is not UTF-8);
   - its value encoding is 0 (JSON) and the stored bytes parse as JSON (they are spliced
     in as they are): checked by ``json_valid`` below, which says yes only where
     orjson.loads surely accepts them, else by calling ``check(value)`` (orjson.loads);
   - it has no headers, or one whose name starts with ``reserved_prefix``;
   - the JSON members ``"lane":..,"env":..,"set":..`` of its isolation context are in
     ``contexts`` or answered by ``context_json(context)`` (bytes);
   - partition, offset, timestamp (or None), ``vps[i]`` and ``counts[i]`` are ints that
     fit in 64 bits.

   ``key_json`` and ``context_json`` are called on a miss (MessageRenderer's own, which
   remember their answers); an exception they raise propagates.

   The bytes are those of messages.py's _MESSAGE template with ``"value":``, the
   headers ``{}`` and no ``key_b64``. No I/O. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { F_PP = 0, F_CTX = 1, F_OFFSET = 2, F_KEY = 3, F_VALUE = 4, F_HEADERS = 5, F_TS = 6, F_ENC = 7, N_FIELDS = 12 };

static const char P_ID[] = "{\"id\":\"";
static const char P_QUEUE[] = "\",\"queue\":";
static const char P_KEY[] = ",\"key\":";
static const char P_VALUE[] = ",\"value\":";
static const char P_HEADERS[] = ",\"headers\":{},";
static const char P_PARTITION[] = ",\"partition\":";
static const char P_OFFSET[] = ",\"offset\":";
static const char P_VP[] = ",\"virtual_partition\":";
static const char P_TS[] = ",\"timestamp_ms\":";
static const char P_COUNT[] = ",\"delivery_count\":";
static const char K_NULL[] = "null";

#define LIT(s) (sizeof(s) - 1)

/* The decimal digits of v into buf (at least 21 bytes); answers their count. */
static Py_ssize_t put_int(char *buf, long long v) {
    char tmp[24];
    Py_ssize_t n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + (u % 10));
        u /= 10;
    } while (u);
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    return len;
}

/* An int object as a long long; 0 with *ok = 0 when it is not one or does not fit. */
static long long as_int(PyObject *o, int *ok) {
    if (!PyLong_CheckExact(o) && !PyLong_Check(o)) {
        *ok = 0;
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    return v;
}

#define PUT(p, src, n)            \
    do {                          \
        memcpy((p), (src), (n));  \
        (p) += (n);               \
    } while (0)

/* ---- a JSON check that answers "valid" only where orjson.loads surely accepts ------- */

#define MAX_DEPTH 256
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* a byte below n (n <= 128) among those of x without their high bit */
static inline uint64_t has_less(uint64_t x, uint64_t n) { return (x - ONES * n) & ~x & HIGHS; }
static inline uint64_t has_zero(uint64_t x) { return (x - ONES) & ~x & HIGHS; }

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The rest of a string after its opening quote: 1 and *pp past the closing quote, or 0
   (not valid, or a \u escape of a surrogate, which orjson takes only in pairs). */
static int scan_string(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp;
    for (;;) {
        while (end - p >= 8) { /* eight plain ASCII bytes at a time */
            uint64_t v;
            memcpy(&v, p, 8);
            if ((v & HIGHS) | has_less(v, 0x20) | has_zero(v ^ (ONES * '"')) | has_zero(v ^ (ONES * '\\'))) break;
            p += 8;
        }
        if (p >= end) return 0;
        unsigned char c = *p;
        if (c == '"') {
            *pp = p + 1;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (end - p < 2) return 0;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                if (end - p < 6) return 0;
                unsigned cp = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hex_value(p[i]);
                    if (h < 0) return 0;
                    cp = cp * 16 + (unsigned)h;
                }
                if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
                p += 6;
                continue;
            }
            default:
                return 0;
            }
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8: no overlong form, no surrogate, nothing past U+10FFFF */
        Py_ssize_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len == 0 || end - p < len) return 0;
        for (Py_ssize_t i = 1; i < len; i++)
            if ((p[i] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0) || (c == 0xF0 && p[1] < 0x90)
            || (c == 0xF4 && p[1] >= 0x90))
            return 0;
        p += len;
    }
}

/* A number: 1 and *pp past it, or 0 (not valid, or one orjson might refuse: more than
   200 integer digits, an exponent of more than two digits, more than 400 characters). */
static int scan_number(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp, *start = p;
    if (*p == '-') p++;
    if (p >= end) return 0;
    const unsigned char *digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return 0;
    }
    Py_ssize_t int_digits = p - digits;
    if (p < end && *p == '.') {
        const unsigned char *f = ++p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == f) return 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const unsigned char *e = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == e || p - e > 2) return 0;
    }
    if (int_digits > 200 || p - start > 400) return 0;
    *pp = p;
    return 1;
}

/* 1 when the n bytes at s are one JSON text (RFC 8259) that orjson.loads accepts; 0 when
   they are not, or might not be (nesting deeper than MAX_DEPTH, the strings and numbers
   scan_string and scan_number leave): ask orjson then. */
static int json_valid(const unsigned char *s, Py_ssize_t n) {
    const unsigned char *p = s, *end = s + n;
    char stack[MAX_DEPTH];
    int depth = 0;
#define SKIP_WS() while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++
    SKIP_WS();
value:
    if (p >= end) return 0;
    switch (*p) {
    case '{':
    case '[':
        if (depth == MAX_DEPTH) return 0;
        stack[depth++] = (char)*p++;
        SKIP_WS();
        if (p < end && *p == (stack[depth - 1] == '{' ? '}' : ']')) {
            p++;
            depth--;
            goto after_value;
        }
        if (stack[depth - 1] == '{') goto key;
        goto value;
    case '"':
        p++;
        if (!scan_string(&p, end)) return 0;
        goto after_value;
    case 't':
        if (end - p < 4 || memcmp(p, "true", 4) != 0) return 0;
        p += 4;
        goto after_value;
    case 'f':
        if (end - p < 5 || memcmp(p, "false", 5) != 0) return 0;
        p += 5;
        goto after_value;
    case 'n':
        if (end - p < 4 || memcmp(p, "null", 4) != 0) return 0;
        p += 4;
        goto after_value;
    default:
        if (!scan_number(&p, end)) return 0;
        goto after_value;
    }
key:
    if (p >= end || *p != '"') return 0;
    p++;
    if (!scan_string(&p, end)) return 0;
    SKIP_WS();
    if (p >= end || *p != ':') return 0;
    p++;
    SKIP_WS();
    goto value;
after_value:
    SKIP_WS();
    if (depth == 0) return p == end;
    if (p >= end) return 0;
    if (*p == ',') {
        p++;
        SKIP_WS();
        if (stack[depth - 1] == '{') goto key;
        goto value;
    }
    if (*p == (stack[depth - 1] == '{' ? '}' : ']')) {
        p++;
        depth--;
        goto after_value;
    }
    return 0;
#undef SKIP_WS
}

static PyObject *py_json_valid(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "json_valid: bytes expected");
        return NULL;
    }
    return PyBool_FromLong(json_valid((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}

/* The JSON bytes ``cache`` holds for ``item``, else ``ask(item)``'s answer (which
   remembers it): a new reference; Py_None (a new reference) when the answer is not bytes
   (the Python renderer must do the record); NULL on an error. */
static PyObject *json_of(PyObject *cache, PyObject *item, PyObject *ask) {
    PyObject *got = PyDict_GetItemWithError(cache, item); /* borrowed */
    if (got != NULL) {
        Py_INCREF(got);
    } else {
        if (PyErr_Occurred()) return NULL;
        got = PyObject_CallOneArg(ask, item);
        if (got == NULL) return NULL;
    }
    if (!PyBytes_Check(got)) {
        Py_DECREF(got);
        Py_RETURN_NONE;
    }
    return got;
}

/* The rendered bytes of one record, Py_None (a new reference) when the Python renderer
   must do it, NULL on a memory error. */
static PyObject *render_one(PyObject *queue_json, PyObject *keys, PyObject *key_json_of, PyObject *contexts,
                            PyObject *context_json_of, PyObject *check, PyObject *prefix, PyObject *rec,
                            PyObject *vp_obj, PyObject *count_obj, PyObject **last_ctx, PyObject **last_ctx_json) {
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != N_FIELDS) Py_RETURN_NONE;
    PyObject *enc = PyTuple_GET_ITEM(rec, F_ENC);
    if (!PyLong_Check(enc) || PyLong_AsLong(enc) != 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *value = PyTuple_GET_ITEM(rec, F_VALUE);
    if (!PyBytes_Check(value)) Py_RETURN_NONE;
    PyObject *headers = PyTuple_GET_ITEM(rec, F_HEADERS);
    if (!PyTuple_Check(headers)) Py_RETURN_NONE;
    Py_ssize_t nh = PyTuple_GET_SIZE(headers);
    if (nh > 1) Py_RETURN_NONE;
    if (nh == 1) {
        PyObject *h = PyTuple_GET_ITEM(headers, 0);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) < 1) Py_RETURN_NONE;
        PyObject *name = PyTuple_GET_ITEM(h, 0);
        if (!PyUnicode_Check(name)) Py_RETURN_NONE;
        Py_ssize_t starts = PyUnicode_Tailmatch(name, prefix, 0, PY_SSIZE_T_MAX, -1);
        if (starts != 1) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    /* the value parses as JSON: checked here, or by check() where json_valid is unsure */
    if (!json_valid((const unsigned char *)PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))) {
        PyObject *parsed = PyObject_CallOneArg(check, value);
        if (parsed == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        Py_DECREF(parsed);
    }
    /* the context's JSON members (owned in *last_ctx_json) */
    PyObject *ctx = PyTuple_GET_ITEM(rec, F_CTX);
    if (ctx != *last_ctx) {
        PyObject *cj = json_of(contexts, ctx, context_json_of);
        if (cj == NULL || cj == Py_None) return cj;
        Py_INCREF(ctx);
        Py_XSETREF(*last_ctx, ctx);
        Py_XSETREF(*last_ctx_json, cj);
    }
    PyObject *ctx_json = *last_ctx_json;
    /* the key's JSON (owned in kj) */
    PyObject *key = PyTuple_GET_ITEM(rec, F_KEY);
    PyObject *kj;
    if (key == Py_None) {
        kj = NULL;
    } else {
        if (!PyBytes_Check(key)) Py_RETURN_NONE;
        kj = json_of(keys, key, key_json_of); /* None: not UTF-8 */
        if (kj == NULL || kj == Py_None) return kj;
    }
    const char *key_json = kj == NULL ? K_NULL : PyBytes_AS_STRING(kj);
    Py_ssize_t key_len = kj == NULL ? (Py_ssize_t)LIT(K_NULL) : PyBytes_GET_SIZE(kj);
    /* the numbers */
    int ok = 1;
    long long pp = as_int(PyTuple_GET_ITEM(rec, F_PP), &ok);
    long long offset = as_int(PyTuple_GET_ITEM(rec, F_OFFSET), &ok);
    PyObject *ts_obj = PyTuple_GET_ITEM(rec, F_TS);
    long long ts = ts_obj == Py_None ? 0 : as_int(ts_obj, &ok);
    long long vp = as_int(vp_obj, &ok);
    long long count = as_int(count_obj, &ok);
    if (!ok) {
        Py_XDECREF(kj);
        Py_RETURN_NONE;
    }

    char pp_s[24], off_s[24], vp_s[24], ts_s[24], count_s[24];
    Py_ssize_t pp_n = put_int(pp_s, pp), off_n = put_int(off_s, offset), vp_n = put_int(vp_s, vp);
    Py_ssize_t ts_n = put_int(ts_s, ts), count_n = put_int(count_s, count);
    Py_ssize_t q_n = PyBytes_GET_SIZE(queue_json), v_n = PyBytes_GET_SIZE(value);
    Py_ssize_t c_n = PyBytes_GET_SIZE(ctx_json);
    Py_ssize_t total = LIT(P_ID) + pp_n + 1 + off_n + LIT(P_QUEUE) + q_n + LIT(P_KEY) + key_len + LIT(P_VALUE) + v_n
                       + LIT(P_HEADERS) + c_n + LIT(P_PARTITION) + pp_n + LIT(P_OFFSET) + off_n + LIT(P_VP) + vp_n
                       + LIT(P_TS) + ts_n + LIT(P_COUNT) + count_n + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) {
        Py_XDECREF(kj);
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    PUT(p, P_ID, LIT(P_ID));
    PUT(p, pp_s, pp_n);
    *p++ = '-';
    PUT(p, off_s, off_n);
    PUT(p, P_QUEUE, LIT(P_QUEUE));
    PUT(p, PyBytes_AS_STRING(queue_json), q_n);
    PUT(p, P_KEY, LIT(P_KEY));
    PUT(p, key_json, key_len);
    PUT(p, P_VALUE, LIT(P_VALUE));
    PUT(p, PyBytes_AS_STRING(value), v_n);
    PUT(p, P_HEADERS, LIT(P_HEADERS));
    PUT(p, PyBytes_AS_STRING(ctx_json), c_n);
    PUT(p, P_PARTITION, LIT(P_PARTITION));
    PUT(p, pp_s, pp_n);
    PUT(p, P_OFFSET, LIT(P_OFFSET));
    PUT(p, off_s, off_n);
    PUT(p, P_VP, LIT(P_VP));
    PUT(p, vp_s, vp_n);
    PUT(p, P_TS, LIT(P_TS));
    PUT(p, ts_s, ts_n);
    PUT(p, P_COUNT, LIT(P_COUNT));
    PUT(p, count_s, count_n);
    *p++ = '}';
    Py_XDECREF(kj);
    return out;
}

static PyObject *render_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "render_many(queue_json, keys, key_json, contexts, context_json, check, reserved_prefix, "
                        "records, vps, counts)");
        return NULL;
    }
    PyObject *queue_json = args[0], *keys = args[1], *key_json_of = args[2], *contexts = args[3];
    PyObject *context_json_of = args[4], *check = args[5], *prefix = args[6];
    PyObject *records = args[7], *vps = args[8], *counts = args[9];
    if (!PyBytes_Check(queue_json) || !PyDict_Check(keys) || !PyDict_Check(contexts) || !PyUnicode_Check(prefix)
        || !PyList_Check(records) || !PyList_Check(vps) || !PyList_Check(counts)) {
        PyErr_SetString(PyExc_TypeError,
                        "render_many: bytes, dict, callable, dict, callable, callable, str and three lists expected");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (PyList_GET_SIZE(vps) != n || PyList_GET_SIZE(counts) != n) {
        PyErr_SetString(PyExc_ValueError, "render_many: records, vps and counts differ in length");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    PyObject *last_ctx = NULL, *last_ctx_json = NULL; /* owned */
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the callbacks may change the lists: read them by index, checking the length */
        if (i >= PyList_GET_SIZE(records) || i >= PyList_GET_SIZE(vps) || i >= PyList_GET_SIZE(counts)) {
            PyErr_SetString(PyExc_RuntimeError, "render_many: a list changed size");
            goto fail;
        }
        PyObject *rec = PyList_GET_ITEM(records, i), *vp = PyList_GET_ITEM(vps, i), *count = PyList_GET_ITEM(counts, i);
        Py_INCREF(rec);
        Py_INCREF(vp);
        Py_INCREF(count);
        PyObject *got = render_one(queue_json, keys, key_json_of, contexts, context_json_of, check, prefix, rec, vp,
                                   count, &last_ctx, &last_ctx_json);
        Py_DECREF(rec);
        Py_DECREF(vp);
        Py_DECREF(count);
        if (got == NULL) goto fail;
        PyList_SET_ITEM(out, i, got);
    }
    Py_XDECREF(last_ctx);
    Py_XDECREF(last_ctx_json);
    return out;
fail:
    Py_XDECREF(last_ctx);
    Py_XDECREF(last_ctx_json);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"render_many", (PyCFunction)(void (*)(void))render_many, METH_FASTCALL,
     "render_many(queue_json, keys, key_json, contexts, context_json, check, reserved_prefix, records, vps, counts)"
     " -> list"},
    {"json_valid", py_json_valid, METH_O,
     "json_valid(data: bytes) -> bool: True only when orjson.loads surely accepts data (False: ask orjson)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_render", "MessageRenderer.render of many records in one call (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__fast_render(void) { return PyModule_Create(&module); }
