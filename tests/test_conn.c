/*  Connection files and kernelspec discovery. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/conn.h"
#include "korch/kernelspec.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(conn_save_load_and_jupyter_client_reads_it)
{
    korch_conn_t a, b;
    korch_err_t err = {0};
    CHECK_EQ(korch_conn_init_tcp(&a, "127.0.0.1", &err), KORCH_OK);
    CHECK_EQ(strlen(a.key), 64); /* 32 random bytes in hex */
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        for (int j = i + 1; j < KORCH_CH__COUNT; j++)
            CHECK_NE(a.port[i], a.port[j]);
    char path[] = "/tmp/korch-conn-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_EQ(korch_conn_save(&a, path, &err), KORCH_OK);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    CHECK_EQ(korch_conn_load(&b, path, &err), KORCH_OK);
    CHECK_STREQ(a.key, b.key);
    CHECK_EQ(a.port[KORCH_CH_HB], b.port[KORCH_CH_HB]);
    char code[1024], *out = NULL;
    snprintf(code, sizeof code,
             "from jupyter_client import BlockingKernelClient\n"
             "c = BlockingKernelClient(connection_file=%s%s%s)\nc.load_connection_file()\n"
             "print(c.shell_port, c.hb_port, c.session.key.decode(), c.transport)\n",
             "'", path, "'");
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(argv, NULL, &out, NULL, 30), 0);
    char want[320];
    snprintf(want, sizeof want, "%d %d %s tcp\n", a.port[KORCH_CH_SHELL], a.port[KORCH_CH_HB], a.key);
    CHECK_STREQ(out, want);
    free(out);
    unlink(path);
    char ep[256];
    korch_conn_endpoint(&a, KORCH_CH_IOPUB, ep, sizeof ep);
    snprintf(want, sizeof want, "tcp://127.0.0.1:%d", a.port[KORCH_CH_IOPUB]);
    CHECK_STREQ(ep, want);
    CHECK_EQ(korch_conn_init_ipc(&a, "/run/x/k", &err), KORCH_OK);
    korch_conn_endpoint(&a, KORCH_CH_CONTROL, ep, sizeof ep);
    CHECK_STREQ(ep, "ipc:///run/x/k-4");
}

TEST(conn_bad_files_are_clear_errors)
{
    char path[] = "/tmp/korch-conn-XXXXXX";
    int fd = mkstemp(path);
    const char *bad = "{\"transport\": \"tcp\", \"ip\": \"127.0.0.1\", \"key\": \"k\", \"shell_port\": 1}";
    CHECK_EQ(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    korch_conn_t c;
    korch_err_t err = {0};
    CHECK_EQ(korch_conn_load(&c, path, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "'iopub_port' is missing");
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK_EQ(write(fd, "{nope", 5), 5);
    close(fd);
    err = (korch_err_t){0};
    CHECK_EQ(korch_conn_load(&c, path, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "cannot read connection file");
    unlink(path);
}

TEST(kernelspec_search_path_and_list)
{
    korch_err_t err = {0};
    korch_kernelspec_t *s = korch_kernelspec_find("python3", &err);
    if (CHECK(s)) {
        CHECK_CONTAINS(s->dir, "/kernelspec/python3"); /* korch's own comes first */
        CHECK_STREQ(s->language, "python");
        CHECK(!s->interrupt_message);
        CHECK_STREQ(s->argv[0], "/usr/bin/python3");
    }
    korch_kernelspec_destroy(&s);
    CHECK(s == NULL);
    json_t *list = korch_kernelspec_list();
    CHECK(json_object_get(list, "python3") != NULL);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(list, "python3"), "name")), "python3");
    json_decref(list);
    /* KORCH_KERNELSPEC_PATH wins */
    char dir[] = "/tmp/korch-ks-XXXXXX";
    CHECK(mkdtemp(dir));
    char p[300];
    snprintf(p, sizeof p, "%s/python3", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/python3/kernel.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"argv\": [\"/bin/true\", \"{connection_file}\"], \"display_name\": \"Mine\", \"language\": \"python\","
          " \"interrupt_mode\": \"message\"}",
          f);
    fclose(f);
    setenv("KORCH_KERNELSPEC_PATH", dir, 1);
    s = korch_kernelspec_find("python3", &err);
    if (CHECK(s)) {
        CHECK_STREQ(s->display_name, "Mine");
        CHECK(s->interrupt_message);
    }
    korch_kernelspec_destroy(&s);
    s = korch_kernelspec_find("../etc", &err);
    CHECK(s == NULL);
    CHECK_CONTAINS(err.msg, "is not valid");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A kernelspec's resources: the logos korch ships are listed and read;
   only kernel.js, kernel.css and logo-* are resources, a symlink is not
   followed and nothing over the size limit is read. */
TEST(kernelspec_resources)
{
    korch_err_t err = {0};
    korch_kernelspec_t *s = korch_kernelspec_find("python3", &err);
    if (!CHECK(s))
        return;
    json_t *res = korch_kernelspec_resources(s);
    CHECK_STREQ(json_string_value(json_object_get(res, "logo-32x32")), "/kernelspecs/python3/logo-32x32.png");
    CHECK_STREQ(json_string_value(json_object_get(res, "logo-64x64")), "/kernelspecs/python3/logo-64x64.png");
    CHECK_EQ(json_object_size(res), 2);
    json_decref(res);
    char *data = NULL;
    size_t len = 0;
    CHECK_EQ(korch_kernelspec_resource_read(s, "logo-64x64.png", 1 << 20, &data, &len, &err), KORCH_OK);
    CHECK(len > 100 && data && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0);
    free(data);
    CHECK_EQ(korch_kernelspec_resource_read(s, "kernel.json", 1 << 20, &data, &len, &err), KORCH_E_NOTFOUND);
    CHECK_EQ(korch_kernelspec_resource_read(s, "../python3/logo-64x64.png", 1 << 20, &data, &len, &err),
             KORCH_E_NOTFOUND);
    CHECK_EQ(korch_kernelspec_resource_read(s, "logo-64x64.png", 10, &data, &len, &err), KORCH_E_INVALID);
    CHECK(data == NULL);
    korch_kernelspec_destroy(&s);
    /* a symlinked logo in a spec of its own */
    char dir[] = "/tmp/korch-ksr-XXXXXX";
    CHECK(mkdtemp(dir));
    char p[300];
    snprintf(p, sizeof p, "%s/k", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/k/kernel.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"argv\": [\"/bin/true\", \"{connection_file}\"], \"display_name\": \"K\", \"language\": \"x\"}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/k/logo-32x32.png", dir);
    CHECK_EQ(symlink("/etc/passwd", p), 0);
    snprintf(p, sizeof p, "%s/k/kernel.js", dir);
    f = fopen(p, "w");
    fputs("define([], function() {});", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/k", dir);
    s = korch_kernelspec_load(p, "k", &err);
    if (CHECK(s)) {
        CHECK_EQ(korch_kernelspec_resource_read(s, "logo-32x32.png", 1 << 20, &data, &len, &err), KORCH_E_NOTFOUND);
        CHECK(data == NULL);
        CHECK_EQ(korch_kernelspec_resource_read(s, "kernel.js", 1 << 20, &data, &len, &err), KORCH_OK);
        CHECK_EQ(len, strlen("define([], function() {});"));
        free(data);
    }
    korch_kernelspec_destroy(&s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}
