/*
 * logfs.core.format._walk.text_batches: the lines of a write to ``append`` as the records sections of text batches.
 *
 * Why: a 1 MiB request of realistic events (150-1,500 byte lines) is ~2,000 lines; splitting it into ~2,000 bytes
 * objects (mount/framing.py) and encoding each record with varints and a join (core/format/encode.py encode_values)
 * cost ~1.1 ms of the ~2 ms a request took (issue 14). This walks the request's buffer once, with no Python object
 * per line, and writes each record (attributes 0, timestampDelta 0, offsetDelta i from 0 per batch, null key, the
 * line as value, no headers) straight into the batch's buffer. The cuts are encode_text_batches' (core/format/
 * lines.py): records go into a batch while the sum of (value length + RECORD_FRAMING_BYTES_MAX) stays within the
 * budget, and a batch always takes at least one record. lines.encode_text_batches stays the reference and the
 * fallback; tests/core/format/test_text_batches.py holds the two byte-identical.
 *
 *   text_batches(head, data, end, budget, per, overhead) -> [(bytearray, count), ...]
 *       The lines are ``head + data[0:first newline]`` and then each newline-ended line of ``data[:end]`` (``end``
 *       is just after the last newline, or 0: no line). Each bytearray is ``overhead`` zero bytes (the batch header,
 *       which the caller packs: encode.stamp_values_header) followed by the records section of ``count`` records.
 *
 * Threads: any; the GIL is released while lines are found and records written.
 */
#include "_walk.h"

/* The bytes of zigzag varint of a non-negative value ``v`` (zigzag: 2v). */
static inline int64_t varint_bytes(int64_t v) {
    uint64_t z = (uint64_t)v << 1;
    int64_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, int64_t v) {
    uint64_t z = (uint64_t)v << 1;
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

/* A record's body: attributes, timestampDelta, offsetDelta, key -1, value length, value, header count. */
static inline int64_t body_bytes(int64_t i, int64_t len) { return 4 + varint_bytes(i) + varint_bytes(len) + len; }

/* Line ``k``'s start in data and length (line 0 also has the head's bytes before it). */
static inline void line_at(const int64_t *ends, int64_t k, int64_t head_len, int64_t *pos, int64_t *len) {
    *pos = k == 0 ? 0 : ends[k - 1] + 1;
    *len = ends[k] - *pos + (k == 0 ? head_len : 0);
}

PyObject *logfs_text_batches(PyObject *self, PyObject *args) {
    PyObject *head_obj, *data_obj;
    Py_ssize_t end;
    long long budget, per, overhead;
    if (!PyArg_ParseTuple(args, "OOnLLL", &head_obj, &data_obj, &end, &budget, &per, &overhead))
        return NULL;
    Py_buffer head, data;
    if (PyObject_GetBuffer(head_obj, &head, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&head);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *ends = NULL, *cuts = NULL, *sizes = NULL;
    uint8_t **outs = NULL;
    if (end < 0 || end > data.len || overhead < 0) {
        PyErr_SetString(PyExc_ValueError, "text_batches: end or overhead out of range");
        goto done;
    }
    const uint8_t *d = data.buf, *h = head.buf;
    const int64_t head_len = head.len;
    int64_t lines = 0, n = 0, batches = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (const uint8_t *p = d, *stop = d + end; (p = memchr(p, '\n', (size_t)(stop - p))) != NULL; p++)
        lines++;
    Py_END_ALLOW_THREADS;
    /* one batch per line at most */
    ends = PyMem_Malloc(sizeof(int64_t) * (size_t)(lines + 1));
    cuts = PyMem_Malloc(sizeof(int64_t) * (size_t)(lines + 2));
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)(lines + 1));
    if (ends == NULL || cuts == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t p = 0; p < end && n < lines;) {
        const uint8_t *nl = memchr(d + p, '\n', (size_t)(end - p));
        ends[n++] = nl - d;
        p = nl - d + 1;
    }
    int64_t used = 0, section = 0, in_batch = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t pos, len;
        line_at(ends, k, head_len, &pos, &len);
        if (in_batch > 0 && used + len + per > budget) {
            cuts[batches] = k - in_batch;
            sizes[batches++] = section;
            used = section = in_batch = 0;
        }
        int64_t body = body_bytes(in_batch, len);
        section += varint_bytes(body) + body;
        used += len + per;
        in_batch++;
    }
    if (in_batch > 0) {
        cuts[batches] = n - in_batch;
        sizes[batches++] = section;
    }
    cuts[batches] = n;
    Py_END_ALLOW_THREADS;
    outs = PyMem_Malloc(sizeof(uint8_t *) * (size_t)(batches + 1));
    result = PyList_New((Py_ssize_t)batches);
    if (outs == NULL || result == NULL) {
        if (outs == NULL)
            PyErr_NoMemory();
        Py_CLEAR(result);
        goto done;
    }
    for (int64_t b = 0; b < batches; b++) {
        PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(overhead + sizes[b]));
        PyObject *pair = buf ? Py_BuildValue("(NL)", buf, (long long)(cuts[b + 1] - cuts[b])) : NULL;
        if (pair == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        outs[b] = (uint8_t *)PyByteArray_AS_STRING(buf);
        memset(outs[b], 0, (size_t)overhead);
        PyList_SET_ITEM(result, (Py_ssize_t)b, pair);
    }
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t b = 0; b < batches; b++) {
        uint8_t *o = outs[b] + overhead;
        for (int64_t k = cuts[b]; k < cuts[b + 1]; k++) {
            int64_t pos, len, i = k - cuts[b];
            line_at(ends, k, head_len, &pos, &len);
            o = put_varint(o, body_bytes(i, len));
            *o++ = 0; /* attributes */
            *o++ = 0; /* timestampDelta */
            o = put_varint(o, i);
            *o++ = 1; /* key: -1, null */
            o = put_varint(o, len);
            if (k == 0 && head_len > 0) {
                memcpy(o, h, (size_t)head_len);
                o += head_len;
                len -= head_len;
            }
            memcpy(o, d + pos, (size_t)len);
            o += len;
            *o++ = 0; /* no headers */
        }
    }
    Py_END_ALLOW_THREADS;
done:
    PyMem_Free(ends);
    PyMem_Free(cuts);
    PyMem_Free(sizes);
    PyMem_Free(outs);
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    return result;
}
