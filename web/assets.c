/*  web/assets.c: the lookup of the embedded files (web/assets.h).      */
#include "web/assets.h"

#include <string.h>

static const ah_web_asset_t *s_find (const ah_web_asset_t *table, const char *name)
{
    if (!name)
        return NULL;
    for (const ah_web_asset_t *a = table; a->name; a++)
        if (strcmp (a->name, name) == 0)
            return a;
    return NULL;
}

const ah_web_asset_t *ah_web_asset (const char *name)
{
    return s_find (ah_web_assets_table, name);
}

const ah_web_asset_t *ah_web_doc (const char *name)
{
    return s_find (ah_web_docs_table, name);
}
