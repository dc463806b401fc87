/*
 * JSON lines (docs/mount.md, "Reads") from walked records, byte for byte render.jsonl_from_columns: the loop of
 * core/format/storedjsonl.py's per-record paths in C (issue 14), part of the module logfs.core.cext._helpers (see
 * recordwalk.c). Escapes as json.encoder.encode_basestring (the short ones, \u00XX below 0x20, the rest as is), keys
 * and values as strict UTF-8 text or base64 with their "...Encoding" member, header keys decoded with replacement.
 *
 * Two entry points share one record loop (emit_records): render_jsonl writes the lines; jsonl_sizes only counts the
 * bytes each line would have (an Out in counting mode: every put adds its length and writes nothing). A .jsonl
 * file's exact size is due at lookup (docs/mount.md, "Files, modes and caching"), and counting costs a fraction of
 * rendering (no output buffer, no copies); sharing the loop keeps the two byte-exact by construction
 * (tests/core/format/test_walk_cext.py holds it).
 */
#include "helpers.h"


typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int count; /* counting mode: len grows, nothing is written (p stays NULL) */
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->count || o->len + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + more)
        cap *= 2;
    char *p = PyMem_Realloc(o->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

static inline int out_put(Out *o, const void *s, Py_ssize_t n) {
    if (o->count) {
        o->len += n;
        return 0;
    }
    if (out_reserve(o, n))
        return -1;
    memcpy(o->p + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

#define OUT_LIT(o, s) out_put((o), (s), (Py_ssize_t)(sizeof(s) - 1))

/* Strict UTF-8, as Python's decoder: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            while (i + 8 <= n) { /* ASCII eight bytes at a time: most keys and values are ASCII */
                uint64_t word;
                memcpy(&word, s + i, 8);
                if (word & 0x8080808080808080ULL)
                    break;
                i += 8;
            }
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))
                return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))
                return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* What JSON's escape of each byte adds to its length: 0 (as is), 1 (\" \\ \n \r \t \b \f) or 5 (\u00XX). */
static const uint8_t ESCAPE_EXTRA[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
};

/* json.encoder.encode_basestring of valid UTF-8 text: quotes, the short escapes, \u00XX below 0x20, the rest as is. */
static int put_json_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (o->count) {
        Py_ssize_t size = 2 + n; /* the quotes and one byte each, plus what each escape adds */
        for (Py_ssize_t i = 0; i < n; i++)
            size += ESCAPE_EXTRA[s[i]];
        o->len += size;
        return 0;
    }
    if (out_reserve(o, 2 + 6 * n))
        return -1;
    char *w = o->p + o->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (!ESCAPE_EXTRA[c]) {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        default:
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 0xF];
        }
    }
    *w++ = '"';
    o->len = w - o->p;
    return 0;
}

/* render.json_bytes: null, the UTF-8 text as a JSON string, or base64 with its "…Encoding" member. */
/* The base64 text of ``s`` in quotes, room reserved. */
static void put_base64(Out *o, const uint8_t *s, int64_t n) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *w = o->p + o->len;
    *w++ = '"';
    int64_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        *w++ = b64[v >> 18];
        *w++ = b64[(v >> 12) & 63];
        *w++ = b64[(v >> 6) & 63];
        *w++ = b64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *w++ = b64[v >> 18];
        *w++ = b64[(v >> 12) & 63];
        *w++ = '=';
        *w++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        *w++ = b64[v >> 18];
        *w++ = b64[(v >> 12) & 63];
        *w++ = b64[(v >> 6) & 63];
        *w++ = '=';
    }
    *w++ = '"';
    o->len = w - o->p;
}

static int put_json_bytes(Out *o, const uint8_t *s, int64_t n, const char *field) {
    if (n < 0)
        return OUT_LIT(o, "null");
    if (valid_utf8(s, (Py_ssize_t)n))
        return put_json_string(o, s, (Py_ssize_t)n);
    if (o->count) {
        o->len += 2 + 4 * ((n + 2) / 3); /* the quoted base64 text; the member after it as below */
    } else if (out_reserve(o, 4 * (n / 3 + 1) + 32)) {
        return -1;
    } else {
        put_base64(o, s, n);
    }
    if (OUT_LIT(o, ",\""))
        return -1;
    if (out_put(o, field, (Py_ssize_t)strlen(field)))
        return -1;
    return OUT_LIT(o, "Encoding\":\"base64\"");
}

static int put_int(Out *o, long long v) {
    if (o->count && v >= 0) {
        int digits = 1;
        for (unsigned long long u = (unsigned long long)v; u >= 10; u /= 10)
            digits++;
        o->len += digits;
        return 0;
    }
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    return out_put(o, tmp, n);
}

/* A header key: decoded with errors="replace" as the reference does, then a JSON string. */
static int put_header_key(Out *o, const uint8_t *s, int64_t n) {
    if (valid_utf8(s, (Py_ssize_t)n))
        return put_json_string(o, s, (Py_ssize_t)n);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "replace");
    if (text == NULL)
        return -1;
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    int rc = utf8 == NULL ? -1 : put_json_string(o, (const uint8_t *)utf8, size);
    Py_DECREF(text);
    return rc;
}

/* The JSON lines of records 0…n-1 of the walked columns into ``o`` (writing or counting); ``sizes``, when given,
 * gets each line's length. */
static int emit_records(Out *o, const uint8_t *d, Py_ssize_t dlen, const char *lead, Py_ssize_t lead_len,
                        const void *const *col, Py_ssize_t n, int64_t *sizes) {
    const int64_t *off = col[0], *ts = col[1], *kp = col[3], *kl = col[4], *vp = col[5], *vl = col[6];
    const int64_t *hp = col[7], *hn = col[8];
    const uint8_t *tt = col[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t before = o->len;
        if ((kl[i] >= 0 && (kp[i] < 0 || kp[i] + kl[i] > dlen)) || (vl[i] >= 0 && (vp[i] < 0 || vp[i] + vl[i] > dlen)) ||
            hp[i] < 0 || hp[i] > dlen) {
            PyErr_SetString(PyExc_ValueError, "a record outside the data");
            return -1;
        }
        if (out_put(o, lead, lead_len) || put_int(o, off[i]) || OUT_LIT(o, ",\"timestamp\":") ||
            put_int(o, ts[i]) || OUT_LIT(o, ",\"timestampType\":") || out_put(o, tt[i] ? "1" : "0", 1) ||
            OUT_LIT(o, ",\"key\":") || put_json_bytes(o, d + (kl[i] > 0 ? kp[i] : 0), kl[i], "key") ||
            OUT_LIT(o, ",\"value\":") || put_json_bytes(o, d + (vl[i] > 0 ? vp[i] : 0), vl[i], "value") ||
            OUT_LIT(o, ",\"headers\":["))
            return -1;
        int64_t p = hp[i];
        Fault f;
        for (int64_t h = 0; h < hn[i]; h++) {
            int64_t hkp = 0, hkl = 0, hvp = 0, hvl = 0;
            /* the records were walked: the bound is the data's end, the checks only guard against misuse */
            if (read_header_fields(d, &p, dlen, h, hn[i], (long long)i, &hkp, &hkl, &hvp, &hvl, &f)) {
                raise_fault(&f);
                return -1;
            }
            if ((h && OUT_LIT(o, ",")) || OUT_LIT(o, "{\"key\":") || put_header_key(o, d + hkp, hkl) ||
                OUT_LIT(o, ",\"value\":") || put_json_bytes(o, d + (hvl > 0 ? hvp : 0), hvl, "value") ||
                OUT_LIT(o, "}"))
                return -1;
        }
        if (OUT_LIT(o, "]}\n"))
            return -1;
        if (sizes != NULL)
            sizes[i] = (int64_t)(o->len - before);
    }
    return 0;
}

/* The arguments both entry points take: the data, the lead and the nine columns, held until release_args. */
typedef struct {
    Held held[11]; /* the nine columns, the data, and jsonl_sizes' output */
    const void *col[9];
    const uint8_t *d;
    const char *lead;
    Py_ssize_t dlen, lead_len, n;
} Args;

/* Parse and hold (data, lead, columns, n[, out]); ``out_obj`` NULL: no ``out``. Returns 0 or -1. */
static int parse_args(PyObject *args, Args *a, PyObject **out_obj) {
    PyObject *data_obj, *columns;
    memset(a, 0, sizeof *a);
    if (out_obj == NULL) {
        if (!PyArg_ParseTuple(args, "Oy#O!n", &data_obj, &a->lead, &a->lead_len, &PyTuple_Type, &columns, &a->n))
            return -1;
    } else if (!PyArg_ParseTuple(args, "Oy#O!nO", &data_obj, &a->lead, &a->lead_len, &PyTuple_Type, &columns, &a->n,
                                 out_obj)) {
        return -1;
    }
    if (PyTuple_GET_SIZE(columns) != 9 || a->n < 0) {
        PyErr_SetString(PyExc_ValueError, "nine columns expected");
        return -1;
    }
    if (get_buffer(data_obj, &a->held[9].view, 0))
        return -1;
    a->held[9].held = 1;
    a->d = (const uint8_t *)a->held[9].view.buf;
    a->dlen = a->held[9].view.len;
    for (int k = 0; k < 9; k++) {
        a->col[k] = hold(PyTuple_GET_ITEM(columns, k), &a->held[k], a->n, k == 2 ? 1 : 8);
        if (a->col[k] == NULL)
            return -1;
    }
    return 0;
}

static void release_args(Args *a) {
    for (int k = 0; k < 11; k++)
        if (a->held[k].held)
            PyBuffer_Release(&a->held[k].view);
}

/*
 * render_jsonl(data, lead, columns, n) -> bytes
 *   columns: a tuple of nine buffers of n entries each: offset, timestamp (int64), timestampType (uint8, 0/1), key
 *   position, key length, value position, value length, headers position, header count (int64): the walked
 *   records, in order. Their JSON lines, each ``lead`` + offset + … + "]}\n".
 */
PyObject *logfs_render_jsonl(PyObject *self, PyObject *args) {
    Args a;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, 0};
    if (parse_args(args, &a, NULL) == 0 && emit_records(&o, a.d, a.dlen, a.lead, a.lead_len, a.col, a.n, NULL) == 0)
        result = PyBytes_FromStringAndSize(o.p ? o.p : "", o.len);
    PyMem_Free(o.p);
    release_args(&a);
    return result;
}

/*
 * jsonl_sizes(data, lead, columns, n, out) -> None
 *   The arguments of render_jsonl, and ``out``: a writable buffer of n int64 that gets the length of each record's
 *   JSON line, exactly len() of the line render_jsonl gives, nothing rendered.
 */
PyObject *logfs_jsonl_sizes(PyObject *self, PyObject *args) {
    Args a;
    PyObject *out_obj = NULL;
    int rc = parse_args(args, &a, &out_obj);
    if (rc == 0 && (rc = get_buffer(out_obj, &a.held[10].view, 1)) == 0) {
        a.held[10].held = 1;
        if (a.held[10].view.len < a.n * 8) {
            PyErr_SetString(PyExc_ValueError, "the sizes buffer is shorter than the records asked for");
            rc = -1;
        }
    }
    if (rc == 0) {
        Out o = {NULL, 0, 0, 1};
        rc = emit_records(&o, a.d, a.dlen, a.lead, a.lead_len, a.col, a.n, (int64_t *)a.held[10].view.buf);
    }
    release_args(&a);
    return rc ? NULL : Py_NewRef(Py_None);
}
