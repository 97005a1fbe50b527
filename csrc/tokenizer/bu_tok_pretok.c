/* The pre-tokenizers (bu_tok_internal.h): split a fragment's code points into pre-tokens (lengths
 * in code points). The rules are the regexes llama.cpp names per tokenizer.ggml.pre, with its
 * hand-written matcher semantics (src/unicode.cpp unicode_regex_split_custom_*) for the GPT-2,
 * LLaMA 3, Qwen2 and Qwen3.5 regexes; the chains of simpler regexes that llama.cpp runs through
 * std::regex are in bu_tok_rules.c. */
#include "bu_tok_internal.h"

typedef struct {
    const uint32_t *cp;
    size_t end;          /* range is [0, end) of cp */
} cps_view;

#define OOR 0xFFFFFFFFu
static uint32_t cp_at(const cps_view *v, size_t i) { return i < v->end ? v->cp[i] : OOR; }
/* flags of a position; 0 outside the range; every in-range code point has UNI_IN set (llama.cpp
 * tests "has any flag", which an unassigned code point inside the range also has) */
#define UNI_IN 0x100u
static unsigned fl_at(const cps_view *v, size_t i) { return i < v->end ? (tok_uni_flags(v->cp[i]) | UNI_IN) : 0; }

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d ; case-insensitive for llama3/qwen2 (tolower on code points; the only
 * code points whose lowercase is one of s t m d r e v l are their ASCII capitals, which a test
 * checks against unicodedata). Returns the match length or 0. */
static size_t match_contraction(const cps_view *v, size_t pos, int ci) {
    if (cp_at(v, pos) != '\'' || pos + 1 >= v->end) return 0;
    uint32_t a = cp_at(v, pos + 1);
    if (ci) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < v->end) {
        uint32_t b = cp_at(v, pos + 2);
        if (ci) b = ascii_lower(b);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

/* End of the run [^\s\p{L}\p{N}]+ (with `stop` = UNI_SPACE | UNI_LETTER | UNI_NUMBER, plus UNI_MARK
 * for Qwen3.5) from p: the first position with a flag of `stop`, or out of range. */
static size_t other_run_end(const cps_view *v, size_t p, unsigned stop) {
    for (unsigned g; (g = fl_at(v, p)) && !(g & stop); p++) {}
    return p;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static int split_gpt2(const cps_view *v, ivec *out) {
    const unsigned stop = UNI_SPACE | UNI_LETTER | UNI_NUMBER;
    size_t pos = 0, prev = 0;
#define EMIT(e) do { size_t e_ = (e); if (e_ > prev) { int r_ = ivec_push(out, (int32_t)(e_ - prev)); if (r_) return r_; } prev = e_; pos = e_; } while (0)
    while (pos < v->end) {
        uint32_t c = cp_at(v, pos);
        unsigned f = fl_at(v, pos);
        size_t k = match_contraction(v, pos, 0);
        if (k) { EMIT(pos + k); continue; }
        unsigned f2 = c == ' ' ? fl_at(v, pos + 1) : f;
        if (f2 & UNI_LETTER) {
            size_t p = pos + (c == ' ');
            while (fl_at(v, p) & UNI_LETTER) p++;
            EMIT(p); continue;
        }
        if (f2 & UNI_NUMBER) {
            size_t p = pos + (c == ' ');
            while (fl_at(v, p) & UNI_NUMBER) p++;
            EMIT(p); continue;
        }
        if (!(f2 & stop) && f2) {
            EMIT(other_run_end(v, pos + (c == ' '), stop)); continue;
        }
        size_t nws = 0;
        while (fl_at(v, pos + nws) & UNI_SPACE) nws++;
        if (nws > 1 && cp_at(v, pos + nws) != OOR) { EMIT(pos + nws - 1); continue; }
        if (nws > 0) { EMIT(pos + nws); continue; }
        EMIT(pos + 1);
    }
    return BU_TOK_OK;
}

/* LLaMA 3 (max_digits 3) and Qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen3.5 (max_digits 1, marks): letter runs are [\p{L}\p{M}]+ and the other-run excludes \p{M} too:
 * ...|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|... */
static int split_llama3(const cps_view *v, ivec *out, size_t max_digits, int marks) {
    const unsigned word = UNI_LETTER | (marks ? UNI_MARK : 0u);
    const unsigned stop = UNI_SPACE | UNI_NUMBER | word;
    size_t pos = 0, prev = 0;
    while (pos < v->end) {
        uint32_t c = cp_at(v, pos);
        unsigned f = fl_at(v, pos);
        size_t k = match_contraction(v, pos, 1);
        if (k) { EMIT(pos + k); continue; }
        if (!(c == '\r' || c == '\n' || (f & UNI_NUMBER))) {
            if ((f & word) || (fl_at(v, pos + 1) & word)) {
                size_t p = pos + 1;
                while (fl_at(v, p) & word) p++;
                EMIT(p); continue;
            }
        }
        if (f & UNI_NUMBER) {
            size_t p = pos, run = 0;
            while (fl_at(v, p) & UNI_NUMBER) {
                p++;
                if (++run >= max_digits) { EMIT(p); run = 0; }
            }
            EMIT(p); continue;
        }
        unsigned f2 = c == ' ' ? fl_at(v, pos + 1) : f;
        if (!(f2 & stop) && f) {
            size_t p = other_run_end(v, pos + (c == ' '), stop);
            while (cp_at(v, p) == '\r' || cp_at(v, p) == '\n') p++;
            EMIT(p); continue;
        }
        size_t nws = 0, last_rn = 0;
        while (fl_at(v, pos + nws) & UNI_SPACE) {
            uint32_t d = cp_at(v, pos + nws);
            if (d == '\r' || d == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { EMIT(last_rn); continue; }
        if (nws > 1 && cp_at(v, pos + nws) != OOR) { EMIT(pos + nws - 1); continue; }
        if (nws > 0) { EMIT(pos + nws); continue; }
        EMIT(pos + 1);
    }
    return BU_TOK_OK;
#undef EMIT
}

int tok_split_gpt2(const uint32_t *cp, size_t n, ivec *out) {
    cps_view v = {cp, n};
    return split_gpt2(&v, out);
}

/* Split a fragment (code points cp[0..n)) into pre-tokens; lengths (code points) into out. */
int tok_pretokenize(const bu_tok *t, const uint32_t *cp, size_t n, ivec *out) {
    cps_view v = {cp, n};
    switch (t->pre) {
    case BU_TOK_PRE_GPT2: return split_gpt2(&v, out);
    case BU_TOK_PRE_LLAMA3: return split_llama3(&v, out, 3, 0);
    case BU_TOK_PRE_QWEN2: return split_llama3(&v, out, 1, 0);
    case BU_TOK_PRE_QWEN35: return split_llama3(&v, out, 1, 1);
    default: return tok_split_rules(t->pre, cp, n, out);
    }
}
