"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (stdlib only), so the
real provider code paths of the OpenAI Agents SDK, CrewAI and AutoGen run offline
(reference/instrumentation.md §8.1). Non-streaming and SSE streaming responses; the same
turns are also served by the Responses API (``POST {base_url}/responses``), which the Agents
SDK's default model (``OpenAIResponsesModel``) uses."""

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
    """Serves POST {base_url}/chat/completions (and /responses) from a script of turns;
    records requests."""

    def __init__(self, turns=(), model="fake-model-1"):
        self.turns, self.i, self.model, self.requests = list(turns), 0, model, []
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                responses_api = self.path.endswith("/responses")
                if not (self.path.endswith("/chat/completions") or responses_api):
                    self.send_response(404)
                    self.end_headers()
                    return
                with outer.lock:
                    outer.requests.append((self.path, body))
                    t = dict(outer.next_turn(body))
                finish, (pt, ct) = t.pop("_finish"), t.pop("_usage")
                usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
                model = body.get("model") or outer.model
                if responses_api:
                    self._respond_responses(body, t, model, pt, ct)
                    return
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

            def _respond_responses(self, body, t, model, pt, ct):
                with outer.lock:
                    n = len(outer.requests)
                output = [{"type": "function_call", "id": f"fc_{n}_{k}", "call_id": tc["id"], "status": "completed",
                           "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                          for k, tc in enumerate(t.get("tool_calls") or [])]
                if t.get("content"):
                    output.insert(0, {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                                      "content": [{"type": "output_text", "text": t["content"], "annotations": []}]})
                resp = {"id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "model": model,
                        "instructions": body.get("instructions"), "tools": body.get("tools") or [],
                        "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                        "usage": {"input_tokens": pt, "output_tokens": ct, "total_tokens": pt + ct,
                                               "input_tokens_details": {"cached_tokens": 0},
                                               "output_tokens_details": {"reasoning_tokens": 0}}}
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    events = [("response.created", {"response": dict(resp, status="in_progress", output=[])})]
                    for k, item in enumerate(output):
                        events += [("response.output_item.added", {"output_index": k, "item": item}),
                                   ("response.output_item.done", {"output_index": k, "item": item})]
                    events.append(("response.completed", {"response": resp}))
                    for seq, (kind, ev) in enumerate(events):
                        ev.update(type=kind, sequence_number=seq)
                        self.wfile.write(f"event: {kind}\ndata: {json.dumps(ev)}\n\n".encode())
                    return
                data = json.dumps(resp).encode()
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
