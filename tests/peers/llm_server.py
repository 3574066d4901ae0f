#!/usr/bin/python3
"""A scripted LLM server speaking the real wire formats, for korch's tests.

    python3 tests/peers/llm_server.py        prints its port on the first line

Endpoints (the path prefix /s/<scenario>/ picks a scenario from
tests/peers/llm_scenarios.py or tests/peers/agent_scenarios.py; without it
the scenario is "hello"):

    POST /s/<scenario>/v1/chat/completions   OpenAI Chat Completions, SSE
    POST /s/<scenario>/v1/messages           Anthropic Messages, SSE
    POST /s/<scenario>/api/chat              Ollama, NDJSON
    GET  /s/<scenario>/requests              what was received: [{"provider",
                                             "path", "headers", "body", "time",
                                             "rejected", "usage"}] (usage: the
                                             {input, output} tokens the reply
                                             reported, when it streamed)

So the base URLs are http://127.0.0.1:PORT/s/NAME/v1 (OpenAI) and
http://127.0.0.1:PORT/s/NAME (Anthropic, Ollama).

Streams are written the way the services write them: chunked transfer
encoding, OpenAI `data: {json}\\n\\n` chunks ending in `data: [DONE]`, Anthropic
`event: X\\ndata: {json}\\n\\n` with message_start ... ping ... message_stop,
Ollama one JSON object per line. Requests are checked as the APIs check
them and a violation is answered with HTTP 400 in the API's error format.
"""
import base64
import json
import os
import random
import socket
import string
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_scenarios  # noqa: E402

SCENARIOS = dict(llm_scenarios.SCENARIOS)
try:
    import agent_scenarios  # noqa: E402  (the agent layer's end-to-end scenarios)
    SCENARIOS.update(agent_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import live_scenarios  # noqa: E402  (live progress: code as it is written, back-offs, tokens)
    SCENARIOS.update(live_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import attack_scenarios  # noqa: E402  (the model and its kernel attack the person: terminal, page, downloads)
    SCENARIOS.update(attack_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import trust_scenarios  # noqa: E402  (receipts, fences in another language: issue 23)
    SCENARIOS.update(trust_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import branch_scenarios  # noqa: E402  (branching a session from a step: issue 23)
    SCENARIOS.update(branch_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import team_scenarios  # noqa: E402  (a team's korch serve: answers to their owners, issue 26)
    SCENARIOS.update(team_scenarios.SCENARIOS)
except ImportError:
    pass
try:
    import pyclient_scenarios  # noqa: E402  (the Python client's agent sessions)
    SCENARIOS.update(pyclient_scenarios.SCENARIOS)
except ImportError:
    pass

LOCK = threading.Lock()
STATE = {}      # scenario -> {"n": int, "requests": [...]}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def rand_id(prefix, n=24):
    return prefix + "".join(random.choice(string.ascii_letters + string.digits) for _ in range(n))


def pieces(text, words=2):
    """Text in several deltas of a couple of words, as models stream it."""
    out, cur, count = [], "", 0
    for ch in text:
        cur += ch
        if ch == " ":
            count += 1
            if count == words:
                out.append(cur)
                cur, count = "", 0
    if cur:
        out.append(cur)
    return out


def fragments(s, size=7):
    """Pieces of s; size is a number or a list of sizes used in turn."""
    sizes = size if isinstance(size, list) else [size]
    out, i, k = [], 0, 0
    while i < len(s):
        n = sizes[k % len(sizes)]
        out.append(s[i:i + n])
        i += n
        k += 1
    return out


def tokens(s):
    return max(1, len(s) // 4)


# ---------------------------------------------------------------- validation

class Invalid(Exception):
    pass


def check_openai(headers, body):
    auth = headers.get("authorization", "")
    if not auth.startswith("Bearer ") or len(auth) <= 7:
        raise Invalid((401, "You didn't provide an API key. You need to provide your API key in an Authorization "
                            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_request_error"))
    if not isinstance(body.get("model"), str):
        raise Invalid((400, "you must provide a model parameter", "invalid_request_error"))
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise Invalid((400, "[] is too short - 'messages'", "invalid_request_error"))
    if "stream_options" in body and not body.get("stream"):
        raise Invalid((400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                       "invalid_request_error"))
    for t in body.get("tools") or []:
        if t.get("type") != "function" or not isinstance(t.get("function", {}).get("name"), str):
            raise Invalid((400, "Missing required parameter: 'tools[0].function'.", "invalid_request_error"))
    pending = []     # tool_call_ids still to answer
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise Invalid((400, "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', "
                                "'function', and 'developer'." % role, "invalid_request_error"))
        if role != "tool" and pending:
            raise Invalid((400, "An assistant message with 'tool_calls' must be followed by tool messages responding "
                                "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                                + ", ".join(pending), "invalid_request_error"))
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if part.get("type") == "image_url":
                    if role != "user":
                        raise Invalid((400, "Image URLs are only allowed for messages with role 'user', but this "
                                            "message with role '%s' contains an image URL." % role,
                                       "invalid_request_error"))
                    url = (part.get("image_url") or {}).get("url", "")
                    if not (url.startswith("data:image/") and ";base64," in url) and not url.startswith("http"):
                        raise Invalid((400, "Invalid image URL: 'messages[%d].content[%d].image_url.url'." % (i, j),
                                       "invalid_request_error"))
                    base64.b64decode(url.split(",", 1)[1], validate=True)
                elif part.get("type") != "text":
                    raise Invalid((400, "Invalid value: '%s'. Supported values are: 'text', 'image_url', "
                                        "'input_audio', 'refusal', 'audio', and 'file'." % part.get("type"),
                                   "invalid_request_error"))
        elif not isinstance(content, str) and not (role == "assistant" and content is None and m.get("tool_calls")):
            raise Invalid((400, "Invalid type for 'messages[%d].content': expected one of a string or array of "
                                "objects, but got %s instead." % (i, type(content).__name__), "invalid_request_error"))
        if role == "assistant" and m.get("tool_calls"):
            for j, tc in enumerate(m["tool_calls"]):
                if tc.get("type") != "function" or not tc.get("id"):
                    raise Invalid((400, "Missing required parameter: 'messages[%d].tool_calls[%d].id'." % (i, j),
                                   "invalid_request_error"))
                if not isinstance(tc.get("function", {}).get("arguments"), str):
                    raise Invalid((400, "Invalid type for 'messages[%d].tool_calls[%d].function.arguments': expected "
                                        "a string, but got an object instead." % (i, j), "invalid_request_error"))
                pending.append(tc["id"])
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                raise Invalid((400, "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                                    "message with 'tool_calls'.", "invalid_request_error"))
            pending.remove(m["tool_call_id"])
    if pending:
        raise Invalid((400, "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                            "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                       + ", ".join(pending), "invalid_request_error"))


def check_anthropic(headers, body):
    if not headers.get("x-api-key"):
        raise Invalid((401, "x-api-key header is required", "authentication_error"))
    if not headers.get("anthropic-version"):
        raise Invalid((400, "anthropic-version: header is required", "invalid_request_error"))
    if not isinstance(body.get("max_tokens"), int):
        raise Invalid((400, "max_tokens: Field required", "invalid_request_error"))
    if not isinstance(body.get("model"), str):
        raise Invalid((400, "model: Field required", "invalid_request_error"))
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise Invalid((400, "messages: at least one message is required", "invalid_request_error"))
    if "system" in body and not isinstance(body["system"], (str, list)):
        raise Invalid((400, "system: Input should be a valid string", "invalid_request_error"))
    for t in body.get("tools") or []:
        if not isinstance(t.get("name"), str) or not isinstance(t.get("input_schema"), dict):
            raise Invalid((400, "tools.0.input_schema: Field required", "invalid_request_error"))
    uses_tools = False
    prev_uses = []
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise Invalid((400, "messages: Unexpected role \"%s\". The Messages API accepts a top-level `system` "
                                "parameter, not \"system\" as an input message role." % role, "invalid_request_error"))
        if i == 0 and role != "user":
            raise Invalid((400, "messages: first message must use the \"user\" role", "invalid_request_error"))
        if i > 0 and msgs[i - 1].get("role") == role:
            raise Invalid((400, "messages: roles must alternate between \"user\" and \"assistant\", but found multiple "
                                "\"%s\" roles in a row" % role, "invalid_request_error"))
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            raise Invalid((400, "messages.%d: all messages must have non-empty content except for the optional final "
                                "assistant message" % i, "invalid_request_error"))
        results = []
        seen_other = False
        for j, b in enumerate(blocks):
            t = b.get("type")
            if t == "text":
                if not b.get("text"):
                    raise Invalid((400, "messages.%d.content.%d.text: text content blocks must be non-empty" % (i, j),
                                   "invalid_request_error"))
                seen_other = True
            elif t == "image":
                src = b.get("source") or {}
                if src.get("type") != "base64" or src.get("media_type") not in (
                        "image/png", "image/jpeg", "image/gif", "image/webp"):
                    raise Invalid((400, "messages.%d.content.%d.image.source: invalid image source" % (i, j),
                                   "invalid_request_error"))
                base64.b64decode(src.get("data", ""), validate=True)
                seen_other = True
            elif t == "tool_use":
                if role != "assistant" or not b.get("id") or not isinstance(b.get("input"), dict):
                    raise Invalid((400, "messages.%d.content.%d: invalid tool_use block" % (i, j),
                                   "invalid_request_error"))
                uses_tools = True
            elif t == "tool_result":
                if role != "user":
                    raise Invalid((400, "messages.%d.content.%d: tool_result blocks are only allowed in user "
                                        "messages" % (i, j), "invalid_request_error"))
                if seen_other:
                    raise Invalid((400, "messages.%d: `tool_result` blocks must come first in the content of the "
                                        "user message" % i, "invalid_request_error"))
                c = b.get("content")
                for k, inner in enumerate(c if isinstance(c, list) else []):
                    if inner.get("type") not in ("text", "image"):
                        raise Invalid((400, "messages.%d.content.%d.content.%d: invalid block type" % (i, j, k),
                                       "invalid_request_error"))
                    if inner.get("type") == "text" and not inner.get("text"):
                        raise Invalid((400, "messages.%d.content.%d.content.%d.text: text content blocks must be "
                                            "non-empty" % (i, j, k), "invalid_request_error"))
                results.append(b.get("tool_use_id"))
                uses_tools = True
            else:
                raise Invalid((400, "messages.%d.content.%d.type: unknown block type '%s'" % (i, j, t),
                               "invalid_request_error"))
        stray = [r for r in results if r not in prev_uses]
        if stray:
            raise Invalid((400, "messages.%d.content.0: unexpected `tool_use_id` found in `tool_result` blocks: %s. "
                                "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
                                "message." % (i, stray[0]), "invalid_request_error"))
        missing = [u for u in prev_uses if u not in results]
        if missing:
            raise Invalid((400, "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately "
                                "after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the "
                                "next message." % (i - 1, ", ".join(missing)), "invalid_request_error"))
        prev_uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
    if prev_uses:
        raise Invalid((400, "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: "
                            "%s." % (len(msgs) - 1, ", ".join(prev_uses)), "invalid_request_error"))
    if uses_tools and not body.get("tools"):
        raise Invalid((400, "Requests which include `tool_use` or `tool_result` blocks must define tools.",
                       "invalid_request_error"))


def check_ollama(headers, body):
    if not body.get("model"):
        raise Invalid((400, "model is required", None))
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise Invalid((400, "json: cannot unmarshal into Go struct field ChatRequest.messages of type []api.Message",
                       None))
    for m in msgs:
        if m.get("role") not in ("system", "user", "assistant", "tool"):
            raise Invalid((400, "invalid role: %s" % m.get("role"), None))
        if not isinstance(m.get("content", ""), str):
            raise Invalid((400, "json: cannot unmarshal array into Go struct field Message.messages.content of type "
                                "string", None))
        for img in m.get("images") or []:
            if not isinstance(img, str) or img.startswith("data:"):
                raise Invalid((400, "illegal base64 data at input byte 4", None))
            base64.b64decode(img, validate=True)
        for tc in m.get("tool_calls") or []:
            if not isinstance(tc.get("function", {}).get("arguments"), dict):
                raise Invalid((400, "json: cannot unmarshal string into Go struct field "
                                    "ToolCallFunction.messages.tool_calls.function.arguments of type "
                                    "api.ToolCallFunctionArguments", None))
    if not isinstance((body.get("options") or {}).get("num_ctx", 0), int):
        raise Invalid((400, "invalid options", None))


CHECKS = {"openai": check_openai, "anthropic": check_anthropic, "ollama": check_ollama}


def error_body(provider, status, message=None, etype=None):
    defaults = {
        400: ("invalid_request_error", "invalid request"),
        401: ("authentication_error", "invalid x-api-key") if provider == "anthropic" else
             ("invalid_request_error", "Incorrect API key provided: sk-test***. You can find your API key at "
                                       "https://platform.openai.com/account/api-keys."),
        403: ("permission_error", "Your API key does not have permission to use the specified resource."),
        404: ("not_found_error", "model not found"),
        429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit") if
             provider == "anthropic" else
             ("requests", "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, "
                          "Requested 1. Please try again in 1s."),
        500: ("api_error", "Internal server error") if provider == "anthropic" else
             ("server_error", "The server had an error while processing your request. Sorry about that!"),
        503: ("api_error", "Service unavailable"),
        529: ("overloaded_error", "Overloaded"),
    }
    dtype, dmsg = defaults.get(status, ("api_error", "error %d" % status))
    etype, message = etype or dtype, message or dmsg
    if provider == "anthropic":
        return {"type": "error", "error": {"type": etype, "message": message}}
    if provider == "ollama":
        return {"error": "unauthorized" if status == 401 and message == dmsg else message}
    code = "invalid_api_key" if status == 401 else "rate_limit_exceeded" if status == 429 else None
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


# ------------------------------------------------------------------ streams

def tool_args(call, malformed, ascii_only=False):
    args = call.get("arguments", {})
    # ascii_only: non-ASCII as \\uXXXX escapes (surrogate pairs beyond the BMP), as some APIs send it
    s = args if isinstance(args, str) else json.dumps(args, separators=(",", ":"), ensure_ascii=ascii_only)
    if malformed:
        s = s[:-2] + ', "oops": }'
    return s


def openai_events(spec, body, prompt_tokens):
    """The byte strings of an OpenAI stream, one per SSE event."""
    base = {"id": rand_id("chatcmpl-", 29), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "gpt-4o-mini") + "-2024-07-18", "service_tier": "default",
            "system_fingerprint": "fp_scripted"}
    usage_on = (body.get("stream_options") or {}).get("include_usage")

    def chunk(delta, finish=None):
        d = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
        if usage_on:
            d["usage"] = None
        return "data: %s\n\n" % compact(d)

    text = spec.get("text") or ""
    calls = spec.get("tool_calls") or []
    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    for k, p in enumerate(pieces(text)):
        out.append(chunk({"content": p}))
        if k == 0 and spec.get("sse_error"):
            e = spec["sse_error"]
            out.append("data: %s\n\n" % compact({"error": {"message": e.get("message", "error"),
                                                           "type": e.get("type", "server_error"),
                                                           "param": None, "code": None}}))
            return out
    completion = tokens(text)
    for i, call in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": rand_id("call_"), "type": "function",
                                          "function": {"name": call["name"], "arguments": ""}}]}))
        args = tool_args(call, spec.get("malformed_tool_args"), spec.get("ascii_args"))
        completion += tokens(args)
        for frag in fragments(args, spec.get("arg_fragments", 7)):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
    out.append(chunk({}, "tool_calls" if calls else spec.get("finish", "stop")))
    if usage_on:
        spec["_reported"] = {"input": prompt_tokens, "output": completion}
        out.append("data: %s\n\n" % compact(dict(base, choices=[], usage={
            "prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})))
    out.append("data: [DONE]\n\n")
    return out


def anthropic_events(spec, body, prompt_tokens):
    def ev(name, data):
        return "event: %s\ndata: %s\n\n" % (name, compact(data))

    text = spec.get("text") or ""
    calls = spec.get("tool_calls") or []
    out = [ev("message_start", {"type": "message_start", "message": {
        "id": rand_id("msg_01"), "type": "message", "role": "assistant", "model": body.get("model"),
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 1}}})]
    index = 0
    completion = 1
    if text:
        out.append(ev("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "text", "text": ""}}))
        out.append('event: ping\ndata: {"type": "ping"}\n\n')
        for k, p in enumerate(pieces(text)):
            out.append(ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": p}}))
            if k == 0 and spec.get("sse_error"):
                e = spec["sse_error"]
                out.append(ev("error", {"type": "error", "error": {"type": e.get("type", "api_error"),
                                                                   "message": e.get("message", "error")}}))
                return out
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
        completion += tokens(text)
    else:
        out.append('event: ping\ndata: {"type": "ping"}\n\n')
    for call in calls:
        out.append(ev("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": rand_id("toolu_01"), "name": call["name"], "input": {}}}))
        out.append(ev("content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "input_json_delta", "partial_json": ""}}))
        args = tool_args(call, spec.get("malformed_tool_args"), spec.get("ascii_args"))
        completion += tokens(args)
        for frag in fragments(args, spec.get("arg_fragments", 7)):
            out.append(ev("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "input_json_delta", "partial_json": frag}}))
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = "tool_use" if calls else {"stop": "end_turn", "length": "max_tokens"}.get(spec.get("finish", "stop"),
                                                                                    "end_turn")
    spec["_reported"] = {"input": prompt_tokens, "output": completion}
    out.append(ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": completion}}))
    out.append(ev("message_stop", {"type": "message_stop"}))
    return out


def ollama_events(spec, body, prompt_tokens):
    model = body.get("model")

    def line(obj):
        return compact(obj) + "\n"

    def now():
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".%06dZ" % (time.time() % 1 * 1e6)

    text = spec.get("text") or ""
    calls = spec.get("tool_calls") or []
    out = []
    for k, p in enumerate(pieces(text)):
        out.append(line({"model": model, "created_at": now(), "message": {"role": "assistant", "content": p},
                         "done": False}))
        if k == 0 and spec.get("sse_error"):
            out.append(line({"error": spec["sse_error"].get("message", "error")}))
            return out
    completion = tokens(text)
    if calls:
        tc = []
        for call in calls:
            args = call.get("arguments", {})
            if spec.get("malformed_tool_args"):
                args = tool_args(call, True)    # not what ollama does: it parses them itself
            completion += tokens(compact(args))
            tc.append({"function": {"name": call["name"], "arguments": args}})
        out.append(line({"model": model, "created_at": now(),
                         "message": {"role": "assistant", "content": "", "tool_calls": tc}, "done": False}))
    spec["_reported"] = {"input": prompt_tokens, "output": completion}
    out.append(line({"model": model, "created_at": now(), "message": {"role": "assistant", "content": ""},
                     "done_reason": spec.get("finish", "stop"), "done": True, "total_duration": 123456789,
                     "load_duration": 1234567, "prompt_eval_count": prompt_tokens, "prompt_eval_duration": 2345678,
                     "eval_count": completion, "eval_duration": 3456789}))
    return out


STREAMS = {"openai": (openai_events, "text/event-stream; charset=utf-8"),
           "anthropic": (anthropic_events, "text/event-stream; charset=utf-8"),
           "ollama": (ollama_events, "application/x-ndjson")}


# ------------------------------------------------------------------- server

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "scripted-llm/1.0"

    def setup(self):
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if os.environ.get("LLM_SERVER_LOG"):
            sys.stderr.write("llm_server: " + fmt % args + "\n")

    def route(self):
        path = self.path.split("?", 1)[0]
        scenario = "hello"
        if path.startswith("/s/"):
            parts = path.split("/", 3)
            scenario = parts[2]
            path = "/" + (parts[3] if len(parts) > 3 else "")
        return scenario, path

    def send_json(self, status, obj, headers=None):
        data = compact(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        scenario, path = self.route()
        if path == "/requests":
            with LOCK:
                reqs = list(STATE.get(scenario, {}).get("requests", []))
            self.send_json(200, reqs)
        elif path in ("/", "/api/version", "/api/tags"):
            self.send_json(200, {"version": "0.0.0-scripted", "models": []})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        scenario, path = self.route()
        provider = {"/v1/chat/completions": "openai", "/chat/completions": "openai",
                    "/v1/messages": "anthropic", "/api/chat": "ollama"}.get(path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        if provider is None:
            return self.send_json(404, {"error": {"message": "Unknown request URL: POST %s" % self.path,
                                                  "type": "invalid_request_error", "param": None,
                                                  "code": "unknown_url"}})
        record = {"provider": provider, "path": self.path, "headers": headers, "time": time.time(),
                  "rejected": None}
        with LOCK:
            st = STATE.setdefault(scenario, {"n": 0, "requests": []})
            st["requests"].append(record)
        try:
            body = json.loads(raw)
            record["body"] = body
            if not isinstance(body, dict):
                raise Invalid((400, "the body must be a JSON object", None))
            CHECKS[provider](headers, body)
        except (ValueError, Invalid) as e:
            status, msg, etype = e.args[0] if isinstance(e, Invalid) else (400, "invalid request body: %s" % e, None)
            record["rejected"] = msg
            sys.stderr.write("llm_server: %s request rejected: %s\n" % (provider, msg))
            return self.send_json(status, error_body(provider, status, msg, etype))
        fn = SCENARIOS.get(scenario)
        if fn is None:
            return self.send_json(404, error_body(provider, 404, "no scenario '%s'" % scenario))
        with LOCK:
            st["n"] += 1
            spec = fn(provider, body, st)
        if "status" in spec:
            return self.send_json(spec["status"], spec.get("body") or error_body(provider, spec["status"]),
                                  spec.get("headers"))
        make, ctype = STREAMS[provider]
        events = make(spec, body, tokens(raw.decode("utf-8", "replace")))
        if spec.get("drop_last_events"):
            events = events[:-spec["drop_last_events"]]
        record["usage"] = spec.get("_reported")     # the token counts this reply reports
        self.stream(events, ctype, spec)

    def stream(self, events, ctype, spec):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("x-request-id", rand_id("req_"))
        self.end_headers()
        data = "".join(events)
        if spec.get("crlf"):
            data = data.replace("\n", "\r\n")
        data = data.encode()
        if spec.get("split_into_tiny_chunks"):
            writes, i = [], 0
            while i < len(data):
                n = random.randint(1, 7)
                writes.append(data[i:i + n])
                i += n
        else:
            writes = [e.encode().replace(b"\n", b"\r\n") if spec.get("crlf") else e.encode() for e in events]
        limit = spec.get("cut_after_bytes")
        sent = 0
        for w in writes:
            if limit is not None and sent + len(w) > limit:
                w = w[:limit - sent]
                if w:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(w), w))
                self.wfile.flush()
                # drop the connection without the last chunk: a cut stream
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(w), w))
            self.wfile.flush()
            sent += len(w)
            if spec.get("split_into_tiny_chunks"):
                time.sleep(0.0005)
            if spec.get("delay_per_chunk"):
                time.sleep(spec["delay_per_chunk"])
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # a client that hangs up (cancelled, timed out, over its limit) is normal here
        if isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    srv = Server(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
