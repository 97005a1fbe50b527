/*
 * bu_tok_internal.h - what the tokenizer's C files share; not part of the API (bu_tokenizer.h).
 *
 *   bu_tok_load.c     the blob (docs/tokenizer.md "Blob format"): checks, tables, accessors
 *   bu_tok_vocab.c    text -> id and (left, right) -> merge rank hash tables; byte -> token maps
 *   bu_tok_unicode.c  Unicode classes, UTF-8 helpers, GPT-2's byte <-> character map
 *   bu_tok_pretok.c   the pre-tokenizers with a hand-written matcher in llama.cpp (GPT-2, LLaMA 3,
 *                     Qwen2, Qwen3.5) and the dispatch on tokenizer.ggml.pre
 *   bu_tok_rules.c    the pre-tokenizers that are chains of simple regexes in llama.cpp (default,
 *                     falcon, deepseek-llm, deepseek-coder, starcoder/smollm/refact, gemma4)
 *   bu_tok_merge.c    the merge engine of BPE (lowest rank first) and SPM (highest score first)
 *   bu_tok_encode.c   special-token split, byte-level BPE, SentencePiece-style BPE, bu_tok_encode
 *   bu_tok_decode.c   bu_tok_decode
 *
 * Semantics follow llama.cpp (src/llama-vocab.cpp, src/unicode.cpp of the pinned llama.cpp) so
 * that the same text gives the same ids; tests/test_tokenizer.py checks this against llama.cpp's
 * vocabulary test vectors and against llama-cpp-python. The code is written from the rules, not
 * copied. Deliberate differences (each a clear error where llama.cpp would go on silently) are
 * listed in docs/tokenizer.md.
 */
#ifndef BU_TOK_INTERNAL_H
#define BU_TOK_INTERNAL_H

#include "bu_common.h"
#include "bu_tokenizer.h"

/* Generated from Python's unicodedata by bringup.formats.tokenizer_pack.unicode_tables_c(). */
extern const uint32_t bu_uni_ranges[][2];
extern const size_t bu_uni_n_ranges;
#define UNI_LETTER 1u
#define UNI_NUMBER 2u
#define UNI_SPACE  4u
#define UNI_PUNCT  8u
#define UNI_MARK  16u

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

/* token ids, or pre-token lengths in code points */
BU_VEC(ivec, int32_t, BU_TOK_ENOMEM)

/* ---------------- bu_tok_vocab.c ---------------- */

/* Build the vocabulary and merge hash tables and the byte -> token maps of a loaded t (vocab and
 * merges filled in). BU_TOK_OK or BU_TOK_ENOMEM. */
BU_INTERNAL int tok_build_lookups(bu_tok *t);
/* Id of the token whose text is s[0..n), or NO_ID. */
BU_INTERNAL int32_t tok_vocab_find(const bu_tok *t, const char *s, size_t n);
/* Rank of the merge (l, r) (its index in the merge list), or -1 when the pair does not merge. */
BU_INTERNAL int64_t tok_merge_rank(const bu_tok *t, const char *l, size_t ll, const char *r, size_t rl);

/* ---------------- bu_tok_unicode.c ---------------- */

/* UNI_* flags of a code point (letter / number / white space), from bu_uni_ranges. */
BU_INTERNAL unsigned tok_uni_flags(uint32_t cp);
/* UTF-8 of cp into out[0..4); returns the byte count. */
BU_INTERNAL size_t tok_utf8_encode(uint32_t cp, char *out);
/* Length of the UTF-8 sequence a lead byte announces (1 for continuation bytes). */
BU_INTERNAL size_t tok_utf8_len(unsigned char c);
/* GPT-2 bytes_to_unicode: the code point standing for byte b, and back (-1: not such a code point). */
BU_INTERNAL uint32_t tok_gpt2_byte_to_cp(unsigned b);
BU_INTERNAL int tok_gpt2_cp_to_byte(uint32_t cp);
/* 1 when s[0..n) is "<0xXX>" (upper-case hex), with the byte in *byte. */
BU_INTERNAL int tok_is_byte_token_text(const char *s, uint32_t n, unsigned *byte);

/* ---------------- bu_tok_pretok.c ---------------- */

/* Split a fragment (code points cp[0..n)) into pre-tokens by t's pre-tokenizer; appends the
 * pre-token lengths (in code points) to out. BU_TOK_OK, BU_TOK_ENOMEM or BU_TOK_EFORMAT. */
BU_INTERNAL int tok_pretokenize(const bu_tok *t, const uint32_t *cp, size_t n, ivec *out);
/* The GPT-2 regex alone (llama.cpp's hand-written matcher) on cp[0..n). */
BU_INTERNAL int tok_split_gpt2(const uint32_t *cp, size_t n, ivec *out);

/* ---------------- bu_tok_rules.c ---------------- */

/* Split by pre-tokenizer `pre`'s chain of regexes (each splits every piece of the one before,
 * matches and the text between them both kept), for the pre-tokenizers that have one; else
 * BU_TOK_EFORMAT. BU_TOK_OK or BU_TOK_ENOMEM. */
BU_INTERNAL int tok_split_rules(int pre, const uint32_t *cp, size_t n, ivec *out);

/* ---------------- bu_tok_merge.c ---------------- */

typedef struct { size_t off, n; int64_t prev, next; } tok_sym;   /* n == 0: merged into its left */
typedef struct { int64_t left, right; size_t ln, rn; double key; } tok_bigram;  /* smaller key pops first */
BU_VEC(tok_symvec, tok_sym, BU_TOK_ENOMEM)
BU_VEC(tok_heap, tok_bigram, BU_TOK_ENOMEM)

typedef struct {
    const bu_tok *t;
    const char *text;   /* the string the symbols index */
    tok_symvec syms;
    tok_heap q;
} tok_merger;

/* Merge the symbols of text[0..n) (split at UTF-8 character boundaries) until no pair merges:
 * by merge rank for gpt2, by token score for llama. The surviving symbols are the list starting
 * at m->syms.v[0] (when m->syms.n > 0) and following .next. BU_TOK_OK or BU_TOK_ENOMEM. */
BU_INTERNAL int tok_merge_run(tok_merger *m, const char *text, size_t n);
/* Free a merger's buffers (it may be reused until then). */
BU_INTERNAL void tok_merger_free(tok_merger *m);

#endif /* BU_TOK_INTERNAL_H */
