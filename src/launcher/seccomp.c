/*  The sandbox kernels' seccomp filter (seccomp.h). Docker's default
 *  profile (moby profiles/seccomp/default.json) is an allow-list; this is a
 *  deny-list of the same calls and argument checks, so a call Docker's
 *  list lacks but a kernel needs keeps working here, and the calls below
 *  fail as they do in a container without capabilities.
 */
#include "seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#define S_AF_LAST 45        /* AF_MAX - 1 in Linux 6.x (AF_MCTP); anything above is refused too */
#define S_PERSONA_OK 0x20008UL /* UNAME26 | PER_LINUX32: the bits Docker's profile lets through */

/* Refused with EPERM, whatever the arguments. */
static const char *const s_deny[] = {
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "acct", "swapon", "swapoff", "reboot", "clock_settime", "clock_adjtime", "settimeofday",
    "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "setns", "unshare", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_getfd", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "nfsservctl",
    "vhangup", "iopl", "ioperm", "syslog", "sysfs", "_sysctl", "uselib", "ustat", "fanotify_init", "mbind",
    "set_mempolicy", "migrate_pages", "move_pages", "sethostname", "setdomainname", NULL,
};

static const unsigned long s_clone_new[] = {
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

static int s_rules(scmp_filter_ctx c, const char **what)
{
    int r = 0;
    for (int i = 0; !r && s_deny[i]; i++) {
        int nr = seccomp_syscall_resolve_name(s_deny[i]);
        *what = s_deny[i];
        if (nr == __NR_SCMP_ERROR)
            continue; /* not a call of this architecture (_sysctl, nfsservctl on newer ones) */
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EPERM), nr, 0);
    }
    *what = "clone";
    for (size_t i = 0; !r && i < sizeof s_clone_new / sizeof s_clone_new[0]; i++)
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, s_clone_new[i], s_clone_new[i]));
    *what = "clone3";
    if (!r)
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    /* socket(family, ...): one comparison per rule (libseccomp's rule), so
       every family but the four kept gets its own. */
    *what = "socket";
    for (int af = 0; !r && af <= S_AF_LAST; af++)
        if (af != AF_UNIX && af != AF_INET && af != AF_INET6 && af != AF_NETLINK)
            r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, af));
    if (!r)
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_GT, S_AF_LAST));
    if (!r) /* AF_NETLINK: NETLINK_ROUTE (0) only */
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                             SCMP_A2(SCMP_CMP_NE, 0));
    /* personality: any bit outside the two Docker allows (so the query
       0xffffffff too: one comparison per argument cannot spare it) */
    *what = "personality";
    for (int bit = 0; !r && bit < 32; bit++)
        if (!(S_PERSONA_OK & (1UL << bit)))
            r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, 1UL << bit, 1UL << bit));
    if (!r)
        r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                             SCMP_A0(SCMP_CMP_GT, 0xffffffffUL));
    return r;
}

korch_rc_t korch_seccomp_program(unsigned char **bpf, size_t *len, korch_err_t *err)
{
    *bpf = NULL;
    *len = 0;
    korch_rc_t rc = KORCH_OK;
    const char *what = "the filter";
    int fd = -1;
    /* Default: allow. Another architecture's calls (int 0x80 from a 64-bit
       process): killed, libseccomp's bad-arch action. */
    scmp_filter_ctx c = seccomp_init(SCMP_ACT_ALLOW);
    if (!c)
        return korch_err_set(err, KORCH_E_NOMEM, "cannot make the sandbox's seccomp filter: out of memory");
    int r = s_rules(c, &what);
    if (!r && (fd = memfd_create("korch-seccomp", MFD_CLOEXEC)) < 0)
        r = -errno;
    if (!r)
        r = seccomp_export_bpf(c, fd);
    off_t size = r ? -1 : lseek(fd, 0, SEEK_END);
    if (r || size <= 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot make the sandbox's seccomp filter (at '%s'): %s", what,
                           strerror(r ? -r : EIO));
        goto out;
    }
    if (!(*bpf = malloc((size_t)size))) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    if (pread(fd, *bpf, (size_t)size, 0) != size) {
        free(*bpf);
        *bpf = NULL;
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot read the sandbox's seccomp filter back: %s", strerror(errno));
        goto out;
    }
    *len = (size_t)size;
out:
    if (fd >= 0)
        close(fd);
    seccomp_release(c);
    return rc;
}
