"""The scripted model's side of tests/peers/pyclient_agent.py (the Python
client's agent sessions): one scenario, "pyclient", that answers by the
user's message, so one korch serve serves every turn the client tests.

    "total"   reads the uploaded data.csv, prints TOTAL=N, shows a chart,
              writes out/summary.txt, and answers quoting the TOTAL the
              kernel printed (a number only the real output held)
    "sleep"   code that sleeps for a minute (the client interrupts it)
    "after"   proves the session and its kernel outlived the interrupt
"""
import re

import llm_scenarios as ls


def _turn_results(provider, req):
    """Tool results since the user's latest words (a user message with text
    of its own, not the images korch attaches after tool results)."""
    out = []
    for m in ls.messages(provider, req):
        role, c = m.get("role"), m.get("content")
        if role == "tool":
            out.append(ls._text_of(c))
        elif role == "user":
            parts = [c] if isinstance(c, str) else c if isinstance(c, list) else []
            results = [p for p in parts if isinstance(p, dict) and p.get("type") == "tool_result"]
            texts = [p if isinstance(p, str) else p.get("text", "") for p in parts
                     if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")]
            if results:
                out += [ls._text_of(p.get("content")) for p in results]
            elif any(t and not t.startswith("images from the tool results") for t in texts):
                out = []
    return out


def pyclient(provider, req, state):
    user = ls.latest_user_text(provider, req)
    results = _turn_results(provider, req)
    if "total" in user:
        if not results:
            return {"text": "Reading the data.", "tool_calls": [ls.run_python(
                "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint('TOTAL=%d' % df['n'].sum())")]}
        if len(results) == 1:
            return {"tool_calls": [ls.run_python(
                "import os, matplotlib.pyplot as plt\ndf['n'].plot(kind='bar')\nplt.show()\n"
                "os.makedirs('out', exist_ok=True)\n"
                "open('out/summary.txt', 'w').write('total %d\\n' % df['n'].sum())")]}
        m = None
        for t in results:
            m = m or re.search(r"TOTAL=(\d+)", t)
        return {"text": "The total is %s." % (m.group(1) if m else "UNKNOWN")}
    if "sleep" in user:
        if not results:
            return {"text": "Sleeping.", "tool_calls": [ls.run_python(
                "import time\nprint('SLEEPING', flush=True)\ntime.sleep(60)\nprint('WOKE')")]}
        return {"text": "Slept through: " + results[-1][:100]}
    if "after" in user:
        if not results:
            return {"tool_calls": [ls.run_python("print('AFTER', 40 + 2)")]}
        return {"text": "Still alive: %s." % results[-1].strip()[:100]}
    return {"text": "unexpected question: " + user}


SCENARIOS = {"pyclient": pyclient}
