/* The tokenizer's lookups (bu_tok_internal.h): text -> token id and (left, right) -> merge rank,
 * as open-addressing hash tables (FNV-1a, linear probing; slots hold index + 1, 0 = empty), and
 * the raw byte -> token maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bu_tok_internal.h"

/* FNV-1a, 64-bit (Fowler, Noll, Vo): offset basis and prime of the specification. */
#define FNV_SEED 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv1a(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= FNV_PRIME; }
    return h;
}

static uint64_t merge_hash(const char *l, size_t ll, const char *r, size_t rl)
{
    uint64_t h = fnv1a(l, ll, FNV_SEED);
    h ^= 0xFFu; h *= FNV_PRIME;   /* separator: (ab, c) and (a, bc) hash apart */
    return fnv1a(r, rl, h);
}

static int same_text(const tok_entry *a, const char *s, size_t n)
{
    return a->len == n && memcmp(a->text, s, n) == 0;
}

static int same_merge(const merge_entry *a, const char *l, size_t ll, const char *r, size_t rl)
{
    return a->ll == ll && a->rl == rl && memcmp(a->l, l, ll) == 0 && memcmp(a->r, r, rl) == 0;
}

/* A table of at least 2n + 1 slots (load <= 1/2), a power of two so that & mask is the modulo. */
static uint32_t *new_table(size_t n, size_t *mask)
{
    size_t s = 16;
    while (s < 2 * n + 1) s <<= 1;
    *mask = s - 1;
    return calloc(s, sizeof(uint32_t));
}

int32_t tok_vocab_find(const bu_tok *t, const char *s, size_t n)
{
    for (size_t i = (size_t)fnv1a(s, n, FNV_SEED) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        uint32_t slot = t->vocab_slots[i];
        if (!slot) return NO_ID;
        if (same_text(&t->vocab[slot - 1], s, n)) return (int32_t)(slot - 1);
    }
}

int64_t tok_merge_rank(const bu_tok *t, const char *l, size_t ll, const char *r, size_t rl)
{
    for (size_t i = (size_t)merge_hash(l, ll, r, rl) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        uint32_t slot = t->merge_slots[i];
        if (!slot) return -1;
        if (same_merge(&t->merges[slot - 1], l, ll, r, rl)) return (int64_t)(slot - 1);
    }
}

/* raw byte -> token: GPT-2 uses the byte's mapped character; SPM uses <0xXX>, else the
 * single-byte text (llama.cpp byte_to_token); gemma4 only <0xXX> (llama.cpp's BPE byte fallback) */
static void build_byte_maps(bu_tok *t)
{
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        if (t->model == BU_TOK_MODEL_GPT2) {
            size_t k = tok_utf8_encode(tok_gpt2_byte_to_cp(b), s);   /* code points < 0x800: 1 or 2 bytes */
            memcpy(t->byte_utf8[b], s, k);
            t->byte_utf8_len[b] = (unsigned char)k;
            t->byte_tok[b] = tok_vocab_find(t, s, k);
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            int32_t id = tok_vocab_find(t, s, 6);
            if (id == NO_ID && t->model == BU_TOK_MODEL_LLAMA) { s[0] = (char)b; id = tok_vocab_find(t, s, 1); }
            t->byte_tok[b] = id;
        }
    }
}

int tok_build_lookups(bu_tok *t)
{
    /* text -> id: a text given twice maps to the later id, as llama.cpp's token_to_id */
    if (!(t->vocab_slots = new_table((size_t)t->n_vocab, &t->vocab_mask))) return BU_TOK_ENOMEM;
    for (uint32_t i = 0; i < (uint32_t)t->n_vocab; i++) {
        const tok_entry *e = &t->vocab[i];
        size_t h = (size_t)fnv1a(e->text, e->len, FNV_SEED) & t->vocab_mask;
        while (t->vocab_slots[h] && !same_text(&t->vocab[t->vocab_slots[h] - 1], e->text, e->len))
            h = (h + 1) & t->vocab_mask;
        t->vocab_slots[h] = i + 1;   /* an empty slot, or the same text: the later id wins */
    }
    /* (left, right) -> rank: the first occurrence keeps its rank (a model without merges gets an
     * empty table, so a lookup needs no special case) */
    if (!(t->merge_slots = new_table(t->n_merges, &t->merge_mask))) return BU_TOK_ENOMEM;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        const merge_entry *m = &t->merges[i];
        size_t h = (size_t)merge_hash(m->l, m->ll, m->r, m->rl) & t->merge_mask;
        while (t->merge_slots[h] && !same_merge(&t->merges[t->merge_slots[h] - 1], m->l, m->ll, m->r, m->rl))
            h = (h + 1) & t->merge_mask;
        if (!t->merge_slots[h]) t->merge_slots[h] = i + 1;
    }
    build_byte_maps(t);
    return BU_TOK_OK;
}
