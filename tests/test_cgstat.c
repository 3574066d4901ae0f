/*  A container's cgroup found and read (src/launcher/cgstat.c) on fake
 *  cgroupfs trees of both versions and both docker cgroup drivers, as this
 *  host (v1) and a v2 host lay them out; the real v1 path is
 *  trust_cpu_and_peak_memory_per_step_in_docker. */
#define KORCH_TEST_UNIT
#include "test.h"
#include "korch/cgroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ID "e7047e49f87f7c830b9e1d266013ef852caa5f6d5ca11d4423cb4102a57e8734"

static void s_put(const char *root, const char *rel, const char *text)
{
    char path[1024], cmd[1200];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    CHECK_EQ(system(cmd), 0);
    FILE *f = fopen(path, "w");
    if (CHECK(f != NULL)) {
        fputs(text, f);
        fclose(f);
    }
}

static char *s_tree(void)
{
    char *d = strdup("/tmp/korch-cgstat-XXXXXX");
    return d && mkdtemp(d) ? d : NULL;
}

static void s_rm(char *d)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    CHECK_EQ(system(cmd), 0);
    free(d);
}

/* v1, cgroupfs driver, cpuacct a hierarchy of its own (this host): both counters; the peak resets. */
TEST(cgstat_v1_cgroupfs_container)
{
    char *root = s_tree();
    if (!CHECK(root))
        return;
    s_put(root, "memory/docker/" ID "/memory.max_usage_in_bytes", "283115520\n");
    s_put(root, "cpuacct/docker/" ID "/cpuacct.usage", "610000000\n");
    korch_usage_src_t src;
    if (CHECK(korch_cgroup_of_container(root, ID, &src))) {
        CHECK_EQ(src.version, 1);
        korch_proc_usage_t u;
        CHECK(korch_usage_read(&src, true, &u));
        CHECK_EQ(u.cpu_ns, 610000000);
        CHECK(u.peak_reset); /* "0" written to memory.max_usage_in_bytes */
        char path[512], buf[16] = "";
        snprintf(path, sizeof path, "%s/memory/docker/" ID "/memory.max_usage_in_bytes", root);
        FILE *f = fopen(path, "r");
        CHECK(f && fgets(buf, sizeof buf, f) && buf[0] == '0');
        if (f)
            fclose(f);
        s_put(root, "memory/docker/" ID "/memory.max_usage_in_bytes", "283115520\n"); /* as cgroupfs says it */
        CHECK(korch_usage_read(&src, false, &u));
        CHECK_EQ(u.mem_peak, 283115520);
    }
    CHECK(!korch_cgroup_of_container(root, "0123456789abcdef", &src)); /* another container: not found */
    CHECK(!korch_cgroup_of_container(root, "../../etc", &src));
    s_rm(root);
}

/* v1, systemd driver, cpu and cpuacct mounted together. */
TEST(cgstat_v1_systemd_cpu_cpuacct)
{
    char *root = s_tree();
    if (!CHECK(root))
        return;
    s_put(root, "memory/system.slice/docker-" ID ".scope/memory.max_usage_in_bytes", "1048576\n");
    s_put(root, "cpu,cpuacct/system.slice/docker-" ID ".scope/cpuacct.usage", "42\n");
    korch_usage_src_t src;
    korch_proc_usage_t u;
    if (CHECK(korch_cgroup_of_container(root, ID, &src)) && CHECK(korch_usage_read(&src, false, &u))) {
        CHECK_EQ(u.cpu_ns, 42);
        CHECK_EQ(u.mem_peak, 1048576);
        CHECK(!u.peak_reset);
    }
    s_rm(root);
}

/* v2 (one hierarchy), both drivers: cpu.stat's usage_usec and memory.peak, which cannot be reset. */
TEST(cgstat_v2_container)
{
    const char *rels[] = {"docker/" ID, "system.slice/docker-" ID ".scope"};
    for (int i = 0; i < 2; i++) {
        char *root = s_tree();
        if (!CHECK(root))
            return;
        char rel[300];
        s_put(root, "cgroup.controllers", "cpu memory pids\n");
        snprintf(rel, sizeof rel, "%s/cgroup.procs", rels[i]);
        s_put(root, rel, "");
        snprintf(rel, sizeof rel, "%s/cpu.stat", rels[i]);
        s_put(root, rel, "usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n");
        snprintf(rel, sizeof rel, "%s/memory.peak", rels[i]);
        s_put(root, rel, "268435456\n");
        korch_usage_src_t src;
        korch_proc_usage_t u;
        if (CHECK(korch_cgroup_of_container(root, ID, &src)) && CHECK_EQ(src.version, 2) &&
            CHECK(korch_usage_read(&src, true, &u))) {
            CHECK_EQ(u.cpu_ns, 1250000000LL);
            CHECK_EQ(u.mem_peak, 268435456LL);
            CHECK(!u.peak_reset); /* the kernel's peak: peak_of says so */
        }
        s_rm(root);
    }
}

/* Nothing there (an engine on another host): unknown, never zero. */
TEST(cgstat_unknown_is_unknown)
{
    char *root = s_tree();
    if (!CHECK(root))
        return;
    korch_usage_src_t src;
    CHECK(!korch_cgroup_of_container(root, ID, &src));
    korch_proc_usage_t u;
    CHECK(!korch_usage_read(&src, true, &u));
    CHECK_EQ(u.cpu_ns, -1);
    CHECK_EQ(u.mem_peak, -1);
    s_rm(root);
}
