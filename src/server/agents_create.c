#include "agents_int.h"
#include "audit.h"
#include "quota.h"
#include "korch/users.h"
#include "korch/agent.h"
#include "korch/launcher.h"
#include "korch/llm.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include "korch/session.h"
#include "korch/workdir.h"
#include "korch/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------- create */

/* files: [{name, content, format: text|base64}] -> [{name, data: base64}] or an error. */
static json_t *s_check_files(json_t *files, char *why, size_t why_len)
{
    json_t *out = json_array();
    size_t i;
    json_t *f;
    if (files && !json_is_array(files)) {
        snprintf(why, why_len, "'files' must be an array of {name, content, format}");
        goto fail;
    }
    json_array_foreach(files, i, f) {
        for (size_t j = 0; j < i; j++)
            if (json_equal(json_object_get(json_array_get(files, j), "name"), json_object_get(f, "name"))) {
                snprintf(why, why_len, "files[%zu] and files[%zu] are both named '%s': give each file its own name",
                         j, i, json_string_value(json_object_get(f, "name")));
                goto fail;
            }
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *content = json_string_value(json_object_get(f, "content"));
        const char *format = json_string_value(json_object_get(f, "format"));
        if (!name || !content) {
            snprintf(why, why_len, "files[%zu] needs a 'name' and a string 'content'", i);
            goto fail;
        }
        if (!korch_safe_relpath(name)) {
            snprintf(why, why_len, "file name '%s' is not a plain path inside the work dir", name);
            goto fail;
        }
        if (format && strcmp(format, "text") != 0 && strcmp(format, "base64") != 0) {
            snprintf(why, why_len, "files[%zu]: format '%s' is not 'text' or 'base64'", i, format);
            goto fail;
        }
        char *b64 = NULL;
        if (format && strcmp(format, "base64") == 0) {
            size_t n = 0;
            unsigned char *raw = korch_b64_decode(content, strlen(content), &n);
            if (!raw) {
                snprintf(why, why_len, "files[%zu] ('%s'): content is not valid base64", i, name);
                goto fail;
            }
            free(raw);
            b64 = strdup(content);
        } else
            b64 = korch_b64_encode((const unsigned char *)content, json_string_length(json_object_get(f, "content")));
        json_array_append_new(out, json_pack("{s:s, s:s}", "name", name, "data", b64 ? b64 : ""));
        free(b64);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* Whether this server can talk to the model at all (a key it lacks, an
   unknown provider, no model): said at once, not when the first message
   fails. Makes no request. */
static bool s_llm_usable(const char *spec, char *why, size_t why_len)
{
    korch_llm_opts_t lo = {0};
    korch_err_t err = {0};
    korch_llm_t *llm = NULL;
    if (korch_llm_parse_spec(spec, &lo, &err) == KORCH_OK)
        llm = korch_llm_new(&lo, &err);
    if (llm) {
        korch_llm_destroy(&llm);
        return true;
    }
    const char *key = lo.provider ? korch_llm_key_env(lo.provider) : NULL;
    if (key && (!getenv(key) || !*getenv(key)))
        snprintf(why, why_len,
                 "this server has no API key for '%s': set %s in the environment of korch serve (or ask for "
                 "another \"llm\")", spec, key);
    else
        snprintf(why, why_len, "cannot use llm '%s': %s", spec, err.msg);
    return false;
}

const char *srv_sa_llm_spec(korch_server_t *s, json_t *body, char *why, size_t why_len)
{
    json_t *j = json_object_get(body, "llm");
    const char *want = json_string_value(j);
    if (j && !want) {
        snprintf(why, why_len, "'llm' must be a string \"provider:model\"");
        return NULL;
    }
    if (want) {
        /* a client picks the provider and model; where requests go and with
           which key is the server's configuration alone */
        korch_llm_opts_t lo = {0};
        korch_err_t err = {0};
        if (korch_llm_parse_spec(want, &lo, &err) != KORCH_OK) {
            snprintf(why, why_len, "%s", err.msg);
            return NULL;
        }
        if (strcmp(lo.provider, "openai") != 0 && strcmp(lo.provider, "anthropic") != 0 &&
            strcmp(lo.provider, "ollama") != 0) {
            snprintf(why, why_len, "llm provider '%s' cannot be chosen by a client (openai, anthropic or ollama)",
                     lo.provider);
            return NULL;
        }
        return s_llm_usable(want, why, why_len) ? want : NULL;
    }
    const char *dflt = srv_sa_opts(s)->llm;
    if (!dflt || !*dflt)
        dflt = getenv("KORCH_LLM");
    return dflt && *dflt ? dflt : "";
}

static const char *s_base(korch_server_t *s)
{
    const char *b = srv_sa_opts(s)->agent_dir;
    return b && *b ? b : "korch-sessions";
}

srv_agent_t *srv_sa_new(korch_server_t *s, const char *id)
{
    srv_agent_t *sa = calloc(1, sizeof *sa);
    if (!sa)
        return NULL;
    sa->srv = s;
    sa->keepalive = -1;
    sa->files = json_array();
    sa->pending_files = json_array();
    sa->log = zlistx_new();
    sa->followers = zlistx_new();
    sa->fileops = zlistx_new();
    sa->syncs = zlistx_new();
    snprintf(sa->id, sizeof sa->id, "%s", id);
    snprintf(sa->cfg.id, sizeof sa->cfg.id, "%s", id);
    sa->cfg.max_steps = srv_sa_opts(s)->agent_max_steps;
    sa->cfg.context_chars = srv_sa_opts(s)->agent_context_chars;
    sa->cfg.max_tokens = srv_sa_opts(s)->agent_max_tokens;
    sa->cfg.max_seconds = srv_sa_opts(s)->agent_max_seconds;
    sa->cfg.max_cost = srv_sa_opts(s)->agent_max_cost;
    sa->cfg.max_session_bytes = srv_sa_opts(s)->agent_session_bytes;
    sa->cfg.prices = srv_sa_opts(s)->agent_prices;
    sa->cfg.gates = srv_sa_opts(s)->llm_gates;
    snprintf(sa->cfg.dir, sizeof sa->cfg.dir, "%s/%s", s_base(s), id);
    snprintf(sa->cfg.conn_path, sizeof sa->cfg.conn_path, "%s/kernel.json", sa->cfg.dir);
    sa->journal = srv_fjournal_new(sa->cfg.dir);
    if (!sa->files || !sa->pending_files || !sa->log || !sa->followers || !sa->fileops || !sa->syncs || !sa->journal) {
        srv_sa_free(&sa);
        return NULL;
    }
    return sa;
}

void srv_sa_create(korch_server_t *s, srv_req_t *req, json_t *body)
{
    const korch_server_opts_t *o = srv_sa_opts(s);
    char why[sizeof ((korch_err_t *)0)->msg + 256]; /* an error's message and more: never cut */
    if (o->max_agent_sessions > 0 && (int)zhashx_size(srv_sa_all(s)) >= o->max_agent_sessions) {
        srv_respond_error(req, 403, "the agent session limit (%d) is reached", o->max_agent_sessions);
        return;
    }
    const char *llm = srv_sa_llm_spec(s, body, why, sizeof why);
    if (!llm) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    if (!*llm) {
        srv_respond_error(req, 503,
                          "no LLM is configured on this server: start korch serve with --llm PROVIDER:MODEL "
                          "(or set KORCH_LLM), or send \"llm\" in the request");
        return;
    }
    if (!json_object_get(body, "llm") && !s_llm_usable(llm, why, sizeof why)) {
        srv_respond_error(req, 503, "the server's own llm is not usable: %s", why); /* its configuration, not the request */
        return;
    }
    json_t *jk = json_object_get(body, "kernel_id"), *jn = json_object_get(body, "kernel_name");
    if ((jk && !json_is_string(jk)) || (jn && !json_is_string(jn))) {
        srv_respond_error(req, 400, "'kernel_id' and 'kernel_name' must be strings");
        return;
    }
    json_t *budget = json_object_get(body, "budget");
    if (!srv_sa_budget_ok(s, budget, why, sizeof why)) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    /* on a kernel of the user's own (another user's is not there: 404), and within their quotas */
    srv_kernel_t *on = jk ? srv_kmgr_find(srv_sa_kmgr(s), json_string_value(jk)) : NULL;
    if (jk && (!on || !srv_user_may(&req->user, on->owner))) {
        srv_respond_error(req, 404, "no kernel '%s'", json_string_value(jk));
        return;
    }
    int running;
    if (!srv_quota_session_ok(s, req, srv_agents_owned(srv_parts(s)->agents, req->user.name, &running)) || (!jk && !srv_quota_kernel_ok(s, req)))
        return; /* 429 */
    json_t *files = s_check_files(json_object_get(body, "files"), why, sizeof why);
    if (!files) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    char id[37];
    korch_uuid(id);
    srv_agent_t *sa = srv_sa_new(s, id);
    if (!sa) {
        json_decref(files);
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    json_decref(sa->pending_files);
    sa->pending_files = files;
    srv_sa_budget_set(sa, budget);
    snprintf(sa->owner, sizeof sa->owner, "%s", req->user.name);
    korch_iso8601_now(sa->created);
    srv_sa_touch(sa);
    snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
    char files_dir[PATH_MAX + 8];
    snprintf(files_dir, sizeof files_dir, "%s/files", sa->cfg.dir);
    korch_err_t merr = {0};
    if (korch_mkdirs(s_base(s), 0755, &merr) != KORCH_OK || mkdir(sa->cfg.dir, 0700) != 0 ||
        mkdir(files_dir, 0755) != 0) {
        if (!merr.rc)
            korch_err_set(&merr, KORCH_E_IO, "cannot create the session dir '%s': %s", sa->cfg.dir, strerror(errno));
        srv_respond_error(req, 500, "%s", merr.msg);
        srv_sa_free(&sa);
        return;
    }
    zhashx_insert(srv_sa_all(s), sa->id, sa);
    srv_audit(srv_parts(s)->audit, &req->user, "session.create", "session", sa->id,
              json_pack("{s:s}", "llm", sa->cfg.llm));
    sa->creating = req;
    srv_req_wait(req); /* answered when the agent says ready */
    int status = srv_sa_begin(sa, jn ? json_string_value(jn) : o->kernel, json_string_value(jk), why, sizeof why);
    if (status)
        srv_sa_fail(sa, status, "%s", why);
}

/* Sessions a previous server left in agent_dir (those with a session.json). */
void srv_agents_load(srv_agents_t *a)
{
    korch_server_t *s = a->srv;
    DIR *d = opendir(s_base(s));
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) != 36 || zhashx_lookup(srv_sa_all(s), de->d_name))
            continue;
        srv_agent_t *sa = srv_sa_new(s, de->d_name);
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/session.json", sa ? sa->cfg.dir : "");
        size_t jlen = 0; /* never blocking on a FIFO a local kernel made, never through a link */
        char *jtext = sa ? korch_fs_read(path, 1u << 20, true, &jlen, NULL) : NULL;
        json_t *j = jtext ? json_loadb(jtext, jlen, 0, NULL) : NULL;
        free(jtext);
        const char *llm = json_string_value(json_object_get(j, "llm"));
        const char *kn = json_string_value(json_object_get(j, "kernel_name"));
        const char *id = json_string_value(json_object_get(j, "id"));
        if (!llm || !kn || !id || strcmp(id, de->d_name) != 0) {
            json_decref(j);
            srv_sa_free(&sa);
            continue;
        }
        snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
        snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", kn);
        const char *created = json_string_value(json_object_get(j, "created"));
        snprintf(sa->created, sizeof sa->created, "%s", created ? created : "");
        snprintf(sa->last_activity, sizeof sa->last_activity, "%s", sa->created);
        sa->turns = (int)json_integer_value(json_object_get(j, "turns"));
        const char *owner = json_string_value(json_object_get(j, "owner")); /* none before users: an admin's */
        snprintf(sa->owner, sizeof sa->owner, "%s", owner && korch_users_name_ok(owner) ? owner : "");
        sa->tokens = json_integer_value(json_object_get(j, "tokens"));
        srv_sa_budget_set(sa, json_object_get(j, "budget"));
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(j, "files"), i, v) if (json_is_string(v) &&
                                                               korch_safe_relpath(json_string_value(v)))
            json_array_append(sa->files, v);
        /* the kernel it was on: a hint, taken only if the kernel manager re-adopts that kernel (srv_sa_claim) */
        json_t *jk = json_object_get(j, "kernel_id");
        if (json_is_string(jk) && json_string_length(jk) < sizeof sa->saved_kernel) {
            snprintf(sa->saved_kernel, sizeof sa->saved_kernel, "%s", json_string_value(jk));
            sa->saved_owns = json_is_true(json_object_get(j, "owns_kernel"));
        }
        json_decref(j);
        sa->state = A_STOPPED;
        snprintf(sa->error, sizeof sa->error, "the server restarted");
        zhashx_insert(srv_sa_all(s), sa->id, sa);
        n++;
        srv_kernel_t *mk = sa->saved_kernel[0] ? srv_kmgr_find(srv_sa_kmgr(s), sa->saved_kernel) : NULL;
        if (mk) /* re-adopted already (sessions are usually loaded first: then srv_sa_on_kernel claims it) */
            srv_sa_claim(sa, mk);
    }
    if (d)
        closedir(d);
    if (n)
        korch_notice("%d agent session(s) in %s, resumed on their next message", n, s_base(s));
}
