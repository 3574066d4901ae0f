#!/usr/bin/env python3
"""docs/api.md's route table, generated from the one route table (src/server/routes.c).

    scripts/gen-api-doc.py            rewrite the table in docs/api.md
    scripts/gen-api-doc.py --check    exit 1 (and say so) when docs/api.md is stale
    scripts/gen-api-doc.py --json     the routes as parsed, one JSON array (the test
                                      tests/test_routes.c compares it with srv_routes_json)

The table's rows are C initializers, one route each:
    {"METHOD", "/path/{param}", handler, TOKEN|OPEN, NONE|JSON|UPLOAD, websocket, "summary"},
(the summary may continue on the next lines as adjacent string literals). The
generated part of docs/api.md lies between the lines '<!-- routes: generated -->'
and '<!-- end routes -->'; the rest of the file is written by hand.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTES = os.path.join(ROOT, "src", "server", "routes.c")
DOC = os.path.join(ROOT, "docs", "api.md")
BEGIN, END = "<!-- routes: generated -->", "<!-- end routes -->"

ROW = re.compile(r'\{\s*"([A-Z]+)",\s*"([^"]+)",\s*(\w+),\s*(TOKEN|OPEN),\s*(NONE|JSON|UPLOAD),\s*(true|false),\s*'
                 r'((?:"(?:[^"\\]|\\.)*"\s*)+)\}', re.S)


def routes():
    text = open(ROUTES).read()
    m = re.search(r"static const srv_route_t s_table\[\] = \{(.*?)\n\};", text, re.S)
    if not m:
        sys.exit("gen-api-doc: no 's_table' in %s" % ROUTES)
    table = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    out = []
    for r in ROW.finditer(table):
        summary = "".join(json.loads(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', r.group(7)))
        out.append({"method": r.group(1), "path": r.group(2).replace("*}", "}"), "pattern": r.group(2),
                    "summary": summary, "auth": "none" if r.group(4) == "OPEN" else "token",
                    "body": r.group(5).lower(), "websocket": r.group(6) == "true"})
    rows = len(re.findall(r'^\s*\{"[A-Z]+",', table, re.M))
    if rows != len(out):
        sys.exit("gen-api-doc: parsed %d of the %d routes of %s (a row this script does not read?)"
                 % (len(out), rows, ROUTES))
    return out


def table(rs):
    body = {"none": "", "json": "JSON (`--max-body`)", "upload": "upload (`--max-upload`, spooled)"}
    lines = [BEGIN,
             "<!-- written by scripts/gen-api-doc.py from src/server/routes.c: edit the table there -->",
             "",
             "| method | path | token | body | what it does |",
             "|---|---|---|---|---|"]
    for r in rs:
        what = r["summary"]
        lines.append("| %s | `%s` | %s | %s | %s |" % (r["method"], r["pattern"], "yes" if r["auth"] == "token" else "no",
                                                      "websocket" if r["websocket"] else body[r["body"]], what.replace("|", "\\|")))
    lines.append("")
    lines.append(END)
    return "\n".join(lines)


def main():
    rs = routes()
    if "--json" in sys.argv[1:]:
        print(json.dumps([{k: v for k, v in r.items() if k != "pattern"} for r in rs]))
        return 0
    doc = open(DOC).read()
    a, b = doc.find(BEGIN), doc.find(END)
    if a < 0 or b < a:
        sys.exit("gen-api-doc: %s has no '%s' ... '%s' lines to put the table between" % (DOC, BEGIN, END))
    new = doc[:a] + table(rs) + doc[b + len(END):]
    if "--check" in sys.argv[1:]:
        if new != doc:
            print("gen-api-doc: docs/api.md's route table is not the one of src/server/routes.c "
                  "(run scripts/gen-api-doc.py)", file=sys.stderr)
            return 1
        return 0
    if new != doc:
        with open(DOC, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
