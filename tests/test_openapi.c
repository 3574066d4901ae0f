/*  src/server/openapi.yaml, checked by tests/peers/openapi_check.py:
 *  validated against the OpenAPI Initiative's 3.0 JSON Schema (Debian's
 *  openapi-specification, with python3-jsonschema), complete against the
 *  route tables of src/server/api.c and agents.c, and true against a real
 *  `korch serve` with a real ipykernel: every operation answers a status
 *  the document lists, with a body that matches the documented schema.
 */
#include "test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

TEST_T(openapi_document, 120)
{
    char script[PATH_MAX];
    snprintf(script, sizeof script, "%s/tests/peers/openapi_check.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", script, korch_test_korch_bin(), NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 110);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "%s%s", out ? out : "", err ? err : "");
    CHECK_CONTAINS(out ? out : "", "ok: ");
    free(out);
    free(err);
}
