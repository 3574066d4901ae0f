"""korch's agent inside JupyterLab 4.

The server extension (korch_jupyterlab.proxy) proxies /api/agent/... to the
korch serve that is this server's gateway (--gateway-url), with the gateway's
credentials: the browser never holds korch's token.
"""
__version__ = "0.1.0"


def _jupyter_server_extension_points():
    return [{"module": "korch_jupyterlab"}]


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "korch-jupyterlab"}]


def _load_jupyter_server_extension(serverapp):
    from .proxy import setup_handlers
    setup_handlers(serverapp)
