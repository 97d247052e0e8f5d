/*  tests/common/check.h: the smallest assertion kit for C tests.
    CHECK never aborts: it counts, prints file:line, and main returns
    the failure count so ctest fails. Shared by every C test.        */
#ifndef AH_TEST_CHECK_H
#define AH_TEST_CHECK_H
#include <stdio.h>
#include <string.h>

//  Weak: a test made of several files counts in one pair (the linker
//  keeps one definition of each).
int check_failures __attribute__ ((weak)) = 0;
int check_total __attribute__ ((weak)) = 0;
#define CHECK(cond) do { check_total++; if (!(cond)) { check_failures++; \
    fprintf (stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_STR(a, b) do { const char *_a = (a), *_b = (b); check_total++; \
    if (!_a || !_b || strcmp (_a, _b)) { check_failures++; \
    fprintf (stderr, "%s:%d: CHECK_STR failed: '%s' != '%s'\n", __FILE__, __LINE__, \
             _a ? _a : "(null)", _b ? _b : "(null)"); } } while (0)
#define CHECK_DONE() (fprintf (stderr, "%d checks, %d failed\n", check_total, check_failures), \
    check_failures ? 1 : 0)
#endif
