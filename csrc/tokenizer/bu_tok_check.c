/*
 * bu_tok_check.c - a driver for running the tokenizer under AddressSanitizer/UBSan
 * (tests/test_tokenizer.py::test_sanitizers builds it with -fsanitize=address,undefined).
 *
 *   bu_tok_check BLOB TEXTS
 *
 * TEXTS holds inputs separated by a NUL byte. For every input: encode with each flag combination
 * into a buffer that is exactly large enough (and once into one that is too small), decode every
 * id. Then decode every token of the vocabulary, and load mutated copies of the blob (every
 * truncation length near both ends, single-byte flips across the header) to show that bad blobs
 * fail cleanly. Prints one line per input: the ids of the plain encoding. Exit 0 = all ran.
 *
 * A test driver (bringup.build.sources.TEST_DRIVERS): no binary of the pipeline links it.
 */
#include "bu_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static int check_text(const bu_tok *tok, const char *text, size_t n) {
    char err[256];
    for (unsigned flags = 0; flags < 4; flags++) {
        int64_t need = bu_tok_encode(tok, text, n, flags, NULL, 0, err, sizeof err);
        if (need < 0) { if (flags == 0) printf("error %lld\n", (long long)need); continue; }
        int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
        if (!ids) return 1;
        if (need > 0 && bu_tok_encode(tok, text, n, flags, ids, (size_t)need - 1, err, sizeof err) != need) return 2;
        if (bu_tok_encode(tok, text, n, flags, ids, (size_t)need, err, sizeof err) != need) return 3;
        for (int64_t i = 0; i < need; i++) {
            int64_t k = bu_tok_decode(tok, ids[i], BU_TOK_DECODE_SPECIAL, NULL, 0);
            if (k < 0) continue;
            char *piece = malloc((size_t)k + 1);
            if (!piece || bu_tok_decode(tok, ids[i], BU_TOK_DECODE_SPECIAL, piece, (size_t)k) != k) return 4;
            free(piece);
        }
        if (flags == 0) {
            for (int64_t i = 0; i < need; i++) printf("%s%d", i ? " " : "", ids[i]);
            printf("\n");
        }
        free(ids);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s BLOB TEXTS\n", argv[0]); return 2; }
    size_t nb, nt;
    unsigned char *blob = read_file(argv[1], &nb), *texts = read_file(argv[2], &nt);
    if (!blob || !texts) { fprintf(stderr, "cannot read inputs\n"); return 2; }
    char err[256];
    bu_tok *tok = NULL;
    if (bu_tok_load(blob, nb, &tok, err, sizeof err) != BU_TOK_OK) { fprintf(stderr, "load: %s\n", err); return 1; }
    size_t a = 0;
    for (size_t i = 0; i <= nt; i++) {
        if (i == nt || texts[i] == 0) {
            int rc = check_text(tok, (const char *)texts + a, i - a);
            if (rc) { fprintf(stderr, "check failed (%d) on input at %zu\n", rc, a); return 1; }
            a = i + 1;
        }
    }
    char piece[64];
    for (int32_t id = -2; id < bu_tok_n_vocab(tok) + 2; id++) (void)bu_tok_decode(tok, id, 0, piece, sizeof piece);
    bu_tok_free(tok);

    for (size_t cut = 0; cut < nb; cut = cut < 300 || cut + 300 >= nb ? cut + 1 : nb - 300) {
        bu_tok *t = NULL;
        if (bu_tok_load(blob, cut, &t, err, sizeof err) == BU_TOK_OK) { fprintf(stderr, "truncated blob %zu loaded\n", cut); return 1; }
    }
    for (size_t pos = 0; pos < 80 && pos < nb; pos++) {
        unsigned char *m = malloc(nb);
        if (!m) return 1;
        memcpy(m, blob, nb);
        m[pos] ^= 0x5A;
        bu_tok *t = NULL;
        if (bu_tok_load(m, nb, &t, err, sizeof err) == BU_TOK_OK) {
            /* a flip may leave a valid blob (e.g. a score byte): it must then work */
            if (check_text(t, "Hello world 123", 15)) return 1;
            bu_tok_free(t);
        }
        free(m);
    }
    free(blob);
    free(texts);
    return 0;
}
