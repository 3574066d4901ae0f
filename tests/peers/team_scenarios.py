"""LLM scenarios of a team's korch serve (issue 26), for llm_server.py.

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


SCENARIOS = {"owner": owner}
