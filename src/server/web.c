/*  The web app: GET / is the page, /static/korch.{js,css} its bundle, all
 *  three embedded in the binary (web_assets.S; built from src/web). They
 *  hold no secret, so they are served without the token: the page takes
 *  the token from its URL once, keeps it in sessionStorage and sends it as
 *  "Authorization: token ..." with every API call, so no cookie (no ambient
 *  credential a cross-site request could ride on) is involved. The one
 *  exception is korch as a JupyterHub service with the Hub's OAuth
 *  (hub_oauth.c): the page logs in through the Hub and the browser then
 *  sends an HttpOnly cookie, which the front door's Origin check keeps off
 *  cross-site requests. Its files are linked relatively, so the page also
 *  works under the Hub proxy's /services/NAME/.
 *
 *  Every file goes out with a strict Content-Security-Policy: script only
 *  from korch itself (no inline script, no eval), no frames, no plugins, no
 *  requests to anywhere but korch. Kernel and model output is sanitized by
 *  the page; the CSP is the second wall should that ever fail.
 */
#include "server_int.h"

#include <string.h>

extern const char korch_web_index[], korch_web_index_end[];
extern const char korch_web_js[], korch_web_js_end[];
extern const char korch_web_css[], korch_web_css_end[];

const char *const srv_web_headers[5][2] = {
    {"content-security-policy:",
     "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
     "connect-src 'self'; font-src 'self'; object-src 'none'; frame-src 'none'; worker-src 'none'; "
     "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"},
    {"x-content-type-options:", "nosniff"},
    {"referrer-policy:", "no-referrer"},
    {"x-frame-options:", "DENY"},
    {"cross-origin-opener-policy:", "same-origin"},
};

bool srv_web_serve(srv_req_t *req)
{
    static const struct {
        const char *path, *type;
        const char *start, *end;
    } files[] = {
        {"/", "text/html; charset=utf-8", korch_web_index, korch_web_index_end},
        {"/static/korch.js", "text/javascript; charset=utf-8", korch_web_js, korch_web_js_end},
        {"/static/korch.css", "text/css; charset=utf-8", korch_web_css, korch_web_css_end},
    };
    if (strcmp(req->method, "GET") != 0)
        return false;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strcmp(req->path, files[i].path) == 0) {
            req->page = true;
            srv_respond_raw(req, 200, files[i].type, files[i].start, (size_t)(files[i].end - files[i].start));
            return true;
        }
    return false;
}
