/*  web/assets.h: the console's files, compiled into the binary
    (web/CMakeLists.txt embeds web/console/ at build time), so the server
    serves them with nothing installed beside it.                      */
#ifndef AH_WEB_ASSETS_H
#define AH_WEB_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;               //  "app.js": a file of web/console/
    const char *type;               //  its Content-Type
    const unsigned char *data;
    size_t size;
} ah_web_asset_t;

//  The generated table, ending with { 0 }.
extern const ah_web_asset_t ah_web_assets_table [];

//  The asset of that exact name, or NULL. A name is looked up, never
//  opened: nothing but the table's entries can be served.
const ah_web_asset_t *ah_web_asset (const char *name);

#endif
