/*  Packages in a kernel (korch/packages.h): the sources korch allows, the
 *  bootstrap a Python kernel starts through, the forwarder per kernel. */
#include "backend.h"
#include "pkgfwd.h"
#include "korch/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct korch_pkgs {
    char *wheelhouse;   /* host dir, or NULL */
    char *index_url;    /* or NULL */
    char *index_host;   /* the index's host, for pip's trusted-host (http) */
    char *hosts;        /* the forwarder's allow-list */
    char *about;        /* what is allowed, for the kernel's messages */
};

/* The kernel's bootstrap (python3 -c BOOT MODULE ARGS...): first, outside
   a venv, make .korch-env (the system's packages visible, no pip of its
   own: pip comes from the system's) and exec its python with the same
   arguments (sys.orig_argv); inside it, relay pip's proxy on the kernel's
   own 127.0.0.1 to korch's forwarder socket in the runtime dir (found
   beside the ipc sockets of the connection file), then run the kernel's
   module as python3 -m would (the %pip guard below comes in its argv).
   What fails here is said on stderr and the kernel starts anyway. */
static const char s_boot[] =
    "import os, sys\n"
    "def _korch_boot():\n"
    "    if sys.prefix == sys.base_prefix:\n"
    "        env = os.path.join(os.getcwd(), '" KORCH_PACKAGES_ENV "')\n"
    "        py = os.path.join(env, 'bin', 'python')\n"
    "        try:\n"
    "            if not os.access(py, os.X_OK):\n"
    "                import venv\n"
    "                venv.create(env, system_site_packages=True, with_pip=False, symlinks=True)\n"
    "            os.execv(py, [py] + sys.orig_argv[1:])\n"
    "        except Exception as e:\n"
    "            print('korch: packages: no environment of its own in %s: %s' % (env, e), file=sys.stderr)\n"
    "    args = sys.argv[1:]\n"
    "    if os.environ.get('KORCH_PKG_PROXY') and '-f' in args[:-1]:\n"
    "        try:\n"
    "            import json, socket, threading\n"
    "            with open(args[args.index('-f') + 1]) as f:\n"
    "                c = json.load(f)\n"
    "            path = os.path.join(os.path.dirname(c['ip']), '" KORCH_PKGFWD_SOCK "')\n"
    "            ls = socket.socket()\n"
    "            ls.bind(('127.0.0.1', 0))\n"
    "            ls.listen(16)\n"
    "            def pipe(a, b):\n"
    "                try:\n"
    "                    while True:\n"
    "                        d = a.recv(65536)\n"
    "                        if not d:\n"
    "                            break\n"
    "                        b.sendall(d)\n"
    "                except OSError:\n"
    "                    pass\n"
    "                try:\n"
    "                    b.shutdown(socket.SHUT_WR)\n"
    "                except OSError:\n"
    "                    pass\n"
    "            def serve(k):\n"
    "                u = socket.socket(socket.AF_UNIX)\n"
    "                try:\n"
    "                    u.connect(path)\n"
    "                    t = threading.Thread(target=pipe, args=(u, k), daemon=True)\n"
    "                    t.start()\n"
    "                    pipe(k, u)\n"
    "                    t.join()\n"
    "                except OSError:\n"
    "                    pass\n"
    "                k.close()\n"
    "                u.close()\n"
    "            def accept():\n"
    "                while True:\n"
    "                    threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start()\n"
    "            threading.Thread(target=accept, daemon=True, name='korch-packages').start()\n"
    "            p = 'http://127.0.0.1:%d' % ls.getsockname()[1]\n"
    "            for k in ('PIP_PROXY', 'http_proxy', 'https_proxy', 'HTTP_PROXY', 'HTTPS_PROXY'):\n"
    "                os.environ[k] = p\n"
    "            for k in ('no_proxy', 'NO_PROXY'):\n"
    "                os.environ.pop(k, None)\n"
    "        except Exception as e:\n"
    "            print('korch: packages: no way to the package index: %s' % e, file=sys.stderr)\n"
    "    import runpy\n"
    "    sys.argv = args\n"
    "    runpy.run_module(args[0], run_name='__main__', alter_sys=True)\n"
    "_korch_boot()\n";

/* The %pip guard, given to every Python kernel that has package sources
   or no network (IPython's exec_lines, run in the user namespace once the
   shell exists, before the first request): the same argument whether the
   kernel starts through the bootstrap, as it is, or forked from a template
   (sandbox_fork.c passes the kernelspec's argv on), so %pip behaves the
   same in all three. Without a source an install is refused before pip
   runs (the message, NONE, says what is allowed and who can change it);
   with one, a pip that fails fails its cell. IPython's %pip does not raise:
   the error's one-line traceback is the message (_render_traceback_). */
static const char s_guard[] =
    "def _korch_pip(none):\n"
    "    import os\n"
    "    ip = get_ipython()\n"
    "    orig = ip.find_line_magic('pip')\n"
    "    if orig is None or getattr(orig, 'korch', False):\n"
    "        return\n"
    "    class PackageError(RuntimeError):\n"
    "        def _render_traceback_(self):\n"
    "            return ['PackageError: %s' % self]\n"
    "    src = os.environ.get('KORCH_PACKAGES')\n"
    "    def pip(line=''):\n"
    "        words = [w for w in line.split() if not w.startswith('-')]\n"
    "        if not src and words[:1] in (['install'], ['download'], ['wheel']):\n"
    "            raise PackageError(none)\n"
    "        ip.user_ns['_exit_code'] = 0\n"
    "        r = orig(line)\n"
    "        code = ip.user_ns.get('_exit_code', 0)\n"
    "        if code:\n"
    "            raise PackageError('pip failed (exit status %s): ' % code +\n"
    "                               ('packages come from %s only; the operator of korch sets them (--wheelhouse, '\n"
    "                                '--package-index, --package-hosts)' % src if src else none))\n"
    "        return r\n"
    "    pip.korch = True\n"
    "    pip.__doc__ = orig.__doc__\n"
    "    ip.register_magic_function(pip, 'line', 'pip')\n";

/* What a kernel without a source is told (no quote or backslash: it goes
   into the guard as a Python literal). */
static const char s_none_here[] =
    "no package source: korch was started without --wheelhouse or --package-index, and this kernel has no "
    "network, so nothing can be installed; ask the operator of korch to give one (or an --image that has the "
    "package)";
static const char s_none_ever[] =
    "no package source: the %s launcher gives its kernels none (they have no network, and korch serves "
    "packages only to kernels whose runtime dir is on its host); ask the operator of korch for an --image "
    "that has the package, or for the sandbox or docker launcher with --wheelhouse or --package-index";

/* "--IPKernelApp.exec_lines=GUARD" for l's kernels (new), or NULL. */
static char *s_guard_arg(const korch_launcher_t *l)
{
    char none[600];
    if (l->caps & KORCH_LAUNCHER_PACKAGES)
        snprintf(none, sizeof none, "%s", s_none_here);
    else
        snprintf(none, sizeof none, s_none_ever, l->ops->name);
    char *out = NULL;
    if (asprintf(&out, "--IPKernelApp.exec_lines=%s_korch_pip('%s')\ndel _korch_pip\n", s_guard, none) < 0)
        return NULL;
    return out;
}

/* ------------------------------------------------------------ settings */

static void s_pkgs_free(struct korch_pkgs *p)
{
    if (!p)
        return;
    free(p->wheelhouse);
    free(p->index_url);
    free(p->index_host);
    free(p->hosts);
    free(p->about);
    free(p);
}

void korch_pkgs_free(korch_launcher_t *l)
{
    s_pkgs_free(l->pkgs);
    l->pkgs = NULL;
}

/* The host of an http(s) URL (new), or NULL. */
static char *s_url_host(const char *url, int *port)
{
    size_t skip = strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
    if (!skip)
        return NULL;
    const char *h = url + skip, *e = h;
    while (*e && *e != '/' && *e != '?' && *e != '#')
        e++;
    if (memchr(h, '@', (size_t)(e - h)))
        return NULL; /* no userinfo */
    const char *colon = h < e && *h != '[' ? memchr(h, ':', (size_t)(e - h)) : NULL;
    *port = skip == 7 ? 80 : 443;
    if (colon)
        *port = (int)strtol(colon + 1, NULL, 10);
    size_t n = (size_t)((colon ? colon : e) - h);
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)h[i]) || strchr(".-_[]:", h[i])))
            return NULL;
    return n && *port > 0 && *port < 65536 ? strndup(h, n) : NULL;
}

korch_rc_t korch_launcher_set_packages(korch_launcher_t *l, const korch_packages_t *o, korch_err_t *err)
{
    if (!o || (!o->wheelhouse && !o->index_url)) {
        if (o && o->hosts)
            return korch_err_set(err, KORCH_E_INVALID, "--package-hosts needs --package-index");
        korch_pkgs_free(l);
        return KORCH_OK;
    }
    if (!(l->caps & KORCH_LAUNCHER_PACKAGES))
        return korch_err_set(err, KORCH_E_INVALID,
                             "the %s launcher cannot give its kernels packages (--wheelhouse, --package-index): "
                             "korch serves them through the kernel's runtime dir on this host; use sandbox or docker",
                             l->ops->name);
    struct korch_pkgs *p = calloc(1, sizeof *p);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = KORCH_OK;
    char about[1200];
    size_t at = 0;
    if (o->wheelhouse) {
        struct stat st;
        p->wheelhouse = realpath(o->wheelhouse, NULL);
        if (!p->wheelhouse || stat(p->wheelhouse, &st) != 0 || !S_ISDIR(st.st_mode)) {
            rc = korch_err_set(err, KORCH_E_INVALID, "--wheelhouse '%s': %s", o->wheelhouse,
                               p->wheelhouse ? "not a directory" : strerror(errno));
            goto out;
        }
        at += (size_t)snprintf(about, sizeof about, "the wheelhouse %s",
                               (l->caps & KORCH_LAUNCHER_CONFINED) ? KORCH_PACKAGES_WHEELHOUSE : p->wheelhouse);
    }
    if (o->index_url) {
        int port = 0;
        if (strlen(o->index_url) > 500 || !(p->index_host = s_url_host(o->index_url, &port))) {
            rc = korch_err_set(err, KORCH_E_INVALID, "--package-index '%.500s': give an http:// or https:// URL "
                               "of a simple index, e.g. https://pypi.org/simple", o->index_url);
            goto out;
        }
        char hp[300];
        snprintf(hp, sizeof hp, "%s:%d", p->index_host, port); /* by default that port only */
        p->index_url = strdup(o->index_url);
        p->hosts = strdup(o->hosts ? o->hosts : hp);
        if (!p->index_url || !p->hosts || strlen(p->hosts) > 500) {
            rc = korch_err_set(err, KORCH_E_INVALID, "--package-hosts: at most 500 characters");
            goto out;
        }
        if (!korch_pkgfwd_allowed(p->hosts, p->index_host, port))
            korch_warn("--package-hosts '%s' does not name the index's host '%s': pip will be refused",
                       p->hosts, p->index_host);
        if (at < sizeof about)
            at += (size_t)snprintf(about + at, sizeof about - at, "%s%s (through korch, to %s)", at ? " and " : "",
                                   p->index_url, p->hosts);
    }
    if (!(p->about = strdup(about)))
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
out:
    if (rc) {
        s_pkgs_free(p);
        return rc;
    }
    korch_pkgs_free(l);
    l->pkgs = p;
    return KORCH_OK;
}

const char *korch_pkgs_wheelhouse(const korch_launcher_t *l) { return l->pkgs ? l->pkgs->wheelhouse : NULL; }

/* ------------------------------------------------------------ a start */

/* Does the kernel start as python -m ipykernel(_launcher) ...? */
static bool s_ipykernel(const korch_kernelspec_t *spec)
{
    char **a = spec->argv;
    if (!a || !a[0] || !a[1] || !a[2] || strcmp(a[1], "-m") != 0)
        return false;
    const char *base = strrchr(a[0], '/') ? strrchr(a[0], '/') + 1 : a[0];
    return strncmp(base, "python", 6) == 0 &&
           (strcmp(a[2], "ipykernel_launcher") == 0 || strcmp(a[2], "ipykernel") == 0);
}

static char *s_kv(const char *name, const char *val)
{
    size_t n = strlen(name) + strlen(val) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", name, val);
    return s;
}

bool korch_pkgs_request(const korch_launcher_t *l, const korch_launch_t *in, korch_pkgs_req_t *out)
{
    memset(out, 0, sizeof *out);
    out->req = *in;
    const struct korch_pkgs *p = l->pkgs;
    /* a Python kernel with sources, or offline without any: the guard (and
       with sources the bootstrap); any other kernel starts as it is */
    if (!s_ipykernel(in->spec) || (!p && !(l->caps & KORCH_LAUNCHER_OFFLINE)))
        return true;
    out->spec = *in->spec;
    size_t n = 0, ne = 0, k = 0;
    while (in->spec->argv[n])
        n++;
    for (const char *const *e = in->env; e && *e; e++)
        ne++;
    out->argv = calloc(n + 3, sizeof *out->argv);
    out->env = calloc(ne + 12, sizeof *out->env);
    if (!out->argv || !out->env)
        goto fail;
    if (p) { /* argv[0] -c BOOT MODULE rest...: the bootstrap runs MODULE as -m did */
        const char *head[] = {in->spec->argv[0], "-c", s_boot};
        for (size_t i = 0; i < 3; i++)
            if (!(out->argv[k++] = strdup(head[i])))
                goto fail;
        for (size_t i = 2; i < n; i++)
            if (!(out->argv[k++] = strdup(in->spec->argv[i])))
                goto fail;
    } else {
        for (size_t i = 0; i < n; i++)
            if (!(out->argv[k++] = strdup(in->spec->argv[i])))
                goto fail;
    }
    if (!(out->argv[k] = s_guard_arg(l)))
        goto fail;
    k = 0;
    for (size_t i = 0; i < ne; i++)
        if (!(out->env[k++] = strdup(in->env[i])))
            goto fail;
    if (p) {
        const char *wh = p->wheelhouse && (l->caps & KORCH_LAUNCHER_CONFINED) ? KORCH_PACKAGES_WHEELHOUSE : p->wheelhouse;
        bool ok = (out->env[k++] = s_kv("KORCH_PACKAGES", p->about)) &&
                  (out->env[k++] = s_kv("PIP_DISABLE_PIP_VERSION_CHECK", "1")) &&
                  (out->env[k++] = s_kv("PIP_ROOT_USER_ACTION", "ignore")) &&
                  (out->env[k++] = s_kv("PIP_NO_INPUT", "1"));
        if (ok && wh)
            ok = (out->env[k++] = s_kv("PIP_FIND_LINKS", wh)) != NULL;
        if (ok && !p->index_url)
            ok = (out->env[k++] = s_kv("PIP_NO_INDEX", "1")) != NULL;
        if (ok && p->index_url)
            ok = (out->env[k++] = s_kv("PIP_INDEX_URL", p->index_url)) &&
                 (out->env[k++] = s_kv("KORCH_PKG_PROXY", "1")) &&
                 (strncmp(p->index_url, "http://", 7) != 0 ||
                  (out->env[k++] = s_kv("PIP_TRUSTED_HOST", p->index_host)));
        if (!ok)
            goto fail;
    }
    out->spec.argv = out->argv;
    out->req.spec = &out->spec;
    out->req.env = (const char *const *)out->env;
    return true;
fail:
    korch_pkgs_request_clear(out);
    return false;
}

void korch_pkgs_request_clear(korch_pkgs_req_t *r)
{
    for (char **a = r->argv; a && *a; a++)
        free(*a);
    for (char **e = r->env; e && *e; e++)
        free(*e);
    free(r->argv);
    free(r->env);
    r->argv = r->env = NULL;
}

void korch_pkgs_started(korch_proc_t *proc)
{
    const struct korch_pkgs *p = proc->launcher->pkgs;
    if (!p || !p->index_url || proc->pkgfwd || !proc->runtime_dir[0])
        return;
    korch_err_t err = {0};
    if (!(proc->pkgfwd = korch_pkgfwd_new(proc->runtime_dir, p->hosts, 0, &err)))
        korch_warn("packages: the kernel cannot reach %s: %s", p->index_url, err.msg);
}

void korch_pkgs_proc_end(korch_proc_t *proc) { korch_pkgfwd_destroy(&proc->pkgfwd); }
