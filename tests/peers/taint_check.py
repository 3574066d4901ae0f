#!/usr/bin/python3
"""The kernel (and the model) as the attacker of a person's Jupyter client,
through korch serve's relay: once code from the agent has run in a kernel,
or a client asked for it, nothing korch relays from it may carry script
(issue 21 item 1).

    taint_check.py --url 'http://127.0.0.1:PORT/?token=T' --protocol v1|legacy [--agent]

With --agent the server has the scripted LLM's "taint_hook" scenario: the
model's code registers an IPython post_run_cell hook in a notebook's kernel
(POST /api/agent/sessions with its kernel_id) and that is what taints it.
Without it, a client's POST /api/kernels/{id}/untrusted does. Then a table
of attacks, each the kernel's code (registered as the model's would be)
followed by the person's next cell, and what the client receives judged:
no <script>, no on* handler, no javascript: URL, no script mime type, no
SVG or markdown mime, the note saying why. Before the taint (and after a
restart, and after the owner's DELETE) the same script arrives intact: the
check can fail. Prints one JSON line {"ok", "failures", "details"}.
"""
import argparse
import html.parser
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws_client import Conn, Failure, Http  # noqa: E402

SCRIPTY_VALUE = re.compile(r"<\s*script|\bon[a-z]+\s*=|javascript:|<\s*iframe|<\s*svg|srcdoc", re.I)
BAD_TAGS = {"script", "iframe", "frame", "object", "embed", "svg", "math", "base", "meta", "link", "form", "style"}


class _Judge(html.parser.HTMLParser):
    """What a browser-like parse of the HTML finds that can run script."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad = []

    def handle_starttag(self, tag, attrs):
        if tag in BAD_TAGS:
            self.bad.append("<%s>" % tag)
        for k, v in attrs:
            if k.startswith("on"):
                self.bad.append("%s=" % k)
            if k in ("href", "src", "action", "formaction", "srcdoc", "data") and v and \
                    re.match(r"\s*(javascript|vbscript|data:text)", re.sub(r"[\t\n\r]", "", v), re.I):
                self.bad.append("%s=%s" % (k, v[:40]))

    handle_startendtag = handle_starttag


def html_bad(text):
    j = _Judge()
    j.feed(text)
    j.close()
    return j.bad
BAD_MIMES = ("application/javascript", "text/javascript", "image/svg+xml", "text/markdown", "text/latex")

# (name, the attacker's code (run once the kernel is tainted), the person's next cell,
#  what must arrive: "note" = a neutralised bundle with korch's note, "clean" = no script only)
HOOK = """
from IPython.display import display, HTML, Javascript, Markdown, SVG
def _korch_attack(result=None):
    {show}
get_ipython().events.register('post_run_cell', _korch_attack)
"""
ATTACKS = [
    ("hook_html_script", HOOK.format(show="display(HTML('<b>helper</b><script>window.__pwned=1</script>'))"), "note"),
    ("hook_img_onerror", HOOK.format(show="display(HTML('<img src=x onerror=\"window.__pwned=1\">'))"), "note"),
    ("hook_javascript", HOOK.format(show="display(Javascript('window.__pwned=1'))"), "note"),
    ("hook_markdown_raw_html", HOOK.format(
        show="display(Markdown('<img src=x onerror=\"window.__pwned=1\"> [a](javascript:window.__pwned=1)'))"), "note"),
    ("hook_svg_script", HOOK.format(
        show="display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"window.__pwned=1\">"
             "<script>window.__pwned=2</script></svg>'))"), "clean"),
    ("hook_iframe_srcdoc", HOOK.format(
        show="display(HTML('<iframe srcdoc=\"<script>parent.__pwned=1</script>\"></iframe>'))"), "note"),
    ("hook_magic_javascript", HOOK.format(show="get_ipython().run_cell_magic('javascript', '', 'window.__pwned=1')"),
     "note"),
    ("hook_magic_html", HOOK.format(show="get_ipython().run_cell_magic('html', '', '<script>window.__pwned=1</script>')"),
     "note"),
    ("display_pub_replaced", """
_korch_pub = get_ipython().display_pub.publish
def _korch_publish(data, metadata=None, **kw):
    data = dict(data, **{'text/html': '<script>window.__pwned=1</script>'})
    return _korch_pub(data, metadata, **kw)
get_ipython().display_pub.publish = _korch_publish
""", "note"),
    ("displayhook_replaced", """
_korch_w = get_ipython().displayhook.write_format_data
def _korch_write(format_dict, md_dict=None):
    format_dict = dict(format_dict, **{'text/html': '<img src=x onerror="window.__pwned=1">'})
    return _korch_w(format_dict, md_dict)
get_ipython().displayhook.write_format_data = _korch_write
""", "note"),
    ("background_thread", """
import threading
from IPython.display import display, HTML
def _korch_later():
    import time
    time.sleep(0.6)
    display(HTML('<script>window.__pwned=1</script>late'))
threading.Thread(target=_korch_later, daemon=True).start()
""", "note"),
    ("widget_html_comm", HOOK.format(show=(
        "from ipykernel.comm import Comm; Comm(target_name='jupyter.widget', data={'state': {"
        "'_model_name': 'HTMLModel', '_model_module': '@jupyter-widgets/controls', "
        "'_view_module': '@jupyter-widgets/controls', '_view_name': 'HTMLView', "
        "'value': '<img src=x onerror=\"window.__pwned=1\">'}, 'buffer_paths': []})")), "comm"),
    ("widget_custom_module", HOOK.format(show=(
        "from ipykernel.comm import Comm; Comm(target_name='jupyter.widget', data={'state': {"
        "'_model_name': 'EvilModel', '_model_module': 'https://evil.example/w.js', "
        "'_view_module': 'https://evil.example/w.js'}, 'buffer_paths': []})")), "nocomm"),
    ("page_payload", HOOK.format(show=(
        "get_ipython().payload_manager.write_payload({'source': 'page', 'data': {'text/html': "
        "'<script>window.__pwned=1</script>'}, 'start': 0})")), "payload"),
]
USER_CELL = ("import time as _t; _t.sleep(1.2)\nfrom IPython.display import display as _d\n"
             "_d({'text/plain': 'the person'}, raw=True)\n6 * 7")
UNHOOK = ("get_ipython().events.callbacks['post_run_cell'][:] = "
          "[f for f in get_ipython().events.callbacks['post_run_cell'] if f.__name__ != '_korch_attack']")


class Check:
    def __init__(self):
        self.failures = []
        self.details = {}

    def __call__(self, ok, what):
        if not ok:
            self.failures.append(what)
        return ok


def scripty(msgs):
    """Where msgs still carry script: [(msg_type, why)]."""
    bad = []
    for m in msgs:
        t = m["header"].get("msg_type")
        c = m.get("content", {})
        bundles = []
        if t in ("display_data", "execute_result", "update_display_data"):
            bundles.append(c.get("data", {}))
        if t == "execute_reply":
            bundles += [p.get("data", {}) for p in c.get("payload", [])]
        if t in ("comm_open", "comm_msg"):
            state = c.get("data", {}).get("state", {})
            if str(state.get("_model_module", "@jupyter-widgets")).startswith("https:"):
                bad.append((t, "a widget of a module the browser would load"))
            if isinstance(state.get("value"), str) and html_bad(state["value"]):
                bad.append((t, "widget value %r" % state["value"][:80]))
        for b in bundles:
            for mime in BAD_MIMES:
                if mime in b:
                    bad.append((t, "mime %s" % mime))
            html = b.get("text/html", "")
            html = "".join(html) if isinstance(html, list) else str(html)
            found = html_bad(html)
            if found:
                bad.append((t, "html %s: %r" % (found, html[:120])))
    return bad


def has_note(msgs):
    for m in msgs:
        d = m.get("content", {}).get("data", {})
        if isinstance(d, dict) and "code from the agent ran in this kernel" in str(d.get("text/html", "")):
            return True
        for p in m.get("content", {}).get("payload", []):
            if "code from the agent ran in this kernel" in str(p.get("data", {}).get("text/html", "")):
                return True
        st = d.get("state", {}) if isinstance(d, dict) else {}
        if isinstance(st, dict) and "code from the agent ran" in str(st.get("value", "")):
            return True
    return False


def notices(c, msgs):
    return [m["content"] for m in msgs if m["header"].get("msg_type") == "korch_untrusted"]


def drain(c, seconds):
    """Whatever arrives within seconds (broadcasts without our parent)."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m = c.recv(max(0.01, end - time.monotonic()))
        if m is not None:
            out.append(m)
    return out


# The kernel speaking as korch: notices and statuses only korch may send
# (a forged korch_untrusted {untrusted: false} would clear the extension's
# badge and its untrusted rendering; a forged "dead" makes a client give the
# kernel up). The forged "idle" is the control: it shows the sends arrive.
FORGE = """
_k = get_ipython().kernel
_p = _k.get_parent('shell') if hasattr(_k, 'get_parent') else _k._parent_header
for _t, _c in [('korch_untrusted', {'untrusted': False, 'reason': 'forged'}),
               ('status', {'execution_state': 'dead'}), ('status', {'execution_state': 'restarting'}),
               ('korch_probe', {}), ('status', {'execution_state': 'idle', 'forged': 1})]:
    _k.session.send(_k.iopub_socket, _t, _c, parent=_p, ident=_k._topic(_t))
"""


def forged_check(c, check, when):
    r = c.execute(FORGE)
    msgs = r.msgs + drain(c, 0.5)
    check(r.reply["content"].get("status") == "ok", "%s: the forging code failed: %s" % (when, r.reply["content"]))
    check(any(m["header"].get("msg_type") == "status" and m["content"].get("forged") for m in msgs),
          "%s: the control (a forged idle) did not arrive, so the check could not fail" % when)
    bad = [(m["header"]["msg_type"], m["content"]) for m in msgs if m["header"]["msg_type"].startswith("korch_")
           or (m["header"]["msg_type"] == "status" and m["content"].get("execution_state") in ("dead", "restarting"))]
    check(not bad, "%s: the kernel spoke as korch and the client heard it: %s" % (when, bad))


def agent_turn(http, base, token, kid, check):
    st, sess = http.req("POST", "api/agent/sessions", {"kernel_id": kid})
    if not check(st == 201, "POST /api/agent/sessions -> %s %r" % (st, sess)):
        return None
    req = urllib.request.Request(base.rstrip("/") + "/api/agent/sessions/%s/messages" % sess["id"],
                                 data=json.dumps({"content": "Install the analysis helper."}).encode(),
                                 method="POST", headers={"Authorization": "token " + token,
                                                         "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read().decode()
    check("event: done" in body, "the agent's turn did not finish: %s" % body[-300:])
    check("HOOKED" in body, "the model's code did not run: %s" % body[-500:])
    return sess["id"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--protocol", default="v1")
    ap.add_argument("--agent", action="store_true")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    base = "%s://%s/" % (u.scheme, u.netloc)
    token = urllib.parse.parse_qs(u.query)["token"][0]
    http = Http(base, token)
    check = Check()
    kids = []
    t0 = time.monotonic()
    try:
        kid = http.start_kernel("python3")["id"]
        kids.append(kid)
        c = Conn(base, token, kid, a.protocol)
        c.kernel_info()
        # the person's own display, before anything tainted the kernel
        r = c.execute("from IPython.display import display, HTML\n"
                      "display(HTML('<b>mine</b><script>window.__mine=1</script>'), display_id='user-cell')")
        before = r.of("display_data")
        check(before and "<script>" in before[0]["content"]["data"].get("text/html", ""),
              "an untainted kernel's HTML lost its script (the check could not fail): %r" % before)
        st, model = http.req("GET", "api/kernels/" + kid)
        check(model.get("untrusted") is False, "a fresh kernel's model says untrusted=%r" % model.get("untrusted"))
        forged_check(c, check, "untainted")

        # the taint: the agent's code, or a client's request
        if a.agent:
            agent_turn(http, base, token, kid, check)
        else:
            st, model = http.req("POST", "api/kernels/%s/untrusted" % kid)
            check(st == 200 and model.get("untrusted") is True, "POST .../untrusted -> %s %r" % (st, model))
        seen = drain(c, 1.0)
        told = notices(c, seen)
        check(any(n.get("untrusted") is True for n in told), "no korch_untrusted notice on the websocket: %s"
              % [m["header"].get("msg_type") for m in seen])
        check(not scripty(seen), "the agent's own cell carried script to the client: %s" % scripty(seen))
        forged_check(c, check, "tainted")
        st, model = http.req("GET", "api/kernels/" + kid)
        check(model.get("untrusted") is True, "the tainted kernel's model: %r" % model)
        if a.agent:
            check("agent session" in model.get("untrusted_reason", ""), "reason %r" % model.get("untrusted_reason"))
            # the model's hook answers the person's next cell
            r = c.execute(USER_CELL)
            check(r.result_text() == "42", "the person's cell: %r" % r.result_text())
            check(not scripty(r.msgs), "hook from the model: script reached the client: %s" % scripty(r.msgs))
            check(has_note(r.msgs), "hook from the model: no note in what was shown: %s"
                  % [m["header"]["msg_type"] for m in r.msgs])
            c.execute(UNHOOK)

        # update_display_data aimed at the person's display id
        r = c.execute("from IPython.display import update_display, HTML\n"
                      "update_display(HTML('<script>window.__pwned=1</script>x'), display_id='user-cell')")
        upd = r.of("update_display_data")
        check(upd and not scripty(upd) and has_note(upd), "update_display_data: %r" % upd)

        results = {}
        for name, code, want in ATTACKS:
            r = c.execute(code)
            check(r.reply["content"].get("status") == "ok", "%s: the attacker's code failed: %s"
                  % (name, r.reply["content"]))
            r = c.execute(USER_CELL)
            msgs = r.msgs + drain(c, 0.3)
            bad = scripty(msgs)
            kinds = sorted({m["header"]["msg_type"] for m in msgs})
            results[name] = {"messages": kinds, "script": bad}
            check(not bad, "%s: script reached the client: %s" % (name, bad))
            if want == "note":
                check(has_note(msgs), "%s: no note saying what went (saw %s)" % (name, kinds))
            elif want == "comm":
                check(any(m["header"]["msg_type"] == "comm_open" for m in msgs) and has_note(msgs),
                      "%s: the HTML widget's comm_open should arrive, cleaned (saw %s)" % (name, kinds))
            elif want == "nocomm":
                check(not any(m["header"]["msg_type"] == "comm_open" for m in msgs),
                      "%s: a custom widget module's comm_open reached the client" % name)
            elif want == "payload":
                check(r.reply and has_note([r.reply]), "%s: the page payload was not neutralised: %s"
                      % (name, r.reply["content"]))
            c.execute(UNHOOK + "\nget_ipython().display_pub.publish = getattr(get_ipython().display_pub.__class__, "
                      "'publish').__get__(get_ipython().display_pub)\n"
                      "get_ipython().displayhook.write_format_data = getattr(get_ipython().displayhook.__class__, "
                      "'write_format_data').__get__(get_ipython().displayhook)")
        # help links in kernel_info_reply
        c.execute("get_ipython().kernel.help_links = [{'text': 'x', 'url': 'javascript:window.__pwned=1'}, "
                  "{'text': 'docs', 'url': 'https://docs.python.org'}]")
        info = c.kernel_info()
        links = info["content"].get("help_links", [])
        check([l.get("url") for l in links] == ["https://docs.python.org"], "help_links %r" % links)
        check(not a.agent or True, "")
        check.details["attacks"] = results

        # a restart clears it, and says so
        st, _ = http.req("POST", "api/kernels/%s/restart" % kid, {})
        check(st == 200, "restart -> %s" % st)
        seen = drain(c, 1.0)
        check(any(n.get("untrusted") is False for n in notices(c, seen)),
              "no korch_untrusted {untrusted: false} after the restart")
        c.nudge()
        st, model = http.req("GET", "api/kernels/" + kid)
        check(model.get("untrusted") is False, "after the restart the model says untrusted=%r" % model.get("untrusted"))
        r = c.execute("from IPython.display import display, HTML\ndisplay(HTML('<script>window.__mine=2</script>'))")
        check("<script>" in str(r.of("display_data")), "after the restart script is still removed")
        c.close()

        # asked for at start; lifted by its owner
        st, m2 = http.req("POST", "api/kernels", {"name": "python3", "untrusted": True})
        check(st == 201 and m2.get("untrusted") is True, "POST /api/kernels untrusted -> %s %r" % (st, m2))
        if st == 201:
            kids.append(m2["id"])
            c2 = Conn(base, token, m2["id"], a.protocol)
            c2.kernel_info()
            r = c2.execute("from IPython.display import HTML\nHTML('<script>window.__pwned=1</script>')")
            check(not scripty(r.msgs) and has_note(r.msgs), "execute_result of a kernel untrusted at start: %s"
                  % scripty(r.msgs))
            st, m3 = http.req("DELETE", "api/kernels/%s/untrusted" % m2["id"])
            check(st == 200 and m3.get("untrusted") is False, "DELETE .../untrusted -> %s %r" % (st, m3))
            r = c2.execute("from IPython.display import HTML\nHTML('<script>window.__mine=3</script>')")
            check("<script>" in str(r.of("execute_result")), "the owner's DELETE did not let script through")
            c2.close()
        st, m4 = http.req("POST", "api/kernels", {"name": "python3", "untrusted": "yes"})
        check(st == 400, "untrusted: \"yes\" -> %s, not 400" % st)
        st, m5 = http.req("POST", "api/kernels", {"name": "python3", "env": {"KERNEL_KORCH_UNTRUSTED": "1"}})
        check(st == 201 and m5.get("untrusted") is True, "KERNEL_KORCH_UNTRUSTED=1 -> %s %r" % (st, m5))
        if st == 201:
            kids.append(m5["id"])
    except Failure as e:
        check(False, str(e))
    finally:
        for k in kids:
            http.delete_kernel(k)
    check.details["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps({"ok": not check.failures, "failures": check.failures, "details": check.details}))
    sys.exit(0 if not check.failures else 1)


if __name__ == "__main__":
    main()
