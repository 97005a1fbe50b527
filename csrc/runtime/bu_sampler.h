/* Token sampler: greedy, or temperature + top-k + top-p with a seeded, portable RNG.
 *
 * Order (the Hugging Face `generate` order, stated because llama.cpp's differs): logits are divided
 * by the temperature; the top_k highest are kept (0 = all); of those, the smallest prefix (in
 * descending probability) whose softmax mass reaches top_p is kept (1.0 = all); one token is drawn
 * from the renormalised softmax of what is left. Ties in logit are broken by the lower token id, so
 * the same seed and logits always give the same token.
 * temperature <= 0 means greedy: the argmax (lowest id among equal maxima); top_k/top_p are unused.
 *
 * RNG: SplitMix64 (Steele, Lea, Flood 2014), draws u = (x >> 11) * 2^-53 in [0, 1).
 * The sampler allocates its candidate buffer once, at creation; sampling never allocates.
 */
#ifndef BU_SAMPLER_H
#define BU_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature;   /* <= 0: greedy */
    int32_t top_k;       /* 0: no top-k cut; must be >= 0 */
    float top_p;         /* in (0, 1]; 1: no nucleus cut */
    uint64_t seed;
} bu_sampler_params;

typedef struct bu_sampler bu_sampler;

/* NULL on bad parameters (message in err) or out of memory. */
bu_sampler *bu_sampler_new(const bu_sampler_params *p, size_t n_vocab, char *err, size_t err_cap);
void bu_sampler_free(bu_sampler *s);

/* The next token id for one row of n_vocab logits; -1 if a logit is NaN (message in err). */
int32_t bu_sampler_sample(bu_sampler *s, const float *logits, char *err, size_t err_cap);

/* Index of the largest logit, lowest index among equal maxima; -1 if n == 0 or a logit is NaN. */
int32_t bu_argmax(const float *logits, size_t n);

/* The RNG alone (exposed for tests): next uniform double in [0, 1). */
double bu_sampler_uniform(bu_sampler *s);

#endif
