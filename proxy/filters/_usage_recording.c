/* The usage records of one request and of one Fetch answer, compiled: UsageRecording.request and
 * UsageRecording.fetch_response of proxy/filters/usage_recorder.py, with what they call of their own and of
 * the ledger's entity written out inline (`UsageRecording.usage`, `_named`,
 * `EntityUsage.add_request` and `EntityUsage.add_topics`).
 *
 * Why C: every request of every client is counted here, and every Produce's topics added, and in Python the
 * five calls cost ~0.55 us a Produce beside the walk of its topics (docs/architecture.md, "Compiled readers").
 * The Python method stays the reference and runs where this module was not built; this is its line-by-line
 * translation: the same attributes read and written in the same order, the same dict operations, the same
 * comparisons of Python objects, the same calls where the Python calls out (the ledger's `entity`, the walk
 * `produce_topics`, the stream observer of a request passing through). Where the objects are not of the
 * exact types the inline code reads (an entity that is not exactly an EntityUsage, such as the ledger's
 * overflow sink; a dict that is not exactly a dict; topics not a list of (str, size) pairs), it calls the
 * Python method instead, as the Python does (tests/proxy/test_usage_recording_compiled.py holds the two
 * equal on random traffic into ledgers that overflow); topics named by ids are named here, as `_named`
 * names them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_compiled.h"

/* What bind() hands over once, from usage_recorder.py. */
static PyObject *produce_key = NULL;      /* ApiKey.PRODUCE */
static PyTypeObject *frame_head_type = NULL;
static PyObject *produce_topics = NULL;   /* protocol.produce_stream.produce_topics */
static PyObject *protocol_error = NULL;
static PyTypeObject *entity_usage_type = NULL;
static PyObject *streamed_produce = NULL; /* usage_recorder._StreamedProduce */
static PyTypeObject *usage_recording_type = NULL;
/* What bind_fetch() hands over once, for the Fetch answers. */
static PyObject *fetch_key = NULL;             /* ApiKey.FETCH */
static PyObject *response_header_size = NULL;  /* protocol.headers.response_header_size */
static PyObject *walked_fetch_topics = NULL;   /* protocol.response_walks.walked_fetch_topics */
static PyObject *fetch_topic_bytes = NULL;     /* protocol.record_sets.fetch_topic_bytes */

static PyObject *s_conn, *s_recording, *s_broker, *s_user, *s_header;
static PyObject *s_client_id, *s_api_key, *s_cache, *s_ledger, *s_generation, *s_entity, *s_requests,
    *s_add_request, *s_produce_bytes, *s_observe, *s_named, *s_topics, *s_add_topics, *s_max_topics,
    *s_overflow, *s_bytes, *s_request, *s_fetch_response, *s_api_version, *s_fetch_bytes, *s_names_seen,
    *s_topic_names, *s_get;
static PyObject *zero = NULL, *one = NULL, *four = NULL;
/* Read at their offsets and indices (../_compiled.h; bind_slots): the recording's cache, names and ledger,
 * the ledger's generation, an EntityUsage's counters, the request header's fields; the overflow's counters by
 * name. */
static slot_t recording_cache, recording_names_seen, recording_topic_names, recording_ledger, ledger_generation,
    usage_requests, usage_topics, usage_max_topics, usage_overflow, usage_produce_bytes, usage_fetch_bytes,
    overflow_topics, overflow_bytes;
static field_t header_client_id, header_api_key, header_api_version;

/* UsageRecording.usage(user, client_id): a new reference. */
static PyObject *
usage_of(PyObject *recording, PyObject *user, PyObject *client_id)
{
    PyObject *cached = slot_get(recording, &recording_cache);
    if (cached == NULL) {
        return NULL;
    }
    PyObject *ledger = slot_get(recording, &recording_ledger);
    if (ledger == NULL) {
        Py_DECREF(cached);
        return NULL;
    }
    PyObject *usage = NULL;
    if (cached != Py_None) {
        /* cached[0] == ledger.generation and cached[1] == user and cached[2] == client_id */
        PyObject *parts[3] = {NULL, user, client_id};
        int same = 1;
        for (Py_ssize_t k = 0; k < 3 && same == 1; k++) {
            PyObject *kept = PySequence_GetItem(cached, k);
            if (kept == NULL) {
                same = -1;
                break;
            }
            PyObject *now = k == 0 ? slot_get(ledger, &ledger_generation) : Py_NewRef(parts[k]);
            same = now == NULL ? -1 : PyObject_RichCompareBool(kept, now, Py_EQ);
            Py_DECREF(kept);
            Py_XDECREF(now);
        }
        if (same < 0) {
            goto done;
        }
        if (same) {
            usage = PySequence_GetItem(cached, 3);
            goto done;
        }
    }
    /* usage = ledger.entity(user, client_id); self._cache = (ledger.generation, user, client_id, usage) */
    PyObject *args[3] = {ledger, user, client_id};
    usage = PyObject_VectorcallMethod(s_entity, args, 3, NULL);
    if (usage == NULL) {
        goto done;
    }
    PyObject *generation = slot_get(ledger, &ledger_generation);
    PyObject *kept = generation == NULL ? NULL : PyTuple_Pack(4, generation, user, client_id, usage);
    Py_XDECREF(generation);
    if (kept == NULL || slot_set(recording, &recording_cache, kept) < 0) {
        Py_XDECREF(kept);
        Py_CLEAR(usage);
        goto done;
    }
    Py_DECREF(kept);
done:
    Py_DECREF(cached);
    Py_DECREF(ledger);
    return usage;
}

/* usage.add_request(key): EntityUsage's, inline, for an EntityUsage whose `requests` is a dict. */
static int
add_request(PyObject *usage, PyObject *key)
{
    if (!Py_IS_TYPE(usage, entity_usage_type)) {
        PyObject *args[2] = {usage, key};
        return done_with(PyObject_VectorcallMethod(s_add_request, args, 2, NULL));
    }
    /* requests = self.requests; requests[api_key] = requests.get(api_key, 0) + 1 */
    PyObject *requests = slot_get(usage, &usage_requests);
    if (requests == NULL) {
        return -1;
    }
    if (!PyDict_CheckExact(requests)) {
        Py_DECREF(requests);
        PyObject *args[2] = {usage, key};
        return done_with(PyObject_VectorcallMethod(s_add_request, args, 2, NULL));
    }
    PyObject *count = PyDict_GetItemWithError(requests, key);
    if (count == NULL && PyErr_Occurred()) {
        Py_DECREF(requests);
        return -1;
    }
    PyObject *more = PyNumber_Add(count == NULL ? zero : count, one);
    int failed = more == NULL ? -1 : PyDict_SetItem(requests, key, more);
    Py_XDECREF(more);
    Py_DECREF(requests);
    return failed;
}

/* A list of (str, anything) pairs, each an exact tuple: what the inline code reads. */
static int
named_pairs(PyObject *found)
{
    if (!PyList_CheckExact(found)) {
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(found);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *pair = PyList_GET_ITEM(found, k);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0))) {
            return 0;
        }
    }
    return 1;
}

/* `topic, size = item`: a new reference to an exact 2-tuple (the item itself when it is one), or NULL with
 * the error the unpacking raises. */
static PyObject *
unpacked_pair(PyObject *item)
{
    if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
        return Py_NewRef(item);
    }
    PyObject *pair = PySequence_Tuple(item);
    if (pair == NULL) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_ValueError, "expected 2 values to unpack, got %zd", PyTuple_GET_SIZE(pair));
        Py_DECREF(pair);
        return NULL;
    }
    return pair;
}

/* usage.add_topics(found, fetched, broker): EntityUsage's, inline, for an EntityUsage whose `topics` is a
 * dict, and `found` a list of (str, size) pairs. */
static int
add_topics(PyObject *usage, PyObject *found, int fetched, PyObject *broker)
{
    PyObject *topics = NULL;
    if (Py_IS_TYPE(usage, entity_usage_type) && named_pairs(found)) {
        topics = slot_get(usage, &usage_topics);
        if (topics == NULL) {
            return -1;
        }
        if (!PyDict_CheckExact(topics)) {
            Py_CLEAR(topics);
        }
    }
    if (topics == NULL) {
        PyObject *args[4] = {usage, found, fetched ? Py_True : Py_False, broker};
        return done_with(PyObject_VectorcallMethod(s_add_topics, args, 4, NULL));
    }
    Py_ssize_t at = fetched ? 1 : 0;
    int failed = -1;
    /* The loop reads the list as the Python's for loop does, an item at a time: Python code that runs inside
     * it (a broker's __hash__, a size's __iadd__) may have changed the list since named_pairs looked. */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(found); k++) {
        PyObject *pair = unpacked_pair(PyList_GET_ITEM(found, k));
        if (pair == NULL) {
            goto done;
        }
        PyObject *topic = PyTuple_GET_ITEM(pair, 0), *size = PyTuple_GET_ITEM(pair, 1);
        PyObject *key = PyTuple_Pack(2, topic, broker);
        if (key == NULL) {
            Py_DECREF(pair);
            goto done;
        }
        PyObject *counters = PyDict_GetItemWithError(topics, key); /* borrowed */
        if (counters != NULL) {
            Py_INCREF(counters);
        }
        else if (PyErr_Occurred()) {
            Py_DECREF(key);
            Py_DECREF(pair);
            goto done;
        }
        else {
            /* if len(topics) >= self._max_topics: the overflow counts it */
            PyObject *held = PyLong_FromSsize_t(PyDict_GET_SIZE(topics));
            PyObject *limit = held == NULL ? NULL : slot_get(usage, &usage_max_topics);
            int full = limit == NULL ? -1 : PyObject_RichCompareBool(held, limit, Py_GE);
            Py_XDECREF(held);
            Py_XDECREF(limit);
            if (full != 0) {
                Py_DECREF(key);
                if (full > 0) {
                    PyObject *overflow = slot_get(usage, &usage_overflow);
                    full = overflow == NULL ? -1 : slot_add(overflow, &overflow_topics, one);
                    Py_XDECREF(overflow);
                    overflow = full < 0 ? NULL : slot_get(usage, &usage_overflow);
                    full = overflow == NULL ? -1 : slot_add(overflow, &overflow_bytes, size);
                    Py_XDECREF(overflow);
                }
                Py_DECREF(pair);
                if (full < 0) {
                    goto done;
                }
                continue;
            }
            counters = Py_BuildValue("[OO]", zero, zero);
            if (counters == NULL || PyDict_SetItem(topics, key, counters) < 0) {
                Py_XDECREF(counters);
                Py_DECREF(key);
                Py_DECREF(pair);
                goto done;
            }
        }
        Py_DECREF(key);
        /* counters[at] += size */
        PyObject *before = PySequence_GetItem(counters, at);
        PyObject *after = before == NULL ? NULL : PyNumber_InPlaceAdd(before, size);
        Py_XDECREF(before);
        int stored = after == NULL ? -1 : PySequence_SetItem(counters, at, after);
        Py_XDECREF(after);
        Py_DECREF(counters);
        Py_DECREF(pair);
        if (stored < 0) {
            goto done;
        }
    }
    failed = 0;
done:
    Py_DECREF(topics);
    return failed;
}

/* `self._names_seen.get(topic) or self._topic_names(topic) or str(uuid.UUID(bytes=topic))`: `_named`'s name
 * for a topic that is not a str, both attributes read anew for each, as the Python reads them. A new
 * reference, or NULL with the error the Python raises. */
static PyObject *
name_of_id(PyObject *recording, PyObject *topic)
{
    PyObject *seen = slot_get(recording, &recording_names_seen);
    if (seen == NULL) {
        return NULL;
    }
    PyObject *name = mapping_get(seen, topic, s_get);
    Py_DECREF(seen);
    int named = name == NULL ? -1 : PyObject_IsTrue(name);
    if (named != 0) {
        if (named < 0) {
            Py_CLEAR(name);
        }
        return name;
    }
    Py_DECREF(name);
    PyObject *names = slot_get(recording, &recording_topic_names);
    name = names == NULL ? NULL : PyObject_CallOneArg(names, topic);
    Py_XDECREF(names);
    named = name == NULL ? -1 : PyObject_IsTrue(name);
    if (named != 0) {
        if (named < 0) {
            Py_CLEAR(name);
        }
        return name;
    }
    Py_DECREF(name);
    /* str(uuid.UUID(bytes=topic)): the id written out (an id no answer named: seldom, so imported here) */
    PyObject *uuid = PyImport_ImportModule("uuid");
    PyObject *uuid_type = uuid == NULL ? NULL : PyObject_GetAttrString(uuid, "UUID");
    Py_XDECREF(uuid);
    if (uuid_type == NULL) {
        return NULL;
    }
    PyObject *kwnames = Py_BuildValue("(s)", "bytes");
    PyObject *call_args[1] = {topic};
    PyObject *id = kwnames == NULL ? NULL : PyObject_Vectorcall(uuid_type, call_args, 0, kwnames);
    Py_XDECREF(kwnames);
    Py_DECREF(uuid_type);
    if (id == NULL) {
        return NULL;
    }
    name = PyObject_Str(id);
    Py_DECREF(id);
    return name;
}

/* `_named(found)` where some topic is not an exact str (named_pairs said so): the Python's second loop, which
 * keeps a str and names a topic id by what a Metadata answer named it (a v13+ Produce or Fetch names topics
 * by ids, nearly always ones seen), else by the names given, else writes it out. A new list, or NULL with the
 * error the Python raises (its type: an unpacking's message is unpacked_pair's). NULL with no error set for
 * a `found` that is not exactly a list: the Python's `_named` runs instead. It reads `found` as Python's for
 * loop does (its length on every turn, each item held while it is named): a key of `_names_seen` that is not
 * bytes, or the names given, could run Python code that changes it. */
static PyObject *
named_ids(PyObject *recording, PyObject *found)
{
    if (!PyList_CheckExact(found)) {
        return NULL;
    }
    PyObject *named = PyList_New(0);
    for (Py_ssize_t k = 0; named != NULL && k < PyList_GET_SIZE(found); k++) {
        /* for topic, size in found: */
        PyObject *pair = unpacked_pair(PyList_GET_ITEM(found, k));
        PyObject *topic = pair == NULL ? NULL : Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        if (topic != NULL && !PyUnicode_Check(topic)) {
            Py_SETREF(topic, name_of_id(recording, topic));
        }
        PyObject *renamed = topic == NULL ? NULL : PyTuple_Pack(2, topic, PyTuple_GET_ITEM(pair, 1));
        if (renamed == NULL || PyList_Append(named, renamed) < 0) {
            Py_CLEAR(named);
        }
        Py_XDECREF(renamed);
        Py_XDECREF(topic);
        Py_XDECREF(pair);
    }
    return named;
}

/* usage.add_topics(self._named(found), fetched, broker), how both records end: None, or NULL with an
 * exception. `_named` is `found` itself when every topic is named already, else made here (named_ids) or,
 * for a `found` that is not a list, by the Python's. */
static PyObject *
add_named(PyObject *recording, PyObject *usage, PyObject *found, int fetched, PyObject *broker)
{
    PyObject *named;
    if (named_pairs(found)) {
        named = Py_NewRef(found);
    }
    else if ((named = named_ids(recording, found)) == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        PyObject *named_args[2] = {recording, found};
        named = PyObject_VectorcallMethod(s_named, named_args, 2, NULL);
    }
    int failed = named == NULL ? -1 : add_topics(usage, named, fetched, broker);
    Py_XDECREF(named);
    return failed ? NULL : Py_NewRef(Py_None);
}

/* A record's arguments: (recording, user, header, frame, broker=None). */
typedef struct {
    PyObject *recording, *user, *header, *frame, *broker;
} record_args;

/* What both records do first: read their arguments, hand the call to the recording's own `method` where the
 * C does not write it out (keywords, which the method takes; a subclass of UsageRecording, whose usage() or
 * _named() may be its own), else find the entity's usage (`usage`, inline). 1 with *usage a new reference,
 * or 0 with *handed the method's answer, or NULL with an exception set. */
static int
begin_record(PyObject *const *args, size_t nargsf, PyObject *kwnames, PyObject *method, const char *signature,
             int bound, record_args *a, PyObject **usage, PyObject **handed)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    *handed = NULL;
    if (kwnames != NULL && nargs >= 1) {
        *handed = PyObject_VectorcallMethod(method, args, nargsf, kwnames);
        return 0;
    }
    if (nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, signature);
        return 0;
    }
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "usage recording used before bind()");
        return 0;
    }
    *a = (record_args){args[0], args[1], args[2], args[3], nargs == 5 ? args[4] : Py_None};
    if (!Py_IS_TYPE(a->recording, usage_recording_type)) {
        PyObject *call[5] = {a->recording, a->user, a->header, a->frame, a->broker};
        *handed = PyObject_VectorcallMethod(method, call, 5, NULL);
        return 0;
    }
    PyObject *client_id = field_get(a->header, &header_client_id);
    if (client_id == NULL) {
        return 0;
    }
    *usage = usage_of(a->recording, a->user, client_id);
    Py_DECREF(client_id);
    return *usage != NULL;
}

static PyObject *
record_request(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    record_args a;
    PyObject *usage, *handed;
    if (!begin_record(args, nargsf, kwnames, s_request, "record_request(recording, user, header, frame, broker=None)",
                      produce_key != NULL, &a, &usage, &handed)) {
        return handed;
    }
    PyObject *recording = a.recording, *user = a.user, *header = a.header, *frame = a.frame, *broker = a.broker;
    PyObject *result = NULL, *key = NULL, *found = NULL;
    key = field_get(header, &header_api_key);
    if (key == NULL || add_request(usage, key) < 0) {
        goto done;
    }
    int other = PyObject_RichCompareBool(key, produce_key, Py_NE);
    if (other < 0) {
        goto done;
    }
    if (other) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* usage.produce_bytes += len(frame) - 4 (the length first: a read of the slot has no effect) */
    Py_ssize_t size = PyObject_Size(frame);
    PyObject *counted = size < 0 ? NULL : PyLong_FromSsize_t(size - 4);
    int failed = counted == NULL ? -1 : slot_add(usage, &usage_produce_bytes, counted);
    Py_XDECREF(counted);
    if (failed) {
        goto done;
    }
    if (Py_IS_TYPE(frame, frame_head_type)) {
        /* frame.observe(_StreamedProduce(self, user, header, len(frame), broker)) */
        size = PyObject_Size(frame);
        PyObject *sized = size < 0 ? NULL : PyLong_FromSsize_t(size);
        if (sized == NULL) {
            goto done;
        }
        PyObject *fields[5] = {recording, user, header, sized, broker};
        PyObject *observer = PyObject_Vectorcall(streamed_produce, fields, 5, NULL);
        Py_DECREF(sized);
        if (observer == NULL) {
            goto done;
        }
        PyObject *observe_args[2] = {frame, observer};
        failed = done_with(PyObject_VectorcallMethod(s_observe, observe_args, 2, NULL));
        Py_DECREF(observer);
        if (!failed) {
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    /* found = produce_topics(frame, header), a ProtocolError costing only the topics */
    PyObject *walk_args[2] = {frame, header};
    found = PyObject_Vectorcall(produce_topics, walk_args, 2, NULL);
    if (found == NULL) {
        if (PyErr_ExceptionMatches(protocol_error)) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    result = add_named(recording, usage, found, 0, broker);
done:
    Py_XDECREF(found);
    Py_XDECREF(key);
    Py_DECREF(usage);
    return result;
}

/* A call of `fn(a, b, c)` whose ProtocolError the recording swallows: the result, or NULL with no error set
 * (*failed 0: a ProtocolError, the breakdown is lost) or with one (*failed -1). */
static PyObject *
call_or_lose(PyObject *fn, PyObject *a, PyObject *b, PyObject *c, int *failed)
{
    PyObject *call_args[3] = {a, b, c};
    PyObject *result = PyObject_Vectorcall(fn, call_args, 3, NULL);
    *failed = 0;
    if (result == NULL) {
        if (PyErr_ExceptionMatches(protocol_error)) {
            PyErr_Clear();
        }
        else {
            *failed = -1;
        }
    }
    return result;
}

/* record_fetch_response(recording, user, header, frame, broker=None): UsageRecording.fetch_response. */
static PyObject *
record_fetch_response(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    record_args a;
    PyObject *usage, *handed;
    if (!begin_record(args, nargsf, kwnames, s_fetch_response,
                      "record_fetch_response(recording, user, header, frame, broker=None)", fetch_key != NULL, &a,
                      &usage, &handed)) {
        return handed;
    }
    PyObject *recording = a.recording, *header = a.header, *frame = a.frame, *broker = a.broker;
    PyObject *result = NULL, *version = NULL, *header_size = NULL, *start = NULL, *found = NULL;
    int failed;
    /* header_size = response_header_size(FETCH, header.api_version, frame): a ProtocolError, nothing more */
    version = field_get(header, &header_api_version);
    if (version == NULL) {
        goto done;
    }
    header_size = call_or_lose(response_header_size, fetch_key, version, frame, &failed);
    if (header_size == NULL) {
        result = failed ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    /* usage.fetch_bytes += len(frame) - 4 - header_size + 4 */
    Py_ssize_t size = PyObject_Size(frame);
    PyObject *less = size < 0 ? NULL : PyLong_FromSsize_t(size - 4);
    PyObject *body = less == NULL ? NULL : PyNumber_Subtract(less, header_size);
    PyObject *counted = body == NULL ? NULL : PyNumber_Add(body, four);
    Py_XDECREF(less);
    Py_XDECREF(body);
    failed = counted == NULL ? -1 : slot_add(usage, &usage_fetch_bytes, counted);
    Py_XDECREF(counted);
    if (failed) {
        goto done;
    }
    /* The walk the NodeEndpoints rewrite made of this very answer (v16+), if it made one. */
    start = PyNumber_Add(four, header_size);
    if (start == NULL) {
        goto done;
    }
    PyObject *walked_args[3] = {version, frame, start};
    found = PyObject_Vectorcall(walked_fetch_topics, walked_args, 3, NULL);
    if (found == NULL) {
        goto done;
    }
    if (found == Py_None) {
        Py_CLEAR(found);
        found = call_or_lose(fetch_topic_bytes, version, frame, start, &failed);
        if (found == NULL) {
            result = failed ? NULL : Py_NewRef(Py_None);
            goto done;
        }
    }
    result = add_named(recording, usage, found, 1, broker);
done:
    Py_XDECREF(found);
    Py_XDECREF(start);
    Py_XDECREF(header_size);
    Py_XDECREF(version);
    Py_DECREF(usage);
    return result;
}

/* What the fetch answers' recording reads of its module: bind_fetch(ApiKey.FETCH, response_header_size,
 * walked_fetch_topics, fetch_topic_bytes). */
static PyObject *
bind_fetch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_fetch(ApiKey.FETCH, response_header_size, walked_fetch_topics, fetch_topic_bytes)");
        return NULL;
    }
    Py_XSETREF(fetch_key, Py_NewRef(args[0]));
    Py_XSETREF(response_header_size, Py_NewRef(args[1]));
    Py_XSETREF(walked_fetch_topics, Py_NewRef(args[2]));
    Py_XSETREF(fetch_topic_bytes, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(ApiKey.PRODUCE, FrameHead, produce_topics, ProtocolError, EntityUsage, "
                        "_StreamedProduce, UsageRecording)");
        return NULL;
    }
    if (!PyType_Check(args[1]) || !PyType_Check(args[4]) || !PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "FrameHead, EntityUsage and UsageRecording must be types");
        return NULL;
    }
    Py_XSETREF(produce_key, Py_NewRef(args[0]));
    Py_XSETREF(frame_head_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(produce_topics, Py_NewRef(args[2]));
    Py_XSETREF(protocol_error, Py_NewRef(args[3]));
    Py_XSETREF(entity_usage_type, (PyTypeObject *)Py_NewRef(args[4]));
    Py_XSETREF(streamed_produce, Py_NewRef(args[5]));
    Py_XSETREF(usage_recording_type, (PyTypeObject *)Py_NewRef(args[6]));
    Py_RETURN_NONE;
}

/* What bind_recorder() hands over once: the filter's Python methods (the references), InFlight's header
 * field and METADATA; the filter's slots. */
static PyObject *recorder_request_reference = NULL, *recorder_response_reference = NULL, *metadata_key = NULL;
static PyTypeObject *recorder_type = NULL; /* UsageRecorder: a subclass's own methods run, in the Python */
static slot_t recorder_conn, recorder_recording, recorder_broker;
static field_t entry_header;

/* `record(self._recording, self.conn.user, header, frame, broker)`, then the frame, for a recorder whose
 * broker is known (the Python finds it on the first call); NULL with *refer set when it is not known. */
static PyObject *
recorder_record(PyObject *self, PyObject *header, PyObject *frame,
                PyObject *(*record)(PyObject *, PyObject *const *, size_t, PyObject *), int *refer)
{
    PyObject *broker = slot_get(self, &recorder_broker);
    if (broker == NULL) {
        return NULL;
    }
    if (broker == Py_None) {
        Py_DECREF(broker);
        *refer = 1;
        return NULL;
    }
    PyObject *recording = slot_get(self, &recorder_recording);
    PyObject *conn = recording == NULL ? NULL : slot_get(self, &recorder_conn);
    PyObject *user = conn == NULL ? NULL : PyObject_GetAttr(conn, s_user);
    PyObject *done = NULL;
    if (user != NULL) {
        PyObject *args[5] = {recording, user, header, frame, broker};
        done = record(NULL, args, 5, NULL);
    }
    Py_XDECREF(user);
    Py_XDECREF(conn);
    Py_XDECREF(recording);
    Py_DECREF(broker);
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    return Py_NewRef(frame);
}

/* UsageRecorder.on_request(header, frame), compiled: the request counted through record_request. */
static PyObject *
recorder_on_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames == NULL && nargs == 2 && Py_IS_TYPE(self, recorder_type)) {
        int refer = 0;
        PyObject *out = recorder_record(self, args[0], args[1], record_request, &refer);
        if (out != NULL || !refer) {
            return out;
        }
    }
    return call_reference(recorder_request_reference, self, args, nargs, kwnames);
}

/* UsageRecorder.on_response(request, frame), compiled: a Fetch answer recorded through record_fetch_response;
 * a Metadata answer (its topic names) is the Python's. */
static PyObject *
recorder_on_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames == NULL && nargs == 2 && Py_IS_TYPE(self, recorder_type)) {
        PyObject *header = field_get(args[0], &entry_header);
        if (header == NULL) {
            return NULL;
        }
        PyObject *key = field_get(header, &header_api_key);
        int metadata = key == NULL ? -1 : PyObject_RichCompareBool(key, metadata_key, Py_EQ);
        Py_XDECREF(key);
        PyObject *out = NULL;
        int refer = metadata > 0;
        if (metadata == 0) {
            out = recorder_record(self, header, args[1], record_fetch_response, &refer);
        }
        Py_DECREF(header);
        if (out != NULL || !refer) {
            return out;
        }
    }
    return call_reference(recorder_response_reference, self, args, nargs, kwnames);
}

static PyMethodDef recorder_on_request_def = {
    "on_request", (PyCFunction)(void (*)(void))recorder_on_request, METH_FASTCALL | METH_KEYWORDS,
    "UsageRecorder.on_request(header, frame), compiled (proxy/filters/usage_recorder.py is its reference)."};
static PyMethodDef recorder_on_response_def = {
    "on_response", (PyCFunction)(void (*)(void))recorder_on_response, METH_FASTCALL | METH_KEYWORDS,
    "UsageRecorder.on_response(request, frame), compiled (proxy/filters/usage_recorder.py is its reference)."};

/* bind_recorder(UsageRecorder, on_request, on_response, InFlight, METADATA): the filter's compiled
 * (on_request, on_response), methods of UsageRecorder, which hand what they do not write out to the two
 * Python methods given. After bind and bind_slots (the header's fields). */
static PyObject *
bind_recorder(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[0]) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2]) ||
        !PyLong_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "bind_recorder(UsageRecorder, on_request, on_response, InFlight, METADATA)");
        return NULL;
    }
    if (header_api_key.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_recorder before bind_slots");
        return NULL;
    }
    const binding_t bindings[] = {
        {&recorder_conn, NULL, args[0], s_conn, NULL},
        {&recorder_recording, NULL, args[0], s_recording, NULL},
        {&recorder_broker, NULL, args[0], s_broker, NULL},
        {NULL, &entry_header, args[3], s_header, NULL},
    };
    if (bind_all(bindings, sizeof bindings / sizeof bindings[0]) < 0) {
        return NULL;
    }
    PyObject *request_method = PyDescr_NewMethod((PyTypeObject *)args[0], &recorder_on_request_def);
    PyObject *response_method =
        request_method == NULL ? NULL : PyDescr_NewMethod((PyTypeObject *)args[0], &recorder_on_response_def);
    PyObject *methods = response_method == NULL ? NULL : PyTuple_Pack(2, request_method, response_method);
    Py_XDECREF(request_method);
    Py_XDECREF(response_method);
    if (methods == NULL) {
        return NULL;
    }
    Py_XSETREF(recorder_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(recorder_request_reference, Py_NewRef(args[1]));
    Py_XSETREF(recorder_response_reference, Py_NewRef(args[2]));
    Py_XSETREF(metadata_key, Py_NewRef(args[4]));
    return methods;
}

/* bind_slots(UsageRecording, UsageLedger, EntityUsage, RequestHeader): where the records read the
 * recording's, the ledger's, an entity's and a header's attributes (../_compiled.h), bound all at once. */
static PyObject *
bind_slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind_slots(UsageRecording, UsageLedger, EntityUsage, RequestHeader)");
        return NULL;
    }
    const binding_t bindings[] = {
        {&recording_cache, NULL, args[0], s_cache, NULL},
        {&recording_names_seen, NULL, args[0], s_names_seen, NULL},
        {&recording_topic_names, NULL, args[0], s_topic_names, NULL},
        {&recording_ledger, NULL, args[0], s_ledger, NULL},
        {&ledger_generation, NULL, args[1], s_generation, NULL},
        {&usage_requests, NULL, args[2], s_requests, NULL},
        {&usage_topics, NULL, args[2], s_topics, NULL},
        {&usage_max_topics, NULL, args[2], s_max_topics, NULL},
        {&usage_overflow, NULL, args[2], s_overflow, NULL},
        {&usage_produce_bytes, NULL, args[2], s_produce_bytes, NULL},
        {&usage_fetch_bytes, NULL, args[2], s_fetch_bytes, NULL},
        {NULL, &header_client_id, args[3], s_client_id, NULL},
        {NULL, &header_api_key, args[3], s_api_key, NULL},
        {NULL, &header_api_version, args[3], s_api_version, NULL},
    };
    if (bind_all(bindings, sizeof bindings / sizeof bindings[0]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* UsageRecording.usage(user, client_id), compiled: usage_of, a method of the class (usage_method_of), so the
 * client quotas' compiled charge of CPU time reaches it with no Python frame. */
static PyObject *
recording_usage(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "usage(user, client_id) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    return usage_of(self, args[0], args[1]);
}

static PyMethodDef recording_usage_def = {
    "usage", (PyCFunction)(void (*)(void))recording_usage, METH_FASTCALL,
    "UsageRecording.usage(user, client_id), compiled (proxy/filters/usage_recorder.py)."};

/* usage_method_of(UsageRecording): the compiled usage, a method of the class given. After bind_slots (it reads
 * the recording's cache and ledger where they were found). */
static PyObject *
usage_method_of(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "usage_method_of(UsageRecording)");
        return NULL;
    }
    if (recording_cache.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "usage_method_of before bind_slots");
        return NULL;
    }
    return PyDescr_NewMethod((PyTypeObject *)cls, &recording_usage_def);
}

static PyMethodDef module_methods[] = {
    {"record_request", (PyCFunction)(void (*)(void))record_request, METH_FASTCALL | METH_KEYWORDS,
     "UsageRecording.request(recording, user, header, frame, broker=None), compiled."},
    {"record_fetch_response", (PyCFunction)(void (*)(void))record_fetch_response, METH_FASTCALL | METH_KEYWORDS,
     "UsageRecording.fetch_response(recording, user, header, frame, broker=None), compiled."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Hand over what the recording uses of its module (once, from usage_recorder.py)."},
    {"bind_recorder", (PyCFunction)(void (*)(void))bind_recorder, METH_FASTCALL,
     "Hand over UsageRecorder and its Python methods; returns its compiled (on_request, on_response)."},
    {"bind_slots", (PyCFunction)(void (*)(void))bind_slots, METH_FASTCALL,
     "Hand over the classes whose attributes the records read at their offsets (once, from usage_recorder.py)."},
    {"usage_method_of", usage_method_of, METH_O, "UsageRecording.usage, compiled: a method of the class given."},
    {"bind_fetch", (PyCFunction)(void (*)(void))bind_fetch, METH_FASTCALL,
     "Hand over what the Fetch answers' recording uses of its module (once, from usage_recorder.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef usage_recording_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.filters._usage_recording",
    "The usage records of one request, compiled (proxy/filters/usage_recorder.py says what they are).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__usage_recording(void)
{
    INTERN(s_client_id, "client_id");
    INTERN(s_conn, "conn");
    INTERN(s_recording, "_recording");
    INTERN(s_broker, "_broker");
    INTERN(s_user, "user");
    INTERN(s_header, "header");
    INTERN(s_api_key, "api_key");
    INTERN(s_cache, "_cache");
    INTERN(s_ledger, "_ledger");
    INTERN(s_generation, "generation");
    INTERN(s_entity, "entity");
    INTERN(s_requests, "requests");
    INTERN(s_add_request, "add_request");
    INTERN(s_produce_bytes, "produce_bytes");
    INTERN(s_observe, "observe");
    INTERN(s_named, "_named");
    INTERN(s_names_seen, "_names_seen");
    INTERN(s_topic_names, "_topic_names");
    INTERN(s_get, "get");
    INTERN(s_topics, "topics");
    INTERN(s_add_topics, "add_topics");
    INTERN(s_max_topics, "_max_topics");
    INTERN(s_overflow, "_overflow");
    INTERN(s_bytes, "bytes");
    INTERN(s_request, "request");
    INTERN(s_fetch_response, "fetch_response");
    INTERN(s_api_version, "api_version");
    INTERN(s_fetch_bytes, "fetch_bytes");
    overflow_topics.name = s_topics; /* (no type: read by name) */
    overflow_bytes.name = s_bytes;
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL ||
        (four = PyLong_FromLong(4)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&usage_recording_module);
}
