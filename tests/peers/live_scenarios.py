"""Scenarios for live progress (tests/test_agent.c, tests/test_llm.c and
agent_api_client.py sc_live): code shown while the model writes it, what a
turn waits on (a 429 back-off), tokens per turn, narration as it streams.

Reply options these scenarios use (tests/peers/llm_server.py):

    "arg_fragments": [1, 2, 3]   tool-call arguments streamed in pieces of these
                                 sizes in turn (escapes are cut in the middle)
    "ascii_args": True           non-ASCII in the arguments as \\uXXXX escapes,
                                 beyond the BMP as surrogate pairs

Every reply depends on what korch sent: the code prints lengths that only
come out right if every escape reached the kernel intact, and the answer
quotes that output.
"""
import re

import llm_scenarios as ls

# Python source whose JSON form is full of escapes: \" \\ \t, \u00e9 and a
# surrogate pair for the emoji (with ascii_args)
ESCAPES = r'''name = "café 😀"
quote = "say \"hi\"\tnow"
path = "C:\\temp\\x"
print("LIVE", len(name), len(quote), len(path), name)
'''


def _find(pattern, text):
    m = re.search(pattern, text or "")
    return m.group(1) if m else None


def live(provider, req, state):
    """A question with "rate" in it meets one 429 with retry-after: 2 first;
    any other question gets code full of escapes, streamed in tiny pieces,
    then an answer quoting what the kernel printed."""
    user = ls.latest_user_text(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "rate" in user:
        seen = state.setdefault("limited", set())
        if (provider, user) not in seen:
            seen.add((provider, user))
            return {"status": 429, "headers": {"retry-after": "2"}}
        return {"text": "Waited, then answered: %s." % user}
    if not text:
        return {"text": "Writing the code. ", "tool_calls": [ls.run_python(ESCAPES)], "ascii_args": True,
                "arg_fragments": [1, 2, 3, 5]}
    return {"text": "The code printed %s." % _find(r"(LIVE [^\n]*)", text)}


def narrate(provider, req, state):
    """Narration that streams slowly, code, then a slowly streamed answer
    quoting the kernel's output (for korch chat on a terminal)."""
    text, _ = ls.latest_tool_result(provider, req)
    if not text:
        return {"text": "Let me work this out in the kernel first, one moment please.",
                "tool_calls": [ls.run_python("x = 6 * 7\nprint('NARR', x)\n")], "delay_per_chunk": 0.2,
                "arg_fragments": 4}
    return {"text": "The kernel says %s, so that is the answer." % _find(r"(NARR \d+)", text),
            "delay_per_chunk": 0.2}


SCENARIOS = {f.__name__: f for f in (live, narrate)}
