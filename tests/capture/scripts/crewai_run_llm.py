"""The scripted CrewAI model (ReAct text protocol, real ToolUsage path) and its replies,
shared by the CrewAI test scripts."""

from crewai.events.types.llm_events import LLMCallType
from crewai.llms.base_llm import BaseLLM, llm_call_context


class ScriptedLLM(BaseLLM):
    def __init__(self, replies, model="scripted-1", **kw):
        super().__init__(model=model, **kw)
        self._replies = list(replies)
        self._i = 0

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None,
             from_agent=None, response_model=None, **kw):
        with llm_call_context():
            self._emit_call_started_event(messages=messages, tools=tools, callbacks=callbacks,
                                          available_functions=available_functions, from_task=from_task,
                                          from_agent=from_agent)
            r = self._replies[min(self._i, len(self._replies) - 1)]
            self._i += 1
            self._emit_call_completed_event(response=r, call_type=LLMCallType.LLM_CALL, from_task=from_task,
                                            from_agent=from_agent, messages=messages, finish_reason="stop",
                                            usage={"prompt_tokens": 10 * self._i + 1, "completion_tokens": self._i + 6,
                                                   "total_tokens": 11 * self._i + 7})
            return r

    def supports_function_calling(self):
        return False

    def supports_stop_words(self):
        return True

    def get_context_window_size(self):
        return 8192


def act(tool_name, args):
    import json
    return f"Thought: use {tool_name}\nAction: {tool_name}\nAction Input: {json.dumps(args)}"


def final(text):
    return f"Thought: I now know the final answer\nFinal Answer: {text}"
