/*  common/log.c: see log.h.  */
#include "common/log.h"
#include "common/ident.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static int s_threshold (void)
{
    //  Benign race: every thread computes the same value.
    static volatile int threshold = -1;
    if (threshold < 0) {
        const char *env = getenv ("AGENTHOLD_LOG");
        int t = AH_LOG_INFO;
        if (env && strcasecmp (env, "debug") == 0) t = AH_LOG_DEBUG;
        else if (env && strcasecmp (env, "warn") == 0) t = AH_LOG_WARN;
        else if (env && strcasecmp (env, "error") == 0) t = AH_LOG_ERROR;
        threshold = t;
    }
    return threshold;
}

//  Written once before any thread starts (ah_log_set_process), then read only.
static char s_process [16];

void ah_log_set_process (const char *name)
{
    snprintf (s_process, sizeof s_process, "%s", name ? name : "");
}

void ah_log (ah_log_level_t level, const char *area, const char *fmt, ...)
{
    if ((int) level < s_threshold ())
        return;
    static const char *names [] = { "DEBUG", "INFO", "WARN", "ERROR" };
    char line [2048];
    time_t now = time (NULL);
    struct tm tm;
    gmtime_r (&now, &tm);
    int n = (int) strftime (line, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    n += snprintf (line + n, sizeof line - n, " %s %s%s[%s] ", names [level], s_process,
                   *s_process ? ": " : "", area);
    va_list ap;
    va_start (ap, fmt);
    int m = vsnprintf (line + n, sizeof line - n - 1, fmt, ap);
    va_end (ap);
    if (m < 0) m = 0;
    if (m > (int) sizeof line - n - 2) m = (int) sizeof line - n - 2;
    //  A message quotes what clients, sandboxes and files sent: escape
    //  sequences in it would drive the terminal the log is read on.
    if (ah_text_check (line + n, (size_t) m, true)) {
        char *safe = ah_text_escape (line + n, (size_t) m, true);
        if (safe)
            m = snprintf (line + n, sizeof line - n - 1, "%s", safe);
        free (safe);
        if (m > (int) sizeof line - n - 2) m = (int) sizeof line - n - 2;
    }
    n += m;
    if (n > (int) sizeof line - 2) n = (int) sizeof line - 2;
    line [n++] = '\n';
    ssize_t rc = write (STDERR_FILENO, line, n);
    (void) rc;
}
