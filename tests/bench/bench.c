/*  korch-bench: the korch client's numbers, one JSON object per result on stdout.
 *
 *  korch-bench roundtrip CONNFILE N      N executions of `pass` on a running kernel
 *  korch-bench stream CONNFILE MB [CAP]  print MB MiB of stdout; CAP = max_stream_bytes
 *                                        (default: MB MiB + 1 MiB, so nothing is dropped)
 *  korch-bench start N                   N sequential local kernel starts, time to ready
 *  korch-bench rss CONNFILE [N]          where the client's resident memory goes
 *  korch-bench routes N                  the router: route table vs the strcmp chains it replaced (routes.c)
 *
 *  Times are wall clock (CLOCK_MONOTONIC) in ms. Memory is from /proc/self/status
 *  in KiB. With KORCH_BENCH_SAMPLES=FILE every round-trip / start sample (ms) is
 *  appended to FILE, one per line, so runs can be pooled (scripts/bench.sh).
 */
#include "korch/kernel.h"
#include "korch/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 50

int bench_routes(int n); /* routes.c */

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One field of /proc/self/status in KiB ("VmRSS"), -1 if absent. */
static long s_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    size_t n = strlen(field);
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static void s_mem_into(json_t *o)
{
    static const char *const fields[] = {"VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        json_object_set_new(o, fields[i], json_integer(s_status_kib(fields[i])));
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double s_pct(const double *v, int n, double p)
{
    int i = (int)(p / 100.0 * n + 0.999999) - 1;
    if (i < 0)
        i = 0;
    if (i >= n)
        i = n - 1;
    return v[i];
}

static void s_stats_into(json_t *o, double *v, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    qsort(v, (size_t)n, sizeof *v, s_cmp_double);
    json_object_set_new(o, "n", json_integer(n));
    json_object_set_new(o, "p50_ms", json_real(s_pct(v, n, 50)));
    json_object_set_new(o, "p99_ms", json_real(s_pct(v, n, 99)));
    json_object_set_new(o, "min_ms", json_real(v[0]));
    json_object_set_new(o, "max_ms", json_real(v[n - 1]));
    json_object_set_new(o, "mean_ms", json_real(sum / n));
    json_object_set_new(o, "per_s", json_real(sum > 0 ? n / (sum / 1e3) : 0));
}

static void s_save_samples(const double *v, int n)
{
    const char *path = getenv("KORCH_BENCH_SAMPLES");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    for (int i = 0; i < n; i++)
        fprintf(f, "%.4f\n", v[i]);
    fclose(f);
}

static void s_emit(json_t *o)
{
    json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    putchar('\n');
    fflush(stdout);
    json_decref(o);
}

static korch_kernel_t *s_attach(korch_loop_t *loop, const char *conn, size_t max_stream, korch_err_t *err)
{
    korch_kernel_opts_t ko = {.existing = conn, .max_stream_bytes = max_stream};
    korch_kernel_t *k = korch_kernel_new(loop, &ko, err);
    if (k && korch_kernel_wait_ready(k, err) != KORCH_OK)
        korch_kernel_destroy(&k);
    return k;
}

/* Execute code and wait; false (with a message on stderr) unless it ended OK. */
static bool s_run(korch_kernel_t *k, const char *code)
{
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(k, code, NULL, NULL, &err);
    if (!ex) {
        fprintf(stderr, "korch-bench: %s\n", err.msg);
        return false;
    }
    const korch_exec_result_t *r = korch_exec_result(ex);
    bool ok = r->status == KORCH_EXEC_OK;
    if (!ok)
        fprintf(stderr, "korch-bench: execution ended %s %s\n", korch_exec_status_name(r->status), r->detail);
    korch_exec_destroy(&ex);
    return ok;
}

/* ------------------------------------------------------------- roundtrip */

static int s_roundtrip(const char *conn, int n)
{
    int rc = 1;
    korch_err_t err = {0};
    korch_loop_t *loop = korch_loop_new();
    double *v = calloc((size_t)n, sizeof *v);
    korch_kernel_t *k = loop && v ? s_attach(loop, conn, 0, &err) : NULL;
    if (!k) {
        fprintf(stderr, "korch-bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    for (int i = 0; i < WARMUP; i++)
        if (!s_run(k, "pass"))
            goto out;
    double t_all = s_now();
    for (int i = 0; i < n; i++) {
        double t0 = s_now();
        if (!s_run(k, "pass"))
            goto out;
        v[i] = s_now() - t0;
    }
    t_all = s_now() - t_all;
    s_save_samples(v, n);
    json_t *o = json_pack("{s:s, s:s}", "client", "korch", "bench", "roundtrip");
    s_stats_into(o, v, n);
    json_object_set_new(o, "wall_per_s", json_real(n / (t_all / 1e3)));
    s_mem_into(o);
    s_emit(o);
    rc = 0;
out:
    korch_kernel_destroy(&k);
    korch_loop_destroy(&loop);
    free(v);
    return rc;
}

/* ---------------------------------------------------------------- stream */

typedef struct {
    size_t bytes;       /* stream text received, counted per message */
    size_t msgs;
} stream_count_t;

static void s_count_stream(korch_kernel_t *k, korch_channel_t ch, const korch_msg_t *msg, void *arg)
{
    stream_count_t *c = arg;
    if (ch != KORCH_CH_IOPUB || strcmp(korch_msg_type(msg), "stream") != 0)
        return;
    /* Over max_stream_bytes, korch's session keeps the head of the text and
       counts the rest in content.korch_dropped: all of it was received. */
    c->bytes += json_string_length(json_object_get(msg->content, "text"));
    c->bytes += (size_t)json_integer_value(json_object_get(msg->content, "korch_dropped"));
    c->msgs++;
}

static int s_stream(const char *conn, int mb, size_t cap)
{
    int rc = 1;
    korch_err_t err = {0};
    korch_loop_t *loop = korch_loop_new();
    if (!cap)
        cap = ((size_t)mb + 1) << 20;
    korch_kernel_t *k = loop ? s_attach(loop, conn, cap, &err) : NULL;
    if (!k) {
        fprintf(stderr, "korch-bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    if (!s_run(k, "import sys"))
        goto out;
    long hwm0 = s_status_kib("VmHWM");
    stream_count_t c = {0};
    korch_kernel_cb_t kcb = {.on_message = s_count_stream, .arg = &c};
    korch_kernel_set_callbacks(k, &kcb);
    char code[160];
    snprintf(code, sizeof code, "import sys\nfor _ in range(%d): sys.stdout.write('x' * (1 << 20))\n", mb);
    double t0 = s_now();
    korch_exec_t *ex = korch_kernel_execute_wait(k, code, NULL, NULL, &err);
    double dt = s_now() - t0;
    korch_kernel_set_callbacks(k, NULL);
    if (!ex) {
        fprintf(stderr, "korch-bench: %s\n", err.msg);
        goto out;
    }
    const korch_exec_result_t *r = korch_exec_result(ex);
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:I}", "client", "korch", "bench",
                          "stream", "mb", mb, "status", korch_exec_status_name(r->status), "received_bytes",
                          (json_int_t)c.bytes, "stream_msgs", (json_int_t)c.msgs, "max_stream_bytes",
                          (json_int_t)cap, "dropped_bytes", (json_int_t)r->dropped_bytes, "seconds", dt / 1e3,
                          "mb_per_s", (double)c.bytes / (1 << 20) / (dt / 1e3), "VmHWM_before", (json_int_t)hwm0);
    korch_exec_destroy(&ex);
    s_mem_into(o);
    s_emit(o);
    rc = c.bytes == ((size_t)mb << 20) ? 0 : 1;
out:
    korch_kernel_destroy(&k);
    korch_loop_destroy(&loop);
    return rc;
}

/* ----------------------------------------------------------------- start */

/* Each start gets its own loop, as each jupyter_client start gets its own
   KernelManager: the starts are independent. (Reusing one loop also hangs
   with the loop of commit 156e8fd: the first kernel's dead readers are
   resolved after their sockets were freed, zmq_poll fails with ENOTSOCK and
   s_round returns before sweeping them, forever.) */
static int s_start(int n)
{
    int rc = 1;
    double *v = calloc((size_t)n, sizeof *v);
    double *inner = calloc((size_t)n, sizeof *inner);
    if (!v || !inner)
        goto out;
    for (int i = 0; i < n; i++) {
        korch_err_t err = {0};
        korch_loop_t *loop = korch_loop_new();
        double t0 = s_now();
        korch_kernel_t *k = loop ? korch_kernel_new(loop, NULL, &err) : NULL;
        if (!k || korch_kernel_wait_ready(k, &err) != KORCH_OK) {
            fprintf(stderr, "korch-bench: %s\n", err.msg[0] ? err.msg : "out of memory");
            korch_kernel_destroy(&k);
            korch_loop_destroy(&loop);
            goto out;
        }
        v[i] = s_now() - t0;
        inner[i] = (double)korch_kernel_ready_ms(k);
        korch_kernel_destroy(&k);
        korch_loop_destroy(&loop);
    }
    s_save_samples(v, n);
    json_t *o = json_pack("{s:s, s:s}", "client", "korch", "bench", "start");
    qsort(inner, (size_t)n, sizeof *inner, s_cmp_double);
    json_object_set_new(o, "ready_ms_p50_korch_reported", json_real(s_pct(inner, n, 50)));
    s_stats_into(o, v, n);
    s_mem_into(o);
    s_emit(o);
    rc = 0;
out:
    free(v);
    free(inner);
    return rc;
}

/* ------------------------------------------------------------------- rss */

/* Resident KiB per mapping name from /proc/self/smaps, largest first. */
static json_t *s_smaps_top(int top)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    json_t *by = json_object();
    char line[1024], name[512] = "";
    while (f && fgets(line, sizeof line, f)) {
        long kib;
        if (sscanf(line, "Rss: %ld kB", &kib) == 1) {
            json_t *cur = json_object_get(by, name);
            json_object_set_new(by, name, json_integer(json_integer_value(cur) + kib));
        } else if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ')) {
            /* "start-end perms offset dev inode [path]" */
            char path[512] = "";
            sscanf(line, "%*s %*s %*s %*s %*s %511[^\n]", path);
            const char *p = path;
            while (*p == ' ')
                p++;
            const char *slash = strrchr(p, '/');
            snprintf(name, sizeof name, "%s", *p ? (slash ? slash + 1 : p) : "[anon]");
        }
    }
    if (f)
        fclose(f);
    json_t *arr = json_array();
    for (int i = 0; i < top; i++) {
        const char *key, *best = NULL;
        json_t *val;
        json_int_t bv = 0;
        json_object_foreach(by, key, val) {
            if (json_integer_value(val) > bv) {
                bv = json_integer_value(val);
                best = key;
            }
        }
        if (!best)
            break;
        json_array_append_new(arr, json_pack("{s:s, s:I}", "mapping", best, "rss_kib", bv));
        json_object_del(by, best);
    }
    json_decref(by);
    return arr;
}

static void s_stage(json_t *stages, const char *name)
{
    json_t *o = json_pack("{s:s}", "stage", name);
    s_mem_into(o);
    json_array_append_new(stages, o);
}

static int s_rss(const char *conn, int n)
{
    int rc = 1;
    korch_err_t err = {0};
    json_t *stages = json_array();
    s_stage(stages, "main");
    json_t *top_main = s_smaps_top(15);
    korch_loop_t *loop = korch_loop_new();
    s_stage(stages, "loop_new");
    zsock_t *probe = zsock_new(ZMQ_DEALER); /* zsys_init: the zmq context and its I/O thread */
    zsock_destroy(&probe);
    s_stage(stages, "zmq_context");
    korch_kernel_t *k = loop ? s_attach(loop, conn, 0, &err) : NULL;
    if (!k) {
        fprintf(stderr, "korch-bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    s_stage(stages, "attached_ready");
    for (int i = 0; i < n; i++)
        if (!s_run(k, "pass"))
            goto out;
    s_stage(stages, "after_executions");
    json_t *o = json_pack("{s:s, s:s, s:i, s:o, s:O, s:o}", "client", "korch", "bench", "rss", "executions", n,
                          "stages", json_incref(stages), "top_mappings_at_main", top_main, "top_mappings",
                          s_smaps_top(15));
    s_emit(o);
    rc = 0;
out:
    korch_kernel_destroy(&k);
    korch_loop_destroy(&loop);
    json_decref(stages);
    json_decref(top_main);
    return rc;
}

/* ------------------------------------------------------------------ main */

static void s_usage(void)
{
    fprintf(stderr, "usage: korch-bench roundtrip CONNFILE N\n"
                    "       korch-bench stream CONNFILE MB [MAX_STREAM_BYTES]\n"
                    "       korch-bench start N\n"
                    "       korch-bench rss CONNFILE [N]\n"
                    "       korch-bench routes N\n");
}

static int s_posint(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v <= 0 || v > 100000000 ? -1 : (int)v;
}

int main(int argc, char **argv)
{
    /* Keep SIGINT / SIGTERM deadly: czmq would otherwise catch them into a
       flag, and a benchmark stuck in korch_loop_run could not be stopped. */
    zsys_handler_set(NULL);
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "roundtrip") == 0 && argc == 4 && s_posint(argv[3]) > 0)
        return s_roundtrip(argv[2], s_posint(argv[3]));
    if (strcmp(cmd, "stream") == 0 && (argc == 4 || argc == 5) && s_posint(argv[3]) > 0)
        return s_stream(argv[2], s_posint(argv[3]), argc == 5 ? strtoull(argv[4], NULL, 10) : 0);
    if (strcmp(cmd, "start") == 0 && argc == 3 && s_posint(argv[2]) > 0)
        return s_start(s_posint(argv[2]));
    if (strcmp(cmd, "routes") == 0 && argc == 3 && s_posint(argv[2]) > 0)
        return bench_routes(s_posint(argv[2]));
    if (strcmp(cmd, "rss") == 0 && (argc == 3 || argc == 4))
        return s_rss(argv[2], argc == 4 ? s_posint(argv[3]) : 100);
    s_usage();
    return 2;
}
