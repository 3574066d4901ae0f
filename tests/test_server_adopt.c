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
#include "test.h"
#include "serve_fixture.h"

#include "korch/docker_api.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/uuid.h"
#include "korch/docker.h"
#include "korch/kernel.h"

#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <sys/stat.h>

#define IMAGE "korch-kernel-python3:latest"

/* ---------------------------------------------------------- engine */

/* Containers with one label ("k=v"), running or not, as a new array. */
static json_t *s_containers(korch_docker_t *d, const char *label)
{
    json_t *f = json_pack("{s:[s]}", "label", label);
    char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
    char *esc = fs ? korch_docker_escape(d, fs) : NULL;
    char path[1024];
    snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", esc ? esc : "");
    korch_docker_reply_t r = {0};
    json_t *out = NULL;
    if (korch_docker_request(d, "GET", path, NULL, &r, NULL) == KORCH_OK && r.status == 200)
        out = json_incref(r.json);
    korch_docker_reply_clear(&r);
    json_decref(f);
    free(fs);
    free(esc);
    return out ? out : json_array();
}

static size_t s_count(korch_docker_t *d, const char *key, const char *value)
{
    char label[256];
    snprintf(label, sizeof label, "%s=%s", key, value);
    json_t *a = s_containers(d, label);
    size_t n = json_array_size(a);
    json_decref(a);
    return n;
}

/* The first container of kernel kid ("" when none). */
static void s_container_of(korch_docker_t *d, const char *kid, char *id, size_t len)
{
    char label[128];
    snprintf(label, sizeof label, "korch.kernel_id=%s", kid);
    json_t *a = s_containers(d, label);
    const char *s = json_string_value(json_object_get(json_array_get(a, 0), "Id"));
    snprintf(id, len, "%s", s ? s : "");
    json_decref(a);
}

static int s_post(korch_docker_t *d, const char *path, json_t *body, json_t **reply)
{
    korch_docker_reply_t r = {0};
    int st = korch_docker_request(d, "POST", path, body, &r, NULL) == KORCH_OK ? (int)r.status : -1;
    if (reply)
        *reply = r.json ? json_incref(r.json) : NULL;
    korch_docker_reply_clear(&r);
    return st;
}

/* A running container labelled as instance inst's kernel kid, as no korch
   made it (sleep, not a kernel); binds "" = none; of korch scope scope
   ("" = this runtime dir's, NULL = no korch.scope label, as an older korch
   made them). Its id into id. */
static bool s_fake_kernel(korch_docker_t *d, const char *inst, const char *kid, const char *rdir, const char *bind,
                          const char *scope, char *id, size_t len)
{
    char mine[KORCH_SCOPE_LEN] = "";
    if (scope && !*scope && CHECK_EQ(korch_runtime_scope(NULL, mine, sizeof mine, NULL), KORCH_OK))
        scope = mine;
    json_t *body = json_pack("{s:s, s:[s,s], s:{s:s, s:s, s:s, s:s}, s:{s:s, s:[]}}", "Image", IMAGE, "Cmd",
                             "sleep", "600", "Labels", "korch.instance", inst, "korch.kernel_id", kid,
                             "korch.kernelspec", "python3", "korch.runtime_dir", rdir, "HostConfig", "NetworkMode",
                             "none", "Binds");
    if (body && scope)
        json_object_set_new(json_object_get(body, "Labels"), "korch.scope", json_string(scope));
    if (bind && *bind)
        json_array_append_new(json_object_get(json_object_get(body, "HostConfig"), "Binds"), json_string(bind));
    json_t *r = NULL;
    int st = s_post(d, "/containers/create", body, &r);
    json_decref(body);
    const char *cid = json_string_value(json_object_get(r, "Id"));
    snprintf(id, len, "%s", cid ? cid : "");
    json_decref(r);
    if (!CHECK_EQ(st, 201) || !id[0])
        return false;
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/start", id);
    return CHECK_EQ(s_post(d, path, NULL, NULL), 204);
}

static bool s_exists(korch_docker_t *d, const char *cid)
{
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/json", cid);
    korch_docker_reply_t r = {0};
    bool there = korch_docker_request(d, "GET", path, NULL, &r, NULL) == KORCH_OK && r.status == 200;
    korch_docker_reply_clear(&r);
    return there;
}

/* Wait until no container has label key=value (true) or timeout_ms passes. */
static bool s_wait_none(korch_docker_t *d, const char *key, const char *value, int timeout_ms)
{
    for (int t = 0; t < timeout_ms; t += 200) {
        if (s_count(d, key, value) == 0)
            return true;
        usleep(200 * 1000);
    }
    return false;
}

static void s_remove_label(korch_docker_t *d, const char *inst)
{
    char label[128], path[200];
    snprintf(label, sizeof label, "korch.instance=%s", inst);
    json_t *a = s_containers(d, label);
    size_t i;
    json_t *c;
    json_array_foreach(a, i, c) {
        snprintf(path, sizeof path, "/containers/%s?force=1&v=1", json_string_value(json_object_get(c, "Id")));
        korch_docker_reply_t r = {0};
        korch_docker_request(d, "DELETE", path, NULL, &r, NULL);
        korch_docker_reply_clear(&r);
    }
    json_decref(a);
}

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

static bool s_log_has(const serve_t *s, const char *needle)
{
    char *text = korch_read_file(s->log, 4 << 20, NULL, NULL);
    bool has = text && strstr(text, needle);
    free(text);
    return has;
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
    bool adopted_before = s_log_has(&s, "re-adopted: its state is kept");
    CHECK_EQ(st, 200);
    CHECK(s_log_has(&s, "being re-adopted"));
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
    CHECK(s_log_has(&s, "not re-adopted: it ended while korch was down"));
    /* what could not be adopted: a notice each, removed, nothing else lost */
    for (int i = 0; i < 3; i++)
        CHECK(!s_exists(d, cbad[i]));
    CHECK(s_log_has(&s, "does not mount its runtime dir"));
    CHECK(s_log_has(&s, "is not a kernel id of korch serve"));
    CHECK(s_log_has(&s, bad_dir));
    struct stat sb;
    CHECK(lstat(bad_dir, &sb) != 0); /* its (empty) runtime dir went with it */
    CHECK(s_exists(d, c0));
    CHECK(s_exists(d, cforeign));
    CHECK(s_exists(d, clegacy));
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: their korch.scope label is not", inst);
    CHECK(s_log_has(&s, want));
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: they carry no korch.scope label",
             inst);
    CHECK(s_log_has(&s, want));
    CHECK(!s_log_has(&s, u3) && !s_log_has(&s, u4)); /* not even tried */

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

/* ------------------------------------------------- agent sessions */

/* resume_peer.py MODE [A1 [A2]] against s: its JSON line (new), NULL when none. */
static json_t *s_rpeer(const serve_t *s, const char *mode, const char *a1, const char *a2)
{
    const char *argv[] = {PY, serve_peer("resume_peer.py"), s->url, s->token, mode, a1, a2, NULL};
    char *out = NULL, *err = NULL;
    int st = korch_test_run(argv, NULL, &out, &err, 300);
    json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (st != 0 || !json_is_true(json_object_get(j, "ok")))
        fprintf(stderr, "resume_peer.py %s: status %d\n%s\n%s\n", mode, st, out ? out : "", err ? err : "");
    free(out);
    free(err);
    return j;
}

/* The number after "STAMP=" in text into buf ("" when none). */
static void s_stamp(const char *text, char *buf, size_t len)
{
    const char *p = text ? strstr(text, "STAMP=") : NULL;
    size_t n = p ? strspn(p + 6, "0123456789.") : 0;
    while (n && p[6 + n - 1] == '.') /* the sentence's full stop */
        n--;
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p ? p + 6 : "");
}

/* notices joined (a new string) */
static char *s_notices(json_t *turn)
{
    json_t *a = json_object_get(turn, "notices");
    size_t i, n = 1;
    json_t *v;
    json_array_foreach(a, i, v) n += json_string_length(v) + 3;
    char *out = calloc(1, n);
    size_t used = 0;
    json_array_foreach(a, i, v) if (out) used += (size_t)snprintf(out + used, n - used, "%s | ", json_string_value(v));
    return out;
}

/* Is the listed kernels' array exactly the ids given (any order)? */
static bool s_listed(json_t *j, const char *a, const char *b)
{
    json_t *ks = json_object_get(j, "kernels");
    size_t want = (a ? 1 : 0) + (b ? 1 : 0);
    if (!CHECK_EQ(json_array_size(ks), want)) {
        char *t = json_dumps(ks, JSON_COMPACT);
        fprintf(stderr, "  listed: %s\n", t ? t : "?");
        free(t);
        return false;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ks, i, v) if (!CHECK((a && strcmp(json_string_value(v), a) == 0) ||
                                            (b && strcmp(json_string_value(v), b) == 0))) return false;
    return true;
}

/* An agent session whose korch serve --instance X is killed with -9 goes
   back onto its own kernel at the restart: a value no snapshot or replay
   could give back (a time inside a closure) is still there, the kernel is
   the same and the only one listed, and the session owns it again (DELETE
   removes it and its container). A second session, whose container was
   killed while korch was down, resumes in a fresh kernel as before
   (snapshot and replay, said), and nothing is left over. */
TEST_T(server_adopt_agent_session_back_on_its_kernel, 600)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!CHECK(d != NULL)) {
        fprintf(stderr, "  docker: %s\n", err.msg);
        return;
    }
    char inst[64], dir[] = "/tmp/korch-adopt-agent-XXXXXX", url[256], line[64], cmd[512];
    snprintf(inst, sizeof inst, "adopt-agent-%d", (int)getpid());
    serve_t s = {0};
    json_t *j = NULL;
    pid_t llm = 0;
    char sid[2][64] = {"", ""}, kid[2][64] = {"", ""}, cid[2][80] = {"", ""}, stamp[2][64] = {"", ""};
    char got[64], k3[64] = "";
    char *notes = NULL;
    if (!CHECK(mkdtemp(dir) != NULL))
        goto out;
    const char *largv[] = {PY, serve_peer("llm_server.py"), NULL};
    llm = korch_test_spawn_line(largv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0))
        goto out;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/stamp/v1", (int)strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    const char *args[] = {"--launcher", "docker", "--instance", inst, "--agent-dir", dir, "--pool", "0",
                          "--llm", "openai:gpt-4o-mini", NULL};
    if (!CHECK(serve_start_args(&s, args)))
        goto out;
    /* two sessions, one turn each: STAMP printed */
    for (int i = 0; i < 2; i++) {
        j = s_rpeer(&s, "new", NULL, NULL);
        json_t *m = json_object_get(j, "session");
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            goto out;
        snprintf(sid[i], sizeof sid[i], "%s", json_string_value(json_object_get(m, "id")));
        snprintf(kid[i], sizeof kid[i], "%s", json_string_value(json_object_get(m, "kernel_id")));
        json_decref(j);
        j = s_rpeer(&s, "turn", sid[i], "remember the time");
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            goto out;
        s_stamp(json_string_value(json_object_get(j, "final")), stamp[i], sizeof stamp[i]);
        CHECK(stamp[i][0]);
        json_decref(j);
        j = NULL;
        s_container_of(d, kid[i], cid[i], sizeof cid[i]);
        CHECK(cid[i][0]);
    }

    /* kill -9; the second session's container dies meanwhile */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    serve_stop(&s);
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill", cid[1]);
    CHECK_EQ(s_post(d, path, NULL, NULL), 204);
    /* and a copy of the first session appears, its session.json naming the
       same kernel: session.json is not trusted, only one gets that kernel */
    char forged[40];
    korch_uuid(forged);
    snprintf(cmd, sizeof cmd, "cp -a '%s/%s' '%s/%s'", dir, sid[0], dir, forged);
    CHECK_EQ(system(cmd), 0);
    {
        char sj[PATH_MAX];
        snprintf(sj, sizeof sj, "%s/%s/session.json", dir, forged);
        json_t *f = json_load_file(sj, 0, NULL);
        CHECK_STREQ(json_string_value(json_object_get(f, "kernel_id")), kid[0]);
        json_object_set_new(f, "id", json_string(forged));
        CHECK_EQ(json_dump_file(f, sj, 0), 0);
        json_decref(f);
    }
    if (!CHECK(serve_start_args(&s, args)))
        goto out;

    /* the first (or its copy) is back on its kernel, which is the only one
       listed; the other is stopped, to resume in a fresh kernel */
    char win[64] = "", lose[64] = "";
    for (int i = 0; i < 2; i++) {
        const char *id = i ? forged : sid[0];
        j = s_rpeer(&s, "get", id, NULL);
        json_t *m = json_object_get(j, "session");
        if (json_is_string(json_object_get(m, "kernel_id")))
            snprintf(win, sizeof win, "%s", id);
        else {
            snprintf(lose, sizeof lose, "%s", id);
            CHECK_STREQ(json_string_value(json_object_get(m, "state")), "stopped");
        }
        json_decref(j);
    }
    if (!CHECK(win[0] && lose[0]))
        goto out;
    j = s_rpeer(&s, "get", win, NULL);
    json_t *m = json_object_get(j, "session");
    CHECK_STREQ(json_string_value(json_object_get(m, "state")), "idle");
    CHECK_STREQ(json_string_value(json_object_get(m, "kernel_id")), kid[0]);
    CHECK(json_is_true(json_object_get(m, "owns_kernel")));
    s_listed(j, kid[0], NULL);
    json_decref(j);
    CHECK(!s_exists(d, cid[1]));
    CHECK(s_log_has(&s, "resuming in a fresh kernel instead"));
    /* the one stopped goes without touching the kernel */
    j = s_rpeer(&s, "delete", lose, NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, kid[0], NULL);
    json_decref(j);
    snprintf(sid[0], sizeof sid[0], "%s", win);
    /* its variables are live: the same time, nothing rebuilt */
    j = s_rpeer(&s, "turn", sid[0], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK_STREQ(got, stamp[0]);
    notes = s_notices(j);
    CHECK_CONTAINS(notes, "kept running");
    CHECK(!strstr(notes, "fresh kernel"));
    free(notes);
    notes = NULL;
    json_decref(j);
    j = s_rpeer(&s, "get", sid[0], NULL);
    s_listed(j, kid[0], NULL);
    json_decref(j);
    CHECK(s_exists(d, cid[0]));

    /* the second resumes in a fresh kernel, said, its time made again */
    j = s_rpeer(&s, "turn", sid[1], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK(got[0] && strcmp(got, stamp[1]) != 0);
    notes = s_notices(j);
    CHECK_CONTAINS(notes, "resuming the session (the server restarted): starting a kernel");
    CHECK_CONTAINS(notes, "fresh kernel");
    json_decref(j);
    j = s_rpeer(&s, "get", sid[1], NULL);
    m = json_object_get(j, "session");
    snprintf(k3, sizeof k3, "%s", json_string_value(json_object_get(m, "kernel_id")) ?: "");
    CHECK(k3[0] && strcmp(k3, kid[1]) != 0);
    s_listed(j, kid[0], k3);
    json_decref(j);

    /* killed again, and a message at once: it waits for the kernel being
       re-adopted (never a 409), and both sessions are back on their kernels */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    serve_stop(&s);
    if (!CHECK(serve_start_args(&s, args)))
        goto out;
    j = s_rpeer(&s, "turn", sid[0], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK_STREQ(got, stamp[0]);
    free(notes);
    notes = s_notices(j);
    CHECK(strstr(notes, "waiting for the session's kernel") || strstr(notes, "kept running"));
    fprintf(stderr, "server-adopt: a message at once after the restart %s\n",
            strstr(notes, "waiting for the session's kernel") ? "waited for the kernel being re-adopted"
                                                              : "came after the re-adoption");
    CHECK(!strstr(notes, "fresh kernel"));
    json_decref(j);
    j = s_rpeer(&s, "get", sid[1], NULL);
    m = json_object_get(j, "session");
    CHECK_STREQ(json_string_value(json_object_get(m, "state")), "idle");
    CHECK_STREQ(json_string_value(json_object_get(m, "kernel_id")), k3);
    s_listed(j, kid[0], k3);
    json_decref(j);

    /* DELETE: each session's kernel goes, container and all */
    j = s_rpeer(&s, "delete", sid[0], NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, k3, NULL);
    json_decref(j);
    CHECK(s_wait_none(d, "korch.kernel_id", kid[0], 30000));
    j = s_rpeer(&s, "delete", sid[1], NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, NULL, NULL);
    CHECK(s_wait_none(d, "korch.kernel_id", k3, 30000));
    serve_stop(&s);
    CHECK(s_wait_none(d, "korch.instance", inst, 30000));
out:
    if (s.pid > 0)
        serve_log_tail(&s);
    free(notes);
    json_decref(j);
    serve_stop(&s);
    s_remove_label(d, inst);
    korch_docker_destroy(&d);
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}
