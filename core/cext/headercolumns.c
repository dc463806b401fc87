/*
 * The headers of walked records as flat columns, for Arrow (issue 14), part of the module logfs.core.cext._helpers
 * (see recordwalk.c). The Spark decoder (logfs/spark/arrow.py) builds the ``headers`` column, list<struct<key string,
 * value binary>>, straight from buffers: where each header's key and value lie in the data, one row per header in
 * record order. Python lists per record (header_lists) cost ~1 µs a record; these columns cost a few ns a header.
 */
#include "helpers.h"

/*
 * header_columns(data, positions, counts, n, key_pos, key_len, value_pos, value_len) -> None
 *   positions, counts: int64 buffers of n entries from walk_sections (rows 6 and 7), of records already walked.
 *   key_pos … value_len: writable int64 buffers of sum(counts) entries each, filled header by header (value_len -1:
 *   a null value). Header keys are left as bytes: the caller checks they are UTF-8.
 */
PyObject *logfs_header_columns(PyObject *self, PyObject *args) {
    PyObject *data_obj, *hp_obj, *hn_obj, *out_obj[4];
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOnOOOO", &data_obj, &hp_obj, &hn_obj, &n, &out_obj[0], &out_obj[1], &out_obj[2],
                          &out_obj[3]))
        return NULL;
    Held held[7];
    memset(held, 0, sizeof held);
    PyObject *result = NULL;
    const int64_t *hp = NULL, *hn = NULL;
    int64_t *out[4];
    if (get_buffer(data_obj, &held[2].view, 0))
        return NULL;
    held[2].held = 1;
    if ((hp = hold(hp_obj, &held[0], n, 8)) == NULL || (hn = hold(hn_obj, &held[1], n, 8)) == NULL)
        goto done;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hn[i] < 0 || hp[i] < 0 || hp[i] > held[2].view.len) {
            PyErr_SetString(PyExc_ValueError, "headers outside the data");
            goto done;
        }
        total += hn[i];
    }
    for (int k = 0; k < 4; k++) {
        if (get_buffer(out_obj[k], &held[3 + k].view, 1))
            goto done;
        held[3 + k].held = 1;
        if (held[3 + k].view.len < total * 8) {
            PyErr_SetString(PyExc_ValueError, "a header column is shorter than the headers");
            goto done;
        }
        out[k] = (int64_t *)held[3 + k].view.buf;
    }
    const uint8_t *d = (const uint8_t *)held[2].view.buf;
    Py_ssize_t dlen = held[2].view.len;
    int64_t j = 0;
    Fault f;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = hp[i];
        for (int64_t h = 0; h < hn[i]; h++, j++) {
            /* the records were walked: the bound is the data's end, the checks only guard against misuse */
            if (read_header_fields(d, &p, dlen, h, hn[i], (long long)i, &out[0][j], &out[1][j], &out[2][j],
                                   &out[3][j], &f)) {
                raise_fault(&f);
                goto done;
            }
        }
    }
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 7; k++)
        if (held[k].held)
            PyBuffer_Release(&held[k].view);
    return result;
}
