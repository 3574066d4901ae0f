/*  Kernels forked from a kernel template (the sandbox launcher's fork
 *  option, src/launcher/sandbox_fork.c, docs/fastkernel.md), with real
 *  ipykernel, numpy, pandas and matplotlib: two forked kernels share no
 *  state (variables, files, /tmp, namespaces, uids, keys, random numbers,
 *  the IPython shell each adopts from the template: its history, its In);
 *  a kernel cannot reach the template it came from (pids, fds, memory,
 *  signals); a template made ahead (korch_launcher_warm) is the one used;
 *  a template killed is made again and its kernels live on; a template is
 *  made again after N forks (a new layout), its old kernels living on.
 *  (The isolation bar itself runs on forked kernels as fork:isolation_*
 *  in test_isolation.c.)
 */
#include "kernel_fixture.h"
#include "korch/sandbox.h"

#include <openssl/evp.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static korch_launcher_t *s_fork_launcher(void)
{
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.fork = true;
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_sandbox_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

static const char *s_out(korch_kernel_t *k, const char *code)
{
    korch_exec_opts_t eo = {.timeout_ms = 60000};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(k, code, &eo, NULL, &err);
    if (!CHECK(ex)) {
        fprintf(stderr, "  execute: %s\n", err.msg);
        return "";
    }
    if (!CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK))
        fprintf(stderr, "  detail: %s\n  outputs: %s\n", korch_exec_result(ex)->detail,
                json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
}

static korch_kernel_t *s_kernel(korch_loop_t *loop, korch_launcher_t *l, int64_t *ms)
{
    korch_err_t err = {0};
    int64_t t0 = korch_now_ms();
    korch_kernel_t *k = korch_kernel_new(loop, &(korch_kernel_opts_t){.launcher = l}, &err);
    if (k && korch_kernel_wait_ready(k, &err) != KORCH_OK)
        korch_kernel_destroy(&k);
    if (!CHECK(k))
        fprintf(stderr, "  forked kernel: %s\n", err.msg);
    if (ms)
        *ms = korch_now_ms() - t0;
    return k;
}

/* The templates: the test's children whose argv says korch-template; the
   pid of one (0 = none), how many in *count. */
static pid_t s_template_pids(int *count)
{
    pid_t found = 0;
    *count = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], buf[4096];
        pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
        if (pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        int ppid = 0;
        if (f) {
            if (fscanf(f, "%*d %*s %*c %d", &ppid) != 1)
                ppid = 0;
            fclose(f);
        }
        if (ppid != getpid())
            continue;
        if (korch_test_cmdline(pid, buf, sizeof buf) && strstr(buf, "korch-template")) {
            found = pid;
            (*count)++;
        }
    }
    if (d)
        closedir(d);
    return found;
}

static pid_t s_template_pid(void)
{
    int n;
    return s_template_pids(&n);
}

/* What a kernel tells of itself: namespaces, uid, its key, random draws,
   what the template imported, its matplotlib backend. */
static const char s_probe[] =
    "import os, sys, random, uuid, tempfile, socket\n"
    "print('imported', all(m in sys.modules for m in ('numpy', 'pandas', 'matplotlib.pyplot')))\n"
    "import numpy as np, json, matplotlib\n"
    "print('ns', ' '.join(os.readlink('/proc/self/ns/' + n) for n in ('pid', 'mnt', 'net', 'ipc', 'uts', 'cgroup')))\n"
    "print('uid', os.getuid())\n"
    "print('key', json.load(open('/tmp/korch-kernel.json'))['key'])\n"
    "print('rand', random.random(), np.random.rand(), os.urandom(8).hex(), uuid.uuid4(), "
    "os.path.basename(tempfile.mktemp()))\n"
    "print('backend', matplotlib.get_backend())\n"
    "print('host', socket.gethostname(), 'pid', os.getpid())\n";

/* sha256 of s in hex into out (65 bytes). */
static void s_sha256(const char *s, char *out)
{
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* A kernel scans its whole memory (which began as the template's) for
   64-hex-digit strings and says whether one hashes to want or to mine:
   only the hashes are in the code, so the search plants no key itself. */
static const char s_memscan[] =
    "import re, hashlib\n"
    "found = set()\n"
    "for line in open('/proc/self/maps'):\n"
    "    f = line.split()\n"
    "    lo, hi = (int(x, 16) for x in f[0].split('-'))\n"
    "    if 'r' not in f[1] or (len(f) > 5 and f[5] in ('[vvar]', '[vsyscall]')): continue\n"
    "    try:\n"
    "        with open('/proc/self/mem', 'rb', 0) as m:\n"
    "            m.seek(lo); data = m.read(hi - lo)\n"
    "    except (OSError, ValueError, OverflowError): continue\n"
    "    found.update(hashlib.sha256(k).hexdigest() for k in re.findall(rb'[0-9a-f]{64}', data))\n"
    "print('mem', '%s' in found, '%s' in found)\n";

static const char *s_field(const char *out, const char *name, char *buf, size_t len)
{
    char tag[64];
    snprintf(tag, sizeof tag, "%s ", name);
    const char *at = strstr(out, tag);
    buf[0] = 0;
    if (at) {
        at += strlen(tag);
        snprintf(buf, len, "%.*s", (int)strcspn(at, "\n"), at);
    }
    return buf;
}

TEST_T(fork_kernels_share_no_state, 120)
{
    korch_launcher_t *l = s_fork_launcher();
    if (!l)
        return;
    korch_loop_t *loop = fx_loop();
    int64_t first_ms = 0, warm_ms = 0;
    korch_kernel_t *a = s_kernel(loop, l, &first_ms); /* the template is made for this one */
    korch_kernel_t *b = a ? s_kernel(loop, l, &warm_ms) : NULL;
    printf("  first forked kernel ready in %lld ms (template included), the next in %lld ms\n",
           (long long)first_ms, (long long)warm_ms);
    if (!a || !b)
        goto out;
    char va[8][400], vb[8][400];
    const char *oa = s_out(a, s_probe), *ob = s_out(b, s_probe);
    static const char *const names[] = {"imported", "ns", "uid", "key", "rand", "backend", "host"};
    for (int i = 0; i < 7; i++) {
        s_field(oa, names[i], va[i], sizeof va[i]);
        s_field(ob, names[i], vb[i], sizeof vb[i]);
    }
    CHECK_STREQ(va[0], "True"); /* the data stack is there before the first import */
    CHECK_STREQ(vb[0], "True");
    CHECK_STREQ(va[5], "module://matplotlib_inline.backend_inline");
    CHECK_STREQ(va[6], "korch pid 2");
    /* every namespace its own, and its own uid and key */
    char *sa = va[1], *sb = vb[1], *ta, *tb;
    int nns = 0;
    for (char *x = strtok_r(sa, " ", &ta), *y = strtok_r(sb, " ", &tb); x && y;
         x = strtok_r(NULL, " ", &ta), y = strtok_r(NULL, " ", &tb), nns++)
        CHECK_STRNE(x, y);
    CHECK_EQ(nns, 6);
    CHECK_STRNE(va[2], vb[2]);
    CHECK_STREQ(va[3], korch_kernel_conn(a)->key);
    CHECK_STREQ(vb[3], korch_kernel_conn(b)->key);
    CHECK_STRNE(va[3], vb[3]);
    /* random draws: none of the five the same (the template's state was re-seeded) */
    char *ra = va[4], *rb = vb[4];
    int nr = 0;
    for (char *x = strtok_r(ra, " ", &ta), *y = strtok_r(rb, " ", &tb); x && y;
         x = strtok_r(NULL, " ", &ta), y = strtok_r(NULL, " ", &tb), nr++)
        CHECK_STRNE(x, y);
    CHECK_EQ(nr, 5);
    /* nothing of a's in b's memory: not its key (the template never held it) */
    char ha[65], hb[65], scan[2048];
    s_sha256(korch_kernel_conn(a)->key, ha);
    s_sha256(korch_kernel_conn(b)->key, hb);
    snprintf(scan, sizeof scan, s_memscan, ha, hb);
    CHECK_CONTAINS(s_out(b, scan), "mem False True\n"); /* its own key is there: the scan works */
    /* what one kernel leaves, the other does not see */
    s_out(a, "secret_var = 41\n"
             "open('/tmp/a-was-here', 'w').write('a')\n"
             "open('a-work-file', 'w').write('a')\n"
             "import subprocess; child = subprocess.Popen(['sleep', '30'])\n"
             "os.environ['A_ENV'] = '1'\n");
    const char *seen = s_out(b, "import os\n"
                                "print('var', 'secret_var' in globals())\n"
                                "print('tmp', os.path.exists('/tmp/a-was-here'), 'korch-kernel.json' in os.listdir('/tmp'))\n"
                                "print('work', os.listdir('.'))\n"
                                "print('env', 'A_ENV' in os.environ)\n"
                                "ip = get_ipython()\n"
                                "print('shell', getattr(ip, 'korch_template_shell', False), ip.kernel is not None,\n"
                                "      any('secret_var' in c for c in In), ip.history_manager.hist_file, _dh == [os.getcwd()])\n"
                                "print('sleep', [p for p in os.listdir('/proc') if p.isdigit() and "
                                "b'sleep' in open('/proc/%s/cmdline' % p, 'rb').read()])\n");
    CHECK_CONTAINS(seen, "var False\n");
    CHECK_CONTAINS(seen, "tmp False True\n"); /* its own /tmp, with its own connection file */
    CHECK_CONTAINS(seen, "work []\n");
    CHECK_CONTAINS(seen, "env False\n");
    /* its IPython shell is the template's, made its own: a's cells are not in its history */
    CHECK_CONTAINS(seen, "shell True True False :memory: True\n");
    CHECK_CONTAINS(seen, "sleep []\n");
    /* and a chart comes back as a notebook's would */
    korch_exec_opts_t eo = {.timeout_ms = 60000};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(
        b, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()", &eo, NULL, &err);
    if (CHECK(ex)) {
        char *outs = json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT);
        CHECK_CONTAINS(outs, "\"image/png\"");
        free(outs);
        korch_exec_destroy(&ex);
    }
out:
    korch_kernel_destroy(&b);
    korch_kernel_destroy(&a);
    korch_launcher_destroy(&l);
}

/* The template is the test's child; the kernel runs code aimed at it. */
TEST_T(fork_kernel_cannot_reach_template, 120)
{
    korch_launcher_t *l = s_fork_launcher();
    /* made ahead (korch serve warms its default kernelspec), then used by the kernel */
    korch_err_t err = {0};
    korch_kernelspec_t *spec = korch_kernelspec_find("python3", &err);
    CHECK_EQ(l && spec ? korch_launcher_warm(l, spec, &err) : KORCH_E_STATE, KORCH_OK);
    korch_kernelspec_destroy(&spec);
    pid_t warmed = s_template_pid();
    CHECK_GT(warmed, 0);
    korch_kernel_t *k = l ? s_kernel(fx_loop(), l, NULL) : NULL;
    pid_t tpl = s_template_pid();
    if (!k || !CHECK_GT(tpl, 0))
        goto out;
    CHECK_EQ(tpl, warmed);
    /* the template's fds, namespaces, as the host sees them */
    char path[300], link[300], fds[8192] = "", ns[600] = "";
    size_t n = 0;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)tpl);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p2[600];
        snprintf(p2, sizeof p2, "%s/%s", path, e->d_name);
        ssize_t r = readlink(p2, link, sizeof link - 1);
        if (r > 0 && e->d_name[0] != '.' && n + (size_t)r + 8 < sizeof fds) {
            link[r] = 0;
            n += (size_t)snprintf(fds + n, sizeof fds - n, "'%s',", link);
        }
    }
    if (d)
        closedir(d);
    for (const char *const *t = (const char *const[]){"pid", "mnt", "net", NULL}; *t; t++) {
        snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)tpl, *t);
        ssize_t r = readlink(path, link, sizeof link - 1);
        link[r > 0 ? r : 0] = 0;
        snprintf(ns + strlen(ns), sizeof ns - strlen(ns), "'%s',", link);
    }
    char code[16384];
    snprintf(code, sizeof code,
             "import os, ctypes, errno, signal\n"
             "tfds = {%s}\n"
             "mine = set()\n"
             "for f in os.listdir('/proc/self/fd'):\n"
             "    try: mine.add(os.readlink('/proc/self/fd/' + f))\n"
             "    except OSError: pass\n"
             "print('shared fds', sorted(x for x in mine & tfds if not x.startswith('/dev/')))\n"
             "print('own pipes', any(x.startswith('pipe:') or x.startswith('socket:') for x in mine))\n"
             "print('ns', sorted({os.readlink('/proc/self/ns/' + t) for t in ('pid', 'mnt', 'net')} & {%s}))\n"
             "try:\n    os.kill(%d, 0); print('signal template reached')\n"
             "except OSError as e: print('signal template', errno.errorcode[e.errno])\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "r = libc.ptrace(16, 1, 0, 0)\n"  /* PTRACE_ATTACH to pid 1 (the fork's own init) */
             "print('ptrace', r, errno.errorcode.get(ctypes.get_errno()))\n"
             "try:\n    open('/proc/1/mem', 'rb').read(1); print('mem read')\n"
             "except OSError as e: print('mem', errno.errorcode[e.errno])\n"
             "os.kill(1, signal.SIGKILL)\n"
             "print('procs', sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[:3])\n",
             fds, ns, (int)tpl);
    const char *out = s_out(k, code);
    CHECK_CONTAINS(out, "shared fds []\n");
    CHECK_CONTAINS(out, "own pipes True\n"); /* positive control: its own fds are there to compare */
    CHECK_CONTAINS(out, "ns []\n");
    CHECK_CONTAINS(out, "signal template ESRCH\n");
    CHECK_CONTAINS(out, "ptrace -1 EPERM\n");
    CHECK(strstr(out, "mem EACCES\n") || strstr(out, "mem EPERM\n"));
    CHECK_CONTAINS(out, "procs [1, 2");
    /* pid 1 shrugged SIGKILL off; the kernel and the template live */
    CHECK_CONTAINS(s_out(k, "print('alive')"), "alive\n");
    CHECK_EQ(kill(tpl, 0), 0);
out:
    korch_kernel_destroy(&k);
    korch_launcher_destroy(&l);
}

TEST_T(fork_dead_template_is_made_again, 120)
{
    korch_launcher_t *l = s_fork_launcher();
    korch_loop_t *loop = fx_loop();
    korch_kernel_t *a = l ? s_kernel(loop, l, NULL) : NULL, *b = NULL;
    pid_t tpl = s_template_pid();
    if (!a || !CHECK_GT(tpl, 0))
        goto out;
    s_out(a, "kept = 'before'");
    CHECK_EQ(kill(tpl, SIGKILL), 0);
    for (int i = 0; i < 100 && s_template_pid() == tpl; i++)
        korch_loop_run(loop, NULL, NULL, 20); /* the launcher sees it go */
    b = s_kernel(loop, l, NULL);
    pid_t again = s_template_pid();
    CHECK_GT(again, 0);
    CHECK_NE(again, tpl);
    if (b)
        CHECK_CONTAINS(s_out(b, "import sys; print('pandas' in sys.modules)"), "True\n");
    /* the kernel of the dead template lives on */
    CHECK_CONTAINS(s_out(a, "print(kept)"), "before\n");
    CHECK(!korch_proc_exited(korch_kernel_proc(a)));
out:
    korch_kernel_destroy(&b);
    korch_kernel_destroy(&a);
    korch_launcher_destroy(&l);
}

/* Rotation (KORCH_FORK_ROTATE=2): the second fork makes the template due; a
   successor imports while it serves, then serves alone (the old one ends
   once it has forked what it was sent). Kernels of one template share its
   layout and hash seed; a kernel of the next has others; the old kernels
   live on with their state. */
TEST_T(fork_template_made_again_after_n_forks, 180)
{
    setenv("KORCH_FORK_ROTATE", "2", 1);
    korch_launcher_t *l = s_fork_launcher();
    korch_loop_t *loop = fx_loop();
    korch_kernel_t *a = l ? s_kernel(loop, l, NULL) : NULL, *b = NULL, *c = NULL;
    unsetenv("KORCH_FORK_ROTATE"); /* read when the template was made */
    char *la = NULL, *lb = NULL, *lc = NULL;
    pid_t tpl = s_template_pid(), now = tpl; /* the only one yet: b's fork makes it due */
    b = a ? s_kernel(loop, l, NULL) : NULL;
    if (!a || !b || !CHECK_GT(tpl, 0))
        goto out;
    s_out(a, "kept = 'a'");
    int n = 0;
    for (int i = 0; i < 6000 && ((now = s_template_pids(&n)) == tpl || n != 1 || kill(tpl, 0) == 0); i++)
        korch_loop_run(loop, NULL, NULL, 20); /* the successor's imports, then the old one's end (reaped) */
    CHECK_NE(now, tpl);
    CHECK_EQ(n, 1);
    CHECK_NE(kill(tpl, 0), 0); /* the old template has gone, and korch reaped it */
    c = s_kernel(loop, l, NULL);
    if (!c)
        goto out;
    const char *layout = "import sys\n"
                         "libc = [m.split()[0] for m in open('/proc/self/maps') if 'libc.so' in m][0]\n"
                         "print(hash('korch'), hex(id(sys)), libc)\n";
    la = strdup(s_out(a, layout));
    lb = strdup(s_out(b, layout));
    lc = strdup(s_out(c, layout));
    CHECK_STREQ(la, lb); /* one template, one layout and hash seed: what rotation bounds */
    char ha[64] = "", hc[64] = "";
    sscanf(la, "%63s", ha);
    sscanf(lc, "%63s", hc);
    CHECK_STRNE(ha, hc); /* a new interpreter, a new hash seed */
    FILE *f = fopen("/proc/sys/kernel/randomize_va_space", "r");
    int aslr = 0;
    if (f) {
        if (fscanf(f, "%d", &aslr) != 1)
            aslr = 0;
        fclose(f);
    }
    if (aslr) /* with ASLR the new template's libraries and heap are elsewhere */
        CHECK_STRNE(strchr(la, ' '), strchr(lc, ' '));
    CHECK_CONTAINS(s_out(c, "import sys; print('pandas' in sys.modules)"), "True\n");
    CHECK_CONTAINS(s_out(a, "print(kept)"), "a\n"); /* the old template's kernels live on */
    CHECK(!korch_proc_exited(korch_kernel_proc(b)));
out:
    free(la);
    free(lb);
    free(lc);
    korch_kernel_destroy(&c);
    korch_kernel_destroy(&b);
    korch_kernel_destroy(&a);
    korch_launcher_destroy(&l);
}
