/* The slots of ``delivery_items.Msg`` as the read node's C extensions
   write and read them: their order and names, and ``slot_offsets``, which checks a
   class's ``__slots__`` against such a list and finds each slot's offset in an instance. */

#ifndef VPQ_MSG_SLOTS_H
#define VPQ_MSG_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"

enum {
    M_SEQ, M_PP, M_OFFSET, M_KEY_HASH, M_KEY, M_CTX, M_TIMESTAMP_MS, M_CTX_ID, M_PRIORITY, M_STREAM, M_POS,
    M_CHAIN, M_STATE, M_HOLDER, M_COUNT, M_DUE, M_TIMER, M_N
};
static const char *msg_slots[M_N] = {
    "seq", "pp", "offset", "key_hash", "key", "ctx", "timestamp_ms", "ctx_id", "priority", "stream", "pos",
    "chain", "state", "holder", "count", "due", "timer",
};

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* ``tp.__slots__`` must be exactly ``names`` (in order) and each a plain object slot;
   then ``out[i]`` is the offset of ``names[i]`` in an instance. -1 with TypeError else. */
static int slot_offsets(PyTypeObject *tp, const char **names, int n, Py_ssize_t *out) {
    PyObject *slots = PyObject_GetAttrString((PyObject *)tp, "__slots__");
    if (slots == NULL) return -1;
    PyObject *seq = PySequence_Fast(slots, "__slots__ must be a sequence");
    Py_DECREF(slots);
    if (seq == NULL) return -1;
    int ok = PySequence_Fast_GET_SIZE(seq) == n;
    for (int i = 0; ok && i < n; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
        ok = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, names[i]) == 0;
    }
    Py_DECREF(seq);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s.__slots__ is not what the read node's C code knows", tp->tp_name);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemString(tp->tp_dict, names[i]);  /* borrowed */
        if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", tp->tp_name, names[i]);
            return -1;
        }
        out[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}

#endif
