/*  The seccomp filter of sandbox kernels, compiled by libseccomp into the
 *  BPF program bwrap loads with --seccomp FD (private to src/launcher).
 *
 *  What it refuses (EPERM unless said), at least what Docker's default
 *  profile refuses of the same calls; the rest is allowed:
 *  - io_uring_setup/enter/register, userfaultfd, bpf, perf_event_open;
 *  - keyctl, add_key, request_key; kexec_load, kexec_file_load;
 *    init_module, finit_module, delete_module; acct, swapon, swapoff,
 *    reboot; clock_settime, clock_adjtime, settimeofday;
 *  - the mount family: mount, umount2, pivot_root, fsopen, fsconfig,
 *    fsmount, fspick, move_mount, open_tree, mount_setattr;
 *  - namespaces: setns, unshare, clone with any CLONE_NEW* flag; clone3
 *    fails with ENOSYS (its flags live in memory a filter cannot read, as
 *    Docker does: the C library falls back to clone);
 *  - ptrace, process_vm_readv/writev, kcmp, pidfd_getfd (another process's
 *    memory or fds);
 *  - socket families other than AF_UNIX, AF_INET, AF_INET6 and
 *    AF_NETLINK's NETLINK_ROUTE (the C library's getaddrinfo and
 *    getifaddrs ask it): EAFNOSUPPORT, so AF_VSOCK (not namespaced: it
 *    reaches the VM's host), AF_PACKET, AF_BLUETOOTH ... never open;
 *  - personality with anything but the values Docker allows (0, 8,
 *    0x20000, 0x20008, 0xffffffff: the query);
 *  - old or privileged odds and ends Docker refuses: open_by_handle_at,
 *    name_to_handle_at, lookup_dcookie, quotactl, nfsservctl, vhangup,
 *    iopl, ioperm, syslog, sysfs, _sysctl, uselib, ustat, fanotify_init,
 *    mbind, set_mempolicy, migrate_pages, move_pages, sethostname,
 *    setdomainname.
 *  Any other architecture's calls (the i386 ABI through int 0x80) kill the
 *  process: only the native ABI is allowed.
 *
 *  Thread-safe: no state.
 */
#ifndef KORCH_LAUNCHER_SECCOMP_H
#define KORCH_LAUNCHER_SECCOMP_H

#include <stddef.h>
#include "korch/error.h"

/* The compiled program: a new buffer (*bpf, free it) of *len bytes of
   struct sock_filter, or an error saying what libseccomp refused. */
korch_rc_t korch_seccomp_program(unsigned char **bpf, size_t *len, korch_err_t *err);

#endif
