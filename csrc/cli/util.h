/* util.h (bringup-run): the leaf of the CLI: exit codes, the program's name and version, escaped
 * one-line messages (die, say), memory that exits when exhausted, the clock. Includes no other
 * header of the CLI (tests/test_layout.py). */
#ifndef BU_CLI_UTIL_H
#define BU_CLI_UTIL_H

#define _POSIX_C_SOURCE 200809L   /* first: fsync, getpid, strdup, clock_gettime, getrusage */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bu_common.h"

/* Exit codes (bringup's convention, bringup/core/errors.py). */
enum { EX_OK = 0, EX_INTERNAL = 1, EX_USAGE = 2, EX_INTEGRITY = 3, EX_UNSUPPORTED = 4, EX_UNAVAILABLE = 5 };

/* The project version (pyproject.toml; tests/test_cli_native.py holds them equal). */
#define BRINGUP_VERSION "0.1.0"

extern const char *const prog;   /* "bringup-run", the name in every message */

/* The one escaping rule for what bringup-run prints that came from a file or the command line
 * (paths, names and strings from the weights, typed lines): newline, tab and CR as \n \t \r,
 * other C0 controls, DEL, C1 controls and bytes that are not UTF-8 as \xNN, bidi / zero-width /
 * separator code points as \uNNNN (bringup's Python rule, errors.one_line, escapes the same), and
 * past SHOWN_MAX bytes a cut said in the text ("...[N more bytes]"). Every die() and say()
 * message goes through it whole, so one message is one line and cannot drive the terminal. */
#define SHOWN_MAX 8192
void put_shown(FILE *f, const char *s, size_t n);
/* Print "bringup-run: error: <message>" on stderr (escaped: put_shown); returns code. */
int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "bringup-run: <message>" on stderr (escaped: put_shown): a note that shows a name. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* realloc that exits (EX_UNAVAILABLE, with a message) when out of memory. */
void *xrealloc(void *p, size_t n);
/* bu_str_add / push that exit the same way when out of memory. */
void str_add(bu_str *s, const char *p, size_t n);
void str_adds(bu_str *s, const char *z);
BU_VEC(ids_t, int32_t, -1)
void ids_add(ids_t *v, int32_t id);
/* CLOCK_MONOTONIC in milliseconds. */
double now_ms(void);

#endif /* BU_CLI_UTIL_H */
