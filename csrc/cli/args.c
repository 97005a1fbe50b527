/* bringup-run's options (docs/runtime.md "bringup-run"): parsing, the checks between them, --help. */
#include "bringup_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s LIBMODEL WEIGHTS [options]\n"
        "\n"
        "  --prompt TEXT          prompt text (special-token texts in it are parsed as tokens)\n"
        "  --prompt-tokens IDS    prompt as token ids, comma or space separated (no tokenizer)\n"
        "  --chat                 wrap --prompt as a user turn in the model's chat format\n"
        "  --system TEXT          system message for --chat and the interactive loop (default: the\n"
        "                         chat format's default system message, if it has one)\n"
        "  --max-tokens N         tokens to generate (default 128); stops earlier at end-of-generation\n"
        "  --temperature T        0 = greedy (default 0)\n"
        "  --top-k K              keep the K most likely tokens (default 0 = all)\n"
        "  --top-p P              nucleus mass in (0, 1] (default 1 = all)\n"
        "  --seed S               sampler seed (default 0)\n"
        "  --threads N            threads for the one-token matrix products (decode, logits head);\n"
        "                         results are bit-identical for any N (default 1)\n"
        "  --ctx N                context length (default: the planned maximum of the library)\n"
        "  --timing               print prompt-eval / decode times, TTFT, peak RSS to stderr\n"
        "  --json                 print one JSON object {prompt_tokens, generated_tokens, text, timing}\n"
        "  --all-logits PATH      write the teacher-forced logits of every prompt position to PATH as raw\n"
        "                         little-endian float32 [n_prompt_tokens, n_vocab]\n"
        "  --no-verify            skip the weights payload SHA-256 check (says so on stderr)\n"
        "  --no-stop              do not stop at end-of-generation tokens\n"
        "  --dump-hidden DIR      write every prefill op's output (all prompt rows, all chunks) to DIR:\n"
        "                         manifest.json + <IR op id>.f32 (docs/parity.md); needs --max-tokens 0.\n"
        "                         DIR must be absent or empty; it appears complete or not at all\n"
        "  -h, --help             this text\n"
        "\n"
        "With neither --prompt nor --prompt-tokens: an interactive chat loop on stdin (one line = one\n"
        "user turn; an empty line or end of input quits; /reset clears the conversation).\n"
        "\n"
        "exit codes: 0 ok, 1 internal error (kernel failure), 2 usage or bad input (prompt longer than\n"
        "the context, token id out of range), 3 integrity (hash mismatch, corrupt or wrong weights),\n"
        "4 unsupported (no chat format in the weights), 5 unavailable (cannot load the library, cannot\n"
        "read the weights, out of memory)\n", prog);
}

static int parse_int(const char *opt, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return die(EX_USAGE, "%s %s: need an integer in [%ld, %ld]", opt, v, lo, hi);
    *out = (int)x;
    return 0;
}

static int parse_float(const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || x != x)
        return die(EX_USAGE, "%s %s: need a number", opt, v);
    *out = x;
    return 0;
}

int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->verify = 1;
    o->stop = 1;
    o->max_tokens = 128;
    o->threads = 1;
    o->sp.top_p = 1.0f;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (die(EX_USAGE, "%s needs a value", a), (char *)NULL))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(EX_OK); }
        else if (!strcmp(a, "--prompt")) { if (!(o->prompt = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--prompt-tokens")) { if (!(o->prompt_tokens = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--system")) { if (!(o->system = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--all-logits")) { if (!(o->all_logits = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--dump-hidden")) { if (!(o->dump_hidden = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--timing")) o->timing = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--no-verify")) o->verify = 0;
        else if (!strcmp(a, "--no-stop")) o->stop = 0;
        else if (!strcmp(a, "--max-tokens")) { const char *v = NEXT(); if (!v || parse_int(a, v, 0, INT32_MAX, &o->max_tokens)) return EX_USAGE; }
        else if (!strcmp(a, "--top-k")) { const char *v = NEXT(); if (!v || parse_int(a, v, 0, INT32_MAX, &o->sp.top_k)) return EX_USAGE; }
        else if (!strcmp(a, "--threads")) { const char *v = NEXT(); if (!v || parse_int(a, v, 1, 256, &o->threads)) return EX_USAGE; }
        else if (!strcmp(a, "--ctx")) { const char *v = NEXT(); if (!v || parse_int(a, v, 1, INT32_MAX, &o->ctx)) return EX_USAGE; }
        else if (!strcmp(a, "--temperature")) { const char *v = NEXT(); if (!v || parse_float(a, v, &o->sp.temperature)) return EX_USAGE; }
        else if (!strcmp(a, "--top-p")) { const char *v = NEXT(); if (!v || parse_float(a, v, &o->sp.top_p)) return EX_USAGE; }
        else if (!strcmp(a, "--seed")) {
            const char *v = NEXT();
            char *end;
            if (!v) return EX_USAGE;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') return die(EX_USAGE, "--seed %s: need an integer >= 0", v);
            o->sp.seed = (uint64_t)s;
        }
        else if (a[0] == '-' && a[1]) return die(EX_USAGE, "unknown option %s (see --help)", a);
        else if (npos == 0) { o->lib = a; npos++; }
        else if (npos == 1) { o->weights = a; npos++; }
        else return die(EX_USAGE, "unexpected argument %s (see --help)", a);
#undef NEXT
    }
    if (npos != 2) {
        usage(stderr);
        return EX_USAGE;
    }
    if (o->prompt && o->prompt_tokens) return die(EX_USAGE, "give --prompt or --prompt-tokens, not both");
    if (o->chat && o->prompt_tokens) return die(EX_USAGE, "--chat formats text; it cannot wrap --prompt-tokens");
    if (o->all_logits && !o->prompt && !o->prompt_tokens) return die(EX_USAGE, "--all-logits needs a prompt");
    if (o->dump_hidden && !o->prompt && !o->prompt_tokens) return die(EX_USAGE, "--dump-hidden needs a prompt");
    if (o->dump_hidden && o->max_tokens != 0)
        return die(EX_USAGE, "--dump-hidden records the prompt's prefill only: add --max-tokens 0");
    if (o->dump_hidden && !o->dump_hidden[0]) return die(EX_USAGE, "--dump-hidden: empty directory name");
    if (o->system && !o->chat && (o->prompt || o->prompt_tokens))
        return die(EX_USAGE, "--system applies to --chat (or the interactive loop)");
    if (!(o->sp.top_p > 0.0f && o->sp.top_p <= 1.0f)) return die(EX_USAGE, "--top-p must be in (0, 1]");
    return EX_OK;
}

