#include "bu_sampler.h"

#include <math.h>
#include <stdlib.h>

#include "bu_common.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct bu_sampler {
    bu_sampler_params p;
    size_t n_vocab;
    uint64_t state;
    cand *c;      /* n_vocab candidates */
    double *prob; /* n_vocab probabilities */
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double bu_sampler_uniform(bu_sampler *s)
{
    return (double)(splitmix64(&s->state) >> 11) * 0x1.0p-53;
}

bu_sampler *bu_sampler_new(const bu_sampler_params *p, size_t n_vocab, char *err, size_t cap)
{
    if (!p || n_vocab == 0 || n_vocab > INT32_MAX) {
        bu_errf(err, cap, 0, "sampler: bad vocabulary size %zu", n_vocab);
        return NULL;
    }
    if (!(p->temperature == p->temperature) || p->top_k < 0 || !(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        bu_errf(err, cap, 0, "sampler: need temperature a number, top_k >= 0, 0 < top_p <= 1 (got %g, %d, %g)",
                p->temperature, p->top_k, p->top_p);
        return NULL;
    }
    bu_sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->state = p->seed;
    s->c = malloc(n_vocab * sizeof *s->c);
    s->prob = malloc(n_vocab * sizeof *s->prob);
    if (!s->c || !s->prob) goto oom;
    return s;
oom:
    bu_sampler_free(s);
    bu_errf(err, cap, 0, "sampler: out of memory for %zu candidates", n_vocab);
    return NULL;
}

void bu_sampler_free(bu_sampler *s)
{
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s);
}

int32_t bu_argmax(const float *x, size_t n)
{
    if (n == 0) return -1;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return -1;
        if (x[i] > x[best]) best = i;
    }
    return (int32_t)best;
}

/* Descending logit, then ascending id: a total order, so qsort's instability cannot matter. */
static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t bu_sampler_sample(bu_sampler *s, const float *logits, char *err, size_t cap)
{
    size_t n = s->n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (logits[i] != logits[i]) return bu_errf(err, cap, -1, "sampler: logit %zu is NaN", i);
    }
    if (s->p.temperature <= 0.0f) return bu_argmax(logits, n);
    for (size_t i = 0; i < n; i++) {
        /* exp(inf - inf) has no value: a +inf logit has no softmax probability */
        if (isinf(logits[i]) && logits[i] > 0) return bu_errf(err, cap, -1, "sampler: logit %zu is +inf", i);
    }

    for (size_t i = 0; i < n; i++) {
        s->c[i].logit = logits[i] / s->p.temperature;
        s->c[i].id = (int32_t)i;
    }
    qsort(s->c, n, sizeof *s->c, cmp_cand);
    size_t keep = n;
    if (s->p.top_k > 0 && (size_t)s->p.top_k < keep) keep = (size_t)s->p.top_k;

    /* softmax over the kept candidates, in double, max-subtracted */
    double mx = s->c[0].logit, sum = 0.0;
    for (size_t i = 0; i < keep; i++) sum += s->prob[i] = exp((double)s->c[i].logit - mx);
    if (s->p.top_p < 1.0f) {
        double acc = 0.0;
        size_t k = 0;
        while (k < keep) {
            acc += s->prob[k++] / sum;
            if (acc >= (double)s->p.top_p) break;
        }
        keep = k;
        sum = 0.0;
        for (size_t i = 0; i < keep; i++) sum += s->prob[i];
    }
    double u = bu_sampler_uniform(s) * sum, acc = 0.0;
    for (size_t i = 0; i < keep; i++) {
        acc += s->prob[i];
        if (u < acc) return s->c[i].id;
    }
    return s->c[keep - 1].id; /* u rounded up to sum: the last kept candidate */
}
