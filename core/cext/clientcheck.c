/*
 * logfs.core.cext._helpers.check_client_batches: the producer batches of one request checked in one call.
 *
 * Why: a 1 MiB write of realistic 16 KiB producer batches is ~64 batches, and checking each through
 * appendcheck.check_leader_batch -> validate.validate_batch -> records.walk cost ~15-20 µs of Python per batch
 * (the header unpacked into a named tuple, a dozen rule checks, the CRC and the walk called one by one): more than
 * writing it (issue 14). This is that path for the common batch, in one C call per request.
 *
 *   check_client_batches(batches, start, out, crc, decompress, max_message_bytes, segment_bytes, log_append, now,
 *                        before, after) -> the index of the first batch from ``start`` on that it did not accept
 *
 * A batch is accepted only when it is a writable, contiguous, one-dimensional byte buffer (a bytearray or a
 * writable memoryview: the leader stamps it in place), of a codec Kafka defines (0-4), and passes every check of
 * the reference (check_leader_batch with validate_batch(client=True)): a producer id (idempotent or transactional)
 * with a non-negative epoch and base sequence, the transactional bit only with one, size
 * within max.message.bytes and segment.bytes, a whole header, the declared size, magic 2, the CRC-32C (``crc``: the
 * crc32c package's function, called once per batch), baseOffset 0, no control bit, recordsCount ==
 * lastOffsetDelta + 1 > 0, every record walked (walk_record, the compiled walk's loop body) and the
 * maxTimestamp within message.timestamp.{before,after}.max.ms of ``now`` (CREATE_TIME). A compressed batch's
 * records are inflated by ``decompress(codec, records)`` (compression.decompress: its bound on a bomb stays the one
 * place that decides) after the header and CRC pass, then walked here: of a compressed batch only the inflate is
 * left per batch (issue 14: half of realistic producer data is lz4/zstd). For each accepted batch it
 * appends to the list ``out`` the tuple (batch, size, lastOffsetDelta, recordsCount, true maxTimestamp, producerId,
 * stamp) (producerId: below 0, none; ``stamp``: whether set_max_timestamp would change the batch).
 *
 * It raises nothing about the bytes: it stops at the first batch it does not accept, whatever the reason (a fault,
 * a failed inflate, a read-only buffer, an arithmetic overflow), and the caller checks that one
 * with the reference, whose answer or error (type and message) is the one given. So a rule stays written once, in
 * Python, and this file only has to be never more permissive than it (tests/core/log/test_check_batches_cext.py
 * holds the two equal on valid and damaged input). Threads: any; the GIL is released during each walk.
 */
#include "helpers.h"

#define HEADER_BYTES 61
#define ATTRIBUTES_AT 21
#define COMPRESSION_BITS 0x07
#define LOG_APPEND_TIME_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define MAX_CODEC 4 /* zstd: Kafka defines 0-4 */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | p[k];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* Hold the batch's bytes when the reference would stamp them where they lie: a bytearray or a writable,
 * one-dimensional, contiguous memoryview of single bytes (else 0: it copies them first, and checks the copy). The
 * hold keeps a bytearray from being resized while the GIL is released. */
static int hold_writable(PyObject *obj, Py_buffer *view) {
    if (PyMemoryView_Check(obj)) {
        const Py_buffer *v = PyMemoryView_GET_BUFFER(obj);
        if (v->readonly || v->itemsize != 1 || v->ndim != 1)
            return 0;
    } else if (!PyByteArray_Check(obj)) {
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0)
        return 1;
    PyErr_Clear(); /* a released view, a non-contiguous one: the reference says what it is */
    return 0;
}

/* The header rules of the reference for one producer batch (its records are walked by walk_records, its CRC checked
 * by the caller): 1 when they pass. A producer id (idempotent or transactional) needs a non-negative epoch and base
 * sequence, and the transactional bit a producer id; the producer state's rules are the Log's, after this. */
static int accept_header(const uint8_t *d, Py_ssize_t size, long long max_message_bytes, long long segment_bytes) {
    if (size > max_message_bytes || size > segment_bytes || size < HEADER_BYTES)
        return 0;
    if ((int64_t)be32(d + 8) + 12 != size || d[16] != 2)
        return 0;
    int attributes = (d[ATTRIBUTES_AT] << 8) | d[ATTRIBUTES_AT + 1];
    int32_t last_delta = be32(d + 23), count = be32(d + 57);
    if (be64(d) != 0 || (attributes & COMPRESSION_BITS) > MAX_CODEC || (attributes & CONTROL_BIT))
        return 0;
    int64_t producer_id = be64(d + 43);
    int32_t producer_epoch = (int16_t)((d[51] << 8) | d[52]), base_sequence = be32(d + 53);
    if (producer_id >= 0 ? producer_epoch < 0 || base_sequence < 0 : (attributes & TRANSACTIONAL_BIT) != 0)
        return 0;
    if (count <= 0 || last_delta < 0 || (int64_t)count != (int64_t)last_delta + 1)
        return 0;
    return 1;
}

/* The walk of a batch's records (``r`` .. ``end``: in place, or inflated) and its timestamp rules: 1 when they pass,
 * with the batch's true max timestamp and whether set_max_timestamp would change it. */
static int accept_records(const uint8_t *d, const uint8_t *r, int64_t end, int log_append, long long now,
                          long long before, long long after, int64_t *max_ts, int *stamp) {
    int attributes = (d[ATTRIBUTES_AT] << 8) | d[ATTRIBUTES_AT + 1];
    int32_t last_delta = be32(d + 23), count = be32(d + 57);
    int64_t base_ts = be64(d + 27), header_max_ts = be64(d + 35);
    Fault f;
    int64_t pos = 0, prev_od = -1, max_delta = INT64_MIN;
    int failed = 0;
    Fields fields;
    Py_BEGIN_ALLOW_THREADS;
    for (long long i = 0; i < count; i++) {
        if (walk_record(r, &pos, end, i, count, last_delta, 1, &prev_od, &fields, &f)) {
            failed = 1;
            break;
        }
        if (fields.ts_delta > max_delta)
            max_delta = fields.ts_delta;
    }
    Py_END_ALLOW_THREADS;
    if (failed || pos != end)
        return 0;
    int64_t ts = header_max_ts;
    if (!(attributes & LOG_APPEND_TIME_BIT) && __builtin_add_overflow(base_ts, max_delta, &ts))
        return 0; /* beyond int64: the reference decides (its Python int cannot be stamped) */
    if (!log_append && ts >= 0) {
        long long early, late;
        if (__builtin_sub_overflow((long long)now, (long long)ts, &early) ||
            __builtin_sub_overflow((long long)ts, (long long)now, &late) || early > before || late > after)
            return 0;
    }
    *max_ts = ts;
    *stamp = log_append || (attributes & LOG_APPEND_TIME_BIT) || header_max_ts != ts;
    return 1;
}

/* ``fn(*head, memoryview of d[from:size])`` (``head``: a tuple of leading arguments); NULL with an error set when
 * it raised. The view lives only during the call: neither callee keeps it. */
static PyObject *call_on_section(PyObject *fn, PyObject *head, const uint8_t *d, Py_ssize_t from, Py_ssize_t size) {
    PyObject *section = PyMemoryView_FromMemory((char *)d + from, size - from, PyBUF_READ);
    if (section == NULL)
        return NULL;
    PyObject *args[2] = {head, section};
    PyObject *result = head ? PyObject_Vectorcall(fn, args, 2, NULL) : PyObject_CallOneArg(fn, section);
    Py_DECREF(section);
    return result;
}

/* Whether the batch's CRC-32C is right: 1, 0, or -1 with an error set (``crc`` raised). */
static int crc_ok(PyObject *crc, const uint8_t *d, Py_ssize_t size) {
    PyObject *computed = call_on_section(crc, NULL, d, ATTRIBUTES_AT, size);
    unsigned long actual = computed ? PyLong_AsUnsignedLong(computed) : 0;
    Py_XDECREF(computed);
    if (computed == NULL || PyErr_Occurred())
        return -1;
    return actual == (uint32_t)be32(d + 17);
}

/* The records of an accepted header and CRC, inflated through ``decompress(codec, records)`` when compressed, walked
 * and timed: 1 when they pass, 0 when not (a failed inflate included: the reference inflates it again and raises its
 * error), -1 with an error set for what is no fault of the bytes (an interrupt: not an Exception). */
static int accept_body(PyObject *decompress, const uint8_t *d, Py_ssize_t size, int log_append, long long now,
                       long long before, long long after, int64_t *max_ts, int *stamp) {
    int codec = d[ATTRIBUTES_AT + 1] & COMPRESSION_BITS;
    if (codec == 0)
        return accept_records(d, d + HEADER_BYTES, size - HEADER_BYTES, log_append, now, before, after, max_ts, stamp);
    PyObject *id = PyLong_FromLong(codec);
    PyObject *inflated = id ? call_on_section(decompress, id, d, HEADER_BYTES, size) : NULL;
    Py_XDECREF(id);
    if (inflated == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear();
        return 0;
    }
    if (!PyBytes_Check(inflated)) {
        Py_DECREF(inflated);
        return 0;
    }
    int ok = accept_records(d, (const uint8_t *)PyBytes_AS_STRING(inflated), PyBytes_GET_SIZE(inflated), log_append,
                            now, before, after, max_ts, stamp);
    Py_DECREF(inflated); /* bytes: immutable, held across the walk */
    return ok;
}

PyObject *logfs_check_client_batches(PyObject *self, PyObject *args) {
    PyObject *batches, *out, *crc, *decompress;
    Py_ssize_t start;
    long long max_message_bytes, segment_bytes, now, before, after;
    int log_append;
    if (!PyArg_ParseTuple(args, "O!nO!OOLLpLLL", &PyList_Type, &batches, &start, &PyList_Type, &out, &crc,
                          &decompress, &max_message_bytes, &segment_bytes, &log_append, &now, &before, &after))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(batches), k = start < 0 ? 0 : start;
    for (; k < n; k++) {
        PyObject *batch = PyList_GET_ITEM(batches, k);
        Py_buffer view;
        if (!hold_writable(batch, &view))
            break;
        const uint8_t *d = (const uint8_t *)view.buf;
        Py_ssize_t size = view.len;
        int64_t max_ts = 0;
        int stamp = 0;
        PyObject *item = NULL;
        int ok = accept_header(d, size, max_message_bytes, segment_bytes);
        if (ok == 1)
            ok = crc_ok(crc, d, size);
        if (ok == 1)
            ok = accept_body(decompress, d, size, log_append, now, before, after, &max_ts, &stamp);
        if (ok == 1) /* (batch, size, lastOffsetDelta, recordsCount, maxTimestamp, producer id, stamp) */
            item = Py_BuildValue("(OnllLLO)", batch, size, (long)be32(d + 23), (long)be32(d + 57), (long long)max_ts,
                                 (long long)be64(d + 43), stamp ? Py_True : Py_False);
        PyBuffer_Release(&view);
        if (ok < 0)
            return NULL;
        if (ok == 0)
            break;
        if (item == NULL)
            return NULL;
        int failed = PyList_Append(out, item);
        Py_DECREF(item);
        if (failed)
            return NULL;
    }
    return PyLong_FromSsize_t(k);
}
