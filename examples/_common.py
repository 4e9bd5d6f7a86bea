"""Shared by the example agents: the two scenarios, the tools, the scripted "model" policy
and the command line. Each framework example wraps these tools in its own tool type and
replays the scripted turns through a real model class of that framework, offline.

The scripted policy depends on the agent version, with seeded randomness:

* v1 (the baseline): looks the order up, then acts; fails ~5 % of trials (a garbled answer).
* v2 (the "regressed" candidate): calls a slower tool (``search_orders`` instead of
  ``lookup_order``, ``issue_refund_priority`` instead of ``issue_refund``), sometimes skips
  the lookup and answers from a guess (so it fails more often: ~35-40 %), and spends more
  tokens.
* any other version behaves like v1.

Metamorphic follow-ups (``plan_for_input``) re-run a trial on a transformed input. v1 is
invariant to both transforms; v2 misreads a prompt with typos in about half the trials, and
picks between two tools doing the same job by their order in the tool list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from typing import Any

from otel_assay.metamorphic import inject_noise, permute_tools

SCENARIOS = ("refund-request", "order-status")
STATUSES = ("shipped", "delivered", "processing", "returned")


def order_facts(order_id: str) -> dict[str, Any]:
    h = int(hashlib.sha256(order_id.encode()).hexdigest(), 16)
    return {"order_id": order_id, "status": STATUSES[h % 4], "amount": round(10 + (h >> 8) % 9000 / 100, 2),
            "refundable": (h >> 20) % 5 != 0}


# ------------------------------------------------------------------ tools (plain functions)
def lookup_order(order_id: str) -> str:
    """Look up an order by id: status, amount, whether it can be refunded."""
    time.sleep(0.002)
    return json.dumps(order_facts(order_id))


def search_orders(query: str) -> str:
    """Search orders by free text (slow full-text search)."""
    time.sleep(0.02)
    return json.dumps([order_facts(query)])


def check_refund_policy(order_id: str) -> str:
    """Check whether an order may be refunded."""
    time.sleep(0.001)
    return "refundable" if order_facts(order_id)["refundable"] else "not refundable: final sale"


def issue_refund(order_id: str, amount: float) -> str:
    """Issue a refund."""
    time.sleep(0.003)
    if int(hashlib.md5(order_id.encode()).hexdigest(), 16) % 17 == 0:
        raise RuntimeError("payment gateway timeout")
    return f"refunded {amount:.2f} for {order_id}"


def issue_refund_priority(order_id: str, amount: float) -> str:
    """Issue a refund through the priority queue (slower)."""
    time.sleep(0.03)
    return f"refunded {amount:.2f} for {order_id}"


TOOLS = [lookup_order, search_orders, check_refund_policy, issue_refund, issue_refund_priority]


# ------------------------------------------------------------------ scripted policy
def trial_rng(seed: int, version: str, scenario: str, index: int) -> random.Random:
    return random.Random(f"{seed}/{version}/{scenario}/{index}")


def make_order_id(rng: random.Random) -> str:
    return f"A{rng.randrange(10000, 99999)}"


def prompt(scenario: str, order_id: str) -> str:
    if scenario == "refund-request":
        return f"Hi, I want a refund for order {order_id}, it arrived broken."
    return f"Where is my order {order_id}?"


def plan(scenario: str, version: str, rng: random.Random, order_id: str) -> list[dict[str, Any]]:
    """The turns the scripted model will produce: tool calls then a final answer.

    Each turn: {"tool": name, "args": {...}, "id": call_id, "in": tokens, "out": tokens}
    or {"text": answer, "in": tokens, "out": tokens}."""
    regressed = version == "v2"
    facts = order_facts(order_id)
    turns: list[dict[str, Any]] = []
    n = [0]

    def call(name, **args):
        n[0] += 1
        turns.append({"tool": name, "args": args, "id": f"call_{n[0]}",
                      "in": 150 + 60 * len(turns) + rng.randrange(20), "out": 18 + rng.randrange(8)})

    def answer(text):
        turns.append({"text": text, "in": 150 + 60 * len(turns) + rng.randrange(20),
                      "out": (45 if regressed else 30) + rng.randrange(15)})

    skip_lookup = regressed and rng.random() < 0.4
    garbled = rng.random() < 0.05
    guess = dict(facts, status=STATUSES[(STATUSES.index(facts["status"]) + 1) % 4],
                 amount=round(facts["amount"] + 5, 2), refundable=True)
    known = guess if skip_lookup else facts
    if not skip_lookup:
        if regressed:
            call("search_orders", query=order_id)
        else:
            call("lookup_order", order_id=order_id)
    if scenario == "refund-request":
        call("check_refund_policy", order_id=order_id)
        if known["refundable"] and facts["refundable"]:
            call("issue_refund_priority" if regressed else "issue_refund", order_id=order_id, amount=known["amount"])
            text = f"Done: refund of {known['amount']:.2f} issued for {order_id}."
        else:
            text = f"Sorry, order {order_id} cannot be refunded (final sale)."
    else:
        text = f"Your order {order_id} is {known['status']}."
    answer("Sorry, something went wrong." if garbled else text)
    return turns


def passed(scenario: str, order_id: str, answer: str) -> bool:
    """The trial's check: the answer must be right for the real order."""
    f = order_facts(order_id)
    if scenario == "refund-request":
        if not f["refundable"]:
            return "cannot be refunded" in answer
        return f"{f['amount']:.2f}" in answer and order_id in answer
    return f"is {f['status']}" in answer and order_id in answer


# ------------------------------------------------------------------ metamorphic follow-ups
# transform (otel_assay.metamorphic) -> the relation its follow-ups test
MR_RELATIONS = {"inject_noise": "typo-robustness", "permute_tools": "tool-order"}
NOISE_RATE = 0.1
MISREAD_RATE = 0.5
TOOL_NAMES = tuple(f.__name__ for f in TOOLS)
# plan()'s v2 tool -> the v1 tool doing the same job, and that tool's arguments
_SAME_JOB = {"search_orders": ("lookup_order", lambda args: {"order_id": args["query"]}),
             "issue_refund_priority": ("issue_refund", dict)}


def follow_up_input(transform: str, scenario: str, order_id: str, tools: list, index: int) -> tuple[str, list]:
    """The prompt and the tool list (any tool objects, in declaration order) of pair ``index``'s
    follow-up trial, with ``transform`` applied; seeded by the index, so every version gets the
    same transformed inputs."""
    text = prompt(scenario, order_id)
    if transform == "inject_noise":
        return inject_noise(text, NOISE_RATE, seed=index), list(tools)
    if transform == "permute_tools":
        return text, permute_tools(tools, seed=index)
    raise ValueError(f"unknown transform {transform!r}; one of {', '.join(MR_RELATIONS)}")


def plan_for_input(scenario: str, version: str, rng: random.Random, order_id: str, text: str,
                   tool_names: list[str]) -> list[dict[str, Any]]:
    """``plan`` for the prompt and tool list the agent was actually given.

    Source and follow-up trials of a pair get equally seeded ``rng``s, as a model at
    temperature 0 would answer the same input the same way: whatever differs between them is
    the transform's doing. On the untransformed input this is exactly ``plan``."""
    turns = plan(scenario, version, rng, order_id)
    if version != "v2":
        return turns
    if text != prompt(scenario, order_id) and rng.random() < MISREAD_RATE:
        return [{"text": "Sorry, I could not make sense of that. Could you rephrase your request?", "in": 150,
                 "out": 16}]
    # position bias: of two tools doing the same job v2 calls the one declared last, which in
    # the usual order are the slow ones plan() gives it
    for t in turns:
        other = _SAME_JOB.get(t.get("tool"))
        if other and tool_names.index(other[0]) > tool_names.index(t["tool"]):
            t["tool"], t["args"] = other[0], other[1](t["args"])
    return turns


# ------------------------------------------------------------------ for the framework examples
class Script:
    """The scripted model's cursor over one trial's turns (see ``plan``). A tool that raised
    calls ``tool_failed()``; the model's next turn then retries the last tool call once, as a
    real model reading the error would."""

    def __init__(self, turns: list[dict[str, Any]]):
        self.turns, self.i, self.last_call, self.retry = list(turns), 0, None, False

    def tool_failed(self) -> None:
        self.retry = True

    def next(self) -> dict[str, Any]:
        if self.retry and self.last_call is not None:
            self.retry = False
            return dict(self.last_call, id=self.last_call["id"] + "_retry")
        t = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        if "tool" in t:
            self.last_call = t
        return t


_FAILED_ONCE: set[str] = set()


def agent_tools(on_error=None) -> list:
    """The five tools as plain typed functions with Google-style docstrings (what smolagents,
    the Agents SDK, AutoGen and CrewAI derive tool schemas from). ``issue_refund`` fails once
    per order for some orders (a flaky payment gateway) and then calls ``on_error()``."""

    def lookup_order(order_id: str) -> str:
        """Look up an order by id: status, amount, whether it can be refunded.

        Args:
            order_id: The order id, e.g. A12345.
        """
        return _lookup_order(order_id)

    def search_orders(query: str) -> str:
        """Search orders by free text (slow full-text search).

        Args:
            query: Free text, e.g. an order id.
        """
        return _search_orders(query)

    def check_refund_policy(order_id: str) -> str:
        """Check whether an order may be refunded.

        Args:
            order_id: The order id.
        """
        return _check_refund_policy(order_id)

    def issue_refund(order_id: str, amount: float) -> str:
        """Issue a refund.

        Args:
            order_id: The order id.
            amount: The amount to refund.
        """
        if order_id not in _FAILED_ONCE:
            try:
                return _issue_refund(order_id, amount)
            except RuntimeError:
                _FAILED_ONCE.add(order_id)
                if on_error is not None:
                    on_error()
                raise
        return f"refunded {float(amount):.2f} for {order_id}"

    def issue_refund_priority(order_id: str, amount: float) -> str:
        """Issue a refund through the priority queue (slower).

        Args:
            order_id: The order id.
            amount: The amount to refund.
        """
        return _issue_refund_priority(order_id, amount)

    return [lookup_order, search_orders, check_refund_policy, issue_refund, issue_refund_priority]


_lookup_order, _search_orders, _check_refund_policy = lookup_order, search_orders, check_refund_policy
_issue_refund, _issue_refund_priority = issue_refund, issue_refund_priority


# ------------------------------------------------------------------ command line
def main(run_trials, framework: str, argv=None, run_metamorphic=None) -> None:
    ap = argparse.ArgumentParser(description=f"Run the {framework} example agent for N trials of two scenarios.")
    ap.add_argument("--version", default="v1", help="agent version to run (v2 is the regressed one)")
    ap.add_argument("--trials", type=int, default=20, help="trials per scenario")
    ap.add_argument("--dir", default=None, help="span lake directory (default: OTEL_ASSAY_DIR or ./traces)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the scripted model's choices (default 0)")
    if run_metamorphic is not None:
        ap.add_argument("--metamorphic", choices=list(MR_RELATIONS), metavar="TRANSFORM",
                        help="run --trials metamorphic pairs per scenario instead: a trial, then a follow-up "
                             "on its input transformed by TRANSFORM (inject_noise: typos in the prompt, relation "
                             "typo-robustness; permute_tools: the tool list reordered, relation tool-order; "
                             "name the relation in the config's metamorphic: list)")
    a = ap.parse_args(argv)
    if getattr(a, "metamorphic", None):
        summary = run_metamorphic(a.version, a.trials, a.dir, a.seed, transform=a.metamorphic)
    else:
        summary = run_trials(a.version, a.trials, a.dir, a.seed)
    print(json.dumps(summary, sort_keys=True))
