/*
 * logfs.core.cext._helpers.jsonl_batches: the lines of a write to a partition's ``append.jsonl`` as the records
 * sections of producer batches, when every line has the usual shape.
 *
 * Why: the reference (core/format/lines.py: parse_json_lines, then encode_record_batches) parses each line with
 * orjson into Python objects, writes the value back as compact JSON with orjson, builds a Record and encodes it:
 * ~5 µs a line, 4-7 % of dd for realistic events (issue 14). This validates and normalises each line in one pass
 * over its bytes, with no Python object per line, and writes the records straight into the batches' buffers.
 *
 * Each line is validated and normalised by logfs_jsonl_line (jsonlnorm.c, which says what it takes itself); when
 * any line is not taken this returns None and the caller runs the reference on the whole write, so the reference
 * decides every refusal and every rare shape. tests/core/format/test_jsonl_batches.py holds the two byte-identical.
 *
 *   jsonl_batches(head, data, end, budget, per, overhead) -> [(bytearray, count), ...] or None
 *       The lines as text_batches (textbatches.c) takes them. Each bytearray is ``overhead`` zero bytes (the batch
 *       header, packed by the caller: encode.stamp_values_header) and the records section of ``count`` records:
 *       attributes 0, timestampDelta 0, offsetDelta from 0 per batch, the key, the value, no headers. Cuts are
 *       encode_record_batches': records go in while the sum of (key + value length + ``per``) stays within
 *       ``budget``; a batch takes at least one record.
 *
 * Threads: any; the GIL is released while lines are parsed and records written.
 */
#include "helpers.h"

static inline int64_t field_bytes(int64_t len) { return len < 0 ? 1 : varint_bytes(len) + len; }

/* A record's body: attributes, timestampDelta, offsetDelta, key, value, header count. */
static inline int64_t body_bytes(int64_t i, const LineFields *r) {
    return 3 + varint_bytes(i) + field_bytes(r->key_len) + field_bytes(r->value_len);
}

static inline uint8_t *put_field(uint8_t *o, const uint8_t *out, int64_t pos, int64_t len) {
    if (len < 0) {
        *o++ = 1; /* -1: null */
        return o;
    }
    o = put_varint(o, len);
    memcpy(o, out + pos, (size_t)len);
    return o + len;
}

/* Parses every line of head + data[:end] into ``out``; the records into ``*records`` (count ``*n``). 0, or -1
 * when a line is not taken; -2 when memory ran out. */
static int parse_lines(const uint8_t *h, int64_t head_len, const uint8_t *d, int64_t end, uint8_t *out,
                       LineFields **records, int64_t *n) {
    int64_t lines = 0;
    for (const uint8_t *p = d, *stop = d + end; (p = memchr(p, '\n', (size_t)(stop - p))) != NULL; p++)
        lines++;
    LineFields *r = malloc(sizeof(LineFields) * (size_t)(lines + 1));
    uint8_t *first = head_len > 0 && lines > 0 ? malloc((size_t)head_len + (size_t)end) : NULL;
    if (r == NULL || (head_len > 0 && lines > 0 && first == NULL)) {
        free(r);
        free(first);
        return -2;
    }
    uint8_t *o = out;
    int64_t count = 0, pos = 0, result = 0;
    for (int64_t k = 0; k < lines; k++) {
        const uint8_t *nl = memchr(d + pos, '\n', (size_t)(end - pos));
        const uint8_t *start = d + pos, *stop = nl;
        if (k == 0 && first != NULL) { /* the partial line kept from earlier requests, joined */
            memcpy(first, h, (size_t)head_len);
            memcpy(first + head_len, d, (size_t)(nl - d));
            start = first;
            stop = first + head_len + (nl - d);
        }
        int got = logfs_jsonl_line(start, stop, out, &o, &r[count]);
        if (got < 0) {
            result = -1;
            break;
        }
        count += got;
        pos = nl - d + 1;
    }
    free(first);
    if (result < 0) {
        free(r);
        return -1;
    }
    *records = r;
    *n = count;
    return 0;
}

PyObject *logfs_jsonl_batches(PyObject *self, PyObject *args) {
    Py_buffer head, data;
    Py_ssize_t end;
    long long budget, per, overhead;
    if (logfs_run_args(args, "jsonl_batches", &head, &data, &end, &budget, &per, &overhead) < 0)
        return NULL;
    PyObject *result = NULL;
    LineFields *records = NULL;
    int64_t *cuts = NULL, *sizes = NULL;
    uint8_t **outs = NULL;
    uint8_t *out = NULL;
    /* normalised text is never longer than its source: whitespace dropped, escapes as short or shorter */
    out = PyMem_Malloc((size_t)(head.len + end + 1));
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t n = 0, batches = 0;
    int parsed;
    Py_BEGIN_ALLOW_THREADS;
    parsed = parse_lines(head.buf, head.len, data.buf, end, out, &records, &n);
    Py_END_ALLOW_THREADS;
    if (parsed == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (parsed == -1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    cuts = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 2));
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (cuts == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Cutter cut = {cuts, sizes, 0, 0, 0, 0};
    for (int64_t k = 0; k < n; k++) {
        const LineFields *r = &records[k];
        int64_t cost = per + (r->key_len > 0 ? r->key_len : 0) + (r->value_len > 0 ? r->value_len : 0);
        cut_body(&cut, body_bytes(cut_place(&cut, k, cost, budget), r));
    }
    batches = cut_end(&cut, n);
    result = logfs_new_batches(batches, cuts, sizes, overhead, &outs);
    if (result == NULL)
        goto done;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t b = 0; b < batches; b++) {
        uint8_t *o = outs[b];
        for (int64_t k = cuts[b]; k < cuts[b + 1]; k++) {
            const LineFields *r = &records[k];
            int64_t i = k - cuts[b];
            o = put_varint(o, body_bytes(i, r));
            *o++ = 0; /* attributes */
            *o++ = 0; /* timestampDelta */
            o = put_varint(o, i);
            o = put_field(o, out, r->key_pos, r->key_len);
            o = put_field(o, out, r->value_pos, r->value_len);
            *o++ = 0; /* no headers */
        }
    }
    Py_END_ALLOW_THREADS;
done:
    free(records);
    PyMem_Free(cuts);
    PyMem_Free(sizes);
    PyMem_Free(outs);
    PyMem_Free(out);
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    return result;
}
