/*  What code in an isolated kernel cannot do, tried from inside a real
 *  kernel with the default hardening of the docker launcher (NAME) and of
 *  the sandbox launcher (sandbox:NAME, bubblewrap + a cgroup): reach any
 *  network, write the root filesystem, see the host's files, processes or
 *  other kernels' keys, be root, or take the machine down with a fork bomb.
 *  Each probe has a positive control where one makes sense (the host
 *  listener is reachable from the host; /tmp and the work dir are
 *  writable), so a pass means isolation and not a broken probe.
 */
#include "kernel_fixture.h"
#include "korch/docker.h"
#include "korch/docker_api.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* Registered three times: NAME runs against docker, sandbox:NAME against
   the sandbox, fork:NAME against the sandbox's kernels forked from a
   template (KORCH_FORK=1, docs/fastkernel.md). */
#define TEST_ISO(name, timeout_s)                                                           \
    static void test_##name(void);                                                           \
    static void test_fork_##name(void)                                                       \
    {                                                                                        \
        setenv("KORCH_TEST_LAUNCHER", "sandbox", 1);                                         \
        setenv("KORCH_FORK", "1", 1);                                                        \
        test_##name();                                                                       \
    }                                                                                        \
    __attribute__((constructor)) static void test_register_##name(void)                      \
    {                                                                                        \
        korch_test_register(#name, __FILE__, test_##name, timeout_s);                        \
        korch_test_register_sandbox(#name, __FILE__, test_##name, timeout_s);                \
        korch_test_register("fork:" #name, __FILE__, test_fork_##name, timeout_s);          \
    }                                                                                        \
    static void test_##name(void)

/* The launcher under test, with its defaults. */
static korch_launcher_t *s_docker(void)
{
    korch_err_t err = {0};
    korch_launcher_t *l = fx_sandbox() ? korch_launcher_sandbox_new(fx_loop(), NULL, &err) : korch_launcher_docker_new(fx_loop(), NULL, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

/* Run code, return its stdout (leaked: short-lived child); status into *st. */
static const char *s_run(fx_t *f, const char *code, korch_exec_status_t want)
{
    korch_exec_t *ex = fx_run(f, code, 60000);
    if (!CHECK_EQ(korch_exec_result(ex)->status, want))
        fprintf(stderr, "  detail: %s\n  stdout: %s\n  outputs: %s\n", korch_exec_result(ex)->detail,
                fx_stream(ex, "stdout"), json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
}

/* The docker bridge's gateway (the host as containers on the default
   network see it), else the usual 172.17.0.1. */
static void s_gateway(char *buf, size_t len)
{
    snprintf(buf, len, "172.17.0.1");
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    korch_docker_reply_t r;
    if (d && korch_docker_request(d, "GET", "/networks/bridge", NULL, &r, &err) == KORCH_OK) {
        json_t *cfg = json_array_get(json_object_get(json_object_get(r.json, "IPAM"), "Config"), 0);
        const char *gw = json_string_value(json_object_get(cfg, "Gateway"));
        if (gw)
            snprintf(buf, len, "%s", gw);
        korch_docker_reply_clear(&r);
    }
    korch_docker_destroy(&d);
}

static bool s_host_can_connect(const char *ip, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

TEST_ISO(isolation_network, 90)
{
    /* A listener on every host address: what the kernel must not reach. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof sa;
    if (!CHECK_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0) || !CHECK_EQ(listen(lfd, 16), 0) ||
        !CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0))
        return;
    int port = ntohs(sa.sin_port);
    char gw[64];
    s_gateway(gw, sizeof gw);
    /* Positive controls: from the host both addresses answer. */
    CHECK(s_host_can_connect("127.0.0.1", port));
    CHECK(s_host_can_connect(gw, port));

    korch_launcher_t *l = s_docker();
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    char code[2048];
    snprintf(code, sizeof code,
             "import socket, errno, os\n"
             "def tcp(host, port):\n"
             "    try:\n"
             "        socket.create_connection((host, port), timeout=3).close(); return 'connected'\n"
             "    except socket.timeout: return 'timeout'\n"
             "    except OSError as e: return errno.errorcode.get(e.errno, repr(e))\n"
             "def udp(host):\n"
             "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "    try: s.sendto(b'x', (host, 53)); return 'sent'\n"
             "    except OSError as e: return errno.errorcode.get(e.errno, repr(e))\n"
             "    finally: s.close()\n"
             "def dns(name):\n"
             "    try: socket.getaddrinfo(name, 80); return 'resolved'\n"
             "    except OSError as e: return type(e).__name__\n"
             "print('lo', tcp('127.0.0.1', %d))\n"
             "print('gateway', tcp('%s', %d))\n"
             "print('public', tcp('1.1.1.1', 443), tcp('8.8.8.8', 53))\n"
             "print('udp', udp('8.8.8.8'), udp('%s'))\n"
             "print('dns', dns('example.com'))\n"
             "print('ifaces', sorted(n for _, n in socket.if_nameindex()))\n",
             port, gw, port, gw);
    const char *out = s_run(&f, code, KORCH_EXEC_OK);
    /* The container's own loopback: nothing listens there, the host's is not it. */
    CHECK_CONTAINS(out, "lo ECONNREFUSED\n");
    CHECK_CONTAINS(out, "gateway ENETUNREACH\n");
    CHECK_CONTAINS(out, "public ENETUNREACH ENETUNREACH\n");
    CHECK_CONTAINS(out, "udp ENETUNREACH ENETUNREACH\n");
    CHECK_CONTAINS(out, "dns gaierror\n");
    CHECK_CONTAINS(out, "ifaces ['lo']\n");
    CHECK(!strstr(out, "connected") && !strstr(out, "sent") && !strstr(out, "resolved"));
    fx_stop(&f);
    korch_launcher_destroy(&l);
    close(lfd);
}

TEST_ISO(isolation_filesystem_and_user, 90)
{
    /* Host-only markers: files the kernel must not see. */
    char m1[128], m2[128], m3[128], secret[64];
    snprintf(m1, sizeof m1, "/root/korch-marker-%d", (int)getpid());
    snprintf(m2, sizeof m2, "/tmp/korch-marker-%d", (int)getpid());
    snprintf(m3, sizeof m3, "/var/tmp/korch-marker-%d", (int)getpid()); /* a dir the image has, world-readable */
    snprintf(secret, sizeof secret, "host-secret-%d-%ld", (int)getpid(), (long)time(NULL));
    FILE *fp = fopen(m1, "w");
    bool have_root_marker = fp != NULL; /* /root may not be writable when not run as root */
    if (fp) {
        fputs(secret, fp);
        fclose(fp);
    }
    for (int i = 0; i < 2; i++) {
        fp = fopen(i ? m3 : m2, "w");
        if (CHECK(fp)) {
            fputs(secret, fp);
            fclose(fp);
        }
    }
    korch_launcher_t *l = s_docker();
    fx_t f;
    if (!l || !fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
        korch_launcher_destroy(&l);
        unlink(m1);
        unlink(m2);
        unlink(m3);
        return;
    }
    char code[4096];
    snprintf(code, sizeof code,
             "import os, errno\n"
             "def w(path):\n"
             "    try:\n"
             "        with open(path, 'w') as f: f.write('x')\n"
             "        return 'written'\n"
             "    except OSError as e: return errno.errorcode.get(e.errno, repr(e))\n"
             "def r(path):\n"
             "    try:\n"
             "        with open(path) as f: return 'read:' + f.read(100)\n"
             "    except OSError as e: return errno.errorcode.get(e.errno, repr(e))\n"
             "print('root-fs', w('/korch-probe'), w('/etc/korch-probe'), w('/usr/bin/korch-probe'))\n"
             "print('home', w('/home/korch/korch-probe'))\n"
             "print('writable', w('/tmp/korch-probe'), w('korch-probe'))\n"
             "print('markers', r('%s'), r('%s'), r('%s'))\n"
             "print('shadow', r('/etc/shadow'))\n"
             "print('docker.sock', os.path.exists('/var/run/docker.sock'), os.path.exists('/run/docker.sock'))\n"
             "print('host dirs', [d for d in ('/work/shared', '/home/cloudsdk', '/root/.pyenv', '/etc/docker', '/var/lib/docker')\n"
             "                    if os.path.exists(d)])\n"
             "print('env', sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'SECRET' in k))\n"
             "print('dir fds', [f for f in os.listdir('/proc/self/fd') if os.path.isdir('/proc/self/fd/' + f)])\n"
             "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
             "cmds = ' '.join(open('/proc/%%s/cmdline' %% p, 'rb').read().decode(errors='replace') for p in pids)\n"
             "print('procs', len(pids) < 20, 'dockerd' in cmds, 'containerd' in cmds)\n"
             "print('secret', '%s' in cmds)\n"
             "u = os.getuid(); print('uid', u >= 2000000000, os.geteuid() == u, os.getgid() == u, os.getegid() == u)\n"
             "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
             "print('caps', st['CapEff'], st['CapPrm'], st['CapBnd'], 'nnp', st['NoNewPrivs'])\n"
             "try:\n    os.setuid(0); print('setuid ok')\n"
             "except OSError as e: print('setuid', errno.errorcode[e.errno])\n"
             "print('mounts', [l.split()[1] + ':' + l.split()[3].split(',')[0] for l in open('/proc/mounts')\n"
             "                 if l.split()[1] in ('/', '/tmp', '/home/korch/work', '/run/korch')])\n",
             m1, m2, m3, secret);
    const char *out = s_run(&f, code, KORCH_EXEC_OK);
    /* Read-only root: EROFS where the uid could write, EACCES/EROFS elsewhere. */
    CHECK(strstr(out, "root-fs EROFS EROFS EROFS\n") || strstr(out, "root-fs EACCES EACCES EACCES\n") ||
          strstr(out, "root-fs EROFS EACCES EACCES\n") || strstr(out, "root-fs EACCES EROFS EROFS\n"));
    CHECK_CONTAINS(out, "home EROFS\n"); /* only read-only stops a write to /home/korch */
    CHECK_CONTAINS(out, "writable written written\n");
    /* /root is the image's, mode 0700: EACCES, or ENOENT were it readable. */
    CHECK(strstr(out, "markers EACCES ENOENT ENOENT\n") || strstr(out, "markers ENOENT ENOENT ENOENT\n"));
    CHECK(!strstr(out, secret));
    /* The image's shadow is unreadable; the sandbox has none at all. */
    CHECK_CONTAINS(out, fx_sandbox() ? "shadow ENOENT\n" : "shadow EACCES\n");
    CHECK_CONTAINS(out, "docker.sock False False\n");
    CHECK_CONTAINS(out, "host dirs []\n");
    CHECK_CONTAINS(out, "env []\n");
    /* no directory fd of the host's leaked in (openat(fd, "..") would walk out) */
    CHECK_CONTAINS(out, "dir fds []\n");
    CHECK_CONTAINS(out, "procs True False False\n");
    CHECK_CONTAINS(out, "secret False\n");
    CHECK_CONTAINS(out, "uid True True True True\n"); /* one no account has (src/launcher/kuid.h) */
    CHECK_CONTAINS(out, "caps 0000000000000000 0000000000000000 0000000000000000 nnp 1\n");
    /* In the sandbox's user namespace uid 0 is not even mapped. */
    CHECK(strstr(out, "setuid EPERM\n") || (fx_sandbox() && strstr(out, "setuid EINVAL\n")));
    CHECK_CONTAINS(out, "'/:ro'");
    CHECK_CONTAINS(out, "'/tmp:rw'");
    CHECK_CONTAINS(out, "'/home/korch/work:rw'");
    CHECK_CONTAINS(out, "'/run/korch:rw'");
    (void)have_root_marker;
    fx_stop(&f);
    korch_launcher_destroy(&l);
    unlink(m1);
    unlink(m2);
    unlink(m3);
}

/* A fork bomb (bounded: 2000 forks, in a child that catches errors) hits
   the pids limit; the execution reports it, korch and the kernel stay
   healthy, the pids are given back, and a next execution and a next kernel
   work. */
TEST_ISO(isolation_fork_bomb_contained, 120)
{
    korch_launcher_t *l = s_docker();
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    s_run(&f, "kept = 'state'", KORCH_EXEC_OK);
    korch_exec_t *ex = fx_run(&f,
                              "import os, time, signal, errno\n"
                              "r, w = os.pipe()\n"
                              "pid = os.fork()\n"
                              "if pid == 0:\n"
                              "    os.close(r); os.setpgid(0, 0)\n"
                              "    n, err = 0, 'none'\n"
                              "    try:\n"
                              "        for i in range(2000):\n"
                              "            if os.fork() == 0:\n"
                              "                time.sleep(60); os._exit(0)\n"
                              "            n += 1\n"
                              "    except OSError as e:\n"
                              "        err = errno.errorcode.get(e.errno, str(e.errno))\n"
                              "    os.write(w, ('%d %s' % (n, err)).encode()); os.close(w)\n"
                              "    time.sleep(60); os._exit(0)\n"
                              "os.close(w)\n"
                              "msg = os.read(r, 100).decode(); os.close(r)\n"
                              "os.killpg(pid, signal.SIGKILL); os.waitpid(pid, 0)\n"
                              "n, err = msg.split()\n"
                              "print('forks', n, err)\n"
                              "raise RuntimeError('fork bomb contained after %s forks (%s)' % (n, err))\n",
                              60000);
    const korch_exec_result_t *res = korch_exec_result(ex);
    printf("  fork bomb execution took %lld ms\n", (long long)res->elapsed_ms);
    CHECK_EQ(res->status, KORCH_EXEC_ERROR);
    const char *ename = json_string_value(json_object_get(res->reply, "ename"));
    const char *evalue = json_string_value(json_object_get(res->reply, "evalue"));
    CHECK_STREQ(ename, "RuntimeError");
    CHECK_CONTAINS(evalue, "fork bomb contained after ");
    CHECK_CONTAINS(evalue, "(EAGAIN)");
    long forks = 0;
    const char *p = evalue ? strstr(evalue, "after ") : NULL;
    if (p)
        forks = strtol(p + 6, NULL, 10);
    CHECK_GT(forks, 100);   /* it did fork ... */
    CHECK_LT(forks, 256);   /* ... until the pids limit (256 tasks, the kernel's threads included) */
    printf("  fork bomb stopped after %ld forks\n", forks);
    korch_exec_destroy(&ex);
    CHECK_EQ(korch_kernel_state(f.k), KORCH_KERNEL_IDLE);
    CHECK_EQ(korch_kernel_restarts(f.k), 0);
    /* The pids are back once the bomb's group is killed and reaped by docker-init. */
    const char *out = s_run(&f,
                            "import time\n"
                            "for _ in range(50):\n"
                            "    n = len([p for p in os.listdir('/proc') if p.isdigit()])\n"
                            "    if n < 20: break\n"
                            "    time.sleep(0.1)\n"
                            "print('procs', n < 20, kept)\n"
                            "import subprocess\n"
                            "print(subprocess.run(['echo', 'child ok'], capture_output=True, text=True).stdout)",
                            KORCH_EXEC_OK);
    CHECK_CONTAINS(out, "procs True state\n");
    CHECK_CONTAINS(out, "child ok\n");
    fx_stop(&f);
    /* And a next kernel starts. */
    if (fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
        CHECK_STREQ(s_run(&f, "print('next')", KORCH_EXEC_OK), "next\n");
        fx_stop(&f);
    }
    korch_launcher_destroy(&l);
}

/* A copy of s reversed (leaked: short-lived child). */
static const char *s_reversed(const char *s)
{
    size_t n = strlen(s);
    char *r = malloc(n + 1);
    for (size_t i = 0; r && i < n; i++)
        r[i] = s[n - 1 - i];
    if (r)
        r[n] = 0;
    return r;
}

/* Another kernel of the same launcher, running beside: its key (the HMAC
   key that lets anyone who has it run code there) and its runtime dir are
   nowhere this kernel can look. The positive control: the same scan finds
   this kernel's own key in its own connection file. */
TEST_ISO(isolation_other_kernels_invisible, 120)
{
    korch_launcher_t *l = s_docker();
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    korch_err_t err = {0};
    korch_kernel_t *b = korch_kernel_new(f.loop, &(korch_kernel_opts_t){.launcher = l}, &err);
    if (!CHECK(b) || !CHECK_EQ(korch_kernel_wait_ready(b, &err), KORCH_OK)) {
        fprintf(stderr, "  second kernel: %s\n", err.msg);
        korch_kernel_destroy(&b);
        fx_stop(&f);
        korch_launcher_destroy(&l);
        return;
    }
    char b_dir[PATH_MAX], base[PATH_MAX];
    snprintf(b_dir, sizeof b_dir, "%s", korch_kernel_conn(b)->ip);
    if (strrchr(b_dir, '/'))
        *strrchr(b_dir, '/') = 0;
    snprintf(base, sizeof base, "%s", b_dir);
    if (strrchr(base, '/'))
        *strrchr(base, '/') = 0;
    char code[16384];
    snprintf(code, sizeof code,
             "import os\n"
             "def scan(path, key):\n"
             "    try:\n"
             "        with open(path, 'rb') as f: return key.encode() in f.read(1 << 20)\n"
             "    except OSError: return False\n"
             "def find(key):\n"
             "    hits = []\n"
             "    for top in ('/run', '/tmp', '/home', '/var', '/etc', '/root', '/mnt', '/opt', '/srv'):\n"
             "        for root, dirs, files in os.walk(top):\n"
             "            hits += [os.path.join(root, n) for n in files if scan(os.path.join(root, n), key)]\n"
             "    for p in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
             "        hits += ['/proc/%%s/%%s' %% (p, n) for n in ('cmdline', 'environ') if scan('/proc/%%s/%%s' %% (p, n), key)]\n"
             "    return hits\n"
             /* reversed: the code itself lands in IPython's history, the key must not */
             "print('other', find('%s'[::-1]))\n"
             "print('own', len(find('%s'[::-1])) > 0)\n"
             "print('dirs', os.path.exists('%s'), os.path.exists('%s'))\n",
             s_reversed(korch_kernel_conn(b)->key), s_reversed(korch_kernel_conn(f.k)->key), b_dir, base);
    const char *out = s_run(&f, code, KORCH_EXEC_OK);
    CHECK_CONTAINS(out, "other []\n");
    CHECK_CONTAINS(out, "own True\n");
    CHECK_CONTAINS(out, "dirs False False\n");
    korch_kernel_destroy(&b);
    fx_stop(&f);
    korch_launcher_destroy(&l);
}
