"""`BedrockConverse`, the `bedrock-converse` dialect: its protocol and generation contracts, and the rules
`check` applies."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from ... import _json
from ...cassette import Interaction, Request
from ...framing import EVENT_STREAM, Framing, by_content_type
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Event
from ..generation import Prompt, as_object, made_id, turn_of, whole
from ..protocol import Checker, Violation, opening
from .codec import (
    EVENTS,
    EXCEPTION_STATUS,
    STOP_REASONS,
    BedrockErrors,
    ConverseEncoder,
    decode_indexed,
    decode_json,
    response_json,
)

__all__ = ["PATH", "BedrockConverse"]

_STREAM = "/converse-stream"

PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<method>converse-stream|converse)$")
"""A path the API answers: the model, then the call (`converse-stream`, or `converse` for no stream)."""

# The model a request for a prompt that names none goes to.
_DEFAULT_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


class BedrockConverse(BedrockErrors):
    """Amazon Bedrock's Converse API: `converse-stream` answered with AWS's event stream, `converse` with one
    JSON answer."""

    name = "bedrock-converse"
    answer = "a ConverseResponse with output.message"
    path = "/model/{modelId}/converse-stream"

    def serves_path(self, path: str) -> bool:
        """A path that names the model and the call: `…/model/{modelId}/converse-stream` or `…/converse`."""
        return PATH.search(path.rstrip("/")) is not None

    def recorded_model(self, request: Request) -> str | None:
        """The model a call names in its path (`/model/{modelId}/converse`), its escapes undone."""
        found = PATH.search(request.path.rstrip("/"))
        return unquote(found["model"]) if found is not None else None

    def recognises(self, interaction: Interaction) -> bool:
        response = interaction.response
        if by_content_type(response.header("content-type")) is EVENT_STREAM:
            first = next((b.event for b in EVENT_STREAM.blocks(response.body[:4096]) if b.event is not None), None)
            return first is not None and first.event == "messageStart"
        return any(sse.event == "messageStart" for sse, _ in opening(interaction, 1))

    def last_turn(self, body: Any) -> tuple[str, str] | None:
        """The last of the request's `messages`: its text, else a tool's result, else the tools it uses."""
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            return None
        said = _messages([messages[-1]])
        return turn_of(said[-1]) if said else None

    def is_terminal(self, event: ServerSentEvent) -> bool:
        return event.event in ("messageStop", "metadata") or event.event.endswith("Exception")

    def new_call_id(self, rng: random.Random) -> str:
        return made_id(rng, "tooluse_", 22)

    def encoder(self, answer: Any = None) -> Encoder:
        return ConverseEncoder(self)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def wants_stream(self, body: Any, path: str = "") -> bool:
        return path.rstrip("/").endswith(_STREAM)

    def stream_framing(self, request: Request) -> Framing:
        """AWS's event stream, every time: the API has no other."""
        return EVENT_STREAM

    def shapeless_path(self, path: str) -> str:
        return path.removesuffix(_STREAM) + "/converse" if path.endswith(_STREAM) else path

    def carries_usage(self, event: ServerSentEvent) -> bool:
        return event.event == "metadata"

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(events)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        started = False
        stopped: int | None = None  # where messageStop came
        ended: str | None = None  # metadata or an exception, once either has come
        block: tuple[int, str] | None = None  # the open block: its index and kind
        blocks = tool_blocks = 0
        for i, sse in enumerate(events):
            name = sse.event
            obj = c.json(i, sse)
            if obj is None:
                continue
            if not isinstance(obj, dict):
                c.add(i, f"{name} payload is not a JSON object")
                continue
            if ended is not None:
                c.add(i, f"{name} after {ended}")
                continue
            if name.endswith("Exception"):
                ended = name
                if name not in EXCEPTION_STATUS:
                    c.add(i, f"{name} is not one of the stream's exceptions ({', '.join(EXCEPTION_STATUS)})")
                if not isinstance(obj.get("message"), str):
                    c.add(i, f"{name} without a message")
                continue
            if name not in EVENTS:
                c.add(i, f"unknown event {name!r}")
                continue
            if not started and name != "messageStart":
                c.add(i, f"first event is {name}, not messageStart")
            elif started and name == "messageStart":
                c.add(i, "messageStart repeated")
            started = True
            index = whole(obj.get("contentBlockIndex"))
            if name.startswith("contentBlock") and stopped is not None:
                c.add(i, f"{name} after messageStop")
                continue
            if name == "messageStart" and obj.get("role") != "assistant":
                c.add(i, f"messageStart role is {obj.get('role')!r}, not 'assistant'")
            elif name == "contentBlockStart":
                start = obj.get("start")
                if index is None or not isinstance(start, dict) or not isinstance(start.get("toolUse"), dict):
                    c.add(i, "contentBlockStart without a contentBlockIndex and a start.toolUse")
                    continue
                block, blocks, tool_blocks = (
                    self._opens(c, i, index, "toolUse", block, blocks),
                    index + 1,
                    tool_blocks + 1,
                )
                tool = start["toolUse"]
                if not all(isinstance(tool.get(key), str) and tool[key] for key in ("toolUseId", "name")):
                    c.add(i, "start.toolUse without a toolUseId and a name")
            elif name == "contentBlockDelta":
                kind = _delta_kind(obj.get("delta"))
                if index is None or kind is None:
                    c.add(i, "contentBlockDelta without a contentBlockIndex and a delta of one kind")
                elif block is not None and block[0] == index:
                    if kind != block[1]:
                        c.add(i, f"a {kind} delta in a {block[1]} block")
                elif kind == "toolUse":
                    c.add(i, f"toolUse delta for block {index}, which no contentBlockStart opened")
                else:  # a text or reasoning block opens with its first delta
                    block, blocks = self._opens(c, i, index, kind, block, blocks), max(blocks, index + 1)
            elif name == "contentBlockStop":
                if block is None or block[0] != index:
                    c.add(i, f"contentBlockStop for block {index}, which is not open")
                else:
                    block = None
            elif name == "messageStop":
                if stopped is not None:
                    c.add(i, "messageStop repeated")
                stopped = i
                if block is not None:
                    c.add(i, f"messageStop while block {block[0]} is open")
                reason = obj.get("stopReason")
                if reason not in STOP_REASONS:
                    c.add(i, f"stopReason {reason!r} is not one of {', '.join(STOP_REASONS)}")
                elif reason == "tool_use" and not tool_blocks:
                    c.add(i, "stopReason is 'tool_use' but no toolUse block was streamed")
            elif name == "metadata":
                ended = name
                if stopped is None:
                    c.add(i, "metadata before messageStop")
                _check_metadata(c, i, obj)
        if ended is None and stopped is None:
            c.add(None, "no messageStop (or exception)")
        return c.violations + self.check_calls(events, request)

    @staticmethod
    def _opens(
        c: Checker, i: int, index: int, kind: str, block: tuple[int, str] | None, blocks: int
    ) -> tuple[int, str]:
        """A new block, after noting that one is still open or that its index is not the next."""
        if block is not None:
            c.add(i, f"block {index} starts while block {block[0]} is open")
        if index != blocks:
            c.add(i, f"block {index} starts where block {blocks} was next")
        return index, kind

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        system = body.get("system")
        texts = (
            [s["text"] for s in system if isinstance(s, dict) and isinstance(s.get("text"), str)]
            if isinstance(system, list)
            else []
        )
        messages: list[dict[str, Any]] = [{"role": "system", "content": "\n\n".join(texts)}] if texts else []
        messages += _messages(body.get("messages"))
        config = body.get("inferenceConfig")
        config = config if isinstance(config, dict) else {}
        stop = config.get("stopSequences")
        tools = body.get("toolConfig")
        tools = tools if isinstance(tools, dict) else {}
        return Prompt(
            model="",  # in the path: see request_prompt
            messages=messages,
            tools=_tools(tools.get("tools")),
            max_tokens=whole(config.get("maxTokens")),
            include_usage=True,
            temperature=_number(config.get("temperature")),
            top_p=_number(config.get("topP")),
            stop=[s for s in stop if isinstance(s, str) and s] if isinstance(stop, list) else [],
            tool_choice=_tool_choice(tools.get("toolChoice")),
        )

    def request_prompt(self, body: Any, path: str) -> Prompt:
        found = PATH.search(path.rstrip("/"))
        return replace(self.prompt(body), model=unquote(found["model"]) if found else "")

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        system = [m["content"] for m in prompt.messages if m["role"] in ("system", "developer") and m["content"]]
        body: dict[str, Any] = {
            "messages": _converse([m for m in prompt.messages if m["role"] not in ("system", "developer")])
        }
        if system:
            body["system"] = [{"text": "\n\n".join(system)}]
        config = {
            name: value
            for name, value in (
                ("maxTokens", prompt.max_tokens),
                ("temperature", prompt.temperature),
                ("topP", prompt.top_p),
                ("stopSequences", prompt.stop or None),
            )
            if value is not None
        }
        if config:
            body["inferenceConfig"] = config
        if prompt.tools and prompt.tool_choice != "none":  # the API has no choice of no tool: none are offered
            specs = [
                {
                    "toolSpec": {
                        "name": tool.get("name", ""),
                        **({"description": tool["description"]} if tool.get("description") else {}),
                        "inputSchema": {"json": tool.get("parameters") or {"type": "object", "properties": {}}},
                    }
                }
                for tool in prompt.tools
            ]
            tool_config: dict[str, Any] = {"tools": specs}
            choice = prompt.tool_choice
            if choice is not None:
                tool_config["toolChoice"] = (
                    {"auto": {}}
                    if choice == "auto"
                    else {"any": {}}
                    if choice == "required"
                    else {"tool": {"name": choice}}
                )
            body["toolConfig"] = tool_config
        return body

    def request_path(self, prompt: Prompt) -> str:
        return f"/model/{quote(prompt.model or _DEFAULT_MODEL, safe='')}{_STREAM}"


def _delta_kind(delta: Any) -> str | None:
    """The kind of a delta: `text`, `reasoning` or `toolUse`; None unless it has exactly one of them."""
    if not isinstance(delta, dict):
        return None
    kinds = [
        kind
        for key, kind in (("text", "text"), ("reasoningContent", "reasoning"), ("toolUse", "toolUse"))
        if key in delta
    ]
    return kinds[0] if len(kinds) == 1 and len(delta) == 1 else None


def _check_metadata(c: Checker, i: int, obj: dict[str, Any]) -> None:
    usage = obj.get("usage")
    counts = (
        [whole(usage.get(key)) for key in ("inputTokens", "outputTokens", "totalTokens")]
        if isinstance(usage, dict)
        else []
    )
    if not counts or None in counts:
        c.add(i, "metadata without usage.inputTokens, outputTokens and totalTokens")
    metrics = obj.get("metrics")
    if not isinstance(metrics, dict) or whole(metrics.get("latencyMs")) is None:
        c.add(i, "metadata without metrics.latencyMs")


# --- requests ---------------------------------------------------------------------------------------


def _messages(messages: Any) -> list[dict[str, Any]]:
    """The API's messages as chat messages: an assistant's `toolUse` blocks as its `tool_calls`, each
    `toolResult` as a tool message answering its call."""
    out: list[dict[str, Any]] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
        text = "".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
        if message.get("role") == "assistant":
            kept: dict[str, Any] = {"role": "assistant", "content": text}
            calls = [
                {
                    "id": str(b["toolUse"].get("toolUseId", "")),
                    "type": "function",
                    "function": {
                        "name": str(b["toolUse"].get("name", "")),
                        "arguments": _json.dumps(b["toolUse"].get("input") or {}),
                    },
                }
                for b in blocks
                if isinstance(b.get("toolUse"), dict)
            ]
            if calls:
                kept["tool_calls"] = calls
            out.append(kept)
            continue
        results = [b["toolResult"] for b in blocks if isinstance(b.get("toolResult"), dict)]
        for result in results:
            parts = [p for p in result.get("content") or [] if isinstance(p, dict)]
            said = "".join(
                p["text"] if isinstance(p.get("text"), str) else _json.dumps(p["json"]) if "json" in p else ""
                for p in parts
            )
            out.append({"role": "tool", "content": said, "tool_call_id": str(result.get("toolUseId", ""))})
        if text or not results:
            out.append({"role": "user", "content": text})
    return out


def _converse(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the API's (see `_messages`); a run of tool messages is one user turn of results."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = str(message.get("content") or "")
        if message["role"] == "tool":
            answer = as_object(content)
            part = {"json": answer} if answer is not None and content.strip() else {"text": content}
            result = {"toolResult": {"toolUseId": str(message.get("tool_call_id") or ""), "content": [part]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and all("toolResult" in b for b in last["content"]):
                last["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        elif message["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"text": content}] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                given = as_object(str(function.get("arguments") or ""))
                blocks.append(
                    {
                        "toolUse": {
                            "toolUseId": str(call.get("id") or ""),
                            "name": str(function.get("name") or ""),
                            "input": given or {},
                        }
                    }
                )
            out.append({"role": "assistant", "content": blocks or [{"text": ""}]})
        else:
            out.append({"role": "user", "content": [{"text": content}]})
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    """The tool specs: name, description and the JSON schema of the input."""
    out = []
    for tool in tools if isinstance(tools, list) else []:
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if not isinstance(spec, dict):
            continue
        kept: dict[str, Any] = {"name": str(spec.get("name", ""))}
        if isinstance(spec.get("description"), str):
            kept["description"] = spec["description"]
        schema = spec.get("inputSchema")
        if isinstance(schema, dict) and "json" in schema:
            kept["parameters"] = schema["json"]
        out.append(kept)
    return out


def _tool_choice(choice: Any) -> str | None:
    if not isinstance(choice, dict):
        return None
    if "auto" in choice:
        return "auto"
    if "any" in choice:
        return "required"
    tool = choice.get("tool")
    return str(tool["name"]) if isinstance(tool, dict) and isinstance(tool.get("name"), str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
