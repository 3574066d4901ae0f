/*  GET /kernelspecs/{name}/{file}: a kernelspec's resources (its logos,
 *  kernel.js, kernel.css), the route jupyter_server serves them on and
 *  where the Notebook's gateway client fetches them from (its
 *  GatewayClient.kernelspecs_resource_endpoint, "/kernelspecs"). The
 *  listing's "resources" point here (korch_kernelspec_resources). */
#include "server_int.h"
#include "korch/kernelspec.h"

#include <stdlib.h>
#include <string.h>

#define MAX_RESOURCE (4u << 20) /* a logo is a few kB */

static const char *s_content_type(const char *file)
{
    static const struct { const char *ext, *type; } types[] = {
        {".png", "image/png"}, {".svg", "image/svg+xml"}, {".js", "application/javascript"}, {".css", "text/css"},
        {".gif", "image/gif"}, {".jpg", "image/jpeg"}};
    const char *dot = strrchr(file, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

void srv_kernelspec_resource(korch_server_t *s, srv_req_t *req, const char *name, const char *file)
{
    (void)s;
    if (strcmp(req->method, "GET") != 0) {
        srv_respond_error(req, 405, "method not allowed");
        return;
    }
    korch_err_t err = {0};
    korch_kernelspec_t *spec = korch_kernelspec_find(name, &err);
    char *data = NULL;
    size_t len = 0;
    if (spec && korch_kernelspec_resource_read(spec, file, MAX_RESOURCE, &data, &len, &err) == KORCH_OK)
        srv_respond_raw(req, 200, s_content_type(file), data, len);
    else if (err.rc == KORCH_E_NOTFOUND || err.rc == KORCH_E_INVALID)
        srv_respond_error(req, 404, "%s", err.msg);
    else
        srv_respond_error(req, 500, "%s", err.msg);
    free(data);
    korch_kernelspec_destroy(&spec);
}
