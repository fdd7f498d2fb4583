/* The compiled sampled-window rate: SampledRate of quota/window.py, the stat behind every window quota
 * sensor (spec §1.2-§1.5), and the sensor's record-then-check fused into one call.
 *
 * Why C: every Produce request and every answer is charged to a sensor, and in Python one record and check
 * is three calls into the rate (record, total, window_size_ms) plus the throttle arithmetic, ~0.45 us; here
 * it is one call (docs/architecture.md, "Compiled readers"). The Python class stays the reference and runs
 * where this module was not built; this type is its line-by-line translation, the same ring of N + 1 slots
 * (N for Kafka <= 3.7) grown one slot at a time, the same expiry (by last event, or by start), the same lazy
 * purge instant, the same slot-order sum after a slot is reset, the same oldest() side effect and Java's
 * truncating division (tests/quota/test_compiled_window.py holds the two equal after every step of random
 * histories, and runs the spec's golden vectors on both).
 *
 * Where the two differ, on purpose and out of the proxy's reach:
 * - Values are C doubles. The Python twin keeps a sum of ints as an exact Python int; this type keeps
 *   whether the sum (and each sample) took only ints, and hands the total back as an int then, so int
 *   values give the same results, of the same types, as long as every partial sum stays below 2^53 (bytes
 *   in one window: 9 PB). Beyond 2^53 the double rounds where the int does not; an int beyond the double
 *   range raises OverflowError. A value that is neither an int nor a float is read by its __float__.
 * - Times are int64 milliseconds within +-2^60 (36 million years) and N x W at most 2^60 ms (the config
 *   refuses windows beyond 24.8 days): OverflowError outside, where the Python twin would go on. In that
 *   range no sum or difference below can overflow: times and purge instants stay within 2^62.
 * - The throttle of record_and_throttle is Java's Math.round of a double, a long: the Python twin's int is
 *   the same number (java_round saturates at the long range).
 * Floating point: each operation is the one Python performs, in the same order, on IEEE doubles; no
 * expression has the a * b + c shape a compiler may contract into a fused multiply-add.
 *
 * No Python code runs inside a method but the reading of its arguments.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

/* The same 64-bit platforms as the protocol readers (protocol/_compiled.c): elsewhere the build stops
 * here, the extension is skipped (it is optional) and the Python twin runs. */
#if SIZEOF_SIZE_T < 8
#error "the compiled rate needs a 64-bit platform"
#endif

/* The purge instant of a rate with no samples (window._NEVER): later than any time taken. */
#define NEVER ((int64_t)1 << 62)
#define TIME_LIMIT ((int64_t)1 << 60)
#define TWO_63 9223372036854775808.0

/* sluice.quota.errors.require_positive_int, imported when the module loads: the constructor's checks. */
static PyObject *require_positive_int = NULL;

typedef struct {
    int64_t start;
    int64_t last; /* the time of the sample's last event (>= 3.8 expiry); a legacy sample expires by start */
    int64_t count;
    double value;
    int value_is_int; /* every value added since the slot was reset was an int */
} sample;

typedef struct {
    PyObject_HEAD
    int64_t num_samples;
    int64_t window_ms;
    int64_t slots;
    int64_t expire_age_ms;
    int64_t min_full_windows;
    int legacy;
    Py_ssize_t used; /* slots taken so far: the Python twin's list length */
    Py_ssize_t allocated;
    sample *ring;
    Py_ssize_t cur;
    double total;
    int total_is_int;
    int64_t oldest_start_ms;
    int64_t next_purge_ms;
} SampledRateObject;

static PyTypeObject SampledRateType;

/* The time a sample expires by: its last event (>= 3.8) or its start (<= 3.7), the twin's _purge_key. */
static inline int64_t
purge_key(const SampledRateObject *self, const sample *s)
{
    return self->legacy ? s->start : s->last;
}

static void
refresh(SampledRateObject *self)
{
    int64_t oldest = self->ring[0].start;
    int64_t first_expiring = purge_key(self, &self->ring[0]);
    for (Py_ssize_t i = 1; i < self->used; i++) {
        const sample *s = &self->ring[i];
        if (s->start < oldest) {
            oldest = s->start;
        }
        int64_t key = purge_key(self, s);
        if (key < first_expiring) {
            first_expiring = key;
        }
    }
    self->oldest_start_ms = oldest;
    self->next_purge_ms = first_expiring + self->expire_age_ms;
}

static void
reset_sample(sample *s, int64_t now_ms)
{
    s->start = now_ms;
    s->last = now_ms;
    s->count = 0;
    s->value = 0.0;
    s->value_is_int = 1;
}

/* The twin's _ordered_sum: slot order, left to right, as Kafka's combine() adds its doubles. */
static void
ordered_sum(SampledRateObject *self)
{
    double total = 0.0;
    int is_int = 1;
    for (Py_ssize_t i = 0; i < self->used; i++) {
        total += self->ring[i].value;
        is_int &= self->ring[i].value_is_int;
    }
    self->total = total;
    self->total_is_int = is_int;
}

/* A new slot at the end of the ring, started at now_ms: 0, or -1 with MemoryError set. */
static int
append_sample(SampledRateObject *self, int64_t now_ms)
{
    if (self->used == self->allocated) {
        Py_ssize_t grown = self->allocated < 8 ? 8 : self->allocated * 2;
        if (grown > self->slots) {
            grown = (Py_ssize_t)self->slots;
        }
        sample *ring = PyMem_Realloc(self->ring, (size_t)grown * sizeof(sample));
        if (ring == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->ring = ring;
        self->allocated = grown;
    }
    reset_sample(&self->ring[self->used++], now_ms);
    refresh(self);
    return 0;
}

/* The next slot of the ring becomes the current sample, started at now_ms: its index, or -1 (MemoryError). */
static Py_ssize_t
advance(SampledRateObject *self, int64_t now_ms)
{
    Py_ssize_t cur = (Py_ssize_t)((self->cur + 1) % self->slots);
    if (cur == self->used) {
        /* The current sample moves only once its slot exists: a failed growth leaves the rate as it was. */
        if (append_sample(self, now_ms) < 0) {
            return -1;
        }
        self->cur = cur;
        return cur;
    }
    self->cur = cur;
    reset_sample(&self->ring[cur], now_ms);
    ordered_sum(self);
    refresh(self);
    return cur;
}

static void
purge(SampledRateObject *self, int64_t now_ms)
{
    int purged = 0;
    for (Py_ssize_t i = 0; i < self->used; i++) {
        sample *s = &self->ring[i];
        if (now_ms - purge_key(self, s) >= self->expire_age_ms) {
            reset_sample(s, now_ms);
            purged = 1;
        }
    }
    if (purged) {
        ordered_sum(self);
    }
    refresh(self);
}

static inline void
purge_if_due(SampledRateObject *self, int64_t now_ms)
{
    if (now_ms >= self->next_purge_ms) {
        purge(self, now_ms);
    }
}

/* A time argument: 0, or -1 with TypeError or OverflowError set. */
static int
read_time(PyObject *arg, int64_t *out)
{
    long long value = PyLong_AsLongLong(arg);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < -TIME_LIMIT || value > TIME_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "now_ms beyond +-2**60: out of the compiled rate's range");
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

/* A value argument as a double, and whether it is an int: 0, or -1 with an exception set. */
static int
read_value(PyObject *arg, double *out, int *is_int)
{
    if (PyFloat_CheckExact(arg)) {
        *out = PyFloat_AS_DOUBLE(arg);
        *is_int = 0;
        return 0;
    }
    *is_int = PyLong_Check(arg);
    *out = *is_int ? PyLong_AsDouble(arg) : PyFloat_AsDouble(arg);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* The twin's record: 0, or -1 with MemoryError set. */
static int
record(SampledRateObject *self, double value, int value_is_int, int64_t now_ms)
{
    Py_ssize_t cur;
    if (self->used == 0) {
        if (append_sample(self, now_ms) < 0) {
            return -1;
        }
        cur = 0;
    }
    else {
        cur = self->cur;
        if (now_ms - self->ring[cur].start >= self->window_ms) {
            cur = advance(self, now_ms);
            if (cur < 0) {
                return -1;
            }
        }
    }
    sample *s = &self->ring[cur];
    s->value += value;
    s->value_is_int &= value_is_int;
    s->count += 1;
    s->last = now_ms;
    self->total += value;
    self->total_is_int &= value_is_int;
    if (!self->legacy) {
        int64_t expiry = now_ms + self->expire_age_ms;
        if (expiry < self->next_purge_ms) { /* only when the clock went backwards */
            self->next_purge_ms = expiry;
        }
    }
    return 0;
}

/* The twin's window_size_ms: the window in ms, or -1 with MemoryError set. */
static int64_t
window_size(SampledRateObject *self, int64_t now_ms)
{
    purge_if_due(self, now_ms);
    if (self->used == 0 && append_sample(self, now_ms) < 0) { /* Kafka's oldest() side effect */
        return -1;
    }
    int64_t elapsed = now_ms - self->oldest_start_ms;
    int64_t window = self->window_ms;
    int64_t full = elapsed / window; /* C, like Java, truncates towards zero */
    if (full < self->min_full_windows) {
        elapsed += (self->min_full_windows - full) * window;
    }
    return elapsed > 1 ? elapsed : 1;
}

static PyObject *
total_object(const SampledRateObject *self)
{
    return self->total_is_int ? PyLong_FromDouble(self->total) : PyFloat_FromDouble(self->total);
}

/* quota.throttle.java_round: Java's Math.round(double), NaN to 0, saturating at the long range. */
static int64_t
java_round(double x)
{
    if (x != x) {
        return 0;
    }
    if (x >= TWO_63) {
        return INT64_MAX;
    }
    if (x < -TWO_63) {
        return INT64_MIN;
    }
    double low = floor(x);
    /* x - floor(x) is exact for every double, so the tie test is exact too. */
    return x - low >= 0.5 ? (int64_t)low + 1 : (int64_t)low;
}

static PyObject *
SampledRate_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"num_samples", "window_ms", "legacy", NULL};
    PyObject *num_samples_arg = NULL, *window_ms_arg = NULL, *legacy_arg = Py_False;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "|OO$O:SampledRate", keywords, &num_samples_arg, &window_ms_arg, &legacy_arg)) {
        return NULL;
    }
    /* The twin's checks, in its order (QuotaConfigError), before any conversion. */
    PyObject *checked_num_samples = NULL, *checked_window_ms = NULL;
    if (num_samples_arg != NULL) {
        checked_num_samples = PyObject_CallFunction(require_positive_int, "sO", "num_samples", num_samples_arg);
        if (checked_num_samples == NULL) {
            return NULL;
        }
    }
    if (window_ms_arg != NULL) {
        checked_window_ms = PyObject_CallFunction(require_positive_int, "sO", "window_ms", window_ms_arg);
        if (checked_window_ms == NULL) {
            Py_XDECREF(checked_num_samples);
            return NULL;
        }
    }
    long long num_samples = checked_num_samples != NULL ? PyLong_AsLongLong(checked_num_samples) : 11;
    Py_XDECREF(checked_num_samples);
    if (num_samples == -1 && PyErr_Occurred()) {
        Py_XDECREF(checked_window_ms);
        return NULL;
    }
    long long window_ms = checked_window_ms != NULL ? PyLong_AsLongLong(checked_window_ms) : 1000;
    Py_XDECREF(checked_window_ms);
    if (window_ms == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (num_samples < 1 || window_ms < 1) {
        /* Only an int subclass that lies to the twin's check gets here; the ring needs at least one slot. */
        PyErr_SetString(PyExc_ValueError, "num_samples and window_ms must be at least 1");
        return NULL;
    }
    if (num_samples > TIME_LIMIT / window_ms) {
        PyErr_SetString(PyExc_OverflowError, "num_samples x window_ms beyond 2**60 ms: out of the compiled rate's range");
        return NULL;
    }
    int legacy = PyObject_IsTrue(legacy_arg);
    if (legacy < 0) {
        return NULL;
    }
    SampledRateObject *self = (SampledRateObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->num_samples = num_samples;
    self->window_ms = window_ms;
    self->legacy = legacy;
    self->slots = legacy ? num_samples : num_samples + 1;
    self->expire_age_ms = num_samples * window_ms;
    self->min_full_windows = num_samples - 1;
    self->used = 0;
    self->allocated = 0;
    self->ring = NULL;
    self->cur = 0;
    self->total = 0.0;
    self->total_is_int = 1;
    self->oldest_start_ms = 0;
    self->next_purge_ms = NEVER;
    return (PyObject *)self;
}

static void
SampledRate_dealloc(SampledRateObject *self)
{
    PyMem_Free(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, expected, nargs);
        return -1;
    }
    return 0;
}

static PyObject *
SampledRate_record(SampledRateObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double value;
    int value_is_int;
    int64_t now_ms;
    if (check_nargs("record", nargs, 2) < 0 || read_value(args[0], &value, &value_is_int) < 0 ||
        read_time(args[1], &now_ms) < 0 || record(self, value, value_is_int, now_ms) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
SampledRate_total(SampledRateObject *self, PyObject *arg)
{
    int64_t now_ms;
    if (read_time(arg, &now_ms) < 0) {
        return NULL;
    }
    purge_if_due(self, now_ms);
    return total_object(self);
}

static PyObject *
SampledRate_window_size_ms(SampledRateObject *self, PyObject *arg)
{
    int64_t now_ms;
    if (read_time(arg, &now_ms) < 0) {
        return NULL;
    }
    int64_t window = window_size(self, now_ms);
    return window < 0 ? NULL : PyLong_FromLongLong(window);
}

static PyObject *
SampledRate_measure(SampledRateObject *self, PyObject *arg)
{
    int64_t now_ms;
    if (read_time(arg, &now_ms) < 0) {
        return NULL;
    }
    purge_if_due(self, now_ms);
    double total = self->total; /* read before window_size, as the twin's measure does */
    int64_t window = window_size(self, now_ms);
    return window < 0 ? NULL : PyFloat_FromDouble(total / ((double)window / 1000.0));
}

static PyObject *
SampledRate_live_samples(SampledRateObject *self, PyObject *arg)
{
    int64_t now_ms;
    if (read_time(arg, &now_ms) < 0) {
        return NULL;
    }
    purge_if_due(self, now_ms);
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < self->used; i++) {
        live += self->ring[i].count > 0;
    }
    return PyLong_FromSsize_t(live);
}

static PyObject *
SampledRate_clear(SampledRateObject *self, PyObject *Py_UNUSED(ignored))
{
    self->used = 0; /* the ring keeps its memory: a cleared sensor is used again */
    self->cur = 0;
    self->total = 0.0;
    self->total_is_int = 1;
    self->oldest_start_ms = 0;
    self->next_purge_ms = NEVER;
    Py_RETURN_NONE;
}

/* WindowQuotaSensor.record(value, now_ms) with its check, as one call: record, then the throttle Kafka
 * derives from the rate at now_ms, 0 when within bound (spec §1.5, §1.7; quota.throttle.window_throttle_ms). */
static PyObject *
SampledRate_record_and_throttle(SampledRateObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double value, bound;
    int value_is_int;
    int64_t now_ms;
    if (check_nargs("record_and_throttle", nargs, 3) < 0 || read_value(args[0], &value, &value_is_int) < 0 ||
        read_time(args[1], &now_ms) < 0) {
        return NULL;
    }
    bound = PyFloat_AsDouble(args[2]);
    if (bound == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (record(self, value, value_is_int, now_ms) < 0) {
        return NULL;
    }
    purge_if_due(self, now_ms);
    double total = self->total;
    int64_t window = window_size(self, now_ms);
    if (window < 0) {
        return NULL;
    }
    double observed = total / ((double)window / 1000.0);
    if (observed <= bound) {
        return PyLong_FromLong(0);
    }
    return PyLong_FromLongLong(java_round((observed - bound) / bound * (double)window));
}

static PyObject *
SampledRate_repr(SampledRateObject *self)
{
    PyObject *total = total_object(self);
    if (total == NULL) {
        return NULL;
    }
    PyObject *text = PyUnicode_FromFormat(
        "SampledRate(N=%lld, W=%lldms, %s, total=%R)", (long long)self->num_samples,
        (long long)self->window_ms, self->legacy ? "legacy" : "3.8", total);
    Py_DECREF(total);
    return text;
}

static PyObject *
SampledRate_get_num_samples(SampledRateObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->num_samples);
}

static PyObject *
SampledRate_get_window_ms(SampledRateObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->window_ms);
}

static PyObject *
SampledRate_get_legacy(SampledRateObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->legacy);
}

static PyMethodDef SampledRate_methods[] = {
    {"record", (PyCFunction)(void (*)(void))SampledRate_record, METH_FASTCALL,
     "Add value at now_ms: into the current sample, or a new one if the current one is complete."},
    {"total", (PyCFunction)SampledRate_total, METH_O,
     "The window sum at now_ms: the values of all unexpired samples."},
    {"window_size_ms", (PyCFunction)SampledRate_window_size_ms, METH_O,
     "Rate.windowSize: ms from the oldest sample's start, at least N-1 whole windows, at least 1."},
    {"measure", (PyCFunction)SampledRate_measure, METH_O,
     "The rate at now_ms in units per second: window sum / (window size in s)."},
    {"live_samples", (PyCFunction)SampledRate_live_samples, METH_O,
     "How many samples hold at least one event after purging at now_ms."},
    {"clear", (PyCFunction)SampledRate_clear, METH_NOARGS, "Forget every sample, as if newly created."},
    {"record_and_throttle", (PyCFunction)(void (*)(void))SampledRate_record_and_throttle, METH_FASTCALL,
     "Record value at now_ms, then the throttle in ms the bound demands (0 if within it)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SampledRate_getset[] = {
    {"num_samples", (getter)SampledRate_get_num_samples, NULL, NULL, NULL},
    {"window_ms", (getter)SampledRate_get_window_ms, NULL, NULL, NULL},
    {"legacy", (getter)SampledRate_get_legacy, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SampledRateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice.quota._compiled.SampledRate",
    .tp_doc = "Kafka's sampled-window rate (quota.window.SampledRate), compiled.",
    .tp_basicsize = sizeof(SampledRateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = SampledRate_new,
    .tp_dealloc = (destructor)SampledRate_dealloc,
    .tp_repr = (reprfunc)SampledRate_repr,
    .tp_methods = SampledRate_methods,
    .tp_getset = SampledRate_getset,
};

static struct PyModuleDef rate_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_compiled",
    .m_doc = "The compiled sampled-window rate of the quota sensors (quota/compiled.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__compiled(void)
{
    PyObject *errors = PyImport_ImportModule("sluice.quota.errors");
    if (errors == NULL) {
        return NULL;
    }
    require_positive_int = PyObject_GetAttrString(errors, "require_positive_int");
    Py_DECREF(errors);
    if (require_positive_int == NULL || PyType_Ready(&SampledRateType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&rate_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&SampledRateType);
    if (PyModule_AddObject(module, "SampledRate", (PyObject *)&SampledRateType) < 0) {
        Py_DECREF(&SampledRateType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
