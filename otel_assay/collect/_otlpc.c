/*
 * The OTLP receiver's compiled decoder: an ExportTraceServiceRequest (protobuf wire
 * bytes) straight into the columns of the lake's `spans` table, as Arrow buffers.
 *
 * It reads only requests whose every span is plain: attribute values (of spans, events and
 * links) that are strings, ints, bools or finite doubles, every string valid UTF-8 and
 * within the limits, no repeated keys, nothing to reject, drop or cut. For anything else decode() returns None and
 * the receiver takes its Python path (otlp.add_protobuf), which has every rule. So this
 * code never decides a rule the Python path does not: it only does what that path would do
 * for the common request, and tests compare the two on the same bytes (random and mutated
 * requests included). Whatever the input, it reads only inside the body it was given.
 *
 * Python side: otel_assay.collect.compiled.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NPROMOTED_MAX 64
#define FALLBACK 1 /* not a request this code reads: the Python path decides */
#define TOO_MANY 2 /* more rows (spans, events, links) than the caller takes in one request */
/* larger bodies go to the Python path. Each column must stay under 2 GiB, and a body grows
 * at most 16 times in one: an empty event is 2 bytes on the wire and 32 in span_events'
 * trace_id column (JSON escapes grow an array's text at most 6 times) */
#define MAX_BODY (96 << 20)

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0)
        return 0; /* memcpy may not be given a NULL buffer, even for nothing */
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* An Arrow column being built: values (fixed width) or offsets + data (strings), and a
 * validity bitmap (bit set: not null). */
typedef struct {
    Buf data, offsets, valid;
    int64_t n, nulls;
    int is_string;
    int width; /* fixed-width columns: bytes per value */
} Col;

static int col_init(Col *c, int is_string, int width) {
    memset(c, 0, sizeof(*c));
    c->is_string = is_string;
    c->width = width;
    if (is_string) {
        int32_t zero = 0;
        return buf_put(&c->offsets, &zero, 4);
    }
    return 0;
}

static void col_free(Col *c) {
    buf_free(&c->data);
    buf_free(&c->offsets);
    buf_free(&c->valid);
}

static int col_bit(Col *c, int set) {
    if ((c->n & 7) == 0) {
        uint8_t zero = 0;
        if (buf_put(&c->valid, &zero, 1) < 0)
            return -1;
    }
    if (set)
        ((uint8_t *)c->valid.p)[c->n >> 3] |= (uint8_t)(1u << (c->n & 7));
    else
        c->nulls++;
    c->n++;
    return 0;
}

static int col_str(Col *c, const char *s, size_t n) {
    if (c->data.len + n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB");
        return -1;
    }
    if (buf_put(&c->data, s, n) < 0)
        return -1;
    int32_t off = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &off, 4) < 0)
        return -1;
    return col_bit(c, 1);
}

static int col_null(Col *c) {
    if (c->is_string) {
        int32_t off = (int32_t)c->data.len;
        if (buf_put(&c->offsets, &off, 4) < 0)
            return -1;
    } else {
        uint64_t zero = 0;
        if (buf_put(&c->data, &zero, c->width) < 0)
            return -1;
    }
    return col_bit(c, 0);
}

static int col_fixed(Col *c, const void *v) {
    if (buf_put(&c->data, v, c->width) < 0)
        return -1;
    return col_bit(c, 1);
}

/* where a column stands, to take back what was appended after it (col_restore) */
typedef struct {
    int64_t n, nulls;
    size_t data, offsets, valid;
} ColMark;

static void col_mark(const Col *c, ColMark *m) {
    *m = (ColMark){c->n, c->nulls, c->data.len, c->offsets.len, c->valid.len};
}

static void col_restore(Col *c, const ColMark *m) {
    c->n = m->n;
    c->nulls = m->nulls;
    c->data.len = m->data;
    c->offsets.len = m->offsets;
    c->valid.len = m->valid;
    if (c->n & 7) /* the bits of the rows taken back, in the last byte: col_bit ORs into it */
        ((uint8_t *)c->valid.p)[c->n >> 3] &= (uint8_t)((1u << (c->n & 7)) - 1);
}

/* (data, offsets or None, validity or None, null count) */
static PyObject *col_result(Col *c) {
    PyObject *data = PyBytes_FromStringAndSize(c->data.p ? c->data.p : "", (Py_ssize_t)c->data.len);
    PyObject *offsets = c->is_string ? PyBytes_FromStringAndSize(c->offsets.p, (Py_ssize_t)c->offsets.len)
                                     : (Py_INCREF(Py_None), Py_None);
    PyObject *valid = c->nulls ? PyBytes_FromStringAndSize(c->valid.p, (Py_ssize_t)c->valid.len)
                               : (Py_INCREF(Py_None), Py_None);
    if (!data || !offsets || !valid) {
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        Py_XDECREF(valid);
        return NULL;
    }
    return Py_BuildValue("(NNNL)", data, offsets, valid, (long long)c->nulls);
}

/* ------------------------------------------------------------------ wire format */
typedef struct {
    const uint8_t *p, *end;
} Rd;

/* 0: ok; FALLBACK: not read here (malformed, or a varint whose bits past the 64th are set,
 * which the Python path judges) */
static inline int rd_varint(Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return FALLBACK;
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1)
            return FALLBACK;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = v;
            return 0;
        }
    }
    return FALLBACK;
}

typedef struct {
    uint32_t field;
    int wt;
    uint64_t v;                /* varint, fixed64, fixed32 */
    const uint8_t *s;          /* length-delimited */
    size_t n;
} Field;

/* the next field of a message; 1 when there is none, FALLBACK on anything odd */
static inline int rd_field(Rd *r, Field *f) {
    uint64_t tag;
    if (r->p >= r->end)
        return -2;
    const uint8_t *at = r->p;
    if (rd_varint(r, &tag) || r->p - at > 5) /* upb refuses a tag longer than 5 bytes */
        return FALLBACK;
    if (tag >> 3 == 0 || tag >> 3 > 0x1FFFFFFF)
        return FALLBACK;
    f->field = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    switch (f->wt) {
    case 0:
        return rd_varint(r, &f->v) ? FALLBACK : 0;
    case 1:
        if (r->end - r->p < 8)
            return FALLBACK;
        memcpy(&f->v, r->p, 8); /* little-endian hosts only: checked at import */
        r->p += 8;
        return 0;
    case 5: {
        uint32_t x;
        if (r->end - r->p < 4)
            return FALLBACK;
        memcpy(&x, r->p, 4);
        f->v = x;
        r->p += 4;
        return 0;
    }
    case 2: {
        uint64_t n;
        if (rd_varint(r, &n) || n > (uint64_t)(r->end - r->p))
            return FALLBACK;
        f->s = r->p;
        f->n = (size_t)n;
        r->p += n;
        return 0;
    }
    default: /* groups (3, 4) and invalid wire types */
        return FALLBACK;
    }
}

#define NEXT(r, f) ((rc = rd_field((r), (f))) == 0)
#define DONE (rc == -2)

/* strict UTF-8, as Python's decoder and upb read it (no surrogates, no overlong forms) */
static int utf8_ok(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0)
                return 0; /* overlong */
            if (c == 0xED && s[i + 1] >= 0xA0)
                return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90)
                return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] >= 0x90)
                return 0; /* past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static const char HEX[] = "0123456789abcdef";

static void hex64(char *out, unsigned long long v) {
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = HEX[v & 15];
}

/* decimal text of v, as repr(int) writes it; returns its length */
static size_t decimal(char *out, long long v) {
    char tmp[24];
    size_t n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

static void to_hex(char *out, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = HEX[s[i] >> 4];
        out[2 * i + 1] = HEX[s[i] & 15];
    }
}

static int all_zero(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i])
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ the decoder */
enum { T_STRING = 0, T_INT64 = 1, T_DOUBLE = 2 };

typedef struct {
    const char *key;
    Py_ssize_t len;
    int type;
} Promoted;

/* an attributes map column: offsets (one per row, and a leading 0), keys, values */
typedef struct {
    Col offsets, keys, values;
    int64_t n;
} Map;

typedef struct {
    /* limits, in bytes: a string longer than this many bytes might be longer than the
     * Python path's character limit, so such a request goes there */
    size_t max_value, max_key;
    uint64_t max_attributes, max_events, max_links;
    int64_t rows, max_rows; /* spans, events and links read so far, and the most allowed */
    Promoted promoted[NPROMOTED_MAX];
    int npromoted;

    Col trace_id, span_id, parent, trace_state, name, kind, start, duration, code, message;
    Col dropped_a, dropped_e, dropped_l, group;
    Col prom[NPROMOTED_MAX];
    Map span_map;
    /* the span_events table: one row per event, with the row of its span */
    Col ev_trace_id, ev_span_id, ev_time, ev_name, ev_dropped, ev_part, ev_row;
    Map ev_map;
    /* the span_links table, likewise */
    Col ln_trace_id, ln_span_id, ln_linked_trace_id, ln_linked_span_id, ln_state, ln_dropped, ln_part, ln_row;
    Map ln_map;
    PyObject *keys;   /* list: hash(trace_hex + span_hex) per span, the receiver's dedupe key */
    PyObject *groups; /* list: (resource index, scope name, scope version) */
    PyObject *resources; /* list of lists of serialized resource KeyValues */
    char numbuf[64];
    Buf json; /* an array value's JSON text */
    PyObject *promoted_seq; /* holds the promoted keys, whose UTF-8 `promoted` points into */
} Dec;

/* the AnyValue of a KeyValue: what the Python path's stringify() stores, and the value for
 * a promoted column. Returns 0 / FALLBACK / -1 (error). */
typedef struct {
    int kind; /* 0 none, 1 string, 2 bool, 3 int, 4 double, 5 array (JSON text in s, n) */
    const uint8_t *s;
    size_t n;
    int64_t i;
    double d;
} Value;

static int read_array(const uint8_t *s, size_t n, Buf *json, size_t max_value, Value *v);

/* an array's JSON is built in `json` (NULL: arrays are not read here, inside an array) */
static int read_anyvalue(const uint8_t *s, size_t n, Value *v, Buf *json, size_t max_value) {
    Rd r = {s, s + n};
    Field f;
    int rc, seen = 0;
    v->kind = 0;
    while (NEXT(&r, &f)) {
        switch (f.field) {
        case 1:
            if (f.wt != 2)
                return FALLBACK;
            v->kind = 1;
            v->s = f.s;
            v->n = f.n;
            break;
        case 2:
            if (f.wt != 0)
                return FALLBACK;
            v->kind = 2;
            v->i = f.v != 0;
            break;
        case 3:
            if (f.wt != 0)
                return FALLBACK;
            v->kind = 3;
            v->i = (int64_t)f.v;
            break;
        case 4:
            if (f.wt != 1)
                return FALLBACK;
            v->kind = 4;
            memcpy(&v->d, &f.v, 8);
            break;
        case 5:
            if (f.wt != 2 || !json || seen)
                return FALLBACK;
            if ((rc = read_array(f.s, f.n, json, max_value, v)) != 0)
                return rc;
            break;
        default:
            /* key-value lists (6), bytes (7), and any other field: a newer OTLP may add
             * members to the oneof (string_value_strindex = 8 already is one), and a member
             * after ours would replace it */
            return FALLBACK;
        }
        if (seen++)
            return FALLBACK; /* two members of the oneof: the last wins in protobuf */
    }
    return DONE ? 0 : FALLBACK;
}

/* stringify() of a list of scalars: json.dumps(separators=(",", ":"), ensure_ascii=False) */
static int json_string(Buf *b, const uint8_t *s, size_t n) {
    if (buf_put(b, "\"", 1) < 0)
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (buf_put(b, s + run, i - run) < 0)
            return -1;
        char esc[7];
        size_t len = 2;
        esc[0] = '\\';
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = HEX[c >> 4];
            esc[5] = HEX[c & 15];
            len = 6;
        }
        if (buf_put(b, esc, len) < 0)
            return -1;
        run = i + 1;
    }
    if (buf_put(b, s + run, n - run) < 0 || buf_put(b, "\"", 1) < 0)
        return -1;
    return 0;
}

static int read_array(const uint8_t *s, size_t n, Buf *json, size_t max_value, Value *v) {
    Rd r = {s, s + n};
    Field f;
    int rc, first = 1;
    char num[64];
    json->len = 0;
    if (buf_put(json, "[", 1) < 0)
        return -1;
    while (NEXT(&r, &f)) {
        if (f.field != 1)
            continue;
        if (f.wt != 2)
            return FALLBACK;
        Value e;
        if ((rc = read_anyvalue(f.s, f.n, &e, NULL, max_value)) != 0)
            return rc;
        if (!first && buf_put(json, ",", 1) < 0)
            return -1;
        first = 0;
        switch (e.kind) {
        case 0:
            rc = buf_put(json, "null", 4);
            break;
        case 1:
            if (!utf8_ok(e.s, e.n))
                return FALLBACK;
            rc = json_string(json, e.s, e.n);
            break;
        case 2:
            rc = e.i ? buf_put(json, "true", 4) : buf_put(json, "false", 5);
            break;
        case 3:
            rc = buf_put(json, num, decimal(num, (long long)e.i));
            break;
        case 4: {
            if (!isfinite(e.d))
                return FALLBACK; /* stringify() quotes these: the Python path */
            char *t = PyOS_double_to_string(e.d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (!t)
                return -1;
            rc = buf_put(json, t, strlen(t));
            PyMem_Free(t);
            break;
        }
        default:
            return FALLBACK;
        }
        if (rc < 0)
            return -1;
        if (json->len > max_value)
            return FALLBACK; /* it would be truncated */
    }
    if (!DONE)
        return FALLBACK;
    if (buf_put(json, "]", 1) < 0)
        return -1;
    if (json->len > max_value)
        return FALLBACK;
    v->kind = 5;
    v->s = (const uint8_t *)json->p;
    v->n = json->len;
    return 0;
}

typedef struct {
    const uint8_t *key;
    size_t klen;
} SeenKey;

static uint32_t key_hash(const uint8_t *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

/* the KeyValue slices of one span or event, in order: on the stack up to 64, then on the heap */
#define KV_STACK 64

typedef struct {
    const uint8_t **s;
    size_t *n, len, cap;
    const uint8_t *s_stack[KV_STACK];
    size_t n_stack[KV_STACK];
} KvList;

static void kv_init(KvList *k) {
    k->s = k->s_stack;
    k->n = k->n_stack;
    k->len = 0;
    k->cap = KV_STACK;
}

static void kv_free(KvList *k) {
    if (k->s != k->s_stack) {
        PyMem_Free(k->s);
        PyMem_Free(k->n);
    }
}

/* 0; FALLBACK past `max` slices (read_attributes declines them anyway); -1 out of memory */
static int kv_push(KvList *k, const uint8_t *s, size_t n, uint64_t max) {
    if (k->len == k->cap) {
        if (k->len > max)
            return FALLBACK;
        size_t cap = k->cap * 4;
        const uint8_t **ns = PyMem_Malloc(cap * sizeof(*ns));
        size_t *nn = PyMem_Malloc(cap * sizeof(*nn));
        if (!ns || !nn) {
            PyMem_Free(ns);
            PyMem_Free(nn);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(ns, k->s, k->len * sizeof(*ns));
        memcpy(nn, k->n, k->len * sizeof(*nn));
        kv_free(k);
        k->s = ns;
        k->n = nn;
        k->cap = cap;
    }
    k->s[k->len] = s;
    k->n[k->len++] = n;
    return 0;
}

/* one row's attributes, the KeyValue slices in `kv`, into map `m` (a span's with `promote`:
 * a promoted key goes to its column) */
static int read_attributes(Dec *d, Map *m, int promote, const KvList *kv) {
    const uint8_t *const *kv_s = kv->s;
    const size_t *kv_n = kv->n;
    size_t nkv = kv->len;
    if (nkv > d->max_attributes)
        return FALLBACK;
    int filled[NPROMOTED_MAX] = {0};
    /* repeated keys: a small open-addressing table of the span's keys */
    SeenKey table_small[64];
    SeenKey *table = table_small;
    size_t tsize = 64;
    while (tsize < nkv * 2)
        tsize *= 2;
    if (tsize > 64) {
        table = PyMem_Calloc(tsize, sizeof(SeenKey));
        if (!table) {
            PyErr_NoMemory();
            return -1;
        }
    } else {
        memset(table_small, 0, sizeof(table_small));
    }
    int rc = 0;
    for (size_t a = 0; a < nkv && rc == 0; a++) {
        Rd r = {kv_s[a], kv_s[a] + kv_n[a]};
        Field f;
        const uint8_t *key = (const uint8_t *)"";
        size_t klen = 0;
        int have_key = 0, have_value = 0, frc;
        Value v = {0};
        while ((frc = rd_field(&r, &f)) == 0) {
            if (f.field == 1) {
                if (f.wt != 2 || have_key++) {
                    frc = FALLBACK;
                    break;
                }
                key = f.s;
                klen = f.n;
            } else if (f.field == 2) {
                if (f.wt != 2 || have_value++) {
                    frc = FALLBACK;
                    break;
                }
                if ((frc = read_anyvalue(f.s, f.n, &v, &d->json, d->max_value)) != 0)
                    break;
            }
        }
        if (frc != -2) {
            rc = frc;
            break;
        }
        if (klen > d->max_key || !utf8_ok(key, klen)) {
            rc = FALLBACK;
            break;
        }
        /* repeated key? */
        size_t mask = tsize - 1, slot = key_hash(key, klen) & mask;
        while (table[slot].key) {
            if (table[slot].klen == klen && memcmp(table[slot].key, key, klen) == 0) {
                rc = FALLBACK;
                break;
            }
            slot = (slot + 1) & mask;
        }
        if (rc)
            break;
        table[slot].key = key; /* never NULL, also for an empty key */
        table[slot].klen = klen;

        const char *text = NULL;
        size_t tlen = 0;
        switch (v.kind) {
        case 1:
            if (v.n > d->max_value || !utf8_ok(v.s, v.n)) {
                rc = FALLBACK;
                break;
            }
            text = (const char *)v.s;
            tlen = v.n;
            break;
        case 5: /* JSON built from valid UTF-8 */
            text = (const char *)v.s;
            tlen = v.n;
            break;
        case 2:
            text = v.i ? "true" : "false";
            tlen = v.i ? 4 : 5;
            break;
        case 3:
            tlen = decimal(d->numbuf, (long long)v.i);
            text = d->numbuf;
            break;
        case 4: {
            if (!isfinite(v.d)) {
                rc = FALLBACK;
                break;
            }
            /* repr(float): float_repr in CPython is exactly this call */
            char *s = PyOS_double_to_string(v.d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (!s) {
                rc = -1;
                break;
            }
            tlen = strlen(s);
            if (tlen >= sizeof(d->numbuf))
                tlen = sizeof(d->numbuf) - 1;
            memcpy(d->numbuf, s, tlen);
            PyMem_Free(s);
            text = d->numbuf;
            break;
        }
        }
        if (rc)
            break;
        if (tlen > d->max_value) { /* it would be cut (a tiny limit) */
            rc = FALLBACK;
            break;
        }
        /* a promoted key with a value of its column's type goes to the column */
        int col = -1;
        for (int p = 0; promote && p < d->npromoted; p++) {
            if ((size_t)d->promoted[p].len == klen && memcmp(d->promoted[p].key, key, klen) == 0) {
                int t = d->promoted[p].type;
                if ((t == T_STRING && v.kind == 1) || (t == T_INT64 && v.kind == 3) || (t == T_DOUBLE && v.kind == 4))
                    col = p;
                break;
            }
        }
        if (col >= 0 && !filled[col]) {
            filled[col] = 1;
            Col *c = &d->prom[col];
            if (c->is_string)
                rc = col_str(c, text, tlen) < 0 ? -1 : 0;
            else if (c->width == 8 && v.kind == 3)
                rc = col_fixed(c, &v.i) < 0 ? -1 : 0;
            else
                rc = col_fixed(c, &v.d) < 0 ? -1 : 0;
            continue;
        }
        if (col_str(&m->keys, (const char *)key, klen) < 0 ||
            (v.kind ? col_str(&m->values, text, tlen) : col_null(&m->values)) < 0) {
            rc = -1;
            break;
        }
        m->n++;
    }
    if (table != table_small)
        PyMem_Free(table);
    if (rc)
        return rc;
    for (int p = 0; promote && p < d->npromoted; p++)
        if (!filled[p] && col_null(&d->prom[p]) < 0)
            return -1;
    if (m->n > INT32_MAX)
        return FALLBACK;
    int32_t off = (int32_t)m->n;
    return buf_put(&m->offsets.data, &off, 4);
}

/* The fields of one Span, Event or Link message, as protobuf reads them: fields past
 * `nfields` are skipped (protobuf keeps unknown fields aside); each other field must have
 * the wire type want[field]; the field `attrs` (repeated KeyValue) is collected in `kv`, the
 * fields in the bit mask `repeated` are counted, and any other field may come once (protobuf
 * merges a second one: the Python path decides). Fields not on the wire read as zero. */
#define MSG_FIELDS 17

typedef struct {
    Field f[MSG_FIELDS];
    uint64_t count[MSG_FIELDS];
} Msg;

static int read_fields(Dec *d, const uint8_t *s, size_t n, const int8_t *want, uint32_t nfields, uint32_t attrs,
                       uint32_t repeated, Msg *m, KvList *kv) {
    Rd r = {s, s + n};
    Field f;
    int rc;
    uint32_t seen = 0;
    memset(m, 0, sizeof(*m));
    while (NEXT(&r, &f)) {
        if (f.field > nfields)
            continue;
        if (f.wt != want[f.field])
            return FALLBACK;
        if (f.field == attrs) {
            if ((rc = kv_push(kv, f.s, f.n, d->max_attributes)) != 0)
                return rc;
        } else if (repeated & (1u << f.field)) {
            m->count[f.field]++;
        } else {
            if (seen & (1u << f.field))
                return FALLBACK;
            seen |= 1u << f.field;
            m->f[f.field] = f;
        }
    }
    return DONE ? 0 : FALLBACK;
}

/* one event of the span in row `row` (trace and span id in `hex`), as the Python path stores
 * it; FALLBACK for anything it would judge (a repeated field, bad UTF-8, a value over a
 * limit, more attributes than the limit) */
static int read_event(Dec *d, const uint8_t *s, size_t n, const char *hex, int64_t span_start, int32_t row) {
    /* wire type of each field: 1 time_unix_nano, 2 name, 3 attributes, 4 dropped count */
    static const int8_t want[5] = {-1, 1, 2, 2, 0};
    Msg m;
    KvList kv;
    kv_init(&kv);
    int ret = read_fields(d, s, n, want, 4, 3, 0, &m, &kv);
    if (ret)
        goto out;
    uint64_t t = m.f[1].v, dropped = m.f[4].v & 0xFFFFFFFFu;
    const uint8_t *name = m.f[2].s;
    size_t name_n = m.f[2].n;
    if (name_n > d->max_value || !utf8_ok(name, name_n)) {
        ret = FALLBACK;
        goto out;
    }
    if ((ret = read_attributes(d, &d->ev_map, 0, &kv)) != 0)
        goto out;
    ret = -1;
    int64_t t64 = t > INT64_MAX ? INT64_MAX : (int64_t)t;
    int32_t d32 = dropped > INT32_MAX ? INT32_MAX : (int32_t)dropped;
    if (col_str(&d->ev_trace_id, hex, 32) < 0 || col_str(&d->ev_span_id, hex + 32, 16) < 0 ||
        col_fixed(&d->ev_time, &t64) < 0 || col_str(&d->ev_name, (const char *)name, name_n) < 0 ||
        col_fixed(&d->ev_dropped, &d32) < 0 || col_fixed(&d->ev_part, &span_start) < 0 ||
        col_fixed(&d->ev_row, &row) < 0)
        goto out;
    ret = 0;
out:
    kv_free(&kv);
    return ret;
}

/* one link of the span in row `row`, as the Python path stores it; FALLBACK for a link it
 * would drop (ids of the wrong length or all zeros) or judge */
static int read_link(Dec *d, const uint8_t *s, size_t n, const char *hex, int64_t span_start, int32_t row) {
    /* wire type of each field: 1 trace_id, 2 span_id, 3 trace_state, 4 attributes,
     * 5 dropped count, 6 flags */
    static const int8_t want[7] = {-1, 2, 2, 2, 2, 0, 5};
    Msg m;
    KvList kv;
    kv_init(&kv);
    int ret = read_fields(d, s, n, want, 6, 4, 0, &m, &kv);
    if (ret)
        goto out;
    const uint8_t *tid = m.f[1].s, *sid = m.f[2].s, *state = m.f[3].s;
    size_t tid_n = m.f[1].n, sid_n = m.f[2].n, state_n = m.f[3].n;
    uint64_t dropped = m.f[5].v & 0xFFFFFFFFu;
    if (tid_n != 16 || all_zero(tid, 16) || sid_n != 8 || all_zero(sid, 8) || (state && !utf8_ok(state, state_n))) {
        ret = FALLBACK;
        goto out;
    }
    if ((ret = read_attributes(d, &d->ln_map, 0, &kv)) != 0)
        goto out;
    ret = -1;
    char lhex[48];
    to_hex(lhex, tid, 16);
    to_hex(lhex + 32, sid, 8);
    int32_t d32 = dropped > INT32_MAX ? INT32_MAX : (int32_t)dropped;
    if (col_str(&d->ln_trace_id, hex, 32) < 0 || col_str(&d->ln_span_id, hex + 32, 16) < 0 ||
        col_str(&d->ln_linked_trace_id, lhex, 32) < 0 || col_str(&d->ln_linked_span_id, lhex + 32, 16) < 0 ||
        (state_n ? col_str(&d->ln_state, (const char *)state, state_n) : col_null(&d->ln_state)) < 0 ||
        col_fixed(&d->ln_dropped, &d32) < 0 || col_fixed(&d->ln_part, &span_start) < 0 ||
        col_fixed(&d->ln_row, &row) < 0)
        goto out;
    ret = 0;
out:
    kv_free(&kv);
    return ret;
}

static int read_span(Dec *d, const uint8_t *s, size_t n, int32_t group) {
    /* wire type of each field (9 attributes, 11 events, 13 links repeat) */
    static const int8_t want[17] = {-1, 2, 2, 2, 2, 2, 0, 1, 1, 2, 0, 2, 0, 2, 0, 2, 5};
    Rd r;
    Field f;
    int rc;
    Msg m;
    KvList kv;
    kv_init(&kv);
    int ret = read_fields(d, s, n, want, 16, 9, (1u << 11) | (1u << 13), &m, &kv);
    if (ret)
        goto out;
    const uint8_t *tid = m.f[1].s, *sid = m.f[2].s, *state = m.f[3].s, *pid = m.f[4].s, *name = m.f[5].s;
    size_t tid_n = m.f[1].n, sid_n = m.f[2].n, state_n = m.f[3].n, pid_n = m.f[4].n, name_n = m.f[5].n;
    uint64_t kind = m.f[6].v, start = m.f[7].v, end = m.f[8].v;
    uint64_t d_attrs = m.f[10].v & 0xFFFFFFFFu, d_events = m.f[12].v & 0xFFFFFFFFu, d_links = m.f[14].v & 0xFFFFFFFFu;
    uint64_t n_events = m.count[11], n_links = m.count[13], code = 0;
    /* the span's rows, its events and links with it, counted before any is stored */
    d->rows += 1 + (int64_t)n_events + (int64_t)n_links;
    if (d->rows > d->max_rows) {
        ret = TOO_MANY;
        goto out;
    }
    const uint8_t *msg = NULL;
    size_t msg_n = 0;
    if (m.f[15].s) { /* status: 2 message, 3 code */
        Rd sr = {m.f[15].s, m.f[15].s + m.f[15].n};
        Field g;
        uint32_t sseen = 0;
        while ((rc = rd_field(&sr, &g)) == 0) {
            if (g.field != 2 && g.field != 3)
                continue;
            if (sseen & (1u << g.field) || g.wt != (g.field == 2 ? 2 : 0)) {
                ret = FALLBACK;
                goto out;
            }
            sseen |= 1u << g.field;
            if (g.field == 2) {
                msg = g.s;
                msg_n = g.n;
            } else {
                code = g.v;
            }
        }
        if (!DONE) {
            ret = FALLBACK;
            goto out;
        }
    }
    /* anything the Python path would reject (or truncate) */
    if (tid_n != 16 || all_zero(tid, 16) || sid_n != 8 || all_zero(sid, 8) || (pid_n && pid_n != 8) ||
        start == 0 || start > INT64_MAX || end == 0 || end > INT64_MAX || end < start || kind > 5 || code > 2 ||
        n_events > d->max_events || n_links > d->max_links || /* the Python path keeps the first ones */
        name_n > d->max_value || msg_n > d->max_value || !utf8_ok(name, name_n) ||
        (state && !utf8_ok(state, state_n)) || (msg && !utf8_ok(msg, msg_n))) {
        ret = FALLBACK;
        goto out;
    }
    char hex[48];
    to_hex(hex, tid, 16);
    to_hex(hex + 32, sid, 8);
    if ((ret = read_attributes(d, &d->span_map, 1, &kv)) != 0)
        goto out;
    ret = -1;
    if (col_str(&d->trace_id, hex, 32) < 0 || col_str(&d->span_id, hex + 32, 16) < 0)
        goto out;
    if (pid_n == 8 && !all_zero(pid, 8)) {
        char ph[16];
        to_hex(ph, pid, 8);
        if (col_str(&d->parent, ph, 16) < 0)
            goto out;
    } else if (col_null(&d->parent) < 0) {
        goto out;
    }
    if ((state_n ? col_str(&d->trace_state, (const char *)state, state_n) : col_null(&d->trace_state)) < 0 ||
        col_str(&d->name, (const char *)name, name_n) < 0 ||
        (msg_n ? col_str(&d->message, (const char *)msg, msg_n) : col_null(&d->message)) < 0)
        goto out;
    int8_t k8 = (int8_t)kind, c8 = (int8_t)code;
    int64_t st = (int64_t)start, du = (int64_t)(end - start);
    int32_t da = d_attrs > INT32_MAX ? INT32_MAX : (int32_t)d_attrs;
    int32_t de = d_events > INT32_MAX ? INT32_MAX : (int32_t)d_events;
    int32_t dl = d_links > INT32_MAX ? INT32_MAX : (int32_t)d_links;
    if (col_fixed(&d->kind, &k8) < 0 || col_fixed(&d->start, &st) < 0 || col_fixed(&d->duration, &du) < 0 ||
        col_fixed(&d->code, &c8) < 0 || col_fixed(&d->dropped_a, &da) < 0 || col_fixed(&d->dropped_e, &de) < 0 ||
        col_fixed(&d->dropped_l, &dl) < 0 || col_fixed(&d->group, &group) < 0)
        goto out;
    /* the receiver's dedupe key: hash(trace_hex + span_hex), as receiver._span_keys computes it */
    PyObject *str = PyUnicode_FromStringAndSize(hex, 48);
    if (!str)
        goto out;
    Py_hash_t h = PyObject_Hash(str);
    Py_DECREF(str);
    if (h == -1)
        goto out;
    PyObject *hk = PyLong_FromSsize_t(h);
    if (!hk || PyList_Append(d->keys, hk) < 0) {
        Py_XDECREF(hk);
        goto out;
    }
    Py_DECREF(hk);
    if (n_events || n_links) {
        int32_t row = (int32_t)(d->trace_id.n - 1);
        r = (Rd){s, s + n};
        while (NEXT(&r, &f)) {
            if (f.field == 11 && (ret = read_event(d, f.s, f.n, hex, st, row)) != 0)
                goto out;
            if (f.field == 13 && (ret = read_link(d, f.s, f.n, hex, st, row)) != 0)
                goto out;
        }
    }
    ret = 0;
out:
    kv_free(&kv);
    return ret;
}

static PyObject *text_or_none(const uint8_t *s, size_t n) {
    if (!n)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "strict");
}

static int read_scope_spans(Dec *d, const uint8_t *s, size_t n, Py_ssize_t resource) {
    Rd r = {s, s + n};
    Field f;
    int rc, have_scope = 0;
    const uint8_t *sname = NULL, *sver = NULL;
    size_t sname_n = 0, sver_n = 0;
    /* the scope first: it may follow the spans on the wire */
    while (NEXT(&r, &f)) {
        if (f.field != 1)
            continue;
        if (f.wt != 2 || have_scope++)
            return FALLBACK;
        Rd sr = {f.s, f.s + f.n};
        Field g;
        int src;
        uint32_t sseen = 0;
        while ((src = rd_field(&sr, &g)) == 0) {
            if (g.field != 1 && g.field != 2)
                continue;
            if (g.wt != 2 || (sseen & (1u << g.field)))
                return FALLBACK;
            sseen |= 1u << g.field;
            if (g.field == 1) {
                sname = g.s;
                sname_n = g.n;
            } else {
                sver = g.s;
                sver_n = g.n;
            }
        }
        if (src != -2)
            return FALLBACK;
    }
    if (!DONE)
        return FALLBACK;
    if ((sname && !utf8_ok(sname, sname_n)) || (sver && !utf8_ok(sver, sver_n)))
        return FALLBACK;
    PyObject *name = text_or_none(sname, sname_n), *version = name ? text_or_none(sver, sver_n) : NULL;
    if (!name || !version) {
        Py_XDECREF(name);
        Py_XDECREF(version);
        return -1;
    }
    PyObject *g = Py_BuildValue("(nNN)", resource, name, version);
    if (!g || PyList_Append(d->groups, g) < 0) {
        Py_XDECREF(g);
        return -1;
    }
    Py_DECREF(g);
    int32_t group = (int32_t)(PyList_GET_SIZE(d->groups) - 1);
    r.p = s;
    while (NEXT(&r, &f)) {
        if (f.field == 2) {
            if (f.wt != 2)
                return FALLBACK;
            if ((rc = read_span(d, f.s, f.n, group)) != 0)
                return rc;
        } else if (f.field == 3 && f.wt != 2) {
            return FALLBACK;
        }
    }
    return 0;
}

static int read_resource_spans(Dec *d, const uint8_t *s, size_t n) {
    Rd r = {s, s + n};
    Field f;
    int rc, have_resource = 0;
    PyObject *attrs = PyList_New(0);
    if (!attrs)
        return -1;
    while (NEXT(&r, &f)) {
        if (f.field != 1)
            continue;
        if (f.wt != 2 || have_resource++) {
            Py_DECREF(attrs);
            return FALLBACK;
        }
        Rd rr = {f.s, f.s + f.n};
        Field g;
        int rrc;
        while ((rrc = rd_field(&rr, &g)) == 0) {
            if (g.field != 1)
                continue;
            if (g.wt != 2) {
                Py_DECREF(attrs);
                return FALLBACK;
            }
            PyObject *b = PyBytes_FromStringAndSize((const char *)g.s, (Py_ssize_t)g.n);
            if (!b || PyList_Append(attrs, b) < 0) {
                Py_XDECREF(b);
                Py_DECREF(attrs);
                return -1;
            }
            Py_DECREF(b);
        }
        if (rrc != -2) {
            Py_DECREF(attrs);
            return FALLBACK;
        }
    }
    if (!DONE) {
        Py_DECREF(attrs);
        return FALLBACK;
    }
    if (PyList_Append(d->resources, attrs) < 0) {
        Py_DECREF(attrs);
        return -1;
    }
    Py_DECREF(attrs);
    Py_ssize_t resource = PyList_GET_SIZE(d->resources) - 1;
    r.p = s;
    while (NEXT(&r, &f)) {
        if (f.field == 2) {
            if (f.wt != 2)
                return FALLBACK;
            if ((rc = read_scope_spans(d, f.s, f.n, resource)) != 0)
                return rc;
        } else if (f.field == 3 && f.wt != 2) {
            return FALLBACK;
        }
    }
    return 0;
}

static void dec_free(Dec *d) {
    Col *cols[] = {&d->trace_id, &d->span_id, &d->parent, &d->trace_state, &d->name, &d->kind, &d->start,
                   &d->duration, &d->code, &d->message, &d->dropped_a, &d->dropped_e, &d->dropped_l, &d->group,
                   &d->span_map.offsets, &d->span_map.keys, &d->span_map.values, &d->ev_trace_id,
                   &d->ev_span_id, &d->ev_time, &d->ev_name, &d->ev_dropped, &d->ev_part, &d->ev_row,
                   &d->ev_map.offsets, &d->ev_map.keys, &d->ev_map.values, &d->ln_trace_id, &d->ln_span_id,
                   &d->ln_linked_trace_id, &d->ln_linked_span_id, &d->ln_state, &d->ln_dropped, &d->ln_part,
                   &d->ln_row, &d->ln_map.offsets, &d->ln_map.keys, &d->ln_map.values};
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
        col_free(cols[i]);
    for (int p = 0; p < NPROMOTED_MAX; p++)
        col_free(&d->prom[p]);
    buf_free(&d->json);
    Py_XDECREF(d->promoted_seq);
    Py_XDECREF(d->keys);
    Py_XDECREF(d->groups);
    Py_XDECREF(d->resources);
}

PyDoc_STRVAR(decode_doc,
"decode(body, promoted, max_value_bytes, max_key_bytes, max_attributes, max_events, max_links, max_rows)\n--\n\n"
"The spans of an OTLP ExportTraceServiceRequest as Arrow buffers, or None when the request\n"
"needs the Python path (see otel_assay.collect.compiled), or an int over ``max_rows`` when it\n"
"holds more than ``max_rows`` spans, events and links (read no further). ``promoted`` is a\n"
"sequence of (key, type) pairs, type 0 string, 1 int64, 2 double, in column order.");

/* limits, the promoted keys and empty columns; 0, or -1 with an exception set */
static int dec_setup(Dec *d, PyObject *promoted, Py_ssize_t max_value, Py_ssize_t max_key, Py_ssize_t max_attributes,
                     Py_ssize_t max_events, Py_ssize_t max_links, Py_ssize_t max_rows) {
    d->max_value = max_value < 0 ? 0 : (size_t)max_value;
    d->max_key = max_key < 0 ? 0 : (size_t)max_key;
    d->max_attributes = max_attributes < 0 ? 0 : (uint64_t)max_attributes;
    d->max_events = max_events < 0 ? 0 : (uint64_t)max_events;
    d->max_links = max_links < 0 ? 0 : (uint64_t)max_links;
    d->max_rows = max_rows < 0 ? 0 : (int64_t)max_rows;
    PyObject *seq = d->promoted_seq = PySequence_Fast(promoted, "promoted must be a sequence");
    if (!seq)
        return -1;
    d->npromoted = (int)PySequence_Fast_GET_SIZE(seq);
    if (d->npromoted > NPROMOTED_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many promoted keys");
        return -1;
    }
    for (int p = 0; p < d->npromoted; p++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, p);
        PyObject *key;
        int type;
        if (!PyArg_ParseTuple(item, "Ui", &key, &type) || type < 0 || type > 2) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "promoted type must be 0, 1 or 2");
            return -1;
        }
        d->promoted[p].key = PyUnicode_AsUTF8AndSize(key, &d->promoted[p].len);
        if (!d->promoted[p].key)
            return -1;
        d->promoted[p].type = type;
    }
    d->keys = PyList_New(0);
    d->groups = PyList_New(0);
    d->resources = PyList_New(0);
    if (!d->keys || !d->groups || !d->resources)
        return -1;
    if (col_init(&d->trace_id, 1, 0) || col_init(&d->span_id, 1, 0) || col_init(&d->parent, 1, 0) ||
        col_init(&d->trace_state, 1, 0) || col_init(&d->name, 1, 0) || col_init(&d->message, 1, 0) ||
        col_init(&d->kind, 0, 1) || col_init(&d->code, 0, 1) || col_init(&d->start, 0, 8) ||
        col_init(&d->duration, 0, 8) || col_init(&d->dropped_a, 0, 4) || col_init(&d->dropped_e, 0, 4) ||
        col_init(&d->dropped_l, 0, 4) || col_init(&d->group, 0, 4) || col_init(&d->span_map.offsets, 0, 4) ||
        col_init(&d->span_map.keys, 1, 0) || col_init(&d->span_map.values, 1, 0) ||
        col_init(&d->ev_trace_id, 1, 0) || col_init(&d->ev_span_id, 1, 0) || col_init(&d->ev_time, 0, 8) ||
        col_init(&d->ev_name, 1, 0) || col_init(&d->ev_dropped, 0, 4) || col_init(&d->ev_part, 0, 8) ||
        col_init(&d->ev_row, 0, 4) || col_init(&d->ev_map.offsets, 0, 4) || col_init(&d->ev_map.keys, 1, 0) ||
        col_init(&d->ev_map.values, 1, 0) || col_init(&d->ln_trace_id, 1, 0) || col_init(&d->ln_span_id, 1, 0) ||
        col_init(&d->ln_linked_trace_id, 1, 0) || col_init(&d->ln_linked_span_id, 1, 0) ||
        col_init(&d->ln_state, 1, 0) || col_init(&d->ln_dropped, 0, 4) || col_init(&d->ln_part, 0, 8) ||
        col_init(&d->ln_row, 0, 4) || col_init(&d->ln_map.offsets, 0, 4) || col_init(&d->ln_map.keys, 1, 0) ||
        col_init(&d->ln_map.values, 1, 0))
        return -1;
    for (int p = 0; p < d->npromoted; p++)
        if (col_init(&d->prom[p], d->promoted[p].type == T_STRING, 8))
            return -1;
    int32_t zero = 0;
    if (buf_put(&d->span_map.offsets.data, &zero, 4) < 0 || buf_put(&d->ev_map.offsets.data, &zero, 4) < 0 ||
        buf_put(&d->ln_map.offsets.data, &zero, 4) < 0)
        return -1;
    return 0;
}

/* the columns read, as compiled.CompiledBatch takes them */
static PyObject *dec_result(Dec *d) {
    Col *named[] = {&d->trace_id, &d->span_id, &d->parent, &d->trace_state, &d->name, &d->kind, &d->start,
                    &d->duration, &d->code, &d->message, &d->dropped_a, &d->dropped_e, &d->dropped_l, &d->group,
                    &d->span_map.keys, &d->span_map.values, &d->ev_trace_id, &d->ev_span_id, &d->ev_time,
                    &d->ev_name, &d->ev_dropped, &d->ev_part, &d->ev_row, &d->ev_map.keys, &d->ev_map.values,
                    &d->ln_trace_id, &d->ln_span_id, &d->ln_linked_trace_id, &d->ln_linked_span_id, &d->ln_state,
                    &d->ln_dropped, &d->ln_part, &d->ln_row, &d->ln_map.keys, &d->ln_map.values};
    const char *names[] = {"trace_id", "span_id", "parent_span_id", "trace_state", "name", "kind",
                           "start_time_unix_nano", "duration_ns", "status_code", "status_message",
                           "dropped_attributes_count", "dropped_events_count", "dropped_links_count",
                           "group", "map_keys", "map_values", "ev_trace_id", "ev_span_id", "ev_time_unix_nano",
                           "ev_name", "ev_dropped_attributes_count", "ev_partition_time", "ev_span_row",
                           "ev_map_keys", "ev_map_values", "ln_trace_id", "ln_span_id", "ln_linked_trace_id",
                           "ln_linked_span_id", "ln_trace_state", "ln_dropped_attributes_count", "ln_partition_time",
                           "ln_span_row", "ln_map_keys", "ln_map_values"};
    PyObject *cols = PyDict_New(), *prom = PyList_New(d->npromoted);
    if (!cols || !prom)
        goto fail;
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        PyObject *c = col_result(named[i]);
        if (!c || PyDict_SetItemString(cols, names[i], c) < 0) {
            Py_XDECREF(c);
            goto fail;
        }
        Py_DECREF(c);
    }
    for (int p = 0; p < d->npromoted; p++) {
        PyObject *c = col_result(&d->prom[p]);
        if (!c)
            goto fail;
        PyList_SET_ITEM(prom, p, c);
    }
    PyObject *offsets = PyBytes_FromStringAndSize(d->span_map.offsets.data.p, (Py_ssize_t)d->span_map.offsets.data.len);
    PyObject *ev_offsets = PyBytes_FromStringAndSize(d->ev_map.offsets.data.p, (Py_ssize_t)d->ev_map.offsets.data.len);
    PyObject *ln_offsets = PyBytes_FromStringAndSize(d->ln_map.offsets.data.p, (Py_ssize_t)d->ln_map.offsets.data.len);
    if (!offsets || !ev_offsets || !ln_offsets) {
        Py_XDECREF(offsets);
        Py_XDECREF(ev_offsets);
        Py_XDECREF(ln_offsets);
        goto fail;
    }
    return Py_BuildValue("(LNNNOOOLNLN)", (long long)d->trace_id.n, cols, prom, offsets, d->keys, d->groups,
                         d->resources, (long long)d->ev_trace_id.n, ev_offsets, (long long)d->ln_trace_id.n,
                         ln_offsets);
fail:
    Py_XDECREF(cols);
    Py_XDECREF(prom);
    return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer body;
    PyObject *promoted;
    Py_ssize_t max_value, max_key, max_attributes, max_events, max_links, max_rows;
    if (!PyArg_ParseTuple(args, "y*Onnnnnn", &body, &promoted, &max_value, &max_key, &max_attributes, &max_events,
                          &max_links, &max_rows))
        return NULL;
    if (body.len > MAX_BODY) { /* keeps every string column under Arrow's 2 GiB */
        PyBuffer_Release(&body);
        Py_RETURN_NONE;
    }
    Dec *d = PyMem_Calloc(1, sizeof(Dec));
    PyObject *result = NULL;
    if (!d) {
        PyBuffer_Release(&body);
        return PyErr_NoMemory();
    }
    if (dec_setup(d, promoted, max_value, max_key, max_attributes, max_events, max_links, max_rows) < 0)
        goto done;
    {
        Rd r = {(const uint8_t *)body.buf, (const uint8_t *)body.buf + body.len};
        Field f;
        int rc;
        while (NEXT(&r, &f)) {
            if (f.field != 1)
                continue;
            if (f.wt != 2) {
                rc = FALLBACK;
                break;
            }
            if ((rc = read_resource_spans(d, f.s, f.n)) != 0)
                break;
        }
        if (rc == -1)
            goto done;
        if (rc == TOO_MANY) {
            result = PyLong_FromLongLong(d->rows);
            goto done;
        }
        if (rc != -2) {
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
    }
    result = dec_result(d);
done:
    dec_free(d);
    PyMem_Free(d);
    PyBuffer_Release(&body);
    return result;
}


/* ------------------------------------------------------------------ counting rows */
/* The rows a request decodes to (spans, events and links), counted on the wire before
 * anything is decoded: an empty event is 2 bytes of protobuf and about 460 bytes on its way
 * to the lake, so the receiver refuses a request that holds more rows than it buffers
 * before either decoder allocates them. Reads what upb reads, unknown fields and groups
 * included (one the count skipped would be a way past it); -1 when the bytes are no
 * protobuf message (either decoder then refuses the request). */
#define GROUP_DEPTH 100 /* upb's recursion limit */

/* A varint as upb reads one: at most 10 bytes, bits past the 64th dropped (rd_varint leaves
 * such a varint to the Python path; a count that gave up on it would let upb parse a request
 * of any number of rows) */
static int cnt_varint(Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static int skip_group(Rd *r, uint32_t field, int depth);

/* the next field of a message as upb reads it; groups (wire type 3) are skipped whole, and
 * an end of group (4) is returned for skip_group to match: 0, -2 at the end, -1 for bytes
 * that are no message */
static int cnt_field(Rd *r, Field *f, int depth) {
    for (;;) {
        if (r->p >= r->end)
            return -2;
        const uint8_t *at = r->p;
        uint64_t tag, n;
        if (cnt_varint(r, &tag) || r->p - at > 5 || tag >> 3 == 0 || tag >> 3 > 0x1FFFFFFF)
            return -1;
        f->field = (uint32_t)(tag >> 3);
        f->wt = (int)(tag & 7);
        switch (f->wt) {
        case 0:
            return cnt_varint(r, &f->v);
        case 1:
        case 5: {
            size_t w = f->wt == 1 ? 8 : 4;
            if ((size_t)(r->end - r->p) < w)
                return -1;
            r->p += w;
            return 0;
        }
        case 2:
            if (cnt_varint(r, &n) || n > (uint64_t)(r->end - r->p))
                return -1;
            f->s = r->p;
            f->n = (size_t)n;
            r->p += n;
            return 0;
        case 3:
            if (skip_group(r, f->field, depth + 1) < 0)
                return -1;
            continue;
        case 4:
            return 0;
        default:
            return -1;
        }
    }
}

/* skips a group's fields up to its end tag (the start tag read); groups nest */
static int skip_group(Rd *r, uint32_t field, int depth) {
    if (depth > GROUP_DEPTH)
        return -1;
    Field f;
    int rc;
    while ((rc = cnt_field(r, &f, depth)) == 0)
        if (f.wt == 4)
            return f.field == field ? 0 : -1;
    return -1; /* the message ended inside the group */
}

/* the next field of a message (not inside a group) */
static int count_field(Rd *r, Field *f) {
    int rc = cnt_field(r, f, 0);
    return rc == 0 && f->wt == 4 ? -1 : rc; /* an end of group where none is open */
}

/* rows of the submessages `field` (a repeated message field) of the message s[0:n]; `inner`
 * counts what each holds (NULL: each is one row) */
typedef int64_t (*Counter)(const uint8_t *s, size_t n);

static int64_t count_in(const uint8_t *s, size_t n, uint32_t field, Counter inner) {
    Rd r = {s, s + n};
    Field f;
    int rc;
    int64_t rows = 0;
    while ((rc = count_field(&r, &f)) == 0) {
        if (f.field != field || f.wt != 2)
            continue;
        int64_t k = inner ? inner(f.s, f.n) : 1;
        if (k < 0)
            return -1;
        rows += k;
    }
    return rc == -2 ? rows : -1;
}

static int64_t count_span(const uint8_t *s, size_t n) {
    Rd r = {s, s + n};
    Field f;
    int rc;
    int64_t rows = 1;
    while ((rc = count_field(&r, &f)) == 0)
        if ((f.field == 11 || f.field == 13) && f.wt == 2) /* events, links */
            rows++;
    return rc == -2 ? rows : -1;
}

static int64_t count_scope_spans(const uint8_t *s, size_t n) { return count_in(s, n, 2, count_span); }
static int64_t count_resource_spans(const uint8_t *s, size_t n) { return count_in(s, n, 2, count_scope_spans); }

PyDoc_STRVAR(count_rows_doc,
"count_rows(body)\n--\n\n"
"How many spans, events and links the OTLP ExportTraceServiceRequest ``body`` holds,\n"
"read from the wire without decoding them; None when ``body`` is no protobuf message.");

static PyObject *count_rows(PyObject *self, PyObject *args) {
    Py_buffer body;
    if (!PyArg_ParseTuple(args, "y*", &body))
        return NULL;
    int64_t rows = count_in(body.buf, (size_t)body.len, 1, count_resource_spans);
    PyBuffer_Release(&body);
    if (rows < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(rows);
}


static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {"count_rows", count_rows, METH_VARARGS, count_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_otlpc",
    "The OTLP receiver's compiled decoder (see otel_assay.collect.compiled).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__otlpc(void) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) { /* protobuf fixed64 is little-endian; so must we be */
        PyErr_SetString(PyExc_ImportError, "_otlpc supports little-endian hosts only");
        return NULL;
    }
    return PyModule_Create(&module);
}
