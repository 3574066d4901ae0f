"""Server-sent events as korch serve's agent API streams them (a turn's
POST .../messages, GET .../events): one reader for the peers that follow a
turn (agent_api_client.py, branch_api_client.py, resume_peer.py)."""
import json


def read_event(resp):
    """The next event of resp (an http.client response): (name, data parsed
    as JSON, id or None), or None at the end of the stream. Comments
    (":...") and blank lines between events are passed over."""
    name, data, eid = None, [], None
    while True:
        line = resp.readline()
        if not line:
            return None
        line = line.decode().rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line == "":
            if name is None:
                continue
            return name, json.loads("\n".join(data)), eid
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "id":
            eid = int(value)
        elif field == "data":
            data.append(value)
