"""Scenarios for the scripted LLM server (tests/peers/llm_server.py).

A scenario is a function (provider, request, state) -> spec, picked by the
URL prefix /s/<name>/. provider is "openai", "anthropic" or "ollama";
request is the JSON body korch sent; state is a dict kept per scenario for
the server's lifetime (state["n"] counts the requests so far, including this
one). The spec is either a reply

    {"text": "...", "tool_calls": [{"name": "run_python", "arguments": {...}}],
     "finish": "stop"}                                  (all keys optional)

optionally with stream faults

    "cut_after_bytes": N          the connection drops after N body bytes
    "drop_last_events": N         the body ends cleanly, without its last N
                                  events ([DONE], message_stop, the done line)
    "delay_per_chunk": S          seconds between writes
    "malformed_tool_args": True   tool-call arguments streamed as broken JSON
    "sse_error": {...}            an error event after the first text
    "split_into_tiny_chunks": True   a few bytes per write, with pauses
    "crlf": True                  CRLF line ends

or an HTTP error

    {"status": 429, "headers": {"retry-after": "1"}, "body": {...}}

(body defaults to the provider's own error format).

Replies should depend on what korch sent: the helpers below read a request
the same way whatever the provider, so "step 2 quotes the number step 1
printed" is one line.
"""
import json


# ---- reading requests, provider-independently ----

def messages(provider, req):
    return req.get("messages") or []


def _text_of(content):
    """Text of an OpenAI / Anthropic content (string or list of parts)."""
    if isinstance(content, str):
        return content
    out = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append(part.get("text", ""))
        elif isinstance(part, dict) and part.get("type") == "tool_result":
            out.append(_text_of(part.get("content")))
    return "\n".join(out)


def _images_in(content):
    n = 0
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("image_url", "image"):
            n += 1
        elif part.get("type") == "tool_result":
            n += _images_in(part.get("content"))
    return n


def tool_results(provider, req):
    """The tool results of the latest turn, in order: [{"id", "text",
    "images", "is_error"}]. Images count those attached to the results in
    each provider's place (OpenAI and Ollama: the user message after the
    tool messages)."""
    msgs = messages(provider, req)
    out = []
    if provider == "anthropic":
        if not msgs or msgs[-1].get("role") != "user" or not isinstance(msgs[-1].get("content"), list):
            return []
        for part in msgs[-1]["content"]:
            if part.get("type") == "tool_result":
                out.append({"id": part.get("tool_use_id"), "text": _text_of(part.get("content")),
                            "images": _images_in(part.get("content")), "is_error": bool(part.get("is_error"))})
        return out
    # openai / ollama: the tool messages after the last assistant message
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return []
    extra_images = 0
    for m in msgs[last + 1:]:
        if m.get("role") == "tool":
            out.append({"id": m.get("tool_call_id"), "text": _text_of(m.get("content")), "images": 0,
                        "is_error": False})
        elif m.get("role") == "user":
            extra_images += _images_in(m.get("content")) + len(m.get("images") or [])
    if out:
        out[-1]["images"] += extra_images
    return out


def latest_tool_result(provider, req):
    """(text of the latest turn's tool results joined, images attached)."""
    res = tool_results(provider, req)
    return "\n".join(r["text"] for r in res), sum(r["images"] for r in res)


def latest_user_text(provider, req):
    """The user's latest words: the last text part of the last user message
    that has one (not tool results, not the note before images)."""
    for m in reversed(messages(provider, req)):
        if m.get("role") != "user":
            continue
        c = m.get("content")
        texts = [c] if isinstance(c, str) else [p.get("text", "") for p in c or [] if p.get("type") == "text"]
        texts = [t for t in texts if t and not t.startswith("images from the tool results")]
        if texts:
            return texts[-1]
    return ""


def system_text(provider, req):
    if provider == "anthropic":
        s = req.get("system", "")
        return s if isinstance(s, str) else _text_of(s)
    return "\n".join(_text_of(m.get("content")) for m in messages(provider, req) if m.get("role") == "system")


def assistant_turns(provider, req):
    """How many assistant messages the conversation holds (the step number)."""
    return sum(1 for m in messages(provider, req) if m.get("role") == "assistant")


def has_tools(provider, req):
    return bool(req.get("tools"))


def run_python(code):
    return {"name": "run_python", "arguments": {"code": code}}


# ---- scenarios ----

def hello(provider, req, state):
    return {"text": "Hello from the scripted model. The answer is 42, as always."}


def tools(provider, req, state):
    """Two parallel calls, then a text quoting what came back."""
    res = tool_results(provider, req)
    if not res:
        return {"text": "Let me compute that.",
                "tool_calls": [run_python("print(6 * 7)"), run_python("x = 1\nprint('x set')")]}
    text, images = latest_tool_result(provider, req)
    return {"text": "results: %s | images: %d | errors: %d" % (text.replace("\n", " / "), images,
                                                             sum(r["is_error"] for r in res))}


def quote(provider, req, state):
    """Step 1 prints a number only the kernel knows; step 2 quotes it."""
    text, _ = latest_tool_result(provider, req)
    if not text:
        return {"tool_calls": [run_python("import random\nprint(random.randint(10**8, 10**9))")]}
    return {"text": "The kernel printed %s." % text.strip()}


def retry429(provider, req, state):
    if state["n"] == 1:
        return {"status": 429, "headers": {"retry-after": "1"}}
    return {"text": "fine after waiting"}


def retry529(provider, req, state):
    if state["n"] == 1:
        return {"status": 529 if provider == "anthropic" else 503, "headers": {"retry-after-ms": "200"}}
    return {"text": "fine after an overload"}


def fail500(provider, req, state):
    return {"status": 500}


def unauthorized(provider, req, state):
    return {"status": 401}


def cut(provider, req, state):
    return {"text": "This answer will never arrive in full because the connection drops. " * 4,
            "cut_after_bytes": 700}


def short(provider, req, state):
    return {"text": "An answer whose stream ends without its end marker.", "drop_last_events": 1}


def malformed(provider, req, state):
    return {"text": "", "tool_calls": [run_python("print(1)")], "malformed_tool_args": True}


def sse_error(provider, req, state):
    return {"text": "Starting to answer", "sse_error": {"type": "overloaded_error", "message": "Overloaded"}}


def _faulty_stream(**faults):
    def scenario(provider, req, state):
        spec = {"text": "Split across many small writes: the quick brown fox jumps over the lazy dog.",
                "tool_calls": [run_python("for i in range(3):\n    print(i, 'é ✓')"), run_python("")]}
        spec.update(faults)
        return spec
    return scenario


tiny = _faulty_stream(split_into_tiny_chunks=True)
crlf = _faulty_stream(crlf=True)
tinycrlf = _faulty_stream(split_into_tiny_chunks=True, crlf=True)
plain = _faulty_stream()


def echo(provider, req, state):
    """Says what it received: the system prompt, last user text, tool results."""
    text, images = latest_tool_result(provider, req)
    return {"text": json.dumps({"system": system_text(provider, req), "user": latest_user_text(provider, req),
                                "tool": text, "images": images, "turns": assistant_turns(provider, req),
                                "tools": has_tools(provider, req)})}


def slow(provider, req, state):
    return {"text": "slow " * 50, "delay_per_chunk": 0.2}


SCENARIOS = {name: fn for name, fn in globals().items()
             if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
             and name not in ("messages", "tool_results", "latest_tool_result", "latest_user_text",
                              "system_text", "assistant_turns", "has_tools", "run_python")}
