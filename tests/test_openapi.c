/*  src/server/openapi.yaml, checked by tests/peers/openapi_check.py:
 *  validated against the OpenAPI Initiative's 3.0 JSON Schema (Debian's
 *  openapi-specification, with python3-jsonschema), the same both ways as
 *  the router's route table (src/server/routes.c, handed to the check as
 *  srv_routes_json writes it: paths, summaries, authentication), and true
 *  against a real `korch serve` with a real ipykernel: every operation
 *  answers a status the document lists, with a body that matches the
 *  documented schema, and every path answers an undocumented method 405
 *  with an Allow header naming the documented ones.
 */
#include "test.h"
#include "../src/server/routes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TEST_T(openapi_document, 120)
{
    char script[PATH_MAX], routes[64];
    snprintf(script, sizeof script, "%s/tests/peers/openapi_check.py", korch_test_root());
    snprintf(routes, sizeof routes, "/tmp/korch-routes-%d.json", (int)getpid());
    json_t *table = srv_routes_json();
    if (!CHECK(table) || !CHECK_EQ(json_dump_file(table, routes, JSON_INDENT(1)), 0)) {
        json_decref(table);
        return;
    }
    json_decref(table);
    const char *argv[] = {"/usr/bin/python3", script, korch_test_korch_bin(), routes, NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 110);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "%s%s", out ? out : "", err ? err : "");
    CHECK_CONTAINS(out ? out : "", "ok: ");
    free(out);
    free(err);
    unlink(routes);
}
