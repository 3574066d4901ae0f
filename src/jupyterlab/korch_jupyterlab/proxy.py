"""The agent API proxy: /api/agent/... of this Jupyter server, sent on to
the gateway's /api/agent/... with the gateway's credentials.

The gateway is jupyter_server's own GatewayClient (--gateway-url,
--GatewayClient.auth_token and friends, or JUPYTER_GATEWAY_URL ...): the
same URL and headers jupyter_server uses for the kernel API. Answers stream
through unbuffered: each chunk korch sends (one server-sent event of a turn)
is written and flushed to the browser as it comes. The browser closing its
side ends the upstream request, which korch takes as "stop the step".
Without a gateway the answer is a 503 saying what to configure.

Only the agent API the panel uses is reached (issue 21: the path used to be
decoded and joined, so .../api/agent/%2e%2e/%2e%2e/metrics was korch's
/metrics, with the gateway's token). The path is taken as the client sent
it, still percent-encoded: a segment that is empty (//), "." or ".." in any
spelling, or holds an encoded or raw slash or backslash, a NUL or another
control character, is refused (404), and what is left must be one of
ROUTES with one of its methods (404, or 405 naming the methods). The
segments go on to korch exactly as they came. Every method is
@web.authenticated and @authorized (resource "korch_agent", the action from
the HTTP method, as jupyter_server's own handlers do); creating a session
and sending a message run code, so they also need "execute" on "kernels".
"""
import inspect
import json
import re
import urllib.parse

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import httpclient, web

try:  # jupyter_server >= 2.0
    from jupyter_server.auth.decorator import authorized
except ImportError:  # 1.x has no authorizer: authentication is all it checks
    def authorized(method):
        return method

# Request headers passed on to korch (the rest, cookies and the browser's
# Jupyter token included, stay here); answer headers passed back.
_REQ_HEADERS = ("Content-Type", "Accept", "Last-Event-ID")
_ANS_HEADERS = ("Content-Type", "Cache-Control", "Location")
_MAX_BODY = 64 * 1024 * 1024

NO_GATEWAY = ("korch's agent needs this Jupyter server to use korch serve as its kernel gateway: "
              "start it with --gateway-url=http://HOST:PORT --GatewayClient.auth_token=TOKEN "
              "(the URL and token korch serve prints), or set JUPYTER_GATEWAY_URL and "
              "JUPYTER_GATEWAY_AUTH_TOKEN")


AUTH_RESOURCE = "korch_agent"

_ID = "{id}"      # a session id: letters, digits, - and _
_NAME = "{name}"  # one segment (a figure's name)
_PATH = "{path}"  # one or more segments (a file in the work dir)

# (methods, segments, what else the user needs); korch's routes in src/server/routes.c
ROUTES = (
    (("GET",), ("sessions",), None),
    (("POST",), ("sessions",), ("execute", "kernels")),
    (("GET", "DELETE"), ("sessions", _ID), None),
    (("POST",), ("sessions", _ID, "messages"), ("execute", "kernels")),
    (("POST",), ("sessions", _ID, "interrupt"), None),
    (("POST",), ("sessions", _ID, "verify"), ("execute", "kernels")),  # a fresh kernel re-runs the session's code
    (("GET",), ("sessions", _ID, "notebook"), None),
    (("GET",), ("sessions", _ID, "events"), None),
    (("GET",), ("sessions", _ID, "files"), None),
    (("GET", "PUT", "DELETE"), ("sessions", _ID, "files", _PATH), None),
    (("GET",), ("sessions", _ID, "figures", _NAME), None),
)
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}\Z")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _segments(rest):
    """The raw path after /api/agent ("" or "/a/b") -> its decoded segments,
    or None when it is not a plain path."""
    if not rest.startswith("/") or "\\" in rest or len(rest) > 4096:
        return None
    out = []
    for raw in rest[1:].split("/"):
        if not raw or _BAD_ESCAPE.search(raw):
            return None
        try:
            seg = urllib.parse.unquote(raw, errors="strict")
        except UnicodeDecodeError:
            return None
        if seg in (".", "..") or any(c in "/\\" or ord(c) < 0x20 or ord(c) == 0x7f for c in seg):
            return None
        out.append(seg)
    return out


def match_route(rest, method):
    """-> (status, route): 200 and the route's needs, 405 and the allowed
    methods, or 404."""
    segs = _segments(rest)
    if segs is None:
        return 404, None
    allowed = []
    for methods, pattern, needs in ROUTES:
        if pattern[-1] == _PATH:
            if len(segs) < len(pattern):
                continue
        elif len(segs) != len(pattern):
            continue
        ok = True
        for want, seg in zip(pattern, segs):
            if want == _ID:
                ok = bool(_SESSION_ID.match(seg))
            elif want not in (_NAME, _PATH):
                ok = want == seg
            if not ok:
                break
        if ok and method in methods:
            return 200, needs
        if ok:
            allowed += methods
    return (405, tuple(allowed)) if allowed else (404, None)


class _Aborted(Exception):
    pass


def _gateway():
    """-> jupyter_server's GatewayClient when a gateway is configured, else None."""
    from jupyter_server.gateway.gateway_client import GatewayClient
    gc = GatewayClient.instance()
    return gc if gc.gateway_enabled else None


class AgentProxyHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    def initialize(self):
        self._gone = False
        self._started = False

    def on_connection_close(self):
        self._gone = True

    # one decorated method per HTTP method: @authorized takes its action from
    # the first request it sees

    @web.authenticated
    @authorized
    async def get(self, path):
        await self._proxy()

    @web.authenticated
    @authorized
    async def post(self, path):
        await self._proxy()

    @web.authenticated
    @authorized
    async def put(self, path):
        await self._proxy()

    @web.authenticated
    @authorized
    async def delete(self, path):
        await self._proxy()

    def _fail(self, status, message):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message, "reason": None}))

    async def _route(self):
        """The raw path after /api/agent if it is an allowed route for this
        method and user; else the request is answered and None returned."""
        prefix = url_path_join(self.base_url, "api/agent")
        raw = self.request.path  # as the client sent it: not decoded, not normalised
        rest = raw[len(prefix):] if raw.startswith(prefix) else None
        status, what = match_route(rest, self.request.method) if rest is not None else (404, None)
        if status == 404:
            self._fail(404, "not an agent API route")
            return None
        if status == 405:
            self.set_header("Allow", ", ".join(what))
            self._fail(405, "%s is not allowed here" % self.request.method)
            return None
        authz = getattr(self, "authorizer", None)
        if what and authz is not None:
            ok = authz.is_authorized(self, self.current_user, what[0], what[1])
            if inspect.isawaitable(ok):
                ok = await ok
            if not ok:
                self._fail(403, "not authorized to %s on %s" % what)
                return None
        return rest

    async def _proxy(self):
        gc = _gateway()
        if gc is None:
            return self._fail(503, NO_GATEWAY)
        rest = await self._route()
        if rest is None:
            return
        url = gc.url.rstrip("/") + "/api/agent" + rest  # the segments as they came, still encoded
        if self.request.query:
            url += "?" + self.request.query
        kwargs = gc.load_connection_args()  # the gateway's headers (its token), TLS and timeouts
        headers = dict(kwargs.pop("headers", {}) or {})
        for h in _REQ_HEADERS:
            if h in self.request.headers:
                headers[h] = self.request.headers[h]
        for k in ("request_timeout",):  # a turn may stream for a long time
            kwargs.pop(k, None)
        method = self.request.method
        body = self.request.body if method in ("POST", "PUT") else None
        if body is not None and len(body) > _MAX_BODY:
            return self._fail(413, "request body too large")
        status = {"code": None}

        def on_header(line):
            line = line.rstrip("\r\n")
            if line.startswith("HTTP/"):
                parts = line.split(" ", 2)
                status["code"] = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 502
                return
            if ":" in line and status["code"] is not None:
                name, value = line.split(":", 1)
                if name.strip().title() in _ANS_HEADERS:
                    self.set_header(name.strip(), value.strip())

        def on_chunk(chunk):
            if self._gone:
                raise _Aborted()
            if not self._started:
                self._started = True
                self.set_status(status["code"] or 502)
            self.write(chunk)
            self.flush()

        req = httpclient.HTTPRequest(url, method=method, headers=headers, body=body,
                                     allow_nonstandard_methods=True, header_callback=on_header,
                                     streaming_callback=on_chunk, request_timeout=24 * 3600,
                                     follow_redirects=False, decompress_response=False,
                                     **{k: v for k, v in kwargs.items()
                                        if k in ("connect_timeout", "validate_cert", "ca_certs",
                                                 "client_key", "client_cert", "auth_username",
                                                 "auth_password")})
        try:
            resp = await httpclient.AsyncHTTPClient().fetch(req, raise_error=False)
        except _Aborted:
            return
        except Exception as e:  # the gateway is down or unreachable
            if self._started:
                return
            return self._fail(502, f"korch serve at {gc.url} did not answer: {e}")
        if self._gone:
            return
        if resp.code == 599 and not self._started:
            return self._fail(502, f"korch serve at {gc.url} did not answer: {resp.error}")
        if not self._started:
            self.set_status(status["code"] or resp.code)
        self.finish()


def setup_handlers(serverapp):
    web_app = serverapp.web_app
    base = web_app.settings["base_url"]
    route = url_path_join(base, "api/agent") + r"(?:/(.*))?"
    web_app.add_handlers(".*$", [(route, AgentProxyHandler)])
    serverapp.log.info("korch_jupyterlab: /api/agent/ proxied to %s",
                       (_gateway().url if _gateway() else "nothing (no --gateway-url)"))
