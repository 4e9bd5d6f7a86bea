"""The scripted model turns and the tool the AutoGen scripts share (offline, no API key):
replies for autogen_ext's ReplayChatCompletionClient."""

import json

from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage

INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "scripted-1",
        "structured_output": False}


def call(name, args, cid, pt=11, ct=7):
    return CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=pt, completion_tokens=ct),
                        content=[FunctionCall(id=cid, name=name, arguments=json.dumps(args))])


def text(t, pt=20, ct=5):
    return CreateResult(finish_reason="stop", cached=False, usage=RequestUsage(prompt_tokens=pt, completion_tokens=ct),
                        content=t)


def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b
