"""LLM scenarios of a team's korch serve (issue 26), for llm_server.py.

ratelimited: "owner" behind a provider-wide budget of RATE requests a
second (a token bucket of BURST), as one API key's limit at a provider:
a request over it is answered 429 with retry-after-ms, the time until the
budget has room again (as OpenAI's x-ratelimit-reset-requests says it).
state["limited"] counts them, per tag's user ("TAG=alice_..." -> alice).

owner: the question names a tag ("TAG=alice_3"); the model runs code that
prints it with a number only the kernel computes, then answers quoting
what the kernel printed. So an answer that reaches its owner carries the
owner's tag, and one mixed up with another user's turn would not.
"""
import re

import llm_scenarios as ls


def owner(provider, req, state):
    user = ls.latest_user_text(provider, req)
    m = re.search(r"TAG=([A-Za-z0-9_]+)", user)
    tag = m.group(1) if m else "none"
    text, _ = ls.latest_tool_result(provider, req)
    if not ls.has_tools(provider, req):
        return {"text": "no tools were offered"}
    if not text or ("OUT=%s:" % tag) not in text:
        return {"tool_calls": [ls.run_python("print('OUT=%s:%%d' %% sum(range(%d)))" % (tag, len(tag) + 10))]}
    got = re.search(r"OUT=%s:(\d+)" % tag, text)
    return {"text": "ANSWER %s %s" % (tag, got.group(1) if got else "?")}


RATE, BURST = 4.0, 2.0


def ratelimited(provider, req, state):
    import time
    now = time.monotonic()
    room = min(BURST, state.get("room", BURST) + (now - state.get("at", now)) * RATE)
    state["at"] = now
    m = re.search(r"TAG=([A-Za-z0-9]+)_", ls.latest_user_text(provider, req))
    who = m.group(1) if m else "none"
    if room < 1.0:
        state["room"] = room
        lim = state.setdefault("limited", {})
        lim[who] = lim.get(who, 0) + 1
        return {"status": 429, "headers": {"retry-after-ms": "%d" % (1000 * (1.0 - room) / RATE + 1)}}
    state["room"] = room - 1.0
    ok = state.setdefault("served", {})
    ok[who] = ok.get(who, 0) + 1
    spec = owner(provider, req, state)
    spec["delay_per_chunk"] = 0.02     # a model takes a while to answer
    return spec


SCENARIOS = {"owner": owner, "ratelimited": ratelimited}
