# The kernel template of korch's fork server (src/launcher/forksrv.h says
# the protocol; docs/fastkernel.md the design and what it costs in safety).
#
# korch runs this as root: python3 -I -c BOOT korch-template NAME CTRL LIFE SRC,
# CTRL the control socket's fd (SOCK_SEQPACKET), LIFE the lifeline's (korch
# holds the write end: EOF = korch is gone), SRC this program's (a memfd).
# It imports what a data kernel needs, and nothing else happens: no ZeroMQ
# context, no thread (OpenBLAS is held to one by korch's environment), no
# file of a kernel's. Then, per request (JSON + fds over fd 3), it forks:
#
#   template (root, the host's namespaces; never runs a kernel's code;
#     |       the subreaper of what it forks: a B whose A is gone is its child)
#     '-> A  (root, host pid ns): joins the kernel's cgroup, unshares a pid
#            namespace, forks B, reports B's pid and ends (B lives on alone)
#           '-> B  (pid 1 of the new namespace): its own mount, net, ipc, uts
#                  and cgroup namespaces, the sandbox's mounts, pivot_root;
#                  drops to the kernel's uid (no caps, no_new_privs), loads
#                  korch's seccomp program; reaps orphans; reports the
#                  kernel's end; ends (and its namespace) when korch does
#                 '-> C  the ipykernel (B's process group: SIGINT reaches it)
#
# A request is one message ("fork") with fds: the status pipe, the log, a
# memfd holding the request's JSON (read after the fork, never here), then
# korch's dirs and the cgroup's files as the JSON's fd_* indexes say.
# A line protocol on the request's status pipe (to korch): "init PID" (B's
# host pid), "ok" (B is confined), "error TEXT", "exit STATUS" (the kernel's
# wait status, as waitpid gives it). Only A and B (our code) ever hold it:
# C closes every fd but its log before it runs anything else.
#
# Before it serves, the template rehearses the first part of a kernel's
# start (ipykernel's command line, an IPython shell, both thrown away): the
# code every kernel runs is then specialised here once, not in each fork,
# and what it caches is shared. No kernel's data is involved.
import os
import sys
import json
import signal
import socket
import struct
import ctypes
import ctypes.util
import select
import errno

CTRL_FD, LIFE_FD = (int(a) for a in sys.argv[3:5])
os.close(int(sys.argv[5]))

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 24, 38, 22
PR_SET_CHILD_SUBREAPER = 36
SECCOMP_MODE_FILTER = 2
SYS_pivot_root, SYS_open_tree, SYS_move_mount = 155, 428, 429  # x86_64
OPEN_TREE_CLONE, AT_EMPTY_PATH, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH, AT_FDCWD = 1, 0x1000, 0x8000, 4, -100

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
libc.syscall.restype = ctypes.c_long


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def _check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: s.encode() if isinstance(s, str) else s
    _check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), "mount %s" % dst)


def prctl(op, a=0, b=None):
    _check(libc.prctl(op, a, b, 0, 0), "prctl %d" % op)


# ---------------------------------------------------------------- the template

def imports(names):
    """What the template loads once for all its kernels (a failed one is
    skipped: a kernelspec without pandas still forks)."""
    import importlib
    done = []
    for n in names:
        try:
            importlib.import_module(n)
            done.append(n)
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            sys.stderr.write("korch-template: cannot import %s: %s\n" % (n, e))
    return done


def threads():
    return len(os.listdir("/proc/self/task"))


def serve():
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # A's (and the Bs we adopt) are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctrl = socket.socket(fileno=CTRL_FD)
    # korch's request names the modules; a ready line says what we hold
    msg = json.loads(ctrl.recv(65536) or b"{}")
    done = imports(msg.get("imports", []))
    if "ipykernel.kernelapp" in done and msg.get("rehearse", True):
        rehearse(msg.get("keep_shell", True))
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # the Bs whose A ended are ours, reaped by SIG_IGN
    import gc
    gc.collect()
    gc.freeze()  # the imports' objects stay out of the children's collections: fewer pages copied
    n = threads()
    if n != 1:
        ctrl.send(json.dumps({"error": "the template has %d threads after its imports (need 1)" % n}).encode())
        return 1
    ctrl.send(json.dumps({"ready": done, "pid": os.getpid()}).encode())
    poll = select.poll()
    poll.register(ctrl.fileno(), select.POLLIN)
    poll.register(LIFE_FD, select.POLLIN)
    while True:
        for fd, ev in poll.poll():
            if fd == LIFE_FD:
                return 0  # korch is gone: so are we
            if not ev & select.POLLIN:
                return 0  # our socket's end (POLLHUP, POLLERR) with nothing left to read
            try:
                data, fds, _, _ = socket.recv_fds(ctrl, 65536, 16)
            except OSError:
                return 1
            if not data:
                return 0  # korch closed our socket (a successor serves): what it sent is forked
            if len(fds) >= 3:
                fork_kernel(fds)
            else:
                for fd in fds:
                    os.close(fd)


# What the template keeps for its forks (keep_shell): an IPython shell made
# here, with no kernel's data, for each fork's kernel to adopt (kernel_shell).
KEPT = None


def rehearse(keep):
    """What every kernel's start runs first, run once here: ipykernel's
    command line parsed, an IPython shell made (its magics, its traitlets).
    The forks then run code already specialised and find the caches full.
    With keep, the shell itself is kept (KEPT) and each fork's kernel adopts
    it instead of making its own: its objects then stay shared pages of the
    template's, not a copy per kernel (about 8 MiB each). Nothing is read
    from a config file (a private empty dir is the ipython dir and the cwd);
    what the shell changed in the process (sys, the environment) is put
    back here and made again in the fork (kernel_shell)."""
    global KEPT
    import atexit
    import shutil
    import tempfile
    import builtins
    env, cwd, names = dict(os.environ), os.getcwd(), set(vars(builtins))
    saved = (sys.stdin, sys.stdout, sys.stderr, sys.displayhook, sys.excepthook, sys.modules.get("__main__"))
    d = tempfile.mkdtemp(prefix="korch-template-")
    argv = ["-f", "/tmp/korch-kernel.json", "--HistoryManager.hist_file=:memory:"]
    try:
        os.chdir(d)
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.zmqshell import ZMQInteractiveShell
        from ipykernel.compiler import XCachingCompiler
        from IPython.core.profiledir import ProfileDir
        app = IPKernelApp.instance()
        try:
            app.parse_command_line(argv)
            cfg = app.config
        finally:
            IPKernelApp.clear_instance()
        prof = ProfileDir.create_profile_dir(os.path.join(d, "profile_default"))
        shell = ZMQInteractiveShell.instance(config=cfg, ipython_dir=d, profile_dir=prof,
                                             compiler_class=XCachingCompiler)
        atexit.unregister(shell.atexit_operations)
        shell.history_manager.db.close()  # no sqlite handle crosses the fork: each kernel makes its own
        if keep:
            KEPT = {"shell": shell, "config": shell_config(cfg), "hooks": (sys.displayhook, sys.excepthook)}
        else:
            ZMQInteractiveShell.clear_instance()
    except Exception as e:  # noqa: BLE001 - only a lost speed-up
        sys.stderr.write("korch-template: the rehearsal of a kernel's start failed: %r\n" % e)
        KEPT = None
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.displayhook, sys.excepthook, main = saved
        if main is not None:
            sys.modules["__main__"] = main
        os.chdir(cwd)
        shutil.rmtree(d, ignore_errors=True)
        os.environ.clear()
        os.environ.update(env)
        if KEPT is None:
            for name in set(vars(builtins)) - names:  # display, __IPYTHON__: each kernel's shell adds its own
                delattr(builtins, name)


# The config sections of ipykernel's application itself (its connection
# file, its exec_lines, its session): they do not make the shell, so a
# kernel whose argv differs only there adopts the template's shell.
APP_SECTIONS = ("IPKernelApp", "InteractiveShellApp", "BaseIPythonApplication", "Application",
                "ConnectionFileMixin", "Session")


def shell_config(cfg):
    return {k: v for k, v in cfg.items() if k not in APP_SECTIONS}


def kernel_shell():
    """In the fork (C), before ipykernel starts: its IPythonKernel gets the
    template's shell (ZMQInteractiveShell.instance returns the singleton)
    when its config is the one the shell was made with; it is then made the
    kernel's (parent, kernel, profile and ipython dirs, history, sys hooks,
    __main__, environment, atexit). A kernel whose config for the shell differs
    (an ipython_kernel_config.py in its profile, a --colors in its argv) gets a
    shell of its own, as before."""
    from ipykernel.zmqshell import ZMQInteractiveShell
    kept = KEPT
    if kept is None:
        ZMQInteractiveShell.clear_instance()
        return
    orig = ZMQInteractiveShell.instance.__func__

    def instance(cls, *args, **kw):
        ZMQInteractiveShell.instance = classmethod(orig)  # once
        parent, shell = kw.get("parent"), kept["shell"]
        if (args or parent is None or kw.get("user_module") is not None or kw.get("user_ns") is not None
                or shell_config(parent.config) != kept["config"]):
            ZMQInteractiveShell.clear_instance()
            return orig(cls, *args, **kw)
        import atexit
        from IPython.utils.path import get_home_dir
        shell.parent = parent
        shell.kernel = kw.get("kernel", parent)
        if kw.get("profile_dir") is not None:
            shell.profile_dir = kw["profile_dir"]
        app = getattr(parent, "parent", None)
        if getattr(app, "ipython_dir", None):
            shell.ipython_dir = app.ipython_dir
        shell.home_dir = get_home_dir()
        shell.user_ns["_dh"] = [os.getcwd()]  # not the template's private dir: the kernel's work dir
        shell.configurables.remove(shell.history_manager)
        shell.init_history()
        shell.init_environment()
        shell.init_sys_modules()
        sys.displayhook, sys.excepthook = kept["hooks"]
        atexit.register(shell.atexit_operations)
        shell.korch_template_shell = True  # for tests/test_fork.c: this kernel's shell is the template's
        return shell
    ZMQInteractiveShell.instance = classmethod(instance)


def fork_kernel(fds):
    """Fork A for one request. The request itself (the kernel's key, its
    environment) is in the memfd fds[2], read by A only: nothing of a kernel
    ever enters the template's memory, which every later fork inherits."""
    try:
        pid = os.fork()
    except OSError as e:
        os.write(fds[0], ("error cannot fork the template: %s\n" % e.strerror).encode())
        pid = -1
    if pid == 0:
        code = 1
        try:
            req = json.loads(os.pread(fds[2], 1 << 20, 0))  # from 0: a request sent again shares the offset
            code = outer(req, fds)
        except BaseException as e:  # noqa: BLE001 - the status pipe tells korch
            try:
                os.write(fds[0], ("error %s\n" % e).encode()[:500])
            except OSError:
                pass
        os._exit(code)
    for fd in fds:
        os.close(fd)


# ---------------------------------------------------------------- A: outside

def outer(req, fds):
    status = fds[0]
    keep = set(fds) | {LIFE_FD}
    for fd in range(3, 1024):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cg = fds[req["fd_cgroup"]:req["fd_cgroup"] + req["cgroups"]]
    me = str(os.getpid()).encode()
    for fd in cg:  # first: all that follows is counted and limited
        os.write(fd, me)
    for fd in cg:
        os.close(fd)
    _check(libc.unshare(CLONE_NEWPID), "unshare")
    b = os.fork()
    if b == 0:
        os._exit(inner(req, fds))
    # B's pid for korch, and A's work is done: B reports the kernel's end and
    # watches the lifeline itself (one process fewer per kernel)
    os.write(status, ("init %d\n" % b).encode())
    return 0


# ---------------------------------------------------------------- B: inside

def inner(req, fds):
    status = fds[0]
    try:
        confine(req, fds)
    except BaseException as e:  # noqa: BLE001
        os.write(status, ("error %s\n" % e).encode()[:500])
        return 1
    log = fds[1]
    os.write(status, b"ok\n")
    os.setsid()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_IGN)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears of it
    signal.set_wakeup_fd(wake_w)
    c = os.fork()
    if c == 0:
        kernel(req, log)  # never returns; closes status, the lifeline and the rest first
    os.close(log)
    poll = select.poll()
    poll.register(wake_r, select.POLLIN)
    poll.register(LIFE_FD, select.POLLIN)
    while True:  # pid 1: reap every orphan; end with the kernel, or with korch
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if pid == 0:
                break
            if pid == c:
                os.write(status, ("exit %d\n" % st).encode())
                return os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
        evs = dict(poll.poll())
        if LIFE_FD in evs:
            return 1  # korch is gone: pid 1's end takes the whole namespace
        try:
            os.read(wake_r, 512)
        except BlockingIOError:
            pass


def confine(req, fds):
    """The bwrap sandbox of sandbox_start.c, made in-process."""
    uid, gid = req["uid"], req["gid"]
    # korch's dirs come as fds of the host's mount namespace: cloned now, a
    # detached tree can be attached in ours (a bind by path could not)
    trees = {}
    for name in ("fd_work", "fd_runtime", "fd_spec"):
        if name in req:
            t = libc.syscall(ctypes.c_long(SYS_open_tree), ctypes.c_int(fds[req[name]]), b"",
                             ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE))
            if t < 0:
                _check(-1, "open_tree")
            trees[name] = t
    def attach(name, dst):
        _check(libc.syscall(ctypes.c_long(SYS_move_mount), ctypes.c_int(trees[name]), b"", ctypes.c_int(AT_FDCWD),
                            dst.encode(), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)), "move_mount %s" % dst)
        os.close(trees[name])
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    socket.sethostname("korch")
    lo_up()
    R = req["scratch"]  # a dir of the host's, hidden by the new root's tmpfs
    mount("tmpfs", R, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    def mkdirs(p, mode=0o755):
        os.makedirs(R + p, mode=mode, exist_ok=True)
    def bind(src, dst, ro=True, rec=True):
        if os.path.isdir(src):
            mkdirs(dst)
        else:
            mkdirs(os.path.dirname(dst))
            open(R + dst, "a").close()
        mount(src, R + dst, None, MS_BIND | (MS_REC if rec else 0))
        if ro:
            mount(None, R + dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    bind("/usr", "/usr")
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), R + top)
        elif os.path.isdir(top):
            bind(top, top)
    for e in req["etc"]:
        if os.path.exists(e):
            bind(e, e)
    for name, text in (("passwd", req["passwd"]), ("group", req["group"]), ("hosts", req["hosts"])):
        mkdirs("/etc")
        with open(R + "/etc/" + name, "w") as f:
            f.write(text)
    mkdirs("/proc")
    mount("proc", R + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for p in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"):
        if os.path.exists(R + p):
            mount(R + p, R + p, None, MS_BIND | MS_REC)
            mount(None, R + p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mkdirs("/dev")
    mount("tmpfs", R + "/dev", "tmpfs", MS_NOSUID, "mode=0755")
    for d in ("null", "zero", "full", "random", "urandom", "tty"):
        bind("/dev/" + d, "/dev/" + d, ro=False, rec=False)
    mkdirs("/dev/shm", 0o1777)
    os.chmod(R + "/dev/shm", 0o1777)
    mkdirs("/dev/pts")
    mount("devpts", R + "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    for link, to in (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                     ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore")):
        os.symlink(to, R + "/dev/" + link)
    mkdirs("/tmp")
    tmp = "mode=1777" + (",size=%d" % req["tmp_size"] if req["tmp_size"] > 0 else "")
    mount("tmpfs", R + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    conn = R + "/tmp/korch-kernel.json"
    cfd = os.open(conn, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.write(cfd, req["conn"].encode())
    os.fchown(cfd, uid, gid)
    os.close(cfd)
    mkdirs("/home")
    mount("tmpfs", R + "/home", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    work, run = req["workdir_mount"], req["runtime_mount"]
    for name, dst in (("fd_work", work), ("fd_runtime", run)):
        mkdirs(dst)
        attach(name, R + dst)
    if "fd_spec" in req:
        mkdirs(req["spec_dir"])
        attach("fd_spec", R + req["spec_dir"])
        mount(None, R + req["spec_dir"], None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    mount(None, R + "/home", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for f in fds[2:req["fd_cgroup"]]:  # korch's dir fds (the cgroup's went in A)
        os.close(f)
    os.chdir(R)
    _check(libc.syscall(ctypes.c_long(SYS_pivot_root), b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # who the kernel is: its own uid, no capability left anywhere
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        prctl(PR_CAPBSET_DROP, cap)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    os.chdir(work)
    bpf = bytes.fromhex(req["seccomp"]) if req.get("seccomp") else b""
    if bpf:
        n = len(bpf) // 8
        buf = (SockFilter * n).from_buffer_copy(bpf)
        prog = SockFprog(n, ctypes.cast(buf, ctypes.POINTER(SockFilter)))
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.cast(ctypes.pointer(prog), ctypes.c_void_p))


def lo_up():
    import fcntl
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1 | 0x40))  # SIOCSIFFLAGS: UP, RUNNING
    finally:
        s.close()


# ---------------------------------------------------------------- C: the kernel

def kernel(req, log):
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 65536)  # B's status pipe and lifeline among them
        # as a kernel exec'd under its uid is (setresuid left it undumpable):
        # its own /proc/self files are its own; B, pid 1, stays undumpable
        prctl(PR_SET_DUMPABLE, 1)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        for kv in req["env"]:
            k, _, v = kv.partition("=")
            os.environ[k] = v
        reseed()
        sys.argv = list(req["argv"])
        if sys.path and sys.path[0] in ("", os.getcwd()):
            del sys.path[0]
        kernel_shell()
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - its traceback goes to korch's log
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def reseed():
    """Every fork starts from the template's random state: draw a new one."""
    import random
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        ssl.RAND_add(os.urandom(32), 32.0)


if __name__ == "__main__":
    sys.exit(serve())
