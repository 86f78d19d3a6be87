/* vpq.read_nodes._fast_offer: the ingest scan's usual records offered in one call.

   bind(msg_type, chain_type, dedup, waiting, heappush)
     once, before any offer: ``delivery_items.Msg`` and ``Chain`` (slotted classes whose
     slots this code writes and reads directly; the names must be exactly those of
     ``_msg_slots.h`` and of ``chain_slots`` below), ``system_headers.DEDUP``,
     ``delivery_items.WAITING`` and ``heapq.heappush``.

   offer_cached(entries, pp, ctx_id, stream, cache_data, delivery, cutoff, mask, plain_vps)
     takes ``(offset, ref)`` entries of ``stream`` (pp ``pp``, context id ``ctx_id``)
     from the iterator ``entries`` and ingests each as ``Ingestor._scan`` does when
     ``delivery.offer_routed`` answers True: the same calls, the same state after them.
     It stops at the first entry it cannot settle that way and hands it back untouched
     (nothing of it changed; the caller runs it through the general path):
     - its vp (``key_hash & mask``) is not in ``plain_vps`` (a frozenset; None: every
       vp is, there is no lineage order to check);
     - it is not cached in ``cache_data`` (the ``RecordCache``'s dict, ``pos`` ->
       ``(TailedRecord, size)``);
     - it holds headers other than a lone dedup id, or its timestamp is below ``cutoff``
       (the expiry cutoff in ms, or None);
     - its context is one the group holds no message of yet, or one nobody takes;
     - ``offer_routed`` would not answer True (PARK, PAUSE; False: known or done);
     - its offset is below the tracker's scan position, or the tracker has no state
       for the stream.

     The caller guarantees what the general path would otherwise check per record: a
     live consumer takes the stream's context and nothing ran since that was checked,
     no key of the scan is parked and no delayed record is due.

     Answers ``(ingested, cursor, entry, usable)``: how many it ingested (each a cache
     hit, for the caller to add to the cache's count), ``offset + 1`` of the last one
     (None when none), the entry it stopped at (None: the iterator ended) and False
     when the delivery state rules the whole call out (parked keys,
     ``max_acked_above`` set): then nothing was taken but ``entry``.

   Attributes read on ``delivery`` (a ``GroupDelivery``): ``_key_order``,
   ``_parked``, ``_config`` (``key_read_ahead``, ``blocked_read_ahead``, ``max_unacked``,
   ``max_acked_above``), ``_chains``, ``_msgs``, ``_dead_untaken``, ``_dead_taken``,
   ``_tracker._parts`` (a stream's ``scanned``, ``done``, ``unfinished._live`` and
   ``unfinished._heap``), ``_seq``, ``_blocked``, ``_inflight``, ``_unroutable_held``,
   ``_unroutable``, ``_ctx_count`` and ``_make_ready``; it writes ``_seq``, ``_blocked``,
   ``_ctx_count``, ``_msgs``, ``_chains``, the chains' ``pending`` and ``counted`` and
   the tracker's ``_live`` and ``_heap``. The ints it changes are written
   back before any call into Python and before it returns. */

#include <stdint.h>

#include "_msg_slots.h"

enum { C_KEY, C_PARKED_KEY, C_PENDING, C_RUN, C_COUNTED, C_N };
static const char *chain_slots[C_N] = {"key", "parked_key", "pending", "run", "counted"};

static PyTypeObject *msg_type = NULL, *chain_type = NULL;
static Py_ssize_t msg_off[M_N], chain_off[C_N];
static PyObject *dedup = NULL, *waiting = NULL, *heappush = NULL, *zero = NULL, *str_append = NULL;

static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyCallable_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "bind(msg_type, chain_type, dedup, waiting, heappush)");
        return NULL;
    }
    if (slot_offsets((PyTypeObject *)args[0], msg_slots, M_N, msg_off) < 0) return NULL;
    if (slot_offsets((PyTypeObject *)args[1], chain_slots, C_N, chain_off) < 0) return NULL;
    Py_XSETREF(msg_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(chain_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(dedup, Py_NewRef(args[2]));
    Py_XSETREF(waiting, Py_NewRef(args[3]));
    Py_XSETREF(heappush, Py_NewRef(args[4]));
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL) return NULL;
    if (str_append == NULL && (str_append = PyUnicode_InternFromString("append")) == NULL) return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the offer */
typedef struct {
    PyObject *delivery;
    long long seq, blocked;
    PyObject *counts, *delta_ctx;  /* _ctx_count; the context the pending delta is for */
    long long delta;
} Ints;

static int set_ll(PyObject *obj, const char *name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int r = PyObject_SetAttrString(obj, name, o);
    Py_DECREF(o);
    return r;
}

/* the changed counters back into the delivery object (before Python runs, and at the end) */
static int flush(Ints *s) {
    if (set_ll(s->delivery, "_seq", s->seq) < 0 || set_ll(s->delivery, "_blocked", s->blocked) < 0) return -1;
    if (s->delta) {
        PyObject *n = PyDict_GetItemWithError(s->counts, s->delta_ctx);  /* borrowed */
        if (n == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "_fast_offer: context count vanished");
            return -1;
        }
        long long v = PyLong_AsLongLong(n);
        if (v == -1 && PyErr_Occurred()) return -1;
        PyObject *o = PyLong_FromLongLong(v + s->delta);
        if (o == NULL || PyDict_SetItem(s->counts, s->delta_ctx, o) < 0) {
            Py_XDECREF(o);
            return -1;
        }
        Py_DECREF(o);
        s->delta = 0;
    }
    return 0;
}

static int get_ll(PyObject *obj, const char *name, long long *out) {
    PyObject *o = PyObject_GetAttrString(obj, name);
    if (o == NULL) return -1;
    *out = PyLong_AsLongLong(o);
    Py_DECREF(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* is ``headers`` none at all, or the dedup id alone? (then the record reads as plain) */
static int plain_headers(PyObject *headers) {
    if (headers == Py_None) return 1;
    Py_ssize_t n = PyObject_Length(headers);
    if (n < 0) return -1;
    if (n == 0) return 1;
    if (n != 1 || !PyTuple_Check(headers)) return 0;
    PyObject *h = PyTuple_GET_ITEM(headers, 0);
    if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) < 1) return 0;
    return PyObject_RichCompareBool(PyTuple_GET_ITEM(h, 0), dedup, Py_EQ);
}

static PyObject *offer_cached(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "offer_cached(entries, pp, ctx_id, stream, cache_data, delivery, cutoff, mask, plain_vps)");
        return NULL;
    }
    if (msg_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fast_offer.bind was not called");
        return NULL;
    }
    PyObject *it = args[0], *pp = args[1], *ctx_id = args[2], *stream = args[3], *cache = args[4];
    PyObject *delivery = args[5], *cutoff = args[6], *plain_vps = args[8];
    unsigned long long vp_mask = PyLong_Check(args[7]) ? PyLong_AsUnsignedLongLongMask(args[7]) : 0;
    if (!PyIter_Check(it) || !PyDict_Check(cache) || !PyLong_Check(pp) || !PyLong_Check(ctx_id)
        || (cutoff != Py_None && !PyLong_Check(cutoff)) || !PyLong_Check(args[7])
        || (plain_vps != Py_None && !PyAnySet_Check(plain_vps))) {
        PyErr_SetString(PyExc_TypeError, "offer_cached: an iterator, int pp and ctx_id and a dict expected");
        return NULL;
    }
    PyObject *key_order = NULL, *parked = NULL, *cfg = NULL, *chains = NULL, *msgs = NULL, *dead_u = NULL;
    PyObject *dead_t = NULL, *tracker = NULL, *parts = NULL, *unroutable = NULL, *make_ready = NULL;
    PyObject *mab = NULL, *memo = NULL, *memo_ctx = NULL, *item = NULL, *out = NULL;
    PyObject *part = NULL, *done = NULL, *unfinished = NULL, *live = NULL, *heap = NULL;
    long long ingested = 0, cursor = -1, inflight = 0, key_ra = 0, blocked_ra = 0, max_unacked = 0;
    long long scanned = 0, unroutable_held = 0;
    int usable = 1, ctx_known = 0, ctx_unroutable = 0;
    Ints s = {delivery, 0, 0, NULL, NULL, 0};

    if ((key_order = PyObject_GetAttrString(delivery, "_key_order")) == NULL
        || (parked = PyObject_GetAttrString(delivery, "_parked")) == NULL
        || (cfg = PyObject_GetAttrString(delivery, "_config")) == NULL
        || (mab = PyObject_GetAttrString(cfg, "max_acked_above")) == NULL)
        goto fail;
    if (PyObject_IsTrue(parked) != 0 || mab != Py_None) usable = 0;
    if (!usable) {
        if ((item = PyIter_Next(it)) == NULL && PyErr_Occurred()) goto fail;
        goto done;
    }
    int ordered = PyObject_IsTrue(key_order);
    if (ordered < 0) goto fail;
    if ((chains = PyObject_GetAttrString(delivery, "_chains")) == NULL
        || (msgs = PyObject_GetAttrString(delivery, "_msgs")) == NULL
        || (dead_u = PyObject_GetAttrString(delivery, "_dead_untaken")) == NULL
        || (dead_t = PyObject_GetAttrString(delivery, "_dead_taken")) == NULL
        || (tracker = PyObject_GetAttrString(delivery, "_tracker")) == NULL
        || (parts = PyObject_GetAttrString(tracker, "_parts")) == NULL
        || (unroutable = PyObject_GetAttrString(delivery, "_unroutable")) == NULL
        || (s.counts = PyObject_GetAttrString(delivery, "_ctx_count")) == NULL
        || (memo = PyDict_New()) == NULL)
        goto fail;
    if (!PyDict_Check(chains) || !PyDict_Check(msgs) || !PyDict_Check(dead_u) || !PyDict_Check(dead_t)
        || !PyDict_Check(parts) || !PyDict_Check(s.counts) || !PyAnySet_Check(unroutable)) {
        PyErr_SetString(PyExc_TypeError, "offer_cached: the delivery state is not what it knows");
        goto fail;
    }
    if (get_ll(delivery, "_seq", &s.seq) < 0 || get_ll(delivery, "_blocked", &s.blocked) < 0
        || get_ll(delivery, "_unroutable_held", &unroutable_held) < 0
        || get_ll(delivery, "_inflight", &inflight) < 0 || get_ll(cfg, "key_read_ahead", &key_ra) < 0
        || get_ll(cfg, "blocked_read_ahead", &blocked_ra) < 0 || get_ll(cfg, "max_unacked", &max_unacked) < 0)
        goto fail;
    part = PyDict_GetItemWithError(parts, stream);  /* borrowed */
    if (part == NULL) {
        if (PyErr_Occurred()) goto fail;
    } else {
        Py_INCREF(part);
        if ((done = PyObject_GetAttrString(part, "done")) == NULL
            || (unfinished = PyObject_GetAttrString(part, "unfinished")) == NULL
            || (live = PyObject_GetAttrString(unfinished, "_live")) == NULL
            || (heap = PyObject_GetAttrString(unfinished, "_heap")) == NULL || get_ll(part, "scanned", &scanned) < 0)
            goto fail;
        if (!PySet_Check(live) || !PyList_Check(heap)) {
            PyErr_SetString(PyExc_TypeError, "offer_cached: the tracker state is not what it knows");
            goto fail;
        }
    }

    for (;;) {
        item = PyIter_Next(it);
        if (item == NULL) {
            if (PyErr_Occurred()) goto fail;
            break;
        }
        if (part == NULL || !PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) goto stop;
        PyObject *offset = PyTuple_GET_ITEM(item, 0), *ref = PyTuple_GET_ITEM(item, 1);
        if (!PyLong_Check(offset) || !PyLong_Check(ref)) goto stop;
        long long off = PyLong_AsLongLong(offset);
        if (off == -1 && PyErr_Occurred()) goto fail;
        if (off < scanned) goto stop;  /* track_new's parked and restored cases */
        unsigned long long kh = PyLong_AsUnsignedLongLongMask(ref) & 0xFFFFFFFFULL;
        if (plain_vps != Py_None) {  /* lineage order: the general path checks other vps */
            PyObject *vp = PyLong_FromUnsignedLongLong(kh & vp_mask);
            int in = vp == NULL ? -1 : PySet_Contains(plain_vps, vp);
            Py_XDECREF(vp);
            if (in < 0) goto fail;
            if (!in) goto stop;
        }
        PyObject *pos = PyTuple_Pack(2, pp, offset);
        if (pos == NULL) goto fail;
        PyObject *cached = PyDict_GetItemWithError(cache, pos);  /* borrowed */
        if (cached == NULL || !PyTuple_Check(cached) || PyTuple_GET_SIZE(cached) < 1) {
            Py_DECREF(pos);
            if (PyErr_Occurred()) goto fail;
            goto stop;
        }
        PyObject *r = PyTuple_GET_ITEM(cached, 0);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < 12) {
            Py_DECREF(pos);
            goto stop;
        }
        PyObject *ctx = PyTuple_GET_ITEM(r, 1), *key = PyTuple_GET_ITEM(r, 3), *ts = PyTuple_GET_ITEM(r, 6);
        int plain = plain_headers(PyTuple_GET_ITEM(r, 5));
        if (plain > 0 && cutoff != Py_None && ts != Py_None) {  /* expired: the general path counts it */
            int below = PyObject_RichCompareBool(ts, cutoff, Py_LT);
            plain = below < 0 ? -1 : !below;
        }
        if (plain <= 0) {
            Py_DECREF(pos);
            if (plain < 0) goto fail;
            goto stop;
        }
        if (ctx != memo_ctx) {  /* a context of its own: its chains, count and routing */
            if (flush(&s) < 0) {
                Py_DECREF(pos);
                goto fail;
            }
            PyDict_Clear(memo);
            Py_XSETREF(memo_ctx, Py_NewRef(ctx));
            int known = PyDict_Contains(s.counts, ctx);
            int unr = PySet_GET_SIZE(unroutable) ? PySet_Contains(unroutable, ctx) : 0;
            if (known < 0 || unr < 0) {
                Py_DECREF(pos);
                goto fail;
            }
            ctx_known = known;
            ctx_unroutable = unr;
            s.delta_ctx = memo_ctx;
        }
        if (!ctx_known || ctx_unroutable) {  /* a context new to the group (or, against the
                                                 caller's word, one nobody takes): the general path */
            Py_DECREF(pos);
            goto stop;
        }
        /* ---- offer_routed */
        PyObject *chain = NULL;  /* borrowed (memo) */
        PyObject *chain_key = NULL;
        Py_ssize_t run_len = 0;
        int keyed = ordered && key != Py_None;
        if (keyed) {
            chain = PyDict_GetItemWithError(memo, key);
            if (chain == NULL) {
                if (PyErr_Occurred()) {
                    Py_DECREF(pos);
                    goto fail;
                }
                chain_key = PyTuple_Pack(2, key, ctx);
                if (chain_key == NULL) {
                    Py_DECREF(pos);
                    goto fail;
                }
                chain = PyDict_GetItemWithError(chains, chain_key);
                if (chain == NULL && PyErr_Occurred()) goto fail_ck;
                if (PyDict_SetItem(memo, key, chain == NULL ? Py_None : chain) < 0) goto fail_ck;
            }
            if (chain == Py_None) chain = NULL;
            if (chain != NULL) {
                if (Py_TYPE(chain) != chain_type) goto stop_ck;
                Py_ssize_t pending_len = PyObject_Length(SLOT(chain, chain_off[C_PENDING]));
                PyObject *run = SLOT(chain, chain_off[C_RUN]);
                if (pending_len < 0) goto fail_ck;
                if (!PyDict_Check(run)) goto stop_ck;
                run_len = PyDict_GET_SIZE(run);
                if (pending_len >= key_ra) goto stop_ck;                      /* PARK */
                if (run_len && s.blocked >= blocked_ra) goto stop_ck;          /* PARK */
            }
        }
        if ((chain == NULL || !run_len)
            && PyDict_GET_SIZE(msgs) - inflight - s.blocked - unroutable_held >= max_unacked)
            goto stop_ck;  /* PAUSE */
        int seen = PyDict_Contains(msgs, pos);
        if (!seen && PyDict_GET_SIZE(dead_u)) seen = PyDict_Contains(dead_u, pos);
        if (!seen && PyDict_GET_SIZE(dead_t)) seen = PyDict_Contains(dead_t, pos);
        if (seen < 0) goto fail_ck;
        if (!seen) {  /* track_new(stream, offset, key_hash) for an offset at or above the scan */
            Py_ssize_t nd = PyObject_Length(done);
            if (nd < 0) goto fail_ck;
            if (nd) {
                seen = PySequence_Contains(done, offset);
                if (seen < 0) goto fail_ck;
            }
        }
        if (seen) goto stop_ck;  /* known or done (a re-read): the general path skips it */
        int tracked = PySet_Contains(live, offset);
        if (tracked < 0) goto fail_ck;
        if (!tracked) {
            if (PySet_Add(live, offset) < 0) goto fail_ck;
            PyObject *pushed = PyObject_CallFunctionObjArgs(heappush, heap, offset, NULL);
            if (pushed == NULL) goto fail_ck;
            Py_DECREF(pushed);
        }
        /* ---- _add */
        PyObject *key_hash = PyLong_FromUnsignedLongLong(kh);
        if (key_hash == NULL) goto fail_ck;
        if (keyed && chain == NULL) {  /* the key's first message here: a new Chain */
            if (chain_key == NULL && (chain_key = PyTuple_Pack(2, key, ctx)) == NULL) {
                Py_DECREF(key_hash);
                goto fail_ck;
            }
            PyObject *parked_key = PyTuple_Pack(2, ctx_id, key_hash);
            PyObject *made = NULL;
            if (parked_key != NULL && flush(&s) == 0)
                made = PyObject_CallFunctionObjArgs((PyObject *)chain_type, chain_key, parked_key, NULL);
            Py_XDECREF(parked_key);
            if (made == NULL || PyDict_SetItem(chains, chain_key, made) < 0 || PyDict_SetItem(memo, key, made) < 0) {
                Py_XDECREF(made);
                Py_DECREF(key_hash);
                goto fail_ck;
            }
            Py_DECREF(made);
            chain = made;  /* borrowed from the memo */
        }
        Py_XDECREF(chain_key);
        chain_key = NULL;
        PyObject *msg = msg_type->tp_alloc(msg_type, 0);
        PyObject *seq = PyLong_FromLongLong(s.seq);
        if (msg == NULL || seq == NULL) {
            Py_XDECREF(msg);
            Py_XDECREF(seq);
            Py_DECREF(key_hash);
            Py_DECREF(pos);
            goto fail;
        }
        int ts_zero = ts == Py_None ? 1 : PyObject_Not(ts);
        if (ts_zero < 0) {
            Py_DECREF(msg);
            Py_DECREF(seq);
            Py_DECREF(key_hash);
            Py_DECREF(pos);
            goto fail;
        }
        SLOT(msg, msg_off[M_SEQ]) = seq;
        SLOT(msg, msg_off[M_PP]) = Py_NewRef(pp);
        SLOT(msg, msg_off[M_OFFSET]) = Py_NewRef(offset);
        SLOT(msg, msg_off[M_KEY_HASH]) = key_hash;
        SLOT(msg, msg_off[M_KEY]) = Py_NewRef(key);
        SLOT(msg, msg_off[M_CTX]) = Py_NewRef(ctx);
        SLOT(msg, msg_off[M_TIMESTAMP_MS]) = Py_NewRef(ts_zero ? zero : ts);
        SLOT(msg, msg_off[M_CTX_ID]) = Py_NewRef(ctx_id);
        SLOT(msg, msg_off[M_PRIORITY]) = Py_NewRef(zero);
        SLOT(msg, msg_off[M_STREAM]) = Py_NewRef(stream);
        SLOT(msg, msg_off[M_POS]) = pos;  /* the reference taken by PyTuple_Pack */
        SLOT(msg, msg_off[M_CHAIN]) = Py_NewRef(chain == NULL ? Py_None : chain);
        SLOT(msg, msg_off[M_STATE]) = Py_NewRef(waiting);
        SLOT(msg, msg_off[M_HOLDER]) = Py_NewRef(Py_None);
        SLOT(msg, msg_off[M_COUNT]) = Py_NewRef(zero);
        SLOT(msg, msg_off[M_DUE]) = Py_NewRef(Py_None);
        SLOT(msg, msg_off[M_TIMER]) = Py_NewRef(Py_None);
        s.seq++;
        if (PyDict_SetItem(msgs, pos, msg) < 0) {
            Py_DECREF(msg);
            goto fail;
        }
        s.delta++;
        int ready = 0;
        if (chain == NULL) {
            ready = 1;
        } else {
            PyObject *pending = SLOT(chain, chain_off[C_PENDING]);
            PyObject *r2 = PyObject_CallMethodOneArg(pending, str_append, msg);
            if (r2 == NULL) {
                Py_DECREF(msg);
                goto fail;
            }
            Py_DECREF(r2);
            Py_ssize_t n_pending = PyObject_Length(pending);
            long long counted = PyLong_AsLongLong(SLOT(chain, chain_off[C_COUNTED]));
            if (n_pending < 0 || (counted == -1 && PyErr_Occurred())) {
                Py_DECREF(msg);
                goto fail;
            }
            long long now_counted = counted;
            if (run_len) {
                s.blocked += n_pending - counted;
                now_counted = n_pending;
            } else {
                ready = n_pending == 1;
                if (counted) {
                    s.blocked -= counted;
                    now_counted = 0;
                }
            }
            if (now_counted != counted) {
                PyObject *c = PyLong_FromLongLong(now_counted);
                if (c == NULL) {
                    Py_DECREF(msg);
                    goto fail;
                }
                Py_SETREF(SLOT(chain, chain_off[C_COUNTED]), c);
            }
        }
        if (ready) {
            if (make_ready == NULL && (make_ready = PyObject_GetAttrString(delivery, "_make_ready")) == NULL) {
                Py_DECREF(msg);
                goto fail;
            }
            PyObject *r3 = flush(&s) < 0 ? NULL : PyObject_CallOneArg(make_ready, msg);
            if (r3 == NULL) {
                Py_DECREF(msg);
                goto fail;
            }
            Py_DECREF(r3);
        }
        Py_DECREF(msg);
        ingested++;
        cursor = off + 1;
        Py_CLEAR(item);
        continue;
    stop_ck:
        Py_XDECREF(chain_key);
        Py_DECREF(pos);
    stop:
        break;  /* item: the entry handed back */
    fail_ck:
        Py_XDECREF(chain_key);
        Py_DECREF(pos);
        goto fail;
    }
done:
    if (usable && flush(&s) < 0) goto fail;
    {
        PyObject *cur = cursor < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(cursor);
        if (cur != NULL)
            out = Py_BuildValue("(LNOO)", ingested, cur, item == NULL ? Py_None : item,
                                usable ? Py_True : Py_False);
    }
    goto cleanup;
fail:
    if (usable && s.counts != NULL) {  /* keep what was done consistent; the error stands */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (flush(&s) < 0) PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    out = NULL;
cleanup:
    Py_XDECREF(item);
    Py_XDECREF(key_order);
    Py_XDECREF(parked);
    Py_XDECREF(cfg);
    Py_XDECREF(mab);
    Py_XDECREF(chains);
    Py_XDECREF(msgs);
    Py_XDECREF(dead_u);
    Py_XDECREF(dead_t);
    Py_XDECREF(tracker);
    Py_XDECREF(parts);
    Py_XDECREF(unroutable);
    Py_XDECREF(s.counts);
    Py_XDECREF(make_ready);
    Py_XDECREF(memo);
    Py_XDECREF(memo_ctx);
    Py_XDECREF(part);
    Py_XDECREF(done);
    Py_XDECREF(unfinished);
    Py_XDECREF(live);
    Py_XDECREF(heap);
    return out;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(msg_type, chain_type, dedup, waiting, heappush)"},
    {"offer_cached", (PyCFunction)(void (*)(void))offer_cached, METH_FASTCALL,
     "offer_cached(entries, pp, ctx_id, stream, cache_data, delivery, cutoff, mask, plain_vps)"
     " -> (ingested, cursor, entry, usable)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_offer", "The ingest scan's usual records offered in one call (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__fast_offer(void) { return PyModule_Create(&module); }
