/*  A kernel's CPU time and peak memory read from its cgroup's counters
 *  (korch_usage_read, korch/launcher.h), wherever the cgroup came from: the
 *  sandbox's own (cgroup.c) or a container's found on this host
 *  (korch_cgroup_of_container, korch/cgroup.h). Plain reads of cgroupfs and
 *  /proc: any thread, never for long. */
#include "cgfile.h"
#include "korch/cgroup.h"
#include "korch/launcher.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ssize_t korch_cgfile_read(const char *dir, const char *file, char *buf, size_t len)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = 0;
    return (ssize_t)n;
}

long long korch_cgfile_keyed(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
            return strtoll(p + kl + 1, NULL, 10);
    return -1;
}

/* A counter file's text: false when absent or empty (unknown). */
static bool s_read(const char *dir, const char *file, char *buf, size_t len)
{
    return korch_cgfile_read(dir, file, buf, len) > 0;
}

/* utime + stime of pid (/proc/PID/stat fields 14 and 15, after the ')' that
   ends its name, which may hold anything) in ns; -1 when it is gone. */
static int64_t s_proc_cpu_ns(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* ") S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime" */
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return (int64_t)((ut + st) * (1000000000ULL / (unsigned long long)(hz > 0 ? hz : 100)));
}

/* The processes in dir now: their utime + stime summed, or -1. */
static int64_t s_procs_cpu_ns(const char *dir)
{
    char text[16384];
    if (!s_read(dir, "cgroup.procs", text, sizeof text))
        return -1;
    int64_t sum = 0;
    int n = 0;
    for (char *p = text; *p && n < 1024; n++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        int64_t c = v > 0 ? s_proc_cpu_ns(v) : -1;
        sum += c > 0 ? c : 0;
        p = end + strspn(end, "\n");
    }
    return sum;
}

bool korch_usage_read(const korch_usage_src_t *src, bool reset_peak, korch_proc_usage_t *u)
{
    char text[2048];
    u->cpu_ns = u->mem_peak = -1;
    u->peak_reset = false;
    if (!src || !src->version || !src->mem[0])
        return false;
    if (src->version == 2) {
        /* memory.peak cannot be reset for every reader: the kernel's peak since it started */
        long long us = s_read(src->mem, "cpu.stat", text, sizeof text) ? korch_cgfile_keyed(text, "usage_usec") : -1;
        if (us >= 0)
            u->cpu_ns = (int64_t)us * 1000;
        if (s_read(src->mem, "memory.peak", text, sizeof text))
            u->mem_peak = strtoll(text, NULL, 10);
        return u->cpu_ns >= 0 || u->mem_peak >= 0;
    }
    if (reset_peak) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/memory.max_usage_in_bytes", src->mem);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        u->peak_reset = fd >= 0 && write(fd, "0", 1) == 1;
        if (fd >= 0)
            close(fd);
    }
    if (s_read(src->mem, "memory.max_usage_in_bytes", text, sizeof text))
        u->mem_peak = strtoll(text, NULL, 10);
    if (src->cpu[0] && s_read(src->cpu, "cpuacct.usage", text, sizeof text))
        u->cpu_ns = strtoll(text, NULL, 10);
    else if (!src->cpu[0])
        u->cpu_ns = s_procs_cpu_ns(src->mem);
    return u->cpu_ns >= 0 || u->mem_peak >= 0;
}

/* dir into out when it holds file (and fits). */
static bool s_dir_with(char *out, size_t len, const char *dir, const char *file)
{
    size_t dl = strlen(dir), fl = strlen(file);
    char path[PATH_MAX + 64];
    if (dl >= len || dl + fl + 2 > sizeof path)
        return false;
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, file, fl + 1);
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    memcpy(out, dir, dl + 1);
    return true;
}

bool korch_cgroup_of_container(const char *root, const char *id, korch_usage_src_t *src)
{
    memset(src, 0, sizeof *src);
    if (!root || !id || strlen(id) < 12 || strchr(id, '/') || strchr(id, '.'))
        return false;
    /* the layouts of both cgroup drivers, relative to a hierarchy's root */
    char rel[2][160];
    snprintf(rel[0], sizeof rel[0], "docker/%s", id);
    snprintf(rel[1], sizeof rel[1], "system.slice/docker-%s.scope", id);
    char dir[PATH_MAX + 256];
    snprintf(dir, sizeof dir, "%s/cgroup.controllers", root);
    struct stat st;
    if (stat(dir, &st) == 0) { /* v2: one hierarchy */
        for (int i = 0; i < 2; i++) {
            snprintf(dir, sizeof dir, "%s/%s", root, rel[i]);
            if (s_dir_with(src->mem, sizeof src->mem, dir, "cgroup.procs")) {
                src->version = 2;
                return true;
            }
        }
        return false;
    }
    for (int i = 0; i < 2 && !src->mem[0]; i++) {
        snprintf(dir, sizeof dir, "%s/memory/%s", root, rel[i]);
        s_dir_with(src->mem, sizeof src->mem, dir, "memory.max_usage_in_bytes");
    }
    if (!src->mem[0])
        return false;
    static const char *const cpu_mounts[] = {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"};
    for (int m = 0; m < 3 && !src->cpu[0]; m++)
        for (int i = 0; i < 2 && !src->cpu[0]; i++) {
            snprintf(dir, sizeof dir, "%s/%s/%s", root, cpu_mounts[m], rel[i]);
            s_dir_with(src->cpu, sizeof src->cpu, dir, "cpuacct.usage");
        }
    src->version = 1;
    return true;
}
