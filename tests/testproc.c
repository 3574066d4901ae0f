/*  Test helpers that look at the host's processes through /proc: a
 *  process's command line, the process of a uid running a program. Used by
 *  the uid and fork-template tests (test_host.c, test_swarm_uids.c,
 *  test_fork.c). Declared in test.h. */
#include "test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool korch_test_cmdline(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *fp = len ? fopen(path, "r") : NULL;
    size_t n = fp ? fread(buf, 1, len - 1, fp) : 0;
    if (fp)
        fclose(fp);
    for (size_t i = 0; i < n; i++)
        if (!buf[i])
            buf[i] = ' ';
    if (len)
        buf[n] = 0;
    return fp != NULL;
}

pid_t korch_test_pid_of_uid(uid_t uid, const char *needle)
{
    pid_t found = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && !found && (de = readdir(d))) {
        char path[300], cmd[4096];
        struct stat st;
        pid_t pid = atoi(de->d_name);
        snprintf(path, sizeof path, "/proc/%s", de->d_name);
        if (pid <= 0 || stat(path, &st) != 0 || st.st_uid != uid)
            continue;
        if (korch_test_cmdline(pid, cmd, sizeof cmd) && strstr(cmd, needle))
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}
