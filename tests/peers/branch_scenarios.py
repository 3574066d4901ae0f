"""Scenarios for branching a session from a step (issue 23 item 3;
tests/test_branch.c, tests/npm/webapp_branch.js).

Replies depend on what korch sent: the parent's steps define a (step 1), an
unseeded random r (step 2: a re-run prints another one) and b (step 3); a
branch's question (it holds BRANCHQ) makes the model ask the kernel which of
them exist and what r is, and the answer quotes what the kernel printed and
the model's name as the request gave it.
"""
import re

import llm_scenarios as ls


def _results_since_question(provider, req):
    """Tool results after the message that holds the user's latest words
    (Anthropic's API merges the question into the message of the tool
    results before it: those are the earlier step's)."""
    msgs = ls.messages(provider, req)
    start = 0
    for i, m in enumerate(msgs):
        c = m.get("content")
        texts = [c] if isinstance(c, str) else [p.get("text", "") for p in c or []
                                                if isinstance(p, dict) and p.get("type") == "text"]
        if m.get("role") == "user" and any(t and not t.startswith("images from") for t in texts):
            start = i
    out = []
    for m in msgs[start + 1:]:
        c = m.get("content")
        if m.get("role") == "tool":
            out.append(ls._text_of(c))
        elif m.get("role") == "user" and isinstance(c, list):
            out += [ls._text_of(p.get("content")) for p in c if isinstance(p, dict) and p.get("type") == "tool_result"]
    return out


def _find(pattern, texts):
    for t in reversed(texts):
        m = re.search(pattern, t)
        if m:
            return m.group(1)
    return None


PARENT_STEPS = [
    "a = 6 * 7\nprint('A', a)",
    "import random\nr = random.randint(10**8, 10**9)\nprint('R', r)",
    "b = a + 1\nprint('B', b)",
]


def branch(provider, req, state):
    user = ls.latest_user_text(provider, req)
    model = req.get("model", "?")
    texts = _results_since_question(provider, req)
    if "BRANCHQ" in user:
        if not texts:
            return {"text": "Checking what the kernel holds.", "tool_calls": [ls.run_python(
                "print('HAVE', ','.join(k for k in ('a', 'r', 'b') if k in globals()))\n"
                "print('RNOW', globals().get('r'))")]}
        return {"text": "model=%s have=%s r=%s" % (model, _find(r"HAVE ([a-z,]*)", texts),
                                                  _find(r"RNOW (\S+)", texts))}
    if len(texts) < len(PARENT_STEPS):
        return {"text": "Step %d." % (len(texts) + 1), "tool_calls": [ls.run_python(PARENT_STEPS[len(texts)])]}
    return {"text": "model=%s A=%s R=%s B=%s" % (model, _find(r"A (\d+)", texts), _find(r"R (\d+)", texts),
                                                _find(r"B (\d+)", texts))}


SCENARIOS = {"branch": branch}
