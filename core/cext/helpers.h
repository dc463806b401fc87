/*
 * What the files of the compiled helpers (core/cext/*.c, the extension logfs.core.cext._helpers; all but
 * storedcheck.c, which stands alone) share: the varint, header and record readers with the reference's checks and
 * messages, faults raised as InvalidRecord, buffers, and the cutting of lines into batches (textbatches.c,
 * jsonlbatches.c). The module's table of functions is at the end of recordwalk.c; core/cext/__init__.py's docstring
 * lists each function, what it replaces and its Python reference.
 */
#ifndef LOGFS_CEXT_HELPERS_H
#define LOGFS_CEXT_HELPERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define RECORD_BODY_MIN_BYTES 6
#define VARINT_MAX_BYTES 5
#define VARLONG_MAX_BYTES 10
#define NCOLS 6
#define NSTORED 9
#define MSG_BYTES 256

extern PyObject *logfs_InvalidRecord; /* logfs.core.errors.InvalidRecord, imported at module init (recordwalk.c) */

/* A fault found while the GIL may be released: its message, raised as InvalidRecord once the GIL is held. */
typedef struct {
    char message[MSG_BYTES];
} Fault;

static inline int fault(Fault *f, long long index, const char *fmt, ...) {
    char what[MSG_BYTES - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (index >= 0)
        snprintf(f->message, MSG_BYTES, "record %lld: %s", index, what);
    else
        snprintf(f->message, MSG_BYTES, "%s", what);
    return -1;
}

static inline void raise_fault(const Fault *f) {
    PyObject *msg = PyUnicode_DecodeUTF8(f->message, (Py_ssize_t)strlen(f->message), "replace");
    if (msg == NULL)
        return;
    PyObject *exc = PyObject_CallOneArg(logfs_InvalidRecord, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

/* records._read_varint: one zigzag varint of record ``index`` ending at or before ``limit``, Kafka's widths. */
static inline int read_varint(const uint8_t *d, int64_t *pos, int64_t limit, int max_bytes, long long index,
                              const char *field, int64_t *out, Fault *f) {
    int64_t p = *pos;
    if (p < limit && d[p] < 0x80) {
        uint64_t v = d[p];
        *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t value = 0;
    int shift = 0;
    for (int k = 0; k < max_bytes; k++) {
        if (p + k >= limit)
            return fault(f, index, "%s runs past the record's declared length", field);
        uint8_t b = d[p + k];
        if (k == 9 && (b & 0x7F) > 1) {
            /* bits 64-69 set: the zigzag value lies outside int64 whatever the rest (see records._read_varint) */
            if (b < 0x80)
                return fault(f, index, "%s does not fit an int64 varlong", field);
            break; /* a continuation bit on the tenth byte: too long, below */
        }
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            int64_t v = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            if (max_bytes == VARINT_MAX_BYTES && (v < INT32_MIN || v > INT32_MAX))
                return fault(f, index, "%s %lld does not fit an int32 varint", field, (long long)v);
            *out = v;
            *pos = p + k + 1;
            return 0;
        }
        shift += 7;
    }
    return fault(f, index, "%s varint is longer than %d bytes", field, max_bytes);
}

/* Where one record's fields lie (what walk_python appends per record), and where its headers are. */
typedef struct {
    int64_t ts_delta, od, key_pos, key_len, value_pos, value_len, headers_pos, n_headers, end;
} Fields;

/* One header of a record: where its key and value lie (value_len -1: null). */
static inline int read_header_fields(const uint8_t *d, int64_t *p, int64_t rec_end, long long h, long long n,
                                     long long index, int64_t *key_pos, int64_t *key_len, int64_t *value_pos,
                                     int64_t *value_len, Fault *f) {
    if (*p >= rec_end)
        return fault(f, index, "header %lld of %lld runs past the record's declared length", h, n);
    int64_t hk = 0;
    if (read_varint(d, p, rec_end, VARINT_MAX_BYTES, index, "headerKeyLength", &hk, f))
        return -1;
    if (hk < 0)
        return fault(f, index, "header %lld: negative key length %lld", h, (long long)hk);
    if (*p + hk > rec_end)
        return fault(f, index, "header %lld: key of %lld bytes runs past the record's declared length", h,
                     (long long)hk);
    *key_pos = *p;
    *key_len = hk;
    *p += hk;
    int64_t hv = 0;
    if (read_varint(d, p, rec_end, VARINT_MAX_BYTES, index, "headerValueLength", &hv, f))
        return -1;
    if (hv < -1)
        return fault(f, index, "header %lld: negative value length %lld", h, (long long)hv);
    *value_pos = *p;
    *value_len = hv;
    if (hv >= 0) {
        if (*p + hv > rec_end)
            return fault(f, index, "header %lld: value of %lld bytes runs past the record's declared length", h,
                         (long long)hv);
        *p += hv;
    }
    return 0;
}

/* A record's key or value (``what``): its length (-1: null) and where its bytes start, checked as walk_python does. */
static inline int read_bytes_field(const uint8_t *d, int64_t *p, int64_t rec_end, long long i, int64_t length,
                                   const char *what, const char *field, int64_t *pos, int64_t *len, Fault *f) {
    if (read_varint(d, p, rec_end, VARINT_MAX_BYTES, i, field, len, f))
        return -1;
    if (*len < -1)
        return fault(f, i, "negative %s length %lld", what, (long long)*len);
    *pos = *p;
    if (*len > 0) {
        *p += *len;
        if (*p > rec_end)
            return fault(f, i, "%s of %lld bytes runs past the record's declared length %lld", what, (long long)*len,
                         (long long)length);
    }
    return 0;
}

/* Record ``i`` at ``*pos``: walk_python's loop body, checks in its order. On success ``*pos`` is the record's end. */
static inline int walk_record(const uint8_t *d, int64_t *pos, int64_t end, long long i, long long count,
                              int64_t last_offset_delta, int client, int64_t *prev_od, Fields *r, Fault *f) {
    if (*pos >= end)
        return fault(f, i, "missing: the records section ends after %lld of %lld records", i, count);
    int64_t length = 0;
    if (read_varint(d, pos, end, VARINT_MAX_BYTES, i, "length", &length, f))
        return -1;
    if (length < RECORD_BODY_MIN_BYTES)
        return fault(f, i, "declared length %lld is below the minimum of %d", (long long)length,
                     RECORD_BODY_MIN_BYTES);
    int64_t body = *pos;
    int64_t rec_end = body + length;
    if (rec_end > end)
        return fault(f, i, "declared length %lld runs %lld bytes past the records section", (long long)length,
                     (long long)(rec_end - end));
    int64_t p = body + 1; /* attributes: unused, any value accepted */
    if (read_varint(d, &p, rec_end, VARLONG_MAX_BYTES, i, "timestampDelta", &r->ts_delta, f))
        return -1;
    if (read_varint(d, &p, rec_end, VARINT_MAX_BYTES, i, "offsetDelta", &r->od, f))
        return -1;
    if (client) {
        if (r->od != i)
            return fault(f, i,
                         "offsetDelta %lld, expected %lld (a producer's batch numbers its records 0, 1, 2 \xe2\x80\xa6)",
                         (long long)r->od, i);
    } else if (r->od <= *prev_od || r->od > last_offset_delta) {
        return fault(f, i, "offsetDelta %lld is not in (%lld, %lld]", (long long)r->od, (long long)*prev_od,
                     (long long)last_offset_delta);
    }
    *prev_od = r->od;
    if (read_bytes_field(d, &p, rec_end, i, length, "key", "keyLength", &r->key_pos, &r->key_len, f) ||
        read_bytes_field(d, &p, rec_end, i, length, "value", "valueLength", &r->value_pos, &r->value_len, f))
        return -1;
    if (read_varint(d, &p, rec_end, VARINT_MAX_BYTES, i, "headersCount", &r->n_headers, f))
        return -1;
    if (r->n_headers < 0)
        return fault(f, i, "negative header count %lld", (long long)r->n_headers);
    r->headers_pos = p;
    for (int64_t h = 0; h < r->n_headers; h++) {
        int64_t kp = 0, kl = 0, vp = 0, vl = 0;
        if (read_header_fields(d, &p, rec_end, h, r->n_headers, i, &kp, &kl, &vp, &vl, f))
            return -1;
    }
    if (p != rec_end)
        return fault(f, i, "declared length %lld but the fields take %lld bytes", (long long)length,
                     (long long)(p - body));
    r->end = rec_end;
    *pos = rec_end;
    return 0;
}

static inline int get_buffer(PyObject *obj, Py_buffer *view, int writable) {
    return PyObject_GetBuffer(obj, view, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS);
}

typedef struct {
    Py_buffer view;
    int held;
} Held;

static inline const void *hold(PyObject *obj, Held *h, Py_ssize_t items, Py_ssize_t item_size) {
    if (get_buffer(obj, &h->view, 0))
        return NULL;
    h->held = 1;
    if (h->view.len < items * item_size) {
        PyErr_SetString(PyExc_ValueError, "a column is shorter than the records asked for");
        return NULL;
    }
    return h->view.buf;
}

PyObject *logfs_render_jsonl(PyObject *self, PyObject *args); /* jsonlrender.c */
PyObject *logfs_check_client_batches(PyObject *self, PyObject *args); /* clientcheck.c */
PyObject *logfs_jsonl_sizes(PyObject *self, PyObject *args);  /* jsonlrender.c */
PyObject *logfs_header_columns(PyObject *self, PyObject *args); /* headercolumns.c */
/* Where the key and value of one append.jsonl line sit in the normalised output (length -1: null). */
typedef struct {
    int64_t key_pos, key_len, value_pos, value_len;
} LineFields;
int logfs_jsonl_line(const uint8_t *p, const uint8_t *e, uint8_t *out, uint8_t **o, LineFields *r); /* jsonlnorm.c */
int logfs_run_args(PyObject *args, const char *name, Py_buffer *head, Py_buffer *data, Py_ssize_t *end,
                   long long *budget, long long *per, long long *overhead); /* textbatches.c */
PyObject *logfs_new_batches(int64_t batches, const int64_t *cuts, const int64_t *sizes, long long overhead,
                            uint8_t ***outs_out); /* textbatches.c */

/* The bytes of the zigzag varint of a non-negative value ``v`` (zigzag: 2v): the writers of records sections
 * (textbatches.c, jsonlbatches.c). */
static inline int64_t varint_bytes(int64_t v) {
    uint64_t z = (uint64_t)v << 1;
    int64_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

/* Writes the zigzag varint of a non-negative ``v`` at ``p``; returns the byte after it. */
static inline uint8_t *put_varint(uint8_t *p, int64_t v) {
    uint64_t z = (uint64_t)v << 1;
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

/* How records go into batches under a budget, for the writers of records sections (textbatches.c,
 * jsonlbatches.c): a record joins the batch being cut while the costs of its records stay within the budget, and a
 * batch takes at least one (lines.encode_text_batches' and encode_record_batches' cuts). ``cuts[b]`` is batch b's
 * first record (``cuts[batches]``: the record count), ``sizes[b]`` its records section's bytes. */
typedef struct {
    int64_t *cuts, *sizes;
    int64_t batches, used, section, in_batch;
} Cutter;

/* Record ``k`` of ``cost`` placed (a new batch first when it would pass ``budget``): its offsetDelta in its batch.
 * The caller then adds its body with cut_body. */
static inline int64_t cut_place(Cutter *c, int64_t k, int64_t cost, int64_t budget) {
    if (c->in_batch > 0 && c->used + cost > budget) {
        c->cuts[c->batches] = k - c->in_batch;
        c->sizes[c->batches++] = c->section;
        c->used = c->section = c->in_batch = 0;
    }
    c->used += cost;
    return c->in_batch++;
}

static inline void cut_body(Cutter *c, int64_t body) { c->section += varint_bytes(body) + body; }

/* The last batch closed after ``n`` records; returns the number of batches. */
static inline int64_t cut_end(Cutter *c, int64_t n) {
    if (c->in_batch > 0) {
        c->cuts[c->batches] = n - c->in_batch;
        c->sizes[c->batches++] = c->section;
    }
    c->cuts[c->batches] = n;
    return c->batches;
}

#endif
