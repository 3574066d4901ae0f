"""docs/events.schema.json, the one schema of korch's agent events and
transcript records, as a checker for the tests (python3-jsonschema):

    events_schema.py cli FILE          korch run --json's lines
    events_schema.py transcript FILE   a session's transcript.jsonl

prints {"events": N, "kinds": {...}, "errors": [...], "last": NAME} and
exits 1 when an event does not match or the stream does not end in done.
agent_api_client.py checks every server-sent event with check_event."""
import json
import os
import sys

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "events.schema.json")
_V = {}


def _validator(what):
    if what not in _V:
        schema = json.load(open(SCHEMA_PATH))
        jsonschema.Draft202012Validator.check_schema(schema)
        _V[what] = jsonschema.Draft202012Validator({"$ref": "#/$defs/" + what, "$defs": schema["$defs"]})
    return _V[what]


def _errors(what, obj):
    errs = sorted(_validator(what).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if not errs:
        return None
    # oneOf: say the branch of the event's own kind when there is one
    best = jsonschema.exceptions.best_match(errs)
    return "%s: %s (at %s)" % (json.dumps(obj)[:300], best.message[:300], "/".join(map(str, best.absolute_path)))


def check_event(name, data):
    """None, or what is wrong with the event NAME (its SSE event: line) with data."""
    if not isinstance(data, dict) or data.get("event") != name:
        return "event %r: data.event is %r" % (name, isinstance(data, dict) and data.get("event"))
    return _errors("event", data)


def check_record(rec):
    return _errors("record", rec)


def main():
    what, path = sys.argv[1], sys.argv[2]
    kinds, errors, last, n = {}, [], None, 0
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        obj = json.loads(line)
        n += 1
        if what == "cli":
            last = obj.get("event")
            kinds[last] = kinds.get(last, 0) + 1
            e = check_event(last, obj)
        else:
            kinds[obj.get("type")] = kinds.get(obj.get("type"), 0) + 1
            e = check_record(obj)
        if e:
            errors.append(e)
    if what == "cli" and last != "done":
        errors.append("the stream ends with %r, not done" % last)
    print(json.dumps({"events": n, "kinds": kinds, "errors": errors[:20], "last": last}))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
