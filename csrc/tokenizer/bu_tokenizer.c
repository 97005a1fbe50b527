/*
 * bu_tokenizer.c - byte-level BPE (GPT-2 style) and SentencePiece-style BPE tokenizers.
 *
 * Semantics follow llama.cpp (src/llama-vocab.cpp, src/unicode.cpp of the pinned llama.cpp) so
 * that the same text gives the same ids; tests/test_tokenizer.py checks this against llama.cpp's
 * vocabulary test vectors and against llama-cpp-python. The code is written from the rules, not
 * copied. Deliberate differences (each a clear error where llama.cpp would go on silently) are
 * listed in docs/tokenizer.md.
 */
#include "bu_tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generated from Python's unicodedata by bringup.tokenizer_pack.unicode_tables_c(). */
extern const uint32_t bu_uni_ranges[][2];
extern const size_t bu_uni_n_ranges;
#define UNI_LETTER 1u
#define UNI_NUMBER 2u
#define UNI_SPACE  4u

#define BLOB_HEADER_BYTES 80u
#define NO_ID (-1)

typedef struct {
    const char *text;
    uint32_t len;
    float score;
    int32_t type;
} tok_entry;

typedef struct {
    const char *l, *r;
    uint32_t ll, rl;
} merge_entry;

struct bu_tok {
    unsigned char *blob;       /* owned copy; entries point into it */
    int model, pre;
    int add_bos, add_eos, add_space_prefix;
    int ignore_merges;         /* llama-bpe: a whole pre-token that is in the vocab is one token */
    int32_t special[6];
    int32_t n_vocab;
    tok_entry *vocab;
    uint32_t n_merges;
    merge_entry *merges;
    /* open-addressing hash tables; slots hold index + 1, 0 = empty */
    uint32_t *vocab_slots; size_t vocab_mask;
    uint32_t *merge_slots; size_t merge_mask;
    /* tokens matched in the text before tokenizing: control, user-defined, unknown;
     * longest text first, then lower id first */
    int32_t *specials; size_t n_specials;
    const unsigned char *eog; uint32_t n_eog;   /* ascending i32 ids, inside the blob copy */
    int32_t byte_tok[256];     /* id for each raw byte, or -1 */
    char byte_utf8[256][2];    /* GPT-2: each byte's character, UTF-8 (always 1 or 2 bytes) */
    unsigned char byte_utf8_len[256];
};

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                              */

static void set_err(char *err, size_t cap, const char *fmt, ...) {
    if (!err || cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd_u64(const unsigned char *p) { return rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32; }
static float rd_f32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t fnv1a(const char *s, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}
#define FNV_SEED 14695981039346656037ull

static size_t table_size_for(size_t n) {
    size_t s = 16;
    while (s < 2 * n + 1) s <<= 1;
    return s;
}

/* growable arrays: every append is checked, nothing has a fixed cap */
typedef struct { int32_t *v; size_t n, cap; } ivec;
static int ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return BU_TOK_ENOMEM;
        a->v = nv; a->cap = nc;
    }
    a->v[a->n++] = x;
    return BU_TOK_OK;
}

typedef struct { char *v; size_t n, cap; } bvec;
static int bvec_put(bvec *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n) nc *= 2;
        char *nv = realloc(b->v, nc);
        if (!nv) return BU_TOK_ENOMEM;
        b->v = nv; b->cap = nc;
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    return BU_TOK_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Unicode                                                                                    */

static unsigned uni_flags(uint32_t cp) {
    size_t lo = 0, hi = bu_uni_n_ranges;   /* last range with start <= cp */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (bu_uni_ranges[mid][0] <= cp) lo = mid; else hi = mid;
    }
    return bu_uni_ranges[lo][0] <= cp ? bu_uni_ranges[lo][1] : 0;
}

/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). Returns the sequence length,
 * 0 when invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len; uint32_t v, min;
    if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation bytes), as llama.cpp
 * splits symbols; the text is already validated, so this is exact. */
static size_t utf8_len(unsigned char c) {
    static const unsigned char t[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return t[c >> 4];
}

/* GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py): bytes that are printable Latin-1 (! to ~,
 * ¡ to ¬, ® to ÿ) map to themselves, the other 68 map in byte order to U+0100..U+0143. */
static int gpt2_byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t gpt2_byte_to_cp(unsigned b) {
    if (gpt2_byte_is_printable(b)) return b;
    unsigned k = 0;   /* rank of b among the non-printable bytes */
    for (unsigned x = 0; x < b; x++) k += !gpt2_byte_is_printable(x);
    return 256 + k;
}

static int gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256) return gpt2_byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned k = 0;
    for (unsigned x = 0; x < 256; x++) {
        if (gpt2_byte_is_printable(x)) continue;
        if (256 + k == cp) return (int)x;
        k++;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* lookups                                                                                    */

static int32_t vocab_find(const bu_tok *t, const char *s, size_t n) {
    size_t i = (size_t)fnv1a(s, n, FNV_SEED) & t->vocab_mask;
    for (;;) {
        uint32_t slot = t->vocab_slots[i];
        if (!slot) return NO_ID;
        const tok_entry *e = &t->vocab[slot - 1];
        if (e->len == n && memcmp(e->text, s, n) == 0) return (int32_t)(slot - 1);
        i = (i + 1) & t->vocab_mask;
    }
}

static uint64_t merge_hash(const char *l, size_t ll, const char *r, size_t rl) {
    uint64_t h = fnv1a(l, ll, FNV_SEED);
    h ^= 0xFFu; h *= 1099511628211ull;   /* separator: (ab, c) and (a, bc) hash apart */
    return fnv1a(r, rl, h);
}

static int64_t merge_rank(const bu_tok *t, const char *l, size_t ll, const char *r, size_t rl) {
    size_t i = (size_t)merge_hash(l, ll, r, rl) & t->merge_mask;
    for (;;) {
        uint32_t slot = t->merge_slots[i];
        if (!slot) return -1;
        const merge_entry *m = &t->merges[slot - 1];
        if (m->ll == ll && m->rl == rl && memcmp(m->l, l, ll) == 0 && memcmp(m->r, r, rl) == 0)
            return (int64_t)(slot - 1);
        i = (i + 1) & t->merge_mask;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* load                                                                                       */

const char *bu_tok_pre_name(int pre) {
    static const char *const names[BU_TOK_PRE_COUNT] = {
        "default", "gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "refact"};
    return pre >= 0 && pre < BU_TOK_PRE_COUNT ? names[pre] : NULL;
}

const char *bu_tok_strerror(int code) {
    switch (code) {
    case BU_TOK_OK: return "ok";
    case BU_TOK_ENULL: return "null pointer";
    case BU_TOK_EFORMAT: return "malformed tokenizer blob";
    case BU_TOK_ENOMEM: return "out of memory";
    case BU_TOK_EUTF8: return "text is not valid UTF-8";
    case BU_TOK_EVOCAB: return "vocabulary cannot represent the text";
    case BU_TOK_EID: return "token id out of range";
    case BU_TOK_ENOSPECIAL: return "model has no such special token";
    case BU_TOK_EDECODE: return "token text cannot be decoded";
    case BU_TOK_ETOOLONG: return "text too long";
    case BU_TOK_EARG: return "invalid argument";
    default: return "unknown error";
    }
}

static int is_byte_token_text(const char *s, uint32_t n, unsigned *byte) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    const char *h1 = memchr(hex, s[3], 16), *h2 = memchr(hex, s[4], 16);
    if (!h1 || !h2 || !s[3] || !s[4]) return 0;
    *byte = (unsigned)((h1 - hex) << 4 | (h2 - hex));
    return 1;
}

/* stable merge sort (qsort is not stable, and a comparator would need global state) */
static void sort_specials(const bu_tok *t, int32_t *a, int32_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_specials(t, a, tmp, h);
    sort_specials(t, a + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        uint32_t li = t->vocab[a[i]].len, lj = t->vocab[a[j]].len;
        /* longer first; equal length keeps id order (stable) */
        if (lj > li) tmp[k++] = a[j++]; else tmp[k++] = a[i++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

void bu_tok_free(bu_tok *t) {
    if (!t) return;
    free(t->blob); free(t->vocab); free(t->merges);
    free(t->vocab_slots); free(t->merge_slots); free(t->specials);
    free(t);
}

int bu_tok_load(const void *blob, size_t n, bu_tok **out, char *err, size_t errcap) {
    if (!out) { set_err(err, errcap, "bu_tok_load: out is NULL"); return BU_TOK_ENULL; }
    *out = NULL;
    if (!blob) { set_err(err, errcap, "bu_tok_load: blob is NULL"); return BU_TOK_ENULL; }
    const unsigned char *p = blob;
    if (n < BLOB_HEADER_BYTES) {
        set_err(err, errcap, "tokenizer blob: %zu bytes, shorter than the %u-byte header", n, BLOB_HEADER_BYTES);
        return BU_TOK_EFORMAT;
    }
    if (memcmp(p, BU_TOK_BLOB_MAGIC, 8) != 0) { set_err(err, errcap, "tokenizer blob: bad magic"); return BU_TOK_EFORMAT; }
    uint32_t version = rd_u32(p + 8), hdr = rd_u32(p + 12);
    uint64_t total = rd_u64(p + 16);
    if (version != BU_TOK_BLOB_VERSION) {
        set_err(err, errcap, "tokenizer blob: version %u, this build reads version %u", version, BU_TOK_BLOB_VERSION);
        return BU_TOK_EFORMAT;
    }
    if (hdr != BLOB_HEADER_BYTES) { set_err(err, errcap, "tokenizer blob: header size %u, expected %u", hdr, BLOB_HEADER_BYTES); return BU_TOK_EFORMAT; }
    if (total != n) {
        set_err(err, errcap, "tokenizer blob: header says %llu bytes, got %zu (truncated or padded)", (unsigned long long)total, n);
        return BU_TOK_EFORMAT;
    }
    uint32_t model = rd_u32(p + 24), pre = rd_u32(p + 28), n_vocab = rd_u32(p + 32), n_merges = rd_u32(p + 36);
    uint32_t flags = rd_u32(p + 40);
    if (model != BU_TOK_MODEL_GPT2 && model != BU_TOK_MODEL_LLAMA) { set_err(err, errcap, "tokenizer blob: unknown model type %u", model); return BU_TOK_EFORMAT; }
    if (pre >= BU_TOK_PRE_COUNT) { set_err(err, errcap, "tokenizer blob: unknown pre-tokenizer id %u", pre); return BU_TOK_EFORMAT; }
    if ((model == BU_TOK_MODEL_LLAMA) != (pre == BU_TOK_PRE_DEFAULT)) {
        set_err(err, errcap, "tokenizer blob: pre-tokenizer '%s' does not fit model type %u", bu_tok_pre_name((int)pre), model);
        return BU_TOK_EFORMAT;
    }
    if (model == BU_TOK_MODEL_LLAMA && n_merges != 0) { set_err(err, errcap, "tokenizer blob: llama (SPM) model with %u merges", n_merges); return BU_TOK_EFORMAT; }
    if (flags & ~7u) { set_err(err, errcap, "tokenizer blob: unknown flag bits 0x%x", flags); return BU_TOK_EFORMAT; }
    if (model == BU_TOK_MODEL_GPT2 && (flags & 4u)) { set_err(err, errcap, "tokenizer blob: add_space_prefix with a gpt2 model"); return BU_TOK_EFORMAT; }
    if (n_vocab == 0 || n_vocab > 0x7FFFFFFEu) { set_err(err, errcap, "tokenizer blob: vocabulary size %u", n_vocab); return BU_TOK_EFORMAT; }
    uint32_t n_eog = rd_u32(p + 68);
    for (size_t i = 72; i < BLOB_HEADER_BYTES; i++)
        if (p[i]) { set_err(err, errcap, "tokenizer blob: reserved header byte %zu is not zero", i); return BU_TOK_EFORMAT; }

    /* every entry has a fixed minimum size, so the counts are bounded by the blob size before
     * anything is allocated from them */
    if ((uint64_t)BLOB_HEADER_BYTES + 12ull * n_vocab + 10ull * n_merges + 4ull * n_eog > n) {
        set_err(err, errcap, "tokenizer blob: %u tokens, %u merges and %u end-of-generation ids do not fit in %zu bytes",
                n_vocab, n_merges, n_eog, n);
        return BU_TOK_EFORMAT;
    }
    bu_tok *t = calloc(1, sizeof *t);
    if (!t) { set_err(err, errcap, "out of memory"); return BU_TOK_ENOMEM; }
    int rc = BU_TOK_ENOMEM;
    t->blob = malloc(n);
    t->vocab = calloc(n_vocab, sizeof *t->vocab);
    t->merges = n_merges ? calloc(n_merges, sizeof *t->merges) : NULL;
    if (!t->blob || !t->vocab || (n_merges && !t->merges)) goto oom;
    memcpy(t->blob, blob, n);
    p = t->blob;
    t->model = (int)model; t->pre = (int)pre;
    t->add_bos = (flags & 1u) != 0; t->add_eos = (flags & 2u) != 0; t->add_space_prefix = (flags & 4u) != 0;
    t->ignore_merges = pre == BU_TOK_PRE_LLAMA3;
    t->n_vocab = (int32_t)n_vocab;
    t->n_merges = n_merges;
    for (int k = 0; k < 6; k++) {
        int32_t id = (int32_t)rd_u32(p + 44 + 4 * k);
        if (id < -1 || id >= (int32_t)n_vocab) {
            set_err(err, errcap, "tokenizer blob: special token %d has id %d outside the vocabulary of %u", k, id, n_vocab);
            rc = BU_TOK_EFORMAT; goto fail;
        }
        t->special[k] = id;
    }

    size_t off = BLOB_HEADER_BYTES;
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (n - off < 12) { set_err(err, errcap, "tokenizer blob: vocabulary entry %u truncated", i); rc = BU_TOK_EFORMAT; goto fail; }
        uint32_t len = rd_u32(p + off);
        tok_entry *e = &t->vocab[i];
        e->score = rd_f32(p + off + 4);
        e->type = (int32_t)rd_u32(p + off + 8);
        off += 12;
        if (len > n - off) { set_err(err, errcap, "tokenizer blob: token %u text runs past the end", i); rc = BU_TOK_EFORMAT; goto fail; }
        if (e->type < 0 || e->type > BU_TOK_TYPE_BYTE) { set_err(err, errcap, "tokenizer blob: token %u has unknown type %d", i, e->type); rc = BU_TOK_EFORMAT; goto fail; }
        e->text = (const char *)p + off;
        e->len = len;
        off += len;
        unsigned b;
        if (e->type == BU_TOK_TYPE_BYTE && !is_byte_token_text(e->text, len, &b)) {
            set_err(err, errcap, "tokenizer blob: byte token %u is not of the form <0xXX>", i); rc = BU_TOK_EFORMAT; goto fail;
        }
    }
    for (uint32_t i = 0; i < n_merges; i++) {
        merge_entry *m = &t->merges[i];
        for (int side = 0; side < 2; side++) {
            if (n - off < 4) { set_err(err, errcap, "tokenizer blob: merge %u truncated", i); rc = BU_TOK_EFORMAT; goto fail; }
            uint32_t len = rd_u32(p + off);
            off += 4;
            if (len == 0 || len > n - off) { set_err(err, errcap, "tokenizer blob: merge %u has a bad length", i); rc = BU_TOK_EFORMAT; goto fail; }
            if (side == 0) { m->l = (const char *)p + off; m->ll = len; }
            else { m->r = (const char *)p + off; m->rl = len; }
            off += len;
        }
    }
    if ((n - off) / 4 < n_eog) { set_err(err, errcap, "tokenizer blob: end-of-generation list truncated"); rc = BU_TOK_EFORMAT; goto fail; }
    t->eog = p + off;
    t->n_eog = n_eog;
    for (uint32_t i = 0; i < n_eog; i++) {
        int32_t id = (int32_t)rd_u32(p + off + 4 * i);
        if (id < 0 || id >= (int32_t)n_vocab || (i && id <= (int32_t)rd_u32(p + off + 4 * (i - 1)))) {
            set_err(err, errcap, "tokenizer blob: end-of-generation id %d is out of range or out of order", id);
            rc = BU_TOK_EFORMAT; goto fail;
        }
    }
    off += 4 * (size_t)n_eog;
    if (off != n) { set_err(err, errcap, "tokenizer blob: %zu unread bytes at the end", n - off); rc = BU_TOK_EFORMAT; goto fail; }

    /* text -> id: a text given twice maps to the later id, as llama.cpp's token_to_id */
    size_t vs = table_size_for(n_vocab);
    t->vocab_slots = calloc(vs, sizeof *t->vocab_slots);
    if (!t->vocab_slots) goto oom;
    t->vocab_mask = vs - 1;
    for (uint32_t i = 0; i < n_vocab; i++) {
        const tok_entry *e = &t->vocab[i];
        size_t h = (size_t)fnv1a(e->text, e->len, FNV_SEED) & t->vocab_mask;
        for (;;) {
            uint32_t slot = t->vocab_slots[h];
            if (!slot) { t->vocab_slots[h] = i + 1; break; }
            const tok_entry *o = &t->vocab[slot - 1];
            if (o->len == e->len && memcmp(o->text, e->text, e->len) == 0) { t->vocab_slots[h] = i + 1; break; }
            h = (h + 1) & t->vocab_mask;
        }
    }
    /* (left, right) -> rank: the first occurrence keeps its rank */
    if (n_merges) {
        size_t ms = table_size_for(n_merges);
        t->merge_slots = calloc(ms, sizeof *t->merge_slots);
        if (!t->merge_slots) goto oom;
        t->merge_mask = ms - 1;
        for (uint32_t i = 0; i < n_merges; i++) {
            const merge_entry *m = &t->merges[i];
            size_t h = (size_t)merge_hash(m->l, m->ll, m->r, m->rl) & t->merge_mask;
            for (;;) {
                uint32_t slot = t->merge_slots[h];
                if (!slot) { t->merge_slots[h] = i + 1; break; }
                const merge_entry *o = &t->merges[slot - 1];
                if (o->ll == m->ll && o->rl == m->rl && !memcmp(o->l, m->l, m->ll) && !memcmp(o->r, m->r, m->rl)) break;
                h = (h + 1) & t->merge_mask;
            }
        }
    } else {
        t->merge_slots = calloc(1, sizeof *t->merge_slots);
        if (!t->merge_slots) goto oom;
        t->merge_mask = 0;
    }

    /* raw byte -> token: GPT-2 uses the byte's mapped character; SPM uses <0xXX>, else the
     * single-byte text (llama.cpp byte_to_token) */
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        size_t k;
        if (t->model == BU_TOK_MODEL_GPT2) {
            k = utf8_encode(gpt2_byte_to_cp(b), s);   /* code points < 0x800: 1 or 2 bytes */
            memcpy(t->byte_utf8[b], s, k);
            t->byte_utf8_len[b] = (unsigned char)k;
            t->byte_tok[b] = vocab_find(t, s, k);
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            int32_t id = vocab_find(t, s, 6);
            if (id == NO_ID) { s[0] = (char)b; id = vocab_find(t, s, 1); }
            t->byte_tok[b] = id;
        }
    }

    size_t ns = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        int ty = t->vocab[i].type;
        if ((ty == BU_TOK_TYPE_CONTROL || ty == BU_TOK_TYPE_USER_DEFINED || ty == BU_TOK_TYPE_UNKNOWN) && t->vocab[i].len) ns++;
    }
    t->specials = malloc((ns ? ns : 1) * sizeof *t->specials);
    int32_t *tmp = malloc((ns ? ns : 1) * sizeof *tmp);
    if (!t->specials || !tmp) { free(tmp); goto oom; }
    ns = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        int ty = t->vocab[i].type;
        if ((ty == BU_TOK_TYPE_CONTROL || ty == BU_TOK_TYPE_USER_DEFINED || ty == BU_TOK_TYPE_UNKNOWN) && t->vocab[i].len)
            t->specials[ns++] = (int32_t)i;
    }
    t->n_specials = ns;
    sort_specials(t, t->specials, tmp, ns);
    free(tmp);

    *out = t;
    return BU_TOK_OK;
oom:
    set_err(err, errcap, "out of memory loading the tokenizer");
    rc = BU_TOK_ENOMEM;
fail:
    bu_tok_free(t);
    return rc;
}

int32_t bu_tok_n_vocab(const bu_tok *t) { return t ? t->n_vocab : 0; }
int32_t bu_tok_special(const bu_tok *t, int which) {
    return (t && which >= 0 && which < 6) ? t->special[which] : -1;
}
int bu_tok_is_eog(const bu_tok *t, int32_t id) {
    if (!t || id < 0) return 0;
    uint32_t lo = 0, hi = t->n_eog;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int32_t v = (int32_t)rd_u32(t->eog + 4 * (size_t)mid);
        if (v == id) return 1;
        if (v < id) lo = mid + 1; else hi = mid;
    }
    return 0;
}
int bu_tok_model(const bu_tok *t) { return t ? t->model : 0; }
int bu_tok_pre(const bu_tok *t) { return t ? t->pre : -1; }
int bu_tok_add_bos(const bu_tok *t) { return t ? t->add_bos : 0; }
int bu_tok_add_eos(const bu_tok *t) { return t ? t->add_eos : 0; }
int bu_tok_token_type(const bu_tok *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return BU_TOK_EID;
    return t->vocab[id].type;
}

/* ------------------------------------------------------------------------------------------ */
/* pre-tokenizers: split a fragment's code points into pre-tokens (lengths in code points).    */
/* The rules are the regexes llama.cpp names per tokenizer.ggml.pre, with its hand-written     */
/* matcher semantics (src/unicode.cpp unicode_regex_split_custom_*).                            */

typedef struct {
    const uint32_t *cp;
    size_t end;          /* range is [0, end) of cp */
} cps_view;

#define OOR 0xFFFFFFFFu
static uint32_t cp_at(const cps_view *v, size_t i) { return i < v->end ? v->cp[i] : OOR; }
/* flags of a position; 0 outside the range; every in-range code point has UNI_IN set */
#define UNI_IN 8u
static unsigned fl_at(const cps_view *v, size_t i) { return i < v->end ? (uni_flags(v->cp[i]) | UNI_IN) : 0; }

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d ; case-insensitive for llama3/qwen2 (tolower on code points; the only
 * code points whose lowercase is one of s t m d r e v l are their ASCII capitals, which a test
 * checks against unicodedata). Returns the match length or 0. */
static size_t match_contraction(const cps_view *v, size_t pos, int ci) {
    if (cp_at(v, pos) != '\'' || pos + 1 >= v->end) return 0;
    uint32_t a = cp_at(v, pos + 1);
    if (ci) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < v->end) {
        uint32_t b = cp_at(v, pos + 2);
        if (ci) b = ascii_lower(b);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static int split_gpt2(const cps_view *v, ivec *out) {
    size_t pos = 0, prev = 0;
#define EMIT(e) do { size_t e_ = (e); if (e_ > prev) { int r_ = ivec_push(out, (int32_t)(e_ - prev)); if (r_) return r_; } prev = e_; pos = e_; } while (0)
    while (pos < v->end) {
        uint32_t c = cp_at(v, pos);
        unsigned f = fl_at(v, pos);
        size_t k = match_contraction(v, pos, 0);
        if (k) { EMIT(pos + k); continue; }
        unsigned f2 = c == ' ' ? fl_at(v, pos + 1) : f;
        if (f2 & UNI_LETTER) {
            size_t p = pos + (c == ' ');
            while (fl_at(v, p) & UNI_LETTER) p++;
            EMIT(p); continue;
        }
        if (f2 & UNI_NUMBER) {
            size_t p = pos + (c == ' ');
            while (fl_at(v, p) & UNI_NUMBER) p++;
            EMIT(p); continue;
        }
        if (!(f2 & (UNI_SPACE | UNI_LETTER | UNI_NUMBER)) && f2) {
            size_t p = pos + (c == ' ');
            for (;;) {
                unsigned g = fl_at(v, p);
                if ((g & (UNI_SPACE | UNI_LETTER | UNI_NUMBER)) || !g) break;
                p++;
            }
            EMIT(p); continue;
        }
        size_t nws = 0;
        while (fl_at(v, pos + nws) & UNI_SPACE) nws++;
        if (nws > 1 && cp_at(v, pos + nws) != OOR) { EMIT(pos + nws - 1); continue; }
        if (nws > 0) { EMIT(pos + nws); continue; }
        EMIT(pos + 1);
    }
    return BU_TOK_OK;
}

/* LLaMA 3 (max_digits 3) and Qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int split_llama3(const cps_view *v, ivec *out, size_t max_digits) {
    size_t pos = 0, prev = 0;
    while (pos < v->end) {
        uint32_t c = cp_at(v, pos);
        unsigned f = fl_at(v, pos);
        size_t k = match_contraction(v, pos, 1);
        if (k) { EMIT(pos + k); continue; }
        if (!(c == '\r' || c == '\n' || (f & UNI_NUMBER))) {
            if ((f & UNI_LETTER) || (fl_at(v, pos + 1) & UNI_LETTER)) {
                size_t p = pos + 1;
                while (fl_at(v, p) & UNI_LETTER) p++;
                EMIT(p); continue;
            }
        }
        if (f & UNI_NUMBER) {
            size_t p = pos, run = 0;
            while (fl_at(v, p) & UNI_NUMBER) {
                p++;
                if (++run >= max_digits) { EMIT(p); run = 0; }
            }
            EMIT(p); continue;
        }
        unsigned f2 = c == ' ' ? fl_at(v, pos + 1) : f;
        if (!(f2 & (UNI_SPACE | UNI_LETTER | UNI_NUMBER)) && f) {
            size_t p = pos + (c == ' ');
            for (;;) {
                unsigned g = fl_at(v, p);
                if ((g & (UNI_SPACE | UNI_LETTER | UNI_NUMBER)) || !g) break;
                p++;
            }
            while (cp_at(v, p) == '\r' || cp_at(v, p) == '\n') p++;
            EMIT(p); continue;
        }
        size_t nws = 0, last_rn = 0;
        while (fl_at(v, pos + nws) & UNI_SPACE) {
            uint32_t d = cp_at(v, pos + nws);
            if (d == '\r' || d == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { EMIT(last_rn); continue; }
        if (nws > 1 && cp_at(v, pos + nws) != OOR) { EMIT(pos + nws - 1); continue; }
        if (nws > 0) { EMIT(pos + nws); continue; }
        EMIT(pos + 1);
    }
    return BU_TOK_OK;
#undef EMIT
}

/* Split a fragment (code points cp[0..n)) into pre-tokens; lengths (code points) into out. */
static int pretokenize(const bu_tok *t, const uint32_t *cp, size_t n, ivec *out) {
    cps_view v = {cp, n};
    switch (t->pre) {
    case BU_TOK_PRE_GPT2: return split_gpt2(&v, out);
    case BU_TOK_PRE_LLAMA3: return split_llama3(&v, out, 3);
    case BU_TOK_PRE_QWEN2: return split_llama3(&v, out, 1);
    case BU_TOK_PRE_SMOLLM:
    case BU_TOK_PRE_STARCODER:
    case BU_TOK_PRE_REFACT: {
        /* first \p{N}: every number code point is a piece of its own, the text between them is
         * kept; then the GPT-2 rule inside each piece */
        size_t a = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i == n || (uni_flags(cp[i]) & UNI_NUMBER)) {
                if (i > a) {
                    cps_view w = {cp + a, i - a};
                    int rc = split_gpt2(&w, out);
                    if (rc) return rc;
                }
                if (i < n) { int rc = ivec_push(out, 1); if (rc) return rc; }
                a = i + 1;
            }
        }
        return BU_TOK_OK;
    }
    default: return BU_TOK_EFORMAT;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* merge engine shared by BPE (lowest rank first) and SPM (highest score first)                */

typedef struct { size_t off, n; int64_t prev, next; } sym;
typedef struct { int64_t left, right; size_t ln, rn; double key; } bigram;  /* smaller key pops first */
typedef struct { bigram *v; size_t n, cap; } heap;

static int bg_less(const bigram *a, const bigram *b) {
    if (a->key != b->key) return a->key < b->key;
    return a->left < b->left;
}
static int heap_push(heap *h, bigram b) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        bigram *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) return BU_TOK_ENOMEM;
        h->v = nv; h->cap = nc;
    }
    size_t i = h->n++;
    h->v[i] = b;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_less(&h->v[i], &h->v[p])) break;
        bigram tmp = h->v[i]; h->v[i] = h->v[p]; h->v[p] = tmp;
        i = p;
    }
    return BU_TOK_OK;
}
static bigram heap_pop(heap *h) {
    bigram top = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && bg_less(&h->v[l], &h->v[m])) m = l;
        if (r < h->n && bg_less(&h->v[r], &h->v[m])) m = r;
        if (m == i) break;
        bigram tmp = h->v[i]; h->v[i] = h->v[m]; h->v[m] = tmp;
        i = m;
    }
    return top;
}

typedef struct { sym *v; size_t n, cap; } symvec;
static int symvec_push(symvec *s, sym x) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        sym *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) return BU_TOK_ENOMEM;
        s->v = nv; s->cap = nc;
    }
    s->v[s->n++] = x;
    return BU_TOK_OK;
}

typedef struct {
    const bu_tok *t;
    const char *text;   /* the string the symbols index */
    symvec syms;
    heap q;
} merger;

static int try_bigram(merger *m, int64_t l, int64_t r) {
    if (l < 0 || r < 0) return BU_TOK_OK;
    const sym *a = &m->syms.v[l], *b = &m->syms.v[r];
    bigram g = {l, r, a->n, b->n, 0.0};
    if (m->t->model == BU_TOK_MODEL_GPT2) {
        int64_t rank = merge_rank(m->t, m->text + a->off, a->n, m->text + b->off, b->n);
        if (rank < 0) return BU_TOK_OK;
        g.key = (double)rank;
    } else {
        /* the two symbols are adjacent in the text, so their concatenation is contiguous */
        int32_t id = vocab_find(m->t, m->text + a->off, a->n + b->n);
        if (id == NO_ID) return BU_TOK_OK;
        g.key = -(double)m->t->vocab[id].score;
    }
    return heap_push(&m->q, g);
}

/* Merge the symbols of text[0..n) (split at UTF-8 character boundaries) until no pair merges. */
static int merge_run(merger *m, const char *text, size_t n) {
    m->text = text;
    m->syms.n = 0;
    m->q.n = 0;
    for (size_t off = 0; off < n;) {
        size_t k = utf8_len((unsigned char)text[off]);
        if (k > n - off) k = n - off;
        sym s = {off, k, (int64_t)m->syms.n - 1, off + k == n ? -1 : (int64_t)m->syms.n + 1};
        int rc = symvec_push(&m->syms, s);
        if (rc) return rc;
        off += k;
    }
    for (size_t i = 1; i < m->syms.n; i++) {
        int rc = try_bigram(m, (int64_t)i - 1, (int64_t)i);
        if (rc) return rc;
    }
    while (m->q.n) {
        bigram g = heap_pop(&m->q);
        sym *a = &m->syms.v[g.left], *b = &m->syms.v[g.right];
        if (a->n == 0 || b->n == 0 || a->n != g.ln || b->n != g.rn) continue;  /* stale */
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0) m->syms.v[b->next].prev = g.left;
        int rc = try_bigram(m, a->prev, g.left);
        if (!rc) rc = try_bigram(m, g.left, a->next);
        if (rc) return rc;
    }
    return BU_TOK_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* encode                                                                                     */

typedef struct { size_t off, n; int32_t id; } frag;   /* id >= 0: a special token; else text */
typedef struct { frag *v; size_t n, cap; } fragvec;
static int fragvec_push(fragvec *f, frag x) {
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv) return BU_TOK_ENOMEM;
        f->v = nv; f->cap = nc;
    }
    f->v[f->n++] = x;
    return BU_TOK_OK;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0 || nn > hn) return NULL;
    const char *end = h + hn - nn;
    for (const char *p = h; p <= end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

/* Split the text at every occurrence of a special token's text, longest token first (llama.cpp
 * tokenizer_st_partition). User-defined tokens are always matched; control and unknown tokens
 * only with parse_special. */
static int partition(const bu_tok *t, const char *text, size_t n, int parse_special, fragvec *out) {
    fragvec a = {0}, b = {0};
    int rc = BU_TOK_OK;
    if (n) rc = fragvec_push(&a, (frag){0, n, -1});
    for (size_t s = 0; s < t->n_specials && !rc; s++) {
        int32_t id = t->specials[s];
        const tok_entry *e = &t->vocab[id];
        if (!parse_special && e->type != BU_TOK_TYPE_USER_DEFINED) continue;
        b.n = 0;
        for (size_t i = 0; i < a.n && !rc; i++) {
            frag f = a.v[i];
            if (f.id >= 0) { rc = fragvec_push(&b, f); continue; }
            size_t off = f.off, left = f.n;
            for (;;) {
                const char *hit = find_bytes(text + off, left, e->text, e->len);
                if (!hit) { if (left) rc = fragvec_push(&b, (frag){off, left, -1}); break; }
                size_t h = (size_t)(hit - text);
                if (h > off) rc = fragvec_push(&b, (frag){off, h - off, -1});
                if (!rc) rc = fragvec_push(&b, (frag){0, 0, id});
                if (rc) break;
                left -= h - off + e->len;
                off = h + e->len;
            }
        }
        fragvec tmp = a; a = b; b = tmp;
    }
    free(b.v);
    if (rc) { free(a.v); return rc; }
    *out = a;
    return BU_TOK_OK;
}

static int emit_bytes(const bu_tok *t, const unsigned char *s, size_t n, ivec *out, char *err, size_t errcap) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[s[i]];
        if (id == NO_ID) {
            set_err(err, errcap, "the vocabulary has no token for byte 0x%02X", s[i]);
            return BU_TOK_EVOCAB;
        }
        int rc = ivec_push(out, id);
        if (rc) return rc;
    }
    return BU_TOK_OK;
}

/* byte-level BPE of one text fragment */
static int encode_gpt2(const bu_tok *t, const char *text, size_t n, ivec *out, merger *m, char *err, size_t errcap) {
    int rc = BU_TOK_OK;
    uint32_t *cp = malloc((n ? n : 1) * sizeof *cp);
    size_t *cpoff = malloc((n + 1) * sizeof *cpoff);
    ivec words = {0};
    bvec enc = {0};
    if (!cp || !cpoff) { rc = BU_TOK_ENOMEM; goto done; }
    size_t ncp = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_decode((const unsigned char *)text + i, n - i, &cp[ncp]);
        cpoff[ncp++] = i;
        i += k;   /* validated before: k > 0 */
    }
    cpoff[ncp] = n;
    rc = pretokenize(t, cp, ncp, &words);
    if (rc) goto done;
    size_t c0 = 0;
    for (size_t w = 0; w < words.n; w++) {
        size_t c1 = c0 + (size_t)words.v[w];
        const unsigned char *raw = (const unsigned char *)text + cpoff[c0];
        size_t rawn = cpoff[c1] - cpoff[c0];
        c0 = c1;
        /* byte-encode the pre-token: every byte becomes its GPT-2 character */
        enc.n = 0;
        for (size_t i = 0; i < rawn; i++)
            if ((rc = bvec_put(&enc, t->byte_utf8[raw[i]], t->byte_utf8_len[raw[i]]))) goto done;
        if (t->ignore_merges) {
            int32_t id = vocab_find(t, enc.v, enc.n);
            if (id != NO_ID) { if ((rc = ivec_push(out, id))) goto done; continue; }
        }
        if ((rc = merge_run(m, enc.v, enc.n))) goto done;
        for (int64_t i = m->syms.n ? 0 : -1; i >= 0; i = m->syms.v[i].next) {
            const sym *s = &m->syms.v[i];
            int32_t id = vocab_find(t, enc.v + s->off, s->n);
            if (id == NO_ID) {
                /* only a lone byte's character can be left unmerged and unknown: name the byte
                 * (llama.cpp drops it silently; we refuse) */
                uint32_t c = 0;
                utf8_decode((const unsigned char *)enc.v + s->off, s->n, &c);
                set_err(err, errcap, "byte 0x%02X of the text has no token in this vocabulary "
                        "(byte-level BPE); refusing to drop it", (unsigned)gpt2_cp_to_byte(c) & 0xFF);
                rc = BU_TOK_EVOCAB;
                goto done;
            }
            if ((rc = ivec_push(out, id))) goto done;
        }
    }
done:
    free(cp); free(cpoff); free(words.v); free(enc.v);
    return rc;
}

/* SentencePiece-style BPE of one text fragment (spaces already escaped to U+2581) */
static int encode_spm(const bu_tok *t, const char *text, size_t n, ivec *out, merger *m, char *err, size_t errcap) {
    int rc = merge_run(m, text, n);
    if (rc) return rc;
    for (int64_t i = m->syms.n ? 0 : -1; i >= 0; i = m->syms.v[i].next) {
        const sym *s = &m->syms.v[i];
        int32_t id = vocab_find(t, text + s->off, s->n);
        if (id != NO_ID) rc = ivec_push(out, id);
        else rc = emit_bytes(t, (const unsigned char *)text + s->off, s->n, out, err, errcap);
        if (rc) return rc;
    }
    return BU_TOK_OK;
}

static int encode_all(const bu_tok *t, const char *text, size_t n, unsigned flags, ivec *out, char *err, size_t errcap) {
    int rc;
    /* validate the whole input once: every later step may assume well-formed UTF-8 */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_decode((const unsigned char *)text + i, n - i, &cp);
        if (!k) {
            set_err(err, errcap, "text is not valid UTF-8 at byte offset %zu", i);
            return BU_TOK_EUTF8;
        }
        i += k;
    }
    if (flags & BU_TOK_ADD_SPECIAL && t->add_bos) {
        if (t->special[BU_TOK_SPECIAL_BOS] < 0) { set_err(err, errcap, "add_bos is set but the model has no BOS token"); return BU_TOK_ENOSPECIAL; }
        if ((rc = ivec_push(out, t->special[BU_TOK_SPECIAL_BOS]))) return rc;
    }
    fragvec frags = {0};
    if ((rc = partition(t, text, n, (flags & BU_TOK_PARSE_SPECIAL) != 0, &frags))) return rc;
    merger m = {t, NULL, {0}, {0}};
    bvec buf = {0};
    int prev_special = 1;   /* SPM: a fragment at the start or after a special token gets the space prefix */
    for (size_t i = 0; i < frags.n && !rc; i++) {
        frag f = frags.v[i];
        if (f.id >= 0) { rc = ivec_push(out, f.id); prev_special = 1; continue; }
        if (t->model == BU_TOK_MODEL_GPT2) {
            rc = encode_gpt2(t, text + f.off, f.n, out, &m, err, errcap);
        } else {
            buf.n = 0;
            if (t->add_space_prefix && prev_special) rc = bvec_put(&buf, "\xE2\x96\x81", 3);
            for (size_t j = 0; j < f.n && !rc; j++) {
                if (text[f.off + j] == ' ') rc = bvec_put(&buf, "\xE2\x96\x81", 3);
                else rc = bvec_put(&buf, text + f.off + j, 1);
            }
            if (!rc) rc = encode_spm(t, buf.v, buf.n, out, &m, err, errcap);
            prev_special = 0;
        }
    }
    free(frags.v); free(buf.v); free(m.syms.v); free(m.q.v);
    if (rc) return rc;
    if (flags & BU_TOK_ADD_SPECIAL && t->add_eos) {
        if (t->special[BU_TOK_SPECIAL_EOS] < 0) { set_err(err, errcap, "add_eos is set but the model has no EOS token"); return BU_TOK_ENOSPECIAL; }
        if ((rc = ivec_push(out, t->special[BU_TOK_SPECIAL_EOS]))) return rc;
    }
    return BU_TOK_OK;
}

int64_t bu_tok_encode(const bu_tok *t, const char *text, size_t n, unsigned flags,
                      int32_t *ids, size_t cap, char *err, size_t errcap) {
    if (!t || (!text && n) || (!ids && cap)) { set_err(err, errcap, "bu_tok_encode: null pointer"); return BU_TOK_ENULL; }
    if (n > (size_t)INT32_MAX) { set_err(err, errcap, "text of %zu bytes is longer than the 2 GiB this tokenizer accepts", n); return BU_TOK_ETOOLONG; }
    if (flags & ~(BU_TOK_ADD_SPECIAL | BU_TOK_PARSE_SPECIAL)) { set_err(err, errcap, "bu_tok_encode: unknown flags 0x%x", flags); return BU_TOK_EARG; }
    ivec out = {0};
    int rc = encode_all(t, text ? text : "", n, flags, &out, err, errcap);
    if (rc) {
        if (rc == BU_TOK_ENOMEM) set_err(err, errcap, "out of memory while encoding");
        free(out.v);
        return rc;
    }
    int64_t count = (int64_t)out.n;
    if (out.n <= cap && out.n) memcpy(ids, out.v, out.n * sizeof *ids);
    free(out.v);
    return count;
}

/* ------------------------------------------------------------------------------------------ */
/* decode                                                                                     */

static int64_t put_piece(const char *s, size_t n, char *buf, size_t cap) {
    if (n <= cap && n) memcpy(buf, s, n);
    return (int64_t)n;
}

int64_t bu_tok_decode(const bu_tok *t, int32_t id, unsigned flags, char *buf, size_t cap) {
    if (!t || (!buf && cap)) return BU_TOK_ENULL;
    if (flags & ~BU_TOK_DECODE_SPECIAL) return BU_TOK_EARG;
    if (id < 0 || id >= t->n_vocab) return BU_TOK_EID;
    const tok_entry *e = &t->vocab[id];
    switch (e->type) {
    case BU_TOK_TYPE_CONTROL:
    case BU_TOK_TYPE_UNKNOWN:
        return (flags & BU_TOK_DECODE_SPECIAL) ? put_piece(e->text, e->len, buf, cap) : 0;
    case BU_TOK_TYPE_USER_DEFINED:
        return put_piece(e->text, e->len, buf, cap);
    case BU_TOK_TYPE_BYTE: {
        unsigned b;
        is_byte_token_text(e->text, e->len, &b);   /* checked at load */
        char c = (char)b;
        return put_piece(&c, 1, buf, cap);
    }
    case BU_TOK_TYPE_NORMAL: break;
    default: return 0;   /* unused / undefined: no text, as llama.cpp */
    }
    size_t need = 0;
    if (t->model == BU_TOK_MODEL_LLAMA) {
        /* U+2581 (3 bytes) becomes one space */
        for (size_t i = 0; i < e->len;) {
            if (i + 3 <= e->len && memcmp(e->text + i, "\xE2\x96\x81", 3) == 0) {
                if (need < cap) buf[need] = ' ';
                need++; i += 3;
            } else {
                if (need < cap) buf[need] = e->text[i];
                need++; i++;
            }
        }
        return (int64_t)need;
    }
    for (size_t i = 0; i < e->len;) {
        uint32_t cp;
        size_t k = utf8_decode((const unsigned char *)e->text + i, e->len - i, &cp);
        int b = k ? gpt2_cp_to_byte(cp) : -1;
        if (b < 0) return BU_TOK_EDECODE;
        if (need < cap) buf[need] = (char)b;
        need++;
        i += k;
    }
    return (int64_t)need;
}
