/*  common/str.c: see str.h.  */
#include "common/str.h"
#include <stdio.h>

char *ah_vstrf (const char *fmt, va_list ap)
{
    char *text = NULL;
    if (vasprintf (&text, fmt, ap) < 0)
        return NULL;
    return text;
}

char *ah_strf (const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *text = ah_vstrf (fmt, ap);
    va_end (ap);
    return text;
}
