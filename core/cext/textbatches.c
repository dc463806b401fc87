/*
 * logfs.core.cext._helpers.text_batches: the lines of a write to ``append`` as the records sections of text batches.
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
#include "helpers.h"

/* A record's body: attributes, timestampDelta, offsetDelta, key -1, value length, value, header count. */
static inline int64_t body_bytes(int64_t i, int64_t len) { return 4 + varint_bytes(i) + varint_bytes(len) + len; }

/* Line ``k``'s start in data and length (line 0 also has the head's bytes before it). */
static inline void line_at(const int64_t *ends, int64_t k, int64_t head_len, int64_t *pos, int64_t *len) {
    *pos = k == 0 ? 0 : ends[k - 1] + 1;
    *len = ends[k] - *pos + (k == 0 ? head_len : 0);
}

/* The arguments of text_batches and jsonl_batches (``name``): (head, data, end, budget, per, overhead), both buffers
 * held (the caller releases them) and ``end`` and ``overhead`` in range; -1 with an error set (nothing held). */
int logfs_run_args(PyObject *args, const char *name, Py_buffer *head, Py_buffer *data, Py_ssize_t *end,
                   long long *budget, long long *per, long long *overhead) {
    PyObject *head_obj, *data_obj;
    if (!PyArg_ParseTuple(args, "OOnLLL", &head_obj, &data_obj, end, budget, per, overhead))
        return -1;
    if (PyObject_GetBuffer(head_obj, head, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(data_obj, data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(head);
        return -1;
    }
    if (*end < 0 || *end > data->len || *overhead < 0) {
        PyErr_Format(PyExc_ValueError, "%s: end or overhead out of range", name);
        PyBuffer_Release(data);
        PyBuffer_Release(head);
        return -1;
    }
    return 0;
}

/* The batches' buffers, for the writers of records sections (here and jsonlbatches.c): a list of (bytearray,
 * count) per batch ``b``, each ``overhead`` zero bytes (the header, packed by the caller) and room for a section of
 * ``sizes[b]`` bytes, of ``cuts[b + 1] - cuts[b]`` records; ``(*outs_out)[b]`` is where its section goes (an array
 * the caller frees with PyMem_Free, set even when this fails). NULL with an error set. */
PyObject *logfs_new_batches(int64_t batches, const int64_t *cuts, const int64_t *sizes, long long overhead,
                            uint8_t ***outs_out) {
    uint8_t **outs = *outs_out = PyMem_Malloc(sizeof(uint8_t *) * (size_t)(batches + 1));
    if (outs == NULL)
        return PyErr_NoMemory();
    PyObject *result = PyList_New((Py_ssize_t)batches);
    if (result == NULL)
        return NULL;
    for (int64_t b = 0; b < batches; b++) {
        PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(overhead + sizes[b]));
        PyObject *pair = buf ? Py_BuildValue("(NL)", buf, (long long)(cuts[b + 1] - cuts[b])) : NULL;
        if (pair == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        outs[b] = (uint8_t *)PyByteArray_AS_STRING(buf) + overhead;
        memset(outs[b] - overhead, 0, (size_t)overhead);
        PyList_SET_ITEM(result, (Py_ssize_t)b, pair);
    }
    return result;
}

PyObject *logfs_text_batches(PyObject *self, PyObject *args) {
    Py_buffer head, data;
    Py_ssize_t end;
    long long budget, per, overhead;
    if (logfs_run_args(args, "text_batches", &head, &data, &end, &budget, &per, &overhead) < 0)
        return NULL;
    PyObject *result = NULL;
    int64_t *ends = NULL, *cuts = NULL, *sizes = NULL;
    uint8_t **outs = NULL;
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
    Cutter cut = {cuts, sizes, 0, 0, 0, 0};
    for (int64_t k = 0; k < n; k++) {
        int64_t pos, len;
        line_at(ends, k, head_len, &pos, &len);
        cut_body(&cut, body_bytes(cut_place(&cut, k, len + per, budget), len));
    }
    batches = cut_end(&cut, n);
    Py_END_ALLOW_THREADS;
    result = logfs_new_batches(batches, cuts, sizes, overhead, &outs);
    if (result == NULL)
        goto done;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t b = 0; b < batches; b++) {
        uint8_t *o = outs[b];
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
