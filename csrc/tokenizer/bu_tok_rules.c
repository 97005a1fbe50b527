/* The pre-tokenizers that llama.cpp writes as a chain of simple regexes (llama-vocab.cpp,
 * llm_tokenizer_bpe) and runs through std::regex (src/unicode.cpp unicode_regex_split): each regex
 * splits every piece that the one before left, and both its matches and the text between them
 * become pieces. Every regex of these chains is one of a few shapes (a run of a class, an optional
 * one-character prefix and a run, one character, exactly k characters, trailing white space), so
 * each is a rule of data below and one linear matcher, instead of a regex engine.
 *
 * What std::regex sees (unicode_regex_split): a regex naming \p{..} runs on a "collapsed" text
 * where every code point >= 0x80 stands for its category (white space for all of them as \v), so
 * \p{L}, \p{N}, \p{P} and \s are exactly the Unicode classes of bu_unicode_tables.c; a regex
 * without \p{..} runs on the code points with every non-ASCII white space replaced by \v (0x0B),
 * so such a code point never matches a range of the regex, even one that contains it (U+3000 in
 * deepseek-llm's [　-。]). Both cases are `regex_cp` below. */
#include <stdlib.h>

#include "bu_tok_internal.h"

/* character classes of the rules */
enum {
    CL_RN,            /* [\r\n] */
    CL_WS,            /* \s */
    CL_NL,            /* [\n] (gemma4) */
    CL_DIGIT,         /* [0-9] */
    CL_N,             /* \p{N} */
    CL_L,             /* \p{L} */
    CL_P,             /* \p{P} */
    CL_P_DEFAULT,     /* [\p{P}\$\+<=>\^~\|] */
    CL_P_FALCON,      /* [\p{P}\$\+<=>\^~\|`] */
    CL_DS_LETTER,     /* deepseek-llm's letter ranges */
    CL_DS_PUNCT,      /* [!-/:-~！-／：-～‘-‟　-。] */
    CL_CJK,           /* [一-龥ࠀ-一가-퟿] */
};

/* rule shapes */
enum {
    R_END,
    R_RUN,            /* C+ */
    R_OPT_RUN,        /* X?C+ (X = white space in every chain) */
    R_ONE,            /* C */
    R_THREE,          /* C{3} (written [0-9][0-9][0-9] by llama.cpp) */
    R_TRAIL_WS,       /* \s+$ (the end of the piece) */
    R_GPT2,           /* the GPT-2 regex, llama.cpp's hand-written matcher (tok_split_gpt2) */
};

typedef struct { unsigned char shape, cls, prefix; } rule;

#define MAX_RULES 6
/* The chains, in llama.cpp's order (llm_tokenizer_bpe), per BU_TOK_PRE_* id. */
static const rule CHAINS[BU_TOK_PRE_COUNT][MAX_RULES + 1] = {
    /* default (gpt2 without tokenizer.ggml.pre: gpt-neox, aquila):
     * [\p{P}\$\+<=>\^~\|]+ , GPT-2 , \p{N}+ , [0-9][0-9][0-9] */
    [BU_TOK_PRE_DEFAULT] = {{R_RUN, CL_P_DEFAULT, 0}, {R_GPT2, 0, 0}, {R_RUN, CL_N, 0}, {R_THREE, CL_DIGIT, 0}},
    /* starcoder, smollm, refact, command-r: \p{N} , GPT-2 */
    [BU_TOK_PRE_SMOLLM] = {{R_ONE, CL_N, 0}, {R_GPT2, 0, 0}},
    [BU_TOK_PRE_STARCODER] = {{R_ONE, CL_N, 0}, {R_GPT2, 0, 0}},
    [BU_TOK_PRE_REFACT] = {{R_ONE, CL_N, 0}, {R_GPT2, 0, 0}},
    /* falcon: [\p{P}\$\+<=>\^~\|`]+ , GPT-2 , [0-9][0-9][0-9] */
    [BU_TOK_PRE_FALCON] = {{R_RUN, CL_P_FALCON, 0}, {R_GPT2, 0, 0}, {R_THREE, CL_DIGIT, 0}},
    /* deepseek-llm: [\r\n] , \s?[letters]+ , \s?[!-/:-~！-／：-～‘-‟　-。]+ , \s+$ , [一-龥ࠀ-一가-퟿]+ , \p{N}+ */
    [BU_TOK_PRE_DEEPSEEK_LLM] = {{R_ONE, CL_RN, 0}, {R_OPT_RUN, CL_DS_LETTER, CL_WS}, {R_OPT_RUN, CL_DS_PUNCT, CL_WS},
                                 {R_TRAIL_WS, CL_WS, 0}, {R_RUN, CL_CJK, 0}, {R_RUN, CL_N, 0}},
    /* deepseek-coder: [\r\n] , \s?\p{L}+ , \s?\p{P}+ , [一-龥ࠀ-一가-퟿]+ , \p{N} */
    [BU_TOK_PRE_DEEPSEEK_CODER] = {{R_ONE, CL_RN, 0}, {R_OPT_RUN, CL_L, CL_WS}, {R_OPT_RUN, CL_P, CL_WS},
                                   {R_RUN, CL_CJK, 0}, {R_ONE, CL_N, 0}},
    /* gemma4: [^\n]+|[\n]+ */
    [BU_TOK_PRE_GEMMA4] = {{R_RUN, CL_NL, 0}},
};

typedef struct { uint32_t lo, hi; } cp_range;

/* The range tables are ascending and disjoint (in_ranges searches them by bisection). */
/* deepseek-llm's letter class, the ranges of its regex as written (A-Za-zµÀ-ÖØ-ö...) */
static const cp_range DS_LETTER[] = {
    {0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000B5, 0x000B5}, {0x000C0, 0x000D6}, {0x000D8, 0x000F6},
    {0x000F8, 0x001BA}, {0x001BC, 0x001BF}, {0x001C4, 0x00293}, {0x00295, 0x002AF}, {0x00370, 0x00373},
    {0x00376, 0x00377}, {0x0037B, 0x0037D}, {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A},
    {0x0038C, 0x0038C}, {0x0038E, 0x003A1}, {0x003A3, 0x003F5}, {0x003F7, 0x00481}, {0x0048A, 0x0052F},
    {0x00531, 0x00556}, {0x010A0, 0x010C5}, {0x013A0, 0x013F5}, {0x013F8, 0x013FD}, {0x01C90, 0x01CBA},
    {0x01CBD, 0x01CBF}, {0x01D00, 0x01D2B}, {0x01D6B, 0x01D77}, {0x01D79, 0x01D9A}, {0x01E00, 0x01F15},
    {0x01F18, 0x01F1D}, {0x01F20, 0x01F45}, {0x01F48, 0x01F4D}, {0x01F50, 0x01F57}, {0x01F59, 0x01F59},
    {0x01F5B, 0x01F5B}, {0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4}, {0x01FB6, 0x01FBC},
    {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4}, {0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3}, {0x01FD6, 0x01FDB},
    {0x01FE0, 0x01FEC}, {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC}, {0x02102, 0x02102}, {0x02107, 0x02107},
    {0x0210A, 0x02113}, {0x02115, 0x02115}, {0x02119, 0x0211D}, {0x02124, 0x02124}, {0x02126, 0x02126},
    {0x02128, 0x02128}, {0x0212A, 0x0212D}, {0x0212F, 0x02134}, {0x02139, 0x02139}, {0x0213C, 0x0213F},
    {0x02145, 0x02149}, {0x0214E, 0x0214E}, {0x02183, 0x02184}, {0x02C00, 0x02C7B}, {0x02C7E, 0x02CE4},
    {0x02CEB, 0x02CEE}, {0x02CF2, 0x02CF3}, {0x0A640, 0x0A66D}, {0x0A680, 0x0A69B}, {0x0A722, 0x0A76F},
    {0x0A771, 0x0A787}, {0x0A78B, 0x0A78E}, {0x0AB70, 0x0ABBF}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17},
    {0x0FF21, 0x0FF3A}, {0x0FF41, 0x0FF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
/* [!-/:-~！-／：-～‘-‟　-。] and [一-龥ࠀ-一가-퟿], sorted (ࠀ-一 and 一-龥 share U+4E00) */
static const cp_range DS_PUNCT[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
static const cp_range CJK[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};

static int in_ranges(const cp_range *r, size_t n, uint32_t c)
{
    size_t lo = 0, hi = n;   /* the last range with .lo <= c lies in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].lo <= c) lo = mid; else hi = mid;
    }
    return c >= r[lo].lo && c <= r[lo].hi;
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The character std::regex compares: non-ASCII white space reads as \v (see the top). */
static uint32_t regex_cp(uint32_t c, unsigned fl)
{
    return (c >= 0x80 && (fl & UNI_SPACE)) ? 0x0B : c;
}

static int in_class(int cls, uint32_t cp)
{
    unsigned fl = tok_uni_flags(cp);
    uint32_t c = regex_cp(cp, fl);
    switch (cls) {
    case CL_RN: return c == '\r' || c == '\n';
    case CL_WS: return (c >= 0x09 && c <= 0x0D) || c == ' ';
    case CL_NL: return c == '\n';
    case CL_DIGIT: return c >= '0' && c <= '9';
    case CL_N: return (fl & UNI_NUMBER) != 0;
    case CL_L: return (fl & UNI_LETTER) != 0;
    case CL_P: return (fl & UNI_PUNCT) != 0;
    case CL_P_DEFAULT:
    case CL_P_FALCON:
        if (fl & UNI_PUNCT) return 1;
        if (c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|') return 1;
        return cls == CL_P_FALCON && c == '`';
    case CL_DS_LETTER: return in_ranges(DS_LETTER, NELEM(DS_LETTER), c);
    case CL_DS_PUNCT: return in_ranges(DS_PUNCT, NELEM(DS_PUNCT), c);
    case CL_CJK: return in_ranges(CJK, NELEM(CJK), c);
    default: return 0;
    }
}

/* Length of the match of r at position p of cp[0..n) (leftmost-first, greedy, as std::regex), or 0. */
static size_t match_at(const rule *r, const uint32_t *cp, size_t n, size_t p)
{
    size_t q = p;
    switch (r->shape) {
    case R_ONE: return in_class(r->cls, cp[p]);
    case R_THREE: return (n - p >= 3 && in_class(r->cls, cp[p]) && in_class(r->cls, cp[p + 1])
                          && in_class(r->cls, cp[p + 2])) ? 3 : 0;
    case R_OPT_RUN:   /* X? is greedy: taken when a C follows it, else the run starts at p */
        if (p + 1 < n && in_class(r->prefix, cp[p]) && in_class(r->cls, cp[p + 1])) q = p + 1;
        /* fall through */
    case R_RUN:
        if (q == p && !in_class(r->cls, cp[p])) return 0;
        while (q < n && in_class(r->cls, cp[q])) q++;
        return q - p;
    default: return 0;
    }
}

static int push_len(ivec *out, size_t k)
{
    return k ? ivec_push(out, (int32_t)k) : BU_TOK_OK;
}

/* Apply one rule to the piece cp[0..n): its matches and the gaps between them, in order. */
static int apply_rule(const rule *r, const uint32_t *cp, size_t n, ivec *out)
{
    int rc = BU_TOK_OK;
    if (r->shape == R_GPT2) return tok_split_gpt2(cp, n, out);
    if (r->shape == R_TRAIL_WS) {   /* one match at most: the white space that ends the piece */
        size_t t = n;
        while (t > 0 && in_class(r->cls, cp[t - 1])) t--;
        if (!(rc = push_len(out, t))) rc = push_len(out, n - t);
        return rc;
    }
    size_t prev = 0;
    for (size_t p = 0; p < n && !rc;) {
        size_t k = match_at(r, cp, n, p);
        if (!k) { p++; continue; }
        if (!(rc = push_len(out, p - prev))) rc = push_len(out, k);
        prev = p = p + k;
    }
    return rc ? rc : push_len(out, n - prev);
}

int tok_split_rules(int pre, const uint32_t *cp, size_t n, ivec *out)
{
    if (pre < 0 || pre >= BU_TOK_PRE_COUNT || CHAINS[pre][0].shape == R_END) return BU_TOK_EFORMAT;
    /* the pieces so far (lengths in code points): bounded by n, so memory is O(n) */
    ivec cur = {0}, next = {0};
    int rc = push_len(&cur, n);
    for (const rule *r = CHAINS[pre]; !rc && r->shape != R_END; r++) {
        next.n = 0;
        size_t a = 0;
        for (size_t i = 0; i < cur.n && !rc; i++) {
            rc = apply_rule(r, cp + a, (size_t)cur.v[i], &next);
            a += (size_t)cur.v[i];
        }
        ivec tmp = cur; cur = next; next = tmp;
    }
    for (size_t i = 0; i < cur.n && !rc; i++) rc = ivec_push(out, cur.v[i]);
    free(cur.v); free(next.v);
    return rc;
}
