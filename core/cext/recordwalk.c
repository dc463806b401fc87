/*
 * The record walk of a RecordBatch v2 records section, compiled; and, at the end of this file, the table of functions
 * of the module logfs.core.cext._helpers (the other files of core/cext/ each add what their opening comment says).
 *
 * Why: a producer's records vary (keys, headers, sizes of 150-1,500 bytes), so the column-at-once paths of
 * core/format/numpywalk.py and recordruns.py do not apply and the per-record loop of records.walk_python (a few
 * µs a record in Python) bounds validation, rendering and Spark decoding (issue 14). This file is that loop in C:
 * the same checks in the same order, the same values, the same InvalidRecord messages. records.walk_python stays
 * the reference and the fallback (LOGFS_NO_CEXT=1, or no compiler at install time); hypothesis tests in
 * tests/core/format/test_walk_cext.py hold the two equal on valid and damaged input.
 *
 * Functions (positions index the buffer given, as in records.py):
 *
 *   walk(data, start, end, count, last_offset_delta, client, columns, as_lists)
 *       -> (max_ts_delta, None)                                        columns false
 *       -> (max_ts_delta, ts, od, kp, kl, vp, vl, headers)             columns true and as_lists (Python lists)
 *       -> (max_ts_delta, int64 bytearray of 6 x n, headers)           columns true, not as_lists (the six columns
 *                                                                       row after row, for numpy.frombuffer)
 *       headers: a list with, per record, None or a list of (str key, bytes | None value), as walk_python's.
 *
 *   walk_sections(data, sections, out)
 *       The stored batches of a read, for the renderers: ``sections`` is an int64 buffer of (start, end, count,
 *       last_offset_delta) per batch, each walked with the stored-batch rules; ``out`` a writable int64 buffer of
 *       9 x total records (timestamp delta, offset delta, key position, key length, value position, value length,
 *       position of the headers (after the header count), header count, record start; row after row). Returns None,
 *       or raises
 *       InvalidRecord for the first fault (the caller then asks the reference for the batch's precise error).
 *
 *   header_lists(data, positions, counts, n)
 *       The headers of records walked by walk_sections (rows 6 and 7), as walk's columns give them.
 *
 *   render_jsonl(data, lead, columns, n)
 *       The JSON lines (docs/mount.md, "Reads") of walked records, byte for byte render.jsonl_from_columns (in
 *       jsonlrender.c).
 *
 *   jsonl_sizes(data, lead, columns, n, out)
 *       The length of each of those lines into ``out`` (n int64), nothing rendered (in jsonlrender.c).
 *
 *   header_columns(data, positions, counts, n, key_pos, key_len, value_pos, value_len)
 *       The headers of walked records as flat columns, for Arrow (in headercolumns.c).
 *
 * Threads: any. The GIL is released while a walk creates no Python object (no columns, or walk_sections).
 */
#include "helpers.h"

PyObject *logfs_InvalidRecord = NULL;

/* The six columns of RecordColumns, in rows of ``stride`` entries: record ``i``'s fields. */
static inline void store_columns(int64_t *c, long long stride, long long i, const Fields *r) {
    c[i] = r->ts_delta;
    c[stride + i] = r->od;
    c[2 * stride + i] = r->key_pos;
    c[3 * stride + i] = r->key_len;
    c[4 * stride + i] = r->value_pos;
    c[5 * stride + i] = r->value_len;
}

/* The headers of a record already walked, as walk_python gives them: [(key str, value bytes | None), ...]. */
static PyObject *header_list(const uint8_t *d, const Fields *r) {
    PyObject *list = PyList_New((Py_ssize_t)r->n_headers);
    if (list == NULL)
        return NULL;
    int64_t p = r->headers_pos;
    Fault f;
    for (int64_t h = 0; h < r->n_headers; h++) {
        int64_t kp = 0, kl = 0, vp = 0, vl = 0;
        if (read_header_fields(d, &p, r->end, h, r->n_headers, 0, &kp, &kl, &vp, &vl, &f)) {
            Py_DECREF(list); /* cannot happen: the record was walked */
            PyErr_SetString(PyExc_AssertionError, "a walked header failed to read again");
            return NULL;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)d + kp, (Py_ssize_t)kl, "replace");
        PyObject *value = vl >= 0 ? PyBytes_FromStringAndSize((const char *)d + vp, (Py_ssize_t)vl) : Py_NewRef(Py_None);
        PyObject *pair = (key && value) ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)h, pair);
    }
    return list;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    Py_ssize_t start, end;
    long long count, last_offset_delta;
    int client, columns, as_lists;
    if (!PyArg_ParseTuple(args, "OnnLLppp", &data_obj, &start, &end, &count, &last_offset_delta, &client, &columns,
                          &as_lists))
        return NULL;
    Py_buffer view;
    if (get_buffer(data_obj, &view, 0))
        return NULL;
    if (start < 0 || start > end || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "records section outside the buffer");
        return NULL;
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    /* Every record takes at least 7 bytes, so no more than this many can be stored before a fault: a hostile count
       sizes nothing (walk_python fails at the first missing record too). */
    long long room = (end - start) / (1 + RECORD_BODY_MIN_BYTES);
    long long capacity = count < room ? count : room;
    if (capacity < 0)
        capacity = 0;
    int64_t pos = start, prev_od = -1, max_ts = INT64_MIN;
    Fault f;
    Fields r;
    int failed = 0;
    long long i = 0;
    PyObject *cols = NULL, *headers = NULL, *result = NULL;
    int64_t *c = NULL;
    if (columns) {
        cols = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(capacity * NCOLS * (long long)sizeof(int64_t)));
        headers = PyList_New((Py_ssize_t)capacity);
        if (cols == NULL || headers == NULL)
            goto done;
        c = (int64_t *)PyByteArray_AS_STRING(cols);
    }
    /* Without columns the walk creates no Python object: other threads run meanwhile. */
    PyThreadState *released = columns ? NULL : PyEval_SaveThread();
    for (i = 0; i < count; i++) {
        if (walk_record(d, &pos, end, i, count, last_offset_delta, client, &prev_od, &r, &f)) {
            failed = 1;
            break;
        }
        if (r.ts_delta > max_ts)
            max_ts = r.ts_delta;
        if (c == NULL)
            continue;
        store_columns(c, capacity, i, &r); /* i < capacity: a record that passed takes >= 7 bytes (see above) */
        PyObject *h = r.n_headers ? header_list(d, &r) : Py_NewRef(Py_None);
        if (h == NULL)
            goto done;
        PyList_SET_ITEM(headers, (Py_ssize_t)i, h);
    }
    if (released != NULL)
        PyEval_RestoreThread(released);
    if (!failed && pos != end) {
        fault(&f, -1, "%lld trailing bytes after the %lld records the batch declares", (long long)(end - pos), count);
        failed = 1;
    }
    if (failed) {
        raise_fault(&f);
        goto done;
    }
    PyObject *max_obj = PyLong_FromLongLong(count != 0 ? max_ts : 0);
    if (max_obj == NULL)
        goto done;
    if (!columns) {
        result = PyTuple_Pack(2, max_obj, Py_None);
    } else if (!as_lists) {
        result = PyTuple_Pack(3, max_obj, cols, headers);
    } else {
        result = PyTuple_New(2 + NCOLS);
        const int64_t *c = (const int64_t *)PyByteArray_AS_STRING(cols);
        if (result != NULL) {
            PyTuple_SET_ITEM(result, 0, Py_NewRef(max_obj));
            for (int k = 0; k < NCOLS; k++) {
                PyObject *list = PyList_New((Py_ssize_t)capacity);
                if (list == NULL) {
                    Py_CLEAR(result);
                    break;
                }
                PyTuple_SET_ITEM(result, 1 + k, list);
                for (long long j = 0; j < capacity; j++) {
                    PyObject *v = PyLong_FromLongLong(c[k * capacity + j]);
                    if (v == NULL) {
                        Py_CLEAR(result);
                        break;
                    }
                    PyList_SET_ITEM(list, (Py_ssize_t)j, v);
                }
                if (result == NULL)
                    break;
            }
            if (result != NULL)
                PyTuple_SET_ITEM(result, 1 + NCOLS, Py_NewRef(headers));
        }
    }
    Py_DECREF(max_obj);
done:
    Py_XDECREF(cols);
    Py_XDECREF(headers);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *walk_sections(PyObject *self, PyObject *args) {
    PyObject *data_obj, *sections_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO", &data_obj, &sections_obj, &out_obj))
        return NULL;
    Py_buffer data, sections, out;
    if (get_buffer(data_obj, &data, 0))
        return NULL;
    if (get_buffer(sections_obj, &sections, 0)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (get_buffer(out_obj, &out, 1)) {
        PyBuffer_Release(&sections);
        PyBuffer_Release(&data);
        return NULL;
    }
    const uint8_t *d = (const uint8_t *)data.buf;
    const int64_t *s = (const int64_t *)sections.buf;
    Py_ssize_t nsec = sections.len / (Py_ssize_t)(4 * sizeof(int64_t));
    long long total = 0;
    int bad = 0;
    for (Py_ssize_t j = 0; j < nsec; j++) {
        int64_t start = s[4 * j], end = s[4 * j + 1], count = s[4 * j + 2];
        if (start < 0 || start > end || end > data.len || count < 0 || count > (end - start) / 7)
            bad = 1;
        total += count;
    }
    PyObject *result = NULL;
    if (bad || out.len < (Py_ssize_t)(total * NSTORED * (long long)sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "sections outside the buffer, or an output buffer too small");
        goto done;
    }
    int64_t *o = (int64_t *)out.buf;
    Fault f;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS;
    long long at = 0;
    for (Py_ssize_t j = 0; j < nsec && !failed; j++) {
        int64_t pos = s[4 * j], end = s[4 * j + 1], count = s[4 * j + 2], lod = s[4 * j + 3], prev_od = -1;
        Fields r;
        for (long long i = 0; i < count; i++, at++) {
            o[8 * total + at] = pos;
            if (walk_record(d, &pos, end, i, count, lod, 0, &prev_od, &r, &f)) {
                failed = 1;
                break;
            }
            store_columns(o, total, at, &r);
            o[6 * total + at] = r.headers_pos;
            o[7 * total + at] = r.n_headers;
        }
        if (!failed && pos != end) {
            fault(&f, -1, "%lld trailing bytes after the %lld records the batch declares", (long long)(end - pos),
                  (long long)count);
            failed = 1;
        }
    }
    Py_END_ALLOW_THREADS;
    if (failed)
        raise_fault(&f);
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&sections);
    PyBuffer_Release(&data);
    return result;
}



/* header_lists(data, positions, counts, n) -> list: per record None, or its headers as walk's columns give them
 * (``positions``/``counts``: int64 buffers from walk_sections, of records already walked). */
static PyObject *header_lists(PyObject *self, PyObject *args) {
    PyObject *data_obj, *hp_obj, *hn_obj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOn", &data_obj, &hp_obj, &hn_obj, &n))
        return NULL;
    Held held[3];
    memset(held, 0, sizeof held);
    PyObject *result = NULL;
    const int64_t *hp = NULL, *hn = NULL;
    if (get_buffer(data_obj, &held[2].view, 0))
        return NULL;
    held[2].held = 1;
    if ((hp = hold(hp_obj, &held[0], n, 8)) == NULL || (hn = hold(hn_obj, &held[1], n, 8)) == NULL)
        goto done;
    const uint8_t *d = (const uint8_t *)held[2].view.buf;
    Py_ssize_t dlen = held[2].view.len;
    result = PyList_New(n);
    for (Py_ssize_t i = 0; result != NULL && i < n; i++) {
        PyObject *h;
        if (hn[i] == 0) {
            h = Py_NewRef(Py_None);
        } else if (hp[i] < 0 || hp[i] > dlen || hn[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "headers outside the data");
            h = NULL;
        } else {
            Fields r = {.headers_pos = hp[i], .n_headers = hn[i], .end = dlen};
            h = header_list(d, &r);
        }
        if (h == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, i, h);
    }
done:
    for (int k = 0; k < 3; k++)
        if (held[k].held)
            PyBuffer_Release(&held[k].view);
    return result;
}

PyObject *logfs_text_batches(PyObject *self, PyObject *args); /* textbatches.c */
PyObject *logfs_jsonl_batches(PyObject *self, PyObject *args); /* jsonlbatches.c */
PyObject *logfs_check_stored(PyObject *self, PyObject *args);  /* storedcheck.c */

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk a records section as records.walk_python does (see the file's comment)."},
    {"walk_sections", walk_sections, METH_VARARGS, "Walk the records sections of several stored batches."},
    {"render_jsonl", logfs_render_jsonl, METH_VARARGS, "JSON lines of walked records (see render_jsonl's comment)."},
    {"jsonl_sizes", logfs_jsonl_sizes, METH_VARARGS, "The length of each JSON line render_jsonl would give."},
    {"header_lists", header_lists, METH_VARARGS, "The headers of walked records as Python lists."},
    {"header_columns", logfs_header_columns, METH_VARARGS, "The headers of walked records as flat columns."},
    {"check_client_batches", logfs_check_client_batches, METH_VARARGS,
     "Check a request's producer batches (core/cext/clientcheck.c)."},
    {"text_batches", logfs_text_batches, METH_VARARGS,
     "The lines of a buffer as the records sections of text batches (core/cext/textbatches.c)."},
    {"jsonl_batches", logfs_jsonl_batches, METH_VARARGS,
     "append.jsonl lines of the usual shape as records sections, or None (core/cext/jsonlbatches.c)."},
    {"check_stored", logfs_check_stored, METH_VARARGS,
     "Check a run of stored batches: framing, magic, CRC-32C, offsets, epochs (core/cext/storedcheck.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_helpers",
    .m_doc = "The compiled helpers of logfs.core.cext (core/cext/*.c; see core/cext/__init__.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__helpers(void) {
    PyObject *errors = PyImport_ImportModule("logfs.core.errors");
    if (errors == NULL)
        return NULL;
    logfs_InvalidRecord = PyObject_GetAttrString(errors, "InvalidRecord");
    Py_DECREF(errors);
    if (logfs_InvalidRecord == NULL)
        return NULL;
    return PyModule_Create(&module);
}
