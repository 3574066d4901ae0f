/*  korch user: the users file of `korch serve --users FILE` (korch/users.h).
 *
 *  korch user add NAME [--admin] [--quota KEY=N]... [--no-token]
 *      add NAME (or change an existing one's role / quotas) and mint a
 *      token, printed once on stdout (only its hash is kept)
 *  korch user list                    names, roles, quotas, token ids
 *  korch user revoke NAME [TOKEN_ID]  revoke one token, or all of NAME's
 *  korch user delete NAME             remove NAME and their tokens
 *  korch user quota [NAME] KEY=N|KEY= the defaults' (no NAME) or NAME's
 *
 *  The file: --users FILE, else $KORCH_USERS, else ./korch-users.json. A
 *  running korch serve sees the change within a second.
 */
#include "cli.h"
#include "korch/users.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_help(FILE *f)
{
    fprintf(f, "usage: korch user add NAME [--admin] [--quota KEY=N]... [--no-token]\n"
               "       korch user list\n"
               "       korch user revoke NAME [TOKEN_ID]\n"
               "       korch user delete NAME\n"
               "       korch user quota [NAME] KEY=N|KEY=\n\n"
               "The users of `korch serve --users FILE`: names, roles (user, admin), tokens kept hashed,\n"
               "quotas (kernels, sessions, memory_mb, cpus, tokens_per_day, cost_per_day). add mints a\n"
               "token and prints it once; a running korch serve sees changes within a second.\n\n"
               "      --users FILE     the users file (default $KORCH_USERS, else ./korch-users.json)\n"
               "      --admin          the user is an admin (sees and manages everyone's things)\n"
               "      --user           the user is a plain user again\n"
               "      --quota KEY=N    a quota of the user (KEY= removes it); repeatable\n"
               "      --no-token       add or change the user without minting a token\n"
               "  -h, --help           this text\n");
}

/* KEY=N into u's quota of name ("" = the defaults). */
static int s_quota(korch_users_t *u, const char *name, const char *kv, korch_err_t *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) {
        fprintf(stderr, "korch user: '%s' is not KEY=N (KEY= removes it)\n", kv);
        return 2;
    }
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    json_t *v = NULL;
    if (eq[1]) {
        char *end;
        double d = strtod(eq + 1, &end);
        if (*end || d < 0) {
            fprintf(stderr, "korch user: quota '%s' is not a number >= 0\n", kv);
            return 2;
        }
        v = d == (double)(long long)d ? json_integer((long long)d) : json_real(d);
    }
    return korch_users_set_quota(u, name, key, v, err) == KORCH_OK ? 0 : 1;
}

static void s_list(const korch_users_t *u)
{
    json_t *l = korch_users_list(u), *e;
    size_t i;
    printf("%-24s %-6s %-10s %s\n", "NAME", "ROLE", "TOKENS", "QUOTA");
    json_array_foreach(l, i, e) {
        char *q = json_dumps(json_object_get(e, "quota"), JSON_COMPACT | JSON_SORT_KEYS);
        json_t *toks = json_object_get(e, "tokens"), *t;
        char ids[256] = "";
        size_t k, o = 0;
        json_array_foreach(toks, k, t) {
            int w = snprintf(ids + o, sizeof ids - o, "%s%s", k ? "," : "", json_string_value(json_object_get(t, "id")));
            if (w < 0 || (size_t)w >= sizeof ids - o)
                break;
            o += (size_t)w;
        }
        printf("%-24s %-6s %-10s %s\n", json_string_value(json_object_get(e, "name")),
               json_string_value(json_object_get(e, "role")), *ids ? ids : "-", q ? q : "{}");
        free(q);
    }
    json_decref(l);
}

int korch_cmd_user(int argc, char **argv)
{
    const char *path = getenv("KORCH_USERS") && *getenv("KORCH_USERS") ? getenv("KORCH_USERS") : "korch-users.json";
    const char *role = NULL, *quotas[16];
    int nq = 0;
    bool mint = true;
    enum { OPT_USERS = 1, OPT_ADMIN, OPT_USER, OPT_QUOTA, OPT_NO_TOKEN };
    static const struct option longopts[] = {
        {"users", required_argument, 0, OPT_USERS}, {"admin", no_argument, 0, OPT_ADMIN},
        {"user", no_argument, 0, OPT_USER},         {"quota", required_argument, 0, OPT_QUOTA},
        {"no-token", no_argument, 0, OPT_NO_TOKEN}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_USERS: path = optarg; break;
        case OPT_ADMIN: role = "admin"; break;
        case OPT_USER: role = "user"; break;
        case OPT_QUOTA:
            if (nq == (int)(sizeof quotas / sizeof quotas[0])) {
                fprintf(stderr, "korch user: at most 16 --quota\n");
                return 2;
            }
            quotas[nq++] = optarg;
            break;
        case OPT_NO_TOKEN: mint = false; break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    if (nargs < 1) {
        s_help(stderr);
        return 2;
    }
    const char *cmd = args[0];
    bool list = strcmp(cmd, "list") == 0;
    if (!list && strcmp(cmd, "add") && strcmp(cmd, "revoke") && strcmp(cmd, "delete") && strcmp(cmd, "quota")) {
        fprintf(stderr, "korch user: unknown command '%s' (add, list, revoke, delete, quota)\n", cmd);
        return 2;
    }
    if ((strcmp(cmd, "add") == 0 || strcmp(cmd, "delete") == 0) && nargs != 2) {
        fprintf(stderr, "korch user %s: give one NAME\n", cmd);
        return 2;
    }
    if ((strcmp(cmd, "revoke") == 0 && (nargs < 2 || nargs > 3)) || (strcmp(cmd, "quota") == 0 && (nargs < 2 || nargs > 3))) {
        fprintf(stderr, "korch user %s: see korch user --help\n", cmd);
        return 2;
    }
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, !list, &err);
    if (!u) {
        fprintf(stderr, "korch user: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    if (list) {
        s_list(u);
        rc = 0;
        goto out;
    }
    if (strcmp(cmd, "add") == 0) {
        const char *name = args[1];
        if (korch_users_add(u, name, role, &err) != KORCH_OK)
            goto out;
        for (int i = 0; i < nq; i++)
            if ((rc = s_quota(u, name, quotas[i], &err)) != 0)
                goto out;
        rc = 1;
        char token[KORCH_TOKEN_MAX], id[KORCH_TOKEN_ID_MAX];
        if (mint && korch_users_mint(u, name, token, id, &err) != KORCH_OK)
            goto out;
        if (korch_users_save(u, &err) != KORCH_OK)
            goto out;
        if (mint) {
            printf("%s\n", token);
            fprintf(stderr, "korch user: token %s of '%s' (shown once; korch user revoke %s %s)\n", id, name, name, id);
        }
        rc = 0;
    } else if (strcmp(cmd, "revoke") == 0) {
        int n;
        if (korch_users_revoke(u, args[1], nargs == 3 ? args[2] : NULL, &n, &err) != KORCH_OK ||
            korch_users_save(u, &err) != KORCH_OK)
            goto out;
        fprintf(stderr, "korch user: %d token%s of '%s' revoked\n", n, n == 1 ? "" : "s", args[1]);
        rc = 0;
    } else if (strcmp(cmd, "delete") == 0) {
        if (korch_users_delete(u, args[1], &err) != KORCH_OK || korch_users_save(u, &err) != KORCH_OK)
            goto out;
        rc = 0;
    } else { /* quota */
        const char *name = nargs == 3 ? args[1] : "";
        if ((rc = s_quota(u, name, args[nargs - 1], &err)) != 0 || korch_users_save(u, &err) != KORCH_OK) {
            rc = rc ? rc : 1;
            goto out;
        }
        rc = 0;
    }
out:
    if (rc == 1 && err.rc)
        fprintf(stderr, "korch user: %s\n", err.msg);
    korch_users_destroy(&u);
    return rc;
}
