/*  actors/api/vscreen.h: a terminal's screen kept by the server
    (issue 29, docs/api.md "Terminals"): libvterm (Debian's libvterm,
    a well-kept terminal emulator library, not a parser of our own) fed
    with a terminal's output, its scrollback kept as rendered lines, and
    the whole drawn again for a client that attaches: the scrollback
    lines, then the screen, the cursor placed.

    Memory is bounded: the screen (libvterm's cells, twice with the
    alternate screen) for at most AH_VSCREEN_AREA_MAX cells, and the
    scrollback at most sb_lines lines and sb_bytes bytes (oldest dropped).
    One thread (the api's) uses an instance.                            */
#ifndef AH_API_VSCREEN_H
#define AH_API_VSCREEN_H

#include "proto/buf.h"

#include <stddef.h>
#include <stdint.h>

#define AH_VSCREEN_AREA_MAX  50000          //  cols x rows at most (e.g. 250 x 200)

typedef struct ah_vscreen_t ah_vscreen_t;

//  NULL when out of memory or the size is out of range (1..1000 each,
//  the area at most AH_VSCREEN_AREA_MAX).
ah_vscreen_t *ah_vscreen_new (int rows, int cols, size_t sb_lines, size_t sb_bytes);
void ah_vscreen_destroy (ah_vscreen_t **self_p);
//  Output of the terminal's program.
void ah_vscreen_write (ah_vscreen_t *self, const uint8_t *data, size_t size);
//  0, or -1 (out of range: unchanged).
int  ah_vscreen_resize (ah_vscreen_t *self, int rows, int cols);
//  The title the program set (OSC 0/2), "" none.
const char *ah_vscreen_title (const ah_vscreen_t *self);
size_t ah_vscreen_sb_lines (const ah_vscreen_t *self);
//  Appends to out what draws the scrollback and the screen on a fresh
//  terminal of the same size. 0 / -1 (out of memory).
int  ah_vscreen_render (ah_vscreen_t *self, ah_buf_t *out);
//  The screen's text alone (rows joined by '\n', trailing blanks cut),
//  for the list's "screen" and for tests; caller frees. NULL: no memory.
char *ah_vscreen_text (ah_vscreen_t *self);

#endif
