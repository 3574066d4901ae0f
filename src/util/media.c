/*  base64, image sizes and ANSI stripping. */
#include "korch/media.h"
#include "korch/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

unsigned char *korch_b64_decode(const char *text, size_t text_len, size_t *len)
{
    unsigned char *out = malloc(text_len / 4 * 3 + 4);
    if (!out)
        return NULL;
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    bool pad = false;
    for (size_t i = 0; i < text_len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            pad = true;
            continue;
        }
        int v = s_b64_val(c);
        if (v < 0 || pad) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    out[n] = 0;
    *len = n;
    return out;
}

char *korch_b64_encode(const unsigned char *data, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 2 < len; i += 3) {
        unsigned v = (unsigned)data[i] << 16 | (unsigned)data[i + 1] << 8 | data[i + 2];
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = tbl[v & 63];
    }
    if (i < len) {
        unsigned v = (unsigned)data[i] << 16 | (i + 1 < len ? (unsigned)data[i + 1] << 8 : 0);
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = 0;
    return out;
}

static unsigned s_be32(const unsigned char *p) { return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3]; }

bool korch_image_size(const unsigned char *d, size_t len, int *w, int *h)
{
    if (len >= 24 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0 && memcmp(d + 12, "IHDR", 4) == 0) {
        *w = (int)s_be32(d + 16);
        *h = (int)s_be32(d + 20);
        return true;
    }
    if (len >= 10 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0)) {
        *w = d[6] | d[7] << 8;
        *h = d[8] | d[9] << 8;
        return true;
    }
    if (len >= 4 && d[0] == 0xFF && d[1] == 0xD8) {
        size_t i = 2;
        while (i + 9 < len) {
            if (d[i] != 0xFF) {
                i++;
                continue;
            }
            unsigned char m = d[i + 1];
            size_t seglen = (size_t)d[i + 2] << 8 | d[i + 3];
            if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
                *h = d[i + 5] << 8 | d[i + 6];
                *w = d[i + 7] << 8 | d[i + 8];
                return true;
            }
            i += 2 + seglen;
        }
    }
    return false;
}

const char *korch_image_ext(const char *mime)
{
    if (strcmp(mime, "image/png") == 0)
        return "png";
    if (strcmp(mime, "image/jpeg") == 0)
        return "jpg";
    if (strcmp(mime, "image/gif") == 0)
        return "gif";
    if (strcmp(mime, "image/svg+xml") == 0)
        return "svg";
    return NULL;
}

char *korch_strip_ansi(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\x1b' && i + 1 < n && s[i + 1] == '[') {
            i += 2;
            while (i < n && !(s[i] >= '@' && s[i] <= '~'))
                i++;
            continue;
        }
        out[o++] = s[i];
    }
    out[o] = 0;
    return out;
}
