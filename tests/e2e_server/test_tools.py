"""Structured output and tool calls through the official clients, on the real
default model: every constrained answer must validate, every time."""

import json
from typing import List, Literal

import pydantic
import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}


class City(pydantic.BaseModel):
    name: str
    country: str
    population_millions: float
    landmarks: List[str]
    climate: Literal["cold", "temperate", "hot"]


def test_parse_with_a_pydantic_model_validates_every_time(oai, model):
    for seed in range(10):
        r = oai.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": "Describe Paris as JSON."}],
            response_format=City,
            max_tokens=200,
            temperature=0.8,
            seed=seed,
        )
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", msg.content
        assert isinstance(msg.parsed, City), msg.content


def test_a_looping_small_model_still_returns_complete_json(oai, model):
    # Open-ended lists and strings: the 135M model loops inside them; the
    # answer must still end as valid JSON within max_tokens.
    for city in ["Paris", "Rome", "Tokyo", "Berlin", "Cairo", "Lima"]:
        for temperature in (0.0, 0.3, 0.7):
            r = oai.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"Describe {city} as JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": "City", "schema": City.model_json_schema()}},
                max_tokens=300,
                temperature=temperature,
                seed=1,
            )
            assert r.choices[0].finish_reason == "stop", (city, temperature, r.choices[0].message.content)
            City.model_validate_json(r.choices[0].message.content)


def test_json_object_is_an_object(oai, model):
    r = oai.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give me a JSON object with a name and an age."}],
        response_format={"type": "json_object"},
        max_tokens=100,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_required_tool_call_round_trip(oai, model):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = oai.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER, TIME], tool_choice="required", max_tokens=100, temperature=0
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    call = choice.message.tool_calls[0]
    assert call.id and call.type == "function"
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    # The tool's result goes back; the model answers in text.
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "unit": "celsius"})},
    ]
    final = oai.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME], max_tokens=40, temperature=0)
    assert final.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_named_tool_choice_calls_that_tool(oai, model):
    r = oai.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tokyo"}],
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=60,
        temperature=0.7,
        seed=3,
    )
    calls = r.choices[0].message.tool_calls
    assert calls and all(c.function.name == "get_time" for c in calls)
    assert "zone" in json.loads(calls[0].function.arguments)


def test_streamed_tool_calls_assemble(oai, model):
    stream = oai.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather in Oslo, in celsius?"}],
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=100,
        temperature=0,
        stream=True,
    )
    calls, finish = {}, None
    for chunk in stream:
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                slot["name"] += (d.function.name or "") if d.function else ""
                slot["arguments"] += (d.function.arguments or "") if d.function else ""
    assert finish == "tool_calls"
    assert list(calls) == [0] and calls[0]["id"] and calls[0]["name"] == "get_weather"
    assert set(json.loads(calls[0]["arguments"])) == {"city", "unit"}


def test_unknown_fields_and_bad_schemas_are_400(oai, model):
    import openai

    with pytest.raises(openai.BadRequestError, match="not supported"):
        oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], extra_body={"frobnicate": 1})
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        )


def test_ollama_format_schema_and_tools(oll, model):
    schema = City.model_json_schema()
    for seed in range(3):
        r = oll.chat(
            model=model,
            messages=[{"role": "user", "content": "Describe Rome as JSON."}],
            format=schema,
            options={"num_predict": 200, "seed": seed},
            stream=False,
        )
        City.model_validate_json(r.message.content)
    r = oll.generate(model=model, prompt="A JSON object with a key 'ok'.", format="json", options={"num_predict": 60, "temperature": 0})
    assert isinstance(json.loads(r.response), dict)
    r = oll.chat(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        options={"num_predict": 80, "temperature": 0},
        stream=False,
    )
    # Auto choice: the small model may or may not call; a call must be well formed.
    for c in r.message.tool_calls or []:
        assert c.function.name == "get_weather" and isinstance(c.function.arguments, dict)
