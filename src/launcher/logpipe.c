/*  A kernel's output through a pipe into a bounded ring (logpipe.h). */
#include "logpipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct korch_logpipe {
    int fd;                 /* the read end, O_NONBLOCK; -1 at EOF */
    korch_loop_t *loop;     /* while watched */
    char *ring;             /* max bytes */
    size_t max;
    size_t head;            /* where the next byte goes */
    uint64_t total;         /* bytes read in all */
};

korch_logpipe_t *korch_logpipe_new(size_t max, int *write_fd, korch_err_t *err)
{
    int p[2];
    korch_logpipe_t *lp = calloc(1, sizeof *lp);
    char *ring = max ? malloc(max) : NULL;
    if (!lp || !ring) {
        free(lp);
        free(ring);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    if (pipe2(p, O_CLOEXEC) != 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) != 0) {
        korch_err_set(err, KORCH_E_LAUNCH, "cannot make the kernel's log pipe: %s", strerror(errno));
        free(lp);
        free(ring);
        return NULL;
    }
    lp->fd = p[0];
    lp->ring = ring;
    lp->max = max;
    *write_fd = p[1];
    return lp;
}

static void s_add(korch_logpipe_t *lp, const char *b, size_t n)
{
    lp->total += n;
    if (n >= lp->max) { /* only its end fits */
        memcpy(lp->ring, b + n - lp->max, lp->max);
        lp->head = 0;
        return;
    }
    size_t first = lp->max - lp->head < n ? lp->max - lp->head : n;
    memcpy(lp->ring + lp->head, b, first);
    memcpy(lp->ring, b + first, n - first);
    lp->head = (lp->head + n) % lp->max;
}

static void s_unwatch(korch_logpipe_t *lp)
{
    if (lp->loop && lp->fd >= 0)
        korch_loop_poller_end(lp->loop, lp->fd);
    lp->loop = NULL;
}

void korch_logpipe_drain(korch_logpipe_t *lp)
{
    char b[65536];
    for (int i = 0; lp && lp->fd >= 0 && i < 64; i++) { /* at most 4 MiB per turn: never starve the loop */
        ssize_t n = read(lp->fd, b, sizeof b);
        if (n > 0) {
            s_add(lp, b, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || errno != EAGAIN) { /* the kernel and every copy of its end are gone */
            s_unwatch(lp);
            close(lp->fd);
            lp->fd = -1;
        }
        break;
    }
}

static int s_on_read(korch_loop_t *loop, int fd, void *arg)
{
    korch_logpipe_drain(arg);
    return 0;
}

void korch_logpipe_watch(korch_logpipe_t *lp, korch_loop_t *loop)
{
    if (!lp || lp->loop || lp->fd < 0)
        return;
    if (korch_loop_poller(loop, lp->fd, s_on_read, lp) == 0)
        lp->loop = loop;
}

void korch_logpipe_tail(const korch_logpipe_t *lp, char *buf, size_t len)
{
    buf[0] = 0;
    if (!lp || len < 2)
        return;
    size_t have = lp->total < lp->max ? (size_t)lp->total : lp->max;
    size_t n = have < len - 1 ? have : len - 1;
    /* the n bytes before head, oldest first */
    size_t start = (lp->head + lp->max - n) % lp->max;
    size_t first = lp->max - start < n ? lp->max - start : n;
    memcpy(buf, lp->ring + start, first);
    memcpy(buf + first, lp->ring, n - first);
    buf[n] = 0;
}

uint64_t korch_logpipe_total(const korch_logpipe_t *lp) { return lp ? lp->total : 0; }

uint64_t korch_logpipe_dropped(const korch_logpipe_t *lp)
{
    return lp && lp->total > lp->max ? lp->total - lp->max : 0;
}

void korch_logpipe_destroy(korch_logpipe_t **plp)
{
    if (!plp || !*plp)
        return;
    korch_logpipe_t *lp = *plp;
    s_unwatch(lp);
    if (lp->fd >= 0)
        close(lp->fd);
    free(lp->ring);
    free(lp);
    *plp = NULL;
}
