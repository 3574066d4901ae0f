/*  The web app's bundle (src/web, built by scripts/build-web.sh into
 *  $(BUILD)/web/), embedded in the binary: `korch serve` serves it with no
 *  file beside it. The Makefile assembles this with -I$(BUILD)/web, where
 *  .incbin finds the files. Each blob is followed by a NUL (not counted).
 */
#define BLOB(sym, file)            \
    .global sym, sym##_end;        \
    .balign 16;                    \
sym:                               \
    .incbin file;                  \
sym##_end:                         \
    .byte 0

    .section .rodata
BLOB(korch_web_index, "index.html")
BLOB(korch_web_js, "korch.js")
BLOB(korch_web_css, "korch.css")

    .section .note.GNU-stack, "", @progbits
