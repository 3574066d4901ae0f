"""The model and its kernel attack the person (issue 21 items 2-4).

"escapes" (tests/test_terminal.c) aims at the person's terminal:
the model's text, the code it writes, what the kernel prints (stdout split
across writes, stderr, a progress bar), a result's text/plain, an error's
evalue, a file name and the answer all carry escape sequences: OSC 52 (a
clipboard write), ESC[2J (clear the screen), window titles, an OSC 8 link,
DCS/APC strings, C1 controls (U+009B; a raw 0x9b byte in a second file's
name) and RLO (U+202E). Every marker word ("...-MARK") must reach the screen;
none of the sequences may.

The reply depends on what korch sent: the answer quotes the kernel's
SPLIT-MARK line from the tool result, so the code must really have run.
"""
import base64
import re

import llm_scenarios as ls

MODEL_CLIP = base64.b64encode(b"MODEL-CLIPBOARD").decode()

TEXT = ("Looking \x1b]52;c;" + MODEL_CLIP + "\x07at the data.\x1b[2J\x1b[H\x1b]0;MODEL TITLE WITH SPACES\x07 "
        "\x1b]8;;http://evil.example/\x1b\\LINK-MARK\x1b]8;;\x1b\\ \u202eMODEL-RLO \x9bMODEL-C1 ")

# a comment with raw escapes (shown as the model writes it), then code whose
# output carries them (written as Python escapes)
CODE = ("# model comment \x1b]52;c;" + MODEL_CLIP + "\x07\x1b[2J CODE-MARK \u202e\n") + r'''import base64, sys, time
from IPython.display import display
clip = base64.b64encode(b"KERNEL-CLIPBOARD").decode()
print("K-START \x1b]52;c;" + clip + "\x07\x1b[2J\x1b[3J\x1b[H\x1b]2;KERNEL-TITLE\x1b\\", flush=True)
print("\x1b]52;c;", end="", flush=True)
time.sleep(0.5)
print(clip + "\x07SPLIT-MARK \x1b[31mRED-MARK\x1b[0m \u202eRLO-MARK \x9bC1-MARK \x1bPdcs\x1b\\ \x1b_apc\x1b\\", flush=True)
sys.stderr.write("\x1b]0;STDERR-TITLE\x07STDERR-MARK\n")
sys.stderr.flush()
for i in (10, 50, 100):
    print("\rprogress %d%%" % i, end="", flush=True)
print()
open("evil-\x1b]52;c;" + clip + "\x07\x9b2J\u202etxt.exe", "w").write("x")
open(b"raw-\x9b2J.txt", "wb").write(b"x")
class Evil:
    def __repr__(self):
        return "RESULT-MARK \x1b]0;RESULT-TITLE\x07\x1b[2J\u202e"
display(Evil())
raise ValueError("EVALUE-MARK \x1b]52;c;" + clip + "\x07\x1b[2J\u202e")
'''


def escapes(provider, req, state):
    text, _ = ls.latest_tool_result(provider, req)
    if not text:
        return {"text": TEXT, "tool_calls": [ls.run_python(CODE)], "arg_fragments": [3, 7]}
    m = re.search(r"(SPLIT-MARK)", text)
    return {"text": "ANSWER-MARK \x1b]52;c;" + MODEL_CLIP + "\x07\x1b[2J\x1b]2;ANSWER TITLE\x07 quoting %s "
                    "\u202eANSWER-RLO done." % (m.group(1) if m else "nothing")}


# ---- "svgattack" (tests/test_downloads_web.c, tests/npm/webapp_svg.js): script
# in an SVG and an HTML page the kernel saves and displays. Run in korch's
# origin it would read the page's token and call korch's API with it; the
# request's ?pwned= is the canary the browser test watches for.

PAYLOAD = ("window.__pwned=(window.__pwned||0)+1;"
           "fetch(location.origin+'/api/agent/sessions?pwned='+encodeURIComponent(String(sessionStorage.getItem('korch-token'))),"
           "{headers:{Authorization:'token '+sessionStorage.getItem('korch-token')}})")

SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="160" height="90" onload="%s">'
       '<script>%s</script><rect width="160" height="90" fill="#3a7"/>'
       '<a href="javascript:%s"><text x="10" y="50">SVG-MARK</text></a></svg>') % (PAYLOAD, PAYLOAD, PAYLOAD)

HTML = ('<html><body><h1>HTML-MARK</h1><script>%s</script><img src="x" onerror="%s">'
        '<a href="javascript:%s">click</a><form action="http://evil.example/"><input name=q></form></body></html>'
        ) % (PAYLOAD, PAYLOAD, PAYLOAD)

SVG_CODE = """from IPython.display import display, SVG, HTML
svg = %r
html = %r
for name, text in (("evil.svg", svg), ("chart.svg", svg), ("evil.html", html), ("bad\\r\\nname.html", html)):
    with open(name, "w") as f:
        f.write(text)
display(SVG(svg))
display(HTML(html))
print("FILES-WRITTEN")
""" % (SVG, HTML)


def svgattack(provider, req, state):
    text, _ = ls.latest_tool_result(provider, req)
    if not text:
        return {"text": "Drawing the chart.", "tool_calls": [ls.run_python(SVG_CODE)]}
    return {"text": "The chart is saved (%s)." % ("FILES-WRITTEN" if "FILES-WRITTEN" in text else "nothing")}


SCENARIOS = {"escapes": escapes, "svgattack": svgattack}
