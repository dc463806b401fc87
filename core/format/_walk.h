/*
 * What core/format/_walk.c (the record walk) and core/format/_walkjsonl.c (JSON lines of walked records) share: the
 * varint and header readers with the reference's checks and messages, faults raised as InvalidRecord, buffers.
 * See _walk.c's opening comment for the module.
 */
#ifndef LOGFS_WALK_H
#define LOGFS_WALK_H

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

extern PyObject *logfs_InvalidRecord; /* logfs.core.errors.InvalidRecord, imported at module init (_walk.c) */

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

PyObject *logfs_render_jsonl(PyObject *self, PyObject *args); /* _walkjsonl.c */

#endif
