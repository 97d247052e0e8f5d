// term.js: a small terminal emulator for the console (VT100/xterm subset).
//
// What a shell, an editor or `top` sends: UTF-8 text, C0 controls (CR, LF,
// BS, HT, BEL), ESC 7/8/D/E/M/c, CSI cursor moves, erases, inserts and
// deletes, scroll regions, SGR colours (16, 256 and true colour), the
// alternate screen, cursor visibility, application cursor keys, bracketed
// paste, and the device status and attribute queries (answered). OSC
// strings (window titles) are read and dropped. The screen is a grid of
// cells drawn into rows of spans, built with DOM calls only (no HTML is
// ever parsed from what the sandbox sends). Lines that scroll off the top
// of the main screen stay above it, up to SCROLLBACK lines.

const SCROLLBACK = 1000;
const PALETTE = ["#101418", "#e0605a", "#7bc46f", "#e0b050", "#5f9bef", "#c678dd", "#56b6c2", "#d6dde4",
                 "#5c6670", "#ff7b72", "#9be48f", "#f2cc60", "#82b1ff", "#e09cf5", "#7fdbe6", "#ffffff"];

function color256(n) {
  if (n < 16) return PALETTE[n];
  if (n < 232) {
    n -= 16;
    const v = [0, 95, 135, 175, 215, 255];
    return `rgb(${v[Math.floor(n / 36)]},${v[Math.floor(n / 6) % 6]},${v[n % 6]})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g},${g},${g})`;
}

const DEFAULT_ATTR = Object.freeze({ fg: null, bg: null, bold: false, dim: false, italic: false, under: false, inverse: false });

function blankRow(cols, attr) {
  const row = new Array(cols);
  for (let i = 0; i < cols; i++) row[i] = { ch: " ", a: attr };
  return row;
}

export class Terminal {
  constructor(element, cols = 80, rows = 24) {
    this.el = element;
    this.cols = cols;
    this.rows = rows;
    this.decoder = new TextDecoder("utf-8");
    this.listeners = [];
    this.scrollbackEl = document.createElement("div");
    this.screenEl = document.createElement("div");
    this.el.replaceChildren(this.scrollbackEl, this.screenEl);
    this.reset();
    this.el.addEventListener("keydown", (e) => this.onKey(e));
    const redraw = () => { this.dirty = true; this.scheduleDraw(); };
    this.el.addEventListener("focus", redraw);
    this.el.addEventListener("blur", redraw);
    this.el.addEventListener("paste", (e) => {
      const text = e.clipboardData ? e.clipboardData.getData("text/plain") : "";
      if (text) this.emit(this.bracketedPaste ? `\x1b[200~${text}\x1b[201~` : text);
      e.preventDefault();
    });
  }

  reset() {
    this.attr = DEFAULT_ATTR;
    this.main = this.makeScreen();
    this.alt = null;
    this.grid = this.main;
    this.x = 0; this.y = 0; this.wrapNext = false;
    this.top = 0; this.bottom = this.rows - 1;
    this.saved = { x: 0, y: 0, attr: DEFAULT_ATTR };
    this.cursorVisible = true;
    this.appCursor = false;
    this.bracketedPaste = false;
    this.autowrap = true;
    this.state = "ground";
    this.params = "";
    this.dirty = true;
    this.scheduleDraw();
  }

  makeScreen() {
    const g = [];
    for (let i = 0; i < this.rows; i++) g.push(blankRow(this.cols, DEFAULT_ATTR));
    return g;
  }

  // What the user types: fn(string).
  onData(fn) { this.listeners.push(fn); }
  emit(s) { for (const fn of this.listeners) fn(s); }
  focus() { this.el.focus(); }

  // The character cell's size in pixels, from a probe in the element.
  cellSize() {
    const probe = document.createElement("span");
    probe.textContent = "MMMMMMMMMM";
    probe.style.visibility = "hidden";
    this.screenEl.appendChild(probe);
    const r = probe.getBoundingClientRect();
    probe.remove();
    const lh = parseFloat(getComputedStyle(this.el).lineHeight) || r.height;
    return { w: r.width / 10 || 8, h: lh || 16 };
  }

  // The size that fits the element now.
  fit() {
    const c = this.cellSize();
    const style = getComputedStyle(this.el);
    const w = this.el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
    const h = this.el.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    return { cols: Math.max(20, Math.min(400, Math.floor(w / c.w))), rows: Math.max(5, Math.min(200, Math.floor((h - 2) / c.h))) };
  }

  resize(cols, rows) {
    if (cols === this.cols && rows === this.rows) return;
    for (const g of [this.main, this.alt]) {
      if (!g) continue;
      for (let i = 0; i < g.length; i++) {
        const row = g[i];
        if (row.length > cols) row.length = cols;
        while (row.length < cols) row.push({ ch: " ", a: DEFAULT_ATTR });
      }
      while (g.length > rows) {
        // Keep the rows around the cursor: drop from the top into the scrollback.
        const gone = g.shift();
        if (g === this.main) this.pushScrollback(gone);
        if (g === this.grid) this.y = Math.max(0, this.y - 1);
      }
      while (g.length < rows) g.push(blankRow(cols, DEFAULT_ATTR));
    }
    this.cols = cols; this.rows = rows;
    this.top = 0; this.bottom = rows - 1;
    this.x = Math.min(this.x, cols - 1); this.y = Math.min(this.y, rows - 1);
    this.wrapNext = false;
    this.dirty = true;
    this.scheduleDraw();
  }

  // ---------------------------------------------------------------- input

  onKey(e) {
    if (e.isComposing) return;
    let s = null;
    const ctrl = e.ctrlKey && !e.altKey && !e.metaKey;
    const cur = (c) => (this.appCursor ? "\x1bO" : "\x1b[") + c;
    switch (e.key) {
      case "Enter": s = "\r"; break;
      case "Backspace": s = ctrl ? "\x08" : "\x7f"; break;
      case "Tab": s = e.shiftKey ? "\x1b[Z" : "\t"; break;
      case "Escape": s = "\x1b"; break;
      case "ArrowUp": s = cur("A"); break;
      case "ArrowDown": s = cur("B"); break;
      case "ArrowRight": s = cur("C"); break;
      case "ArrowLeft": s = cur("D"); break;
      case "Home": s = cur("H"); break;
      case "End": s = cur("F"); break;
      case "PageUp": s = "\x1b[5~"; break;
      case "PageDown": s = "\x1b[6~"; break;
      case "Delete": s = "\x1b[3~"; break;
      case "Insert": s = "\x1b[2~"; break;
      default:
        if (/^F([1-9]|1[0-2])$/.test(e.key)) {
          const n = Number(e.key.slice(1));
          s = n <= 4 ? "\x1bO" + "PQRS"[n - 1] : `\x1b[${[15, 17, 18, 19, 20, 21, 23, 24][n - 5]}~`;
        } else if (e.key.length === 1 && ctrl) {
          const c = e.key.toLowerCase().charCodeAt(0);
          if (c === 99 && String(window.getSelection())) return;      // Ctrl+C copies a selection
          if (c === 118) return;                                      // Ctrl+V: the paste event
          if (c >= 97 && c <= 122) s = String.fromCharCode(c - 96);
          else if (e.key === "[" ) s = "\x1b";
          else if (e.key === "\\") s = "\x1c";
          else if (e.key === "]") s = "\x1d";
          else if (e.key === " " || e.key === "@") s = "\x00";
        } else if (e.key.length === 1 && !e.metaKey) {
          s = (e.altKey ? "\x1b" : "") + e.key;
        } else if ([...e.key].length === 1 && !e.metaKey && !e.ctrlKey) {
          s = e.key;                                                  // one astral character
        }
    }
    if (s === null) return;
    e.preventDefault();
    this.emit(s);
  }

  // ---------------------------------------------------------------- output

  write(bytes) {
    const text = typeof bytes === "string" ? bytes : this.decoder.decode(bytes, { stream: true });
    for (const ch of text) this.feed(ch);
    this.dirty = true;
    this.scheduleDraw();
  }

  feed(ch) {
    const c = ch.codePointAt(0);
    switch (this.state) {
      case "ground":
        if (c === 0x1b) { this.state = "esc"; return; }
        if (c < 0x20 || c === 0x7f) { this.control(c); return; }
        if (c >= 0x80 && c < 0xa0) return;
        this.print(ch);
        return;
      case "esc":
        this.state = "ground";
        switch (ch) {
          case "[": this.state = "csi"; this.params = ""; return;
          case "]": this.state = "osc"; return;
          case "(": case ")": case "*": case "+": this.state = "charset"; return;
          case "7": this.saveCursor(); return;
          case "8": this.restoreCursor(); return;
          case "D": this.index(); return;
          case "E": this.x = 0; this.index(); return;
          case "M": this.reverseIndex(); return;
          case "c": this.reset(); return;
          default: return;                        // ESC = ESC > and others: nothing to draw
        }
      case "charset":
        this.state = "ground";
        return;
      case "osc":
        if (c === 0x07) this.state = "ground";
        else if (c === 0x1b) this.state = "osc-esc";
        return;
      case "osc-esc":
        this.state = ch === "\\" ? "ground" : "osc";
        return;
      case "csi":
        if (c >= 0x40 && c <= 0x7e) {
          this.state = "ground";
          this.csi(ch, this.params);
        } else if (c === 0x1b) {
          this.state = "esc";
        } else if (this.params.length < 64) {
          this.params += ch;
        }
        return;
    }
  }

  control(c) {
    switch (c) {
      case 0x08: if (this.x > 0) this.x--; this.wrapNext = false; break;
      case 0x09: this.x = Math.min(this.cols - 1, (Math.floor(this.x / 8) + 1) * 8); break;
      case 0x0a: case 0x0b: case 0x0c: this.index(); break;
      case 0x0d: this.x = 0; this.wrapNext = false; break;
      default: break;                               // BEL and the rest
    }
  }

  print(ch) {
    if (this.wrapNext && this.autowrap) {
      this.x = 0;
      this.index();
    }
    this.wrapNext = false;
    this.grid[this.y][this.x] = { ch, a: this.attr };
    if (this.x === this.cols - 1) this.wrapNext = true;
    else this.x++;
  }

  index() {
    this.wrapNext = false;
    if (this.y === this.bottom) this.scrollUp(1);
    else if (this.y < this.rows - 1) this.y++;
  }

  reverseIndex() {
    if (this.y === this.top) this.scrollDown(1);
    else if (this.y > 0) this.y--;
  }

  pushScrollback(row) {
    const div = this.rowElement(row, -1);
    this.scrollbackEl.appendChild(div);
    while (this.scrollbackEl.childElementCount > SCROLLBACK) this.scrollbackEl.firstChild.remove();
  }

  scrollUp(n) {
    for (let i = 0; i < n; i++) {
      const gone = this.grid.splice(this.top, 1)[0];
      if (this.grid === this.main && this.top === 0) this.pushScrollback(gone);
      this.grid.splice(this.bottom, 0, blankRow(this.cols, this.attr));
    }
  }

  scrollDown(n) {
    for (let i = 0; i < n; i++) {
      this.grid.splice(this.bottom, 1);
      this.grid.splice(this.top, 0, blankRow(this.cols, this.attr));
    }
  }

  saveCursor() { this.saved = { x: this.x, y: this.y, attr: this.attr }; }
  restoreCursor() {
    this.x = Math.min(this.saved.x, this.cols - 1);
    this.y = Math.min(this.saved.y, this.rows - 1);
    this.attr = this.saved.attr;
    this.wrapNext = false;
  }

  eraseCells(y, from, to) {
    const row = this.grid[y];
    for (let i = Math.max(0, from); i < Math.min(this.cols, to); i++) row[i] = { ch: " ", a: this.attr };
  }

  csi(final, raw) {
    const priv = raw.startsWith("?");
    const body = priv || raw.startsWith(">") ? raw.slice(1) : raw;
    const p = body.split(";").map((v) => (v === "" ? NaN : Number(v)));
    const n = (i, d = 1) => (Number.isFinite(p[i]) && p[i] > 0 ? p[i] : d);
    this.wrapNext = false;
    switch (final) {
      case "A": this.y = Math.max(this.y < this.top ? 0 : this.top, this.y - n(0)); break;
      case "B": this.y = Math.min(this.y > this.bottom ? this.rows - 1 : this.bottom, this.y + n(0)); break;
      case "C": this.x = Math.min(this.cols - 1, this.x + n(0)); break;
      case "D": this.x = Math.max(0, this.x - n(0)); break;
      case "E": this.x = 0; this.y = Math.min(this.rows - 1, this.y + n(0)); break;
      case "F": this.x = 0; this.y = Math.max(0, this.y - n(0)); break;
      case "G": case "`": this.x = Math.min(this.cols - 1, n(0) - 1); break;
      case "d": this.y = Math.min(this.rows - 1, n(0) - 1); break;
      case "H": case "f":
        this.y = Math.min(this.rows - 1, n(0) - 1);
        this.x = Math.min(this.cols - 1, n(1) - 1);
        break;
      case "J": {
        const mode = Number.isFinite(p[0]) ? p[0] : 0;
        if (mode === 0) {
          this.eraseCells(this.y, this.x, this.cols);
          for (let y = this.y + 1; y < this.rows; y++) this.eraseCells(y, 0, this.cols);
        } else if (mode === 1) {
          this.eraseCells(this.y, 0, this.x + 1);
          for (let y = 0; y < this.y; y++) this.eraseCells(y, 0, this.cols);
        } else {
          for (let y = 0; y < this.rows; y++) this.eraseCells(y, 0, this.cols);
          if (mode === 3) this.scrollbackEl.replaceChildren();
        }
        break;
      }
      case "K": {
        const mode = Number.isFinite(p[0]) ? p[0] : 0;
        if (mode === 0) this.eraseCells(this.y, this.x, this.cols);
        else if (mode === 1) this.eraseCells(this.y, 0, this.x + 1);
        else this.eraseCells(this.y, 0, this.cols);
        break;
      }
      case "X": this.eraseCells(this.y, this.x, this.x + n(0)); break;
      case "@": {
        const row = this.grid[this.y];
        for (let i = 0; i < n(0); i++) { row.splice(this.x, 0, { ch: " ", a: this.attr }); row.length = this.cols; }
        break;
      }
      case "P": {
        const row = this.grid[this.y];
        for (let i = 0; i < n(0); i++) { row.splice(this.x, 1); row.push({ ch: " ", a: this.attr }); }
        break;
      }
      case "L": case "M":
        if (this.y >= this.top && this.y <= this.bottom) {
          const saveTop = this.top;
          this.top = this.y;
          if (final === "L") this.scrollDown(Math.min(n(0), this.bottom - this.y + 1));
          else { const g = this.grid; for (let i = 0; i < Math.min(n(0), this.bottom - this.y + 1); i++) { g.splice(this.y, 1); g.splice(this.bottom, 0, blankRow(this.cols, this.attr)); } }
          this.top = saveTop;
          this.x = 0;
        }
        break;
      case "S": this.scrollUp(n(0)); break;
      case "T": this.scrollDown(n(0)); break;
      case "r": {
        const t = n(0) - 1, b = n(1, this.rows) - 1;
        if (t < b && b < this.rows) { this.top = t; this.bottom = b; this.x = 0; this.y = 0; }
        break;
      }
      case "s": this.saveCursor(); break;
      case "u": this.restoreCursor(); break;
      case "m": this.sgr(p); break;
      case "n":
        if (p[0] === 6) this.emit(`\x1b[${this.y + 1};${this.x + 1}R`);
        else if (p[0] === 5) this.emit("\x1b[0n");
        break;
      case "c":
        if (!raw.startsWith(">")) this.emit("\x1b[?1;2c");
        break;
      case "h": case "l": if (priv) this.mode(p, final === "h"); break;
      default: break;
    }
  }

  mode(p, on) {
    for (const m of p) {
      if (m === 1) this.appCursor = on;
      else if (m === 7) this.autowrap = on;
      else if (m === 25) this.cursorVisible = on;
      else if (m === 2004) this.bracketedPaste = on;
      else if (m === 47 || m === 1047 || m === 1049) {
        if (on && !this.alt) {
          if (m === 1049) this.saveCursor();
          this.alt = this.makeScreen();
          this.grid = this.alt;
        } else if (!on && this.alt) {
          this.alt = null;
          this.grid = this.main;
          if (m === 1049) this.restoreCursor();
        }
        this.top = 0; this.bottom = this.rows - 1;
      }
    }
  }

  sgr(p) {
    let a = { ...this.attr };
    if (p.length === 0) p = [0];
    for (let i = 0; i < p.length; i++) {
      const v = Number.isFinite(p[i]) ? p[i] : 0;
      if (v === 0) a = { ...DEFAULT_ATTR };
      else if (v === 1) a.bold = true;
      else if (v === 2) a.dim = true;
      else if (v === 3) a.italic = true;
      else if (v === 4) a.under = true;
      else if (v === 7) a.inverse = true;
      else if (v === 22) { a.bold = false; a.dim = false; }
      else if (v === 23) a.italic = false;
      else if (v === 24) a.under = false;
      else if (v === 27) a.inverse = false;
      else if (v >= 30 && v <= 37) a.fg = PALETTE[v - 30];
      else if (v >= 90 && v <= 97) a.fg = PALETTE[v - 90 + 8];
      else if (v >= 40 && v <= 47) a.bg = PALETTE[v - 40];
      else if (v >= 100 && v <= 107) a.bg = PALETTE[v - 100 + 8];
      else if (v === 39) a.fg = null;
      else if (v === 49) a.bg = null;
      else if (v === 38 || v === 48) {
        let col = null;
        if (p[i + 1] === 5 && Number.isFinite(p[i + 2])) { col = color256(Math.min(255, p[i + 2])); i += 2; }
        else if (p[i + 1] === 2) { col = `rgb(${p[i + 2] | 0},${p[i + 3] | 0},${p[i + 4] | 0})`; i += 4; }
        if (v === 38) a.fg = col; else a.bg = col;
      }
    }
    this.attr = Object.freeze(a);
  }

  // ---------------------------------------------------------------- drawing

  scheduleDraw() {
    if (this.drawPending) return;
    this.drawPending = true;
    requestAnimationFrame(() => { this.drawPending = false; this.draw(); });
  }

  rowElement(row, cursorX) {
    const div = document.createElement("div");
    div.className = "row";
    let run = "", runAttr = null, runCursor = false;
    const flush = () => {
      if (!run) return;
      const span = document.createElement("span");
      span.textContent = run;
      const a = runAttr;
      let fg = a.fg, bg = a.bg;
      if (a.inverse) { fg = a.bg || "#101418"; bg = a.fg || "#d6dde4"; }
      if (fg) span.style.color = fg;
      if (bg) span.style.backgroundColor = bg;
      const cls = [a.bold && "b", a.dim && "d", a.italic && "i", a.under && "u", runCursor && "cursor"].filter(Boolean);
      if (cls.length) span.className = cls.join(" ");
      div.appendChild(span);
      run = "";
    };
    for (let i = 0; i < row.length; i++) {
      const cell = row[i];
      const isCursor = i === cursorX;
      if (cell.a !== runAttr || isCursor !== runCursor) {
        flush();
        runAttr = cell.a;
        runCursor = isCursor;
      }
      run += cell.ch;
    }
    flush();
    // Trailing blanks need no spans; keep the text of the row exact.
    return div;
  }

  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    const follow = this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < 40;
    const rows = [];
    for (let y = 0; y < this.rows; y++) {
      const cx = this.cursorVisible && y === this.y && document.activeElement === this.el ? this.x : -1;
      rows.push(this.rowElement(this.grid[y], cx));
    }
    this.screenEl.replaceChildren(...rows);
    if (follow) this.el.scrollTop = this.el.scrollHeight;
  }

  // The screen's text, rows joined by newlines (for tests and copy).
  text() {
    return this.grid.map((row) => row.map((c) => c.ch).join("").trimEnd()).join("\n");
  }
}
