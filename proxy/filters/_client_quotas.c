/* ClientQuotas.on_request and on_response, compiled: the charges of a Produce request, of a Fetch request's
 * cap, and of an answer's request time and Fetch bytes (proxy/filters/client_quotas.py), with the quota
 * managers' record written out inline for their exact types (`ClientQuotaManager.record_and_get_throttle_ms`,
 * `RequestQuotaManager.record_request_time_ns`, and `WindowQuotaSensor.record` over its compiled rate).
 *
 * Why C: every Produce and Fetch request and answer passes here while a quota is configured, and in Python
 * the methods and the records under them cost ~0.9 us of the ~2.8 us a 16 KiB Produce and its answer cost
 * (docs/architecture.md, "Compiled readers"). The Python methods stay the references and run where this
 * module was not built; this is their translation: the same attributes read and written, the same comparisons
 * of Python objects, the same calls where the Python calls out (the connection's clock, mute and CPU time,
 * `_touch`, a manager's `_sensor`, `_throttled`, `_produce_charged` and `_tell`), in the Python's order where
 * it shows: slots and fields are read where convenient (a read has no effect), calls with effects are made
 * in the Python's order.
 *
 * The reference runs instead, from the start, for every call that is not the common case, before anything is
 * charged: keywords; a subclass of ClientQuotas (whose helpers may be its own); a header that is not exactly a
 * RequestHeader of 5 items, or a request not exactly an InFlight; a version beyond the chain's; a Produce while some entity's gate is shut, with a turn waiting at a
 * gate, or read in an earlier ms; a Fetch whose cap is not remembered or may bind; an answer to a request that
 * earned a throttle as it was forwarded, of an uncharged API (ApiVersions, SASL), or on a muted connection.
 * The queries such a case was decided by (the clock, the last read, the mute) the reference asks again. Once
 * charging begins nothing goes back: a manager or sensor of another type, or a manager in fleet mode, is asked
 * through its own method, as the Python asks it.
 *
 * Written out means read once, when bound: the managers' and window sensor's methods for their exact types,
 * and the module's functions and constants handed to bind() (`response_header_size`, `to_int32`, the key
 * sets, the CPU time's unit, the sensors' expiry) are the ones of that moment; a method patched on one of
 * those classes, or a name rebound in its module, afterwards is not seen (a subclass's own methods are).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_compiled.h"

/* What bind() hands over once, from client_quotas.py. */
static PyObject *reference = NULL;             /* the Python ClientQuotas.on_response */
static PyObject *request_reference = NULL;     /* the Python ClientQuotas.on_request */
static PyTypeObject *quotas_type = NULL;       /* ClientQuotas: a subclass's own helpers run, in the Python */
static PyTypeObject *frame_head_type = NULL;   /* protocol.frames.FrameHead */
static PyObject *produce_key = NULL;           /* ApiKey.PRODUCE, as a plain int */
static PyObject *int32_max = NULL;             /* 2**31 - 1 */
static PyTypeObject *in_flight_type = NULL;    /* filter_api.contract.InFlight */
static PyTypeObject *request_header_type = NULL;
static PyObject *uncharged_keys = NULL;        /* client_quotas._UNCHARGED_KEYS */
static PyObject *fetch_keys = NULL;            /* client_quotas._FETCHES */
static PyObject *response_header_size = NULL;  /* protocol.headers.response_header_size */
static PyTypeObject *client_manager_type = NULL;  /* quota.managers.ClientQuotaManager */
static PyTypeObject *request_manager_type = NULL; /* quota.managers.RequestQuotaManager */
static PyTypeObject *window_sensor_type = NULL;   /* quota.sensor.WindowQuotaSensor */
static PyObject *nanos_to_percentage = NULL;   /* quota.managers.NANOS_TO_PERCENTAGE_PER_SECOND */
static PyObject *inactive_ms = NULL;           /* quota.sensor.INACTIVE_SENSOR_EXPIRATION_MS */
static PyObject *to_int32 = NULL;              /* quota.throttle.to_int32 */

static PyObject *s_conn, *s_all_rules, *s_enabled_bits, *s_user, *s_request_rules, *s_fetch_rules,
    *s_mute_remaining_ms, *s_now_ms, *s_take_cpu_ns, *s_request_checked, *s_version, *s_request_touched,
    *s_fetch_touched, *s_touch, *s_request, *s_fetch, *s_stats, *s_usage, *s_cpu_time_ns, *s_throttled,
    *s_tell, *s_rules, *s_lookup, *s_fleet, *s_sensor, *s_last_record_ms, *s_rate, *s_bound, *s_record,
    *s_record_and_throttle, *s_max_throttle_ms, *s_record_and_get_throttle_ms, *s_record_request_time_ns,
    *s_kind_request, *s_kind_fetch, *s_get, *s_newest, *s_produce_rules, *s_produce_touched, *s_produce,
    *s_gates, *s_turn, *s_turn_rank, *s_fetch_cap, *s_shut, *s_read_ms, *s_kind_produce, *s_produce_charged;
/* The slots read: ClientQuotas', its rules' (QuotaRules), its managers' (ClientQuotaManager, also
 * RequestQuotaManager) and their window sensors' (WindowQuotaSensor). */
static slot_t cq_newest, cq_produce_rules, cq_produce_touched, cq_produce, cq_gates, cq_turn, cq_turn_rank,
    cq_fetch_cap, gates_shut;
static slot_t cq_conn, cq_all_rules, cq_request_rules, cq_fetch_rules, cq_request_checked, cq_request_touched,
    cq_fetch_touched, cq_request, cq_fetch, cq_stats, rules_enabled_bits, rules_version, manager_rules,
    manager_lookup, manager_fleet, manager_max_throttle_ms, sensor_last_record_ms, sensor_rate, sensor_bound;
static PyObject *zero = NULL, *minus_one = NULL, *four = NULL;
/* The usage records' entity counter the request time adds to (the usage ledger's type is not the filter's to
 * know: read by name). */
static slot_t entity_cpu_time_ns;

/* ClientQuotaManager.record_and_get_throttle_ms(manager, user, client_id, value, now): a new reference. For
 * an exact ClientQuotaManager or RequestQuotaManager (which does not override it) outside fleet mode, written
 * out; otherwise the manager's own method. */
static PyObject *
record_throttle(PyObject *manager, PyObject *user, PyObject *client_id, PyObject *value, PyObject *now)
{
    if (!Py_IS_TYPE(manager, client_manager_type) && !Py_IS_TYPE(manager, request_manager_type)) {
        goto method;
    }
    PyObject *fleet = slot_get(manager, &manager_fleet);
    if (fleet == NULL) {
        return NULL;
    }
    Py_DECREF(fleet);
    if (fleet != Py_None) {
        goto method; /* (the fleet's estimate is fed by each record: its own code) */
    }
    /* if not self._rules.enabled_bits: return 0 */
    PyObject *rules = slot_get(manager, &manager_rules);
    if (rules == NULL) {
        return NULL;
    }
    PyObject *bits = slot_get(rules, &rules_enabled_bits);
    Py_DECREF(rules);
    if (bits == NULL) {
        return NULL;
    }
    int enabled = PyObject_IsTrue(bits);
    Py_DECREF(bits);
    if (enabled <= 0) {
        return enabled < 0 ? NULL : Py_NewRef(zero);
    }
    /* sensor = self._lookup.get((user, client_id)) */
    PyObject *lookup = slot_get(manager, &manager_lookup);
    if (lookup == NULL) {
        return NULL;
    }
    PyObject *key = PyTuple_Pack(2, user, client_id);
    if (key == NULL) {
        Py_DECREF(lookup);
        return NULL;
    }
    PyObject *sensor = mapping_get(lookup, key, s_get);
    Py_DECREF(key);
    Py_DECREF(lookup);
    if (sensor == NULL) {
        return NULL;
    }
    if (sensor == Py_None) {
        Py_CLEAR(sensor);
    }
    /* if sensor is None or now_ms - sensor.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS: */
    int renew = sensor == NULL;
    if (!renew) {
        PyObject *last = slot_get(sensor, &sensor_last_record_ms);
        PyObject *idle = last == NULL ? NULL : PyNumber_Subtract(now, last);
        Py_XDECREF(last);
        renew = idle == NULL ? -1 : PyObject_RichCompareBool(idle, inactive_ms, Py_GT);
        Py_XDECREF(idle);
        if (renew < 0) {
            Py_DECREF(sensor);
            return NULL;
        }
    }
    if (renew) {
        Py_XDECREF(sensor);
        PyObject *args[4] = {manager, user, client_id, now};
        sensor = PyObject_VectorcallMethod(s_sensor, args, 4, NULL);
        if (sensor == NULL) {
            return NULL;
        }
    }
    /* throttle = sensor.record(value, now_ms): WindowQuotaSensor's written out */
    PyObject *throttle;
    if (Py_IS_TYPE(sensor, window_sensor_type)) {
        if (slot_set(sensor, &sensor_last_record_ms, now) < 0) {
            Py_DECREF(sensor);
            return NULL;
        }
        PyObject *rate = slot_get(sensor, &sensor_rate);
        PyObject *bound = rate == NULL ? NULL : slot_get(sensor, &sensor_bound);
        if (bound == NULL) {
            Py_XDECREF(rate);
            Py_DECREF(sensor);
            return NULL;
        }
        PyObject *args[4] = {rate, value, now, bound};
        throttle = PyObject_VectorcallMethod(s_record_and_throttle, args, 4, NULL);
        Py_DECREF(bound);
        Py_DECREF(rate);
    }
    else {
        PyObject *args[3] = {sensor, value, now};
        throttle = PyObject_VectorcallMethod(s_record, args, 3, NULL);
    }
    Py_DECREF(sensor);
    if (throttle == NULL) {
        return NULL;
    }
    /* if not throttle: return 0 */
    int throttled = PyObject_IsTrue(throttle);
    if (throttled <= 0) {
        Py_DECREF(throttle);
        return throttled < 0 ? NULL : Py_NewRef(zero);
    }
    /* return to_int32(throttle if throttle < max_throttle else max_throttle) */
    PyObject *max_throttle = slot_get(manager, &manager_max_throttle_ms);
    if (max_throttle == NULL) {
        Py_DECREF(throttle);
        return NULL;
    }
    int below = PyObject_RichCompareBool(throttle, max_throttle, Py_LT);
    if (below < 0) {
        Py_DECREF(throttle);
        Py_DECREF(max_throttle);
        return NULL;
    }
    PyObject *result = PyObject_CallOneArg(to_int32, below ? throttle : max_throttle);
    Py_DECREF(throttle);
    Py_DECREF(max_throttle);
    return result;

method: {
    PyObject *args[5] = {manager, user, client_id, value, now};
    return PyObject_VectorcallMethod(s_record_and_get_throttle_ms, args, 5, NULL);
}
}

/* `getattr(obj, name).enabled_bits != 0` as a C truth: 1, 0, or -1 with an exception set. */
static int
rules_enabled(PyObject *obj, const slot_t *rules_slot)
{
    PyObject *rules = slot_get(obj, rules_slot);
    if (rules == NULL) {
        return -1;
    }
    PyObject *bits = slot_get(rules, &rules_enabled_bits);
    Py_DECREF(rules);
    if (bits == NULL) {
        return -1;
    }
    int enabled = PyObject_RichCompareBool(bits, zero, Py_NE);
    Py_DECREF(bits);
    return enabled;
}

/* `touched = (user, client_id, rules.version); if touched != self.<memo>: self._touch(kind, manager, rules,
 * user, client_id); self.<memo> = touched` (rules: self.<rules_name>). 0, or -1 with an exception set. */
static int
touch(PyObject *self, const slot_t *memo, PyObject *kind, PyObject *manager, const slot_t *rules_slot,
      PyObject *user, PyObject *client_id)
{
    PyObject *rules = slot_get(self, rules_slot);
    if (rules == NULL) {
        return -1;
    }
    PyObject *version = slot_get(rules, &rules_version);
    PyObject *touched = version == NULL ? NULL : PyTuple_Pack(3, user, client_id, version);
    Py_XDECREF(version);
    PyObject *last = touched == NULL ? NULL : slot_get(self, memo);
    int differs = last == NULL ? -1 : PyObject_RichCompareBool(touched, last, Py_NE);
    Py_XDECREF(last);
    int status = differs < 0 ? -1 : 0;
    if (differs > 0) {
        PyObject *args[6] = {self, kind, manager, rules, user, client_id};
        PyObject *done = PyObject_VectorcallMethod(s_touch, args, 6, NULL);
        status = done == NULL ? -1 : slot_set(self, memo, touched);
        Py_XDECREF(done);
    }
    Py_XDECREF(touched);
    Py_DECREF(rules);
    return status;
}

/* `if throttle > 0: self._throttled(kind, manager, user, client_id, throttle, now)`. 0, or -1. */
static int
count_throttled(PyObject *self, PyObject *kind, PyObject *manager, PyObject *user, PyObject *client_id,
                PyObject *throttle, PyObject *now)
{
    int positive = PyObject_RichCompareBool(throttle, zero, Py_GT);
    if (positive <= 0) {
        return positive;
    }
    PyObject *args[7] = {self, kind, manager, user, client_id, throttle, now};
    return done_with(PyObject_VectorcallMethod(s_throttled, args, 7, NULL));
}

/* conn.<name>(): a new reference. */
static PyObject *
ask(PyObject *conn, PyObject *name)
{
    return PyObject_VectorcallMethod(name, &conn, 1, NULL);
}

/* The request-time charge of the answer, as the Python's `if charges_request:` block: request_throttle, a
 * new reference. */
static PyObject *
charge_request_time(PyObject *self, PyObject *conn, PyObject *user, PyObject *client_id, PyObject *now)
{
    PyObject *cpu_ns = ask(conn, s_take_cpu_ns);
    if (cpu_ns == NULL) {
        return NULL;
    }
    PyObject *manager = NULL, *checked = NULL, *version = NULL, *request_throttle = NULL;
    checked = slot_get(self, &cq_request_checked);
    if (checked == NULL) {
        goto done;
    }
    /* cpu_ns or checked is None or checked[0] != now or checked[1] is not user or checked[2] != client_id or
     * checked[3] != self._request_rules.version (the version read before: a slot, as the Python reads it) */
    PyObject *rules = slot_get(self, &cq_request_rules);
    version = rules == NULL ? NULL : slot_get(rules, &rules_version);
    Py_XDECREF(rules);
    if (version == NULL) {
        goto done;
    }
    int records = PyObject_IsTrue(cpu_ns);
    if (records == 0) {
        records = checked == Py_None;
    }
    for (Py_ssize_t k = 0; records == 0 && k < 4; k++) {
        PyObject *index = PyLong_FromSsize_t(k);
        PyObject *kept = index == NULL ? NULL : PyObject_GetItem(checked, index);
        Py_XDECREF(index);
        if (kept == NULL) {
            records = -1;
        }
        else if (k == 1) {
            records = kept != user;
        }
        else {
            PyObject *now_value = k == 0 ? now : k == 2 ? client_id : version;
            records = PyObject_RichCompareBool(kept, now_value, Py_NE);
        }
        Py_XDECREF(kept);
    }
    if (records < 0) {
        goto done;
    }
    manager = slot_get(self, &cq_request);
    if (manager == NULL) {
        goto done;
    }
    if (!records) {
        /* Most answers of a read take no CPU time of their own (client_quotas.py says why this is exact). */
        PyObject *index = PyLong_FromLong(4);
        request_throttle = index == NULL ? NULL : PyObject_GetItem(checked, index);
        Py_XDECREF(index);
    }
    else {
        if (touch(self, &cq_request_touched, s_kind_request, manager, &cq_request_rules, user, client_id) < 0) {
            goto done;
        }
        if (Py_IS_TYPE(manager, request_manager_type)) {
            PyObject *value = PyNumber_Multiply(cpu_ns, nanos_to_percentage);
            request_throttle = value == NULL ? NULL : record_throttle(manager, user, client_id, value, now);
            Py_XDECREF(value);
        }
        else {
            PyObject *args[5] = {manager, user, client_id, cpu_ns, now};
            request_throttle = PyObject_VectorcallMethod(s_record_request_time_ns, args, 5, NULL);
        }
        if (request_throttle == NULL) {
            goto done;
        }
        PyObject *memo = PyTuple_Pack(5, now, user, client_id, version, request_throttle);
        if (memo == NULL || slot_set(self, &cq_request_checked, memo) < 0) {
            Py_XDECREF(memo);
            Py_CLEAR(request_throttle);
            goto done;
        }
        Py_DECREF(memo);
        /* usage = self._stats.usage; if usage is not None and cpu_ns: usage.usage(user, client_id).cpu_time_ns
         * += cpu_ns */
        PyObject *stats = slot_get(self, &cq_stats);
        PyObject *usage = stats == NULL ? NULL : PyObject_GetAttr(stats, s_usage);
        Py_XDECREF(stats);
        int adds = usage == NULL ? -1 : usage == Py_None ? 0 : PyObject_IsTrue(cpu_ns);
        if (adds > 0) {
            PyObject *args[3] = {usage, user, client_id};
            PyObject *entity = PyObject_VectorcallMethod(s_usage, args, 3, NULL);
            adds = entity == NULL ? -1 : slot_add(entity, &entity_cpu_time_ns, cpu_ns);
            Py_XDECREF(entity);
        }
        Py_XDECREF(usage);
        if (adds < 0) {
            Py_CLEAR(request_throttle);
            goto done;
        }
    }
    if (request_throttle != NULL &&
        count_throttled(self, s_kind_request, manager, user, client_id, request_throttle, now) < 0) {
        Py_CLEAR(request_throttle);
    }
done:
    Py_XDECREF(manager);
    Py_XDECREF(version);
    Py_XDECREF(checked);
    Py_DECREF(cpu_ns);
    return request_throttle;
}

/* Whether the filter holds a turn at an entity gate (self._turn is not None): 1, 0, or -1 with an exception. */
static int
holds_turn(PyObject *self)
{
    PyObject *turn = slot_get(self, &cq_turn);
    if (turn == NULL) {
        return -1;
    }
    Py_DECREF(turn); /* (the slot still holds it; compared by address only) */
    return turn != Py_None;
}

/* The Fetch bytes' charge, as the Python's `if charges_fetch:` block: fetch_throttle (a new reference), with
 * *header_size and *fetch_size (new references) set. */
static PyObject *
charge_fetch(PyObject *self, PyObject *header, PyObject *key, PyObject *frame, PyObject *user,
             PyObject *client_id, PyObject *now, PyObject **header_size, PyObject **fetch_size)
{
    PyObject *version = PyTuple_GET_ITEM(header, 1);
    PyObject *args[3] = {key, version, frame};
    *header_size = PyObject_Vectorcall(response_header_size, args, 3, NULL);
    if (*header_size == NULL) {
        return NULL;
    }
    /* fetch_size = len(frame) - 4 - header_size + 4 */
    Py_ssize_t n = PyObject_Size(frame);
    if (n < 0) {
        return NULL;
    }
    PyObject *length = PyLong_FromSsize_t(n);
    PyObject *a = length == NULL ? NULL : PyNumber_Subtract(length, four);
    PyObject *b = a == NULL ? NULL : PyNumber_Subtract(a, *header_size);
    *fetch_size = b == NULL ? NULL : PyNumber_Add(b, four);
    Py_XDECREF(b);
    Py_XDECREF(a);
    Py_XDECREF(length);
    if (*fetch_size == NULL) {
        return NULL;
    }
    PyObject *manager = slot_get(self, &cq_fetch);
    if (manager == NULL) {
        return NULL;
    }
    PyObject *fetch_throttle = NULL;
    if (touch(self, &cq_fetch_touched, s_kind_fetch, manager, &cq_fetch_rules, user, client_id) == 0) {
        fetch_throttle = record_throttle(manager, user, client_id, *fetch_size, now);
        if (fetch_throttle != NULL &&
            count_throttled(self, s_kind_fetch, manager, user, client_id, fetch_throttle, now) < 0) {
            Py_CLEAR(fetch_throttle);
        }
    }
    Py_DECREF(manager);
    return fetch_throttle;
}

/* The Produce charge of on_request's common case (ClientQuotas._charge_produce with no entity throttled, no
 * turn at the gate, and a request read in this same ms or arriving as a FrameHead): frame, or what
 * `_produce_charged` makes of a throttle; NULL with *refer set when it is not that case (nothing done yet). */
static PyObject *
charge_produce(PyObject *self, PyObject *header, PyObject *frame, int *refer)
{
    PyObject *conn = slot_get(self, &cq_conn);
    if (conn == NULL) {
        return NULL;
    }
    PyObject *gates = NULL, *now = NULL, *user = NULL, *manager = NULL, *size = NULL, *throttle = NULL,
             *result = NULL;
    now = ask(conn, s_now_ms);
    gates = now == NULL ? NULL : slot_get(self, &cq_gates);
    if (gates == NULL) {
        goto done;
    }
    if (gates != Py_None) {
        /* shut_gates = len(gates.shut); the turn; `now != conn.read_ms()` for a whole frame: all none */
        PyObject *shut = slot_get(gates, &gates_shut);
        if (shut == NULL) {
            goto done;
        }
        Py_ssize_t shut_gates = PyObject_Size(shut);
        Py_DECREF(shut);
        if (shut_gates != 0) {
            *refer = shut_gates > 0;
            goto done;
        }
        int held = holds_turn(self);
        if (held != 0) {
            *refer = held > 0;
            goto done;
        }
        if (!Py_IS_TYPE(frame, frame_head_type)) {
            PyObject *read = ask(conn, s_read_ms);
            int later = read == NULL ? -1 : PyObject_RichCompareBool(now, read, Py_NE);
            Py_XDECREF(read);
            if (later != 0) {
                *refer = later > 0;
                goto done;
            }
        }
    }
    user = PyObject_GetAttr(conn, s_user);
    manager = user == NULL ? NULL : slot_get(self, &cq_produce);
    if (manager == NULL) {
        goto done;
    }
    PyObject *client_id = PyTuple_GET_ITEM(header, 3);
    if (touch(self, &cq_produce_touched, s_kind_produce, manager, &cq_produce_rules, user, client_id) < 0) {
        goto done;
    }
    /* throttle = self._produce.record_and_get_throttle_ms(user, client_id, len(frame) - 4, now) */
    Py_ssize_t n = PyObject_Size(frame);
    size = n < 0 ? NULL : PyLong_FromSsize_t(n);
    PyObject *value = size == NULL ? NULL : PyNumber_Subtract(size, four);
    throttle = value == NULL ? NULL : record_throttle(manager, user, client_id, value, now);
    Py_XDECREF(value);
    if (throttle == NULL) {
        goto done;
    }
    int positive = PyObject_RichCompareBool(throttle, zero, Py_GT);
    if (positive > 0) {
        PyObject *args[7] = {self, frame, user, client_id, throttle, now, zero};
        result = PyObject_VectorcallMethod(s_produce_charged, args, 7, NULL);
    }
    else if (positive == 0 && (gates == Py_None || slot_set(self, &cq_turn_rank, now) == 0)) {
        result = Py_NewRef(frame);
    }
done:
    Py_XDECREF(throttle);
    Py_XDECREF(size);
    Py_XDECREF(manager);
    Py_XDECREF(user);
    Py_XDECREF(gates);
    Py_XDECREF(now);
    Py_DECREF(conn);
    return result;
}

/* A Fetch or ShareFetch request whose cap is the one remembered for this entity and rules, and no smaller
 * than any request can ask (ClientQuotas._cap_fetch's common case): 1, 0 when it is not that case, -1. */
static int
fetch_uncapped(PyObject *self, PyObject *header)
{
    PyObject *conn = slot_get(self, &cq_conn);
    PyObject *user = conn == NULL ? NULL : PyObject_GetAttr(conn, s_user);
    Py_XDECREF(conn);
    PyObject *rules = user == NULL ? NULL : slot_get(self, &cq_fetch_rules);
    PyObject *version = rules == NULL ? NULL : slot_get(rules, &rules_version);
    Py_XDECREF(rules);
    PyObject *last = version == NULL ? NULL : slot_get(self, &cq_fetch_cap);
    int uncapped = last == NULL ? -1 : 0;
    /* last is not None and last[0] == version and last[1] is user and last[2] == client_id; cap >= INT32_MAX */
    if (last != NULL && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) == 4 &&
        PyTuple_GET_ITEM(last, 1) == user) {
        uncapped = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 0), version, Py_EQ);
        if (uncapped > 0) {
            uncapped = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 2), PyTuple_GET_ITEM(header, 3), Py_EQ);
        }
        if (uncapped > 0) {
            uncapped = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 3), int32_max, Py_GE);
        }
    }
    Py_XDECREF(last);
    Py_XDECREF(version);
    Py_XDECREF(user);
    return uncapped;
}

static PyObject *
on_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs != 2 || !Py_IS_TYPE(self, quotas_type) || !Py_IS_TYPE(args[0], request_header_type) ||
        PyTuple_GET_SIZE(args[0]) != 5) {
        goto reference;
    }
    PyObject *header = args[0], *frame = args[1];
    PyObject *key = PyTuple_GET_ITEM(header, 0), *version = PyTuple_GET_ITEM(header, 1);
    /* if header.api_version > self._newest[key]: raise unoffered_version(...) (the Python's) */
    PyObject *newest = slot_get(self, &cq_newest);
    if (newest == NULL) {
        return NULL;
    }
    int offered = -2;
    long at = -1;
    if (PyList_CheckExact(newest) && exact_long(key, &at) && at >= 0 && at < PyList_GET_SIZE(newest)) {
        PyObject *newest_version = Py_NewRef(PyList_GET_ITEM(newest, at)); /* (held: compared as Python) */
        offered = PyObject_RichCompareBool(version, newest_version, Py_LE);
        Py_DECREF(newest_version);
    }
    Py_DECREF(newest);
    if (offered != 1) {
        if (offered == -1) {
            return NULL;
        }
        goto reference;
    }
    int produce = PyObject_RichCompareBool(key, produce_key, Py_EQ);
    if (produce < 0) {
        return NULL;
    }
    if (produce) {
        int enabled = rules_enabled(self, &cq_produce_rules);
        if (enabled < 0) {
            return NULL;
        }
        if (enabled == 0) {
            /* No producer quota (every Produce of a proxy without one): the frame, unless this request
             * waited at a gate and must leave it (the Python's). */
            int held = holds_turn(self);
            if (held < 0) {
                return NULL;
            }
            if (held) {
                goto reference;
            }
            return Py_NewRef(frame);
        }
        int refer = 0;
        PyObject *out = charge_produce(self, header, frame, &refer);
        if (out != NULL || !refer) {
            return out;
        }
        goto reference;
    }
    int enabled = rules_enabled(self, &cq_fetch_rules);
    if (enabled <= 0) {
        return enabled < 0 ? NULL : Py_NewRef(frame);
    }
    if (PyObject_TypeCheck(frame, frame_head_type)) {
        goto reference; /* (whole() refuses it, as an isinstance) */
    }
    int uncapped = fetch_uncapped(self, header);
    if (uncapped != 0) {
        return uncapped < 0 ? NULL : Py_NewRef(frame);
    }

reference:
    return call_reference(request_reference, self, args, nargs, kwnames);
}

static PyMethodDef on_request_def = {
    "on_request", (PyCFunction)(void (*)(void))on_request, METH_FASTCALL | METH_KEYWORDS,
    "ClientQuotas.on_request(header, frame), compiled (proxy/filters/client_quotas.py is its reference)."};

static PyObject *
on_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs != 2 || !Py_IS_TYPE(self, quotas_type) || !Py_IS_TYPE(args[0], in_flight_type) ||
        PyTuple_GET_SIZE(args[0]) < 3) {
        goto reference;
    }
    PyObject *request = args[0], *frame = args[1];
    PyObject *header = PyTuple_GET_ITEM(request, 0), *request_throttle_ms = PyTuple_GET_ITEM(request, 2);
    if (!Py_IS_TYPE(header, request_header_type) || PyTuple_GET_SIZE(header) != 5 ||
        !PyLong_CheckExact(request_throttle_ms) || request_throttle_ms != zero) {
        /* a throttled request's answer (told the throttle it earned); also a 0 other than the shared one */
        goto reference;
    }
    /* no quota configured at all: nothing to charge, no mute to tell */
    PyObject *all_rules = slot_get(self, &cq_all_rules);
    if (all_rules == NULL) {
        return NULL;
    }
    PyObject *iterator = PyObject_GetIter(all_rules);
    Py_DECREF(all_rules);
    if (iterator == NULL) {
        return NULL;
    }
    int any = 0;
    PyObject *rules;
    while (any == 0 && (rules = PyIter_Next(iterator)) != NULL) {
        PyObject *bits = slot_get(rules, &rules_enabled_bits);
        Py_DECREF(rules);
        any = bits == NULL ? -1 : PyObject_IsTrue(bits);
        Py_XDECREF(bits);
    }
    Py_DECREF(iterator);
    if (any < 0 || PyErr_Occurred()) {
        return NULL;
    }
    if (!any) {
        return Py_NewRef(frame);
    }
    PyObject *key = PyTuple_GET_ITEM(header, 0), *client_id = PyTuple_GET_ITEM(header, 3);
    int uncharged = PySet_Contains(uncharged_keys, key);
    if (uncharged != 0) {
        if (uncharged < 0) {
            return NULL;
        }
        goto reference;
    }
    PyObject *conn = slot_get(self, &cq_conn);
    if (conn == NULL) {
        return NULL;
    }
    PyObject *user = NULL, *now = NULL, *request_throttle = NULL, *fetch_throttle = NULL, *header_size = NULL,
             *fetch_size = NULL, *result = NULL;
    user = PyObject_GetAttr(conn, s_user);
    if (user == NULL) {
        goto done;
    }
    int charges_request = rules_enabled(self, &cq_request_rules);
    if (charges_request < 0) {
        goto done;
    }
    int charges_fetch = PySet_Contains(fetch_keys, key);
    if (charges_fetch > 0) {
        charges_fetch = rules_enabled(self, &cq_fetch_rules);
    }
    if (charges_fetch < 0) {
        goto done;
    }
    PyObject *muted_ms = ask(conn, s_mute_remaining_ms);
    if (muted_ms == NULL) {
        goto done;
    }
    int muted = PyLong_CheckExact(muted_ms) ? PyObject_RichCompareBool(muted_ms, zero, Py_NE) : 1;
    Py_DECREF(muted_ms);
    if (muted < 0) {
        goto done;
    }
    if (muted) {
        /* muted, or a value only the Python's comparisons read: nothing is charged yet */
        Py_DECREF(user);
        Py_DECREF(conn);
        goto reference;
    }
    if (!charges_request && !charges_fetch) {
        result = Py_NewRef(frame); /* nothing to charge, nothing to tell */
        goto done;
    }
    now = ask(conn, s_now_ms);
    if (now == NULL) {
        goto done;
    }
    request_throttle = charges_request ? charge_request_time(self, conn, user, client_id, now) : Py_NewRef(zero);
    if (request_throttle == NULL) {
        goto done;
    }
    if (charges_fetch) {
        fetch_throttle = charge_fetch(self, header, key, frame, user, client_id, now, &header_size, &fetch_size);
        if (fetch_throttle == NULL) {
            goto done;
        }
    }
    else {
        fetch_throttle = Py_NewRef(zero);
        fetch_size = Py_NewRef(zero);
        header_size = Py_NewRef(minus_one);
    }
    /* if muted_ms <= 0 and fetch_throttle <= 0 and request_throttle <= 0: return frame */
    int tells = PyObject_RichCompareBool(fetch_throttle, zero, Py_GT);
    if (tells == 0) {
        tells = PyObject_RichCompareBool(request_throttle, zero, Py_GT);
    }
    if (tells < 0) {
        goto done;
    }
    if (!tells) {
        result = Py_NewRef(frame);
        goto done;
    }
    PyObject *tell_args[10] = {self, frame, header, user, now, zero, fetch_throttle, request_throttle, header_size,
                               fetch_size};
    result = PyObject_VectorcallMethod(s_tell, tell_args, 10, NULL);
done:
    Py_XDECREF(fetch_size);
    Py_XDECREF(header_size);
    Py_XDECREF(fetch_throttle);
    Py_XDECREF(request_throttle);
    Py_XDECREF(now);
    Py_XDECREF(user);
    Py_DECREF(conn);
    return result;

reference:
    return call_reference(reference, self, args, nargs, kwnames);
}

static PyMethodDef on_response_def = {
    "on_response", (PyCFunction)(void (*)(void))on_response, METH_FASTCALL | METH_KEYWORDS,
    "ClientQuotas.on_response(request, frame), compiled (proxy/filters/client_quotas.py is its reference)."};

/* bind(ClientQuotas, what): `what` names what the compiled methods use of their modules (client_quotas.py
 * hands it over once); the compiled (on_request, on_response), methods of ClientQuotas. */
static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind(ClientQuotas, {name: what})");
        return NULL;
    }
    PyObject *cq = args[0], *what = args[1];
    struct {
        PyObject **global;
        const char *name;
        kind_t kind;
    } items[] = {
        {&request_reference, "on_request", CALLABLE},
        {&reference, "on_response", CALLABLE},
        {(PyObject **)&in_flight_type, "InFlight", A_TYPE},
        {(PyObject **)&request_header_type, "RequestHeader", A_TYPE},
        {(PyObject **)&frame_head_type, "FrameHead", A_TYPE},
        {&produce_key, "PRODUCE", AN_INT},
        {&uncharged_keys, "uncharged_keys", FROZENSET},
        {&fetch_keys, "fetch_keys", FROZENSET},
        {&response_header_size, "response_header_size", CALLABLE},
        {(PyObject **)&client_manager_type, "ClientQuotaManager", A_TYPE},
        {(PyObject **)&request_manager_type, "RequestQuotaManager", A_TYPE},
        {(PyObject **)&window_sensor_type, "WindowQuotaSensor", A_TYPE},
        {&nanos_to_percentage, "NANOS_TO_PERCENTAGE_PER_SECOND", ANY},
        {&inactive_ms, "INACTIVE_SENSOR_EXPIRATION_MS", ANY},
        {&int32_max, "INT32_MAX", AN_INT},
        {&to_int32, "to_int32", CALLABLE},
    };
    PyObject *got[sizeof items / sizeof items[0]] = {NULL};
    PyObject *rules = NULL, *gates = NULL, *methods = NULL;
    for (size_t k = 0; k < sizeof items / sizeof items[0]; k++) {
        if ((got[k] = bound_item(what, items[k].name, items[k].kind)) == NULL) {
            goto done;
        }
    }
    if ((rules = bound_item(what, "QuotaRules", A_TYPE)) == NULL ||
        (gates = bound_item(what, "EntityGates", A_TYPE)) == NULL) {
        goto done;
    }
    /* the request and header are read as tuples (their items, at their sizes checked per call) */
    if (!PyType_IsSubtype((PyTypeObject *)got[2], &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)got[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind: InFlight and RequestHeader must be tuple types");
        goto done;
    }
    PyObject *manager = got[9], *request_manager = got[10], *sensor = got[11];
    const binding_t bindings[] = {
        {&cq_conn, NULL, cq, s_conn, NULL},
        {&cq_newest, NULL, cq, s_newest, NULL},
        {&cq_produce_rules, NULL, cq, s_produce_rules, NULL},
        {&cq_produce_touched, NULL, cq, s_produce_touched, NULL},
        {&cq_produce, NULL, cq, s_produce, NULL},
        {&cq_gates, NULL, cq, s_gates, NULL},
        {&cq_turn, NULL, cq, s_turn, NULL},
        {&cq_turn_rank, NULL, cq, s_turn_rank, NULL},
        {&cq_fetch_cap, NULL, cq, s_fetch_cap, NULL},
        {&cq_all_rules, NULL, cq, s_all_rules, NULL},
        {&cq_request_rules, NULL, cq, s_request_rules, NULL},
        {&cq_fetch_rules, NULL, cq, s_fetch_rules, NULL},
        {&cq_request_checked, NULL, cq, s_request_checked, NULL},
        {&cq_request_touched, NULL, cq, s_request_touched, NULL},
        {&cq_fetch_touched, NULL, cq, s_fetch_touched, NULL},
        {&cq_request, NULL, cq, s_request, NULL},
        {&cq_fetch, NULL, cq, s_fetch, NULL},
        {&cq_stats, NULL, cq, s_stats, NULL},
        {&gates_shut, NULL, gates, s_shut, NULL},
        {&rules_enabled_bits, NULL, rules, s_enabled_bits, NULL},
        {&rules_version, NULL, rules, s_version, NULL},
        {&manager_rules, NULL, manager, s_rules, request_manager},
        {&manager_lookup, NULL, manager, s_lookup, request_manager},
        {&manager_fleet, NULL, manager, s_fleet, request_manager},
        {&manager_max_throttle_ms, NULL, manager, s_max_throttle_ms, request_manager},
        {&sensor_last_record_ms, NULL, sensor, s_last_record_ms, NULL},
        {&sensor_rate, NULL, sensor, s_rate, NULL},
        {&sensor_bound, NULL, sensor, s_bound, NULL},
    };
    if (bind_all(bindings, sizeof bindings / sizeof bindings[0]) < 0) {
        goto done;
    }
    PyObject *request_method = PyDescr_NewMethod((PyTypeObject *)cq, &on_request_def);
    PyObject *response_method = request_method == NULL ? NULL : PyDescr_NewMethod((PyTypeObject *)cq, &on_response_def);
    methods = response_method == NULL ? NULL : PyTuple_Pack(2, request_method, response_method);
    Py_XDECREF(request_method);
    Py_XDECREF(response_method);
    if (methods == NULL) {
        goto done;
    }
    Py_XSETREF(quotas_type, (PyTypeObject *)Py_NewRef(cq));
    for (size_t k = 0; k < sizeof items / sizeof items[0]; k++) {
        Py_XSETREF(*items[k].global, got[k]);
        got[k] = NULL;
    }
done:
    for (size_t k = 0; k < sizeof items / sizeof items[0]; k++) {
        Py_XDECREF(got[k]);
    }
    Py_XDECREF(rules);
    Py_XDECREF(gates);
    return methods;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Hand over what ClientQuotas' compiled methods use of their modules (once, from client_quotas.py); "
     "returns them: (on_request, on_response)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef client_quotas_module = {
    PyModuleDef_HEAD_INIT,
    "sluice.proxy.filters._client_quotas",
    "ClientQuotas.on_request and on_response, compiled (proxy/filters/client_quotas.py says what they charge).",
    -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__client_quotas(void)
{
    INTERN(s_conn, "conn");
    INTERN(s_all_rules, "_all_rules");
    INTERN(s_enabled_bits, "enabled_bits");
    INTERN(s_user, "user");
    INTERN(s_request_rules, "_request_rules");
    INTERN(s_fetch_rules, "_fetch_rules");
    INTERN(s_mute_remaining_ms, "mute_remaining_ms");
    INTERN(s_now_ms, "now_ms");
    INTERN(s_take_cpu_ns, "take_cpu_ns");
    INTERN(s_request_checked, "_request_checked");
    INTERN(s_version, "version");
    INTERN(s_request_touched, "_request_touched");
    INTERN(s_fetch_touched, "_fetch_touched");
    INTERN(s_touch, "_touch");
    INTERN(s_request, "_request");
    INTERN(s_fetch, "_fetch");
    INTERN(s_stats, "_stats");
    INTERN(s_usage, "usage");
    INTERN(s_cpu_time_ns, "cpu_time_ns");
    entity_cpu_time_ns.name = s_cpu_time_ns;
    INTERN(s_throttled, "_throttled");
    INTERN(s_tell, "_tell");
    INTERN(s_rules, "_rules");
    INTERN(s_lookup, "_lookup");
    INTERN(s_fleet, "fleet");
    INTERN(s_sensor, "_sensor");
    INTERN(s_last_record_ms, "last_record_ms");
    INTERN(s_rate, "_rate");
    INTERN(s_bound, "_bound");
    INTERN(s_record, "record");
    INTERN(s_record_and_throttle, "record_and_throttle");
    INTERN(s_max_throttle_ms, "_max_throttle_ms");
    INTERN(s_record_and_get_throttle_ms, "record_and_get_throttle_ms");
    INTERN(s_record_request_time_ns, "record_request_time_ns");
    INTERN(s_kind_request, "Request");
    INTERN(s_kind_fetch, "Fetch");
    INTERN(s_get, "get");
    INTERN(s_newest, "_newest");
    INTERN(s_produce_rules, "_produce_rules");
    INTERN(s_produce_touched, "_produce_touched");
    INTERN(s_produce, "_produce");
    INTERN(s_gates, "_gates");
    INTERN(s_turn, "_turn");
    INTERN(s_turn_rank, "_turn_rank");
    INTERN(s_fetch_cap, "_fetch_cap");
    INTERN(s_shut, "shut");
    INTERN(s_read_ms, "read_ms");
    INTERN(s_kind_produce, "Produce");
    INTERN(s_produce_charged, "_produce_charged");
    if ((zero = PyLong_FromLong(0)) == NULL || (minus_one = PyLong_FromLong(-1)) == NULL ||
        (four = PyLong_FromLong(4)) == NULL) {
        return NULL;
    }
    return PyModule_Create(&client_quotas_module);
}
