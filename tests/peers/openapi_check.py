#!/usr/bin/env python3
"""Check src/server/openapi.yaml: valid OpenAPI 3.0, complete, and true.

    openapi_check.py KORCH_BINARY ROUTES_JSON

ROUTES_JSON is the server's route table as the router reads it
(srv_routes_json in src/server/routes.c, written by tests/test_openapi.c):
[{method, path, summary, auth, body, websocket}].

1. Valid: the document is validated against the OpenAPI Initiative's JSON
   Schema for 3.0 (Debian's openapi-specification package, validated with
   python3-jsonschema), and the validator is shown to reject broken copies
   of it. Then what the JSON Schema cannot say: every $ref resolves, every
   {param} of a path is declared as a required path parameter and every
   declared one is in the path, operationIds are unique.
2. Complete, both ways: every route of the router's table is an operation
   of the document and every operation is a route of the table, with the
   same path (parameter names too), the same summary, the same
   authentication (open routes are `security: []`), and the websocket route
   is the operation that answers 101.
3. True: a real `korch serve` (local launcher, a real ipykernel) is sent one
   request per operation of the document (with a real kernel and session
   where the path names one), and one without the token; each answer's
   status must be one the document lists for that operation, error bodies
   must be {"message"}, and 2xx JSON bodies must match the documented
   schema (OpenAPI's nullable turned into JSON Schema's type lists). Every
   path is also sent a method it does not document (and HEAD): 405 with an
   Allow header that names exactly the documented methods.

Prints one line per finding and exits 1 if there is any; prints "ok" else.
"""
import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "src/server/openapi.yaml")
OAS_SCHEMA = "/usr/share/openapi-specification/schemas/v3.0/schema.json"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

problems = []


def problem(msg):
    problems.append(msg)
    print("openapi_check: " + msg, file=sys.stderr)


# ---------------------------------------------------------------- 1. valid

def validate(doc):
    with open(OAS_SCHEMA) as f:
        schema = json.load(f)
    validator = jsonschema.Draft4Validator(schema)
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
        problem("invalid at %s: %s" % ("/".join(map(str, e.path)), e.message[:300]))
    # the validator is not vacuous: it rejects broken copies
    broken = copy.deepcopy(doc)
    del broken["paths"]["/api"]["get"]["responses"]["200"]["description"]
    if validator.is_valid(broken):
        problem("the validator accepted a response without a description")
    broken = copy.deepcopy(doc)
    broken["paths"]["/api"]["get"]["parameters"] = [{"name": "x", "in": "nowhere"}]
    if validator.is_valid(broken):
        problem("the validator accepted a parameter 'in: nowhere'")
    broken = copy.deepcopy(doc)
    broken["openapi"] = "2.0"
    if validator.is_valid(broken):
        problem("the validator accepted openapi: 2.0")


def resolve(doc, ref):
    if not ref.startswith("#/"):
        return None
    node = doc
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_refs(doc, node, where="#"):
    if isinstance(node, dict):
        if "$ref" in node and resolve(doc, node["$ref"]) is None:
            problem("unresolved $ref %s at %s" % (node["$ref"], where))
        for k, v in node.items():
            check_refs(doc, v, where + "/" + str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_refs(doc, v, "%s/%d" % (where, i))


def params_of(doc, item, op):
    out = []
    for p in (item.get("parameters", []) + op.get("parameters", [])):
        if "$ref" in p:
            p = resolve(doc, p["$ref"]) or {}
        out.append(p)
    return out


def check_semantics(doc):
    check_refs(doc, doc)
    seen = set()
    for path, item in doc["paths"].items():
        names = set(re.findall(r"\{([^}]+)\}", path))
        for method in METHODS:
            op = item.get(method)
            if not op:
                continue
            oid = op.get("operationId")
            if not oid:
                problem("%s %s has no operationId" % (method.upper(), path))
            elif oid in seen:
                problem("operationId %s is used twice" % oid)
            seen.add(oid)
            declared = {p["name"] for p in params_of(doc, item, op) if p.get("in") == "path"}
            for p in params_of(doc, item, op):
                if p.get("in") == "path" and not p.get("required"):
                    problem("%s %s: path parameter %s is not required" % (method.upper(), path, p["name"]))
            if declared != names:
                problem("%s %s: path parameters %s declared, %s in the path"
                        % (method.upper(), path, sorted(declared), sorted(names)))
            if not op.get("responses"):
                problem("%s %s has no responses" % (method.upper(), path))


# ------------------------------------------------------------- 2. complete

def effective_security(doc, op):
    return op.get("security", doc.get("security"))


def check_complete(doc, routes):
    if len(routes) < 30:
        problem("only %d routes in the router's table: is it the right file?" % len(routes))
    table = {}
    for r in routes:
        key = (r["method"].lower(), r["path"])
        if key in table:
            problem("%s %s is in the route table twice" % (r["method"], r["path"]))
        table[key] = r
    ops = {(m, p): op for p, item in doc["paths"].items() for m, op in item.items() if m in METHODS}
    for method, path in sorted(set(table) - set(ops)):
        problem("%s %s is routed (src/server/routes.c) but not documented" % (method.upper(), path))
    for method, path in sorted(set(ops) - set(table)):
        problem("%s %s is documented but the router has no such route" % (method.upper(), path))
    for key in sorted(set(table) & set(ops)):
        r, op = table[key], ops[key]
        where = "%s %s" % (key[0].upper(), key[1])
        if r["summary"] != op.get("summary"):
            problem("%s: the route table's summary %r is not the document's %r" % (where, r["summary"],
                                                                                  op.get("summary")))
        open_doc = effective_security(doc, op) == []
        if open_doc != (r["auth"] == "none"):
            problem("%s: the route's auth is %s but the document says it is %s"
                    % (where, r["auth"], "open" if open_doc else "behind the token"))
        if r["websocket"] != ("101" in op.get("responses", {})):
            problem("%s: websocket %s in the route table, 101 %s in the document"
                    % (where, r["websocket"], "listed" if "101" in op.get("responses", {}) else "not listed"))
        if r["body"] == "upload" and "requestBody" not in op:
            problem("%s: an upload route without a documented requestBody" % where)


# ----------------------------------------------------------------- 3. true

def to_json_schema(node):
    """OpenAPI 3.0 schema object -> JSON Schema (nullable -> type list)."""
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    return out


def request(base, method, path, token, body=None, ctype="application/json", timeout=90, headers_out=None):
    data = None
    headers = {}
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = ctype
    if token:
        headers["Authorization"] = "token " + token
    req = urllib.request.Request(base + path, data=data, method=method.upper(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if headers_out is not None:
                headers_out.update(r.headers.items())
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        if headers_out is not None:
            headers_out.update(e.headers.items())
        return e.code, e.headers.get("Content-Type", ""), e.read()


def check_answer(doc, method, path, op, status, ctype, body, what):
    responses = op["responses"]
    if str(status) not in responses:
        problem("%s %s (%s) answered %d, not among the documented %s: %s"
                % (method.upper(), path, what, status, sorted(responses), body[:200]))
        return
    resp = responses[str(status)]
    if "$ref" in resp:
        resp = resolve(doc, resp["$ref"])
    if not ctype.startswith("application/json") or not body:
        return
    try:
        value = json.loads(body)
    except ValueError:
        problem("%s %s (%s): %d with a body that is not JSON" % (method.upper(), path, what, status))
        return
    if status >= 400 and not isinstance(value.get("message") if isinstance(value, dict) else None, str):
        problem("%s %s (%s): error %d without a message: %s" % (method.upper(), path, what, status, body[:200]))
    schema = resp.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        if status < 300:
            problem("%s %s (%s): %d JSON but no JSON schema documented" % (method.upper(), path, what, status))
        return
    full = to_json_schema(doc)
    resolver = jsonschema.RefResolver("", full)
    try:
        jsonschema.Draft4Validator(to_json_schema(schema), resolver=resolver).validate(value)
    except jsonschema.ValidationError as e:
        problem("%s %s (%s): %d body does not match its schema: %s at %s"
                % (method.upper(), path, what, status, e.message[:200], "/".join(map(str, e.path))))


def start_server(korch):
    env = dict(os.environ)
    env.pop("KORCH_LLM", None)
    p = subprocess.Popen([korch, "serve", "--port", "0", "--launcher", "local", "--no-access-log"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    line = p.stdout.readline().strip()
    m = re.match(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
    if not m:
        p.kill()
        raise SystemExit("openapi_check: korch serve said %r" % line)
    return p, m.group(1), m.group(2)


def check_true(doc, korch):
    proc, base, token = start_server(korch)
    try:
        st, _, b = request(base, "post", "/api/kernels", token, {"name": "python3"})
        if st != 201:
            raise SystemExit("openapi_check: cannot start a kernel: %d %s" % (st, b[:200]))
        kid = json.loads(b)["id"]
        st, _, b = request(base, "post", "/api/sessions", token,
                           {"path": "check.ipynb", "type": "notebook", "kernel": {"id": kid}})
        if st != 201:
            raise SystemExit("openapi_check: cannot create a session: %d %s" % (st, b[:200]))
        sid = json.loads(b)["id"]
        nobody = str(uuid.uuid4())
        values = {"kernel_id": kid, "session_id": sid, "kernel_name": "python3", "path": "data/a.csv",
                  "name": "fig-1.png", "file": "logo-64x64.png"}
        bodies = {
            "startKernel": {"name": "python3"},
            "createSession": {"path": "second.ipynb", "type": "notebook", "kernel": {"id": kid}},
            "updateSession": {"name": "renamed"},
            "createAgentSession": {"kernel_name": "python3"},
            "askAgent": {"content": "What is 6*7?"},
            "putAgentFile": b"a,b\n1,2\n",
        }
        # destructive ones last
        last = ["deleteSession", "shutdownKernel"]
        ops = []
        for path, item in doc["paths"].items():
            for method in METHODS:
                if method in item:
                    ops.append((item[method].get("operationId"), method, path, item[method]))
        ops.sort(key=lambda o: last.index(o[0]) if o[0] in last else -1)
        started = []
        for oid, method, path, op in ops:
            sub = dict(values)
            if path.startswith("/api/agent/sessions/"):
                sub["session_id"] = nobody  # no LLM here: no agent session to name
            url = re.sub(r"\{([^}]+)\}", lambda m: sub[m.group(1)], path)
            body = bodies.get(oid)
            ctype = "application/octet-stream" if isinstance(body, bytes) else "application/json"
            # without the token first (but for the open GET /api)
            if op.get("security", doc.get("security")):
                st, ct, b = request(base, method, url, None, body, ctype)
                if st != 403:
                    problem("%s %s without the token answered %d, not 403" % (method.upper(), path, st))
                check_answer(doc, method, path, op, st, ct, b, "no token")
            st, ct, b = request(base, method, url, token, body, ctype)
            check_answer(doc, method, path, op, st, ct, b, "with the token")
            if oid == "startKernel" and st == 201:
                started.append(json.loads(b)["id"])
        for k in started:
            request(base, "delete", "/api/kernels/" + k, token)
        # every path: a method it does not document is 405, Allow naming those it does
        order = ["get", "post", "put", "patch", "delete"]
        for path, item in doc["paths"].items():
            documented = [m for m in order if m in item]
            url = re.sub(r"\{([^}]+)\}", lambda m: values[m.group(1)], path)
            for method in [m for m in order if m not in item][:1] + ["head"]:
                hdrs = {}
                st, ct, b = request(base, method, url, token, headers_out=hdrs)
                allow = {k.lower(): v for k, v in hdrs.items()}.get("allow")
                if st != 405 or allow != ", ".join(m.upper() for m in documented):
                    problem("%s %s answered %d with Allow %r, not 405 with %r"
                            % (method.upper(), path, st, allow, ", ".join(m.upper() for m in documented)))
                elif method != "head" and (not ct.startswith("application/json") or b"message" not in b):
                    problem("%s %s: 405 without a JSON message: %r" % (method.upper(), path, b[:200]))
        # a method a route does not serve, and an unknown route
        st, ct, b = request(base, "put", "/api/kernels", token, {})
        if st != 405:
            problem("PUT /api/kernels answered %d, not 405" % st)
        st, ct, b = request(base, "get", "/api/nothing", token)
        if st != 404:
            problem("GET /api/nothing answered %d, not 404" % st)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(DOC) as f:
        doc = yaml.safe_load(f)
    with open(sys.argv[2]) as f:
        routes = json.load(f)
    validate(doc)
    check_semantics(doc)
    check_complete(doc, routes)
    n = sum(1 for item in doc["paths"].values() for m in METHODS if m in item)
    check_true(doc, sys.argv[1])
    if problems:
        print("openapi_check: %d problem(s)" % len(problems), file=sys.stderr)
        sys.exit(1)
    print("ok: %d paths, %d operations, valid OpenAPI %s, the same as the router's %d routes, every one "
          "answered as documented" % (len(doc["paths"]), n, doc["openapi"], len(routes)))


if __name__ == "__main__":
    main()
