/*  proto/homename.c: see homename.h.                                   */
#include "proto/homename.h"

#include <stddef.h>
#include <string.h>

static const char *s_toolchain [] = {
    ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache",
    ".ruff_cache", ".tox", ".git", ".next", ".cache"
};

bool ah_homename_hidden (const char *name)
{
    for (size_t i = 0; i < sizeof s_toolchain / sizeof s_toolchain [0]; i++)
        if (strcmp (name, s_toolchain [i]) == 0)
            return true;
    if (strncmp (name, ".agenthold", 10) == 0)
        return true;
    //  ".<name>.ah-XXXXXXXX": sandboxd's upload in progress (sandboxd/fs.c)
    size_t n = strlen (name);
    if (n >= 14 && name [0] == '.' && strncmp (name + n - 12, ".ah-", 4) == 0) {
        for (size_t i = n - 8; i < n; i++)
            if (!strchr ("0123456789abcdef", name [i]))
                return false;
        return true;
    }
    return false;
}
