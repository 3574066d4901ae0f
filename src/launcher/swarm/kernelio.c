/*  The swarm launcher's own socket to the kernel: the files (see swarm.c's
 *  top for why). */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------- the kernel's channels */

/* The launcher's own session with the kernel (its key), made on first use. */
static korch_session_t *s_session(swarm_proc_t *p)
{
    if (!p->session)
        p->session = korch_session_new(p->base.conn.key, strlen(p->base.conn.key), "korch", NULL, NULL);
    return p->session;
}

/* A DEALER of the launcher's own to one of the kernel's ROUTERs. */
static zsock_t *s_dealer(swarm_proc_t *p, korch_channel_t ch)
{
    char ep[PATH_MAX + 32];
    korch_conn_endpoint(&p->base.conn, ch, ep, sizeof ep);
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    if (zsock_connect(s, "%s", ep) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    return s;
}

/* -------------------------------------------------------------- files */

/* A file operation that waits for the one under way (p->file_op): the
   kernel runs them one after another anyway, on its shell channel. */
struct sw_fileq {
    sw_fileq_t *next;
    swarm_proc_t *p;
    korch_op_t *op;
    bool get;
    char *name;
    char *data; /* a put's bytes (a copy), NULL for a get */
    size_t len, max;
};

static void s_fileq_free(sw_fileq_t *q)
{
    free(q->name);
    free(q->data);
    free(q);
}

static void s_file_next(swarm_proc_t *p);

static void s_file_end(swarm_proc_t *p, korch_rc_t rc, const korch_err_t *err, char *data, size_t len)
{
    korch_op_t *op = p->file_op;
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    p->file_timer = -1;
    p->file_op = NULL;
    if (!op) {
        free(data);
        return;
    }
    korch_op_on_cancel(op, NULL, NULL);
    if (p->file_get)
        korch_op_finish_file(op, data, len, rc, err);
    else {
        free(data);
        korch_op_finish(op, rc, err);
    }
    s_file_next(p); /* its callback runs a round later: nothing re-enters here */
}

static void s_file_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    swarm_proc_t *p = arg;
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    p->file_timer = -1;
    p->file_op = NULL; /* a late reply finds no op and is dropped */
    s_file_next(p);
}

/* A waiting operation cancelled: it leaves the queue. */
static void s_fileq_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    sw_fileq_t *q = arg;
    for (sw_fileq_t **pq = &q->p->fileq; *pq; pq = &(*pq)->next)
        if (*pq == q) {
            *pq = q->next;
            break;
        }
    s_fileq_free(q);
}

/* The execute_reply of a file operation on our shell DEALER. */
static int s_on_shell(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    swarm_proc_t *p = arg;
    zmsg_t *frames = zmsg_recv(sock);
    korch_msg_t *m = NULL;
    korch_err_t err = {0};
    korch_reject_t why;
    if (!frames || korch_session_deserialize(p->session, &frames, &m, &why, &err) != KORCH_OK) {
        zmsg_destroy(&frames);
        return 0;
    }
    if (!p->file_op || strcmp(korch_msg_parent_id(m), p->file_msg_id) || strcmp(korch_msg_type(m), "execute_reply")) {
        korch_msg_destroy(&m);
        return 0;
    }
    json_t *c = m->content;
    json_t *ue = json_object_get(json_object_get(c, "user_expressions"), "r");
    const char *text = sw_str(json_object_get(ue, "data"), "text/plain", NULL);
    korch_rc_t rc = KORCH_OK;
    char *data = NULL;
    size_t len = 0;
    if (strcmp(sw_str(c, "status", NULL), "ok") || strcmp(sw_str(ue, "status", NULL), "ok")) {
        const char *ev = sw_str(ue, "evalue", NULL);
        rc = korch_err_set(&err, KORCH_E_IO, "the kernel could not %s the file: %s", p->file_get ? "read" : "write",
                           *ev ? ev : sw_str(c, "evalue", NULL));
    } else if (p->file_get) {
        /* repr of a str: 'base64' or "E:NOTFOUND" / "E:TOOBIG" */
        size_t tl = strlen(text);
        if (tl >= 2 && (text[0] == '\'' || text[0] == '"'))
            text++, tl -= 2;
        if (tl >= 2 && !strncmp(text, "E:", 2)) {
            rc = !strncmp(text, "E:NOTFOUND", 10)
                     ? korch_err_set(&err, KORCH_E_NOTFOUND, "no file in the kernel's work dir by that name")
                 : !strncmp(text, "E:TOOBIG", 8)
                     ? korch_err_set(&err, KORCH_E_TOOBIG, "the file is larger than %zu bytes%s", p->file_max,
                                     p->file_max == SW_FILE_MAX ? " (files through a swarm kernel are at most 16 MiB)" : "")
                     : korch_err_set(&err, KORCH_E_IO, "the kernel could not read the file: %.*s", (int)tl, text);
        } else {
            unsigned char *raw = korch_b64_decode(text, tl, &len);
            if (!raw)
                rc = korch_err_set(&err, KORCH_E_PROTOCOL, "the kernel's answer is not base64");
            else if (len > p->file_max)
                rc = korch_err_set(&err, KORCH_E_TOOBIG, "the file is larger than %zu bytes%s", p->file_max,
                                   p->file_max == SW_FILE_MAX ? " (files through a swarm kernel are at most 16 MiB)" : "");
            if (raw && !rc) {
                data = malloc(len + 1);
                if (data) {
                    memcpy(data, raw, len);
                    data[len] = 0;
                } else
                    rc = korch_err_set(&err, KORCH_E_NOMEM, "out of memory");
            }
            free(raw);
        }
    }
    korch_msg_destroy(&m);
    s_file_end(p, rc, rc ? &err : NULL, rc ? (free(data), NULL) : data, rc ? 0 : len);
    return 0;
}

static int s_on_file_timer(korch_loop_t *loop, int id, void *arg)
{
    (void)loop;
    (void)id;
    swarm_proc_t *p = arg;
    p->file_timer = -1;
    korch_err_t err = {0};
    korch_err_set(&err, KORCH_E_TIMEOUT, "the kernel did not answer the file request within 30 s (is it busy?)");
    s_file_end(p, KORCH_E_TIMEOUT, &err, NULL, 0);
    return 0;
}

/* The Python a file operation runs in the kernel, in a namespace of its
   own (n: the name, already checked relative; w: the work dir; m: the
   bound; x: the data in base64). Every directory on the way and the file
   itself are opened O_NOFOLLOW relative to the one before: what the
   kernel's code planted is its own business, but is never followed. */
static const char S_PY_WALK[] = "import os, base64\n"
                                "def _walk(make):\n"
                                "    d = os.open(w, os.O_RDONLY | os.O_DIRECTORY)\n"
                                "    for q in n.split('/')[:-1]:\n"
                                "        if make:\n"
                                "            try:\n"
                                "                os.mkdir(q, 0o755, dir_fd=d)\n"
                                "            except FileExistsError:\n"
                                "                pass\n"
                                "        try:\n"
                                "            e = os.open(q, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=d)\n"
                                "        finally:\n"
                                "            os.close(d)\n"
                                "        d = e\n"
                                "    return d\n";
static const char S_PY_GET[] = "try:\n"
                               "    d = _walk(False)\n"
                               "    try:\n"
                               "        f = os.open(n.split('/')[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=d)\n"
                               "    finally:\n"
                               "        os.close(d)\n"
                               "    try:\n"
                               "        s = b''\n"
                               "        while len(s) <= m:\n"
                               "            c = os.read(f, 1 << 20)\n"
                               "            if not c:\n"
                               "                break\n"
                               "            s += c\n"
                               "    finally:\n"
                               "        os.close(f)\n"
                               "    r = 'E:TOOBIG' if len(s) > m else base64.b64encode(s).decode()\n"
                               "except FileNotFoundError:\n"
                               "    r = 'E:NOTFOUND'\n";
static const char S_PY_PUT[] = "d = _walk(True)\n"
                               "try:\n"
                               "    f = os.open(n.split('/')[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,"
                               " 0o644, dir_fd=d)\n"
                               "finally:\n"
                               "    os.close(d)\n"
                               "try:\n"
                               "    x = base64.b64decode(x)\n"
                               "    v = memoryview(x)\n"
                               "    while v:\n"
                               "        v = v[os.write(f, v):]\n"
                               "finally:\n"
                               "    os.close(f)\n"
                               "r = len(x)\n";

/* What refuses a file operation whether it runs now or waits. */
static korch_rc_t s_file_check(swarm_proc_t *p, bool get, size_t len, korch_err_t *err)
{
    if (p->st != ST_RUNNING) {
        return korch_err_set(err, KORCH_E_DIED, "the kernel is not running (%s)", p->why[0] ? p->why : "not started");
    }
    if (!p->python) {
        return korch_err_set(err, KORCH_E_STATE, "the swarm launcher moves files through the kernel, and only a Python "
                                          "kernel's (this one's language is not python)");
    }
    if (!get && len > SW_FILE_MAX) {
        return korch_err_set(err, KORCH_E_TOOBIG, "files through a swarm kernel are at most %u MiB", SW_FILE_MAX >> 20);
    }
    return KORCH_OK;
}

/* Send the operation to the kernel; it becomes p->file_op. */
static korch_rc_t s_file_send(swarm_proc_t *p, const char *name, bool get, const void *data, size_t len, size_t max,
                              korch_op_t *op, korch_err_t *err)
{
    /* A get's max is the caller's bound (the agent API passes its upload
       limit, 64 MiB): read up to ours, and say ours if the file is larger. */
    if (get && max > SW_FILE_MAX)
        max = SW_FILE_MAX;
    if (!s_session(p)) {
        return korch_err_set(err, KORCH_E_NOMEM, "cannot create a session (openssl)");
    }
    if (!p->shell) {
        p->shell = s_dealer(p, KORCH_CH_SHELL);
        if (!p->shell) {
            return korch_err_set(err, KORCH_E_IO, "cannot connect to the kernel's shell channel at %s", p->base.conn.ip);
        }
        korch_loop_reader(p->l->base.loop, p->shell, s_on_shell, p);
    }
    char *b64 = get ? NULL : korch_b64_encode(data, len);
    char src[sizeof S_PY_WALK + sizeof S_PY_GET + sizeof S_PY_PUT];
    snprintf(src, sizeof src, "%s%s", S_PY_WALK, get ? S_PY_GET : S_PY_PUT);
    json_t *vals = json_pack("[s, s, s, s]", src, name, p->l->o.workdir_mount, b64 ? b64 : "");
    free(b64);
    char *vs = vals ? json_dumps(vals, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(vals);
    /* A JSON array of strings is a Python list literal (jansson escapes
       nothing Python reads otherwise). */
    size_t need = vs ? strlen(vs) + 256 : 0;
    char *expr = vs ? malloc(need) : NULL;
    if (!expr) {
        free(vs);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    snprintf(expr, need,
             "(lambda a: (lambda g: (exec(a[0], g), g['r'])[1])({'n': a[1], 'w': a[2], 'x': a[3], 'm': %zu}))(%s)",
             max, vs);
    free(vs);
    json_t *content = json_pack("{s:s, s:b, s:b, s:{s:s}, s:b, s:b}", "code", "", "silent", 1, "store_history", 0,
                                "user_expressions", "r", expr, "allow_stdin", 0, "stop_on_error", 0);
    free(expr);
    korch_msg_t *m = korch_msg_new("execute_request", content);
    const char *mid = m ? korch_session_stamp(p->session, m) : NULL;
    if (!mid) {
        korch_msg_destroy(&m);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    snprintf(p->file_msg_id, sizeof p->file_msg_id, "%s", mid);
    korch_rc_t rc = korch_session_send(p->session, p->shell, &m, err);
    if (rc)
        return rc;
    p->file_get = get;
    p->file_max = max;
    p->file_op = op;
    korch_op_on_cancel(op, s_file_cancel, p);
    p->file_timer = korch_loop_timer(p->l->base.loop, 30000, 1, s_on_file_timer, p);
    return KORCH_OK;
}

/* Start the oldest waiting operation once none is under way; one that
   cannot start (the kernel died meanwhile) ends with why. */
static void s_file_next(swarm_proc_t *p)
{
    while (!p->file_op && p->fileq) {
        sw_fileq_t *q = p->fileq;
        p->fileq = q->next;
        korch_op_on_cancel(q->op, NULL, NULL);
        korch_err_t e = {0};
        korch_rc_t rc = s_file_check(p, q->get, q->len, &e);
        if (rc == KORCH_OK)
            rc = s_file_send(p, q->name, q->get, q->data, q->len, q->max, q->op, &e);
        if (rc != KORCH_OK) {
            if (q->get)
                korch_op_finish_file(q->op, NULL, 0, rc, &e);
            else
                korch_op_finish(q->op, rc, &e);
        }
        s_fileq_free(q);
    }
}

korch_rc_t sw_file_op(swarm_proc_t *p, const char *name, bool get, const void *data, size_t len, size_t max,
                            korch_op_t *op, korch_err_t *err)
{
    korch_rc_t rc = s_file_check(p, get, len, err);
    if (rc != KORCH_OK)
        return rc;
    if (!p->file_op)
        return s_file_send(p, name, get, data, len, max, op, err);
    sw_fileq_t *q = calloc(1, sizeof *q);
    if (q) {
        q->name = strdup(name);
        q->data = get ? NULL : malloc(len ? len : 1);
    }
    if (!q || !q->name || (!get && !q->data)) {
        if (q)
            s_fileq_free(q);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    if (!get)
        memcpy(q->data, data, len);
    q->p = p;
    q->op = op;
    q->get = get;
    q->len = len;
    q->max = max;
    sw_fileq_t **pq = &p->fileq;
    while (*pq)
        pq = &(*pq)->next;
    *pq = q;
    korch_op_on_cancel(op, s_fileq_cancel, q);
    return KORCH_OK;
}

void sw_kernelio_release(swarm_proc_t *p)
{
    if (p->shell) {
        korch_loop_reader_end(p->l->base.loop, p->shell);
        zsock_destroy(&p->shell);
    }
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    p->file_timer = -1;
    while (p->fileq) { /* their ops were cancelled with the proc */
        sw_fileq_t *q = p->fileq;
        p->fileq = q->next;
        s_fileq_free(q);
    }
    korch_session_destroy(&p->session);
}
