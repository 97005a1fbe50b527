/* libFuzzer target: the tokenizer blob loader (csrc/tokenizer/bu_tok_load.c) on arbitrary bytes.
 *
 * A blob that loads must then be usable: every accessor, decoding every token id (and ids just
 * outside the vocabulary) and encoding a few fixed texts with every flag must stay in bounds and
 * return a count or a BU_TOK_E* code (ASan/UBSan and the checks below abort otherwise). A blob
 * that fails must leave *out NULL with a one-line message. Each input is loaded as is and again
 * with its size field made to match.
 *
 * Built by tests/fuzz/run.py with clang -fsanitize=fuzzer,address,undefined; not part of any
 * binary of the pipeline (bringup.build.sources.FUZZ).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bu_tokenizer.h"

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_tok_load: broken loader promise: %s\n", what);
        abort();
    }
}

static const char *const TEXTS[] = {"", "Hello world 123", " \xe2\x96\x81<0x41>\n\n  x", "\xff\xfe", "<|im_end|>ab"};

static void load_and_use(const uint8_t *data, size_t n)
{
    bu_tok *t = (bu_tok *)1;
    char err[512];
    err[0] = 0;
    int rc = bu_tok_load(data, n, &t, err, sizeof err);
    if (rc != BU_TOK_OK) {
        check(rc < 0 && t == NULL, "a failed load returns a negative code and *out NULL");
        check(err[0] != 0 && strchr(err, '\n') == NULL, "a failed load gives a one-line message");
        return;
    }
    int32_t nv = bu_tok_n_vocab(t);
    check(nv > 0, "a loaded vocabulary is not empty");
    (void)bu_tok_model(t); (void)bu_tok_pre(t); (void)bu_tok_add_bos(t); (void)bu_tok_add_eos(t);
    for (int w = -1; w <= 6; w++) {
        int32_t s = bu_tok_special(t, w);
        check(s >= -1 && s < nv, "special ids lie in the vocabulary");
    }
    char piece[16];
    /* bounded work per input: a blob may hold millions of tokens */
    int32_t last = nv < 4096 ? nv : 4096;
    for (int32_t id = -2; id < last + 2; id++) {
        int32_t i = id < last ? id : nv + (id - last);
        int64_t k = bu_tok_decode(t, i, BU_TOK_DECODE_SPECIAL, piece, sizeof piece);
        check(k >= 0 || k == BU_TOK_EID || k == BU_TOK_EDECODE, "decode returns a count or EID/EDECODE");
        check((i >= 0 && i < nv) || k == BU_TOK_EID, "decode of an id outside the vocabulary is EID");
        (void)bu_tok_is_eog(t, i);
        (void)bu_tok_token_type(t, i);
    }
    int32_t ids[64];
    for (size_t k = 0; k < sizeof TEXTS / sizeof *TEXTS; k++)
        for (unsigned flags = 0; flags < 4; flags++) {
            int64_t m = bu_tok_encode(t, TEXTS[k], strlen(TEXTS[k]), flags, ids, 64, err, sizeof err);
            if (m < 0 || m > 64) continue;   /* > 64: the ids are not meaningful (snprintf protocol) */
            for (int64_t j = 0; j < m && j < 64; j++) check(ids[j] >= 0 && ids[j] < nv, "encoded ids lie in the vocabulary");
        }
    bu_tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    load_and_use(data, n);
    /* again with the header's total size (offset 16) set to the input's, so that mutations that
     * insert or remove bytes reach the table checks instead of stopping at the size check */
    if (n < 24 || n > (16u << 20)) return 0;
    uint8_t *copy = malloc(n);
    if (!copy) abort();
    memcpy(copy, data, n);
    for (int k = 0; k < 8; k++) copy[16 + k] = (uint8_t)((uint64_t)n >> (8 * k));
    load_and_use(copy, n);
    free(copy);
    return 0;
}
