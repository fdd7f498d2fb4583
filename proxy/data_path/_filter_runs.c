/* The compiled runs of one connection's filters over a request and over an answer: FilterRuns of
 * proxy/data_path/filter_runs.py, the base of every connection's ConnectionFilters.
 *
 * Why C: every request and every answer goes through these two loops, and in Python their own work (the
 * routing look-up, the loop, a type test per filter, the effects' reads) costs ~0.2 us in each direction
 * beside the filters they call; here it is a few tens of ns (docs/architecture.md, "Compiled readers").
 * The filters themselves still run as Python: calling them from C costs what calling them from Python does.
 * The Python class stays the reference and runs where this module was not built; this type is its
 * line-by-line translation: the same routing, the same effects read by the same attribute names, in the same
 * order, with the same comparisons of Python objects (a throttle is compared as Python compares it, never
 * converted), the same mutes asked for in the same order, and the same objects handed back
 * (tests/proxy/test_filter_runs.py runs the chain's tests on both and holds them equal on random chains).
 *
 * Differences, out of the proxy's reach: a Deferred names the deferring filter's position as the loop's own
 * index, where the Python asks the group for the first equal filter's index from the resume point (the same
 * while no two equal filters sit in a group: the chain makes one fresh filter per factory); the effects'
 * fields are read once each where the Python reads a throttle up to three times (the same for the effects'
 * own NamedTuples); the two methods take their arguments by position (on_request's `deferred` also by
 * name).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_compiled.h"

/* The routing table's size (filter_api.contract.TABLE_SIZE); its last slot, TABLE_SIZE, is every key
 * outside it (BEYOND_TABLE). bind() checks that the contract says the same. */
#define TABLE_SIZE 128
#define BEYOND_TABLE TABLE_SIZE

/* What bind() hands over once, from filter_api.contract and filter_chain. */
static PyObject *forward_type = NULL;
static PyObject *answer_type = NULL;
static PyObject *close_type = NULL;
static PyObject *defer_type = NULL;
static PyObject *respond_type = NULL;
static PyObject *deferred_type = NULL;
static PyObject *whole_function = NULL;

static PyObject *s_api_key, *s_header, *s_on_request, *s_on_response, *s_frame, *s_throttle_ms, *s_ready, *s_original, *s_position, *s_delay_ms, *s_mute_ms, *s_replace;
static PyObject *zero = NULL;
/* The fields routing reads, at their indices (../_compiled.h; bind_fields): an answer's request's header, and a
 * header's API key. */
static field_t entry_header, header_api_key;

typedef struct {
    PyObject_HEAD
    PyObject *mute;
    PyObject *request_group;      /* bytes, TABLE_SIZE + 1: API key slot -> index into request_groups */
    PyObject *request_groups;     /* tuple of tuples of filters */
    PyObject *response_group;
    PyObject *response_groups;
    PyObject *cpu_response_group;
    PyObject *cpu_response_groups;
    PyObject *cpu_adds_response_filters; /* bytes, TABLE_SIZE + 1: 1 where CPU adds response filters */
    PyObject *cpu_needed;         /* () -> truth */
} FilterRunsObject;

/* The routing slot of an API key, as `key if 0 <= key < TABLE_SIZE else BEYOND_TABLE` reads a Python int
 * (or anything ordered against ints: compared as Python compares, for the rare key that is not an int). */
static int
slot_of(PyObject *key, Py_ssize_t *slot)
{
    if (PyLong_CheckExact(key)) {
        int overflow = 0;
        long value = PyLong_AsLongAndOverflow(key, &overflow);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        *slot = (overflow == 0 && 0 <= value && value < TABLE_SIZE) ? (Py_ssize_t)value : BEYOND_TABLE;
        return 0;
    }
    int at_least_zero = PyObject_RichCompareBool(zero, key, Py_LE);
    if (at_least_zero < 0) {
        return -1;
    }
    if (at_least_zero) {
        PyObject *size = PyLong_FromLong(TABLE_SIZE);
        if (size == NULL) {
            return -1;
        }
        int below = PyObject_RichCompareBool(key, size, Py_LT);
        Py_DECREF(size);
        if (below < 0) {
            return -1;
        }
        if (below) {
            /* then `group_of[key]`, as bytes index by __index__: a key whose comparisons and __index__
             * disagree is read as bytes would read it (a negative index from the end, others refused) */
            Py_ssize_t value = PyNumber_AsSsize_t(key, PyExc_IndexError);
            if (value == -1 && PyErr_Occurred()) {
                return -1;
            }
            if (value < 0) {
                value += TABLE_SIZE + 1;
            }
            if (value < 0 || value > TABLE_SIZE) {
                PyErr_SetString(PyExc_IndexError, "index out of range");
                return -1;
            }
            *slot = value;
            return 0;
        }
    }
    *slot = BEYOND_TABLE;
    return 0;
}

/* groups[group_of[slot]]: a borrowed tuple (checked when the runs were made). */
static PyObject *
group_at(PyObject *group_of, PyObject *groups, Py_ssize_t slot)
{
    unsigned char index = (unsigned char)PyBytes_AS_STRING(group_of)[slot];
    return PyTuple_GET_ITEM(groups, index);
}

static PyObject *
call_method2(PyObject *name, PyObject *self, PyObject *a, PyObject *b)
{
    PyObject *args[4] = {NULL, self, a, b};
    return PyObject_VectorcallMethod(name, args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *
call1(PyObject *callable, PyObject *arg)
{
    PyObject *args[2] = {NULL, arg};
    return PyObject_Vectorcall(callable, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* `value > 0`, as Python compares: 1, 0, or -1 with an exception. */
static int
positive(PyObject *value)
{
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long small = PyLong_AsLongAndOverflow(value, &overflow);
        if (small == -1 && overflow == 0 && PyErr_Occurred()) {
            return -1;
        }
        return overflow > 0 || (overflow == 0 && small > 0);
    }
    return PyObject_RichCompareBool(value, zero, Py_GT);
}

/* out.<field> > 0, and when it is, mute(out.<field>) (the effects' mutes). 1 muted, 0 not, -1 error; the
 * field's value in *value (a new reference) either way. */
static int
mute_for(FilterRunsObject *self, PyObject *out, PyObject *field, PyObject **value)
{
    *value = PyObject_GetAttr(out, field);
    if (*value == NULL) {
        return -1;
    }
    int is_positive = positive(*value);
    if (is_positive <= 0) {
        if (is_positive < 0) {
            Py_CLEAR(*value);
        }
        return is_positive;
    }
    PyObject *done = call1(self->mute, *value);
    if (done == NULL) {
        Py_CLEAR(*value);
        return -1;
    }
    Py_DECREF(done);
    return 1;
}

/* `*kept = candidate if candidate > *kept else *kept`, as Python's max(kept, candidate) keeps the first of
 * equals: 0, or -1 with an exception. Takes the candidate's reference. */
static int
keep_greater(PyObject **kept, PyObject *candidate)
{
    int greater = PyObject_RichCompareBool(candidate, *kept, Py_GT);
    if (greater > 0) {
        Py_SETREF(*kept, candidate);
        return 0;
    }
    Py_DECREF(candidate);
    return greater;
}

/* `effect(frame, value) if value > 0 else frame`: how both runs end (Forward with the throttle earned, Respond
 * with the longest delay asked for). */
static PyObject *
effect_if_positive(PyObject *effect, PyObject *frame, PyObject *value)
{
    int is_positive = positive(value);
    if (is_positive < 0) {
        return NULL;
    }
    if (!is_positive) {
        return Py_NewRef(frame);
    }
    PyObject *fields[2] = {frame, value};
    return PyObject_Vectorcall(effect, fields, 2, NULL);
}

/* A frame that is surely none of the effects (the common outcome): no isinstance test needed. */
static inline int
plain_frame(PyObject *out)
{
    return Py_IS_TYPE(out, &PyMemoryView_Type) || PyBytes_CheckExact(out);
}

static PyObject *
FilterRuns_on_request(FilterRunsObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t given = nargs;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        /* deferred= by name: the only argument that may be named */
        int named = PyTuple_GET_SIZE(kwnames) == 1 && nargs == 2 &&
                    PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
                    PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "deferred") == 0;
        if (!named) {
            PyErr_SetString(PyExc_TypeError, "on_request(header, frame, deferred=None)");
            return NULL;
        }
        given = 3;
    }
    if (given < 2 || given > 3) {
        PyErr_SetString(PyExc_TypeError, "on_request(header, frame, deferred=None)");
        return NULL;
    }
    if (forward_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "filter runs used before bind()");
        return NULL;
    }
    PyObject *header = args[0];
    PyObject *deferred = given == 3 ? args[2] : Py_None;
    PyObject *key = field_get(header, &header_api_key);
    if (key == NULL) {
        return NULL;
    }
    Py_ssize_t slot;
    int failed = slot_of(key, &slot);
    Py_DECREF(key);
    if (failed) {
        return NULL;
    }
    PyObject *filters = group_at(self->request_group, self->request_groups, slot);
    Py_ssize_t count = PyTuple_GET_SIZE(filters);
    if (count == 0) {
        return Py_NewRef(args[1]);
    }
    PyObject *original, *frame, *throttle, *out = NULL, *result = NULL;
    /* Held for the run: a filter that built these runs anew (calling __init__) would free the old tables. */
    Py_INCREF(filters);
    Py_ssize_t start = 0;
    if (deferred != Py_None) {
        original = PyObject_GetAttr(deferred, s_original);
        frame = original == NULL ? NULL : PyObject_GetAttr(deferred, s_frame);
        PyObject *position = frame == NULL ? NULL : PyObject_GetAttr(deferred, s_position);
        throttle = position == NULL ? NULL : PyObject_GetAttr(deferred, s_throttle_ms);
        if (throttle != NULL) {
            /* `filters[start:] if start else filters`: a false start is 0, a huge one clamped as a slice's */
            int truth = PyObject_IsTrue(position);
            start = truth < 0 ? -1 : truth == 0 ? 0 : PyNumber_AsSsize_t(position, NULL);
        }
        Py_XDECREF(position);
        if (throttle == NULL || (start == -1 && PyErr_Occurred())) {
            Py_DECREF(filters);
            Py_XDECREF(original);
            Py_XDECREF(frame);
            Py_XDECREF(throttle);
            return NULL;
        }
        if (start < 0) {
            start = count + start < 0 ? 0 : count + start; /* a slice's start, as `filters[start:]` */
        }
    }
    else {
        original = Py_NewRef(args[1]);
        frame = Py_NewRef(args[1]);
        throttle = Py_NewRef(zero);
    }
    for (Py_ssize_t i = start; i < count; i++) {
        PyObject *f = PyTuple_GET_ITEM(filters, i);
        out = call_method2(s_on_request, f, header, frame);
        if (out == NULL) {
            goto done;
        }
        if (plain_frame(out)) {
            Py_SETREF(frame, out);
            out = NULL;
            continue;
        }
        int is = PyObject_IsInstance(out, forward_type);
        if (is < 0) {
            goto done;
        }
        if (is) {
            PyObject *forwarded = PyObject_GetAttr(out, s_frame);
            if (forwarded == NULL) {
                goto done;
            }
            Py_SETREF(frame, forwarded);
            PyObject *earned;
            int muted = mute_for(self, out, s_throttle_ms, &earned);
            if (muted < 0) {
                goto done;
            }
            if (muted) {
                /* throttle = max(throttle, earned) */
                if (keep_greater(&throttle, earned) < 0) {
                    goto done;
                }
            }
            else {
                Py_DECREF(earned);
            }
            Py_CLEAR(out);
            continue;
        }
        if ((is = PyObject_IsInstance(out, answer_type)) != 0) {
            if (is < 0) {
                goto done;
            }
            PyObject *earned;
            if (mute_for(self, out, s_throttle_ms, &earned) < 0) {
                goto done;
            }
            int enough = PyObject_RichCompareBool(earned, throttle, Py_GE);
            Py_DECREF(earned);
            if (enough < 0) {
                goto done;
            }
            if (enough) {
                result = out;
                out = NULL;
                goto done;
            }
            /* out._replace(throttle_ms=throttle) */
            PyObject *replace_args[2] = {out, throttle};
            PyObject *names = PyTuple_Pack(1, s_throttle_ms);
            if (names == NULL) {
                goto done;
            }
            result = PyObject_VectorcallMethod(s_replace, replace_args, 1, names);
            Py_DECREF(names);
            goto done;
        }
        if ((is = PyObject_IsInstance(out, defer_type)) != 0) {
            if (is < 0) {
                goto done;
            }
            PyObject *ready = PyObject_GetAttr(out, s_ready);
            PyObject *whole_original = ready == NULL ? NULL : call1(whole_function, original);
            PyObject *whole_frame = whole_original == NULL ? NULL : call1(whole_function, frame);
            PyObject *position = whole_frame == NULL ? NULL : PyLong_FromSsize_t(i);
            if (position != NULL) {
                PyObject *fields[6] = {ready, header, whole_original, whole_frame, position, throttle};
                result = PyObject_Vectorcall(deferred_type, fields, 6, NULL);
            }
            Py_XDECREF(ready);
            Py_XDECREF(whole_original);
            Py_XDECREF(whole_frame);
            Py_XDECREF(position);
            goto done;
        }
        if ((is = PyObject_IsInstance(out, close_type)) != 0) {
            if (is > 0) {
                result = out;
                out = NULL;
            }
            goto done;
        }
        Py_SETREF(frame, out); /* bytes a filter rewrote (or any frame-like object) */
        out = NULL;
    }
    result = effect_if_positive(forward_type, frame, throttle);
done:
    Py_DECREF(filters);
    Py_XDECREF(out);
    Py_DECREF(original);
    Py_DECREF(frame);
    Py_DECREF(throttle);
    return result;
}

static PyObject *
FilterRuns_on_response(FilterRunsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "on_response(request, frame)");
        return NULL;
    }
    if (respond_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "filter runs used before bind()");
        return NULL;
    }
    PyObject *request = args[0];
    PyObject *header = field_get(request, &entry_header);
    if (header == NULL) {
        return NULL;
    }
    PyObject *key = field_get(header, &header_api_key);
    Py_DECREF(header);
    if (key == NULL) {
        return NULL;
    }
    Py_ssize_t slot;
    int failed = slot_of(key, &slot);
    Py_DECREF(key);
    if (failed) {
        return NULL;
    }
    PyObject *filters;
    int cpu = PyBytes_AS_STRING(self->cpu_adds_response_filters)[slot] != 0;
    if (cpu) {
        PyObject *needed = PyObject_CallNoArgs(self->cpu_needed);
        if (needed == NULL) {
            return NULL;
        }
        cpu = PyObject_IsTrue(needed);
        Py_DECREF(needed);
        if (cpu < 0) {
            return NULL;
        }
    }
    if (cpu) {
        filters = group_at(self->cpu_response_group, self->cpu_response_groups, slot);
    }
    else {
        filters = group_at(self->response_group, self->response_groups, slot);
    }
    Py_INCREF(filters); /* held for the run, as on_request's */
    PyObject *frame = Py_NewRef(args[1]);
    PyObject *delay = Py_NewRef(zero);
    PyObject *result = NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(filters);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *out = call_method2(s_on_response, PyTuple_GET_ITEM(filters, i), request, frame);
        if (out == NULL) {
            goto done;
        }
        int is = plain_frame(out) ? 0 : PyObject_IsInstance(out, respond_type);
        if (is < 0) {
            Py_DECREF(out);
            goto done;
        }
        if (!is) {
            Py_SETREF(frame, out);
            continue;
        }
        PyObject *sent = PyObject_GetAttr(out, s_frame);
        if (sent == NULL) {
            Py_DECREF(out);
            goto done;
        }
        Py_SETREF(frame, sent);
        PyObject *mute_ms;
        int muted = mute_for(self, out, s_mute_ms, &mute_ms);
        if (muted < 0) {
            Py_DECREF(out);
            goto done;
        }
        Py_DECREF(mute_ms);
        PyObject *asked = PyObject_GetAttr(out, s_delay_ms);
        Py_DECREF(out);
        if (asked == NULL) {
            goto done;
        }
        if (keep_greater(&delay, asked) < 0) { /* if out.delay_ms > delay: delay = out.delay_ms */
            goto done;
        }
    }
    result = effect_if_positive(respond_type, frame, delay);
done:
    Py_DECREF(filters);
    Py_DECREF(frame);
    Py_DECREF(delay);
    return result;
}

/* A routing table: bytes of TABLE_SIZE + 1 indices, each into `groups`, a tuple of tuples. */
static int
check_table(const char *name, PyObject *group_of, PyObject *groups)
{
    if (!PyBytes_CheckExact(group_of) || PyBytes_GET_SIZE(group_of) != TABLE_SIZE + 1) {
        PyErr_Format(PyExc_TypeError, "%s: bytes of %d group indices expected", name, TABLE_SIZE + 1);
        return -1;
    }
    if (!PyTuple_CheckExact(groups)) {
        PyErr_Format(PyExc_TypeError, "%s: a tuple of filter groups expected", name);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(groups);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyTuple_CheckExact(PyTuple_GET_ITEM(groups, i))) {
            PyErr_Format(PyExc_TypeError, "%s: each group a tuple of filters", name);
            return -1;
        }
    }
    const unsigned char *at = (const unsigned char *)PyBytes_AS_STRING(group_of);
    for (Py_ssize_t slot = 0; slot <= TABLE_SIZE; slot++) {
        if (at[slot] >= n) {
            PyErr_Format(PyExc_ValueError, "%s: slot %zd names group %d of %zd", name, slot, at[slot], n);
            return -1;
        }
    }
    return 0;
}

static int
FilterRuns_init(FilterRunsObject *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"mute",
                            "request_group",
                            "request_groups",
                            "response_group",
                            "response_groups",
                            "cpu_response_group",
                            "cpu_response_groups",
                            "cpu_adds_response_filters",
                            "cpu_needed",
                            NULL};
    PyObject *mute, *request_group, *request_groups, *response_group, *response_groups, *cpu_response_group,
        *cpu_response_groups, *cpu_adds, *cpu_needed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOO:FilterRuns", names, &mute, &request_group,
                                     &request_groups, &response_group, &response_groups, &cpu_response_group,
                                     &cpu_response_groups, &cpu_adds, &cpu_needed)) {
        return -1;
    }
    if (check_table("request_group", request_group, request_groups) < 0 ||
        check_table("response_group", response_group, response_groups) < 0 ||
        check_table("cpu_response_group", cpu_response_group, cpu_response_groups) < 0) {
        return -1;
    }
    if (!PyBytes_CheckExact(cpu_adds) || PyBytes_GET_SIZE(cpu_adds) != TABLE_SIZE + 1) {
        PyErr_Format(PyExc_TypeError, "cpu_adds_response_filters: bytes of %d flags expected", TABLE_SIZE + 1);
        return -1;
    }
    Py_XSETREF(self->mute, Py_NewRef(mute));
    Py_XSETREF(self->request_group, Py_NewRef(request_group));
    Py_XSETREF(self->request_groups, Py_NewRef(request_groups));
    Py_XSETREF(self->response_group, Py_NewRef(response_group));
    Py_XSETREF(self->response_groups, Py_NewRef(response_groups));
    Py_XSETREF(self->cpu_response_group, Py_NewRef(cpu_response_group));
    Py_XSETREF(self->cpu_response_groups, Py_NewRef(cpu_response_groups));
    Py_XSETREF(self->cpu_adds_response_filters, Py_NewRef(cpu_adds));
    Py_XSETREF(self->cpu_needed, Py_NewRef(cpu_needed));
    return 0;
}

/* Used before __init__ ran (a subclass that never calls it): refused as an unbound run, not a crash. */
static int
ready(FilterRunsObject *self)
{
    if (self->request_group == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FilterRuns.__init__ was not called");
        return 0;
    }
    return 1;
}

static PyObject *
FilterRuns_on_request_checked(FilterRunsObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!ready(self)) {
        return NULL;
    }
    return FilterRuns_on_request(self, args, nargs, kwnames);
}

static PyObject *
FilterRuns_on_response_checked(FilterRunsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready(self)) {
        return NULL;
    }
    return FilterRuns_on_response(self, args, nargs);
}

static int
FilterRuns_traverse(FilterRunsObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->mute);
    Py_VISIT(self->request_groups);
    Py_VISIT(self->response_groups);
    Py_VISIT(self->cpu_response_groups);
    Py_VISIT(self->cpu_needed);
    return 0;
}

static int
FilterRuns_clear(FilterRunsObject *self)
{
    Py_CLEAR(self->request_group); /* first: a run entered while the rest is cleared is refused (ready()) */
    Py_CLEAR(self->mute);
    Py_CLEAR(self->request_groups);
    Py_CLEAR(self->response_group);
    Py_CLEAR(self->response_groups);
    Py_CLEAR(self->cpu_response_group);
    Py_CLEAR(self->cpu_response_groups);
    Py_CLEAR(self->cpu_adds_response_filters);
    Py_CLEAR(self->cpu_needed);
    return 0;
}

/* (A subclass's instance comes here through its own dealloc, which visits and releases its type itself: this
 * static type's hooks leave the type alone.) */
static void
FilterRuns_dealloc(FilterRunsObject *self)
{
    PyObject_GC_UnTrack(self);
    FilterRuns_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef FilterRuns_methods[] = {
    {"on_request", (PyCFunction)(void (*)(void))FilterRuns_on_request_checked, METH_FASTCALL | METH_KEYWORDS,
     "Run the request filters (or go on from a Deferred): the frame, Forward, Answer, Close or Deferred."},
    {"on_response", (PyCFunction)(void (*)(void))FilterRuns_on_response_checked, METH_FASTCALL,
     "Run the response filters: the frame, or Respond with the longest delay asked for."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FilterRunsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice.proxy.data_path._filter_runs.FilterRuns",
    .tp_doc = "One connection's runs of its filters (proxy.data_path.filter_runs.FilterRuns), compiled.",
    .tp_basicsize = sizeof(FilterRunsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FilterRuns_init,
    .tp_dealloc = (destructor)FilterRuns_dealloc,
    .tp_traverse = (traverseproc)FilterRuns_traverse,
    .tp_clear = (inquiry)FilterRuns_clear,
    .tp_methods = FilterRuns_methods,
};

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(Forward, Answer, Close, Defer, Respond, Deferred, whole, TABLE_SIZE)");
        return NULL;
    }
    Py_ssize_t table_size = PyNumber_AsSsize_t(args[7], PyExc_OverflowError);
    if (table_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (table_size != TABLE_SIZE) {
        PyErr_Format(PyExc_ValueError, "compiled for a routing table of %d, the contract's is %zd", TABLE_SIZE,
                     table_size);
        return NULL;
    }
    Py_XSETREF(forward_type, Py_NewRef(args[0]));
    Py_XSETREF(answer_type, Py_NewRef(args[1]));
    Py_XSETREF(close_type, Py_NewRef(args[2]));
    Py_XSETREF(defer_type, Py_NewRef(args[3]));
    Py_XSETREF(respond_type, Py_NewRef(args[4]));
    Py_XSETREF(deferred_type, Py_NewRef(args[5]));
    Py_XSETREF(whole_function, Py_NewRef(args[6]));
    Py_RETURN_NONE;
}

/* bind_fields(InFlight, RequestHeader): the NamedTuples whose fields routing reads at their indices. */
static PyObject *
bind_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind_fields(InFlight, RequestHeader)");
        return NULL;
    }
    const binding_t fields[] = {
        {NULL, &entry_header, args[0], s_header, NULL},
        {NULL, &header_api_key, args[1], s_api_key, NULL},
    };
    if (bind_all(fields, 2) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Hand over the effect types, Deferred, whole() and TABLE_SIZE (once, from filter_runs.py)."},
    {"bind_fields", (PyCFunction)(void (*)(void))bind_fields, METH_FASTCALL,
     "Hand over InFlight and RequestHeader, whose fields routing reads at their indices (once, from "
     "filter_runs.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef filter_runs_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.data_path._filter_runs",
    "The compiled runs of one connection's filters (proxy/data_path/filter_runs.py says what they are).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__filter_runs(void)
{
    INTERN(s_api_key, "api_key");
    INTERN(s_header, "header");
    INTERN(s_on_request, "on_request");
    INTERN(s_on_response, "on_response");
    INTERN(s_frame, "frame");
    INTERN(s_throttle_ms, "throttle_ms");
    INTERN(s_ready, "ready");
    INTERN(s_original, "original");
    INTERN(s_position, "position");
    INTERN(s_delay_ms, "delay_ms");
    INTERN(s_mute_ms, "mute_ms");
    INTERN(s_replace, "_replace");
    if ((zero = PyLong_FromLong(0)) == NULL || PyType_Ready(&FilterRunsType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&filter_runs_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "FilterRuns", (PyObject *)&FilterRunsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
