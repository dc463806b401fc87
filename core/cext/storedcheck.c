/* The read-side check of a run of stored batches in C (issue 16; core/log/batchcheck.py holds the reference).
 *
 *   check_stored(buf, position, span_end[, min_base, first_max_last, max_last, epochs]) -> (at, kind, value, last)
 *
 * ``buf`` (any buffer) holds the bytes of a ``.log`` from byte ``position`` (a batch boundary); ``span_end`` is the
 * end of the span the caller reads (a batch boundary). Batch by batch, as batchcheck.scan_python does: a batch
 * declaring fewer than 14 bytes, or ending past ``span_end``, is a framing error (kind 1, value: the declared
 * length); a batch cut short by the end of ``buf`` (but within the span) ends the walk; magic other than 2 is kind 2
 * (value: the magic); a CRC-32C (Castagnoli, over the bytes after the CRC field) that disagrees is kind 3. ``at`` is
 * where the walk stopped (the bad batch, or the end of the last whole batch: kind 0). After the CRC, the header
 * fields it does not cover (issue 23): offsets that do not rise from ``min_base`` or pass ``max_last`` (or, for the
 * first batch, ``first_max_last``) are kind 4 (value: the base offset); a leader epoch below -1 or above the bound
 * ``epochs`` (native int64 pairs: start offset, epoch) gives the base offset is kind 5 (value: the epoch). ``last``
 * is the last offset of the last batch that passed (``min_base - 1`` for none).
 *
 * Why in C: a ``.kafka`` read of one-record batches checked ~100 MB/s in the Python loop (a header unpack and a
 * crc32c call per ~100-byte batch); this loop runs with the GIL released. CRC-32C by the SSE 4.2 instruction where
 * the CPU has it (checked once), else slicing-by-8 tables.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LOG_OVERHEAD 12
#define ATTRIBUTES_AT 21
#define MAGIC_AT 16
#define CRC_AT 17
#define MIN_DECLARED 14
#define MAGIC 2
#define EPOCH_AT 12
#define RECORD_BATCH_OVERHEAD 61
#define LAST_DELTA_AT 23

static uint32_t table[8][256];
static int have_tables = 0;

static void make_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
    have_tables = 1;
}

static uint32_t crc32c_soft(const uint8_t *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
            table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, Py_ssize_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n-- > 0)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#else
#define HAVE_HW_CRC 0
#endif

static int use_hw = -1; /* -1: not yet decided */

static uint32_t crc32c(const uint8_t *p, Py_ssize_t n) {
#if HAVE_HW_CRC
    if (use_hw)
        return crc32c_hw(p, n);
#endif
    return crc32c_soft(p, n);
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int64_t be64(const uint8_t *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4));
}

PyObject *logfs_check_stored(PyObject *self, PyObject *args) {
    Py_buffer view, epochs;
    long long position, span_end;
    long long min_base = 0, first_max_last = INT64_MAX, max_last = INT64_MAX;
    epochs.buf = NULL;
    epochs.len = 0;
    epochs.obj = NULL;
    if (!PyArg_ParseTuple(args, "y*LL|LLLy*", &view, &position, &span_end, &min_base, &first_max_last, &max_last,
                          &epochs))
        return NULL;
    if (use_hw < 0) {
#if HAVE_HW_CRC
        __builtin_cpu_init();
        use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
        use_hw = 0;
#endif
        if (!use_hw && !have_tables)
            make_tables();
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    const uint8_t *ep = (const uint8_t *)epochs.buf;
    Py_ssize_t n_epochs = epochs.obj != NULL ? epochs.len / 16 : 0, k = 0;
    Py_ssize_t end = view.len, at = 0;
    int kind = 0, first = 1;
    long long value = 0;
    int64_t last = (int64_t)min_base - 1;
    Py_BEGIN_ALLOW_THREADS;
    while (at + LOG_OVERHEAD <= end) {
        int32_t length = (int32_t)be32(d + at + 8);
        long long size = (long long)length + LOG_OVERHEAD;
        if (length < MIN_DECLARED || position + at + size > span_end) {
            kind = 1;
            value = length;
            break;
        }
        if (at + size > end)
            break; /* a whole batch, only not all in this buffer: the caller reads it next */
        int8_t magic = (int8_t)d[at + MAGIC_AT];
        if (magic != MAGIC) {
            kind = 2;
            value = magic;
            break;
        }
        if (crc32c(d + at + ATTRIBUTES_AT, (Py_ssize_t)size - ATTRIBUTES_AT) != be32(d + at + CRC_AT)) {
            kind = 3;
            break;
        }
        if (size < RECORD_BATCH_OVERHEAD) { /* a CRC that passes over less than a v2 header: framing */
            kind = 1;
            value = length;
            break;
        }
        /* The header fields the CRC does not cover (batchcheck.scan_python states the rule). */
        int64_t base = be64(d + at);
        int32_t delta = (int32_t)be32(d + at + LAST_DELTA_AT);
        if (base <= last || delta < 0 || base > max_last - delta || (first && base > first_max_last - delta)) {
            kind = 4;
            value = base;
            break;
        }
        int32_t epoch = (int32_t)be32(d + at + EPOCH_AT);
        if (epoch < -1) {
            kind = 5;
            value = epoch;
            break;
        }
        if (n_epochs && epoch >= 0) {
            int64_t start, bound;
            while (k + 1 < n_epochs) {
                memcpy(&start, ep + (k + 1) * 16, 8);
                if (start > base)
                    break;
                k++;
            }
            memcpy(&bound, ep + k * 16 + 8, 8);
            if (epoch > bound) {
                kind = 5;
                value = epoch;
                break;
            }
        }
        last = base + delta;
        first = 0;
        at += (Py_ssize_t)size;
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&view);
    if (epochs.obj != NULL)
        PyBuffer_Release(&epochs);
    return Py_BuildValue("(niLL)", at, kind, value, (long long)last);
}
