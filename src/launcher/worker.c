/*  The launcher's worker: host work that may block (a host directory's
 *  put_file_now / get_file_now, and the backends' mounts, unmounts, copies,
 *  removals) on a thread of its own, an actor: a queue in, the results out
 *  on a pipe the loop polls, started on first use, stopped at
 *  korch_launcher_destroy. One at a time, in order: an upload is mapped
 *  only while it is placed, and host work on one directory happens in the
 *  order it was asked for (an unmount before the next mount, a removal
 *  after both). It knows no op and no proc: launcher.c's file ops are
 *  work like any other (backend.h).
 */
#include "hostdir.h"
#include "backend.h"
#include "korch/fsutil.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct s_work s_work_t;
struct s_work {
    s_work_t *next;                 /* the worker's queue */
    void (*run)(void *arg);         /* on the worker */
    void (*done)(void *arg);        /* ... and its end, on the loop (may be NULL) */
    void *arg;
};

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_work_t *head, *tail;          /* waiting for the worker */
    bool stop;
    int out;                        /* the pipe's write end */
} s_worker_t;

static void *s_worker_main(void *arg)
{
    s_worker_t *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->head && !k->stop)
            pthread_cond_wait(&k->cv, &k->mu);
        s_work_t *w = k->head;
        if (!w)
            break; /* stopping, and nothing left */
        k->head = w->next;
        if (!k->head)
            k->tail = NULL;
        pthread_mutex_unlock(&k->mu);
        w->run(w->arg);
        /* a pointer is less than PIPE_BUF: written whole; the loop drains
           the pipe, or korch_launcher_destroy after joining us */
        ssize_t n;
        while ((n = write(k->out, &w, sizeof w)) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* The work is back: its done on the loop. */
static int s_on_work(korch_loop_t *loop, int fd, void *arg)
{
    korch_launcher_t *l = arg;
    s_work_t *w;
    while (read(fd, &w, sizeof w) == (ssize_t)sizeof w) {
        l->works--;
        void (*done)(void *) = w->done;
        void *warg = w->arg;
        free(w);
        if (done)
            done(warg);
    }
    return 0;
}

/* The worker, started on first use. */
static korch_rc_t s_worker(korch_launcher_t *l, korch_err_t *err)
{
    if (l->worker)
        return KORCH_OK;
    s_worker_t *k = calloc(1, sizeof *k);
    if (!k)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    if (pipe2(l->work_fd, O_CLOEXEC) != 0) {
        free(k);
        l->work_fd[0] = l->work_fd[1] = -1;
        return korch_err_set(err, KORCH_E_IO, "cannot make the file worker's pipe: %s", strerror(errno));
    }
    fcntl(l->work_fd[0], F_SETFL, O_NONBLOCK);
    k->out = l->work_fd[1];
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    /* korch's signals are for its main thread, never the worker */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&k->thread, NULL, s_worker_main, k);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0 || korch_loop_poller(l->loop, l->work_fd[0], s_on_work, l) != 0) {
        if (e == 0) {
            k->stop = true;
            pthread_join(k->thread, NULL);
        }
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        close(l->work_fd[0]);
        close(l->work_fd[1]);
        l->work_fd[0] = l->work_fd[1] = -1;
        free(k);
        return korch_err_set(err, KORCH_E_IO, "cannot start the file worker: %s", e ? strerror(e) : "out of memory");
    }
    l->worker = k;
    return KORCH_OK;
}

korch_rc_t korch_backend_host_queue(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg,
                                    korch_err_t *err)
{
    korch_rc_t rc = s_worker(l, err);
    if (rc)
        return rc;
    s_work_t *w = calloc(1, sizeof *w);
    if (!w)
        return korch_err_set(err, KORCH_E_NOMEM, "cannot queue the file op: %s", strerror(errno));
    *w = (s_work_t){.run = run, .done = done, .arg = arg};
    s_worker_t *k = l->worker;
    l->works++;
    pthread_mutex_lock(&k->mu);
    if (k->tail)
        k->tail->next = w;
    else
        k->head = w;
    k->tail = w;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return KORCH_OK;
}

korch_rc_t korch_launcher_host_work(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg,
                                    korch_err_t *err)
{
    return korch_backend_host_queue(l, run, done, arg, err);
}

void korch_backend_host(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg)
{
    korch_err_t err = {0};
    if (korch_backend_host_queue(l, run, done, arg, &err) != KORCH_OK) {
        /* no thread to wait on: now, on the loop */
        korch_warn("host work runs on the loop: %s", err.rc ? err.msg : "out of memory");
        run(arg);
        if (done)
            done(arg);
    }
}

/* A kernel's runtime dir may be a launcher's tmpfs (the sandbox's): off
   first, then whatever is left underneath. */
static void s_rm_dir_run(void *arg)
{
    if (korch_hostdir_unmount(arg) != 0)
        korch_warn("cannot unmount the tmpfs on runtime dir '%s': %s", (const char *)arg, strerror(errno));
    korch_fs_rm_tree(arg);
}

void korch_launcher_remove_dir(korch_launcher_t *l, const char *dir)
{
    if (!dir || !*dir)
        return;
    char *copy = strdup(dir);
    if (!copy) {
        korch_fs_rm_tree(dir);
        return;
    }
    korch_backend_host(l, s_rm_dir_run, free, copy);
}

/* Let the worker finish its queue, join it, and take in what it sent back.
   What those ends queue (a cancelled start's cleanup) gets a worker again,
   finished the same way. */
void korch_backend_host_finish(korch_launcher_t *l)
{
    while (l->worker) {
        s_worker_t *k = l->worker;
        pthread_mutex_lock(&k->mu);
        k->stop = true;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
        pthread_join(k->thread, NULL);
        int in = l->work_fd[0], out = l->work_fd[1];
        l->worker = NULL;
        l->work_fd[0] = l->work_fd[1] = -1;
        korch_loop_poller_end(l->loop, in);
        s_on_work(l->loop, in, l);
        close(in);
        close(out);
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        free(k);
    }
}
