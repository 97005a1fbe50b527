/* The merge engine shared by byte-level BPE (lowest merge rank first) and SentencePiece-style BPE
 * (highest token score first), as llama.cpp's llm_tokenizer_bpe / llm_tokenizer_spm: the text is
 * split into UTF-8 characters, every adjacent pair that can merge goes into a priority queue, and
 * the best pair (leftmost on ties) is merged until none is left. See bu_tok_internal.h. */
#include <stdlib.h>

#include "bu_tok_internal.h"

static int bg_less(const tok_bigram *a, const tok_bigram *b)
{
    if (a->key != b->key) return a->key < b->key;
    return a->left < b->left;
}

static void bg_swap(tok_bigram *a, tok_bigram *b)
{
    tok_bigram tmp = *a;
    *a = *b;
    *b = tmp;
}

static int heap_push(tok_heap *h, tok_bigram b)
{
    int rc = tok_heap_push(h, b);
    if (rc) return rc;
    for (size_t i = h->n - 1; i > 0;) {   /* sift up */
        size_t p = (i - 1) / 2;
        if (!bg_less(&h->v[i], &h->v[p])) break;
        bg_swap(&h->v[i], &h->v[p]);
        i = p;
    }
    return BU_TOK_OK;
}

static tok_bigram heap_pop(tok_heap *h)
{
    tok_bigram top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (size_t i = 0;;) {   /* sift down */
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && bg_less(&h->v[l], &h->v[m])) m = l;
        if (r < h->n && bg_less(&h->v[r], &h->v[m])) m = r;
        if (m == i) break;
        bg_swap(&h->v[i], &h->v[m]);
        i = m;
    }
    return top;
}

/* Queue the pair (l, r) if it merges: gpt2 and gemma4 keyed by merge rank, llama by minus the
 * score of the token their concatenation forms. */
static int try_bigram(tok_merger *m, int64_t l, int64_t r)
{
    if (l < 0 || r < 0) return BU_TOK_OK;
    const tok_sym *a = &m->syms.v[l], *b = &m->syms.v[r];
    tok_bigram g = {l, r, a->n, b->n, 0.0};
    if (m->t->model != BU_TOK_MODEL_LLAMA) {
        int64_t rank = tok_merge_rank(m->t, m->text + a->off, a->n, m->text + b->off, b->n);
        if (rank < 0) return BU_TOK_OK;
        g.key = (double)rank;
    } else {
        /* the two symbols are adjacent in the text, so their concatenation is contiguous */
        int32_t id = tok_vocab_find(m->t, m->text + a->off, a->n + b->n);
        if (id == NO_ID) return BU_TOK_OK;
        g.key = -(double)m->t->vocab[id].score;
    }
    return heap_push(&m->q, g);
}

int tok_merge_run(tok_merger *m, const char *text, size_t n)
{
    m->text = text;
    m->syms.n = 0;
    m->q.n = 0;
    for (size_t off = 0; off < n;) {
        size_t k = tok_utf8_len((unsigned char)text[off]);
        if (k > n - off) k = n - off;
        tok_sym s = {off, k, (int64_t)m->syms.n - 1, off + k == n ? -1 : (int64_t)m->syms.n + 1};
        int rc = tok_symvec_push(&m->syms, s);
        if (rc) return rc;
        off += k;
    }
    for (size_t i = 1; i < m->syms.n; i++) {
        int rc = try_bigram(m, (int64_t)i - 1, (int64_t)i);
        if (rc) return rc;
    }
    while (m->q.n) {
        tok_bigram g = heap_pop(&m->q);
        tok_sym *a = &m->syms.v[g.left], *b = &m->syms.v[g.right];
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

void tok_merger_free(tok_merger *m)
{
    free(m->syms.v);
    free(m->q.v);
    m->syms = (tok_symvec){0};
    m->q = (tok_heap){0};
}
