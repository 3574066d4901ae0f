/*  Small helpers for the images kernels send: base64 and image sizes. */
#ifndef KORCH_MEDIA_H
#define KORCH_MEDIA_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/error.h"
#include "korch/fsutil.h" /* korch_write_file, korch_mkdirs, korch_read_file moved there */

/* Decode base64 (whitespace ignored, as in Jupyter's image/png strings).
   Returns a new buffer (NUL-terminated for convenience) and its length in
   *len, or NULL when the text is not base64. */
unsigned char *korch_b64_decode(const char *text, size_t text_len, size_t *len);

/* Encode as base64 without line breaks: a new NUL-terminated string. */
char *korch_b64_encode(const unsigned char *data, size_t len);

/* Width and height of a PNG, JPEG or GIF; false when unknown. */
bool korch_image_size(const unsigned char *data, size_t len, int *width, int *height);

/* File extension for an image mime type ("png"), or NULL when not an image
   korch saves (image/png, image/jpeg, image/gif, image/svg+xml). */
const char *korch_image_ext(const char *mime);

/* Remove ANSI escape sequences (colours in tracebacks): a new string. */
char *korch_strip_ansi(const char *s);

#endif
