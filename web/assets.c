/*  web/assets.c: the lookup of the console's embedded files.           */
#include "web/assets.h"

#include <string.h>

const ah_web_asset_t *ah_web_asset (const char *name)
{
    if (!name)
        return NULL;
    for (const ah_web_asset_t *a = ah_web_assets_table; a->name; a++)
        if (strcmp (a->name, name) == 0)
            return a;
    return NULL;
}
