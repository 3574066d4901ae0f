/*  korch serve killed with -9 and started again with the same --instance:
 *  its docker kernels are re-adopted (same ids, variables kept, interrupt,
 *  restart and DELETE work) through real clients - jupyter_server 1.23 as a
 *  gateway client that keeps running across the restart and korch's own
 *  websocket - while the kernel that died meanwhile is removed, not listed.
 *  Containers labelled with the instance that cannot be adopted (a runtime
 *  dir the container does not mount, a missing connection file, a bad
 *  kernel id) are removed with a notice, and a korch serve of another
 *  instance leaves the kernels alone.
 */
#include "adopt_fixture.h"

/* ---------------------------------------------------------- clients */

/* GET url+path with the token, straight from C (no interpreter to start):
   the HTTP status, -1 when it did not answer within timeout_ms. */
static long s_http_get(const serve_t *s, const char *path, long timeout_ms)
{
    char url[512], auth[300];
    snprintf(url, sizeof url, "%s%s", s->url, path);
    snprintf(auth, sizeof auth, "Authorization: token %s", s->token);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, auth);
    long st = -1;
    FILE *null = fopen("/dev/null", "w");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (null)
        fclose(null);
    return st;
}

/* adopt_peer.py MODE URL TOKEN ARGS...: its last JSON line (new), NULL when none. */
static json_t *s_peer(const serve_t *s, const char *mode, const char *a1, const char *a2)
{
    const char *argv[] = {PY, serve_peer("adopt_peer.py"), mode, s->url, s->token, a1, a2, NULL};
    return serve_peer_json(argv, 180);
}

static bool s_peer_ok(const serve_t *s, const char *mode, const char *a1, const char *a2)
{
    json_t *j = s_peer(s, mode, a1, a2);
    bool ok = json_is_true(json_object_get(j, "ok"));
    json_decref(j);
    return ok;
}

/* jupyter_server as a gateway client, kept across korch's restart: a
   process reading commands on stdin, answering a JSON line each. */
typedef struct {
    pid_t pid;
    FILE *in, *out;
} front_t;

static bool s_front_start(front_t *f, const serve_t *gw)
{
    int to[2], from[2];
    memset(f, 0, sizeof *f);
    if (pipe(to) != 0 || pipe(from) != 0)
        return CHECK(!"pipe");
    f->pid = fork();
    if (f->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]);
        close(from[0]);
        const char *argv[] = {PY, serve_peer("adopt_peer.py"), "front", gw->url, gw->token, NULL};
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    f->in = fdopen(to[1], "w");
    f->out = fdopen(from[0], "r");
    return f->pid > 0 && f->in && f->out;
}

/* The next JSON line within timeout_s (new), NULL when none. */
static json_t *s_front_read(front_t *f, int timeout_s)
{
    char line[8192];
    time_t deadline = time(NULL) + timeout_s;
    while (time(NULL) < deadline) {
        struct pollfd p = {fileno(f->out), POLLIN, 0};
        if (poll(&p, 1, 500) <= 0)
            continue;
        if (!fgets(line, sizeof line, f->out))
            return NULL;
        if (line[0] == '{')
            return json_loads(line, 0, NULL);
    }
    return NULL;
}

static json_t *s_front_cmd(front_t *f, const char *cmd, int timeout_s)
{
    fprintf(f->in, "%s\n", cmd);
    fflush(f->in);
    json_t *j = s_front_read(f, timeout_s);
    if (!json_is_true(json_object_get(j, "ok"))) {
        char *t = j ? json_dumps(j, 0) : NULL;
        fprintf(stderr, "front '%s': %s\n", cmd, t ? t : "(no answer)");
        free(t);
    }
    return j;
}

static void s_front_stop(front_t *f)
{
    if (f->in)
        fclose(f->in); /* EOF: it stops jupyter_server and exits */
    f->in = NULL;
    for (int i = 0; f->pid > 0 && i < 200; i++) {
        if (waitpid(f->pid, NULL, WNOHANG) == f->pid) {
            f->pid = 0;
            break;
        }
        usleep(100 * 1000);
    }
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
    }
    if (f->out)
        fclose(f->out);
    f->out = NULL;
}


static double s_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

TEST_T(server_adopt_docker_kill9, 600)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!CHECK(d != NULL)) {
        fprintf(stderr, "  docker: %s\n", err.msg);
        return;
    }
    char inst[64], other[64], base[PATH_MAX], port[16], token[256], bad_dir[PATH_MAX + 32] = "", bind[2 * PATH_MAX];
    snprintf(inst, sizeof inst, "adopt-x-%d", (int)getpid());
    snprintf(other, sizeof other, "adopt-y-%d", (int)getpid());
    serve_t s = {0}, y = {0};
    front_t f = {0};
    json_t *j = NULL;
    char k0[64] = "", k1[64] = "", c0[80] = "", c1[80] = "", cbad[3][80] = {"", "", ""};
    char cforeign[80] = "", clegacy[80] = "", want[300];
    if (!CHECK_EQ(korch_runtime_base(base, sizeof base, &err), KORCH_OK))
        goto out;

    /* korch serve --instance X: two kernels through jupyter_server, v set in each */
    const char *a1[] = {"--launcher", "docker", "--instance", inst, NULL};
    if (!CHECK(serve_start_args(&s, a1)))
        goto out;
    snprintf(port, sizeof port, "%d", (int)strtol(strrchr(s.url, ':') + 1, NULL, 10));
    snprintf(token, sizeof token, "%s", s.token);
    if (!CHECK(s_front_start(&f, &s)))
        goto out;
    j = s_front_read(&f, 120);
    if (!CHECK(json_is_true(json_object_get(j, "ready"))))
        goto out;
    json_decref(j);
    j = s_front_cmd(&f, "start 2", 240);
    json_t *kids = json_object_get(j, "kernels");
    if (!CHECK(json_is_true(json_object_get(j, "ok"))) || !CHECK_EQ(json_array_size(kids), 2))
        goto out;
    snprintf(k0, sizeof k0, "%s", json_string_value(json_array_get(kids, 0)));
    snprintf(k1, sizeof k1, "%s", json_string_value(json_array_get(kids, 1)));
    json_decref(j);
    j = NULL;
    s_container_of(d, k0, c0, sizeof c0);
    s_container_of(d, k1, c1, sizeof c1);
    CHECK(c0[0] && c1[0]);

    /* kill -9; meanwhile k1's container dies, and containers labelled as X's
       kernels appear that no korch can adopt */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    serve_stop(&s);
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill", c1);
    CHECK_EQ(s_post(d, path, NULL, NULL), 204);
    char u1[40], u2[40];
    korch_uuid(u1);
    korch_uuid(u2);
    snprintf(bad_dir, sizeof bad_dir, "%s/adopt-bad-%d", base, (int)getpid());
    CHECK_EQ(mkdir(bad_dir, 0700), 0);
    snprintf(bind, sizeof bind, "%s:/run/korch", bad_dir);
    /* a runtime dir label the container does not mount */
    CHECK(s_fake_kernel(d, inst, u1, "/etc", "", "", cbad[0], sizeof cbad[0]));
    /* its runtime dir mounted, but no connection file in it */
    CHECK(s_fake_kernel(d, inst, u2, bad_dir, bind, "", cbad[1], sizeof cbad[1]));
    /* a kernel id korch serve never makes */
    CHECK(s_fake_kernel(d, inst, "../../etc/passwd", "/etc", "", "", cbad[2], sizeof cbad[2]));
    /* X's too, but of another korch scope (another machine's korch serve
       --instance X on a shared engine) and of an older korch (no label):
       neither adopted nor removed, a notice each */
    char u3[40], u4[40];
    korch_uuid(u3);
    korch_uuid(u4);
    CHECK(s_fake_kernel(d, inst, u3, bad_dir, "", "rt-00000000000000fd", cforeign, sizeof cforeign));
    CHECK(s_fake_kernel(d, inst, u4, bad_dir, "", NULL, clegacy, sizeof clegacy));

    /* korch serve --instance X again, on the same port and token (what
       jupyter_server's --gateway-url and auth_token name) */
    const char *a2[] = {"--launcher", "docker", "--instance", inst, "--port", port, "--token", token, NULL};
    double t0 = s_ms();
    if (!CHECK(serve_start_args(&s, a2)))
        goto out;
    long st = s_http_get(&s, "api/status", 2000);
    double status_ms = s_ms() - t0;
    bool adopted_before = serve_log_has(&s, "re-adopted: its state is kept");
    CHECK_EQ(st, 200);
    CHECK(serve_log_has(&s, "being re-adopted"));
    fprintf(stderr, "server-adopt: /api/status answered %.0f ms after the restart began (%s)\n", status_ms,
            adopted_before ? "adoption was done" : "while the kernels were being re-adopted");
    /* at once, one kernel_info_request (no retry): held while it is adopted */
    CHECK(s_peer_ok(&s, "set", k0, "adopt-0"));

    /* the live kernel: same id, v kept, through jupyter_server (which kept
       running) and through korch's own websocket; interrupt works */
    {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "check %s adopt-0", k0);
        j = s_front_cmd(&f, cmd, 180);
        CHECK(json_is_true(json_object_get(j, "ok")));
        json_decref(j);
        j = NULL;
    }
    j = s_peer(&s, "direct", k0, "adopt-0");
    CHECK(json_is_true(json_object_get(j, "ok")));
    /* the dead one is not listed, and its container is gone */
    json_t *listed = json_object_get(j, "listed");
    CHECK_EQ(json_array_size(listed), 1);
    CHECK_STREQ(json_string_value(json_array_get(listed, 0)), k0);
    json_decref(j);
    j = NULL;
    CHECK(!s_exists(d, c1));
    CHECK(serve_log_has(&s, "not re-adopted: it ended while korch was down"));
    /* what could not be adopted: a notice each, removed, nothing else lost */
    for (int i = 0; i < 3; i++)
        CHECK(!s_exists(d, cbad[i]));
    CHECK(serve_log_has(&s, "does not mount its runtime dir"));
    CHECK(serve_log_has(&s, "is not a kernel id of korch serve"));
    CHECK(serve_log_has(&s, bad_dir));
    struct stat sb;
    CHECK(lstat(bad_dir, &sb) != 0); /* its (empty) runtime dir went with it */
    CHECK(s_exists(d, c0));
    CHECK(s_exists(d, cforeign));
    CHECK(s_exists(d, clegacy));
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: their korch.scope label is not", inst);
    CHECK(serve_log_has(&s, want));
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: they carry no korch.scope label",
             inst);
    CHECK(serve_log_has(&s, want));
    CHECK(!serve_log_has(&s, u3) && !serve_log_has(&s, u4)); /* not even tried */

    /* another instance's korch serve leaves X's kernels alone */
    const char *a3[] = {"--launcher", "docker", "--instance", other, NULL};
    if (CHECK(serve_start_args(&y, a3))) {
        CHECK_EQ(s_http_get(&y, "api/status", 5000), 200);
        serve_stop(&y);
    }
    CHECK(s_exists(d, c0));
    CHECK(s_peer_ok(&s, "set", k0, "after-y"));
    {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "check %s after-y", k0);
        j = s_front_cmd(&f, cmd, 180);
        CHECK(json_is_true(json_object_get(j, "ok")));
        json_decref(j);
        j = NULL;
    }

    /* restart (v gone, the kernel works), then DELETE through jupyter_server */
    CHECK(s_peer_ok(&s, "restart", k0, NULL));
    {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "delete %s", k0);
        j = s_front_cmd(&f, cmd, 120);
        CHECK(json_is_true(json_object_get(j, "ok")));
        json_decref(j);
        j = NULL;
    }
    CHECK(s_wait_none(d, "korch.kernel_id", k0, 30000));
    serve_stop(&s);
    /* korch's own all went; the other scope's and the older korch's stay */
    CHECK(s_exists(d, cforeign));
    CHECK(s_exists(d, clegacy));
    CHECK_EQ(s_count(d, "korch.instance", inst), 2);
    s_remove_label(d, inst);
    CHECK(s_wait_none(d, "korch.instance", inst, 30000));
out:
    json_decref(j);
    s_front_stop(&f);
    serve_stop(&s);
    serve_stop(&y);
    if (d) {
        s_remove_label(d, inst);
        s_remove_label(d, other);
    }
    if (bad_dir[0])
        rmdir(bad_dir);
    korch_docker_destroy(&d);
}

/* ------------------------------------------------- the held messages */

typedef struct {
    char text[256];
} s_seen_t;

static void s_on_msg(korch_kernel_t *k, korch_channel_t ch, const korch_msg_t *msg, void *arg)
{
    s_seen_t *seen = arg;
    const char *type = json_string_value(json_object_get(msg->header, "msg_type"));
    const char *text = json_string_value(json_object_get(msg->content, "text"));
    if (ch == KORCH_CH_IOPUB && type && strcmp(type, "stream") == 0 && text)
        snprintf(seen->text + strlen(seen->text), sizeof seen->text - strlen(seen->text), "%s", text);
}

static bool s_seen_42(void *arg) { return strstr(((s_seen_t *)arg)->text, "42\n") != NULL; }

/* What the gateway relays for a kernel it is still re-adopting is held and
   sent once its channels open: `korch kernel --instance I` (docker) gets x
   set and is killed with -9; this process lists I's kernels
   (korch_launcher_list_mine), re-adopts the one it finds and, before the
   adoption has even begun on the loop, sends print(x) - which prints 42. */
TEST_T(server_adopt_holds_messages_until_adopted, 240)
{
    char inst[64], conn[PATH_MAX], line[PATH_MAX];
    snprintf(inst, sizeof inst, "adopt-held-%d", (int)getpid());
    snprintf(conn, sizeof conn, "/tmp/korch-adopt-held-%d.json", (int)getpid());
    const char *argv[] = {korch_test_korch_bin(), "kernel", "--launcher", "docker", "--instance", inst,
                          "--connection-file", conn, NULL};
    korch_loop_t *loop = korch_loop_new();
    korch_launcher_t *l = NULL;
    korch_kernel_t *k = NULL;
    korch_exec_t *ex = NULL;
    json_t *mine = NULL;
    korch_err_t err = {0};
    s_seen_t seen = {""};
    pid_t kp = korch_test_spawn_line(argv, line, sizeof line, 120, NULL);
    if (!CHECK_GT(kp, 0))
        goto out;
    k = korch_kernel_new(loop, &(korch_kernel_opts_t){.existing = conn}, &err);
    if (!CHECK(k) || !CHECK_EQ(korch_kernel_wait_ready(k, &err), KORCH_OK))
        goto out;
    ex = korch_kernel_execute_wait(k, "x = 6 * 7", NULL, NULL, &err);
    CHECK(ex && korch_exec_result(ex)->status == KORCH_EXEC_OK);
    korch_exec_destroy(&ex);
    korch_kernel_destroy(&k); /* attached: not shut down */
    kill(kp, SIGKILL);
    waitpid(kp, NULL, 0);
    kp = 0;

    l = korch_launcher_choose(loop, &(korch_launcher_choice_t){.name = "docker", .instance = inst, .quiet = true},
                              &err);
    if (!CHECK(l))
        goto out;
    mine = korch_launcher_list_mine(l, &err);
    if (!CHECK_EQ(json_array_size(mine), 1))
        goto out;
    const char *kid = json_string_value(json_object_get(json_array_get(mine, 0), "kernel_id"));
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(mine, 0), "state")), "running");
    k = korch_kernel_new(loop, &(korch_kernel_opts_t){.launcher = l, .kernel_id = kid, .adopt = true}, &err);
    if (!CHECK(k))
        goto out;
    korch_kernel_set_callbacks(k, &(korch_kernel_cb_t){.on_message = s_on_msg, .arg = &seen});
    korch_msg_t *msg = korch_msg_new("execute_request",
                                     json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", "print(x)", "silent", 0,
                                               "store_history", 0, "user_expressions", "allow_stdin", 0,
                                               "stop_on_error", 0));
    CHECK_EQ(korch_kernel_send(k, KORCH_CH_SHELL, &msg, &err), KORCH_OK); /* the adoption has not begun */
    CHECK(msg == NULL);
    korch_loop_run(loop, s_seen_42, &seen, 60000);
    CHECK_CONTAINS(seen.text, "42\n");
    CHECK_EQ(korch_kernel_wait_ready(k, &err), KORCH_OK);
    korch_kernel_destroy(&k); /* adopted: shut down, its container removed */
    korch_launcher_settle(l, 30000);
    json_decref(mine);
    mine = korch_launcher_list_mine(l, &err);
    CHECK_EQ(json_array_size(mine), 0);
out:
    if (kp > 0) {
        kill(kp, SIGKILL);
        waitpid(kp, NULL, 0);
    }
    korch_exec_destroy(&ex);
    korch_kernel_destroy(&k);
    if (l) {
        korch_launcher_remove_all(l, inst, NULL);
        korch_launcher_destroy(&l);
    }
    json_decref(mine);
    korch_loop_destroy(&loop);
    unlink(conn);
}
