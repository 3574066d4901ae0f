"""The agent API proxy: /api/agent/... of this Jupyter server, sent on to
the gateway's /api/agent/... with the gateway's credentials.

The gateway is jupyter_server's own GatewayClient (--gateway-url,
--GatewayClient.auth_token and friends, or JUPYTER_GATEWAY_URL ...): the
same URL and headers jupyter_server uses for the kernel API. Answers stream
through unbuffered: each chunk korch sends (one server-sent event of a turn)
is written and flushed to the browser as it comes. The browser closing its
side ends the upstream request, which korch takes as "stop the step".
Without a gateway the answer is a 503 saying what to configure.
"""
import json

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import httpclient, web

# Request headers passed on to korch (the rest, cookies and the browser's
# Jupyter token included, stay here); answer headers passed back.
_REQ_HEADERS = ("Content-Type", "Accept", "Last-Event-ID")
_ANS_HEADERS = ("Content-Type", "Cache-Control", "Location")
_MAX_BODY = 64 * 1024 * 1024

NO_GATEWAY = ("korch's agent needs this Jupyter server to use korch serve as its kernel gateway: "
              "start it with --gateway-url=http://HOST:PORT --GatewayClient.auth_token=TOKEN "
              "(the URL and token korch serve prints), or set JUPYTER_GATEWAY_URL and "
              "JUPYTER_GATEWAY_AUTH_TOKEN")


class _Aborted(Exception):
    pass


def _gateway():
    """-> jupyter_server's GatewayClient when a gateway is configured, else None."""
    from jupyter_server.gateway.gateway_client import GatewayClient
    gc = GatewayClient.instance()
    return gc if gc.gateway_enabled else None


class AgentProxyHandler(APIHandler):
    def initialize(self):
        self._gone = False
        self._started = False

    def on_connection_close(self):
        self._gone = True

    @web.authenticated
    async def get(self, path):
        await self._proxy(path)

    @web.authenticated
    async def post(self, path):
        await self._proxy(path)

    @web.authenticated
    async def put(self, path):
        await self._proxy(path)

    @web.authenticated
    async def delete(self, path):
        await self._proxy(path)

    def _fail(self, status, message):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message, "reason": None}))

    async def _proxy(self, path):
        gc = _gateway()
        if gc is None:
            return self._fail(503, NO_GATEWAY)
        url = url_path_join(gc.url, "api/agent", path or "")
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
