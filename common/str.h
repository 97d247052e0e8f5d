/*  common/str.h: formatted strings on the heap (part of ah_log: no
    dependencies, so sandboxd, store, policy and config all use it).   */
#ifndef AH_STR_H
#define AH_STR_H

#include <stdarg.h>

//  A new string (caller frees), or NULL when out of memory.
char *ah_strf (const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ah_vstrf (const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
