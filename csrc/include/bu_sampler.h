/* Token sampler: greedy, or temperature + top-k + top-p + min-p, after an optional repeat penalty,
 * with a seeded, portable RNG.
 *
 * Order (the Hugging Face `generate` order: its logits processors, then its warpers; stated because
 * llama.cpp's differs):
 *  1. repeat penalty (Keskar et al. 2019, CTRL; llama.cpp's and HF's form): every distinct id among
 *     the last repeat_last_n accepted ids (bu_sampler_accept) has its logit divided by
 *     repeat_penalty when it is > 0 and multiplied by it otherwise (1.0 = off);
 *  2. temperature <= 0: greedy, the argmax of the (penalised) logits, lowest id among equal maxima;
 *     top_k / top_p / min_p are unused;
 *  3. otherwise candidates are sorted by logit (descending, ties by ascending id) and scaled:
 *     z_i = (l_i - l_max) / T in double (a difference first, so a tiny T cannot overflow);
 *  4. top-k: the top_k best are kept (0 = all);
 *  5. top-p: of those, the smallest prefix whose softmax mass reaches top_p (1.0 = all);
 *  6. min-p (Nguyen et al. 2024; HF MinPLogitsWarper): of those, the ids whose probability is at
 *     least min_p times the best one's, i.e. exp(z_i) >= min_p (0 = all);
 *  7. one id is drawn from the renormalised softmax of what is left.
 * The same seed, parameters, accepted ids and logits always give the same id.
 *
 * Domains (bu_sampler_new refuses anything else): temperature finite and >= 0; top_k >= 0;
 * 0 < top_p <= 1; 0 <= min_p <= 1; repeat_penalty finite and > 0; repeat_last_n >= 0 (0 = off).
 *
 * RNG: SplitMix64 (Steele, Lea, Flood 2014), draws u = (x >> 11) * 2^-53 in [0, 1); one draw per
 * non-greedy sample. The sampler allocates its buffers once, at creation; sampling never allocates.
 */
#ifndef BU_SAMPLER_H
#define BU_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* Bumped whenever bu_sampler_params or a sampler function changes layout or meaning: a host that
 * dlopens the library checks bu_sampler_abi_version() before passing its parameters. */
#define BU_SAMPLER_ABI_VERSION 2

typedef struct {
    float temperature;      /* >= 0, finite; 0: greedy */
    int32_t top_k;          /* >= 0; 0: no top-k cut */
    float top_p;            /* in (0, 1]; 1: no nucleus cut */
    float min_p;            /* in [0, 1]; 0: no min-p cut */
    float repeat_penalty;   /* > 0, finite; 1: no penalty */
    int32_t repeat_last_n;  /* >= 0: accepted ids the penalty looks back over; 0: no penalty */
    uint64_t seed;
} bu_sampler_params;

typedef struct bu_sampler bu_sampler;

int32_t bu_sampler_abi_version(void);

/* NULL on bad parameters (message in err names the parameter) or out of memory. */
bu_sampler *bu_sampler_new(const bu_sampler_params *p, size_t n_vocab, char *err, size_t err_cap);
void bu_sampler_free(bu_sampler *s);

/* The next token id for one row of n_vocab logits; -1 with a message in err if a logit is NaN, or
 * (when not greedy) +inf, or every logit is -inf. */
int32_t bu_sampler_sample(bu_sampler *s, const float *logits, char *err, size_t err_cap);

/* Record that id entered the context (prompt and generated ids alike): the repeat penalty's window
 * keeps the last repeat_last_n of them. 0, or -1 if id is outside the vocabulary. */
int bu_sampler_accept(bu_sampler *s, int32_t id);

/* Forget the accepted ids (a new conversation); the RNG stream continues. */
void bu_sampler_reset(bu_sampler *s);

/* Index of the largest logit, lowest index among equal maxima; -1 if n == 0 or a logit is NaN. */
int32_t bu_argmax(const float *logits, size_t n);

/* The RNG alone (exposed for tests): next uniform double in [0, 1). */
double bu_sampler_uniform(bu_sampler *s);

#endif
