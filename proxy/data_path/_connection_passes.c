/* The connection's passes over a read from either side, compiled: ClientSide's `upstream_data` (a broker's read),
 * `get_buffer` and `buffer_updated` (a client's read, into the read buffer it lends) and `send_response`
 * (proxy/data_path/connection.py, whose Python methods are the references: PASSES_IN_PYTHON).
 *
 * Why: a Fetch exchange went through a dozen Python frames of the connection, its splitter, its guard and its
 * pipeline (on the broker's side upstream_data, _pass, _take_responses, FrameSplitter.feed, broker_frames,
 * _flush and send_response, which the compiled answers run calls; on the client's get_buffer, buffer_updated,
 * _pass, _take_requests, feed, _after_step, settle, RequestGuard.after_feed and its pending_frame_bytes, and
 * _flush). Compiled, a read of whole frames runs none of them but the pipeline's own: the common case is done
 * here, and everything else is handed to the Python that does it, at the point where the Python would do it.
 * The slots of the connection, its splitters, its pipeline, gate and guard and the session settings are read at
 * their offsets (../_compiled.h), as the bytecode reads them; an object of another class by name.
 *
 * `upstream_data(data)` does what `_pass(_TAKE_RESPONSES, data, _BAD_RESPONSE_FRAME)` does, in the same order:
 * the read's time; the pass's start on `_pass_clock_ns` when `_cpu_time_needed()`; the splitter's `feed` (done
 * here when `data` is bytes and the splitter holds nothing: its whole frames through `_whole_frames`, the rest
 * through `FrameSplitter.keep_rest`, as `feed` does it; else `feed` itself); the guard's first answer; the
 * pipeline's first plain run (`_answers_plain`, read from request_pipeline at each pass, as the pipeline reads
 * it) and, when it stops short, `broker_frames` from there; then `_flush`, the pass's time, and `_after_pass`
 * when shutdown or a bad request frame put a close off. When the work raises, `_finish_failed_pass` does the
 * rest, as `_pass` does from its `except` on.
 *
 * `buffer_updated(nbytes)` does what its Python does around the same pass: a read of whole frames of lengths in
 * range, into a splitter that holds nothing, is split here and forwarded as `client_frames` forwards it: when
 * nothing is held or deferred, the pipeline's plain run (`_forward_plain`) runs here and, when it stops short,
 * `RequestPipeline.after_plain_forward` does the rest; else `client_frames` (a deferral waited for through
 * `_wait_for`). Any other read goes to `_take_requests` whole. The guard's `after_feed` runs unless
 * it has nothing to do (no frame being assembled, nothing reserved or waited for, the connection proven).
 * `get_buffer(sizehint)` lends the shared read buffer as its Python does (`buffer_in_use`, read at each call).
 *
 * `send_response(frame, delay_ms)` appends the frame to the pass's replies when it is not delayed and nothing
 * is held; anything else goes to the Python reference (which reads the same attributes again, none of which
 * has a side effect).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_compiled.h"

static PyObject *s_loop, *s_time, *s_last_activity, *s_cpu_time_needed, *s_responses, *s_guard, *s_awaiting_answer,
    *s_broker_answered, *s_pipeline, *s_broker_frames, *s_after_plain_run, *s_keep_rest, *s_feed, *s_outgoing,
    *s_upstream, *s_closed,
    *s_writelines, *s_replies, *s_transport, *s_cpu_ns, *s_state, *s_closing_after, *s_after_pass,
    *s_finish_failed_pass, *s_whole_frames, *s_answers_plain, *s_pass_clock_ns, *s_gate, *s_held_responses,
    *s_append, *s_buffered_bytes, *s_through_left, *s_through, *s_min_payload_bytes, *s_max_frame_bytes,
    *s_read_buffer, *s_no_buffer, *s_last_read, *s_toreadonly, *s_requests, *s_take_requests, *s_client_frames,
    *s_wait_for, *s_settle, *s_lent_from, *s_after_feed, *s_splitter,
    *s_pending_need, *s_reserved, *s_waiting, *s_proven, *s_settings, *s_buffer_in_use, *s_read_buffer_bytes,
    *s_read_buffer_slot, *s_held, *s_resume, *s_forward_plain, *s_after_plain_forward;
static PyObject *zero = NULL;

/* ClientSide's own slots, read as its bytecode reads them (an object of another class, a subclass among them,
 * by name) */
static slot_t client_loop, client_last_activity, client_cpu_time_needed, client_responses, client_guard,
    client_pipeline, client_upstream, client_closed, client_replies, client_transport, client_cpu_ns,
    client_closing_after, client_settings, client_read_buffer, client_last_read, client_requests, client_gate;
static slot_t splitter_buffered, splitter_through_left, splitter_through, splitter_min_payload, splitter_max_frame;
static slot_t splitter_lent_from, splitter_pending_need;
static slot_t pipeline_outgoing, pipeline_state, pipeline_held, pipeline_resume, gate_held, guard_awaiting, guard_splitter, guard_reserved,
    guard_waiting, guard_proven, settings_read_buffer;
/* What bind was handed: the modules' globals read at each pass, Lifecycle.DRAINING, and the references. */
static PyObject *frames_globals = NULL, *pipeline_globals = NULL, *connection_globals = NULL, *draining = NULL, *bad_response_frame = NULL, *bad_request_frame = NULL,
                *upstream_data_in_python = NULL, *send_response_in_python = NULL, *get_buffer_in_python = NULL,
                *buffer_updated_in_python = NULL;

static int
bound(void)
{
    if (upstream_data_in_python == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_connection_passes is not bound (connection.py binds it)");
        return 0;
    }
    return 1;
}

/* globals[name], borrowed; NULL with NameError when it is not there. */
static PyObject *
global(PyObject *globals, PyObject *name)
{
    PyObject *value = PyDict_GetItemWithError(globals, name);
    if (value == NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_NameError, "name %R is not defined", name);
    }
    return value;
}

/* globals[name](*args), the function read at each call, as the Python reads a global it calls: a new
 * reference, or NULL with an exception set. */
static PyObject *
call_global(PyObject *globals, PyObject *name, PyObject *const *args, size_t nargs)
{
    PyObject *function = global(globals, name);
    if (function == NULL) {
        return NULL;
    }
    Py_INCREF(function); /* (a call may rebind the global) */
    PyObject *out = PyObject_Vectorcall(function, args, nargs, NULL);
    Py_DECREF(function);
    return out;
}

/* `found`, a hot loop's (i, outcome), when it is a pair: else NULL with a TypeError naming `what`, `found`
 * given up either way when it is not returned (NULL passes an error on). */
static PyObject *
pair(PyObject *found, const char *what)
{
    if (found != NULL && (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2)) {
        Py_DECREF(found);
        PyErr_Format(PyExc_TypeError, "%s must return a pair", what);
        return NULL;
    }
    return found;
}

/* _whole_frames(view, 0, splitter.min_payload_bytes, splitter._max_frame_bytes, frames), as FrameSplitter.feed
 * calls it on a read into a splitter holding nothing: a new reference, or NULL with an exception set. */
static PyObject *
whole_frames(PyObject *splitter, PyObject *view, PyObject *frames)
{
    PyObject *min_payload = slot_get(splitter, &splitter_min_payload);
    PyObject *max_frame = min_payload == NULL ? NULL : slot_get(splitter, &splitter_max_frame);
    PyObject *found = NULL;
    if (max_frame != NULL) {
        PyObject *args[5] = {view, zero, min_payload, max_frame, frames};
        found = call_global(frames_globals, s_whole_frames, args, 5);
    }
    Py_XDECREF(min_payload);
    Py_XDECREF(max_frame);
    return found;
}

/* The truth of obj.<slot>: 1, 0, or -1 with an exception set. */
static int
slot_true(PyObject *obj, const slot_t *slot)
{
    PyObject *value = slot_get(obj, slot);
    int truth = value == NULL ? -1 : PyObject_IsTrue(value);
    Py_XDECREF(value);
    return truth;
}

/* An exact int that is 0. */
static int
is_zero(PyObject *value)
{
    long number;
    return value != NULL && exact_long(value, &number) && number == 0;
}

/* FrameSplitter.feed(data) for a splitter that holds nothing and is passing no frame through, `data` bytes:
 * its whole frames, and the rest kept by `keep_rest`. Anything else through `feed` itself. A new list, or NULL
 * with an exception set. */
static PyObject *
feed(PyObject *splitter, PyObject *data)
{
    int plain = PyBytes_CheckExact(data) && slot_reads(splitter, &splitter_buffered);
    if (plain) {
        /* if self._through_left: ... elif self.through: ...; if self.buffered_bytes: ... (none of them) */
        PyObject *through_left = slot_get(splitter, &splitter_through_left);
        PyObject *through = through_left == NULL ? NULL : slot_get(splitter, &splitter_through);
        PyObject *buffered = through == NULL ? NULL : slot_get(splitter, &splitter_buffered);
        plain = buffered != NULL && is_zero(through_left) && PyList_CheckExact(through) &&
                PyList_GET_SIZE(through) == 0 && is_zero(buffered);
        Py_XDECREF(through_left);
        Py_XDECREF(through);
        Py_XDECREF(buffered);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (!plain) {
        return call_method1(splitter, s_feed, data);
    }
    PyObject *view = PyMemoryView_FromObject(data);
    PyObject *frames = view == NULL ? NULL : PyList_New(0);
    PyObject *found = frames == NULL ? NULL : pair(whole_frames(splitter, view, frames), "_whole_frames");
    int failed = found == NULL;
    if (!failed) {
        /* if length is not None or pos < size: self.keep_rest(view, pos, length, False, frames) */
        PyObject *pos = PyTuple_GET_ITEM(found, 0), *length = PyTuple_GET_ITEM(found, 1);
        Py_ssize_t at = PyLong_AsSsize_t(pos);
        failed = at == -1 && PyErr_Occurred();
        if (!failed && (length != Py_None || at < PyBytes_GET_SIZE(data))) {
            PyObject *args[6] = {splitter, view, pos, length, Py_False, frames};
            failed = done_with(PyObject_VectorcallMethod(s_keep_rest, args, 6, NULL));
        }
    }
    Py_XDECREF(found);
    Py_XDECREF(view);
    if (failed) {
        Py_CLEAR(frames);
    }
    return frames;
}

/* ClientSide._take_responses(data), with the pipeline's first plain run: 0, or -1 with an exception set. */
static int
take_responses(PyObject *self, PyObject *data)
{
    PyObject *splitter = slot_get(self, &client_responses);
    if (splitter == NULL) {
        return -1;
    }
    PyObject *frames = feed(splitter, data);
    Py_DECREF(splitter);
    if (frames == NULL) {
        return -1;
    }
    int failed = -1;
    PyObject *pipeline = NULL, *found = NULL;
    /* if frames and guard is not None and guard.awaiting_answer: guard.broker_answered() */
    int any = PyObject_IsTrue(frames);
    if (any < 0) {
        goto done;
    }
    PyObject *guard = slot_get(self, &client_guard);
    if (guard == NULL) {
        goto done;
    }
    if (any && guard != Py_None) {
        PyObject *awaiting = slot_get(guard, &guard_awaiting);
        int first = awaiting == NULL ? -1 : PyObject_IsTrue(awaiting);
        Py_XDECREF(awaiting);
        if (first > 0) {
            first = done_with(call_method0(guard, s_broker_answered));
        }
        if (first < 0) {
            Py_DECREF(guard);
            goto done;
        }
    }
    Py_DECREF(guard);
    /* assert self._pipeline is not None; self._pipeline.broker_frames(frames) */
    pipeline = slot_get(self, &client_pipeline);
    if (pipeline == NULL) {
        goto done;
    }
    if (pipeline == Py_None) { /* (under `python -O` the Python would go on to an AttributeError instead) */
        PyErr_SetNone(PyExc_AssertionError);
        goto done;
    }
    Py_ssize_t count = PyObject_Size(frames);
    if (count <= 0) { /* (broker_frames of no frames does nothing) */
        failed = count < 0 ? -1 : 0;
        goto done;
    }
    /* broker_frames' first turn: i, answers_due = _answers_plain(self, frames, 0) */
    PyObject *args[3] = {pipeline, frames, zero};
    found = pair(call_global(pipeline_globals, s_answers_plain, args, 3), "_answers_plain");
    if (found == NULL) {
        goto done;
    }
    PyObject *i = PyTuple_GET_ITEM(found, 0), *due = PyTuple_GET_ITEM(found, 1);
    Py_ssize_t at = PyLong_AsSsize_t(i);
    int answers_due = at == -1 && PyErr_Occurred() ? -1 : PyObject_IsTrue(due);
    if (answers_due < 0) {
        goto done;
    }
    if (at == count && !answers_due) {
        failed = 0;
        goto done;
    }
    /* the rest of broker_frames: i = self.after_plain_run(frames, i, answers_due); then from there on */
    PyObject *stop[4] = {pipeline, frames, i, due};
    PyObject *next = PyObject_VectorcallMethod(s_after_plain_run, stop, 4, NULL);
    Py_ssize_t from = next == NULL ? -1 : PyLong_AsSsize_t(next);
    if (from < 0) {
        Py_XDECREF(next);
        goto done;
    }
    if (from < count) {
        PyObject *rest[3] = {pipeline, frames, next};
        failed = done_with(PyObject_VectorcallMethod(s_broker_frames, rest, 3, NULL));
    }
    else {
        failed = 0;
    }
    Py_DECREF(next);
done:
    Py_XDECREF(found);
    Py_XDECREF(pipeline);
    Py_DECREF(frames);
    return failed;
}

/* `transport.writelines(frames)` unless the transport is None or the connection closed: 0, or -1. */
static int
write_to(PyObject *self, const slot_t *transport_slot, PyObject *frames)
{
    PyObject *transport = slot_get(self, transport_slot);
    if (transport == NULL) {
        return -1;
    }
    int failed = 0;
    if (transport != Py_None) {
        int closed = slot_true(self, &client_closed);
        failed = closed < 0 ? -1 : closed ? 0 : done_with(call_method1(transport, s_writelines, frames));
    }
    Py_DECREF(transport);
    return failed;
}

/* ClientSide._flush(): 0, or -1 with an exception set. */
static int
flush(PyObject *self)
{
    PyObject *pipeline = slot_get(self, &client_pipeline);
    if (pipeline == NULL) {
        return -1;
    }
    int failed = 0;
    if (pipeline != Py_None) {
        PyObject *outgoing = slot_get(pipeline, &pipeline_outgoing);
        int any = outgoing == NULL ? -1 : PyObject_IsTrue(outgoing);
        if (any > 0) {
            PyObject *fresh = write_to(self, &client_upstream, outgoing) < 0 ? NULL : PyList_New(0);
            any = fresh == NULL ? -1 : slot_set(pipeline, &pipeline_outgoing, fresh);
            Py_XDECREF(fresh);
        }
        Py_XDECREF(outgoing);
        failed = any < 0 ? -1 : 0;
    }
    Py_DECREF(pipeline);
    if (failed) {
        return -1;
    }
    PyObject *replies = slot_get(self, &client_replies);
    int any = replies == NULL ? -1 : PyObject_IsTrue(replies);
    if (any > 0) {
        PyObject *fresh = PyList_New(0);
        any = fresh == NULL ? -1 : slot_set(self, &client_replies, fresh);
        Py_XDECREF(fresh);
        if (any == 0) {
            any = write_to(self, &client_transport, replies);
        }
    }
    Py_XDECREF(replies);
    return any < 0 ? -1 : 0;
}

/* self.cpu_ns += _pass_clock_ns() - started: 0, or -1 with an exception set. */
static int
count_pass(PyObject *self, PyObject *started)
{
    PyObject *before = slot_get(self, &client_cpu_ns);
    if (before == NULL) {
        return -1;
    }
    PyObject *now = call_global(connection_globals, s_pass_clock_ns, NULL, 0);
    PyObject *spent = now == NULL ? NULL : PyNumber_Subtract(now, started);
    PyObject *after = spent == NULL ? NULL : PyNumber_InPlaceAdd(before, spent);
    int failed = after == NULL ? -1 : slot_set(self, &client_cpu_ns, after);
    Py_DECREF(before);
    Py_XDECREF(now);
    Py_XDECREF(spent);
    Py_XDECREF(after);
    return failed;
}

/* The end of `_pass`: self._after_pass() when the pipeline drains or a bad request frame put a close off. */
static int
after_pass(PyObject *self)
{
    PyObject *pipeline = slot_get(self, &client_pipeline);
    if (pipeline == NULL) {
        return -1;
    }
    int due = 0;
    if (pipeline != Py_None) {
        PyObject *state = slot_get(pipeline, &pipeline_state);
        due = state == NULL ? -1 : state == draining;
        Py_XDECREF(state);
    }
    Py_DECREF(pipeline);
    if (due == 0) {
        PyObject *closing = slot_get(self, &client_closing_after);
        due = closing == NULL ? -1 : closing != Py_None;
        Py_XDECREF(closing);
    }
    return due <= 0 ? due : done_with(call_method0(self, s_after_pass));
}

/* The work raised: self._finish_failed_pass(exc, bad_frame, started), which does the rest. */
static PyObject *
finish_failed_pass(PyObject *self, PyObject *bad_frame, PyObject *started)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value == NULL) { /* (normalising failed and left nothing to hand over) */
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        return NULL;
    }
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    /* handled while the Python runs, as in `_pass`'s `except`: what it raises has it as its context */
    PyObject *was_type, *was_value, *was_traceback;
    PyErr_GetExcInfo(&was_type, &was_value, &was_traceback);
    PyErr_SetExcInfo(type, Py_NewRef(value), traceback); /* (takes over type and traceback) */
    PyObject *args[4] = {self, value, bad_frame, started};
    PyObject *out = PyObject_VectorcallMethod(s_finish_failed_pass, args, 4, NULL);
    PyErr_SetExcInfo(was_type, was_value, was_traceback);
    Py_DECREF(value);
    return out;
}

/* ClientSide._pass(work, arg, bad_frame) with a compiled `work` (0, or -1 with an exception set): None, or NULL
 * with an exception set. */
static PyObject *
run_pass(PyObject *self, int (*work)(PyObject *, PyObject *), PyObject *arg, PyObject *bad_frame)
{
    /* started = _pass_clock_ns() if self._cpu_time_needed() else 0 */
    PyObject *needed_now = slot_get(self, &client_cpu_time_needed);
    PyObject *needed = needed_now == NULL ? NULL : PyObject_CallNoArgs(needed_now);
    Py_XDECREF(needed_now);
    int timed = needed == NULL ? -1 : PyObject_IsTrue(needed);
    Py_XDECREF(needed);
    if (timed < 0) {
        return NULL;
    }
    PyObject *started;
    if (timed) {
        started = call_global(connection_globals, s_pass_clock_ns, NULL, 0);
        if (started == NULL) {
            return NULL;
        }
    }
    else {
        started = Py_NewRef(zero);
    }
    PyObject *out = NULL;
    if (work(self, arg) < 0) {
        out = finish_failed_pass(self, bad_frame, started);
        Py_DECREF(started);
        return out;
    }
    /* finally: self._flush(); if started: self.cpu_ns += _pass_clock_ns() - started */
    if (flush(self) == 0) {
        int counted = PyObject_IsTrue(started);
        if (counted > 0) {
            counted = count_pass(self, started) < 0 ? -1 : 1;
        }
        if (counted >= 0 && after_pass(self) == 0) {
            out = Py_NewRef(Py_None);
        }
    }
    Py_DECREF(started);
    return out;
}

/* self.<slot> = self._loop.time(), and `also` (when not NULL) the same: 0, or -1 with an exception set. */
static int
mark_time(PyObject *self, const slot_t *slot, const slot_t *also)
{
    PyObject *loop = slot_get(self, &client_loop);
    PyObject *now = loop == NULL ? NULL : call_method0(loop, s_time);
    Py_XDECREF(loop);
    int failed = now == NULL ? -1 : slot_set(self, slot, now);
    if (!failed && also != NULL) {
        failed = slot_set(self, also, now);
    }
    Py_XDECREF(now);
    return failed;
}

/* ClientSide.upstream_data(data). */
static PyObject *
upstream_data(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!bound()) {
        return NULL;
    }
    if (nargs != 1 || kwnames != NULL) {
        return call_reference(upstream_data_in_python, self, args, nargs, kwnames);
    }
    /* self._last_activity = self._loop.time(); self._pass(_TAKE_RESPONSES, data, _BAD_RESPONSE_FRAME) */
    if (mark_time(self, &client_last_activity, NULL) < 0) {
        return NULL;
    }
    return run_pass(self, take_responses, args[0], bad_response_frame);
}

/* ClientSide.get_buffer(sizehint): the proxy's shared read buffer (a fresh one while something holds a view of
 * it), lent as a view. */
static PyObject *
get_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!bound()) {
        return NULL;
    }
    if (nargs != 1 || kwnames != NULL) {
        return call_reference(get_buffer_in_python, self, args, nargs, kwnames);
    }
    /* settings = self._settings; buffer = settings.read_buffer */
    PyObject *settings = slot_get(self, &client_settings);
    PyObject *buffer = settings == NULL ? NULL : slot_get(settings, &settings_read_buffer);
    PyObject *view = NULL;
    if (buffer == NULL) {
        goto done;
    }
    /* if buffer_in_use(buffer): buffer = settings.read_buffer = bytearray(READ_BUFFER_BYTES) */
    PyObject *used = call_global(connection_globals, s_buffer_in_use, &buffer, 1);
    int renew = used == NULL ? -1 : PyObject_IsTrue(used);
    Py_XDECREF(used);
    if (renew < 0) {
        goto done;
    }
    if (renew) {
        PyObject *size = global(connection_globals, s_read_buffer_bytes);
        PyObject *fresh = size == NULL ? NULL : PyObject_CallOneArg((PyObject *)&PyByteArray_Type, size);
        if (fresh == NULL || slot_set(settings, &settings_read_buffer, fresh) < 0) {
            Py_XDECREF(fresh);
            goto done;
        }
        Py_SETREF(buffer, fresh);
    }
    /* self._read_buffer = buffer; return memoryview(buffer) */
    if (slot_set(self, &client_read_buffer, buffer) == 0) {
        view = PyMemoryView_FromObject(buffer);
    }
done:
    Py_XDECREF(settings);
    Py_XDECREF(buffer);
    return view;
}

/* Whether `data`, fed to a splitter that holds nothing and passes nothing through, is whole frames of lengths
 * in range and nothing else: where FrameSplitter.feed returns them all and keeps nothing (1), or not, or cannot
 * tell (0: `feed` then runs, as `_take_requests` runs it), or -1 with an exception set. */
static int
whole_frames_only(PyObject *splitter, PyObject *data)
{
    /* `feed` lends what it is given when it is a read-only view (type(data) is memoryview) */
    if (!Py_IS_TYPE(data, &PyMemoryView_Type) || !slot_reads(splitter, &splitter_buffered)) {
        return 0;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(data);
    if (!view->readonly || view->ndim != 1 || view->itemsize != 1 || !PyBuffer_IsContiguous(view, 'C')) {
        return 0;
    }
    PyObject *through_left = slot_get(splitter, &splitter_through_left);
    PyObject *through = through_left == NULL ? NULL : slot_get(splitter, &splitter_through);
    PyObject *buffered = through == NULL ? NULL : slot_get(splitter, &splitter_buffered);
    PyObject *min_payload = buffered == NULL ? NULL : slot_get(splitter, &splitter_min_payload);
    PyObject *max_frame = min_payload == NULL ? NULL : slot_get(splitter, &splitter_max_frame);
    long least, most;
    int plain = max_frame != NULL && is_zero(through_left) && PyList_CheckExact(through) &&
                PyList_GET_SIZE(through) == 0 && is_zero(buffered) && exact_long(min_payload, &least) &&
                exact_long(max_frame, &most);
    Py_XDECREF(through_left);
    Py_XDECREF(through);
    Py_XDECREF(buffered);
    Py_XDECREF(min_payload);
    Py_XDECREF(max_frame);
    if (PyErr_Occurred()) {
        return -1;
    }
    /* whole_frames' walk: each frame's signed 4-byte length within [least, most] and all of it here */
    const unsigned char *bytes = view->buf;
    Py_ssize_t size = view->len, pos = 0;
    while (plain && size - pos >= 4) {
        long length = (int32_t)(((uint32_t)bytes[pos] << 24) | ((uint32_t)bytes[pos + 1] << 16) |
                                ((uint32_t)bytes[pos + 2] << 8) | (uint32_t)bytes[pos + 3]);
        plain = length >= least && length <= most && length <= size - pos - 4;
        pos += 4 + (plain ? length : 0);
    }
    return plain && pos == size;
}

/* requests.settle(), unless it has nothing to do (nothing pending from a lent buffer): 0, or -1. */
static int
settle(PyObject *splitter)
{
    PyObject *lent_from = slot_get(splitter, &splitter_lent_from);
    long start;
    int idle = lent_from != NULL && exact_long(lent_from, &start) && start < 0;
    Py_XDECREF(lent_from);
    if (lent_from == NULL) {
        return -1;
    }
    return idle ? 0 : done_with(call_method0(splitter, s_settle));
}

/* pipeline.client_frames(frames) for a list of frames: when nothing is held or deferred (where `client_frames`
 * goes on to `_forward`, which runs the plain run first), the plain run here (`_forward_plain`, read from
 * request_pipeline at each pass, as `_forward` reads it) and, when it stops short, `after_plain_forward` from
 * there; else `client_frames` itself. A new reference (a filter's Pending, or None), or NULL with an exception
 * set. */
static PyObject *
forward(PyObject *pipeline, PyObject *frames)
{
    /* if self._held or self._resume is not None: (the Python's; a request is held or deferred only while the
     * pipeline may not forward, where the plain run would stop at once and `after_plain_forward` hold the
     * read the same: kept exact, as a state the proxy passes through, tested with a request held) */
    int plain = PyList_CheckExact(frames) && slot_reads(pipeline, &pipeline_held);
    if (plain) {
        PyObject *held = slot_get(pipeline, &pipeline_held);
        PyObject *resume = held == NULL ? NULL : slot_get(pipeline, &pipeline_resume);
        plain = resume != NULL && PyList_CheckExact(held) && PyList_GET_SIZE(held) == 0 && resume == Py_None;
        Py_XDECREF(held);
        Py_XDECREF(resume);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (!plain) {
        return call_method1(pipeline, s_client_frames, frames);
    }
    /* i, other = _forward_plain(self, frames, 0) */
    PyObject *args[3] = {pipeline, frames, zero};
    PyObject *found = pair(call_global(pipeline_globals, s_forward_plain, args, 3), "_forward_plain");
    if (found == NULL) {
        return NULL;
    }
    PyObject *i = PyTuple_GET_ITEM(found, 0), *other = PyTuple_GET_ITEM(found, 1);
    Py_ssize_t at = PyLong_AsSsize_t(i); /* (not an index: an error, as the Python's loop would fail on it) */
    PyObject *out = NULL;
    if (other == Py_None && at == PyList_GET_SIZE(frames)) { /* all forwarded: nothing answered, no wait */
        out = Py_NewRef(Py_None);
    }
    else if (!(at == -1 && PyErr_Occurred())) { /* the rest of _forward: self.after_plain_forward(frames, i, other) */
        PyObject *rest[4] = {pipeline, frames, i, other};
        out = PyObject_VectorcallMethod(s_after_plain_forward, rest, 4, NULL);
    }
    Py_DECREF(found);
    return out;
}

/* ClientSide._take_requests(data) where the read is whole frames only (else the Python's): 0, or -1. */
static int
take_requests(PyObject *self, PyObject *data)
{
    PyObject *splitter = slot_get(self, &client_requests);
    if (splitter == NULL) {
        return -1;
    }
    int whole = whole_frames_only(splitter, data);
    if (whole <= 0) {
        Py_DECREF(splitter);
        if (whole < 0) {
            return -1;
        }
        PyObject *args[2] = {self, data};
        return done_with(call_global(connection_globals, s_take_requests, args, 2));
    }
    /* frames = requests.feed(data): its whole frames, through _whole_frames as `feed` finds them */
    PyObject *frames = PyList_New(0);
    PyObject *found = frames == NULL ? NULL : whole_frames(splitter, data, frames);
    int failed = found == NULL ? -1 : 0;
    if (!failed && (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2 ||
                    PyTuple_GET_ITEM(found, 1) != Py_None)) {
        /* (what the walk above ruled out: a _whole_frames that finds otherwise than the one it translates) */
        PyErr_SetString(PyExc_RuntimeError, "_whole_frames left part of a read of whole frames");
        failed = -1;
    }
    Py_XDECREF(found);
    PyObject *pipeline = failed ? NULL : slot_get(self, &client_pipeline);
    if (pipeline == NULL) {
        Py_XDECREF(frames);
        Py_DECREF(splitter);
        return -1;
    }
    if (pipeline == Py_None) { /* assert pipeline is not None */
        PyErr_SetNone(PyExc_AssertionError);
        Py_DECREF(pipeline);
        Py_DECREF(frames);
        Py_DECREF(splitter);
        return -1;
    }
    /* try: self._after_step(pipeline.client_frames(frames)) finally: requests.settle()
     * (`requests.through` is empty: the splitter passed nothing through. `_after_step` streams a large request
     * the read left incomplete, and this read left nothing: only a deferral is waited for.) */
    PyObject *ready = forward(pipeline, frames);
    Py_DECREF(pipeline);
    Py_DECREF(frames);
    failed = ready == NULL ? -1 : 0;
    if (!failed && ready != Py_None) { /* a filter deferred a request: self._wait_for(ready) */
        failed = done_with(call_method1(self, s_wait_for, ready));
    }
    Py_XDECREF(ready);
    if (failed) { /* the settle of `finally`: the exception goes on (or the settle's, with it as its context) */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL && value != NULL) {
            PyException_SetTraceback(value, traceback);
        }
        if (settle(splitter) == 0) {
            PyErr_Restore(type, value, traceback);
        }
        else {
            PyObject *its_type, *its_value, *its_traceback;
            PyErr_Fetch(&its_type, &its_value, &its_traceback);
            PyErr_NormalizeException(&its_type, &its_value, &its_traceback);
            if (its_value != NULL && value != NULL) {
                PyException_SetContext(its_value, Py_NewRef(value)); /* (steals) */
            }
            PyErr_Restore(its_type, its_value, its_traceback);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
    }
    else {
        failed = settle(splitter);
    }
    Py_DECREF(splitter);
    return failed;
}

/* RequestGuard.after_feed() unless it has nothing to do: no frame being assembled, nothing reserved or waited
 * for, the connection proven (what it then does: nothing). 0, or -1 with an exception set. */
static int
after_feed(PyObject *guard)
{
    int idle = slot_reads(guard, &guard_splitter);
    if (idle) {
        PyObject *splitter = slot_get(guard, &guard_splitter);
        PyObject *need = splitter == NULL ? NULL : slot_get(splitter, &splitter_pending_need);
        PyObject *reserved = need == NULL ? NULL : slot_get(guard, &guard_reserved);
        PyObject *waiting = reserved == NULL ? NULL : slot_get(guard, &guard_waiting);
        PyObject *proven = waiting == NULL ? NULL : slot_get(guard, &guard_proven);
        long pending, held;
        idle = proven != NULL && slot_reads(splitter, &splitter_pending_need) && exact_long(need, &pending) &&
               pending <= 0 && exact_long(reserved, &held) && held == 0 && waiting == Py_False &&
               proven == Py_True;
        Py_XDECREF(splitter);
        Py_XDECREF(need);
        Py_XDECREF(reserved);
        Py_XDECREF(waiting);
        Py_XDECREF(proven);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    return idle ? 0 : done_with(call_method0(guard, s_after_feed));
}

/* ClientSide.buffer_updated(nbytes). */
static PyObject *
buffer_updated(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!bound()) {
        return NULL;
    }
    if (nargs != 1 || kwnames != NULL) {
        return call_reference(buffer_updated_in_python, self, args, nargs, kwnames);
    }
    /* buffer, self._read_buffer = self._read_buffer, _NO_BUFFER */
    PyObject *buffer = slot_get(self, &client_read_buffer);
    PyObject *none_lent = buffer == NULL ? NULL : global(connection_globals, s_no_buffer);
    if (none_lent == NULL || slot_set(self, &client_read_buffer, none_lent) < 0) {
        Py_XDECREF(buffer);
        return NULL;
    }
    PyObject *out = NULL, *pipeline = slot_get(self, &client_pipeline);
    if (pipeline == NULL) {
        goto done;
    }
    int served = pipeline != Py_None;
    Py_DECREF(pipeline);
    if (!served) { /* a connection refused at accept: the bytes that came with it are not served */
        out = Py_NewRef(Py_None);
        goto done;
    }
    /* self._last_read = self._last_activity = self._loop.time() */
    if (mark_time(self, &client_last_read, &client_last_activity) < 0) {
        goto done;
    }
    /* self._pass(_TAKE_REQUESTS, memoryview(buffer).toreadonly()[:nbytes], _BAD_REQUEST_FRAME) */
    PyObject *whole = PyMemoryView_FromObject(buffer);
    PyObject *lent = whole == NULL ? NULL : call_method0(whole, s_toreadonly);
    PyObject *end = lent == NULL ? NULL : PySlice_New(NULL, args[0], NULL);
    PyObject *data = end == NULL ? NULL : PyObject_GetItem(lent, end);
    Py_XDECREF(whole);
    Py_XDECREF(lent);
    Py_XDECREF(end);
    if (data == NULL) {
        goto done;
    }
    PyObject *passed = run_pass(self, take_requests, data, bad_request_frame);
    Py_DECREF(data);
    if (passed == NULL) {
        goto done;
    }
    Py_DECREF(passed);
    /* guard = self._guard; if guard is not None and not self._closed: guard.after_feed() */
    PyObject *guard = slot_get(self, &client_guard);
    if (guard == NULL) {
        goto done;
    }
    int fed = 0;
    if (guard != Py_None) {
        int closed = slot_true(self, &client_closed);
        fed = closed < 0 ? -1 : closed ? 0 : after_feed(guard);
    }
    Py_DECREF(guard);
    if (fed < 0) {
        goto done;
    }
    /* self._requests.through = [] */
    PyObject *splitter = slot_get(self, &client_requests);
    PyObject *fresh = splitter == NULL ? NULL : PyList_New(0);
    int failed = fresh == NULL ? -1 : slot_set(splitter, &splitter_through, fresh);
    Py_XDECREF(fresh);
    Py_XDECREF(splitter);
    if (!failed) {
        out = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(buffer);
    return out;
}

/* ClientSide.send_response(frame, delay_ms): self._replies.append(frame) when it is not delayed and the gate
 * holds no answer; anything else in Python. */
static PyObject *
send_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!bound()) {
        return NULL;
    }
    long delay_ms;
    if (nargs != 2 || kwnames != NULL || !exact_long(args[1], &delay_ms) || delay_ms > 0) {
        return call_reference(send_response_in_python, self, args, nargs, kwnames);
    }
    /* assert gate is not None and self._transport is not None; if delay_ms > 0 or gate.held_responses: ... */
    PyObject *gate = slot_get(self, &client_gate);
    if (gate == NULL) {
        return NULL;
    }
    int plain = gate != Py_None;
    if (plain) {
        PyObject *transport = slot_get(self, &client_transport);
        PyObject *held = transport == NULL ? NULL : slot_get(gate, &gate_held);
        int holds = held == NULL ? -1 : transport != Py_None ? PyObject_IsTrue(held) : 1;
        plain = holds < 0 ? -1 : !holds;
        Py_XDECREF(transport);
        Py_XDECREF(held);
    }
    Py_DECREF(gate);
    if (plain < 0) {
        return NULL;
    }
    if (!plain) {
        return call_reference(send_response_in_python, self, args, nargs, kwnames);
    }
    /* self._replies.append(frame) */
    PyObject *replies = slot_get(self, &client_replies);
    if (replies == NULL) {
        return NULL;
    }
    int failed = PyList_CheckExact(replies) ? PyList_Append(replies, args[0])
                                            : done_with(call_method1(replies, s_append, args[0]));
    Py_DECREF(replies);
    return failed ? NULL : Py_NewRef(Py_None);
}

static PyMethodDef pass_defs[] = {
    {"get_buffer", (PyCFunction)(void (*)(void))get_buffer, METH_FASTCALL | METH_KEYWORDS,
     "ClientSide.get_buffer(sizehint), compiled (proxy/data_path/connection.py)."},
    {"buffer_updated", (PyCFunction)(void (*)(void))buffer_updated, METH_FASTCALL | METH_KEYWORDS,
     "ClientSide.buffer_updated(nbytes), compiled (proxy/data_path/connection.py)."},
    {"upstream_data", (PyCFunction)(void (*)(void))upstream_data, METH_FASTCALL | METH_KEYWORDS,
     "ClientSide.upstream_data(data), compiled (proxy/data_path/connection.py)."},
    {"send_response", (PyCFunction)(void (*)(void))send_response, METH_FASTCALL | METH_KEYWORDS,
     "ClientSide.send_response(frame, delay_ms), compiled (proxy/data_path/connection.py)."},
    {NULL, NULL, 0, NULL},
};

/* methods_of(ClientSide): {name: the compiled pass, a method of ClientSide}. */
static PyObject *
methods_of(PyObject *module, PyObject *cls)
{
    return method_descriptors(cls, pass_defs, "methods_of(ClientSide)");
}

/* bind({...}): the classes whose slots the passes read, the modules' globals they read at each pass,
 * Lifecycle.DRAINING, the bad-frame handlers and the Python references (connection.py's call names each). */
#define TYPES 6
#define BOUND_ITEMS 11
static PyObject *
bind(PyObject *module, PyObject *given)
{
    if (!PyDict_Check(given)) {
        PyErr_SetString(PyExc_TypeError, "bind(dict)");
        return NULL;
    }
    static const char *type_names[TYPES] = {"FrameSplitter", "RequestPipeline", "ThrottleGate", "RequestGuard",
                                            "SessionSettings", "ClientSide"};
    static const char *names[BOUND_ITEMS] = {
        "frames_globals", "pipeline_globals", "connection_globals", "DRAINING", "bad_response_frame",
        "bad_request_frame", "upstream_data", "send_response", "get_buffer", "buffer_updated", NULL};
    PyObject *types[TYPES] = {NULL}, *items[BOUND_ITEMS] = {NULL};
    int fits = 1;
    for (int k = 0; fits && k < TYPES; k++) {
        fits = (types[k] = bound_item(given, type_names[k], A_TYPE)) != NULL;
    }
    for (int k = 0; fits && names[k] != NULL; k++) {
        items[k] = bound_item(given, names[k], k < 4 ? ANY : CALLABLE);
        fits = items[k] != NULL && (k > 2 || PyDict_CheckExact(items[k]));
        if (items[k] != NULL && !fits) {
            PyErr_Format(PyExc_TypeError, "bind: %s must be a dict", names[k]);
        }
    }
    if (fits) {
        PyObject *splitter = types[0], *pipeline = types[1], *gate = types[2], *guard = types[3], *client = types[5];
        const binding_t bindings[] = {
            {&splitter_buffered, NULL, splitter, s_buffered_bytes, NULL},
            {&splitter_through_left, NULL, splitter, s_through_left, NULL},
            {&splitter_through, NULL, splitter, s_through, NULL},
            {&splitter_min_payload, NULL, splitter, s_min_payload_bytes, NULL},
            {&splitter_max_frame, NULL, splitter, s_max_frame_bytes, NULL},
            {&splitter_lent_from, NULL, splitter, s_lent_from, NULL},
            {&splitter_pending_need, NULL, splitter, s_pending_need, NULL},
            {&pipeline_outgoing, NULL, pipeline, s_outgoing, NULL},
            {&pipeline_state, NULL, pipeline, s_state, NULL},
            {&pipeline_held, NULL, pipeline, s_held, NULL},
            {&pipeline_resume, NULL, pipeline, s_resume, NULL},
            {&gate_held, NULL, gate, s_held_responses, NULL},
            {&guard_awaiting, NULL, guard, s_awaiting_answer, NULL},
            {&guard_splitter, NULL, guard, s_splitter, NULL},
            {&guard_reserved, NULL, guard, s_reserved, NULL},
            {&guard_waiting, NULL, guard, s_waiting, NULL},
            {&guard_proven, NULL, guard, s_proven, NULL},
            {&settings_read_buffer, NULL, types[4], s_read_buffer_slot, NULL},
            {&client_loop, NULL, client, s_loop, NULL},
            {&client_last_activity, NULL, client, s_last_activity, NULL},
            {&client_cpu_time_needed, NULL, client, s_cpu_time_needed, NULL},
            {&client_responses, NULL, client, s_responses, NULL},
            {&client_guard, NULL, client, s_guard, NULL},
            {&client_pipeline, NULL, client, s_pipeline, NULL},
            {&client_upstream, NULL, client, s_upstream, NULL},
            {&client_closed, NULL, client, s_closed, NULL},
            {&client_replies, NULL, client, s_replies, NULL},
            {&client_transport, NULL, client, s_transport, NULL},
            {&client_cpu_ns, NULL, client, s_cpu_ns, NULL},
            {&client_closing_after, NULL, client, s_closing_after, NULL},
            {&client_settings, NULL, client, s_settings, NULL},
            {&client_read_buffer, NULL, client, s_read_buffer, NULL},
            {&client_last_read, NULL, client, s_last_read, NULL},
            {&client_requests, NULL, client, s_requests, NULL},
            {&client_gate, NULL, client, s_gate, NULL},
        };
        fits = bind_all(bindings, sizeof bindings / sizeof bindings[0]) == 0;
    }
    if (fits) {
        Py_XSETREF(frames_globals, Py_NewRef(items[0]));
        Py_XSETREF(pipeline_globals, Py_NewRef(items[1]));
        Py_XSETREF(connection_globals, Py_NewRef(items[2]));
        Py_XSETREF(draining, Py_NewRef(items[3]));
        Py_XSETREF(bad_response_frame, Py_NewRef(items[4]));
        Py_XSETREF(bad_request_frame, Py_NewRef(items[5]));
        Py_XSETREF(send_response_in_python, Py_NewRef(items[7]));
        Py_XSETREF(get_buffer_in_python, Py_NewRef(items[8]));
        Py_XSETREF(buffer_updated_in_python, Py_NewRef(items[9]));
        Py_XSETREF(upstream_data_in_python, Py_NewRef(items[6])); /* last: bound() reads it */
    }
    for (int k = 0; k < TYPES; k++) {
        Py_XDECREF(types[k]);
    }
    for (int k = 0; k < BOUND_ITEMS; k++) {
        Py_XDECREF(items[k]);
    }
    return fits ? Py_NewRef(Py_None) : NULL;
}

static PyMethodDef module_methods[] = {
    {"methods_of", methods_of, METH_O, "The compiled passes of ClientSide, by name: methods of the class given."},
    {"bind", bind, METH_O, "Bind the classes, globals and references the passes read (connection.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef connection_passes_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.data_path._connection_passes",
    "The connection's passes over a read from either side, compiled (proxy/data_path/connection.py).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__connection_passes(void)
{
    INTERN(s_loop, "_loop");
    INTERN(s_time, "time");
    INTERN(s_last_activity, "_last_activity");
    INTERN(s_cpu_time_needed, "_cpu_time_needed");
    INTERN(s_responses, "_responses");
    INTERN(s_guard, "_guard");
    INTERN(s_awaiting_answer, "awaiting_answer");
    INTERN(s_broker_answered, "broker_answered");
    INTERN(s_pipeline, "_pipeline");
    INTERN(s_broker_frames, "broker_frames");
    INTERN(s_after_plain_run, "after_plain_run");
    INTERN(s_keep_rest, "keep_rest");
    INTERN(s_feed, "feed");
    INTERN(s_outgoing, "outgoing");
    INTERN(s_upstream, "_upstream");
    INTERN(s_closed, "_closed");
    INTERN(s_writelines, "writelines");
    INTERN(s_replies, "_replies");
    INTERN(s_transport, "_transport");
    INTERN(s_cpu_ns, "cpu_ns");
    INTERN(s_state, "state");
    INTERN(s_closing_after, "_closing_after");
    INTERN(s_after_pass, "_after_pass");
    INTERN(s_finish_failed_pass, "_finish_failed_pass");
    INTERN(s_whole_frames, "_whole_frames");
    INTERN(s_answers_plain, "_answers_plain");
    INTERN(s_pass_clock_ns, "_pass_clock_ns");
    INTERN(s_gate, "_gate");
    INTERN(s_held_responses, "held_responses");
    INTERN(s_append, "append");
    INTERN(s_buffered_bytes, "buffered_bytes");
    INTERN(s_through_left, "_through_left");
    INTERN(s_through, "through");
    INTERN(s_min_payload_bytes, "min_payload_bytes");
    INTERN(s_max_frame_bytes, "_max_frame_bytes");
    INTERN(s_read_buffer, "_read_buffer");
    INTERN(s_read_buffer_slot, "read_buffer");
    INTERN(s_no_buffer, "_NO_BUFFER");
    INTERN(s_last_read, "_last_read");
    INTERN(s_toreadonly, "toreadonly");
    INTERN(s_requests, "_requests");
    INTERN(s_take_requests, "_TAKE_REQUESTS");
    INTERN(s_client_frames, "client_frames");
    INTERN(s_held, "_held");
    INTERN(s_resume, "_resume");
    INTERN(s_forward_plain, "_forward_plain");
    INTERN(s_after_plain_forward, "after_plain_forward");
    INTERN(s_wait_for, "_wait_for");
    INTERN(s_settle, "settle");
    INTERN(s_lent_from, "_lent_from");
    INTERN(s_after_feed, "after_feed");
    INTERN(s_splitter, "_splitter");
    INTERN(s_pending_need, "_pending_need");
    INTERN(s_reserved, "_reserved");
    INTERN(s_waiting, "_waiting");
    INTERN(s_proven, "proven");
    INTERN(s_settings, "_settings");
    INTERN(s_buffer_in_use, "buffer_in_use");
    INTERN(s_read_buffer_bytes, "READ_BUFFER_BYTES");
    if ((zero = PyLong_FromLong(0)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&connection_passes_module);
}
