/* bu_tok_decode (bu_tokenizer.h, docs/tokenizer.md "Decoding"): one token id to its bytes. */
#include <string.h>

#include "bu_tok_internal.h"

/* snprintf's protocol without the NUL: the piece's length, its bytes only when they fit */
static int64_t put_piece(const char *s, size_t n, char *buf, size_t cap)
{
    if (n <= cap && n) memcpy(buf, s, n);
    return (int64_t)n;
}

int64_t bu_tok_decode(const bu_tok *t, int32_t id, unsigned flags, char *buf, size_t cap)
{
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
        tok_is_byte_token_text(e->text, e->len, &b);   /* checked at load */
        char c = (char)b;
        return put_piece(&c, 1, buf, cap);
    }
    case BU_TOK_TYPE_NORMAL: break;
    default: return 0;   /* unused / undefined: no text, as llama.cpp */
    }
    size_t need = 0;
    if (t->model != BU_TOK_MODEL_GPT2) {
        /* llama, gemma4: U+2581 (3 bytes) becomes one space */
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
        size_t k = bu_utf8_decode((const unsigned char *)e->text + i, e->len - i, &cp);
        int b = k ? tok_gpt2_cp_to_byte(cp) : -1;
        if (b < 0) return BU_TOK_EDECODE;
        if (need < cap) buf[need] = (char)b;
        need++;
        i += k;
    }
    return (int64_t)need;
}
