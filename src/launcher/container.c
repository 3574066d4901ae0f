/*  What the container backends share (container.h). */
#include "container.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy of s with every name replaced by val (new string), NULL on no memory. */
static char *s_replace(const char *s, const char *name, const char *val)
{
    size_t nl = strlen(name), vl = strlen(val), count = 0;
    for (const char *p = strstr(s, name); p; p = strstr(p + nl, name))
        count++;
    char *out = malloc(strlen(s) + count * vl + 1), *w = out;
    if (!out)
        return NULL;
    const char *p = s, *hit;
    while ((hit = strstr(p, name))) {
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, val, vl);
        w += vl;
        p = hit + nl;
    }
    memcpy(w, p, strlen(p) + 1);
    return out;
}

bool korch_container_argv(json_t *cmd, const korch_kernelspec_t *spec, const char *conn_in)
{
    for (size_t i = 0; spec->argv[i]; i++) {
        const char *a = spec->argv[i];
        if (i == 0 && strchr(a, '/'))
            a = strrchr(a, '/') + 1;
        char *x = s_replace(a, "{connection_file}", conn_in);
        bool ok = x && json_array_append_new(cmd, json_string(x)) == 0;
        free(x);
        if (!ok)
            return false;
    }
    return true;
}

void korch_container_image(const char *opt, const korch_kernelspec_t *spec, char *buf, size_t len)
{
    json_t *meta = spec->json ? json_object_get(spec->json, "metadata") : NULL;
    json_t *img = json_object_get(json_object_get(meta, "korch"), "image");
    if (opt)
        snprintf(buf, len, "%s", opt);
    else if (json_is_string(img))
        snprintf(buf, len, "%s", json_string_value(img));
    else
        snprintf(buf, len, "korch-kernel-%s:latest", spec->name ? spec->name : "python3");
}

size_t korch_container_demux(const unsigned char *in, size_t len, char *out, size_t cap)
{
    size_t w = 0;
    bool framed = len >= 8 && in[0] <= 2 && !in[1] && !in[2] && !in[3];
    size_t pos = 0;
    while (pos < len) {
        const unsigned char *chunk = in + pos;
        size_t n = len - pos;
        if (framed) {
            if (n < 8)
                break;
            size_t sz = (size_t)in[pos + 4] << 24 | (size_t)in[pos + 5] << 16 | (size_t)in[pos + 6] << 8 | in[pos + 7];
            chunk = in + pos + 8;
            n = sz <= len - pos - 8 ? sz : len - pos - 8;
            pos += 8 + n;
        } else {
            pos = len;
        }
        /* Keep the last cap bytes. */
        if (n >= cap) {
            memcpy(out, chunk + n - cap, cap);
            w = cap;
        } else {
            if (w + n > cap) {
                memmove(out, out + (w + n - cap), cap - n);
                w = cap - n;
            }
            memcpy(out + w, chunk, n);
            w += n;
        }
    }
    return w;
}
