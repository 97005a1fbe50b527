/* Loading the tokenizer blob (docs/tokenizer.md "Blob format", written by
 * bringup/formats/tokenizer_pack.py): every field is checked before it is used, so a truncated or
 * corrupted blob is a BU_TOK_EFORMAT with a message, never a read out of bounds. Also the
 * accessors of a loaded bu_tok. */
#include <stdlib.h>
#include <string.h>

#include "bu_tok_internal.h"

#define BLOB_HEADER_BYTES 80u

/* The header's counts and flags (byte offsets in docs/tokenizer.md). */
typedef struct {
    uint32_t model, pre, n_vocab, n_merges, flags, n_eog;
} blob_header;

const char *bu_tok_pre_name(int pre)
{
    static const char *const names[BU_TOK_PRE_COUNT] = {
        "default", "gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "refact", "falcon", "deepseek-llm",
        "deepseek-coder", "qwen35", "gemma4"};
    return pre >= 0 && pre < BU_TOK_PRE_COUNT ? names[pre] : NULL;
}

const char *bu_tok_strerror(int code)
{
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

#define FORMAT_ERROR(...) bu_errf(err, errcap, BU_TOK_EFORMAT, "tokenizer blob: " __VA_ARGS__)

static int read_header(const unsigned char *p, size_t n, blob_header *h, char *err, size_t errcap)
{
    if (n < BLOB_HEADER_BYTES) return FORMAT_ERROR("%zu bytes, shorter than the %u-byte header", n, BLOB_HEADER_BYTES);
    if (memcmp(p, BU_TOK_BLOB_MAGIC, 8) != 0) return FORMAT_ERROR("bad magic");
    uint32_t version = bu_rd_u32(p + 8), hdr = bu_rd_u32(p + 12);
    uint64_t total = bu_rd_u64(p + 16);
    if (version != BU_TOK_BLOB_VERSION)
        return FORMAT_ERROR("version %u, this build reads version %u", version, BU_TOK_BLOB_VERSION);
    if (hdr != BLOB_HEADER_BYTES) return FORMAT_ERROR("header size %u, expected %u", hdr, BLOB_HEADER_BYTES);
    if (total != n)
        return FORMAT_ERROR("header says %llu bytes, got %zu (truncated or padded)", (unsigned long long)total, n);
    *h = (blob_header){bu_rd_u32(p + 24), bu_rd_u32(p + 28), bu_rd_u32(p + 32), bu_rd_u32(p + 36),
                       bu_rd_u32(p + 40), bu_rd_u32(p + 68)};
    if (h->model != BU_TOK_MODEL_GPT2 && h->model != BU_TOK_MODEL_LLAMA && h->model != BU_TOK_MODEL_GEMMA4)
        return FORMAT_ERROR("unknown model type %u", h->model);
    if (h->pre >= BU_TOK_PRE_COUNT) return FORMAT_ERROR("unknown pre-tokenizer id %u", h->pre);
    /* llama (SPM) has no pre-tokenizer, gemma4 only its own, gpt2 any other */
    int pre_fits = h->model == BU_TOK_MODEL_LLAMA ? h->pre == BU_TOK_PRE_DEFAULT
                 : h->model == BU_TOK_MODEL_GEMMA4 ? h->pre == BU_TOK_PRE_GEMMA4 : h->pre != BU_TOK_PRE_GEMMA4;
    if (!pre_fits)
        return FORMAT_ERROR("pre-tokenizer '%s' does not fit model type %u", bu_tok_pre_name((int)h->pre), h->model);
    if (h->model == BU_TOK_MODEL_LLAMA && h->n_merges != 0)
        return FORMAT_ERROR("llama (SPM) model with %u merges", h->n_merges);
    if (h->flags & ~7u) return FORMAT_ERROR("unknown flag bits 0x%x", h->flags);
    if (h->model != BU_TOK_MODEL_LLAMA && (h->flags & 4u))
        return FORMAT_ERROR("add_space_prefix with a model type (%u) that has no space prefix", h->model);
    if (h->n_vocab == 0 || h->n_vocab > 0x7FFFFFFEu) return FORMAT_ERROR("vocabulary size %u", h->n_vocab);
    for (size_t i = 72; i < BLOB_HEADER_BYTES; i++)
        if (p[i]) return FORMAT_ERROR("reserved header byte %zu is not zero", i);
    /* every entry has a fixed minimum size, so the counts are bounded by the blob size before
     * anything is allocated from them */
    if ((uint64_t)BLOB_HEADER_BYTES + 12ull * h->n_vocab + 10ull * h->n_merges + 4ull * h->n_eog > n)
        return FORMAT_ERROR("%u tokens, %u merges and %u end-of-generation ids do not fit in %zu bytes",
                            h->n_vocab, h->n_merges, h->n_eog, n);
    return BU_TOK_OK;
}

/* Special token ids (header offset 44), the vocabulary, the merges and the end-of-generation list
 * of t's blob copy (n bytes), each checked against the bytes that are left. */
static int read_tables(bu_tok *t, size_t n, char *err, size_t errcap)
{
    const unsigned char *p = t->blob;
    for (int k = 0; k < 6; k++) {
        int32_t id = (int32_t)bu_rd_u32(p + 44 + 4 * k);
        if (id < -1 || id >= t->n_vocab)
            return FORMAT_ERROR("special token %d has id %d outside the vocabulary of %d", k, id, t->n_vocab);
        t->special[k] = id;
    }
    size_t off = BLOB_HEADER_BYTES;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (n - off < 12) return FORMAT_ERROR("vocabulary entry %d truncated", i);
        uint32_t len = bu_rd_u32(p + off);
        tok_entry *e = &t->vocab[i];
        e->score = bu_rd_f32(p + off + 4);
        e->type = (int32_t)bu_rd_u32(p + off + 8);
        off += 12;
        if (len > n - off) return FORMAT_ERROR("token %d text runs past the end", i);
        if (e->type < 0 || e->type > BU_TOK_TYPE_BYTE) return FORMAT_ERROR("token %d has unknown type %d", i, e->type);
        e->text = (const char *)p + off;
        e->len = len;
        off += len;
        unsigned b;
        if (e->type == BU_TOK_TYPE_BYTE && !tok_is_byte_token_text(e->text, len, &b))
            return FORMAT_ERROR("byte token %d is not of the form <0xXX>", i);
    }
    for (uint32_t i = 0; i < t->n_merges; i++) {
        merge_entry *m = &t->merges[i];
        for (int side = 0; side < 2; side++) {
            if (n - off < 4) return FORMAT_ERROR("merge %u truncated", i);
            uint32_t len = bu_rd_u32(p + off);
            off += 4;
            if (len == 0 || len > n - off) return FORMAT_ERROR("merge %u has a bad length", i);
            if (side == 0) { m->l = (const char *)p + off; m->ll = len; }
            else { m->r = (const char *)p + off; m->rl = len; }
            off += len;
        }
    }
    if ((n - off) / 4 < t->n_eog) return FORMAT_ERROR("end-of-generation list truncated");
    t->eog = p + off;
    for (uint32_t i = 0; i < t->n_eog; i++) {
        int32_t id = (int32_t)bu_rd_u32(p + off + 4 * i);
        if (id < 0 || id >= t->n_vocab || (i && id <= (int32_t)bu_rd_u32(p + off + 4 * (i - 1))))
            return FORMAT_ERROR("end-of-generation id %d is out of range or out of order", id);
    }
    off += 4 * (size_t)t->n_eog;
    if (off != n) return FORMAT_ERROR("%zu unread bytes at the end", n - off);
    return BU_TOK_OK;
}

/* stable merge sort (qsort is not stable, and a comparator would need global state) */
static void sort_specials(const bu_tok *t, int32_t *a, int32_t *tmp, size_t n)
{
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

/* The tokens matched in the text before tokenizing (control, user-defined, unknown; not empty),
 * longest text first. BU_TOK_OK or BU_TOK_ENOMEM. */
static int build_specials(bu_tok *t)
{
    size_t ns = 0;
    t->specials = malloc((size_t)t->n_vocab * sizeof *t->specials);
    if (!t->specials) return BU_TOK_ENOMEM;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->vocab[i].type;
        if ((ty == BU_TOK_TYPE_CONTROL || ty == BU_TOK_TYPE_USER_DEFINED || ty == BU_TOK_TYPE_UNKNOWN) && t->vocab[i].len)
            t->specials[ns++] = i;
    }
    int32_t *shrunk = realloc(t->specials, (ns ? ns : 1) * sizeof *t->specials);
    if (shrunk) t->specials = shrunk;   /* else the larger array stays, as valid */
    int32_t *tmp = malloc((ns ? ns : 1) * sizeof *tmp);
    if (!tmp) return BU_TOK_ENOMEM;
    t->n_specials = ns;
    sort_specials(t, t->specials, tmp, ns);
    free(tmp);
    return BU_TOK_OK;
}

void bu_tok_free(bu_tok *t)
{
    if (!t) return;
    free(t->blob); free(t->vocab); free(t->merges);
    free(t->vocab_slots); free(t->merge_slots); free(t->specials);
    free(t);
}

int bu_tok_load(const void *blob, size_t n, bu_tok **out, char *err, size_t errcap)
{
    if (!out) return bu_errf(err, errcap, BU_TOK_ENULL, "bu_tok_load: out is NULL");
    *out = NULL;
    if (!blob) return bu_errf(err, errcap, BU_TOK_ENULL, "bu_tok_load: blob is NULL");
    blob_header h = {0};
    int rc = read_header(blob, n, &h, err, errcap);
    if (rc) return rc;
    bu_tok *t = calloc(1, sizeof *t);
    if (!t) return bu_errf(err, errcap, BU_TOK_ENOMEM, "out of memory");
    t->blob = malloc(n);
    t->vocab = calloc(h.n_vocab, sizeof *t->vocab);
    t->merges = h.n_merges ? calloc(h.n_merges, sizeof *t->merges) : NULL;
    rc = BU_TOK_ENOMEM;
    if (!t->blob || !t->vocab || (h.n_merges && !t->merges)) goto fail;
    memcpy(t->blob, blob, n);
    t->model = (int)h.model; t->pre = (int)h.pre;
    t->add_bos = (h.flags & 1u) != 0; t->add_eos = (h.flags & 2u) != 0; t->add_space_prefix = (h.flags & 4u) != 0;
    t->ignore_merges = h.pre == BU_TOK_PRE_LLAMA3;
    t->n_vocab = (int32_t)h.n_vocab;
    t->n_merges = h.n_merges;
    t->n_eog = h.n_eog;
    if ((rc = read_tables(t, n, err, errcap)) || (rc = tok_build_lookups(t)) || (rc = build_specials(t))) goto fail;
    *out = t;
    return BU_TOK_OK;
fail:
    if (rc == BU_TOK_ENOMEM) bu_errf(err, errcap, rc, "out of memory loading the tokenizer");
    bu_tok_free(t);
    return rc;
}

int32_t bu_tok_n_vocab(const bu_tok *t) { return t ? t->n_vocab : 0; }
int32_t bu_tok_special(const bu_tok *t, int which) { return (t && which >= 0 && which < 6) ? t->special[which] : -1; }

int bu_tok_is_eog(const bu_tok *t, int32_t id)
{
    if (!t || id < 0) return 0;
    uint32_t lo = 0, hi = t->n_eog;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int32_t v = (int32_t)bu_rd_u32(t->eog + 4 * (size_t)mid);
        if (v == id) return 1;
        if (v < id) lo = mid + 1; else hi = mid;
    }
    return 0;
}

int bu_tok_model(const bu_tok *t) { return t ? t->model : 0; }
int bu_tok_pre(const bu_tok *t) { return t ? t->pre : -1; }
int bu_tok_add_bos(const bu_tok *t) { return t ? t->add_bos : 0; }
int bu_tok_add_eos(const bu_tok *t) { return t ? t->add_eos : 0; }

int bu_tok_token_type(const bu_tok *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return BU_TOK_EID;
    return t->vocab[id].type;
}
