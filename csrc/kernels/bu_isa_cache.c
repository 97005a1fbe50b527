/*
 * bu_isa_cache.c - the measured ISA choices of bu_cpu.c, kept per host and per library in a file
 * the program owns, so that a process need not measure again what an earlier one measured
 * (docs/kernels.md, "The dispatch cache").
 *
 * Where: $XDG_CACHE_HOME/bringup (when set and absolute), else $HOME/.cache/bringup; the folder
 * is created 0700 and used only when it is a real folder (not a link), owned by this user and
 * writable by nobody else. Which file: isa-<key>.txt, key = a 64-bit FNV-1a hash of the host's
 * identity (CPUID vendor, brand, family/model/stepping, the feature words of leaves 1 and 7, the
 * OS's XCR0, the online CPU count) and the library's GNU build-id (the linker's SHA-1 of the
 * library); the file repeats both in full and is used only when they match. So a new host, a
 * changed CPU or OS setting, or a rebuilt library never meets an old choice. BU_ISA_CACHE=off
 * turns the cache off (BU_ISA forcing a level also leaves it unused: nothing is measured).
 *
 * The file is untrusted data: read through a descriptor opened relative to the folder with
 * O_NOFOLLOW (never a link, never outside the folder), a regular file of this user, at most
 * MAX_FILE bytes, printable ASCII in lines of a fixed grammar, every number range-checked, each
 * class's level consistent with its medians, no class twice. Anything else and the whole file is
 * ignored, stated in one line on stderr and in --json, and measured again (then rewritten).
 * Writing is atomic: a new file of this process (O_EXCL) in the folder, fsync, rename over.
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include "bu_isa_cache.h"

#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bu_fast.h"

#define MAX_FILE 16384 /* 128 classes of < 100 bytes each, with room */
#define MAX_SAMPLES 64 /* timed calls per level a class may record (bu_cpu.c PICK_MAX) */

static int g_dirfd = -1;       /* the cache folder, open while the library is loaded */
static char g_name[40];        /* isa-<key>.txt */
static char g_host[17];        /* hex of the host identity's hash */
static char g_lib[2 * 64 + 1]; /* hex of the build-id */
static const char *g_folder = "";
static char g_state[200] = "off (nothing to measure)";
static _Atomic int g_written, g_write_failed;

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* The host's identity as a hash: what decides which level is faster (the core, its features, the
 * OS's register state, how many CPUs share the memory), nothing that changes between runs. */
static uint64_t host_hash(void) {
    unsigned w[32] = {0}, a, b, c, d;
    __cpuid(0, w[0], w[1], w[2], w[3]);
    const unsigned max = w[0];
    __cpuid(1, w[4], b, w[5], w[6]);
    w[4] &= 0x0fff3fffu; /* family/model/stepping, without the APIC id in b and reserved bits */
    if (max >= 7) __cpuid_count(7, 0, a, w[7], w[8], w[9]);
    __cpuid(0x80000000u, a, b, c, d);
    for (unsigned i = 0; a >= 0x80000004u && i < 3; i++)
        __cpuid(0x80000002u + i, w[10 + 4 * i], w[11 + 4 * i], w[12 + 4 * i], w[13 + 4 * i]);
    if (w[5] & (1u << 27)) { /* OSXSAVE: XCR0 says which register states the OS saves */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        w[22] = lo;
        w[23] = hi;
    }
    w[24] = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
    return fnv1a(0xcbf29ce484222325ull, w, sizeof w);
}

/* The GNU build-id note of the object that holds this code (the library), as hex in g_lib. */
static int build_id_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const uintptr_t self = (uintptr_t)&host_hash;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && self >= lo && self - lo < ph->p_memsz) mine = 1;
    }
    if (!mine) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const size_t name = (n->n_namesz + 3u) & ~3u, desc = (n->n_descsz + 3u) & ~3u;
            if (name > (size_t)(end - p) - sizeof *n || desc > (size_t)(end - p) - sizeof *n - name) break;
            const unsigned char *d = p + sizeof *n + name;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(p + sizeof *n, "GNU", 4) == 0 &&
                n->n_descsz >= 8 && n->n_descsz <= 64) {
                for (unsigned k = 0; k < n->n_descsz; k++) snprintf(g_lib + 2 * k, 3, "%02x", d[k]);
                return 1;
            }
            p += sizeof *n + name + desc;
        }
    }
    return 1;
}

static void set_state(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_state(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_state, sizeof g_state, fmt, ap);
    va_end(ap);
}

/* Opens (creating it 0700) the cache folder into g_dirfd; 0, or -1 with g_state saying why. */
static int open_folder(void) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char path[4096];
    int n;
    if (xdg && xdg[0] == '/') {
        n = snprintf(path, sizeof path, "%s", xdg);
        g_folder = "$XDG_CACHE_HOME/bringup";
    } else if (home && home[0] == '/') {
        n = snprintf(path, sizeof path, "%s/.cache", home);
        g_folder = "$HOME/.cache/bringup";
    } else {
        set_state("off (no folder: neither XDG_CACHE_HOME nor HOME is an absolute path)");
        return -1;
    }
    if (n < 0 || (size_t)n + sizeof "/bringup" > sizeof path) {
        set_state("off (the folder's path is longer than %zu bytes)", sizeof path);
        return -1;
    }
    mkdir(path, 0700); /* an existing one is fine; a failure shows at the open below */
    strcat(path, "/bringup");
    mkdir(path, 0700);
    g_dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (g_dirfd < 0) set_state("off (%s: %s)", g_folder, strerror(errno));
    else if (fstat(g_dirfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        set_state("off (%s is not private: owned by another user or writable by others)", g_folder);
        close(g_dirfd);
        g_dirfd = -1;
    }
    if (g_dirfd >= 0) return 0;
    fprintf(stderr, "bringup: ISA dispatch cache %s\n", g_state); /* a folder that exists but is not ours */
    return -1;
}

/* digits only, no sign, no leading zero, at most `max` */
static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (!*s || (s[0] == '0' && s[1]) || strlen(s) > 19) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return v <= max;
}

/* a finite number of nanoseconds in (0, 1e9], written as %.9g writes it */
static int parse_ns(const char *s, float *out) {
    char *end;
    if (!*s || strspn(s, "0123456789.e+-") != strlen(s)) return 0;
    const double v = strtod(s, &end);
    *out = (float)v;
    return *end == 0 && isfinite(v) && v > 0 && v <= 1e9;
}

static const char *parse_class(char *line, bu_isa_cached *c) {
    char *f[8], *save = NULL;
    int n = 0;
    if (line[0] == ' ' || strstr(line, "  ") || (*line && line[strlen(line) - 1] == ' '))
        return "a line is not 'class KEY LEVEL N N NS NS'"; /* one space between fields, as written */
    for (char *t = strtok_r(line, " ", &save); t && n < 8; t = strtok_r(NULL, " ", &save)) f[n++] = t;
    uint64_t n0, n1;
    if (n != 7 || strcmp(f[0], "class") != 0) return "a line is not 'class KEY LEVEL N N NS NS'";
    if (!parse_u64(f[1], ((uint64_t)1 << 50), &c->key) || c->key == 0 || ((c->key - 1) >> 18) == 0)
        return "a class key is not a number of the right range";
    if (strcmp(f[2], "avx2") == 0) c->level = BU_ISA_AVX2;
    else if (strcmp(f[2], "avx512") == 0) c->level = BU_ISA_AVX512;
    else return "a level is neither avx2 nor avx512";
    if (!parse_u64(f[3], MAX_SAMPLES, &n0) || !parse_u64(f[4], MAX_SAMPLES, &n1) || !n0 || !n1)
        return "a sample count is not in 1..64";
    if (!parse_ns(f[5], &c->q1[0]) || !parse_ns(f[6], &c->q1[1])) return "a quartile is not a time in (0, 1e9] ns";
    if (c->level != (c->q1[1] < c->q1[0] ? BU_ISA_AVX512 : BU_ISA_AVX2))
        return "a level is not the one with the lower quartile";
    c->n[0] = (int)n0;
    c->n[1] = (int)n1;
    return NULL;
}

/* The file's classes into out; the count, or -1 with *why. text is NUL-terminated, checked ASCII. */
static int parse(char *text, bu_isa_cached *out, const char **why) {
    char head[3][200];
    snprintf(head[0], sizeof head[0], "bringup isa cache 2");
    snprintf(head[1], sizeof head[1], "host %s", g_host);
    snprintf(head[2], sizeof head[2], "library %s", g_lib);
    int n = 0, line_no = 0;
    for (char *line = text, *nl; *line; line = nl + 1, line_no++) {
        nl = strchr(line, '\n');
        if (!nl) return *why = "the last line has no end", -1;
        *nl = 0;
        if (line_no < 3) {
            if (strcmp(line, head[line_no]) != 0)
                return *why = line_no ? "written for another host or library" : "not a bringup ISA cache file", -1;
            continue;
        }
        if (n == BU_ISA_CACHE_MAX) return *why = "more than 128 classes", -1;
        if ((*why = parse_class(line, &out[n])) != NULL) return -1;
        for (int i = 0; i < n; i++)
            if (out[i].key == out[n].key) return *why = "a class appears twice", -1;
        n++;
    }
    if (line_no < 3) return *why = "the header is incomplete", -1;
    return n;
}

/* The file's text (NUL-terminated, at most MAX_FILE bytes) into buf; 1, 0 when there is none, or
 * -1 with *why. */
static int read_file(char *buf, const char **why) {
    const int fd = openat(g_dirfd, g_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return *why = errno == ELOOP ? "it is a symbolic link" : "it cannot be opened", -1;
    }
    struct stat st;
    ssize_t got = 0, r = 1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) *why = "not a regular file";
    else if (st.st_uid != geteuid()) *why = "owned by another user";
    else if (st.st_size > MAX_FILE) *why = "larger than 16384 bytes";
    else *why = NULL;
    while (!*why && r > 0 && got <= MAX_FILE) {
        r = read(fd, buf + got, (size_t)(MAX_FILE + 1 - got));
        if (r < 0 && errno != EINTR) *why = "a read failed";
        if (r > 0) got += r;
        if (got > MAX_FILE) *why = "larger than 16384 bytes";
    }
    close(fd);
    if (*why) return -1;
    buf[got] = 0;
    for (ssize_t i = 0; i < got; i++)
        if ((buf[i] < 0x20 || buf[i] > 0x7e) && buf[i] != '\n') return *why = "not printable ASCII", -1;
    return 1;
}

int bu__isa_cache_env(void) {
    const char *s = getenv("BU_ISA_CACHE");
    if (!s || !*s || strcmp(s, "on") == 0) return 1;
    return strcmp(s, "off") == 0 ? 0 : -1;
}

int bu__isa_cache_load(bu_isa_cached *out, const char **state) {
    *state = g_state;
    if (bu__isa_cache_env() != 1) return set_state("off (BU_ISA_CACHE=off)"), 0;
    dl_iterate_phdr(build_id_cb, NULL);
    if (!g_lib[0]) return set_state("off (the library has no GNU build-id to key it by)"), 0;
    if (open_folder() != 0) return 0;
    snprintf(g_host, sizeof g_host, "%016llx", (unsigned long long)host_hash());
    snprintf(g_name, sizeof g_name, "isa-%016llx.txt",
             (unsigned long long)fnv1a(fnv1a(0xcbf29ce484222325ull, g_host, 16), g_lib, strlen(g_lib)));
    static char text[MAX_FILE + 1];
    const char *why = NULL;
    int rc = read_file(text, &why);
    if (rc == 0) return set_state("miss"), 0;
    if (rc > 0 && (rc = parse(text, out, &why)) >= 0) return set_state("hit"), rc;
    set_state("ignored: %s", why);
    fprintf(stderr, "bringup: ISA dispatch cache %s/%s ignored (%s); measuring again\n", g_folder, g_name, why);
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void bu__isa_cache_save(const bu_isa_cached *in, int n) {
    if (g_dirfd < 0 || atomic_load(&g_write_failed)) return;
    static char text[MAX_FILE + 1];
    static _Atomic unsigned seq;
    int at = snprintf(text, sizeof text, "bringup isa cache 2\nhost %s\nlibrary %s\n", g_host, g_lib);
    for (int i = 0; i < n && at > 0 && at < MAX_FILE; i++)
        at += snprintf(text + at, sizeof text - (size_t)at, "class %llu %s %d %d %.9g %.9g\n",
                       (unsigned long long)in[i].key, in[i].level == BU_ISA_AVX512 ? "avx512" : "avx2", in[i].n[0],
                       in[i].n[1], (double)in[i].q1[0], (double)in[i].q1[1]);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.%ld.%u.tmp", g_name, (long)getpid(), atomic_fetch_add(&seq, 1));
    const int fd = openat(g_dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && at > 0 && at < MAX_FILE && write_all(fd, text, (size_t)at) == 0 && fsync(fd) == 0;
    if (fd >= 0) ok = close(fd) == 0 && ok;
    ok = ok && renameat(g_dirfd, tmp, g_dirfd, g_name) == 0;
    if (ok) {
        atomic_fetch_add(&g_written, 1);
        return;
    }
    const int e = errno;
    if (fd >= 0) unlinkat(g_dirfd, tmp, 0);
    atomic_store(&g_write_failed, 1);
    fprintf(stderr, "bringup: ISA dispatch cache %s/%s not written (%s); choices hold for this run only\n", g_folder,
            g_name, strerror(e));
}

void bu__isa_cache_info(char *buf, size_t cap) {
    char safe[sizeof g_state];
    size_t j = 0;
    for (size_t i = 0; g_state[i] && j + 1 < sizeof safe; i++) /* JSON-safe: printable, no quote/backslash */
        safe[j++] = (g_state[i] < 0x20 || g_state[i] > 0x7e || g_state[i] == '"' || g_state[i] == '\\') ? '?' : g_state[i];
    safe[j] = 0;
    snprintf(buf, cap, "\"cache\": {\"state\": \"%s\", \"folder\": \"%s\", \"file\": \"%s\", \"writes\": %d, "
             "\"write_failed\": %s}", safe, g_folder, g_name, atomic_load(&g_written),
             atomic_load(&g_write_failed) ? "true" : "false");
}
