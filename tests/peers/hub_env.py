#!/usr/bin/python3
"""A real JupyterHub (Debian 12's 3.0, its configurable-http-proxy) around a
korch serve that is registered as a Hub service, for tests/test_hub.c.

    hub_env.py config DIR --korch URL --hub-port P --proxy-port Q --service-token T
        writes DIR/jupyterhub_config.py (and the single-user servers'
        Jupyter config) and prints nothing

The config is the deploy guide's (docs/team.md) plus what a test needs:
  - DummyAuthenticator with one password; users alice, bob (granted korch)
    and carol (not granted: her tokens lack access:services!service=korch);
  - SimpleLocalProcessSpawner (homes under DIR), each single-user server is
    Notebook 6.4 (JUPYTERHUB_SINGLEUSER_APP) with korch as its gateway and
    its own JUPYTERHUB_API_TOKEN as GatewayClient.auth_token;
  - korch as an external service "korch" (its URL, the service token, an
    OAuth redirect to korch's /oauth_callback, no confirmation page);
  - a service "tester" with the admin role, whose token drives the Hub's
    REST API (users, servers, tokens).
"""
import argparse
import json
import os
import sys

CONFIG = r'''
import os
c = get_config()  # noqa: F821
DIR = {dir!r}
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///" + os.path.join(DIR, "hub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(DIR, "cookie_secret")
c.JupyterHub.pid_file = os.path.join(DIR, "hub.pid")
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.pid_file = os.path.join(DIR, "proxy.pid")
c.JupyterHub.cleanup_servers = True
# POST /hub/api/users/NAME/server answers 202 at once: both servers start together
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.JupyterHub.log_level = "INFO"
# Debian's configurable-http-proxy finds its modules in /usr/share/nodejs,
# which only Debian's own node searches (not NodeSource's): the proxy
# inherits the Hub's environment
os.environ["NODE_PATH"] = "/usr/share/nodejs:/usr/lib/nodejs"

c.JupyterHub.authenticator_class = "jupyterhub.auth.DummyAuthenticator"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {{"alice", "bob", "carol"}}

c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(DIR, "home", "{{username}}")
c.Spawner.cmd = ["/usr/bin/jupyterhub-singleuser"]
c.Spawner.args = ["--allow-root"]  # the tests run as root
c.Spawner.default_url = "/tree"
c.Spawner.start_timeout = 30
c.Spawner.http_timeout = 30
c.Spawner.environment = {{
    # Notebook 6.4 (Debian's python3-notebook), not jupyter_server
    "JUPYTERHUB_SINGLEUSER_APP": "notebook.notebookapp.NotebookApp",
    # korch is every single-user server's gateway; the server's own Hub
    # token is its auth_token (jupyter_notebook_config.py in this dir)
    "JUPYTER_GATEWAY_URL": {korch!r},
    "JUPYTER_CONFIG_DIR": os.path.join(DIR, "jupyter-config"),
    "JUPYTER_RUNTIME_DIR": os.path.join(DIR, "jupyter-runtime"),
}}

# korch, an external service (a managed one would add "command")
c.JupyterHub.services = [
    {{
        "name": "korch",
        "url": {korch!r},
        "api_token": {service_token!r},
        "oauth_redirect_uri": {korch!r} + "/oauth_callback",
        "oauth_no_confirm": True,
    }},
    {{"name": "tester", "api_token": {tester_token!r}}},
]
c.JupyterHub.load_groups = {{"korch-users": ["alice", "bob"]}}
c.JupyterHub.load_roles = [
    # who may use korch: the users' own tokens (OAuth, tokens they make) and
    # their single-user servers' tokens (GatewayClient.auth_token)
    {{"name": "korch-users", "groups": ["korch-users"], "scopes": ["self", "access:services!service=korch"]}},
    {{"name": "server", "scopes": ["users:activity!user", "access:servers!user", "access:services!service=korch"]}},
    {{"name": "tester", "services": ["tester"],
      "scopes": ["admin:users", "admin:servers", "tokens", "read:users", "list:users"]}},
]
'''

NB_CONFIG = r'''
import os
c = get_config()  # noqa: F821
# the single-user server's own Hub token, as korch's auth token
c.GatewayClient.auth_token = os.environ["JUPYTERHUB_API_TOKEN"]
c.GatewayClient.request_timeout = 60.0
'''


def write_config(a):
    os.makedirs(os.path.join(a.dir, "jupyter-config"), exist_ok=True)
    os.makedirs(os.path.join(a.dir, "home"), exist_ok=True)
    with open(os.path.join(a.dir, "jupyterhub_config.py"), "w") as f:
        f.write(CONFIG.format(dir=a.dir, proxy_port=a.proxy_port, hub_port=a.hub_port, api_port=a.proxy_api_port, korch=a.korch.rstrip("/"),
                              service_token=a.service_token, tester_token=a.tester_token, password=a.password))
    with open(os.path.join(a.dir, "jupyter-config", "jupyter_notebook_config.py"), "w") as f:
        f.write(NB_CONFIG)
