/*  Bounded host directories (hostdir.h). */
#include "hostdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

int korch_hostdir_mount(const char *dir, const char *source, int64_t size, uid_t uid, gid_t gid, unsigned mode,
                        bool noexec)
{
    char opt[200];
    snprintf(opt, sizeof opt, "size=%lld,mode=%04o,uid=%u,gid=%u,nr_inodes=%lld", (long long)size, mode,
             (unsigned)uid, (unsigned)gid, (long long)(size / 4096 + 64));
    return mount(source ? source : "tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | (noexec ? MS_NOEXEC : 0), opt);
}

bool korch_hostdir_is_mount(const char *dir)
{
    char parent[PATH_MAX + 4];
    struct stat a, b;
    snprintf(parent, sizeof parent, "%s/..", dir);
    return lstat(dir, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

int korch_hostdir_unmount(const char *dir)
{
    if (!korch_hostdir_is_mount(dir))
        return 0;
    return umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW);
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void s_unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

int korch_hostdir_each(const char *base, const char *prefix, void (*fn)(const char *dir, const char *rest, void *arg),
                       void *arg)
{
    FILE *fp = fopen("/proc/self/mountinfo", "re");
    if (!fp)
        return 0;
    int n = 0;
    size_t blen = strlen(base), plen = strlen(prefix);
    char line[4096];
    while (fgets(line, sizeof line, fp)) {
        /* id parent major:minor root mountpoint options [optional...] - fstype source superopts */
        char *save = NULL, *f[5] = {0};
        char *tok = strtok_r(line, " \n", &save);
        for (int i = 0; tok && i < 5; i++, tok = strtok_r(NULL, " \n", &save))
            f[i] = tok;
        while (tok && strcmp(tok, "-") != 0)
            tok = strtok_r(NULL, " \n", &save);
        char *type = tok ? strtok_r(NULL, " \n", &save) : NULL, *src = type ? strtok_r(NULL, " \n", &save) : NULL;
        if (!f[4] || !type || !src || strcmp(type, "tmpfs") != 0)
            continue;
        s_unescape(f[4]);
        s_unescape(src);
        if (strncmp(src, prefix, plen) != 0 || strncmp(f[4], base, blen) != 0 || f[4][blen] != '/' ||
            strchr(f[4] + blen + 1, '/'))
            continue;
        n++;
        if (fn)
            fn(f[4], src + plen, arg);
    }
    fclose(fp);
    return n;
}
