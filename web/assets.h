/*  web/assets.h: the console's files and docs/openapi.json, compiled
    into the binary (web/CMakeLists.txt embeds them at build time), so the
    server serves them with nothing installed beside it.               */
#ifndef AH_WEB_ASSETS_H
#define AH_WEB_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;               //  "app.js": a file of web/console/
    const char *type;               //  its Content-Type
    const unsigned char *data;
    size_t size;
} ah_web_asset_t;

//  The generated tables, each ending with { 0 }: the console's files,
//  and the documents the server serves about itself (docs/openapi.json).
extern const ah_web_asset_t ah_web_assets_table [];
extern const ah_web_asset_t ah_web_docs_table [];

//  The asset of that exact name, or NULL. A name is looked up, never
//  opened: nothing but the table's entries can be served.
const ah_web_asset_t *ah_web_asset (const char *name);

//  The document of that exact name ("openapi.json"), or NULL.
const ah_web_asset_t *ah_web_doc (const char *name);

#endif
