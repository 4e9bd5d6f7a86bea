"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (stdlib only), so the
real provider code paths of the OpenAI Agents SDK, CrewAI and AutoGen run offline
(reference/instrumentation.md §8.1). Non-streaming and SSE streaming responses."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tool_call_turn(name, args, call_id="call_1", pt=11, ct=7):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}],
            "_finish": "tool_calls", "_usage": (pt, ct)}


def text_turn(text, pt=20, ct=5):
    return {"role": "assistant", "content": text, "_finish": "stop", "_usage": (pt, ct)}


class FakeOpenAI:
    """Serves POST {base_url}/chat/completions from a script of turns; records requests."""

    def __init__(self, turns=(), model="fake-model-1"):
        self.turns, self.i, self.model, self.requests = list(turns), 0, model, []
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self.send_response(404)
                    self.end_headers()
                    return
                with outer.lock:
                    outer.requests.append((self.path, body))
                    t = dict(outer.next_turn(body))
                finish, (pt, ct) = t.pop("_finish"), t.pop("_usage")
                usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
                model = body.get("model") or outer.model
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    delta = dict(t)
                    if "tool_calls" in delta:
                        delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(delta["tool_calls"])]
                    for c in ({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                              {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                              {"choices": [], "usage": usage}):
                        c.update(id="chatcmpl-fake", object="chat.completion.chunk", created=int(time.time()), model=model)
                        self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                data = json.dumps({"id": f"chatcmpl-{outer.i}", "object": "chat.completion", "created": int(time.time()),
                                   "model": model, "usage": usage,
                                   "choices": [{"index": 0, "message": t, "finish_reason": finish}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def next_turn(self, body: dict) -> dict:
        """The turn answering request ``body`` (called under the lock); subclasses may script
        dynamically."""
        t = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        return t

    def script(self, turns) -> None:
        """Replace the script (e.g. for the next trial)."""
        with self.lock:
            self.turns, self.i = list(turns), 0

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()
