/*  The tar archives of the engine's archive endpoints (ustar with pax
 *  headers for long names), written and read by korch: a container
 *  backend's files (ctfiles.c), docker's and swarm's alike. */
#include "cttar.h"
#include "korch/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const unsigned char s_tar_zeros[2 * KORCH_TAR_BLOCK]; /* padding; two of them end an archive */

/* Append data padded with zeros to a whole number of blocks. */
static bool s_tar_data(korch_buf_t *b, const void *data, size_t len)
{
    size_t pad = (KORCH_TAR_BLOCK - len % KORCH_TAR_BLOCK) % KORCH_TAR_BLOCK;
    return korch_buf_add(b, data, len, "archive", NULL) == KORCH_OK &&
           korch_buf_add(b, s_tar_zeros, pad, "archive", NULL) == KORCH_OK;
}

/* An 8-byte id field: octal when it fits 7 digits, else GNU base-256 (the
   high bit of the first byte set, the number big-endian in the rest), which
   Go's archive/tar reads: kernel uids (src/launcher/kuid.h) are 2e9 and up. */
static void s_tar_id(unsigned char *f, unsigned id)
{
    if (id <= 07777777) {
        snprintf((char *)f, 8, "%07o", id);
        return;
    }
    memset(f, 0, 8);
    f[0] = 0x80;
    for (int i = 7; i >= 4; i--, id >>= 8)
        f[i] = (unsigned char)(id & 0xff);
}

/* One ustar header (POSIX.1-1988: name[100] mode[8] uid[8] gid[8] size[12]
   mtime[12] chksum[8] typeflag[1] linkname[100] magic "ustar\0" version "00"
   uname[32] gname[32] devmajor[8] devminor[8] prefix[155]). Numbers are
   octal, NUL-terminated; the checksum is the sum of the header's bytes with
   the checksum field taken as eight spaces. */
static bool s_tar_header(korch_buf_t *b, const char *name, size_t name_len, char type, unsigned mode,
                         unsigned uid, unsigned gid, unsigned long long size)
{
    unsigned char h[KORCH_TAR_BLOCK];
    memset(h, 0, sizeof h);
    memcpy(h, name, name_len < 100 ? name_len : 99);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    s_tar_id(h + 108, uid);
    s_tar_id(h + 116, gid);
    snprintf((char *)h + 124, 12, "%011llo", size);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)time(NULL) & 077777777777ULL);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memcpy(h + 265, "korch", 5);
    memcpy(h + 297, "korch", 5);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof h; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    return s_tar_data(b, h, sizeof h);
}

/* An entry; names longer than the 99 bytes of ustar's name field go first
   into a pax extended header (POSIX.1-2001): records "LEN path=NAME\n",
   LEN counting the whole record, its own digits included. */
static bool s_tar_entry(korch_buf_t *b, const char *name, size_t name_len, char type, unsigned mode, unsigned uid,
                        unsigned gid, const void *data, size_t len)
{
    if (name_len > 99) {
        char rec[1200];
        size_t body = strlen(" path=") + name_len + 1, total = body + 1;
        while (total != body + (size_t)snprintf(NULL, 0, "%zu", total))
            total = body + (size_t)snprintf(NULL, 0, "%zu", total);
        int n = snprintf(rec, sizeof rec, "%zu path=%.*s\n", total, (int)name_len, name);
        if (n < 0 || (size_t)n != total || !s_tar_header(b, "PaxHeaders/korch", 16, 'x', 0644, 0, 0, total) ||
            !s_tar_data(b, rec, total))
            return false;
    }
    return s_tar_header(b, name, name_len, type, mode, uid, gid, len) && s_tar_data(b, data, len);
}

/* The archive PUT /archive extracts into the work dir: entries for the
   directories of name from byte missing on (those that do not exist yet),
   the file, and the two zero blocks that end an archive. Into b (empty),
   allocated once: each entry takes at most five blocks besides its data (a
   pax header and its record of up to 1200 bytes, its own header), the
   file's data one more of padding. */
bool korch_tar_archive(korch_buf_t *b, unsigned uid, unsigned gid, const char *name, size_t missing,
                       const void *data, size_t len)
{
    size_t entries = 1;
    for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/'))
        entries++;
    korch_buf_init(b, SIZE_MAX - 1, NULL);
    bool ok = len < SIZE_MAX / 2 &&
              korch_buf_reserve(b, len + (5 * entries + 3) * KORCH_TAR_BLOCK, "archive", NULL) == KORCH_OK;
    for (const char *s = strchr(name, '/'); ok && s; s = strchr(s + 1, '/'))
        if ((size_t)(s - name) >= missing)
            ok = s_tar_entry(b, name, (size_t)(s - name) + 1, '5', 0755, uid, gid, NULL, 0);
    return ok && s_tar_entry(b, name, strlen(name), '0', 0644, uid, gid, data, len) &&
           korch_buf_add(b, s_tar_zeros, 2 * KORCH_TAR_BLOCK, "archive", NULL) == KORCH_OK;
}

/* A tar number: octal text, or base-256 when the high bit of the first byte
   is set (GNU, also written by Go for large values). */
static bool s_tar_num(const unsigned char *f, size_t w, unsigned long long *v)
{
    *v = 0;
    if (f[0] & 0x80) {
        for (size_t i = 0; i < w; i++) {
            if (*v >> 56)
                return false;
            *v = *v << 8 | (i == 0 ? (f[0] & 0x7f) : f[i]);
        }
        return true;
    }
    size_t i = 0;
    while (i < w && f[i] == ' ')
        i++;
    for (; i < w && f[i] >= '0' && f[i] <= '7'; i++) {
        if (*v >> 60)
            return false;
        *v = *v << 3 | (unsigned)(f[i] - '0');
    }
    return i == w || f[i] == 0 || f[i] == ' ';
}

/* The one regular file of a tar from GET /archive, at most max bytes. */
korch_rc_t korch_tar_first_file(const char *name, const unsigned char *t, size_t len, size_t max, char **data,
                                size_t *out_len, korch_err_t *err)
{
    static const unsigned char zero[KORCH_TAR_BLOCK];
    size_t pos = 0;
    while (len >= KORCH_TAR_BLOCK && pos <= len - KORCH_TAR_BLOCK) {
        const unsigned char *h = t + pos;
        if (memcmp(h, zero, KORCH_TAR_BLOCK) == 0)
            break;
        unsigned long long sum = 0, want = 0, size = 0;
        for (size_t i = 0; i < KORCH_TAR_BLOCK; i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (memcmp(h + 257, "ustar", 5) != 0 || !s_tar_num(h + 148, 8, &want) || sum != want ||
            !s_tar_num(h + 124, 12, &size))
            return korch_err_set(err, KORCH_E_PROTOCOL, "the engine sent a malformed archive for '%s'", name);
        size_t at = pos + KORCH_TAR_BLOCK;
        if (size > len - at)
            return korch_err_set(err, KORCH_E_PROTOCOL, "the engine sent a truncated archive for '%s'", name);
        char type = (char)h[156];
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            pos = at + (size_t)((size + KORCH_TAR_BLOCK - 1) / KORCH_TAR_BLOCK * KORCH_TAR_BLOCK);
            continue;
        }
        if (type == '2' || type == '1')
            return korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is a link: refusing to follow it",
                                 name);
        if (type != '0' && type != '\0' && type != '7')
            return korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is not a regular file", name);
        if (size > max)
            return korch_err_set(err, KORCH_E_TOOBIG, "file '%s' in the kernel's work dir is larger than %zu bytes",
                                 name, max);
        *data = malloc((size_t)size + 1);
        if (!*data)
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        memcpy(*data, t + at, (size_t)size);
        (*data)[size] = 0;
        *out_len = (size_t)size;
        return KORCH_OK;
    }
    return korch_err_set(err, KORCH_E_PROTOCOL, "the engine sent an empty archive for '%s'", name);
}

