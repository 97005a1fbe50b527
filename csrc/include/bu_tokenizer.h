/*
 * bu_tokenizer.h - bringup's built-in tokenizer: text bytes <-> token ids, no Python at run time.
 *
 * The tokenizer is loaded from the blob that bringup/formats/tokenizer_pack.py writes (format:
 * docs/tokenizer.md, "Blob format"); the convert stage stores that blob in the BUMP file as the
 * tensor `tokenizer.blob`. Three tokenizer models are supported, with llama.cpp's semantics
 * (src/llama-vocab.cpp, src/unicode.cpp of the pinned llama.cpp):
 *   - BU_TOK_MODEL_GPT2: byte-level BPE (GPT-2 style) with ranked merges and the pre-tokenizer
 *     named by `tokenizer.ggml.pre` (see bu_tok_pre_name for the supported set);
 *   - BU_TOK_MODEL_LLAMA: SentencePiece-style BPE over code points with token scores, `▁` for
 *     space and `<0xXX>` byte fallback (Gemma 3, LLaMA SPM);
 *   - BU_TOK_MODEL_GEMMA4: BPE with ranked merges over raw UTF-8 (no byte-level mapping), `▁` for
 *     space, the text split only into runs of newlines and runs of the rest, `<0xXX>` byte fallback.
 *
 * Every function is reentrant: a loaded bu_tok is read-only and may be shared between threads.
 * Nothing truncates silently: encode and decode take the caller's capacity and return the count
 * they need (like snprintf), so any length is handled; errors are negative BU_TOK_E* codes.
 */
#ifndef BU_TOKENIZER_H
#define BU_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (negative returns). */
#define BU_TOK_OK          0
#define BU_TOK_ENULL      -1  /* a required pointer is NULL */
#define BU_TOK_EFORMAT    -2  /* the blob is malformed, truncated or of an unknown version */
#define BU_TOK_ENOMEM     -3  /* out of memory */
#define BU_TOK_EUTF8      -4  /* the input text is not valid UTF-8 */
#define BU_TOK_EVOCAB     -5  /* the vocabulary cannot represent the input (no byte token) */
#define BU_TOK_EID        -6  /* token id out of range */
#define BU_TOK_ENOSPECIAL -7  /* add_bos/add_eos asked for a special token the model lacks */
#define BU_TOK_EDECODE    -8  /* a token's text cannot be decoded to bytes */
#define BU_TOK_ETOOLONG   -9  /* the input is longer than this implementation accepts */
#define BU_TOK_EARG      -10  /* unknown flag bits */

/* Tokenizer model types (blob field `model`; tokenizer.json "model"). */
#define BU_TOK_MODEL_GPT2   1
#define BU_TOK_MODEL_LLAMA  2
#define BU_TOK_MODEL_GEMMA4 3   /* BPE with ranked merges over raw UTF-8, U+2581 for space, <0xXX> byte fallback */

/* Pre-tokenizer ids (blob field `pre`); names as in tokenizer.ggml.pre. */
#define BU_TOK_PRE_DEFAULT         0  /* "default": none for llama (SPM); llama.cpp's default BPE regexes for gpt2 */
#define BU_TOK_PRE_GPT2            1  /* "gpt-2" */
#define BU_TOK_PRE_LLAMA3          2  /* "llama-bpe" (also "llama3", "llama-v3") */
#define BU_TOK_PRE_QWEN2           3  /* "qwen2" */
#define BU_TOK_PRE_SMOLLM          4  /* "smollm" */
#define BU_TOK_PRE_STARCODER       5  /* "starcoder" */
#define BU_TOK_PRE_REFACT          6  /* "refact" */
#define BU_TOK_PRE_FALCON          7  /* "falcon" */
#define BU_TOK_PRE_DEEPSEEK_LLM    8  /* "deepseek-llm" */
#define BU_TOK_PRE_DEEPSEEK_CODER  9  /* "deepseek-coder" */
#define BU_TOK_PRE_QWEN35         10  /* "qwen35" */
#define BU_TOK_PRE_GEMMA4         11  /* "gemma4": only with the gemma4 model, which has no other */
#define BU_TOK_PRE_COUNT          12

/* GGUF token types (tokenizer.ggml.token_type). */
#define BU_TOK_TYPE_UNDEFINED    0
#define BU_TOK_TYPE_NORMAL       1
#define BU_TOK_TYPE_UNKNOWN      2
#define BU_TOK_TYPE_CONTROL      3
#define BU_TOK_TYPE_USER_DEFINED 4
#define BU_TOK_TYPE_UNUSED       5
#define BU_TOK_TYPE_BYTE         6

/* Encode flags. */
#define BU_TOK_ADD_SPECIAL   1u  /* prepend BOS / append EOS as the model's add_bos/add_eos say */
#define BU_TOK_PARSE_SPECIAL 2u  /* match control/unknown token texts in the input as tokens */

/* Decode flags. */
#define BU_TOK_DECODE_SPECIAL 1u /* render control/unknown tokens as their text (else: empty) */

/* Special token selectors for bu_tok_special. */
#define BU_TOK_SPECIAL_BOS 0
#define BU_TOK_SPECIAL_EOS 1
#define BU_TOK_SPECIAL_UNK 2
#define BU_TOK_SPECIAL_PAD 3
#define BU_TOK_SPECIAL_EOT 4
#define BU_TOK_SPECIAL_EOM 5

typedef struct bu_tok bu_tok;

/* Load a tokenizer from the packed blob (`n` bytes). The blob is copied; the caller may free it.
 * On error returns a negative code, sets *out = NULL and writes a message to err (NUL-terminated,
 * at most errcap bytes; err may be NULL). */
int bu_tok_load(const void *blob, size_t n, bu_tok **out, char *err, size_t errcap);

/* Free a tokenizer (NULL is allowed). */
void bu_tok_free(bu_tok *tok);

/* Encode `n` bytes of UTF-8 text into token ids.
 * Returns the number of ids the full encoding has (>= 0). When that number is <= cap, the ids are
 * in ids[0..count); otherwise nothing meaningful is in ids and the caller retries with a larger
 * buffer. `ids` may be NULL when cap is 0. Negative return: a BU_TOK_E* code, message in err. */
int64_t bu_tok_encode(const bu_tok *tok, const char *text, size_t n, unsigned flags,
                      int32_t *ids, size_t cap, char *err, size_t errcap);

/* Decode one token id into its bytes (no NUL terminator is written).
 * Returns the byte count of the piece (>= 0); the bytes are in buf only when that count is <= cap.
 * GPT-2 byte-level tokens are unmapped to raw bytes; llama (SPM) tokens have `▁` turned into
 * space and `<0xXX>` byte tokens turned into the byte. Control/unknown tokens give their text
 * only with BU_TOK_DECODE_SPECIAL; unused/undefined tokens give nothing (as llama.cpp).
 * A piece may be an incomplete UTF-8 sequence: concatenate pieces before printing. */
int64_t bu_tok_decode(const bu_tok *tok, int32_t id, unsigned flags, char *buf, size_t cap);

/* Vocabulary size. */
int32_t bu_tok_n_vocab(const bu_tok *tok);

/* A special token id (BU_TOK_SPECIAL_*), or -1 when the model has none. */
int32_t bu_tok_special(const bu_tok *tok, int which);

/* 1 when `id` ends generation, else 0: the blob's end-of-generation list (tokenizer.json "eog":
 * EOS, EOT, EOM and the tokens llama.cpp recognises by text, e.g. <|im_end|>, <|endoftext|>). */
int bu_tok_is_eog(const bu_tok *tok, int32_t id);

/* Model type (BU_TOK_MODEL_*), pre-tokenizer id (BU_TOK_PRE_*) and flags from the blob. */
int bu_tok_model(const bu_tok *tok);
int bu_tok_pre(const bu_tok *tok);
int bu_tok_add_bos(const bu_tok *tok);
int bu_tok_add_eos(const bu_tok *tok);

/* Token type (BU_TOK_TYPE_*) of `id`, or BU_TOK_EID. */
int bu_tok_token_type(const bu_tok *tok, int32_t id);

/* Name of a pre-tokenizer id as written in tokenizer.ggml.pre, or NULL when unknown. */
const char *bu_tok_pre_name(int pre);

/* A constant message for a BU_TOK_E* code. */
const char *bu_tok_strerror(int code);

/* Blob format constants (docs/tokenizer.md). */
#define BU_TOK_BLOB_MAGIC   "BUTOKEN1"
#define BU_TOK_BLOB_VERSION 1u

#ifdef __cplusplus
}
#endif

#endif /* BU_TOKENIZER_H */
