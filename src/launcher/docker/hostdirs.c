/*  The docker launcher: what korch makes on the host for a kernel (its
 *  runtime dir and a given work dir, bounded by tmpfs mounts when korch is
 *  root), given back or removed when the container goes. This work may
 *  block on the disk or the kernel's mount namespace: it runs on the
 *  launcher's worker (korch_backend_host), never on the loop. */
#include "docker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* chown a directory korch made through its fd (never a link by that name);
   its owner before in *before. 0, or -1 with errno. */
int dk_give_dir(const char *dir, uid_t uid, gid_t gid, struct stat *before)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    int r = fstat(fd, &st) == 0 && fchown(fd, uid, gid) == 0 ? 0 : -1;
    int e = errno;
    close(fd);
    if (r == 0 && before)
        *before = st;
    errno = e;
    return r;
}

/* ------------------------------------------------- bounded host dirs */

/* Is dir a mount point (its device differs from its parent's)? */
bool dk_is_mountpoint(const char *dir)
{
    char parent[PATH_MAX + 4];
    struct stat a, b;
    snprintf(parent, sizeof parent, "%s/..", dir);
    return lstat(dir, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* A tmpfs of size bytes on dir, owned by uid:gid: the kernel sees ENOSPC
   when it is full, the host's disk never fills. Root only. */
int dk_mount_tmpfs(const char *dir, int64_t size, uid_t uid, gid_t gid, unsigned mode, bool noexec)
{
    char opt[200];
    snprintf(opt, sizeof opt, "size=%lld,mode=%04o,uid=%u,gid=%u,nr_inodes=%lld", (long long)size, mode,
             (unsigned)uid, (unsigned)gid, (long long)(size / 4096 + 64));
    return mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | (noexec ? MS_NOEXEC : 0), opt);
}

void dk_warn_not_root(void)
{
    static bool said;
    if (!said)
        korch_warn("kernel dirs on the host are not size-bounded: korch is not root, so it cannot mount their "
                   "tmpfs (a kernel can fill the disk under its runtime and work dirs)");
    said = true;
}

/* ------------------------------------------------ the work dir's sync */

#define NOTES_MAX 20 /* files named in warnings per copy; the rest counted */

typedef struct {
    const char *dir;            /* the host work dir, for the warnings */
    const char *what;           /* "into the kernel's work dir" / "back" */
    korch_fs_manifest_t *known; /* copying in: the host files copied (NULL: not kept) */
    size_t noted, skipped;
} s_sync_t;

static void s_on_file(const char *rel, const struct stat *st, const char *why, void *arg)
{
    s_sync_t *sy = arg;
    if (!why) {
        if (sy->known && korch_fs_manifest_add(sy->known, st) != KORCH_OK)
            korch_warn("work dir '%s': out of memory: a deletion of '%s' by the kernel will not reach it", sy->dir,
                       rel);
        return;
    }
    sy->skipped++;
    if (sy->noted++ < NOTES_MAX) {
        korch_warn("work dir '%s': '%s' (%.1f MiB) not copied %s: %s", sy->dir, rel,
                   (double)st->st_size / DK_MIB, sy->what, why);
    }
}

static void s_notes_end(const s_sync_t *sy)
{
    if (sy->skipped > NOTES_MAX)
        korch_warn("work dir '%s': %zu more files not copied %s", sy->dir, sy->skipped - NOTES_MAX, sy->what);
}

static void s_on_removed(const char *rel, void *arg)
{
    korch_debug("work dir '%s': '%s' deleted, as the kernel did", (const char *)arg, rel);
}

/* Cover a host work dir korch made (a session's files/) with a tmpfs of
   workdir_size holding a copy of it, for the life of the container. What
   is copied in is remembered (p->work_known): the kernel's deletions of
   those files reach the host at the end; a file not copied in (too big, a
   link, a special file) is left alone there, with a note now. */
korch_rc_t dk_bound_workdir(docker_proc_t *p, const char *dir, int64_t size, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    int top = -1;
    p->work_under = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->work_under < 0)
        return korch_err_set(err, KORCH_E_IO, "cannot use work dir '%s': %s", dir, strerror(errno));
    if (!(p->work_known = korch_fs_manifest_new()) || dk_mount_tmpfs(dir, size, p->uid, p->gid, 0755, false) != 0) {
        korch_warn("work dir '%s' is not size-bounded: cannot mount a tmpfs on it: %s", dir,
                   p->work_known ? strerror(errno) : "out of memory");
        korch_fs_manifest_destroy(&p->work_known);
        close(p->work_under);
        p->work_under = -1;
        return KORCH_OK;
    }
    snprintf(p->work_host, sizeof p->work_host, "%s", dir);
    top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    korch_fs_opts_t o = {.mode = 0644, .chown = true, .uid = p->uid, .gid = p->gid};
    s_sync_t sy = {.dir = dir, .what = "into the kernel's work dir", .known = p->work_known};
    korch_fs_copy_t c = {.max_bytes = (uint64_t)size, .on_file = s_on_file, .arg = &sy};
    korch_err_t e = {0};
    if (top < 0 || korch_fs_copy_tree(p->work_under, top, &c, &o, NULL, &e) != KORCH_OK)
        rc = korch_err_set(err, e.rc ? e.rc : KORCH_E_IO, "cannot copy work dir '%s' into its %lld MiB tmpfs: %s",
                           dir, (long long)(size / DK_MIB), e.rc ? e.msg : strerror(errno));
    s_notes_end(&sy);
    if (top >= 0)
        close(top);
    return rc;
}

/* The container is gone: bring what the kernel left in the tmpfs home to
   the dir underneath as a bounded sync, then unmount. First the host
   files korch copied in that the kernel deleted are deleted (so a resume
   does not pile up what the kernel threw away), then what is in the tmpfs
   is copied back, at most workdir_size in all: a file that cannot be
   (larger than what is left, sparse beyond it, a link, a special file) is
   skipped with a warning naming it, never the others. */
void dk_unbound_workdir(docker_proc_t *p)
{
    if (!p->work_host[0])
        return;
    int top = open(p->work_host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* what comes back is the asking user's (the owner of the dir it lies
       in, or SUDO_UID: kuid.h), never the kernel's uid */
    char parent[PATH_MAX + 4];
    uid_t ouid;
    gid_t ogid;
    snprintf(parent, sizeof parent, "%s/..", p->work_host);
    korch_kuid_owner(parent, &ouid, &ogid);
    korch_fs_opts_t o = {.mode = 0644, .chown = ouid != geteuid() || ogid != getegid(), .uid = ouid, .gid = ogid};
    korch_err_t e = {0};
    uint64_t copied = 0;
    size_t removed = 0;
    s_sync_t sy = {.dir = p->work_host, .what = "back"};
    korch_fs_copy_t c = {.max_bytes = (uint64_t)p->l->o.workdir_size, .on_file = s_on_file, .arg = &sy};
    if (top >= 0 && p->work_known)
        korch_fs_prune_tree(top, p->work_under, p->work_known, s_on_removed, p->work_host, &removed, NULL);
    if (top < 0 || korch_fs_copy_tree(top, p->work_under, &c, &o, &copied, &e))
        korch_warn("work dir '%s': not everything the kernel left was kept: %s", p->work_host,
                   top < 0 ? strerror(errno) : e.msg);
    s_notes_end(&sy);
    korch_debug("work dir '%s': %llu bytes copied back, %zu files and directories deleted as in the kernel", p->work_host,
                (unsigned long long)copied, removed);
    if (top >= 0)
        close(top);
    if (umount2(p->work_host, MNT_DETACH) != 0)
        korch_warn("cannot unmount the tmpfs on work dir '%s': %s", p->work_host, strerror(errno));
    p->work_host[0] = 0;
    close(p->work_under);
    p->work_under = -1;
    korch_fs_manifest_destroy(&p->work_known);
}

void dk_unbound_runtime(docker_proc_t *p)
{
    if (p->rt_mounted && umount2(p->runtime_dir, MNT_DETACH) != 0)
        korch_warn("cannot unmount the tmpfs on runtime dir '%s': %s", p->runtime_dir, strerror(errno));
    p->rt_mounted = false;
}

/* The engine does not see korch's tmpfs mounts (korch runs in a mount
   namespace of its own, e.g. a privileged container without shared
   propagation): use the dirs underneath, unbounded, as without root. */
korch_rc_t dk_unbound_unseen(docker_proc_t *p, const korch_conn_t *conn, uid_t uid, gid_t gid,
                                   korch_err_t *err)
{
    korch_warn("the docker engine does not see the tmpfs korch mounted on '%s' (korch is in another mount "
               "namespace): the kernel's runtime and work dirs are not size-bounded",
               p->runtime_dir);
    if (p->work_host[0]) { /* nothing ran yet: the dir underneath is as it was */
        if (umount2(p->work_host, MNT_DETACH) != 0)
            korch_warn("cannot unmount the tmpfs on work dir '%s': %s", p->work_host, strerror(errno));
        if (uid != geteuid())
            korch_fs_chown_tree(p->work_host, uid, gid, NULL);
        p->work_host[0] = 0;
        close(p->work_under);
        p->work_under = -1;
    }
    dk_unbound_runtime(p);
    struct stat st;
    if (uid != geteuid()) {
        if (dk_give_dir(p->runtime_dir, uid, gid, &st) != 0)
            return korch_err_set(err, KORCH_E_IO, "cannot give runtime dir '%s' to the kernel: %s", p->runtime_dir,
                                 strerror(errno));
        p->chowned = true;
        p->old_uid = st.st_uid;
        p->old_gid = st.st_gid;
    }
    return korch_conn_save_as(conn, p->conn_file, uid != geteuid(), uid, gid, err);
}

/* What korch made on the host for the kernel, given back or removed. */
void dk_local_cleanup(docker_proc_t *p)
{
    if (p->conn_file[0])
        unlink(p->conn_file);
    /* The kernel removes its sockets when it exits cleanly; not when killed. */
    for (int i = 0; p->ipc_prefix[0] && i < KORCH_CH__COUNT; i++) {
        char sock[PATH_MAX + 16];
        snprintf(sock, sizeof sock, "%s-%d", p->ipc_prefix, p->ports[i]);
        unlink(sock);
    }
    if (p->chowned && dk_give_dir(p->runtime_dir, p->old_uid, p->old_gid, NULL) != 0)
        korch_warn("cannot give runtime dir '%s' back: %s", p->runtime_dir, strerror(errno));
    p->chowned = false;
    dk_unbound_workdir(p);
    dk_unbound_runtime(p);
    korch_kuid_release(&p->kuid); /* the container is gone: nothing runs as that uid */
}
static void s_cleanup_run(void *arg) { dk_local_cleanup(arg); }

/* dk_local_cleanup on the launcher's worker (umount2 waits on the kernel's
   namespace lock: 20 ms seen), then p is freed: nothing on the loop
   touches p meanwhile. */
void dk_cleanup_later(docker_proc_t *p) { korch_backend_host(&p->l->base, s_cleanup_run, free, p); }

/* Is dir directly inside our runtime base (what korch made for a kernel)? */
bool dk_rdir_in_base(const char *dir)
{
    char base[PATH_MAX];
    size_t bl;
    return dir && korch_runtime_base(base, sizeof base, NULL) == KORCH_OK &&
           strncmp(dir, base, (bl = strlen(base))) == 0 && dir[bl] == '/' && dir[bl + 1] &&
           !strchr(dir + bl + 1, '/');
}

/* The in-container ipc prefix "{target}/{base}": base, or NULL when the
   prefix is not directly inside target. */
const char *dk_ipc_base(const char *ip, const char *target)
{
    size_t tl = korch_dir_len(target);
    if (strncmp(ip, target, tl) != 0 || ip[tl] != '/' || !ip[tl + 1] || strchr(ip + tl + 1, '/'))
        return NULL;
    return ip + tl + 1;
}

/* What a removed container of a dead korch leaves on the host: its
   connection file, the sockets that file names, and the runtime dir once
   empty. Only names korch made are unlinked; rmdir does the rest or nothing. */
void dk_cleanup_runtime(const char *dir, const char *target)
{
    char cf[PATH_MAX + 16], sock[PATH_MAX + 32];
    korch_conn_t conn;
    korch_err_t e = {0};
    snprintf(cf, sizeof cf, "%s/%s", dir, DK_CONN_FILE);
    if (korch_conn_load_nofollow(&conn, cf, &e) == KORCH_OK && strcmp(conn.transport, "ipc") == 0) {
        const char *base = dk_ipc_base(conn.ip, target);
        for (int i = 0; base && i < KORCH_CH__COUNT; i++) {
            snprintf(sock, sizeof sock, "%s/%s-%d", dir, base, conn.port[i]);
            unlink(sock);
        }
    }
    unlink(cf);
    if (geteuid() == 0 && dk_is_mountpoint(dir) && umount2(dir, MNT_DETACH) != 0)
        korch_debug("cannot unmount runtime dir '%s': %s", dir, strerror(errno));
    if (rmdir(dir) != 0 && errno != ENOENT)
        korch_debug("runtime dir '%s' kept: %s", dir, strerror(errno));
}
