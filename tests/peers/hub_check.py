#!/usr/bin/python3
"""korch serve behind a real JupyterHub (tests/test_hub.c): Debian 12's
JupyterHub 3.0 and configurable-http-proxy, two Hub users each with a
single-user Notebook 6.4 server whose gateway is korch, their kernels run
through it, and the attacks. Prints one JSON line {"ok", "failures",
"details", "seconds"}; exit 0 when everything held.

    hub_check.py --korch URL --korch-token T --dir DIR --hub-port P --proxy-port Q
                 --proxy-api-port R --service-token S --cache-s N

korch serve runs already (the test started it with --hub-api-url and the
service token); this starts the Hub (hub_env.py's config) and stops it.
"""
import argparse
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import traceback
import urllib.parse

import requests
import websocket

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_env  # noqa: E402
import ws_client as wc  # noqa: E402

PASSWORD = "korch-test-pw"
# kernels owned by their user (the websocket, listings, 404s: src/server's
# ownership, ident.h's srv_user_may); False checks the identities alone
OWNERSHIP = True


class Ctx:
    def __init__(self):
        self.failures = []
        self.details = {}

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
        return ok


def msg_of(r):
    try:
        return r.json().get("message", "")
    except Exception:  # noqa: BLE001
        return r.text[:300]


def wait_for(fn, timeout, what):
    t = time.monotonic() + timeout
    last = None
    while time.monotonic() < t:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for %s (last: %r)" % (what, last))


class Hub:
    def __init__(self, a):
        self.a = a
        self.api = "http://127.0.0.1:%d/hub/api" % a.hub_port
        self.proxy = "http://127.0.0.1:%d" % a.proxy_port
        self.tester = secrets.token_hex(16)
        self.pids = []  # the single-user servers'
        cfg = argparse.Namespace(dir=a.dir, korch=a.korch, hub_port=a.hub_port, proxy_port=a.proxy_port,
                                 proxy_api_port=a.proxy_api_port, service_token=a.service_token,
                                 tester_token=self.tester, password=PASSWORD)
        hub_env.write_config(cfg)
        self.log = open(os.path.join(a.dir, "hub.log"), "w")
        self.p = subprocess.Popen(["/usr/bin/jupyterhub", "-f", os.path.join(a.dir, "jupyterhub_config.py")],
                                  cwd=a.dir, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.get("/").status_code == 200, 30, "the Hub's API")
        wait_for(lambda: requests.get(self.proxy + "/hub/api", timeout=5).status_code == 200, 30, "the proxy")

    def h(self):
        return {"Authorization": "token " + self.tester}

    def get(self, path):
        return requests.get(self.api + path, headers=self.h(), timeout=10)

    def post(self, path, body=None):
        return requests.post(self.api + path, headers=self.h(), json=body, timeout=60)

    def token(self, user, **kw):
        r = self.post("/users/%s/tokens" % user, dict(note="korch test", **kw))
        if r.status_code != 201:
            raise RuntimeError("cannot make a token for %s: %s %s" % (user, r.status_code, r.text[:200]))
        j = r.json()
        return j["token"], j["id"]

    def spawn(self, user):
        r = self.post("/users/%s/server" % user)
        if r.status_code not in (201, 202):
            raise RuntimeError("cannot start %s's server: %s %s" % (user, r.status_code, r.text[:300]))

    def ready(self, user):
        s = (self.get("/users/" + user).json().get("servers") or {}).get("")
        return s and s.get("ready")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)  # it stops the servers and the proxy it started
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def korch_get(a, token, path, **kw):
    h = {"Authorization": "token " + token} if token else {}
    h.update(kw.pop("headers", {}))
    return requests.get(a.korch + path, headers=h, timeout=30, **kw)


def ws_status(a, token, kid):
    """The status korch answers a websocket to kernel kid with this token (101 = opened)."""
    url = "ws" + a.korch[len("http"):] + "/api/kernels/%s/channels" % kid
    try:
        w = websocket.create_connection(url, header=["Authorization: token " + token], timeout=10)
        w.close()
        return 101
    except websocket.WebSocketBadStatusException as e:
        return e.status_code


def run_user(ctx, hub, a, user, tok):
    """A kernel through the user's own single-user server, its code run there."""
    srv = wc.Http(hub.proxy + "/user/%s/" % user, tok)
    st, model = srv.req("POST", "api/kernels", {"name": "python3"}, timeout=90)
    if not ctx.check(st == 201 and isinstance(model, dict) and "id" in model,
                     "%s: POST /user/%s/api/kernels (Notebook 6.4 -> korch) -> %s %r" % (user, user, st, model)):
        return None
    kid = model["id"]
    if not OWNERSHIP:
        return kid
    c = wc.Conn(hub.proxy + "/user/%s" % user, tok, kid, "legacy", url_session=False)
    try:
        c.kernel_info(60, retry=2)
        r = c.execute("who = %r; print(6*7)" % user, 60)
        ctx.check(r.stdout() == "42\n", "%s: print(6*7) through their server -> %r" % (user, r.stdout()))
    finally:
        c.close()
    return kid


def scenarios(ctx, hub, a):
    d = ctx.details
    t0 = time.monotonic()
    for u in ("alice", "bob"):
        hub.spawn(u)
    for u in ("alice", "bob"):
        wait_for(lambda: hub.ready(u), 60, "%s's server" % u)
    d["servers_ready_s"] = round(time.monotonic() - t0, 1)
    for u in ("alice", "bob"):
        st = (hub.get("/users/" + u).json().get("servers") or {}).get("", {}).get("state") or {}
        if st.get("pid"):
            hub.pids.append(st["pid"])
    alice, _ = hub.token("alice")
    bob, _ = hub.token("bob")
    carol, _ = hub.token("carol")
    short, _ = hub.token("bob", expires_in=1)
    spare, _ = hub.token("alice")   # first used when the Hub is down
    late, _ = hub.token("alice")    # first used on a websocket

    # each user's kernel through their own Notebook server, korch as its gateway
    t = time.monotonic()
    ka = run_user(ctx, hub, a, "alice", alice)
    kb = run_user(ctx, hub, a, "bob", bob)
    d["kernels_through_servers_s"] = round(time.monotonic() - t, 1)
    if not ka or not kb:
        return

    if OWNERSHIP:
        ownership(ctx, hub, a, alice, bob, late, ka, kb)
    # korch through the Hub's proxy too (/services/korch/, the prefix stripped)
    r = requests.get(hub.proxy + "/services/korch/api/kernels", headers={"Authorization": "token " + alice},
                     timeout=30)
    ctx.check(r.status_code == 200 and isinstance(r.json(), list),
              "GET /services/korch/api/kernels through the Hub's proxy -> %s %r" % (r.status_code, r.text[:200]))
    r = requests.get(hub.proxy + "/services/korch/", allow_redirects=False, timeout=30)
    ctx.check(r.status_code == 302 and r.headers.get("Location") == "hub/login",
              "the page through the Hub's proxy -> %s %r" % (r.status_code, r.headers.get("Location")))
    forged_and_revoked(ctx, hub, a, carol, short)
    oauth(ctx, hub, a, ka, kb)
    hub_down(ctx, hub, a, alice, spare)


def ownership(ctx, hub, a, alice, bob, late, ka, kb):
    """Who owns what: the admin sees both; each user only their own, through
    korch and through their own server; the other's is not there."""
    d = ctx.details
    r = korch_get(a, a.korch_token, "/api/kernels")
    ids = sorted(k["id"] for k in r.json())
    ctx.check(r.status_code == 200 and ka in ids and kb in ids, "korch's admin lists %r, wants both" % ids)
    for user, tok, mine, theirs in (("alice", alice, ka, kb), ("bob", bob, kb, ka)):
        r = korch_get(a, tok, "/api/kernels")
        seen = [k["id"] for k in r.json()] if r.status_code == 200 else r.status_code
        ctx.check(seen == [mine], "%s lists %r at korch, wants only %s" % (user, seen, mine))
        st, lst = wc.Http(hub.proxy + "/user/%s/" % user, tok).req("GET", "api/kernels")
        seen = [k["id"] for k in lst] if st == 200 else st
        ctx.check(seen == [mine], "%s lists %r through their server, wants only %s" % (user, seen, mine))
        # the attacker: the other's kernel is not there (404, not 403), neither by REST nor websocket
        r = korch_get(a, tok, "/api/kernels/" + theirs)
        ctx.check(r.status_code == 404, "%s GET of the other's kernel -> %s" % (user, r.status_code))
        r = requests.delete(a.korch + "/api/kernels/" + theirs, headers={"Authorization": "token " + tok}, timeout=30)
        ctx.check(r.status_code == 404, "%s DELETE of the other's kernel -> %s" % (user, r.status_code))
        st = ws_status(a, tok, theirs)
        ctx.check(st == 404, "%s websocket to the other's kernel -> %s, wants 404" % (user, st))
    d["bob_join_alice_ws"] = ws_status(a, bob, ka)

    # a token korch has not seen yet on a websocket: asked of the Hub (503,
    # retry), then let in
    st1 = ws_status(a, late, ka)
    st2 = wait_for(lambda: ws_status(a, late, ka) == 101 and 101, 10, "the websocket with a new token")
    d["ws_new_token"] = [st1, st2]


def forged_and_revoked(ctx, hub, a, carol, short):
    """Forged, expired, not granted, a service's own token: refused with why;
    one revoked at the Hub refused once the cache has forgotten it."""
    d = ctx.details
    r = korch_get(a, "f0" * 16, "/api/kernels")
    d["forged"] = [r.status_code, msg_of(r)]
    ctx.check(r.status_code == 403 and "JupyterHub does not know this token" in msg_of(r),
              "a forged token -> %s %r" % (r.status_code, msg_of(r)))
    time.sleep(1.2)
    r = korch_get(a, short, "/api/kernels")
    d["expired"] = [r.status_code, msg_of(r)]
    ctx.check(r.status_code == 403 and "expired" in msg_of(r), "an expired token -> %s %r" % (r.status_code, msg_of(r)))
    r = korch_get(a, carol, "/api/kernels")
    d["not_granted"] = [r.status_code, msg_of(r)]
    ctx.check(r.status_code == 403 and "access:services!service=korch" in msg_of(r) and "carol" in msg_of(r),
              "carol (not granted korch) -> %s %r" % (r.status_code, msg_of(r)))
    r = korch_get(a, a.service_token, "/api/kernels")
    ctx.check(r.status_code == 403 and "not of a user" in msg_of(r),
              "korch's own service token -> %s %r" % (r.status_code, msg_of(r)))

    # revoked at the Hub: refused once the cache has forgotten it (cache_s)
    rev, rev_id = hub.token("bob")
    ctx.check(korch_get(a, rev, "/api/kernels").status_code == 200, "a fresh token of bob's refused")
    r = requests.delete(hub.api + "/users/bob/tokens/" + rev_id, headers=hub.h(), timeout=10)
    ctx.check(r.status_code == 204, "revoking a token at the Hub -> %s" % r.status_code)
    t = time.monotonic()
    wait_for(lambda: korch_get(a, rev, "/api/kernels").status_code == 403, a.cache_s + 5, "the revoked token refused")
    d["revoked_refused_after_s"] = round(time.monotonic() - t, 1)
    ctx.check(time.monotonic() - t <= a.cache_s + 1.5, "a revoked token was let in for over cache_s")


def hub_down(ctx, hub, a, alice, spare):
    """The Hub goes down: a known token still works until the cache forgets
    it; a new one gets a clear 503; korch itself stays up."""
    d = ctx.details
    korch_get(a, alice, "/api/kernels")
    hub.stop()
    r = korch_get(a, alice, "/api/kernels")
    d["cached_while_hub_down"] = r.status_code
    r = korch_get(a, spare, "/api/kernels")
    d["hub_down"] = [r.status_code, msg_of(r)]
    ctx.check(r.status_code == 503 and "cannot reach JupyterHub" in msg_of(r),
              "a new token while the Hub is down -> %s %r" % (r.status_code, msg_of(r)))
    r = requests.get(a.korch + "/api", timeout=10)
    ctx.check(r.status_code == 200, "korch after the Hub went down: GET /api -> %s" % r.status_code)
    r = korch_get(a, a.korch_token, "/api/kernels")
    ctx.check(r.status_code == 200, "korch's own token while the Hub is down -> %s" % r.status_code)


def oauth(ctx, hub, a, ka, kb):
    """korch's page for alice in a browser session: korch -> the Hub's login
    -> the Hub's OAuth -> korch's callback -> its cookie -> the API."""
    d = ctx.details
    s = requests.Session()
    r = s.get(a.korch + "/", allow_redirects=False, timeout=10)
    ctx.check(r.status_code == 302 and r.headers.get("Location") == "hub/login",
              "the page without a login -> %s %r" % (r.status_code, r.headers.get("Location")))
    r = s.get(a.korch + "/hub/login", timeout=30)  # follows: the Hub's authorize -> its login page
    ctx.check(r.status_code == 200 and "/hub/login" in r.url, "the Hub's login page: %s %s" % (r.status_code, r.url))
    form = re.search(r'<form[^>]*action="([^"]+)"', r.text)
    action = urllib.parse.urljoin(r.url, form.group(1).replace("&amp;", "&")) if form else r.url
    r = s.post(action, data={"username": "alice", "password": PASSWORD}, timeout=30)
    d["oauth_landed"] = [r.status_code, r.url]
    ctx.check(r.status_code == 200 and r.url.rstrip("/") == a.korch and "korch" in r.text,
              "after the Hub's login: %s %s" % (r.status_code, r.url))
    cookie = s.cookies.get("korch-hub-token")
    ctx.check(bool(cookie), "no korch-hub-token cookie after the login")
    r = s.get(a.korch + "/api/kernels", timeout=10)
    seen = [k["id"] for k in r.json()] if r.status_code == 200 else r.status_code
    ctx.check(r.status_code == 200 and (seen == [ka] or not OWNERSHIP),
              "alice's page (cookie) lists %r, wants only %s" % (seen, ka))
    r = s.get(a.korch + "/api/agent/sessions", timeout=10)
    ctx.check(r.status_code == 200, "alice's page: GET /api/agent/sessions -> %s" % r.status_code)
    # the cookie rides on no cross-site request
    r = s.post(a.korch + "/api/kernels", json={"name": "python3"}, headers={"Origin": "http://evil.example"},
               timeout=10)
    ctx.check(r.status_code == 403, "a cross-site POST with alice's cookie -> %s" % r.status_code)
    # a callback with a state this browser did not start
    r = s.get(a.korch + "/oauth_callback?code=abc&state=" + "0" * 32, allow_redirects=False, timeout=10)
    ctx.check(r.status_code == 400 and "state" in msg_of(r), "a foreign callback -> %s %r" % (r.status_code, msg_of(r)))
    r = requests.get(a.korch + "/api/kernels", cookies={"korch-hub-token": "0" * 32}, timeout=10)
    ctx.check(r.status_code == 403, "a forged cookie -> %s" % r.status_code)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--korch", required=True)
    p.add_argument("--korch-token", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--hub-port", type=int, required=True)
    p.add_argument("--proxy-port", type=int, required=True)
    p.add_argument("--proxy-api-port", type=int, required=True)
    p.add_argument("--service-token", required=True)
    p.add_argument("--cache-s", type=float, default=2)
    p.add_argument("--deadline", type=int, default=95, help="seconds before the scenario stops (the runner kills at 130)")
    a = p.parse_args()
    a.korch = a.korch.rstrip("/")
    ctx = Ctx()
    t0 = time.monotonic()
    hub = None

    # the test's own deadline before the runner's (130 s, SIGKILL): the
    # scenario stops here and the Hub still takes its servers down
    def late(*_):
        raise TimeoutError("hub_check ran out of time (%d s): the Hub is stopped with its servers" % a.deadline)

    signal.signal(signal.SIGALRM, late)
    signal.alarm(a.deadline)
    try:
        hub = Hub(a)
        ctx.details["hub_up_s"] = round(time.monotonic() - t0, 1)
        scenarios(ctx, hub, a)
    except Exception:  # noqa: BLE001
        ctx.failures.append("exception: " + traceback.format_exc()[-1500:])
    finally:
        signal.alarm(0)
        if hub:
            hub.stop()
            ctx.details["hub_exit"] = hub.p.returncode
    left = []
    for pid in hub.pids if hub else []:
        try:
            os.kill(pid, 0)
            left.append(pid)
        except OSError:
            pass
    ctx.check(not left, "single-user servers left running after the Hub stopped: %s" % left)
    ctx.check(not hub or len(hub.pids) == 2, "the Hub did not say its servers' pids: %r" % (hub and hub.pids))
    json.dump({"ok": not ctx.failures, "failures": ctx.failures, "details": ctx.details,
               "seconds": round(time.monotonic() - t0, 1)}, sys.stdout)
    print()
    return 0 if not ctx.failures else 1


if __name__ == "__main__":
    sys.exit(main())
