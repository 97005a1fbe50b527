/* The token sampler; contract, order and domains in bu_sampler.h. */
#include "bu_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bu_common.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct bu_sampler {
    bu_sampler_params p;
    size_t n_vocab;
    uint64_t state;
    cand *c;          /* n_vocab candidates */
    double *prob;     /* n_vocab unnormalised probabilities exp(z_i) */
    int32_t *window;  /* ring of the last repeat_last_n accepted ids */
    size_t n_window;  /* ids in the ring (<= repeat_last_n) */
    size_t next;      /* ring slot of the next accepted id */
    uint8_t *seen;    /* n_vocab flags: an id's penalty is applied once however often it repeats */
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int32_t bu_sampler_abi_version(void) { return BU_SAMPLER_ABI_VERSION; }

double bu_sampler_uniform(bu_sampler *s)
{
    return (double)(splitmix64(&s->state) >> 11) * 0x1.0p-53;
}

/* 1 with a message naming the first parameter outside its domain (bu_sampler.h), else 0. */
static int bad_params(const bu_sampler_params *p, char *err, size_t cap)
{
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return bu_errf(err, cap, 1, "sampler: temperature %g must be a finite number >= 0", p->temperature);
    if (p->top_k < 0) return bu_errf(err, cap, 1, "sampler: top_k %d must be >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return bu_errf(err, cap, 1, "sampler: top_p %g must be in (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return bu_errf(err, cap, 1, "sampler: min_p %g must be in [0, 1]", p->min_p);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0.0f))
        return bu_errf(err, cap, 1, "sampler: repeat_penalty %g must be a finite number > 0", p->repeat_penalty);
    if (p->repeat_last_n < 0) return bu_errf(err, cap, 1, "sampler: repeat_last_n %d must be >= 0", p->repeat_last_n);
    return 0;
}

bu_sampler *bu_sampler_new(const bu_sampler_params *p, size_t n_vocab, char *err, size_t cap)
{
    if (!p || n_vocab == 0 || n_vocab > INT32_MAX) {
        bu_errf(err, cap, 0, "sampler: bad vocabulary size %zu", n_vocab);
        return NULL;
    }
    if (bad_params(p, err, cap)) return NULL;
    bu_sampler *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->state = p->seed;
    s->c = malloc(n_vocab * sizeof *s->c);
    s->prob = malloc(n_vocab * sizeof *s->prob);
    s->seen = calloc(n_vocab, 1);
    s->window = malloc(((size_t)p->repeat_last_n + 1) * sizeof *s->window);
    if (!s->c || !s->prob || !s->seen || !s->window) goto oom;
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
    free(s->seen);
    free(s->window);
    free(s);
}

int bu_sampler_accept(bu_sampler *s, int32_t id)
{
    if (id < 0 || (size_t)id >= s->n_vocab) return -1;
    size_t n = (size_t)s->p.repeat_last_n;
    if (n == 0) return 0;
    s->window[s->next] = id;
    s->next = (s->next + 1) % n;
    if (s->n_window < n) s->n_window++;
    return 0;
}

void bu_sampler_reset(bu_sampler *s)
{
    s->n_window = 0;
    s->next = 0;
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

/* s->c[i] = {logit i after the repeat penalty, i}. */
static void penalised(bu_sampler *s, const float *logits)
{
    for (size_t i = 0; i < s->n_vocab; i++) {
        s->c[i].logit = logits[i];
        s->c[i].id = (int32_t)i;
    }
    if (s->p.repeat_penalty == 1.0f) return;
    for (size_t k = 0; k < s->n_window; k++) {
        int32_t id = s->window[k];
        if (s->seen[id]) continue;
        s->seen[id] = 1;
        float *l = &s->c[id].logit;
        *l = *l > 0.0f ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
    }
    for (size_t k = 0; k < s->n_window; k++) s->seen[s->window[k]] = 0;
}

int32_t bu_sampler_sample(bu_sampler *s, const float *logits, char *err, size_t cap)
{
    size_t n = s->n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (logits[i] != logits[i]) return bu_errf(err, cap, -1, "sampler: logit %zu is NaN", i);
    }
    int penalty = s->p.repeat_penalty != 1.0f && s->n_window > 0;
    if (s->p.temperature <= 0.0f && !penalty) return bu_argmax(logits, n);
    penalised(s, logits);
    if (s->p.temperature <= 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    for (size_t i = 0; i < n; i++) {
        /* exp(inf - inf) has no value: a +inf logit has no softmax probability */
        if (isinf(logits[i]) && logits[i] > 0) return bu_errf(err, cap, -1, "sampler: logit %zu is +inf", i);
    }
    qsort(s->c, n, sizeof *s->c, cmp_cand);
    if (isinf(s->c[0].logit)) return bu_errf(err, cap, -1, "sampler: every logit is -inf");
    size_t keep = n;
    if (s->p.top_k > 0 && (size_t)s->p.top_k < keep) keep = (size_t)s->p.top_k;

    /* softmax over the kept candidates, in double, max-subtracted before scaling */
    double mx = s->c[0].logit, T = s->p.temperature, sum = 0.0;
    for (size_t i = 0; i < keep; i++) sum += s->prob[i] = exp(((double)s->c[i].logit - mx) / T);
    if (s->p.top_p < 1.0f) {
        double acc = 0.0;
        size_t k = 0;
        while (k < keep) {
            acc += s->prob[k++] / sum;
            if (acc >= (double)s->p.top_p) break;
        }
        keep = k;
    }
    /* prob[0] = exp(0) = 1 is the best probability, so p_i / p_max is prob[i] itself */
    while (keep > 1 && s->prob[keep - 1] < (double)s->p.min_p) keep--;
    sum = 0.0;
    for (size_t i = 0; i < keep; i++) sum += s->prob[i];
    double u = bu_sampler_uniform(s) * sum, acc = 0.0;
    for (size_t i = 0; i < keep; i++) {
        acc += s->prob[i];
        if (u < acc) return s->c[i].id;
    }
    return s->c[keep - 1].id; /* u rounded up to sum: the last kept candidate */
}
