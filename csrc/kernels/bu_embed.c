/*
 * bu_embed.c - token embedding lookup: dequantize one table row per token, then scale.
 */
#include "bu_internal.h"

static int embed(int32_t type, const int32_t *tokens, const void *table, float *out,
                 int64_t n_tokens, int64_t n_embd, int64_t n_vocab, float scale, void *ws, size_t ws_cap) {
    (void)ws; (void)ws_cap; /* no scratch: rows dequantize straight into out */
    const bu_format_info *f = bu__format(type);
    size_t row_bytes, table_bytes, out_bytes, tok_bytes;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n_embd) || !bu__dim_ok(n_vocab)) return BU_ERR_ARG;
    if (bu_row_bytes(type, n_embd, &row_bytes) != BU_OK) return BU_ERR_ARG;
    if (!bu__bytes(n_vocab, (int64_t)row_bytes, 1, &table_bytes)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_embd, sizeof(float), &out_bytes)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, 1, sizeof(int32_t), &tok_bytes)) return BU_ERR_ARG;
    if (n_tokens == 0) return BU_OK;
    if (!tokens || !table || !out) return BU_ERR_NULL;
    if (bu__overlap(out, out_bytes, table, table_bytes) || bu__overlap(out, out_bytes, tokens, tok_bytes))
        return BU_ERR_ARG;
    /* validate every token before writing anything */
    for (int64_t t = 0; t < n_tokens; t++)
        if (tokens[t] < 0 || (int64_t)tokens[t] >= n_vocab) return BU_ERR_ARG;
    const int64_t nb = n_embd / f->block_elems;
    for (int64_t t = 0; t < n_tokens; t++) {
        float *o = out + t * n_embd;
        f->dequant((const uint8_t *)table + (size_t)tokens[t] * row_bytes, o, nb);
        for (int64_t i = 0; i < n_embd; i++) o[i] *= scale;
    }
    return BU_OK;
}

#define BU_EMBED(NAME, name, VD, vd)                                                               \
    int bu_embed_##name##_scalar(BU_EMBED_ARGS) {                                                   \
        return embed(BU_TYPE_##NAME, tokens, table, out, n_tokens, n_embd, n_vocab, scale, ws, ws_cap); \
    }
BU_DOT_FORMATS(BU_EMBED)
