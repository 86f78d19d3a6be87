/* vpq.read_nodes._fast_deliver: a poll's messages handed to their consumer in one call.

   bind(msg_type, inflight_state, delivery_type)
     once, before any call: ``delivery_items.Msg`` (a slotted class whose slots this code
     writes directly; the names must be exactly those of ``_msg_slots.h``),
     ``delivery_items.INFLIGHT`` and ``delivery_types.Delivery`` (a tuple type of 9
     fields).

   deliver(msgs, consumer_id, inflight, deadline, mask, timer)
     does for each ``Msg`` of the list ``msgs``, in order, what
     ``GroupDelivery._deliver`` does while no context is unroutable, and what
     ``_add_timer`` does to each message (``msg.timer = timer``): state INFLIGHT,
     holder ``consumer_id``, count + 1, due ``deadline``, ``inflight["pp-offset"] =
     msg``; and answers the list of their ``Delivery(message_id, pp, offset,
     key_hash & mask, key, ctx, timestamp_ms, count, deadline)``. */

#include "_msg_slots.h"

static PyTypeObject *msg_type = NULL, *delivery_type = NULL;
static Py_ssize_t msg_off[M_N];
static PyObject *inflight_state = NULL, *one = NULL;

static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[2])
        || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind(msg_type, inflight_state, delivery_type)");
        return NULL;
    }
    if (slot_offsets((PyTypeObject *)args[0], msg_slots, M_N, msg_off) < 0) return NULL;
    Py_XSETREF(msg_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(inflight_state, Py_NewRef(args[1]));
    Py_XSETREF(delivery_type, (PyTypeObject *)Py_NewRef(args[2]));
    if (one == NULL && (one = PyLong_FromLong(1)) == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyObject *deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "deliver(msgs, consumer_id, inflight, deadline, mask, timer)");
        return NULL;
    }
    if (msg_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fast_deliver.bind was not called");
        return NULL;
    }
    PyObject *msgs = args[0], *holder = args[1], *inflight = args[2], *deadline = args[3], *mask = args[4];
    PyObject *timer = args[5];
    if (!PyList_Check(msgs) || !PyDict_Check(inflight) || !PyLong_Check(deadline) || !PyLong_Check(mask)) {
        PyErr_SetString(PyExc_TypeError, "deliver: a list, a dict and int deadline and mask expected");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    for (Py_ssize_t i = 0; i < n; i++) {  /* checked first: nothing changes on a wrong item */
        if (Py_TYPE(PyList_GET_ITEM(msgs, i)) != msg_type) {
            PyErr_SetString(PyExc_TypeError, "deliver: msgs must hold Msg objects only");
            return NULL;
        }
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *pp = SLOT(msg, msg_off[M_PP]), *offset = SLOT(msg, msg_off[M_OFFSET]);
        PyObject *count = PyNumber_Add(SLOT(msg, msg_off[M_COUNT]), one);
        PyObject *mid = PyUnicode_FromFormat("%S-%S", pp, offset);  /* encode_message_id */
        PyObject *vp = PyNumber_And(SLOT(msg, msg_off[M_KEY_HASH]), mask);
        PyObject *d = delivery_type->tp_alloc(delivery_type, 9);
        if (count == NULL || mid == NULL || vp == NULL || d == NULL || PyDict_SetItem(inflight, mid, msg) < 0) {
            Py_XDECREF(count);
            Py_XDECREF(mid);
            Py_XDECREF(vp);
            Py_XDECREF(d);
            Py_DECREF(out);
            return NULL;
        }
        Py_SETREF(SLOT(msg, msg_off[M_STATE]), Py_NewRef(inflight_state));
        Py_SETREF(SLOT(msg, msg_off[M_HOLDER]), Py_NewRef(holder));
        Py_SETREF(SLOT(msg, msg_off[M_COUNT]), Py_NewRef(count));
        Py_SETREF(SLOT(msg, msg_off[M_DUE]), Py_NewRef(deadline));
        Py_SETREF(SLOT(msg, msg_off[M_TIMER]), Py_NewRef(timer));
        PyTuple_SET_ITEM(d, 0, mid);
        PyTuple_SET_ITEM(d, 1, Py_NewRef(pp));
        PyTuple_SET_ITEM(d, 2, Py_NewRef(offset));
        PyTuple_SET_ITEM(d, 3, vp);
        PyTuple_SET_ITEM(d, 4, Py_NewRef(SLOT(msg, msg_off[M_KEY])));
        PyTuple_SET_ITEM(d, 5, Py_NewRef(SLOT(msg, msg_off[M_CTX])));
        PyTuple_SET_ITEM(d, 6, Py_NewRef(SLOT(msg, msg_off[M_TIMESTAMP_MS])));
        PyTuple_SET_ITEM(d, 7, count);
        PyTuple_SET_ITEM(d, 8, Py_NewRef(deadline));
        PyList_SET_ITEM(out, i, d);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind(msg_type, inflight_state, delivery_type)"},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL,
     "deliver(msgs, consumer_id, inflight, deadline, mask, timer) -> [Delivery]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_deliver", "A poll's messages handed to their consumer in one call (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__fast_deliver(void) { return PyModule_Create(&module); }
