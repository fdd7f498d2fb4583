/* The compiled readers of the hot path: the request header of every request (protocol/headers.py), a
 * Produce request's topics and partitions (protocol/produce_stream.py), the responses of a flexible
 * Produce or Fetch answer (protocol/response_walks.py), and the common case of the NodeEndpoints rewrite
 * of those answers (protocol/node_endpoints.py; the rest is its Python's, called from here).
 *
 * Why C: they run per request and per answer, and in Python a header costs 1.25 us and a partition's few
 * field reads as much as the rest of the request's handling (docs/architecture.md, "Compiled readers").
 * Each function here is the line-by-line translation of its Python twin, which stays the reference: same
 * results, same ProtocolError reasons, in the same order of checks (tests/protocol/test_compiled.py holds
 * them equal on valid, cut, corrupted and random inputs). The Python twins run where this module was not
 * built.
 *
 * Safety: a byte is read only after a check against the end of the buffer (BYTE() and NEED(), which jump to
 * the function's cut, and the varint and tagged-field readers); a start past the end is a cut before any
 * arithmetic; offsets then only grow, by less than 2^36 between two checks, so a 64-bit Py_ssize_t cannot
 * overflow (narrower ones are refused below). The buffer is held (PyObject_GetBuffer) for the whole read and
 * released on every exit. No Python code runs during a read but the UTF-8 decode of a topic name and the
 * decoder of a client id not yet cached.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Offsets grow by varint values of up to 35 bits between two checked reads: only a 64-bit Py_ssize_t holds
 * them. Elsewhere the build stops here, the extension is skipped (it is optional) and the Python runs. */
#if SIZEOF_SIZE_T < 8
#error "the compiled readers need a 64-bit Py_ssize_t"
#endif

/* sluice.protocol.errors.ProtocolError, imported when the module loads. */
static PyObject *protocol_error = NULL;

/* The most topics and partitions one Produce request may name (produce_stream.MAX_ENTRIES). */
#define MAX_ENTRIES 200000
#define UUID_SIZE 16
#define PRODUCE_FIRST_TRANSACTIONAL 3
#define PRODUCE_FLEXIBLE_FROM 9
#define PRODUCE_FIRST_WITH_TOPIC_ID 13
#define LAST_WITH_TOPIC_NAMES 12

static void
raise_protocol_error(const char *reason, const char *detail)
{
    PyObject *exc = PyObject_CallFunction(protocol_error, "ss", reason, detail);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} walk_buffer;

#define VARINT_CUT (-1)
#define VARINT_TOO_LONG (-2)

/* An unsigned varint of at most 5 bytes: 0, VARINT_CUT or VARINT_TOO_LONG, with no exception set. */
static int
scan_uvarint(const walk_buffer *b, Py_ssize_t *pos, int64_t *out)
{
    int64_t result = 0;
    int shift = 0;
    Py_ssize_t at = *pos;
    for (;;) {
        if (at >= b->n) {
            return VARINT_CUT;
        }
        uint8_t byte = b->p[at++];
        result |= (int64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = result;
            *pos = at;
            return 0;
        }
        shift += 7;
        if (shift > 28) {
            return VARINT_TOO_LONG;
        }
    }
}

/* A scan's outcome as protocol/primitives.py raises it: 0, or -1 with ProtocolError set ('truncated' with
 * `cut_detail`, or 'bad_varint'). */
static int
raise_scan_failure(int found, const char *cut_detail)
{
    if (found == VARINT_CUT) {
        raise_protocol_error("truncated", cut_detail);
    }
    else if (found == VARINT_TOO_LONG) {
        raise_protocol_error("bad_varint", "unsigned varint longer than 5 bytes");
    }
    return found < 0 ? -1 : 0;
}

/* protocol.primitives.read_uvarint: 0, or -1 with ProtocolError set. */
static int
read_uvarint(const walk_buffer *b, Py_ssize_t *pos, int64_t *out)
{
    return raise_scan_failure(scan_uvarint(b, pos, out), "unsigned varint");
}

/* A tagged-field block: 0, VARINT_CUT (it runs past the end) or VARINT_TOO_LONG, with no exception set. */
static int
scan_tagged_fields(const walk_buffer *b, Py_ssize_t *pos)
{
    if (*pos < b->n && b->p[*pos] == 0) {
        *pos += 1;
        return 0;
    }
    int64_t count, tag, length;
    int found = scan_uvarint(b, pos, &count);
    for (int64_t i = 0; found == 0 && i < count; i++) {
        found = scan_uvarint(b, pos, &tag);
        if (found == 0) {
            found = scan_uvarint(b, pos, &length);
        }
        if (found == 0) {
            *pos += (Py_ssize_t)length;
            if (*pos > b->n) {
                found = VARINT_CUT;
            }
        }
    }
    return found;
}

/* protocol.primitives.skip_tagged_fields: 0, or -1 with ProtocolError set. */
static int
skip_tagged_fields(const walk_buffer *b, Py_ssize_t *pos)
{
    return raise_scan_failure(scan_tagged_fields(b, pos), "tagged field");
}

/* protocol.primitives.skip_compact_nullable_string. */
static int
skip_compact_nullable_string(const walk_buffer *b, Py_ssize_t *pos)
{
    int64_t length_plus_one;
    if (read_uvarint(b, pos, &length_plus_one) < 0) {
        return -1;
    }
    if (length_plus_one > 1) {
        *pos += (Py_ssize_t)(length_plus_one - 1);
        if (*pos > b->n) {
            raise_protocol_error("truncated", "compact string");
            return -1;
        }
    }
    return 0;
}

/* response_walks._count: a compact array's count (null is empty); more than the bytes left is malformed. */
static int
read_count(const walk_buffer *b, Py_ssize_t *pos, int64_t *out)
{
    int64_t count_plus_one;
    if (read_uvarint(b, pos, &count_plus_one) < 0) {
        return -1;
    }
    int64_t count = count_plus_one - 1;
    if (count > (int64_t)(b->n - *pos)) {
        raise_protocol_error("bad_array_length", "more elements than bytes left");
        return -1;
    }
    *out = count > 0 ? count : 0;
    return 0;
}

/* Read byte `i` into `dst`, or leave by the function's "truncated" label. */
#define BYTE(dst, i)                  \
    do {                              \
        Py_ssize_t at_ = (i);         \
        if ((size_t)at_ >= (size_t)b.n) { \
            goto truncated;           \
        }                             \
        (dst) = b.p[at_];             \
    } while (0)

/* response_walks._skip_tags: an empty block inline; reading at the end is a cut. */
#define SKIP_TAGS()                                         \
    do {                                                    \
        uint8_t tags_;                                      \
        BYTE(tags_, pos);                                   \
        if (tags_ == 0) {                                   \
            pos += 1;                                       \
        }                                                   \
        else if (skip_tagged_fields(&b, &pos) < 0) {        \
            goto failed;                                    \
        }                                                   \
    } while (0)

/* A compact nullable string whose one-byte length+1 is c takes c bytes (1 when null). */
#define SKIP_SHORT_STRING()                                            \
    do {                                                               \
        uint8_t c_;                                                    \
        BYTE(c_, pos);                                                 \
        if (c_ < 0x80) {                                               \
            pos += c_ ? c_ : 1;                                        \
        }                                                              \
        else if (skip_compact_nullable_string(&b, &pos) < 0) {         \
            goto failed;                                               \
        }                                                              \
    } while (0)

/* A compact array's count: one byte inline, else read_count. */
#define COUNT(dst)                                          \
    do {                                                    \
        uint8_t c_;                                         \
        BYTE(c_, pos);                                      \
        if (0 < c_ && c_ < 0x80) {                          \
            (dst) = c_ - 1;                                 \
            pos += 1;                                       \
        }                                                   \
        else if (read_count(&b, &pos, &(dst)) < 0) {        \
            goto failed;                                    \
        }                                                   \
    } while (0)

/* A (first, second) tuple, stealing both references (NULL when either is: what failed is already set). */
static PyObject *
steal_pair(PyObject *first, PyObject *second)
{
    PyObject *pair = first != NULL && second != NULL ? PyTuple_New(2) : NULL;
    if (pair == NULL) {
        Py_XDECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, first);
    PyTuple_SET_ITEM(pair, 1, second);
    return pair;
}

/* The topic names of the last few Produce requests and Fetch answers walked, as str: a client names the
 * same few topics request after request, and the walk hands back the str it made before (equal, its hash
 * already computed for the dictionaries it becomes a key of) instead of decoding a new one. ASCII names
 * only (Kafka's legal topic names are; a kept name's bytes are its str's, compared byte for byte), of a
 * legal length; filled in turn, each entry a strong reference for the process's life. */
#define RECENT_NAMES 8
/* Kafka's longest legal topic name: a longer one (a hostile client's, up to a frame's size) is decoded and
 * never kept, so the names kept hold at most 8 x 249 bytes. */
#define TOPIC_NAME_MAX 249
static PyObject *recent_names[RECENT_NAMES];
static int recent_next = 0;

/* The topic name of `length` bytes at `at`: a recent one's str, else a new str (remembered when ASCII);
 * NULL with UnicodeDecodeError when not UTF-8, or another exception. */
static PyObject *
topic_name(const uint8_t *at, Py_ssize_t length)
{
    for (int i = 0; i < RECENT_NAMES; i++) {
        PyObject *known = recent_names[i];
        if (known != NULL && PyUnicode_GET_LENGTH(known) == length &&
            memcmp(PyUnicode_1BYTE_DATA(known), at, (size_t)length) == 0) {
            return Py_NewRef(known);
        }
    }
    PyObject *name = PyUnicode_DecodeUTF8((const char *)at, length, "strict");
    if (name != NULL && length <= TOPIC_NAME_MAX && PyUnicode_IS_COMPACT_ASCII(name)) {
        Py_XSETREF(recent_names[recent_next], Py_NewRef(name));
        recent_next = (recent_next + 1) % RECENT_NAMES;
    }
    return name;
}

static int
open_buffer(PyObject *obj, Py_buffer *view, walk_buffer *b)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    b->p = (const uint8_t *)view->buf;
    b->n = view->len;
    return 0;
}

static int
read_offset(PyObject *obj, Py_ssize_t *out)
{
    Py_ssize_t value = PyLong_AsSsize_t(obj);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < 0) {
        PyErr_SetString(PyExc_ValueError, "a walk starts at a non-negative offset");
        return -1;
    }
    *out = value;
    return 0;
}

/* A response walk's arguments, `expected` of them as `usage` names them: the API version (args[0]) and
 * where the body starts (args[2]). 0, or -1 with an exception set. */
static int
read_version_and_start(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *usage,
                       long *version, Py_ssize_t *start)
{
    if (nargs != expected) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *version = PyLong_AsLong(args[0]);
    if (*version == -1 && PyErr_Occurred()) {
        return -1;
    }
    return read_offset(args[2], start);
}

/* The walk of produce_responses_end over an open buffer, from *end: 0 with *end the offset after the
 * responses, or -1 with an exception set. */
static int
produce_end_of(walk_buffer b, long version, Py_ssize_t *end)
{
    Py_ssize_t pos = *end;
    int topic_id = version >= PRODUCE_FIRST_WITH_TOPIC_ID;
    int64_t topics, partitions, record_errors;
    uint8_t c;
    if (pos > b.n) { /* a start past the end; from here on offsets stay below 2^62 */
        goto truncated;
    }
    COUNT(topics);
    for (int64_t t = 0; t < topics; t++) {
        if (topic_id) {
            pos += UUID_SIZE;
        }
        else {
            SKIP_SHORT_STRING();
        }
        COUNT(partitions);
        for (int64_t i = 0; i < partitions; i++) {
            pos += 4 + 2 + 8 + 8 + 8; /* index, error_code, base_offset, log_append_time, log_start */
            BYTE(c, pos);
            if (c == 1) { /* no record errors */
                pos += 1;
            }
            else {
                if (read_count(&b, &pos, &record_errors) < 0) {
                    goto failed;
                }
                for (int64_t e = 0; e < record_errors; e++) {
                    pos += 4; /* batch_index */
                    if (skip_compact_nullable_string(&b, &pos) < 0) {
                        goto failed;
                    }
                    SKIP_TAGS();
                }
            }
            SKIP_SHORT_STRING(); /* error_message */
            SKIP_TAGS();
        }
        SKIP_TAGS();
    }
    *end = pos;
    return 0;

truncated:
    raise_protocol_error("truncated", "Produce responses");
failed:
    return -1;
}

/* produce_responses_end(api_version, body, start) -> the offset after a Produce v9+ answer's responses. */
static PyObject *
produce_responses_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long version;
    Py_ssize_t pos;
    if (read_version_and_start(args, nargs, 3, "produce_responses_end(api_version, body, start)", &version, &pos) < 0) {
        return NULL;
    }
    Py_buffer view;
    walk_buffer b;
    if (open_buffer(args[1], &view, &b) < 0) {
        return NULL;
    }
    int walked = produce_end_of(b, version, &pos);
    PyBuffer_Release(&view);
    return walked < 0 ? NULL : PyLong_FromSsize_t(pos);
}

/* The walk of fetch_responses over an open buffer, from *end: its topics (a new list) with *end the offset
 * after the responses, or NULL with an exception set. */
static PyObject *
fetch_topics_of(walk_buffer b, long version, Py_ssize_t *end, int topics_wanted)
{
    Py_ssize_t pos = *end;
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    int by_id = version > LAST_WITH_TOPIC_NAMES;
    int64_t topics, partitions, aborted, length, size;
    Py_ssize_t stop, named_at;
    uint8_t c, d;
    if (pos > b.n) { /* a start past the end; from here on offsets stay below 2^62 */
        goto truncated;
    }
    pos += 4 + 2 + 4; /* throttle_time_ms, error_code, session_id */
    COUNT(topics);
    for (int64_t t = 0; t < topics; t++) {
        if (by_id) {
            stop = pos + UUID_SIZE;
            if (stop > b.n) {
                goto truncated;
            }
        }
        else {
            BYTE(c, pos); /* a compact string, length + 1: 0 is null, which a topic name never is */
            if (0 < c && c < 0x80) {
                length = c - 1;
                pos += 1;
            }
            else if (read_count(&b, &pos, &length) < 0) {
                goto failed;
            }
            stop = pos + (Py_ssize_t)length;
            if (c == 0 || length < 0 || stop > b.n) {
                raise_protocol_error("bad_topic_name", "topic name length");
                goto failed;
            }
        }
        named_at = pos;
        pos = stop;
        COUNT(partitions);
        int64_t total = 0;
        for (int64_t i = 0; i < partitions; i++) {
            pos += 30; /* index, error_code, high_watermark, last_stable_offset, log_start_offset */
            BYTE(c, pos);
            if (c <= 1) { /* aborted transactions null or empty; and the preferred read replica */
                pos += 5;
            }
            else {
                if (read_count(&b, &pos, &aborted) < 0) {
                    goto failed;
                }
                for (int64_t a = 0; a < aborted; a++) {
                    pos += 8 + 8; /* producer_id, first_offset */
                    SKIP_TAGS();
                }
                pos += 4;
            }
            /* records: compact nullable bytes, length + 1 */
            BYTE(c, pos);
            if (c < 0x80) {
                if (c > 1) {
                    pos += c;
                    total += c - 1;
                }
                else {
                    pos += 1;
                }
            }
            else {
                BYTE(d, pos + 1);
                if (d < 0x80) {
                    size = (int64_t)((c & 0x7F) | (d << 7)) - 1;
                    pos += 2;
                }
                else {
                    if (read_uvarint(&b, &pos, &size) < 0) {
                        goto failed;
                    }
                    size -= 1;
                }
                if (size > 0) {
                    pos += (Py_ssize_t)size;
                    total += size;
                }
            }
            SKIP_TAGS();
        }
        SKIP_TAGS();
        if (topics_wanted) {
            PyObject *name;
            if (by_id) {
                name = PyBytes_FromStringAndSize((const char *)b.p + named_at, UUID_SIZE);
            }
            else {
                name = topic_name(b.p + named_at, stop - named_at);
                if (name == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    raise_protocol_error("bad_topic_name", "not UTF-8");
                    goto failed;
                }
            }
            if (name == NULL) {
                goto failed;
            }
            PyObject *entry = steal_pair(name, PyLong_FromLongLong(total));
            if (entry == NULL) {
                goto failed;
            }
            int appended = PyList_Append(found, entry);
            Py_DECREF(entry);
            if (appended < 0) {
                goto failed;
            }
        }
    }
    if (pos > b.n) {
        goto truncated;
    }
    *end = pos;
    return found;

truncated:
    raise_protocol_error("truncated", "Fetch responses");
failed:
    Py_DECREF(found);
    return NULL;
}

/* The walk of a Fetch v12+ answer's responses from `start`, called from Python: its topics if `wanted` is
 * true (NULL: they are), and with `tagged` the answer's top-level tagged fields after them too.
 * ([(topic, record bytes)], the offset where the walk ended). */
static PyObject *
fetch_walk(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *usage, PyObject *wanted,
           int tagged)
{
    long version;
    Py_ssize_t pos;
    if (read_version_and_start(args, nargs, expected, usage, &version, &pos) < 0) {
        return NULL;
    }
    int topics_wanted = wanted == NULL ? 1 : PyObject_IsTrue(wanted);
    if (topics_wanted < 0) {
        return NULL;
    }
    Py_buffer view;
    walk_buffer b;
    if (open_buffer(args[1], &view, &b) < 0) {
        return NULL;
    }
    PyObject *found = fetch_topics_of(b, version, &pos, topics_wanted);
    if (found != NULL && tagged && skip_tagged_fields(&b, &pos) < 0) {
        Py_CLEAR(found);
    }
    PyBuffer_Release(&view);
    return found == NULL ? NULL : steal_pair(found, PyLong_FromSsize_t(pos));
}

/* fetch_responses(api_version, body, start, topics_wanted) -> ([(topic, record bytes)], the offset after
 * the responses) of a Fetch v12+ answer. */
static PyObject *
fetch_responses(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return fetch_walk(args, nargs, 4, "fetch_responses(api_version, body, start, topics_wanted)",
                      nargs == 4 ? args[3] : NULL, 0);
}

/* fetch_answer_topics(api_version, body, start) -> ([(topic, record bytes)], the offset after the answer's
 * top-level tagged fields) of a Fetch v12+ answer: fetch_responses with its topics, then skip_tagged_fields,
 * in one call (response_walks.fetch_answer_topics_in_python, which record_sets.fetch_topic_bytes runs for the
 * usage records of every flexible Fetch answer). */
static PyObject *
fetch_answer_topics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return fetch_walk(args, nargs, 3, "fetch_answer_topics(api_version, body, start)", NULL, 1);
}

#undef BYTE
#undef SKIP_TAGS
#undef SKIP_SHORT_STRING
#undef COUNT

/* The Produce request walk reports every failure as one reason, bad_produce_request, as the Python walk
 * of a whole body does: a cut, a malformed field and bytes after the structure alike. */
#define BYTE(dst, i)                  \
    do {                              \
        Py_ssize_t at_ = (i);         \
        if ((size_t)at_ >= (size_t)b.n) { \
            goto cut;                 \
        }                             \
        (dst) = b.p[at_];             \
    } while (0)

#define NEED(count)                   \
    do {                              \
        if (pos + (count) > b.n) {    \
            goto cut;                 \
        }                             \
    } while (0)

static inline int16_t
int16_at(const uint8_t *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline int32_t
int32_at(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* A varint, or a tagged-field block, inside the Produce walk: a cut, or a varint over 5 bytes said so. */
#define PRODUCE_SCAN(scanned)                                         \
    do {                                                              \
        int found_ = (scanned);                                       \
        if (found_ == VARINT_TOO_LONG) {                              \
            why = "unsigned varint longer than 5 bytes";              \
            goto bad_why;                                             \
        }                                                             \
        if (found_ < 0) {                                             \
            goto cut;                                                 \
        }                                                             \
    } while (0)

/* Append (topic, total) to topics and, unless by_topic is NULL (the topics alone were asked for),
 * partitions to by_topic; 0 or -1 with an exception. */
static int
keep_topic(PyObject *topics, PyObject *by_topic, PyObject *name, int64_t total, PyObject *partitions)
{
    PyObject *entry = steal_pair(Py_NewRef(name), PyLong_FromLongLong(total));
    if (entry == NULL) {
        return -1;
    }
    int failed = PyList_Append(topics, entry) < 0 || (by_topic != NULL && PyList_Append(by_topic, partitions) < 0);
    Py_DECREF(entry);
    return failed ? -1 : 0;
}

static int
keep_partition(PyObject *partitions, int32_t index, int64_t size)
{
    PyObject *entry = steal_pair(PyLong_FromLong(index), PyLong_FromLongLong(size));
    if (entry == NULL) {
        return -1;
    }
    int failed = PyList_Append(partitions, entry) < 0;
    Py_DECREF(entry);
    return failed ? -1 : 0;
}

/* The walk of a whole Produce request body, from `start` to the end of the buffer (the version is checked by
 * the caller): (acks, timeout_ms, [(topic, record bytes)], [[(index, record bytes)]]), or with
 * `topics_only` the topics' list alone (no partition is kept: what the usage records read). */
static PyObject *
produce_walk(PyObject *const *args, Py_ssize_t nargs, int topics_only, const char *usage)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    long version = PyLong_AsLong(args[0]);
    if (version == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    if (nargs == 3 && read_offset(args[2], &pos) < 0) {
        return NULL;
    }
    PyObject *topics = PyList_New(0);
    PyObject *by_topic = topics == NULL || topics_only ? NULL : PyList_New(0);
    PyObject *name = NULL, *partitions = NULL;
    Py_buffer view;
    walk_buffer b;
    if (topics == NULL || (!topics_only && by_topic == NULL) || open_buffer(args[1], &view, &b) < 0) {
        Py_XDECREF(topics);
        Py_XDECREF(by_topic);
        return NULL;
    }
    if (pos > b.n) { /* a start past the end: a cut, before any arithmetic on it */
        pos = b.n + 1;
    }
    const char *why = "truncated";
    char detail[96];
    Py_ssize_t stop;
    int flexible = version >= PRODUCE_FLEXIBLE_FROM;
    int by_id = version > LAST_WITH_TOPIC_NAMES;
    int64_t count, parts, length, size, entries = 0;
    int16_t acks;
    int32_t timeout_ms, index;
    uint8_t c;

    if (version >= PRODUCE_FIRST_TRANSACTIONAL) { /* transactional_id */
        if (flexible) {
            BYTE(c, pos); /* one byte but for an id of 127 bytes or more */
            length = c;
            stop = pos + 1;
            if (c >= 0x80) {
                stop = pos;
                PRODUCE_SCAN(scan_uvarint(&b, &stop, &length));
            }
            stop += length > 1 ? (Py_ssize_t)(length - 1) : 0;
        }
        else {
            NEED(2);
            length = int16_at(b.p + pos);
            if (length < -1) {
                PyOS_snprintf(detail, sizeof detail, "transactional_id length %lld", (long long)length);
                goto bad;
            }
            stop = pos + 2 + (length > 0 ? (Py_ssize_t)length : 0);
        }
        if (stop > b.n) {
            goto cut;
        }
        pos = stop;
    }
    if (flexible) { /* acks, timeout_ms, the topics' count */
        NEED(6);
        acks = int16_at(b.p + pos);
        timeout_ms = int32_at(b.p + pos + 2);
        pos += 6;
        PRODUCE_SCAN(scan_uvarint(&b, &pos, &count));
        count -= 1;
    }
    else {
        NEED(10);
        acks = int16_at(b.p + pos);
        timeout_ms = int32_at(b.p + pos + 2);
        count = int32_at(b.p + pos + 6);
        if (count < -1) {
            PyOS_snprintf(detail, sizeof detail, "array length %lld", (long long)count);
            goto bad;
        }
        pos += 10;
    }
    for (int64_t t = 0; t < count; t++) {
        /* the topic's name (or id) and its partitions' count */
        if (by_id) {
            NEED(UUID_SIZE);
            name = PyBytes_FromStringAndSize((const char *)b.p + pos, UUID_SIZE);
            pos += UUID_SIZE;
        }
        else {
            Py_ssize_t start;
            if (flexible) {
                start = pos;
                PRODUCE_SCAN(scan_uvarint(&b, &start, &length));
                length -= 1;
                if (length < 0) {
                    PyOS_snprintf(detail, sizeof detail, "topic name length %lld", (long long)length);
                    goto bad;
                }
            }
            else {
                NEED(2);
                length = int16_at(b.p + pos);
                if (length < 0) {
                    PyOS_snprintf(detail, sizeof detail, "topic name length %lld", (long long)length);
                    goto bad;
                }
                start = pos + 2;
            }
            stop = start + (Py_ssize_t)length;
            if (stop > b.n) {
                goto cut;
            }
            name = topic_name(b.p + start, stop - start);
            if (name == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                why = "topic name not UTF-8";
                goto bad_why;
            }
            pos = stop;
        }
        if (name == NULL) {
            goto failed;
        }
        if (flexible) {
            PRODUCE_SCAN(scan_uvarint(&b, &pos, &parts));
            parts -= 1;
        }
        else {
            NEED(4);
            parts = int32_at(b.p + pos);
            if (parts < -1) {
                PyOS_snprintf(detail, sizeof detail, "array length %lld", (long long)parts);
                goto bad;
            }
            pos += 4;
        }
        entries += 1 + parts; /* a null array (-1) names no partition */
        if (entries > MAX_ENTRIES) {
            why = "more than 200000 topics and partitions in one request";
            goto bad_why;
        }
        if (!topics_only) {
            partitions = PyList_New(0);
            if (partitions == NULL) {
                goto failed;
            }
        }
        int64_t total = 0;
        for (int64_t i = 0; i < parts; i++) {
            NEED(4);
            index = int32_at(b.p + pos);
            pos += 4;
            if (flexible) {
                PRODUCE_SCAN(scan_uvarint(&b, &pos, &size));
                size -= 1;
            }
            else {
                NEED(4);
                size = int32_at(b.p + pos);
                pos += 4;
            }
            if (size > 0) {
                pos += (Py_ssize_t)size;
                /* a record set that reaches the end: the flexible versions need its tagged fields after */
                if (flexible ? pos >= b.n : pos > b.n) {
                    goto cut;
                }
                total += size;
            }
            else if (size < 0) {
                if (size < -1) {
                    PyOS_snprintf(detail, sizeof detail, "records length %lld", (long long)size);
                    goto bad;
                }
                size = 0;
            }
            if (flexible) {
                BYTE(c, pos);
                if (c == 0) {
                    pos += 1;
                }
                else {
                    PRODUCE_SCAN(scan_tagged_fields(&b, &pos));
                }
            }
            if (!topics_only && keep_partition(partitions, index, size) < 0) {
                goto failed;
            }
        }
        if (flexible) {
            PRODUCE_SCAN(scan_tagged_fields(&b, &pos));
        }
        if (keep_topic(topics, by_topic, name, total, partitions) < 0) {
            goto failed;
        }
        Py_CLEAR(name);
        Py_CLEAR(partitions);
    }
    if (flexible) {
        PRODUCE_SCAN(scan_tagged_fields(&b, &pos));
    }
    if (pos != b.n) {
        PyOS_snprintf(detail, sizeof detail, "%zd bytes after the topics", b.n - pos);
        goto bad;
    }
    PyBuffer_Release(&view);
    if (topics_only) {
        return topics;
    }
    PyObject *walked = PyTuple_New(4);
    PyObject *acks_value = walked == NULL ? NULL : PyLong_FromLong(acks);
    PyObject *timeout_value = acks_value == NULL ? NULL : PyLong_FromLong(timeout_ms);
    if (timeout_value == NULL) {
        Py_XDECREF(walked);
        Py_XDECREF(acks_value);
        Py_DECREF(topics);
        Py_DECREF(by_topic);
        return NULL;
    }
    PyTuple_SET_ITEM(walked, 0, acks_value);
    PyTuple_SET_ITEM(walked, 1, timeout_value);
    PyTuple_SET_ITEM(walked, 2, topics);
    PyTuple_SET_ITEM(walked, 3, by_topic);
    return walked;

cut:
    why = "truncated";
bad_why:
    PyOS_snprintf(detail, sizeof detail, "%s", why);
bad:
    raise_protocol_error("bad_produce_request", detail);
failed:
    PyBuffer_Release(&view);
    Py_XDECREF(name);
    Py_XDECREF(partitions);
    Py_DECREF(topics);
    Py_XDECREF(by_topic);
    return NULL;
}

/* walk_produce_body(api_version, body[, start]) -> (acks, timeout_ms, [(topic, record bytes)], [[(index,
 * record bytes)]]) of a whole Produce request body. */
static PyObject *
walk_produce_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return produce_walk(args, nargs, 0, "walk_produce_body(api_version, body[, start])");
}

/* produce_topic_bytes(api_version, body[, start]) -> [(topic, record bytes)]: the same walk, the same
 * checks, its topics alone. */
static PyObject *
produce_topic_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return produce_walk(args, nargs, 1, "produce_topic_bytes(api_version, body[, start])");
}

/* ---- the request header --------------------------------------------------------------------------- */

/* What headers.py binds once (bind_request_headers): the RequestHeader type, each API key's first flexible
 * version (a tuple), the version standing for "never flexible", ControlledShutdown's key, the client-id
 * cache (a dict kept for the process's life: it is cleared, never replaced) and its decoder on a miss. */
static PyTypeObject *header_type = NULL;
static PyObject *flexible_from = NULL;
static long not_flexible = 0;
static long controlled_shutdown = 0;
static PyObject *client_id_cache = NULL;
static PyObject *decode_client_id = NULL;

#define HEADER_PREFIX 4
#define CLIENT_ID_AT (HEADER_PREFIX + 8)

static PyObject *
bind_request_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyType_Check(args[0]) || !PyTuple_Check(args[1]) || !PyDict_Check(args[4]) ||
        !PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_request_headers(header type, flexible_from tuple, not_flexible, "
                        "controlled_shutdown key, client-id cache dict, decoder)");
        return NULL;
    }
    long never = PyLong_AsLong(args[2]);
    long shutdown = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_XSETREF(header_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(flexible_from, Py_NewRef(args[1]));
    Py_XSETREF(client_id_cache, Py_NewRef(args[4]));
    Py_XSETREF(decode_client_id, Py_NewRef(args[5]));
    not_flexible = never;
    controlled_shutdown = shutdown;
    Py_RETURN_NONE;
}

/* Whether `api_version` of `api_key` is a flexible version (apis.FLEXIBLE_FROM_BY_KEY, bound; a key past
 * the table's end is never flexible): 1 or 0, or -1 with an exception. */
static int
is_flexible(long api_key, long api_version)
{
    long first_flexible = not_flexible;
    if (0 <= api_key && api_key < PyTuple_GET_SIZE(flexible_from)) {
        first_flexible = PyLong_AsLong(PyTuple_GET_ITEM(flexible_from, api_key));
        if (first_flexible == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return api_version >= first_flexible;
}

/* A RequestHeader (a NamedTuple: a tuple subclass) made as tuple.__new__ makes it; steals client_id. */
static PyObject *
new_header(long api_key, long api_version, long correlation_id, PyObject *client_id, Py_ssize_t size)
{
    PyObject *items[5] = {PyLong_FromLong(api_key), PyLong_FromLong(api_version),
                          PyLong_FromLong(correlation_id), client_id, PyLong_FromSsize_t(size)};
    PyObject *header = NULL;
    if (items[0] != NULL && items[1] != NULL && items[2] != NULL && items[4] != NULL) {
        header = header_type->tp_alloc(header_type, 5);
    }
    if (header == NULL) {
        for (int i = 0; i < 5; i++) {
            Py_XDECREF(items[i]);
        }
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        PyTuple_SET_ITEM(header, i, items[i]);
    }
    return header;
}

/* parse_request_header(frame) -> RequestHeader: headers.parse_request_header_in_python, compiled. */
static PyObject *
parse_request_header(PyObject *module, PyObject *frame)
{
    if (header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_request_headers was not called");
        return NULL;
    }
    Py_buffer view;
    walk_buffer b;
    if (open_buffer(frame, &view, &b) < 0) {
        return NULL;
    }
    PyObject *client_id = NULL;
    char detail[80];
    Py_ssize_t size = b.n, pos = CLIENT_ID_AT + 2;
    if (size < CLIENT_ID_AT) {
        PyOS_snprintf(detail, sizeof detail, "frame of %zd bytes is shorter than a header", size);
        goto bad;
    }
    long api_key = int16_at(b.p + HEADER_PREFIX);
    long api_version = int16_at(b.p + HEADER_PREFIX + 2);
    long correlation_id = int32_at(b.p + HEADER_PREFIX + 4);
    int flexible = is_flexible(api_key, api_version);
    if (flexible < 0) {
        goto failed;
    }
    if (!flexible && api_key == controlled_shutdown && api_version == 0) {
        PyBuffer_Release(&view);
        return new_header(api_key, api_version, correlation_id, Py_NewRef(Py_None), CLIENT_ID_AT - HEADER_PREFIX);
    }
    if (size < CLIENT_ID_AT + 2) {
        PyOS_snprintf(detail, sizeof detail, "frame ends inside the client_id length");
        goto bad;
    }
    long length = int16_at(b.p + CLIENT_ID_AT);
    if (length < 0) {
        if (length != -1) {
            PyOS_snprintf(detail, sizeof detail, "client_id length %ld", length);
            goto bad;
        }
        client_id = Py_NewRef(Py_None);
    }
    else {
        Py_ssize_t end = pos + length;
        if (end > size) {
            PyOS_snprintf(detail, sizeof detail, "frame ends inside the client_id");
            goto bad;
        }
        /* A copy of the (short) id as the cache's key, never a view: it must not pin the frame. */
        PyObject *raw = PyBytes_FromStringAndSize((const char *)b.p + pos, length);
        if (raw == NULL) {
            goto failed;
        }
        client_id = PyDict_GetItemWithError(client_id_cache, raw); /* borrowed */
        if (client_id != NULL) {
            Py_INCREF(client_id);
        }
        else if (!PyErr_Occurred()) {
            client_id = PyObject_CallOneArg(decode_client_id, raw);
        }
        Py_DECREF(raw);
        if (client_id == NULL) {
            goto failed;
        }
        pos = end;
    }
    if (flexible) {
        if (pos < size && b.p[pos] == 0) { /* the usual empty tagged-field block */
            pos += 1;
        }
        else if (skip_tagged_fields(&b, &pos) < 0) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyObject *reason = value != NULL ? PyObject_GetAttrString(value, "reason") : NULL;
            const char *text = reason != NULL && PyUnicode_Check(reason) ? PyUnicode_AsUTF8(reason) : NULL;
            PyOS_snprintf(detail, sizeof detail, "tagged fields: %.40s", text != NULL ? text : "?");
            Py_XDECREF(reason);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            PyErr_Clear();
            goto bad;
        }
    }
    PyBuffer_Release(&view);
    return new_header(api_key, api_version, correlation_id, client_id, pos - HEADER_PREFIX);

bad:
    raise_protocol_error("bad_request_header", detail);
failed:
    PyBuffer_Release(&view);
    Py_XDECREF(client_id);
    return NULL;
}

/* ---- the NodeEndpoints rewrite's common case (protocol/node_endpoints.py) ----------------------------
 *
 * rewrite_node_endpoints(api_key, api_version, body, address_for, start, remember): the reference's
 * (rewrite_node_endpoints_in_python) answer for a Produce or Fetch answer whose top-level tagged block is
 * the usual empty one, (None, 0), with the walk remembered as the reference's walk remembers it (the
 * globals `_last` and `_last_fetch` of protocol/response_walks.py, written as its `global` statements
 * write them). Every other call is the reference's: another API, a version the reference refuses, a
 * tagged block with something in it, a walk that fails (the reference walks again and raises), and
 * arguments the fast path does not read as the Python would (not exact ints, `remember` not a bool, a
 * negative start, a buffer other than bytes, a bytearray or a one-dimensional view of bytes, keywords).
 * Why C: every Produce v10+ and Fetch v16+ answer comes here, and the three Python calls between the
 * filter and the compiled walk cost ~0.2 us, eight times the walk of a one-partition answer. */

#define API_PRODUCE 0
#define API_FETCH 1

static PyObject *endpoints_reference = NULL;
static PyObject *walks_globals = NULL;
static PyObject *nothing_rewritten = NULL; /* (None, 0) */
static PyObject *last_produce_name = NULL; /* "_last" */
static PyObject *last_fetch_name = NULL;   /* "_last_fetch" */
/* Per api key (Produce, Fetch): the first version carrying NodeEndpoints and the last the walks know. */
static long endpoints_first[2], endpoints_last[2];

/* bind_node_endpoints({api key: (first, last)}, response_walks' globals, the reference). */
static PyObject *
bind_node_endpoints(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_node_endpoints({api key: (first, last)}, response_walks' globals, reference)");
        return NULL;
    }
    long first[2], last[2];
    for (long key = API_PRODUCE; key <= API_FETCH; key++) {
        PyObject *key_obj = PyLong_FromLong(key);
        if (key_obj == NULL) {
            return NULL;
        }
        PyObject *versions = PyDict_GetItemWithError(args[0], key_obj); /* borrowed */
        Py_DECREF(key_obj);
        if (versions == NULL || !PyTuple_Check(versions) || PyTuple_GET_SIZE(versions) != 2) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "Produce and Fetch need (first, last) versions");
            }
            return NULL;
        }
        first[key] = PyLong_AsLong(PyTuple_GET_ITEM(versions, 0));
        last[key] = PyLong_AsLong(PyTuple_GET_ITEM(versions, 1));
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if ((nothing_rewritten == NULL && (nothing_rewritten = Py_BuildValue("(Oi)", Py_None, 0)) == NULL) ||
        (last_produce_name == NULL && (last_produce_name = PyUnicode_InternFromString("_last")) == NULL) ||
        (last_fetch_name == NULL && (last_fetch_name = PyUnicode_InternFromString("_last_fetch")) == NULL)) {
        return NULL;
    }
    for (int key = API_PRODUCE; key <= API_FETCH; key++) {
        endpoints_first[key] = first[key];
        endpoints_last[key] = last[key];
    }
    Py_XSETREF(walks_globals, Py_NewRef(args[1]));
    Py_XSETREF(endpoints_reference, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* Open `body` for a walk when the Python reads it byte by byte as the walk reads its buffer: bytes, a
 * bytearray, or a C-contiguous one-dimensional view of unsigned bytes. 1 with the buffer held, or 0 with
 * nothing held and no exception set (another type or shape, a released view: the Python's to read). */
static int
open_as_bytes(PyObject *body, Py_buffer *view, walk_buffer *b)
{
    int exact = PyBytes_CheckExact(body) || PyByteArray_CheckExact(body);
    if (!exact && !Py_IS_TYPE(body, &PyMemoryView_Type)) {
        return 0;
    }
    if (PyObject_GetBuffer(body, view, exact ? PyBUF_SIMPLE : PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (!exact && !(view->ndim == 1 && view->itemsize == 1 && view->format != NULL &&
                    strcmp(view->format, "B") == 0)) {
        PyBuffer_Release(view);
        return 0;
    }
    b->p = (const uint8_t *)view->buf;
    b->n = view->len;
    return 1;
}

/* globals[name] = (body, start, version, last): what the reference's walk remembers. 0, or -1. */
static int
remember_walk(PyObject *name, PyObject *body, PyObject *start, PyObject *version, PyObject *last)
{
    PyObject *walked = PyTuple_Pack(4, body, start, version, last);
    if (walked == NULL) {
        return -1;
    }
    int stored = PyDict_SetItem(walks_globals, name, walked);
    Py_DECREF(walked);
    return stored;
}

/* walked_fetch_topics(api_version, body, start): response_walks.walked_fetch_topics_in_python, for the usage
 * records of every Fetch v16+ answer the NodeEndpoints rewrite walked (a Python frame less per answer). It
 * reads and resets the module's `_last_fetch` in the module's globals (bind_walked_fetch_topics), as the
 * Python does; a kept walk that is not an exact 4-tuple goes to the Python (it never is one). Its `==` on
 * the start and the version takes the very object as equal, as PyObject_RichCompareBool does: the same for
 * the ints the proxy passes. */
static PyObject *fetch_walk_globals = NULL;
static PyObject *fetch_walk_reference = NULL;
static PyObject *no_fetch_walk_key = NULL; /* "_NO_FETCH_WALK"; "_last_fetch" is last_fetch_name, the walks' */

/* bind_walked_fetch_topics(response_walks' globals, the reference). */
static PyObject *
bind_walked_fetch_topics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind_walked_fetch_topics(response_walks' globals, reference)");
        return NULL;
    }
    if ((last_fetch_name == NULL && (last_fetch_name = PyUnicode_InternFromString("_last_fetch")) == NULL) ||
        (no_fetch_walk_key == NULL && (no_fetch_walk_key = PyUnicode_InternFromString("_NO_FETCH_WALK")) == NULL)) {
        return NULL;
    }
    Py_XSETREF(fetch_walk_globals, Py_NewRef(args[0]));
    Py_XSETREF(fetch_walk_reference, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* globals[name], a new reference, or NULL with the NameError the Python's read of it would raise. */
static PyObject *
global_named(PyObject *name)
{
    PyObject *value = PyDict_GetItemWithError(fetch_walk_globals, name); /* borrowed */
    if (value == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
        }
        return NULL;
    }
    return Py_NewRef(value);
}

static PyObject *
walked_fetch_topics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (fetch_walk_globals == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_walked_fetch_topics was not called");
        return NULL;
    }
    if (nargs != 3) {
        return PyObject_Vectorcall(fetch_walk_reference, args, nargs, NULL); /* its own TypeError */
    }
    /* walked, walked_start, walked_version, found = _last_fetch */
    PyObject *kept = global_named(last_fetch_name);
    if (kept == NULL) {
        return NULL;
    }
    if (!PyTuple_CheckExact(kept) || PyTuple_GET_SIZE(kept) != 4) {
        Py_DECREF(kept);
        return PyObject_Vectorcall(fetch_walk_reference, args, nargs, NULL);
    }
    /* _last_fetch = _NO_FETCH_WALK */
    PyObject *nothing = global_named(no_fetch_walk_key);
    if (nothing == NULL || PyDict_SetItem(fetch_walk_globals, last_fetch_name, nothing) < 0) {
        Py_XDECREF(nothing);
        Py_DECREF(kept);
        return NULL;
    }
    Py_DECREF(nothing);
    /* if walked is body and walked_start == start and walked_version == api_version: return found */
    PyObject *result = NULL;
    int same = PyTuple_GET_ITEM(kept, 0) == args[1];
    if (same) {
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(kept, 1), args[2], Py_EQ);
    }
    if (same > 0) {
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(kept, 2), args[0], Py_EQ);
    }
    if (same >= 0) {
        result = Py_NewRef(same ? PyTuple_GET_ITEM(kept, 3) : Py_None);
    }
    Py_DECREF(kept);
    return result;
}

static PyObject *
rewrite_node_endpoints(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (endpoints_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_node_endpoints was not called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 6) {
        goto reference;
    }
    PyObject *key_obj = args[0], *version_obj = args[1], *body = args[2], *start_obj = args[4];
    PyObject *remember_obj = args[5];
    if (!PyLong_CheckExact(key_obj) || !PyLong_CheckExact(version_obj) || !PyLong_CheckExact(start_obj) ||
        !PyBool_Check(remember_obj)) {
        goto reference;
    }
    int overflow;
    long key = PyLong_AsLongAndOverflow(key_obj, &overflow);
    if (overflow || (key != API_PRODUCE && key != API_FETCH)) {
        goto reference;
    }
    long version = PyLong_AsLongAndOverflow(version_obj, &overflow);
    if (overflow) {
        goto reference;
    }
    if (version < endpoints_first[key]) {
        return Py_NewRef(nothing_rewritten); /* a version before the field: not read */
    }
    Py_ssize_t start = PyLong_AsSsize_t(start_obj);
    if (version > endpoints_last[key] || start < 0) {
        PyErr_Clear(); /* a start beyond Py_ssize_t */
        goto reference;
    }
    int remember = remember_obj == Py_True;
    Py_buffer view;
    walk_buffer b;
    if (!open_as_bytes(body, &view, &b)) {
        goto reference;
    }
    Py_ssize_t pos = start;
    int stored = 0;
    if (key == API_PRODUCE) {
        if (produce_end_of(b, version, &pos) < 0) {
            PyBuffer_Release(&view);
            goto walk_failed;
        }
        if (remember) {
            PyObject *end = PyLong_FromSsize_t(pos);
            stored = end == NULL ? -1 : remember_walk(last_produce_name, body, start_obj, version_obj, end);
            Py_XDECREF(end);
        }
        pos += 4; /* throttle_time_ms */
    }
    else {
        PyObject *found = fetch_topics_of(b, version, &pos, remember);
        if (found == NULL) {
            PyBuffer_Release(&view);
            goto walk_failed;
        }
        if (remember) {
            stored = remember_walk(last_fetch_name, body, start_obj, version_obj, found);
        }
        Py_DECREF(found);
    }
    /* the usual empty top-level tagged block, the body's last byte */
    int plain = pos == b.n - 1 && b.p[pos] == 0;
    PyBuffer_Release(&view);
    if (stored < 0) {
        return NULL;
    }
    if (plain) {
        return Py_NewRef(nothing_rewritten);
    }
    goto reference;

walk_failed:
    PyErr_Clear(); /* the reference walks again, and raises what it raises */
reference:
    return PyObject_Vectorcall(endpoints_reference, args, nargsf, kwnames);
}

/* ---- a Produce request's acks (protocol/produce.py) ---------------------------------------------------
 *
 * produce_acks(frame, header): the reference's (produce_acks_in_python) answer where a v3+ Produce's
 * transactional id is null (every producer but a transactional one's), read from a RequestHeader as the
 * header parse makes it; every other call is the reference's (an older version, a transactional id, a
 * frame cut before acks, a header or frame not of the types the parse gives). Why C: the request pipeline
 * asks it of every Produce it forwards, and the Python costs ~0.18 us where the read is a few bytes. */

static PyObject *acks_reference = NULL;
static long acks_first_transactional = 0, acks_first_flexible = 0;

/* bind_produce_acks(first transactional version, first flexible version, the reference). */
static PyObject *
bind_produce_acks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_produce_acks(first transactional, first flexible, reference)");
        return NULL;
    }
    long transactional = PyLong_AsLong(args[0]);
    long flexible = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    acks_first_transactional = transactional;
    acks_first_flexible = flexible;
    Py_XSETREF(acks_reference, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* Whether `header` is a RequestHeader as the header parse makes it: the type exactly, with its five items
 * (tuple.__new__ can make one of any length). */
static int
parsed_header(PyObject *header)
{
    return header_type != NULL && Py_IS_TYPE(header, header_type) && PyTuple_GET_SIZE(header) == 5;
}

static PyObject *
produce_acks(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (acks_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_produce_acks was not called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 2 || !parsed_header(args[1])) {
        goto reference;
    }
    PyObject *version_obj = PyTuple_GET_ITEM(args[1], 1), *size_obj = PyTuple_GET_ITEM(args[1], 4);
    if (!PyLong_CheckExact(version_obj) || !PyLong_CheckExact(size_obj)) {
        goto reference;
    }
    int overflow;
    long version = PyLong_AsLongAndOverflow(version_obj, &overflow);
    if (overflow || version < acks_first_transactional) {
        goto reference;
    }
    long size = PyLong_AsLongAndOverflow(size_obj, &overflow);
    if (overflow || size < 0 || size > PY_SSIZE_T_MAX / 2) {
        goto reference;
    }
    Py_buffer view;
    walk_buffer b;
    if (!open_as_bytes(args[0], &view, &b)) {
        goto reference;
    }
    Py_ssize_t pos = 4 + (Py_ssize_t)size, acks_at = -1;
    if (version >= acks_first_flexible) {
        if (b.n >= pos + 3 && b.p[pos] == 0) { /* a null compact transactional id: one zero byte */
            acks_at = pos + 1;
        }
    }
    else if (b.n >= pos + 4 && int16_at(b.p + pos) == -1) { /* a null transactional id: int16 -1 */
        acks_at = pos + 2;
    }
    long acks = acks_at >= 0 ? int16_at(b.p + acks_at) : 0;
    PyBuffer_Release(&view);
    if (acks_at >= 0) {
        return PyLong_FromLong(acks);
    }
reference:
    return PyObject_Vectorcall(acks_reference, args, nargsf, kwnames);
}

/* ---- a response header's size (protocol/headers.py) ---------------------------------------------------
 *
 * response_header_size(api_key, api_version, frame): the reference's (response_header_size_in_python)
 * answer for a header v0 (4) or a header v1 with an empty tagged block (5), told apart with the request
 * header parse's table (bind_request_headers); every other call is the reference's (a frame too short
 * for a correlation id, tagged fields in the header, arguments not exact ints, a frame not bytes-like).
 * Why C: the quota filters, the usage records and the address rewrite ask it of answers, and the Python
 * costs two calls. */

static PyObject *header_size_reference = NULL;
static long api_versions_key = -1;

/* bind_response_headers(ApiVersions' key, the reference). */
static PyObject *
bind_response_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind_response_headers(ApiVersions key, reference)");
        return NULL;
    }
    long key = PyLong_AsLong(args[0]);
    if (key == -1 && PyErr_Occurred()) {
        return NULL;
    }
    api_versions_key = key;
    Py_XSETREF(header_size_reference, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyObject *
response_header_size(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (header_size_reference == NULL || flexible_from == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_request_headers and bind_response_headers were not both called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 3 || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        goto reference;
    }
    int overflow;
    long key = PyLong_AsLongAndOverflow(args[0], &overflow);
    if (overflow) {
        goto reference;
    }
    long version = PyLong_AsLongAndOverflow(args[1], &overflow);
    if (overflow) {
        goto reference;
    }
    /* ApiVersions answers with header v0 in every version */
    int flexible = key == api_versions_key ? 0 : is_flexible(key, version);
    if (flexible < 0) {
        return NULL;
    }
    Py_buffer view;
    walk_buffer b;
    if (!open_as_bytes(args[2], &view, &b)) {
        goto reference;
    }
    long size = -1;
    if (b.n >= HEADER_PREFIX + 4) {
        if (!flexible) {
            size = 4;
        }
        else if (b.n > HEADER_PREFIX + 4 && b.p[HEADER_PREFIX + 4] == 0) {
            size = 5; /* header v1 with no tagged fields: nearly every answer */
        }
    }
    PyBuffer_Release(&view);
    if (size > 0) {
        return PyLong_FromLong(size);
    }
reference:
    return PyObject_Vectorcall(header_size_reference, args, nargsf, kwnames);
}

/* ---- a Produce request's topics for the usage records (protocol/produce_stream.py) ---------------------
 *
 * produce_topics(frame, header): the reference's (produce_topics_in_python) answer where no other filter
 * walked this request (the last walk `produce_body` kept, produce_stream's global `_last`, is of another
 * header): the compiled walk of the topics alone, as `produce_topic_bytes` runs it. Every other call is
 * the reference's (a walk kept for this header, a version beyond the walks', a header not of the type the
 * parse gives). Why C: the usage records ask it of every Produce, and the Python is two calls before the
 * compiled walk. */

static PyObject *topics_reference = NULL;
static PyObject *stream_globals = NULL;
static PyObject *last_body_walk_name = NULL; /* "_last" */
static long produce_max = -1;

/* bind_produce_topics(produce_stream's globals, PRODUCE_MAX, the reference). */
static PyObject *
bind_produce_topics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_produce_topics(produce_stream's globals, PRODUCE_MAX, reference)");
        return NULL;
    }
    long newest = PyLong_AsLong(args[1]);
    if (newest == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (last_body_walk_name == NULL && (last_body_walk_name = PyUnicode_InternFromString("_last")) == NULL) {
        return NULL;
    }
    produce_max = newest;
    Py_XSETREF(stream_globals, Py_NewRef(args[0]));
    Py_XSETREF(topics_reference, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyObject *
produce_topics(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (topics_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_produce_topics was not called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 2 || !parsed_header(args[1])) {
        goto reference;
    }
    PyObject *last = PyDict_GetItemWithError(stream_globals, last_body_walk_name); /* borrowed */
    if (last == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        goto reference;
    }
    if (last != Py_None && (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) < 1 ||
                            PyTuple_GET_ITEM(last, 0) == args[1])) {
        goto reference; /* a walk kept for this very header: the reference takes its topics */
    }
    PyObject *version = PyTuple_GET_ITEM(args[1], 1), *size = PyTuple_GET_ITEM(args[1], 4);
    if (!PyLong_CheckExact(version) || !PyLong_CheckExact(size)) {
        goto reference;
    }
    int overflow;
    long api_version = PyLong_AsLongAndOverflow(version, &overflow);
    if (overflow || api_version < 0 || api_version > produce_max) {
        goto reference; /* refused there */
    }
    long header_size = PyLong_AsLongAndOverflow(size, &overflow);
    if (overflow || header_size < 0 || header_size > PY_SSIZE_T_MAX / 2) {
        goto reference;
    }
    PyObject *start = PyLong_FromLong(4 + header_size);
    if (start == NULL) {
        return NULL;
    }
    PyObject *walk_args[3] = {version, args[0], start};
    PyObject *found = produce_walk(walk_args, 3, 1, "produce_topics(frame, header)");
    Py_DECREF(start);
    return found;

reference:
    return PyObject_Vectorcall(topics_reference, args, nargsf, kwnames);
}

/* ---- the frames of a read (protocol/frames.py) ----------------------------------------------------------
 *
 * whole_frames(view, pos, min_payload, max_frame, frames): whole_frames_in_python, the loop of
 * FrameSplitter.feed over a read's frames: each frame whole in `view` from `pos` on, of a length within
 * [min_payload, max_frame], appended to `frames` as `view[start:end]`; then (where they end, the length
 * field of the frame that starts there, or None when fewer than 4 bytes are left). Calls with a view the
 * Python reads otherwise (not bytes-like; see open_as_bytes), arguments that are not exact ints and a list,
 * or a negative start are the reference's (bind_whole_frames). Why C: every frame of every read, both ways,
 * goes through this loop, and in Python a frame's length read and slice cost ~0.2 us. */

static PyObject *frames_reference = NULL;

/* bind_whole_frames(the reference). */
static PyObject *
bind_whole_frames(PyObject *module, PyObject *reference)
{
    if (!PyCallable_Check(reference)) {
        PyErr_SetString(PyExc_TypeError, "bind_whole_frames(reference)");
        return NULL;
    }
    Py_XSETREF(frames_reference, Py_NewRef(reference));
    Py_RETURN_NONE;
}

static PyObject *
whole_frames(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (frames_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_whole_frames was not called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 5 || !Py_IS_TYPE(args[0], &PyMemoryView_Type) || !PyLong_CheckExact(args[1]) ||
        !PyLong_CheckExact(args[2]) || !PyLong_CheckExact(args[3]) || !PyList_CheckExact(args[4])) {
        goto reference;
    }
    int overflow_pos, overflow_min, overflow_max;
    long long pos = PyLong_AsLongLongAndOverflow(args[1], &overflow_pos);
    long long min_payload = PyLong_AsLongLongAndOverflow(args[2], &overflow_min);
    long long max_frame = PyLong_AsLongLongAndOverflow(args[3], &overflow_max);
    if (overflow_pos || overflow_min || overflow_max || pos < 0) {
        goto reference;
    }
    PyObject *view = args[0], *frames = args[4];
    Py_buffer buffer;
    walk_buffer b;
    if (!open_as_bytes(view, &buffer, &b)) {
        goto reference;
    }
    PyObject *result = NULL;
    while (pos <= b.n - 4) { /* size - pos >= _PREFIX */
        long long length = int32_at(b.p + pos);
        long long end = pos + 4 + length;
        if (length < min_payload || length > max_frame || end > b.n) {
            /* (steal_pair, not Py_BuildValue, which parses its format string each call: ~500 instructions) */
            PyObject *where = PyLong_FromLongLong(pos);
            result = where == NULL ? NULL : steal_pair(where, PyLong_FromLongLong(length));
            goto done;
        }
        PyObject *frame = PySequence_GetSlice(view, (Py_ssize_t)pos, (Py_ssize_t)end);
        if (frame == NULL) {
            goto done;
        }
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0) {
            goto done;
        }
        pos = end;
    }
    result = steal_pair(PyLong_FromLongLong(pos), Py_NewRef(Py_None));
done:
    PyBuffer_Release(&buffer);
    return result;

reference:
    return PyObject_Vectorcall(frames_reference, args, nargsf, kwnames);
}

/* ---- a lent read buffer (protocol/frame_memory.py) --------------------------------------------------------
 *
 * buffer_in_use(buffer): frame_memory.buffer_in_use_in_python, read from the bytearray itself: whether a view
 * of it is alive (it is exported). The Python learns it by trying to grow the buffer (an append and a delete
 * when it may, a BufferError raised and caught when it may not), once for every read from a client. Anything
 * but a bytearray: TypeError (the Python's contract; it would fail on the append). */
static PyObject *
buffer_in_use(PyObject *module, PyObject *buffer)
{
    if (!PyByteArray_Check(buffer)) {
        PyErr_Format(PyExc_TypeError, "buffer_in_use takes a bytearray, not %.100s", Py_TYPE(buffer)->tp_name);
        return NULL;
    }
    return PyBool_FromLong(((PyByteArrayObject *)buffer)->ob_exports > 0);
}

static PyMethodDef walks_methods[] = {
    {"produce_responses_end", (PyCFunction)(void (*)(void))produce_responses_end, METH_FASTCALL,
     "The offset after a Produce v9+ answer's responses (protocol.response_walks)."},
    {"fetch_responses", (PyCFunction)(void (*)(void))fetch_responses, METH_FASTCALL,
     "The topics of a Fetch v12+ answer with their record bytes, and the offset after its responses."},
    {"fetch_answer_topics", (PyCFunction)(void (*)(void))fetch_answer_topics, METH_FASTCALL,
     "response_walks.fetch_answer_topics_in_python, compiled."},
    {"walk_produce_body", (PyCFunction)(void (*)(void))walk_produce_body, METH_FASTCALL,
     "acks, timeout_ms, topics and partitions of a whole Produce request body (protocol.produce_stream)."},
    {"produce_topic_bytes", (PyCFunction)(void (*)(void))produce_topic_bytes, METH_FASTCALL,
     "The topics of a whole Produce request body with their record bytes (protocol.produce_stream)."},
    {"bind_request_headers", (PyCFunction)(void (*)(void))bind_request_headers, METH_FASTCALL,
     "What parse_request_header reads beside the frame (protocol.headers binds it once)."},
    {"parse_request_header", (PyCFunction)parse_request_header, METH_O,
     "The request header of a frame, length prefix included (protocol.headers)."},
    {"bind_walked_fetch_topics", (PyCFunction)(void (*)(void))bind_walked_fetch_topics, METH_FASTCALL,
     "Bind walked_fetch_topics to response_walks' globals and its Python reference."},
    {"walked_fetch_topics", (PyCFunction)(void (*)(void))walked_fetch_topics, METH_FASTCALL,
     "response_walks.walked_fetch_topics_in_python, compiled: the walk the rewrite kept of this answer."},
    {"bind_whole_frames", (PyCFunction)bind_whole_frames, METH_O,
     "The Python whole_frames, for the calls the compiled one hands on (protocol.frames binds it once)."},
    {"whole_frames", (PyCFunction)(void (*)(void))whole_frames, METH_FASTCALL | METH_KEYWORDS,
     "protocol.frames.whole_frames_in_python, compiled: the frames whole in a read."},
    {"buffer_in_use", (PyCFunction)buffer_in_use, METH_O,
     "protocol.frame_memory.buffer_in_use_in_python, compiled: whether a view of a bytearray is alive."},
    {"bind_produce_topics", (PyCFunction)(void (*)(void))bind_produce_topics, METH_FASTCALL,
     "What produce_topics reads beside its arguments (protocol.produce_stream binds it once)."},
    {"produce_topics", (PyCFunction)(void (*)(void))produce_topics, METH_FASTCALL | METH_KEYWORDS,
     "protocol.produce_stream.produce_topics: its common case compiled, the rest its reference's."},
    {"bind_response_headers", (PyCFunction)(void (*)(void))bind_response_headers, METH_FASTCALL,
     "What response_header_size reads beside its arguments (protocol.headers binds it once)."},
    {"response_header_size", (PyCFunction)(void (*)(void))response_header_size, METH_FASTCALL | METH_KEYWORDS,
     "protocol.headers.response_header_size: its common case compiled, the rest its reference's."},
    {"bind_produce_acks", (PyCFunction)(void (*)(void))bind_produce_acks, METH_FASTCALL,
     "What produce_acks reads beside its arguments (protocol.produce binds it once)."},
    {"produce_acks", (PyCFunction)(void (*)(void))produce_acks, METH_FASTCALL | METH_KEYWORDS,
     "protocol.produce.produce_acks: its common case compiled, the rest its reference's."},
    {"bind_node_endpoints", (PyCFunction)(void (*)(void))bind_node_endpoints, METH_FASTCALL,
     "What rewrite_node_endpoints reads beside its arguments (protocol.node_endpoints binds it once)."},
    {"rewrite_node_endpoints", (PyCFunction)(void (*)(void))rewrite_node_endpoints, METH_FASTCALL | METH_KEYWORDS,
     "protocol.node_endpoints.rewrite_node_endpoints: its common case compiled, the rest its reference's."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walks_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_compiled",
    .m_doc = "The compiled readers of the hot path (protocol/compiled.py).",
    .m_size = -1,
    .m_methods = walks_methods,
};

PyMODINIT_FUNC
PyInit__compiled(void)
{
    PyObject *errors = PyImport_ImportModule("sluice.protocol.errors");
    if (errors == NULL) {
        return NULL;
    }
    protocol_error = PyObject_GetAttrString(errors, "ProtocolError");
    Py_DECREF(errors);
    if (protocol_error == NULL) {
        return NULL;
    }
    return PyModule_Create(&walks_module);
}
