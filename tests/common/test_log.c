/*  tests/common/test_log.c: a log line never carries an escape sequence
    or a byte that is not UTF-8 (a message quotes what clients and
    sandboxes sent; the log is read on a terminal).                    */
#include "common/log.h"
#include "tests/common/check.h"

#include <stdlib.h>
#include <unistd.h>

//  What ah_log wrote for one message (caller frees).
static char *s_logged (const char *text)
{
    char path [] = "/tmp/ah-test-log-XXXXXX";
    int fd = mkstemp (path);
    int saved = dup (STDERR_FILENO);
    dup2 (fd, STDERR_FILENO);
    ah_info ("test", "got '%s'", text);
    dup2 (saved, STDERR_FILENO);
    close (saved);
    char *out = calloc (1, 8192);
    ssize_t n = pread (fd, out, 8191, 0);
    (void) n;
    close (fd);
    unlink (path);
    return out;
}

int main (void)
{
    //  Every C0 but tab and newline, DEL, every C1: escaped.
    for (unsigned cp = 1; cp <= 0x9f; cp++) {
        if ((cp >= 0x20 && cp < 0x7f) || cp == '\t' || cp == '\n')
            continue;
        char text [8], want [16];
        if (cp < 0x80) {
            snprintf (text, sizeof text, "a%cb", (char) cp);
            snprintf (want, sizeof want, "'a\\x%02xb'\n", cp);
        }
        else {
            snprintf (text, sizeof text, "a%c%cb", (char) (0xc0 | (cp >> 6)), (char) (0x80 | (cp & 0x3f)));
            snprintf (want, sizeof want, "'a\\u%04xb'\n", cp);
        }
        char *line = s_logged (text);
        if (!strstr (line, want))
            fprintf (stderr, "U+%04X: %s", cp, line);
        CHECK (strstr (line, want) != NULL);
        free (line);
    }
    //  Bytes that are not UTF-8; tab, newline and other text as they are.
    char *line = s_logged ("x\xff\xc0\xaf" "y");
    CHECK (strstr (line, "'x\\xff\\xc0\\xafy'"));
    free (line);
    line = s_logged ("caf\xc3\xa9\tline\nnext");
    CHECK (strstr (line, "'caf\xc3\xa9\tline\nnext'\n"));
    CHECK (strstr (line, " INFO [test] got "));
    free (line);
    return CHECK_DONE ();
}
