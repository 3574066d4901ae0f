/*  Test helpers that look at the host's processes through /proc: a
 *  process's command line, the process of a uid running a program, another
 *  uid's attacks on a kernel. Used by the uid and fork-template tests
 *  (test_host.c, test_swarm_uids.c, test_fork.c). Declared in test.h. */
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

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

int korch_test_attack_as(uid_t uid, gid_t gid, pid_t kpid, const char *const files[3])
{
    pid_t c = fork();
    if (c == 0) {
        if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
            _exit(255);
        int worked = 0, fd;
        char path[300];
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "/proc/%d/root%s", (int)kpid, files[i]);
            if ((fd = i < 2 ? open(path, O_RDONLY) : open(path, O_WRONLY | O_CREAT, 0644)) >= 0)
                worked |= 1 << i, close(fd);
        }
        if (kill(kpid, 0) == 0)
            worked |= 8;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)kpid);
        if ((fd = open(path, O_RDONLY)) >= 0)
            worked |= 16, close(fd);
        _exit(worked);
    }
    int st = 0;
    waitpid(c, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}
