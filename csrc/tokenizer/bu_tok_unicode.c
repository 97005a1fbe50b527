/* Unicode classes, UTF-8 helpers and GPT-2's byte <-> character map of the tokenizer
 * (bu_tok_internal.h). Strict UTF-8 decoding is bu_utf8_decode (csrc/common). */
#include <string.h>

#include "bu_tok_internal.h"

unsigned tok_uni_flags(uint32_t cp)
{
    size_t lo = 0, hi = bu_uni_n_ranges;   /* last range with start <= cp */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (bu_uni_ranges[mid][0] <= cp) lo = mid; else hi = mid;
    }
    return bu_uni_ranges[lo][0] <= cp ? bu_uni_ranges[lo][1] : 0;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* As llama.cpp splits symbols; the text is validated before, so this is exact. */
size_t tok_utf8_len(unsigned char c)
{
    static const unsigned char t[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return t[c >> 4];
}

/* GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py): bytes that are printable Latin-1 (! to ~,
 * ¡ to ¬, ® to ÿ) map to themselves, the other 68 map in byte order to U+0100..U+0143. */
static int gpt2_byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_gpt2_byte_to_cp(unsigned b)
{
    if (gpt2_byte_is_printable(b)) return b;
    unsigned k = 0;   /* rank of b among the non-printable bytes */
    for (unsigned x = 0; x < b; x++) k += !gpt2_byte_is_printable(x);
    return 256 + k;
}

int tok_gpt2_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return gpt2_byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned k = 0;
    for (unsigned x = 0; x < 256; x++) {
        if (gpt2_byte_is_printable(x)) continue;
        if (256 + k == cp) return (int)x;
        k++;
    }
    return -1;
}

int tok_is_byte_token_text(const char *s, uint32_t n, unsigned *byte)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    const char *h1 = memchr(hex, s[3], 16), *h2 = memchr(hex, s[4], 16);
    if (!h1 || !h2 || !s[3] || !s[4]) return 0;
    *byte = (unsigned)((h1 - hex) << 4 | (h2 - hex));
    return 1;
}
