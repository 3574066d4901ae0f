/*  forksrv.py, the kernel template's program (forksrv.h), embedded in the
 *  binary so korch needs no file beside it. The Makefile assembles this
 *  with -Isrc/launcher, where .incbin finds it; a NUL follows (not counted).
 */
    .section .rodata
    .global korch_forksrv_py, korch_forksrv_py_end
    .balign 16
korch_forksrv_py:
    .incbin "forksrv.py"
korch_forksrv_py_end:
    .byte 0

    .section .note.GNU-stack, "", @progbits
