/* BrokerAddressRewrite.on_response, compiled (proxy/filters/broker_rewrite.py is its reference).
 *
 * Every Produce and Fetch answer of a connection comes to this filter (KIP-951's NodeEndpoints may name a new
 * leader in any of them), and nearly all leave as they came: an old version at once, a new one after the
 * compiled walk (protocol/_compiled.c's rewrite_node_endpoints) found nothing to rewrite. That common case is
 * written out here, with no Python frame of the filter's: the chain's compiled runs call this method
 * descriptor directly. Every other case goes to the Python method as it came, before anything is done: the
 * other APIs (Metadata, FindCoordinator, DescribeCluster), an answer whose header carries tagged fields, a
 * frame that is not bytes or a byte view, keywords, a subclass of the filter. An answer the walk refuses (a
 * ProtocolError) goes to the Python after the walk, which walks it again and raises what it raises (a version
 * the filter cannot read as the client's doing, `unoffered_version`): the directory is asked again for the
 * addresses it was asked before the refusal (it answers the same). An answer that was rewritten ends in the
 * Python helper both twins call, `_endpoints_rewritten` (counted, the new frame built). What bind() is handed
 * is read then: a name rebound in broker_rewrite.py afterwards is not seen.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_compiled.h"

/* What bind() hands over once. */
static PyObject *reference = NULL;        /* the Python on_response */
static PyTypeObject *rewrite_type = NULL; /* BrokerAddressRewrite: a subclass's own helpers run, in the Python */
static PyObject *rewrite_node_endpoints = NULL;
static PyObject *protocol_error = NULL;
static long produce_key = -1;
/* Per API key (the index), the first version whose answers may carry NodeEndpoints; -1 for the others. */
static Py_ssize_t endpoints_count = 0;
static long *endpoints_from = NULL;

static slot_t rewrite_directory, rewrite_fetch_topics_read;
static field_t entry_header, header_api_key, header_api_version;

static PyObject *s_directory, *s_fetch_topics_read, *s_header, *s_api_key, *s_api_version, *s_advertise,
    *s_endpoints_rewritten;
static PyObject *body_start = NULL;  /* 4 + 5: the size prefix and a flexible response header without tags */
static PyObject *header_size = NULL; /* 5 */

/* The byte at `at` of a frame (bytes, or a one-dimensional view of bytes, read as frame[at] reads it), or -1
 * when the frame is another object, is shorter, or refuses its buffer (a released view): the Python then reads
 * it (or fails to) as it does. */
static int
frame_byte(PyObject *frame, Py_ssize_t at)
{
    if (PyBytes_CheckExact(frame)) {
        return PyBytes_GET_SIZE(frame) > at ? (unsigned char)PyBytes_AS_STRING(frame)[at] : -1;
    }
    if (!PyMemoryView_Check(frame)) {
        return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return -1;
    }
    int bytes = view.ndim == 1 && view.itemsize == 1 && view.strides != NULL && view.strides[0] == 1 &&
                view.format != NULL && view.format[0] == 'B' && view.format[1] == '\0';
    int byte = bytes && view.len > at ? ((const unsigned char *)view.buf)[at] : -1;
    PyBuffer_Release(&view);
    return byte;
}

/* The walk of a Produce or Fetch answer of a version that may carry NodeEndpoints:
 * rewrite_node_endpoints(key, version, frame, directory.advertise, 9, remember), then the frame, or the
 * rewritten one through `_endpoints_rewritten`. NULL with *refer set when the walk refused the answer (its
 * ProtocolError cleared: the Python walks it again and raises). */
static PyObject *
rewrite(PyObject *self, PyObject *key_obj, PyObject *version_obj, PyObject *frame, long key, int *refer)
{
    /* `key == PRODUCE or self._fetch_topics_read`: a Produce answer's walk is kept for the throttle patch, a
     * Fetch answer's for the usage records when they read it */
    PyObject *remember = key == produce_key ? Py_NewRef(Py_True) : slot_get(self, &rewrite_fetch_topics_read);
    PyObject *directory = remember == NULL ? NULL : slot_get(self, &rewrite_directory);
    PyObject *advertise = directory == NULL ? NULL : PyObject_GetAttr(directory, s_advertise);
    Py_XDECREF(directory);
    if (advertise == NULL) {
        Py_XDECREF(remember);
        return NULL;
    }
    PyObject *args[6] = {key_obj, version_obj, frame, advertise, body_start, remember};
    PyObject *found = PyObject_Vectorcall(rewrite_node_endpoints, args, 6, NULL);
    Py_DECREF(advertise);
    Py_DECREF(remember);
    if (found == NULL) {
        if (PyErr_ExceptionMatches(protocol_error)) {
            PyErr_Clear();
            *refer = 1;
        }
        return NULL;
    }
    PyObject *out = NULL;
    if (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2) {
        PyErr_SetString(PyExc_TypeError, "rewrite_node_endpoints answered no (body, rewritten) pair");
    }
    else if (PyTuple_GET_ITEM(found, 0) == Py_None) {
        out = Py_NewRef(frame);
    }
    else {
        PyObject *call[6] = {self, key_obj, frame, header_size, PyTuple_GET_ITEM(found, 0), PyTuple_GET_ITEM(found, 1)};
        out = PyObject_VectorcallMethod(s_endpoints_rewritten, call, 6, NULL);
    }
    Py_DECREF(found);
    return out;
}

/* BrokerAddressRewrite.on_response(request, frame), compiled. */
static PyObject *
on_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs != 2 || !Py_IS_TYPE(self, rewrite_type)) {
        goto reference;
    }
    PyObject *frame = args[1];
    PyObject *header = field_get(args[0], &entry_header);
    PyObject *key_obj = header == NULL ? NULL : field_get(header, &header_api_key);
    if (key_obj == NULL) {
        Py_XDECREF(header);
        return NULL;
    }
    PyObject *version_obj = NULL, *out = NULL;
    long key = -1, version = -1, first = -1;
    if (exact_long(key_obj, &key) && key >= 0 && key < endpoints_count) {
        first = endpoints_from[key];
    }
    int refer = first < 0; /* the other APIs, and a key the table does not read, are the Python's */
    if (!refer) {
        version_obj = field_get(header, &header_api_version);
        if (version_obj != NULL && !exact_long(version_obj, &version)) {
            refer = 1;
        }
        else if (version_obj != NULL && version < first) {
            out = Py_NewRef(frame); /* Produce and Fetch answers of old versions leave at once */
        }
        else if (version_obj != NULL && frame_byte(frame, 8) != 0) {
            refer = 1; /* a header with tagged fields, or a frame the Python reads */
        }
        else if (version_obj != NULL) {
            out = rewrite(self, key_obj, version_obj, frame, key, &refer);
        }
    }
    Py_DECREF(header);
    Py_DECREF(key_obj);
    Py_XDECREF(version_obj);
    if (out != NULL || !refer) {
        return out;
    }
reference:
    return call_reference(reference, self, args, nargs, kwnames);
}

static PyMethodDef on_response_def = {
    "on_response", (PyCFunction)(void (*)(void))on_response, METH_FASTCALL | METH_KEYWORDS,
    "BrokerAddressRewrite.on_response(request, frame), compiled (proxy/filters/broker_rewrite.py is its "
    "reference)."};

/* bind(BrokerAddressRewrite, what): `what` names what the compiled method uses of its module
 * (broker_rewrite.py hands it over once); the compiled on_response, a method of BrokerAddressRewrite. */
static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind(BrokerAddressRewrite, {name: what})");
        return NULL;
    }
    PyObject *filter = args[0], *what = args[1];
    PyObject *python = bound_item(what, "on_response", CALLABLE);
    PyObject *in_flight = python == NULL ? NULL : bound_item(what, "InFlight", A_TYPE);
    PyObject *request_header = in_flight == NULL ? NULL : bound_item(what, "RequestHeader", A_TYPE);
    PyObject *walk = request_header == NULL ? NULL : bound_item(what, "rewrite_node_endpoints", CALLABLE);
    PyObject *error = walk == NULL ? NULL : bound_item(what, "ProtocolError", A_TYPE);
    PyObject *produce = error == NULL ? NULL : bound_item(what, "PRODUCE", AN_INT);
    PyObject *firsts = produce == NULL ? NULL : bound_item(what, "endpoints_from", A_LIST);
    long *table = NULL, produce_value = produce == NULL ? -1 : PyLong_AsLong(produce);
    Py_ssize_t count = firsts == NULL ? 0 : PyList_GET_SIZE(firsts);
    PyObject *method = NULL;
    int ok = firsts != NULL && !PyErr_Occurred();
    if (ok && (table = PyMem_Calloc(count > 0 ? (size_t)count : 1, sizeof(long))) == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    for (Py_ssize_t k = 0; ok && k < count; k++) {
        PyObject *item = PyList_GET_ITEM(firsts, k);
        table[k] = PyLong_CheckExact(item) ? PyLong_AsLong(item) : -1;
        if (!PyLong_CheckExact(item) || PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "bind: endpoints_from must list ints");
            ok = 0;
        }
    }
    if (ok) {
        const binding_t bindings[] = {
            {&rewrite_directory, NULL, filter, s_directory, NULL},
            {&rewrite_fetch_topics_read, NULL, filter, s_fetch_topics_read, NULL},
            {NULL, &entry_header, in_flight, s_header, NULL},
            {NULL, &header_api_key, request_header, s_api_key, NULL},
            {NULL, &header_api_version, request_header, s_api_version, NULL},
        };
        ok = bind_all(bindings, sizeof bindings / sizeof bindings[0]) == 0;
    }
    if (ok && (method = PyDescr_NewMethod((PyTypeObject *)filter, &on_response_def)) != NULL) {
        Py_XSETREF(rewrite_type, (PyTypeObject *)Py_NewRef(filter));
        Py_XSETREF(reference, Py_NewRef(python));
        Py_XSETREF(rewrite_node_endpoints, Py_NewRef(walk));
        Py_XSETREF(protocol_error, Py_NewRef(error));
        produce_key = produce_value;
        PyMem_Free(endpoints_from);
        endpoints_from = table;
        endpoints_count = count;
        table = NULL;
    }
    PyMem_Free(table);
    Py_XDECREF(python);
    Py_XDECREF(in_flight);
    Py_XDECREF(request_header);
    Py_XDECREF(walk);
    Py_XDECREF(error);
    Py_XDECREF(produce);
    Py_XDECREF(firsts);
    return method;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Hand over BrokerAddressRewrite and what its answers' rewrite uses; returns its compiled on_response."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef broker_rewrite_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.filters._broker_rewrite",
    "BrokerAddressRewrite.on_response, compiled (proxy/filters/broker_rewrite.py says what it does).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__broker_rewrite(void)
{
    INTERN(s_directory, "_directory");
    INTERN(s_fetch_topics_read, "_fetch_topics_read");
    INTERN(s_header, "header");
    INTERN(s_api_key, "api_key");
    INTERN(s_api_version, "api_version");
    INTERN(s_advertise, "advertise");
    INTERN(s_endpoints_rewritten, "_endpoints_rewritten");
    if ((body_start = PyLong_FromLong(9)) == NULL || (header_size = PyLong_FromLong(5)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&broker_rewrite_module);
}
