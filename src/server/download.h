/*  Files from a kernel or a user (work-dir files, figures, the notebook),
 *  served so that opening one never runs script in korch's origin
 *  (download.c; issue 21 item 4). Loop thread only, like every response.
 */
#ifndef KORCH_SRV_DOWNLOAD_H
#define KORCH_SRV_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include "http.h"

/* Answer req with len bytes of data (copied) of type mime under name (its
   last path segment goes in Content-Disposition): an attachment unless
   srv_file_inline(mime), with srv_file_headers (nosniff, CSP sandbox)
   always. */
void srv_respond_file(srv_req_t *req, const char *name, const char *mime, const void *data, size_t len);

/* The raster images the page shows inline (PNG, JPEG, GIF, WebP): no script in them. */
bool srv_file_inline(const char *mime);

/* The Content-Disposition value for name: a new string, NULL when out of memory. */
char *srv_content_disposition(const char *name, bool attachment);

/* Name/value pairs sent with every file: nosniff and the CSP sandbox. */
extern const char *const srv_file_headers[2][2];

#endif
