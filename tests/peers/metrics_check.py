#!/usr/bin/python3
"""GET /metrics of korch serve, read by the reference parser
(prometheus_client.parser.text_string_to_metric_families, Debian's
python3-prometheus-client) before and after real work: a kernel started over
REST, executions and a malformed message over a real websocket
(ws_client.Conn), a kernel whose launch fails. Prints one JSON line:

    {"scenario": "metrics", "ok": true|false, "failures": [...], "details": {...}}

    metrics_check.py --url 'http://127.0.0.1:PORT/?token=T' [--broken-kernel NAME]
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_client as wc  # noqa: E402

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# family name (as the parser reports it) -> type
FAMILIES = {
    "korch_kernels": "gauge",
    "korch_executions": "counter",
    "korch_ws_messages_sent": "counter",
    "korch_ws_messages_received": "counter",
    "korch_ws_messages_malformed": "counter",
    "korch_websockets_open": "gauge",
    "korch_ws_slow_clients_dropped": "counter",
    "korch_kernel_messages_rejected": "counter",
    "korch_http_requests": "counter",
    "korch_kernel_launches": "counter",
    "korch_kernel_launch_seconds": "histogram",
}
REJECT_REASONS = ["no_delimiter", "short", "unsigned", "bad_signature", "duplicate", "too_big", "bad_json",
                  "bad_header"]


class Check:
    def __init__(self):
        self.failures = []
        self.details = {}

    def __call__(self, cond, msg):
        if not cond:
            self.failures.append(msg)
        return cond


def fetch(base, token, path="metrics"):
    h = {"Authorization": "token " + token} if token else {}
    r = urllib.request.Request(base + path, headers=h)
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode("utf-8", "replace")


def scrape(x, base, token, what):
    """{(sample name, frozenset(labels)): value} and the families' types."""
    st, ctype, text = fetch(base, token)
    x(st == 200, "%s: GET /metrics -> %s" % (what, st))
    x(ctype == CONTENT_TYPE, "%s: Content-Type %r, expected %r" % (what, ctype, CONTENT_TYPE))
    x(text.endswith("\n"), "%s: the exposition does not end with a line feed" % what)
    samples, types, helps = {}, {}, {}
    try:
        for fam in text_string_to_metric_families(text):
            types[fam.name] = fam.type
            helps[fam.name] = fam.documentation
            for s in fam.samples:
                key = (s.name, frozenset(s.labels.items()))
                x(key not in samples, "%s: sample %s%s twice" % (what, s.name, dict(s.labels)))
                samples[key] = s.value
    except Exception as e:  # noqa: BLE001 - the parser's verdict is the point
        x(False, "%s: prometheus_client cannot parse it: %s: %s" % (what, type(e).__name__, e))
    for name, typ in FAMILIES.items():
        if x(name in types, "%s: no %s family (got %s)" % (what, name, sorted(types))):
            x(types[name] == typ, "%s: %s is a %s, expected %s" % (what, name, types[name], typ))
            x(bool(helps.get(name)), "%s: %s has no HELP text" % (what, name))
    return samples


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def check_histogram(x, s, what):
    les = ["0.05", "0.1", "0.25", "0.5", "1", "2", "5", "10", "30", "+Inf"]
    got = [val(s, "korch_kernel_launch_seconds_bucket", le=le) for le in les]
    if not x(None not in got, "%s: launch histogram buckets missing: %s" % (what, dict(zip(les, got)))):
        return
    x(all(a <= b for a, b in zip(got, got[1:])), "%s: buckets not cumulative: %s" % (what, got))
    x(got[-1] == val(s, "korch_kernel_launch_seconds_count"),
      "%s: +Inf bucket %s != count %s" % (what, got[-1], val(s, "korch_kernel_launch_seconds_count")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--broken-kernel", help="a kernelspec whose process exits at once")
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url.strip())
    token = (urllib.parse.parse_qs(u.query).get("token") or [""])[0]
    base = "%s://%s/" % (u.scheme, u.netloc)
    x = Check()
    t0 = time.monotonic()
    kid = None
    try:
        st, _, _ = fetch(base, "")
        x(st == 403, "GET /metrics without the token -> %s, expected 403" % st)
        st, _, _ = fetch(base, "wrong-token")
        x(st == 403, "GET /metrics with a wrong token -> %s, expected 403" % st)
        s0 = scrape(x, base, token, "at start")
        x(val(s0, "korch_kernels", state="idle") == 0, "at start: idle kernels %s" % val(s0, "korch_kernels", state="idle"))
        for r in REJECT_REASONS:
            x(val(s0, "korch_kernel_messages_rejected_total", reason=r) == 0,
              "at start: rejected{reason=%s} = %s" % (r, val(s0, "korch_kernel_messages_rejected_total", reason=r)))
        x(val(s0, "korch_http_requests_total", code="4xx") >= 2,
          "the two 403s are not counted: 4xx = %s" % val(s0, "korch_http_requests_total", code="4xx"))
        check_histogram(x, s0, "at start")

        # work: a kernel over REST, executions and a malformed message over a websocket
        h = wc.Http(base, token)
        kid = h.start_kernel("python3")["id"]
        c = wc.Conn(base, token, kid, "v1")
        c.kernel_info(60)
        for code in ("1+1", "print('metrics')", "x = 3"):
            r = c.execute(code, 60)
            x(r.done(), "execute %r did not finish" % code)
        c.ws.send_binary(b"\x01\x00\x00\x00\x00\x00\x00\x00garbage")
        mid = c.send("kernel_info_request", {})  # after the garbage: the relay goes on
        c.collect(lambda m: m["parent_header"].get("msg_id") == mid and m["header"].get("msg_type") == "status"
                  and m["content"].get("execution_state") == "idle", 30, "kernel_info's idle after the garbage")
        s1 = scrape(x, base, token, "with a kernel and a websocket")

        def grew(name, by, **labels):
            a0, a1 = val(s0, name, **labels), val(s1, name, **labels)
            x(a0 is not None and a1 is not None and a1 - a0 >= by,
              "%s%s went %s -> %s, expected +%s or more" % (name, labels or "", a0, a1, by))

        x(val(s1, "korch_kernels", state="idle") == 1 and val(s1, "korch_kernels", state="busy") == 0,
          "kernels by state: %s" % {st: val(s1, "korch_kernels", state=st)
                                    for st in ("starting", "idle", "busy", "restarting", "dead")})
        x(val(s1, "korch_executions_total") - val(s0, "korch_executions_total") == 3,
          "executions went %s -> %s, expected +3" % (val(s0, "korch_executions_total"), val(s1, "korch_executions_total")))
        grew("korch_ws_messages_sent_total", 12)       # kernel_info x2 + 3 x (busy, input, [out], reply, idle)
        grew("korch_ws_messages_received_total", 5)    # kernel_info x2 + 3 execute_request
        x(val(s1, "korch_ws_messages_malformed_total") - val(s0, "korch_ws_messages_malformed_total") == 1,
          "malformed went %s -> %s, expected +1" % (val(s0, "korch_ws_messages_malformed_total"),
                                                    val(s1, "korch_ws_messages_malformed_total")))
        x(val(s1, "korch_websockets_open") == 1, "websockets open: %s" % val(s1, "korch_websockets_open"))
        grew("korch_kernel_launches_total", 1, result="ok")
        grew("korch_kernel_launch_seconds_count", 1)
        x(val(s1, "korch_kernel_launch_seconds_sum") > val(s0, "korch_kernel_launch_seconds_sum"),
          "launch seconds sum did not grow")
        grew("korch_http_requests_total", 2, code="2xx")  # the POST's 201, the scrape's 200
        grew("korch_http_requests_total", 1, code="1xx")  # the websocket upgrade
        check_histogram(x, s1, "with a kernel")
        x.details["launch_seconds"] = round(val(s1, "korch_kernel_launch_seconds_sum")
                                            - val(s0, "korch_kernel_launch_seconds_sum"), 3)

        # a launch that fails
        if a.broken_kernel:
            st, body = h.req("POST", "api/kernels", {"name": a.broken_kernel})
            x(st == 500, "POST a kernel that exits at once -> %s %r, expected 500" % (st, body))
            s2 = scrape(x, base, token, "after a failed launch")
            f0 = val(s1, "korch_kernel_launches_total", result="failed")
            f1 = val(s2, "korch_kernel_launches_total", result="failed")
            x(f0 is not None and f1 == f0 + 1, "failed launches went %s -> %s, expected +1" % (f0, f1))
            x(val(s2, "korch_http_requests_total", code="5xx") >= val(s1, "korch_http_requests_total", code="5xx") + 1,
              "the 500 is not counted")

        # the websocket closes, the kernel goes
        c.close()
        x(h.delete_kernel(kid) == 204, "DELETE the kernel")
        kid = None
        deadline = time.monotonic() + 15
        while True:
            s3 = scrape(x, base, token, "at the end")
            if (val(s3, "korch_websockets_open") == 0 and val(s3, "korch_kernels", state="idle") == 0) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        x(val(s3, "korch_websockets_open") == 0, "websockets open after close: %s" % val(s3, "korch_websockets_open"))
        x(sum(val(s3, "korch_kernels", state=st) or 0 for st in ("starting", "idle", "busy", "restarting", "dead")) == 0,
          "kernels listed after DELETE")
        x(val(s3, "korch_executions_total") == val(s1, "korch_executions_total"),
          "executions is a counter: %s -> %s" % (val(s1, "korch_executions_total"), val(s3, "korch_executions_total")))
        x.details.update({"executions": val(s3, "korch_executions_total"),
                          "ws_sent": val(s3, "korch_ws_messages_sent_total"),
                          "http": {c_: val(s3, "korch_http_requests_total", code=c_)
                                   for c_ in ("1xx", "2xx", "3xx", "4xx", "5xx")}})
    except Exception as e:  # noqa: BLE001
        x(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if kid:
            wc.Http(base, token).delete_kernel(kid)
    res = {"scenario": "metrics", "ok": not x.failures, "failures": x.failures, "details": x.details,
           "seconds": round(time.monotonic() - t0, 2)}
    print(json.dumps(res), flush=True)
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
