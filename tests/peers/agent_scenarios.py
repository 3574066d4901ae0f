"""Scenarios that drive korch's agent loop end to end (tests/test_agent.c).

Every reply depends on what korch actually sent: numbers printed by real
kernel executions are read back out of the tool results and quoted in the
final answer, so a test that checks the answer proves the kernel's output
went back to the model.
"""
import json
import re

import llm_scenarios as ls


def _all_results(provider, req):
    """Text of every tool result in the conversation, in order."""
    out = []
    for m in ls.messages(provider, req):
        role = m.get("role")
        c = m.get("content")
        if role == "tool":
            out.append(ls._text_of(c))
        elif role == "user" and isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and part.get("type") == "tool_result":
                    out.append(ls._text_of(part.get("content")))
        elif role == "user" and isinstance(c, str) and c.startswith("Output of your code:"):
            out.append(c)
    return out


def _find(pattern, texts):
    for t in reversed(texts):
        m = re.search(pattern, t)
        if m:
            return m.group(1)
    return None


def _code(code):
    return ls.run_python(code)


def analysis(provider, req, state):
    """A CSV analysis over several steps: look, make a mistake, fix it, chart, answer."""
    if not ls.has_tools(provider, req):
        return {"text": "no tools were offered"}
    results = _all_results(provider, req)
    system = ls.system_text(provider, req)
    step = len(results)
    if step == 0:
        if "sales.csv" not in system or "price" not in system:
            return {"text": "SYSTEM PROMPT LACKS THE FILE'S COLUMNS: " + system[:300]}
        return {"text": "Loading the data.", "tool_calls": [_code(
            "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint('UNITS=%d' % df['units'].sum())")]}
    if step == 1:
        return {"tool_calls": [_code("df['revenue'] = df['units'] * df['unit_price']")]}
    if step == 2:
        if "KeyError" not in results[-1]:
            return {"text": "EXPECTED A KeyError, GOT: " + results[-1][:300]}
        return {"text": "The column is called price.", "tool_calls": [_code(
            "df['revenue'] = df['units'] * df['price']\nprint('REVENUE=%.2f' % df['revenue'].sum())")]}
    if step == 3:
        return {"tool_calls": [_code(
            "import matplotlib.pyplot as plt\ndf.groupby('region')['revenue'].sum().plot(kind='bar')\nplt.show()")]}
    text, images = ls.latest_tool_result(provider, req)
    units = _find(r"UNITS=(\d+)", results)
    revenue = _find(r"REVENUE=([0-9.]+)", results)
    chart = "chart seen as %d image(s)" % images if images else (
        "chart named: " + (_find(r"\[chart \d+: ([^\]]*)\]", [text]) or "none"))
    return {"text": "Total revenue is %s from %s units; %s." % (revenue, units, chart)}


def turns(provider, req, state):
    """Two user turns over one kernel: turn 2 uses a variable made in turn 1."""
    user = ls.latest_user_text(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "remember" in user:
        if not text:
            return {"tool_calls": [_code("secret = 6 * 7")]}
        return {"text": "Stored."}
    if "use it" in user:
        if not text or "SECRET" not in text:
            return {"tool_calls": [_code("print('SECRET+1=%d' % (secret + 1))")]}
        return {"text": "The answer is %s." % _find(r"SECRET\+1=(\d+)", [text])}
    return {"text": "unexpected question: " + user}


def dies(provider, req, state):
    """The kernel dies mid-step; the model is told and goes on in a fresh kernel."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code("lost = 1\nimport os\nos._exit(1)")]}
    if len(results) == 1:
        if "kernel died" not in results[0] or "variables are lost" not in results[0]:
            return {"text": "NOT TOLD PLAINLY: " + results[0][:300]}
        return {"tool_calls": [_code("print('FRESH', 'lost' in globals())")]}
    return {"text": "Recovered: %s." % _find(r"(FRESH \w+)", results)}


def forever(provider, req, state):
    """Always more code, until korch asks for the answer without tools."""
    results = _all_results(provider, req)
    if not ls.has_tools(provider, req):
        return {"text": "Stopped after %d results." % len(results)}
    return {"tool_calls": [_code("print('STEP', %d)" % (len(results) + 1))]}


_FLOOD = (
    "import base64, os, sys, time\n"
    "from IPython.display import display\n"
    "print('x' * 6000000)\n"
    "display({'image/png': base64.b64encode(os.urandom(1500000)).decode()}, raw=True)\n"
    "open('shot.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(3000000))\n"
    "sys.stdout.flush()\n"
    "time.sleep(1)\n"
    "os.kill(os.getpid(), 9)\n")


def restart_flood(provider, req, state):
    """The model as the attacker: each step prints 6 MB, shows a 2 MB image,
    saves a 3 MB one, and kills its kernel, until korch says the session's
    output budget is used up (then it answers)."""
    results = _all_results(provider, req)
    told = "output budget" in ls.latest_user_text(provider, req)
    if not ls.has_tools(provider, req) or told:
        return {"text": "Stopped after %d floods; budget told: %s." % (len(results), told)}
    return {"tool_calls": [_code(_FLOOD)]}


def flood(provider, req, state):
    """restart_flood without the kill: 6 MB of print, a 2 MB image and a 3 MB
    figure per step, until korch says the session's output budget is used
    up (korch serve --session-mb over two turns)."""
    results = _all_results(provider, req)
    told = "output budget" in ls.latest_user_text(provider, req)
    if not ls.has_tools(provider, req) or told:
        return {"text": "Stopped after %d floods; budget told: %s." % (len(results), told)}
    return {"tool_calls": [_code(_FLOOD.replace("os.kill(os.getpid(), 9)\n", "print('still here')\n"))]}


def usage(provider, req, state):
    """CPU seconds and peak memory per step (issue 23): a step that burns the
    CPU (and tries to reach its cgroup's counters to fake them), a step
    that touches 200 MiB and lets it go, a quiet one, then the answer."""
    results = _all_results(provider, req)
    step = len(results)
    if step == 0:
        return {"tool_calls": [_code(
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
            "try:\n    open('/sys/fs/cgroup/memory/memory.max_usage_in_bytes', 'w').write('0')\n"
            "    print('cgroup reached')\nexcept OSError as e:\n    print('cgroup out of reach:', type(e).__name__)")]}
    if step == 1:
        return {"tool_calls": [_code("b = bytearray(200 << 20)\nb[::4096] = b'x' * len(b[::4096])\ndel b\nprint('done')")]}
    if step == 2:
        return {"tool_calls": [_code("print(1 + 1)")]}
    return {"text": "Measured."}


def badjson(provider, req, state):
    """Tool-call JSON that does not parse goes back to the model as an error."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code("print('never run')")], "malformed_tool_args": True}
    if len(results) == 1:
        if "not valid JSON" not in results[0]:
            return {"text": "NO JSON ERROR SEEN: " + results[0][:300]}
        return {"tool_calls": [_code("print('OK', 2 + 3)")]}
    return {"text": "Fixed: %s." % _find(r"(OK \d+)", results)}


def fence(provider, req, state):
    """A model without tool calling: code in ```python fences."""
    if ls.has_tools(provider, req):
        return {"text": "TOOLS WERE SENT IN FENCE MODE"}
    msgs = ls.messages(provider, req)
    last = msgs[-1] if msgs else {}
    content = last.get("content") if isinstance(last.get("content"), str) else ls._text_of(last.get("content"))
    if content and content.startswith("Output of your code:"):
        return {"text": "The kernel said %s." % _find(r"(FENCE=\d+)", [content])}
    return {"text": "Let me compute.\n```python\nprint('FENCE=%d' % (20 + 22))\n```\n"}


def slowthink(provider, req, state):
    """Step 1 defines state; step 2's model call is slow (korch is killed then)."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code("kept = 'resumed ok'")]}
    if "resume" in ls.latest_user_text(provider, req):
        text, _ = ls.latest_tool_result(provider, req)
        if not text or "KEPT" not in text:
            return {"tool_calls": [_code("print('KEPT', kept)")]}
        return {"text": "State after resume: %s." % _find(r"KEPT (.*)", [text])}
    return {"text": "thinking " * 50, "delay_per_chunk": 1.0}


def printed(provider, req, state):
    """A model that prints its tool call as JSON text instead of making it."""
    results = _all_results(provider, req)
    if not results:
        return {"text": '{"name": "run_python", "arguments": {"code": "print(\'PRINTED\', 6 * 7)"}}'}
    return {"text": "Ran it: %s." % _find(r"(PRINTED \d+)", results)}


def sleeper(provider, req, state):
    """Turn 1 runs code that sleeps for a minute (the client interrupts it);
    turn 2 proves the session and its kernel are still there."""
    user = ls.latest_user_text(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "sleep" in user:
        if not text:
            return {"text": "Sleeping.", "tool_calls": [_code(
                "import time\nprint('SLEEPING', flush=True)\ntime.sleep(60)\nprint('WOKE')")]}
        return {"text": "Slept through: " + text[:100]}
    if "after" in user:
        if not text or "AFTER" not in text:
            return {"tool_calls": [_code("print('AFTER', 40 + 2)")]}
        return {"text": "Still alive: %s." % _find(r"(AFTER \d+)", [text])}
    return {"text": "unexpected question: " + user}


def chunks(provider, req, state):
    """Output that arrives in several stream messages, then a picture."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code(
            "import time\nfor i in range(4):\n    print('CHUNK', i, flush=True)\n    time.sleep(0.3)\n"
            "import sys\nprint('ERR', file=sys.stderr, flush=True)\nprint('TAIL')")]}
    return {"text": "Done: %s." % results[-1].replace("\n", " ").strip()}


def shared(provider, req, state):
    """The agent reads a variable a notebook defined in the same kernel."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code("print('SHARED=%s' % shared_value)")]}
    return {"text": "The notebook's value is %s." % _find(r"SHARED=(\w+)", results)}


def writer(provider, req, state):
    """Code that writes files: a CSV, a saved chart, a folder of reports; the
    model quotes korch's list of what changed (names and sizes)."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code(
            "import os, pandas as pd, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "pd.DataFrame({'a': [1, 2, 3]}).to_csv('out.csv', index=False)\n"
            "plt.plot([1, 2, 3]); plt.savefig('x.png'); plt.close()\n"
            "os.makedirs('reports', exist_ok=True)\n"
            "for i in range(2):\n    open('reports/r%d.txt' % i, 'w').write('report %d\\n' % i)\n"
            "os.symlink('/etc/passwd', 'leak.png')\nos.symlink('/etc', 'etcdir')\n"
            "print('WROTE')")]}
    if len(results) == 1:
        _, images = ls.latest_tool_result(provider, req)  # the saved PNG, attached for a vision model
        return {"tool_calls": [_code("import os\nos.remove('out.csv')\nprint('REMOVED, IMAGES=%d')" % images)]}
    first = _find(r"\[files in the working directory changed by this code: ([^\]]*)\]", [results[0]])
    second = _find(r"\[files in the working directory changed by this code: ([^\]]*)\]", [results[1]])
    return {"text": "FIRST: %s\nSECOND: %s\n%s" % (first, second, _find(r"(IMAGES=\d+)", results))}


def excel(provider, req, state):
    """.xlsx written and read back by pandas (openpyxl), and the kernel's memory limit."""
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [_code(
            "import pandas as pd\npd.DataFrame({'a': [1, 2, 39]}).to_excel('t.xlsx', index=False)\n"
            "print('XLSX=%d' % pd.read_excel('t.xlsx')['a'].sum())\n"
            "try:\n    print('MEM=%s' % open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip())\n"
            "except OSError:\n    print('MEM=none')\n"
            "print('UPLOADED=%d' % pd.read_excel('given.xlsx')['n'].sum())")]}
    return {"text": "Excel: %s, %s, %s." % (_find(r"(XLSX=\d+)", results), _find(r"(UPLOADED=\d+)", results),
                                            _find(r"(MEM=\w+)", results))}


def fencerun(provider, req, state):
    """A model with tools that answers with a ```python fence instead of a call."""
    results = _all_results(provider, req)
    if not results:
        return {"text": "Let me compute.\n```python\nprint('FENCERUN=%d' % (40 + 2))\n```\n"}
    # an untagged fence in an answer is output to show, not code to run
    return {"text": "Ran the fence: %s.\n```\nFENCERUN=42\n```\n" % _find(r"(FENCERUN=\d+)", results)}


def sysecho(provider, req, state):
    """Quotes the system prompt it got."""
    return {"text": "SYSTEM<<%s>>" % ls.system_text(provider, req)}


def snapshot(provider, req, state):
    """Turn 1 appends to a file, draws a random number and sets a variable in a
    cell that then fails; after a resume turn 2 reports what survived and what
    korch told it about the rebuild."""
    user = ls.latest_user_text(provider, req)
    results = _all_results(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "set up" in user:
        if not text:
            return {"tool_calls": [_code(
                "import random\nopen('log.txt', 'a').write('ran\\n')\nitems = []\nitems.append(1)\n"
                "r = random.random()\nprint('R=%r' % r)")]}
        if "partial" not in json_dumps_calls(provider, req):
            return {"tool_calls": [_code("partial = 'set before failing'\nraise ValueError('boom')")]}
        return {"text": "Set up: %s." % _find(r"(R=[0-9.e-]+)", results)}
    if "check" in user:
        if not text or "LINES" not in text:
            return {"tool_calls": [_code(
                "print('LINES=%d ITEMS=%d R=%r PARTIAL=%s' % (len(open('log.txt').read().splitlines()), len(items), "
                "r, globals().get('partial')))")]}
        system = ls.system_text(provider, req)
        told = "restored" if "restored" in system else "re-run" if "re-run" in system else "nothing"
        return {"text": "After resume: %s TOLD=%s." % (_find(r"(LINES=.*)", [text]), told)}
    return {"text": "unexpected question: " + user}


def snapfunc(provider, req, state):
    """A function defined in a cell cannot be pickled by value: after a resume
    it is rebuilt by re-running the cells, and the snapshot goes over them."""
    user = ls.latest_user_text(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "set up" in user:
        if not text:
            return {"tool_calls": [_code(
                "import random\nopen('log.txt', 'a').write('ran\\n')\nr = random.random()\n"
                "def twice(x):\n    return 2 * x\nprint('R=%r' % r)")]}
        return {"text": "Set up: %s." % _find(r"(R=[0-9.e-]+)", [text])}
    if "check" in user:
        if not text or "LINES" not in text:
            return {"tool_calls": [_code(
                "print('LINES=%d R=%r TWICE=%d' % (len(open('log.txt').read().splitlines()), r, twice(21)))")]}
        return {"text": "After resume: %s." % _find(r"(LINES=.*)", [text])}
    return {"text": "unexpected question: " + user}


def json_dumps_calls(provider, req):
    import json
    return json.dumps(ls.messages(provider, req))


def rstats(provider, req, state):
    """An R kernel (IRkernel): read a CSV, quote the mean the kernel printed, save a PNG plot."""
    tools = req.get("tools") or []
    names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools]
    if "run_code" not in names:
        return {"text": "NO run_code TOOL: %r" % names}
    desc = json.dumps(tools)
    if " R " not in desc and "Run R code" not in desc:
        return {"text": "THE TOOL DOES NOT SAY R: " + desc[:300]}
    results = _all_results(provider, req)
    if not results:
        return {"tool_calls": [{"name": "run_code", "arguments": {"code":
                "d <- read.csv('nums.csv')\ncat(sprintf('MEAN=%.3f\\n', mean(d$x)))"}}]}
    if len(results) == 1:
        return {"tool_calls": [{"name": "run_code", "arguments": {"code":
                "png('plot.png')\nplot(d$x)\ninvisible(dev.off())\ncat('PLOTTED\\n')"}}]}
    system = ls.system_text(provider, req)
    return {"text": "The mean is %s; %s; system names R: %s." % (
        _find(r"MEAN=([0-9.]+)", results), "plot saved" if "plot.png" in results[-1] else "NO PLOT SEEN",
        "yes" if "running R" in system else "no")}


def _turn_results(provider, req):
    """Text of the tool results since the user's latest question (this turn)."""
    msgs = ls.messages(provider, req)
    start = max((i for i, m in enumerate(msgs) if m.get("role") == "user" and isinstance(m.get("content"), str)
                 and not m["content"].startswith(("[korch", "images from"))), default=0)
    return [ls._text_of(m.get("content")) for m in msgs[start:] if m.get("role") == "tool"]


_XSS_CODE = r"""from IPython.display import HTML, Markdown, SVG, display
display(HTML('<b id="html-ok">html ok</b><script>window.__xss = "script"</script>'
             '<img src="x" onerror="window.__xss = \'onerror\'">'
             '<a id="xss-a" href="javascript:window.__xss = \'href\'">html link</a>'))
display(Markdown('[md link](javascript:window.__xss="md") and <img src="x" onerror="window.__xss=\'mdimg\'">'))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40" onload="window.__xss=\'svg\'">'
            '<script>window.__xss="svgscript"</script><circle cx="20" cy="20" r="15" fill="teal"/></svg>'))
print('XSS-SENT')"""


def webapp(provider, req, state):
    """The web page's test (tests/npm/webapp.js). Turn "analyse": load the
    uploaded CSV (a table), a mistake (a traceback), a chart, outputs with
    script in them; the answer quotes the total the kernel printed, with
    script in it too. "sleep": a long step the page stops. "kept": state
    from before the stop. "slow": a step the page reloads in the middle of.
    "again": after the session was stopped and resumed."""
    user = ls.latest_user_text(provider, req)
    res = _turn_results(provider, req)
    if "analyse" in user:
        if not res:
            return {"text": "Let me **load** the file first.", "tool_calls": [_code(
                "import pandas as pd\ndf = pd.read_csv('sales.csv')\ndf['revenue'] = df['units'] * df['price']\n"
                "print('TOTAL=%.2f' % df['revenue'].sum())\ndf.head()")]}
        if len(res) == 1:
            return {"tool_calls": [_code("df['no_such_column']")]}
        if len(res) == 2:
            if "KeyError" not in res[1]:
                return {"text": "EXPECTED A KeyError, GOT: " + res[1][:200]}
            return {"text": "A chart of revenue by region:", "tool_calls": [_code(
                "import matplotlib.pyplot as plt\n"
                "df.groupby('region')['revenue'].sum().plot(kind='bar')\nplt.savefig('by_region.png')\nplt.show()")]}
        if len(res) == 3:
            return {"tool_calls": [_code(_XSS_CODE)]}
        total = _find(r"TOTAL=([0-9.]+)", res)
        return {"text": "Total revenue is **%s**. <img src=x onerror=\"window.__xss='final'\"> "
                        "[a link](javascript:window.__xss='finalmd')" % total}
    if "sleep" in user:
        if not res:
            return {"text": "Sleeping.", "tool_calls": [_code(
                "kept = 41\nimport time\nprint('SLEEPING', flush=True)\ntime.sleep(90)\nprint('WOKE')")]}
        return {"text": "Slept through: " + res[-1][:100]}
    if "kept" in user:
        if not res:
            return {"tool_calls": [_code("print('KEPT=%d' % (kept + 1))")]}
        return {"text": "The kernel kept its state: KEPT is %s." % _find(r"KEPT=(\d+)", res)}
    if "again" in user:  # after a resume: the analysis' cells were re-run in the fresh kernel
        if not res:
            return {"tool_calls": [_code("print('AGAIN=%.2f' % df['revenue'].sum())")]}
        return {"text": "After the resume the total is still %s." % _find(r"AGAIN=([0-9.]+)", res)}
    if "slow" in user:
        if not res:
            return {"text": "Two parts.", "tool_calls": [_code(
                "import time\nprint('PART1', flush=True)\ntime.sleep(6)\nprint('PART2=%d' % (6 * 7))")]}
        return {"text": "Both parts ran: PART2 is %s." % _find(r"PART2=(\d+)", res)}
    return {"text": "unexpected question: " + user}


def stamp(provider, req, state):
    """A value only the live kernel still has (tests/test_server_adopt_agent.c): a
    time inside a closure, which the snapshot cannot pickle and a replay
    would make again, different. "remember" sets it, "recall" reads it."""
    user = ls.latest_user_text(provider, req)
    text, _ = ls.latest_tool_result(provider, req)
    if "remember" in user:
        if not text:
            return {"tool_calls": [_code("import time\nstamp = (lambda t: (lambda: t))(repr(time.time()))\n"
                                         "print('STAMP=' + stamp())")]}
        return {"text": "Stored STAMP=%s." % _find(r"STAMP=([0-9.]+)", [text])}
    if "recall" in user:
        if not text:
            return {"tool_calls": [_code("print('STAMP=' + stamp())")]}
        return {"text": "The stamp is STAMP=%s." % _find(r"STAMP=([0-9.]+)", [text])}
    return {"text": "unexpected question: " + user}


SCENARIOS = {f.__name__: f for f in (webapp, analysis, turns, dies, forever, badjson, fence, slowthink, printed, sleeper,
                                     shared, chunks, writer, excel, fencerun, sysecho, snapshot, snapfunc, rstats, stamp)}


def jlab(provider, req, state):
    """The JupyterLab panel's agent in a notebook's kernel: it reads the
    DataFrame `df` the user defined by hand, charts it, and quotes the total
    it printed (a number only that DataFrame gives)."""
    user = ls.latest_user_text(provider, req)
    if "hostile" in user:  # outputs and an answer with script in them: nothing may run, in the panel or the notebook
        if not _turn_results(provider, req):
            return {"text": "Some <b>bold</b> narration <img src=x onerror=\"window.__xss='narration'\">.",
                    "tool_calls": [_code(_XSS_CODE)]}
        return {"text": "HOSTILE done <script>window.__xss='final-script'</script>"
                        "<img src=x onerror=\"window.__xss='final'\"> [a link](javascript:window.__xss='finalmd')"}
    if "sleep" in user:  # a long step, which the user stops
        text, _ = ls.latest_tool_result(provider, req)
        if not text or "SLEEPING" not in text:
            return {"text": "Sleeping.", "tool_calls": [_code(
                "import time\nprint('SLEEPING', flush=True)\ntime.sleep(60)\nprint('WOKE')")]}
        return {"text": "Slept: " + text[:100]}
    results = _all_results(provider, req)
    if not results:
        return {"text": "Looking at your DataFrame.", "tool_calls": [_code(
            "print('TOTAL=%d' % df['units'].sum())")]}
    if len(results) == 1:
        return {"text": "Charting it.", "tool_calls": [_code(
            "import matplotlib.pyplot as plt\ndf.plot.bar(x='region', y='units')\nplt.show()")]}
    return {"text": "The total is %s units." % _find(r"TOTAL=(\d+)", results)}


SCENARIOS["jlab"] = jlab
SCENARIOS["restart_flood"] = restart_flood
SCENARIOS["flood"] = flood
SCENARIOS["usage"] = usage


def taint_hook(provider, req, state):
    """The model as the attacker of the person's Jupyter client (issue 21):
    its code registers an IPython post_run_cell hook that shows HTML with a
    script (a contents-API PUT and a window flag) after the person's every
    next cell; the frontend would take that as the output of a cell the
    person ran, trusted."""
    if not _turn_results(provider, req):
        return {"text": "Installing a helper.", "tool_calls": [_code(
            "from IPython.display import display, HTML\n"
            "def _korch_attack(result=None):\n"
            "    display(HTML('<b>analysis helper loaded</b><script>window.__pwned = \"hook\";'\n"
            "                 'fetch(\"/api/contents/PWNED-by-model.txt\", {method: \"PUT\", headers: '\n"
            "                 '{\"Content-Type\": \"application/json\", \"X-XSRFToken\": '\n"
            "                 '(document.cookie.match(/_xsrf=([^;]+)/) || [])[1]}, '\n"
            "                 'body: JSON.stringify({type: \"file\", format: \"text\", content: \"pwned\"})})'\n"
            "                 '</script>'))\n"
            "get_ipython().events.register('post_run_cell', _korch_attack)\n"
            "print('HOOKED')")]}
    return {"text": "The helper is installed."}


SCENARIOS["taint_hook"] = taint_hook



def usercode(provider, req, state):
    """The question is "RUN:<code>": the model runs that code and quotes its
    output (tests/peers/files_matrix.py drives the work dir this way)."""
    user = ls.latest_user_text(provider, req)
    if not user.startswith("RUN:"):
        return {"text": "ASK ME RUN:<code>, NOT %r" % user[:80]}
    results = _turn_results(provider, req)
    if not results:
        return {"tool_calls": [_code(user[4:])]}
    return {"text": "RAN: %s" % results[-1]}


SCENARIOS["usercode"] = usercode
