"""Message converters: what they build is what the `anthropic` and `openai` packages'
own types accept, and pi messages survive the trip through each API and back
(hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples, require_module

anthropic = require_module("anthropic")
openai = require_module("openai")

from anthropic.types import Message as AnthropicMessage  # noqa: E402
from anthropic.types import MessageParam  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam  # noqa: E402
from openai.types.responses import Response, ResponseInputParam  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from sessiontree.integrations._items import item_to_pi_message  # noqa: E402
from sessiontree.integrations.messages import (  # noqa: E402
    from_anthropic,
    from_openai_chat,
    from_openai_response,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])
CHAT_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
RESPONSES_INPUT = TypeAdapter(ResponseInputParam)

text = st.text(min_size=1, max_size=40)
ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ident, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(ident, json_value, max_size=4)
image = st.builds(
    lambda data, mime: {"type": "image", "data": data, "mimeType": mime},
    st.text(
        alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        min_size=4,
        max_size=16,
    ),
    st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
)
user_content = st.one_of(
    text,
    st.lists(
        st.one_of(st.builds(lambda t: {"type": "text", "text": t}, text), image),
        min_size=1,
        max_size=4,
    ),
)
tool_call = st.builds(
    lambda i, n, a: {"type": "toolCall", "id": f"call_{i}", "name": n, "arguments": a},
    ident,
    ident,
    arguments,
)
thinking = st.builds(
    lambda t, s: {"type": "thinking", "thinking": t, "thinkingSignature": s}, text, ident
)


def assistant(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": "x",
        "provider": "x",
        "model": "m",
        "usage": {},
        "stopReason": "stop",
        "timestamp": 0,
    }


text_block = st.builds(lambda t: {"type": "text", "text": t}, text)
assistant_message = st.builds(
    lambda th, tx, calls: assistant([*th, *tx, *calls]),
    st.lists(thinking, max_size=1),
    st.lists(text_block, max_size=1),
    st.lists(tool_call, max_size=3),
).filter(lambda m: m["content"])
user_message = st.builds(lambda c: {"role": "user", "content": c, "timestamp": 0}, user_content)
tool_result = st.builds(
    lambda i, t, e: {
        "role": "toolResult",
        "toolCallId": f"call_{i}",
        "toolName": "t",
        "content": [{"type": "text", "text": t}],
        "isError": e,
        "timestamp": 0,
    },
    ident,
    text,
    st.booleans(),
)
conversation = st.lists(
    st.one_of(user_message, assistant_message, tool_result), min_size=1, max_size=8
)

N = examples(200)


@settings(max_examples=N, deadline=None)
@given(conversation, st.none() | text)
def test_what_is_built_is_what_the_sdks_types_accept(
    messages: list[dict[str, Any]], system: str | None
) -> None:
    request = to_anthropic(messages, system)
    ANTHROPIC_MESSAGES.validate_python(request["messages"])
    assert request.get("system") == system
    CHAT_MESSAGES.validate_python(to_openai_chat(messages, system))
    RESPONSES_INPUT.validate_python(to_openai_responses(messages, system))


def _anthropic_response(blocks: list[dict[str, Any]]) -> AnthropicMessage:
    return AnthropicMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": blocks,
            "stop_reason": "tool_use"
            if any(b["type"] == "tool_use" for b in blocks)
            else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 11,
                "output_tokens": 7,
                "cache_read_input_tokens": 3,
                "cache_creation_input_tokens": 2,
            },
        }
    )


@settings(max_examples=N, deadline=None)
@given(assistant_message)
def test_anthropic_round_trip(message: dict[str, Any]) -> None:
    (sent,) = to_anthropic([message])["messages"]
    back = from_anthropic(_anthropic_response(sent["content"]))
    assert back["content"] == message["content"]
    assert (
        back["usage"]["input"] == 11
        and back["usage"]["cacheRead"] == 3
        and back["usage"]["cacheWrite"] == 2
    )
    assert back["usage"]["totalTokens"] == 23
    assert back["stopReason"] == (
        "toolUse" if any(b["type"] == "toolCall" for b in message["content"]) else "stop"
    )
    assert back["api"] == "anthropic-messages" and back["model"] == "claude-sonnet-4-5"


@settings(max_examples=N, deadline=None)
@given(assistant_message)
def test_chat_completions_round_trip(message: dict[str, Any]) -> None:
    (sent,) = to_openai_chat([message]) or [None]
    if sent is None:  # only thinking: nothing to send
        assert all(b["type"] == "thinking" for b in message["content"])
        return
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls" if sent.get("tool_calls") else "stop",
                    "message": {**sent, "refusal": None},
                }
            ],
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": 5,
                "total_tokens": 25,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        }
    )
    back = from_openai_chat(completion)
    assert back["content"] == [b for b in message["content"] if b["type"] != "thinking"]
    assert (
        back["usage"]["input"] == 16
        and back["usage"]["cacheRead"] == 4
        and back["usage"]["output"] == 5
    )


@settings(max_examples=N, deadline=None)
@given(assistant_message)
def test_responses_round_trip(message: dict[str, Any]) -> None:
    output = []
    for n, item in enumerate(to_openai_responses([message])):
        if item.get("role") == "assistant":
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": item["content"], "annotations": []}
                    ],
                }
            )
        else:
            output.append({**item, "id": f"fc_{n}", "status": "completed"})
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 9,
                "output_tokens": 2,
                "total_tokens": 11,
                "input_tokens_details": {"cached_tokens": 1, "cache_write_tokens": 2},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )
    back = from_openai_response(response)
    assert back["content"] == [b for b in message["content"] if b["type"] != "thinking"]
    assert (
        back["usage"]["input"] == 6
        and back["usage"]["cacheRead"] == 1
        and back["usage"]["cacheWrite"] == 2
    )


@settings(max_examples=N, deadline=None)
@given(st.one_of(user_message, tool_result))
def test_user_and_tool_results_through_responses_items_and_back(message: dict[str, Any]) -> None:
    tools: dict[str, str] = {message.get("toolCallId", ""): "t"}
    (item,) = to_openai_responses([message])
    back = item_to_pi_message(item, tools)
    assert back is not None
    want = message["content"]
    if isinstance(want, str):
        want = [{"type": "text", "text": want}]
    assert back["content"] == want
    assert back["role"] == message["role"]


def test_reasoning_keeps_its_item_as_the_signature() -> None:
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "hmm"}],
        "encrypted_content": "xyz",
    }
    response = Response.model_validate(
        {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5",
            "output": [item],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )
    back = from_openai_response(response)
    assert back["content"][0]["thinking"] == "hmm"
    (sent,) = to_openai_responses([back])
    assert sent["id"] == "rs_1" and sent["encrypted_content"] == "xyz"
    RESPONSES_INPUT.validate_python([sent])


def test_anthropic_tool_results_share_one_user_message_and_unsigned_thinking_is_text() -> None:
    messages = [
        assistant(
            [
                {"type": "thinking", "thinking": "plan"},
                {"type": "toolCall", "id": "a", "name": "f", "arguments": {}},
                {"type": "toolCall", "id": "b", "name": "f", "arguments": {}},
            ]
        ),
        {
            "role": "toolResult",
            "toolCallId": "a",
            "toolName": "f",
            "content": [{"type": "text", "text": "1"}],
            "isError": False,
        },
        {
            "role": "toolResult",
            "toolCallId": "b",
            "toolName": "f",
            "content": [{"type": "text", "text": "2"}],
            "isError": True,
        },
    ]
    out = to_anthropic(messages, "sys")
    assert out["system"] == "sys"
    assert [m["role"] for m in out["messages"]] == ["assistant", "user"]
    assert out["messages"][0]["content"][0] == {"type": "text", "text": "plan"}
    assert [b["tool_use_id"] for b in out["messages"][1]["content"]] == ["a", "b"]
    assert out["messages"][1]["content"][1]["is_error"] is True


def test_what_build_session_context_gives_is_converted_whole_summaries_included() -> None:
    # Red team: build_session_context's messages hold compaction and branch summaries,
    # bash executions and custom messages, which every converter dropped silently: a
    # compacted session reached the model without the summary of its history.
    from sessiontree.integrations.messages import to_anthropic, to_openai_chat, to_openai_responses

    messages: list[dict[str, Any]] = [
        {"role": "compactionSummary", "summary": "EARLIER-WORK", "tokensBefore": 9, "timestamp": 1},
        {"role": "branchSummary", "summary": "OTHER-BRANCH", "fromId": "x", "timestamp": 2},
        {
            "role": "bashExecution",
            "command": "ls",
            "output": "BASH-OUT",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
            "timestamp": 3,
        },
        {
            "role": "custom",
            "customType": "note",
            "content": "CUSTOM-NOTE",
            "display": True,
            "timestamp": 4,
        },
        {"role": "user", "content": "question", "timestamp": 5},
    ]
    for convert in (to_anthropic, to_openai_chat, to_openai_responses):
        text = json.dumps(convert(messages))
        for marker in ("EARLIER-WORK", "OTHER-BRANCH", "BASH-OUT", "CUSTOM-NOTE", "question"):
            assert marker in text, (convert.__name__, marker)


def test_a_message_that_is_no_object_is_a_clear_type_error() -> None:
    from sessiontree.integrations.messages import to_anthropic, to_openai_chat, to_openai_responses

    for convert in (to_anthropic, to_openai_chat, to_openai_responses):
        with pytest.raises(TypeError, match="message"):
            convert(["hello"])  # type: ignore[list-item]
