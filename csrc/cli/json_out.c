/* bringup-run's JSON output (--json) and its --timing report (docs/runtime.md). */
#include "json_out.h"

#include <inttypes.h>
#include <sys/resource.h>

/* Valid UTF-8 passes through (escaped as JSON needs); an invalid byte becomes U+FFFD and sets
 * *replaced, so the caller can say so. */
void json_str(FILE *f, const char *s, size_t n, int *replaced)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            if (c == '"') fputs("\\\"", f);
            else if (c == '\\') fputs("\\\\", f);
            else if (c == '\n') fputs("\\n", f);
            else if (c == '\r') fputs("\\r", f);
            else if (c == '\t') fputs("\\t", f);
            else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc((int)c, f);
            i++;
            continue;
        }
        uint32_t cp;
        size_t len = bu_utf8_decode(p + i, n - i, &cp);
        if (len) {
            fwrite(p + i, 1, len, f);
            i += len;
        } else {
            fputs("\\ufffd", f);
            *replaced = 1;
            i++;
        }
    }
    fputc('"', f);
}

void json_ids(FILE *f, const int32_t *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%" PRId32, i ? ", " : "", v[i]);
    fputc(']', f);
}

void timing_fields(FILE *f, const timing_t *t, const char *sep)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ptps = t->prompt_ms > 0 ? t->prompt_tokens / (t->prompt_ms / 1e3) : 0;
    double dtps = t->decode_ms > 0 ? t->decode_runs / (t->decode_ms / 1e3) : 0;
    fprintf(f, "\"prompt_eval_ms\": %.3f,%s\"prompt_tokens\": %ld,%s\"prompt_tok_per_s\": %.3f,%s"
               "\"decode_ms\": %.3f,%s\"decode_runs\": %ld,%s\"decode_tok_per_s\": %.3f,%s"
               "\"ttft_ms\": %.3f,%s\"sample_ms\": %.3f,%s\"peak_rss_kib\": %ld,%s"
               "\"minor_page_faults\": %ld,%s\"major_page_faults\": %ld,%s"
               "\"load_ms\": %.3f,%s\"open_ms\": %.3f,%s\"open_includes_weights_check\": %s,%s"
               "\"sha256_impl\": \"%s\",%s\"first_token_ms\": %.3f,%s\"sample_runs\": %ld,%s\"total_ms\": %.3f",
            t->prompt_ms, sep, t->prompt_tokens, sep, ptps, sep, t->decode_ms, sep, t->decode_runs, sep, dtps, sep,
            t->ttft_ms, sep, t->sample_ms, sep, ru.ru_maxrss, sep, ru.ru_minflt, sep, ru.ru_majflt, sep,
            t->load_ms, sep, t->open_ms, sep, t->verified ? "true" : "false", sep, t->sha256_impl, sep, t->first_token_ms, sep,
            t->sample_runs, sep, now_ms() - t->start_ms);
}

/* Human-readable --timing report (stderr). */
void timing_report(FILE *f, const timing_t *t, size_t model_bytes)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(f, "timing:\n");
    fprintf(f, "  prompt eval: %10.2f ms, %6ld tokens, %8.2f tok/s\n", t->prompt_ms, t->prompt_tokens,
            t->prompt_ms > 0 ? t->prompt_tokens / (t->prompt_ms / 1e3) : 0.0);
    fprintf(f, "  decode:      %10.2f ms, %6ld runs,   %8.2f tok/s\n", t->decode_ms, t->decode_runs,
            t->decode_ms > 0 ? t->decode_runs / (t->decode_ms / 1e3) : 0.0);
    fprintf(f, "  time to first token: %.2f ms (prompt eval + first sample); sampling total %.2f ms\n",
            t->ttft_ms, t->sample_ms);
    fprintf(f, "  peak RSS: %.1f MiB; page faults: %ld minor, %ld major; runtime allocation %.1f MiB\n",
            ru.ru_maxrss / 1024.0, ru.ru_minflt, ru.ru_majflt, model_bytes / 1048576.0);
}

/* The same in llama.cpp's llama_perf shape (llama_perf_sampler_print, llama_perf_context_print),
 * so what reads llama-cli's timing reads ours; the load line says what the load was made of. */
static double per_tok(double ms, long n) { return n > 0 ? ms / (double)n : 0.0; }
static double tok_s(double ms, long n) { return ms > 0 ? 1e3 * (double)n / ms : 0.0; }

void perf_report(FILE *f, const timing_t *t)
{
    const char *s = "llama_perf_sampler_print", *c = "llama_perf_context_print";
    fprintf(f, "%s:    sampling time = %10.2f ms / %5ld runs   (%8.2f ms per token, %8.2f tokens per second)\n", s,
            t->sample_ms, t->sample_runs, per_tok(t->sample_ms, t->sample_runs), tok_s(t->sample_ms, t->sample_runs));
    char check[96];
    snprintf(check, sizeof check, "the weights' SHA-256 check (%s) included", t->sha256_impl);
    fprintf(f, "%s:        load time = %10.2f ms (open %.2f ms, %s; first token at %.2f ms)\n", c, t->load_ms,
            t->open_ms, t->verified ? check : "weights NOT checked (--no-verify)", t->first_token_ms);
    fprintf(f, "%s: prompt eval time = %10.2f ms / %5ld tokens (%8.2f ms per token, %8.2f tokens per second)\n", c,
            t->prompt_ms, t->prompt_tokens, per_tok(t->prompt_ms, t->prompt_tokens), tok_s(t->prompt_ms, t->prompt_tokens));
    fprintf(f, "%s:        eval time = %10.2f ms / %5ld runs   (%8.2f ms per token, %8.2f tokens per second)\n", c,
            t->decode_ms, t->decode_runs, per_tok(t->decode_ms, t->decode_runs), tok_s(t->decode_ms, t->decode_runs));
    fprintf(f, "%s:       total time = %10.2f ms / %5ld tokens\n", c, now_ms() - t->start_ms,
            t->prompt_tokens + t->decode_runs);
}

