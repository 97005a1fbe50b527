/* libFuzzer target: the tokenizer's encode and decode (csrc/tokenizer) on a real vocabulary.
 *
 * The packed blob of a real model (bringup.formats.tokenizer_pack of its tokenizer.json) is loaded
 * once, from the path in $BU_FUZZ_TOK_BLOB (tests/fuzz/run.py writes smollm2's, gemma3's and those
 * of llama.cpp's vocabularies with their own pre-tokenizer or model: gpt-neox, deepseek-llm,
 * deepseek-coder, qwen35, gemma-4).
 * Input byte 0 chooses the mode, the rest is the payload:
 *   bit 7 clear: payload = text. Encode with flags = bits 0-1 (ADD_SPECIAL, PARSE_SPECIAL) with
 *     no buffer (the count), then into a buffer exactly that large (the same count), then
 *     decode every id. For valid UTF-8 without special parsing or added tokens, the decoded bytes
 *     must equal the text (byte-level BPE and SentencePiece byte fallback are lossless; for
 *     SentencePiece, U+2581 reads as a space and one space may be prefixed).
 *   bit 7 set: payload = little-endian i32 token ids (any values); each is decoded with flags =
 *     bit 0 into buffers of every capacity edge: a count >= 0 for an id in the vocabulary, EID
 *     outside it, EDECODE only for a token whose text is not byte-level.
 * Any out-of-bounds access is an ASan/UBSan crash; a broken promise above aborts.
 *
 * Built by tests/fuzz/run.py with clang -fsanitize=fuzzer,address,undefined; not part of any
 * binary of the pipeline (bringup.build.sources.FUZZ).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bu_common.h"
#include "bu_tokenizer.h"

static bu_tok *g_tok;

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_tok_encode: broken tokenizer promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *path = getenv("BU_FUZZ_TOK_BLOB");
    if (!path) { fprintf(stderr, "fuzz_tok_encode: set BU_FUZZ_TOK_BLOB to a packed tokenizer blob\n"); exit(2); }
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *blob = malloc(n > 0 ? (size_t)n : 1);
    if (!blob || fread(blob, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    char err[512];
    if (bu_tok_load(blob, (size_t)n, &g_tok, err, sizeof err) != BU_TOK_OK) {
        fprintf(stderr, "fuzz_tok_encode: %s: %s\n", path, err);
        exit(2);
    }
    free(blob);
    return 0;
}

static int valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = bu_utf8_decode(s + i, n - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static void fuzz_text(unsigned flags, const char *text, size_t n)
{
    char err[512];
    int64_t need = bu_tok_encode(g_tok, text, n, flags, NULL, 0, err, sizeof err);
    if (need < 0) {
        check(err[0] != 0 && strchr(err, '\n') == NULL, "an encode error gives a one-line message");
        check(need != BU_TOK_EUTF8 || !valid_utf8((const uint8_t *)text, n), "EUTF8 only for invalid UTF-8");
        return;
    }
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (!ids) abort();
    check(bu_tok_encode(g_tok, text, n, flags, ids, (size_t)need, err, sizeof err) == need,
          "the count does not depend on the capacity");
    int32_t nv = bu_tok_n_vocab(g_tok);
    char *out = malloc(n * 4 + 64), piece[256];
    size_t out_n = 0, out_cap = n * 4 + 64;
    int lossless = flags == 0 && valid_utf8((const uint8_t *)text, n);
    for (int64_t i = 0; i < need; i++) {
        check(ids[i] >= 0 && ids[i] < nv, "encoded ids lie in the vocabulary");
        int64_t k = bu_tok_decode(g_tok, ids[i], 0, piece, sizeof piece);
        check(k >= 0, "an encoded id decodes");
        if (k > (int64_t)sizeof piece || out_n + (size_t)k > out_cap) { lossless = 0; continue; }
        memcpy(out + out_n, piece, (size_t)k);
        out_n += (size_t)k;
    }
    /* round trip: the text, byte for byte; SentencePiece and gemma4 decode U+2581 in the text as
     * a space (it is the model's space symbol, as llama.cpp), and SentencePiece may prefix one space */
    if (lossless) {
        char *want = malloc(n + 1);
        size_t wn = 0;
        if (!want) abort();
        for (size_t i = 0; i < n; i++) {
            int spm_space = bu_tok_model(g_tok) != BU_TOK_MODEL_GPT2 && i + 3 <= n && memcmp(text + i, "\xE2\x96\x81", 3) == 0;
            want[wn++] = spm_space ? ' ' : text[i];
            i += spm_space ? 2 : 0;
        }
        size_t skip = bu_tok_model(g_tok) == BU_TOK_MODEL_LLAMA && out_n == wn + 1 && out[0] == ' ';
        check(out_n - skip == wn && memcmp(out + skip, want, wn) == 0, "decode(encode(text)) == text");
        free(want);
    }
    free(out);
    free(ids);
}

static void fuzz_ids(unsigned flags, const uint8_t *p, size_t n)
{
    int32_t nv = bu_tok_n_vocab(g_tok);
    char buf[512];
    for (size_t i = 0; i + 4 <= n; i += 4) {
        int32_t id = (int32_t)bu_rd_u32(p + i);
        if (i / 4 % 2) id = (int32_t)((uint32_t)id % (uint32_t)nv);   /* half the ids surely valid */
        int64_t k = bu_tok_decode(g_tok, id, flags, NULL, 0);
        if (id < 0 || id >= nv) { check(k == BU_TOK_EID, "an id outside the vocabulary is EID"); continue; }
        check(k >= 0 || k == BU_TOK_EDECODE, "a valid id decodes to a count or EDECODE");
        if (k < 0 || k > (int64_t)sizeof buf) continue;
        for (size_t cap = k ? (size_t)k - 1 : 0; cap <= (size_t)k; cap++) {
            memset(buf, 0xAA, sizeof buf);
            check(bu_tok_decode(g_tok, id, flags, buf, cap) == k, "the count does not depend on the capacity");
            for (size_t j = cap; j < sizeof buf; j++) check((unsigned char)buf[j] == 0xAA, "decode writes within its capacity");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n == 0) return 0;
    if (data[0] & 0x80) fuzz_ids(data[0] & 1u, data + 1, n - 1);
    else fuzz_text(data[0] & 3u, (const char *)data + 1, n - 1);
    return 0;
}
