/*  Test fixture: `korch run` as a child process on a local kernel, its
 *  --json lines and the event schema they must match (tests/peers/
 *  events_schema.py), as the trust and branch tests use them. Header-only,
 *  like llm_fixture.h: include it from one test file each. */
#ifndef KORCH_RUN_FIXTURE_H
#define KORCH_RUN_FIXTURE_H

#include "test.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* korch run --launcher local ARGS... (NULL-terminated, at most 35); the
   exit status, out/err new strings. */
static inline int run_korch(const char *const *args, char **out, char **err)
{
    const char *argv[40] = {korch_test_korch_bin(), "run", "--launcher", "local"};
    int n = 4;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return korch_test_run(argv, NULL, out, err, 170);
}

/* Each line of out that is JSON (a new array; out may be NULL). */
static inline json_t *run_lines(const char *out)
{
    json_t *a = json_array();
    for (const char *p = out; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = json_loadb(p, n, 0, NULL);
        if (j)
            json_array_append_new(a, j);
        p += n + (nl != NULL);
    }
    return a;
}

/* The last event of lines named name (borrowed from lines), NULL when none. */
static inline json_t *run_event(json_t *lines, const char *name)
{
    json_t *found = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(lines, i, e) if (strcmp(json_string_value(json_object_get(e, "event")) ?: "", name) == 0)
        found = e;
    return found;
}

/* events_schema.py WHAT FILE (WHAT: cli or transcript) must pass: the
   summary it prints (new, NULL when it printed none). */
static inline json_t *run_schema(const char *what, const char *path)
{
    char script[600];
    snprintf(script, sizeof script, "%s/tests/peers/events_schema.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", script, what, path, NULL};
    char *out = NULL;
    int rc = korch_test_run(argv, NULL, &out, NULL, 60);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "%s %s: %s\n", what, path, out ? out : "(nothing)");
    free(out);
    return j;
}

/* text into the file path (made or emptied). */
static inline void run_spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (CHECK(f != NULL)) {
        fputs(text, f);
        fclose(f);
    }
}

#endif
