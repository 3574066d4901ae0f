"""Scenarios for results a person can trust (tests/test_trust.c, issue 23).

Replies depend on what korch sent: the numbers the answer quotes are read
back out of the kernel's real output (rounded, as percentages), and one is
made up on purpose, so the receipts korch attaches can be checked against
what the kernel really printed.
"""
import re

import agent_scenarios as ag
import llm_scenarios as ls


def receipts(provider, req, state):
    """Step 1 loads, step 2 fails (a KeyError: a dead end), step 3 computes; the answer quotes
    printed numbers exactly, rounded and as a percentage of a printed ratio, and
    one number (17.3) that no output holds."""
    texts = ag._all_results(provider, req)
    if not texts:
        return {"text": "Loading.", "tool_calls": [ls.run_python("d = {'amount': 8451.37}\nprint(len(d))")]}
    if len(texts) == 1:
        return {"text": "Looking it up.", "tool_calls": [ls.run_python("print(d['amout'])")]}
    if len(texts) == 2:
        return {"text": "Fixing the key.", "tool_calls": [ls.run_python(
            "import random\nrandom.seed(7)\ntotal = d['amount'] + random.randint(1000, 9999)\n"
            "share = round(d['amount'] / total, 4)\nprint('TOTAL', total)\nprint('SHARE', share)\n"
            "print('DELTA', round(-3.25 - random.random(), 2))")]}
    total = float(ag._find(r"TOTAL ([0-9.]+)", texts))
    share = float(ag._find(r"SHARE ([0-9.]+)", texts))
    delta = ag._find(r"DELTA (-[0-9.]+)", texts)
    return {"text": "The total is %s (about %s), the amount is %.1f%% of it, the change was %s "
                    "and it fell by %s; growth was 17.3 points." % (
                        "{:,.2f}".format(total), "{:,.0f}".format(total), share * 100, delta, delta.lstrip("-"))}


def jsfence(provider, req, state):
    """First a JavaScript block in a Python kernel (not run, not the answer);
    asked for the kernel's language, the model runs Python and answers."""
    texts = ag._all_results(provider, req)
    user = ls.latest_user_text(provider, req)
    if not texts and "javascript" not in user.lower():
        return {"text": "Here is how:\n```javascript\nconsole.log([1,2,3].reduce((a, b) => a + b))\n```\n"}
    if not texts:
        return {"tool_calls": [ls.run_python("print('SUM', sum([1, 2, 3]))")]}
    return {"text": "The sum is %s." % ag._find(r"SUM (\d+)", texts)}


def drift(provider, req, state):
    """An unseeded random number, quoted: a fresh kernel prints another one."""
    texts = ag._all_results(provider, req)
    if not texts:
        return {"tool_calls": [ls.run_python("import random\nprint('R', random.randint(10**8, 10**9))")]}
    return {"text": "The kernel drew %s." % ag._find(r"R (\d+)", texts)}


def deadend(provider, req, state):
    """The failed cell defined what the next one uses: the clean notebook,
    without it, cannot run through (verify says so)."""
    texts = ag._all_results(provider, req)
    if not texts:
        return {"tool_calls": [ls.run_python("d = {'amount': 8451.37}\nprint(d['amout'])")]}
    if len(texts) == 1:
        return {"tool_calls": [ls.run_python("print('AMOUNT', d['amount'])")]}
    return {"text": "The amount is %s." % ag._find(r"AMOUNT ([0-9.]+)", texts)}


SCENARIOS = {"receipts": receipts, "jsfence": jsfence, "drift": drift, "deadend": deadend}
