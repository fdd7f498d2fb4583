/* What a filter may ask of its client connection, compiled: ClientSide's `now_ms`, `read_ms`, `take_cpu_ns` and
 * `mute_remaining_ms` (proxy/data_path/connection.py, whose Python methods are the references).
 *
 * Why: the client quotas ask them on every Produce and its answer (the clock twice, the read's time, the CPU
 * time to charge, the mute), and a Python method called from C costs a frame each, more than what it does.
 * As method descriptors of ClientSide, the compiled charges (proxy/filters/_client_quotas.c) call them with
 * no frame and no bound method, through the connection's class as before: the filters do not know it. Each
 * reads the connection's slots at their offsets, as its bytecode does (those of another class by name), and
 * computes what its Python computes: int(x * 1000) of the loop's time or the last read's, as Python's float
 * and int do it (any other number through the same operators); the CPU time taken and set to 0; the gate's
 * remaining mute when it is muted, else 0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_compiled.h"

static PyObject *s_loop, *s_time, *s_last_read, *s_cpu_ns, *s_gate, *s_muted, *s_remaining_ms;
static PyObject *zero = NULL, *thousand = NULL;
/* ClientSide's slots the queries read, bound by methods_of */
static slot_t client_loop, client_last_read, client_cpu_ns, client_gate;

/* int(seconds * 1000), stealing `seconds`; NULL passes an error on. */
static PyObject *
ms_of(PyObject *seconds)
{
    if (seconds == NULL) {
        return NULL;
    }
    PyObject *ms;
    if (PyFloat_CheckExact(seconds)) { /* float * int: the int as a double, then int() truncates */
        ms = PyLong_FromDouble(PyFloat_AS_DOUBLE(seconds) * 1000.0);
    }
    else {
        PyObject *product = PyNumber_Multiply(seconds, thousand);
        ms = product == NULL ? NULL : PyNumber_Long(product);
        Py_XDECREF(product);
    }
    Py_DECREF(seconds);
    return ms;
}

/* ClientSide.now_ms(): int(self._loop.time() * 1000). */
static PyObject *
now_ms(PyObject *self, PyObject *unused)
{
    PyObject *loop = slot_get(self, &client_loop);
    if (loop == NULL) {
        return NULL;
    }
    PyObject *seconds = PyObject_CallMethodNoArgs(loop, s_time);
    Py_DECREF(loop);
    return ms_of(seconds);
}

/* ClientSide.read_ms(): int(self._last_read * 1000). */
static PyObject *
read_ms(PyObject *self, PyObject *unused)
{
    return ms_of(slot_get(self, &client_last_read));
}

/* ClientSide.take_cpu_ns(): self.cpu_ns, which becomes 0. */
static PyObject *
take_cpu_ns(PyObject *self, PyObject *unused)
{
    PyObject *spent = slot_get(self, &client_cpu_ns);
    if (spent == NULL || slot_set(self, &client_cpu_ns, zero) < 0) {
        Py_XDECREF(spent);
        return NULL;
    }
    return spent;
}

/* ClientSide.mute_remaining_ms(): self._gate.remaining_ms() while the gate is muted, else 0. */
static PyObject *
mute_remaining_ms(PyObject *self, PyObject *unused)
{
    PyObject *gate = slot_get(self, &client_gate);
    if (gate == NULL) {
        return NULL;
    }
    PyObject *out = NULL;
    int muted = 0;
    if (gate != Py_None) {
        PyObject *flag = PyObject_GetAttr(gate, s_muted);
        muted = flag == NULL ? -1 : PyObject_IsTrue(flag);
        Py_XDECREF(flag);
    }
    if (muted > 0) {
        out = PyObject_CallMethodNoArgs(gate, s_remaining_ms);
    }
    else if (muted == 0) {
        out = Py_NewRef(zero);
    }
    Py_DECREF(gate);
    return out;
}

static PyMethodDef query_defs[] = {
    {"now_ms", now_ms, METH_NOARGS, "ClientSide.now_ms(), compiled (proxy/data_path/connection.py)."},
    {"read_ms", read_ms, METH_NOARGS, "ClientSide.read_ms(), compiled (proxy/data_path/connection.py)."},
    {"take_cpu_ns", take_cpu_ns, METH_NOARGS, "ClientSide.take_cpu_ns(), compiled (proxy/data_path/connection.py)."},
    {"mute_remaining_ms", mute_remaining_ms, METH_NOARGS,
     "ClientSide.mute_remaining_ms(), compiled (proxy/data_path/connection.py)."},
    {NULL, NULL, 0, NULL},
};

/* methods_of(ClientSide): {name: the compiled query, a method of ClientSide}, its slots bound (a TypeError for a
 * class without them). */
static PyObject *
methods_of(PyObject *module, PyObject *cls)
{
    const binding_t bindings[] = {
        {&client_loop, NULL, cls, s_loop, NULL},
        {&client_last_read, NULL, cls, s_last_read, NULL},
        {&client_cpu_ns, NULL, cls, s_cpu_ns, NULL},
        {&client_gate, NULL, cls, s_gate, NULL},
    };
    if (bind_all(bindings, sizeof bindings / sizeof bindings[0]) < 0) {
        return NULL;
    }
    return method_descriptors(cls, query_defs, "methods_of(ClientSide)");
}

static PyMethodDef module_methods[] = {
    {"methods_of", methods_of, METH_O, "The compiled queries of ClientSide, by name: methods of the class given."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef connection_queries_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.data_path._connection_queries",
    "What a filter may ask of its client connection, compiled (proxy/data_path/connection.py's ClientSide).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__connection_queries(void)
{
    INTERN(s_loop, "_loop");
    INTERN(s_time, "time");
    INTERN(s_last_read, "_last_read");
    INTERN(s_cpu_ns, "cpu_ns");
    INTERN(s_gate, "_gate");
    INTERN(s_muted, "muted");
    INTERN(s_remaining_ms, "remaining_ms");
    if ((zero = PyLong_FromLong(0)) == NULL || (thousand = PyLong_FromLong(1000)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&connection_queries_module);
}
