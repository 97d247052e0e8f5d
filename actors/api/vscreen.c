/*  actors/api/vscreen.c: see vscreen.h.                               */
#include "actors/api/vscreen.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vterm.h>

struct ah_vscreen_t {
    VTerm *vt;
    VTermScreen *screen;
    int rows, cols;
    char title [256];
    //  The scrollback: a ring of rendered lines (oldest at head).
    char **sb;
    size_t sb_cap, sb_head, sb_count, sb_bytes, sb_max_bytes;
    ah_buf_t line;                  //  scratch: one line rendered
};

static bool s_size_ok (int rows, int cols)
{
    return rows >= 1 && rows <= 1000 && cols >= 1 && cols <= 1000
        && (long) rows * cols <= AH_VSCREEN_AREA_MAX;
}

//  ---------------------------------------------------------------------
//  Rendering cells

typedef struct {
    VTermScreenCellAttrs attrs;
    VTermColor fg, bg;
    bool plain;                     //  the default pen (what ESC [0m sets)
} pen_t;

static void s_color (ah_buf_t *b, const VTermColor *c, bool fg)
{
    if (fg ? VTERM_COLOR_IS_DEFAULT_FG (c) : VTERM_COLOR_IS_DEFAULT_BG (c))
        return;
    if (VTERM_COLOR_IS_INDEXED (c)) {
        int i = c->indexed.idx;
        if (i < 8)
            ah_buf_appendf (b, ";%d", (fg ? 30 : 40) + i);
        else if (i < 16)
            ah_buf_appendf (b, ";%d", (fg ? 90 : 100) + i - 8);
        else
            ah_buf_appendf (b, ";%d;5;%d", fg ? 38 : 48, i);
    }
    else if (VTERM_COLOR_IS_RGB (c))
        ah_buf_appendf (b, ";%d;2;%d;%d;%d", fg ? 38 : 48, c->rgb.red, c->rgb.green, c->rgb.blue);
}

static bool s_color_eq (const VTermColor *a, const VTermColor *b)
{
    if (a->type != b->type)
        return false;
    if (VTERM_COLOR_IS_INDEXED (a))
        return a->indexed.idx == b->indexed.idx;
    return a->rgb.red == b->rgb.red && a->rgb.green == b->rgb.green && a->rgb.blue == b->rgb.blue;
}

static bool s_plain (const VTermScreenCell *c)
{
    static const VTermScreenCellAttrs none;
    return memcmp (&c->attrs, &none, sizeof none) == 0
        && VTERM_COLOR_IS_DEFAULT_FG (&c->fg) && VTERM_COLOR_IS_DEFAULT_BG (&c->bg);
}

//  SGR for the cell's pen when it differs from the last one.
static void s_pen (ah_buf_t *b, pen_t *pen, const VTermScreenCell *c)
{
    if (s_plain (c)) {
        if (!pen->plain)
            ah_buf_appendf (b, "\x1b[0m");
        pen->plain = true;
        return;
    }
    if (!pen->plain && memcmp (&pen->attrs, &c->attrs, sizeof c->attrs) == 0
    &&  s_color_eq (&pen->fg, &c->fg) && s_color_eq (&pen->bg, &c->bg))
        return;
    ah_buf_appendf (b, "\x1b[0");
    if (c->attrs.bold)      ah_buf_appendf (b, ";1");
    if (c->attrs.italic)    ah_buf_appendf (b, ";3");
    if (c->attrs.underline) ah_buf_appendf (b, ";4");
    if (c->attrs.blink)     ah_buf_appendf (b, ";5");
    if (c->attrs.reverse)   ah_buf_appendf (b, ";7");
    if (c->attrs.strike)    ah_buf_appendf (b, ";9");
    s_color (b, &c->fg, true);
    s_color (b, &c->bg, false);
    ah_buf_appendf (b, "m");
    pen->attrs = c->attrs;
    pen->fg = c->fg;
    pen->bg = c->bg;
    pen->plain = false;
}

static void s_utf8 (ah_buf_t *b, uint32_t c)
{
    uint8_t u [4];
    size_t n;
    if (c < 0x80)         { u [0] = (uint8_t) c; n = 1; }
    else if (c < 0x800)   { u [0] = 0xc0 | (c >> 6); u [1] = 0x80 | (c & 0x3f); n = 2; }
    else if (c < 0x10000) { u [0] = 0xe0 | (c >> 12); u [1] = 0x80 | ((c >> 6) & 0x3f);
                            u [2] = 0x80 | (c & 0x3f); n = 3; }
    else if (c < 0x110000) { u [0] = 0xf0 | (c >> 18); u [1] = 0x80 | ((c >> 12) & 0x3f);
                             u [2] = 0x80 | ((c >> 6) & 0x3f); u [3] = 0x80 | (c & 0x3f); n = 4; }
    else { u [0] = '?'; n = 1; }
    ah_buf_append (b, u, n);
}

static bool s_blank (const VTermScreenCell *c)
{
    return (c->chars [0] == 0 || c->chars [0] == ' ') && !c->attrs.reverse && !c->attrs.underline
        && VTERM_COLOR_IS_DEFAULT_BG (&c->bg);
}

//  One line of cells (trailing blanks cut), attributes reset at its end.
//  text: characters only, no SGR.
static void s_line (ah_buf_t *b, const VTermScreenCell *cells, int n, bool text)
{
    while (n > 0 && s_blank (&cells [n - 1]))
        n--;
    pen_t pen = { .plain = true };
    for (int i = 0; i < n; i++) {
        const VTermScreenCell *c = &cells [i];
        if (c->chars [0] == (uint32_t) -1)
            continue;                       //  the right half of a wide character
        if (!text)
            s_pen (b, &pen, c);
        if (c->chars [0] == 0)
            ah_buf_append (b, " ", 1);
        for (int k = 0; k < VTERM_MAX_CHARS_PER_CELL && c->chars [k]; k++)
            s_utf8 (b, c->chars [k]);
    }
    if (!text && !pen.plain)
        ah_buf_appendf (b, "\x1b[0m");
}

//  ---------------------------------------------------------------------
//  libvterm's callbacks

static void s_sb_drop (ah_vscreen_t *self)
{
    char *old = self->sb [self->sb_head];
    self->sb_bytes -= strlen (old);
    free (old);
    self->sb [self->sb_head] = NULL;
    self->sb_head = (self->sb_head + 1) % self->sb_cap;
    self->sb_count--;
}

static int s_sb_pushline (int cols, const VTermScreenCell *cells, void *user)
{
    ah_vscreen_t *self = user;
    if (!self->sb_cap)
        return 1;
    ah_buf_consume (&self->line, ah_buf_size (&self->line));
    s_line (&self->line, cells, cols, false);
    char *copy = malloc (ah_buf_size (&self->line) + 1);
    if (!copy)
        return 1;
    memcpy (copy, ah_buf_head (&self->line), ah_buf_size (&self->line));
    copy [ah_buf_size (&self->line)] = 0;
    while (self->sb_count && (self->sb_count == self->sb_cap
                              || self->sb_bytes + strlen (copy) > self->sb_max_bytes))
        s_sb_drop (self);
    self->sb [(self->sb_head + self->sb_count) % self->sb_cap] = copy;
    self->sb_count++;
    self->sb_bytes += strlen (copy);
    return 1;
}

static int s_settermprop (VTermProp prop, VTermValue *val, void *user)
{
    ah_vscreen_t *self = user;
    if (prop == VTERM_PROP_TITLE && val->string) {
        //  Kept printable: controls become '?'.
        size_t i = 0;
        for (const char *s = val->string; *s && i < sizeof self->title - 1; s++)
            self->title [i++] = (unsigned char) *s < 0x20 || *s == 0x7f ? '?' : *s;
        self->title [i] = 0;
    }
    return 1;
}

static const VTermScreenCallbacks s_callbacks = {
    .sb_pushline = s_sb_pushline,
    .settermprop = s_settermprop,
};

//  ---------------------------------------------------------------------

ah_vscreen_t *ah_vscreen_new (int rows, int cols, size_t sb_lines, size_t sb_bytes)
{
    if (!s_size_ok (rows, cols))
        return NULL;
    ah_vscreen_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->rows = rows;
    self->cols = cols;
    self->sb_cap = sb_lines;
    self->sb_max_bytes = sb_bytes;
    self->sb = sb_lines ? calloc (sb_lines, sizeof *self->sb) : NULL;
    self->vt = vterm_new (rows, cols);
    if ((sb_lines && !self->sb) || !self->vt) {
        ah_vscreen_destroy (&self);
        return NULL;
    }
    vterm_set_utf8 (self->vt, 1);
    self->screen = vterm_obtain_screen (self->vt);
    vterm_screen_set_callbacks (self->screen, &s_callbacks, self);
    vterm_screen_enable_altscreen (self->screen, 1);
    vterm_screen_set_damage_merge (self->screen, VTERM_DAMAGE_SCROLL);
    vterm_screen_reset (self->screen, 1);
    return self;
}

void ah_vscreen_destroy (ah_vscreen_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_vscreen_t *self = *self_p;
    while (self->sb_count)
        s_sb_drop (self);
    free (self->sb);
    if (self->vt)
        vterm_free (self->vt);
    ah_buf_free (&self->line);
    free (self);
    *self_p = NULL;
}

void ah_vscreen_write (ah_vscreen_t *self, const uint8_t *data, size_t size)
{
    vterm_input_write (self->vt, (const char *) data, size);
}

int ah_vscreen_resize (ah_vscreen_t *self, int rows, int cols)
{
    if (!s_size_ok (rows, cols))
        return -1;
    if (rows != self->rows || cols != self->cols)
        vterm_set_size (self->vt, rows, cols);
    self->rows = rows;
    self->cols = cols;
    return 0;
}

const char *ah_vscreen_title (const ah_vscreen_t *self)
{
    return self->title;
}

size_t ah_vscreen_sb_lines (const ah_vscreen_t *self)
{
    return self->sb_count;
}

//  The screen's row r into b.
static int s_row (ah_vscreen_t *self, ah_buf_t *b, int r, bool text)
{
    VTermScreenCell *cells = calloc ((size_t) self->cols, sizeof *cells);
    if (!cells)
        return -1;
    for (int c = 0; c < self->cols; c++)
        vterm_screen_get_cell (self->screen, (VTermPos) { .row = r, .col = c }, &cells [c]);
    s_line (b, cells, self->cols, text);
    free (cells);
    return 0;
}

int ah_vscreen_render (ah_vscreen_t *self, ah_buf_t *out)
{
    //  From a clean slate: attributes off, home, screen cleared; the
    //  scrollback lines scroll up into the client's own as the screen's
    //  rows are drawn after them.
    ah_buf_appendf (out, "\x1b[0m\x1b[H\x1b[2J");
    for (size_t i = 0; i < self->sb_count; i++) {
        ah_buf_appendf (out, "%s\r\n", self->sb [(self->sb_head + i) % self->sb_cap]);
    }
    for (int r = 0; r < self->rows; r++) {
        if (s_row (self, out, r, false))
            return -1;
        if (r < self->rows - 1)
            ah_buf_appendf (out, "\r\n");
    }
    VTermPos pos;
    vterm_state_get_cursorpos (vterm_obtain_state (self->vt), &pos);
    return ah_buf_appendf (out, "\x1b[0m\x1b[%d;%dH", pos.row + 1, pos.col + 1);
}

char *ah_vscreen_text (ah_vscreen_t *self)
{
    ah_buf_t b = { 0 };
    for (int r = 0; r < self->rows; r++) {
        if (s_row (self, &b, r, true)) {
            ah_buf_free (&b);
            return NULL;
        }
        ah_buf_append (&b, "\n", 1);
    }
    size_t n = ah_buf_size (&b);
    char *text = malloc (n + 1);
    if (text) {
        memcpy (text, ah_buf_head (&b), n);
        text [n] = 0;
    }
    ah_buf_free (&b);
    return text;
}
