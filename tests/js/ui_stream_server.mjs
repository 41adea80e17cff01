// An AI SDK chat route, as an application writes one: `streamText` over a model, answered with
// `toUIMessageStreamResponse()` (the UI message stream, v1). The model is the `ai` package's own mock, scripted to
// call get_weather, whose result the SDK streams, then to answer. It made tests/fixtures/agent-ui/ai-sdk-ui.toml,
// recorded with `sse-tape record`: `node ui_stream_server.mjs PORT` serves POST /api/chat until it is killed.
import * as http from "node:http";
import { Readable } from "node:stream";

import { isStepCount, jsonSchema, simulateReadableStream, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";

const usage = { inputTokens: { total: 12, noCache: 12 }, outputTokens: { total: 9, text: 9 } };
const steps = [
  [
    { type: "stream-start", warnings: [] },
    { type: "tool-input-start", id: "call-1", toolName: "get_weather" },
    { type: "tool-input-delta", id: "call-1", delta: '{"city": ' },
    { type: "tool-input-delta", id: "call-1", delta: '"Tokyo"}' },
    { type: "tool-input-end", id: "call-1" },
    { type: "tool-call", toolCallId: "call-1", toolName: "get_weather", input: '{"city": "Tokyo"}' },
    { type: "finish", finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage },
  ],
  [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "text-1" },
    { type: "text-delta", id: "text-1", delta: "It's 18°C" },
    { type: "text-delta", id: "text-1", delta: " with light rain" },
    { type: "text-delta", id: "text-1", delta: " in Tokyo." },
    { type: "text-end", id: "text-1" },
    { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
  ],
];

http
  .createServer(async (request, response) => {
    for await (const _ of request);
    let step = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => ({ stream: simulateReadableStream({ chunks: steps[step++ % 2], chunkDelayInMs: 20 }) }),
    });
    const getWeather = tool({
      description: "Get weather for a city",
      inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
      execute: async ({ city }) => ({ city, temperature_c: 18, conditions: "light rain" }),
    });
    const result = streamText({ model, prompt: "What's the weather in Tokyo?", tools: { get_weather: getWeather }, stopWhen: isStepCount(2) });
    const answer = result.toUIMessageStreamResponse({ generateMessageId: () => "msg-1" });
    response.writeHead(answer.status, Object.fromEntries(answer.headers));
    Readable.fromWeb(answer.body).pipe(response);
  })
  .listen(Number(process.argv[2]), "127.0.0.1");
