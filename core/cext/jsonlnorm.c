/*
 * logfs_jsonl_line: one ``append.jsonl`` line validated and its key and value normalised as the reference would store
 * them (core/format/lines.py: orjson's parse, the value as orjson's compact text), for jsonlbatches.c.
 *
 * What it takes itself: a line (after JSON whitespace) that is an object with only ``key`` (a string or null) and
 * ``value`` (any JSON) fields, each at most once; a blank line (spaces, tabs, carriage returns) is skipped as the
 * reference skips it. The value is written as orjson.dumps writes it: compact, object keys in their order, strings
 * with \" \\ \b \t \n \f \r and \u00XX (lowercase) for the other control characters and everything else as UTF-8
 * (``\/`` and ``\uXXXX`` escapes decoded, surrogate pairs joined), integers of at most 18 digits as written,
 * numbers with a fraction as written less the trailing zeros of the fraction (one digit kept: 221.0), which is
 * orjson's shortest round-trip form when there is no exponent, at most 15 significant digits (so the digits are the
 * double's shortest ones) and the value is 0 or in [0.0001, 1e16).
 * Anything else is not taken (-1: jsonl_batches answers None and the caller runs the reference on the whole
 * write): other fields (timestamp,
 * partition, headers, encodings, the rendering's topic/offset/timestampType), a key that is not a string or null,
 * a repeated name in any object (orjson keeps the last), exponents, -0, longer numbers, lone surrogates, invalid
 * UTF-8, nesting deeper than MAX_DEPTH, more than MAX_NAMES names in one object, and anything malformed (the
 * reference then refuses it with its own message).
 *
 * Threads: any; no Python object is touched (it runs with the GIL released).
 */
#include "helpers.h"

#define MAX_DEPTH 48
#define MAX_NAMES 64

/* Parser state: the line being read (p .. e) and where normalised bytes go (o). */
typedef struct {
    const uint8_t *p, *e;
    uint8_t *o;
} Cursor;

static inline void skip_ws(Cursor *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

static inline int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t h = p[k];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (uint32_t)(h - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* One code point below 0x80 as orjson writes it inside a string (``quoted``), or as its byte (decoded text). */
static inline void put_ascii(Cursor *c, uint32_t cp, int quoted) {
    static const char short_forms[] = "\0\0\0\0\0\0\0\0btn\0fr";
    if (!quoted) {
        *c->o++ = (uint8_t)cp;
    } else if (cp == '"' || cp == '\\') {
        *c->o++ = '\\';
        *c->o++ = (uint8_t)cp;
    } else if (cp >= 0x20) {
        *c->o++ = (uint8_t)cp;
    } else if (cp < sizeof short_forms - 1 && short_forms[cp]) {
        *c->o++ = '\\';
        *c->o++ = (uint8_t)short_forms[cp];
    } else {
        static const char digits[] = "0123456789abcdef";
        memcpy(c->o, "\\u00", 4);
        c->o[4] = (uint8_t)digits[cp >> 4];
        c->o[5] = (uint8_t)digits[cp & 15];
        c->o += 6;
    }
}

static inline void put_utf8(Cursor *c, uint32_t cp) {
    if (cp < 0x800) {
        *c->o++ = (uint8_t)(0xC0 | (cp >> 6));
    } else if (cp < 0x10000) {
        *c->o++ = (uint8_t)(0xE0 | (cp >> 12));
        *c->o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    } else {
        *c->o++ = (uint8_t)(0xF0 | (cp >> 18));
        *c->o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        *c->o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    }
    *c->o++ = (uint8_t)(0x80 | (cp & 0x3F));
}

/* The length of the valid UTF-8 sequence of two to four bytes at p (p < e, *p >= 0x80), or 0. */
static inline int utf8_length(const uint8_t *p, const uint8_t *e) {
    uint8_t b = *p;
    int n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        n = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (e - p < n || p[1] < lo || p[1] > hi)
        return 0;
    for (int k = 2; k < n; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Whether one of the eight bytes at p ends a plain ASCII run: a quote, a backslash, a control character or a byte
 * of 0x80 and above (exact: the zero-byte tests below have no false positive when no byte is the one sought). */
static inline int special8(const uint8_t *p) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t quote = x ^ (ones * '"'), backslash = x ^ (ones * '\\');
    return ((((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | ((x - ones * 0x20) & ~x) | x) & highs) != 0;
}

/* A string at c->p (its opening quote): written with its quotes as orjson writes it (``quoted``), or as its
 * decoded UTF-8 text. 0, or -1 for anything not taken. */
static int string(Cursor *c, int quoted) {
    const uint8_t *p = c->p + 1, *e = c->e;
    if (quoted)
        *c->o++ = '"';
    for (;;) {
        const uint8_t *run = p; /* plain ASCII: copied as it is, found eight bytes at a time */
        while (e - p >= 8 && !special8(p))
            p += 8;
        while (p < e && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        memcpy(c->o, run, (size_t)(p - run));
        c->o += p - run;
        if (p >= e || *p < 0x20)
            return -1;
        if (*p == '"')
            break;
        if (*p >= 0x80) {
            int n = utf8_length(p, e);
            if (n == 0)
                return -1;
            memcpy(c->o, p, (size_t)n);
            c->o += n;
            p += n;
            continue;
        }
        /* an escape */
        if (e - p < 2)
            return -1;
        uint8_t x = p[1];
        p += 2;
        uint32_t cp;
        switch (x) {
        case '"': case '\\': case '/': cp = x; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (e - p < 4 || hex4(p, &cp) < 0)
                return -1;
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return -1; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t low;
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) < 0 || low < 0xDC00 || low > 0xDFFF)
                    return -1; /* a lone high surrogate */
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            break;
        default:
            return -1;
        }
        if (cp < 0x80)
            put_ascii(c, cp, quoted);
        else
            put_utf8(c, cp);
    }
    if (quoted)
        *c->o++ = '"';
    c->p = p + 1;
    return 0;
}

static inline int is_digit(const uint8_t *p, const uint8_t *e) { return p < e && *p >= '0' && *p <= '9'; }

/* A number written as orjson writes it back, when that is its own text (see the file's comment); else -1. */
static int number(Cursor *c) {
    const uint8_t *start = c->p, *p = c->p, *e = c->e;
    int negative = *p == '-';
    if (negative)
        p++;
    if (!is_digit(p, e))
        return -1;
    const uint8_t *int_start = p;
    if (*p == '0') {
        p++;
        if (is_digit(p, e))
            return -1; /* a leading zero: not JSON */
    } else
        while (is_digit(p, e))
            p++;
    int64_t int_digits = p - int_start;
    if (p < e && (*p == 'e' || *p == 'E'))
        return -1;
    const uint8_t *stop = p; /* the end of what is written (trailing zeros of a fraction are not) */
    if (p < e && *p == '.') {
        const uint8_t *frac = ++p;
        while (is_digit(p, e))
            p++;
        if (p == frac || (p < e && (*p == 'e' || *p == 'E')))
            return -1;
        stop = p;
        while (stop > frac + 1 && stop[-1] == '0')
            stop--; /* 221.50 -> 221.5, 221.00 -> 221.0 */
        int64_t frac_digits = stop - frac, significant;
        if (*int_start != '0' && int_digits > 16)
            return -1; /* 1e16 and above: orjson writes an exponent */
        if (*int_start != '0' && frac_digits == 1 && *frac == '0') {
            const uint8_t *z = int_start + int_digits; /* a whole number: 1000.0 has one significant digit */
            while (z[-1] == '0')
                z--;
            significant = z - int_start;
        } else if (*int_start != '0')
            significant = int_digits + frac_digits;
        else if (frac_digits == 1 && *frac == '0')
            significant = 1; /* 0.0 and -0.0, written so */
        else {
            int64_t zeros = 0;
            while (frac[zeros] == '0')
                zeros++;
            if (zeros > 3)
                return -1; /* below 0.0001: orjson may write an exponent */
            significant = frac_digits - zeros;
        }
        if (significant > 15)
            return -1;
    } else if (int_digits > 18 || (negative && *int_start == '0'))
        return -1; /* a long integer (orjson may read it as a float), or -0 (written back as 0) */
    memcpy(c->o, start, (size_t)(stop - start));
    c->o += stop - start;
    c->p = p;
    return 0;
}

static inline int literal(Cursor *c, const char *word, size_t n) {
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, word, n) != 0)
        return -1;
    memcpy(c->o, word, n);
    c->o += n;
    c->p += n;
    return 0;
}

static int value(Cursor *c, int depth);

/* The opening bracket at c->p written and the whitespace after it skipped: 1 when the closing one follows at once
 * (written too), else 0. */
static inline int open_bracket(Cursor *c, uint8_t close) {
    *c->o++ = *c->p++;
    skip_ws(c);
    if (c->p < c->e && *c->p == close) {
        c->p++;
        *c->o++ = close;
        return 1;
    }
    return 0;
}

/* After an item of an object or array: 1 at its closing bracket, 0 at a comma (each written, the whitespace after a
 * comma skipped), -1 at anything else. */
static inline int after_item(Cursor *c, uint8_t close) {
    skip_ws(c);
    if (c->p >= c->e || (*c->p != close && *c->p != ','))
        return -1;
    int closed = *c->p == close;
    *c->o++ = *c->p++;
    if (!closed)
        skip_ws(c);
    return closed;
}

/* An object at c->p ('{'), compact; a name seen twice in it is not taken (orjson keeps the last value). */
static int object(Cursor *c, int depth) {
    uint8_t *names[MAX_NAMES];
    int64_t lengths[MAX_NAMES];
    int count = 0;
    if (open_bracket(c, '}'))
        return 0;
    for (;;) {
        if (c->p >= c->e || *c->p != '"' || count == MAX_NAMES)
            return -1;
        uint8_t *name = c->o;
        if (string(c, 1) < 0)
            return -1;
        int64_t length = c->o - name;
        for (int k = 0; k < count; k++)
            if (lengths[k] == length && memcmp(names[k], name, (size_t)length) == 0)
                return -1;
        names[count] = name;
        lengths[count++] = length;
        skip_ws(c);
        if (c->p >= c->e || *c->p != ':')
            return -1;
        c->p++;
        *c->o++ = ':';
        skip_ws(c);
        if (value(c, depth + 1) < 0)
            return -1;
        int next = after_item(c, '}');
        if (next != 0)
            return next > 0 ? 0 : -1;
    }
}

static int array(Cursor *c, int depth) {
    if (open_bracket(c, ']'))
        return 0;
    for (;;) {
        if (value(c, depth + 1) < 0)
            return -1;
        int next = after_item(c, ']');
        if (next != 0)
            return next > 0 ? 0 : -1;
    }
}

/* Any JSON value at c->p (no whitespace before it), written compact. */
static int value(Cursor *c, int depth) {
    if (c->p >= c->e || depth > MAX_DEPTH)
        return -1;
    switch (*c->p) {
    case '{': return object(c, depth);
    case '[': return array(c, depth);
    case '"': return string(c, 1);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    default: return number(c);
    }
}


/* A field of the line's object: a string as its text, null, or (``any``) other JSON compact. */
static int field(Cursor *c, uint8_t *out, int any, int64_t *pos, int64_t *len) {
    if (*pos != -2)
        return -1; /* the field twice */
    if (c->p < c->e && *c->p == 'n' && (size_t)(c->e - c->p) >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        *pos = 0;
        *len = -1;
        return 0;
    }
    *pos = c->o - out;
    if (c->p < c->e && *c->p == '"') {
        if (string(c, 0) < 0)
            return -1;
    } else if (!any || value(c, 1) < 0)
        return -1;
    *len = c->o - out - *pos;
    return 0;
}

/* One line (see the file's comment): 1 a record (its fields in ``r``, positions in ``out``; ``*o`` moved past
 * them), 0 blank, -1 not taken. */
int logfs_jsonl_line(const uint8_t *p, const uint8_t *e, uint8_t *out, uint8_t **o, LineFields *r) {
    Cursor c = {p, e, *o};
    skip_ws(&c);
    if (c.p == c.e)
        return 0;
    if (*c.p != '{')
        return -1;
    c.p++;
    skip_ws(&c);
    r->key_pos = r->value_pos = -2; /* not seen */
    r->key_len = r->value_len = -1;
    if (c.p < c.e && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            if (c.p >= c.e || *c.p != '"')
                return -1;
            uint8_t *name = c.o;
            if (string(&c, 0) < 0)
                return -1;
            int64_t n = c.o - name;
            int is_key = n == 3 && memcmp(name, "key", 3) == 0;
            int is_value = n == 5 && memcmp(name, "value", 5) == 0;
            c.o = name;
            if (!is_key && !is_value)
                return -1;
            skip_ws(&c);
            if (c.p >= c.e || *c.p != ':')
                return -1;
            c.p++;
            skip_ws(&c);
            if (is_key ? field(&c, out, 0, &r->key_pos, &r->key_len) : field(&c, out, 1, &r->value_pos, &r->value_len))
                return -1;
            int next = after_item(&c, '}'); /* writes the comma or brace after the field: never read */
            if (next < 0)
                return -1;
            if (next > 0)
                break;
        }
    }
    skip_ws(&c);
    if (c.p != c.e)
        return -1;
    *o = c.o;
    return 1;
}
