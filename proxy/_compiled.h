/* What the compiled twins of proxy/ share (each included as "../_compiled.h"): reading the __slots__ of the
 * proxy's classes and the fields of its NamedTuples as Python 3.11 reads them, at their offsets and indices;
 * binding them all at once; taking what a module's bind is handed; and handing a call to a compiled method's
 * Python reference.
 *
 * Why: a compiled twin of a Python method (docs/architecture.md, "Compiled readers") reads the attributes its
 * Python reads. Python 3.11 specialises a read of a slot in bytecode to a few instructions; the C API's
 * PyObject_GetAttr looks the name up on the type each time (10-15 ns), which costs the translation what it
 * saves. A slot_t is a slot of one exact class (and of a subclass adding none), found by name once, when a
 * module binds, and read and written there as the class's member descriptor reads and writes it; an object of
 * any other type is read by name. (A bound class keeps object's attribute access: one with its own
 * __getattribute__ or __setattr__ would be bypassed, and none of those bound has one.)
 */
#ifndef SLUICE_COMPILED_H
#define SLUICE_COMPILED_H

#include <Python.h>
#include <structmember.h>

typedef struct {
    PyTypeObject *type;
    PyTypeObject *also; /* a subclass adding no slot, read alike; or NULL */
    Py_ssize_t offset;
    PyObject *name;     /* interned by the module; not owned */
} slot_t;

/* The slot `name` of `type` (its own, or one it inherits) into an empty `slot`, read then only in objects of
 * exactly `type`: 0, or -1 with an exception set when `type.<name>` is not a writable object slot of `type`'s
 * layout. `type` must be a type. */
static inline int
slot_bind(slot_t *slot, PyObject *type, PyObject *name)
{
    if (!PyType_Check(type)) {
        PyErr_Format(PyExc_TypeError, "%R is not a type", type);
        return -1;
    }
    PyObject *descr = PyObject_GetAttr(type, name);
    if (descr == NULL) {
        return -1;
    }
    /* a member descriptor of `type` itself or of a class it derives from (whose layout it extends): not one
     * of another class's, set as an attribute, whose offset means nothing in `type`'s objects */
    int is_slot = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                  PyType_IsSubtype((PyTypeObject *)type, PyDescr_TYPE(descr)) &&
                  ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                  !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
    if (is_slot) {
        slot->offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_DECREF(descr);
    if (!is_slot) {
        PyErr_Format(PyExc_TypeError, "%R is not a slot of %R", name, type);
        return -1;
    }
    slot->type = (PyTypeObject *)Py_NewRef(type);
    slot->also = NULL;
    slot->name = name;
    return 0;
}

/* `also` reads the slot bound by slot_bind where its class does (the same member descriptor): 0, or -1 with
 * an exception set. */
static inline int
slot_share(slot_t *slot, PyObject *also)
{
    PyObject *mine = PyObject_GetAttr((PyObject *)slot->type, slot->name);
    PyObject *theirs = mine == NULL ? NULL : PyObject_GetAttr(also, slot->name);
    int same = theirs != NULL && mine == theirs;
    Py_XDECREF(theirs);
    Py_XDECREF(mine);
    if (!same) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "%R does not read %R as %R does", also, slot->name, slot->type);
        }
        return -1;
    }
    slot->also = (PyTypeObject *)Py_NewRef(also);
    return 0;
}

/* Give up what a bound slot holds (its types). */
static inline void
slot_clear(slot_t *slot)
{
    Py_CLEAR(slot->type);
    Py_CLEAR(slot->also);
}

static inline int
slot_reads(PyObject *obj, const slot_t *slot)
{
    return slot->type != NULL && (Py_IS_TYPE(obj, slot->type) || (slot->also != NULL && Py_IS_TYPE(obj, slot->also)));
}

/* obj.<slot>: a new reference. */
static inline PyObject *
slot_get(PyObject *obj, const slot_t *slot)
{
    if (slot_reads(obj, slot)) {
        PyObject *value = *(PyObject **)((char *)obj + slot->offset);
        if (value != NULL) {
            return Py_NewRef(value);
        }
    }
    return PyObject_GetAttr(obj, slot->name); /* (an unset slot: its AttributeError) */
}

/* obj.<slot> = value: 0, or -1 with an exception set. */
static inline int
slot_set(PyObject *obj, const slot_t *slot, PyObject *value)
{
    if (slot_reads(obj, slot)) {
        Py_XSETREF(*(PyObject **)((char *)obj + slot->offset), Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(obj, slot->name, value);
}

/* A field of one exact NamedTuple class, read at its index as the class's field getter reads it; an object of
 * any other type (or too short a tuple) is read by name. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t index;
    PyObject *name; /* interned by the module; not owned */
} field_t;

/* The field `name` of exactly the NamedTuple `type` into an empty `field`: 0, or -1 with an exception set when
 * `type` is not a tuple type naming it in `_fields`. */
static inline int
field_bind(field_t *field, PyObject *type, PyObject *name)
{
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "%R is not a tuple type", type);
        return -1;
    }
    PyObject *fields = PyObject_GetAttrString(type, "_fields");
    if (fields == NULL) {
        return -1;
    }
    Py_ssize_t index = PySequence_Index(fields, name);
    Py_DECREF(fields);
    if (index < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%R is not a field of %R", name, type);
        return -1;
    }
    field->type = (PyTypeObject *)Py_NewRef(type);
    field->index = index;
    field->name = name;
    return 0;
}

static inline void
field_clear(field_t *field)
{
    Py_CLEAR(field->type);
}

/* obj.<field>: a new reference. */
static inline PyObject *
field_get(PyObject *obj, const field_t *field)
{
    if (field->type != NULL && Py_IS_TYPE(obj, field->type) && PyTuple_GET_SIZE(obj) > field->index) {
        return Py_NewRef(PyTuple_GET_ITEM(obj, field->index));
    }
    return PyObject_GetAttr(obj, field->name);
}

/* obj.<slot> += value: 0, or -1 with an exception set. */
static inline int
slot_add(PyObject *obj, const slot_t *slot, PyObject *value)
{
    PyObject *before = slot_get(obj, slot);
    if (before == NULL) {
        return -1;
    }
    PyObject *after = PyNumber_InPlaceAdd(before, value);
    Py_DECREF(before);
    int failed = after == NULL ? -1 : slot_set(obj, slot, after);
    Py_XDECREF(after);
    return failed;
}

/* An exact int within a C long, as one: 1, or 0 (no exception) when it is another object or beyond a long,
 * which the Python reference then reads as it reads it. */
static inline int
exact_long(PyObject *number, long *value)
{
    if (!PyLong_CheckExact(number)) {
        return 0;
    }
    *value = PyLong_AsLong(number);
    if (*value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A call whose result is not used: 0, or -1 with an exception set. */
static inline int
done_with(PyObject *result)
{
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* One slot (`slot`, of `type`, shared by `also` when not NULL) or one field (`field`, of `type`) to bind. */
typedef struct {
    slot_t *slot;
    field_t *field;
    PyObject *type;
    PyObject *name;
    PyObject *also;
} binding_t;

/* Bind each of `bindings` apart, then all at once: 0, or -1 with an exception set and none of them changed
 * (a bind refused leaves the one before whole). */
static inline int
bind_all(const binding_t *bindings, size_t count)
{
    slot_t *slots = PyMem_Calloc(count, sizeof(slot_t));
    field_t *fields = PyMem_Calloc(count, sizeof(field_t));
    int bound = slots != NULL && fields != NULL;
    if (!bound) {
        PyErr_NoMemory();
    }
    for (size_t k = 0; bound && k < count; k++) {
        const binding_t *b = &bindings[k];
        bound = b->slot != NULL ? slot_bind(&slots[k], b->type, b->name) == 0 &&
                                      (b->also == NULL || slot_share(&slots[k], b->also) == 0)
                                : field_bind(&fields[k], b->type, b->name) == 0;
    }
    for (size_t k = 0; slots != NULL && fields != NULL && k < count; k++) {
        const binding_t *b = &bindings[k];
        if (bound && b->slot != NULL) {
            slot_clear(b->slot);
            *b->slot = slots[k];
        }
        else if (bound) {
            field_clear(b->field);
            *b->field = fields[k];
        }
        else {
            slot_clear(&slots[k]);
            field_clear(&fields[k]);
        }
    }
    PyMem_Free(slots);
    PyMem_Free(fields);
    return bound ? 0 : -1;
}

/* `mapping.get(key)`: the value (a new reference), None where it has none, or NULL with an exception. An exact
 * dict is read inline; anything else through its own `get` (`get_name`, the caller's interned "get"). */
static inline PyObject *
mapping_get(PyObject *mapping, PyObject *key, PyObject *get_name)
{
    if (PyDict_CheckExact(mapping)) {
        PyObject *value = PyDict_GetItemWithError(mapping, key); /* borrowed */
        if (value == NULL) {
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        }
        return Py_NewRef(value);
    }
    PyObject *args[2] = {mapping, key};
    return PyObject_VectorcallMethod(get_name, args, 2, NULL);
}

/* What an item handed to a module's bind must be. */
typedef enum { ANY, A_TYPE, CALLABLE, FROZENSET, AN_INT, A_LIST } kind_t;

/* bound[name], from the dict a module's bind is handed: a new reference, of `kind`; NULL with TypeError if
 * missing or of another kind. */
static inline PyObject *
bound_item(PyObject *bound, const char *name, kind_t kind)
{
    PyObject *value = PyDict_GetItemString(bound, name);
    int fits = value != NULL && (kind == ANY || (kind == A_TYPE && PyType_Check(value)) ||
                                 (kind == CALLABLE && PyCallable_Check(value)) ||
                                 (kind == FROZENSET && PyFrozenSet_CheckExact(value)) ||
                                 (kind == AN_INT && PyLong_CheckExact(value)) ||
                                 (kind == A_LIST && PyList_CheckExact(value)));
    if (!fits) {
        PyErr_Format(PyExc_TypeError, "bind: %s missing or of the wrong kind", name);
        return NULL;
    }
    return Py_NewRef(value);
}

/* A compiled method's call handed to its Python reference as it came: python(self, *args, **kwargs). */
static inline PyObject *
call_reference(PyObject *python, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t given = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[4], **call = given < 4 ? small : PyMem_Malloc((size_t)(given + 1) * sizeof(PyObject *));
    if (call == NULL) {
        return PyErr_NoMemory();
    }
    call[0] = self;
    for (Py_ssize_t k = 0; k < given; k++) {
        call[k + 1] = args[k];
    }
    PyObject *out = PyObject_Vectorcall(python, call, (size_t)nargs + 1, kwnames);
    if (call != small) {
        PyMem_Free(call);
    }
    return out;
}

/* {name: a method descriptor of `cls`} for each of `defs` (up to one with no name): the compiled methods a module
 * hands its Python to set on the class; TypeError (`usage`) when `cls` is not a class. */
static inline PyObject *
method_descriptors(PyObject *cls, PyMethodDef *defs, const char *usage)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyObject *methods = PyDict_New();
    for (PyMethodDef *def = defs; methods != NULL && def->ml_name != NULL; def++) {
        PyObject *method = PyDescr_NewMethod((PyTypeObject *)cls, def);
        if (method == NULL || PyDict_SetItemString(methods, def->ml_name, method) < 0) {
            Py_CLEAR(methods);
        }
        Py_XDECREF(method);
    }
    return methods;
}

/* self.<name>() and self.<name>(a), through vectorcall: a new reference, or NULL with an exception set. The
 * slot before `self` is the callee's to borrow (PY_VECTORCALL_ARGUMENTS_OFFSET), which the arrays keep. */
static inline PyObject *
call_method0(PyObject *self, PyObject *name)
{
    PyObject *args[2] = {NULL, self};
    return PyObject_VectorcallMethod(name, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static inline PyObject *
call_method1(PyObject *self, PyObject *name, PyObject *a)
{
    PyObject *args[3] = {NULL, self, a};
    return PyObject_VectorcallMethod(name, args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* In a module's init: `var` = the interned `text`, or the init fails. */
#define INTERN(var, text)                                                                                     \
    if ((var = PyUnicode_InternFromString(text)) == NULL) {                                                   \
        return NULL;                                                                                          \
    }

/* (i, other) from an index and a new reference to `other`, which it takes over whether or not it succeeds
 * (NULL: NULL). What a compiled run returns once a read; Py_BuildValue would parse its format string each
 * time (~500 instructions for a pair). */
static inline PyObject *
index_and(Py_ssize_t i, PyObject *other)
{
    PyObject *index = other == NULL ? NULL : PyLong_FromSsize_t(i);
    PyObject *pair = index == NULL ? NULL : PyTuple_Pack(2, index, other);
    Py_XDECREF(index);
    Py_XDECREF(other);
    return pair;
}

#endif
