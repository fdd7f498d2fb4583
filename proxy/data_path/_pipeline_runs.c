/* The request pipeline's two hot loops, compiled: RequestPipeline._forward_plain_in_python and
 * _answers_plain_in_python of proxy/data_path/request_pipeline.py, the run of requests forwarded as they are
 * and the run of answers sent on as they come, with what they call of the pipeline's own (`_expect` for a
 * request forwarded as it is, `_respond` for an answer with no delay of its own) written out inline.
 *
 * Why C: these loops and those two methods run once per request and once per answer, and in Python their
 * own work (the loop, the pipeline's state, the in-flight entry, the FIFO's checks) costs ~0.4 us an
 * exchange beside the filters and collaborators they call (docs/architecture.md, "Compiled readers").
 * The filters, the metrics, the sink and the gate are still called, as Python calls them.
 * The Python methods stay the reference and run where this module was not built; these are their
 * line-by-line translation: the same attributes read in the same order (the pipeline's slots are read
 * where the Python reads them, each time), the same calls with the same arguments, the same comparisons of
 * Python objects, the same objects handed back (the pipeline's own tests run on both twins:
 * tests/proxy/conftest.py's `both_runs`; tests/proxy/test_pipeline_runs.py compares them on random
 * traffic).
 *
 * The in-flight entry is made as the Python makes it (tuple.__new__(InFlight, fields)): bind() checks that
 * InFlight is a tuple subclass of 7 fields. A frame's correlation id is read from its buffer as the
 * Python's `INT32_UNPACK(frame, 4)` reads it (big-endian int32), the buffer released at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../_compiled.h"

/* What bind() hands over once, from request_pipeline.py. */
static PyObject *parse_request_header = NULL;
static PyObject *produce_acks = NULL;
static PyObject *open_state = NULL;   /* Lifecycle.OPEN */
static PyObject *forwarded = NULL;    /* EntryKind.FORWARDED */
static PyObject *answered = NULL;     /* EntryKind.ANSWERED */
static PyTypeObject *in_flight_type = NULL;
static PyObject *respond_type = NULL;
static PyObject *produce_key = NULL;  /* ApiKey.PRODUCE */
static PyObject *counted_min_bytes = NULL;
/* What bind_metrics() hands over once: observability.metrics' ProxyMetrics and OTHER_SLOT. */
static PyTypeObject *metrics_type = NULL;
static PyObject *other_slot = NULL;
static long other_slot_value = 0;

static PyObject *s_gate, *s_filters, *s_on_request, *s_on_response, *s_state, *s_muted, *s_raw_exchange,
    *s_metrics, *s_count_request, *s_count_response, *s_api_key, *s_correlation_id, *s_sent_acks0,
    *s_in_flight, *s_append, *s_outgoing, *s_kind, *s_header, *s_popleft, *s_load, *s_give, *s_frame,
    *s_delay_ms, *s_throttle_ms, *s_response_sent, *s_sink, *s_send_response, *s_requests, *s_request_bytes,
    *s_responses, *s_response_bytes;
static PyObject *zero = NULL, *one = NULL;
/* Read at their offsets and indices (../_compiled.h): RequestPipeline's slots and the gate's (bind), the
 * in-flight entries' and request headers' fields (bind), ProxyMetrics' lists (bind_metrics). */
static slot_t pipeline_gate, pipeline_filters, pipeline_state, pipeline_raw_exchange, pipeline_metrics,
    pipeline_in_flight, pipeline_outgoing, pipeline_load, pipeline_sink, gate_muted, metrics_requests,
    metrics_request_bytes, metrics_responses, metrics_response_bytes;
static field_t entry_header, entry_kind, entry_throttle_ms, entry_load, header_api_key, header_correlation_id;

#define IN_FLIGHT_FIELDS 7

static int
bound(void)
{
    if (parse_request_header == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pipeline runs used before bind()");
        return 0;
    }
    return 1;
}

/* A run's arguments (pipeline, frames, i): i read as an index; 0, or -1 with an exception. */
static int
run_arguments(const char *signature, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *i)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s", signature);
        return -1;
    }
    if (!bound()) {
        return -1;
    }
    *i = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    return *i == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
call_method2(PyObject *self, PyObject *name, PyObject *a, PyObject *b)
{
    PyObject *args[4] = {NULL, self, a, b};
    return PyObject_VectorcallMethod(name, args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *
call2(PyObject *callable, PyObject *a, PyObject *b)
{
    PyObject *args[3] = {NULL, a, b};
    return PyObject_Vectorcall(callable, args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* `value > 0` as Python compares: 1, 0, -1 with an exception. */
static int
positive(PyObject *value)
{
    return PyObject_RichCompareBool(value, zero, Py_GT);
}

/* `self.<name>.<method>(a, b)`, the attribute read anew as the Python reads it. */
static int
call_on_attribute(PyObject *self, const slot_t *slot, PyObject *method, PyObject *a, PyObject *b)
{
    PyObject *target = slot_get(self, slot);
    if (target == NULL) {
        return -1;
    }
    int failed = done_with(call_method2(target, method, a, b));
    Py_DECREF(target);
    return failed;
}

/* `items[slot] += value` made in C: 1 when it was (a list, an int index within it, an int count and an int
 * value whose sum fits a C long: every count the metrics keep), 0 when Python's addition must make it
 * (nothing changed), -1 with an exception set. The generic get, in-place add and set cost ~550 instructions. */
static int
add_exact(PyObject *items, PyObject *slot, PyObject *value)
{
    long at, before, add, sum;
    if (!PyList_CheckExact(items) || !exact_long(slot, &at) || at < 0 || at >= PyList_GET_SIZE(items) ||
        !exact_long(PyList_GET_ITEM(items, at), &before) || !exact_long(value, &add) ||
        __builtin_add_overflow(before, add, &sum)) {
        return 0;
    }
    PyObject *after = PyLong_FromLong(sum);
    if (after == NULL) {
        return -1;
    }
    PyObject *old = PyList_GET_ITEM(items, at);
    PyList_SET_ITEM(items, at, after); /* (nothing since the size check ran Python) */
    Py_DECREF(old);
    return 1;
}

/* `target.<name>[slot] += value` */
static int
add_at(PyObject *target, const slot_t *list, PyObject *slot, PyObject *value)
{
    PyObject *items = slot_get(target, list);
    if (items == NULL) {
        return -1;
    }
    int added = add_exact(items, slot, value);
    if (added != 0) {
        Py_DECREF(items);
        return added < 0 ? -1 : 0;
    }
    PyObject *before = PyObject_GetItem(items, slot);
    PyObject *after = before == NULL ? NULL : PyNumber_InPlaceAdd(before, value);
    int failed = after == NULL ? -1 : PyObject_SetItem(items, slot, after);
    Py_XDECREF(before);
    Py_XDECREF(after);
    Py_DECREF(items);
    return failed;
}

/* metrics.count_request(key, size) (`counts` s_requests, `sizes` s_request_bytes, `method` s_count_request)
 * or count_response: for an exact ProxyMetrics and an int key (what the header parse gives), the method's
 * body written out (`slot = api_key if 0 <= api_key < OTHER_SLOT else OTHER_SLOT`, then each list's item
 * at the slot added to), else the method called. Written out means read once: a method patched on the
 * class, or OTHER_SLOT rebound, after bind_metrics is not seen (a subclass's own methods are called). */
static int
count(PyObject *metrics, PyObject *method, const slot_t *counts, const slot_t *sizes, PyObject *key,
      PyObject *size)
{
    if (metrics_type == NULL || !Py_IS_TYPE(metrics, metrics_type) || !PyLong_CheckExact(key)) {
        return done_with(call_method2(metrics, method, key, size));
    }
    int overflow;
    long value = PyLong_AsLongAndOverflow(key, &overflow);
    PyObject *slot = !overflow && 0 <= value && value < other_slot_value ? key : other_slot;
    if (add_at(metrics, counts, slot, one) < 0) {
        return -1;
    }
    return add_at(metrics, sizes, slot, size);
}

/* `size - 4` */
static PyObject *
less_prefix(Py_ssize_t size)
{
    return PyLong_FromSsize_t(size - 4);
}

/* tuple.__new__(InFlight, (header, FORWARDED, 0, None, 0, None, 0)) */
static PyObject *
forwarded_entry(PyObject *header)
{
    PyObject *entry = in_flight_type->tp_alloc(in_flight_type, IN_FLIGHT_FIELDS);
    if (entry == NULL) {
        return NULL;
    }
    PyObject *fields[IN_FLIGHT_FIELDS] = {header, forwarded, zero, Py_None, zero, Py_None, zero};
    for (Py_ssize_t k = 0; k < IN_FLIGHT_FIELDS; k++) {
        PyTuple_SET_ITEM(entry, k, Py_NewRef(fields[k]));
    }
    return entry;
}

/* RequestPipeline._expect(header, frame, size, 0, 0, None): counted, and expected in turn unless an acks=0
 * Produce (remembered instead). */
static int
expect_forwarded(PyObject *pipeline, PyObject *header, PyObject *frame, Py_ssize_t size)
{
    /* self._metrics.count_request(header.api_key, size - 4) */
    PyObject *metrics = slot_get(pipeline, &pipeline_metrics);
    if (metrics == NULL) {
        return -1;
    }
    PyObject *key = field_get(header, &header_api_key);
    PyObject *counted = key == NULL ? NULL : less_prefix(size);
    int failed = counted == NULL ? -1
                                 : count(metrics, s_count_request, &metrics_requests, &metrics_request_bytes, key,
                                         counted);
    Py_DECREF(metrics);
    Py_XDECREF(counted);
    Py_XDECREF(key);
    if (failed) {
        return -1;
    }
    /* if header.api_key == _PRODUCE and produce_acks(frame, header) == 0: self._sent_acks0(...) */
    key = field_get(header, &header_api_key);
    if (key == NULL) {
        return -1;
    }
    int produce = PyObject_RichCompareBool(key, produce_key, Py_EQ);
    Py_DECREF(key);
    if (produce < 0) {
        return -1;
    }
    if (produce) {
        PyObject *acks = call2(produce_acks, frame, header);
        if (acks == NULL) {
            return -1;
        }
        int none = PyObject_RichCompareBool(acks, zero, Py_EQ);
        Py_DECREF(acks);
        if (none < 0) {
            return -1;
        }
        if (none) {
            PyObject *correlation_id = field_get(header, &header_correlation_id);
            if (correlation_id == NULL) {
                return -1;
            }
            failed = done_with(call_method1(pipeline, s_sent_acks0, correlation_id));
            Py_DECREF(correlation_id);
            return failed;
        }
    }
    /* self._in_flight.append(entry); a throttle of 0 asks nothing of the gate */
    PyObject *entry = forwarded_entry(header);
    if (entry == NULL) {
        return -1;
    }
    PyObject *in_flight = slot_get(pipeline, &pipeline_in_flight);
    failed = in_flight == NULL ? -1 : done_with(call_method1(in_flight, s_append, entry));
    Py_XDECREF(in_flight);
    Py_DECREF(entry);
    return failed;
}

/* `self.state is not _OPEN or gate.muted or self._raw_exchange is not None`: 1 stop, 0 go on, -1 error. */
static int
must_stop(PyObject *pipeline, PyObject *gate)
{
    PyObject *state = slot_get(pipeline, &pipeline_state);
    if (state == NULL) {
        return -1;
    }
    Py_DECREF(state); /* compared by identity only; the pipeline keeps it */
    if (state != open_state) {
        return 1;
    }
    PyObject *muted = slot_get(gate, &gate_muted);
    if (muted == NULL) {
        return -1;
    }
    int is_muted = PyObject_IsTrue(muted);
    Py_DECREF(muted);
    if (is_muted != 0) {
        return is_muted;
    }
    PyObject *raw = slot_get(pipeline, &pipeline_raw_exchange);
    if (raw == NULL) {
        return -1;
    }
    Py_DECREF(raw);
    return raw != Py_None;
}

static PyObject *
forward_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (run_arguments("forward_plain(pipeline, frames, i)", args, nargs, &i) < 0) {
        return NULL;
    }
    PyObject *pipeline = args[0], *frames = args[1];
    Py_ssize_t count = PyObject_Size(frames);
    if (count < 0) {
        return NULL;
    }
    PyObject *gate = slot_get(pipeline, &pipeline_gate);
    if (gate == NULL) {
        return NULL;
    }
    /* filters.on_request called as a method for each request, as the Python calls it: a bound method made once
     * a run costs more than the look-ups of the one or two requests a read brings as a rule. */
    PyObject *filters = slot_get(pipeline, &pipeline_filters);
    PyObject *result = NULL, *frame = NULL, *header = NULL, *out = NULL;
    if (filters == NULL) {
        goto done;
    }
    while (i < count) {
        int stop = must_stop(pipeline, gate);
        if (stop < 0) {
            goto done;
        }
        if (stop) {
            break;
        }
        frame = PySequence_GetItem(frames, i);
        if (frame == NULL) {
            goto done;
        }
        header = PyObject_Vectorcall(parse_request_header, &frame, 1, NULL);
        if (header == NULL) {
            goto done;
        }
        out = call_method2(filters, s_on_request, header, frame);
        if (out == NULL) {
            goto done;
        }
        Py_ssize_t size = PyObject_Size(frame);
        if (size < 0) {
            goto done;
        }
        int plain = Py_IS_TYPE(out, &PyMemoryView_Type);
        if (plain) {
            /* size < COUNTED_MIN_BYTES */
            PyObject *sized = PyLong_FromSsize_t(size);
            if (sized == NULL) {
                goto done;
            }
            plain = PyObject_RichCompareBool(sized, counted_min_bytes, Py_LT);
            Py_DECREF(sized);
            if (plain < 0) {
                goto done;
            }
        }
        if (!plain) {
            result = index_and(i, PyTuple_Pack(2, header, out));
            goto done;
        }
        if (expect_forwarded(pipeline, header, frame, size) < 0) {
            goto done;
        }
        /* self.outgoing.append(out) */
        PyObject *outgoing = slot_get(pipeline, &pipeline_outgoing);
        if (outgoing == NULL) {
            goto done;
        }
        int failed = PyList_CheckExact(outgoing) ? PyList_Append(outgoing, out)
                                                 : done_with(call_method1(outgoing, s_append, out));
        Py_DECREF(outgoing);
        if (failed) {
            goto done;
        }
        Py_CLEAR(frame);
        Py_CLEAR(header);
        Py_CLEAR(out);
        i++;
    }
    result = index_and(i, Py_NewRef(Py_None));
done:
    Py_XDECREF(frame);
    Py_XDECREF(header);
    Py_XDECREF(out);
    Py_XDECREF(filters);
    Py_DECREF(gate);
    return result;
}

/* `INT32_UNPACK(frame, 4)[0] != correlation_id` for a frame of 8 bytes or more: 1, 0, -1 with an error. */
static int
other_correlation_id(PyObject *frame, PyObject *correlation_id)
{
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (view.len < 8) { /* (len() said 8 or more: a frame whose len() is not its bytes' is refused) */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "a frame's buffer is shorter than its length");
        return -1;
    }
    const uint8_t *p = (const uint8_t *)view.buf + 4;
    int32_t id = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    PyBuffer_Release(&view);
    PyObject *read = PyLong_FromLong(id);
    if (read == NULL) {
        return -1;
    }
    int other = PyObject_RichCompareBool(read, correlation_id, Py_NE);
    Py_DECREF(read);
    return other;
}

/* `in_flight and in_flight[0].kind is <kind>`: 1, 0, -1 with an error. The oldest entry in *oldest (a new
 * reference, or NULL when there is none). */
static int
oldest_is(PyObject *in_flight, PyObject *kind, PyObject **oldest)
{
    *oldest = NULL;
    int any = PyObject_IsTrue(in_flight);
    if (any <= 0) {
        return any;
    }
    *oldest = PySequence_GetItem(in_flight, 0);
    if (*oldest == NULL) {
        return -1;
    }
    PyObject *its_kind = field_get(*oldest, &entry_kind);
    if (its_kind == NULL) {
        Py_CLEAR(*oldest);
        return -1;
    }
    Py_DECREF(its_kind); /* compared by identity only; the entry keeps it */
    return its_kind == kind;
}

/* RequestPipeline._respond(request, frame, 0). */
static int
respond(PyObject *pipeline, PyObject *request, PyObject *frame)
{
    /* if request.load and self.load is not None: self.load.give(request.load) */
    PyObject *load = field_get(request, &entry_load);
    if (load == NULL) {
        return -1;
    }
    int holds = PyObject_IsTrue(load);
    Py_DECREF(load);
    if (holds < 0) {
        return -1;
    }
    if (holds) {
        PyObject *share = slot_get(pipeline, &pipeline_load);
        if (share == NULL) {
            return -1;
        }
        int failed = 0;
        if (share != Py_None) {
            Py_DECREF(share);
            share = slot_get(pipeline, &pipeline_load);
            load = share == NULL ? NULL : field_get(request, &entry_load);
            failed = load == NULL ? -1 : done_with(call_method1(share, s_give, load));
            Py_XDECREF(load);
        }
        Py_XDECREF(share);
        if (failed) {
            return -1;
        }
    }
    /* out = self._filters.on_response(request, frame) */
    PyObject *filters = slot_get(pipeline, &pipeline_filters);
    if (filters == NULL) {
        return -1;
    }
    PyObject *out = call_method2(filters, s_on_response, request, frame);
    Py_DECREF(filters);
    if (out == NULL) {
        return -1;
    }
    PyObject *sent, *delay;
    int is = (Py_IS_TYPE(out, &PyMemoryView_Type) || PyBytes_CheckExact(out))
                 ? 0
                 : PyObject_IsInstance(out, respond_type);
    if (is < 0) {
        Py_DECREF(out);
        return -1;
    }
    if (is) {
        /* frame = out.frame; delay_ms = max(0, out.delay_ms) */
        sent = PyObject_GetAttr(out, s_frame);
        delay = sent == NULL ? NULL : PyObject_GetAttr(out, s_delay_ms);
        Py_DECREF(out);
        if (delay == NULL) {
            Py_XDECREF(sent);
            return -1;
        }
        int longer = positive(delay);
        if (longer <= 0) {
            Py_SETREF(delay, Py_NewRef(zero));
            if (longer < 0) {
                Py_DECREF(delay);
                Py_DECREF(sent);
                return -1;
            }
        }
    }
    else {
        sent = out;
        delay = Py_NewRef(zero);
    }
    int failed = -1;
    /* self._metrics.count_response(request.header.api_key, len(frame) - 4) */
    PyObject *header = field_get(request, &entry_header);
    PyObject *key = header == NULL ? NULL : field_get(header, &header_api_key);
    Py_XDECREF(header);
    if (key != NULL) {
        Py_ssize_t size = PyObject_Size(sent);
        PyObject *counted = size < 0 ? NULL : less_prefix(size);
        if (counted != NULL) {
            PyObject *metrics = slot_get(pipeline, &pipeline_metrics);
            failed = metrics == NULL ? -1
                                     : count(metrics, s_count_response, &metrics_responses, &metrics_response_bytes,
                                             key, counted);
            Py_XDECREF(metrics);
            Py_DECREF(counted);
        }
        Py_DECREF(key);
    }
    if (failed) {
        goto done;
    }
    /* if request.throttle_ms > 0: self._gate.response_sent() */
    failed = -1;
    PyObject *throttle = field_get(request, &entry_throttle_ms);
    if (throttle == NULL) {
        goto done;
    }
    int throttled = positive(throttle);
    Py_DECREF(throttle);
    if (throttled < 0) {
        goto done;
    }
    if (throttled) {
        PyObject *gate = slot_get(pipeline, &pipeline_gate);
        if (gate == NULL) {
            goto done;
        }
        PyObject *args[2] = {NULL, gate};
        int gone = done_with(
            PyObject_VectorcallMethod(s_response_sent, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
        Py_DECREF(gate);
        if (gone) {
            goto done;
        }
    }
    /* self._sink.send_response(frame, delay_ms) */
    failed = call_on_attribute(pipeline, &pipeline_sink, s_send_response, sent, delay);
done:
    Py_DECREF(sent);
    Py_DECREF(delay);
    return failed;
}

static PyObject *
answers_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (run_arguments("answers_plain(pipeline, frames, i)", args, nargs, &i) < 0) {
        return NULL;
    }
    PyObject *pipeline = args[0], *frames = args[1];
    PyObject *in_flight = slot_get(pipeline, &pipeline_in_flight);
    if (in_flight == NULL) {
        return NULL;
    }
    PyObject *result = NULL, *frame = NULL, *request = NULL;
    Py_ssize_t count = PyObject_Size(frames);
    if (count < 0) {
        goto done;
    }
    while (i < count) {
        frame = PySequence_GetItem(frames, i);
        if (frame == NULL) {
            goto done;
        }
        /* request = in_flight[0] if in_flight else None; the common case or stop */
        int common = oldest_is(in_flight, forwarded, &request);
        if (common < 0) {
            goto done;
        }
        if (common) {
            Py_ssize_t size = PyObject_Size(frame);
            if (size < 0) {
                goto done;
            }
            common = size >= 8;
        }
        if (common) {
            PyObject *header = field_get(request, &entry_header);
            PyObject *correlation_id = header == NULL ? NULL : field_get(header, &header_correlation_id);
            Py_XDECREF(header);
            if (correlation_id == NULL) {
                goto done;
            }
            int other = other_correlation_id(frame, correlation_id);
            Py_DECREF(correlation_id);
            if (other < 0) {
                goto done;
            }
            common = !other;
        }
        if (!common) {
            result = index_and(i, Py_NewRef(Py_False));
            goto done;
        }
        PyObject *args1[2] = {NULL, in_flight};
        if (done_with(PyObject_VectorcallMethod(s_popleft, args1 + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL))) {
            goto done;
        }
        if (respond(pipeline, request, frame) < 0) {
            goto done;
        }
        Py_CLEAR(frame);
        Py_CLEAR(request);
        i++;
        PyObject *next;
        int due = oldest_is(in_flight, answered, &next);
        Py_XDECREF(next);
        if (due < 0) {
            goto done;
        }
        if (due) {
            result = index_and(i, Py_NewRef(Py_True));
            goto done;
        }
    }
    result = index_and(i, Py_NewRef(Py_False));
done:
    Py_XDECREF(frame);
    Py_XDECREF(request);
    Py_DECREF(in_flight);
    return result;
}

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(parse_request_header, produce_acks, Lifecycle.OPEN, EntryKind.FORWARDED, "
                        "EntryKind.ANSWERED, InFlight, Respond, ApiKey.PRODUCE, COUNTED_MIN_BYTES, "
                        "RequestPipeline, ThrottleGate, RequestHeader)");
        return NULL;
    }
    PyObject *entry_type = args[5];
    if (!PyType_Check(entry_type) || !PyType_IsSubtype((PyTypeObject *)entry_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "InFlight must be a tuple type");
        return NULL;
    }
    PyObject *fields = PyObject_GetAttrString(entry_type, "_fields");
    if (fields == NULL) {
        return NULL;
    }
    Py_ssize_t field_count = PyObject_Size(fields);
    Py_DECREF(fields);
    if (field_count != IN_FLIGHT_FIELDS) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "InFlight has %zd fields, the compiled runs make %d", field_count,
                         IN_FLIGHT_FIELDS);
        }
        return NULL;
    }
    PyObject *pipeline = args[9], *gate = args[10], *header = args[11];
    const binding_t bindings[] = {
        {&pipeline_gate, NULL, pipeline, s_gate, NULL},
        {&pipeline_filters, NULL, pipeline, s_filters, NULL},
        {&pipeline_state, NULL, pipeline, s_state, NULL},
        {&pipeline_raw_exchange, NULL, pipeline, s_raw_exchange, NULL},
        {&pipeline_metrics, NULL, pipeline, s_metrics, NULL},
        {&pipeline_in_flight, NULL, pipeline, s_in_flight, NULL},
        {&pipeline_outgoing, NULL, pipeline, s_outgoing, NULL},
        {&pipeline_load, NULL, pipeline, s_load, NULL},
        {&pipeline_sink, NULL, pipeline, s_sink, NULL},
        {&gate_muted, NULL, gate, s_muted, NULL},
        {NULL, &entry_header, entry_type, s_header, NULL},
        {NULL, &entry_kind, entry_type, s_kind, NULL},
        {NULL, &entry_throttle_ms, entry_type, s_throttle_ms, NULL},
        {NULL, &entry_load, entry_type, s_load, NULL},
        {NULL, &header_api_key, header, s_api_key, NULL},
        {NULL, &header_correlation_id, header, s_correlation_id, NULL},
    };
    if (bind_all(bindings, sizeof bindings / sizeof bindings[0]) < 0) {
        return NULL;
    }
    Py_XSETREF(parse_request_header, Py_NewRef(args[0]));
    Py_XSETREF(produce_acks, Py_NewRef(args[1]));
    Py_XSETREF(open_state, Py_NewRef(args[2]));
    Py_XSETREF(forwarded, Py_NewRef(args[3]));
    Py_XSETREF(answered, Py_NewRef(args[4]));
    Py_XSETREF(in_flight_type, (PyTypeObject *)Py_NewRef(entry_type));
    Py_XSETREF(respond_type, Py_NewRef(args[6]));
    Py_XSETREF(produce_key, Py_NewRef(args[7]));
    Py_XSETREF(counted_min_bytes, Py_NewRef(args[8]));
    Py_RETURN_NONE;
}

/* bind_metrics(ProxyMetrics, OTHER_SLOT): the metrics whose counting the runs write out. */
static PyObject *
bind_metrics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind_metrics(ProxyMetrics, OTHER_SLOT)");
        return NULL;
    }
    long others = PyLong_AsLong(args[1]);
    if (others == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const binding_t lists[] = {
        {&metrics_requests, NULL, args[0], s_requests, NULL},
        {&metrics_request_bytes, NULL, args[0], s_request_bytes, NULL},
        {&metrics_responses, NULL, args[0], s_responses, NULL},
        {&metrics_response_bytes, NULL, args[0], s_response_bytes, NULL},
    };
    if (bind_all(lists, sizeof lists / sizeof lists[0]) < 0) {
        return NULL;
    }
    Py_XSETREF(metrics_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(other_slot, Py_NewRef(args[1]));
    other_slot_value = others;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"forward_plain", (PyCFunction)(void (*)(void))forward_plain, METH_FASTCALL,
     "RequestPipeline._forward_plain_in_python(pipeline, frames, i), compiled."},
    {"answers_plain", (PyCFunction)(void (*)(void))answers_plain, METH_FASTCALL,
     "RequestPipeline._answers_plain_in_python(pipeline, frames, i), compiled."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Hand over what the runs use of the pipeline's module (once, from request_pipeline.py)."},
    {"bind_metrics", (PyCFunction)(void (*)(void))bind_metrics, METH_FASTCALL,
     "Hand over the metrics type whose counting the runs write out (once, from request_pipeline.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pipeline_runs_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.data_path._pipeline_runs",
    "The request pipeline's hot loops, compiled (proxy/data_path/request_pipeline.py says what they are).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__pipeline_runs(void)
{
    INTERN(s_gate, "_gate");
    INTERN(s_filters, "_filters");
    INTERN(s_on_request, "on_request");
    INTERN(s_on_response, "on_response");
    INTERN(s_state, "state");
    INTERN(s_muted, "muted");
    INTERN(s_raw_exchange, "_raw_exchange");
    INTERN(s_metrics, "_metrics");
    INTERN(s_count_request, "count_request");
    INTERN(s_count_response, "count_response");
    INTERN(s_requests, "requests");
    INTERN(s_request_bytes, "request_bytes");
    INTERN(s_responses, "responses");
    INTERN(s_response_bytes, "response_bytes");
    INTERN(s_api_key, "api_key");
    INTERN(s_correlation_id, "correlation_id");
    INTERN(s_sent_acks0, "_sent_acks0");
    INTERN(s_in_flight, "_in_flight");
    INTERN(s_append, "append");
    INTERN(s_outgoing, "outgoing");
    INTERN(s_kind, "kind");
    INTERN(s_header, "header");
    INTERN(s_popleft, "popleft");
    INTERN(s_load, "load");
    INTERN(s_give, "give");
    INTERN(s_frame, "frame");
    INTERN(s_delay_ms, "delay_ms");
    INTERN(s_throttle_ms, "throttle_ms");
    INTERN(s_response_sent, "response_sent");
    INTERN(s_sink, "_sink");
    INTERN(s_send_response, "send_response");
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&pipeline_runs_module);
}
