/* bu_tok_encode (bu_tokenizer.h, docs/tokenizer.md "Encoding"): validate UTF-8, split at special
 * tokens, then byte-level BPE (gpt2), BPE over raw UTF-8 (gemma4) or SentencePiece-style BPE
 * (llama) per text fragment. */
#include <stdlib.h>
#include <string.h>

#include "bu_tok_internal.h"

#define SPM_SPACE "\xE2\x96\x81"   /* U+2581, SentencePiece's stand-in for a space */

typedef struct { size_t off, n; int32_t id; } frag;   /* id >= 0: a special token; else text */
BU_VEC(fragvec, frag, BU_TOK_ENOMEM)

static int put(bu_str *b, const void *bytes, size_t n)
{
    return bu_str_add(b, bytes, n) ? BU_TOK_ENOMEM : BU_TOK_OK;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
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
static int partition(const bu_tok *t, const char *text, size_t n, int parse_special, fragvec *out)
{
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

static int emit_bytes(const bu_tok *t, const unsigned char *s, size_t n, ivec *out, char *err, size_t errcap)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[s[i]];
        if (id == NO_ID) return bu_errf(err, errcap, BU_TOK_EVOCAB, "the vocabulary has no token for byte 0x%02X", s[i]);
        int rc = ivec_push(out, id);
        if (rc) return rc;
    }
    return BU_TOK_OK;
}

/* The merged symbols of m, looked up in the vocabulary, appended to out. */
static int emit_symbols(const bu_tok *t, const tok_merger *m, ivec *out, char *err, size_t errcap)
{
    for (int64_t i = m->syms.n ? 0 : -1; i >= 0; i = m->syms.v[i].next) {
        const tok_sym *s = &m->syms.v[i];
        int32_t id = tok_vocab_find(t, m->text + s->off, s->n);
        int rc;
        if (id != NO_ID) {
            rc = ivec_push(out, id);
        } else if (t->model != BU_TOK_MODEL_GPT2) {
            rc = emit_bytes(t, (const unsigned char *)m->text + s->off, s->n, out, err, errcap);   /* byte fallback */
        } else {
            /* only a lone byte's character can be left unmerged and unknown: name the byte
             * (llama.cpp drops it silently; we refuse) */
            uint32_t c = 0;
            bu_utf8_decode((const unsigned char *)m->text + s->off, s->n, &c);
            rc = bu_errf(err, errcap, BU_TOK_EVOCAB, "byte 0x%02X of the text has no token in this vocabulary "
                         "(byte-level BPE); refusing to drop it", (unsigned)tok_gpt2_cp_to_byte(c) & 0xFF);
        }
        if (rc) return rc;
    }
    return BU_TOK_OK;
}

/* The bytes BPE merges for one pre-token raw[0..n), into enc: gpt2 maps every byte to its GPT-2
 * character; gemma4 keeps the UTF-8 and writes a space as U+2581 (llama.cpp's escape_whitespaces). */
static int bpe_symbols_text(const bu_tok *t, const unsigned char *raw, size_t n, bu_str *enc)
{
    int rc = BU_TOK_OK;
    enc->n = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (t->model == BU_TOK_MODEL_GPT2) rc = put(enc, t->byte_utf8[raw[i]], t->byte_utf8_len[raw[i]]);
        else rc = raw[i] == ' ' ? put(enc, SPM_SPACE, 3) : put(enc, raw + i, 1);
    }
    return rc;
}

/* The one token of a whole pre-token, when the model takes it unmerged: llama-bpe's ignore_merges
 * (any pre-token in the vocabulary), gemma4's newline runs (llama.cpp llm_tokenizer_bpe_session). */
static int32_t whole_token(const bu_tok *t, const char *s, size_t n)
{
    if (t->model == BU_TOK_MODEL_GEMMA4) {
        for (size_t i = 0; i < n; i++)
            if (s[i] != '\n') return NO_ID;
        return tok_vocab_find(t, s, n);
    }
    return t->ignore_merges ? tok_vocab_find(t, s, n) : NO_ID;
}

/* BPE with ranked merges of one text fragment: byte-level (gpt2) or over raw UTF-8 (gemma4) */
static int encode_bpe(const bu_tok *t, const char *text, size_t n, ivec *out, tok_merger *m, char *err,
                      size_t errcap)
{
    int rc = BU_TOK_OK;
    uint32_t *cp = malloc((n ? n : 1) * sizeof *cp);
    size_t *cpoff = malloc((n + 1) * sizeof *cpoff);
    ivec words = {0};
    bu_str enc = {0};
    if (!cp || !cpoff) { rc = BU_TOK_ENOMEM; goto done; }
    size_t ncp = 0;
    for (size_t i = 0; i < n;) {
        size_t k = bu_utf8_decode((const unsigned char *)text + i, n - i, &cp[ncp]);
        cpoff[ncp++] = i;
        i += k;   /* validated before: k > 0 */
    }
    cpoff[ncp] = n;
    rc = tok_pretokenize(t, cp, ncp, &words);
    if (rc) goto done;
    size_t c0 = 0;
    for (size_t w = 0; w < words.n; w++) {
        size_t c1 = c0 + (size_t)words.v[w];
        const unsigned char *raw = (const unsigned char *)text + cpoff[c0];
        size_t rawn = cpoff[c1] - cpoff[c0];
        c0 = c1;
        if ((rc = bpe_symbols_text(t, raw, rawn, &enc))) goto done;
        int32_t id = whole_token(t, enc.p, enc.n);
        if (id != NO_ID) { if ((rc = ivec_push(out, id))) goto done; continue; }
        if ((rc = tok_merge_run(m, enc.p, enc.n)) || (rc = emit_symbols(t, m, out, err, errcap))) goto done;
    }
done:
    free(cp); free(cpoff); free(words.v); free(enc.p);
    return rc;
}

/* SentencePiece-style BPE of one text fragment: spaces become U+2581, and a U+2581 is prepended
 * with add_space_prefix when the fragment is the first or follows a special token */
static int encode_spm(const bu_tok *t, const char *text, size_t n, int prefix, bu_str *buf, ivec *out,
                      tok_merger *m, char *err, size_t errcap)
{
    int rc = BU_TOK_OK;
    buf->n = 0;
    if (t->add_space_prefix && prefix) rc = put(buf, SPM_SPACE, 3);
    for (size_t j = 0; j < n && !rc; j++) rc = text[j] == ' ' ? put(buf, SPM_SPACE, 3) : put(buf, text + j, 1);
    if (!rc) rc = tok_merge_run(m, buf->p, buf->n);
    return rc ? rc : emit_symbols(t, m, out, err, errcap);
}

/* The BOS (add_bos) or EOS (add_eos) id, when BU_TOK_ADD_SPECIAL asks for it. */
static int add_special(const bu_tok *t, unsigned flags, int wanted, int which, ivec *out, char *err, size_t errcap)
{
    if (!(flags & BU_TOK_ADD_SPECIAL) || !wanted) return BU_TOK_OK;
    if (t->special[which] < 0)
        return bu_errf(err, errcap, BU_TOK_ENOSPECIAL, "%s is set but the model has no %s token",
                       which == BU_TOK_SPECIAL_BOS ? "add_bos" : "add_eos", which == BU_TOK_SPECIAL_BOS ? "BOS" : "EOS");
    return ivec_push(out, t->special[which]);
}

static int encode_all(const bu_tok *t, const char *text, size_t n, unsigned flags, ivec *out, char *err,
                      size_t errcap)
{
    int rc;
    /* validate the whole input once: every later step may assume well-formed UTF-8 */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = bu_utf8_decode((const unsigned char *)text + i, n - i, &cp);
        if (!k) return bu_errf(err, errcap, BU_TOK_EUTF8, "text is not valid UTF-8 at byte offset %zu", i);
        i += k;
    }
    if ((rc = add_special(t, flags, t->add_bos, BU_TOK_SPECIAL_BOS, out, err, errcap))) return rc;
    fragvec frags = {0};
    if ((rc = partition(t, text, n, (flags & BU_TOK_PARSE_SPECIAL) != 0, &frags))) return rc;
    tok_merger m = {t, NULL, {0}, {0}};
    bu_str buf = {0};
    int prev_special = 1;   /* SPM: a fragment at the start or after a special token gets the space prefix */
    for (size_t i = 0; i < frags.n && !rc; i++) {
        frag f = frags.v[i];
        if (f.id >= 0) {
            rc = ivec_push(out, f.id);
            prev_special = 1;
        } else if (t->model != BU_TOK_MODEL_LLAMA) {
            rc = encode_bpe(t, text + f.off, f.n, out, &m, err, errcap);
        } else {
            rc = encode_spm(t, text + f.off, f.n, prev_special, &buf, out, &m, err, errcap);
            prev_special = 0;
        }
    }
    free(frags.v); free(buf.p); tok_merger_free(&m);
    if (rc) return rc;
    return add_special(t, flags, t->add_eos, BU_TOK_SPECIAL_EOS, out, err, errcap);
}

int64_t bu_tok_encode(const bu_tok *t, const char *text, size_t n, unsigned flags,
                      int32_t *ids, size_t cap, char *err, size_t errcap)
{
    if (!t || (!text && n) || (!ids && cap)) return bu_errf(err, errcap, BU_TOK_ENULL, "bu_tok_encode: null pointer");
    if (n > (size_t)INT32_MAX)
        return bu_errf(err, errcap, BU_TOK_ETOOLONG, "text of %zu bytes is longer than the 2 GiB this tokenizer accepts", n);
    if (flags & ~(BU_TOK_ADD_SPECIAL | BU_TOK_PARSE_SPECIAL))
        return bu_errf(err, errcap, BU_TOK_EARG, "bu_tok_encode: unknown flags 0x%x", flags);
    ivec out = {0};
    int rc = encode_all(t, text ? text : "", n, flags, &out, err, errcap);
    if (rc) {
        if (rc == BU_TOK_ENOMEM) bu_errf(err, errcap, rc, "out of memory while encoding");
        free(out.v);
        return rc;
    }
    int64_t count = (int64_t)out.n;
    if (out.n <= cap && out.n) memcpy(ids, out.v, out.n * sizeof *ids);
    free(out.v);
    return count;
}
