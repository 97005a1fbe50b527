/* SHA-256 per FIPS 180-4 section 6.2 (constants: section 4.2.2, initial hash: section 5.3.3).
 * Whole blocks go through the CPU's SHA extensions (x86 SHA-NI: sha256rnds2 / sha256msg1 / msg2)
 * when cpuid says the CPU has them, else through the portable compress() below: the weights check
 * at every launch ran at ~70 MB/s portable (1.4 s for smollm2's 98 MB, a minute for 5 GB). The
 * digest is the same by definition; tests/test_runtime.py checks both paths bit for bit against
 * hashlib. BU_SHA256=portable forces the portable path (to measure it, or to rule the other out). */
#include "bu_sha256.h"

#include <stdlib.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[i] + w[i];
        uint32_t S0 = ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) compress(h, p + 64 * i);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

/* n blocks with SHA-NI (Intel's SHA extensions, the sequence of Intel's white paper "New
 * Instructions Supporting the Secure Hash Algorithm on Intel Architecture Processors"). The state
 * lives as ABEF / CDGH pairs; each group g of 4 rounds adds K[4g..4g+3] to its message words, and
 * msg1 / msg2 extend the schedule 4 words at a time. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_shani(uint32_t h[8], const uint8_t *p, size_t n)
{
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);   /* big-endian words */
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);      /* CDAB */
    __m128i st1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B);      /* EFGH */
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                                          /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);                                               /* CDGH */
    for (; n; n--, p += 64) {
        __m128i abef = st0, cdgh = st1, m[4];
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            if (g < 4) m[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), mask);
            __m128i cur = m[g & 3];
            __m128i msg = _mm_add_epi32(cur, _mm_loadu_si128((const __m128i *)&K[4 * g]));
            st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
            if (g >= 3 && g <= 14) {
                __m128i t = _mm_alignr_epi8(cur, m[(g + 3) & 3], 4);
                m[(g + 1) & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(m[(g + 1) & 3], t), cur);
            }
            st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(msg, 0x0E));
            if (g >= 1 && g <= 12) m[(g + 3) & 3] = _mm_sha256msg1_epu32(m[(g + 3) & 3], cur);
        }
        st0 = _mm_add_epi32(st0, abef);
        st1 = _mm_add_epi32(st1, cdgh);
    }
    tmp = _mm_shuffle_epi32(st0, 0x1B);        /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xB1);        /* DCHG */
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(tmp, st1, 0xF0));   /* DCBA */
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(st1, tmp, 8));      /* HGFE */
}

/* cpuid: SHA (leaf 7 EBX bit 29), SSSE3 and SSE4.1 (leaf 1 ECX bits 9 and 19). */
static int cpu_has_shani(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 9 & 1) || !(c >> 19 & 1)) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (int)(b >> 29 & 1);
}
#endif

typedef void (*blocks_fn)(uint32_t h[8], const uint8_t *p, size_t n);

/* The block function for this CPU, chosen once (relaxed atomics: every thread picks the same). */
static blocks_fn blocks_impl(const char **name)
{
    static blocks_fn fn;
    static const char *fn_name;
    blocks_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
    if (!f) {
        const char *env = getenv("BU_SHA256");
        const char *nm = "portable";
        f = blocks_portable;
#if defined(__x86_64__) && defined(__GNUC__)
        if (!(env && !strcmp(env, "portable")) && cpu_has_shani()) f = blocks_shani, nm = "sha-ni";
#else
        (void)env;
#endif
        __atomic_store_n(&fn_name, nm, __ATOMIC_RELAXED);
        __atomic_store_n(&fn, f, __ATOMIC_RELEASE);
    }
    if (name) *name = __atomic_load_n(&fn_name, __ATOMIC_RELAXED);
    return f;
}

const char *bu_sha256_impl(void)
{
    const char *name;
    blocks_impl(&name);
    return name;
}

void bu_sha256_portable(const void *data, size_t n, uint8_t out[32])
{
    bu_sha256_ctx c;
    bu_sha256_init(&c);
    c.n_bytes = n;
    blocks_portable(c.h, data, n / 64);
    c.buf_len = n % 64;
    memcpy(c.buf, (const uint8_t *)data + (n - n % 64), n % 64);
    bu_sha256_final(&c, out);
}

void bu_sha256_init(bu_sha256_ctx *c)
{
    static const uint32_t H0[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(c->h, H0, sizeof H0);
    c->n_bytes = 0;
    c->buf_len = 0;
}

void bu_sha256_update(bu_sha256_ctx *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    c->n_bytes += n;
    if (c->buf_len) {
        size_t take = 64 - c->buf_len < n ? 64 - c->buf_len : n;
        memcpy(c->buf + c->buf_len, p, take);
        c->buf_len += take; p += take; n -= take;
        if (c->buf_len < 64) return;
        compress(c->h, c->buf);
        c->buf_len = 0;
    }
    /* Whole blocks straight from the caller's memory (the mmap'd payload): no staging copy. */
    if (n >= 64) blocks_impl(NULL)(c->h, p, n / 64);
    p += n - n % 64;
    n %= 64;
    memcpy(c->buf, p, n);
    c->buf_len = n;
}

void bu_sha256_final(bu_sha256_ctx *c, uint8_t out[32])
{
    uint64_t bits = c->n_bytes * 8;
    uint8_t pad = 0x80;
    bu_sha256_update(c, &pad, 1);
    uint8_t zero = 0;
    while (c->buf_len != 56) bu_sha256_update(c, &zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    bu_sha256_update(c, len, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24); out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8); out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void bu_sha256(const void *data, size_t n, uint8_t out[32])
{
    bu_sha256_ctx c;
    bu_sha256_init(&c);
    bu_sha256_update(&c, data, n);
    bu_sha256_final(&c, out);
}

void bu_sha256_hex(const uint8_t d[32], char out[65])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) { out[2 * i] = hx[d[i] >> 4]; out[2 * i + 1] = hx[d[i] & 15]; }
    out[64] = 0;
}
