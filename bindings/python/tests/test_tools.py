"""Tools, response_format and reasoning on chat, and what comes back."""

import asyncio
import json

import pytest

import kiln
from kiln import _kiln

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24}, "population_millions": {"type": "number"}, "capital": {"type": "boolean"}},
    "required": ["name", "population_millions", "capital"],
}


def check_weather_call(call):
    assert isinstance(call, kiln.ToolCall) and call.id.startswith("call_")
    assert call.name == "get_weather"
    args = json.loads(call.arguments)
    assert set(args) == {"city", "unit"} and isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit")
    return args


def check_schema(text):
    v = json.loads(text)
    assert set(v) == {"name", "population_millions", "capital"}, v
    assert isinstance(v["name"], str) and isinstance(v["population_millions"], (int, float))
    assert isinstance(v["capital"], bool)
    return v


def test_a_required_call_is_parsed_from_a_constrained_answer(tiny_long):
    r = tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice="required", max_tokens=150)
    assert isinstance(r, kiln.Reply)
    assert r.finish_reason == "tool_calls" and len(r.tool_calls) == 1, r
    check_weather_call(r.tool_calls[0])
    assert r.content == "" and r.reasoning is None and r.completion_tokens > 0


def test_a_named_choice_calls_that_tool(tiny_long):
    r = tiny_long.chat_message(ASK, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=150)
    assert [c.name for c in r.tool_calls] == ["get_time"]
    assert isinstance(json.loads(r.tool_calls[0].arguments)["zone"], str)


def test_streamed_calls_arrive_on_events(tiny_long):
    whole = tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice="required", max_tokens=150)
    events = list(tiny_long.chat_stream(ASK, tools=[WEATHER], tool_choice="required", max_tokens=150))
    calls = [c for e in events for c in e.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in whole.tool_calls]
    assert "".join(e.text for e in events) == "" and events[-1].finish_reason == "tool_calls"


def test_json_schema_answers_parse_and_match(tiny_long):
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
    check_schema(tiny_long.chat([{"role": "user", "content": "Describe Paris as JSON."}], response_format=fmt, max_tokens=150))
    check_schema(tiny_long.generate("Paris:", response_format=fmt, max_tokens=150))
    assert isinstance(json.loads(tiny_long.generate("x", response_format={"type": "json_object"}, max_tokens=150)), dict)


def test_the_reply_goes_back_into_the_conversation(tiny_long):
    r = tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice="required", max_tokens=150)
    m = r.to_message()
    assert m["role"] == "assistant" and m["tool_calls"][0]["function"]["name"] == "get_weather"
    messages = ASK + [m, {"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": '{"temperature": 21}'}]
    assert isinstance(tiny_long.chat(messages, max_tokens=8), str)
    assert tiny_long.chat_message(messages, tools=[WEATHER], max_tokens=8).finish_reason in ("stop", "length", "tool_calls")


def test_async_chat_message(tiny_long):
    r = asyncio.run(tiny_long.achat_message(ASK, tools=[WEATHER], tool_choice="required", max_tokens=150))
    check_weather_call(r.tool_calls[0])


def test_shape_errors_name_the_option(tiny_long):
    with pytest.raises(TypeError, match="use `chat_message`"):
        tiny_long.chat(ASK, tools=[WEATHER])
    with pytest.raises(ValueError, match="`tools` applies to chat messages"):
        tiny_long.generate("hi", tools=[WEATHER])
    with pytest.raises(ValueError, match="`tool_choice` names \"nope\""):
        tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="`tool_choice` must be none, auto, required"):
        tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice="sometimes")
    with pytest.raises(ValueError, match=r"`tools\[0\].function.name` must be"):
        tiny_long.chat_message(ASK, tools=[{"type": "function", "function": {"name": "get weather"}}])
    with pytest.raises(ValueError, match="`response_format` must be"):
        tiny_long.chat(ASK, response_format={"type": "xml"})
    with pytest.raises(ValueError, match="`response_format`: "):
        tiny_long.chat(ASK, response_format={"type": "json_schema", "json_schema": {"schema": {"type": "frobnicate"}}})
    with pytest.raises(ValueError, match="cannot both constrain"):
        tiny_long.chat_message(ASK, tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"})
    with pytest.raises(ValueError, match="`reasoning_effort` must be"):
        tiny_long.chat(ASK, reasoning_effort="max")
    with pytest.raises(ValueError, match=r"`messages\[0\].image` is not supported"):
        tiny_long.chat([{"role": "user", "content": "hi", "image": "x"}])


def test_the_default_model_calls_a_tool_and_writes_json(smollm2):
    r = smollm2.chat_message(ASK, tools=[WEATHER, TIME], tool_choice="required", max_tokens=100)
    assert r.finish_reason == "tool_calls" and len(r.tool_calls) >= 1
    args = check_weather_call(r.tool_calls[0])
    assert "paris" in args["city"].lower()
    fmt = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    v = check_schema(smollm2.chat([{"role": "user", "content": "Describe Paris as JSON."}], response_format=fmt, max_tokens=200))
    assert "paris" in v["name"].lower()


# A thinking template in Qwen 3's manner: the generation prompt opens `<think>`
# unless `enable_thinking` is false (then it writes an empty one).
THINKING = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "thinker.gguf"
    _kiln._write_tiny_model(str(path), ctx=512, template=THINKING)
    return kiln.Model(str(path), threads=1)


def test_reasoning_comes_back_apart_from_the_answer(thinker):
    # The grammar makes the tiny model write a reasoning and an answer.
    fmt = {"type": "grammar", "grammar": 'start: "plan it" "</think>" "\\n\\n" "the answer"'}
    r = thinker.chat_message(ASK, response_format=fmt, max_tokens=40)
    assert (r.reasoning, r.content, r.finish_reason) == ("plan it", "the answer", "stop")
    assert thinker.chat(ASK, response_format=fmt, max_tokens=40) == "the answer", "chat leaves the reasoning out"
    events = list(thinker.chat_stream(ASK, response_format=fmt, max_tokens=40))
    assert "".join(e.reasoning for e in events) == "plan it" and "".join(e.text for e in events) == "the answer"
    # `enable_thinking: false` reaches the template: the answer starts as content.
    plain = {"type": "grammar", "grammar": 'start: "just this"'}
    r = thinker.chat_message(ASK, response_format=plain, chat_template_kwargs={"enable_thinking": False}, max_tokens=20)
    assert (r.reasoning, r.content) == (None, "just this")
